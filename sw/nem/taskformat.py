"""The NEM task binary: the one definition of the container the binder writes and the
sequencer (golden model and RTL) reads.

All integers are little-endian. A binary is::

    program header   (HEADER, 68 bytes)
    buffer table     (buffer_count x BUFFER_ENTRY, 56 bytes each)
    task stream      (task_count task records)
    data section     (quantisation entries that compute tasks point at; 8-byte aligned)

A task record follows the shape of the NeuPro-M task control buffer
(``../shared/specs/nem-notes.md``): a 12-byte header naming the target unit, the number of
register writes, the set of tokens the task waits for and the set it signals on
completion, then ``nwrites`` pairs of (register index u8, value u32) written into the
unit's shadow registers before the unit starts.

This module defines the container, the register maps of every unit type and the codes
their registers hold (opcodes, element types, quantisation entries, attribute words). Each
unit's map is a :class:`RegisterMap`; the binder, the disassembler, the executor's binary
front-end and the Amaranth units import it, so no register index is typed twice.

Decoding checks everything it reads and raises :class:`TaskFormatError` naming the byte
offset and the field, never an exception from ``struct`` or an index error.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nem.elemtypes import ELEM_TYPES
from nem.opcodes import OPCODES
from nem.records import Record, RecordError
from nem.units import COMPUTE_UNITS, COPY_UNITS, Unit

if TYPE_CHECKING:  # nem.numerics pulls in numpy; the layout tables stay numpy-free
    from nem.numerics import EltwiseParams

__all__ = [
    "ATTR_PRESENT",
    "ATTR_WORDS",
    "BUFFER_ENTRY",
    "BUFFER_FIELDS",
    "COMPUTE_UNITS",
    "COPY_COUNT_BITS",
    "DATA_ALIGN",
    "DDR_ADDRESS_BITS",
    "ELEM_TYPES",
    "ELTWISE_ENTRY",
    "GROUP_MINOR",
    "GROUP_REQUANT_ENTRY",
    "GROUP_REQUANT_GROUP",
    "HEADER",
    "HEADER_FIELDS",
    "ID_VALUES",
    "LEVELS",
    "LIST_WORDS",
    "LOOKUP_TABLE",
    "MAGIC",
    "MAX_COPY_COUNT",
    "MAX_OPERANDS",
    "MAX_RANK",
    "MAX_TOKENS",
    "NO_ENGINE",
    "NO_QUANT",
    "NO_TABLE",
    "OPCODES",
    "QUANT_ENTRY",
    "QUANT_KINDS",
    "REGISTER_MAPS",
    "REQUANT_CHANNEL",
    "REQUANT_ENTRY",
    "SLOTTED_ATTRS_MINOR",
    "TABLE_ALIGN",
    "TABLE_BYTES",
    "TABLE_MINOR",
    "TASK_FIELDS",
    "TASK_HEADER",
    "VERSION",
    "WRITE",
    "WRITE_FIELDS",
    "AttrSlot",
    "BufferEntry",
    "GroupRequantEntry",
    "Program",
    "QuantEntry",
    "Register",
    "RegisterMap",
    "RequantEntry",
    "Task",
    "TaskFormatError",
    "Unit",
    "attr_layout",
    "attr_words",
    "data_offset",
    "decode",
    "decode_eltwise",
    "decode_group_requant",
    "decode_quant",
    "decode_requant",
    "decode_table",
    "encode",
    "encode_eltwise",
    "encode_group_requant",
    "encode_quant",
    "encode_requant",
    "encode_table",
    "operand_register",
    "read_attr_words",
]

MAGIC = b"NEMB"
#: (major, minor): a reader accepts its own major version and any minor version up to its own.
VERSION = (1, 4)
#: Task binary minor version that added the compute register ``TABLE`` (the map's last
#: register); a 1.2 reader refuses its index.
TABLE_MINOR = 3
#: Task binary minor version that added the group requantisation entry
#: (``GROUP_REQUANT_ENTRY``: int4 weights quantised per group along a reduction axis).
GROUP_MINOR = 4

#: The program header (68 bytes). A 1.0 binary had a reserved 0 where 1.1 has
#: ``data_bytes``: it reads as one without a data section.
HEADER = Record("program header", [
    ("magic", "bytes4", "b'NEMB'"),
    ("major", "u16", "format major version"),
    ("minor", "u16", "format minor version"),
    ("header_bytes", "u32", "size of this header"),
    ("device_hash", "bytes32", "sha256 of the resolved device the program was bound for"),
    ("task_count", "u32", "task records in the task stream"),
    ("buffer_count", "u32", "entries in the buffer table"),
    ("table_offset", "u32", "byte offset of the buffer table"),
    ("stream_offset", "u32", "byte offset of the task stream"),
    ("stream_bytes", "u32", "bytes of the task stream"),
    ("data_bytes", "u32", "bytes of the data section (after the stream, DATA_ALIGN-aligned)"),
])
#: One buffer of the buffer table (56 bytes).
BUFFER_ENTRY = Record("buffer entry", [
    ("name", "bytes32", "UTF-8, NUL padded"),
    ("level", "u8", "index into LEVELS"),
    ("engine", "u8", "engine of an L1 buffer; NO_ENGINE otherwise"),
    ("reserved", "u16", "0"),
    ("align", "u32", "alignment in bytes"),
    ("address", "u64", "byte address in its memory"),
    ("size", "u64", "bytes"),
])
#: The head of a task record (12 bytes); ``nwrites`` WRITE records follow.
TASK_HEADER = Record("task header", [
    ("unit", "u8", "Unit code"),
    ("instance", "u8", "instance of the unit type in the engine"),
    ("engine", "u8", "engine"),
    ("nwrites", "u8", "register writes that follow"),
    ("wait", "u32", "token mask the task waits for"),
    ("signal", "u32", "token mask the task signals on completion"),
])
#: One register write of a task record (5 bytes).
WRITE = Record("register write", [
    ("index", "u8", "register index in the unit's RegisterMap"),
    ("value", "u32", "value"),
])

#: Field names of each record, in order (derived from the declarations above).
HEADER_FIELDS = HEADER.names
BUFFER_FIELDS = BUFFER_ENTRY.names
TASK_FIELDS = TASK_HEADER.names
WRITE_FIELDS = WRITE.names

LEVELS = ("DDR", "L2", "L1")
NO_ENGINE = 0xFF
#: Token masks are 32 bits wide: at most 32 physical tokens.
MAX_TOKENS = 32
#: DDR byte addresses the engine reaches: its AXI address is 32 bits wide (4 GiB); the
#: binder refuses buffers placed past it.
DDR_ADDRESS_BITS = 32
#: The copy units count each dimension (COUNT0..3) in 16 bits: the binder folds longer
#: contiguous runs into rows, and the engine refuses larger counts (``BAD_VALUE``).
COPY_COUNT_BITS = 16
MAX_COPY_COUNT = (1 << COPY_COUNT_BITS) - 1


class TaskFormatError(ValueError):
    """A task binary (or a program to encode) breaks the format; the message says where."""


@dataclass(frozen=True)
class Register:
    """One 32-bit shadow register of a unit."""

    name: str
    index: int
    doc: str


class RegisterMap:
    """The shadow registers of one unit type, by name and by index."""

    def __init__(self, unit: Unit, registers: list[tuple[str, str]]):
        self.unit = unit
        self.registers = tuple(Register(n, k, d) for k, (n, d) in enumerate(registers))
        self._by_name = {r.name: r for r in self.registers}
        if len(self._by_name) != len(self.registers):
            raise ValueError(f"{unit.name}: register names repeat")

    def __len__(self) -> int:
        return len(self.registers)

    def index(self, name: str) -> int:
        """Index of the register ``name``."""
        try:
            return self._by_name[name].index
        except KeyError:
            raise TaskFormatError(f"{self.unit.name} has no register {name!r}") from None

    def name(self, index: int) -> str:
        """Name of register ``index``."""
        if not 0 <= index < len(self.registers):
            raise TaskFormatError(
                f"{self.unit.name} has registers 0..{len(self.registers) - 1}, not {index}"
            )
        return self.registers[index].name


def _copy_registers() -> list[tuple[str, str]]:
    regs = [
        ("SRC_LO", "source byte address, bits 31..0"),
        ("SRC_HI", "source byte address, bits 63..32"),
        ("DST_LO", "destination byte address, bits 31..0"),
        ("DST_HI", "destination byte address, bits 63..32"),
        ("COUNT0", "bytes per innermost run (contiguous on both sides)"),
    ]
    for d in (1, 2, 3):
        regs.append((f"COUNT{d}", f"repetitions along dimension {d} (1: unused)"))
        regs.append((f"SRC_STRIDE{d}", f"source byte stride of dimension {d}"))
        regs.append((f"DST_STRIDE{d}", f"destination byte stride of dimension {d}"))
    regs.append(("SRC_LEVEL", "memory of the source: 0 DDR, 1 L2, 2 L1 (of the task's engine)"))
    regs.append(("DST_LEVEL", "memory of the destination, coded like SRC_LEVEL"))
    return regs


# --- compute units -----------------------------------------------------------------------------

# Compute opcodes by code (the ``OPCODE`` register): ``OPCODES``, from ``nem.opcodes``.
# Element types by code (``OPk_ELEM`` and ``elem_type`` attributes): ``ELEM_TYPES``, from
# ``nem.elemtypes``. Unit codes (the task header's ``unit``): ``Unit``, from ``nem.units``.
#: Values of ``id`` attributes by code (pad ``mode``).
ID_VALUES = ("constant", "reflect", "edge")
#: Quantisation descriptor kinds by code (the first byte of a quantisation entry).
QUANT_KINDS = ("per_tensor", "per_channel", "per_group")
#: Operand slots of a compute task (inputs first, then outputs).
MAX_OPERANDS = 8
#: Dimensions an operand descriptor holds.
MAX_RANK = 6
#: Attribute words (``ATTR0`` ...) a compute task can carry.
ATTR_WORDS = 40
#: ``OPk_QUANT`` when the operand has no quantisation descriptor.
NO_QUANT = 0xFFFFFFFF
#: Tag word of a present attribute: this bit plus the number of words that follow.
ATTR_PRESENT = 1 << 31
#: The head of a quantisation entry (16 bytes); ``count`` f64 scales and ``count`` i64
#: zero points follow, then padding to a multiple of 8.
QUANT_ENTRY = Record("quantisation entry", [
    ("kind", "u8", "index into QUANT_KINDS"),
    ("reserved0", "u8", "0"),
    ("reserved1", "u16", "0"),
    ("axis", "i32", "channel axis (per_channel / per_group); 0 for per_tensor"),
    ("group_size", "u32", "elements per group (per_group); 0 otherwise"),
    ("count", "u32", "scales (and zero points) that follow"),
])
#: The head of a requantisation entry (24 bytes); ``channels`` REQUANT_CHANNEL records
#: follow.
REQUANT_ENTRY = Record("requantisation entry", [
    ("x_zero_point", "i32", "subtracted from every input element"),
    ("y_zero_point", "i32", "added to every requantised output"),
    ("lo", "i32", "clamp low"),
    ("hi", "i32", "clamp high"),
    ("channels", "u32", "REQUANT_CHANNEL records that follow (0: raw i32 output)"),
    ("reserved", "u32", "0"),
])
#: The requantisation of one output channel (8 bytes).
REQUANT_CHANNEL = Record("requantisation channel", [
    ("multiplier", "i32", "fixed-point multiplier (docs/numerics.md)"),
    ("shift", "i32", "right shift"),
])
#: The head of a group requantisation entry (32 bytes), the NMU output stage of an integer
#: gemm/matmul/conv2d whose i4 weight is quantised per group along a reduction axis (since
#: 1.4); ``groups`` GROUP_REQUANT_GROUP records follow. Word 4 holds the record count, as
#: in REQUANT_ENTRY, and a record is 8 bytes in both, so a reader of either finds the
#: entry's end. The arithmetic is ``nem.numerics.requantize_groups`` (docs/numerics.md).
GROUP_REQUANT_ENTRY = Record("group requantisation entry", [
    ("x_zero_point", "i32", "subtracted from every input element"),
    ("y_zero_point", "i32", "added to every requantised output"),
    ("lo", "i32", "clamp low"),
    ("hi", "i32", "clamp high"),
    ("groups", "u32", "GROUP_REQUANT_GROUP records that follow (>= 1)"),
    ("shift", "i32", "right shift of the 64-bit group sum, common to every group"),
    ("axis", "i32", "weight axis the groups run along (K of B[..., K, N]; H, W or I of HWIO)"),
    ("group_size", "u32", "weight elements per group along axis (the last may be shorter)"),
])
#: One group of a group requantisation entry (8 bytes).
GROUP_REQUANT_GROUP = Record("group requantisation group", [
    ("multiplier", "i32", "m_g: the group accumulator's multiplier, in [0, 2**31)"),
    ("w_zero_point", "i32", "zero point of the group's weights"),
])
#: ``TABLE`` when the task has no lookup table.
NO_TABLE = 0xFFFFFFFF
#: Bytes of a lookup table: one output code per input byte value.
TABLE_BYTES = 256
#: A lookup table starts on a multiple of this many bytes of the data section.
TABLE_ALIGN = 8
#: The lookup table of a CSTL table task (256 bytes): the output code of input code ``q``
#: (an i8) is the byte at offset ``q & 0xFF``, read as an i8. The binder computes it from
#: the executor's own formula (``nem.ops.lookup_table``) for every one of the 256 codes.
LOOKUP_TABLE = Record("lookup table", [
    ("codes", f"bytes{TABLE_BYTES}", "output code (i8) of input byte b at offset b"),
])
#: The integer parameters of a binary i8 elementwise task (add, sub, mul, min, max; 48
#: bytes, one i32 per field so that gateware streams it as 32-bit words:
#: ``ELTWISE_ENTRY.word_fields()``). The integer definition is
#: ``nem.numerics.eltwise_int8`` (docs/numerics.md); field names equal
#: ``nem.numerics.EltwiseParams``'.
ELTWISE_ENTRY = Record("eltwise entry", [
    ("a_zero_point", "i32", "zero point of input A (OP0)"),
    ("b_zero_point", "i32", "zero point of input B (OP1)"),
    ("y_zero_point", "i32", "zero point of the output"),
    ("left_shift", "i32", "left shift of (q - z) before the input rescale (0 for mul)"),
    ("a_multiplier", "i32", "input A rescale multiplier (0 for mul)"),
    ("a_shift", "i32", "input A rescale right shift (0 for mul)"),
    ("b_multiplier", "i32", "input B rescale multiplier (0 for mul)"),
    ("b_shift", "i32", "input B rescale right shift (0 for mul)"),
    ("y_multiplier", "i32", "output rescale multiplier"),
    ("y_shift", "i32", "output rescale right shift"),
    ("lo", "i32", "clamp low (after adding y_zero_point)"),
    ("hi", "i32", "clamp high"),
])

_OPERAND_FIELDS = (
    ("ADDR_LO", "byte address of the first element, bits 31..0"),
    ("ADDR_HI", "byte address, bits 63..32"),
    ("LEVEL", "memory: 0 DDR, 1 L2, 2 L1 (of the task's engine)"),
    ("BYTES", "bytes the region spans (the extent the race rules use)"),
    ("ELEM", "element type code (ELEM_TYPES)"),
    ("RANK", f"number of dimensions, 0..{MAX_RANK}"),
    *((f"DIM{d}", f"size of dimension {d}, outermost first") for d in range(MAX_RANK)),
    *((f"STRIDE{d}", f"element stride of dimension {d}") for d in range(MAX_RANK)),
    ("QUANT", "byte offset of the quantisation entry in the data section (NO_QUANT: none)"),
)


def _compute_registers() -> list[tuple[str, str]]:
    regs = [
        ("OPCODE", "operation code (OPCODES)"),
        ("NIN", "input operands: OP0 .. OP(NIN-1)"),
        ("NOUT", "output operands: OP(NIN) .. OP(NIN+NOUT-1)"),
    ]
    for k in range(MAX_OPERANDS):
        regs += [(f"OP{k}_{name}", f"operand {k}: {doc}") for name, doc in _OPERAND_FIELDS]
    regs += [(f"ATTR{j}", "attribute word (layout: attr_words)") for j in range(ATTR_WORDS)]
    regs.append(
        ("REQUANT", "integer gemm/matmul/conv2d: byte offset of the output stage's "
         "requantisation entry in the data section; binary i8 add/sub/mul/min/max: byte "
         "offset of the ELTWISE_ENTRY")
    )  # fmt: skip
    regs.append(
        ("TABLE", "i8 table tasks (unary, clamp, requantising pool / reduce_max): byte "
         "offset of the LOOKUP_TABLE in the data section (NO_TABLE: none); since 1.3")
    )  # fmt: skip
    return regs


def operand_register(k: int, field: str) -> str:
    """Name of operand slot ``k``'s register ``field`` (``operand_register(1, "RANK")``)."""
    return f"OP{k}_{field}"


