"""The CSTL's binary eltwise AGU: per chunk of the output a run of each input.

A binary eltwise (:func:`npu.cstl.regs.task_layout` with ``elt`` set) walks its output on
the four levels; the innermost level goes in *chunks* of up to ``lanes`` elements when
``task.run`` (the output's innermost stride is 1 and each input's 0 or 1), else one
element a chunk. Per chunk the walk issues two runs, one after the other on the one
reader: the chunk's bytes of ``x`` (OP0), then those of ``b`` (OP1); an input whose
innermost stride is 0 (it broadcasts along the innermost level) is a run of one byte,
which the datapath spreads over the chunk's lanes. Every run is at most one L1 word, so
the reader hands out one vector per run.

What a run's tag carries (:func:`npu.nmu.agu.tag_layout`): ``kind`` bit 0: 0 for ``x``,
1 for ``b``; ``first``: the run is one byte to spread; ``lane``: the chunk's elements;
``yaddr``: the chunk's output byte address; ``last``: the task's last run.

A chunk's two runs take at least two cycles, so the walk works out what the next step
loads (each level's next addresses, the next chunk's length) a cycle ahead, into
registers: a step only selects them.

The Python model is :func:`elt_runs`.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from npu.cstl.nest import LoopNest
from npu.cstl.regs import DIM_BITS, LEVELS_WALKED, task_layout
from npu.nmu.agu import run_layout

__all__ = ["EltWalk", "elt_runs"]

MASK = 0xFFFFFFFF


def elt_runs(task, lanes):
    """The runs of a decoded eltwise (:class:`npu.cstl.regs.CstlTask`), in order:
    ``(operand 0 or 1, address, length, spread, chunk elements, y_addr)``."""
    d0, d1, d2, d3 = task.dims
    step = lanes if task.run else 1
    out = []
    for i in range(d0):
        for j in range(d1):
            for k in range(d2):
                for c0 in range(0, d3, step):
                    n = min(step, d3 - c0)
                    idx = (i, j, k, c0)
                    ya = task.y_addr + sum(a * s for a, s in zip(idx, task.ys, strict=True))
                    for which, base, strides in ((0, task.x_addr, task.xs),
                                                 (1, task.b_addr, task.bs)):
                        at = base + sum(a * s for a, s in zip(idx, strides, strict=True))
                        spread = task.run and strides[3] == 0
                        out.append((which, at & MASK, 1 if spread else n, spread, n,
                                    ya & MASK))
    return out


class EltWalk(wiring.Component):
    """Runs of a binary eltwise, two per chunk (see the module).

    Parameters
    ----------
    lanes : int
        Bytes per L1 word: the longest chunk.

    Attributes
    ----------
    start : stream of :func:`npu.cstl.regs.task_layout`, in
        Taken when idle; the task must have no dimension 0.
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
        n = LEVELS_WALKED
        task = Signal(task_layout())
        act = Signal()
        phase = Signal()            # 0: the run of x, 1: the run of b
        loaded = Signal()           # the task register holds a new task: load the nest
        nest = LoopNest(n, DIM_BITS, indices=False)
        xb = [Signal(32, name=f"xb{j}") for j in range(n)]
        bb = [Signal(32, name=f"bb{j}") for j in range(n)]
        yb = [Signal(32, name=f"yb{j}") for j in range(n)]
        cleft = Signal(DIM_BITS)

        def step(strides, j):
            return strides[j] if j < n - 1 else Mux(task.run, strides[j] << lw, strides[j])

        def chunk(left, run):
            """Elements of the chunk with ``left`` of the innermost level left."""
            return Mux(run, Mux(left < L, left, L), 1)

        # a step (on the take of a chunk's run of b) is at least two cycles after the last
        # step or the start: the run of x comes between. So what a step loads is worked
        # out a cycle ahead, into registers that follow the current position in every
        # cycle: each level's next addresses, the innermost level's next count and what
        # is left of it. A step only selects them (no adder, no comparison behind it)
        ahead = []      # (address registers, their next values), per operand
        for name, regs, strides in (("xb", xb, task.xs), ("bb", bb, task.bs),
                                    ("yb", yb, task.ys)):
            nxt = [Signal(32, name=f"{name}n{j}") for j in range(n)]
            m.d.sync += [nxt[j].eq(regs[j] + step(strides, j)) for j in range(n)]
            ahead.append((regs, nxt))
        cleft_next = Signal(DIM_BITS)       # cleft - L: after the innermost level steps
        count_next = Signal(range(L + 1))   # the chunk after the innermost level steps
        count_first = Signal(range(L + 1))  # the chunk after an outer level steps
        m.d.sync += [cleft_next.eq(cleft - L),
                     count_next.eq(Mux(task.run, Mux(cleft < 2 * L, cleft - L, L), 1)),
                     count_first.eq(chunk(task.dims[-1], task.run))]

        count = Signal(range(L + 1))
        spread_x, spread_b = Signal(), Signal()   # an input broadcast along the innermost
        spread = Mux(phase, spread_b, spread_x)

        c = self.cmd.payload
        m.d.comb += [
            self.busy.eq(act),
            self.start.ready.eq(~act),
            self.cmd.valid.eq(act),
            c.addr.eq(Mux(phase, bb[-1], xb[-1])),
            c.length.eq(Mux(spread, 1, count)),
            c.tag.kind.eq(phase),
            c.tag.first.eq(spread),
            c.tag.lane.eq(count),
            c.tag.yaddr.eq(yb[-1]),
            c.tag.last.eq(phase & nest.all_last()),
        ]
        # idle, the task's registers follow the start's payload in every cycle, so that
        # only ``act`` and ``loaded`` wait for the start's valid (decided late, by the
        # unit's checks), not the enables of the address registers
        with m.If(self.start.ready):
            p = self.start.payload
            m.d.sync += [task.eq(p), phase.eq(0), cleft.eq(p.dims[-1]),
                         count.eq(chunk(p.dims[-1], p.run)),
                         spread_x.eq(p.run & (p.xs[-1] == 0)),
                         spread_b.eq(p.run & (p.bs[-1] == 0))]
            m.d.sync += [s.eq(p.x_addr) for s in xb] + [s.eq(p.b_addr) for s in bb]
            m.d.sync += [s.eq(p.y_addr) for s in yb]
            with m.If(self.start.valid):
                m.d.sync += [act.eq(1), loaded.eq(1)]

        # the loop nest from the task register (not the start's payload) in the cycle after
        # the start: its flags are first looked at when the first run of b is taken, a
        # cycle later at the earliest
        with m.If(loaded):
            m.d.sync += loaded.eq(0)
            chunks = Mux(task.run, (task.dims[-1] + L - 1) >> lw, task.dims[-1])
            nest.load(m, [task.dims[j] for j in range(n - 1)] + [chunks])

        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += phase.eq(~phase)
            with m.If(c.tag.last):
                m.d.sync += act.eq(0)
            with m.If(phase):
                for j in reversed(range(n)):
                    with m.If(nest.stepping(j)):
                        nest.step(m, j)
                        inner = j == n - 1
                        m.d.sync += [cleft.eq(cleft_next if inner else task.dims[-1]),
                                     count.eq(count_next if inner else count_first)]
                for regs, nxt in ahead:
                    nest.advance(m, regs, nxt)
        return m
