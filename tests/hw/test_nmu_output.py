"""The NMU's output stage (requantisation or raw i32, then the L1 writer) against its model.

Random accumulator vectors (extremes included) with random output addresses (any
alignment), valid column counts and channel-table rows, for i8, u8 (with ReLU's clamp),
i16 and raw i32 outputs; the input busy or sparse, a third of the write grants denied and
runs of 10-20 cycles with none granted (long enough for the input to stop on its credits:
a transfer taken beyond the FIFO's room would be lost). L1 afterwards must equal the
model: ``requant_model`` (= ``nem.numerics``) per channel, the low ``E`` bytes of each
result at ``yaddr + E * c``, nothing else written, and no write once ``busy`` is low.
And with every grant given and one word per result, the stage takes a transfer in every
cycle.
"""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from nem.numerics import requant_params
from npu.cstl.requant import LATENCY
from npu.nmu.model import requant_model
from npu.nmu.output import NmuOutput

COLS, ROWS, LANES, DEPTH = 8, 4, 8, 64


E = {"i8": 1, "u8": 1, "i16": 2, "i32": 4}


def _params(rng, out, cols):
    if out == "i32":
        return None
    zp = {"i8": -7, "u8": 100, "i16": 12}[out]
    return requant_params(0.02, [rng.uniform(1e-4, 0.05) for _ in range(cols * ROWS)], 0.07,
                          zp, out_dtype=out, activation="relu" if out == "u8" else "none")


def _expected(mem, items, rq, e, cols):
    want = bytearray(mem)
    for acc, row, yaddr, ncols in items:
        for c in range(ncols):
            ch = row * cols + c
            v = acc[c] if rq is None else requant_model(
                acc[c], int(rq.multiplier[ch]), int(rq.shift[ch]), rq.zero_point, rq.lo, rq.hi)
            want[yaddr + e * c:yaddr + e * c + e] = (v & ((1 << 8 * e) - 1)).to_bytes(e, "little")
    return want


def _run(rng, out, rq, items, mem, *, cols, offer_p, deny_p, burst_p):
    """Drive ``items`` into a fresh stage; L1 after the run and the cycles in which an
    offered transfer was not taken. ``stall`` must be high exactly in the cycles where the
    writer asks for the port and is not granted it."""
    e = E[out]
    dut = NmuOutput(cols=cols, rows=ROWS, lanes=LANES, depth=DEPTH)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    refused = []

    async def bench(ctx):
        ctx.set(dut.raw, int(rq is None))
        ctx.set(dut.out_bytes, e)
        if rq is not None:
            ctx.set(dut.zero_point, rq.zero_point)
            ctx.set(dut.lo, rq.lo)
            ctx.set(dut.hi, rq.hi)
            for r in range(ROWS):
                ctx.set(dut.params.payload, {"row": r, "data": [
                    {"multiplier": int(rq.multiplier[r * cols + k]),
                     "shift": int(rq.shift[r * cols + k])} for k in range(cols)]})
                ctx.set(dut.params.valid, 1)
                await ctx.tick()
            ctx.set(dut.params.valid, 0)
        k = 0
        denied = 0
        for cycle in range(5000):
            offer = k < len(items) and rng.random() < offer_p
            ctx.set(dut.i.valid, offer)
            if offer:
                acc, row, yaddr, ncols = items[k]
                ctx.set(dut.i.payload, {"acc": acc, "row": row, "yaddr": yaddr,
                                        "ncols": ncols})
            if not denied and rng.random() < burst_p:
                denied = rng.randint(10, 20)
            wr = dut.wr
            ctx.set(wr.gnt, ctx.get(wr.req) and not denied and rng.random() >= deny_p)
            denied = max(denied - 1, 0)
            assert ctx.get(dut.stall) == (ctx.get(wr.req) and not ctx.get(wr.gnt)), cycle
            write = None
            if ctx.get(wr.go):
                write = (ctx.get(wr.addr), ctx.get(wr.data), ctx.get(wr.en))
            took = offer and ctx.get(dut.i.ready)
            if offer and not took:
                refused.append(cycle)
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
        # ``busy`` low: nothing is left to write (the unit's done waits on it)
        for cycle in range(2 * LATENCY):
            ctx.set(dut.i.valid, 0)
            ctx.set(dut.wr.gnt, ctx.get(dut.wr.req))
            assert not ctx.get(dut.wr.req), f"a write {cycle} cycles after busy fell"
            await ctx.tick()

    sim.add_testbench(bench)
    sim.run()
    return refused


def _compare(out, mem, want):
    bad = [i for i in range(len(mem)) if mem[i] != want[i]]
    assert not bad, f"{out}: byte {bad[0]}: {mem[bad[0]]:#04x}, expected {want[bad[0]]:#04x}"


@pytest.mark.parametrize("offer_p", [0.8, 0.1])
@pytest.mark.parametrize("out", ["i8", "u8", "i16", "i32"])
def test_output_stage_against_the_model(out, offer_p):
    rng = random.Random(f"{out}-{offer_p}")
    rq = _params(rng, out, COLS)
    items = []
    for _ in range(60):
        acc = [rng.choice([rng.randint(-5000, 5000), rng.randint(-(1 << 31), (1 << 31) - 1),
                           -(1 << 31), (1 << 31) - 1]) for _ in range(COLS)]
        ncols = rng.randint(1, COLS)
        yaddr = rng.randint(0, DEPTH * LANES - COLS * 4)
        items.append((acc, rng.randrange(ROWS), yaddr, ncols))
    mem = bytearray(rng.randbytes(DEPTH * LANES))
    want = _expected(mem, items, rq, E[out], COLS)
    refused = _run(rng, out, rq, items, mem, cols=COLS, offer_p=offer_p, deny_p=0.33,
                   burst_p=0.05)
    _compare(out, mem, want)
    if offer_p > 0.5:
        # the runs without a grant filled the stage: the input stopped on its credits
        assert len(refused) > 10, f"{out}: the input was refused in {len(refused)} cycles"


@pytest.mark.parametrize("out", ["i8", "i32"])
def test_output_stage_takes_a_transfer_every_cycle(out):
    """Results of one L1 word each (aligned, ``ncols * E <= LANES``), the input valid in
    every cycle and every write granted: no cycle refuses a transfer (the credits cover
    the requantiser's latency and the FIFO's). Half the word's columns, as the tiny
    device's array (4 columns on a 4-byte word)."""
    cols = LANES // 2
    rng = random.Random(f"rate-{out}")
    rq = _params(rng, out, cols)
    e = E[out]
    items = [([rng.randint(-5000, 5000) for _ in range(cols)], rng.randrange(ROWS),
              LANES * rng.randrange(DEPTH), rng.randint(1, min(cols, LANES // e)))
             for _ in range(50)]
    mem = bytearray(rng.randbytes(DEPTH * LANES))
    want = _expected(mem, items, rq, e, cols)
    refused = _run(rng, out, rq, items, mem, cols=cols, offer_p=1.0, deny_p=0.0, burst_p=0.0)
    _compare(out, mem, want)
    assert refused == [], f"{out}: transfers refused in cycles {refused}"
