"""The CSTL's shadow registers and their decode into the task the CSTL runs.

The register map is the shared compute map ``nem.taskformat.REGISTER_MAPS[Unit.CSTL]``
(indices imported, never written out here). As for the NMU (:mod:`npu.nmu.regs`) the
sequencer pulses ``clear`` (every register reads 0) and sends the task's writes one by one;
the decode (its checks registered, so ``task`` follows a write by
:attr:`CstlRegisters.LATENCY` cycles) gives the CSTL's walk view
(:func:`task_layout`) with the :class:`npu.nmu.model.Cause` of a task the CSTL refuses.

Only the registers the CSTL reads are kept (:func:`kept_registers`): OPCODE, NIN, NOUT,
TABLE, ADDR_LO, ADDR_HI, LEVEL, ELEM, RANK, DIM0-3, STRIDE0-3 of operand slots 0 to 2,
OP1_QUANT (argmax's output takes no quantisation descriptor) and the ATTR words of the
pooling and reduction attributes.

What runs: the lookup-table opcodes and ``cast`` of :func:`npu.cstl.model.decode_task`,
one input and one output of the same shape, rank 0..4, both in L1:

* ``table``: a unary elementwise opcode or clamp (:func:`npu.cstl.model.table_opcodes`),
  i8 -> i8: ``out = table[in]`` through the task's 256-byte table at data offset ``TABLE``
  (read on the unit's ``table`` stream), so the opcode selects nothing else;
* ``cast`` i8 -> i8 / i16 / i32 (sign extension) and i16 / i32 -> i8 (saturation), no
  table;
* ``maxpool`` (:data:`POOL_OPS`), NHWC i8 -> i8: kernel, strides and top / left pads from
  the ATTR words (:func:`pool_attr_slots`), the table when ``TABLE`` names one. The ATTR
  words are checked as the model's ``read_attr_words`` does (tags, list lengths, no word
  outside a present attribute: the words the CSTL does not keep have one flag each), and
  the output shape against the window by multiplications only;
* ``reduce_max`` / ``argmax`` (:data:`RED_OPS`) over the last axis, i8 -> i8 (the table
  when ``TABLE`` names one) / i8 -> i8, i16 or i32 (the index, saturated; ``OP1_QUANT``
  must be ``NO_QUANT``, else ``TYPE``): ``axes`` /
  ``axis`` and ``keepdims`` from the ATTR words (:func:`red_attr_slots`), checked as the
  model's ``read_attr_words`` and layout check do; the walk is the input's region with
  the output's strides on its outer levels and 0 on the last.

The refusals and their order are the model's: an opcode the RTL does not run
(``OPCODE``), operand counts
(``TYPE``), per operand its memory (``TYPE``) then its rank or a dimension of 2**16 or
more (``LAYOUT``), the element types (``TYPE``), shapes that differ or a pool's
attributes and shapes (``LAYOUT``), a table
task with ``TABLE`` = ``NO_TABLE`` (``REQUANT``). A table task with a table reads it even
when refused (``task.table``), so that the sequencer's fetch always completes.

A shape is right-aligned onto four levels (outer levels of size 1, stride 0); element
strides become byte strides (``in_shift`` / ``out_shift``: log2 of the element bytes).
:func:`decode` is the Python model of this decode, built on
:func:`npu.cstl.model.decode_task`.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from nem.elemtypes import elem_type
from nem.registry import load_registry
from nem.taskformat import (
    ATTR_PRESENT,
    ATTR_WORDS,
    ELEM_TYPES,
    LEVELS,
    NO_QUANT,
    NO_TABLE,
    OPCODES,
    REGISTER_MAPS,
    Unit,
    attr_layout,
)
from npu.cstl.model import CAST_TYPES, CstlUnsupported, decode_task, table_opcodes
from npu.nmu.model import Cause
from npu.shadow import WRITE_REGISTERS, ShadowRegisters

__all__ = ["ELT_OPS", "LEVELS_WALKED", "POOL_OPS", "RED_OPS", "CstlRegisters", "CstlTask",
           "decode", "elt_codes", "kept_registers", "pool_attr_slots", "reads_table_codes",
           "red_attr_slots", "table_codes", "task_layout", "write_layout"]

REGS = REGISTER_MAPS[Unit.CSTL]
#: Loop levels of the walk (operand ranks above this are refused).
LEVELS_WALKED = 4
#: Bits of a dimension (a larger one is refused).
DIM_BITS = 16
SLOTS = 3
FIELDS = ("ADDR_LO", "ADDR_HI", "LEVEL", "ELEM", "RANK",
          *(f"DIM{d}" for d in range(LEVELS_WALKED)),
          *(f"STRIDE{d}" for d in range(LEVELS_WALKED)))
L1_LEVEL = LEVELS.index("L1")
I8 = ELEM_TYPES.index("i8")
CAST = OPCODES.index("cast")
MASK = 0xFFFFFFFF
#: Element type -> log2 of its bytes, for the types a cast takes (``CAST_TYPES``).
SHIFT = {name: (elem_type(name).bits // 8).bit_length() - 1 for name in CAST_TYPES}
#: The pooling opcodes the RTL runs, and their ``pool`` code in the task (0: no pool).
POOL_OPS = {"maxpool": 1, "avgpool": 2}
#: The binary eltwise opcodes the RTL runs, and their ``elt`` code in the task (0: none).
ELT_OPS = {"add": 1, "sub": 2, "mul": 3, "min": 4, "max": 5}
#: The last-axis reductions the RTL runs, and their ``red`` code in the task (0: none).
RED_OPS = {"reduce_max": 1, "argmax": 2}
#: Each reduction's attributes: the axis (a list of one for reduce_max) and keepdims.
RED_ATTRS = {"reduce_max": ("axes", "keepdims"), "argmax": ("axis", "keepdims")}


@functools.cache
def pool_attr_slots() -> dict:
    """The ATTR slots of the pooling opcodes (``nem.taskformat.attr_layout``; maxpool and
    avgpool share one layout): ``{name: AttrSlot}`` for kernel_shape, pads, strides."""
    layouts = set()
    for op in ("maxpool", "avgpool"):
        specs = [(a.name, a.type) for a in load_registry()[op].attributes]
        layouts.add(attr_layout(op, specs))
    if len(layouts) != 1:
        raise ValueError("maxpool and avgpool have different ATTR layouts")
    slots = {slot.name: slot for slot in layouts.pop()}
    if set(slots) != {"kernel_shape", "pads", "strides"}:
        raise ValueError(f"pooling attributes {sorted(slots)}; the CSTL reads kernel_shape, "
                         f"pads and strides")
    return slots


@functools.cache
def red_attr_slots() -> dict:
    """The ATTR slots of the reductions (``nem.taskformat.attr_layout``): ``{opcode: {name:
    AttrSlot}}`` for :data:`RED_OPS`, each with its axis attribute and keepdims."""
    out = {}
    for op, names in RED_ATTRS.items():
        specs = [(a.name, a.type) for a in load_registry()[op].attributes]
        slots = {slot.name: slot for slot in attr_layout(op, specs)}
        if tuple(slots) != names:
            raise ValueError(f"{op} attributes {list(slots)}; the CSTL reads {list(names)}")
        out[op] = slots
    return out


def _slot_words(slot) -> range:
    """ATTR indices of a slot's tag and body."""
    return range(slot.tag, slot.body + slot.words)


