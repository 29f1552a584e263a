"""StreamFIFO and the shared stream helpers in the Amaranth simulator."""

import functools
import random

import pytest
from amaranth import Fragment, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from npu.bus.stream import (
    PingPongBuffer,
    RegisterFIFO,
    SkidBuffer,
    StreamFIFO,
    start_after_decode,
)
from sim.streams import StreamTimeout, stream_recv, stream_send


@pytest.mark.parametrize(("idle", "backpressure"), [(0.0, 0.0), (0.4, 0.0), (0.0, 0.7),
                                                    (0.3, 0.5)])
def test_order_kept_under_stalls(idle, backpressure):
    dut = StreamFIFO(width=12, depth=4)
    rng = random.Random(7)
    words = [rng.getrandbits(12) for _ in range(300)]
    result = {}

    async def producer(ctx):
        await stream_send(ctx, dut.i, words, rng=random.Random(1), idle=idle)

    async def consumer(ctx):
        result["got"] = await stream_recv(ctx, dut.o, len(words), rng=random.Random(2),
                                          backpressure=backpressure)

    async def level_checker(ctx):
        async for _, _, level in ctx.tick().sample(dut.level):
            assert level <= 4

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.add_testbench(level_checker, background=True)
    sim.run()
    assert result["got"] == words


def test_receiver_times_out_instead_of_hanging():
    dut = StreamFIFO(width=8, depth=2)

    async def consumer(ctx):
        with pytest.raises(StreamTimeout) as info:
            await stream_recv(ctx, dut.o, 1, timeout=20, name="fifo out")
        # ready is offered for 21 cycles (the wait goes past the bound of 20) in vain.
        assert str(info.value) == "fifo out: 0 of 1 transfers, then nothing for 20 cycles " \
                                  "(cycle 21)"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(consumer)
    sim.run()


def test_sender_times_out_when_never_ready():
    dut = StreamFIFO(width=8, depth=2)

    async def producer(ctx):
        with pytest.raises(StreamTimeout) as info:
            await stream_send(ctx, dut.i, [1, 2, 3], timeout=30)
        # Depth 2 is a one-entry FIFO plus an output register: transfer 0 fills the entry in
        # cycle 1, which is full (not ready) in cycle 2 while the word moves to the register;
        # transfer 1 goes in in cycle 3, then transfer 2 is refused for 30 cycles: 33.
        assert (info.value.stream, info.value.cycle) == ("input stream", 33)
        assert info.value.problem == "transfer 2 not accepted in 30 cycles"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.run()


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"width": 0, "depth": 4}, TypeError, "width must be a positive integer, not 0"),
    ({"width": 2.5, "depth": 4}, TypeError, "width must be a positive integer, not 2.5"),
    ({"width": True, "depth": 4}, TypeError, "width must be a positive integer, not True"),
    ({"width": 8, "depth": 1}, ValueError, "depth must be an integer of at least 2, not 1"),
    ({"width": 8, "depth": 2.5}, ValueError,
     "depth must be an integer of at least 2, not 2.5"),
    ({"width": 8, "depth": True}, ValueError,
     "depth must be an integer of at least 2, not True"),
])
def test_constructor_errors(kwargs, error, message):
    with pytest.raises(error) as info:
        StreamFIFO(**kwargs)
    assert str(info.value) == message


class SkidModel:
    """Python model of :class:`npu.bus.stream.SkidBuffer`, one call per clock edge: what
    ``i.ready``, ``o.valid`` and ``o.payload`` are in the cycle, from its two registers.
    :class:`npu.bus.stream.PingPongBuffer` holds its words differently (two entries by
    pointer) and must show the same in every cycle."""

    def __init__(self):
        self.out = None   # the output register's word (None: empty)
        self.skid = None  # the skid entry's word

    def ready(self):
        return self.skid is None

    def edge(self, i_valid, i_word, o_ready):
        took = i_valid and self.ready()
        if self.out is None or o_ready:
            if self.skid is not None:
                self.out, self.skid = self.skid, None
            else:
                self.out = i_word if i_valid else None
        elif took:
            self.skid = i_word
        return took


SLICES = [SkidBuffer, PingPongBuffer]


