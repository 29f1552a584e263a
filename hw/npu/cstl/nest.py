"""The loop counters of the CSTL's walks, with each level's "at its last index" flag in a
register.

A walk (:class:`npu.cstl.walk.RegionWalk`, :class:`npu.cstl.poolwalk.PoolWalk`,
:class:`npu.cstl.eltwalk.EltWalk`) steps a loop nest one innermost iteration per cycle:
the innermost level whose index is not at its last value steps, and the levels inside
it restart at 0. Whether a level is at its last value (``index + 1 >= limit``) is an
addition and a comparison; computed from the index in the cycle of the step, it lay
between the index registers and the address registers the step selects. Here each level
counts down what is left of it beside its index, and the flag is a register, set from
``left == 1`` as the level steps (the comparison runs beside the step, not before it) and
from the limit kept at start as the level restarts.

Which level steps next (the innermost one not at its last index) is a register too, one
bit per level: worked out from the flags in the cycle of the step, the flags' priority
chain lay in front of the enables of every index and address register. It is set as a
level steps, from what the flags will be: the levels inside the stepping one restart, so
the next to step is the innermost level whose limit is above 1 (a register per task) if
it lies inside; else the stepping level itself unless it reaches its last index; else
the innermost level outside it that is not at its last index.
"""

from __future__ import annotations

from amaranth import Cat, Mux, Signal, Value

__all__ = ["LoopNest"]


class LoopNest:
    """Counters of an ``n``-level loop nest, outermost first, for a walk's ``elaborate``.

    Parameters
    ----------
    n : int
        Levels.
    width : int
        Bits of an index (limits are below ``2 ** width``).
    indices : bool
        Keep the index of each level (a walk that only needs the flags leaves them out).

    Attributes
    ----------
    idx : list of Signal(width), or None
        The current index of each level (with ``indices``).
    last : list of Signal
        Registers: the level's index is its last (``idx + 1 >= limit``).
    """

    def __init__(self, n, width, *, indices=True):
        self.n = n
        self.idx = [Signal(width, name=f"i{j}") for j in range(n)] if indices else None
        self._left = [Signal(width, name=f"left{j}") for j in range(n)]
        self.last = [Signal(name=f"last{j}") for j in range(n)]
        # what a level restarts with (level 0 never restarts): limit - 1, limit <= 1
        self._top = [None] + [Signal(width, name=f"top{j}") for j in range(1, n)]
        self._one = [None] + [Signal(name=f"one{j}") for j in range(1, n)]
        # the level that steps next (one-hot; none at the walk's last iteration)
        self._sel = [Signal(name=f"sel{j}") for j in range(n)]
        # per task: level j is the innermost with a limit above 1 (what steps after a
        # restart of the levels inside a stepping one); every level inside j has limit <= 1
        self._inner = [Signal(name=f"inner{j}") for j in range(n)]
        self._ones_in = [Signal(name=f"ones_in{j}") for j in range(n)]

    def load(self, m, limits):
        """Start the nest at index 0 of every level with ``limits`` (values, outermost
        first; each at least 1 for a walk that steps), at the end of this cycle; call
        inside the condition of the start."""
        one = [Value.cast(lim) <= 1 for lim in limits]
        for j, lim in enumerate(limits):
            if self.idx is not None:
                m.d.sync += self.idx[j].eq(0)
            m.d.sync += [self._left[j].eq(lim - 1), self.last[j].eq(one[j])]
            if j:
                m.d.sync += [self._top[j].eq(lim - 1), self._one[j].eq(one[j])]
            ones_in = _all(one[j + 1:])
            m.d.sync += [self._ones_in[j].eq(ones_in), self._inner[j].eq(~one[j] & ones_in),
                         self._sel[j].eq(~one[j] & ones_in)]

    def stepping(self, j):
        """The condition under which level ``j`` steps (every level inside it is at its
        last index, level ``j`` is not): a register."""
        return self._sel[j]

    def step(self, m, j):
        """Step level ``j`` and restart the levels inside it, at the end of this cycle;
        call inside ``stepping(j)`` (and whatever else makes the walk move)."""
        reaches_last = self._left[j] == 1
        m.d.sync += [self._left[j].eq(self._left[j] - 1), self.last[j].eq(reaches_last)]
        # the next level to step (see the module): inside j, at j, or outside j
        outward = reaches_last & self._ones_in[j]
        for i in range(self.n):
            if i > j:
                nxt = self._inner[i]
            elif i == j:
                nxt = ~reaches_last & self._ones_in[j]
            else:
                nxt = outward & ~self.last[i] & _all(self.last[i + 1:j])
            m.d.sync += self._sel[i].eq(nxt)
        for k in range(j + 1, self.n):
            m.d.sync += [self._left[k].eq(self._top[k]), self.last[k].eq(self._one[k])]
        if self.idx is not None:
            m.d.sync += self.idx[j].eq(self.idx[j] + 1)
            m.d.sync += [self.idx[k].eq(0) for k in range(j + 1, self.n)]

    def advance(self, m, regs, nexts):
        """Registers kept per level (a walk's addresses) move with a step: ``regs[k]``
        takes ``nexts[j]`` of the stepping level ``j`` when ``j <= k`` (the level's next
        value, which the levels inside it restart from), and holds otherwise. Call inside
        the walk's step condition.

        The selection is an AND-OR of the one-hot ``stepping`` registers, not a chain of
        2:1 selections in level order (which a sequence of ``m.If(stepping(j))`` gives:
        six levels deep in front of the innermost level's registers).

        Parameters
        ----------
        m : amaranth.Module
        regs : list of Signal
            One register per level, outermost first (up to ``n``).
        nexts : list of Value
            The next value of each level ``j`` when it steps (as many as ``regs``).
        """
        if len(nexts) != len(regs) or len(regs) > self.n:
            raise ValueError(f"advance wants one next value per register and at most "
                             f"{self.n} levels, not {len(regs)} registers and "
                             f"{len(nexts)} values")
        for k, reg in enumerate(regs):
            hit, value = 0, 0
            for j in range(k + 1):
                hit = hit | self._sel[j]
                value = value | Mux(self._sel[j], Value.cast(nexts[j])[:len(reg)], 0)
            with m.If(hit):
                m.d.sync += reg.eq(value)

    def all_last(self):
        """Every level is at its last index: the walk's last iteration."""
        return Cat(*self.last).all()


def _all(bits):
    """AND of ``bits`` (1 for none)."""
    out = 1
    for b in bits:
        out = b & out
    return out
