"""NMU AGUs: directed cases for mutants of ``npu.nmu.agu`` and ``npu.nmu.agu_step`` the other
tests missed.

``SteppedAgu`` and ``NmuAgu`` run in lock-step on the same inputs under the same random
back-pressure (every cycle ``valid``, ``busy`` and, while valid, the whole run command equal),
and the runs each phase hands over are checked against the model's loop nests
(``npu.nmu.model.weight_runs`` / ``bias_runs`` / ``act_runs``), with addresses taken modulo
2**32 as the RTL's 32-bit arithmetic does. The cases the random tests in
``test_nmu_agu.py`` / ``test_nmu_agu_step.py`` do not reach: one reduction lane and tiles
narrower than the L1 word, a per-pixel bias over several images, rows and columns,
addresses and strides that wrap past 2**32 (negative strides, negative pads), a tile whose
first channel lies past ``cout`` (the 16-bit channel count wraps), and the ports of the
two AGUs (the unit takes one for the other).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth import Module, Shape, unsigned
from amaranth.sim import Simulator

from npu.nmu.agu import NmuAgu, RunReader, tag_layout, task_fields, task_fields_layout
from npu.nmu.agu_step import SteppedAgu
from npu.nmu.model import NmuGeometry, NmuTask, Run, act_runs, bias_runs, read_runs, weight_runs
from tests.hw.test_nmu_agu import L1Port, _run_const
from tests.hw.test_nmu_agu_step import _fields

M32 = (1 << 32) - 1
MODES = (NmuAgu.MODE_W, NmuAgu.MODE_B, NmuAgu.MODE_A)


def _task(**kw):
    """A small convolution (2x3 input, 2x2 kernel, stride 1, no pad) with fields from kw."""
    base = dict(batch=1, h=2, w=3, cin=3, kh=2, kw=2, cout=5, oh=1, ow=2, x_addr=100,
                xs=(18, 9, 3), w_addr=200, ws=(30, 15, 5), has_bias=True, b_addr=300,
                b_stride=1, y_addr=400, ys=(10, 5, 5), out_elem="i8", pads=(0, 0),
                strides=(1, 1), dils=(1, 1))
    return NmuTask(**(base | kw))


def _lockstep(phases, lanes, cols, seed):
    """Run (task, n0, mode) phases on both AGUs in lock-step; the runs taken per phase."""
    rng = random.Random(seed)
    old, new = NmuAgu(lanes=lanes, cols=cols), SteppedAgu(lanes=lanes, cols=cols)
    top = Module()
    top.submodules.old = old
    top.submodules.new = new
    sim = Simulator(top)
    sim.add_clock(1e-6)
    out = []

    async def bench(ctx):
        for task, n0, mode in phases:
            bank = rng.randrange(2)
            for dut in (old, new):
                ctx.set(dut.task, task_fields(task))
                ctx.set(dut.n0, n0)
                ctx.set(dut.tile, (n0 // cols) & 0xFF)
                ctx.set(dut.mode, mode)
                ctx.set(dut.bank, bank)
                ctx.set(dut.start, 1)
            await ctx.tick()
            for dut in (old, new):
                ctx.set(dut.start, 0)
            got = []
            for _cycle in range(5000):
                ready = rng.random() < 0.7
                for dut in (old, new):
                    ctx.set(dut.cmd.ready, ready)
                valid = ctx.get(new.cmd.valid)
                assert valid == ctx.get(old.cmd.valid), (mode, task)
                assert ctx.get(new.busy) == ctx.get(old.busy), (mode, task)
                if valid:
                    run = _fields(ctx.get(new.cmd.payload))
                    assert run == _fields(ctx.get(old.cmd.payload)), (mode, len(got), task)
                    if ready:
                        got.append(run)
                if not ctx.get(new.busy):
                    break
                await ctx.tick()
            assert not ctx.get(new.busy), (mode, task)
            assert all(r[10] == bank for r in got)
            out.append(got)

    sim.add_testbench(bench)
    sim.run()
    return out


def _expected(task, geom, n0, mode):
    """The model's runs as run-command fields (addresses mod 2**32; a pad run's address is
    not compared, None)."""
    ncols = min(geom.cols, task.cout - n0)
    want = []
    if mode == NmuAgu.MODE_W:
        for r in weight_runs(task, geom, n0):
            want.append((r.addr & M32, r.length, 0, mode, r.tag[0], r.tag[1]))
    elif mode == NmuAgu.MODE_B:
        for r in bias_runs(task, geom, n0):
            want.append((r.addr & M32, 4, 0, mode, None, r.tag[0]))
    else:
        for r in act_runs(task, geom, n0):
            if r.tag[0] == "bias":  # a per-pixel bias word
                want.append((r.addr & M32, 4, 0, NmuAgu.MODE_B, None, r.tag[1]))
                continue
            row, first, last, yaddr = r.tag
            want.append((None if r.pad else r.addr & M32, r.length, int(r.pad), mode, row,
                         ncols, int(first), int(last), (n0 // geom.cols) & 0xFF, yaddr & M32))
    return want


def _check(got, want):
    assert len(got) == len(want), (len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        addr, length, pad, kind, row, lane, first, last, tile, yaddr, _bank = g
        mine = (None if w[0] is None else addr, length, pad, kind,
                None if w[4] is None else row, lane)
        if len(w) > 6:
            mine += (first, last, tile, yaddr)
        assert mine == w, (i, g, w)


def _tiles(tasks, geom):
    return [(task, n0, mode) for task in tasks for n0 in range(0, task.cout, geom.cols)
            for mode in MODES]


def test_ports_are_those_of_nmu_agu():
    """The unit drives SteppedAgu where NmuAgu was: same members, directions and shapes."""
    for lanes, cols in ((8, 8), (4, 2)):
        new = SteppedAgu(lanes=lanes, cols=cols).signature
        old = NmuAgu(lanes=lanes, cols=cols).signature
        assert list(new.members) == list(old.members)
        for name, member in old.members.items():
            assert new.members[name] == member, name


def test_one_lane_and_tiles_narrower_than_the_word():
    """lanes = 1 (every input channel is a weight row of its own, lane 0) and cols < lanes
    (several tiles, the last one partial), against the model and NmuAgu."""
    for lanes, cols, seed in ((1, 1, 5), (4, 2, 6), (8, 3, 7)):
        geom = NmuGeometry(lanes=lanes, cols=cols, channels=8 * cols)
        tasks = [
            _task(cin=3, cout=4 if lanes == 1 else 5),
            _task(batch=2, h=3, w=3, cin=5, kh=3, kw=2, cout=cols + 1, oh=2, ow=2,
                  xs=(45, 15, 5), ys=(8, 4, 2), pads=(1, 0), strides=(2, 2), dils=(1, 2)),
            # a gemm with a per-pixel bias
            _task(h=3, w=1, cin=6, kh=1, kw=1, cout=cols + 2, oh=3, ow=1, xs=(0, 7, 0),
                  ws=(0, 0, 9), ys=(0, 9, 0), pix_bias=True, b_stride=2, b_mstride=11),
        ]
        phases = _tiles(tasks, geom)
        for (task, n0, mode), got in zip(phases, _lockstep(phases, lanes, cols, seed),
                                         strict=True):
            _check(got, _expected(task, geom, n0, mode))


def test_per_pixel_bias_over_images_rows_and_columns():
    """A per-pixel bias word list before every pixel, addressed by the pixel's output row
    (``b + 4*(oh*b_mstride + c*b_stride)``): from the first row again in the second image."""
    geom = NmuGeometry(lanes=8, cols=8)
    task = _task(batch=2, h=3, w=3, cin=4, kh=2, kw=2, cout=3, oh=3, ow=2,
                 xs=(36, 12, 4), ys=(18, 6, 3), pads=(1, 1), strides=(1, 2),
                 pix_bias=True, b_addr=40, b_stride=1, b_mstride=5)
    (got,) = _lockstep([(task, 0, NmuAgu.MODE_A)], 8, 8, seed=8)
    want = _expected(task, geom, 0, NmuAgu.MODE_A)
    _check(got, want)
    # hand-derived: pixel (b, oh, ow) starts with 3 words at 40 + 4*(5*oh + c)
    bias_addrs = [g[0] for g in got if g[3] == NmuAgu.MODE_B]
    assert bias_addrs == [40 + 4 * (5 * oh + c) for _b in range(2) for oh in range(3)
                          for _ow in range(2) for c in range(3)]


def test_addresses_wrap_modulo_2_to_the_32():
    """Base addresses just below 2**32, negative strides (2**32 - s), negative pads and
    products of 16-bit strides with 32-bit element strides that pass 2**32: every address
    is the model's modulo 2**32."""
    geom = NmuGeometry(lanes=8, cols=4)
    neg = (1 << 32) - 7  # a stride of -7
    tasks = [
        _task(x_addr=M32 - 20, w_addr=M32 - 3, b_addr=M32 - 9, y_addr=M32 - 5, b_stride=3,
              out_elem="i16"),
        _task(batch=2, h=4, w=4, cin=2, kh=2, kw=2, cout=6, oh=3, ow=3, x_addr=5000,
              xs=(neg * 16, neg * 4, neg), ws=(neg * 20, neg * 5, neg), w_addr=9000,
              ys=((1 << 32) - 54, (1 << 32) - 18, (1 << 32) - 6), y_addr=7000,
              b_stride=(1 << 32) - 1, pads=(-1, 1), out_elem="i32"),
        _task(batch=1, h=60000, w=60000, cin=1, kh=2, kw=2, cout=2, oh=2, ow=2,
              xs=(0, 70001, 1 << 20), ws=(1 << 31, 3, 1), strides=(50000, 40000),
              dils=(30000, 20000), pads=(0, 0), ys=(0, 1 << 31, 1 << 30),
              pix_bias=True, b_mstride=1 << 30),
    ]
    phases = _tiles(tasks, geom)
    for (task, n0, mode), got in zip(phases, _lockstep(phases, 8, 4, seed=9), strict=True):
        _check(got, _expected(task, geom, n0, mode))