class QueueModel:
    """Python model of :class:`npu.bus.stream.RegisterFIFO`, with the interface of
    :class:`SkidModel`: up to ``depth`` words held, ``i.ready`` while fewer are, ``o`` the
    oldest, each as it was at the start of the cycle (a word written in one cycle is on
    ``o`` from the next). With ``depth`` 2 it shows what ``SkidModel`` shows."""

    def __init__(self, depth):
        self.depth, self.held = depth, []

    @property
    def out(self):
        return self.held[0] if self.held else None

    def ready(self):
        return len(self.held) < self.depth

    def edge(self, i_valid, i_word, o_ready):
        took = i_valid and self.ready()
        if self.held and o_ready:
            self.held.pop(0)
        if took:
            self.held.append(i_word)
        return took


SLICES = [SkidBuffer, PingPongBuffer, functools.partial(RegisterFIFO, depth=2)]
STALLS = [(0.0, 0.0), (0.4, 0.0), (0.0, 0.7), (0.3, 0.5), (0.0, 0.5)]


def _against_model(dut, model, rng, idle, backpressure, n=400):
    """Random producer gaps and consumer stalls, cycle by cycle against *model*: the
    words leave in order, and ``i.ready`` does not follow ``o.ready`` within a cycle."""
    words = [rng.getrandbits(12) for _ in range(n)]
    got = []

    async def bench(ctx):
        k = 0
        for _cycle in range(8 * n):
            i_valid = k < len(words) and rng.random() >= idle
            o_ready = rng.random() >= backpressure
            ctx.set(dut.i.valid, i_valid)
            ctx.set(dut.i.payload, words[k] if k < len(words) else 0)
            ctx.set(dut.o.ready, o_ready)
            assert ctx.get(dut.i.ready) == model.ready()
            assert ctx.get(dut.o.valid) == (model.out is not None)
            if model.out is not None:
                assert ctx.get(dut.o.payload) == model.out
                if o_ready:
                    got.append(model.out)
            # a registered ready: flipping o.ready now does not change i.ready now
            ctx.set(dut.o.ready, not o_ready)
            assert ctx.get(dut.i.ready) == model.ready()
            ctx.set(dut.o.ready, o_ready)
            if model.edge(i_valid, words[k] if k < len(words) else 0, o_ready):
                k += 1
            await ctx.tick()
            if len(got) == len(words):
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == words


@pytest.mark.parametrize("cls", SLICES)
@pytest.mark.parametrize(("idle", "backpressure"), STALLS)
def test_skid_buffer_against_its_model_under_stalls(cls, idle, backpressure):
    """The slices against ``SkidModel`` (see ``_against_model``)."""
    _against_model(cls(12), SkidModel(), random.Random(11), idle, backpressure)


@pytest.mark.parametrize("cls", SLICES)
def test_skid_buffer_keeps_one_transfer_a_cycle(cls):
    """Producer always valid, consumer always ready: N words in N + 1 cycles (one of
    latency), with a struct payload."""
    from amaranth.lib import data

    layout = data.StructLayout({"a": 8, "b": 4})
    dut = cls(layout)
    n = 50
    seen = []

    async def bench(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.o.ready, 1)
        for cycle in range(n + 1):
            ctx.set(dut.i.payload, {"a": cycle % 256, "b": cycle % 16})
            if ctx.get(dut.o.valid):
                p = ctx.get(dut.o.payload)
                seen.append((cycle, p.a, p.b))
            assert cycle >= n or ctx.get(dut.i.ready)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [(c, (c - 1) % 256, (c - 1) % 16) for c in range(1, n + 1)]


class _DecodeHarness(wiring.Component):
    """A shadow register written through ``write``, its decode (``value ^ 0x5A``) after
    ``latency`` registers of its own, and ``start_after_decode`` passing ``start`` on."""

    def __init__(self, latency, registers, *, defaults=False):
        self.latency, self.registers, self.defaults = latency, registers, defaults
        super().__init__({"write": In(stream.Signature(8)), "start": In(stream.Signature(1)),
                          "core": Out(stream.Signature(8))})

    def elaborate(self, platform):
        m = Module()
        shadow = Signal(8)
        m.d.comb += self.write.ready.eq(1)
        with m.If(self.write.valid):
            m.d.sync += shadow.eq(self.write.payload)
        decoded = shadow ^ 0x5A
        for _ in range(self.latency):
            stage = Signal(8)
            m.d.sync += stage.eq(decoded)
            decoded = stage
        if self.defaults:   # the keyword defaults: a combinational decode, one register
            start_after_decode(m, self.start, self.core, decoded, self.write.valid)
        else:
            start_after_decode(m, self.start, self.core, decoded, self.write.valid,
                               latency=self.latency, registers=self.registers)
        return m


