"""The board's AXI4 block RAM in the Amaranth simulator against a byte-array model.

Random INCR read and write bursts (random lengths, byte strobes and IDs, some running past
the memory's end or starting far above it) with random valid gaps, R and B taken with
random back-pressure, and host-port accesses in between, on 32-, 64- and 128-bit buses;
every read beat, response and ID is checked against the model (a bytearray: a beat past
the end answers DECERR, reads 0 and writes nothing).
"""

from __future__ import annotations

import random

import pytest
from amaranth import Shape
from amaranth.sim import Simulator

from npu.board.axiram import RESP_DECERR, AxiRam, host_port_signature
from npu.bus.axi import axi4_signature

SIZE = 1024
WB = 8  # bytes per beat (64-bit bus)


def _bursts(rng, n, wb=WB):
    out = []
    for _ in range(n):
        beats = rng.choice((1, 2, 3, 7, 16))
        end = SIZE // wb - beats  # the last first word that stays inside
        # one burst in four ends near the memory's end, half of those past it; one in
        # twelve starts far above the memory (every beat DECERR, whatever the address's
        # high bits: none may wrap around into the memory)
        near, far = rng.random() < 0.25, rng.random() < 0.08
        if far:
            addr = rng.choice((1 << 31, 1 << 20, (1 << 32) - 16 * wb)) & ~(wb - 1)
        else:
            addr = (rng.randrange(end - 2, end + 3) if near else
                    rng.randrange(0, end + 1)) * wb
        out.append((addr, beats))
    return out


