"""Stream drivers and monitors for the Amaranth simulator, with idle cycles and back-pressure.

Use inside ``async def`` testbenches (``sim.add_testbench``). Both sides take a
``random.Random`` and a probability: the sender inserts idle cycles (``valid`` low) and the
receiver withholds ``ready``, each cycle with that probability. Every wait is bounded by
``timeout`` cycles, so a block that never answers fails the test with
:class:`~sim.stream_errors.StreamTimeout` (naming the stream and the cycle, counted from the
start of the call) instead of hanging it.
"""

from __future__ import annotations

import random

from sim.stream_errors import StreamTimeout

__all__ = ["StreamTimeout", "stream_recv", "stream_send"]


async def stream_send(ctx, port, payloads, *, rng=None, idle=0.0, timeout=10_000,
                      name="input stream"):
    """Drive every payload in *payloads* into stream *port* (the DUT's input).

    Parameters
    ----------
    ctx : amaranth.sim.SimulatorContext
    port : stream.Interface
        The component's input stream.
    payloads : iterable
        Values for ``port.payload`` (ints or ``data.Const``-compatible values).
    rng : random.Random, optional
        Source of idle cycles; default seeded with 0.
    idle : float
        Probability of an idle cycle before each transfer (and after an idle cycle).
    timeout : int
        Cycles to wait for ``ready`` before raising :class:`StreamTimeout`.
    name : str
        The stream's name in error messages.
    """
    rng = rng or random.Random(0)
    cycle = 0
    for index, payload in enumerate(payloads):
        while idle and rng.random() < idle:
            ctx.set(port.valid, 0)
            await ctx.tick()
            cycle += 1
        ctx.set(port.payload, payload)
        ctx.set(port.valid, 1)
        for _ in range(timeout):
            *_, ready = await ctx.tick().sample(port.ready)
            cycle += 1
            if ready:
                break
        else:
            raise StreamTimeout(name, cycle, f"transfer {index} not accepted in {timeout} cycles")
        ctx.set(port.valid, 0)


async def stream_recv(ctx, port, count, *, rng=None, backpressure=0.0, timeout=10_000,
                      name="output stream"):
    """Receive *count* payloads from stream *port* (the DUT's output).

    Parameters
    ----------
    ctx : amaranth.sim.SimulatorContext
    port : stream.Interface
        The component's output stream.
    count : int
        Number of transfers to wait for.
    rng : random.Random, optional
        Source of back-pressure; default seeded with 1.
    backpressure : float
        Probability that ``ready`` is low in a given cycle.
    timeout : int
        Cycles allowed between two transfers before raising :class:`StreamTimeout`.
    name : str
        The stream's name in error messages.

    Returns
    -------
    list
        The payloads, in order (as returned by ``ctx.get``).
    """
    rng = rng or random.Random(1)
    received = []
    waited = cycle = 0
    while len(received) < count:
        ready = not (backpressure and rng.random() < backpressure)
        ctx.set(port.ready, ready)
        *_, valid, payload = await ctx.tick().sample(port.valid, port.payload)
        cycle += 1
        if ready and valid:
            received.append(payload)
            waited = 0
        else:
            waited += 1
            if waited > timeout:
                raise StreamTimeout(name, cycle, f"{len(received)} of {count} transfers, "
                                                 f"then nothing for {timeout} cycles")
    ctx.set(port.ready, 0)
    return received
