"""The NMU's MAC array: ``lanes x cols`` int8 multipliers, a weight buffer, i32 accumulators.

Dataflow (weight-stationary, as NVDLA's CMAC): the weight buffer holds one tile's weights,
row ``r`` = ``lanes`` reduction elements x ``cols`` output channels. An activation vector
(``lanes`` int8 values of one pixel, one L1 word) enters with the row it meets; column
``c`` adds ``sum_l (x_l - z_x) * w[r][l][c]`` (an adder tree) to its accumulator. The
first vector of a pixel starts from the bias, the last one sends the ``cols``
accumulators out. Lanes at or beyond the vector's ``count`` contribute nothing.

Protocol and timing
-------------------
Six register stages: (1) the vector is registered while the weight row is read (the
buffer has read latency 1); (2) the multipliers' inputs: ``x - z_x`` masked by the
vector's ``count``, and the weight row (the MULT18X18D's input registers, in the fabric);
(3) the products (:func:`npu.dsp.registered_product`: on the ECP5 the MULT18X18D's own
output registers);
(4) the products again, a register on the way from the multipliers (in fixed DSP columns)
to the adder trees, so that neither route lies in a cycle with the multiplier's delay;
(5) the column sums of the adder trees; (6) the accumulation, and on the pixel's last
vector the accumulators (with the pixel's tag) into the output register. A pixel's result
is therefore on ``o`` four cycles later than with one arithmetic stage; the array still
takes one vector per cycle. The results wait for ``o`` in a queue of two (its head is
``o``). Every stage moves on ``advance`` (``i.ready``), a flip-flop, which is low only in a
cycle whose stage 6 holds a pixel's last vector while the queue holds two results, so
back-pressure on ``o`` stalls every stage; ``o.ready`` reaches the queue alone, not
``i.ready`` (with ``o.ready`` always high the queue never holds two, and the array never
stalls). Accumulation wraps modulo 2**32 (an exact i32 result whenever the exact sum fits,
which the executor requires).

The weight buffer is written through ``w_en`` / ``w_row`` / ``w_lane`` / ``w_data`` /
``w_count``: bytes ``0 .. w_count-1`` of ``w_data`` go to columns ``0 .. w_count-1`` of
lane ``w_lane`` of row ``w_row`` (not while a vector that reads the row is entering).

Double-buffered weights (``banks=2``): the buffer holds two banks of ``wrows`` rows; a
vector names its bank (``i.payload.bank``), a write its own (``w_bank``), so one tile's
weights load into one bank while the vectors of the previous tile read the other. A row
is read when its vector enters (the read data stay in the read register while the vector
waits), so a bank may be rewritten as soon as its tile's last vector has been taken. The
bias is the caller's: ``bias`` must show the bias of bank ``bias_bank`` (the bank of the
vector in stage 6, which adds it on a pixel's first vector); ``bank_busy[b]`` says that a
vector of bank ``b`` is in one of the stages, i.e. that bank ``b``'s bias may still be
read.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from npu.dsp import registered_product

__all__ = ["STAGES", "NmuArray", "array_in_layout", "array_out_layout"]

#: Register stages from an accepted vector to its accumulate (see the module).
STAGES = 6


def array_in_layout(lanes, tag_width, banks=1):
    """An input vector (``bank`` only with ``banks > 1``)."""
    fields = {"data": data.ArrayLayout(8, lanes), "count": range(lanes + 1), "row": 16,
              "first": 1, "last": 1, "tag": tag_width}
    if banks > 1:
        fields["bank"] = range(banks)
    return data.StructLayout(fields)


def array_out_layout(cols, tag_width):
    return data.StructLayout({"acc": data.ArrayLayout(signed(32), cols), "tag": tag_width})


class NmuArray(wiring.Component):
    """Weight-stationary int8 MAC array with per-column adder trees and accumulators.

    Parameters
    ----------
    lanes, cols : int
        Reduction lanes and output columns (``lanes * cols`` MACs per cycle).
    wrows : int
        Weight buffer rows.
    tag_width : int
        Bits carried from a pixel's last vector to its output.
    banks : int
        Weight banks of ``wrows`` rows each: 1, or 2 for double-buffered weights (adds
        ``i.payload.bank``, ``w_bank``, ``bias_bank`` and ``bank_busy``).

    Attributes
    ----------
    i : stream of :func:`array_in_layout`, in
    o : stream of :func:`array_out_layout`, out
    zx : Signal(signed(9)), in
        Input zero point, subtracted from every valid lane.
    bias : cols x Signal(signed(32)), in
        Held by the caller while the tile runs.
    w_en, w_row, w_lane, w_data, w_count : in
        Weight buffer write (see the module).
    w_bank : Signal(range(banks)), in
        Bank of the weight write (``banks > 1`` only).
    bias_bank : Signal(range(banks)), out
        Bank whose bias ``bias`` must show (``banks > 1`` only).
    bank_busy : Signal(banks), out
        Bit ``b``: a vector of bank ``b`` is in the pipeline (``banks > 1`` only).
    busy : Signal, out
        A vector is in the pipeline or an output waits.
    """

    def __init__(self, *, lanes, cols, wrows, tag_width=32, banks=1):
        if banks not in (1, 2):
            raise ValueError(f"banks must be 1 or 2, not {banks!r}")
        self.lanes, self.cols, self.wrows, self.tag_width = lanes, cols, wrows, tag_width
        self.banks = banks
        extra = {}
        if banks > 1:
            extra = {"w_bank": In(range(banks)), "bias_bank": Out(range(banks)),
                     "bank_busy": Out(banks)}
        super().__init__({
            "i": In(stream.Signature(array_in_layout(lanes, tag_width, banks))),
            "o": Out(stream.Signature(array_out_layout(cols, tag_width))),
            "zx": In(signed(9)),
            "bias": In(data.ArrayLayout(signed(32), cols)),
            "w_en": In(1),
            "w_row": In(range(wrows)),
            "w_lane": In(range(lanes)),
            "w_data": In(data.ArrayLayout(8, cols)),
            "w_count": In(range(cols + 1)),
            "busy": Out(1),
            **extra,
        })

    def elaborate(self, platform):
        m = Module()
        L, C = self.lanes, self.cols
        nb = self.banks
        m.submodules.wbuf = wbuf = Memory(shape=8 * L * C, depth=nb * self.wrows, init=[])
        wp = wbuf.write_port(granularity=8)
        rp = wbuf.read_port(domain="sync")
        # byte lane*C + c of a row: weight of lane `lane`, column c; bank b at b * wrows
        if nb > 1:
            m.d.comb += wp.addr.eq(Mux(self.w_bank, self.wrows, 0) + self.w_row)
        else:
            m.d.comb += wp.addr.eq(self.w_row)
        for lane in range(L):
            for c in range(C):
                m.d.comb += [
                    wp.data[8 * (lane * C + c):8 * (lane * C + c + 1)].eq(self.w_data[c]),
                    wp.en[lane * C + c].eq(self.w_en & (self.w_lane == lane)
                                           & (c < self.w_count)),
                ]

        # Six register stages, all moving together on `advance`:
        #   1: the vector (x1 ...) while the weight row is read (the buffer's latency)
        #   2: the multipliers' inputs: x - zx masked by count (xm2), the row (w2)
        #   3: the products (p3), the multipliers' output registers
        #   4: the products again (p4), on the way to the adder trees
        #   5: the column sums of the adder trees (sum5)
        #   6: the accumulate: acc = (first ? bias : acc) + sum5; on last -> o
        # Stage k's control (valid, first, last, tag, bank) travels in ctl[k].
        advance = Signal()
        ctl_fields = {"v": 1, "first": 1, "last": 1, "tag": self.tag_width}
        if nb > 1:
            ctl_fields["bank"] = 1
        ctl_layout = data.StructLayout(ctl_fields)
        ctl = {k: Signal(ctl_layout, name=f"ctl{k}") for k in range(1, STAGES)}
        x1 = Signal(data.ArrayLayout(8, L))
        n1 = Signal(range(L + 1))
        m.d.comb += [rp.addr.eq(self.i.payload.row), rp.en.eq(advance)]
        if nb > 1:
            m.d.comb += rp.addr.eq(Mux(self.i.payload.bank, self.wrows, 0)
                                   + self.i.payload.row)
        with m.If(advance):
            m.d.sync += [ctl[1].v.eq(self.i.valid), ctl[1].first.eq(self.i.payload.first),
                         ctl[1].last.eq(self.i.payload.last), ctl[1].tag.eq(self.i.payload.tag),
                         x1.eq(self.i.payload.data), n1.eq(self.i.payload.count)]
            if nb > 1:
                m.d.sync += ctl[1].bank.eq(self.i.payload.bank)
            m.d.sync += [ctl[k + 1].eq(ctl[k]) for k in range(1, STAGES - 1)]

        # stage 2: multiplier inputs
        xm2 = [Signal(signed(9), name=f"xm2_{lane}") for lane in range(L)]
        w2 = Signal(8 * L * C)
        # stage 3: products (9 x 8 bits signed: 17 bits), npu.dsp.registered_product's
        # register (the MULT18X18D's own on the ECP5; made outside m.If, as it asks)
        p3 = [[registered_product(m, xm2[lane],
                                  w2[8 * (lane * C + c):8 * (lane * C + c + 1)].as_signed(),
                                  en=advance, name=f"p3_{lane}_{c}", platform=platform)
               for c in range(C)] for lane in range(L)]
        # stage 4: the products again (a copy)
        p4 = [[Signal(signed(17), name=f"p4_{lane}_{c}") for c in range(C)] for lane in range(L)]
        # stage 5: column sums
        sum_width = 17 + (L - 1).bit_length()
        sum5 = [Signal(signed(sum_width), name=f"sum5_{c}") for c in range(C)]
        with m.If(advance):
            m.d.sync += [xm2[lane].eq(Mux(lane < n1, x1[lane].as_signed() - self.zx, 0))
                         for lane in range(L)]
            m.d.sync += w2.eq(rp.data)
            m.d.sync += [p4[lane][c].eq(p3[lane][c])
                         for lane in range(L) for c in range(C)]
            for c in range(C):
                terms = [p4[lane][c] for lane in range(L)]
                while len(terms) > 1:  # adder tree
                    terms = [terms[k] + terms[k + 1] if k + 1 < len(terms) else terms[k]
                             for k in range(0, len(terms), 2)]
                m.d.sync += sum5[c].eq(terms[0])

        # stage 6: accumulate
        last_ctl = ctl[STAGES - 1]
        acc = [Signal(signed(32), name=f"acc{c}") for c in range(C)]
        new_acc = []
        for c in range(C):
            nxt = Signal(signed(32), name=f"next_acc{c}")
            m.d.comb += nxt.eq(Mux(last_ctl.first, self.bias[c], acc[c]) + sum5[c])
            new_acc.append(nxt)
        if nb > 1:
            # a vector reads its bank's bias in stage 6; the bank's bias is in use while
            # a vector of the bank is in any stage
            m.d.comb += self.bias_bank.eq(last_ctl.bank)
            for b in range(nb):
                m.d.comb += self.bank_busy[b].eq(
                    Cat(*[ctl[k].v & (ctl[k].bank == b) for k in range(1, STAGES)]).any())

        # The results wait in a queue of two, its head on ``o``. ``advance`` is a
        # flip-flop: low in a cycle whose stage 6 holds a pixel's last vector while the
        # queue holds two results (a pop in that cycle is not counted), worked out a
        # cycle before from the stage that then moves into stage 6 and the queue's level
        # after this cycle's push and pop. So ``o.ready`` reaches only the queue, and no
        # comparison lies between stage 6 and the readers' ready, which ``advance`` is
        # (the board's long paths at 72aa8dc ran from ``ctl5.v`` through ``advance`` to
        # the activation reader's queue, 430-520 a seed). With ``o.ready`` high the
        # queue never holds two results and ``advance`` stays high, as before.
        out = self.o.payload
        spare = Signal.like(out, name="spare")      # the queue's second entry
        level = Signal(range(3))
        adv_q = Signal(init=1, name="advance_q")
        # ``advance`` enables every stage's registers (thousands of bits); an inverted
        # copy of it (which yosys does not merge with it) is the input's ready and the
        # queue's push, so those two do not hang on that net (``rp.en``, the same
        # flip-flop, started 842 paths above 10 ns in the estimate with ``busy_q``, into
        # the activation reader and the queue, ``docs/fpga.md``)
        stall_q = Signal(name="stall_q")
        m.d.comb += [advance.eq(adv_q), self.i.ready.eq(~stall_q)]
        push = ~stall_q & last_ctl.v & last_ctl.last
        pop = self.o.valid & self.o.ready
        level_next = Signal(range(3))
        m.d.comb += level_next.eq(level + push - pop)
        result = Signal.like(out, name="result")
        m.d.comb += [result.tag.eq(last_ctl.tag),
                     *[result.acc[c].eq(new_acc[c]) for c in range(C)]]
        # (no push while the queue holds two: ``advance`` is low then)
        with m.If(pop & (level == 2)):
            m.d.sync += out.eq(spare)
        with m.Elif(push & (level == pop)):      # an empty queue, or one emptied now
            m.d.sync += out.eq(result)
        with m.If(push & (level == 1)):          # (dead if the head leaves now)
            m.d.sync += spare.eq(result)
        entering = Mux(~stall_q, ctl[STAGES - 2].v & ctl[STAGES - 2].last,
                       last_ctl.v & last_ctl.last)
        stall_next = entering & (level_next == 2)
        m.d.sync += [level.eq(level_next), self.o.valid.eq(level_next != 0),
                     adv_q.eq(~stall_next), stall_q.eq(stall_next)]
        with m.If(advance & last_ctl.v):
            m.d.sync += [a.eq(n) for a, n in zip(acc, new_acc, strict=True)]
        # ``busy`` from a flip-flop set from the next values of what it is the OR of (the
        # stages' valid flags and the queue's level), the same in every cycle: it is the
        # bias phase's ready (``npu.nmu.unit``: ``reader.o.ready = ~array.busy``), so
        # stage 5's flag reached the reader's queue through its OR (``ctl5.v``, 547 long
        # paths in the estimate of the copy and NMU cuts).
        busy_q = Signal(name="busy_q")
        stages_next = Mux(~stall_q, Cat(self.i.valid, *[ctl[k].v for k in range(1, STAGES - 1)]),
                          Cat(*[ctl[k].v for k in range(1, STAGES)]))
        m.d.sync += busy_q.eq(stages_next.any() | (level_next != 0))
        m.d.comb += self.busy.eq(busy_q)
        return m