def test_tile_past_the_last_channel():
    """n0 > cout: the 16-bit channel count cout - n0 wraps (2**16 + cout - n0) and is then
    clipped to cols like any count; runs are as long as that, as in NmuAgu. (b_stride 0:
    the stepped AGU steps the tile's bias offset as n0 moves to 0 or by cols, and these n0
    are not reached that way; the offset over real tile sequences is checked by the
    lock-step tests of tests/hw/test_nmu_agu_step.py.)"""
    for cout, n0 in ((2, 65535), (3, 65533), (0, 65531)):
        task = _task(cout=cout, b_stride=0)
        ncols = min(8, (cout - n0) % (1 << 16))
        weights, bias, acts = _lockstep([(task, n0, mode) for mode in MODES], 8, 8,
                                        seed=n0)
        assert {r[1] for r in weights} == {ncols}, (cout, n0)
        assert [r[5] for r in bias] == list(range(ncols)), (cout, n0)
        assert {r[5] for r in acts} == {ncols}, (cout, n0)
        assert len(weights) == task.kh * task.kw * task.cin
        assert len(acts) == task.oh * task.ow * task.kh * task.kw


# --- RunReader ---------------------------------------------------------------------------


def _reader(runs, mem, lanes, *, skid, seed, deny=0.3, ready=0.75, gap=0.0, check_busy=True):
    """Feed ``runs`` (model Runs) to a RunReader over ``mem``; per cycle check ``stall``
    (a request not granted this cycle), ``busy`` (a run taken whose last vector is not yet
    taken; with ``check_busy``) and, with ``skid``, that ``cmd.ready`` does not follow this
    cycle's grant, vector ready or command valid (a flip-flop). Returns the vectors taken
    (bytes, count, index, last, row), the L1 reads and the cycles until the last vector."""
    rng = random.Random(seed)
    dut = RunReader(lanes=lanes, depth=len(mem) // lanes, skid=skid)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    got, reads, cycles = [], [0], [0]

    async def bench(ctx):
        l1 = L1Port(dut.rd, mem, lanes, rng, deny=deny)
        ctx.set(dut.pad_byte, 0xA5)
        k, outstanding = 0, 0
        for cycle in range(20 * len(runs) + 100):
            offer = k < len(runs) and rng.random() >= gap
            if skid:
                seen = set()
                for level in (0, 1):
                    ctx.set(dut.rd.gnt, level)
                    ctx.set(dut.o.ready, level)
                    ctx.set(dut.cmd.valid, level)
                    seen.add(ctx.get(dut.cmd.ready))
                assert len(seen) == 1, cycle
            ctx.set(dut.cmd.valid, offer)
            if offer:
                ctx.set(dut.cmd.payload, _run_const(runs[k]))
            ctx.set(dut.o.ready, rng.random() < ready)
            l1.before(ctx)
            req, gnt = ctx.get(dut.rd.req), ctx.get(dut.rd.gnt)
            assert ctx.get(dut.stall) == (req and not gnt), cycle
            reads[0] += ctx.get(dut.rd.go)
            if check_busy:
                assert ctx.get(dut.busy) == (outstanding > 0), (cycle, outstanding)
            took = offer and ctx.get(dut.cmd.ready)
            outstanding += took
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                p = ctx.get(dut.o.payload)
                data = [int(p.data[i]) for i in range(lanes)]
                raw = ctx.get(dut.o.payload.data.as_value())
                assert raw == int.from_bytes(bytes(data), "little")  # byte i at bits 8i..
                got.append((data, int(p.count), int(p.index), int(p.last), int(p.tag.row)))
                outstanding -= int(p.last)
            await ctx.tick()
            l1.after(ctx)
            k += took
            if k == len(runs) and not ctx.get(dut.busy):
                cycles[0] = cycle + 1
                break
        assert k == len(runs) and not ctx.get(dut.busy)

    sim.add_testbench(bench)
    sim.run()
    return got, reads[0], cycles[0]


def _vectors(runs, mem, lanes):
    """The model's vectors (bytes, count, index, last, row) of ``runs``."""
    out = []
    for data, n, j, run in read_runs(runs, np.frombuffer(bytes(mem), np.uint8), lanes,
                                      pad_byte=0xA5):
        out.append((data, n, j, int(j == -(-run.length // lanes) - 1), run.tag[0]))
    return out


def _held_word_reads(runs, lanes):
    """L1 reads when the port's last word is reused (hand-derived from the module's rule:
    a word equal to the last one read is taken from the port; pad runs read nothing)."""
    reads, held = 0, None
    for run in runs:
        if run.pad:
            continue
        for word in range(run.addr // lanes, (run.addr + run.length - 1) // lanes + 1):
            if word != held:
                reads, held = reads + 1, word
    return reads


def _random_runs(rng, lanes, depth, n, zero=False):
    runs = []
    for k in range(n):
        length = rng.choice([1, 2, lanes - 1 or 1, lanes, lanes + 1, 2 * lanes + 1,
                             rng.randint(1, 4 * lanes)] + [0] * zero)
        addr = rng.randint(0, depth * lanes - max(length, 1))
        if rng.random() < 0.3 and runs and not runs[-1].pad:  # start where the last ended
            addr = min(runs[-1].addr + runs[-1].length, depth * lanes - max(length, 1))
        runs.append(Run(addr, length, pad=rng.random() < 0.15, tag=(k, 0, 0, 0, 0)))
    return runs


def test_run_reader_lanes_skid_and_reads():
    """1, 2 and 8 lanes, with and without the skid register, random grants, back-pressure
    and gaps in the command stream: the model's vectors, one L1 read per word except a word
    the port still holds, ``busy`` and ``stall`` as documented."""
    for lanes, skid, seed in ((1, False, 1), (2, True, 2), (8, True, 3), (8, False, 4)):
        rng = random.Random(seed)
        mem = bytearray(rng.randbytes(32 * lanes))
        runs = _random_runs(rng, lanes, 32, 40)
        got, reads, _ = _reader(runs, mem, lanes, skid=skid, seed=seed, gap=0.0)
        assert got == _vectors(runs, mem, lanes), (lanes, skid)
        assert reads == _held_word_reads(runs, lanes), (lanes, skid)
        got, _, _ = _reader(runs, mem, lanes, skid=skid, seed=seed + 10, gap=0.4)
        assert got == _vectors(runs, mem, lanes), (lanes, skid)


def test_run_reader_empty_runs():
    """A run of length 0 gives no vector and does not stall the runs around it."""
    for skid in (False, True):
        rng = random.Random(20 + skid)
        mem = bytearray(rng.randbytes(256))
        runs = _random_runs(rng, 8, 32, 40, zero=True)
        assert any(r.length == 0 for r in runs)
        got, _, _ = _reader(runs, mem, 8, skid=skid, seed=21, gap=0.2, check_busy=False)
        assert got == _vectors(runs, mem, 8)


def test_run_reader_streams_aligned_runs_without_bubbles():
    """Aligned one-word runs back to back, every read granted, every vector taken: one
    vector per cycle after the first one's latency (a few cycles), with or without skid.
    Every third run is a pad run at an unaligned address: a pad run reads nothing, so its
    address does not matter and it streams like an aligned run."""
    mem = bytearray(random.Random(30).randbytes(256))
    runs = [Run(8 * ((5 * k) % 32) + 3 * (k % 3 == 2), 8, pad=k % 3 == 2, tag=(k, 0, 0, 0, 0))
            for k in range(24)]
    # and runs of two and three aligned words: still one vector per cycle
    runs += [Run(8 * ((7 * k) % 29), 8 * (2 + k % 2), tag=(k, 0, 0, 0, 0)) for k in range(8)]
    vectors = 24 + 8 * 2 + 4
    for skid in (False, True):
        got, reads, cycles = _reader(runs, mem, 8, skid=skid, seed=31, deny=0.0, ready=1.1)
        assert got == _vectors(runs, mem, 8)
        assert reads == _held_word_reads(runs, 8)
        assert cycles <= vectors + 4, (skid, cycles)


def test_run_reader_keeps_the_held_word_while_it_waits():
    """Short runs in the same word, back to back, under heavy back-pressure: a run that
    starts in the word the port holds takes it from there even when it is loaded in a
    cycle without a read (the run before it was itself such a run, or a pad run) and the
    reader waited for the window in between, so each word is read once."""
    lanes = 8
    for seed in range(4):
        rng = random.Random(70 + seed)
        mem = bytearray(rng.randbytes(32 * lanes))
        runs, addr = [], 5 * lanes + 2
        for k in range(30):
            if rng.random() < 0.2:
                runs.append(Run(rng.randrange(32 * lanes), rng.randint(1, lanes), pad=True,
                                tag=(k, 0, 0, 0, 0)))
                continue
            length = rng.randint(1, 3)
            if addr % lanes + length > lanes or rng.random() < 0.15:
                addr = lanes * rng.randrange(31) + rng.randrange(lanes - 3)
            runs.append(Run(addr, length, tag=(k, 0, 0, 0, 0)))
            addr += length
        for skid in (False, True):
            got, reads, _ = _reader(runs, mem, lanes, skid=skid, seed=seed, deny=0.0,
                                    ready=0.15)
            assert got == _vectors(runs, mem, lanes), (seed, skid)
            assert reads == _held_word_reads(runs, lanes), (seed, skid)


def test_run_reader_forgets_the_held_word_across_a_pad_run_after_idle():
    """After the reader went idle and L1 changed, a pad run (which reads nothing) and then
    a run in the word read last: that run reads the word again and sees the new bytes."""
    lanes = 8
    mem = bytearray(range(64))
    got = []
    for skid in (False, True):
        mem[8:16] = bytes(range(8, 16))
        dut = RunReader(lanes=lanes, depth=8, skid=skid)
        sim = Simulator(dut)
        sim.add_clock(1e-6)

        async def bench(ctx, dut=dut):
            l1 = L1Port(dut.rd, mem, lanes, random.Random(42), deny=0.0)
            ctx.set(dut.o.ready, 1)
            ctx.set(dut.pad_byte, 0xA5)
            batches = ([Run(8, 6, tag=(1, 0, 0, 0, 0))],
                       [Run(40, 8, pad=True, tag=(2, 0, 0, 0, 0)),
                        Run(10, 3, tag=(3, 0, 0, 0, 0))])
            for batch in batches:
                for run in batch:
                    ctx.set(dut.cmd.valid, 1)
                    ctx.set(dut.cmd.payload, _run_const(run))
                    await ctx.tick().until(dut.cmd.ready)
                    l1.after(ctx)
                ctx.set(dut.cmd.valid, 0)
                for _ in range(20):
                    l1.before(ctx)
                    if ctx.get(dut.o.valid):
                        p = ctx.get(dut.o.payload)
                        got.append([int(p.data[i]) for i in range(int(p.count))])
                    await ctx.tick()
                    l1.after(ctx)
                assert not ctx.get(dut.busy)
                mem[8:16] = bytes(range(100, 108))  # L1 changes while the reader is idle

        sim.add_testbench(bench)
        sim.run()
        assert got[-2:] == [[0xA5] * 8, [102, 103, 104]], (skid, got)


def test_run_reader_forgets_the_held_word_when_idle():
    """L1 may change between tasks: after the reader went idle, a run in the word it read
    last reads it again (the new bytes), rather than taking the stale word from the port."""
    lanes = 8
    mem = bytearray(range(64))
    dut = RunReader(lanes=lanes, depth=8)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    got, reads = [], [0]

    async def bench(ctx):
        l1 = L1Port(dut.rd, mem, lanes, random.Random(40), deny=0.0)
        ctx.set(dut.o.ready, 1)
        for run, idle in ((Run(8, 6, tag=(1, 0, 0, 0, 0)), 6), (Run(10, 3, tag=(2, 0, 0, 0, 0)),
                                                                6)):
            ctx.set(dut.cmd.valid, 1)
            ctx.set(dut.cmd.payload, _run_const(run))
            for _ in range(idle + 10):
                l1.before(ctx)
                reads[0] += ctx.get(dut.rd.go)
                if ctx.get(dut.o.valid):
                    p = ctx.get(dut.o.payload)
                    got.append([int(p.data[i]) for i in range(int(p.count))])
                took = ctx.get(dut.cmd.valid) and ctx.get(dut.cmd.ready)
                await ctx.tick()
                l1.after(ctx)
                if took:
                    ctx.set(dut.cmd.valid, 0)
            assert not ctx.get(dut.busy)
            mem[8:16] = bytes(range(100, 108))  # L1 changes while the reader is idle

    sim.add_testbench(bench)
    sim.run()
    assert got == [[8, 9, 10, 11, 12, 13], [102, 103, 104]]
    assert reads[0] == 2


def test_run_reader_forgets_the_held_word_after_one_idle_cycle():
    """The same with the next run offered in the very first cycle ``busy`` is low (the
    cycle the held word is forgotten in): it still reads the word again."""
    mem = bytearray(range(64))
    for skid in (False, True):
        dut = RunReader(lanes=8, depth=8, skid=skid)
        sim = Simulator(dut)
        sim.add_clock(1e-6)
        got, reads = [], [0]

        async def bench(ctx, dut=dut, got=got, reads=reads):
            l1 = L1Port(dut.rd, mem, 8, random.Random(41), deny=0.0)
            ctx.set(dut.o.ready, 1)
            mem[8:16] = bytes(range(8, 16))
            ctx.set(dut.cmd.valid, 1)
            ctx.set(dut.cmd.payload, _run_const(Run(8, 6, tag=(1, 0, 0, 0, 0))))
            sent, was_busy = 1, False
            for _ in range(30):
                if sent == 1 and was_busy and not ctx.get(dut.busy):
                    mem[8:16] = bytes(range(100, 108))  # L1 changes as the reader idles
                    ctx.set(dut.cmd.valid, 1)
                    ctx.set(dut.cmd.payload, _run_const(Run(10, 3, tag=(2, 0, 0, 0, 0))))
                    sent = 2
                was_busy = was_busy or ctx.get(dut.busy)
                l1.before(ctx)
                reads[0] += ctx.get(dut.rd.go)
                if ctx.get(dut.o.valid):
                    p = ctx.get(dut.o.payload)
                    got.append([int(p.data[i]) for i in range(int(p.count))])
                took = ctx.get(dut.cmd.valid) and ctx.get(dut.cmd.ready)
                await ctx.tick()
                l1.after(ctx)
                if took:
                    ctx.set(dut.cmd.valid, 0)
            assert sent == 2

        sim.add_testbench(bench)
        sim.run()
        assert got == [[8, 9, 10, 11, 12, 13], [102, 103, 104]], skid
        assert reads[0] == 2, skid


def test_run_reader_lanes_must_be_a_power_of_two():
    for lanes in (0, 3, 6, 12):
        with pytest.raises(ValueError, match="power of two"):
            RunReader(lanes=lanes, depth=4)
    for lanes in (1, 2, 4):
        dut = RunReader(lanes=lanes, depth=4)
        assert len(dut.rd.data) == 8 * lanes  # one L1 word of ``lanes`` bytes
        assert (len(dut.busy), len(dut.stall), len(dut.pad_byte)) == (1, 1, 8)


def test_task_fields_cause_and_raw():
    """task_fields: cause 0 (none) unless given, every field 0 without a task; raw is the
    i32 (accumulator) output, not the requantised types."""
    assert task_fields(None).as_value().value == 0
    assert task_fields(None, cause=5).cause == 5
    for elem, raw in (("i8", 0), ("i16", 0), ("i32", 1)):
        fields = task_fields(_task(out_elem=elem))
        assert (fields.cause, fields.raw, fields.out_bytes) == (0, raw, {"i8": 1, "i16": 2,
                                                                         "i32": 4}[elem])
    assert task_fields(_task(), cause=3).cause == 3


def test_run_reader_fills_its_window_under_back_pressure():
    """While nothing takes its vectors the reader still reads ahead, and no further than
    it can hold: the window takes 2*lanes bytes of the run and three more words wait in
    the pending queue (5 reads of a 6-word run, one a cycle from the command's first
    cycle on). In the cycle the first vector leaves, the oldest pending word enters the
    window, and the queue, full at the start of that cycle, takes the sixth word's
    request a cycle later; the vectors follow in consecutive cycles all the same."""
    mem = bytearray(random.Random(50).randbytes(64))
    dut = RunReader(lanes=8, depth=8)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    run = Run(16, 48, tag=(3, 0, 0, 0, 0))

    async def bench(ctx):
        l1 = L1Port(dut.rd, mem, 8, random.Random(51), deny=0.0)
        ctx.set(dut.cmd.valid, 1)
        ctx.set(dut.cmd.payload, _run_const(run))
        reads, got, read_at = 0, [], []
        for cycle in range(20):
            ctx.set(dut.o.ready, cycle >= 10)
            l1.before(ctx)
            if ctx.get(dut.rd.go):
                reads += 1
                read_at.append(cycle)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                p = ctx.get(dut.o.payload)
                got.append((cycle, [int(p.data[i]) for i in range(8)]))
            took = ctx.get(dut.cmd.ready)
            await ctx.tick()
            l1.after(ctx)
            if took:
                ctx.set(dut.cmd.valid, 0)
        assert read_at[:5] == [1, 2, 3, 4, 5]   # before a vector leaves
        assert read_at[5:] == [11]
        assert got == [(10 + j, list(mem[16 + 8 * j:24 + 8 * j])) for j in range(6)]

    sim.add_testbench(bench)
    sim.run()


def test_run_reader_takes_the_next_command_when_the_run_ends_without_skid():
    """Without the skid register (the default) a command is taken only as the current run's
    last word is requested: while a three-word run waits for grants, cmd.ready stays low.
    With it, cmd.ready stays high while the skid entry is free (one command taken ahead)."""
    for skid, want in ((None, [0, 0, 0]), (True, [1, 0, 0])):
        dut = RunReader(lanes=8, depth=8) if skid is None else RunReader(lanes=8, depth=8,
                                                                         skid=skid)
        sim = Simulator(dut)
        sim.add_clock(1e-6)
        seen = []

        async def bench(ctx, dut=dut, seen=seen):
            ctx.set(dut.cmd.valid, 1)
            ctx.set(dut.cmd.payload, _run_const(Run(0, 24, tag=(0, 0, 0, 0, 0))))
            await ctx.tick()  # the first run is taken (the reader was idle)
            ctx.set(dut.cmd.payload, _run_const(Run(32, 8, tag=(1, 0, 0, 0, 0))))
            for _ in range(3):  # no grant: the run's first word is never read
                ctx.set(dut.rd.gnt, 0)
                seen.append(ctx.get(dut.cmd.ready))
                await ctx.tick()
                if seen[-1]:
                    ctx.set(dut.cmd.valid, 0)
            assert ctx.get(dut.busy)

        sim.add_testbench(bench)
        sim.run()
        assert seen == want, skid


def test_task_field_widths_match_their_users():
    """The task fields the hardware tests with ``~`` (has_bias, pix_bias, raw in the unit)
    are single bits (a 2-bit 1 would be true after ``~``), the loop bounds the AGUs and the
    unit count to are as wide as their 16-bit counters (``c + 1 == bound`` at a bound a
    counter cannot reach would never end the loop)."""
    layout = task_fields_layout()
    for name in ("has_bias", "pix_bias", "raw"):
        assert Shape.cast(layout[name].shape) == unsigned(1), name
    for name in ("batch", "oh", "ow", "kh", "kw", "cin", "mats"):
        assert Shape.cast(layout[name].shape) == unsigned(16), name


def test_run_tag_fields_the_unit_packs_by_position():
    """The unit packs Cat(yaddr, lane, tile) of an activation run's tag into the array's
    {yaddr: 32, ncols: 8, tile: 8} tag, so these tag fields have exactly those widths."""
    tag = tag_layout()
    assert [Shape.cast(tag[n].shape).width for n in ("yaddr", "lane", "tile")] == [32, 8, 8]
