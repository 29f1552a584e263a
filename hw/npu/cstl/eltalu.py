"""The CSTL's binary eltwise ALU: ``lanes`` pairs of i8 codes a cycle through a pipeline.

Computes exactly :func:`nem.numerics.eltwise_int8` for an entry within
:data:`npu.cstl.model.ENTRY_RANGES`::

    da = qa - za, db = qb - zb
    add/sub/min/max: r = op(rescale(da << L, ma, ta), rescale(db << L, mb, tb))
    mul:             r = da * db
    y = clamp(rescale(r, my, ty) + zy, lo, hi)

with ``rescale(v, m, t) = (v * m + 2**(t-1)) >> t``, computed as ``q = (v * m) >> (t-1)``
then ``(q + 1) >> 1`` (equal by nested floors, as :mod:`npu.cstl.requant`), the output's
zero point added with that rounding: ``(q + 2*zy + 1) >> 1``. Widths are exact on the
entry ranges: ``|da << L| < 2**28``, ``|v * m| < 2**59``, ``|r| < 2**60``,
``|r * my| < 2**91``.

Stages (:data:`LATENCY` in all, each a register level, no cycle holds more than one
multiplier or one adder or one barrel shift): the operands; ``da``, ``db`` and their
shifts; the input rescales' products (:func:`npu.product.staged_product`, the mul's
``da * db`` beside them); the shift by ``t - 1``; the rounding; the op; the output
rescale's product; its shift; its rounding with the zero point; the clamp.

Protocol: ``en`` advances every stage at once (the caller holds it low to stall); an
input with ``i_valid`` enters with ``en``, and leaves on ``o`` with ``o_valid`` after
:data:`LATENCY` advancing cycles, with its ``tag``. ``op`` (:data:`npu.cstl.regs.ELT_OPS`)
and ``entry`` must hold while anything is in the pipeline (``busy``).
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from nem.taskformat import ELTWISE_ENTRY
from npu.cstl.regs import ELT_OPS
from npu.dsp import registered_product
from npu.product import product_latency, staged_product

__all__ = ["ENTRY_WORDS", "LATENCY", "EltAlu", "entry_layout"]

#: The eltwise entry's fields in the order of its words on the CSTL's ``table`` stream.
ENTRY_WORDS = tuple(sorted(ELTWISE_ENTRY.word_fields(), key=ELTWISE_ENTRY.word_fields().get))

#: Bits of ``(q - z) << L`` (|q - z| <= 255, L <= 20: below 2**28 in magnitude).
SHIFTED_BITS = 29
#: Bits of a multiplier (0 .. 2**31 - 1).
MULT_BITS = 31
#: Bits of ``r`` (a sum of two input rescales, each below 2**58 in magnitude).
R_BITS = 61
_IN_PRODUCT = product_latency(SHIFTED_BITS, MULT_BITS)
_OUT_PRODUCT = product_latency(R_BITS, MULT_BITS)
#: Register stages from an input to ``o``: operands, shifted differences, the input
#: product, shift, rounding, op, the output product, shift, rounding, clamp.
LATENCY = 2 + _IN_PRODUCT + 3 + _OUT_PRODUCT + 3


def entry_layout():
    """The entry's words as the ALU takes them (one 32-bit word per field)."""
    return data.StructLayout({name: 32 for name in ENTRY_WORDS})


