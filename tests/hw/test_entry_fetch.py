"""The NMU's requantisation entry reader against the entries the binder encodes.

A DDR model behind the reader's command/data streams answers with random delays (and
takes commands only when nothing is in flight, as the engine's AXI reader does); the word
stream sees random back-pressure. Expected words: ``nem.taskformat.encode_requant`` of a
random entry, split into little-endian 32-bit words. Entries sit at random multiples of 8
(on the 128-bit bus half of them start in the middle of a bus word). Broken entries (a
channel count reaching past the data section, or above ``MAX_CHANNELS``) must give the
head with a channel count of 0, one ``error`` pulse, and end.
"""

from __future__ import annotations

import random
import struct

import pytest
from amaranth.sim import Simulator

from nem.taskformat import RequantEntry, encode_requant
from npu.engine.entry_fetch import HEAD_WORDS, MAX_CHANNELS, EntryFetcher


def _entry(rng, n):
    return RequantEntry(rng.randint(-128, 127), rng.randint(-128, 127), -128, 127,
                        tuple(rng.randint(1 << 30, (1 << 31) - 1) for _ in range(n)),
                        tuple(rng.randint(30, 45) for _ in range(n)))


def _run(width, jobs, seed):
    """Run ``jobs`` = [(ddr bytes, entry address, data section end)]; return, per job, the
    words passed on and the number of error pulses."""
    dut = EntryFetcher(addr_width=32, data_width=width)
    wb = width // 8
    rng = random.Random(seed)
    results = []

    async def bench(ctx):
        for ddr, addr, limit in jobs:
            words, errors, reads = [], 0, []
            ctx.set(dut.start.payload, {"addr": addr, "limit": limit})
            ctx.set(dut.start.valid, 1)
            started = False
            for _ in range(5000):
                take = not reads and rng.random() < 0.5
                ctx.set(dut.rd_cmd.ready, take)
                give = bool(reads) and rng.random() < 0.6
                ctx.set(dut.rd_data.valid, give)
                if give:
                    ctx.set(dut.rd_data.payload.data, reads[0])
                want = rng.random() < 0.6
                ctx.set(dut.words.ready, want)
                go = not started and ctx.get(dut.start.ready)
                cmd = ((ctx.get(dut.rd_cmd.payload.addr), ctx.get(dut.rd_cmd.payload.beats))
                       if take and ctx.get(dut.rd_cmd.valid) else None)
                popped = give and ctx.get(dut.rd_data.ready)
                if want and ctx.get(dut.words.valid):
                    words.append(ctx.get(dut.words.payload))
                errors += ctx.get(dut.error)
                busy = ctx.get(dut.busy)
                await ctx.tick()
                if go:
                    started = True
                    ctx.set(dut.start.valid, 0)
                elif started and not busy and not reads:
                    break
                if popped:
                    reads.pop(0)
                if cmd:
                    at, beats = cmd
                    assert at % wb == 0 and 1 <= beats <= 16
                    assert at + beats * wb <= len(ddr), "a read past the entry's last word"
                    reads = [int.from_bytes(ddr[at + k * wb: at + (k + 1) * wb], "little")
                             for k in range(beats)]
            else:
                raise AssertionError("the fetcher did not finish")
            results.append((words, errors))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return results


def _u32(raw):
    return list(struct.unpack(f"<{len(raw) // 4}I", raw))


@pytest.mark.parametrize("width", [32, 64, 128])
def test_entries_read_word_for_word(width):
    rng = random.Random(width)
    jobs, want = [], []
    for n in (0, 1, 3, 8, 17, 40):
        raw = encode_requant(_entry(rng, n))
        at = 8 * rng.randint(0, 20)
        tail = 8 * rng.randint(0, 3)
        ddr = bytearray(rng.randbytes(at)) + raw + bytearray(rng.randbytes(tail + 64))
        ddr = ddr[: -(-(at + len(raw) + tail) // (width // 8)) * (width // 8)]
        jobs.append((bytes(ddr), at, at + len(raw) + tail))
        want.append(_u32(raw))
    for (words, errors), exp in zip(_run(width, jobs, seed=width), want, strict=True):
        assert errors == 0
        assert words == exp


@pytest.mark.parametrize("width", [32, 64, 128])
def test_broken_channel_counts_are_cut_after_the_head(width):
    rng = random.Random(7 + width)
    jobs = []
    # (channel count, bytes of the data section after the head, entry address): the count
    # word at each place in a bus word (the entry at 0 or 8 in a 128-bit word)
    for n, room, at in ((5, 8 * 4, 0), (MAX_CHANNELS, 1 << 20, 8), (3, 0, 8),
                        (4, 8 * 4 - 1, 8), (4, 8 * 4 - 1, 16)):
        raw = bytearray(encode_requant(_entry(rng, 3)))
        raw[16:20] = struct.pack("<I", n)         # the channel count (head word 4)
        ddr = bytes(at) + bytes(raw) + bytes(64)
        # the data section ends ``room`` bytes after the head: too short for n pairs
        jobs.append((ddr, at, at + 24 + room))
    for k, (words, errors) in enumerate(_run(width, jobs, seed=3)):
        assert errors == 1, k
        assert len(words) == HEAD_WORDS and words[4] == 0, (k, words)


@pytest.mark.parametrize("width", [32, 128])
def test_an_entry_ending_on_the_data_section_end_is_read(width):
    """The pairs end on the section's last byte: read whole (one byte less is refused,
    above)."""
    rng = random.Random(11 + width)
    jobs, want = [], []
    for n, at in ((4, 8), (4, 16), (1, 0)):
        raw = encode_requant(_entry(rng, n))
        jobs.append((bytes(at) + raw + bytes(64), at, at + len(raw)))
        want.append(_u32(raw))
    for (words, errors), exp in zip(_run(width, jobs, seed=5), want, strict=True):
        assert errors == 0
        assert words == exp
