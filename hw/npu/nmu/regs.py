"""The NMU's shadow registers and their decode into the task the NMU runs.

The compute register map is ``nem.taskformat.REGISTER_MAPS[Unit.NMU]`` (indices imported,
never written out here). The sequencer writes a task's registers one by one (``write``,
as the task record lists them, after ``clear``: an unwritten register reads 0, as in
``nem.binder.plan_from_binary``); the decode, in two stages (:attr:`NmuRegisters.LATENCY`),
gives the NMU's convolution view (:func:`npu.nmu.agu.task_fields_layout`) with the
:class:`npu.nmu.model.Cause` of a task the NMU refuses. The Python model is
:func:`npu.nmu.model.decode_task`.

Only the registers the NMU reads are kept: OPCODE, NIN, NOUT; ADDR_LO/HI, LEVEL, ELEM,
RANK, DIM0-3 and STRIDE0-3 of operand slots 0-3 (gemm / matmul operands of rank 3 are a
batch of products, a batch of 1 broadcast); and the conv2d attribute words the NMU
uses, at the positions ``nem.taskformat.attr_layout`` gives conv2d's registry attributes
(:func:`conv_attr_registers`: pads ATTR1-4, strides ATTR6-7, dilations ATTR9-10, groups
ATTR12 with the shipped registry).
"""

from __future__ import annotations

import functools
import operator

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from nem.opcodes import groups
from nem.registry import load_registry
from nem.taskformat import ELEM_TYPES, OPCODES, REGISTER_MAPS, Unit, attr_layout
from npu.nmu.agu import task_fields_layout
from npu.nmu.model import OUT_BYTES, Cause
from npu.shadow import WRITE_REGISTERS, ShadowRegisters

__all__ = ["NmuRegisters", "conv_attr_registers", "kept_registers", "write_layout"]

REGS = REGISTER_MAPS[Unit.NMU]
SLOTS = 4
FIELDS = ("ADDR_LO", "ADDR_HI", "LEVEL", "ELEM", "RANK", *(f"DIM{d}" for d in range(4)),
          *(f"STRIDE{d}" for d in range(4)))


@functools.cache
def conv_attr_registers() -> dict[str, str]:
    """The ATTR registers the NMU reads for conv2d, by what they hold: the first two body
    words of pads (top, left), strides (h, w) and dilations (h, w), and groups."""
    op = load_registry()["conv2d"]
    slots = {s.name: s for s in attr_layout("conv2d", [(a.name, a.type) for a in op.attributes])}
    pads, strides, dils = slots["pads"].body, slots["strides"].body, slots["dilations"].body
    return {name: f"ATTR{j}" for name, j in (
        ("pad_top", pads), ("pad_left", pads + 1), ("stride_h", strides),
        ("stride_w", strides + 1), ("dil_h", dils), ("dil_w", dils + 1),
        ("groups", slots["groups"].body))}


def kept_registers():
    """Names of the registers the NMU keeps, in index order."""
    names = ["OPCODE", "NIN", "NOUT"]
    names += [f"OP{k}_{f}" for k in range(SLOTS) for f in FIELDS]
    names += list(conv_attr_registers().values())
    return sorted(names, key=REGS.index)


def nmu_last_code():
    """The largest NMU opcode code: the NMU's opcodes (``nem.opcodes.groups().nmu``) are
    codes 0..n-1, so one comparison refuses every other opcode."""
    codes = sorted(OPCODES.index(name) for name in groups().nmu)
    if codes != list(range(len(codes))):
        raise ValueError(f"the NMU's opcode codes {codes} are not 0..{len(codes) - 1}")
    return codes[-1]


def write_layout():
    return data.StructLayout({"index": 8, "value": 32})


