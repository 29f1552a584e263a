"""The CSTL's operand AGU: a strided region of up to four levels -> runs of L1 bytes.

A task (:func:`npu.cstl.regs.task_layout`) walks ``dims[0] x .. x dims[3]`` elements,
outermost first; element ``(i0, i1, i2, i3)`` is read at ``x_addr + sum(ik * xs[k])`` and
written at ``y_addr + sum(ik * ys[k])`` (byte strides). When both operands are contiguous
in the innermost level (``run``) it is one run of ``dims[3]`` input elements, else every
element is a run of its own; an input element is ``2 ** in_shift`` bytes.
:class:`RegionWalk` issues one run per cycle as :func:`npu.nmu.agu.run_layout` commands
for :class:`npu.nmu.agu.RunReader`, the output address of the run in ``tag.yaddr`` and the
task's last run marked by ``tag.last``. For a last-axis reduction the innermost level is a
row: ``tag.first`` marks its first run, ``tag.kind`` bit 0 its last, and ``tag.row`` holds
the index of the run's first element in the row (0 when the row is one run).

Addresses are kept per level (the address where the current index of that level
started), so a step is one addition per level and no multiplication; whether a level is
at its last index is a register (:class:`npu.cstl.nest.LoopNest`). The Python model is
:func:`runs`.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from npu.cstl.nest import LoopNest
from npu.cstl.regs import LEVELS_WALKED, task_layout
from npu.nmu.agu import run_layout

__all__ = ["RegionWalk", "runs"]

MASK = 0xFFFFFFFF


def runs(task):
    """The runs of a decoded task (:class:`npu.cstl.regs.CstlTask`), in order:
    ``(x_addr, length in bytes, y_addr)`` (addresses modulo 2**32)."""
    dims = list(task.dims)
    length = (dims[-1] if task.run else 1) << task.in_shift
    if task.run:
        dims[-1] = 1
    out = []

    def walk(level, xa, ya):
        if level == LEVELS_WALKED:
            out.append((xa & MASK, length, ya & MASK))
            return
        for i in range(dims[level]):
            walk(level + 1, xa + i * task.xs[level], ya + i * task.ys[level])

    if all(task.dims):
        walk(0, task.x_addr, task.y_addr)
    return out


class RegionWalk(wiring.Component):
    """Runs of a task's region, one per cycle.

    Attributes
    ----------
    start : stream of :func:`npu.cstl.regs.task_layout`, in
        Taken when idle; a task with a dimension 0 issues nothing.
    cmd : stream of :func:`npu.nmu.agu.run_layout`, out
        The runs (``tag.yaddr``: the run's output address, ``tag.last``: the last run).
    busy : Signal, out
    """

    def __init__(self):
        super().__init__({
            "start": In(stream.Signature(task_layout())),
            "cmd": Out(stream.Signature(run_layout())),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = LEVELS_WALKED
        task = Signal(task_layout())
        act = Signal()
        # an inverted copy of ``act`` for the idle loads (the start's ready: the enables of
        # the task's, the nest's and the eight address registers, ~500 bits): ``act``
        # itself then drives the command's valid into the unit's FIFO alone, not a net
        # spread over the address registers (``walk.busy`` started 561 paths above 10 ns
        # in the estimate of the copy and NMU cuts, 300 of them into the FIFO's entries,
        # ``docs/fpga.md``). Inverted, yosys does not merge it with ``act``.
        idle = Signal(init=1)
        nest = LoopNest(n, 16)
        idx = nest.idx
        xb = [Signal(32, name=f"xb{j}") for j in range(n)]
        yb = [Signal(32, name=f"yb{j}") for j in range(n)]

        m.d.comb += [
            self.busy.eq(act),
            self.start.ready.eq(idle),
            self.cmd.valid.eq(act),
            self.cmd.payload.addr.eq(xb[-1]),
            self.cmd.payload.length.eq(Mux(task.run, task.dims[-1], 1) << task.in_shift),
            self.cmd.payload.tag.yaddr.eq(yb[-1]),
            self.cmd.payload.tag.last.eq(nest.all_last()),
            self.cmd.payload.tag.first.eq(idx[-1] == 0),
            self.cmd.payload.tag.kind.eq(nest.last[-1]),
            self.cmd.payload.tag.row.eq(idx[-1]),
        ]
        # idle, the task's registers and the nest follow the start's payload in every
        # cycle, so that only ``act`` waits for the start's valid (decided late, by the
        # unit's checks), not the enables of the address registers
        with m.If(self.start.ready):
            p = self.start.payload
            empty = 0
            for j in range(n):
                empty = empty | (p.dims[j] == 0)
            m.d.sync += task.eq(p)
            nest.load(m, [p.dims[j] for j in range(n - 1)] + [Mux(p.run, 1, p.dims[-1])])
            m.d.sync += [s.eq(p.x_addr) for s in xb] + [s.eq(p.y_addr) for s in yb]
            with m.If(self.start.valid):
                m.d.sync += [act.eq(~empty), idle.eq(empty)]

        with m.If(self.cmd.valid & self.cmd.ready):
            # the innermost level that does not wrap steps; the ones inside it restart
            with m.If(self.cmd.payload.tag.last):
                m.d.sync += [act.eq(0), idle.eq(1)]
            for j in reversed(range(n)):
                with m.If(nest.stepping(j)):
                    nest.step(m, j)
            nest.advance(m, xb, [xb[j] + task.xs[j] for j in range(n)])
            nest.advance(m, yb, [yb[j] + task.ys[j] for j in range(n)])
        return m
