"""The NMU's MAC array in the Amaranth simulator against ``npu.nmu.model.array_model``.

Random weight buffer, bias and input zero point; pixels of several taps (runs of random
length, so partial vectors with masked lanes), random idle cycles on the input and
back-pressure on the output. The accumulators must equal the model's (and numpy's dot
products) exactly.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from npu.nmu.array import NmuArray
from npu.nmu.model import Run, array_model, read_runs

LANES, COLS, WROWS = 8, 8, 32


def _pixels(rng, mem, npix, short=False):
    """Pixels of 1-4 taps of 1-3 vectors each, or (``short``) of a single vector."""
    runs = []
    for p in range(npix):
        taps = 1 if short else rng.randint(1, 4)
        for t in range(taps):
            length = rng.randint(1, LANES if short else 3 * LANES)
            addr = rng.randint(0, len(mem) - length)
            row0 = rng.randint(0, WROWS - 3)
            runs.append(Run(addr, length, pad=rng.random() < 0.1,
                            tag=(row0, t == 0, t == taps - 1, 1000 + p)))
    return runs


@pytest.mark.parametrize(("short", "p_ready"), [(False, 0.6), (True, 0.3)])
def test_array_against_the_model(short, p_ready):
    """Single-vector pixels with a rarely ready output fill the output queue (a result
    in and one out in the same cycle while it holds two)."""
    check_against_the_model(short=short, p_ready=p_ready)


def check_against_the_model(*, short=False, p_ready=0.6, elaborate=lambda dut: dut):
    """Random pixels, idle input cycles, output ready with probability *p_ready*; the
    results against the model. *elaborate* (default: none) gives
    ``tests/hw/test_dsp.py`` the ECP5 elaboration."""
    rng = random.Random(5)
    mem = np.frombuffer(rng.randbytes(512), np.uint8)
    zx = rng.randint(-128, 127)
    wbuf = [[[rng.randint(-128, 127) for _ in range(COLS)] for _ in range(LANES)]
            for _ in range(WROWS)]
    bias = [rng.randint(-(1 << 20), 1 << 20) for _ in range(COLS)]
    vectors = list(read_runs(_pixels(rng, mem, 40, short), mem, LANES, pad_byte=zx & 0xFF))
    want = list(array_model(vectors, wbuf, bias, zx, COLS))
    # numpy cross-check of the model on the first pixel's sum
    dut = NmuArray(lanes=LANES, cols=COLS, wrows=WROWS, tag_width=32)
    sim = Simulator(elaborate(dut))
    sim.add_clock(1e-6)
    got = []

    async def bench(ctx):
        ctx.set(dut.zx, zx)
        for c in range(COLS):
            ctx.set(dut.bias[c], bias[c])
        for r in range(WROWS):
            for lane in range(LANES):
                ctx.set(dut.w_en, 1)
                ctx.set(dut.w_row, r)
                ctx.set(dut.w_lane, lane)
                ctx.set(dut.w_count, COLS)
                for c in range(COLS):
                    ctx.set(dut.w_data[c], wbuf[r][lane][c] & 0xFF)
                await ctx.tick()
        ctx.set(dut.w_en, 0)
        k = 0
        for _cycle in range(20000):
            offer = k < len(vectors) and rng.random() < 0.8
            ctx.set(dut.i.valid, offer)
            if offer:
                data, n, j, run = vectors[k]
                nvec = -(-run.length // LANES)
                ctx.set(dut.i.payload.data, data)
                ctx.set(dut.i.payload.count, n)
                ctx.set(dut.i.payload.row, run.tag[0] + j)
                ctx.set(dut.i.payload.first, int(run.tag[1] and j == 0))
                ctx.set(dut.i.payload.last, int(run.tag[2] and j == nvec - 1))
                ctx.set(dut.i.payload.tag, run.tag[3])
            ready = rng.random() < p_ready
            ctx.set(dut.o.ready, ready)
            if ctx.get(dut.o.valid) and ready:
                p = ctx.get(dut.o.payload)
                got.append(([int(p.acc[c]) for c in range(COLS)], int(p.tag)))
            took = offer and ctx.get(dut.i.ready)
            await ctx.tick()
            k += took
            if len(got) == len(want):
                break
        # nothing more comes out
        ctx.set(dut.o.ready, 1)
        for _ in range(8):
            assert not ctx.get(dut.o.valid)
            await ctx.tick()

    sim.add_testbench(bench)
    sim.run()
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, f"pixel {i}: got {g}, expected {w}"
    # the model itself against numpy on the first pixel
    acc = np.array(bias, np.int64)
    for data, n, j, run in vectors:
        x = np.array(data[:n], np.uint8).view(np.int8).astype(np.int64) - zx
        acc = acc + x @ np.array(wbuf[run.tag[0] + j][:n], np.int64)
        if run.tag[2] and j == -(-run.length // LANES) - 1:
            break
    assert list(acc) == want[0][0]


def test_geometry_from_the_device_and_refusals():
    import pytest

    from nem.checker import check_text
    from npu.nmu.model import NmuGeometry
    from sim.nmu_programs import device_dir

    result = check_text('device "nmu_device.nem"\n', file="d.nem",
                        base_dir=str(device_dir(macs=64, word=8)))
    geom = NmuGeometry.from_device(result.device, 8)
    assert (geom.lanes, geom.cols, geom.macs) == (8, 8, 64)
    with pytest.raises(ValueError, match=r"^NMU.int8_macs \(64\) must be a positive multiple "
                       r"of the L1 word \(48 bytes\)$"):
        NmuGeometry.from_device(result.device, 48)
    with pytest.raises(ValueError, match=r"^lanes must be a power of two, not 6$"):
        NmuGeometry(lanes=6)
    with pytest.raises(ValueError, match=r"^cols must be in 1..lanes \(8\), not 16$"):
        NmuGeometry(lanes=8, cols=16)
    with pytest.raises(ValueError, match=r"^channels must be a positive multiple of cols "
                       r"\(8\), not 12$"):
        NmuGeometry(channels=12)


def test_two_banks_against_the_model():
    """``banks=2``: both banks written with different weights, each pixel in a random
    bank, the bias of ``bias_bank`` given back every cycle, idle input and back-pressure;
    each pixel's accumulators equal the model's with its bank's weights and bias."""
    rng = random.Random(8)
    mem = np.frombuffer(rng.randbytes(512), np.uint8)
    zx = rng.randint(-128, 127)
    wbuf = [[[[rng.randint(-128, 127) for _ in range(COLS)] for _ in range(LANES)]
             for _ in range(WROWS)] for _ in range(2)]
    bias = [[rng.randint(-(1 << 20), 1 << 20) for _ in range(COLS)] for _ in range(2)]
    runs = _pixels(rng, mem, 30)
    banks = {p: rng.randrange(2) for p in range(30)}
    vectors = list(read_runs(runs, mem, LANES, pad_byte=zx & 0xFF))
    want = []
    for p in range(30):
        mine = [v for v in vectors if v[3].tag[3] == 1000 + p]
        want += array_model(mine, wbuf[banks[p]], bias[banks[p]], zx, COLS)
    dut = NmuArray(lanes=LANES, cols=COLS, wrows=WROWS, tag_width=32, banks=2)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    got = []

    async def bench(ctx):
        ctx.set(dut.zx, zx)
        ctx.set(dut.w_en, 1)
        ctx.set(dut.w_count, COLS)
        for b in range(2):
            for r in range(WROWS):
                for lane in range(LANES):
                    ctx.set(dut.w_bank, b)
                    ctx.set(dut.w_row, r)
                    ctx.set(dut.w_lane, lane)
                    for c in range(COLS):
                        ctx.set(dut.w_data[c], wbuf[b][r][lane][c] & 0xFF)
                    await ctx.tick()
        ctx.set(dut.w_en, 0)
        k = 0
        for _cycle in range(20000):
            offer = k < len(vectors) and rng.random() < 0.8
            ctx.set(dut.i.valid, offer)
            if offer:
                data, n, j, run = vectors[k]
                nvec = -(-run.length // LANES)
                ctx.set(dut.i.payload.data, data)
                ctx.set(dut.i.payload.count, n)
                ctx.set(dut.i.payload.row, run.tag[0] + j)
                ctx.set(dut.i.payload.first, int(run.tag[1] and j == 0))
                ctx.set(dut.i.payload.last, int(run.tag[2] and j == nvec - 1))
                ctx.set(dut.i.payload.tag, run.tag[3])
                ctx.set(dut.i.payload.bank, banks[run.tag[3] - 1000])
            bb = ctx.get(dut.bias_bank)
            for c in range(COLS):
                ctx.set(dut.bias[c], bias[bb][c])
            ready = rng.random() < 0.6
            ctx.set(dut.o.ready, ready)
            if ctx.get(dut.o.valid) and ready:
                p = ctx.get(dut.o.payload)
                got.append(([int(p.acc[c]) for c in range(COLS)], int(p.tag)))
            took = offer and ctx.get(dut.i.ready)
            await ctx.tick()
            k += took
            if len(got) == len(want):
                break

    sim.add_testbench(bench)
    sim.run()
    assert got == want


def test_pipeline_latency_and_bank_busy():
    """One single-vector pixel of bank 1, output always ready (module docstring: six
    stages). Taken at edge e, the vector is in stages 1-5 (registers) after edges e..e+4,
    so ``bank_busy`` is 0b10 and ``busy`` high there; its result is on ``o`` from edge
    e + 5, with acc = bias + (x - zx) . w computed here by hand: lanes 0 and 1 only
    (count 2), x = (5, -3), zx = 1 -> (4, -4); w[row 3][lane][c] = c + 1 and -(c + 1)
    -> 4 (c + 1) + 4 (c + 1) = 8 (c + 1); bias 100 c."""
    dut = NmuArray(lanes=LANES, cols=COLS, wrows=WROWS, tag_width=8, banks=2)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    seen = {}

    async def bench(ctx):
        ctx.set(dut.zx, 1)
        ctx.set(dut.o.ready, 1)
        for c in range(COLS):
            ctx.set(dut.bias[c], 100 * c)
        ctx.set(dut.w_en, 1)
        ctx.set(dut.w_bank, 1)
        ctx.set(dut.w_row, 3)
        ctx.set(dut.w_count, COLS)
        for lane, sign in ((0, 1), (1, -1)):
            ctx.set(dut.w_lane, lane)
            for c in range(COLS):
                ctx.set(dut.w_data[c], (sign * (c + 1)) & 0xFF)
            await ctx.tick()
        ctx.set(dut.w_en, 0)
        ctx.set(dut.i.payload.data, [5, (-3) & 0xFF] + [7] * (LANES - 2))
        ctx.set(dut.i.payload.count, 2)
        ctx.set(dut.i.payload.row, 3)
        ctx.set(dut.i.payload.first, 1)
        ctx.set(dut.i.payload.last, 1)
        ctx.set(dut.i.payload.tag, 42)
        ctx.set(dut.i.payload.bank, 1)
        ctx.set(dut.i.valid, 1)
        assert ctx.get(dut.i.ready)
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
        trace = []
        for _ in range(7):
            trace.append((ctx.get(dut.bank_busy), ctx.get(dut.busy), ctx.get(dut.o.valid)))
            if ctx.get(dut.o.valid):
                seen["acc"] = [ctx.get(dut.o.payload.acc[c]) for c in range(COLS)]
                seen["tag"] = ctx.get(dut.o.payload.tag)
            await ctx.tick()
        seen["trace"] = trace

    sim.add_testbench(bench)
    sim.run()
    assert seen["trace"] == [(0b10, 1, 0)] * 5 + [(0, 1, 1), (0, 0, 0)]
    assert seen["acc"] == [100 * c + 8 * (c + 1) for c in range(COLS)]
    assert seen["tag"] == 42


def test_two_results_wait_and_ready_is_a_register():
    """Output never ready: single-vector pixels (``count`` 0, so each result is the bias)
    are taken until stage 6 holds a pixel's last vector and the output queue holds two:
    2 queued + 5 in the register stages 1-5 = 7 taken, then ``i.ready`` stays low. In
    every cycle ``i.ready`` is the same whatever ``o.ready`` is (a flip-flop, module
    docstring). With ``o.ready`` high again the seven come out in order, one a cycle."""
    dut = NmuArray(lanes=LANES, cols=COLS, wrows=WROWS, tag_width=8)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    seen = {"taken": 0, "out": []}
    bias = [7 * c - 20 for c in range(COLS)]

    async def bench(ctx):
        for c in range(COLS):
            ctx.set(dut.bias[c], bias[c])
        ctx.set(dut.i.payload.count, 0)
        ctx.set(dut.i.payload.first, 1)
        ctx.set(dut.i.payload.last, 1)
        ctx.set(dut.i.valid, 1)
        for _ in range(30):
            ctx.set(dut.i.payload.tag, seen["taken"])
            readies = []
            for o_ready in (1, 0):
                ctx.set(dut.o.ready, o_ready)
                readies.append(ctx.get(dut.i.ready))
            assert readies[0] == readies[1]
            seen["taken"] += readies[1]
            await ctx.tick()
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.o.ready, 1)
        for _ in range(12):
            if ctx.get(dut.o.valid):
                p = ctx.get(dut.o.payload)
                seen["out"].append((int(p.tag), [int(p.acc[c]) for c in range(COLS)]))
            await ctx.tick()
        seen["busy"] = ctx.get(dut.busy)

    sim.add_testbench(bench)
    sim.run()
    assert seen["taken"] == 7
    assert seen["out"] == [(t, bias) for t in range(7)]
    assert not seen["busy"]