def _attr_indices() -> list[int]:
    """ATTR indices of the pooling and reduction slots' tags and bodies (the ATTR registers
    the CSTL keeps)."""
    out = set()
    for slot in pool_attr_slots().values():
        out.update(_slot_words(slot))
    for slots in red_attr_slots().values():
        for slot in slots.values():
            out.update(_slot_words(slot))
    return sorted(out)


@functools.cache
def table_codes() -> tuple[int, ...]:
    """Opcode codes the CSTL runs through its table (:func:`npu.cstl.model.table_opcodes`);
    the sequencer fetches the table of exactly these tasks (when ``TABLE`` names one)."""
    return tuple(sorted(OPCODES.index(name) for name in table_opcodes()))


@functools.cache
def reads_table_codes() -> tuple[int, ...]:
    """Opcode codes whose task reads a table when ``TABLE`` is not ``NO_TABLE``: the table
    opcodes, the pools the RTL runs (a requantising pool) and reduce_max; the sequencer
    fetches the table of exactly these tasks."""
    return tuple(sorted((*table_codes(), *(OPCODES.index(name) for name in POOL_OPS),
                         OPCODES.index("reduce_max"))))


@functools.cache
def elt_codes() -> tuple[int, ...]:
    """Opcode codes of the binary eltwise tasks the RTL runs (:data:`ELT_OPS`); the
    sequencer fetches their ``ELTWISE_ENTRY`` (at data offset ``REQUANT``), refused or
    not, and the CSTL reads it."""
    return tuple(sorted(OPCODES.index(name) for name in ELT_OPS))


def kept_registers() -> list[str]:
    """Names of the registers the CSTL keeps, in index order (the ATTR words of the
    others are only checked to be 0, by one flag each)."""
    names = ["OPCODE", "NIN", "NOUT", "TABLE"]
    names += [f"OP{k}_{f}" for k in range(SLOTS) for f in FIELDS]
    names.append("OP1_QUANT")
    names += [f"ATTR{j}" for j in _attr_indices()]
    return sorted(names, key=REGS.index)


def write_layout():
    """One shadow-register write: the register's index in the compute map, its value."""
    return data.StructLayout({"index": 8, "value": 32})


