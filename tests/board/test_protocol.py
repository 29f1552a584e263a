"""The board protocol's frames (``npu.board.protocol``) byte by byte.

The CRC is checked against the catalogue's check value of CRC-8/SMBUS (0xF4 for
``b"123456789"``) and against a table-driven CRC written here (a different algorithm from
the module's bit-serial one); the request layouts against ``docs/board.md``'s frame
description, field by field.
"""

from __future__ import annotations

import random
import struct

import pytest

from npu.board import protocol as p


def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = ((c << 1) ^ 0x07) & 0xFF if c & 0x80 else (c << 1) & 0xFF
        table.append(c)
    return table


_TABLE = _crc_table()


def _crc(data):
    c = 0
    for b in data:
        c = _TABLE[c ^ b]
    return c


def test_crc_is_crc8_smbus():
    assert p.crc8(b"123456789") == 0xF4           # the catalogue's check value
    assert p.crc8(b"") == 0
    assert p.crc8(b"\x80") == 0x89 and p.crc8(b"\x01") == 0x07 and p.crc8(b"\xff") == 0xF3
    rng = random.Random(5)
    for n in (1, 2, 7, 64, 255):
        data = bytes(rng.randrange(256) for _ in range(n))
        assert p.crc8(data) == _crc(data)
        c = 0
        for b in data:
            c = p.crc8_update(c, b)
        assert c == _crc(data)


def _frame(sync, code, payload):
    body = bytes([code, len(payload)]) + payload
    return bytes([sync]) + body + bytes([_crc(body)])


def test_requests_field_by_field():
    assert p.info() == _frame(0x5A, 0x01, b"")
    assert p.status() == _frame(0x5A, 0x07, b"")
    assert p.csr_read(0x1234) == _frame(0x5A, 0x02, b"\x34\x12")
    assert p.csr_write(0x0008, 0xDEADBEEF) == _frame(0x5A, 0x03, b"\x08\x00\xef\xbe\xad\xde")
    assert p.mem_read(0x00010004, 60) == _frame(0x5A, 0x04, b"\x04\x00\x01\x00\x3c")
    assert p.mem_write(0x20, b"abcdefgh") == _frame(0x5A, 0x05, b"\x20\x00\x00\x00abcdefgh")
    assert p.start(0x1000) == _frame(0x5A, 0x06, b"\x00\x10\x00\x00")
    # the top of each field's range (unsigned: the bridge answers ADDRESS, the host
    # must still be able to ask)
    assert p.csr_read(0xFFFC) == _frame(0x5A, 0x02, b"\xfc\xff")
    assert p.mem_write(0xFFFFFFFC, b"wxyz") == _frame(0x5A, 0x05, b"\xfc\xff\xff\xffwxyz")
    assert p.mem_read(0x80000000, 1) == _frame(0x5A, 0x04, b"\x00\x00\x00\x80\x01")
    assert p.start(0x80000004) == _frame(0x5A, 0x06, b"\x04\x00\x00\x80")
    assert p.csr_write(0x8000, 0xFFFFFFFF) == _frame(0x5A, 0x03, b"\x00\x80" + b"\xff" * 4)
    assert p.request(0x1FF, b"") == _frame(0x5A, 0xFF, b"")   # any byte, masked to 8 bits
    assert p.request(p.Command.INFO, bytes(255))[2] == 255
    with pytest.raises(ValueError, match="payload of 256 bytes; a frame holds at most 255"):
        p.request(p.Command.MEM_WRITE, bytes(256))
    assert p.reply_frame(p.Status.LENGTH) == _frame(0xA5, 3, b"")
    assert p.reply_frame(0, b"\x01\x02") == _frame(0xA5, 0, b"\x01\x02")


def test_reply_decoder_frames_split_and_back_to_back():
    a = p.reply_frame(p.Status.OK, b"\x01\x02\x03")
    b = p.reply_frame(p.Status.BUS)
    c = p.reply_frame(0x42, b"\xa5")                  # an unknown code stays an int
    stream = b"\x5a\x00" + a + b + c
    d = p.ReplyDecoder()
    got = []
    for i in range(len(stream)):                       # one byte at a time
        got += d.feed(stream[i:i + 1])
        assert d.pending <= 4 + 255
    assert got == [p.Reply(p.Status.OK, b"\x01\x02\x03"), p.Reply(p.Status.BUS, b""),
                   p.Reply(0x42, b"\xa5")]
    assert isinstance(got[1].status, p.Status) and not isinstance(got[2].status, p.Status)
    assert d.pending == 0
    assert p.ReplyDecoder().feed(stream) == got        # all at once
    # a frame's header alone is held, not decoded
    d = p.ReplyDecoder()
    assert d.feed(a[:2]) == [] and d.pending == 2
    assert d.feed(a[2:3]) == [] and d.pending == 3
    assert d.feed(a[3:-1]) == [] and d.pending == len(a) - 1
    assert d.feed(a[-1:]) == [got[0]] and d.pending == 0
    # noise without a sync byte is dropped
    assert d.feed(b"\x00\x5a\xff") == [] and d.pending == 0


def test_reply_decoder_after_a_bad_crc_hunts_again():
    good = p.reply_frame(p.Status.OK, b"\x07")
    bad = bytearray(good)
    bad[3] ^= 0xFF
    d = p.ReplyDecoder()
    with pytest.raises(p.ProtocolError, match=f"reply with a bad CRC: {bytes(bad).hex()}"):
        d.feed(bytes(bad) + good)
    assert d.feed(b"") == [p.Reply(p.Status.OK, b"\x07")]


def test_reply_ok_and_info():
    assert p.Reply(p.Status.OK, b"xy").ok("X") == b"xy"
    with pytest.raises(p.ProtocolError, match="CSR_READ: the board replied TIMEOUT"):
        p.Reply(p.Status.TIMEOUT, b"").ok("CSR_READ")
    with pytest.raises(p.ProtocolError, match=r"^Q: the board replied 66$"):
        p.Reply(66, b"").ok("Q")
    payload = b"NPUB" + bytes([1, 1, 12, 0]) + struct.pack("<I", 262144)
    assert p.Info.decode(payload) == p.Info(1, True, 12, 262144)
    assert p.Info.decode(b"NPUB" + bytes([2, 0, 9, 7]) + struct.pack("<I", 5)) == \
        p.Info(2, False, 9, 5)
    with pytest.raises(p.ProtocolError, match="INFO reply of 11 bytes, expected 12"):
        p.Info.decode(payload[:-1])
    with pytest.raises(p.ProtocolError, match=r"INFO reply magic b'NPUC', expected b'NPUB'"):
        p.Info.decode(b"NPUC" + payload[4:])