class EltAlu(wiring.Component):
    """The pipelined binary eltwise ALU (see the module).

    Parameters
    ----------
    lanes : int
        Pairs of codes per input (1 or more).
    tag_width : int
        Bits that travel with an input to ``o_tag`` (1 or more).

    Attributes
    ----------
    en, i_valid : Signal, in
    i : {"a", "b": lanes x 8, "tag": tag_width}, in
    op : Signal(3), in
    entry : :func:`entry_layout`, in
    o_valid : Signal, out
    o : lanes x 8 (the i8 results), out
    o_tag : Signal(tag_width), out
    busy : Signal, out
        A stage holds an input.
    """

    def __init__(self, *, lanes, tag_width):
        if not isinstance(lanes, int) or lanes < 1:
            raise ValueError(f"lanes must be a positive integer, not {lanes!r}")
        if not isinstance(tag_width, int) or tag_width < 1:
            raise ValueError(f"tag_width must be a positive integer, not {tag_width!r}")
        self.lanes, self.tag_width = lanes, tag_width
        codes = data.ArrayLayout(8, lanes)
        super().__init__({
            "en": In(1),
            "i_valid": In(1),
            "i": In(data.StructLayout({"a": codes, "b": codes, "tag": tag_width})),
            "op": In(3),
            "entry": In(entry_layout()),
            "o_valid": Out(1),
            "o": Out(codes),
            "o_tag": Out(tag_width),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        en, e = self.en, self.entry

        def reg(shape, name, value):
            r = Signal(shape, name=name)
            with m.If(en):
                m.d.sync += r.eq(value)
            return r

        # the valid bits and tags, one per stage
        valid, tag = self.i_valid, self.i.tag
        valids = []
        for s in range(LATENCY):
            valid = reg(1, f"v{s}", valid)
            tag = reg(self.tag_width, f"tag{s}", tag)
            valids.append(valid)
        m.d.comb += [self.o_valid.eq(valid), self.o_tag.eq(tag)]
        # ``busy`` is the OR of the valid bits, kept in a register of its own: the valid
        # bits only move with ``en``, and then to ``i_valid`` and all but the last stage's
        # bits. A wide OR after the registers was the head of the board's worst path (the
        # CSTL's drain -> its store's flush -> the L1 write arbitration).
        busy = Signal(name="busy_q")
        with m.If(en):
            entering = self.i_valid
            for v in valids[:-1]:
                entering = entering | v
            m.d.sync += busy.eq(entering)
        m.d.comb += self.busy.eq(busy)

        def i8(word):
            return word[:8].as_signed()

        def delay(value, stages, name):
            for s in range(stages):
                value = reg(value.shape(), f"{name}_d{s}", value)
            return value

        ls = e.left_shift[:5]
        for k in range(self.lanes):
            qa = reg(signed(8), f"qa{k}", self.i.a[k])
            qb = reg(signed(8), f"qb{k}", self.i.b[k])
            da = reg(signed(10), f"da{k}", qa - i8(e.a_zero_point))
            db = reg(signed(10), f"db{k}", qb - i8(e.b_zero_point))
            sa = reg(signed(SHIFTED_BITS), f"sa{k}", (qa - i8(e.a_zero_point)) << ls)
            sb = reg(signed(SHIFTED_BITS), f"sb{k}", (qb - i8(e.b_zero_point)) << ls)
            pa = staged_product(m, sa, e.a_multiplier[:MULT_BITS], en=en, name=f"pa{k}",
                                platform=platform)
            pb = staged_product(m, sb, e.b_multiplier[:MULT_BITS], en=en, name=f"pb{k}",
                                platform=platform)
            # the mul's product of the differences, in its first stage, kept beside the
            # rescales until the op
            dm = delay(registered_product(m, da, db, en=en, name=f"dm{k}", platform=platform),
                       _IN_PRODUCT + 1, f"dm{k}")
            qsa = reg(signed(R_BITS), f"qsa{k}", pa >> (e.a_shift[:6] - 1)[:6])
            qsb = reg(signed(R_BITS), f"qsb{k}", pb >> (e.b_shift[:6] - 1)[:6])
            va = reg(signed(R_BITS), f"va{k}", (qsa + 1) >> 1)
            vb = reg(signed(R_BITS), f"vb{k}", (qsb + 1) >> 1)
            r = Signal(signed(R_BITS), name=f"r{k}")
            with m.If(en):
                with m.Switch(self.op):
                    with m.Case(ELT_OPS["add"]):
                        m.d.sync += r.eq(va + vb)
                    with m.Case(ELT_OPS["sub"]):
                        m.d.sync += r.eq(va - vb)
                    with m.Case(ELT_OPS["min"]):
                        m.d.sync += r.eq(Mux(va < vb, va, vb))
                    with m.Case(ELT_OPS["max"]):
                        m.d.sync += r.eq(Mux(va > vb, va, vb))
                    with m.Case(ELT_OPS["mul"]):
                        m.d.sync += r.eq(dm)
            py = staged_product(m, r, e.y_multiplier[:MULT_BITS], en=en, name=f"py{k}",
                                platform=platform)
            qy = reg(signed(R_BITS + MULT_BITS), f"qy{k}", py >> (e.y_shift[:6] - 1)[:6])
            y = reg(signed(R_BITS + MULT_BITS), f"y{k}",
                    (qy + ((i8(e.y_zero_point) << 1) + 1)) >> 1)
            lo, hi = i8(e.lo), i8(e.hi)
            out = reg(8, f"res{k}", Mux(y < lo, lo, Mux(y > hi, hi, y))[:8])
            m.d.comb += self.o[k].eq(out)
        return m
