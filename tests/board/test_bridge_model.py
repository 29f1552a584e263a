"""The bridge's Python model (``npu.board.model.BridgeModel``) against the protocol as
``docs/board.md`` writes it: each command's length, address and value rules at their
edges, reply by reply. (``test_bridge.py`` compares the model with the gateware on the
same byte streams; this file pins the model itself to the protocol.)"""

from __future__ import annotations

import struct

import pytest

from npu.board import protocol as p
from npu.board.model import BridgeModel
from npu.engine.config import EngineConfig
from npu.engine.top import engine_register_map

REGMAP = engine_register_map(EngineConfig.shipped("small"))   # 12 address bits
MEM = 1024


def _model(**ro):
    return BridgeModel(REGMAP, memory_bytes=MEM, ro_values=ro)


def _one(model, frame):
    """The one reply a request gets: ``(status, payload)``."""
    out = model.feed_all(frame)
    (reply,) = p.ReplyDecoder().feed(out)
    assert out == p.reply_frame(reply.status, reply.payload)   # one frame, nothing more
    return reply.status, reply.payload


@pytest.mark.parametrize(("cmd", "payload"), [
    (p.Command.INFO, b"\x00"),
    (p.Command.CSR_READ, b"\x14"), (p.Command.CSR_READ, b"\x14\x00\x00"),
    (p.Command.CSR_WRITE, b"\x14\x00\x01\x00\x00"), (p.Command.CSR_WRITE, bytes(7)),
    (p.Command.START, b"\x00\x10\x00"), (p.Command.START, bytes(5)),
    (p.Command.STATUS, b"\x00"),
    (p.Command.MEM_READ, bytes(4)), (p.Command.MEM_READ, bytes(6)),
    (p.Command.MEM_READ, b"\x00\x00\x00\x00\x00"),                 # 0 words
    (p.Command.MEM_READ, b"\x00\x00\x00\x00\x3d"),                 # 61 words
    (p.Command.MEM_WRITE, bytes(4)),                               # no data
    (p.Command.MEM_WRITE, bytes(7)), (p.Command.MEM_WRITE, bytes(10)),
    (p.Command.MEM_WRITE, bytes(4 + 4 * 61)),                      # 61 words
])
def test_wrong_lengths_get_length(cmd, payload):
    m = _model()
    assert _one(m, p.request(cmd, payload)) == (p.Status.LENGTH, b"")
    assert m.memory == bytearray(MEM) and m.csr.pulses == []


def test_csr_addresses_at_the_edges():
    m = _model(ID=0x80000001)
    top = (1 << REGMAP.addr_width) - 4                # 0xFFC: in range, no register there
    assert _one(m, p.csr_read(top)) == (p.Status.BUS, b"")
    assert _one(m, p.csr_read(top + 4)) == (p.Status.ADDRESS, b"")
    assert _one(m, p.csr_read(0x8000)) == (p.Status.ADDRESS, b"")
    assert _one(m, p.csr_read(0xFFFC)) == (p.Status.ADDRESS, b"")
    assert _one(m, p.csr_write(22, 1)) == (p.Status.ADDRESS, b"")   # not a multiple of 4
    assert _one(m, p.csr_write(top, 1)) == (p.Status.BUS, b"")
    # values with bit 31 set, both ways
    assert _one(m, p.csr_read(0)) == (p.Status.OK, struct.pack("<I", 0x80000001))
    assert _one(m, p.csr_write(28, 0xFFFFFFFE)) == (p.Status.OK, b"")
    assert _one(m, p.csr_read(28)) == (p.Status.OK, b"\xfe\xff\xff\xff")
    assert m.csr.values["WATCHDOG"] == 0xFFFFFFFE


def test_start_and_status():
    m = _model(STATUS=2, ERROR_CAUSE=0x80000000, ERROR_TASK=7, CYCLES=0xFFFFFFFF)
    assert _one(m, p.csr_write(24, 5)) == (p.Status.OK, b"")         # PROG_HI set before
    assert _one(m, p.start(0x80000010)) == (p.Status.OK, b"")
    assert m.csr.values["PROG_LO"] == 0x80000010 and m.csr.values["PROG_HI"] == 0
    assert m.csr.pulses == ["START"]
    assert _one(m, p.status()) == (p.Status.OK, struct.pack("<4I", 2, 0x80000000, 7,
                                                              0xFFFFFFFF))


def test_memory_writes_and_reads_at_the_edges():
    m = _model()
    data = bytes(range(1, 241))                       # 60 words, the most a frame moves
    assert _one(m, p.mem_write(MEM - 240, data)) == (p.Status.OK, b"")
    assert len(m.memory) == MEM and bytes(m.memory[MEM - 240:]) == data
    assert m.memory[:MEM - 240] == bytearray(MEM - 240)
    assert _one(m, p.mem_read(MEM - 240, 60)) == (p.Status.OK, data)
    assert _one(m, p.mem_read(MEM - 4, 1)) == (p.Status.OK, data[-4:])
    assert _one(m, p.mem_read(MEM - 4, 2)) == (p.Status.ADDRESS, b"")
    assert _one(m, p.mem_read(2, 1)) == (p.Status.ADDRESS, b"")
    assert _one(m, p.mem_write(MEM - 4, b"abcdefgh")) == (p.Status.ADDRESS, b"")
    assert _one(m, p.mem_write(0x80000000, b"abcd")) == (p.Status.ADDRESS, b"")
    assert _one(m, p.mem_write(6, b"abcd")) == (p.Status.ADDRESS, b"")
    assert _one(m, p.mem_write(8, b"abcd")) == (p.Status.OK, b"")
    assert bytes(m.memory[:16]) == bytes(8) + b"abcd" + bytes(4) and len(m.memory) == MEM


def test_framing_line_errors_and_timeouts():
    m = _model()
    # bytes outside a frame, a sync byte with a framing error: ignored
    assert m.feed_all(b"\x00\xff") == b"" and not m.in_frame
    assert m.feed(p.REQUEST_SYNC, line_error=True) == b"" and not m.in_frame
    assert m.timeout() == b""                         # nothing to drop
    frame = p.csr_read(0)
    assert m.feed_all(frame[:3]) == b"" and m.in_frame
    assert m.timeout() == p.reply_frame(p.Status.TIMEOUT) and not m.in_frame
    # a framing error on any byte of a frame: LINE once the frame's length has arrived
    for k in range(1, len(frame)):
        out = b"".join(m.feed(b, line_error=(i == k)) for i, b in enumerate(frame))
        assert out == p.reply_frame(p.Status.LINE), k
    assert _one(m, frame) == (p.Status.OK, b"\x00\x00\x00\x00")   # and then fine again
    bad = bytearray(frame)
    bad[-1] ^= 0x10
    assert m.feed_all(bytes(bad)) == p.reply_frame(p.Status.CHECKSUM)
    assert _one(m, p.request(0x09)) == (p.Status.COMMAND, b"")
    # back to back: replies concatenated in order
    assert m.feed_all(p.info() + p.request(0x09)) == \
        p.reply_frame(p.Status.OK, p.INFO.pack(b"NPUB", 1, 1, 12, 0, MEM)) + \
        p.reply_frame(p.Status.COMMAND)
