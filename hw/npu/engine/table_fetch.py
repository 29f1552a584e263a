"""Reads a CSTL task's 256-entry table from the binary's data section in DDR.

The sequencer hands the table's DDR byte address (8-byte aligned, checked with its length
against the data section before issue); this block reads the bus words covering the
:data:`npu.cstl.unit.TABLE_BYTES` bytes over the engine's shared AXI reader and passes
them on as :data:`npu.cstl.unit.TABLE_WORDS` 32-bit words, lowest address first (the
CSTL's ``table`` stream); with ``entry`` set at ``start``, a binary eltwise's
``ELTWISE_ENTRY`` instead (its ``ELTWISE_ENTRY.size`` bytes, 8-byte aligned) on the same
stream, so the CSTL has one fetch path for both. Commands are at most :data:`PIECE` words
and issued only when the FIFO has room for everything in flight, so the shared reader is
never held.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from nem.taskformat import ELTWISE_ENTRY
from npu.bus.axi import command_layout
from npu.bus.ports import fetch_into
from npu.cstl.unit import TABLE_BYTES, TABLE_WORDS

__all__ = ["TableFetcher"]

PIECE = 16   # bus words per command at most
DEPTH = 16   # bus words of the FIFO


class TableFetcher(wiring.Component):
    """Table reader (DDR -> 32-bit word stream).

    Parameters
    ----------
    addr_width : int
        DDR byte address bits.
    data_width : int
        AXI data bits (a multiple of 32).

    Attributes
    ----------
    start : In(stream of the table's byte address, 4-byte aligned); taken when idle
    entry : In(1)
        Sampled with ``start``: fetch an eltwise entry rather than a table.
    rd_cmd, rd_data : a client of the engine's AXI read mux
    words : Out(stream of 32 bits)
    busy : Out(1)
    """

    def __init__(self, *, addr_width=32, data_width=64):
        if data_width % 32 or data_width < 32:
            raise ValueError(f"data_width must be a multiple of 32, not {data_width}")
        self.addr_width, self.data_width = addr_width, data_width
        super().__init__({
            "start": In(stream.Signature(addr_width)),
            "rd_cmd": Out(stream.Signature(command_layout(addr_width))),
            "rd_data": In(stream.Signature(data.StructLayout({"data": data_width,
                                                              "last": 1}))),
            "entry": In(1),
            "words": Out(stream.Signature(32)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        aw = self.addr_width
        W = self.data_width // 8
        lw = W.bit_length() - 1
        per_word = W // 4

        m.submodules.fifo = fifo = SyncFIFOBuffered(width=self.data_width, depth=DEPTH)
        next_word = Signal(aw - lw + 1)
        end_word = Signal(aw - lw + 1)
        emitted = Signal(range(TABLE_WORDS + 1))
        total = Signal(range(TABLE_WORDS + 1))
        cur = Signal(self.data_width)
        cur_valid = Signal()
        pi = Signal(range(per_word))
        skip = Signal(range(per_word))
        first = Signal()
        active = Signal()

        cmd_fire, piece, inflight = fetch_into(
            m, fifo, DEPTH, self.rd_cmd, self.rd_data, enable=active, word=next_word,
            end=end_word, lw=lw, max_beats=PIECE)
        with m.If(cmd_fire):
            m.d.sync += next_word.eq(next_word + piece)

        # bus words split into 32-bit pieces; the pieces before the table skipped.
        # ``want`` (``emitted < total``) is a register of its own, set where the two
        # counts change, so no comparison lies between them and ``words.valid`` (the
        # CSTL's table writes, across the die)
        want = Signal()
        with m.If(~cur_valid & fifo.r_rdy):
            m.d.comb += fifo.r_en.eq(1)
            m.d.sync += [cur.eq(fifo.r_data), cur_valid.eq(1),
                         pi.eq(Mux(first, skip, 0)), first.eq(0)]
        with m.If(cur_valid & ~want):
            m.d.sync += cur_valid.eq(0)   # the bytes after the table
        m.d.comb += [self.words.valid.eq(cur_valid & want),
                     self.words.payload.eq(cur.word_select(pi, 32))]
        with m.If(self.words.valid & self.words.ready):
            m.d.sync += [emitted.eq(emitted + 1), pi.eq(pi + 1),
                         want.eq(emitted + 1 != total)]
            with m.If(pi == per_word - 1):
                m.d.sync += cur_valid.eq(0)

        done = ~want & ~cur_valid & (next_word >= end_word) & (inflight == 0) & ~fifo.r_rdy
        with m.If(active & done):
            m.d.sync += active.eq(0)
        with m.If(~active & ~fifo.r_rdy & (inflight == 0)):
            m.d.comb += self.start.ready.eq(1)
        with m.If(self.start.valid & self.start.ready):
            a = self.start.payload
            m.d.sync += [active.eq(1), next_word.eq(a >> lw),
                         end_word.eq((a + Mux(self.entry, ELTWISE_ENTRY.size, TABLE_BYTES)
                                      + W - 1) >> lw),
                         total.eq(Mux(self.entry, ELTWISE_ENTRY.size // 4, TABLE_WORDS)),
                         skip.eq(a[2:lw] if lw > 2 else 0), emitted.eq(0), first.eq(1),
                         want.eq(1)]   # a table and an entry are at least a word
        m.d.comb += self.busy.eq(active)
        return m