@pytest.mark.parametrize(("stall", "width"), [(0.0, 64), (0.4, 64), (0.4, 32), (0.2, 128)])
def test_random_bursts_and_host_accesses(stall, width):
    rng = random.Random(int(stall * 10) + 7 + width)
    WB = width // 8  # bytes per beat (the module constant is the 64-bit bus's)
    dut = AxiRam(size=SIZE, addr_width=32, data_width=width)
    model = bytearray(SIZE)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    axi, host = dut.axi, dut.host
    checked = {"reads": 0, "writes": 0, "host": 0, "decerr": 0}

    async def pause(ctx):
        while stall and rng.random() < stall:
            await ctx.tick()

    async def bench(ctx):
        for _ in range(100):
            kind = rng.choice(("read", "write", "host_w", "host_r"))
            await pause(ctx)
            if kind == "write":
                addr, beats = _bursts(rng, 1, WB)[0]
                tid = rng.randrange(2)
                ctx.set(axi.awid, tid)
                ctx.set(axi.awaddr, addr)
                ctx.set(axi.awlen, beats - 1)
                ctx.set(axi.awvalid, 1)
                await ctx.tick().until(axi.awready)
                ctx.set(axi.awvalid, 0)
                bad = False
                for k in range(beats):
                    await pause(ctx)
                    word = rng.getrandbits(width)
                    strb = rng.getrandbits(WB)
                    ctx.set(axi.wdata, word)
                    ctx.set(axi.wstrb, strb)
                    ctx.set(axi.wlast, k == beats - 1)
                    ctx.set(axi.wvalid, 1)
                    await ctx.tick().until(axi.wready)
                    ctx.set(axi.wvalid, 0)
                    a = addr + k * WB
                    if a + WB > SIZE:
                        bad = True
                        continue
                    for b in range(WB):
                        if strb >> b & 1:
                            model[a + b] = word >> (8 * b) & 0xFF
                await pause(ctx)
                ctx.set(axi.bready, 1)
                resp, bid = await _wait(ctx, axi.bvalid, axi.bresp, axi.bid)
                ctx.set(axi.bready, 0)
                assert resp == (RESP_DECERR if bad else 0), (addr, beats)
                assert bid == tid
                checked["writes"] += 1
                checked["decerr"] += bad
            elif kind == "read":
                addr, beats = _bursts(rng, 1, WB)[0]
                tid = rng.randrange(2)
                ctx.set(axi.arid, tid)
                ctx.set(axi.araddr, addr)
                ctx.set(axi.arlen, beats - 1)
                ctx.set(axi.arvalid, 1)
                await ctx.tick().until(axi.arready)
                ctx.set(axi.arvalid, 0)
                for k in range(beats):
                    await pause(ctx)
                    ctx.set(axi.rready, 1)
                    data, resp, last, rid = await _wait(ctx, axi.rvalid, axi.rdata,
                                                        axi.rresp, axi.rlast, axi.rid)
                    ctx.set(axi.rready, 0)
                    assert rid == tid
                    a = addr + k * WB
                    if a + WB > SIZE:
                        assert (data, resp) == (0, RESP_DECERR)
                        checked["decerr"] += 1
                    else:
                        assert resp == 0
                        assert data == int.from_bytes(model[a:a + WB], "little"), (addr, k)
                    assert last == (k == beats - 1)
                checked["reads"] += 1
            else:
                word = rng.randrange(SIZE // 4)
                ctx.set(host.addr, word)
                ctx.set(host.we, kind == "host_w")
                value = rng.getrandbits(32)
                ctx.set(host.wdata, value)
                ctx.set(host.req, 1)
                (rdata,) = await _wait(ctx, host.ack, host.rdata)
                ctx.set(host.req, 0)
                if kind == "host_w":
                    model[4 * word:4 * word + 4] = value.to_bytes(4, "little")
                else:
                    assert rdata == int.from_bytes(model[4 * word:4 * word + 4], "little")
                checked["host"] += 1

    sim.add_testbench(bench)
    sim.run()
    assert checked["reads"] and checked["writes"] and checked["host"] and checked["decerr"]


async def _wait(ctx, valid, *signals, limit=1000):
    """Tick until *valid* is high at a clock edge; the values of *signals* then."""
    for _ in range(limit):
        _, _, v, *values = await ctx.tick().sample(valid, *signals)
        if v:
            return values
    raise AssertionError(f"{valid.name} never rose in {limit} cycles")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"size": 1020}, "memory size must be a positive multiple of 8 bytes, not 1020"),
    ({"size": 0}, "memory size must be a positive multiple of 8 bytes, not 0"),
    ({"size": -8}, "memory size must be a positive multiple of 8 bytes, not -8"),
    ({"size": 1024.0}, "memory size must be a positive multiple of 8 bytes, not 1024.0"),
    ({"size": 6, "data_width": 32}, "memory size must be a positive multiple of 4 bytes"),
    ({"size": 1024, "data_width": 48}, "data_width must be a multiple of 32, not 48"),
])
def test_size_is_checked(kwargs, message):
    with pytest.raises(ValueError) as info:
        AxiRam(**kwargs)
    assert str(info.value) == message or str(info.value).startswith(message + ",")


@pytest.mark.parametrize(("size", "width", "bits"), [
    # host words (4 bytes each) and the bits to address them: ceil(log2(words)), at least 1
    (4, 32, 1), (8, 64, 1), (20, 32, 3), (40, 64, 4), (1024, 64, 8), (1028, 32, 9),
    (4096, 128, 10),
])
def test_host_port_width(size, width, bits):
    ram = AxiRam(size=size, data_width=width)
    assert ram.host_bits == bits and ram.depth == size * 8 // width
    members = ram.signature.members["host"].signature.members
    assert ram.signature.members["host"].signature == host_port_signature(bits).flip()
    # 1-bit handshakes, 32-bit words (hand-written: the bridge's word port)
    assert {n: Shape.cast(m.shape).width for n, m in members.items()} == {
        "req": 1, "we": 1, "addr": bits, "wdata": 32, "ack": 1, "rdata": 32}


def test_default_port_is_the_engines():
    """Without widths the AXI port is the engine's: 32-bit addresses, 64-bit data."""
    assert AxiRam(size=64).signature.members["axi"].signature == \
        axi4_signature(32, 64).flip()