class NmuRegisters(wiring.Component):
    """Shadow registers of the NMU and the task decode.

    The decode's first stage registers what selects the fields (three operands or two,
    the opcode, the ranks, the output type) and the type checks; the second selects the
    fields and checks the layout. ``task`` is the decode of the registers as they were
    :attr:`LATENCY` cycles earlier.

    Attributes
    ----------
    clear : Signal, in
        Pulse: every register to 0 (before a task's writes).
    write : stream of {"index": 8, "value": 32}, in (always ready)
        One register write; indices the NMU does not read are ignored.
    task : Signal(task_fields_layout()), out
        The decoded task; ``task.cause`` is non-zero when the NMU refuses it.
    """

    #: Cycles from a register write (or ``clear``) to ``task`` holding its decode: the
    #: write's register (:data:`npu.shadow.WRITE_REGISTERS`), then the decode's.
    LATENCY = WRITE_REGISTERS + 1

    def __init__(self):
        super().__init__({
            "clear": In(1),
            "write": In(stream.Signature(write_layout())),
            "task": Out(task_fields_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        # comparisons of a register with a constant are flags set at the write
        # (:class:`npu.shadow.ShadowRegisters`); comparisons of two registers are in the
        # first stage's registers: the second stage selects among one-bit flags
        shadow = ShadowRegisters(REGS, kept_registers())
        r = shadow.r
        eq, nz = shadow.equals, shadow.nonzero

        def op(k, f):
            return r[f"OP{k}_{f}"]

        def early(name, value):
            """A function of the shadow registers, registered (the decode's first stage)."""
            sig = Signal(name=name)
            m.d.sync += sig.eq(value)
            return sig

        t = self.task
        code = {n: ELEM_TYPES.index(n) for n in ("i8", *OUT_BYTES)}

        def out_slot(three, f):
            """Field ``f`` of the output operand: slot 3 with three inputs, else slot 2."""
            return Mux(three, op(3, f), op(2, f))

        def out_is(three, f, value):
            """The output operand's ``f`` is ``value`` (a flag of slot 3 or 2)."""
            return Mux(three, eq(f"OP3_{f}", value), eq(f"OP2_{f}", value))

        # first stage: from the shadow registers' flags into flags
        three_c = eq("NIN", 3)
        bad_count = ~eq("NOUT", 1) | ~(eq("NIN", 2) |
                                      (three_c & ~eq("OPCODE", OPCODES.index("matmul"))))
        out_ok = functools.reduce(operator.or_,
                                  [out_is(three_c, "ELEM", code[n]) for n in OUT_BYTES])
        bad_elem = ~eq("OP0_ELEM", code["i8"]) | ~eq("OP1_ELEM", code["i8"]) | \
            (three_c & ~eq("OP2_ELEM", code["i32"])) | ~out_ok
        bad_level = 0
        for k in range(SLOTS):
            used = (k <= 2) | three_c
            bad_level = bad_level | (used & (~eq(f"OP{k}_LEVEL", 2) | nz(f"OP{k}_ADDR_HI")))
        three = early("three", three_c)
        is_conv = early("is_conv", eq("OPCODE", OPCODES.index("conv2d")))
        bad_opcode = early("bad_opcode",
                           shadow.flag("OPCODE", "past", lambda v: v > nmu_last_code()))
        bad_type = early("bad_type", bad_count | bad_elem | bad_level)
        out_i32 = early("out_i32", out_is(three_c, "ELEM", code["i32"]))
        out_i16 = early("out_i16", out_is(three_c, "ELEM", code["i16"]))
        ra3, rb3 = eq("OP0_RANK", 3), eq("OP1_RANK", 3)
        rank3 = {0: early("ra3", ra3), 1: early("rb3", rb3),
                 "out": early("ry3", out_is(three_c, "RANK", 3))}
        conv_ranks_ok = early("conv_ranks_ok", eq("OP0_RANK", 4) & eq("OP1_RANK", 4)
                              & out_is(three_c, "RANK", 4))
        # gemm / matmul: ranks 2 or 3, the output's the larger
        mm_rank_ok = early("mm_rank_ok", (eq("OP0_RANK", 2) | ra3) & (eq("OP1_RANK", 2) | rb3)
                           & Mux(ra3 | rb3, out_is(three_c, "RANK", 3),
                                 out_is(three_c, "RANK", 2)))
        brank1 = early("brank1", eq("OP2_RANK", 1))
        brank2 = early("brank2", eq("OP2_RANK", 2))
        # the comparisons of two registers the second stage picks from: a matmul
        # operand's batch against the output's (its first dimension, cut to 16 bits, as
        # ``mats``), the bias's dimensions against the rows and the output channels
        batch_eq = {(k, o): early(f"batch_eq{k}_{o}", op(k, "DIM0") == op(o, "DIM0")[:16])
                    for k in (0, 1) for o in (2, 3)}
        rows_eq = {d: early(f"bias_rows_eq{d}", op(2, "DIM0") == op(0, f"DIM{d}"))
                   for d in (0, 1)}
        cout_eq = {(b, d): early(f"bias{b}_cout_eq{d}", op(2, f"DIM{b}") == op(1, f"DIM{d}"))
                   for b in (0, 1) for d in (1, 2, 3)}

        # second stage: the fields and the layout checks
        def out(f):
            return out_slot(three, f)

        def last(k, field, j):
            """Field of dimension rank-1-j (gemm / matmul operands of rank 2 or 3)."""
            if k == "out":
                return Mux(rank3[k], out(f"{field}{2 - j}"), out(f"{field}{1 - j}"))
            return Mux(rank3[k], op(k, f"{field}{2 - j}"), op(k, f"{field}{1 - j}"))

        def last_is(k, field, j, value):
            """``last(k, field, j) == value``, from the flags."""
            if k == "out":
                return Mux(rank3[k], out_is(three, f"{field}{2 - j}", value),
                           out_is(three, f"{field}{1 - j}", value))
            return Mux(rank3[k], eq(f"OP{k}_{field}{2 - j}", value),
                       eq(f"OP{k}_{field}{1 - j}", value))

        mats = Signal(16)
        m.d.comb += mats.eq(Mux(rank3["out"], out("DIM0"), 1))
        steps, bad_batch = [], 0
        for k in (0, 1, "out"):
            if k == "out":
                d0_one = out_is(three, "DIM0", 1)
                # the output's first dimension against itself cut to 16 bits
                d0_mats = Mux(rank3["out"], ~Mux(three, shadow.above("OP3_DIM0", 16),
                                                  shadow.above("OP2_DIM0", 16)), d0_one)
                s0 = out("STRIDE0")
            else:
                d0_one = eq(f"OP{k}_DIM0", 1)
                d0_mats = Mux(rank3["out"], Mux(three, batch_eq[k, 3], batch_eq[k, 2]), d0_one)
                s0 = op(k, "STRIDE0")
            batched = rank3[k] & ~d0_one
            steps.append(Mux(batched, s0, 0))
            bad_batch = bad_batch | (batched & ~d0_mats)
        bad_rank = Mux(is_conv, ~conv_ranks_ok, ~mm_rank_ok | bad_batch)
        attr = {name: r[reg] for name, reg in conv_attr_registers().items()}
        bad_groups = is_conv & ~eq(conv_attr_registers()["groups"], 1)

        def stride(k, d):
            return op(k, f"STRIDE{d}")

        def ostride(d):
            return out(f"STRIDE{d}")

        inner = Mux(is_conv, ~eq("OP0_STRIDE3", 1) | ~eq("OP1_STRIDE3", 1)
                    | ~out_is(three, "STRIDE3", 1),
                    ~last_is(0, "STRIDE", 0, 1) | ~last_is(1, "STRIDE", 0, 1)
                    | ~last_is("out", "STRIDE", 0, 1))
        cout = Mux(is_conv, op(1, "DIM3"), last(1, "DIM", 0))

        def is_cout(b):
            """The bias's dimension ``b`` equals ``cout``."""
            return Mux(is_conv, cout_eq[b, 3], Mux(rank3[1], cout_eq[b, 2], cout_eq[b, 1]))

        b0_one = eq("OP2_DIM0", 1)
        pix_bias = ~is_conv & brank2 & ~b0_one & Mux(rank3[0], rows_eq[1], rows_eq[0]) & \
            is_cout(1)
        bias_ok = (brank1 & is_cout(0)) | (brank2 & b0_one & is_cout(1)) | pix_bias
        bad_bias = three & ~bias_ok

        with m.If(bad_opcode):
            m.d.comb += t.cause.eq(Cause.OPCODE)
        with m.Elif(bad_type):
            m.d.comb += t.cause.eq(Cause.TYPE)
        with m.Elif(bad_rank | bad_groups | inner | bad_bias):
            m.d.comb += t.cause.eq(Cause.LAYOUT)

        m.d.comb += [
            t.cin.eq(Mux(is_conv, op(0, "DIM3"), last(0, "DIM", 0))),
            t.cout.eq(cout),
            t.x_addr.eq(op(0, "ADDR_LO")), t.w_addr.eq(op(1, "ADDR_LO")),
            t.y_addr.eq(out("ADDR_LO")),
            t.has_bias.eq(three & ~pix_bias), t.pix_bias.eq(three & pix_bias),
            t.b_mstride.eq(Mux(three & pix_bias, stride(2, 0), 0)),
            t.b_addr.eq(Mux(three, op(2, "ADDR_LO"), 0)),
            t.b_stride.eq(Mux(three, Mux(brank2, stride(2, 1), stride(2, 0)), 0)),
            t.out_bytes.eq(Mux(out_i32, 4, Mux(out_i16, 2, 1))),
            t.raw.eq(out_i32),
        ]
        with m.If(is_conv):
            m.d.comb += [
                t.batch.eq(op(0, "DIM0")), t.h.eq(op(0, "DIM1")), t.w.eq(op(0, "DIM2")),
                t.kh.eq(op(1, "DIM0")), t.kw.eq(op(1, "DIM1")),
                t.oh.eq(out("DIM1")), t.ow.eq(out("DIM2")),
                *[t.xs[d].eq(stride(0, d)) for d in range(3)],
                *[t.ws[d].eq(stride(1, d)) for d in range(3)],
                *[t.ys[d].eq(ostride(d)) for d in range(3)],
                t.pad_top.eq(attr["pad_top"]), t.pad_left.eq(attr["pad_left"]),
                t.stride_h.eq(attr["stride_h"]), t.stride_w.eq(attr["stride_w"]),
                t.dil_h.eq(attr["dil_h"]), t.dil_w.eq(attr["dil_w"]), t.mats.eq(1),
            ]
        with m.Else():  # gemm / matmul: M x 1 pixels, K input channels, a 1 x 1 kernel
            m.d.comb += [
                t.batch.eq(1), t.h.eq(last(0, "DIM", 1)), t.w.eq(1), t.kh.eq(1), t.kw.eq(1),
                t.oh.eq(last(0, "DIM", 1)), t.ow.eq(1),
                t.xs[1].eq(last(0, "STRIDE", 1)), t.ws[2].eq(last(1, "STRIDE", 1)),
                t.ys[1].eq(last("out", "STRIDE", 1)),
                t.stride_h.eq(1), t.stride_w.eq(1), t.dil_h.eq(1), t.dil_w.eq(1),
                t.mats.eq(mats), t.x_mat.eq(steps[0]), t.w_mat.eq(steps[1]),
                t.y_mat.eq(steps[2]),
            ]
        shadow.elaborate_writes(m, self.clear, self.write, registered=True)
        return m