#: Register maps by unit type. The copy units move a strided region of up to 4 dimensions:
#: ``for i3, i2, i1: copy COUNT0 bytes from SRC + sum(ik * SRC_STRIDEk) to
#: DST + sum(ik * DST_STRIDEk)``. The compute units (NMU, CSTL, VPU) share one map: an
#: opcode, operand descriptors, and attribute words.
REGISTER_MAPS: dict[Unit, RegisterMap] = {
    unit: RegisterMap(unit, _copy_registers() if unit in COPY_UNITS else _compute_registers())
    for unit in Unit
}


@dataclass(frozen=True)
class RequantEntry:
    """The NMU output stage of an integer gemm/matmul/conv2d, as the data section holds it.

    ``x_zero_point`` is subtracted from every input element before it is multiplied.
    Per output channel c the accumulator is requantised with ``multipliers[c]`` and
    ``shifts[c]`` (``docs/numerics.md``), ``y_zero_point`` added and the result clamped to
    ``[lo, hi]``. No channels: the output is the raw i32 accumulator.
    """

    x_zero_point: int
    y_zero_point: int
    lo: int
    hi: int
    multipliers: tuple[int, ...]
    shifts: tuple[int, ...]


def encode_requant(entry: RequantEntry) -> bytes:
    """The bytes of one requantisation entry (a multiple of 8)."""
    n = len(entry.multipliers)
    if n != len(entry.shifts):
        raise TaskFormatError(f"requantisation entry: {n} multipliers, {len(entry.shifts)} shifts")
    values = (entry.x_zero_point, entry.y_zero_point, entry.lo, entry.hi, *entry.multipliers,
              *entry.shifts)  # fmt: skip
    if not all(-(1 << 31) <= v < 1 << 31 for v in values):
        raise TaskFormatError("requantisation entry: a value does not fit in an i32")
    head = REQUANT_ENTRY.pack(x_zero_point=entry.x_zero_point, y_zero_point=entry.y_zero_point,
                              lo=entry.lo, hi=entry.hi, channels=n, reserved=0)
    body = b"".join(REQUANT_CHANNEL.pack(multiplier=m, shift=t)
                    for m, t in zip(entry.multipliers, entry.shifts, strict=True))
    return head + body


