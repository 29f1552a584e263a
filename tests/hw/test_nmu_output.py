"""The NMU's output stage (requantisation or raw i32, then the L1 writer) against its model.

Random accumulator vectors (extremes included) with random output addresses (any
alignment), valid column counts and channel-table rows, for i8, u8 (with ReLU's clamp),
i16 and raw i32 outputs; random idle cycles on the input and a third of the write grants
denied. L1 afterwards must equal the model: ``requant_model`` (= ``nem.numerics``) per
channel, the low ``E`` bytes of each result at ``yaddr + E * c``, nothing else written.
"""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from nem.numerics import requant_params
from npu.nmu.model import requant_model
from npu.nmu.output import NmuOutput

COLS, ROWS, LANES, DEPTH = 8, 4, 8, 64


@pytest.mark.parametrize("out", ["i8", "u8", "i16", "i32"])
def test_output_stage_against_the_model(out):
    rng = random.Random(out)
    channels = COLS * ROWS
    zp = {"i8": -7, "u8": 100, "i16": 12, "i32": 0}[out]
    rq = None
    if out != "i32":
        rq = requant_params(0.02, [rng.uniform(1e-4, 0.05) for _ in range(channels)], 0.07,
                            zp, out_dtype=out, activation="relu" if out == "u8" else "none")
    e = {"i8": 1, "u8": 1, "i16": 2, "i32": 4}[out]
    items = []
    for _ in range(40):
        acc = [rng.choice([rng.randint(-5000, 5000), rng.randint(-(1 << 31), (1 << 31) - 1),
                           -(1 << 31), (1 << 31) - 1]) for _ in range(COLS)]
        ncols = rng.randint(1, COLS)
        yaddr = rng.randint(0, DEPTH * LANES - COLS * 4)
        items.append((acc, rng.randrange(ROWS), yaddr, ncols))
    mem = bytearray(rng.randbytes(DEPTH * LANES))
    want = bytearray(mem)
    for acc, row, yaddr, ncols in items:
        for c in range(ncols):
            ch = row * COLS + c
            v = acc[c] if rq is None else requant_model(
                acc[c], int(rq.multiplier[ch]), int(rq.shift[ch]), rq.zero_point, rq.lo, rq.hi)
            want[yaddr + e * c:yaddr + e * c + e] = (v & ((1 << 8 * e) - 1)).to_bytes(e, "little")
    dut = NmuOutput(cols=COLS, rows=ROWS, lanes=LANES, depth=DEPTH)
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def bench(ctx):
        ctx.set(dut.raw, int(rq is None))
        ctx.set(dut.out_bytes, e)
        if rq is not None:
            ctx.set(dut.zero_point, rq.zero_point)
            ctx.set(dut.lo, rq.lo)
            ctx.set(dut.hi, rq.hi)
            for r in range(ROWS):
                ctx.set(dut.params.payload, {"row": r, "data": [
                    {"multiplier": int(rq.multiplier[r * COLS + k]),
                     "shift": int(rq.shift[r * COLS + k])} for k in range(COLS)]})
                ctx.set(dut.params.valid, 1)
                await ctx.tick()
            ctx.set(dut.params.valid, 0)
        k = 0
        for _cycle in range(5000):
            offer = k < len(items) and rng.random() < 0.7
            ctx.set(dut.i.valid, offer)
            if offer:
                acc, row, yaddr, ncols = items[k]
                ctx.set(dut.i.payload, {"acc": acc, "row": row, "yaddr": yaddr,
                                        "ncols": ncols})
            wr = dut.wr
            ctx.set(wr.gnt, ctx.get(wr.req) and rng.random() >= 0.33)
            write = None
            if ctx.get(wr.go):
                write = (ctx.get(wr.addr), ctx.get(wr.data), ctx.get(wr.en))
            took = offer and ctx.get(dut.i.ready)
            idle = k == len(items) and not ctx.get(dut.busy)
            await ctx.tick()
            k += took
            if write is not None:
                addr, data, en = write
                for b in range(LANES):
                    if en >> b & 1:
                        mem[addr * LANES + b] = data >> (8 * b) & 0xFF
            if idle:
                break
        assert k == len(items)

    sim.add_testbench(bench)
    sim.run()
    bad = [i for i in range(len(mem)) if mem[i] != want[i]]
    assert not bad, f"{out}: byte {bad[0]}: {mem[bad[0]]:#04x}, expected {want[bad[0]]:#04x}"
