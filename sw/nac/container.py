"""NAC v1.6 container: object model, binary reader and writer (an exact pair).

:func:`loads` / :func:`dumps` work on bytes, :func:`read_nac` / :func:`write_nac` on files
(with external weights in ``<stem>.safetensors``, see :mod:`nac.weights`).

Canonical layout written by :func:`dumps`: the 88-byte header, then the present sections
contiguously in the order of the header's offset table; absent sections have offset 0.
The reader accepts sections in any order as long as they do not overlap, and checks that
each parses to exactly its extent (up to the next section or the end of the file).
``dumps(loads(b)) == b`` holds for every file in canonical layout; ``loads(dumps(x)) == x``
for every valid object. Encodings the spec leaves loose follow ``nac-notes.md``; the
choices are listed in ``docs/nac-format.md``.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import ClassVar

from nac.encoding import (
    CONSTANT_CODES,
    HEADER_SIZE,
    MAGIC,
    MMAP_COMMAND,
    MMAP_RECORD,
    REGULAR_OP_MIN,
    SECTION_TAGS,
    SIGNATURE_CODES,
    STANDARD_OPS,
    STORAGE_INTERNAL,
    VERSION,
    ConstType,
    DType,
    MmapAction,
    QuantMethod,
    SystemOp,
)
from nac.errors import NacFormatError
from nem.records import RecordError

__all__ = [
    "Argument",
    "Constant",
    "DataSection",
    "Instruction",
    "MmapRecord",
    "NacFile",
    "Orch",
    "QuantParams",
    "Tensor",
    "dumps",
    "gather_arguments",
    "loads",
    "section_body",
    "tensor_metadata",
]


# --- object model ---------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    """One ABCD instruction (§3). ``c`` is the raw C field (prefix first) or None."""

    a: int
    b: int
    c: tuple[int, ...] | None = None
    d: tuple[int, ...] = ()

    @property
    def const_ids(self):
        """The ids in C after the prefix, as unsigned 16-bit values.

        C holds int16 values (§3.4) while CNST and DATA ids are uint16: an id of 32768 or
        more is stored as its int16 bit pattern (-32768 for 32768).
        """
        return tuple(v & 0xFFFF for v in self.c[1:]) if self.c else ()


@dataclass(frozen=True)
class MmapRecord:
    """Commands for one tick: ``commands`` are ``(MmapAction, target)`` pairs."""

    tick: int
    commands: tuple[tuple[MmapAction, int], ...]


@dataclass(frozen=True)
class Constant:
    """A typed constant (CNST, ORCH pool). ``value``: None, bool, int, float, str or tuple."""

    type: ConstType
    value: object = None


@dataclass(frozen=True)
class QuantParams:
    """Where the scales of a quantised tensor live (decision of this project, see docs).

    INT8_TENSOR: ``scales = (s,)``. INT8_CHANNEL: ``axis`` and one scale per index along it.
    BLOCK_FP8: ``block_size``, ``orig_shape`` and one scale per block of the flattened
    tensor.
    """

    scales: tuple[float, ...] = ()
    axis: int = 0
    block_size: int = 0
    orig_shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class Tensor:
    """A tensor as stored: dtype, shape, quant code and parameters, raw little-endian data."""

    dtype: DType
    shape: tuple[int, ...]
    quant: QuantMethod = QuantMethod.NONE
    quant_params: QuantParams | None = None
    data: bytes = b""


@dataclass(frozen=True)
class DataSection:
    """DATA: parameter names (block 1), input names (block 2), internal tensors (block 3)."""

    params: tuple[tuple[int, str], ...] = ()
    inputs: tuple[tuple[int, str], ...] = ()
    tensors: tuple[tuple[int, Tensor], ...] | None = None


@dataclass(frozen=True)
class Orch:
    """ORCH: MEP bytecode and its constant pool (empty in v1.6 files)."""

    bytecode: bytes = b""
    constants: tuple[tuple[int, Constant], ...] = ()


@dataclass(frozen=True)
class NacFile:
    """A whole ``.nac`` file. Absent sections are None."""

    quant_method: QuantMethod = QuantMethod.NONE
    internal_weights: bool = True
    num_inputs: int = 0
    num_outputs: int = 0
    d_model: int = 0
    version: int = VERSION
    mmap: tuple[MmapRecord, ...] | None = None
    ops: tuple[Instruction, ...] | None = None
    cmap: tuple[tuple[int, str], ...] | None = None
    cnst: tuple[tuple[int, Constant], ...] | None = None
    perm: tuple[tuple[int, str], ...] | None = None
    data: DataSection | None = None
    proc: bytes | None = None
    orch: Orch | None = None
    rsrc: tuple[tuple[str, bytes], ...] | None = None
    #: External weights (a :class:`nac.weights.Weights` mapping) attached by read_nac.
    weights: object = field(default=None, compare=False, repr=False)

    def op_name(self, a):
        """Canonical name of operation id *a* (standard or CMAP)."""
        if a in STANDARD_OPS:
            return STANDARD_OPS[a]
        return dict(self.cmap or ()).get(a)


@dataclass(frozen=True)
class Argument:
    """One gathered argument (§8.3): an ancestor's absolute index, or a constant id."""

    is_const: bool
    value: int


