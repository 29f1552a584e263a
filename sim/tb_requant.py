"""cocotb testbench: the requantisation stage against ``nem.numerics.requantize``.

Random accumulators (including int32 extremes) and random per-channel multipliers, with
idle cycles on the input and back-pressure on the output.
"""

from __future__ import annotations

import json
import os

import cocotb
import numpy as np
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

from nem.numerics import Requant, requant_params, requantize
from npu.cstl.requant import OUT_TYPES, param_layout
from sim.cocotb_streams import StreamSink, StreamSource, random_pauses

PARAMS = json.loads(os.environ["NPU_DESIGN_PARAMS"])
LANES, ROWS, OUT = PARAMS["lanes"], PARAMS["rows"], PARAMS["out_type"]
BITS = OUT_TYPES[OUT][0]


@cocotb.test()
async def random_accumulators_with_stalls(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    rng = np.random.default_rng(cocotb.RANDOM_SEED)
    dut.rst.value = 1
    dut.i__valid.value = 0
    dut.params__valid.value = 0
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    rq = requant_params(0.03, rng.uniform(1e-4, 0.05, size=LANES * ROWS), 0.05,
                        int(rng.integers(-20, 20)), out_dtype=OUT, activation="relu")
    dut.zero_point.value = rq.zero_point
    dut.lo.value = rq.lo
    dut.hi.value = rq.hi
    row_layout = data.StructLayout({"row": range(ROWS), "data": param_layout(LANES)})
    for row in range(ROWS):
        dut.params__payload.value = row_layout.const({"row": row, "data": [
            {"multiplier": int(rq.multiplier[row * LANES + k]),
             "shift": int(rq.shift[row * LANES + k])} for k in range(LANES)]}).as_bits()
        dut.params__valid.value = 1
        await FallingEdge(dut.clk)
    dut.params__valid.value = 0
    n = 400
    rows = rng.integers(0, ROWS, size=n)
    acc = rng.integers(-60000, 60000, size=(n, LANES))
    acc[::9] = rng.choice([-(1 << 31), (1 << 31) - 1, -1, 0], size=acc[::9].shape)
    in_layout = data.StructLayout({"acc": data.ArrayLayout(32, LANES), "row": range(ROWS)})
    payloads = [in_layout.const({"acc": [int(a) & 0xFFFFFFFF for a in acc[i]],
                                 "row": int(rows[i])}).as_bits() for i in range(n)]
    source = StreamSource(dut, "i", dut.clk,
                          pause_generator=random_pauses(cocotb.RANDOM_SEED, 0.3))
    sink = StreamSink(dut, "o", dut.clk,
                      pause_generator=random_pauses(cocotb.RANDOM_SEED + 1, 0.4))
    for payload in payloads:
        source.send_nowait(payload)
    got = [await sink.recv() for _ in range(n)]
    await source.wait()
    mask = (1 << BITS) - 1
    for i, word in enumerate(got):
        sel = slice(rows[i] * LANES, rows[i] * LANES + LANES)
        want = requantize(acc[i], Requant(rq.multiplier[sel], rq.shift[sel], rq.zero_point,
                                          rq.out_dtype, rq.activation, rq.lo, rq.hi))
        lanes = [(word >> (BITS * k)) & mask for k in range(LANES)]
        expected = [int(v) & mask for v in want]
        assert lanes == expected, f"transfer {i}: RTL {lanes} != model {expected}"
