"""The CSTL's shadow registers and their decode into the task the CSTL runs.

The register map is the shared compute map ``nem.taskformat.REGISTER_MAPS[Unit.CSTL]``
(indices imported, never written out here). As for the NMU (:mod:`npu.nmu.regs`) the
sequencer pulses ``clear`` (every register reads 0) and sends the task's writes one by one;
the decode is combinational from the shadow registers and gives the CSTL's walk view
(:func:`task_layout`) with the :class:`npu.nmu.model.Cause` of a task the CSTL refuses.

Only the registers the CSTL reads are kept (:func:`kept_registers`): OPCODE, NIN, NOUT and
ADDR_LO, ADDR_HI, LEVEL, ELEM, RANK, DIM0-3, STRIDE0-3 of operand slots 0 and 1.

What runs: the lookup-table opcodes and ``cast`` of :func:`npu.cstl.model.decode_task`,
one input and one output of the same shape, rank 0..4, both in L1:

* ``table``: a unary elementwise opcode or clamp (:func:`npu.cstl.model.table_opcodes`),
  i8 -> i8: ``out = table[in]`` through the task's 256-byte table at data offset ``TABLE``
  (read on the unit's ``table`` stream), so the opcode selects nothing else;
* ``cast`` i8 -> i8 / i16 / i32 (sign extension) and i16 / i32 -> i8 (saturation), no
  table.

The refusals and their order are the model's: an opcode the RTL does not run
(``OPCODE``; binary eltwise, pooling and reductions are not built yet), operand counts
(``TYPE``), per operand its memory (``TYPE``) then its rank or a dimension of 2**16 or
more (``LAYOUT``), the element types (``TYPE``), shapes that differ (``LAYOUT``), a table
task with ``TABLE`` = ``NO_TABLE`` (``REQUANT``). A table task with a table reads it even
when refused (``task.table``), so that the sequencer's fetch always completes.

A shape is right-aligned onto four levels (outer levels of size 1, stride 0); element
strides become byte strides (``in_shift`` / ``out_shift``: log2 of the element bytes).
:func:`decode` is the Python model of this decode, built on
:func:`npu.cstl.model.decode_task`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from nem.elemtypes import elem_type
from nem.taskformat import ELEM_TYPES, LEVELS, NO_TABLE, OPCODES, REGISTER_MAPS, Unit
from npu.cstl.model import CAST_TYPES, CstlUnsupported, decode_task, table_opcodes
from npu.nmu.model import Cause

__all__ = ["LEVELS_WALKED", "CstlRegisters", "CstlTask", "decode", "kept_registers",
           "table_codes", "task_layout", "write_layout"]

REGS = REGISTER_MAPS[Unit.CSTL]
#: Loop levels of the walk (operand ranks above this are refused).
LEVELS_WALKED = 4
#: Bits of a dimension (a larger one is refused).
DIM_BITS = 16
SLOTS = 2
FIELDS = ("ADDR_LO", "ADDR_HI", "LEVEL", "ELEM", "RANK",
          *(f"DIM{d}" for d in range(LEVELS_WALKED)),
          *(f"STRIDE{d}" for d in range(LEVELS_WALKED)))
L1_LEVEL = LEVELS.index("L1")
I8 = ELEM_TYPES.index("i8")
CAST = OPCODES.index("cast")
MASK = 0xFFFFFFFF
#: Element type -> log2 of its bytes, for the types a cast takes (``CAST_TYPES``).
SHIFT = {name: (elem_type(name).bits // 8).bit_length() - 1 for name in CAST_TYPES}


@functools.cache
def table_codes() -> tuple[int, ...]:
    """Opcode codes the CSTL runs through its table (:func:`npu.cstl.model.table_opcodes`);
    the sequencer fetches the table of exactly these tasks (when ``TABLE`` names one)."""
    return tuple(sorted(OPCODES.index(name) for name in table_opcodes()))


def kept_registers() -> list[str]:
    """Names of the registers the CSTL keeps, in index order."""
    names = ["OPCODE", "NIN", "NOUT", "TABLE"]
    names += [f"OP{k}_{f}" for k in range(SLOTS) for f in FIELDS]
    return sorted(names, key=REGS.index)


def write_layout():
    """One shadow-register write: the register's index in the compute map, its value."""
    return data.StructLayout({"index": 8, "value": 32})


def task_layout():
    """The CSTL's task: four loop levels (outermost first), byte addresses of the input
    ``x`` and the output ``y``, their byte strides; ``run``: both innermost element strides
    are 1 (the innermost level is read and written as one run of bytes); ``table``: the
    task reads a table (and looks every byte up); ``in_shift`` / ``out_shift``: log2 of the
    input's / output's element bytes."""
    return data.StructLayout({
        "dims": data.ArrayLayout(DIM_BITS, LEVELS_WALKED),
        "x_addr": 32, "xs": data.ArrayLayout(32, LEVELS_WALKED),
        "y_addr": 32, "ys": data.ArrayLayout(32, LEVELS_WALKED),
        "run": 1, "table": 1, "in_shift": 2, "out_shift": 2, "cause": 4,
    })


@dataclass(frozen=True)
class CstlTask:
    """The decode of a task (Python model of :class:`CstlRegisters`' ``task``)."""

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


def _levels(rank, values, fill):
    """Right-align ``values`` (outermost first) onto the walk's levels."""
    return (fill,) * (LEVELS_WALKED - rank) + tuple(values)


