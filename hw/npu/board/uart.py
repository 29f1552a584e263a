"""UART receiver and transmitter (8 data bits, no parity, 1 stop bit, LSB first).

* :class:`UartRx`: the ``rx`` pin (through a two-flop synchroniser) to a stream of
  ``{data, error}`` bytes. A falling edge starts a byte; the start bit is checked at its
  middle (a shorter low pulse is a glitch and ignored); each data bit and the stop bit are
  sampled at their middle, ``divisor`` cycles apart. A low stop bit delivers the byte with
  ``error`` set (a framing error or a break) and the receiver waits for the line to go high
  again. The output holds one byte; a byte completed while the previous one has not been
  taken is dropped and ``overrun`` pulses (a UART cannot be stalled).
* :class:`UartTx`: a stream of bytes to the ``tx`` pin (high when idle), ``divisor``
  cycles per bit; ``ready`` only between frames, so the stream's back-pressure paces the
  sender.

``divisor`` is the clock frequency over the baud rate (e.g. 25 MHz / 1 Mbaud = 25); the
receiver needs ``divisor >= 4``. The Python model is the line itself: the tests encode and
decode bit levels in Python (``tests/board/test_uart.py``).
"""

from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

__all__ = ["RX_LAYOUT", "UartRx", "UartTx", "check_divisor"]

#: A received byte and its framing-error flag.
RX_LAYOUT = data.StructLayout({"data": 8, "error": 1})


def check_divisor(divisor):
    """*divisor* as an int; ``ValueError`` naming it when it is not an integer >= 4."""
    if not isinstance(divisor, int) or isinstance(divisor, bool) or divisor < 4:
        raise ValueError(f"UART divisor (clock cycles per bit) must be an integer >= 4, "
                         f"not {divisor!r}")
    return divisor


class UartRx(wiring.Component):
    """UART receiver.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit (>= 4).

    Attributes
    ----------
    rx : In(1)
        The line (asynchronous; synchronised inside).
    data : Out(stream.Signature(RX_LAYOUT))
        Received bytes with their framing-error flag.
    overrun : Out(1)
        One-cycle pulse: a byte was dropped because the previous one was not taken.
    """

    def __init__(self, divisor):
        self.divisor = check_divisor(divisor)
        super().__init__({"rx": In(1, init=1), "data": Out(stream.Signature(RX_LAYOUT)),
                          "overrun": Out(1)})

    def elaborate(self, platform):
        m = Module()
        d = self.divisor
        line = Signal(init=1)
        m.submodules.sync = FFSynchronizer(self.rx, line, init=1)
        count = Signal(range(d))
        bits = Signal(range(9))
        shift = Signal(8)
        m.d.sync += self.overrun.eq(0)
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += self.data.valid.eq(0)

        def deliver(error):
            with m.If(self.data.valid & ~self.data.ready):
                m.d.sync += self.overrun.eq(1)
            with m.Else():
                m.d.sync += [self.data.valid.eq(1), self.data.payload.data.eq(shift),
                             self.data.payload.error.eq(error)]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(~line):
                    m.d.sync += count.eq(d // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                with m.If(count != 0):
                    m.d.sync += count.eq(count - 1)
                with m.Elif(line):
                    m.next = "IDLE"  # a glitch, not a start bit
                with m.Else():
                    m.d.sync += [count.eq(d - 1), bits.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                with m.If(count != 0):
                    m.d.sync += count.eq(count - 1)
                with m.Else():
                    m.d.sync += [shift.eq(Cat(shift[1:], line)), bits.eq(bits + 1),
                                 count.eq(d - 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(count != 0):
                    m.d.sync += count.eq(count - 1)
                with m.Else():
                    deliver(~line)
                    m.next = "WAIT_HIGH"
            with m.State("WAIT_HIGH"):
                # after the stop bit's middle: back to IDLE once the line is high (at once
                # for a good stop bit, after the break for a framing error)
                with m.If(line):
                    m.next = "IDLE"
        return m


class UartTx(wiring.Component):
    """UART transmitter.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit (>= 4).

    Attributes
    ----------
    data : In(stream.Signature(8))
        Bytes to send; taken one frame at a time.
    tx : Out(1)
        The line, high when idle.
    """

    def __init__(self, divisor):
        self.divisor = check_divisor(divisor)
        super().__init__({"data": In(stream.Signature(8)), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        d = self.divisor
        count = Signal(range(d))
        left = Signal(range(11))
        frame = Signal(10, init=0x3FF)
        m.d.comb += self.tx.eq(frame[0])
        m.d.comb += self.data.ready.eq(left == 0)
        with m.If(left == 0):
            with m.If(self.data.valid):
                m.d.sync += [frame.eq(Cat(0, self.data.payload, 1)), left.eq(10),
                             count.eq(d - 1)]
        with m.Elif(count != 0):
            m.d.sync += count.eq(count - 1)
        with m.Else():
            m.d.sync += [frame.eq(Cat(frame[1:], 1)), left.eq(left - 1), count.eq(d - 1)]
        return m
