""":class:`npu.bus.csr.AxiLiteCsr`'s ports and pulses, in the Amaranth simulator, against
:class:`npu.bus.csr.CsrModel`.

The slice test (``test_axilite_slice.py``) compares bus responses and read-back values;
here the register ports themselves are watched: a ``pulse`` register's output is high for
exactly the one cycle after each write the model counts as a trigger (bit 0 written as 1
with byte strobe 0) and never otherwise, each ``rw`` port holds the model's value after
every write, and a ``pulse`` register reads 0 even in the cycle its output is high.
"""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from npu.bus.csr import AxiLiteCsr, CsrModel, Reg, RegisterMap

MAP = RegisterMap([Reg("a", 0x0, "rw", init=0x1234), Reg("st", 0x4, "ro"),
                   Reg("go", 0x8, "pulse"), Reg("b", 0xC, "rw")])
RO = {"st": 0x00C0FFEE}


def _sim(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


async def _write(ctx, dut, addr, value, strb, gap):
    """One write, AW and W together; returns ``(bresp, b_cycle, pulses)``: the B response,
    the cycle B was valid in and the cycles in which ``go`` was high, both counted from
    the AW/W handshake, until ``gap`` idle cycles after B was taken."""
    bus = dut.bus
    ctx.set(bus.awaddr, addr)
    ctx.set(bus.wdata, value)
    ctx.set(bus.wstrb, strb)
    ctx.set(bus.awvalid, 1)
    ctx.set(bus.wvalid, 1)
    await ctx.tick()                      # both buffers were empty: taken at this edge
    ctx.set(bus.awvalid, 0)
    ctx.set(bus.wvalid, 0)
    pulses = []
    ctx.set(bus.bready, 1)
    for cycle in range(1, 51):
        *_, go, bvalid, bresp = await ctx.tick().sample(dut.regs.go, bus.bvalid, bus.bresp)
        if go:
            pulses.append(cycle)
        if bvalid:
            b_cycle = cycle
            break
    else:
        raise AssertionError(f"no B for the write to {addr:#x} in 50 cycles")
    ctx.set(bus.bready, 0)
    for _ in range(gap):
        cycle += 1
        *_, go = await ctx.tick().sample(dut.regs.go)
        if go:
            pulses.append(cycle)
    return bresp, b_cycle, pulses


@pytest.mark.parametrize("seed", [0, 1])
def test_ports_and_pulses_follow_the_model(seed):
    dut = AxiLiteCsr(MAP)
    rng = random.Random(seed)
    model = CsrModel(MAP)
    # writes to every register and an unmapped word; go mostly with bit 0 set, so that
    # the strobe's and the value's bit 0 each decide it
    writes = []
    for _ in range(60):
        addr = rng.choice([0x0, 0x4, 0x8, 0x8, 0x8, 0xC, 0x10])
        value = rng.randrange(1 << 32) | (rng.random() < 0.7)
        writes.append((addr, value, rng.randrange(16), rng.randrange(3)))

    async def bench(ctx):
        ctx.set(dut.regs.st, RO["st"])
        triggered = 0
        for addr, value, strb, gap in writes:
            want = model.write(addr, value, strb)
            bresp, b_cycle, pulses = await _write(ctx, dut, addr, value, strb, gap)
            assert bresp == want, (addr, value, strb)
            fired = len(model.pulses) > triggered
            triggered = len(model.pulses)
            # the write is performed at the edge after the handshake, with B: ``go`` is
            # high in the cycle B is valid in (the second), and in no other
            assert b_cycle == 2
            assert pulses == ([b_cycle] if fired else []), (addr, value, strb, pulses)
            assert ctx.get(dut.regs.a) == model.values["a"]
            assert ctx.get(dut.regs.b) == model.values["b"]
        assert 5 < triggered < len(writes)   # both outcomes were exercised

    _sim(dut, bench)


def test_a_pulse_register_reads_zero_while_it_pulses():
    dut = AxiLiteCsr(MAP)
    bus = dut.bus
    seen = []   # (go at the AR handshake, rdata, rresp)

    async def bench(ctx):
        ctx.set(bus.araddr, MAP.offset("go"))
        ctx.set(bus.rready, 1)
        ctx.set(bus.bready, 1)
        for phase in range(3):
            # reads back to back (one every second cycle: R is taken the cycle it is
            # valid, AR waits for it), a write of go = 1 starting at each phase
            ctx.set(bus.arvalid, 1)
            for _ in range(phase):
                await ctx.tick()
            ctx.set(bus.awaddr, MAP.offset("go"))
            ctx.set(bus.wdata, 1)
            ctx.set(bus.wstrb, 0xF)
            ctx.set(bus.awvalid, 1)
            ctx.set(bus.wvalid, 1)
            for k in range(8):
                *_, go, arready, rvalid, rdata, rresp = await ctx.tick().sample(
                    dut.regs.go, bus.arready, bus.rvalid, bus.rdata, bus.rresp)
                if k == 0:
                    ctx.set(bus.awvalid, 0)
                    ctx.set(bus.wvalid, 0)
                if arready:
                    seen.append(["ar", go])
                if rvalid:
                    seen.append(["r", rdata, rresp])
            ctx.set(bus.arvalid, 0)
            for _ in range(3):
                await ctx.tick()

    _sim(dut, bench)
    # every read answered 0, OKAY; and some read was taken while go was high
    assert [s[1:] for s in seen if s[0] == "r"] == [[0, 0]] * sum(s[0] == "r" for s in seen)
    assert ["ar", 1] in seen
