"""Binary records declared once: the byte packing, the unpacking, the field offsets the
hardware slices and the testbenches patch all derive from one declaration.

A :class:`Record` is an ordered list of little-endian fields without padding. Its
``struct.Struct`` is *built from* the declaration (never the other way round), so no
layout is parsed back from a format string and no offset is typed by hand::

    TASK_HEADER = Record("task header", [
        ("unit", "u8", "unit type code"),
        ("nwrites", "u8", "register writes that follow"),
        ...
    ])
    TASK_HEADER.pack(unit=2, nwrites=3, ...)    # range-checked, named errors
    TASK_HEADER.unpack(data, at)               # a dict, or a RecordError naming the offset
    TASK_HEADER.offset("nwrites")              # byte offset inside the record
    TASK_HEADER.bit_fields()                   # {name: (bit offset, bits)} for gateware

Field types: ``u8 u16 u32 u64`` (unsigned), ``i32 i64`` (two's complement), ``f64``
(IEEE double) and ``bytesN`` (N raw bytes, NUL padded when packed shorter).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["FIELD_TYPES", "Field", "Record", "RecordError"]

#: Field type -> (struct code, bytes, kind). Kind "u" / "i" are integers, "f" a float,
#: "b" raw bytes (sized by the type's suffix).
FIELD_TYPES = {
    "u8": ("B", 1, "u"),
    "u16": ("H", 2, "u"),
    "u32": ("I", 4, "u"),
    "u64": ("Q", 8, "u"),
    "i32": ("i", 4, "i"),
    "i64": ("q", 8, "i"),
    "f64": ("d", 8, "f"),
}
_BYTES = re.compile(r"bytes([1-9][0-9]*)")


class RecordError(ValueError):
    """A value does not fit its field, or the bytes end inside a record."""


@dataclass(frozen=True)
class Field:
    """One field of a record: its name, type, byte offset, size and meaning."""

    name: str
    type: str
    offset: int
    size: int
    doc: str

    @property
    def kind(self) -> str:
        """``"u"``, ``"i"``, ``"f"`` or ``"b"`` (bytes)."""
        return "b" if self.type.startswith("bytes") else FIELD_TYPES[self.type][2]

    @property
    def bits(self) -> int:
        return 8 * self.size

    @property
    def bit_offset(self) -> int:
        return 8 * self.offset

    def check(self, value, where: str):
        """``value`` if it fits this field, else a :class:`RecordError` naming it."""
        kind = self.kind
        if kind == "b":
            if not isinstance(value, bytes | bytearray) or len(value) > self.size:
                raise RecordError(f"{where}: {self.name} must be at most {self.size} bytes, "
                                  f"not {value!r}")
            return bytes(value)
        if kind == "f":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise RecordError(f"{where}: {self.name} {value!r} is not a number")
            return float(value)
        lo, hi = (0, 1 << self.bits) if kind == "u" else (-(1 << self.bits - 1),
                                                            1 << self.bits - 1)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value < hi:
            raise RecordError(f"{where}: {self.name} {value!r} does not fit in a {self.type}")
        return value


class Record:
    """A little-endian record without padding, declared as ``(name, type, doc)`` fields.

    Parameters
    ----------
    name : str
        What the record is, for messages (``"task header"``).
    fields : iterable of (str, str, str)
        Name, type (:data:`FIELD_TYPES` or ``bytesN``) and meaning of each field, in order.
    """

    def __init__(self, name: str, fields: Iterable[tuple[str, str, str]]):
        self.name = name
        out, codes, at = [], [], 0
        for fname, ftype, doc in fields:
            if m := _BYTES.fullmatch(ftype):
                code, size = f"{m[1]}s", int(m[1])
            elif ftype in FIELD_TYPES:
                code, size, _ = FIELD_TYPES[ftype]
            else:
                raise ValueError(f"{name}.{fname}: unknown field type {ftype!r}")
            out.append(Field(fname, ftype, at, size, doc))
            codes.append(code)
            at += size
        self.fields = tuple(out)
        self._by_name = {f.name: f for f in self.fields}
        if len(self._by_name) != len(self.fields):
            raise ValueError(f"{name}: field names repeat")
        #: The ``struct.Struct`` this declaration gives (derived, never parsed back).
        self.struct = struct.Struct("<" + "".join(codes))
        self.size = self.struct.size
        assert self.size == at

    def __repr__(self) -> str:
        return f"Record({self.name!r}, {self.size} bytes)"

    def __getitem__(self, name: str) -> Field:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"{self.name} has no field {name!r}") from None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def offset(self, name: str) -> int:
        """Byte offset of field ``name`` inside the record."""
        return self[name].offset

    def pack(self, values: Mapping | None = None, /, *, where: str | None = None,
             **kw) -> bytes:
        """The bytes of one record; every field must be given and fit its type.

        Raises
        ------
        RecordError
            Naming ``where`` (default: the record's name), the field and the value.
        """
        values = {**(values or {}), **kw}
        where = where or self.name
        missing = [n for n in self.names if n not in values]
        extra = sorted(set(values) - set(self.names))
        if missing or extra:
            raise RecordError(f"{where}: fields missing {missing}, unknown {extra}")
        return self.struct.pack(*(f.check(values[f.name], where) for f in self.fields))

    def unpack(self, data: bytes, at: int = 0, *, what: str | None = None) -> dict:
        """The fields of the record at byte ``at`` of ``data`` (``bytesN`` as raw bytes).

        Raises
        ------
        RecordError
            When the record runs past the end of ``data`` (naming the offset).
        """
        if at < 0 or at + self.size > len(data):
            raise RecordError(
                f"offset {at}: {what or self.name} needs {self.size} bytes, the data ends "
                f"after {max(len(data) - at, 0)} (truncated)"
            )
        return dict(zip(self.names, self.struct.unpack_from(data, at), strict=True))

    def patch(self, data: bytearray, at: int, name: str, value) -> None:
        """Overwrite field ``name`` of the record at byte ``at`` of ``data`` in place."""
        f = self[name]
        if at < 0 or at + self.size > len(data):
            raise RecordError(f"offset {at}: no whole {self.name} to patch")
        value = f.check(value, self.name)
        code = f"{f.size}s" if f.kind == "b" else FIELD_TYPES[f.type][0]
        struct.pack_into("<" + code, data, at + f.offset, value)

    def bit_fields(self) -> dict[str, tuple[int, int]]:
        """``{name: (bit offset, bits)}``: the record as the bits of a little-endian word
        (bit 0 is bit 0 of the first byte), for gateware that slices it."""
        return {f.name: (f.bit_offset, f.bits) for f in self.fields}

    def word_fields(self, width: int = 4) -> dict[str, int]:
        """``{name: word index}`` when the record is read as ``width``-byte words, one field
        per word (as gateware streams it).

        Raises
        ------
        ValueError
            When a field is not exactly one aligned word.
        """
        out = {}
        for f in self.fields:
            if f.size != width or f.offset % width:
                raise ValueError(f"{self.name}.{f.name} is not one aligned {width}-byte word")
            out[f.name] = f.offset // width
        return out

    def words(self, width: int) -> int:
        """Words of ``width`` bytes the record spans (rounded up)."""
        return math.ceil(self.size / width)
