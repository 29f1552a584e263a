"""The NMU's output stage (first piece of the CSTL): requantisation and the L1 writer.

A pixel's ``cols`` accumulators arrive with the tile's channel-table row, the output
byte address of the pixel's channel ``n0`` and the number of valid channels. Integer
outputs (i8, u8, i16) go through :class:`npu.cstl.requant.RequantStage` (per-channel
multiplier and shift, zero point, clamp: ``docs/numerics.md``; the stage is built for
i16 lanes, and the clamp bounds of the requantisation entry make i8/u8 results); an i32
output (no requantisation) bypasses it. The writer then stores ``ncols * E`` bytes
(``E`` = 1, 2 or 4 bytes per element) at the pixel's address: one L1 word per cycle when
granted, byte enables on the partial words; any alignment.

Protocol and timing
-------------------
``i`` is a stream; the requantisation pipeline adds its ``LATENCY`` (six) cycles and a
FIFO of registers after it (between the clamp and the writer's byte placement) one more.
The pipeline never stalls: ``i.ready`` is a credit flip-flop, high while fewer than
:attr:`NmuOutput.DEPTH` transfers are taken and not yet handed to the writer, which is
the FIFO's room, so the writer's grant reaches the FIFO's read pointer and the credits
and nothing before them. With the writer taking a result every cycle, ``i.ready`` stays
high. The writer takes the next result in the cycle its last word is written (``busy``
stays high from an accepted input until its last word is written). ``stall`` is high in
a cycle where the writer wants the write port and is not granted it.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from npu.bus.ports import write_client_signature
from npu.bus.stream import RegisterFIFO
from npu.cstl.requant import LATENCY, RequantStage, param_layout

__all__ = ["NmuOutput", "output_in_layout"]

ADDR = 32


def output_in_layout(cols, rows):
    return data.StructLayout({"acc": data.ArrayLayout(signed(32), cols), "row": range(rows),
                              "yaddr": ADDR, "ncols": range(cols + 1)})


class NmuOutput(wiring.Component):
    """Requantisation (or raw i32) of accumulator vectors and their store into L1.

    Parameters
    ----------
    cols : int
        Accumulators per transfer.
    rows : int
        Rows of the channel table (``rows * cols`` channels).
    lanes : int
        L1 word bytes.
    depth : int
        L1 words.

    Attributes
    ----------
    i : stream of :func:`output_in_layout`, in
    params : stream of {"row", "data": npu.cstl.requant.param_layout(cols)}, in
        Channel table writes (always ready).
    raw : Signal, in
        i32 output: no requantisation.
    out_bytes : Signal(3), in
        1, 2 or 4.
    zero_point, lo, hi : Signal(signed(17)), in
    wr : L1 write client port
    busy, stall : Signal, out
    """

    #: Entries of the FIFO after the requantiser, and transfers taken and not yet handed
    #: to the writer at most: a transfer holds its credit from the cycle after it is taken
    #: until the writer takes it, ``LATENCY + 1`` cycles when nothing waits, so with one
    #: more the input's ready stays high while the writer takes a result every cycle.
    DEPTH = LATENCY + 2

    def __init__(self, *, cols, rows, lanes, depth):
        self.cols, self.rows, self.lanes, self.depth = cols, rows, lanes, depth
        super().__init__({
            "i": In(stream.Signature(output_in_layout(cols, rows))),
            "params": In(stream.Signature(data.StructLayout({
                "row": range(rows), "data": param_layout(cols)}))),
            "raw": In(1),
            "out_bytes": In(3),
            "zero_point": In(signed(17)),
            "lo": In(signed(17)),
            "hi": In(signed(17)),
            "wr": Out(write_client_signature(depth, 8 * lanes)),
            "busy": Out(1),
            "stall": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        C, W = self.cols, self.lanes
        lw = W.bit_length() - 1
        tag = data.StructLayout({"yaddr": ADDR, "ncols": range(C + 1)})
        m.submodules.rq = rq = RequantStage(lanes=C, rows=self.rows, out_type="i16",
                                            tag_width=tag.size)
        wiring.connect(m, wiring.flipped(self.params), rq.params)
        m.d.comb += [rq.zero_point.eq(self.zero_point), rq.lo.eq(self.lo), rq.hi.eq(self.hi)]

        # the requantiser never stalls (no enables on its pipeline); the credits (DEPTH)
        # keep room in the FIFO for all it delivers. The skid slice this replaced had its
        # full flag on the pipeline's ~2,000 enables: the board's most common start of a
        # long path in the NMU (docs/fpga.md)
        m.d.comb += [rq.i.payload.acc.eq(self.i.payload.acc),
                     rq.i.payload.row.eq(self.i.payload.row),
                     rq.i.payload.tag.eq(Cat(self.i.payload.yaddr, self.i.payload.ncols)),
                     rq.o.ready.eq(1)]
        held = data.StructLayout({"values": data.ArrayLayout(signed(32), C), "yaddr": ADDR,
                                  "ncols": range(C + 1)})
        m.submodules.fifo = fifo = RegisterFIFO(held, self.DEPTH)
        credits = Signal(range(self.DEPTH + 1))
        room = Signal(init=1)
        take = self.i.valid & room
        pop = fifo.o.valid & fifo.o.ready
        left = credits + take - pop
        m.d.sync += [credits.eq(left), room.eq(left < self.DEPTH)]
        m.d.comb += self.i.ready.eq(room)
        # the requantiser's payload does not depend on ``raw``, only which stream is
        # valid does: a raw task gives the requantiser nothing valid, and tasks do not
        # overlap (``busy`` holds while anything is in flight), so its output is never
        # valid then (with ``raw`` in front of the table's read address, the one ``raw``
        # flip-flop reached ~2,000 endpoints across the requantiser, docs/fpga.md)
        rq_tag = Signal(tag)
        m.d.comb += rq_tag.eq(rq.o_tag)
        f = fifo.i.payload
        with m.If(self.raw):
            m.d.comb += [fifo.i.valid.eq(take), f.yaddr.eq(self.i.payload.yaddr),
                         f.ncols.eq(self.i.payload.ncols)]
            m.d.comb += [f.values[c].eq(self.i.payload.acc[c]) for c in range(C)]
        with m.Else():
            m.d.comb += [rq.i.valid.eq(take), fifo.i.valid.eq(rq.o.valid),
                         f.yaddr.eq(rq_tag.yaddr), f.ncols.eq(rq_tag.ncols)]
            m.d.comb += [f.values[c].eq(rq.o.payload[c]) for c in range(C)]
        s_valid, s_ready = fifo.o.valid, fifo.o.ready
        s_values = [fifo.o.payload.values[c] for c in range(C)]
        s_yaddr, s_ncols = fifo.o.payload.yaddr, fifo.o.payload.ncols

        # the byte run of one result
        nb = 4 * C
        run = Signal(8 * nb)
        for p in range(nb):
            b1 = s_values[p][0:8] if p < C else 0
            b2 = s_values[p // 2].as_unsigned()[8 * (p % 2):8 * (p % 2) + 8] \
                if p < 2 * C else 0
            b4 = s_values[p // 4].as_unsigned()[8 * (p % 4):8 * (p % 4) + 8]
            m.d.comb += run[8 * p:8 * p + 8].eq(
                Mux(self.out_bytes == 1, b1, Mux(self.out_bytes == 2, b2, b4)))
        length = Signal(range(nb + 1))
        m.d.comb += length.eq(Mux(self.out_bytes == 1, s_ncols,
                                  Mux(self.out_bytes == 2, s_ncols << 1, s_ncols << 2)))
        off = Signal(range(W))
        m.d.comb += off.eq(s_yaddr[:lw] if lw else 0)
        width = nb + W
        maxw = -(-width // W)
        aligned = Signal(8 * maxw * W)
        enables = Signal(maxw * W)
        m.d.comb += [aligned.eq(run << (off * 8)),
                     enables.eq(((1 << length) - 1) << off)]

        busy = Signal()
        wdata = Signal(8 * maxw * W)
        wen = Signal(maxw * W)
        word0 = Signal(ADDR - lw)
        nwords = Signal(range(maxw + 1))
        k = Signal(range(maxw + 1))
        go = Signal()
        last = Signal()
        m.d.comb += [
            self.wr.req.eq(busy),
            self.wr.addr.eq(word0 + k),
            self.wr.data.eq(wdata.word_select(k, 8 * W)),
            self.wr.en.eq(wen.word_select(k, W)),
            go.eq(busy & self.wr.gnt),
            self.wr.go.eq(go),
            last.eq(k + 1 == nwords),
            self.stall.eq(busy & ~self.wr.gnt),
            s_ready.eq(~busy | (go & last)),
        ]
        with m.If(go):
            m.d.sync += k.eq(k + 1)
            with m.If(last):
                m.d.sync += busy.eq(0)
        with m.If(s_valid & s_ready):
            m.d.sync += [busy.eq(length != 0), wdata.eq(aligned), wen.eq(enables),
                         word0.eq(s_yaddr[lw:]), k.eq(0),
                         nwords.eq((off + length + (W - 1)) >> lw)]
        m.d.comb += self.busy.eq(busy | (credits != 0))
        return m
