"""``npu.bus.ports.fetch_into`` alone, against a bus that queues commands.

The engine's AXI reader takes a command only when nothing is in flight; here the bus takes
commands at random, also while earlier ones are still being answered (a queue), answers
their words with random gaps, and the FIFO is read with random back-pressure. A job
fetches the words ``[first, end)`` (the data word is its index). Checked every cycle:
the data is never held back (``fetch_into`` asks only for words its FIFO has room for);
the commands cover ``[first, end)`` in order without a gap or an overlap, none longer than
``max_beats`` and none while ``enable`` is low; the FIFO hands out exactly the job's words
in order. A command is worked out a cycle ahead, so one issued right after another (a
bus that takes two in a row) would repeat a stale word count: that is what the queueing
bus is here to catch.
"""

from __future__ import annotations

import random

import pytest
from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from npu.bus.axi import command_layout
from npu.bus.ports import fetch_into

LW = 2   # 4-byte bus words


class _Fetcher(wiring.Component):
    """``fetch_into`` with its FIFO: ``start`` loads ``first`` and enables it (``end`` is
    held by the bench for the job); ``stop`` disables it. ``max_beats=None``: the
    function's default."""

    def __init__(self, depth, max_beats):
        self.depth, self.max_beats = depth, max_beats
        super().__init__({
            "start": In(1), "stop": In(1), "first": In(16), "end": In(16),
            "cmd": Out(stream.Signature(command_layout(32))),
            "data": In(stream.Signature(data.StructLayout({"data": 32, "last": 1}))),
            "o": Out(stream.Signature(32)),
            "enable": Out(1), "inflight": Out(8),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = fifo = SyncFIFOBuffered(width=32, depth=self.depth)
        word = Signal(16)
        beats_arg = {} if self.max_beats is None else {"max_beats": self.max_beats}
        fire, beats, inflight = fetch_into(m, fifo, self.depth, self.cmd, self.data,
                                           enable=self.enable, word=word, end=self.end,
                                           lw=LW, **beats_arg)
        m.d.comb += self.inflight.eq(inflight)
        with m.If(fire):
            m.d.sync += word.eq(word + beats)
        with m.If(self.start):
            m.d.sync += [word.eq(self.first), self.enable.eq(1)]
        with m.Elif(self.stop):
            m.d.sync += self.enable.eq(0)
        m.d.comb += [self.o.valid.eq(fifo.r_rdy), self.o.payload.eq(fifo.r_data),
                     fifo.r_en.eq(self.o.ready)]
        return m


@pytest.mark.parametrize(("depth", "max_beats"), [(16, 16), (8, 4), (4, 1), (6, 5)])
def test_fetch_into_against_a_queueing_bus(depth, max_beats):
    rng = random.Random(depth * 100 + max_beats)
    dut = _Fetcher(depth, max_beats)
    jobs = [(f, f + n) for f, n in ((rng.randrange(200), rng.choice([0, 1, 3, 17, 40, 64]))
                                    for _ in range(12))]
    seen = {"cmds": 0, "two_in_a_row": 0}

    async def bench(ctx):
        queue = []          # word indices asked for, not yet answered
        for first, end in jobs:
            ctx.set(dut.first, first)
            ctx.set(dut.end, end)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            nxt, got, last_fire = first, [], False
            for _ in range(4000):
                if not ctx.get(dut.enable) and not queue and len(got) >= end - first:
                    break
                take = rng.random() < 0.7
                ctx.set(dut.cmd.ready, take)
                give = bool(queue) and rng.random() < 0.6
                ctx.set(dut.data.valid, give)
                if give:
                    ctx.set(dut.data.payload.data, queue[0])
                want = rng.random() < 0.6
                ctx.set(dut.o.ready, want)
                fired = take and ctx.get(dut.cmd.valid)
                if fired:
                    assert ctx.get(dut.enable), "a command while disabled"
                    addr, beats = ctx.get(dut.cmd.payload.addr), ctx.get(dut.cmd.payload.beats)
                    assert addr == nxt << LW, (addr, nxt, first, end)
                    assert 1 <= beats <= max_beats and nxt + beats <= end, (beats, nxt, end)
                    queue += range(nxt, nxt + beats)
                    nxt += beats
                    seen["cmds"] += 1
                    seen["two_in_a_row"] += last_fire
                last_fire = fired
                if give:
                    assert ctx.get(dut.data.ready), "fetch_into held the bus's data"
                    queue.pop(0)
                if want and ctx.get(dut.o.valid):
                    got.append(ctx.get(dut.o.payload))
                # disabled once every command is out (the caller's job ends there)
                ctx.set(dut.stop, nxt == end)
                await ctx.tick()
            else:
                raise AssertionError(f"job {first}..{end} did not finish")
            ctx.set(dut.stop, 0)
            ctx.set(dut.cmd.ready, 1)
            for _ in range(4):      # and nothing more comes
                assert not ctx.get(dut.o.valid) and not ctx.get(dut.cmd.valid)
                await ctx.tick()
            assert nxt == end and got == list(range(first, end)), (first, end, got)
            assert ctx.get(dut.inflight) == 0

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen["cmds"] >= len([j for j in jobs if j[1] > j[0]])
    # a command is worked out a cycle ahead: never two in consecutive cycles
    assert seen["two_in_a_row"] == 0, seen


def test_fetch_into_refuses_commands_longer_than_its_fifo():
    with pytest.raises(ValueError, match=r"max_beats \(17\) must be from 1 to the FIFO "
                                         r"depth \(16\)"):
        Simulator(_Fetcher(16, 17))


@pytest.mark.parametrize(("depth", "max_beats"), [(16, 16), (6, 5)])
def test_fetch_into_asks_nothing_when_word_is_past_end(depth, max_beats):
    """``word`` beyond ``end`` (the SEQ jumps over its buffer table, the caller's end may lag
    behind): enabled, with the bus always ready, no command for as long as that holds,
    whatever the bits of the negative difference; then ``end`` moves past ``word`` and
    the words come."""
    dut = _Fetcher(depth, max_beats)
    cases = [(first, first - back) for first in (40, 1000, 65535)
             for back in (1, 3, max_beats, max_beats + 1, 17, 33, 40)]

    async def bench(ctx):
        ctx.set(dut.cmd.ready, 1)
        ctx.set(dut.o.ready, 1)
        for first, end in cases:
            ctx.set(dut.first, first)
            ctx.set(dut.end, end)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            for _ in range(6):
                assert ctx.get(dut.enable)
                assert not ctx.get(dut.cmd.valid), (first, end, ctx.get(dut.cmd.payload.beats))
                await ctx.tick()
            ctx.set(dut.stop, 1)
            await ctx.tick()
            ctx.set(dut.stop, 0)
        # and a word below end asks, with the bus's answer
        ctx.set(dut.first, 10)
        ctx.set(dut.end, 12)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for _ in range(4):
            if ctx.get(dut.cmd.valid):
                break
            await ctx.tick()
        assert ctx.get(dut.cmd.valid) and ctx.get(dut.cmd.payload.beats) == 2
        assert ctx.get(dut.cmd.payload.addr) == 10 << LW

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def _first_commands(dut, first, end, cycles=8):
    """Start a job ``[first, end)`` on a fresh ``dut`` with the bus taking every command
    and answering none; returns the commands seen as ``(addr, beats)`` and the words in
    flight after ``cycles`` cycles."""
    out = {}

    async def bench(ctx):
        ctx.set(dut.cmd.ready, 1)
        ctx.set(dut.first, first)
        ctx.set(dut.end, end)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        cmds = []
        for _ in range(cycles):
            if ctx.get(dut.cmd.valid):
                cmds.append((ctx.get(dut.cmd.payload.addr), ctx.get(dut.cmd.payload.beats)))
            await ctx.tick()
        out["result"] = cmds, ctx.get(dut.inflight)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out["result"]


@pytest.mark.parametrize("distance", [16384, 20000, 32767, 32768, 32771, 40000, 65535])
def test_fetch_into_far_ends(distance):
    """``end - word`` up to the whole range of 16-bit word indices (its subtraction one
    bit wider than the operands, the sign its top bit): the first command is a full one,
    at ``word``, and with nothing answered no second one comes (the FIFO of 16 words is
    all in flight)."""
    first = 65535 - distance
    cmds, inflight = _first_commands(_Fetcher(16, 16), first, first + distance)
    assert cmds == [(first << LW, 16)], (distance, cmds)
    assert inflight == 16


def test_fetch_into_default_max_beats_is_16():
    """Without ``max_beats`` a command carries at most 16 words (a FIFO of 32 words has
    room for two of them), and a FIFO of 16 words is enough."""
    cmds, inflight = _first_commands(_Fetcher(32, None), 5, 45, cycles=10)
    assert cmds == [(5 << LW, 16), (21 << LW, 16)], cmds
    assert inflight == 32
    cmds, _ = _first_commands(_Fetcher(16, None), 0, 3)
    assert cmds == [(0, 3)], cmds
