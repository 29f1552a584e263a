"""``npu.dsp.registered_product`` on the ECP5 (its MULT18X18D instance, simulated through
``tests/hw/ecp5_models.Mult18x18dModel``) against its Amaranth form and Python's product.

The two forms run side by side on the same operands under random clock enables and must
agree every cycle; the products that use it (``staged_product``, the NMU's MAC array) are
run on the ECP5 form against their own references.
"""

from __future__ import annotations

import random
import re

import pytest
from amaranth import ClockDomain, Module, Signal, signed
from amaranth.back import verilog
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

import npu.dsp
from npu.dsp import ECP5, constant_product, is_ecp5, registered_product
from npu.product import product_latency, staged_product
from tests.hw.ecp5_models import Mult18x18dModel


@pytest.fixture
def modelled(monkeypatch):
    """The MULT18X18D instance replaced by its model (same keywords)."""
    monkeypatch.setattr(npu.dsp, "mult18x18d", Mult18x18dModel)


def _range(shape):
    if shape.signed:
        return -(1 << (shape.width - 1)), (1 << (shape.width - 1)) - 1
    return 0, (1 << shape.width) - 1


@pytest.mark.parametrize(("sa", "sb"), [(signed(9), signed(8)), (signed(18), 17),
                                        (17, 17), (signed(18), signed(18)), (signed(2), 1)])
