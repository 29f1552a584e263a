"""Region-copy DMA against the byte-wise model, in the Amaranth simulator."""

import random

import pytest
from amaranth.sim import Simulator

from npu.bus.dma import copy_region_model
from sim.dma_harness import RegionCopyHarness

W_BITS, DEPTH = 64, 128
W = W_BITS // 8
SIZE = W * DEPTH


def words_of(buf, wb=W):
    return [int.from_bytes(buf[k * wb:(k + 1) * wb], "little") for k in range(len(buf) // wb)]


def bytes_of(words, wb=W):
    return b"".join(w.to_bytes(wb, "little") for w in words)


def random_command(rng):
    while True:
        shape = [rng.choice([1, 2, 3, 5, 8, 13, 24, 40]), rng.randint(1, 4), rng.randint(1, 3),
                 rng.randint(1, 2)]
        src_stride = [rng.randint(shape[0], shape[0] + 20) for _ in range(3)]
        src_stride[1] = max(src_stride[1], src_stride[0] * shape[1])
        src_stride[2] = max(src_stride[2], src_stride[1] * shape[2])
        dst_stride = [rng.randint(shape[0], shape[0] + 20) for _ in range(3)]
        dst_stride[1] = max(dst_stride[1], dst_stride[0] * shape[1])
        dst_stride[2] = max(dst_stride[2], dst_stride[1] * shape[2])
        extent_s = shape[0] + sum((n - 1) * st for n, st in zip(shape[1:], src_stride,
                                                                 strict=True))
        extent_d = shape[0] + sum((n - 1) * st for n, st in zip(shape[1:], dst_stride,
                                                                 strict=True))
        if extent_s < SIZE and extent_d < SIZE:
            return {"src": rng.randrange(SIZE - extent_s), "dst": rng.randrange(SIZE - extent_d),
                    "count": shape, "src_stride": src_stride, "dst_stride": dst_stride}


def run(commands, src_bytes, dst_bytes, seed=0, *, data_width=W_BITS, depth=DEPTH,
        refuse=0.0):
    """Run ``commands`` on memories of ``depth`` words of ``data_width`` bits; returns the
    done errors, the destination's bytes, ``bytes``, ``busy`` and the words read. With
    ``refuse`` > 0, the harness refuses the copy's accesses in that share of the cycles
    (the copy's ``advance`` low); else ``advance`` is not driven (high by default)."""
    wb = data_width // 8
    dut = RegionCopyHarness(data_width=data_width, depth=depth, refusals=bool(refuse),
                            src_init=words_of(src_bytes, wb), dst_init=words_of(dst_bytes, wb))
    out = {}

    async def bench(ctx):
        rng = random.Random(seed)
        for cmd in commands:
            ctx.set(dut.cmd.payload, cmd)
            ctx.set(dut.cmd.valid, 1)
            for _ in range(100):   # bounded: a unit that never takes a command fails
                *_, ready = await ctx.tick().sample(dut.cmd.ready)
                if ready:
                    break
            else:
                raise AssertionError("the DMA did not take the command")
            ctx.set(dut.cmd.valid, 0)
            ctx.set(dut.done.ready, 1)
            for _ in range(20000):
                *_, valid, payload = await ctx.tick().sample(dut.done.valid, dut.done.payload)
                if valid:
                    out.setdefault("errors", []).append(int(payload.error))
                    break
            else:
                raise AssertionError("DMA did not finish")
            ctx.set(dut.done.ready, 0)
            for _ in range(rng.randint(0, 3)):
                await ctx.tick()
        out["dst"] = bytes_of([ctx.get(dut.dst_mem.data[k]) for k in range(depth)], wb)
        out["bytes"] = ctx.get(dut.bytes)
        out["busy"] = ctx.get(dut.busy)

    async def watch_ports(ctx):
        # Every cycle: the write's valid is exactly "some byte enabled"; every read that
        # happens (asked for and not refused) is counted.
        reads = out.setdefault("reads", [])
        dma = dut.dma
        async for _, _, rd_en, rd_addr, wr_en, wr_valid, advance in ctx.tick().sample(
                dma.rd.en, dma.rd.addr, dma.wr.en, dma.wr.valid, dma.advance):
            assert wr_valid == (wr_en != 0), (wr_valid, wr_en)
            if rd_en and advance:
                reads.append(rd_addr)

    async def refuse_some(ctx):
        rng = random.Random(seed + 1000)
        while True:
            ctx.set(dut.refuse, rng.random() < refuse)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(watch_ports, background=True)
    if refuse:
        sim.add_testbench(refuse_some, background=True)
    sim.run()
    return out


def source_words_read(cmd):
    """The source words a command's rows cover (each row reads its words once)."""
    n0, n1, n2, n3 = cmd["count"]
    words = []
    if 0 in cmd["count"]:
        return words
    for i3 in range(n3):
        for i2 in range(n2):
            for i1 in range(n1):
                s = cmd["src"] + i1 * cmd["src_stride"][0] + i2 * cmd["src_stride"][1] \
                    + i3 * cmd["src_stride"][2]
                words.extend(range(s // W, (s + n0 - 1) // W + 1))
    return words


@pytest.mark.parametrize("seed", range(12))
def test_random_regions_match_model(seed):
    rng = random.Random(seed)
    src = bytes(rng.randrange(256) for _ in range(SIZE))
    dst = bytearray(rng.randrange(256) for _ in range(SIZE))
    commands = [random_command(rng) for _ in range(4)]
    out = run(commands, src, bytes(dst), seed)
    errors = [copy_region_model(src, dst, **cmd) for cmd in commands]
    assert out["errors"] == [int(e) for e in errors] == [0, 0, 0, 0]
    mismatch = [k for k in range(SIZE) if out["dst"][k] != dst[k]]
    assert not mismatch, (f"first differing byte {mismatch[0]}: RTL {out['dst'][mismatch[0]]}, "
                          f"model {dst[mismatch[0]]}")
    assert out["bytes"] == sum(c["count"][0] * c["count"][1] * c["count"][2] * c["count"][3]
                               for c in commands)
    # the read requests are exactly the rows' source words, in order (none before or
    # after a row: a row starting mid-word fetches a zero word first without reading)
    assert out["reads"] == [w for c in commands for w in source_words_read(c)]


@pytest.mark.parametrize("seed", range(4))
def test_refused_accesses_are_asked_for_again(seed):
    """A caller that refuses the copy's accesses in 40 % of the cycles (its ``advance``
    low): the copy holds and asks again, so the destination, the words read (each once,
    in order) and ``bytes`` are those of an unstalled copy; the command's registers,
    which load outside the stallable part while idle, start each command right."""
    rng = random.Random(100 + seed)
    src = bytes(rng.randrange(256) for _ in range(SIZE))
    dst = bytearray(rng.randrange(256) for _ in range(SIZE))
    commands = [random_command(rng) for _ in range(4)]
    out = run(commands, src, bytes(dst), seed, refuse=0.4)
    for cmd in commands:
        copy_region_model(src, dst, **cmd)
    assert out["errors"] == [0, 0, 0, 0]
    assert out["dst"] == bytes(dst)
    assert out["reads"] == [w for c in commands for w in source_words_read(c)]
    assert out["bytes"] == sum(c["count"][0] * c["count"][1] * c["count"][2] * c["count"][3]
                               for c in commands)


def test_contiguous_run_is_full_width():
    # One row of 100 words, same alignment: 100 destination words in 100 + 3 cycles.
    src = bytes(range(256)) * (SIZE // 256)
    cmd = {"src": 0, "dst": 0, "count": [100 * W, 1, 1, 1], "src_stride": [0, 0, 0],
           "dst_stride": [0, 0, 0]}
    out = run([cmd], src, bytes(SIZE))
    assert out["dst"][:100 * W] == src[:100 * W]
    assert out["busy"] <= 100 + 4, out["busy"]


def test_empty_region_completes():
    cmd = {"src": 0, "dst": 0, "count": [0, 1, 1, 1], "src_stride": [0, 0, 0],
           "dst_stride": [0, 0, 0]}
    out = run([cmd], bytes(SIZE), bytes(SIZE))
    assert out["bytes"] == 0


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_constructor_errors():
    from npu.bus.dma import RegionCopy

    with pytest.raises(ValueError, match=r"data_width must be a power of two in 16\.\.512, not 24"):
        RegionCopy(data_width=24)


def test_out_of_range_row_stops_with_error():
    # Rows of 16 bytes every 300 bytes from 0: rows 0..3 fit in 1024 bytes (last ends at
    # 916), row 4 would start at 1200, beyond the 1024-byte source: error after 4 rows.
    rng = random.Random(9)
    src = bytes(rng.randrange(256) for _ in range(SIZE))
    dst = bytearray(SIZE)
    cmd = {"src": 0, "dst": 8, "count": [16, 6, 1, 1], "src_stride": [300, 0, 0],
           "dst_stride": [20, 0, 0]}
    out = run([cmd], src, bytes(dst))
    assert copy_region_model(src, dst, **cmd) is True
    assert out["errors"] == [1]
    assert out["dst"] == bytes(dst)
    assert out["bytes"] == 4 * 16
