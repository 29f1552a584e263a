"""The copy units' handshakes, idle behaviour and corner cases, against the region model.

``tests/hw/test_engine_units.py`` copies random regions under random stalls. This file
adds what a unit must also get right and what those runs never reach (each found by
``make mutate``: a mutant of ``npu.engine.copy_units`` that the random copies let live):

* the ``start`` handshake: ``ready`` is low while busy, the command is taken only with
  ``valid``, and the payload is junk once taken (the unit must not read it after the
  start cycle); idle gaps between commands;
* an idle unit asks for nothing (no port request, no AXI command or write data);
* every ``go`` has its grant (reads and writes), and the DMA's ``stall`` is exactly
  "busy and a request of this cycle was not granted";
* memories deeper than ``RegionCopy``'s default depth (1,024 words): an L2 of 2,048
  words, a DDR window above 64 KiB;
* a copy with a zero count (done at once, nothing moved);
* the sDMA's third and fourth dimensions of three and up to five (a row counter that
  steps by two or backwards, or a one-bit one, is caught), rows of three AXI bursts
  (256 words each) while the bus is slow to take commands, write responses that come
  late (two bursts often wait at once: a one-bit count of them is caught), are
  taken only with ``ready``, and some with an error (the task's ``error``); ``stall``
  low in the cycles the copy moves;
* the units' default address width and the sDMA's AXI streams connecting to the engine's
  AXI muxes.
"""

from __future__ import annotations

import random

from amaranth import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from npu.bus.dma import copy_region_model
from npu.bus.ports import AxiReadMux, AxiWriteMux
from npu.engine.copy_units import DmaUnit, SdmaUnit, level_code, unit_command_layout
from tests.hw.test_engine_units import WB, WIDTH, _word, _write

LAYOUT = unit_command_layout(32)

def _region(rng, n0_max, dims, stride_pad):
    """Counts and source/destination strides of a random region copy (no overlap of
    rows within a side); one count in eight is zero."""
    n0 = rng.randint(1, n0_max)
    counts = [n0] + [rng.randint(1, d) for d in dims]
    if rng.random() < 1 / 8:
        counts[rng.randrange(4)] = 0
    strides = []
    for _side in range(2):
        s = [max(counts[0], 1) + rng.randint(0, stride_pad), 0, 0]
        s[1] = s[0] * max(counts[1], 1) + rng.randint(0, stride_pad)
        s[2] = s[1] * max(counts[2], 1) + rng.randint(0, stride_pad)
        strides.append(s)
    return counts, strides[0], strides[1]


def _extent(counts, strides):
    if 0 in counts:
        return 0
    return counts[0] + sum((c - 1) * s for c, s in zip(counts[1:], strides, strict=True))


def _junk(rng):
    """A random start payload (what the bus holds once the command has been taken)."""
    return LAYOUT.const({
        "copy": {"src": rng.getrandbits(32), "dst": rng.getrandbits(32),
                 "count": [rng.getrandbits(16) for _ in range(4)],
                 "src_stride": [rng.getrandbits(32) for _ in range(3)],
                 "dst_stride": [rng.getrandbits(32) for _ in range(3)]},
        "src_level": rng.randrange(3), "dst_level": rng.randrange(3)})


def _same(name, got, exp, what):
    bad = [k for k in range(len(got)) if got[k] != exp[k]]
    assert not bad, (f"{name} byte {bad[0]}: {got[bad[0]]:#04x}, expected "
                     f"{exp[bad[0]]:#04x} ({what})")