def test_both_forms_are_the_registered_product(modelled, sa, sb):
    rng = random.Random(str((sa, sb)))
    m = Module()
    m.domains.sync = cd = ClockDomain("sync")
    a, b, en = Signal(sa), Signal(sb), Signal()
    on_fpga = registered_product(m, a, b, en=en, name="fpga", platform=ECP5)
    in_rtl = registered_product(m, a, b, en=en, name="rtl", platform=None)
    assert on_fpga.shape() == in_rtl.shape()
    assert len(on_fpga) == len(a) + len(b) + (not a.shape().signed) + (not b.shape().signed)
    lo_a, hi_a = _range(a.shape())
    lo_b, hi_b = _range(b.shape())
    pairs = [(x, y) for x in (lo_a, hi_a, 0, -1 if lo_a else 1) for y in (lo_b, hi_b, 0)]
    pairs += [(rng.randint(lo_a, hi_a), rng.randint(lo_b, hi_b)) for _ in range(200)]
    seen = []

    async def bench(ctx):
        held = 0                                  # before any enable: never loaded
        for x, y in pairs:
            load = rng.random() < 0.7
            ctx.set(a, x)
            ctx.set(b, y)
            ctx.set(en, load)
            await ctx.tick()
            held = x * y if load else held
            seen.append((ctx.get(on_fpga), ctx.get(in_rtl), held))

    async def reset(ctx):
        # neither form is reset: the product survives a reset of the domain
        await ctx.tick().repeat(len(pairs) // 2)
        ctx.set(cd.rst, 1)
        await ctx.tick()
        ctx.set(cd.rst, 0)

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.add_testbench(reset)
    sim.run()
    assert len(seen) == len(pairs)
    for cycle, (fpga, rtl, want) in enumerate(seen):
        assert (fpga, rtl) == (want, want), f"cycle {cycle}"


def test_staged_product_on_the_ecp5(monkeypatch):
    """``staged_product`` with its digit products in MULT18X18D output registers: a
    signed 61-bit times an unsigned 31-bit operand, under stalls."""
    rng = random.Random(61)
    wa, wb = 61, 31
    m = Module()
    a, b, en = Signal(signed(wa)), Signal(wb), Signal()
    made = []
    monkeypatch.setattr(npu.dsp, "mult18x18d",
                        lambda **ports: made.append(ports) or Mult18x18dModel(**ports))
    p = staged_product(m, a, b, en=en, name="t", platform=ECP5)
    assert len(made) == 4 * 2        # digits: 61 bits -> 4, 31 bits -> 2
    lat = product_latency(wa, wb)
    pairs = [(-(1 << (wa - 1)), (1 << wb) - 1), ((1 << (wa - 1)) - 1, (1 << wb) - 1)]
    pairs += [(rng.randrange(-(1 << (wa - 1)), 1 << (wa - 1)), rng.randrange(1 << wb))
              for _ in range(100)]
    got = []

    async def bench(ctx):
        history, k = [], 0
        while len(got) < len(pairs) - lat:
            adv = rng.random() >= 0.3
            x, y = pairs[k] if k < len(pairs) else (0, 0)
            ctx.set(en, adv)
            ctx.set(a, x)
            ctx.set(b, y)
            if adv:
                history.append((x, y))
                k += 1
                if len(history) > lat:
                    got.append((history[-lat - 1], ctx.get(p)))
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    for (x, y), value in got:
        assert value == x * y, (x, y)


def test_the_array_on_the_ecp5(modelled):
    """The NMU's MAC array elaborated for the ECP5 (its 64 products in MULT18X18D output
    registers) runs ``test_nmu_array``'s random pixels, stalls and back-pressure against
    the array model."""
    from tests.hw import test_nmu_array

    for short, p_ready in ((False, 0.6), (True, 0.3)):
        test_nmu_array.check_against_the_model(
            short=short, p_ready=p_ready, elaborate=lambda dut: Fragment.get(dut, ECP5))


def test_the_requantiser_on_the_ecp5(monkeypatch):
    """The requantiser elaborated for the ECP5 (4 lanes, each 32 x 31-bit product in
    2 x 2 MULT18X18D digit products) runs ``test_requant``'s large multipliers and extreme
    accumulators against ``nem.numerics.requantize``."""
    from tests.hw import test_requant

    made = []
    monkeypatch.setattr(npu.dsp, "mult18x18d",
                        lambda **ports: made.append(ports) or Mult18x18dModel(**ports))
    test_requant.test_large_multipliers_and_extreme_accumulators(
        elaborate=lambda dut: Fragment.get(dut, ECP5))
    assert len(made) == 4 * 2 * 2


def test_the_ecp5_netlist_names_the_multiplier():
    """The Verilog for the ECP5 instantiates MULT18X18D with only the output register
    (clock CLK0, enable CE0 = the enable); the other elaboration has none."""
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    class Top(wiring.Component):
        def __init__(self):
            super().__init__({"a": In(signed(9)), "b": In(signed(8)), "en": In(1),
                              "p": Out(signed(17))})

        def elaborate(self, platform):
            m = Module()
            m.d.comb += self.p.eq(registered_product(m, self.a, self.b, en=self.en,
                                                     name="prod", platform=platform))
            return m

    fpga = verilog.convert(Top(), name="top", platform=ECP5, emit_src=False)
    rtl = verilog.convert(Top(), name="top", emit_src=False)
    assert len(re.findall(r"\bMULT18X18D\b", fpga)) == 1 and "MULT18X18D" not in rtl
    for param, value in (("REG_OUTPUT_CLK", "CLK0"), ("REG_OUTPUT_CE", "CE0"),
                         ("REG_INPUTA_CLK", "NONE"), ("REG_INPUTB_CLK", "NONE"),
                         ("REG_PIPELINE_CLK", "NONE")):
        assert f'.{param}("{value}")' in fpga, param
    assert ".CE0(en)" in fpga and is_ecp5(ECP5) and not is_ecp5(None)
    assert repr(ECP5) == "ECP5"       # as a platform shows in messages


def test_refusals(modelled):
    m = Module()
    with pytest.raises(ValueError, match=r"^x: operand a is signed\(19\); the MULT18X18D "
                       r"takes at most signed\(18\) or unsigned\(17\)$"):
        registered_product(m, Signal(signed(19)), Signal(4), en=1, name="x", platform=ECP5)
    with pytest.raises(ValueError, match=r"^y: operand b is unsigned\(18\)"):
        registered_product(m, Signal(4), Signal(18), en=1, name="y", platform=None)
    # the model refuses what it does not know, so a misnamed pin cannot pass unseen
    with pytest.raises(ValueError, match=r"unknown keyword 'i_A18'"):
        Mult18x18dModel(i_A18=0)
    with pytest.raises(ValueError, match=r"unknown keyword 'o_Q0'"):
        Mult18x18dModel(o_Q0=Signal())
    with pytest.raises(ValueError, match=r"GSR = 'disabled' is not one of"):
        Mult18x18dModel(p_GSR="disabled")
    with pytest.raises(ValueError, match=r"pin SIGNEDA is one bit, given 2"):
        Mult18x18dModel(i_SIGNEDA=2)
    with pytest.raises(ValueError, match=r"SOURCEB is not modelled"):
        Mult18x18dModel(i_SOURCEB=1)
    with pytest.raises(ValueError, match=r"C3 is not modelled"):
        Mult18x18dModel(i_C3=Signal())


@pytest.mark.parametrize("constant", [0, 1, 2, 3, 5, 7, 11, 56, 68, 255, 0x5555, 0xB6DB])
def test_constant_product_against_python(constant):
    """``constant_product`` against Python's product, on the operand's extremes and random
    values; no multiplier in what it builds (Verilog's ``*`` absent)."""
    v = Signal(32)
    out = Signal(32 + constant.bit_length())
    m = Module()
    m.d.comb += out.eq(constant_product(v, constant))
    rng = random.Random(constant)
    values = [0, 1, (1 << 32) - 1, 1 << 31, *(rng.getrandbits(32) for _ in range(40))]
    got = []

    async def bench(ctx):
        for x in values:
            ctx.set(v, x)
            got.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert got == [x * constant for x in values]
    assert " * " not in verilog.convert(m, ports=[v, out], emit_src=False)


def test_constant_product_refusals():
    with pytest.raises(ValueError, match=r"^constant must be a non-negative integer, not -3$"):
        constant_product(Signal(4), -3)
    with pytest.raises(ValueError, match=r"^value must be unsigned, not signed\(4\)$"):
        constant_product(Signal(signed(4)), 3)