def _argument_error(ins, index, signature_length):
    """Why the arguments of regular instruction *ins* cannot be gathered, or None."""
    if len(ins.d) != signature_length:
        return "D", None, f"D has {len(ins.d)} entries, the signature has {signature_length}"
    zeros = 0
    for d in ins.d:
        if d == 0:
            zeros += 1
        elif not 0 <= index + d < index:
            return "D", d, f"D offset {d} names instruction {index + d}, not an earlier one"
    n_consts = len(ins.c) - 1 if ins.c else 0
    if zeros != n_consts:
        return "C", None, f"C has {n_consts} constant ids, D has {zeros} zeros"
    return None


def gather_arguments(instruction, index, perm):
    """Gather the arguments of a regular instruction (§3.4-3.5, §8.3).

    Parameters
    ----------
    instruction : Instruction
    index : int
        The instruction's index in OPS.
    perm : dict of int to str
        Signature table.

    Returns
    -------
    tuple of Argument
        Per signature character: ``D[i] != 0`` gives ancestor ``index + D[i]`` (whatever
        the code); ``D[i] == 0`` takes the next constant id of C.

    Raises
    ------
    NacFormatError
        Unknown signature, D length not the signature length, ancestor outside
        ``[0, index)``, or zeros in D not matching the C count.
    """
    ins = instruction
    if ins.b == 0:
        return ()
    if ins.b not in perm:
        raise NacFormatError(f"instruction {index}: signature {ins.b} is not in PERM",
                             section="OPS ", field="B", value=ins.b)
    problem = _argument_error(ins, index, len(perm[ins.b]))
    if problem:
        field_name, value, message = problem
        raise NacFormatError(f"instruction {index}: {message}", section="OPS ",
                             field=field_name, value=value)
    consts = iter(ins.const_ids)
    return tuple(Argument(False, index + d) if d else Argument(True, next(consts))
                 for d in ins.d)


# --- reading --------------------------------------------------------------------------


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
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.fail(f"not valid UTF-8 ({exc.reason} at byte {exc.start})", field=field,
                      value=bytes(raw[:32]), offset=at)
            raise  # unreachable

    def done(self):
        if self.pos != self.end:
            self.fail(f"{self.end - self.pos} trailing bytes after the section's content",
                      field="end")


def _read_constant(cur, field):
    at = cur.pos
    ctype, length = cur.unpack("BH", f"{field}.type/length")
    if ctype not in ConstType._value2member_map_:
        cur.fail(f"unknown constant type {ctype}", field=f"{field}.type", value=ctype, offset=at)
    ctype = ConstType(ctype)
    if ctype == ConstType.NULL:
        if length:
            cur.fail("null constant must have length 0", field=f"{field}.length", value=length)
        return Constant(ctype)
    if ctype == ConstType.BOOL:
        if length != 1:
            cur.fail("bool constant must have length 1", field=f"{field}.length", value=length)
        raw = cur.unpack("B", f"{field}.value")
        if raw > 1:
            cur.fail("bool value must be 0 or 1", field=f"{field}.value", value=raw)
        return Constant(ctype, bool(raw))
    if ctype in (ConstType.INT64, ConstType.FLOAT64):
        if length != 8:
            cur.fail(f"{ctype.name.lower()} constant must have length 8",
                     field=f"{field}.length", value=length)
        return Constant(ctype, cur.unpack("q" if ctype == ConstType.INT64 else "d",
                                          f"{field}.value"))
    if ctype == ConstType.STRING:
        return Constant(ctype, cur.text(length, f"{field}.value"))
    fmt = "i" if ctype == ConstType.LIST_INT32 else "f"
    raw = cur.take(4 * length, f"{field}.value")
    return Constant(ctype, struct.unpack(f"<{length}{fmt}", raw))


