"""Stream plumbing shared by the blocks: a buffered FIFO with stream ports.

Every data port in the design is an :mod:`amaranth.lib.stream` interface: a transfer
happens on a rising edge where both ``valid`` and ``ready`` are high. A producer may not
drop ``valid`` or change ``payload`` until the transfer happens.
"""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

__all__ = ["StreamFIFO"]


class StreamFIFO(wiring.Component):
    """Synchronous FIFO between two streams (elastic buffer, breaks ``ready`` paths).

    Parameters
    ----------
    width : int
        Payload width in bits.
    depth : int
        Number of entries, at least 2.

    Attributes
    ----------
    i : stream, in
        Words to store.
    o : stream, out
        The same words, in order. Latency from ``i`` to ``o`` is at least one cycle.
    level : Signal, out
        Number of words held.
    """

    def __init__(self, *, width, depth):
        if not isinstance(width, int) or isinstance(width, bool) or width <= 0:
            raise TypeError(f"width must be a positive integer, not {width!r}")
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 2:
            raise ValueError(f"depth must be an integer of at least 2, not {depth!r}")
        self._width = width
        self._depth = depth
        super().__init__({
            "i": In(stream.Signature(width)),
            "o": Out(stream.Signature(width)),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = fifo = SyncFIFOBuffered(width=self._width, depth=self._depth)
        wiring.connect(m, wiring.flipped(self.i), fifo.w_stream)
        wiring.connect(m, fifo.r_stream, wiring.flipped(self.o))
        m.d.comb += self.level.eq(fifo.level)
        return m
