"""The engine's copy units in the Amaranth simulator: random copies under random stalls.

DMA: the testbench plays L1 and L2 behind the unit's client ports the way
``npu.bus.ports.ArbitratedSRAM`` serves them (a grant per port per cycle, here denied
at random a third of the time; read data one cycle after ``go`` and held; read-first), and
checks both memories after each command against ``npu.bus.dma.copy_region_model``. The unit
must stall on every denied port without losing or repeating a word.

sDMA: a DDR model behind the AXI command/data streams (random idle cycles and
back-pressure on each) and L2 behind a client port with random denial; DDR and L2 against
the same model.
"""

from __future__ import annotations

import random

from amaranth.sim import Simulator

from npu.bus.dma import copy_region_model
from npu.engine.copy_units import DmaUnit, SdmaUnit, level_code, unit_command_layout

WIDTH, L1_DEPTH, L2_DEPTH = 32, 64, 96
WB = WIDTH // 8


def _word(mem, k):
    return int.from_bytes(mem[k * WB:(k + 1) * WB], "little")


def _write(mem, k, data, en):
    for b in range(WB):
        if en >> b & 1:
            mem[k * WB + b] = data >> (8 * b) & 0xFF


def _random_command(rng):
    """A copy between L1/L2 whose source and destination do not overlap."""
    src_level, dst_level = rng.choice(["L1", "L2"]), rng.choice(["L1", "L2"])
    n0 = rng.randint(1, 18)
    counts = [n0, rng.randint(1, 3), rng.randint(1, 2), rng.randint(1, 2)]
    strides_s = [n0 + rng.randint(0, 5), 0, 0]
    strides_d = [n0 + rng.randint(0, 5), 0, 0]
    strides_s[1] = strides_s[0] * counts[1] + rng.randint(0, 4)
    strides_d[1] = strides_d[0] * counts[1] + rng.randint(0, 4)
    strides_s[2] = strides_s[1] * counts[2] + rng.randint(0, 4)
    strides_d[2] = strides_d[1] * counts[2] + rng.randint(0, 4)

    def extent(strides):
        return n0 + sum((c - 1) * s for c, s in zip(counts[1:], strides, strict=True))

    def place(level, size, half):
        depth = (L1_DEPTH if level == "L1" else L2_DEPTH) * WB
        lo, hi = (0, depth // 2) if half == 0 else (depth // 2, depth)
        if hi - size < lo:
            return None
        return rng.randint(lo, hi - size)

    src = place(src_level, extent(strides_s), 0)
    dst = place(dst_level, extent(strides_d), 1 if src_level == dst_level else rng.randint(0, 1))
    if src is None or dst is None:
        return _random_command(rng)  # too large for half a memory: draw again
    return src_level, dst_level, src, dst, counts, strides_s, strides_d


def test_dma_unit_with_random_port_denial():
    dut = DmaUnit(data_width=WIDTH, l1_depth=L1_DEPTH, l2_depth=L2_DEPTH, addr_width=32)
    rng = random.Random(11)
    mems = {"L1": bytearray(rng.randbytes(L1_DEPTH * WB)),
            "L2": bytearray(rng.randbytes(L2_DEPTH * WB))}
    layout = unit_command_layout(32)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    ports = {"L1": (dut.l1_rd, dut.l1_wr), "L2": (dut.l2_rd, dut.l2_wr)}

    async def bench(ctx):
        held = {"L1": 0, "L2": 0}
        stalls = 0
        ctx.set(dut.done.ready, 1)
        for _ in range(40):
            src_level, dst_level, src, dst, counts, ss, ds = _random_command(rng)
            want = {k: bytearray(v) for k, v in mems.items()}
            copy_region_model(want[src_level], want[dst_level], src=src, dst=dst,
                              count=counts, src_stride=ss, dst_stride=ds)
            ctx.set(dut.start.payload, layout.const({
                "copy": {"src": src, "dst": dst, "count": counts, "src_stride": ss,
                         "dst_stride": ds},
                "src_level": level_code(src_level), "dst_level": level_code(dst_level)}))
            ctx.set(dut.start.valid, 1)
            started = done = False
            for _cycle in range(5000):
                if not started and ctx.get(dut.start.ready):
                    started = True
                elif started:
                    ctx.set(dut.start.valid, 0)
                for rd, wr in ports.values():
                    ctx.set(rd.gnt, ctx.get(rd.req) and rng.random() > 0.33)
                    ctx.set(wr.gnt, ctx.get(wr.req) and rng.random() > 0.33)
                reads = {}
                for level, (rd, _) in ports.items():
                    if ctx.get(rd.go):
                        assert ctx.get(rd.gnt), "go without a grant"
                        reads[level] = _word(mems[level], ctx.get(rd.addr))
                writes = [(level, ctx.get(wr.addr), ctx.get(wr.data), ctx.get(wr.en))
                          for level, (rd, wr) in ports.items() if ctx.get(wr.go)]
                stalls += ctx.get(dut.stall)
                done = started and ctx.get(dut.done.valid)
                if done:
                    assert ctx.get(dut.done.payload.error) == 0
                await ctx.tick()
                for level, addr, data, en in writes:  # read-first: reads sampled before
                    _write(mems[level], addr, data, en)
                for level, value in reads.items():
                    held[level] = value
                for level, (rd, _) in ports.items():
                    ctx.set(rd.data, held[level])
                if done:
                    break
            assert done, "the copy did not finish"
            for level in ("L1", "L2"):
                got, exp = mems[level], want[level]
                bad = [k for k in range(len(got)) if got[k] != exp[k]]
                assert not bad, (f"{level} byte {bad[0]}: {got[bad[0]]:#04x}, expected "
                                 f"{exp[bad[0]]:#04x} ({src_level}->{dst_level} src {src} "
                                 f"dst {dst} counts {counts} strides {ss} {ds})")
        assert stalls > 200, f"only {stalls} stalled cycles: the denial did not bite"

    sim.add_testbench(bench)
    sim.run()


DDR_BYTES = 1024


def test_sdma_unit_with_random_axi_and_port_stalls():
    """SdmaUnit between a DDR model behind its AXI command/data streams and an L2 port.

    The DDR side answers read commands word by word and takes write commands with their
    words (strobes honoured) and a ``done`` after the last, with random idle cycles and
    back-pressure on every stream; L2 grants are denied at random. Every command's words
    must be exactly the words of its rows, and both memories must equal the model.
    """
    dut = SdmaUnit(data_width=WIDTH, l2_depth=L2_DEPTH, addr_width=32)
    rng = random.Random(12)
    ddr = bytearray(rng.randbytes(DDR_BYTES))
    l2 = bytearray(rng.randbytes(L2_DEPTH * WB))
    layout = unit_command_layout(32)
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    def command(rng):
        to_ddr = rng.random() < 0.5
        n0 = rng.randint(1, 40)
        counts = [n0, rng.randint(1, 3), rng.randint(1, 2), 1]
        ss = [n0 + rng.randint(0, 9), 0, 0]
        ds = [n0 + rng.randint(0, 9), 0, 0]
        ss[1] = ss[0] * counts[1] + rng.randint(0, 5)
        ds[1] = ds[0] * counts[1] + rng.randint(0, 5)
        ext_s = n0 + (counts[1] - 1) * ss[0] + (counts[2] - 1) * ss[1]
        ext_d = n0 + (counts[1] - 1) * ds[0] + (counts[2] - 1) * ds[1]
        l2_size = L2_DEPTH * WB
        src_size, dst_size = (l2_size, DDR_BYTES) if to_ddr else (DDR_BYTES, l2_size)
        if ext_s > src_size or ext_d > dst_size:
            return command(rng)
        return (to_ddr, rng.randint(0, src_size - ext_s), rng.randint(0, dst_size - ext_d),
                counts, ss, ds)

    async def bench(ctx):
        held = 0
        reads = []            # words still to deliver for the current read command
        write_cmd = None      # [addr, beats left] of the current write command
        done_due = 0
        stalls = 0
        ctx.set(dut.done.ready, 1)
        for _ in range(30):
            to_ddr, src, dst, counts, ss, ds = command(rng)
            want_ddr, want_l2 = bytearray(ddr), bytearray(l2)
            if to_ddr:
                copy_region_model(want_l2, want_ddr, src=src, dst=dst, count=counts,
                                  src_stride=ss, dst_stride=ds)
            else:
                copy_region_model(want_ddr, want_l2, src=src, dst=dst, count=counts,
                                  src_stride=ss, dst_stride=ds)
            src_level, dst_level = ("L2", "DDR") if to_ddr else ("DDR", "L2")
            ctx.set(dut.start.payload, layout.const({
                "copy": {"src": src, "dst": dst, "count": counts, "src_stride": ss,
                         "dst_stride": ds},
                "src_level": level_code(src_level), "dst_level": level_code(dst_level)}))
            ctx.set(dut.start.valid, 1)
            started = done = False
            for _cycle in range(20000):
                if not started and ctx.get(dut.start.ready):
                    started = True
                elif started:
                    ctx.set(dut.start.valid, 0)
                # AXI side (a model of the reader / writer behind the muxes)
                take_rd_cmd = not reads and rng.random() < 0.6
                ctx.set(dut.rd_cmd.ready, take_rd_cmd)
                take_wr_cmd = write_cmd is None and done_due == 0 and rng.random() < 0.6
                ctx.set(dut.wr_cmd.ready, take_wr_cmd)
                give = bool(reads) and rng.random() < 0.7
                ctx.set(dut.rd_data.valid, give)
                if give:
                    ctx.set(dut.rd_data.payload.data, reads[0])
                accept = write_cmd is not None and rng.random() < 0.7
                ctx.set(dut.wr_data.ready, accept)
                ctx.set(dut.wr_done.valid, done_due == 1 and write_cmd is None)
                ctx.set(dut.wr_done.payload.error, 0)
                # L2 side
                ctx.set(dut.l2_rd.gnt, ctx.get(dut.l2_rd.req) and rng.random() > 0.33)
                ctx.set(dut.l2_wr.gnt, ctx.get(dut.l2_wr.req) and rng.random() > 0.33)
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
                done_taken = done_due == 1 and write_cmd is None
                stalls += ctx.get(dut.stall)
                done = started and ctx.get(dut.done.valid)
                if done:
                    assert ctx.get(dut.done.payload.error) == 0
                await ctx.tick()
                if l2_write:
                    _write(l2, *l2_write)
                if l2_read is not None:
                    held = l2_read
                ctx.set(dut.l2_rd.data, held)
                if popped:
                    reads.pop(0)
                if rd_cmd:
                    addr, beats = rd_cmd
                    assert addr % WB == 0 and beats >= 1
                    reads = [_word(ddr, addr // WB + k) for k in range(beats)]
                if wrote:
                    addr = write_cmd[0]
                    _write(ddr, addr // WB, *wrote)
                    write_cmd = [addr + WB, write_cmd[1] - 1]
                    if write_cmd[1] == 0:
                        write_cmd = None
                        done_due = 1
                if done_taken:
                    done_due = 0
                if wr_cmd:
                    write_cmd = list(wr_cmd)
                if done:
                    break
            assert done, "the copy did not finish"
            assert not reads and write_cmd is None and done_due == 0
            for name, got, exp in (("DDR", ddr, want_ddr), ("L2", l2, want_l2)):
                bad = [k for k in range(len(got)) if got[k] != exp[k]]
                assert not bad, (f"{name} byte {bad[0]}: {got[bad[0]]:#04x}, expected "
                                 f"{exp[bad[0]]:#04x} ({src_level}->{dst_level} src {src} "
                                 f"dst {dst} counts {counts} strides {ss} {ds})")
        assert stalls > 200, f"only {stalls} stalled cycles"

    sim.add_testbench(bench)
    sim.run()