def test_read_beats_keep_their_id_while_a_write_waits():
    """A read burst's beats held in the R FIFO (RREADY low) keep the burst's ID: a write
    burst with another ID waits until the last beat has left, then answers with its own."""
    dut = AxiRam(size=SIZE, addr_width=32, data_width=64)
    axi = dut.axi
    got = {}

    async def bench(ctx):
        ctx.set(axi.arid, 1)
        ctx.set(axi.araddr, 0x80)
        ctx.set(axi.arlen, 3)
        ctx.set(axi.arvalid, 1)
        await ctx.tick().until(axi.arready)
        ctx.set(axi.arvalid, 0)
        ctx.set(axi.awid, 0)
        ctx.set(axi.awaddr, 0x100)
        ctx.set(axi.awlen, 0)
        ctx.set(axi.awvalid, 1)
        got["rid"], got["aw_after"] = [], None

        async def tick():
            """One cycle with AW offered; note how many beats had left when it is taken."""
            *_, awready = await ctx.tick().sample(axi.awready)
            if awready and got["aw_after"] is None:
                got["aw_after"] = len(got["rid"])
                ctx.set(axi.awvalid, 0)
        for _ in range(10):                  # the beats wait in the FIFO; AW waits too
            await tick()
        for _ in range(4):                   # each beat taken, then two cycles without
            ctx.set(axi.rready, 1)
            for _ in range(20):
                *_, rvalid, rid = await ctx.tick().sample(axi.rvalid, axi.rid)
                if rvalid:
                    got["rid"].append(rid)
                    break
            ctx.set(axi.rready, 0)
            for _ in range(2):
                await tick()
        for _ in range(10):
            if got["aw_after"] is not None:
                break
            await tick()
        ctx.set(axi.wdata, 5)
        ctx.set(axi.wstrb, 0xFF)
        ctx.set(axi.wlast, 1)
        ctx.set(axi.wvalid, 1)
        await _wait(ctx, axi.wready)
        ctx.set(axi.wvalid, 0)
        ctx.set(axi.bready, 1)
        got["b"] = await _wait(ctx, axi.bvalid, axi.bresp, axi.bid)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == {"aw_after": 4, "rid": [1, 1, 1, 1], "b": [0, 0]}