def decode(regs: dict[str, int]) -> CstlTask:
    """What the CSTL makes of the registers ``regs`` (name -> value; missing ones read 0):
    :func:`npu.cstl.model.decode_task` on the registers the CSTL keeps, in the walk's
    view, with ``OPCODE`` for what the RTL does not run yet."""
    r = {name: regs.get(name, 0) & MASK for name in kept_registers()}
    is_table = r["OPCODE"] in table_codes()
    zeros = (0,) * LEVELS_WALKED
    if not is_table and r["OPCODE"] != CAST:
        return CstlTask(zeros, 0, zeros, 0, zeros, False, False, 0, 0, Cause.OPCODE)
    try:
        work = decode_task(r)
    except CstlUnsupported as exc:
        return CstlTask(zeros, 0, zeros, 0, zeros, False,
                        is_table and r["TABLE"] != NO_TABLE, 0, 0, exc.cause)
    x, y = work.ins[0], work.out
    rank = len(y.shape)
    si, so = SHIFT[x.elem], SHIFT[y.elem]
    xs = _levels(rank, [(v << si) & MASK for v in x.strides], 0)
    ys = _levels(rank, [(v << so) & MASK for v in y.strides], 0)
    return CstlTask(_levels(rank, y.shape, 1), x.addr, xs, y.addr, ys,
                    xs[-1] == 1 << si and ys[-1] == 1 << so, is_table, si, so, Cause.NONE)


class CstlRegisters(wiring.Component):
    """Shadow registers of the CSTL and the combinational task decode.

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

    def __init__(self):
        super().__init__({
            "clear": In(1),
            "write": In(stream.Signature(write_layout())),
            "task": Out(task_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        r = {name: Signal(32, name=name.lower()) for name in kept_registers()}
        m.d.comb += self.write.ready.eq(1)
        with m.If(self.clear):
            m.d.sync += [s.eq(0) for s in r.values()]
        with m.Elif(self.write.valid):
            with m.Switch(self.write.payload.index):
                for name, s in r.items():
                    with m.Case(REGS.index(name)):
                        m.d.sync += s.eq(self.write.payload.value)

        def op(k, f):
            return r[f"OP{k}_{f}"]

        t = self.task
        is_table = Signal()
        with m.Switch(r["OPCODE"]):
            with m.Case(*table_codes()):
                m.d.comb += is_table.eq(1)
        is_cast = r["OPCODE"] == CAST
        # element types: log2 of the bytes of a cast type, and whether it is one
        shifts, known = [Signal(2, name=f"shift{k}") for k in range(SLOTS)], []
        for k in range(SLOTS):
            ok = Signal(name=f"cast_type{k}")
            with m.Switch(op(k, "ELEM")):
                for name, sh in SHIFT.items():
                    with m.Case(ELEM_TYPES.index(name)):
                        m.d.comb += [shifts[k].eq(sh), ok.eq(1)]
            known.append(ok)
        i8 = [op(k, "ELEM") == I8 for k in range(SLOTS)]
        elem_ok = Mux(is_cast, (i8[0] & known[1]) | (known[0] & i8[1]), i8[0] & i8[1])

        def mem_bad(k):
            return (op(k, "LEVEL") != L1_LEVEL) | (op(k, "ADDR_HI") != 0)

        def rank_bad(k):
            bad = op(k, "RANK") > LEVELS_WALKED
            for d in range(LEVELS_WALKED):
                bad = bad | ((op(k, "RANK") > d) & (op(k, f"DIM{d}")[DIM_BITS:] != 0))
            return bad

        rank = op(0, "RANK")
        differ = op(1, "RANK") != rank
        for d in range(LEVELS_WALKED):
            differ = differ | ((rank > d) & (op(0, f"DIM{d}") != op(1, f"DIM{d}")))
        has_table = r["TABLE"] != NO_TABLE
        m.d.comb += t.table.eq(is_table & has_table)
        with m.If(~is_table & ~is_cast):
            m.d.comb += t.cause.eq(Cause.OPCODE)
        with m.Elif((r["NIN"] != 1) | (r["NOUT"] != 1) | mem_bad(0)):
            m.d.comb += t.cause.eq(Cause.TYPE)
        with m.Elif(rank_bad(0)):
            m.d.comb += t.cause.eq(Cause.LAYOUT)
        with m.Elif(mem_bad(1)):
            m.d.comb += t.cause.eq(Cause.TYPE)
        with m.Elif(rank_bad(1)):
            m.d.comb += t.cause.eq(Cause.LAYOUT)
        with m.Elif(~elem_ok):
            m.d.comb += t.cause.eq(Cause.TYPE)
        with m.Elif(differ):
            m.d.comb += t.cause.eq(Cause.LAYOUT)
        with m.Elif(is_table & ~has_table):
            m.d.comb += t.cause.eq(Cause.REQUANT)
        with m.Else():
            si, so = shifts
            m.d.comb += [t.x_addr.eq(op(0, "ADDR_LO")), t.y_addr.eq(op(1, "ADDR_LO")),
                         t.in_shift.eq(si), t.out_shift.eq(so),
                         t.run.eq((t.xs[-1] == (1 << si)) & (t.ys[-1] == (1 << so)))]
            # level j of the walk is dimension j - (4 - rank) of the operands
            with m.Switch(rank):
                for rk in range(LEVELS_WALKED + 1):
                    with m.Case(rk):
                        for j in range(LEVELS_WALKED):
                            d = j - (LEVELS_WALKED - rk)
                            if d < 0:
                                m.d.comb += t.dims[j].eq(1)
                            else:
                                m.d.comb += [t.dims[j].eq(op(0, f"DIM{d}")),
                                             t.xs[j].eq(op(0, f"STRIDE{d}") << si),
                                             t.ys[j].eq(op(1, f"STRIDE{d}") << so)]
        return m
