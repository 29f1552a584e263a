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
            await ctx.tick().until(dut.data.ready)
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
