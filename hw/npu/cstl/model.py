"""Python model of the CSTL as the RTL sees it: a task's decode from its register values
and its effect on L1, element by element in plain integers.

The RTL in ``npu.cstl`` implements these steps; its tests compare against this model, and
``tests/hw/test_cstl_model.py`` compares this model against ``nem.executor`` on random
bound tasks, byte for byte. The integer rules are those of ``docs/numerics.md`` (the
executor's ``nem.numerics``); they are written out here a second time, one element at a
time as the datapath computes them, so that the comparison checks both.

What the CSTL runs (:func:`decode_task`; every operand in L1 of the task's engine, rank at
most :data:`MAX_RANK_RUN`, dimensions below 2**16):

* **table** (``kind == "table"``): a unary elementwise opcode or clamp, i8 -> i8, same
  shape: ``y = T[x & 0xFF]`` with ``T`` the 256-byte ``LOOKUP_TABLE`` at data offset
  ``TABLE`` (the opcode selects nothing else);
* **eltwise**: add, sub, mul, min, max of two i8 inputs into an i8 output, each input
  broadcast to the output's shape (right-aligned; a dimension of 1 repeats), with the
  ``ELTWISE_ENTRY`` at data offset ``REQUANT``;
* **cast**: i8 -> i8 / i16 / i32 (sign extension) and i16 / i32 -> i8 (saturation);
* **maxpool**, **avgpool**: NHWC i8 -> i8 windows (kernel, strides, pads from the ATTR
  registers: two kernel sizes, two strides, four pads, each below 2**16, fewer than 2**16
  taps), the max / the sum of the in-bounds codes divided by their count rounded half
  to even, then the lookup table when ``TABLE`` is not ``NO_TABLE``;
* **reduce_max** / **argmax** over the last axis (``axes`` / ``axis`` ``rank - 1`` or
  ``-1``; ``keepdims`` keeps it as 1, else it is dropped; rank 1..4): the largest code
  (then the table, as pooling) / the index of its first occurrence, saturated to the
  output type (i8 / i16 / i32 out, with no quantisation descriptor: ``OP1_QUANT`` =
  ``NO_QUANT``).

A task outside this set is refused with a :class:`npu.nmu.model.Cause` (shared with the NMU
and the CSTL's RTL decode): ``OPCODE``, ``TYPE`` (operand counts, element types, memories),
``LAYOUT`` (rank, shapes, broadcast, attributes) or ``REQUANT`` (a table or eltwise entry
that is missing or outside the data section, or an eltwise entry outside
:data:`ENTRY_RANGES`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nem.elemtypes import BITS, ELEM_RANGES
from nem.numerics import ELTWISE_LEFT_SHIFT, ELTWISE_OPS
from nem.ops import table_opcodes
from nem.registry import load_registry
from nem.taskformat import (
    ATTR_WORDS,
    ELEM_TYPES,
    LEVELS,
    NO_QUANT,
    NO_TABLE,
    OPCODES,
    REGISTER_MAPS,
    TaskFormatError,
    Unit,
    decode_eltwise,
    decode_table,
    read_attr_words,
)
from npu.nmu.model import Cause

__all__ = ["MAX_RANK_RUN", "CstlOperand", "CstlUnsupported", "CstlWork", "cstl_model",
           "decode_task", "table_opcodes"]

REGS = REGISTER_MAPS[Unit.CSTL]
#: Dimensions the CSTL's walk has (higher ranks are refused with ``LAYOUT``).
MAX_RANK_RUN = 4
#: Bits of one dimension.
DIM_BITS = 16
L1 = LEVELS.index("L1")
CAST_TYPES = ("i8", "i16", "i32")


class CstlUnsupported(ValueError):
    """A task the CSTL refuses; ``cause`` is a :class:`npu.nmu.model.Cause` code."""

    def __init__(self, cause, message):
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class CstlOperand:
    """One operand as the CSTL walks it: L1 byte address, element type, shape and element
    strides (outermost first)."""

    addr: int
    elem: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """Bytes of one element."""
        return BITS[self.elem] // 8


@dataclass(frozen=True)
class CstlWork:
    """A decoded CSTL task."""

    opcode: str
    kind: str  # table, eltwise, cast, maxpool, avgpool, reduce_max, argmax
    ins: tuple[CstlOperand, ...]
    out: CstlOperand
    table: int  # data offset of the lookup table, or NO_TABLE
    entry: int  # data offset of the eltwise entry (eltwise only)
    attrs: dict


def _by_name(registers) -> dict[str, int]:
    out = {}
    for key, value in registers.items():
        out[REGS.name(key) if isinstance(key, int) else key] = int(value) & 0xFFFFFFFF
    return out


def decode_task(registers) -> CstlWork:
    """The CSTL's view of a compute task from its register values.

    Parameters
    ----------
    registers : dict
        Register values by name (``"OP0_ADDR_LO"``) or by index; missing ones read 0.

    Raises
    ------
    CstlUnsupported
        With the cause the hardware reports and a message naming the register or value.
    """
    r = _by_name(registers)

    def get(name):
        return r.get(name, 0)

    code = get("OPCODE")
    name = OPCODES[code] if code < len(OPCODES) else None
    if name in table_opcodes():
        kind = "table"
    elif name in ELTWISE_OPS:
        kind = "eltwise"
    elif name in ("cast", "maxpool", "avgpool", "reduce_max", "argmax"):
        kind = name
    else:
        raise CstlUnsupported(Cause.OPCODE, f"OPCODE {code} ({name}) is not a CSTL opcode")
    nin, nout = get("NIN"), get("NOUT")
    want_in = 2 if kind == "eltwise" else 1
    if (nin, nout) != (want_in, 1):
        raise CstlUnsupported(Cause.TYPE, f"{name}: NIN {nin}, NOUT {nout}; the CSTL runs "
                                          f"{want_in} input(s) and 1 output")
    ops = []
    for k in range(nin + 1):
        field = f"OP{k}_"
        elem_code, rank = get(field + "ELEM"), get(field + "RANK")
        elem = ELEM_TYPES[elem_code] if elem_code < len(ELEM_TYPES) else f"code {elem_code}"
        if get(field + "LEVEL") != L1 or get(field + "ADDR_HI"):
            raise CstlUnsupported(Cause.TYPE, f"{name}: operand {k} is not in L1 "
                                              f"(OP{k}_LEVEL {get(field + 'LEVEL')})")
        if rank > MAX_RANK_RUN:
            raise CstlUnsupported(Cause.LAYOUT, f"{name}: OP{k}_RANK {rank}, the CSTL walks "
                                                f"at most {MAX_RANK_RUN} dimensions")
        shape = tuple(get(f"{field}DIM{d}") for d in range(rank))
        if any(n >> DIM_BITS for n in shape):
            raise CstlUnsupported(Cause.LAYOUT, f"{name}: operand {k} shape {list(shape)} has "
                                                f"a dimension of 2**{DIM_BITS} or more")
        ops.append(CstlOperand(get(field + "ADDR_LO"), elem,
                               shape, tuple(get(f"{field}STRIDE{d}") for d in range(rank))))
    ins, out = tuple(ops[:nin]), ops[nin]
    elems = [o.elem for o in ops]
    if kind == "cast":
        ok = (elems[0] == "i8" and elems[1] in CAST_TYPES) or (
            elems[0] in CAST_TYPES and elems[1] == "i8")
    elif kind == "argmax":
        ok = elems[0] == "i8" and elems[1] in CAST_TYPES
    else:
        ok = all(e == "i8" for e in elems)
    if not ok:
        raise CstlUnsupported(Cause.TYPE, f"{name}: element types {elems}")
    if kind == "argmax" and get(f"OP{nin}_QUANT") != NO_QUANT:
        # indices are plain integers; the executor quantises the index of a quantised
        # output as a real value instead
        raise CstlUnsupported(Cause.TYPE, f"{name}: the output has a quantisation "
                                          f"descriptor (OP{nin}_QUANT)")
    attrs = {}
    if kind in ("maxpool", "avgpool", "reduce_max", "argmax"):
        specs = [(a.name, a.type) for a in load_registry()[name].attributes]
        try:
            attrs = read_attr_words(name, specs, [get(f"ATTR{j}") for j in range(ATTR_WORDS)])
        except TaskFormatError as exc:
            raise CstlUnsupported(Cause.LAYOUT, f"{name}: {exc}") from None
    _check_layout(name, kind, ins, out, attrs)
    table, entry = get("TABLE"), get("REQUANT")
    if kind == "table" and table == NO_TABLE:
        raise CstlUnsupported(Cause.REQUANT, f"{name}: TABLE is NO_TABLE; a table task needs "
                                             "its lookup table")
    if kind not in ("table", "maxpool", "avgpool", "reduce_max"):
        table = NO_TABLE
    return CstlWork(name, kind, ins, out, table, entry, attrs)


def _check_layout(name, kind, ins, out, attrs):
    def refuse(why):
        raise CstlUnsupported(Cause.LAYOUT, f"{name}: {why}")

    x = ins[0]
    if kind in ("table", "cast") and x.shape != out.shape:
        refuse(f"input shape {list(x.shape)} and output shape {list(out.shape)} differ")
    if kind == "eltwise":
        for k, a in enumerate(ins):
            lead = len(out.shape) - len(a.shape)
            if lead < 0 or any(n not in (1, m) for n, m in zip(a.shape, out.shape[lead:],
                                                                strict=True)):
                refuse(f"input {k} shape {list(a.shape)} does not broadcast to the output "
                       f"{list(out.shape)}")
    if kind in ("maxpool", "avgpool"):
        if len(x.shape) != 4 or len(out.shape) != 4:
            refuse("pooling takes NHWC operands of rank 4")
        k = attrs.get("kernel_shape")
        s = tuple(attrs.get("strides") or (1, 1))
        p = tuple(attrs.get("pads") or (0, 0, 0, 0))
        d = tuple(attrs.get("dilations") or (1, 1))
        if (not k or len(k) != 2 or len(s) != 2 or len(p) != 4 or min(k) < 1 or min(s) < 1
                or min(p) < 0 or d != (1, 1) or max(*k, *s, *p) >> DIM_BITS
                or k[0] * k[1] >> DIM_BITS):
            refuse(f"kernel {k}, strides {s}, pads {p}, dilations {d} (kernel, strides and "
                   f"pads below 2**{DIM_BITS}, fewer than 2**{DIM_BITS} taps)")
        n, h, w, c = x.shape
        oh = (h + p[0] + p[2] - k[0]) // s[0] + 1
        ow = (w + p[1] + p[3] - k[1]) // s[1] + 1
        if out.shape != (n, oh, ow, c):
            refuse(f"output shape {list(out.shape)}, the window gives {[n, oh, ow, c]}")
    if kind in ("reduce_max", "argmax"):
        axes = attrs.get("axes") if kind == "reduce_max" else (attrs.get("axis", 0),)
        rank = len(x.shape)
        # the last axis, counted from the front or the back (an axis outside
        # -rank..rank-1 is no axis: the executor refuses it too)
        if rank == 0 or not axes or len(axes) != 1 or axes[0] not in (rank - 1, -1):
            refuse(f"reduces over {axes}; the CSTL reduces the last axis only")
        if x.shape[-1] == 0:
            refuse("reduces an empty axis")
        keep = attrs.get("keepdims", True) is not False
        want = x.shape[:-1] + ((1,) if keep else ())
        if out.shape != want:
            refuse(f"output shape {list(out.shape)}, the reduction gives {list(want)}")


def _index(shape):
    return np.ndindex(*shape) if shape else iter([()])


def _read(l1, op: CstlOperand, idx) -> int:
    at = op.addr + op.nbytes * sum(i * s for i, s in zip(idx, op.strides, strict=True))
    return int.from_bytes(bytes(l1[at : at + op.nbytes]), "little", signed=True)


def _write(l1, op: CstlOperand, idx, value: int) -> None:
    at = op.addr + op.nbytes * sum(i * s for i, s in zip(idx, op.strides, strict=True))
    l1[at : at + op.nbytes] = np.frombuffer(value.to_bytes(op.nbytes, "little", signed=True),
                                            np.uint8)


def _rescale(v: int, m: int, t: int) -> int:
    return (v * m + (1 << (t - 1))) >> t


def _sat(v: int, elem: str) -> int:
    lo, hi = ELEM_RANGES[elem]
    return min(max(v, lo), hi)


#: What an eltwise entry may hold (the CSTL's datapath is exact on these ranges; the
#: binder's ``nem.numerics.eltwise_params`` stays inside them); mul reads neither the
#: inputs' multipliers and shifts nor ``left_shift``.
ENTRY_RANGES = {
    **{f: ELEM_RANGES["i8"] for f in ("a_zero_point", "b_zero_point", "y_zero_point", "lo",
                                      "hi")},
    "left_shift": (0, ELTWISE_LEFT_SHIFT),
    **{f: (0, 2**31 - 1) for f in ("a_multiplier", "b_multiplier", "y_multiplier")},
    **{f: (1, 63) for f in ("a_shift", "b_shift", "y_shift")},
}
MUL_UNUSED = ("left_shift", "a_multiplier", "a_shift", "b_multiplier", "b_shift")


def _entry(data: bytes, offset: int, name: str):
    try:
        p = decode_eltwise(data, offset)
    except TaskFormatError as exc:
        raise CstlUnsupported(Cause.REQUANT, f"{name}: REQUANT: {exc}") from None
    for field, (lo, hi) in ENTRY_RANGES.items():
        if name == "mul" and field in MUL_UNUSED:
            continue   # mul rescales the product alone
        value = getattr(p, field)
        if not lo <= value <= hi:
            raise CstlUnsupported(Cause.REQUANT, f"{name}: eltwise entry at data offset "
                                                 f"{offset}: {field} = {value}, the CSTL "
                                                 f"takes {lo}..{hi}")
    return p


def _table(data: bytes, offset: int, name: str):
    if offset == NO_TABLE:
        return None
    try:
        return decode_table(data, offset)
    except TaskFormatError as exc:
        raise CstlUnsupported(Cause.REQUANT, f"{name}: TABLE: {exc}") from None


def cstl_model(registers, l1, data: bytes) -> dict[str, int]:
    """Run one CSTL task on ``l1`` (a writable numpy uint8 array: the engine's L1 bytes).

    Parameters
    ----------
    registers : dict
        The task's register values (by name or index; missing ones read 0).
    l1 : numpy.ndarray of uint8
        L1, changed in place: only the output region's bytes are written.
    data : bytes
        The binary's data section (lookup tables and eltwise entries).

    Returns
    -------
    dict
        ``{"elems": output elements written}``.

    Raises
    ------
    CstlUnsupported
        As :func:`decode_task`, or ``REQUANT`` for an entry outside the data section.
    """
    work = decode_task(registers)
    table = _table(data, work.table, work.opcode)
    x, out = work.ins[0], work.out
    name = work.opcode

    def lookup(code: int) -> int:
        return code if table is None else table[code & 0xFF]

    count = 0
    if work.kind == "eltwise":
        p = _entry(data, work.entry, name)
        b = work.ins[1]
        for idx in _index(out.shape):
            qa = _read(l1, x, _broadcast(idx, x.shape))
            qb = _read(l1, b, _broadcast(idx, b.shape))
            da, db = qa - p.a_zero_point, qb - p.b_zero_point
            if name == "mul":
                r = da * db
            else:
                va = _rescale(da << p.left_shift, p.a_multiplier, p.a_shift)
                vb = _rescale(db << p.left_shift, p.b_multiplier, p.b_shift)
                r = {"add": va + vb, "sub": va - vb, "min": min(va, vb),
                     "max": max(va, vb)}[name]
            y = _rescale(r, p.y_multiplier, p.y_shift) + p.y_zero_point
            _write(l1, out, idx, min(max(y, p.lo), p.hi))
            count += 1
    elif work.kind in ("table", "cast"):
        for idx in _index(out.shape):
            q = _read(l1, x, idx)
            _write(l1, out, idx, lookup(q) if work.kind == "table" else _sat(q, out.elem))
            count += 1
    elif work.kind in ("maxpool", "avgpool"):
        count = _pool(work, l1, lookup)
    else:
        for idx in _index(out.shape):
            row = idx[: len(x.shape) - 1]
            codes = [_read(l1, x, (*row, i)) for i in range(x.shape[-1])]
            best = max(codes)
            value = codes.index(best) if work.kind == "argmax" else lookup(best)
            _write(l1, out, idx, _sat(value, out.elem))
            count += 1
    return {"elems": count}


def _broadcast(idx, shape):
    lead = len(idx) - len(shape)
    return tuple(0 if n == 1 else i for i, n in zip(idx[lead:], shape, strict=True))


def _pool(work: CstlWork, l1, lookup) -> int:
    x, out, a = work.ins[0], work.out, work.attrs
    kh, kw = a["kernel_shape"]
    sh, sw = tuple(a.get("strides") or (1, 1))
    top, left, _, _ = tuple(a.get("pads") or (0, 0, 0, 0))
    _, h, w, _ = x.shape
    count = 0
    for n, i, j, c in _index(out.shape):
        codes = [_read(l1, x, (n, i * sh - top + u, j * sw - left + v, c))
                 for u in range(kh) for v in range(kw)
                 if 0 <= i * sh - top + u < h and 0 <= j * sw - left + v < w]
        if work.kind == "maxpool":
            value = lookup(max(codes, default=-128))
        elif codes:
            f, r = divmod(sum(codes), len(codes))
            up = 2 * r > len(codes) or (2 * r == len(codes) and f % 2 == 1)
            value = lookup(f + up)
        else:
            value = lookup(0)
        _write(l1, out, (n, i, j, c), value)
        count += 1
    return count

