"""LoopNest (the CSTL walks' counters) against itertools.product, in the Amaranth
simulator: every index tuple in order, the ``last`` flags as ``index + 1 == limit``, the
level to step next as the innermost one not at its last index, and a second start with
other limits restarting everything."""

import itertools
import random

import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from npu.cstl.nest import LoopNest

#: per-level strides of the harness's address registers: a level's digit of the address
STRIDES = [10 ** (5 - j) for j in range(6)]


def _harness(n, width, indices):
    """The nest, and per level an address register moved by ``advance`` (level ``k``'s:
    the sum of ``idx[j] * STRIDES[j]`` over the levels ``j <= k``)."""
    m = Module()
    nest = LoopNest(n, width, indices=indices)
    start = Signal()
    move = Signal()
    limits = [Signal(width, name=f"lim{j}") for j in range(n)]
    nest.addrs = [Signal(32, name=f"addr{j}") for j in range(n)]
    with m.If(start):
        nest.load(m, limits)
        m.d.sync += [a.eq(0) for a in nest.addrs]
    with m.Elif(move):
        for j in reversed(range(n)):
            with m.If(nest.stepping(j)):
                nest.step(m, j)
        nest.advance(m, nest.addrs, [a + STRIDES[j] for j, a in enumerate(nest.addrs)])
    return m, nest, start, move, limits


@pytest.mark.parametrize(("n", "indices"), [(4, True), (4, False), (6, True)])
def test_loop_nest_walks_every_index_in_order(n, indices):
    m, nest, start, move, limits = _harness(n, 16, indices)
    rng = random.Random(5 + indices + n)
    shapes = [(1, 1, 1, 1), (3, 1, 2, 1), (1, 4, 1, 3), (2, 2, 2, 2)] if n == 4 else \
        [(1,) * 6, (2, 1, 1, 1, 1, 1), (1, 1, 1, 1, 1, 3), (2, 1, 3, 1, 1, 2)]
    shapes += [tuple(rng.choice([1, 1, 2, 3]) for _ in range(n)) for _ in range(6)]

    async def bench(ctx):
        for shape in shapes:
            for j, lim in enumerate(shape):
                ctx.set(limits[j], lim)
            ctx.set(start, 1)
            await ctx.tick()
            ctx.set(start, 0)
            # junk limits while walking: the nest keeps what it loaded
            for j in range(n):
                ctx.set(limits[j], rng.randrange(1, 9))
            want = list(itertools.product(*[range(lim) for lim in shape]))
            for k, tup in enumerate(want):
                flags = tuple(ctx.get(f) for f in nest.last)
                want_flags = tuple(int(i + 1 == lim) for i, lim in zip(tup, shape, strict=True))
                assert flags == want_flags, (shape, tup, flags)
                assert ctx.get(nest.all_last()) == (k == len(want) - 1)
                # the registered choice of the level to step: the innermost not at its last
                # index, as worked out from the flags (none at the last iteration)
                movable = [j for j in range(n) if not want_flags[j]]
                sel = tuple(ctx.get(nest.stepping(j)) for j in range(n))
                assert sel == tuple(int(bool(movable) and j == movable[-1]) for j in range(n)), \
                    (shape, tup, sel)
                if indices:
                    assert tuple(ctx.get(i) for i in nest.idx) == tup, shape
                addrs = tuple(ctx.get(a) for a in nest.addrs)
                assert addrs == tuple(sum(i * st for i, st in zip(tup[:k + 1], STRIDES,
                                                                    strict=False))
                                      for k in range(n)), (shape, tup, addrs)
                # stalls: the nest moves only when told to
                ctx.set(move, rng.random() < 0.7)
                while not ctx.get(move):
                    await ctx.tick()
                    ctx.set(move, rng.random() < 0.7)
                await ctx.tick()
            ctx.set(move, 0)

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_loop_nest_moves_nothing_before_its_first_load():
    """Out of reset no level is selected (``stepping`` low): a move before any start
    leaves the indices and the address registers at 0."""
    m, nest, _start, move, limits = _harness(4, 8, True)

    async def bench(ctx):
        for j in range(4):
            ctx.set(limits[j], 3)
        ctx.set(move, 1)
        for _ in range(5):
            await ctx.tick()
            assert [ctx.get(nest.stepping(j)) for j in range(4)] == [0] * 4
            assert [ctx.get(i) for i in nest.idx] == [0] * 4
            assert [ctx.get(a) for a in nest.addrs] == [0] * 4

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_advance_wants_one_value_per_register():
    nest = LoopNest(3, 8)
    regs = [Signal(8) for _ in range(3)]
    with pytest.raises(ValueError, match="one next value per register and at most 3 levels, "
                                         "not 3 registers and 2 values"):
        nest.advance(Module(), regs, regs[:2])
    with pytest.raises(ValueError, match="not 4 registers"):
        nest.advance(Module(), [*regs, Signal(8)], [*regs, Signal(8)])


def test_loop_nest_without_indices_has_none():
    assert LoopNest(3, 8, indices=False).idx is None
    assert len(LoopNest(3, 8).idx) == 3
