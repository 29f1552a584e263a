"""The board's UART host protocol: frames, commands, error codes (one definition).

Every number of the protocol lives here; the bridge gateware (:mod:`npu.board.bridge`),
its Python model (:mod:`npu.board.model`), the host (:mod:`npu.board.host`, ``npu board
run``) and the cocotb testbench (``sim/tb_board.py``) import it. ``docs/board.md`` writes
the protocol out.

Frames
------
Request (host -> board)::

    0x5A  CMD  LEN  PAYLOAD[LEN]  CRC

Reply (board -> host)::

    0xA5  STATUS  LEN  PAYLOAD[LEN]  CRC

``CRC`` is CRC-8 (polynomial 0x07, initial value 0, no reflection, no final XOR: the
CRC-8/SMBUS of the catalogues, check value 0xF4 for ``b"123456789"``) over every byte after
the sync byte up to the CRC. Multi-byte fields are little-endian. A reply's ``STATUS`` is
:attr:`Status.OK` or an error code; an error reply has no payload. Bytes outside a frame
that are not the sync byte are ignored. A frame whose next byte does not arrive within the
bridge's inter-byte timeout is dropped with a :attr:`Status.TIMEOUT` reply, so a cut frame
never wedges the bridge.

This module is sans-I/O: it builds request bytes and decodes reply bytes; moving them is
the caller's (pyserial on the board, cocotb's UART pins in simulation).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

__all__ = [
    "BAUD",
    "INFO",
    "INFO_MAGIC",
    "MAX_WORDS",
    "PROTOCOL_VERSION",
    "REPLY_SYNC",
    "REQUEST_SYNC",
    "STATUS_REGS",
    "Command",
    "Info",
    "ProtocolError",
    "Reply",
    "ReplyDecoder",
    "Status",
    "crc8",
    "crc8_update",
    "csr_read",
    "csr_write",
    "info",
    "mem_read",
    "mem_write",
    "request",
    "start",
    "status",
]

#: The line's default bit rate (8N1): the bitstream's (``make bitstream``) and the host's.
BAUD = 1_000_000
REQUEST_SYNC = 0x5A
REPLY_SYNC = 0xA5
PROTOCOL_VERSION = 1
#: Words (4 bytes) one MEM_READ or MEM_WRITE moves at most (payloads stay <= 255 bytes).
MAX_WORDS = 60
#: The INFO reply's first four bytes.
INFO_MAGIC = b"NPUB"
#: INFO reply payload: magic, protocol version, engine present, CSR address bits,
#: reserved (0), memory bytes.
INFO = struct.Struct("<4sBBBBI")
#: The registers STATUS reads, in reply order (names of the engine's CSR map).
STATUS_REGS = ("STATUS", "ERROR_CAUSE", "ERROR_TASK", "CYCLES")


class Command(enum.IntEnum):
    """Request commands (the ``CMD`` byte) and their payloads."""

    INFO = 0x01       #: no payload -> :data:`INFO` (12 bytes)
    CSR_READ = 0x02   #: offset u16 -> value u32
    CSR_WRITE = 0x03  #: offset u16, value u32 -> nothing
    MEM_READ = 0x04   #: byte address u32 (multiple of 4), words u8 (1..60) -> 4*words bytes
    MEM_WRITE = 0x05  #: byte address u32 (multiple of 4), 1..60 words of data -> nothing
    START = 0x06      #: program byte address u32: PROG_LO = address, PROG_HI = 0, START = 1
    STATUS = 0x07     #: no payload -> STATUS, ERROR_CAUSE, ERROR_TASK, CYCLES (u32 each)


class Status(enum.IntEnum):
    """Reply status codes (the ``STATUS`` byte)."""

    OK = 0
    CHECKSUM = 1  #: the CRC byte does not match
    COMMAND = 2   #: unknown command
    LENGTH = 3    #: payload length wrong for the command (or a word count out of 1..60)
    ADDRESS = 4   #: address misaligned or outside the CSR map's range or the memory
    BUS = 5       #: the engine's CSR bank answered with an error response (no register)
    TIMEOUT = 6   #: a frame stopped arriving (inter-byte timeout); it was dropped
    LINE = 7      #: a byte of the frame had a UART framing error (stop bit low)


class ProtocolError(ValueError):
    """A reply that is malformed, or an error reply where success was needed."""


def crc8_update(crc, byte):
    """CRC-8 (polynomial 0x07) of one more byte, bit by bit (MSB first)."""
    crc ^= byte
    for _ in range(8):
        crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def crc8(data):
    """CRC-8/SMBUS of *data* (bytes)."""
    crc = 0
    for byte in data:
        crc = crc8_update(crc, byte)
    return crc


def request(cmd, payload=b""):
    """The request frame of command *cmd* (a :class:`Command` or any byte) with *payload*."""
    payload = bytes(payload)
    if len(payload) > 255:
        raise ValueError(f"payload of {len(payload)} bytes; a frame holds at most 255")
    body = bytes([int(cmd) & 0xFF, len(payload)]) + payload
    return bytes([REQUEST_SYNC]) + body + bytes([crc8(body)])


def reply_frame(status, payload=b""):
    """The reply frame the board sends (the model's and the tests' reference)."""
    body = bytes([int(status), len(payload)]) + bytes(payload)
    return bytes([REPLY_SYNC]) + body + bytes([crc8(body)])


def info():
    """INFO request."""
    return request(Command.INFO)


def csr_read(offset):
    """CSR_READ request of the register at byte *offset*."""
    return request(Command.CSR_READ, struct.pack("<H", offset))


def csr_write(offset, value):
    """CSR_WRITE request: *value* into the register at byte *offset*."""
    return request(Command.CSR_WRITE, struct.pack("<HI", offset, value))


def mem_read(address, words):
    """MEM_READ request of *words* 32-bit words from byte *address*."""
    return request(Command.MEM_READ, struct.pack("<IB", address, words))


def mem_write(address, data):
    """MEM_WRITE request of *data* (a multiple of 4 bytes) at byte *address*."""
    return request(Command.MEM_WRITE, struct.pack("<I", address) + bytes(data))


def start(program_address):
    """START request: run the task binary at byte *program_address*."""
    return request(Command.START, struct.pack("<I", program_address))


def status():
    """STATUS request."""
    return request(Command.STATUS)


@dataclass(frozen=True)
class Reply:
    """A decoded reply frame."""

    status: Status | int
    payload: bytes

    def ok(self, what):
        """The payload; :class:`ProtocolError` naming *what* on an error reply."""
        if self.status != Status.OK:
            name = Status(self.status).name if self.status in Status._value2member_map_ \
                else str(self.status)
            raise ProtocolError(f"{what}: the board replied {name}")
        return self.payload


@dataclass(frozen=True)
class Info:
    """The INFO reply."""

    version: int
    engine: bool
    csr_bits: int
    memory_bytes: int

    @classmethod
    def decode(cls, payload):
        """From an INFO reply payload; :class:`ProtocolError` if it is not one."""
        if len(payload) != INFO.size:
            raise ProtocolError(f"INFO reply of {len(payload)} bytes, expected {INFO.size}")
        magic, version, engine, bits, _, size = INFO.unpack(payload)
        if magic != INFO_MAGIC:
            raise ProtocolError(f"INFO reply magic {magic!r}, expected {INFO_MAGIC!r}")
        return cls(version, bool(engine), bits, size)


class ReplyDecoder:
    """Reply frames out of a byte stream (bytes before a sync byte are skipped).

    ``feed(data)`` returns the replies completed by *data*; a frame with a wrong CRC raises
    :class:`ProtocolError` (the decoder is then back to hunting for the sync byte).
    """

    def __init__(self):
        self._buf = bytearray()

    def feed(self, data):
        """Add received bytes; return the list of :class:`Reply` they complete."""
        self._buf += bytes(data)
        out = []
        while True:
            k = self._buf.find(REPLY_SYNC)
            if k < 0:
                self._buf.clear()
                return out
            del self._buf[:k]
            if len(self._buf) < 3 or len(self._buf) < 4 + self._buf[2]:
                return out
            n = self._buf[2]
            frame = bytes(self._buf[:4 + n])
            del self._buf[:4 + n]
            if crc8(frame[1:-1]) != frame[-1]:
                raise ProtocolError(f"reply with a bad CRC: {frame.hex()}")
            code = frame[1]
            out.append(Reply(Status(code) if code in Status._value2member_map_ else code,
                             frame[3:-1]))

    @property
    def pending(self):
        """Bytes held of an incomplete frame."""
        return len(self._buf)