def _read_id_names(cur, label, id_fmt, len_fmt, what):
    n = cur.count(f"{label} count", struct.calcsize("<" + id_fmt + len_fmt))
    out, seen = [], set()
    for k in range(n):
        at = cur.pos
        ident, length = cur.unpack(id_fmt + len_fmt, f"{label}[{k}]")
        if ident in seen:
            cur.fail(f"duplicate {what} {ident}", field=f"{label}[{k}].id", value=ident,
                     offset=at)
        seen.add(ident)
        out.append((ident, cur.text(length, f"{label}[{k}].name")))
    return tuple(out)


def _read_quant(cur, quant, k):
    f = f"tensor[{k}].quant"
    if quant in (QuantMethod.NONE, QuantMethod.FP16):
        return None
    if quant == QuantMethod.INT8_TENSOR:
        return QuantParams(scales=(cur.unpack("f", f + ".scale"),))
    if quant == QuantMethod.INT8_CHANNEL:
        axis = cur.unpack("B", f + ".axis")
        n = cur.unpack("I", f + ".count")
        raw = cur.take(4 * n, f + ".scales")
        return QuantParams(scales=struct.unpack(f"<{n}f", raw), axis=axis)
    block = cur.unpack("H", f + ".block_size")
    rank = cur.unpack("B", f + ".orig_rank")
    dims = struct.unpack(f"<{rank}I", cur.take(4 * rank, f + ".orig_shape"))
    n = cur.unpack("I", f + ".count")
    raw = cur.take(4 * n, f + ".scales")
    return QuantParams(scales=struct.unpack(f"<{n}f", raw), block_size=block,
                       orig_shape=dims)


def _read_tensor(cur, k):
    at = cur.pos
    param_id, meta_len, data_len = cur.unpack("HIQ", f"tensor[{k}] header")
    meta_end = cur.pos + meta_len
    if meta_end > cur.end:
        cur.fail("metadata length exceeds the section", field=f"tensor[{k}].metadata_length",
                 value=meta_len, offset=at + 2)
    meta = _Cursor(cur.buf, cur.pos, meta_end, cur.section)
    dcode = meta.unpack("B", f"tensor[{k}].dtype")
    if dcode not in DType._value2member_map_:
        meta.fail(f"unknown dtype code {dcode}", field=f"tensor[{k}].dtype", value=dcode,
                  offset=meta.pos - 1)
    rank = meta.unpack("B", f"tensor[{k}].rank")
    shape = struct.unpack(f"<{rank}I", meta.take(4 * rank, f"tensor[{k}].shape"))
    qcode = meta.unpack("B", f"tensor[{k}].quant")
    if qcode not in QuantMethod._value2member_map_:
        meta.fail(f"unknown quantisation code {qcode}", field=f"tensor[{k}].quant",
                  value=qcode, offset=meta.pos - 1)
    qparams = _read_quant(meta, QuantMethod(qcode), k)
    meta.done()
    cur.pos = meta_end
    dtype = DType(dcode)
    expected = math.prod(shape) * dtype.numpy.itemsize
    if data_len != expected:
        cur.fail(f"data length {data_len} does not match dtype {dtype.name.lower()} and shape "
                 f"{list(shape)} ({expected} bytes)", field=f"tensor[{k}].data_length",
                 value=data_len, offset=at + 6)
    data = bytes(cur.take(data_len, f"tensor[{k}].data"))
    return param_id, Tensor(dtype, shape, QuantMethod(qcode), qparams, data)


_INT16S = [struct.Struct(f"<{n}h") for n in range(64)]