def task_layout():
    """The CSTL's task: four loop levels (outermost first: the output's shape), byte
    addresses of the input ``x`` and the output ``y``, their byte strides; ``run``: both
    innermost element strides are 1 (the innermost level is read and written as runs of
    bytes); ``table``: the task reads a table (and looks every result byte up);
    ``in_shift`` / ``out_shift``: log2 of the input's / output's element bytes.

    A pool (``pool`` not 0: :data:`POOL_OPS`) walks the output ``(N, OH, OW, C)`` on the
    four levels with the input's strides in ``xs`` (n, h, w, c), and per output element
    the ``kh x kw`` window of input rows ``oh * sh - top + u`` and columns
    ``ow * sw - left + v`` of an input of ``ih x iw``.

    A binary eltwise (``elt`` not 0: :data:`ELT_OPS`) reads ``x`` (OP0) and ``b`` (OP1,
    at ``b_addr`` with byte strides ``bs``) and writes ``y`` (OP2); each input is
    right-aligned onto the output's levels with stride 0 where it broadcasts (a missing or
    size-1 dimension); ``run``: the output's innermost stride is 1 and each input's is 0
    or 1 (the innermost level goes in chunks of up to a word); ``entry``: the task reads an
    eltwise entry (an eltwise opcode, even when refused).

    A reduction (``red`` not 0: :data:`RED_OPS`) walks the input ``x`` (its shape on the
    levels, its strides in ``xs``) with the output's byte strides in ``ys`` on the outer
    levels and 0 on the last: every element of a row carries its row's output address;
    ``run``: the input's innermost stride is 1 (a row is one run); ``out_shift``: log2 of
    the output's element bytes (argmax's index).

    A refused task (``cause`` not 0) means ``cause``, ``table`` and ``entry`` only; its
    other fields are what its registers select for its kind of task."""
    return data.StructLayout({
        "dims": data.ArrayLayout(DIM_BITS, LEVELS_WALKED),
        "x_addr": 32, "xs": data.ArrayLayout(32, LEVELS_WALKED),
        "y_addr": 32, "ys": data.ArrayLayout(32, LEVELS_WALKED),
        "run": 1, "table": 1, "in_shift": 2, "out_shift": 2, "cause": 4,
        "pool": 2, "kh": DIM_BITS, "kw": DIM_BITS, "sh": DIM_BITS, "sw": DIM_BITS,
        "top": DIM_BITS, "left": DIM_BITS, "ih": DIM_BITS, "iw": DIM_BITS,
        "elt": 3, "b_addr": 32, "bs": data.ArrayLayout(32, LEVELS_WALKED), "entry": 1,
        "red": 2,
    })


@dataclass(frozen=True)
class CstlTask:
    """The decode of a task (Python model of :class:`CstlRegisters`' ``task``); the pool
    fields are 0 for a task that is not a pool."""

    dims: tuple[int, ...]
    x_addr: int
    xs: tuple[int, ...]
    y_addr: int
    ys: tuple[int, ...]
    run: bool
    table: bool
    in_shift: int
    out_shift: int
    cause: int
    pool: int = 0
    kh: int = 0
    kw: int = 0
    sh: int = 0
    sw: int = 0
    top: int = 0
    left: int = 0
    ih: int = 0
    iw: int = 0
    elt: int = 0
    b_addr: int = 0
    bs: tuple[int, ...] = (0,) * LEVELS_WALKED
    entry: bool = False
    red: int = 0


def _levels(rank, values, fill):
    """Right-align ``values`` (outermost first) onto the walk's levels."""
    return (fill,) * (LEVELS_WALKED - rank) + tuple(values)


def _broadcast_strides(rank, a):
    """An eltwise input's byte strides on the walk's levels (i8): right-aligned to the
    output's ``rank``, 0 where it has no dimension or one of size 1."""
    lead = rank - len(a.shape)
    own = [0 if n == 1 else st & MASK for n, st in zip(a.shape, a.strides, strict=True)]
    return _levels(rank, [0] * lead + own, 0)


def decode(regs: dict[str, int]) -> CstlTask:
    """What the CSTL makes of the registers ``regs`` (name -> value; missing ones read 0):
    :func:`npu.cstl.model.decode_task` on the registers the CSTL keeps (and the ATTR
    words), in the walk's view, with ``OPCODE`` for what the RTL does not run yet."""
    r = {name: regs.get(name, 0) & MASK for name in kept_registers()}
    r |= {f"ATTR{j}": regs.get(f"ATTR{j}", 0) & MASK for j in range(ATTR_WORDS)}
    code = r["OPCODE"]
    is_table = code in table_codes()
    name = OPCODES[code] if code < len(OPCODES) else None
    zeros = (0,) * LEVELS_WALKED
    if not (is_table or code == CAST or name in POOL_OPS or name in ELT_OPS
            or name in RED_OPS):
        return CstlTask(zeros, 0, zeros, 0, zeros, False, False, 0, 0, Cause.OPCODE)
    reads = code in reads_table_codes() and r["TABLE"] != NO_TABLE
    try:
        work = decode_task(r)
    except CstlUnsupported as exc:
        return CstlTask(zeros, 0, zeros, 0, zeros, False, reads, 0, 0, exc.cause,
                        entry=name in ELT_OPS)
    x, y = work.ins[0], work.out
    rank = len(y.shape)
    if name in ELT_OPS:
        xs, bs = (_broadcast_strides(rank, a) for a in work.ins)
        ys = _levels(rank, y.strides, 0)
        return CstlTask(_levels(rank, y.shape, 1), x.addr, xs, y.addr, ys,
                        ys[-1] == 1 and xs[-1] in (0, 1) and bs[-1] in (0, 1), False, 0, 0,
                        Cause.NONE, elt=ELT_OPS[name], b_addr=work.ins[1].addr, bs=bs,
                        entry=True)
    si, so = SHIFT[x.elem], SHIFT[y.elem]
    if name in RED_OPS:
        rx = len(x.shape)
        xs = _levels(rx, x.strides, 0)
        ys = _levels(rx, [(v << so) & MASK for v in y.strides[:rx - 1]] + [0], 0)
        return CstlTask(_levels(rx, x.shape, 1), x.addr, xs, y.addr, ys, xs[-1] == 1, reads,
                        0, so, Cause.NONE, red=RED_OPS[name])
    xs = _levels(rank, [(v << si) & MASK for v in x.strides], 0)
    ys = _levels(rank, [(v << so) & MASK for v in y.strides], 0)
    pool = {}
    if name in POOL_OPS:
        a = work.attrs
        kh, kw = a["kernel_shape"]
        sh, sw = a.get("strides") or (1, 1)
        top, left, _, _ = a.get("pads") or (0, 0, 0, 0)
        pool = {"pool": POOL_OPS[name], "kh": kh, "kw": kw, "sh": sh, "sw": sw, "top": top,
                "left": left, "ih": x.shape[1], "iw": x.shape[2]}
    return CstlTask(_levels(rank, y.shape, 1), x.addr, xs, y.addr, ys,
                    xs[-1] == 1 << si and ys[-1] == 1 << so, reads, si, so, Cause.NONE,
                    **pool)


