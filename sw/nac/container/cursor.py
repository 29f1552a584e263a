"""The byte cursor the section readers share: bounded little-endian reads with located errors."""

from __future__ import annotations

import struct
from typing import ClassVar

from nac.errors import NacFormatError


class _Cursor:
    """Reads little-endian fields inside one section, never past its end.

    ``field`` arguments are a string or a ``(format, *args)`` tuple, formatted only when
    an error is reported (parsing stays fast).
    """

    _structs: ClassVar[dict] = {}

    def __init__(self, buf, start, end, section):
        self.buf, self.pos, self.end, self.section = buf, start, end, section

    def fail(self, message, field=None, value=None, offset=None):
        if isinstance(field, tuple):
            field = field[0].format(*field[1:])
        raise NacFormatError(message, section=self.section, field=field,
                             offset=self.pos if offset is None else offset, value=value)

    def take(self, size, field):
        if size < 0 or self.pos + size > self.end:
            self.fail(f"needs {size} bytes, {self.end - self.pos} remain in the section",
                      field=field, value=size)
        out = self.buf[self.pos:self.pos + size]
        self.pos += size
        return out

    def unpack(self, fmt, field):
        packer = self._structs.get(fmt)
        if packer is None:
            packer = self._structs[fmt] = struct.Struct("<" + fmt)
        if self.pos + packer.size > self.end:
            self.fail(f"needs {packer.size} bytes, {self.end - self.pos} remain in the section",
                      field=field, value=packer.size)
        values = packer.unpack_from(self.buf, self.pos)
        self.pos += packer.size
        return values if len(values) > 1 else values[0]

    def record(self, record, field):
        """The fields of a :class:`nem.records.Record` at the cursor, as a dict."""
        values = self.unpack(record.struct.format[1:], field)
        return dict(zip(record.names, values if len(record.names) > 1 else (values,),
                        strict=True))

    def count(self, field, min_record):
        """A uint32 count whose records of at least *min_record* bytes must fit."""
        at = self.pos
        n = self.unpack("I", field)
        if n * min_record > self.end - self.pos:
            self.fail(f"count {n} of records of at least {min_record} bytes does not fit in "
                      f"the {self.end - self.pos} bytes that remain", field=field, value=n,
                      offset=at)
        return n

    def text(self, size, field):
        at = self.pos
        raw = self.take(size, field)
        try:
            return bytes(raw).decode("utf-8")  # a memoryview slice has no decode()
        except UnicodeDecodeError as exc:
            self.fail(f"not valid UTF-8 ({exc.reason} at byte {exc.start})", field=field,
                      value=bytes(raw[:32]), offset=at)
            raise  # unreachable

    def done(self):
        if self.pos != self.end:
            self.fail(f"{self.end - self.pos} trailing bytes after the section's content",
                      field="end")