@pytest.mark.parametrize(("latency", "registers", "defaults"),
                         [(0, 1, False), (0, 2, False), (1, 1, False), (1, 2, False),
                          (2, 3, False), (0, 1, True)])
def test_start_after_decode_waits_for_the_decode_of_the_registers_as_they_are(
        latency, registers, defaults):
    """Random writes, starts and core stalls, cycle by cycle: ``core.valid`` is high exactly
    when ``start`` is and no write happened in the last ``latency + registers`` cycles, and
    then the payload is the decode of the shadow register as it is now. ``defaults``:
    called without ``latency`` and ``registers``, which must mean 0 and 1."""
    dut = _DecodeHarness(latency, registers, defaults=defaults)
    rng = random.Random(latency * 10 + registers)
    wait = latency + registers
    passed = []

    async def bench(ctx):
        shadow, since = 0, 0          # cycles without a write, back from the last (reset: 0)
        for _cycle in range(2000):
            write = rng.random() < 0.15
            word = rng.getrandbits(8)
            start = rng.random() < 0.6
            ready = rng.random() < 0.7
            ctx.set(dut.write.valid, write)
            ctx.set(dut.write.payload, word)
            ctx.set(dut.start.valid, start)
            ctx.set(dut.core.ready, ready)
            fresh = since >= wait
            assert ctx.get(dut.core.valid) == (start and fresh)
            assert ctx.get(dut.start.ready) == (ready and fresh)
            if start and fresh:
                assert ctx.get(dut.core.payload) == shadow ^ 0x5A
                passed.append(ready)
            await ctx.tick()
            since = 0 if write else since + 1
            shadow = word if write else shadow

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert sum(passed) > 100        # the check above saw many transfers


def test_start_after_decode_wants_a_register():
    with pytest.raises(ValueError, match="registers must be >= 1, not 0"):
        Fragment.get(_DecodeHarness(0, 0), None)



@pytest.mark.parametrize("depth", [2, 3, 5])
@pytest.mark.parametrize(("idle", "backpressure"), STALLS)
def test_register_fifo_against_its_model_under_stalls(depth, idle, backpressure):
    """``RegisterFIFO`` of 2, 3 and 5 entries against ``QueueModel`` (see
    ``_against_model``)."""
    _against_model(RegisterFIFO(12, depth), QueueModel(depth),
                   random.Random(depth * 100 + int(10 * idle) + int(100 * backpressure)),
                   idle, backpressure, n=300)


def test_register_fifo_wants_two_entries():
    with pytest.raises(ValueError, match="depth must be an integer of at least 2, not 1"):
        RegisterFIFO(8, 1)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_register_fifo_wants_an_integer_depth():
    for bad in (2.5, True, "3"):
        with pytest.raises(ValueError, match=rf"^depth must be an integer of at least 2, "
                                             rf"not {bad!r}$"):
            RegisterFIFO(8, bad)


@pytest.mark.parametrize("depth", [2, 5])
def test_stream_fifo_level_counts_to_full_and_back(depth):
    """A one-bit-wide FIFO (the narrowest allowed) offered words with the output stalled:
    it takes exactly ``depth``, ``level`` rises from 0 to ``depth`` and stays, ``i.ready``
    is low at full, and the words come out in order as it drains."""
    dut = StreamFIFO(width=1, depth=depth)

    async def bench(ctx):
        ctx.set(dut.o.ready, 0)
        levels, sent = [], 0
        for _ in range(depth + 4):
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, sent % 2)
            levels.append(ctx.get(dut.level))
            took = ctx.get(dut.i.ready)
            await ctx.tick()
            sent += took
        ctx.set(dut.i.valid, 0)
        assert sent == depth, f"{sent} words taken by a FIFO of {depth}"
        assert ctx.get(dut.level) == depth and not ctx.get(dut.i.ready)
        assert levels == sorted(levels) and levels[0] == 0 and max(levels) == depth
        out = []
        ctx.set(dut.o.ready, 1)
        for _ in range(4 * depth):
            if ctx.get(dut.o.valid):
                out.append(ctx.get(dut.o.payload))
            await ctx.tick()
        assert out == [k % 2 for k in range(depth)]
        assert ctx.get(dut.level) == 0

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
