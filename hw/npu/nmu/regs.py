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

    #: Cycles from a register write (or ``clear``) to ``task`` holding its decode.
    LATENCY = 1

    def __init__(self):
        super().__init__({
            "clear": In(1),
            "write": In(stream.Signature(write_layout())),
            "task": Out(task_fields_layout()),
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

        def early(name, value):
            """A function of the shadow registers, registered (the decode's first stage)."""
            sig = Signal(name=name)
            m.d.sync += sig.eq(value)
            return sig

        t = self.task
        nin, nout, opcode = r["NIN"], r["NOUT"], r["OPCODE"]
        code = {n: ELEM_TYPES.index(n) for n in ("i8", *OUT_BYTES)}

        def out_slot(three, f):
            """Field ``f`` of the output operand: slot 3 with three inputs, else slot 2."""
            return Mux(three, op(3, f), op(2, f))

        # first stage: from the shadow registers into flags
        three_c = nin == 3
        out_elem_c = out_slot(three_c, "ELEM")
        ry_c = out_slot(three_c, "RANK")
        bad_count = (nout != 1) | ~((nin == 2) |
                                    (three_c & (opcode != OPCODES.index("matmul"))))
        out_ok = functools.reduce(operator.or_, [out_elem_c == code[n] for n in OUT_BYTES])
        bad_elem = (op(0, "ELEM") != code["i8"]) | (op(1, "ELEM") != code["i8"]) | \
            (three_c & (op(2, "ELEM") != code["i32"])) | ~out_ok
        bad_level = 0
        for k in range(SLOTS):
            used = (k <= 2) | three_c
            bad_level = bad_level | (used & ((op(k, "LEVEL") != 2) | (op(k, "ADDR_HI") != 0)))
        ra_c, rb_c = op(0, "RANK"), op(1, "RANK")
        three = early("three", three_c)
        is_conv = early("is_conv", opcode == OPCODES.index("conv2d"))
        bad_opcode = early("bad_opcode", opcode > nmu_last_code())
        bad_type = early("bad_type", bad_count | bad_elem | bad_level)
        out_i32 = early("out_i32", out_elem_c == code["i32"])
        out_i16 = early("out_i16", out_elem_c == code["i16"])
        rank3 = {0: early("ra3", ra_c == 3), 1: early("rb3", rb_c == 3),
                 "out": early("ry3", ry_c == 3)}
        conv_ranks_ok = early("conv_ranks_ok", (ra_c == 4) & (rb_c == 4) & (ry_c == 4))
        mm_rank_ok = early("mm_rank_ok", (ra_c >= 2) & (ra_c <= 3) & (rb_c >= 2) &
                           (rb_c <= 3) & (ry_c == Mux(ra_c > rb_c, ra_c, rb_c)))
        brank1 = early("brank1", op(2, "RANK") == 1)
        brank2 = early("brank2", op(2, "RANK") == 2)

        # second stage: the fields and the layout checks
        def out(f):
            return out_slot(three, f)

        def last(k, field, j):
            """Field of dimension rank-1-j (gemm / matmul operands of rank 2 or 3)."""
            if k == "out":
                return Mux(rank3[k], out(f"{field}{2 - j}"), out(f"{field}{1 - j}"))
            return Mux(rank3[k], op(k, f"{field}{2 - j}"), op(k, f"{field}{1 - j}"))

        mats = Signal(16)
        m.d.comb += mats.eq(Mux(rank3["out"], out("DIM0"), 1))
        steps, bad_batch = [], 0
        for k in (0, 1, "out"):
            d0 = out("DIM0") if k == "out" else op(k, "DIM0")
            s0 = out("STRIDE0") if k == "out" else op(k, "STRIDE0")
            batched = rank3[k] & (d0 != 1)
            steps.append(Mux(batched, s0, 0))
            bad_batch = bad_batch | (batched & (d0 != mats))
        bad_rank = Mux(is_conv, ~conv_ranks_ok, ~mm_rank_ok | bad_batch)
        attr = {name: r[reg] for name, reg in conv_attr_registers().items()}
        groups = attr["groups"]
        bad_groups = is_conv & (groups != 1)

        def stride(k, d):
            return op(k, f"STRIDE{d}")

        def ostride(d):
            return out(f"STRIDE{d}")

        inner = Mux(is_conv, (stride(0, 3) != 1) | (stride(1, 3) != 1) | (ostride(3) != 1),
                    (last(0, "STRIDE", 0) != 1) | (last(1, "STRIDE", 0) != 1)
                    | (last("out", "STRIDE", 0) != 1))
        cout = Mux(is_conv, op(1, "DIM3"), last(1, "DIM", 0))
        rows_m = last(0, "DIM", 1)
        pix_bias = ~is_conv & brank2 & (op(2, "DIM0") != 1) & \
            (op(2, "DIM0") == rows_m) & (op(2, "DIM1") == cout)
        bias_ok = (brank1 & (op(2, "DIM0") == cout)) | \
            (brank2 & (op(2, "DIM0") == 1) & (op(2, "DIM1") == cout)) | pix_bias
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
        return m