def _parse_instruction(cur, index, perm, num_outputs):
    at = cur.pos
    a, b = cur.unpack("BB", ("instruction[{}].A/B", index))

    def ints(n, name):
        if n * 2 > cur.end - cur.pos:
            cur.fail(f"instruction {index}: {name} needs {n} int16, "
                     f"{(cur.end - cur.pos) // 2} remain", field=f"instruction[{index}].{name}",
                     value=n)
        start = cur.pos
        cur.pos += 2 * n
        return _INT16S[n].unpack_from(cur.buf, start) if n < len(_INT16S) else \
            struct.unpack_from(f"<{n}h", cur.buf, start)

    if a >= REGULAR_OP_MIN:
        if b == 0:
            return Instruction(a, b)
        if b not in perm:
            cur.fail(f"instruction {index}: signature id {b} is not in PERM",
                     field=f"instruction[{index}].B", value=b, offset=at + 1)
        signature, has_constants = perm[b]
        c = None
        if has_constants:
            (n,) = ints(1, "C count")
            if n < 0:
                cur.fail(f"instruction {index}: negative C count", value=n,
                         field=f"instruction[{index}].C", offset=cur.pos - 2)
            c = (n, *ints(n, "C"))
        return Instruction(a, b, c, ints(len(signature), "D"))
    if a == SystemOp.INPUT:
        if b == 0:
            return Instruction(a, b)
        if b > 3:
            cur.fail(f"instruction {index}: <INPUT> variant B={b} does not exist",
                     field=f"instruction[{index}].B", value=b, offset=at + 1)
        c = ints(2, "C")
        if c[0] not in (1, 2):
            cur.fail(f"instruction {index}: <INPUT> C prefix must be 1 or 2",
                     field=f"instruction[{index}].C", value=c[0], offset=cur.pos - 4)
        return Instruction(a, b, c)
    if a == SystemOp.OUTPUT:
        if b > 1:
            cur.fail(f"instruction {index}: <OUTPUT> variant B={b} does not exist",
                     field=f"instruction[{index}].B", value=b, offset=at + 1)
        (n,) = ints(1, "C count")
        if n < 0 or (b == 0 and n != num_outputs):
            cur.fail(f"instruction {index}: <OUTPUT B={b}> count {n}"
                     + (f" differs from the header's {num_outputs} outputs" if b == 0 else ""),
                     field=f"instruction[{index}].C", value=n, offset=cur.pos - 2)
        return Instruction(a, b, (n, *ints(n, "C")), ints(n, "D"))
    if a == SystemOp.CONTROL_FLOW:
        return Instruction(a, b, ints(3, "C"), ints(1, "D"))
    if a == SystemOp.CONVERGENCE:
        cur.fail(f"instruction {index}: <CONVERGENCE> (A=7) is experimental in the spec and "
                 f"not supported", field=f"instruction[{index}].A", value=a, offset=at)
    cur.fail(f"instruction {index}: A={a} is neither a system op nor >= {REGULAR_OP_MIN}",
             field=f"instruction[{index}].A", value=a, offset=at)
    raise AssertionError  # unreachable


def _validate_ops(nac, offsets):
    """Cross-section checks of OPS (ids exist, offsets point back, C/D agree)."""
    perm = dict(nac.perm or ())
    cnst = dict(nac.cnst or ())
    params = dict(nac.data.params) if nac.data else {}
    cmap = dict(nac.cmap or ())
    section = "OPS "
    for index, ins in enumerate(nac.ops or ()):
        where = {"section": section, "offset": offsets[index]}
        if ins.a >= REGULAR_OP_MIN:
            if ins.a not in STANDARD_OPS and ins.a not in cmap:
                raise NacFormatError(f"instruction {index}: operation id {ins.a} is neither "
                                     f"standard nor in CMAP", field=f"instruction[{index}].A",
                                     value=ins.a, **where)
            if ins.b:
                problem = _argument_error(ins, index, len(perm[ins.b]))
                if problem:
                    field_name, value, message = problem
                    raise NacFormatError(f"instruction {index}: {message}",
                                         field=f"instruction[{index}].{field_name}",
                                         value=value, **where)
            for cid in ins.const_ids:
                if cid not in cnst:
                    raise NacFormatError(f"instruction {index}: constant id {cid} is not in "
                                         f"CNST", field=f"instruction[{index}].C", value=cid,
                                         **where)
        elif ins.a == SystemOp.INPUT and ins.b == 1:
            if ins.const_ids[0] not in params:
                raise NacFormatError(f"instruction {index}: parameter id {ins.const_ids[0]} is "
                                     f"not in DATA", field=f"instruction[{index}].C",
                                     value=ins.const_ids[0], **where)
        elif ins.a == SystemOp.INPUT and ins.b == 3:
            if ins.const_ids[0] not in cnst:
                raise NacFormatError(f"instruction {index}: lifted constant id "
                                     f"{ins.const_ids[0]} is not in CNST",
                                     field=f"instruction[{index}].C", value=ins.const_ids[0],
                                     **where)
        elif ins.a in (SystemOp.OUTPUT, SystemOp.CONTROL_FLOW):
            for d in ins.d:
                if not (d and 0 <= index + d < index):
                    raise NacFormatError(f"instruction {index}: D offset {d} does not name an "
                                         f"earlier instruction", field=f"instruction[{index}].D",
                                         value=d, **where)


