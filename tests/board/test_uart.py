"""UART receiver and transmitter in the Amaranth simulator against a line coded in Python.

The receiver gets bytes bit-banged at its divisor (with gaps between frames and each bit
stretched or shortened by one cycle), framing errors (a low stop bit), a glitch shorter
than half a bit, and an output that is not taken (overrun); the transmitter's line is
sampled in the middle of each bit and decoded, with back-pressure on its input stream.
"""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from npu.board.uart import UartRx, UartTx

DIV = 8


def _bits(byte, stop=1):
    return [0] + [byte >> k & 1 for k in range(8)] + [stop]


def test_rx_bytes_framing_errors_and_glitches():
    rng = random.Random(1)
    dut = UartRx(DIV)
    frames = [(rng.randrange(256), 1) for _ in range(40)] + [(0x55, 0), (0xA3, 1)]
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    got = []

    async def line(ctx):
        ctx.set(dut.rx, 1)
        await ctx.tick().repeat(5)
        # a glitch of 2 cycles (< DIV/2): no byte
        ctx.set(dut.rx, 0)
        await ctx.tick().repeat(2)
        ctx.set(dut.rx, 1)
        await ctx.tick().repeat(3 * DIV)
        for byte, stop in frames:
            drift = 0  # edges off their ideal place by at most one cycle (phase jitter)
            for bit in _bits(byte, stop):
                ctx.set(dut.rx, bit)
                step = rng.choice([j for j in (-1, 0, 1) if abs(drift + j) <= 1])
                drift += step
                await ctx.tick().repeat(DIV + step)
            ctx.set(dut.rx, 1)
            await ctx.tick().repeat(rng.randrange(1, 3 * DIV))
        await ctx.tick().repeat(3 * DIV)

    async def sink(ctx):
        ctx.set(dut.data.ready, 1)
        async for _, _, valid, payload in ctx.tick().sample(dut.data.valid, dut.data.payload):
            if valid:
                got.append((payload.data, 1 - payload.error))

    sim.add_testbench(line)
    sim.add_process(sink)
    sim.run_until(1e-6 * (len(frames) * 14 * DIV + 200))
    assert got == frames


def test_rx_overrun_drops_the_new_byte():
    dut = UartRx(DIV)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    seen = {"overrun": 0, "data": []}

    async def bench(ctx):
        ctx.set(dut.rx, 1)
        ctx.set(dut.data.ready, 0)
        await ctx.tick().repeat(4)
        for byte in (0x12, 0x34):
            for bit in _bits(byte):
                ctx.set(dut.rx, bit)
                for _ in range(DIV):
                    await ctx.tick()
                    seen["overrun"] += ctx.get(dut.overrun)
        await ctx.tick().repeat(DIV)
        assert ctx.get(dut.data.valid)
        seen["data"].append(ctx.get(dut.data.payload.data))

    sim.add_testbench(bench)
    sim.run()
    assert seen == {"overrun": 1, "data": [0x12]}


