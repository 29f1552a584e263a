"""StreamFIFO and the shared stream helpers in the Amaranth simulator."""

import random

import pytest
from amaranth.sim import Simulator

from npu.bus.stream import StreamFIFO
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
    ({"width": 8, "depth": 1}, ValueError, "depth must be an integer of at least 2, not 1"),
])
def test_constructor_errors(kwargs, error, message):
    with pytest.raises(error) as info:
        StreamFIFO(**kwargs)
    assert str(info.value) == message
