"""Readers of the table sections: CMAP, CNST, PERM, PROC, ORCH and RSRC.

Each ``read_*`` function parses one section from a cursor over its extent and checks that
nothing is left after its content.
"""

from __future__ import annotations

import struct

from nac.container.model import Constant, Orch
from nac.encoding import REGULAR_OP_MIN, SIGNATURE_CODES, STANDARD_OPS, ConstType


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


def read_cmap(cur):
    """The CMAP entries: custom operation ids and their names."""
    cmap = _read_id_names(cur, "entry", "H", "B", "operation id")
    for k, (ident, _) in enumerate(cmap):
        if ident in STANDARD_OPS or ident < REGULAR_OP_MIN or ident > 255:
            cur.fail(f"CMAP id {ident} must be a custom id (>= {REGULAR_OP_MIN}, <= 255, "
                     f"not standard)", field=f"entry[{k}].id", value=ident)
    cur.done()
    return cmap


def read_cnst(cur):
    """The CNST constants."""
    cnst = _read_constants(cur)
    cur.done()
    return cnst


def read_perm(cur):
    """The PERM entries: signature ids and their signature strings."""
    perm = _read_id_names(cur, "entry", "H", "B", "signature id")
    for k, (ident, sig) in enumerate(perm):
        bad = [ch for ch in sig if ch not in SIGNATURE_CODES]
        if bad or ident == 0:
            cur.fail(f"signature {ident} {sig!r}: "
                     + (f"unknown code {bad[0]!r}" if bad else "id 0 means 'no signature'"),
                     field=f"entry[{k}]", value=sig)
    cur.done()
    return perm


def read_proc(cur):
    """The PROC manifest bytes."""
    length = cur.unpack("I", "manifest length")
    proc = bytes(cur.take(length, "manifest"))
    cur.done()
    return proc


def read_orch(cur):
    """The ORCH bytecode and constant pool."""
    length, count = cur.unpack("II", "bytecode length/const count")
    bytecode = bytes(cur.take(length, "bytecode"))
    if count * 5 > cur.end - cur.pos:
        cur.fail(f"const count {count} does not fit", field="const count", value=count)
    orch = Orch(bytecode, _read_constants(cur, count=count))
    cur.done()
    return orch


def read_rsrc(cur):
    """The RSRC files: names and contents."""
    n = cur.count("file count", 6)
    files = []
    for k in range(n):
        name = cur.text(cur.unpack("H", f"file[{k}].name_length"), f"file[{k}].name")
        files.append((name, bytes(cur.take(cur.unpack("I", f"file[{k}].data_length"),
                                           f"file[{k}].data"))))
    cur.done()
    return tuple(files)
