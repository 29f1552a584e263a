"""Requantisation stage against nem.numerics.requantize (the shared contract)."""

import random
from types import SimpleNamespace

import numpy as np
import pytest
from amaranth import signed
from amaranth.sim import Simulator

from nem.numerics import requant_params, requantize
from npu.cstl.requant import LATENCY, OUT_TYPES, RequantStage, param_layout
from sim.streams import stream_recv, stream_send


def run(dut, rq, rows_acc, *, idle, backpressure, seed, elaborate=None):
    """Send ``rows_acc`` through ``dut`` (elaborated by ``elaborate`` when given: the
    ECP5 form in ``test_dsp.py``) with ``rq``'s table, return the outputs."""
    lanes = dut.lanes
    got = {}

    async def producer(ctx):
        ctx.set(dut.zero_point, rq.zero_point)
        ctx.set(dut.lo, rq.lo)
        ctx.set(dut.hi, rq.hi)
        for row in range(dut.rows):
            ctx.set(dut.params.payload, {"row": row, "data": [
                {"multiplier": int(rq.multiplier[row * lanes + k]),
                 "shift": int(rq.shift[row * lanes + k])} for k in range(lanes)]})
            ctx.set(dut.params.valid, 1)
            await ctx.tick()
        ctx.set(dut.params.valid, 0)
        await stream_send(ctx, dut.i, [{"acc": [int(a) for a in acc], "row": row}
                                       for row, acc in rows_acc],
                          rng=random.Random(seed), idle=idle)

    async def consumer(ctx):
        out = await stream_recv(ctx, dut.o, len(rows_acc), rng=random.Random(seed + 1),
                                backpressure=backpressure)
        got["y"] = [[int(v[k]) for k in range(lanes)] for v in out]

    sim = Simulator(elaborate(dut) if elaborate else dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run()
    return np.array(got["y"])


@pytest.mark.parametrize(("out_type", "activation", "idle", "backpressure"), [
    ("i8", "none", 0.0, 0.0), ("i8", "relu", 0.3, 0.3), ("u8", "relu6", 0.0, 0.6),
    ("i16", "none", 0.4, 0.2),
])
def test_matches_numerics(out_type, activation, idle, backpressure):
    rng = np.random.default_rng(3)
    lanes, rows = 4, 3
    channels = lanes * rows
    zp = {"i8": -5, "u8": 120, "i16": 7}[out_type]
    rq = requant_params(0.02, rng.uniform(1e-4, 0.05, size=channels), 0.07, zp,
                        out_dtype=out_type, activation=activation)
    n = 60
    row_ids = rng.integers(0, rows, size=n)
    # Mix of typical and extreme accumulators (int32 limits, rounding ties are rare but
    # the extremes stress the 64-bit product and saturation).
    acc = rng.integers(-40000, 40000, size=(n, lanes))
    acc[::7] = rng.choice([-(1 << 31), (1 << 31) - 1, 0, -1, 1], size=(len(acc[::7]), lanes))
    dut = RequantStage(lanes=lanes, rows=rows, out_type=out_type)
    got = run(dut, rq, list(zip(row_ids, acc, strict=True)), idle=idle,
              backpressure=backpressure, seed=1)
    for i in range(n):
        sel = slice(row_ids[i] * lanes, row_ids[i] * lanes + lanes)
        sub = type(rq)(rq.multiplier[sel], rq.shift[sel], rq.zero_point, rq.out_dtype,
                       rq.activation, rq.lo, rq.hi)
        want = requantize(acc[i], sub)
        assert list(got[i]) == list(want), f"transfer {i}: RTL {got[i]} != model {want}"


def test_large_multipliers_and_extreme_accumulators(elaborate=None):
    # Real multipliers >= 1/8 give shifts below 34, so (a * m + 2**(t-1)) >> t can exceed
    # 32 bits before the zero point and the clamp: the whole 64-bit intermediate matters.
    # Hand check of one lane: M = 2.0 is (m, t) = (2**30, 29); a = 2**31 - 1 gives
    # (2**31 - 1) * 2 = 2**32 - 2 before saturation, so the output is hi = 127 (a 33-bit
    # intermediate would wrap it to -2).
    rng = np.random.default_rng(11)
    lanes, rows = 4, 2
    reals = np.concatenate([[2.0, 1.0, 0.125, 1000.0],
                            rng.uniform(0.13, 300.0, size=lanes * rows - 4)])
    rq = requant_params(1.0, reals, 1.0, 0, out_dtype="i8")
    assert (rq.multiplier[0], rq.shift[0]) == (1 << 30, 29)
    assert int(rq.shift.max()) < 34
    extremes = [-(1 << 31), (1 << 31) - 1, -(1 << 30), 1 << 30, -(1 << 16), 1 << 16, 0, -1, 1]
    n = 40
    row_ids = np.arange(n) % rows
    acc = rng.choice(extremes, size=(n, lanes))
    acc[1::3] = rng.integers(-(1 << 31), 1 << 31, size=(len(acc[1::3]), lanes))
    acc[0] = [(1 << 31) - 1, -(1 << 31), 1 << 30, -1]
    got = run(RequantStage(lanes=lanes, rows=rows), rq,
              list(zip(row_ids, acc, strict=True)), idle=0.2, backpressure=0.2, seed=4,
              elaborate=elaborate)
    assert got[0][0] == 127
    for i in range(n):
        sel = slice(row_ids[i] * lanes, row_ids[i] * lanes + lanes)
        sub = type(rq)(rq.multiplier[sel], rq.shift[sel], rq.zero_point, rq.out_dtype,
                       rq.activation, rq.lo, rq.hi)
        want = requantize(acc[i], sub)
        assert list(got[i]) == list(want), f"transfer {i}: RTL {got[i]} != model {want}"
    # Not every output saturates: some lanes land inside the range.
    assert ((got > -128) & (got < 127)).any()


def test_one_transfer_per_cycle():
    rq = requant_params(0.1, [0.1] * 2, 0.1, 0)
    dut = RequantStage(lanes=2, rows=1)
    cycles = {}

    async def bench(ctx):
        ctx.set(dut.params.payload, {"row": 0, "data": [
            {"multiplier": int(rq.multiplier[k]), "shift": int(rq.shift[k])} for k in range(2)]})
        ctx.set(dut.params.valid, 1)
        await ctx.tick()
        ctx.set(dut.params.valid, 0)
        ctx.set(dut.hi, 127)
        ctx.set(dut.lo, -128)
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.valid, 1)
        outs = 0
        for cycle in range(40):
            ctx.set(dut.i.payload, {"acc": [cycle, -cycle], "row": 0})
            *_, o_valid = await ctx.tick().sample(dut.o.valid)
            outs += o_valid
        cycles["outs"] = outs

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    # LATENCY (6: table read, three product stages, shift, rounding) register stages,
    # then one result per cycle
    assert LATENCY == 1 + 3 + 2
    assert cycles["outs"] == 40 - LATENCY


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_constructor_errors():
    with pytest.raises(ValueError, match="out_type must be one of"):
        RequantStage(out_type="i4")
    with pytest.raises(ValueError, match=r"lanes must be an integer in 1\.\.64, not 0"):
        RequantStage(lanes=0)
    with pytest.raises(ValueError, match=r"lanes must be an integer in 1\.\.64, not 65"):
        RequantStage(lanes=65)
    with pytest.raises(ValueError, match=r"rows must be an integer in 1\.\.4096, not 4097"):
        RequantStage(rows=4097)
    with pytest.raises(ValueError, match=r"rows must be an integer in 1\.\.4096, not '3'"):
        RequantStage(rows="3")
    with pytest.raises(ValueError, match="tag_width must be a non-negative integer, not -1"):
        RequantStage(tag_width=-1)
    with pytest.raises(ValueError, match=r"tag_width must be a non-negative integer, not 1\.5"):
        RequantStage(tag_width=1.5)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_interface_as_documented():
    # Defaults: 8 lanes, 16 rows, i8, no tag. Limits 1 and 64 lanes, 4096 rows accepted.
    dut = RequantStage()
    assert (dut.lanes, dut.rows, dut.out_type, dut.tag_width) == (8, 16, "i8", 0)
    assert not hasattr(dut, "o_tag")
    assert RequantStage(lanes=1).lanes == 1 and RequantStage(lanes=64, rows=4096).rows == 4096
    # zero point and clamp bounds: signed 17 bits (u8 hi 255 and i16 limits fit).
    for port in (dut.zero_point, dut.lo, dut.hi):
        assert port.shape() == signed(17)
    # A table row: per lane a 31-bit multiplier (m < 2**31) and a 6-bit shift (t <= 62).
    assert param_layout(3).size == 3 * (31 + 6)
    assert RequantStage(tag_width=5).o_tag.shape().width == 5