def test_dma_unit_handshakes_idle_and_deep_l2():
    """DmaUnit: the start handshake with junk after it and idle gaps, nothing asked for
    while idle, go only with a grant, ``stall`` exact, an L2 deeper than 1,024 words."""
    l1_depth, l2_depth = 64, 2048
    dut = DmaUnit(data_width=WIDTH, l1_depth=l1_depth, l2_depth=l2_depth, addr_width=32)
    rng = random.Random(21)
    depth = {"L1": l1_depth, "L2": l2_depth}
    mems = {k: bytearray(rng.randbytes(d * WB)) for k, d in depth.items()}
    ports = {"L1": (dut.l1_rd, dut.l1_wr), "L2": (dut.l2_rd, dut.l2_wr)}
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    def command():
        while True:
            src_level, dst_level = rng.choice(["L1", "L2"]), rng.choice(["L1", "L2"])
            counts, ss, ds = _region(rng, 18, (3, 2, 2), 5)
            es, ed = _extent(counts, ss), _extent(counts, ds)
            size = {k: d * WB for k, d in depth.items()}
            if src_level == dst_level:   # source in the lower half, destination above
                half = size[src_level] // 2
                if es > half or ed > half:
                    continue
                src = rng.randint(0, half - es)
                dst = rng.randint(half, size[dst_level] - ed)
            else:
                if es > size[src_level] or ed > size[dst_level]:
                    continue
                src = rng.randint(0, size[src_level] - es)
                dst = rng.randint(0, size[dst_level] - ed)
            if dst_level == "L2" and rng.random() < 0.5 and ed <= size["L2"] // 2:
                # above word 1,024 of L2 (unless the source is there too)
                if src_level != "L2":
                    dst = rng.randint(size["L2"] // 2, size["L2"] - ed)
            return src_level, dst_level, src, dst, counts, ss, ds

    async def bench(ctx):
        held = {"L1": 0, "L2": 0}
        stalls = high_l2 = zero = 0
        ctx.set(dut.done.ready, 1)

        async def cycle(started):
            """One cycle: grants at random, the port checks, the memories' updates."""
            nonlocal stalls
            busy = ctx.get(dut.busy)
            if busy:
                assert not ctx.get(dut.start.ready), "start.ready while busy"
            denied = False
            for rd, wr in ports.values():
                for port in (rd, wr):
                    req = ctx.get(port.req)
                    assert busy or not req, "a request while idle"
                    gnt = req and rng.random() > 0.33
                    ctx.set(port.gnt, gnt)
                    denied |= bool(req and not gnt)
            reads, writes = {}, []
            for level, (rd, wr) in ports.items():
                if ctx.get(rd.go):
                    assert ctx.get(rd.gnt), "read go without a grant"
                    reads[level] = _word(mems[level], ctx.get(rd.addr))
                if ctx.get(wr.go):
                    assert ctx.get(wr.gnt), "write go without a grant"
                    writes.append((level, ctx.get(wr.addr), ctx.get(wr.data), ctx.get(wr.en)))
            assert ctx.get(dut.stall) == (busy and denied), (
                f"stall {ctx.get(dut.stall)}, busy {busy}, a request denied {denied}")
            stalls += denied
            done = started and ctx.get(dut.done.valid)
            if done:
                assert ctx.get(dut.done.payload.error) == 0
            await ctx.tick()
            for level, addr, wdata, en in writes:
                _write(mems[level], addr, wdata, en)
            for level, value in reads.items():
                held[level] = value
            for level, (rd, _) in ports.items():
                ctx.set(rd.data, held[level])
            return done

        for _ in range(40):
            for _gap in range(rng.randint(0, 3)):   # idle, no command offered
                ctx.set(dut.start.valid, 0)
                ctx.set(dut.start.payload, _junk(rng))
                assert not ctx.get(dut.busy)
                await cycle(False)
                assert not ctx.get(dut.busy), "busy without a command"
            src_level, dst_level, src, dst, counts, ss, ds = command()
            high_l2 += dst_level == "L2" and dst >= 1024 * WB
            zero += 0 in counts
            want = {k: bytearray(v) for k, v in mems.items()}
            copy_region_model(want[src_level], want[dst_level], src=src, dst=dst,
                              count=counts, src_stride=ss, dst_stride=ds)
            ctx.set(dut.start.payload, LAYOUT.const({
                "copy": {"src": src, "dst": dst, "count": counts, "src_stride": ss,
                         "dst_stride": ds},
                "src_level": level_code(src_level), "dst_level": level_code(dst_level)}))
            ctx.set(dut.start.valid, 1)
            started = done = False
            for _cycle in range(5000):
                taken = not started and ctx.get(dut.start.valid) and ctx.get(dut.start.ready)
                done = await cycle(started)
                if taken:
                    started = True
                    ctx.set(dut.start.valid, 0)
                if started:
                    ctx.set(dut.start.payload, _junk(rng))
                if done:
                    break
            assert done, "the copy did not finish"
            what = (f"{src_level}->{dst_level} src {src} dst {dst} counts {counts} "
                    f"strides {ss} {ds}")
            for level in ("L1", "L2"):
                _same(level, mems[level], want[level], what)
        assert stalls > 200, f"only {stalls} stalled cycles: the denial did not bite"
        assert high_l2 >= 5 and zero >= 2, (high_l2, zero)

    sim.add_testbench(bench)
    sim.run()


DDR_BASE, DDR_BYTES = 0x0001_0000, 8192


def test_sdma_unit_handshakes_bursts_errors_and_high_ddr():
    """SdmaUnit: four dimensions, rows over one burst, late and failing write responses,
    a DDR window above 64 KiB, zero counts, the start handshake, nothing asked while idle."""
    l2_depth = 1024
    dut = SdmaUnit(data_width=WIDTH, l2_depth=l2_depth, addr_width=32)
    rng = random.Random(22)
    ddr = bytearray(rng.randbytes(DDR_BYTES))
    l2 = bytearray(rng.randbytes(l2_depth * WB))
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    def command():
        while True:
            to_ddr = rng.random() < 0.5
            if rng.random() < 0.2:   # one long row: three bursts (256 + 256 + the rest)
                counts, ss, ds = [rng.randint(2100, 3000), 1, 1, 1], [0, 0, 0], [0, 0, 0]
            else:
                counts, ss, ds = _region(rng, 24, (2, 3, 5), 5)
            l2_size = l2_depth * WB
            src_size, dst_size = (l2_size, DDR_BYTES) if to_ddr else (DDR_BYTES, l2_size)
            es, ed = _extent(counts, ss), _extent(counts, ds)
            if es > src_size or ed > dst_size:
                continue
            src, dst = rng.randint(0, src_size - es), rng.randint(0, dst_size - ed)
            if to_ddr:
                dst += DDR_BASE
            else:
                src += DDR_BASE
            return to_ddr, src, dst, counts, ss, ds

    def ddr_word(addr):
        k = addr // WB - DDR_BASE // WB
        assert 0 <= k < DDR_BYTES // WB, f"DDR address {addr:#x} outside the window"
        return k

    async def bench(ctx):
        held = 0
        stalls = long_rows = errors = three_d = four_d = zero = 0
        moving = [0]     # busy cycles without a stall
        ctx.set(dut.done.ready, 1)
        state = {"reads": [], "write_cmd": None, "responses": [], "error": False}

        async def cycle(started):
            """One cycle of the DDR side (random idle and back-pressure, write responses
            late and sometimes with an error) and of L2 (random denial)."""
            nonlocal held, stalls
            st = state
            busy = ctx.get(dut.busy)
            if busy:
                assert not ctx.get(dut.start.ready), "start.ready while busy"
            else:
                for sig in (dut.l2_rd.req, dut.l2_wr.req, dut.rd_cmd.valid, dut.wr_cmd.valid,
                            dut.wr_data.valid):
                    assert not ctx.get(sig), f"{sig.name} while idle"
            take_rd_cmd = not st["reads"] and rng.random() < 0.6
            ctx.set(dut.rd_cmd.ready, take_rd_cmd)
            take_wr_cmd = st["write_cmd"] is None and rng.random() < 0.6
            ctx.set(dut.wr_cmd.ready, take_wr_cmd)
            give = bool(st["reads"]) and rng.random() < 0.7
            ctx.set(dut.rd_data.valid, give)
            if give:
                ctx.set(dut.rd_data.payload.data, st["reads"][0])
            accept = st["write_cmd"] is not None and rng.random() < 0.7
            ctx.set(dut.wr_data.ready, accept)
            # a write response once its burst is written, after 0-16 cycles (two bursts often
            # wait for theirs at once)
            resp = st["responses"][0] if st["responses"] else None
            respond = resp is not None and resp[0] <= 0
            ctx.set(dut.wr_done.valid, respond)
            ctx.set(dut.wr_done.payload.error, respond and resp[1])
            for port in (dut.l2_rd, dut.l2_wr):
                ctx.set(port.gnt, ctx.get(port.req) and rng.random() > 0.33)
            if ctx.get(dut.l2_rd.go):
                assert ctx.get(dut.l2_rd.gnt), "L2 read go without a grant"
            if ctx.get(dut.l2_wr.go):
                assert ctx.get(dut.l2_wr.gnt), "L2 write go without a grant"
            l2_read = _word(l2, ctx.get(dut.l2_rd.addr)) if ctx.get(dut.l2_rd.go) else None
            l2_write = ((ctx.get(dut.l2_wr.addr), ctx.get(dut.l2_wr.data),
                         ctx.get(dut.l2_wr.en)) if ctx.get(dut.l2_wr.go) else None)
            rd_cmd = ((ctx.get(dut.rd_cmd.payload.addr), ctx.get(dut.rd_cmd.payload.beats))
                      if take_rd_cmd and ctx.get(dut.rd_cmd.valid) else None)
            wr_cmd = ((ctx.get(dut.wr_cmd.payload.addr), ctx.get(dut.wr_cmd.payload.beats))
                      if take_wr_cmd and ctx.get(dut.wr_cmd.valid) else None)
            popped = give and ctx.get(dut.rd_data.ready)
            wrote = None
            if accept and ctx.get(dut.wr_data.valid):
                wrote = (ctx.get(dut.wr_data.payload.data), ctx.get(dut.wr_data.payload.strb))
            took_response = respond and ctx.get(dut.wr_done.ready)
            stall = ctx.get(dut.stall)
            assert busy or not stall, "stall while idle"
            stalls += stall
            moving[0] += busy and not stall
            done = started and ctx.get(dut.done.valid)
            if done:
                assert not st["reads"] and st["write_cmd"] is None and not st["responses"], \
                    "done before every word and write response"
                assert ctx.get(dut.done.payload.error) == st["error"], (
                    f"done.error {ctx.get(dut.done.payload.error)}, a write response "
                    f"failed: {st['error']}")
            await ctx.tick()
            if l2_write:
                _write(l2, *l2_write)
            if l2_read is not None:
                held = l2_read
            ctx.set(dut.l2_rd.data, held)
            if popped:
                st["reads"].pop(0)
            if respond and took_response:
                st["error"] |= bool(resp[1])
                st["responses"].pop(0)
            for r in st["responses"]:
                r[0] -= 1
            if rd_cmd:
                addr, beats = rd_cmd
                assert addr % WB == 0 and 1 <= beats <= 256
                st["reads"] = [_word(ddr, ddr_word(addr) + k) for k in range(beats)]
            if wrote:
                addr = st["write_cmd"][0]
                _write(ddr, ddr_word(addr), *wrote)
                st["write_cmd"] = [addr + WB, st["write_cmd"][1] - 1]
                if st["write_cmd"][1] == 0:
                    st["write_cmd"] = None
                    st["responses"].append([rng.randint(0, 16), rng.random() < 0.25])
            if wr_cmd:
                assert 1 <= wr_cmd[1] <= 256
                st["write_cmd"] = list(wr_cmd)
            return done

        for _ in range(40):
            for _gap in range(rng.randint(0, 3)):
                ctx.set(dut.start.valid, 0)
                ctx.set(dut.start.payload, _junk(rng))
                await cycle(False)
                assert not ctx.get(dut.busy), "busy without a command"
            to_ddr, src, dst, counts, ss, ds = command()
            long_rows += counts[0] > 2048
            three_d += counts[2] > 2
            four_d += counts[3] > 2
            zero += 0 in counts
            want_ddr, want_l2 = bytearray(ddr), bytearray(l2)
            if to_ddr:
                copy_region_model(want_l2, want_ddr, src=src, dst=dst - DDR_BASE,
                                  count=counts, src_stride=ss, dst_stride=ds)
            else:
                copy_region_model(want_ddr, want_l2, src=src - DDR_BASE, dst=dst,
                                  count=counts, src_stride=ss, dst_stride=ds)
            src_level, dst_level = ("L2", "DDR") if to_ddr else ("DDR", "L2")
            ctx.set(dut.start.payload, LAYOUT.const({
                "copy": {"src": src, "dst": dst, "count": counts, "src_stride": ss,
                         "dst_stride": ds},
                "src_level": level_code(src_level), "dst_level": level_code(dst_level)}))
            ctx.set(dut.start.valid, 1)
            state["error"] = False
            started = done = False
            for _cycle in range(40000):
                taken = not started and ctx.get(dut.start.valid) and ctx.get(dut.start.ready)
                done = await cycle(started)
                if taken:
                    started = True
                    ctx.set(dut.start.valid, 0)
                if started:
                    ctx.set(dut.start.payload, _junk(rng))
                if done:
                    break
            assert done, "the copy did not finish"
            errors += state["error"]
            what = f"{src_level}->{dst_level} src {src:#x} dst {dst:#x} counts {counts} " \
                   f"strides {ss} {ds}"
            _same("DDR", ddr, want_ddr, what)
            _same("L2", l2, want_l2, what)
        assert stalls > 200, f"only {stalls} stalled cycles"
        assert moving[0] > 1000, f"only {moving[0]} busy cycles without a stall"
        assert long_rows >= 3 and three_d >= 3 and four_d >= 3 and errors >= 1 and zero >= 2, \
            (long_rows, three_d, four_d, errors, zero)

    sim.add_testbench(bench)
    sim.run()


def test_default_address_width_and_the_axi_muxes():
    """Both units' ``start`` take a 32-bit command by default; the sDMA's AXI streams
    connect to the engine's AXI read and write muxes (``wiring.connect`` checks the
    signatures member by member, as ``npu.engine.top`` does)."""
    dma = DmaUnit(data_width=WIDTH, l1_depth=8, l2_depth=8)
    sdma = SdmaUnit(data_width=WIDTH, l2_depth=8)
    for unit in (dma, sdma):
        assert unit.start.payload.shape() == unit_command_layout(32)
    m = Module()
    m.submodules.sdma = sdma
    m.submodules.rmux = rmux = AxiReadMux(addr_width=32, data_width=WIDTH, clients=1)
    m.submodules.wmux = wmux = AxiWriteMux(addr_width=32, data_width=WIDTH, clients=1)
    wiring.connect(m, sdma.rd_cmd, rmux.cmd[0])
    wiring.connect(m, rmux.data[0], sdma.rd_data)
    wiring.connect(m, sdma.wr_cmd, wmux.cmd[0])
    wiring.connect(m, sdma.wr_data, wmux.data[0])
    wiring.connect(m, wmux.done[0], sdma.wr_done)
