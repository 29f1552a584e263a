"""cocotb testbench: :class:`npu.bus.stream.StreamFIFO` keeps order under stalls and back-pressure.

The model of a FIFO is a queue: the output sequence must equal the input sequence, and
``level`` never exceeds the depth. Runs with several idle/back-pressure mixes.
"""

from __future__ import annotations

import json
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from sim.cocotb_streams import StreamSink, StreamSource, random_pauses


async def _run(dut, idle, backpressure, count=400):
    params = json.loads(os.environ["NPU_DESIGN_PARAMS"])
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    seed = cocotb.RANDOM_SEED
    rng = random.Random(seed)
    words = [rng.getrandbits(params["width"]) for _ in range(count)]
    source = StreamSource(dut, "i", dut.clk, pauses=random_pauses(seed + 1, idle))
    sink = StreamSink(dut, "o", dut.clk, pauses=random_pauses(seed + 2, backpressure))
    max_level = 0

    async def watch_level():
        nonlocal max_level
        while True:
            await FallingEdge(dut.clk)
            await ReadOnly()
            max_level = max(max_level, int(dut.level.value))

    cocotb.start_soon(watch_level())
    cocotb.start_soon(source.send(words))
    got = await sink.recv(count)
    mismatches = [(k, g, w) for k, (g, w) in enumerate(zip(got, words, strict=True)) if g != w]
    assert not mismatches, "first mismatch: word {}: got {:#x}, sent {:#x}".format(*mismatches[0])
    assert max_level <= params["depth"], f"level reached {max_level} > depth"
    return max_level


@cocotb.test()
async def no_stalls(dut):
    await _run(dut, 0.0, 0.0)


@cocotb.test()
async def idle_and_backpressure(dut):
    level = await _run(dut, 0.3, 0.5)
    assert level >= 2, "back-pressure never filled the FIFO: the test did not stress it"


@cocotb.test()
async def heavy_backpressure(dut):
    level = await _run(dut, 0.0, 0.9)
    # With the sink mostly stalled, the FIFO must fill completely.
    params = json.loads(os.environ["NPU_DESIGN_PARAMS"])
    assert level == params["depth"], f"FIFO filled to {level}, depth {params['depth']}"
