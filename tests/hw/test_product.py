"""``npu.product``'s constant multiplication by shifts against Python's integers."""

from __future__ import annotations

import itertools
import random

import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from npu.product import csd_digits, times_constant


@pytest.mark.parametrize("c", [*range(0, 70), 255, 256, 1000, 56 * 3, (1 << 20) - 1])
def test_csd_digits_sum_to_the_constant_with_no_two_adjacent(c):
    digits = csd_digits(c)
    assert sum(d << k for k, d in digits) == c
    shifts = [k for k, _ in digits]
    assert all(b - a >= 2 for a, b in itertools.pairwise(shifts))
    assert all(d in (1, -1) for _, d in digits)
    # no more non-zero digits than the binary form has ones
    assert len(digits) <= bin(c).count("1")


def test_csd_digits_refuse_a_negative_constant():
    with pytest.raises(ValueError, match="must not be negative, not -3"):
        csd_digits(-3)


@pytest.mark.parametrize("width", [1, 8, 32])
def test_times_constant_equals_the_product(width):
    """Every constant below 70 and a few wide ones, over random and extreme operands."""
    constants = [*range(0, 70), 56, 255, 1000, (1 << 13) + 1]
    rng = random.Random(width)
    values = [0, 1, (1 << width) - 1, *(rng.getrandbits(width) for _ in range(12))]
    m = Module()
    x = Signal(width)
    outs = {}
    for c in constants:
        out = Signal(width + max(c, 1).bit_length(), name=f"p{c}")
        m.d.comb += out.eq(times_constant(x, c))
        outs[c] = out
        assert len(times_constant(x, c)) == len(out)

    async def bench(ctx):
        for v in values:
            ctx.set(x, v)
            for c, out in outs.items():
                assert ctx.get(out) == v * c, (v, c)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
