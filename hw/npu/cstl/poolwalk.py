"""The CSTL's pooling AGU: the taps of every pooling window -> runs of L1 bytes.

A pool (:func:`npu.cstl.regs.task_layout` with ``pool`` set) walks its output
``(N, OH, OW, C)`` and, for every output position, the channels in *chunks* of at most
``lanes`` elements (one L1 word of result: chunks of ``lanes`` channels when both channel
strides are 1, ``task.run``; else one channel a chunk) and per chunk the ``kh x kw`` taps
of its window, row by row. A tap is one run of the chunk's input bytes at row
``oh * sh - top + u`` and column ``ow * sw - left + v``; a tap outside the input is a *pad*
run (no L1 read: the reader fills it with its ``pad_byte``). Every run is at most one L1
word, so the reader hands out exactly one vector per run.

What a run's tag carries (:func:`npu.nmu.agu.tag_layout`, fields used as the CSTL reads
them): ``first``: the window's first tap; ``kind`` bit 0: its last tap; ``row`` bit 0: the
tap lies inside the input (an average counts it); ``yaddr``: the output byte address of
the chunk; ``last``: the task's last run.

Loop levels, outermost first: n, oh, ow, chunk, u, v; the input address of each level is
kept (where the current index of that level started), so a step is one addition, as in
:class:`npu.cstl.walk.RegionWalk`. The steps ``sh * xs_h`` and ``sw * xs_w`` and the
window origin ``x - top * xs_h - left * xs_w`` are computed at start by one multiplier in
six cycles (the multiplier has a register on each side). The Python model is
:func:`pool_runs`.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from npu.cstl.nest import LoopNest
from npu.cstl.regs import DIM_BITS, task_layout
from npu.nmu.agu import run_layout

__all__ = ["PoolWalk", "pool_runs"]

MASK = 0xFFFFFFFF
LEVELS = 6   # n, oh, ow, chunk, u, v


def pool_runs(task, lanes):
    """The runs of a decoded pool (:class:`npu.cstl.regs.CstlTask`), in order:
    ``(x_addr, length, pad, first, last_tap, y_addr)`` (addresses modulo 2**32; a pad run's
    address is where the tap would be)."""
    n_, oh_, ow_, c_ = task.dims
    xn, xh, xw, xc = task.xs
    yn, yh, yw, yc = task.ys
    step = lanes if task.run else 1
    out = []
    for n in range(n_):
        for i in range(oh_):
            for j in range(ow_):
                for c0 in range(0, c_, step):
                    length = min(step, c_ - c0)
                    ya = task.y_addr + n * yn + i * yh + j * yw + c0 * yc
                    for u in range(task.kh):
                        for v in range(task.kw):
                            row, col = i * task.sh - task.top + u, j * task.sw - task.left + v
                            xa = task.x_addr + n * xn + row * xh + col * xw + c0 * xc
                            pad = not (0 <= row < task.ih and 0 <= col < task.iw)
                            out.append((xa & MASK, length, pad, u == v == 0,
                                        u == task.kh - 1 and v == task.kw - 1, ya & MASK))
    return out


class PoolWalk(wiring.Component):
    """Runs of a pool's windows, one per cycle (see the module).

    Parameters
    ----------
    lanes : int
        Bytes per L1 word: the longest chunk.

    Attributes
    ----------
    start : stream of :func:`npu.cstl.regs.task_layout`, in
        Taken when idle; the task must have no dimension 0 (the CSTL ends such a task
        without a walk).
    cmd : stream of :func:`npu.nmu.agu.run_layout`, out
    busy : Signal, out
    """

    def __init__(self, *, lanes):
        self.lanes = lanes
        super().__init__({
            "start": In(stream.Signature(task_layout())),
            "cmd": Out(stream.Signature(run_layout())),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        L = self.lanes
        lw = L.bit_length() - 1
        task = Signal(task_layout())
        act = Signal()
        setup = Signal(3)          # 1..6: the setup products, one per cycle (two behind)
        n = LEVELS
        nest = LoopNest(n, DIM_BITS)
        idx = nest.idx
        xb = [Signal(32, name=f"xb{j}") for j in range(n)]
        yb = [Signal(32, name=f"yb{j}") for j in range(4)]
        step_h, step_w, org = Signal(32), Signal(32), Signal(32)
        # window origin row / column of the current output position (may be negative)
        row0, col0 = Signal(signed(DIM_BITS + 2)), Signal(signed(DIM_BITS + 2))
        cleft = Signal(DIM_BITS)   # channels from the current chunk on

        xstep = [task.xs[0], step_h, step_w,
                 Mux(task.run, task.xs[3] << lw, task.xs[3]), task.xs[1], task.xs[2]]
        ystep = [task.ys[0], task.ys[1], task.ys[2],
                 Mux(task.run, task.ys[3] << lw, task.ys[3])]
        row, col = row0 + idx[4], col0 + idx[5]
        inside = (row >= 0) & (row < task.ih) & (col >= 0) & (col < task.iw)

        c = self.cmd.payload
        m.d.comb += [
            self.busy.eq(act | (setup != 0)),
            self.start.ready.eq(~act & (setup == 0)),
            self.cmd.valid.eq(act),
            c.addr.eq(xb[-1]),
            c.length.eq(Mux(task.run, Mux(cleft < L, cleft, L), 1)),
            c.pad.eq(~inside),
            c.tag.yaddr.eq(yb[-1]),
            c.tag.first.eq((idx[4] == 0) & (idx[5] == 0)),
            c.tag.kind.eq(nest.last[4] & nest.last[5]),
            c.tag.row.eq(inside),
            c.tag.last.eq(nest.all_last()),
        ]

        # setup: step_h, step_w, then the origin, with one multiplier between registers
        # (its operands chosen a cycle before, its product used a cycle after): cycle k
        # chooses the operands of product k, cycle k + 1 multiplies, cycle k + 2 uses it
        mul_a, mul_b = Signal(DIM_BITS), Signal(32)
        prod = Signal(32)
        m.d.sync += prod.eq(mul_a * mul_b)
        with m.Switch(setup):
            with m.Case(1):
                m.d.sync += [mul_a.eq(task.sh), mul_b.eq(task.xs[1])]
                # the loop nest from the task register (not the start's payload): the walk
                # steps only after the setup
                chunks = Mux(task.run, (task.dims[3] + L - 1) >> lw, task.dims[3])
                nest.load(m, [task.dims[0], task.dims[1], task.dims[2], chunks,
                              task.kh, task.kw])
            with m.Case(2):
                m.d.sync += [mul_a.eq(task.sw), mul_b.eq(task.xs[2])]
            with m.Case(3):
                m.d.sync += [mul_a.eq(task.top), mul_b.eq(task.xs[1]), step_h.eq(prod)]
            with m.Case(4):
                m.d.sync += [mul_a.eq(task.left), mul_b.eq(task.xs[2]), step_w.eq(prod)]
            with m.Case(5):
                m.d.sync += org.eq(task.x_addr - prod)
            with m.Case(6):
                m.d.sync += act.eq(1)
                m.d.sync += [s.eq(org - prod) for s in xb]
        with m.If(setup != 0):
            m.d.sync += setup.eq(Mux(setup == 6, 0, setup + 1))
        # idle, the task's registers follow the start's payload in every cycle, so that
        # only ``setup`` waits for the start's valid (decided late, by the unit's checks)
        with m.If(self.start.ready):
            p = self.start.payload
            m.d.sync += [task.eq(p), row0.eq(-p.top), col0.eq(-p.left), cleft.eq(p.dims[3])]
            m.d.sync += [s.eq(p.y_addr) for s in yb]
            with m.If(self.start.valid):
                m.d.sync += setup.eq(1)

        with m.If(self.cmd.valid & self.cmd.ready):
            # the innermost level that does not wrap steps; the ones inside it restart
            with m.If(c.tag.last):
                m.d.sync += act.eq(0)
            nest.advance(m, xb, [xb[j] + xstep[j] for j in range(n)])
            nest.advance(m, yb, [yb[j] + ystep[j] for j in range(4)])
            for j in reversed(range(n)):
                with m.If(nest.stepping(j)):
                    nest.step(m, j)
                    if j == 0:
                        m.d.sync += [row0.eq(-task.top), col0.eq(-task.left),
                                     cleft.eq(task.dims[3])]
                    elif j == 1:
                        m.d.sync += [row0.eq(row0 + task.sh), col0.eq(-task.left),
                                     cleft.eq(task.dims[3])]
                    elif j == 2:
                        m.d.sync += [col0.eq(col0 + task.sw), cleft.eq(task.dims[3])]
                    elif j == 3:
                        m.d.sync += cleft.eq(cleft - L)
        return m