def decode_requant(data: bytes, offset: int) -> RequantEntry:
    """Read the requantisation entry at ``offset`` of a data section.

    Raises
    ------
    TaskFormatError
        When the entry is misaligned or does not fit in the section.
    """
    where = f"data section offset {offset}"
    if offset % 8:
        raise TaskFormatError(f"{where}: a requantisation entry starts on a multiple of 8")
    if offset + REQUANT_ENTRY.size > len(data):
        raise TaskFormatError(
            f"{where}: a requantisation entry needs {REQUANT_ENTRY.size} bytes, the data "
            f"section has {len(data)}"
        )
    head = REQUANT_ENTRY.unpack(data, offset)
    n = head["channels"]
    if offset + REQUANT_ENTRY.size + REQUANT_CHANNEL.size * n > len(data):
        raise TaskFormatError(
            f"{where}: a requantisation entry of {n} channels does not fit in the "
            f"{len(data)}-byte data section"
        )
    at = offset + REQUANT_ENTRY.size
    chans = [REQUANT_CHANNEL.unpack(data, at + REQUANT_CHANNEL.size * c) for c in range(n)]
    return RequantEntry(head["x_zero_point"], head["y_zero_point"], head["lo"], head["hi"],
                        tuple(c["multiplier"] for c in chans), tuple(c["shift"] for c in chans))


