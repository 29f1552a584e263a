"""Stream drivers and monitors for cocotb, with idle cycles and back-pressure.

Amaranth flattens a stream port ``i`` to the Verilog ports ``i__valid``, ``i__ready`` and
``i__payload``; these classes take that prefix.

Timing discipline (independent of the simulator's event ordering): testbench signals are
driven just after the *falling* clock edge, and a transfer is decided in the ``ReadOnly``
phase of that half-cycle, when every DUT output is settled and equal to what the next
rising edge samples. A transfer happens on that rising edge iff ``valid and ready`` then.
"""

from __future__ import annotations

import itertools
import random

from cocotb.triggers import FallingEdge, ReadOnly

__all__ = ["StreamSink", "StreamSource", "StreamTimeout", "random_pauses"]


class StreamTimeout(AssertionError):
    """No transfer happened within the allowed number of cycles."""


def random_pauses(seed, probability):
    """Endless iterator of booleans, true (pause) with *probability*."""
    rng = random.Random(seed)
    while True:
        yield rng.random() < probability


class StreamSource:
    """Drives a DUT input stream.

    Parameters
    ----------
    dut : cocotb handle
    prefix : str
        Port name prefix, e.g. ``"i"`` for ``i__valid``/``i__ready``/``i__payload``.
    clock : cocotb handle
    pauses : iterator of bool, optional
        One value per cycle; true keeps ``valid`` low that cycle. Default: never pause.
    """

    def __init__(self, dut, prefix, clock, *, pauses=None):
        self.valid = getattr(dut, f"{prefix}__valid")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.clock = clock
        self.prefix = prefix
        self.pauses = pauses if pauses is not None else itertools.repeat(False)
        self.valid.value = 0
        self.sent = 0

    async def send(self, payloads, *, timeout=10_000):
        """Send every payload; return when the last one has been accepted."""
        for payload in payloads:
            await FallingEdge(self.clock)
            while next(self.pauses):
                self.valid.value = 0
                await FallingEdge(self.clock)
            self.payload.value = payload
            self.valid.value = 1
            for _ in range(timeout):
                await ReadOnly()
                if self.ready.value == 1:
                    break
                await FallingEdge(self.clock)
            else:
                raise StreamTimeout(
                    f"{self.prefix}: transfer {self.sent} not accepted in {timeout} cycles")
            self.sent += 1
        await FallingEdge(self.clock)
        self.valid.value = 0


class StreamSink:
    """Receives a DUT output stream, withholding ``ready`` on paused cycles.

    Parameters
    ----------
    dut, prefix, clock
        As for :class:`StreamSource`.
    pauses : iterator of bool, optional
        One value per cycle; true keeps ``ready`` low that cycle. Default: always ready.
    """

    def __init__(self, dut, prefix, clock, *, pauses=None):
        self.valid = getattr(dut, f"{prefix}__valid")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.clock = clock
        self.prefix = prefix
        self.pauses = pauses if pauses is not None else itertools.repeat(False)
        self.ready.value = 0

    async def recv(self, count, *, timeout=10_000):
        """Receive *count* payloads (as ints); raise :class:`StreamTimeout` on silence."""
        received = []
        idle = 0
        while len(received) < count:
            await FallingEdge(self.clock)
            ready = not next(self.pauses)
            self.ready.value = int(ready)
            await ReadOnly()
            if ready and self.valid.value == 1:
                received.append(int(self.payload.value))
                idle = 0
            else:
                idle += 1
                if idle > timeout:
                    raise StreamTimeout(
                        f"{self.prefix}: {len(received)} of {count} transfers, "
                        f"then nothing for {timeout} cycles")
        await FallingEdge(self.clock)
        self.ready.value = 0
        return received
