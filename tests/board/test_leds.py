"""The board core's LEDs (:class:`npu.board.top.BoardCore` without an engine) in the
Amaranth simulator: one byte on the UART pin lights LED 1 for ``2**stretch_bits - 1``
cycles in a row once its stop bit is sampled, and LED 3 (the bridge in a frame) until the
bridge's timeout drops the frame (the byte is a request's sync byte); LED 2 (a byte
sent) and LED 4 (an error reply) light only with the timeout's reply; LED 0 toggles every
``2**(stretch_bits + 1)`` cycles and LED 7 (the PLL, bypassed in the core) is on."""

import itertools

from amaranth.sim import Simulator

from npu.board.top import BoardCore

DIV = 4
STRETCH = 4


def test_leds_follow_their_events():
    dut = BoardCore(device=None, memory_bytes=256, divisor=DIV, timeout=200,
                    stretch_bits=STRETCH)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    trace = []

    async def bench(ctx):
        await ctx.tick().repeat(3)
        # 0x5A, LSB first between a start bit and a stop bit, DIV cycles a bit
        for bit in [0] + [0x5A >> k & 1 for k in range(8)] + [1]:
            ctx.set(dut.uart_rx, bit)
            for _ in range(DIV):
                await ctx.tick()
                trace.append(ctx.get(dut.led))
        for _ in range(400):
            await ctx.tick()
            trace.append(ctx.get(dut.led))

    sim.add_testbench(bench)
    sim.run()
    led = [[(value >> k) & 1 for value in trace] for k in range(8)]
    stop = 9 * DIV                               # the stop bit's first cycle in the trace
    lit = [i for i, on in enumerate(led[1]) if on]
    # one stretch, 2**STRETCH - 1 cycles in a row, once the stop bit has been sampled
    assert lit and lit == list(range(lit[0], lit[0] + 2**STRETCH - 1)), lit
    assert stop < lit[0] <= stop + DIV + 3, lit[0]
    assert all(led[7])
    # 0x5A is a request's sync byte: in a frame from it until the timeout (200 cycles)
    # drops the frame with an error reply, whose bytes light LEDs 2 and 4 only then
    frame = [i for i, on in enumerate(led[3]) if on]
    assert frame and abs(frame[0] - lit[0]) <= 1 and len(frame) >= 200 and not led[3][-1]
    for k in (2, 4):
        assert any(led[k]) and led[k].index(1) >= frame[0] + 200, k
    # the heartbeat: the top bit of a free-running counter of STRETCH + 2 bits
    edges = [i for i in range(1, len(trace)) if led[0][i] != led[0][i - 1]]
    assert len(edges) >= 3
    assert {b - a for a, b in itertools.pairwise(edges)} == {2**(STRETCH + 1)}
