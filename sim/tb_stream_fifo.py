"""cocotb testbench: :class:`npu.bus.stream.StreamFIFO` keeps order under stalls and back-pressure.

The model of a FIFO is a queue: the output sequence must equal the input sequence, and
``level`` never exceeds the depth. Runs with several idle/back-pressure mixes. A passive
monitor on the output must record exactly the transfers the sink took, in the same cycles;
bounded waits of the drivers end in ``StreamTimeout`` naming the stream and the cycle.
"""

from __future__ import annotations

import itertools
import json
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from sim.cocotb_streams import (
    StreamMonitor,
    StreamSink,
    StreamSource,
    StreamTimeout,
    random_pauses,
)


async def _reset(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.i__valid.value = 0  # the last test's drivers are gone, their signals are not
    dut.o__ready.value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0


async def _run(dut, idle, backpressure, count=400):
    params = json.loads(os.environ["NPU_DESIGN_PARAMS"])
    await _reset(dut)
    seed = cocotb.RANDOM_SEED
    rng = random.Random(seed)
    words = [rng.getrandbits(params["width"]) for _ in range(count)]
    taken = []
    source = StreamSource(dut, "i", dut.clk, pause_generator=random_pauses(seed + 1, idle))
    sink = StreamSink(dut, "o", dut.clk, pause_generator=random_pauses(seed + 2, backpressure),
                      callback=taken.append)
    monitor = StreamMonitor(dut, "o", dut.clk)
    max_level = 0

    async def watch_level():
        nonlocal max_level
        while True:
            await FallingEdge(dut.clk)
            await ReadOnly()
            max_level = max(max_level, int(dut.level.value))

    cocotb.start_soon(watch_level())
    for word in words:
        source.send_nowait(word)
    got = [await sink.recv() for _ in range(count)]
    await source.wait()
    mismatches = [(k, g, w) for k, (g, w) in enumerate(zip(got, words, strict=True)) if g != w]
    assert not mismatches, "first mismatch: word {}: got {:#x}, sent {:#x}".format(*mismatches[0])
    assert max_level <= params["depth"], f"level reached {max_level} > depth"
    assert monitor.transfers == taken, "the monitor saw other transfers than the sink took"
    assert [t.payload for t in taken] == got
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


@cocotb.test()
async def pause_pattern_and_recv_timeout(dut):
    """A fixed pause pattern, then a ``recv`` on an empty FIFO times out naming ``o``."""
    await _reset(dut)
    source = StreamSource(dut, "i", dut.clk, pause_generator=itertools.cycle([1, 1, 0]))
    sink = StreamSink(dut, "o", dut.clk)
    inputs = StreamMonitor(dut, "i", dut.clk)
    for word in range(10):
        await source.send(word)
    # Two pauses before each payload, the FIFO always has room: the payloads go in on
    # cycles 3, 6, ..., 30 of the drivers (started together).
    assert inputs.transfers == [(3 * (k + 1), k) for k in range(10)], inputs.transfers
    assert [await sink.recv() for _ in range(10)] == list(range(10))
    assert sink.empty()
    start = sink.cycle
    try:
        await sink.recv(timeout_cycles=20)
    except StreamTimeout as exc:
        assert (exc.stream, exc.problem) == ("o", "10 transfers, then nothing for 20 cycles")
        assert start + 19 <= exc.cycle <= start + 21, (start, exc.cycle)
    else:
        raise AssertionError("recv on an empty FIFO returned")


@cocotb.test()
async def source_timeout_reaches_the_waiter(dut):
    """The sink never takes anything: the source's payload ``depth`` is refused and
    ``wait()`` raises the source's ``StreamTimeout`` instead of hanging."""
    params = json.loads(os.environ["NPU_DESIGN_PARAMS"])
    await _reset(dut)
    source = StreamSource(dut, "i", dut.clk, timeout_cycles=30)
    StreamSink(dut, "o", dut.clk, pause_generator=itertools.repeat(1))
    for word in range(params["depth"] + 2):
        source.send_nowait(word)
    try:
        await source.wait()
    except StreamTimeout as exc:
        assert exc.stream == "i"
        assert exc.problem == f"transfer {params['depth']} not accepted in 30 cycles", exc
    else:
        raise AssertionError("a full FIFO accepted everything")