@dataclass(frozen=True)
class GroupRequantEntry:
    """The NMU output stage of an integer gemm/matmul/conv2d with an i4 weight quantised per
    group along a reduction axis, as the data section holds it (since 1.4).

    Group ``g`` holds the weights whose index along ``axis`` is in
    ``[g * group_size, (g + 1) * group_size)``; its int32 accumulator of
    ``(x - x_zero_point) * (w - w_zero_points[g])`` (group 0 also holds the bias) is
    multiplied by ``multipliers[g]``; the 64-bit sum over the groups is shifted right by
    ``shift`` with rounding, ``y_zero_point`` added and the result clamped to ``[lo, hi]``
    (``docs/numerics.md``).
    """

    x_zero_point: int
    y_zero_point: int
    lo: int
    hi: int
    shift: int
    axis: int
    group_size: int
    multipliers: tuple[int, ...]
    w_zero_points: tuple[int, ...]


def encode_group_requant(entry: GroupRequantEntry) -> bytes:
    """The bytes of one group requantisation entry (a multiple of 8)."""
    n = len(entry.multipliers)
    if n == 0 or n != len(entry.w_zero_points):
        raise TaskFormatError(f"group requantisation entry: {n} multipliers, "
                              f"{len(entry.w_zero_points)} weight zero points")
    values = (entry.x_zero_point, entry.y_zero_point, entry.lo, entry.hi, entry.shift,
              entry.axis, *entry.multipliers, *entry.w_zero_points)  # fmt: skip
    if not all(-(1 << 31) <= v < 1 << 31 for v in values) or \
            not 0 < entry.group_size < 1 << 32:
        raise TaskFormatError("group requantisation entry: a value does not fit its field")
    head = GROUP_REQUANT_ENTRY.pack(
        x_zero_point=entry.x_zero_point, y_zero_point=entry.y_zero_point, lo=entry.lo,
        hi=entry.hi, groups=n, shift=entry.shift, axis=entry.axis,
        group_size=entry.group_size,
    )
    body = b"".join(GROUP_REQUANT_GROUP.pack(multiplier=m, w_zero_point=z)
                    for m, z in zip(entry.multipliers, entry.w_zero_points, strict=True))
    return head + body


def decode_group_requant(data: bytes, offset: int) -> GroupRequantEntry:
    """Read the group requantisation entry at ``offset`` of a data section.

    Raises
    ------
    TaskFormatError
        When the entry is misaligned, has no group, or does not fit in the section.
    """
    where = f"data section offset {offset}"
    if offset % DATA_ALIGN:
        raise TaskFormatError(
            f"{where}: a group requantisation entry starts on a multiple of {DATA_ALIGN}"
        )
    if offset + GROUP_REQUANT_ENTRY.size > len(data):
        raise TaskFormatError(
            f"{where}: a group requantisation entry needs {GROUP_REQUANT_ENTRY.size} bytes, "
            f"the data section has {len(data)}"
        )
    head = GROUP_REQUANT_ENTRY.unpack(data, offset)
    n = head["groups"]
    if n == 0 or offset + GROUP_REQUANT_ENTRY.size + GROUP_REQUANT_GROUP.size * n > len(data):
        raise TaskFormatError(
            f"{where}: a group requantisation entry of {n} groups does not fit in the "
            f"{len(data)}-byte data section"
        )
    at = offset + GROUP_REQUANT_ENTRY.size
    rows = [GROUP_REQUANT_GROUP.unpack(data, at + GROUP_REQUANT_GROUP.size * g)
            for g in range(n)]
    return GroupRequantEntry(
        head["x_zero_point"], head["y_zero_point"], head["lo"], head["hi"], head["shift"],
        head["axis"], head["group_size"], tuple(r["multiplier"] for r in rows),
        tuple(r["w_zero_point"] for r in rows),
    )