def test_concurrent_reads_and_writes_take_turns():
    """A reader and a writer at once (as the engine's port does), on separate halves: both
    finish, every read beat matches, and neither starves (the turns alternate)."""
    rng = random.Random(3)
    half = SIZE // 2
    init = bytes(rng.randrange(256) for _ in range(half))
    dut = AxiRam(size=SIZE, addr_width=32, data_width=64)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    axi = dut.axi
    written = bytearray(half)
    order = []

    async def preload(ctx):
        for k in range(0, half, 4):
            ctx.set(dut.host.addr, k // 4)
            ctx.set(dut.host.we, 1)
            ctx.set(dut.host.wdata, int.from_bytes(init[k:k + 4], "little"))
            ctx.set(dut.host.req, 1)
            await _wait(ctx, dut.host.ack)
        ctx.set(dut.host.req, 0)

    async def reader(ctx):
        await ctx.tick().repeat(half)  # after the preload (3 cycles a word)
        for n in range(8):
            beats = 4
            addr = n * beats * WB
            ctx.set(axi.araddr, addr)
            ctx.set(axi.arlen, beats - 1)
            ctx.set(axi.arvalid, 1)
            await ctx.tick().until(axi.arready)
            ctx.set(axi.arvalid, 0)
            order.append("r")
            ctx.set(axi.rready, 1)
            for k in range(beats):
                data, resp = await _wait(ctx, axi.rvalid, axi.rdata, axi.rresp)
                a = addr + k * WB
                assert resp == 0 and data == int.from_bytes(init[a:a + WB], "little")
            ctx.set(axi.rready, 0)

    async def writer(ctx):
        await ctx.tick().repeat(half)  # after the preload (3 cycles a word)
        for n in range(8):
            beats = 4
            addr = half + n * beats * WB
            ctx.set(axi.awaddr, addr)
            ctx.set(axi.awlen, beats - 1)
            ctx.set(axi.awvalid, 1)
            await ctx.tick().until(axi.awready)
            ctx.set(axi.awvalid, 0)
            order.append("w")
            for k in range(beats):
                word = rng.getrandbits(64)
                ctx.set(axi.wdata, word)
                ctx.set(axi.wstrb, 0xFF)
                ctx.set(axi.wlast, k == beats - 1)
                ctx.set(axi.wvalid, 1)
                await ctx.tick().until(axi.wready)
                a = n * beats * WB + k * WB
                written[a:a + WB] = word.to_bytes(WB, "little")
            ctx.set(axi.wvalid, 0)
            ctx.set(axi.bready, 1)
            (resp,) = await _wait(ctx, axi.bvalid, axi.bresp)
            ctx.set(axi.bready, 0)
            assert resp == 0

    async def check(ctx):
        await ctx.tick().repeat(3000)
        for k in range(0, half, 4):
            ctx.set(dut.host.addr, (half + k) // 4)
            ctx.set(dut.host.we, 0)
            ctx.set(dut.host.req, 1)
            (value,) = await _wait(ctx, dut.host.ack, dut.host.rdata)
            ctx.set(dut.host.req, 0)
            await ctx.tick()
            assert value == int.from_bytes(written[k:k + 4], "little"), k

    sim.add_testbench(preload)
    sim.add_testbench(reader)
    sim.add_testbench(writer)
    sim.add_testbench(check)
    sim.run()
    assert sorted(order) == ["r"] * 8 + ["w"] * 8
    # both were waiting from the start: the grants alternate
    assert order[:6] in (["r", "w"] * 3, ["w", "r"] * 3)


def test_a_read_burst_streams_a_beat_per_cycle():
    """With RREADY held high a burst's beats come on consecutive cycles (the block RAM
    reads ahead into the R channel's FIFO without waiting on RREADY), and a burst held
    back by RREADY low loses no beat and repeats none."""
    dut = AxiRam(size=SIZE, addr_width=32, data_width=64)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    axi = dut.axi
    words = [0x0101010101010101 * (k + 1) for k in range(16)]
    seen = {}

    async def bench(ctx):
        for k, w in enumerate(words):         # the data, through the write channel
            ctx.set(axi.awaddr, 0x40)
            ctx.set(axi.awlen, 15)
            if k == 0:
                ctx.set(axi.awvalid, 1)
                await ctx.tick().until(axi.awready)
                ctx.set(axi.awvalid, 0)
            ctx.set(axi.wdata, w)
            ctx.set(axi.wstrb, 0xFF)
            ctx.set(axi.wlast, k == 15)
            ctx.set(axi.wvalid, 1)
            await ctx.tick().until(axi.wready)
        ctx.set(axi.wvalid, 0)
        ctx.set(axi.bready, 1)
        await _wait(ctx, axi.bvalid)
        ctx.set(axi.bready, 0)
        for label, pattern in (("streaming", [1]), ("held back", [1, 0, 0, 1, 0])):
            ctx.set(axi.araddr, 0x40)
            ctx.set(axi.arlen, 15)
            ctx.set(axi.arvalid, 1)
            await ctx.tick().until(axi.arready)
            ctx.set(axi.arvalid, 0)
            got, cycles, first = [], 0, None
            while len(got) < 16:
                ready = pattern[cycles % len(pattern)]
                ctx.set(axi.rready, ready)
                _, _, v, d, last = await ctx.tick().sample(axi.rvalid, axi.rdata, axi.rlast)
                if v and ready:
                    first = cycles if first is None else first
                    got.append(d)
                    assert last == (len(got) == 16)
                cycles += 1
                assert cycles < 200
            ctx.set(axi.rready, 0)
            seen[label] = (got, cycles - first)

    sim.add_testbench(bench)
    sim.run()
    assert seen["streaming"] == (words, 16)
    assert seen["held back"][0] == words
