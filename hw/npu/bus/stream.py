"""Stream plumbing shared by the blocks: a buffered FIFO, a FIFO of registers and two
register slices with stream ports.

Every data port in the design is an :mod:`amaranth.lib.stream` interface: a transfer
happens on a rising edge where both ``valid`` and ``ready`` are high. A producer may not
drop ``valid`` or change ``payload`` until the transfer happens.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

__all__ = ["PingPongBuffer", "RegisterFIFO", "SkidBuffer", "StreamFIFO", "quiet_for",
           "start_after_decode"]


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


class SkidBuffer(wiring.Component):
    """Register slice whose ``i.ready`` is a flip-flop: one transfer a cycle, one cycle
    of latency, and no combinational path from ``o.ready`` back to ``i.ready``.

    An output register holds the word offered on ``o``; a second, the skid entry, catches
    the word taken while the output is held (``i.ready`` was still high). ``i.ready`` is
    "the skid entry is empty", so a stalled consumer stops the producer one cycle later,
    and the skid entry drains into the output register first. The skid entry follows
    ``i.payload`` in every cycle it is empty (it is read only when full), so ``o.ready``
    reaches the output register's enable and two flags, not the skid entry's enable.

    Parameters
    ----------
    shape : shape-castable
        Payload shape (an int width or a layout).

    Attributes
    ----------
    i : stream, in
    o : stream, out
        The same words, in order, from the cycle after each transfer on ``i``.
    """

    def __init__(self, shape):
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})
        self._shape = shape

    def elaborate(self, platform):
        m = Module()
        skid = Signal(self._shape)
        skid_ok = Signal()
        m.d.comb += self.i.ready.eq(~skid_ok)
        with m.If(~skid_ok):
            m.d.sync += skid.eq(self.i.payload)
        with m.If(~self.o.valid | self.o.ready):   # the output register is free
            with m.If(skid_ok):
                m.d.sync += [self.o.payload.eq(skid), self.o.valid.eq(1), skid_ok.eq(0)]
            with m.Else():
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & self.i.ready):
            m.d.sync += skid_ok.eq(1)
        return m


class RegisterFIFO(wiring.Component):
    """A short FIFO of registers: a word written in one cycle is on ``o`` in the next (a
    :class:`StreamFIFO` takes two), ``i.ready`` and ``o.valid`` are flip-flops.

    Each entry is written only on the producer's side (the entry under the write pointer
    follows ``i.payload`` while the FIFO is not full: ``i.valid`` moves only the pointer),
    and ``o.payload`` is the entry under the read pointer, so the consumer's ``o.ready``
    reaches the read pointer and two flags, not the entries' enables (as
    :class:`PingPongBuffer`, which is this with two entries). For a few entries of a wide
    word, beside a producer that issues against credits.

    Parameters
    ----------
    shape : shape-castable
        Payload shape (an int width or a layout).
    depth : int
        Entries, at least 2.

    Attributes
    ----------
    i : stream, in
        ``i.ready`` is "not full", from registers.
    o : stream, out
        The same words, in order, from the cycle after each transfer on ``i``.
    """

    def __init__(self, shape, depth):
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 2:
            raise ValueError(f"depth must be an integer of at least 2, not {depth!r}")
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})
        self._shape, self._depth = shape, depth

    def elaborate(self, platform):
        m = Module()
        n = self._depth
        entries = [Signal(self._shape, name=f"entry{e}") for e in range(n)]
        wptr, rptr = Signal(range(n)), Signal(range(n))
        count = Signal(range(n + 1))
        full = Signal()
        push = self.i.valid & ~full
        pop = self.o.valid & self.o.ready
        m.d.comb += self.i.ready.eq(~full)
        with m.Switch(rptr):
            for e, entry in enumerate(entries):
                with m.Case(e):
                    m.d.comb += self.o.payload.eq(entry)
        # the entry under the write pointer follows ``i.payload`` whenever the FIFO is not
        # full (it holds no word then, and ``o`` shows it only when the FIFO is empty,
        # with ``o.valid`` low): its enable is two registers, not ``i.valid``
        for e, entry in enumerate(entries):
            with m.If(~full & (wptr == e)):
                m.d.sync += entry.eq(self.i.payload)
        with m.If(push):
            m.d.sync += wptr.eq(Mux(wptr == n - 1, 0, wptr + 1))
        with m.If(pop):
            m.d.sync += rptr.eq(Mux(rptr == n - 1, 0, rptr + 1))
        # words held after this cycle's push and pop: o.valid (at least one), full (n)
        with m.If(push & ~pop):
            m.d.sync += [count.eq(count + 1), self.o.valid.eq(1), full.eq(count == n - 1)]
        with m.Elif(pop & ~push):
            m.d.sync += [count.eq(count - 1), self.o.valid.eq(count != 1), full.eq(0)]
        return m


class PingPongBuffer(wiring.Component):
    """Register slice of two entries, written and read by pointers: the same transfers in
    the same cycles as :class:`SkidBuffer`, with the consumer's ``o.ready`` reaching only
    the read pointer and two flags.

    A :class:`SkidBuffer` loads its output register when the consumer takes the word it
    holds, so ``o.ready`` enables every payload bit of it; where that ready is late (a
    datapath's ready worked out per mode), the enables of a wide payload are the end of
    the worst path. Here each entry is written only on the producer's side (the entry
    under the write pointer follows ``i.payload`` while it holds no word), and
    ``o.payload`` is the entry under the read pointer: a 2:1 selection in front of the
    consumer instead. ``i.ready`` is "not both entries full", a register,
    as the skid buffer's "the skid entry is empty".

    Parameters
    ----------
    shape : shape-castable
        Payload shape (an int width or a layout).

    Attributes
    ----------
    i : stream, in
    o : stream, out
        The same words, in order, from the cycle after each transfer on ``i``.
    """

    def __init__(self, shape):
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})
        self._shape = shape

    def elaborate(self, platform):
        m = Module()
        entries = [Signal(self._shape, name=f"entry{e}") for e in range(2)]
        wptr, rptr = Signal(), Signal()
        full = Signal()
        push = self.i.valid & ~full
        pop = self.o.valid & self.o.ready
        # the read pointer drives a 2:1 selection per payload bit: the upper half of the
        # bits takes it from a copy of its own, kept inverted (``rptr_n``), which synthesis
        # does not merge with ``rptr`` (a register of the same input would be), so each
        # of the two nets fans out to half the payload
        rptr_n = Signal(init=1)
        lo_bits = (len(Value.cast(entries[0])) + 1) // 2
        e0, e1 = Value.cast(entries[0]), Value.cast(entries[1])
        m.d.comb += [self.i.ready.eq(~full),
                     self.o.payload.eq(Cat(Mux(rptr, e1[:lo_bits], e0[:lo_bits]),
                                           Mux(rptr_n, e0[lo_bits:], e1[lo_bits:])))]
        # the entry under the write pointer follows ``i.payload`` while it holds no word
        # (not full; as in :class:`RegisterFIFO`)
        for e, entry in enumerate(entries):
            with m.If(~full & (wptr == e)):
                m.d.sync += entry.eq(self.i.payload)
        with m.If(push):
            m.d.sync += wptr.eq(~wptr)
        with m.If(pop):
            m.d.sync += [rptr.eq(~rptr), rptr_n.eq(~rptr_n)]
        # words held: o.valid (at least one) and full (two), after this cycle's push and pop
        with m.If(push & ~pop):
            m.d.sync += [self.o.valid.eq(1), full.eq(self.o.valid)]
        with m.Elif(pop & ~push):
            m.d.sync += [self.o.valid.eq(full), full.eq(0)]
        return m


def quiet_for(m, changed, cycles, *, name="quiet", copy=False):
    """A signal high when ``changed`` was low in each of the last ``cycles`` cycles (low
    for the first ``cycles`` cycles after reset); a flip-flop.

    :func:`start_after_decode` waits on it for a unit's decode to settle; the sequencer
    counts the same cycles from the same strobes to know when the unit will take a start.

    ``copy``: the same signal from registers of another form (the changes themselves are
    shifted, not their absence). yosys's ``opt_merge`` joins flip-flops with the same
    inputs whether or not they carry ``keep``; the sequencer's count and the unit's, both
    of ``~changed``, became one register beside the unit, and the unit's position reached
    the sequencer's issue and every unit's task registers (``cstl0.decode_quiet``: 329-543
    of the board's paths above 10 ns, ``docs/fpga.md``). The sequencer's count is a
    ``copy``, so each stays beside its own logic.
    """
    if cycles < 1:
        raise ValueError(f"quiet_for: cycles must be >= 1, not {cycles}")
    # ``fresh`` at the end of this cycle: no change now and none in the ``cycles - 1``
    # cycles before (``hist``, one bit per cycle, oldest highest; none for ``cycles`` 1)
    fresh = Signal(name=f"{name}_fresh")
    if copy:
        # the changes themselves; after reset a one that shifts through ``hist`` stands
        # for the cycles before the first
        hist = Signal(cycles - 1, name=f"{name}_recent", init=int(cycles > 1))
        unsettled = Signal(name=f"{name}_unsettled", init=1)
        m.d.sync += [unsettled.eq(changed | hist.any()), hist.eq(Cat(changed, hist[:-1]))]
        m.d.comb += fresh.eq(~unsettled)
    else:
        hist = Signal(cycles - 1, name=f"{name}_quiet")
        m.d.sync += [fresh.eq(~changed & hist.all()), hist.eq(Cat(~changed, hist[:-1]))]
    return fresh


def start_after_decode(m, start, core_start, decoded, changed, *, latency=0, registers=1):
    """Pass ``start`` to ``core_start`` with ``decoded`` registered as its payload.

    For a unit whose shadow registers feed a combinational ``decoded`` task: the decode
    gets registers of its own (its logic and the wires to the core in separate cycles),
    and a start waits until the last of them holds the decode of the registers as they
    are, ``latency + registers`` cycles after the last cycle with ``changed`` high (a
    register write or clear).

    Parameters
    ----------
    m : amaranth.Module
    start : stream interface, in (its payload is not passed on)
    core_start : stream interface, out, whose payload takes the registered decode
    decoded : amaranth.Value
        The combinational decode of the shadow registers.
    changed : amaranth.Value
        The shadow registers change at the end of this cycle.
    latency : int
        Cycles from a change of the shadow registers to ``decoded`` following it (0: a
        combinational decode; more when the decode has registers of its own).
    registers : int
        Registers in a row between ``decoded`` and ``core_start.payload`` (at least 1;
        more when the decode and the core lie far apart on the die and the wire between
        them needs cycles of its own).
    """
    if registers < 1:
        raise ValueError(f"start_after_decode: registers must be >= 1, not {registers}")
    task = decoded
    for i in range(registers):
        stage = Signal(decoded.shape(), name="decoded" if i == registers - 1
                       else f"decoded_{i}")
        m.d.sync += stage.eq(task)
        task = stage
    fresh = quiet_for(m, changed, latency + registers, name="decode")
    m.d.comb += [core_start.valid.eq(start.valid & fresh),
                 start.ready.eq(core_start.ready & fresh),
                 core_start.payload.eq(task)]