class CstlRegisters(wiring.Component):
    """Shadow registers of the CSTL and the task decode.

    The decode's checks (the shape and attribute comparisons, the element types) are
    registered, the pool's products and spans one stage earlier: ``task`` is the decode
    of the registers as they were :attr:`LATENCY` cycles earlier (the opcode's fields and
    the walk are selected in the cycle after the checks).

    Attributes
    ----------
    clear : Signal, in
        Pulse: every register to 0 (before a task's writes).
    write : stream of {"index": 8, "value": 32}, in (always ready)
        One register write; indices the CSTL does not read are ignored.
    task : Signal(task_layout()), out
        The decoded task (:func:`decode`); ``task.cause`` is non-zero when the CSTL
        refuses it; ``task.table``: the task reads a table (even when refused).
    """

    #: Cycles from a register write (or ``clear``) to ``task`` holding its decode: the
    #: write's register (:data:`npu.shadow.WRITE_REGISTERS`), then the decode's.
    LATENCY = WRITE_REGISTERS + 2

    def __init__(self):
        super().__init__({
            "clear": In(1),
            "write": In(stream.Signature(write_layout())),
            "task": Out(task_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        # RANK, ELEM, OPCODE and DIM are kept narrow (what a task that is not refused can
        # hold), with a flag set at the write when the word is wider: a rank above 4, an
        # opcode past the table, a dimension of 2**16 or more (each refused before anything
        # reads the narrow value; an element type is checked by exact flags, "i8" and "a
        # cast type", and its narrow value only selects a cast's shift). Comparisons with a
        # constant are flags set at the write too (:class:`npu.shadow.ShadowRegisters`), so
        # that the decode's first stage compares a few bits, not 32.
        narrow = {"RANK": 3, "ELEM": len(ELEM_TYPES).bit_length(),
                  "DIM": DIM_BITS, "OPCODE": len(OPCODES).bit_length()}

        def width(name):
            for field, bits in narrow.items():
                if name == field or name.rstrip("0123456789").endswith(f"_{field}"):
                    return bits
            return 32

        shadow = ShadowRegisters(REGS, kept_registers(),
                                 {name: width(name) for name in kept_registers()})

        def big(name):
            """The word is wider than its narrow register (see ``narrow``)."""
            if name.endswith("_RANK"):
                return shadow.flag(name, "big", lambda v: v > LEVELS_WALKED)
            return shadow.above(name, width(name))

        # the ATTR words the CSTL does not keep: a flag each, set while the word is not 0
        stray = Cat(*[shadow.nonzero(f"ATTR{j}") for j in range(ATTR_WORDS)
                      if f"ATTR{j}" not in shadow.r])
        self._decode(m, shadow, stray, big)
        shadow.elaborate_writes(m, self.clear, self.write, registered=True)
        return m

    def _decode(self, m, shadow, stray, big):
        """The decode of the shadow registers ``shadow`` into ``self.task`` (see the
        class)."""
        r, equals, nonzero, flag = shadow.r, shadow.equals, shadow.nonzero, shadow.flag

        def op(k, f):
            return r[f"OP{k}_{f}"]

        t = self.task
        # the opcode: an opcode past the table (``big``) is none of them
        code_ok = ~big("OPCODE")
        is_table = Signal()
        with m.Switch(r["OPCODE"]):
            with m.Case(*table_codes()):
                m.d.comb += is_table.eq(code_ok)
        is_cast = code_ok & (r["OPCODE"] == CAST)
        pool = Signal(2)
        for name, value in POOL_OPS.items():
            with m.If(code_ok & (r["OPCODE"] == OPCODES.index(name))):
                m.d.comb += pool.eq(value)
        is_pool = pool != 0
        elt = Signal(3)
        for name, value in ELT_OPS.items():
            with m.If(code_ok & (r["OPCODE"] == OPCODES.index(name))):
                m.d.comb += elt.eq(value)
        is_elt = elt != 0
        red = Signal(2)
        for name, value in RED_OPS.items():
            with m.If(code_ok & (r["OPCODE"] == OPCODES.index(name))):
                m.d.comb += red.eq(value)
        is_red = red != 0
        # element types: log2 of the bytes of a cast type, and whether it is one (flags
        # set at the write)
        shifts = [Signal(2, name=f"shift{k}") for k in range(SLOTS)]
        for k in range(SLOTS):
            with m.Switch(op(k, "ELEM")):
                for name, sh in SHIFT.items():
                    with m.Case(ELEM_TYPES.index(name)):
                        m.d.comb += shifts[k].eq(sh)
        cast_codes = [ELEM_TYPES.index(name) for name in SHIFT]
        known = [flag(f"OP{k}_ELEM", "cast",
                      lambda v: functools.reduce(operator.or_, [v == c for c in cast_codes]))
                 for k in range(SLOTS)]
        i8 = [equals(f"OP{k}_ELEM", I8) for k in range(SLOTS)]
        elem_ok = Mux(is_cast, (i8[0] & known[1]) | (known[0] & i8[1]),
                      Mux(red == RED_OPS["argmax"],
                          i8[0] & known[1] & equals("OP1_QUANT", NO_QUANT),
                          i8[0] & i8[1] & (i8[2] | ~is_elt)))

        def mem_bad(k):
            return ~equals(f"OP{k}_LEVEL", L1_LEVEL) | nonzero(f"OP{k}_ADDR_HI")

        def rank_bad(k):
            bad = big(f"OP{k}_RANK")
            for d in range(LEVELS_WALKED):
                bad = bad | ((op(k, "RANK") > d) & big(f"OP{k}_DIM{d}"))
            return bad

        rank = op(1, "RANK")
        differ = op(0, "RANK") != rank
        for d in range(LEVELS_WALKED):
            differ = differ | ((rank > d) & (op(0, f"DIM{d}") != op(1, f"DIM{d}")))
        pool_bad, pa = self._pool_check(m, shadow, stray)
        bcast_bad, elt_strides = self._broadcast(m, shadow)
        red_bad = self._red_check(m, shadow, stray, red)
        has_table = ~equals("TABLE", NO_TABLE)
        reads = Signal()
        with m.Switch(r["OPCODE"]):
            with m.Case(*reads_table_codes()):
                m.d.comb += reads.eq(code_ok)

        # the checks in registers of their own (the pool's products and the shape
        # comparisons are too long a path in the cycle that also selects the fields); the
        # pool's check is a stage longer, so ``task`` holds the decode ``LATENCY`` cycles
        # after the registers last changed
        def held(value, name):
            out = Signal(len(value), name=name)
            m.d.sync += out.eq(value)
            return out

        is_elt_c = is_elt
        # ``run`` (both innermost strides are one element) from the operands' last
        # strides as the registers give them, into registers of their own like the checks,
        # one per kind of task (the second stage picks by the registered mode): not from the
        # selected fields (the levels' alignment by rank, then comparisons, would be one
        # path into the decode's register). "The last stride, shifted left by ``shift`` and
        # cut to 32 bits, is ``1 << shift``" is "its low ``32 - shift`` bits are 1": bit 0
        # set, bits 1..29 clear (worked out per stride, before the selection by rank), and
        # bit 30 (31) clear unless the shift leaves it out
        def last_stride_is_one(k, rank, shift, name):
            one, b30, b31 = (Signal(name=f"last_stride_{name}_{f}") for f in
                             ("low", "b30", "b31"))
            with m.Switch(rank):
                for rk in range(1, LEVELS_WALKED + 1):
                    with m.Case(rk):
                        name = f"OP{k}_STRIDE{rk - 1}"
                        v = r[name]
                        m.d.comb += [one.eq(flag(name, "low_one",
                                                 lambda v: v[0] & (v[1:30] == 0))),
                                     b30.eq(v[30]), b31.eq(v[31])]
            return one & (~b30 | (shift == 2)) & (~b31 | (shift != 0))

        # an eltwise input's stride on the last level is at most one byte: it has no
        # dimension there (rank 0), broadcasts there (its last dimension is 1) or its last
        # stride is 0 or 1; from the registers by the input's own rank, not from the
        # broadcast strides (a selection by both ranks and a comparison more)
        def last_elt_stride_short(k):
            out = Signal(name=f"last_stride_elt{k}_short")
            m.d.comb += out.eq(1)
            with m.Switch(op(k, "RANK")):
                for rk in range(1, LEVELS_WALKED + 1):
                    with m.Case(rk):
                        m.d.comb += out.eq(equals(f"OP{k}_DIM{rk - 1}", 1)
                                           | flag(f"OP{k}_STRIDE{rk - 1}", "short",
                                                  lambda v: v[1:] == 0))
            return out

        si_c, so_c = shifts[:2]
        run_elt = held(last_stride_is_one(2, op(2, "RANK"), 0, "elt_y")
                       & last_elt_stride_short(0) & last_elt_stride_short(1), "run_elt")
        run_red = held(last_stride_is_one(0, op(0, "RANK"), 0, "red_x"), "run_red")
        run_other = held(last_stride_is_one(0, rank, si_c, "x")
                         & last_stride_is_one(1, rank, so_c, "y"), "run_other")
        # each operand's dimensions and strides on the walk's levels, aligned by its own
        # rank (level j is dimension j - (4 - rank); dimensions above it 1, strides 0), in
        # registers like the checks: the second stage only picks operands and shifts, and
        # the ranks' selection (a wide fan-out of three bits) has a cycle of its own. An
        # operand whose rank differs from the one the original selection used (a cast's
        # input against its output's) makes the task refused, so the fields do not matter.
        def aligned(k):
            dims = [Signal(DIM_BITS, name=f"op{k}_dim_l{j}") for j in range(LEVELS_WALKED)]
            strides = [Signal(32, name=f"op{k}_stride_l{j}") for j in range(LEVELS_WALKED)]
            with m.Switch(op(k, "RANK")):
                for rk in range(LEVELS_WALKED + 1):
                    with m.Case(rk):
                        for j in range(LEVELS_WALKED):
                            d = j - (LEVELS_WALKED - rk)
                            m.d.sync += [dims[j].eq(1 if d < 0 else op(k, f"DIM{d}")),
                                         strides[j].eq(0 if d < 0 else op(k, f"STRIDE{d}"))]
            return dims, strides

        al = [aligned(k) for k in range(SLOTS)]
        # a reduction's output strides on the input's levels but the last (its rank or
        # one less, by keepdims)
        red_ys = [Signal(32, name=f"red_ys_l{j}") for j in range(LEVELS_WALKED - 1)]
        with m.Switch(op(0, "RANK")):
            for rk in range(1, LEVELS_WALKED + 1):
                with m.Case(rk):
                    for j in range(LEVELS_WALKED - 1):
                        d = j - (LEVELS_WALKED - rk)
                        m.d.sync += red_ys[j].eq(0 if d < 0 else op(1, f"STRIDE{d}"))
        elt_strides = [[held(v, f"elt_s{k}_l{j}_q") for j, v in enumerate(st)]
                       for k, st in enumerate(elt_strides)]
        is_table, is_cast, is_pool, is_elt, is_red = (
            held(v, f"is_{n}") for v, n in ((is_table, "table"), (is_cast, "cast"),
                                            (is_pool, "pool"), (is_elt, "elt"),
                                            (is_red, "red")))
        pool, elt, red = held(pool, "pool_op"), held(elt, "elt_op"), held(red, "red_op")
        shifts = [held(v, f"shift{k}_q") for k, v in enumerate(shifts)]
        reads, has_table = held(reads, "reads_q"), held(has_table, "has_table")
        bad = {name: held(v, f"{name}_bad") for name, v in (
            ("type0", ~Mux(is_elt_c, equals("NIN", 2), equals("NIN", 1))
             | ~equals("NOUT", 1) | mem_bad(0)),
            ("rank0", rank_bad(0)), ("mem1", mem_bad(1)), ("rank1", rank_bad(1)),
            ("mem2", mem_bad(2)), ("rank2", rank_bad(2)), ("elem", ~elem_ok),
            # the layout checks one register per kind of task, selected by the registered
            # kind in the second stage (not by the opcode in front of the register)
            ("layout_pool", pool_bad), ("layout_elt", bcast_bad), ("layout_red", red_bad),
            ("layout_other", differ))}
        layout_bad = Mux(is_pool, bad["layout_pool"], Mux(
            is_elt, bad["layout_elt"], Mux(is_red, bad["layout_red"], bad["layout_other"])))
        m.d.comb += [t.table.eq(reads & has_table), t.entry.eq(is_elt)]
        with m.If(~is_table & ~is_cast & ~is_pool & ~is_elt & ~is_red):
            m.d.comb += t.cause.eq(Cause.OPCODE)
        with m.Elif(bad["type0"]):
            m.d.comb += t.cause.eq(Cause.TYPE)
        with m.Elif(bad["rank0"]):
            m.d.comb += t.cause.eq(Cause.LAYOUT)
        with m.Elif(bad["mem1"]):
            m.d.comb += t.cause.eq(Cause.TYPE)
        with m.Elif(bad["rank1"]):
            m.d.comb += t.cause.eq(Cause.LAYOUT)
        with m.Elif(is_elt & bad["mem2"]):
            m.d.comb += t.cause.eq(Cause.TYPE)
        with m.Elif(is_elt & bad["rank2"]):
            m.d.comb += t.cause.eq(Cause.LAYOUT)
        with m.Elif(bad["elem"]):
            m.d.comb += t.cause.eq(Cause.TYPE)
        with m.Elif(layout_bad):
            m.d.comb += t.cause.eq(Cause.LAYOUT)
        with m.Elif(is_table & ~has_table):
            m.d.comb += t.cause.eq(Cause.REQUANT)
        # the fields by the kind of task alone, whatever the cause (a refused task's are
        # not looked at): the checks' priority chain stays off the selection of ~700 bits
        with m.If(is_elt):
            xs, bs = elt_strides
            m.d.comb += [t.elt.eq(elt), t.x_addr.eq(op(0, "ADDR_LO")),
                         t.b_addr.eq(op(1, "ADDR_LO")), t.y_addr.eq(op(2, "ADDR_LO")),
                         t.run.eq(run_elt)]
            m.d.comb += [t.xs[j].eq(xs[j]) for j in range(LEVELS_WALKED)]
            m.d.comb += [t.bs[j].eq(bs[j]) for j in range(LEVELS_WALKED)]
            m.d.comb += [t.dims[j].eq(al[2][0][j]) for j in range(LEVELS_WALKED)]
            m.d.comb += [t.ys[j].eq(al[2][1][j]) for j in range(LEVELS_WALKED)]
        with m.Elif(is_red):
            # the input's region; the output's strides on the outer levels, 0 on the last
            m.d.comb += [t.red.eq(red), t.x_addr.eq(op(0, "ADDR_LO")),
                         t.y_addr.eq(op(1, "ADDR_LO")), t.out_shift.eq(shifts[1]),
                         t.run.eq(run_red)]
            m.d.comb += [t.dims[j].eq(al[0][0][j]) for j in range(LEVELS_WALKED)]
            m.d.comb += [t.xs[j].eq(al[0][1][j]) for j in range(LEVELS_WALKED)]
            m.d.comb += [t.ys[j].eq(red_ys[j] << shifts[1])
                         for j in range(LEVELS_WALKED - 1)]
        with m.Else():
            si, so = shifts[:2]
            m.d.comb += [t.x_addr.eq(op(0, "ADDR_LO")), t.y_addr.eq(op(1, "ADDR_LO")),
                         t.in_shift.eq(si), t.out_shift.eq(so),
                         t.run.eq(run_other)]
            with m.If(is_pool):
                m.d.comb += [t.pool.eq(pool), t.ih.eq(op(0, "DIM1")), t.iw.eq(op(0, "DIM2"))]
                m.d.comb += [getattr(t, f).eq(pa[f]) for f in
                             ("kh", "kw", "sh", "sw", "top", "left")]
            # level j of the walk is dimension j - (4 - rank) of the operands (aligned
            # above; the input's rank is the output's, else the task is refused)
            for j in range(LEVELS_WALKED):
                m.d.comb += [t.dims[j].eq(al[1][0][j]), t.xs[j].eq(al[0][1][j] << si),
                             t.ys[j].eq(al[1][1][j] << so)]

    @staticmethod
    def _broadcast(m, shadow):
        """An eltwise's inputs against its output (OP2): whether one does not broadcast
        (``LAYOUT``: a higher rank, or a dimension neither 1 nor the output's), and each
        input's byte strides on the walk's levels (0 where it broadcasts)."""
        r, equals = shadow.r, shadow.equals
        bad = Signal(name="bcast_bad")
        strides = []
        ro = r["OP2_RANK"]
        for k in range(2):
            st = [Signal(32, name=f"elt_s{k}_{j}") for j in range(LEVELS_WALKED)]
            ri = r[f"OP{k}_RANK"]
            with m.If(ri > ro):
                m.d.comb += bad.eq(1)
            with m.Switch(Cat(ri[:3], ro[:3])):
                for a in range(LEVELS_WALKED + 1):
                    for b in range(a, LEVELS_WALKED + 1):
                        with m.Case(a | b << 3):
                            for j in range(LEVELS_WALKED):
                                di, do = j - (LEVELS_WALKED - a), j - (LEVELS_WALKED - b)
                                if di < 0:
                                    continue
                                n, one = r[f"OP{k}_DIM{di}"], equals(f"OP{k}_DIM{di}", 1)
                                with m.If(~one & (n != r[f"OP2_DIM{do}"])):
                                    m.d.comb += bad.eq(1)
                                m.d.comb += st[j].eq(Mux(one, 0, r[f"OP{k}_STRIDE{di}"]))
            strides.append(st)
        return bad, strides

    @staticmethod
    def _red_check(m, shadow, stray, red):
        """Whether a reduction's attributes and shapes are refused (``LAYOUT``, as the
        model's ``read_attr_words`` and ``_check_layout``): the axis attribute must name the
        last axis (``rank - 1`` or ``-1``; argmax's absent ``axis`` is 0), keepdims a bool
        tag or absent (kept), no other ATTR word set; the input of rank 1..4 with a
        non-empty last axis, the output its shape without the last axis (keepdims: with it
        as 1)."""
        r, equals, nonzero, flag = shadow.r, shadow.equals, shadow.nonzero, shadow.flag
        rx, ry = r["OP0_RANK"], r["OP1_RANK"]
        keep = Signal(name="red_keep")
        bads = []
        for op, slots in red_attr_slots().items():
            mine = set()
            for slot in slots.values():
                mine.update(_slot_words(slot))
            bad = stray != 0
            for j in _attr_indices():
                if j not in mine:
                    bad = bad | nonzero(f"ATTR{j}")
            axis_slot, keep_slot = (slots[a] for a in RED_ATTRS[op])
            tag, axis = f"ATTR{axis_slot.tag}", f"ATTR{axis_slot.body}"
            # the axis is the input's last (rank 1..4: an axis below 8) or -1
            small = flag(axis, "small", lambda v: v[3:] == 0)
            last = (small & (r[axis][:3] == (rx - 1)[:3])) | equals(axis, MASK)
            one_item = equals(tag, ATTR_PRESENT + 1)
            if axis_slot.type == "int_list":      # a list of one item, no other body word
                ok = one_item & last
                for i in range(1, axis_slot.words):
                    ok = ok & ~nonzero(f"ATTR{axis_slot.body + i}")
            else:                                 # an int; absent: axis 0
                ok = Mux(nonzero(tag), one_item & last, ~nonzero(axis) & (rx == 1))
            ktag, kbody = f"ATTR{keep_slot.tag}", f"ATTR{keep_slot.body}"
            ok = ok & ((~nonzero(ktag) & ~nonzero(kbody)) | equals(ktag, ATTR_PRESENT + 1))
            with m.If(red == RED_OPS[op]):
                m.d.comb += keep.eq(~nonzero(ktag) | nonzero(kbody))
            bads.append((op, bad | ~ok))
        bad = Signal(name="red_bad")
        for op, b in bads:
            with m.If(red == RED_OPS[op]):
                m.d.comb += bad.eq(b)
        # shapes: the output is the input without its last axis, or with it as 1
        shape_bad = Signal(name="red_shape_bad")
        with m.Switch(rx):
            for rk in range(1, LEVELS_WALKED + 1):
                with m.Case(rk):
                    differ = ~nonzero(f"OP0_DIM{rk - 1}")
                    for d in range(rk - 1):
                        differ = differ | (r[f"OP1_DIM{d}"] != r[f"OP0_DIM{d}"])
                    m.d.comb += shape_bad.eq(differ | Mux(
                        keep, (ry != rk) | ~equals(f"OP1_DIM{rk - 1}", 1), ry != rk - 1))
            with m.Default():
                m.d.comb += shape_bad.eq(1)
        out = Signal(name="red_refused")
        m.d.comb += out.eq(bad | shape_bad)
        return out

    @staticmethod
    def _pool_check(m, shadow, stray):
        """Whether a pool's attributes and shapes are refused (``LAYOUT``, as the model's
        ``read_attr_words`` and ``_check_layout``), and its kernel, strides, top and left
        pads (16 bits each)."""
        r, equals, nonzero, flag = shadow.r, shadow.equals, shadow.nonzero, shadow.flag
        slots = pool_attr_slots()

        def word(j):
            return r[f"ATTR{j}"]

        def tag(name):
            return f"ATTR{slots[name].tag}"

        def body_name(name, i):
            return f"ATTR{slots[name].body + i}"

        def body(name, i):
            return r[body_name(name, i)]

        def any_body(name):
            out = 0
            for i in range(slots[name].words):
                out = out | nonzero(body_name(name, i))
            return out

        def wide(v):               # not below 2**16
            return v[DIM_BITS:] != 0

        def wide_body(name, i):    # a body word not below 2**16 (a flag set at the write)
            return flag(body_name(name, i), "wide", wide)

        # an int_list of n items: tag ATTR_PRESENT + n; an empty list reads as absent
        bad = ~equals(tag("kernel_shape"), ATTR_PRESENT + 2) | (stray != 0)
        mine = set()
        for slot in slots.values():
            mine.update(_slot_words(slot))
        for j in _attr_indices():          # kept for another opcode's attributes
            if j not in mine:
                bad = bad | nonzero(f"ATTR{j}")
        given = {}
        for name, n in (("pads", 4), ("strides", 2)):
            full = equals(tag(name), ATTR_PRESENT + n)
            empty = ~nonzero(tag(name)) | equals(tag(name), ATTR_PRESENT)
            bad = bad | ~(full | empty) | (empty & any_body(name))
            given[name] = full
        kh, kw = body("kernel_shape", 0), body("kernel_shape", 1)
        sh = Mux(given["strides"], body("strides", 0), 1)
        sw = Mux(given["strides"], body("strides", 1), 1)
        pads = [Mux(given["pads"], body("pads", i), 0) for i in range(4)]
        # a kernel or stride of 0 or of 2**16 or more, a pad of 2**16 or more (the
        # strides and pads as given; absent, 1 and 0)
        for i in range(2):
            bad = bad | wide_body("kernel_shape", i) | ~nonzero(body_name("kernel_shape", i))
            bad = bad | (given["strides"] & (wide_body("strides", i)
                                             | ~nonzero(body_name("strides", i))))
        for i in range(4):
            bad = bad | (given["pads"] & wide_body("pads", i))
        # two register stages: the products, the spans and the attribute checks; then the
        # comparisons (``LATENCY`` counts the second; the caller registers their result)
        taps = Signal(2 * DIM_BITS)
        m.d.sync += taps.eq(kh[:DIM_BITS] * kw[:DIM_BITS])
        bad = bad | (r["OP0_RANK"] != 4) | (r["OP1_RANK"] != 4)
        bad = bad | (r["OP0_DIM0"] != r["OP1_DIM0"]) | (r["OP0_DIM3"] != r["OP1_DIM3"])
        early = Signal(name="pool_attr_bad")
        m.d.sync += early.eq(bad)
        late = early | wide(taps)
        # out = (in + pad_a + pad_b - k) // s + 1, i.e. (out - 1) * s <= in + pads - k
        # < out * s, without a division or a negative number. The product from the
        # strides' words as given and without them (s = 1), the choice by the registered
        # tag in the second stage; the span from the pads' words as they are (absent pads
        # have words of 0, else the task is refused above): no tag comparison in front of
        # the multiplier and the adders
        strides_given = Signal(name="pool_strides_given")
        m.d.sync += strides_given.eq(given["strides"])
        for d, k, s, sb, pa, pb in ((1, kh, sh, body("strides", 0), body("pads", 0),
                                     body("pads", 2)),
                                    (2, kw, sw, body("strides", 1), body("pads", 1),
                                     body("pads", 3))):
            out_q = Signal(DIM_BITS, name=f"pool_out{d}")
            prod_q = Signal(2 * DIM_BITS, name=f"pool_prod{d}")
            span_q = Signal(DIM_BITS + 2, name=f"pool_span{d}")
            k_q = Signal(DIM_BITS, name=f"pool_k{d}")
            s_q = Signal(DIM_BITS, name=f"pool_s{d}")
            m.d.sync += [out_q.eq(r[f"OP1_DIM{d}"][:DIM_BITS]),
                         prod_q.eq(r[f"OP1_DIM{d}"][:DIM_BITS] * sb[:DIM_BITS]),
                         span_q.eq(r[f"OP0_DIM{d}"][:DIM_BITS] + pa[:DIM_BITS]
                                   + pb[:DIM_BITS]),
                         k_q.eq(k[:DIM_BITS]), s_q.eq(s[:DIM_BITS])]
            prod = Mux(strides_given, prod_q, out_q)
            late = late | (prod + k_q > span_q + s_q) | (span_q >= prod + k_q)
        bad = late
        return bad, {"kh": kh[:DIM_BITS], "kw": kw[:DIM_BITS], "sh": sh[:DIM_BITS],
                     "sw": sw[:DIM_BITS], "top": pads[0][:DIM_BITS],
                     "left": pads[1][:DIM_BITS]}
