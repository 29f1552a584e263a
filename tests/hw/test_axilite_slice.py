""":class:`npu.bus.csr.AxiLiteSlice` in front of :class:`npu.bus.csr.AxiLiteCsr`, in the
Amaranth simulator, against :class:`npu.bus.csr.CsrModel`.

A writer and a reader run at once with random gaps between their AW, W and AR beats and
random back-pressure on B and R; each response must equal the model's, and the registers
read back at the end must equal the model's values. The same traffic without the slice
must give the same responses (the slice only adds latency), and with the slice each
transaction must take longer (it is really in the path).
"""

from __future__ import annotations

import random

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from npu.bus.csr import AxiLiteCsr, AxiLiteSlice, CsrModel, Reg, RegisterMap, axi_lite_signature

MAP = RegisterMap([Reg("a", 0x0, "rw", init=0x1234), Reg("b", 0x4, "rw"),
                   Reg("c", 0x8, "rw", init=0xCAFE), Reg("st", 0xC, "ro"),
                   Reg("go", 0x10, "pulse")])
RO = {"st": 0x5A5A0001}


class Harness(wiring.Component):
    def __init__(self, sliced):
        self.sliced = sliced
        super().__init__({"bus": wiring.Out(axi_lite_signature(MAP.addr_width))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.csr = csr = AxiLiteCsr(MAP)
        m.d.comb += csr.regs.st.eq(RO["st"])
        if self.sliced:
            m.submodules.slice = sl = AxiLiteSlice(MAP.addr_width)
            wiring.connect(m, wiring.flipped(self.bus), sl.sub)
            wiring.connect(m, sl.man, csr.bus)
        else:
            wiring.connect(m, wiring.flipped(self.bus), csr.bus)
        return m


async def _gap(ctx, rng, p):
    while rng.random() < p:
        await ctx.tick()


async def _handshake(ctx, valid, ready):
    ctx.set(valid, 1)
    for _ in range(100):
        *_, r = await ctx.tick().sample(ready)
        if r:
            break
    else:
        raise AssertionError(f"{valid.name} not taken in 100 cycles")
    ctx.set(valid, 0)


async def _response(ctx, rng, valid, ready, fields, p):
    for _ in range(200):
        await _gap(ctx, rng, p)
        ctx.set(ready, 1)
        sampled = await ctx.tick().sample(valid, *fields)   # (clk, rst, valid, *fields)
        ctx.set(ready, 0)
        if sampled[2]:
            return list(sampled[3:])
    raise AssertionError(f"no {valid.name} in 200 cycles")


def _run(writes, reads, *, sliced, seed, p=0.4):
    dut = Harness(sliced)
    bus = dut.bus
    rng_w, rng_r = random.Random(seed), random.Random(seed + 1000)
    got_w, got_r, final, cycles, finished = [], [], {}, [], []

    async def writer(ctx):
        for addr, value, strb in writes:
            start = now[0]
            ctx.set(bus.awaddr, addr)
            ctx.set(bus.wdata, value)
            ctx.set(bus.wstrb, strb)
            # AW first or W first, at random
            order = [(bus.awvalid, bus.awready), (bus.wvalid, bus.wready)]
            rng_w.shuffle(order)
            for valid, ready in order:
                await _gap(ctx, rng_w, p)
                await _handshake(ctx, valid, ready)
            (resp,) = await _response(ctx, rng_w, bus.bvalid, bus.bready, [bus.bresp], p)
            got_w.append(resp)
            cycles.append(now[0] - start)
        finished.append("writer")

    async def reader(ctx):
        for addr in reads:
            await _gap(ctx, rng_r, p)
            ctx.set(bus.araddr, addr)
            await _handshake(ctx, bus.arvalid, bus.arready)
            data, resp = await _response(ctx, rng_r, bus.rvalid, bus.rready,
                                         [bus.rdata, bus.rresp], p)
            got_r.append((data, resp))
        finished.append("reader")

    now = [0]

    async def counter(ctx):
        async for _ in ctx.tick():
            now[0] += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_process(counter)
    sim.add_testbench(writer)
    sim.add_testbench(reader)

    async def readback(ctx):
        # after both: every register once more, no gaps
        for _ in range(100_000):
            if sorted(finished) == ["reader", "writer"]:
                break
            await ctx.tick()
        else:
            raise AssertionError("the writer and the reader did not finish")
        for reg in MAP.regs:
            ctx.set(bus.araddr, reg.offset)
            await _handshake(ctx, bus.arvalid, bus.arready)
            final[reg.name] = tuple(await _response(ctx, rng_r, bus.rvalid, bus.rready,
                                                    [bus.rdata, bus.rresp], 0.0))

    sim.add_testbench(readback)
    sim.run()
    return got_w, got_r, final, cycles


def _traffic(seed):
    rng = random.Random(seed)
    # the writer touches a, b, go and an unmapped word; the reader reads c, st, unmapped
    # and the pulse register, which the writer never changes, so their order cannot matter
    writes = [(rng.choice([0x0, 0x4, 0x10, 0x14, 0x3FC]), rng.randrange(1 << 32),
               rng.randrange(16)) for _ in range(25)]
    reads = [rng.choice([0x8, 0xC, 0x10, 0x18]) for _ in range(25)]
    return writes, reads


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_slice_against_the_model_under_stalls(seed):
    writes, reads = _traffic(seed)
    model = CsrModel(MAP)
    want_w = [model.write(a, v, s) for a, v, s in writes]
    want_r = [model.read(a, RO) for a in reads]
    want_final = {reg.name: model.read(reg.offset, RO) for reg in MAP.regs}
    got_w, got_r, final, cycles = _run(writes, reads, sliced=True, seed=seed)
    assert got_w == want_w
    assert got_r == want_r
    assert final == want_final
    # the same traffic straight into the bank: the same answers, in fewer cycles
    got_w0, got_r0, final0, cycles0 = _run(writes, reads, sliced=False, seed=seed)
    assert (got_w0, got_r0, final0) == (got_w, got_r, final)
    assert sum(cycles) > sum(cycles0)


def test_slice_keeps_one_write_a_cycle_per_channel_without_stalls():
    # no gaps: a write is AW and W in one cycle each, B two cycles later through the slice
    writes = [(0x0, 0x11, 0xF), (0x4, 0x22, 0xF)]
    got_w, _, final, cycles = _run(writes, [0xC], sliced=True, seed=0, p=0.0)
    assert got_w == [0, 0] and final["a"] == (0x11, 0) and final["b"] == (0x22, 0)
    _, _, _, cycles0 = _run(writes, [0xC], sliced=False, seed=0, p=0.0)
    # two more cycles per write: one into the bank, one back
    assert [c - c0 for c, c0 in zip(cycles, cycles0, strict=True)] == [2, 2]
