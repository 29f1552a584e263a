"""Requantising post-stage: int32 accumulators -> int8/uint8/int16 (first piece of the CSTL).

Implements exactly :func:`nem.numerics.requantize` (formulas in ``docs/numerics.md``)::

    p = a * m                      64-bit exact
    r = (p + 2**(t-1)) >> t        one rounding, half toward +infinity
    y = clamp(r + z_y, lo, hi)

computed as ``q = p >> (t-1)``, then ``y = clamp((q + 2*z_y + 1) >> 1, lo, hi)``: the same
value (``floor((p + 2**(t-1)) / 2**t) = floor((floor(p / 2**(t-1)) + 1) / 2)``), with the
rounding add after the shift, where it shares the zero point's add.

for ``lanes`` accumulators per transfer. Per-channel ``(m, t)`` live in a table written
through the ``params`` port; row ``r`` holds channels ``r*lanes .. r*lanes+lanes-1``, and
an input transfer names the row its lanes belong to. ``zero_point``, ``lo`` and ``hi``
are per tensor (ports, held by the caller from a transfer's entry until it leaves; the
clamp's thresholds are registered from them a cycle before the last stage).

Protocol and timing
-------------------
``i`` and ``o`` are streams. The pipeline has :data:`LATENCY` register stages (table
read; the 63-bit product over :data:`PRODUCT` stages of :func:`npu.product.staged_product`,
no cycle with more than one multiplier or adder; shift; rounding with zero point and
clamp): a result leaves :data:`LATENCY` cycles after it entered when nothing stalls, and
the pipeline accepts one transfer per cycle.
The whole pipeline advances when its output register is empty or being read
(``i.ready = ~o.valid | o.ready``), so back-pressure stalls every stage at once.

With ``tag_width`` > 0 an input transfer also carries ``tag`` bits (for the NMU: where the
lanes go in L1), which leave on ``o_tag`` together with the transfer's results on ``o``.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from nem.elemtypes import elem_type
from nem.numerics import REQUANT_TYPES
from npu.product import product_latency, staged_product

__all__ = ["LATENCY", "OUT_TYPES", "PRODUCT", "RequantStage", "param_layout"]

#: Output type -> (bits, signed, lo, hi), for the requantiser's types (``nem.numerics``).
OUT_TYPES = {name: (elem_type(name).bits, elem_type(name).signed, *elem_type(name).range)
             for name in REQUANT_TYPES}


#: Register stages of the accumulator-times-multiplier product (32 x 31 bits).
PRODUCT = product_latency(32, 31)
#: Register stages from ``i`` to ``o``: the table read, the product, the shift, the rounding.
LATENCY = 1 + PRODUCT + 2


def param_layout(lanes):
    """One row of the channel table: ``lanes`` pairs of (multiplier, shift)."""
    return data.ArrayLayout(data.StructLayout({"multiplier": 31, "shift": 6}), lanes)


class RequantStage(wiring.Component):
    """Pipelined requantisation of ``lanes`` int32 accumulators per cycle.

    Parameters
    ----------
    lanes : int
        Accumulators per transfer (1..64).
    rows : int
        Rows of the channel table (channels = ``rows * lanes``).
    out_type : {"i8", "u8", "i16"}
    tag_width : int
        Bits of ``i.payload.tag`` that travel with the lanes to ``o_tag`` (0: none).

    Attributes
    ----------
    i : stream of {"acc": lanes x signed(32), "row": range(rows)}, in
    o : stream of lanes x out type, out
    params : stream of {"row", "data": param_layout(lanes)}, in (always ready)
    zero_point, lo, hi : Signal(signed(17)), in
        Per-tensor output zero point and clamp bounds (already narrowed by any fused
        activation, see ``nem.numerics.requant_params``).
    o_tag : Signal(tag_width), out (only with ``tag_width`` > 0)
        The tag of the transfer on ``o``.
    """

    def __init__(self, *, lanes=8, rows=16, out_type="i8", tag_width=0):
        if not isinstance(lanes, int) or not 1 <= lanes <= 64:
            raise ValueError(f"lanes must be an integer in 1..64, not {lanes!r}")
        if not isinstance(rows, int) or not 1 <= rows <= 4096:
            raise ValueError(f"rows must be an integer in 1..4096, not {rows!r}")
        if out_type not in OUT_TYPES:
            raise ValueError(f"out_type must be one of {sorted(OUT_TYPES)}, not {out_type!r}")
        if not isinstance(tag_width, int) or tag_width < 0:
            raise ValueError(f"tag_width must be a non-negative integer, not {tag_width!r}")
        self.lanes, self.rows, self.out_type = lanes, rows, out_type
        self.tag_width = tag_width
        bits, is_signed, _, _ = OUT_TYPES[out_type]
        out_shape = signed(bits) if is_signed else bits
        fields = {"acc": data.ArrayLayout(signed(32), lanes), "row": range(rows)}
        extra = {}
        if tag_width:
            fields["tag"] = tag_width
            extra["o_tag"] = Out(tag_width)
        super().__init__({
            **extra,
            "i": In(stream.Signature(data.StructLayout(fields))),
            "o": Out(stream.Signature(data.ArrayLayout(out_shape, lanes))),
            "params": In(stream.Signature(data.StructLayout({
                "row": range(rows), "data": param_layout(lanes)}))),
            "zero_point": In(signed(17)),
            "lo": In(signed(17)),
            "hi": In(signed(17)),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes

        m.submodules.table = table = Memory(shape=param_layout(lanes), depth=self.rows, init=[])
        w = table.write_port()
        r = table.read_port(domain="sync")
        m.d.comb += [self.params.ready.eq(1), w.addr.eq(self.params.payload.row),
                     w.data.eq(self.params.payload.data), w.en.eq(self.params.valid)]

        advance = Signal()
        m.d.comb += [advance.eq(~self.o.valid | self.o.ready), self.i.ready.eq(advance)]

        # Stage 1: accumulators registered while the table row is read. Stages 2 ..
        # 1 + PRODUCT: the 63-bit products over npu.product.staged_product (digit
        # products, then their sums), the shifts kept beside them.
        acc1 = Signal(data.ArrayLayout(signed(32), lanes))
        m.d.comb += [r.addr.eq(self.i.payload.row), r.en.eq(advance)]
        stages = LATENCY
        valid, tag = self.i.valid, self.i.payload.tag if self.tag_width else None
        with m.If(advance):
            m.d.sync += acc1.eq(self.i.payload.acc)
            for s in range(stages):
                nxt = self.o.valid if s == stages - 1 else Signal(name=f"v{s + 1}")
                m.d.sync += nxt.eq(valid)
                valid = nxt
                if self.tag_width:
                    nxt = self.o_tag if s == stages - 1 else \
                        Signal(self.tag_width, name=f"tag{s + 1}")
                    m.d.sync += nxt.eq(tag)
                    tag = nxt
        # Stage 2 + PRODUCT: shift by t - 1 only; the last stage: round, zero point and
        # clamp. With q = p >> (t-1) = floor(p / 2**(t-1)), floor((p + 2**(t-1)) / 2**t)
        # is floor((q + 1) / 2) (nested floors), so r + z_y = (q + 2*z_y + 1) >> 1: one
        # add after the barrel shift instead of a 64-bit add before it.
        #
        # The clamp compares q itself with per-tensor thresholds instead of the sum:
        # floor(x / 2) < lo  <=>  x < 2*lo, and floor(x / 2) > hi  <=>  x >= 2*hi + 2, so
        # with x = q + 2*z_y + 1 the result is lo when q < 2*(lo - z_y) - 1 and hi when
        # q > 2*(hi - z_y). The thresholds are registered from the ports (a transfer
        # enters LATENCY cycles before it reaches them: the ports hold still meanwhile),
        # and a result inside [lo, hi] needs only the sum's low bits: no zero point and no
        # 64-bit adder in front of the comparisons (the board's NMU path, docs/fpga.md).
        # The thresholds lie in [-2**18 + 1, 2**18 - 2] (17-bit lo, hi and z_y): a
        # comparison is on q's low 19 bits when q fits in them, else q's sign decides.
        out_bits = OUT_TYPES[self.out_type][0]
        tb = 19
        lo_t, hi_t = Signal(signed(tb), name="lo_below"), Signal(signed(tb), name="hi_above")
        m.d.sync += [lo_t.eq(((self.lo - self.zero_point) << 1) - 1),
                     hi_t.eq((self.hi - self.zero_point) << 1)]
        zp_round = Cat(1, self.zero_point)[:out_bits + 1]
        for k in range(lanes):
            entry = r.data[k]
            prod = staged_product(m, acc1[k], entry.multiplier.as_unsigned(), en=advance,
                                  name=f"prod{k}", platform=platform)
            shift = entry.shift
            for s in range(PRODUCT):
                nxt = Signal(6, name=f"shift{s + 2}_{k}")
                with m.If(advance):
                    m.d.sync += nxt.eq(shift)
                shift = nxt
            shifted = Signal(signed(63), name=f"shifted_{k}")
            top = shifted[tb - 1:]
            fits = Signal(name=f"fits_{k}")
            below, above = Signal(name=f"below_{k}"), Signal(name=f"above_{k}")
            low = Signal(out_bits + 1, name=f"low_{k}")
            m.d.comb += [
                fits.eq((top == 0) | (top == (1 << len(top)) - 1)),
                below.eq(Mux(fits, shifted[:tb].as_signed() < lo_t, shifted[-1])),
                above.eq(Mux(fits, shifted[:tb].as_signed() > hi_t, ~shifted[-1])),
                low.eq(shifted[:out_bits + 1] + zp_round),
            ]
            with m.If(advance):
                m.d.sync += shifted.eq(prod >> (shift - 1)[:6])
                with m.If(below):
                    m.d.sync += self.o.payload[k].eq(self.lo)
                with m.Elif(above):
                    m.d.sync += self.o.payload[k].eq(self.hi)
                with m.Else():
                    m.d.sync += self.o.payload[k].eq(low[1:])
        return m