def test_tag_leaves_with_its_transfer_and_params_always_ready():
    # Shift t = 31 with m = 2**30 halves: lane values 2k and -2k give k and -k.
    lanes = 2
    dut = RequantStage(lanes=lanes, rows=1, tag_width=6)
    seen = {}

    async def producer(ctx):
        ctx.set(dut.params.payload, {"row": 0, "data": [{"multiplier": 1 << 30, "shift": 31}]
                                     * lanes})
        ctx.set(dut.params.valid, 1)
        await ctx.tick()
        seen["ready"] = ctx.get(dut.params.ready)
        ctx.set(dut.params.valid, 0)
        ctx.set(dut.lo, -128)
        ctx.set(dut.hi, 127)
        await stream_send(ctx, dut.i, [{"acc": [2 * k, -2 * k], "row": 0, "tag": 40 + k}
                                       for k in range(12)], rng=random.Random(2), idle=0.3)

    async def consumer(ctx):
        got = []
        rng = random.Random(3)
        while len(got) < 12:
            ready = rng.random() >= 0.3
            ctx.set(dut.o.ready, ready)
            *_, valid, payload, tag = await ctx.tick().sample(dut.o.valid, dut.o.payload,
                                                              dut.o_tag)
            if valid and ready:
                got.append(([int(payload[0]), int(payload[1])], int(tag)))
        seen["got"] = got

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run()
    assert seen["ready"] == 1
    assert seen["got"] == [([k, -k], 40 + k) for k in range(12)]