def _validate_mmap(nac, offsets):
    n = len(nac.ops or ())
    params = {i for i, ins in enumerate(nac.ops or ()) if ins.a == SystemOp.INPUT and ins.b == 1}
    previous = -1
    for k, rec in enumerate(nac.mmap or ()):
        where = {"section": "MMAP", "offset": offsets[k]}
        if not 0 <= rec.tick < n:
            raise NacFormatError(f"record {k}: tick {rec.tick} is outside OPS ({n} "
                                 f"instructions)", field=f"record[{k}].tick", value=rec.tick,
                                 **where)
        if rec.tick <= previous:
            raise NacFormatError(f"record {k}: tick {rec.tick} does not follow tick {previous}",
                                 field=f"record[{k}].tick", value=rec.tick, **where)
        previous = rec.tick
        if not rec.commands:
            raise NacFormatError(f"record {k}: a record without commands",
                                 field=f"record[{k}].count", value=0, **where)
        for j, (action, target) in enumerate(rec.commands):
            ok = {MmapAction.SAVE_RESULT: target == rec.tick,
                  MmapAction.FREE: target < rec.tick,
                  MmapAction.FORWARD: rec.tick < target < n,
                  MmapAction.PRELOAD: target in params and target >= rec.tick}[action]
            if not ok:
                raise NacFormatError(f"record {k} (tick {rec.tick}): {action.name} target "
                                     f"{target} is not valid for this action",
                                     field=f"record[{k}].command[{j}].target", value=target,
                                     **where)


