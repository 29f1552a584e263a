"""The NAC writer: every section and the header in canonical layout (:func:`dumps`)."""

from __future__ import annotations

import struct

from nac.encoding import (
    HEADER_SIZE,
    MAGIC,
    MMAP_COMMAND,
    MMAP_RECORD,
    SECTION_TAGS,
    STORAGE_INTERNAL,
    ConstType,
    DType,
    QuantMethod,
)
from nac.errors import NacFormatError
from nem.records import RecordError

__all__ = ["dumps", "tensor_metadata"]


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