def _clamp_reference(acc, m, t, z, lo, hi, bits, is_signed):
    """The requantiser's formula written out (docs/numerics.md), lo before hi as the RTL's
    priority, then the lane's two's-complement (or unsigned) ``bits``."""
    y = ((acc * m + (1 << (t - 1))) >> t) + z
    y = lo if y < lo else hi if y > hi else y
    y &= (1 << bits) - 1
    return y - (1 << bits) if is_signed and y >> (bits - 1) else y


@pytest.mark.parametrize("out_type", ["i8", "u8", "i16"])
def test_clamp_edges(out_type):
    # m = 1, t = 1: q = acc, y = clamp(((acc + 1) >> 1) + z, lo, hi). The RTL compares q
    # with 2*(lo - z) - 1 and 2*(hi - z) on its low 19 bits when q fits them, else on q's
    # sign: accumulators on both sides of each threshold, of +-2**18 (where q stops
    # fitting) and of +-2**19, for zero points and bounds up to the ports' 17-bit limits
    # (and lo > hi: lo wins, as in the model's order), every lane checked against the
    # formula above.
    bits, is_signed, _, _ = OUT_TYPES[out_type]
    rng = random.Random(out_type)
    lanes = 4
    limit = (1 << 16) - 1
    cases = [(0, -128, 127), (-5, -128, 127), (120, 0, 255), (limit, -limit - 1, limit),
             (-limit - 1, -limit - 1, limit), (7, 100, -100)]
    cases += [(rng.randint(-limit - 1, limit), *sorted(rng.randint(-limit - 1, limit)
                                                        for _ in range(2))) for _ in range(6)]
    for z, lo, hi in cases:
        accs = []
        for edge in (2 * (lo - z) - 1, 2 * (hi - z), 1 << 18, -(1 << 18), 1 << 19,
                     -(1 << 19), 0):
            accs += [edge + d for d in range(-3, 4)]
        accs += [(1 << 31) - 1, -(1 << 31)]
        rows = [accs[i:i + lanes] + [0] * (lanes - len(accs[i:i + lanes]))
                for i in range(0, len(accs), lanes)]
        rq = SimpleNamespace(zero_point=z, lo=lo, hi=hi, multiplier=[1] * lanes,
                             shift=[1] * lanes)
        got = run(RequantStage(lanes=lanes, rows=1, out_type=out_type), rq,
                  [(0, row) for row in rows], idle=0.2, backpressure=0.2, seed=z & 0xFF)
        for i, row in enumerate(rows):
            want = [_clamp_reference(a, 1, 1, z, lo, hi, bits, is_signed) for a in row]
            assert list(got[i]) == want, f"z={z} lo={lo} hi={hi} acc={row}"
    # t = 1 with the largest multipliers: q = a * m reaches +-2**62 (bit 61 differs from
    # the sign), far outside the thresholds, on both sides
    big = (1 << 31) - 1
    rows = [[big, -(1 << 31), 1 << 30, -(1 << 30)], [1, -1, 0, 3]]
    rq = SimpleNamespace(zero_point=3, lo=-100, hi=100, multiplier=[big] * lanes,
                         shift=[1] * lanes)
    got = run(RequantStage(lanes=lanes, rows=1, out_type=out_type), rq,
              [(0, row) for row in rows], idle=0.0, backpressure=0.0, seed=9)
    for i, row in enumerate(rows):
        want = [_clamp_reference(a, big, 1, 3, -100, 100, bits, is_signed) for a in row]
        assert list(got[i]) == want, f"m={big} acc={row}"