def loads(buf):
    """Parse a whole ``.nac`` file from bytes.

    Raises
    ------
    NacFormatError
        For anything malformed, naming section, field, offset and value.
    """
    buf = memoryview(bytes(buf)) if not isinstance(buf, (bytes, memoryview)) else buf
    size = len(buf)
    if size < HEADER_SIZE:
        raise NacFormatError(f"file is {size} bytes, shorter than the {HEADER_SIZE}-byte header",
                             section="header", field="length", offset=0, value=size)
    head = bytes(buf[:HEADER_SIZE])
    if head[:3] != MAGIC:
        raise NacFormatError("not a NAC file (magic is not b'NAC')", section="header",
                             field="magic", offset=0, value=head[:3])
    if head[3] != VERSION:
        raise NacFormatError(f"unsupported version (this reader reads version {VERSION})",
                             section="header", field="version", offset=3, value=head[3])
    qbyte = head[4]
    if qbyte & 0x7F not in QuantMethod._value2member_map_:
        raise NacFormatError("unknown quantisation method", section="header",
                             field="quantization", offset=4, value=qbyte & 0x7F)
    num_inputs, num_outputs, reserved, d_model = struct.unpack_from("<HHBH", head, 5)
    if reserved:
        raise NacFormatError("reserved byte must be 0", section="header", field="reserved",
                             offset=9, value=reserved)
    offsets = struct.unpack_from("<9Q", head, 12)
    if head[84:88] != b"\0\0\0\0":
        raise NacFormatError("padding must be zero", section="header", field="padding",
                             offset=84, value=head[84:88])
    present = sorted((off, k) for k, off in enumerate(offsets) if off)
    extents = {}
    for j, (off, k) in enumerate(present):
        tag = SECTION_TAGS[k]
        if not HEADER_SIZE <= off <= size - 4:
            raise NacFormatError(f"section offset {off} is outside the file ({size} bytes) or "
                                 f"inside the header", section="header",
                                 field=f"{tag.strip().lower()}_offset", offset=12 + 8 * k,
                                 value=off)
        if j and present[j - 1][0] + 4 > off:
            other = SECTION_TAGS[present[j - 1][1]]
            raise NacFormatError(f"section {tag.strip()} overlaps section {other.strip()}",
                                 section="header", field=f"{tag.strip().lower()}_offset",
                                 offset=12 + 8 * k, value=off)
        end = present[j + 1][0] if j + 1 < len(present) else size
        if bytes(buf[off:off + 4]) != tag.encode():
            raise NacFormatError(f"expected tag {tag!r}", section=tag, field="tag", offset=off,
                                 value=bytes(buf[off:off + 4]))
        extents[tag] = (off + 4, end)
    if present and present[0][0] != HEADER_SIZE:
        raise NacFormatError(f"{present[0][0] - HEADER_SIZE} unexplained bytes between the "
                             f"header and the first section", section="header",
                             field="layout", offset=HEADER_SIZE, value=present[0][0])
    if not present and size != HEADER_SIZE:
        raise NacFormatError("trailing bytes after a header with no sections",
                             section="header", field="layout", offset=HEADER_SIZE)

    def cursor(tag):
        start, end = extents[tag]
        return _Cursor(buf, start, end, tag)

    fields = {"quant_method": QuantMethod(qbyte & 0x7F),
              "internal_weights": bool(qbyte & STORAGE_INTERNAL), "num_inputs": num_inputs,
              "num_outputs": num_outputs, "d_model": d_model, "version": head[3]}

    if "CMAP" in extents:
        cur = cursor("CMAP")
        cmap = _read_id_names(cur, "entry", "H", "B", "operation id")
        for k, (ident, _) in enumerate(cmap):
            if ident in STANDARD_OPS or ident < REGULAR_OP_MIN or ident > 255:
                cur.fail(f"CMAP id {ident} must be a custom id (>= {REGULAR_OP_MIN}, <= 255, "
                         f"not standard)", field=f"entry[{k}].id", value=ident)
        cur.done()
        fields["cmap"] = cmap
    if "CNST" in extents:
        cur = cursor("CNST")
        fields["cnst"] = _read_constants(cur)
        cur.done()
    if "PERM" in extents:
        cur = cursor("PERM")
        perm = _read_id_names(cur, "entry", "H", "B", "signature id")
        for k, (ident, sig) in enumerate(perm):
            bad = [ch for ch in sig if ch not in SIGNATURE_CODES]
            if bad or ident == 0:
                cur.fail(f"signature {ident} {sig!r}: "
                         + (f"unknown code {bad[0]!r}" if bad else "id 0 means 'no signature'"),
                         field=f"entry[{k}]", value=sig)
        cur.done()
        fields["perm"] = perm
    if "DATA" in extents:
        cur = cursor("DATA")
        params = _read_id_names(cur, "params", "H", "H", "parameter id")
        inputs = _read_id_names(cur, "inputs", "H", "H", "input index")
        tensors = None
        if fields["internal_weights"]:
            n = cur.count("tensor count", 14)
            tensors = tuple(_read_tensor(cur, k) for k in range(n))
            names = dict(params)
            for k, (pid, _) in enumerate(tensors):
                if pid not in names:
                    cur.fail(f"tensor {k}: parameter id {pid} has no name in block 1",
                             field=f"tensor[{k}].param_id", value=pid)
        cur.done()
        fields["data"] = DataSection(params, inputs, tensors)
    if "OPS " in extents:
        cur = cursor("OPS ")
        n = cur.count("instruction count", 2)
        perm = {b: (sig, any(code in CONSTANT_CODES for code in sig))
                for b, sig in fields.get("perm", ())}
        ops, ops_offsets = [], []
        for index in range(n):
            ops_offsets.append(cur.pos)
            ops.append(_parse_instruction(cur, index, perm, num_outputs))
        cur.done()
        fields["ops"] = tuple(ops)
    if "MMAP" in extents:
        cur = cursor("MMAP")
        n = cur.count("record count", MMAP_RECORD.size)
        records, rec_offsets = [], []
        for k in range(n):
            rec_offsets.append(cur.pos)
            head = cur.record(MMAP_RECORD, ("record[{}]", k))
            tick, count = head["tick"], head["commands"]
            commands = []
            for j in range(count):
                at = cur.pos
                cmd = cur.record(MMAP_COMMAND, ("record[{}].command[{}]", k, j))
                action, target = cmd["action"], cmd["target"]
                if action not in MmapAction._value2member_map_:
                    cur.fail(f"unknown action code {action}",
                             field=f"record[{k}].command[{j}].action", value=action, offset=at)
                commands.append((MmapAction(action), target))
            records.append(MmapRecord(tick, tuple(commands)))
        cur.done()
        fields["mmap"] = tuple(records)
    if "PROC" in extents:
        cur = cursor("PROC")
        length = cur.unpack("I", "manifest length")
        fields["proc"] = bytes(cur.take(length, "manifest"))
        cur.done()
    if "ORCH" in extents:
        cur = cursor("ORCH")
        length, count = cur.unpack("II", "bytecode length/const count")
        bytecode = bytes(cur.take(length, "bytecode"))
        if count * 5 > cur.end - cur.pos:
            cur.fail(f"const count {count} does not fit", field="const count", value=count)
        fields["orch"] = Orch(bytecode, _read_constants(cur, count=count))
        cur.done()
    if "RSRC" in extents:
        cur = cursor("RSRC")
        n = cur.count("file count", 6)
        files = []
        for k in range(n):
            name = cur.text(cur.unpack("H", f"file[{k}].name_length"), f"file[{k}].name")
            files.append((name, bytes(cur.take(cur.unpack("I", f"file[{k}].data_length"),
                                               f"file[{k}].data"))))
        cur.done()
        fields["rsrc"] = tuple(files)

    nac = NacFile(**fields)
    if nac.ops is not None:
        _validate_ops(nac, ops_offsets)
        outputs = [ins for ins in nac.ops if ins.a == SystemOp.OUTPUT and ins.b == 0]
        if len(outputs) > 1:
            raise NacFormatError("more than one <OUTPUT B=0>", section="OPS ", field="A")
    if nac.mmap is not None:
        _validate_mmap(nac, rec_offsets)
    return nac