def encode_table(codes) -> bytes:
    """The bytes of a lookup table: ``codes[b]`` (an i8) at offset ``b`` for b in 0..255."""
    codes = [int(c) for c in codes]
    if len(codes) != TABLE_BYTES or not all(-128 <= c < 128 for c in codes):
        raise TaskFormatError(f"lookup table: needs {TABLE_BYTES} i8 codes")
    return LOOKUP_TABLE.pack(codes=bytes(c & 0xFF for c in codes))


def decode_table(data: bytes, offset: int) -> tuple[int, ...]:
    """The 256 i8 output codes of the lookup table at ``offset`` of a data section.

    Raises
    ------
    TaskFormatError
        When the table is misaligned or does not fit in the section.
    """
    where = f"data section offset {offset}"
    if offset % TABLE_ALIGN:
        raise TaskFormatError(f"{where}: a lookup table starts on a multiple of {TABLE_ALIGN}")
    if offset + LOOKUP_TABLE.size > len(data):
        raise TaskFormatError(
            f"{where}: a lookup table needs {LOOKUP_TABLE.size} bytes, the data section has "
            f"{len(data)}"
        )
    raw = LOOKUP_TABLE.unpack(data, offset)["codes"]
    return tuple(b - 256 if b & 0x80 else b for b in raw)


def encode_eltwise(params: EltwiseParams) -> bytes:
    """The bytes of one eltwise entry (``ELTWISE_ENTRY``, 48 bytes)."""
    values = {name: getattr(params, name) for name in ELTWISE_ENTRY.names}
    bad = [n for n, v in values.items() if not -(1 << 31) <= int(v) < 1 << 31]
    if bad:
        raise TaskFormatError(f"eltwise entry: {bad[0]} = {values[bad[0]]} is not an i32")
    return ELTWISE_ENTRY.pack({n: int(v) for n, v in values.items()})


def decode_eltwise(data: bytes, offset: int) -> EltwiseParams:
    """Read the eltwise entry at ``offset`` of a data section.

    Raises
    ------
    TaskFormatError
        When the entry is misaligned or does not fit in the section.
    """
    where = f"data section offset {offset}"
    if offset % DATA_ALIGN:
        raise TaskFormatError(f"{where}: an eltwise entry starts on a multiple of {DATA_ALIGN}")
    if offset + ELTWISE_ENTRY.size > len(data):
        raise TaskFormatError(
            f"{where}: an eltwise entry needs {ELTWISE_ENTRY.size} bytes, the data section has "
            f"{len(data)}"
        )
    from nem.numerics import EltwiseParams

    return EltwiseParams(**ELTWISE_ENTRY.unpack(data, offset))


@dataclass(frozen=True)
class QuantEntry:
    """A quantisation descriptor as the data section holds it."""

    kind: str  # one of QUANT_KINDS
    axis: int  # per_channel / per_group; 0 for per_tensor
    group_size: int  # per_group; 0 otherwise
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]


def encode_quant(entry: QuantEntry) -> bytes:
    """The bytes of one quantisation entry, padded to a multiple of 8."""
    if entry.kind not in QUANT_KINDS:
        raise TaskFormatError(f"quantisation kind {entry.kind!r} not in {QUANT_KINDS}")
    n = len(entry.scales)
    if n == 0 or n != len(entry.zero_points):
        raise TaskFormatError(
            f"quantisation entry: {n} scales and {len(entry.zero_points)} zero points"
        )
    if not -(1 << 31) <= entry.axis < 1 << 31 or not 0 <= entry.group_size < 1 << 32:
        raise TaskFormatError(f"quantisation entry: axis {entry.axis} / group "
                              f"{entry.group_size} out of range")
    for z in entry.zero_points:
        if not -(1 << 63) <= z < 1 << 63:
            raise TaskFormatError(f"quantisation entry: zero point {z} is not an i64")
    head = QUANT_ENTRY.pack(kind=QUANT_KINDS.index(entry.kind), reserved0=0, reserved1=0,
                            axis=entry.axis, group_size=entry.group_size, count=n)
    return head + struct.pack(f"<{n}d{n}q", *entry.scales, *entry.zero_points)


def decode_quant(data: bytes, offset: int) -> QuantEntry:
    """Read the quantisation entry at ``offset`` of a data section.

    Raises
    ------
    TaskFormatError
        When the entry is outside the section, truncated, or has an unknown kind.
    """
    where = f"data section offset {offset}"
    if offset % 8:
        raise TaskFormatError(f"{where}: a quantisation entry starts on a multiple of 8")
    if offset + QUANT_ENTRY.size > len(data):
        raise TaskFormatError(
            f"{where}: a quantisation entry needs {QUANT_ENTRY.size} bytes, the data section "
            f"has {len(data)}"
        )
    head = QUANT_ENTRY.unpack(data, offset)
    kind, axis, group, n = head["kind"], head["axis"], head["group_size"], head["count"]
    if kind >= len(QUANT_KINDS):
        raise TaskFormatError(f"{where}: quantisation kind {kind} unknown")
    body = struct.Struct(f"<{n}d{n}q")
    if n == 0 or offset + QUANT_ENTRY.size + body.size > len(data):
        raise TaskFormatError(
            f"{where}: a quantisation entry of {n} channels does not fit in the "
            f"{len(data)}-byte data section"
        )
    values = body.unpack_from(data, offset + QUANT_ENTRY.size)
    return QuantEntry(QUANT_KINDS[kind], axis, group, values[:n], values[n:])


def _signed(word: int) -> int:
    return word - (1 << 32) if word & 1 << 31 else word


