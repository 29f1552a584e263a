"""The staged product and the CSTL's pipelined binary eltwise ALU in the Amaranth simulator.

``staged_product`` against Python's integer product on random and extreme operands of
several widths, with the pipeline stalled at random. ``EltAlu`` against
:func:`nem.numerics.eltwise_int8` on entries from :func:`nem.numerics.eltwise_params`,
and against the same formula in Python integers (no 64-bit wrap) on entries drawn from
the whole of :data:`npu.cstl.model.ENTRY_RANGES`, its extremes included; stalls at
random; every result must leave exactly :data:`npu.cstl.eltalu.LATENCY` advancing
cycles after it entered, with its tag.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth import Module, Signal, signed
from amaranth.sim import Simulator

from nem.numerics import ELTWISE_OPS, NumericsError, eltwise_int8, eltwise_params
from npu.cstl.eltalu import ENTRY_WORDS, LATENCY, EltAlu
from npu.cstl.model import ENTRY_RANGES, MUL_UNUSED
from npu.cstl.regs import ELT_OPS
from npu.product import product_latency, staged_product


@pytest.mark.parametrize(("wa", "wb"), [(2, 1), (18, 17), (29, 31), (61, 31), (35, 40)])
def test_staged_product_is_the_product(wa, wb):
    """Every product, ``product_latency`` advancing cycles later, under random stalls."""
    rng = random.Random(wa * 100 + wb)
    m = Module()
    a, b, en = Signal(signed(wa)), Signal(wb), Signal()
    p = staged_product(m, a, b, en=en, name="t")
    lat = product_latency(wa, wb)
    assert len(p) == wa + wb
    extremes_a = [-(1 << (wa - 1)), (1 << (wa - 1)) - 1, 0, -1]
    extremes_b = [(1 << wb) - 1, 0, 1]
    pairs = [(x, y) for x in extremes_a for y in extremes_b]
    pairs += [(rng.randrange(-(1 << (wa - 1)), 1 << (wa - 1)), rng.randrange(1 << wb))
              for _ in range(150)]
    got = []

    async def bench(ctx):
        history = []    # operands of each advancing cycle
        k = 0
        while len(got) < len(pairs):
            adv = rng.random() >= 0.3
            x, y = pairs[k] if k < len(pairs) else (0, 0)
            ctx.set(en, adv)
            ctx.set(a, x)
            ctx.set(b, y)
            if adv:
                history.append((x, y))
                k += 1
                if len(history) > lat:
                    # the stages now hold the last lat operands; the output is the
                    # product of the operands lat advancing cycles ago
                    got.append((history[-lat - 1], ctx.get(p)))
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert len(got) >= len(pairs) - lat
    for (x, y), value in got:
        assert value == x * y, (x, y)


def _exact(op, qa, qb, e):
    """``nem.numerics.eltwise_int8`` in Python integers (no 64-bit wrap)."""
    def rescale(v, m, t):
        return (v * m + (1 << (t - 1))) >> t
    da, db = qa - e["a_zero_point"], qb - e["b_zero_point"]
    if op == "mul":
        r = da * db
    else:
        a = rescale(da << e["left_shift"], e["a_multiplier"], e["a_shift"])
        b = rescale(db << e["left_shift"], e["b_multiplier"], e["b_shift"])
        r = {"add": a + b, "sub": a - b, "min": min(a, b), "max": max(a, b)}[op]
    y = rescale(r, e["y_multiplier"], e["y_shift"]) + e["y_zero_point"]
    return max(e["lo"], min(e["hi"], y))


def _random_entry(rng, op):
    """An entry anywhere in ENTRY_RANGES (extremes one time in three per field); a mul's
    unused fields anything at all."""
    e = {}
    for field, (lo, hi) in ENTRY_RANGES.items():
        r = rng.random()
        e[field] = lo if r < 0.17 else hi if r < 0.34 else rng.randint(lo, hi)
        if op == "mul" and field in MUL_UNUSED:
            e[field] = rng.randrange(-2**31, 2**31)
    if e["lo"] > e["hi"]:
        e["lo"], e["hi"] = e["hi"], e["lo"]
    return e


def _small_entry(rng, op):
    """An entry with small multipliers and shifts (the output rescale near 1): results
    rarely saturate, so every rounding step shows in the output."""
    e = {"a_zero_point": rng.randint(-128, 127), "b_zero_point": rng.randint(-128, 127),
         "y_zero_point": rng.randint(-20, 20), "lo": -128, "hi": 127,
         "left_shift": rng.randint(0, 2)}
    for x in "ab":
        e[f"{x}_multiplier"], e[f"{x}_shift"] = rng.randint(1, 3), rng.randint(1, 3)
    e["y_shift"] = rng.randint(1, 3)
    e["y_multiplier"] = rng.randint(1, 1 << (e["y_shift"] - (op == "mul") * 1))
    return e


def _params_entry(rng, op):
    while True:
        try:
            p = eltwise_params(op, *(rng.uniform(0.001, 0.5) if k % 2 == 0 else
                                     rng.randint(-128, 127) for k in range(6)))
        except NumericsError:
            continue
        return {f: getattr(p, f) for f in ENTRY_RANGES}, p


@pytest.mark.parametrize("lanes", [1, 3])
@pytest.mark.parametrize("source", ["params", "ranges", "small"])
def test_eltalu_equals_the_integer_definition(lanes, source):
    rng = random.Random(lanes * 7 + len(source))
    dut = EltAlu(lanes=lanes, tag_width=10)
    # one task per op: the entry and op hold while the task's inputs go through
    tasks = []
    for op in ELTWISE_OPS * 2:
        if source == "params":
            entry, params = _params_entry(rng, op)
        elif source == "small":
            entry, params = _small_entry(rng, op), None
        else:
            entry, params = _random_entry(rng, op), None
        codes = [[(rng.randrange(-128, 128), rng.randrange(-128, 128)) for _ in range(lanes)]
                 for _ in range(40)]
        codes[0] = [(-128, 127)] * lanes
        codes[1] = [(127, -128)] * lanes
        tasks.append((op, entry, params, codes))
    outputs = []

    async def bench(ctx):
        for op, entry, _, codes in tasks:
            ctx.set(dut.op, ELT_OPS[op])
            ctx.set(dut.entry, {f: entry[f] & 0xFFFFFFFF for f in ENTRY_WORDS})
            k, seen, sent = 0, [], []
            cycles = 0
            while len(seen) < len(codes):
                cycles += 1
                assert cycles < 20 * len(codes) + 10 * LATENCY, "results missing"
                adv = rng.random() >= 0.3
                offer = k < len(codes) and rng.random() >= 0.2
                ctx.set(dut.en, adv)
                ctx.set(dut.i_valid, offer)
                if offer:
                    ctx.set(dut.i, {"a": [a & 0xFF for a, _ in codes[k]],
                                    "b": [b & 0xFF for _, b in codes[k]], "tag": k})
                # busy: some stage holds an input (one of the last LATENCY advances)
                assert ctx.get(dut.busy) == any(t is not None for t in sent[-LATENCY:])
                if adv:
                    sent.append(k if offer else None)
                    if ctx.get(dut.o_valid):
                        # out comes what went in LATENCY advancing cycles ago
                        assert sent[-LATENCY - 1] == ctx.get(dut.o_tag)
                        seen.append((ctx.get(dut.o_tag),
                                     [ctx.get(dut.o[j]) for j in range(lanes)]))
                    else:
                        assert len(sent) <= LATENCY or sent[-LATENCY - 1] is None
                    k += offer
                await ctx.tick()
            ctx.set(dut.i_valid, 0)
            for _ in range(LATENCY):        # drain
                ctx.set(dut.en, 1)
                await ctx.tick()
            assert not ctx.get(dut.busy)
            outputs.append(seen)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    for (op, entry, params, codes), seen in zip(tasks, outputs, strict=True):
        assert [t for t, _ in seen] == list(range(len(codes)))
        for t, got in seen:
            qa = [a for a, _ in codes[t]]
            qb = [b for _, b in codes[t]]
            got = [v - 256 if v > 127 else v for v in got]
            want = [_exact(op, x, y, entry) for x, y in zip(qa, qb, strict=True)]
            assert got == want, (op, entry, codes[t])
            if params is not None:
                ref = eltwise_int8(op, np.array(qa), np.array(qb), params)
                assert got == ref.tolist()


def test_eltalu_refuses_bad_parameters():
    assert EltAlu(lanes=1, tag_width=1).tag_width == 1
    with pytest.raises(ValueError, match="lanes"):
        EltAlu(lanes=0, tag_width=1)
    with pytest.raises(ValueError, match="tag_width"):
        EltAlu(lanes=1, tag_width=0)
    m = Module()
    with pytest.raises(ValueError, match="signed a"):
        staged_product(m, Signal(8), Signal(8), en=1, name="x")
    with pytest.raises(ValueError, match="signed a"):
        staged_product(m, Signal(signed(8)), Signal(signed(8)), en=1, name="x")
    with pytest.raises(ValueError, match="signed a"):
        staged_product(m, Signal(signed(1)), Signal(8), en=1, name="x")
