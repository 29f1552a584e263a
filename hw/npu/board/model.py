"""Python model of the UART bridge (:class:`npu.board.bridge.Bridge`) with its memory and
CSR bank: request bytes in, reply bytes out.

Written from the protocol (:mod:`npu.board.protocol`), not from the gateware: the tests
feed the same byte streams to both and compare the replies and the final memory.
"""

from __future__ import annotations

import struct

from npu.board.protocol import (
    INFO,
    INFO_MAGIC,
    MAX_WORDS,
    PROTOCOL_VERSION,
    REQUEST_SYNC,
    STATUS_REGS,
    Command,
    Status,
    crc8,
    reply_frame,
)
from npu.bus.csr import CsrModel

__all__ = ["BridgeModel"]


class BridgeModel:
    """The bridge, byte by byte.

    Parameters
    ----------
    regmap : npu.bus.csr.RegisterMap
        The CSR map behind the bridge.
    memory_bytes : int
        Size of the memory.
    engine : bool
        What INFO reports.
    ro_values : dict, optional
        Values of the read-only registers (what the design drives; default 0).

    Attributes
    ----------
    memory : bytearray
        The memory's bytes.
    csr : npu.bus.csr.CsrModel
        The register bank (``csr.pulses`` lists START pulses).
    """

    def __init__(self, regmap, *, memory_bytes, engine=True, ro_values=None):
        self.regmap = regmap
        self.memory = bytearray(memory_bytes)
        self.csr = CsrModel(regmap)
        self.engine = engine
        self.ro_values = dict(ro_values or {})
        self._frame = None          # bytes of the frame after the sync byte, or None
        self._line_error = False

    def feed(self, byte, *, line_error=False):
        """One received byte; return the reply frame it completes (``b""`` if none)."""
        if self._frame is None:
            if byte == REQUEST_SYNC and not line_error:
                self._frame, self._line_error = bytearray(), False
            return b""
        self._frame.append(byte)
        self._line_error |= line_error
        f = self._frame
        if len(f) < 2 or len(f) < 3 + f[1]:
            return b""
        self._frame = None
        if self._line_error:
            return reply_frame(Status.LINE)
        if crc8(f[:-1]) != f[-1]:
            return reply_frame(Status.CHECKSUM)
        return self._execute(f[0], bytes(f[2:-1]))

    def feed_all(self, data):
        """Feed every byte of *data*; return the replies concatenated."""
        return b"".join(self.feed(b) for b in data)

    def timeout(self):
        """The inter-byte timeout passes: a frame in progress is dropped with TIMEOUT."""
        if self._frame is None:
            return b""
        self._frame = None
        return reply_frame(Status.TIMEOUT)

    @property
    def in_frame(self):
        """True between a sync byte and the frame's end."""
        return self._frame is not None

    def _csr_ok(self, offset):
        return offset % 4 == 0 and offset < 1 << self.regmap.addr_width

    def _mem_ok(self, address, words):
        return address % 4 == 0 and address + 4 * words <= len(self.memory)

    def _execute(self, cmd, payload):
        n = len(payload)
        if cmd == Command.INFO:
            if n:
                return reply_frame(Status.LENGTH)
            return reply_frame(Status.OK, INFO.pack(INFO_MAGIC, PROTOCOL_VERSION,
                                                    int(self.engine),
                                                    self.regmap.addr_width, 0,
                                                    len(self.memory) & 0xFFFFFFFF))
        if cmd in (Command.CSR_READ, Command.CSR_WRITE):
            if n != (2 if cmd == Command.CSR_READ else 6):
                return reply_frame(Status.LENGTH)
            (offset,) = struct.unpack_from("<H", payload)
            if not self._csr_ok(offset):
                return reply_frame(Status.ADDRESS)
            if cmd == Command.CSR_READ:
                value, resp = self.csr.read(offset, self.ro_values)
                return reply_frame(Status.BUS) if resp else \
                    reply_frame(Status.OK, struct.pack("<I", value))
            (value,) = struct.unpack_from("<I", payload, 2)
            resp = self.csr.write(offset, value)
            return reply_frame(Status.BUS if resp else Status.OK)
        if cmd == Command.START:
            if n != 4:
                return reply_frame(Status.LENGTH)
            (address,) = struct.unpack("<I", payload)
            for name, value in (("PROG_LO", address), ("PROG_HI", 0), ("START", 1)):
                if self.csr.write(self.regmap.offset(name), value):
                    return reply_frame(Status.BUS)
            return reply_frame(Status.OK)
        if cmd == Command.STATUS:
            if n:
                return reply_frame(Status.LENGTH)
            out = b""
            for name in STATUS_REGS:
                value, resp = self.csr.read(self.regmap.offset(name), self.ro_values)
                if resp:
                    return reply_frame(Status.BUS)
                out += struct.pack("<I", value)
            return reply_frame(Status.OK, out)
        if cmd == Command.MEM_READ:
            if n != 5 or not 1 <= payload[4] <= MAX_WORDS:
                return reply_frame(Status.LENGTH)
            address, words = struct.unpack("<IB", payload)
            if not self._mem_ok(address, words):
                return reply_frame(Status.ADDRESS)
            return reply_frame(Status.OK, bytes(self.memory[address:address + 4 * words]))
        if cmd == Command.MEM_WRITE:
            if n < 8 or n > 4 + 4 * MAX_WORDS or n % 4:
                return reply_frame(Status.LENGTH)
            (address,) = struct.unpack_from("<I", payload)
            data = payload[4:]
            if not self._mem_ok(address, len(data) // 4):
                return reply_frame(Status.ADDRESS)
            self.memory[address:address + len(data)] = data
            return reply_frame(Status.OK)
        return reply_frame(Status.COMMAND)
