"""``npu.board.host.SerialLink`` over a stand-in serial port (no board, no pyserial device):
what it opens, how it reads, its deadline counted on a stand-in clock, its errors."""

from __future__ import annotations

import struct
import types

import pytest

from npu.board import host
from npu.board import protocol as p
from npu.board.host import BoardError, SerialLink


class _Port:
    """A serial port: *answer(frame)* gives the bytes the board sends back; ``in_waiting``
    is what has arrived (0 with *trickle*: bytes come only when read, one read at a time)."""

    def __init__(self, answer, *, trickle=False):
        self.answer, self.trickle = answer, trickle
        self.pending = b""
        self.reads, self.written, self.closed = [], [], False

    @property
    def in_waiting(self):
        return 0 if self.trickle else len(self.pending)

    def write(self, data):
        self.written.append(bytes(data))
        self.pending += self.answer(bytes(data))

    def read(self, n):
        self.reads.append((n, self.in_waiting))
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def close(self):
        self.closed = True


class _Calls(list):
    """The ports opened; what the next one answers."""

    def __init__(self):
        super().__init__()
        self.answer = lambda frame: b""
        self.trickle = False


@pytest.fixture
def opened(monkeypatch):
    """Patch pyserial's opener; returns the list of (url, keyword arguments, port)."""
    import serial

    calls = _Calls()

    def serial_for_url(url, **kw):
        port = _Port(calls.answer, trickle=calls.trickle)
        calls.append((url, kw, port))
        return port

    monkeypatch.setattr(serial, "serial_for_url", serial_for_url)
    return calls


def test_opens_at_the_bitstreams_rate_with_a_short_read_timeout(opened):
    import inspect

    from npu.board.build import build_bitstream
    from npu.board.top import BoardTop

    link = SerialLink("/dev/ttyX")
    url, kw, _ = opened[0]
    assert url == "/dev/ttyX"
    # the default rate is the one make bitstream builds the UART for
    assert kw["baudrate"] == inspect.signature(build_bitstream).parameters["baud"].default
    assert kw["baudrate"] == inspect.signature(BoardTop).parameters["baud"].default
    # reads return within a fraction of the reply deadline, so the deadline is kept
    assert 0 < kw["timeout"] <= 0.1
    assert link.timeout == 2.0      # the documented default reply deadline (npu board run)
    SerialLink("loop://", baud=115_200, timeout=0.5)
    assert opened[1][1]["baudrate"] == 115_200


def test_returns_the_first_reply_of_a_read(opened):
    one = p.reply_frame(p.Status.OK, struct.pack("<I", 7))
    two = p.reply_frame(p.Status.ADDRESS)
    opened.answer = lambda frame: one + two
    link = SerialLink("x")
    reply = link.transact(p.info())
    assert reply == p.Reply(p.Status.OK, struct.pack("<I", 7))
    port = opened[0][2]
    assert port.written == [p.info()]
    link.close()
    assert port.closed


def test_reads_one_byte_when_nothing_is_waiting(opened):
    frame = p.reply_frame(p.Status.OK, b"\x01\x02")
    opened.answer = lambda f: frame
    opened.trickle = True
    link = SerialLink("x")
    assert link.transact(p.status()) == p.Reply(p.Status.OK, b"\x01\x02")
    port = opened[0][2]
    # a read never asks for more than has arrived (or one byte): it cannot block for its
    # timeout while a reply is complete
    assert [n for n, _ in port.reads] == [1] * len(frame)


def test_a_bad_checksum_is_a_board_error_naming_it(opened):
    bad = bytearray(p.reply_frame(p.Status.OK, b"\x05"))
    bad[-1] ^= 0xFF
    opened.answer = lambda f: bytes(bad)
    link = SerialLink("x")
    with pytest.raises(BoardError, match="bad CRC"):
        link.transact(p.info())


def test_the_deadline_on_a_stand_in_clock(opened, monkeypatch):
    now = [100.0]

    def monotonic():
        return now[0]

    monkeypatch.setattr(host, "time", types.SimpleNamespace(monotonic=monotonic))
    link = SerialLink("x", timeout=2)
    port = opened[0][2]
    real_read = port.read

    def read(n):                     # every read waits out the port's 0.5 s
        now[0] += 0.5
        return real_read(n)

    port.read = read
    with pytest.raises(BoardError) as err:
        link.transact(p.mem_read(0x40, 2))
    # reads at 100.0, 100.5, 101.0, 101.5; at 102.0 the 2 s are over
    assert len(port.reads) == 4
    assert str(err.value) == ("no reply from the board within 2 s to command "
                              f"{p.Command.MEM_READ:#04x}")