@pytest.mark.parametrize("backpressure", [0.0, 0.5])
def test_tx_line_decodes_to_the_bytes(backpressure):
    rng = random.Random(2)
    dut = UartTx(DIV)
    data = [rng.randrange(256) for _ in range(30)]
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    decoded = []

    async def source(ctx):
        for byte in data:
            while rng.random() < backpressure:
                await ctx.tick()
            ctx.set(dut.data.payload, byte)
            ctx.set(dut.data.valid, 1)
            for _ in range(12 * DIV):       # a frame's time, bounded
                if ctx.get(dut.data.ready):
                    break
                await ctx.tick()
            else:
                raise AssertionError("the transmitter never took the byte")
            await ctx.tick()
            ctx.set(dut.data.valid, 0)

    async def receiver(ctx):
        cycles = 0
        while len(decoded) < len(data):
            *_, line = await ctx.tick().sample(dut.tx)
            cycles += 1
            assert cycles < 40 * DIV * len(data), "the transmitter stopped"
            if line:
                continue
            # start bit seen: sample each bit in its middle
            await ctx.tick().repeat(DIV // 2 - 1)
            assert ctx.get(dut.tx) == 0, "start bit too short"
            value = 0
            for k in range(8):
                await ctx.tick().repeat(DIV)
                value |= ctx.get(dut.tx) << k
            await ctx.tick().repeat(DIV)
            assert ctx.get(dut.tx) == 1, "stop bit low"
            decoded.append(value)

    sim.add_testbench(source)
    sim.add_testbench(receiver)
    sim.run()
    assert decoded == data


def test_divisor_is_checked():
    with pytest.raises(ValueError, match="UART divisor"):
        UartRx(3)
    with pytest.raises(ValueError, match="UART divisor"):
        UartTx(2.5)


def test_divisor_edges():
    assert UartRx(4).divisor == 4 and UartTx(4).divisor == 4     # the least allowed
    for bad in (3, 0, -8, 4.0, True, "8"):
        with pytest.raises(ValueError, match=f"must be an integer >= 4, not {bad!r}"):
            UartRx(bad)


def _pinned_line(byte, d):
    """The rx line of one frame, cycle by cycle, where each data and stop bit holds its
    value only at its middle (``d // 2`` cycles after the bit starts on the pin) and the
    opposite value in every other cycle: only a receiver that samples exactly there reads
    ``byte`` with a good stop bit. The start bit is low throughout."""
    out = [0] * d
    for bit in _bits(byte)[1:]:
        out += [bit if k == d // 2 else 1 - bit for k in range(d)]
    return out + [1] * (2 * d)


@pytest.mark.parametrize("d", [8, 9, 16])
@pytest.mark.parametrize("lead", [0, 3])
def test_rx_samples_each_bit_at_its_middle(d, lead):
    # lead 0: the start bit begins in the first cycle after reset (the synchroniser's
    # reset value is the idle line, so no edge is seen before the real one)
    dut = UartRx(d)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    got = []
    data = [0xA5, 0x5A, 0x00, 0xFF, 0x81]

    async def bench(ctx):
        ctx.set(dut.data.ready, 1)
        ctx.set(dut.rx, 1)
        for _ in range(lead):
            await ctx.tick()
        for byte in data:
            for level in _pinned_line(byte, d):
                ctx.set(dut.rx, level)
                await ctx.tick()
                if ctx.get(dut.data.valid):
                    got.append((ctx.get(dut.data.payload.data),
                                ctx.get(dut.data.payload.error)))

    sim.add_testbench(bench)
    sim.run()
    assert got == [(b, 0) for b in data]


def test_rx_idle_line_receives_nothing():
    # rx never driven (its reset value is the idle line) and then held high: no byte
    dut = UartRx(DIV)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    seen = []

    async def bench(ctx):
        ctx.set(dut.data.ready, 1)
        for _ in range(30 * DIV):
            await ctx.tick()
            seen.append((ctx.get(dut.data.valid), ctx.get(dut.overrun)))

    sim.add_testbench(bench)
    sim.run()
    assert set(seen) == {(0, 0)}


@pytest.mark.parametrize("d", [4, 8])
@pytest.mark.parametrize("gaps", [False, True])
def test_tx_line_cycle_by_cycle(d, gaps):
    # the expected line from the handshakes alone: a byte taken in cycle h is sent in
    # cycles h+1 .. h+10d, ten bits of d cycles each (start 0, data LSB first, stop 1);
    # the line is high in every other cycle, and a byte is taken only while nothing is
    # being sent (ready high exactly outside the frames)
    rng = random.Random(d * 2 + gaps)
    dut = UartTx(d)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    data = [rng.randrange(256) for _ in range(12)]
    trace = []          # per cycle: (tx, ready, byte taken or None)

    async def bench(ctx):
        pending = list(data)
        for _ in range(12 * 10 * d + 40 * d):
            want = bool(pending) and not (gaps and rng.random() < 0.3)
            ctx.set(dut.data.valid, want)
            if pending:
                ctx.set(dut.data.payload, pending[0])
            tx, ready = ctx.get(dut.tx), ctx.get(dut.data.ready)
            taken = pending.pop(0) if want and ready else None
            trace.append((tx, ready, taken))
            await ctx.tick()
        assert not pending, "the transmitter stopped taking bytes"

    sim.add_testbench(bench)
    sim.run()
    expect = [1] * len(trace)
    busy = [False] * len(trace)
    for h, (_, _, taken) in enumerate(trace):
        if taken is not None:
            for k, bit in enumerate(_bits(taken)):
                for c in range(d):
                    at = h + 1 + k * d + c
                    if at < len(trace):
                        expect[at], busy[at] = bit, True
    assert [t for t, _, _ in trace] == expect
    assert [r for _, r, _ in trace] == [int(not b) for b in busy]
    assert [b for *_, b in trace if b is not None] == data
