"""The CSTL's shadow registers and their decode into the task the CSTL runs.

The register map is the shared compute map ``nem.taskformat.REGISTER_MAPS[Unit.CSTL]``
(indices imported, never written out here). As for the NMU (:mod:`npu.nmu.regs`) the
sequencer pulses ``clear`` (every register reads 0) and sends the task's writes one by one;
the decode is combinational from the shadow registers and gives the CSTL's walk view
(:func:`task_layout`) with the :class:`npu.nmu.model.Cause` of a task the CSTL refuses.

Only the registers the CSTL reads are kept (:func:`kept_registers`): OPCODE, NIN, NOUT and
ADDR_LO, ADDR_HI, LEVEL, ELEM, RANK, DIM0-3, STRIDE0-3 of operand slots 0 and 1.

What runs (:func:`decode`, the Python model of the decode), one input and one output of
the same shape, rank 0..4, both in L1:

* a unary elementwise opcode (``nem.opcodes.groups().unary``), i8 -> i8: every such op is
  ``out = table[in]`` through the task's 256-byte table (read on the unit's ``table``
  stream), so the opcode selects nothing else (``table`` set);
* ``cast`` from i8 to i8, i16 or i32: the code sign-extended (a value conversion, as the
  executor's cast: quantisation descriptors play no part), no table.

A shape is right-aligned onto four levels (outer levels of size 1, stride 0); dimensions
must fit 16 bits. The output's element strides become byte strides (``out_shift``: log2 of
its element bytes). Refusals: another opcode (``OPCODE``), other operand counts, types or
memories (``TYPE``), rank above 4, shapes that differ or a dimension of 65536 or more
(``LAYOUT``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from nem.elemtypes import elem_type
from nem.opcodes import groups
from nem.taskformat import ELEM_TYPES, LEVELS, OPCODES, REGISTER_MAPS, Unit
from npu.nmu.model import Cause

__all__ = ["LEVELS_WALKED", "CstlRegisters", "CstlTask", "decode", "kept_registers",
           "task_layout", "write_layout"]

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
#: Output element type code of a cast -> log2 of its bytes (the input is i8).
OUT_SHIFT = {ELEM_TYPES.index(name): (elem_type(name).bits // 8).bit_length() - 1
             for name in ("i8", "i16", "i32")}


@functools.cache
def unary_codes() -> tuple[int, ...]:
    """Opcode codes the CSTL runs through its table (the registry's unary elementwise)."""
    return tuple(sorted(OPCODES.index(name) for name in groups().unary))


def kept_registers() -> list[str]:
    """Names of the registers the CSTL keeps, in index order."""
    names = ["OPCODE", "NIN", "NOUT"]
    names += [f"OP{k}_{f}" for k in range(SLOTS) for f in FIELDS]
    return sorted(names, key=REGS.index)


def write_layout():
    return data.StructLayout({"index": 8, "value": 32})


def task_layout():
    """The CSTL's task: four loop levels (outermost first), byte addresses of the input
    ``x`` and the output ``y``, their byte strides; ``run``: both innermost element strides
    are 1 (the innermost level is read and written as one run of bytes); ``table``: the
    task reads a table and looks every byte up; ``out_shift``: log2 of the output's element
    bytes (the input byte sign-extended)."""
    return data.StructLayout({
        "dims": data.ArrayLayout(DIM_BITS, LEVELS_WALKED),
        "x_addr": 32, "xs": data.ArrayLayout(32, LEVELS_WALKED),
        "y_addr": 32, "ys": data.ArrayLayout(32, LEVELS_WALKED),
        "run": 1, "table": 1, "out_shift": 2, "cause": 4,
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
    out_shift: int
    cause: int


def _levels(rank, values, fill):
    """Right-align ``values`` (outermost first) onto the walk's levels."""
    return (fill,) * (LEVELS_WALKED - rank) + tuple(values[:rank])


def decode(regs: dict[str, int]) -> CstlTask:
    """What the CSTL makes of the registers ``regs`` (name -> value; missing ones read 0)."""
    r = {name: regs.get(name, 0) & 0xFFFFFFFF for name in kept_registers()}

    def op(k, f):
        return r[f"OP{k}_{f}"]

    is_unary = r["OPCODE"] in unary_codes()
    is_cast = r["OPCODE"] == CAST
    out_ok = op(1, "ELEM") in (OUT_SHIFT if is_cast else (I8,))
    cause = Cause.NONE
    rank = op(0, "RANK")
    if not (is_unary or is_cast):
        cause = Cause.OPCODE
    elif (r["NIN"], r["NOUT"]) != (1, 1) or op(0, "ELEM") != I8 or not out_ok or any(
            op(k, "LEVEL") != L1_LEVEL or op(k, "ADDR_HI") != 0 for k in range(SLOTS)):
        cause = Cause.TYPE
    elif rank > LEVELS_WALKED or op(1, "RANK") != rank or any(
            op(0, f"DIM{d}") != op(1, f"DIM{d}") or op(0, f"DIM{d}") >> DIM_BITS
            for d in range(rank)):
        cause = Cause.LAYOUT
    zeros = (0,) * LEVELS_WALKED
    if cause:
        return CstlTask(zeros, 0, zeros, 0, zeros, False, is_unary, 0, cause)
    shift = OUT_SHIFT[op(1, "ELEM")] if is_cast else 0
    dims = _levels(rank, [op(0, f"DIM{d}") for d in range(LEVELS_WALKED)], 1)
    xs = _levels(rank, [op(0, f"STRIDE{d}") for d in range(LEVELS_WALKED)], 0)
    ys = _levels(rank, [op(1, f"STRIDE{d}") for d in range(LEVELS_WALKED)], 0)
    ys = tuple((v << shift) & 0xFFFFFFFF for v in ys)
    return CstlTask(dims, op(0, "ADDR_LO"), xs, op(1, "ADDR_LO"), ys,
                    xs[-1] == 1 and ys[-1] == 1 << shift, is_unary, shift, Cause.NONE)


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
        is_unary = Signal()
        m.d.comb += is_unary.eq(0)
        with m.Switch(r["OPCODE"]):
            with m.Case(*unary_codes()):
                m.d.comb += is_unary.eq(1)
        is_cast = r["OPCODE"] == CAST
        shift = Signal(2)
        out_ok = Signal()
        with m.Switch(op(1, "ELEM")):
            for code, sh in OUT_SHIFT.items():
                with m.Case(code):
                    m.d.comb += [shift.eq(Mux(is_cast, sh, 0)), out_ok.eq(is_cast | (code == I8))]
        bad_type = (r["NIN"] != 1) | (r["NOUT"] != 1) | (op(0, "ELEM") != I8) | ~out_ok
        for k in range(SLOTS):
            bad_type = bad_type | (op(k, "LEVEL") != L1_LEVEL) | (op(k, "ADDR_HI") != 0)
        rank = op(0, "RANK")
        bad_layout = (rank > LEVELS_WALKED) | (op(1, "RANK") != rank)
        for d in range(LEVELS_WALKED):
            bad_layout = bad_layout | ((rank > d) & (
                (op(0, f"DIM{d}") != op(1, f"DIM{d}")) | (op(0, f"DIM{d}")[DIM_BITS:] != 0)))
        m.d.comb += t.table.eq(is_unary)
        with m.If(~is_unary & ~is_cast):
            m.d.comb += t.cause.eq(Cause.OPCODE)
        with m.Elif(bad_type):
            m.d.comb += t.cause.eq(Cause.TYPE)
        with m.Elif(bad_layout):
            m.d.comb += t.cause.eq(Cause.LAYOUT)
        with m.Else():
            m.d.comb += [t.x_addr.eq(op(0, "ADDR_LO")), t.y_addr.eq(op(1, "ADDR_LO")),
                         t.out_shift.eq(shift),
                         t.run.eq((t.xs[-1] == 1) & (t.ys[-1] == (1 << shift)))]
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
                                             t.xs[j].eq(op(0, f"STRIDE{d}")),
                                             t.ys[j].eq(op(1, f"STRIDE{d}") << shift)]
        return m