def _read_constants(cur, count=None):
    n = cur.count("constant count", 5) if count is None else count
    out, seen = [], set()
    for k in range(n):
        at = cur.pos
        ident = cur.unpack("H", f"constant[{k}].id")
        if ident in seen:
            cur.fail(f"duplicate constant id {ident}", field=f"constant[{k}].id", value=ident,
                     offset=at)
        seen.add(ident)
        out.append((ident, _read_constant(cur, f"constant[{k}]")))
    return tuple(out)


# --- writing --------------------------------------------------------------------------


def _rec(record, **values):
    try:
        return record.pack(values)
    except RecordError as exc:
        raise NacFormatError(f"cannot encode {exc}") from None


def _u(fmt, *values):
    try:
        return struct.pack("<" + fmt, *values)
    except struct.error as exc:
        raise NacFormatError(f"cannot encode {values!r} as {fmt!r}: {exc}") from None


def _text(value, len_fmt, what):
    raw = value.encode("utf-8")
    limit = 255 if len_fmt == "B" else 65535
    if len(raw) > limit:
        raise NacFormatError(f"{what} {value[:40]!r}... is {len(raw)} bytes, more than {limit}")
    return _u(len_fmt, len(raw)) + raw


def _constant_bytes(const):
    t = ConstType(const.type)
    v = const.value
    if t == ConstType.NULL:
        return _u("BH", t, 0)
    if t == ConstType.BOOL:
        return _u("BHB", t, 1, int(bool(v)))
    if t == ConstType.INT64:
        return _u("BHq", t, 8, v)
    if t == ConstType.FLOAT64:
        return _u("BHd", t, 8, v)
    if t == ConstType.STRING:
        raw = v.encode("utf-8")
        return _u("BH", t, len(raw)) + raw
    fmt = "i" if t == ConstType.LIST_INT32 else "f"
    return _u("BH", t, len(v)) + _u(f"{len(v)}{fmt}", *v)


def _constants_bytes(constants):
    return b"".join(_u("H", ident) + _constant_bytes(c) for ident, c in constants)


def _quant_bytes(tensor):
    q, p = QuantMethod(tensor.quant), tensor.quant_params
    if q in (QuantMethod.NONE, QuantMethod.FP16):
        return b""
    if q == QuantMethod.INT8_TENSOR:
        return _u("f", p.scales[0])
    if q == QuantMethod.INT8_CHANNEL:
        return _u("BI", p.axis, len(p.scales)) + _u(f"{len(p.scales)}f", *p.scales)
    return (_u("HB", p.block_size, len(p.orig_shape)) + _u(f"{len(p.orig_shape)}I", *p.orig_shape)
            + _u("I", len(p.scales)) + _u(f"{len(p.scales)}f", *p.scales))