def _i32(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -(1 << 31) <= value < 1 << 31:
        raise TaskFormatError(f"attribute {name}: {value!r} is not a 32-bit integer")
    return value & 0xFFFFFFFF


def _code(name: str, value, table: tuple[str, ...]) -> int:
    if value not in table:
        raise TaskFormatError(f"attribute {name}: {value!r} has no code (codes: {table})")
    return table.index(value)


#: Body words of the int_list attributes that have a fixed length: the spatial attributes of
#: the convolution and pooling opcodes (a 2-D operation has 4 pads, 2 strides, ...). Any
#: other int_list holds one item per dimension, at most MAX_RANK (pad's ``pads``: two per
#: dimension).
LIST_WORDS = {
    "conv1d": {"pads": 2, "strides": 1, "dilations": 1},
    "conv2d": {"pads": 4, "strides": 2, "dilations": 2},
    "depthwise_conv2d": {"pads": 4, "strides": 2, "dilations": 2},
    "conv3d": {"pads": 6, "strides": 3, "dilations": 3},
    "maxpool": {"kernel_shape": 2, "pads": 4, "strides": 2, "dilations": 2},
    "avgpool": {"kernel_shape": 2, "pads": 4, "strides": 2, "dilations": 2},
    "pad": {"pads": 2 * MAX_RANK},
}
#: Task binary minor version from which attributes sit in fixed slots (attr_layout); 1.0
#: and 1.1 binaries pack them one after another (read with ``packed=True``).
SLOTTED_ATTRS_MINOR = 2


@dataclass(frozen=True)
class AttrSlot:
    """Where one attribute of an opcode lives in the ATTR registers: a tag word at ``tag``
    (0: absent, else ``ATTR_PRESENT`` plus the body's word count), then up to ``words``
    body words. Unused body words are not written (they read 0)."""

    name: str
    type: str
    tag: int
    words: int

    @property
    def body(self) -> int:
        """ATTR index of the first body word."""
        return self.tag + 1


def _body_words(opcode: str, name: str, typ: str) -> int:
    if typ == "float":
        return 2
    if typ == "int_list":
        return LIST_WORDS.get(opcode, {}).get(name, MAX_RANK)
    if typ in ("int", "bool", "elem_type", "id"):
        return 1
    raise TaskFormatError(f"{opcode} attribute {name}: {typ} attributes have no encoding")


@functools.cache
def _layout(opcode: str, specs: tuple[tuple[str, str], ...]) -> tuple[AttrSlot, ...]:
    slots, at = [], 0
    for name, typ in specs:
        n = _body_words(opcode, name, typ)
        slots.append(AttrSlot(name, typ, at, n))
        at += 1 + n
    if at > ATTR_WORDS:
        raise TaskFormatError(f"{opcode}: attributes need {at} words, at most {ATTR_WORDS}")
    return tuple(slots)


def attr_layout(opcode: str, specs) -> tuple[AttrSlot, ...]:
    """The ATTR register slots of ``opcode``'s attributes, in registry order.

    Parameters
    ----------
    opcode : str
        The opcode (its name picks the fixed list lengths of :data:`LIST_WORDS`).
    specs : iterable of (name, type)
        The opcode's attributes in registry order (registry attribute types).

    Every attribute has its own slot whether or not a task gives it, so the position of
    each attribute depends on the opcode alone (the hardware reads them by index).
    """
    return _layout(opcode, tuple((str(n), str(t)) for n, t in specs))


def _encode_attr(slot: AttrSlot, v) -> list[int]:
    name, typ = slot.name, slot.type
    if typ == "int":
        return [_i32(name, v)]
    if typ == "bool":
        return [int(bool(v))]
    if typ == "elem_type":
        return [_code(name, v, ELEM_TYPES)]
    if typ == "id":
        return [_code(name, v, ID_VALUES)]
    if typ == "float":
        lo, hi = struct.unpack("<II", struct.pack("<d", float(v)))
        return [lo, hi]
    body = [_i32(name, item) for item in v]
    if len(body) > slot.words:
        raise TaskFormatError(f"attribute {name}: {len(body)} items, at most {slot.words}")
    return body


def attr_words(opcode: str, specs, values: dict) -> list[tuple[int, int]]:
    """Attribute register writes of a compute task.

    Parameters
    ----------
    opcode : str
        The task's opcode.
    specs : iterable of (name, type)
        The opcode's attributes in registry order (registry attribute types).
    values : dict
        The attributes the task has (absent ones are simply missing).

    Returns
    -------
    list of (int, int)
        ``(ATTR index, word)`` pairs in index order: per attribute of
        :func:`attr_layout` its tag word (0 when absent, else ``ATTR_PRESENT`` plus the
        number of body words), then the body: an ``int`` as i32, a ``bool`` as 0/1, an
        ``elem_type`` or ``id`` as its code, a ``float`` as the two halves of its f64
        (low first), an ``int_list`` as one i32 per item.
    """
    writes: list[tuple[int, int]] = []
    for slot in attr_layout(opcode, specs):
        v = values.get(slot.name)
        if v is None:
            writes.append((slot.tag, 0))
            continue
        body = _encode_attr(slot, v)
        writes.append((slot.tag, ATTR_PRESENT | len(body)))
        writes += [(slot.body + k, w) for k, w in enumerate(body)]
    return writes


def _decode_attr(typ: str, name: str, body: list[int]):
    if typ == "int":
        return _signed(body[0])
    if typ == "bool":
        return bool(body[0])
    if typ in ("elem_type", "id"):
        table = ELEM_TYPES if typ == "elem_type" else ID_VALUES
        if body[0] >= len(table):
            raise TaskFormatError(f"attribute {name}: code {body[0]} unknown")
        return table[body[0]]
    if typ == "float":
        return struct.unpack("<d", struct.pack("<II", *body))[0]
    return tuple(_signed(w) for w in body)


def read_attr_words(opcode: str, specs, words: list[int], *, packed: bool = False) -> dict:
    """The attributes :func:`attr_words` encoded (absent ones are left out).

    Parameters
    ----------
    opcode : str
        The task's opcode.
    specs : iterable of (name, type)
        The opcode's attributes in registry order.
    words : list of int
        The ATTR registers (``ATTR_WORDS`` of them; unwritten ones 0).
    packed : bool
        Read the layout of binaries before version 1.2, where each attribute follows the
        previous one's last word instead of sitting in its slot.

    Raises
    ------
    TaskFormatError
        When a tag or a code is invalid, a list is longer than its slot, or a word outside
        any present attribute's body is set.
    """
    if packed:
        return _read_packed(specs, words)
    out: dict = {}
    words = list(words) + [0] * (ATTR_WORDS - len(words))
    used = set()
    for slot in attr_layout(opcode, specs):
        tag = words[slot.tag]
        used.add(slot.tag)
        if tag == 0:
            continue
        n = tag & ~ATTR_PRESENT
        want = {"float": 2, "int_list": n}.get(slot.type, 1)
        if not tag & ATTR_PRESENT or n != want or n > slot.words:
            raise TaskFormatError(
                f"attribute {slot.name}: ATTR{slot.tag} tag {tag:#x} is not a {slot.type} tag"
                + (f" of at most {slot.words} items" if slot.type == "int_list" else "")
            )
        body = words[slot.body : slot.body + n]
        used.update(range(slot.body, slot.body + n))
        out[slot.name] = _decode_attr(slot.type, slot.name, body)
    stray = [j for j, w in enumerate(words) if w and j not in used]
    if stray:
        raise TaskFormatError(
            f"ATTR{stray[0]} = {words[stray[0]]:#x} belongs to no present attribute of {opcode}"
        )
    return out


def _read_packed(specs, words: list[int]) -> dict:
    out: dict = {}
    at = 0
    for name, typ in specs:
        if at >= len(words):
            raise TaskFormatError(f"attribute {name}: no tag word (ATTR{at} not written)")
        tag = words[at]
        at += 1
        if tag == 0:
            continue
        n = tag & ~ATTR_PRESENT
        want = {"float": 2, "int_list": n}.get(typ, 1)
        if not tag & ATTR_PRESENT or n != want:
            raise TaskFormatError(f"attribute {name}: tag {tag:#x} is not a {typ} tag")
        if at + n > len(words):
            raise TaskFormatError(f"attribute {name}: needs ATTR{at}..ATTR{at + n - 1}")
        out[name] = _decode_attr(typ, name, words[at : at + n])
        at += n
    return out


@dataclass(frozen=True)
class BufferEntry:
    """Where one NEM buffer lives."""

    name: str
    level: str  # one of LEVELS
    engine: int | None  # L1 only
    align: int
    address: int
    size: int


@dataclass(frozen=True)
class Task:
    """One task record: target unit, tokens, and register writes in order."""

    unit: Unit
    instance: int
    engine: int
    wait: int  # token mask
    signal: int  # token mask
    writes: tuple[tuple[int, int], ...]  # (register index, value)


@dataclass(frozen=True)
class Program:
    """A decoded task binary."""

    device_hash: bytes  # sha256 of the resolved device
    buffers: tuple[BufferEntry, ...]
    tasks: tuple[Task, ...]
    data: bytes = b""  # the data section (quantisation entries)
    version: tuple[int, int] = VERSION


#: The data section starts on, and its entries are, multiples of this many bytes.
DATA_ALIGN = 8


def data_offset(task_stream_end: int) -> int:
    """Where the data section starts: the task stream's end rounded up to a multiple of
    :data:`DATA_ALIGN`."""
    return -(-task_stream_end // DATA_ALIGN) * DATA_ALIGN


def _check_task(k: int, task: Task) -> None:
    where = f"task {k}"
    if not isinstance(task.unit, Unit):
        raise TaskFormatError(f"{where}: unit {task.unit!r} is not a Unit")
    for field, value, bits in (
        ("instance", task.instance, 8),
        ("engine", task.engine, 8),
        ("wait", task.wait, MAX_TOKENS),
        ("signal", task.signal, MAX_TOKENS),
    ):
        if not 0 <= value < 1 << bits:
            raise TaskFormatError(f"{where}: {field} {value} does not fit in {bits} bits")
    if len(task.writes) > 255:
        raise TaskFormatError(f"{where}: {len(task.writes)} register writes (at most 255)")
    regs = REGISTER_MAPS.get(task.unit)
    for index, value in task.writes:
        if regs is not None:
            regs.name(index)  # raises when out of range
        if not 0 <= value < 1 << 32:
            raise TaskFormatError(f"{where}: register {index} value {value} is not a u32")


def encode(program: Program) -> bytes:
    """The binary of ``program``.

    Raises
    ------
    TaskFormatError
        When a field does not fit its encoding (the message names the task or buffer).
    """
    if len(program.device_hash) != 32:
        raise TaskFormatError(f"device hash has {len(program.device_hash)} bytes, not 32")
    table = bytearray()
    for buf in program.buffers:
        name = buf.name.encode("utf-8")
        if not 0 < len(name) < 32:
            raise TaskFormatError(f"buffer {buf.name!r}: the name needs 1 to 31 UTF-8 bytes")
        if buf.level not in LEVELS:
            raise TaskFormatError(f"buffer {buf.name!r}: level {buf.level!r} not in {LEVELS}")
        engine = NO_ENGINE if buf.engine is None else buf.engine
        if not 0 <= engine <= NO_ENGINE or (buf.engine is not None and engine == NO_ENGINE):
            raise TaskFormatError(f"buffer {buf.name!r}: engine {buf.engine} out of range")
        for field, value, bits in (
            ("align", buf.align, 32),
            ("address", buf.address, 64),
            ("size", buf.size, 64),
        ):
            if not 0 <= value < 1 << bits:
                raise TaskFormatError(f"buffer {buf.name!r}: {field} {value} is out of range")
        table += BUFFER_ENTRY.pack(name=name, level=LEVELS.index(buf.level), engine=engine,
                                   reserved=0, align=buf.align, address=buf.address,
                                   size=buf.size)
    stream = bytearray()
    for k, task in enumerate(program.tasks):
        _check_task(k, task)
        stream += TASK_HEADER.pack(unit=task.unit, instance=task.instance, engine=task.engine,
                                   nwrites=len(task.writes), wait=task.wait,
                                   signal=task.signal)
        for index, value in task.writes:
            stream += WRITE.pack(index=index, value=value)
    table_at = HEADER.size
    tasks_at = table_at + len(table)
    data = bytes(program.data)
    if len(data) % 8:
        raise TaskFormatError(f"the data section has {len(data)} bytes, not a multiple of 8")
    pad = data_offset(tasks_at + len(stream)) - tasks_at - len(stream) if data else 0
    major, minor = program.version
    header = HEADER.pack(
        magic=MAGIC,
        major=major,
        minor=minor,
        header_bytes=HEADER.size,
        device_hash=program.device_hash,
        task_count=len(program.tasks),
        buffer_count=len(program.buffers),
        table_offset=table_at,
        stream_offset=tasks_at,
        stream_bytes=len(stream),
        data_bytes=len(data),
    )
    return header + bytes(table) + bytes(stream) + bytes(pad) + data


def _unpack(record: Record, data: bytes, at: int, what: str) -> dict:
    try:
        return record.unpack(data, at, what=what)
    except RecordError as exc:
        raise TaskFormatError(str(exc).replace("the data ends", "the binary ends")) from None


def _at(field: str) -> int:
    """Offset of a program-header field, for messages."""
    return HEADER.offset(field)


def decode(data: bytes, *, device_hash: bytes | None = None) -> Program:
    """Read a task binary.

    Parameters
    ----------
    data : bytes
        The whole binary.
    device_hash : bytes, optional
        When given, the binary must have been bound for this device.

    Raises
    ------
    TaskFormatError
        On a wrong magic, version or device hash, a truncated binary, a register index
        outside the unit's map, an unknown unit or level, or bytes after the task stream.
    """
    data = bytes(data)
    h = _unpack(HEADER, data, 0, "the program header")
    magic, major, minor, hsize, dev = (h["magic"], h["major"], h["minor"], h["header_bytes"],
                                       h["device_hash"])
    ntasks, nbufs, table_at, tasks_at = (h["task_count"], h["buffer_count"], h["table_offset"],
                                         h["stream_offset"])
    nstream, ndata = h["stream_bytes"], h["data_bytes"]
    if magic != MAGIC:
        raise TaskFormatError(
            f"offset {_at('magic')}: magic {magic!r}, expected {MAGIC!r} (not a task binary)"
        )
    if major != VERSION[0] or minor > VERSION[1]:
        raise TaskFormatError(
            f"offset {_at('major')}: format version {major}.{minor}; this reader handles "
            f"{VERSION[0]}.0 to {VERSION[0]}.{VERSION[1]}"
        )
    if hsize != HEADER.size or table_at != HEADER.size:
        raise TaskFormatError(
            f"offset {_at('header_bytes')}: header size {hsize} / buffer table offset "
            f"{table_at}, expected {HEADER.size}"
        )
    if device_hash is not None and dev != device_hash:
        raise TaskFormatError(
            f"offset {_at('device_hash')}: bound for device {dev.hex()[:16]}..., this device is "
            f"{device_hash.hex()[:16]}..."
        )
    if tasks_at != table_at + nbufs * BUFFER_ENTRY.size:
        raise TaskFormatError(
            f"offset {_at('stream_offset')}: task stream offset {tasks_at}, but {nbufs} buffer "
            f"entries end at {table_at + nbufs * BUFFER_ENTRY.size}"
        )
    data_at = data_offset(tasks_at + nstream) if ndata else tasks_at + nstream
    if ndata % 8:
        raise TaskFormatError(
            f"offset {_at('data_bytes')}: data section of {ndata} bytes, not a multiple of 8"
        )
    if data_at + ndata != len(data):
        raise TaskFormatError(
            f"offset {_at('stream_bytes')}: header says the task stream has {nstream} bytes "
            f"from offset {tasks_at} and the data section {ndata}, so the binary ends at "
            f"{data_at + ndata}; it has {len(data)} bytes"
            + (" (truncated)" if data_at + ndata > len(data) else " (trailing bytes)")
        )
    buffers = []
    for k in range(nbufs):
        at = table_at + k * BUFFER_ENTRY.size
        e = _unpack(BUFFER_ENTRY, data, at, f"buffer entry {k}")
        raw, level, engine = e["name"], e["level"], e["engine"]
        align, address, size = e["align"], e["address"], e["size"]
        name = raw.rstrip(b"\0")
        try:
            text = name.decode("utf-8")
        except UnicodeDecodeError:
            text = ""
        if not text or b"\0" in name:
            raise TaskFormatError(f"offset {at}: buffer entry {k}: name {raw!r} is not valid")
        if level >= len(LEVELS):
            raise TaskFormatError(
                f"offset {at + BUFFER_ENTRY.offset('level')}: buffer {text!r}: level {level} "
                "unknown"
            )
        buffers.append(
            BufferEntry(
                text, LEVELS[level], None if engine == NO_ENGINE else engine, align, address, size
            )
        )
    tasks = []
    at = tasks_at
    for k in range(ntasks):
        t = _unpack(TASK_HEADER, data, at, f"task {k} header")
        unit, instance, engine = t["unit"], t["instance"], t["engine"]
        nwrites, wait, signal = t["nwrites"], t["wait"], t["signal"]
        try:
            unit = Unit(unit)
        except ValueError:
            raise TaskFormatError(f"offset {at}: task {k}: unit type {unit} unknown") from None
        regs = REGISTER_MAPS.get(unit)
        at += TASK_HEADER.size
        writes = []
        for _ in range(nwrites):
            w = _unpack(WRITE, data, at, f"task {k} register write")
            index, value = w["index"], w["value"]
            last = len(regs) - 1 if regs is not None else 0
            if regs is not None and minor < TABLE_MINOR and unit in COMPUTE_UNITS:
                last = regs.index("TABLE") - 1  # the register 1.3 appended
            if regs is not None and index > last:
                raise TaskFormatError(
                    f"offset {at}: task {k}: {unit.name} register index {index} out of range "
                    f"(0..{last} in a {major}.{minor} binary)"
                )
            writes.append((index, value))
            at += WRITE.size
        tasks.append(Task(unit, instance, engine, wait, signal, tuple(writes)))
    if at != tasks_at + nstream:
        raise TaskFormatError(
            f"offset {at}: the tasks end here, the header says the stream ends at "
            f"{tasks_at + nstream}"
        )
    return Program(dev, tuple(buffers), tuple(tasks), data[data_at:], (major, minor))
