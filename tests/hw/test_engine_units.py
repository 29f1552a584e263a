"""The engine's DMA unit in the Amaranth simulator: random copies under random port denial.

The testbench plays L1 and L2 behind the unit's client ports the way
``npu.engine_ports.ArbitratedSRAM`` serves them (a grant per port per cycle, here denied
at random a third of the time; read data one cycle after ``go`` and held; read-first), and
checks both memories after each command against ``npu.dma.copy_region_model``. The unit
must stall on every denied port without losing or repeating a word.
"""

from __future__ import annotations

import random

from amaranth.sim import Simulator

from npu.copy_units import DmaUnit, level_code, unit_command_layout
from npu.dma import copy_region_model

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