def tensor_metadata(tensor):
    """The binary metadata block of §6.1.1 (plus the quantisation parameters)."""
    return (_u("BB", DType(tensor.dtype), len(tensor.shape)) + _u(f"{len(tensor.shape)}I",
                                                                  *tensor.shape)
            + _u("B", QuantMethod(tensor.quant)) + _quant_bytes(tensor))


def _instruction_bytes(ins):
    out = _u("BB", ins.a, ins.b)
    if ins.c is not None:
        out += _u(f"{len(ins.c)}h", *ins.c)
    return out + _u(f"{len(ins.d)}h", *ins.d)


def _section_bytes(nac, tag):
    if tag == "MMAP":
        body = _u("I", len(nac.mmap)) + b"".join(
            _rec(MMAP_RECORD, tick=r.tick, commands=len(r.commands))
            + b"".join(_rec(MMAP_COMMAND, action=int(a), target=t) for a, t in r.commands)
            for r in nac.mmap)
    elif tag == "OPS ":
        body = _u("I", len(nac.ops)) + b"".join(_instruction_bytes(i) for i in nac.ops)
    elif tag == "CMAP":
        body = _u("I", len(nac.cmap)) + b"".join(
            _u("H", i) + _text(n, "B", "operation name") for i, n in nac.cmap)
    elif tag == "CNST":
        body = _u("I", len(nac.cnst)) + _constants_bytes(nac.cnst)
    elif tag == "PERM":
        body = _u("I", len(nac.perm)) + b"".join(
            _u("H", i) + _text(s, "B", "signature") for i, s in nac.perm)
    elif tag == "DATA":
        d = nac.data
        body = _u("I", len(d.params)) + b"".join(
            _u("H", i) + _text(n, "H", "parameter name") for i, n in d.params)
        body += _u("I", len(d.inputs)) + b"".join(
            _u("H", i) + _text(n, "H", "input name") for i, n in d.inputs)
        if nac.internal_weights:
            tensors = d.tensors or ()
            body += _u("I", len(tensors))
            for pid, t in tensors:
                meta = tensor_metadata(t)
                body += _u("HIQ", pid, len(meta), len(t.data)) + meta + bytes(t.data)
    elif tag == "PROC":
        body = _u("I", len(nac.proc)) + nac.proc
    elif tag == "ORCH":
        body = _u("II", len(nac.orch.bytecode), len(nac.orch.constants)) + nac.orch.bytecode \
            + _constants_bytes(nac.orch.constants)
    else:
        body = _u("I", len(nac.rsrc)) + b"".join(
            _text(n, "H", "resource name") + _u("I", len(data)) + data for n, data in nac.rsrc)
    return tag.encode() + body


_ATTRS = {"MMAP": "mmap", "OPS ": "ops", "CMAP": "cmap", "CNST": "cnst", "PERM": "perm",
          "DATA": "data", "PROC": "proc", "ORCH": "orch", "RSRC": "rsrc"}


def section_body(raw, tag):
    """The bytes of section *tag* in an encoded file, after its 4-byte tag.

    This is what the hardware streams consume (the MMAP coprocessor reads the MMAP body;
    the ABCD decoder reads the OPS body after its ``uint32`` count). The extent is found
    through the header's offset table: up to the next section or the end of the file.

    Raises
    ------
    NacFormatError
        If the section is absent.
    """
    offsets = struct.unpack_from("<9Q", raw, 12)
    k = SECTION_TAGS.index(tag)
    start = offsets[k]
    if not start:
        raise NacFormatError("section is absent", section="header",
                             field=f"{tag.strip().lower()}_offset", offset=12 + 8 * k, value=0)
    later = [o for o in offsets if o > start]
    return bytes(raw[start + 4:min(later) if later else len(raw)])


def dumps(nac):
    """Encode a :class:`NacFile` in canonical layout."""
    sections, offsets = [], []
    pos = HEADER_SIZE
    for tag in SECTION_TAGS:
        if getattr(nac, _ATTRS[tag]) is None:
            offsets.append(0)
            continue
        raw = _section_bytes(nac, tag)
        offsets.append(pos)
        sections.append(raw)
        pos += len(raw)
    qbyte = int(nac.quant_method) | (STORAGE_INTERNAL if nac.internal_weights else 0)
    header = MAGIC + _u("BBHHBH", nac.version, qbyte, nac.num_inputs, nac.num_outputs, 0,
                        nac.d_model) + _u("9Q", *offsets) + b"\0" * 4
    return header + b"".join(sections)
