"""The CSTL's table reader against the table bytes in a DDR model.

A DDR model behind the reader's command/data streams answers with random delays (taking
commands only when nothing is in flight, as the engine's AXI reader does); the word stream
sees random back-pressure. Tables sit at random multiples of 8 in random DDR bytes (on the
128-bit bus half of them start in the middle of a bus word); the words passed on must be
the table's 256 bytes as little-endian 32-bit words, and no read may reach past the bus
word holding the table's last byte. Jobs alternate with eltwise entries (``entry`` set at
``start``: the 48 bytes of an ``ELTWISE_ENTRY``), under the same rules.
"""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from nem.taskformat import ELTWISE_ENTRY
from npu.cstl.unit import TABLE_BYTES
from npu.engine.table_fetch import TableFetcher


@pytest.mark.parametrize("width", [32, 64, 128])
def test_tables_read_word_by_word(width):
    rng = random.Random(width)
    wb = width // 8
    dut = TableFetcher(addr_width=32, data_width=width)
    jobs = []
    for j in range(6):
        ddr = rng.randbytes(2048)
        size = TABLE_BYTES if j % 2 == 0 else ELTWISE_ENTRY.size
        addr = 8 * rng.randrange((2048 - size) // 8 + 1)
        jobs.append((ddr, addr, size))
    results = []

    async def bench(ctx):
        for ddr, addr, size in jobs:
            words, reads, started = [], [], False
            end = -(-(addr + size) // wb) * wb
            ctx.set(dut.start.payload, addr)
            ctx.set(dut.entry, size != TABLE_BYTES)
            ctx.set(dut.start.valid, 1)
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
                    assert at + beats * wb <= end, "a read past the table's last word"
                    reads = [int.from_bytes(ddr[at + k * wb: at + (k + 1) * wb], "little")
                             for k in range(beats)]
            else:
                raise AssertionError("the fetcher did not finish")
            results.append(words)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for (ddr, addr, size), words in zip(jobs, results, strict=True):
        table = ddr[addr:addr + size]
        assert words == [int.from_bytes(table[4 * k:4 * k + 4], "little")
                         for k in range(size // 4)]
