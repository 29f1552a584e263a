"""The CSTL's store: vectors of result bytes at any byte address -> L1 word writes.

A vector (:func:`vector_layout`) is ``count`` bytes (lanes 0..count-1) for L1 bytes
``addr .. addr + count - 1``. Shifted to its address it covers part of one word (``lo``)
and possibly the start of the next (``hi``). The store keeps one *pending* word (address,
bytes, byte enables) so that the vectors of a run that is not word-aligned merge into
whole words: a vector whose ``lo`` word is the pending word merges into it; a merged word
that is complete, or that the vector leaves behind (it has a ``hi`` part), is written and
``hi`` becomes the pending word. A vector for another word first writes the pending one
(it is taken in the same cycle when it has no ``hi`` part, else offered again next cycle,
when its ``lo`` merges into the new pending word: merging the same bytes twice is
harmless). So a run streams at one word per cycle at any alignment. ``flush`` writes the
pending word in a cycle where no vector is staged (the CSTL raises it at the end of a
task; between vectors it only splits a word, and a vector taken in a flush cycle starts
a pending word of its own); ``busy`` while one is held.
A vector taken waits a cycle in the input stage, shifted to its address.

Writes use byte enables (``npu.bus.ports.write_client_signature``); a write waits for its
grant and holds everything meanwhile (``stall``).
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from npu.bus.ports import write_client_signature

__all__ = ["VectorStore", "vector_layout"]


def vector_layout(lanes):
    """A vector to store: ``count`` bytes from lane 0 at byte address ``addr``."""
    return data.StructLayout({"data": 8 * lanes, "count": range(lanes + 1), "addr": 32})


class VectorStore(wiring.Component):
    """Vectors -> L1 writes with byte enables (see the module).

    Parameters
    ----------
    lanes : int
        Bytes per L1 word (a power of two).
    depth : int
        L1 words.
    """

    def __init__(self, *, lanes, depth):
        if lanes < 1 or lanes & (lanes - 1):
            raise ValueError(f"lanes must be a power of two, not {lanes!r}")
        self.lanes, self.depth = lanes, depth
        super().__init__({
            "i": In(stream.Signature(vector_layout(lanes))),
            "wr": Out(write_client_signature(depth, 8 * lanes)),
            "flush": In(1),
            "busy": Out(1),
            "stall": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        L = self.lanes
        lw = L.bit_length() - 1
        v = self.i.payload

        # the input stage: a vector taken is shifted to its address into registers (its
        # ``lo`` and ``hi`` parts and their byte enables), and the pending-word logic below
        # works from those, so the shift and the enables' arithmetic are not in the cycle
        # that decides the write (one cycle more per task, none per vector)
        off = Signal(range(L))
        m.d.comb += off.eq(v.addr[:lw] if lw else 0)
        wide = Signal(16 * L)
        wen = Signal(2 * L)
        m.d.comb += [wide.eq(v.data << (off * 8)),
                     wen.eq((((Const(1, L + 1) << v.count) - 1)[:L]) << off)]
        a_valid = Signal()
        lo, hi = Signal(8 * L), Signal(8 * L)
        lo_en, hi_en = Signal(L), Signal(L)
        has_hi = Signal()
        waddr = Signal(32 - lw)
        waddr1 = Signal(32 - lw)        # waddr + 1, loaded with it
        take = Signal()         # the pending-word logic takes the staged vector
        load = Signal()         # the input stage takes a vector, of word ``incoming``
        incoming = Signal(32 - lw)
        m.d.comb += [self.i.ready.eq(~a_valid | take), load.eq(self.i.valid & self.i.ready),
                     incoming.eq(v.addr[lw:])]
        with m.If(load):
            m.d.sync += [a_valid.eq(1), lo.eq(wide[:8 * L]), hi.eq(wide[8 * L:]),
                         lo_en.eq(wen[:L]), hi_en.eq(wen[L:]), has_hi.eq(wen[L:] != 0),
                         waddr.eq(incoming), waddr1.eq(incoming + 1)]
        with m.Elif(take):
            m.d.sync += a_valid.eq(0)

        p_valid = Signal()
        p_addr = Signal(32 - lw)
        p_data = Signal(8 * L)
        p_en = Signal(L)
        # ``same``: the staged vector's ``lo`` word is the pending word (``p_valid &
        # p_addr == waddr``), a register kept in step with both rather than a comparison
        # of the two in front of the write request. Its next value compares the incoming
        # vector's word (when one is taken) with what the pending word's address will be:
        # unchanged, the staged word, or the word after it.
        same = Signal()
        # the pending word unchanged (also where it stays empty); the branches below
        # override this where they move or clear it
        m.d.sync += same.eq(Mux(load, p_valid & (incoming == p_addr), same))
        merged = Signal(8 * L)
        merged_en = Signal(L)
        m.d.comb += merged_en.eq(lo_en | Mux(same, p_en, 0))
        m.d.comb += merged.eq(Cat(*[Mux(lo_en[k], lo[8 * k:8 * k + 8],
                                        p_data[8 * k:8 * k + 8]) for k in range(L)]))

        w_data = Signal(8 * L)
        w_en = Signal(L)
        w_addr = Signal(32 - lw)
        req = Signal()
        m.d.comb += [self.wr.req.eq(req), self.wr.addr.eq(w_addr), self.wr.data.eq(w_data),
                     self.wr.en.eq(w_en), self.wr.go.eq(req & self.wr.gnt),
                     self.stall.eq(req & ~self.wr.gnt), self.busy.eq(p_valid | a_valid)]
        go = self.wr.go

        with m.If(a_valid):
            with m.If(p_valid & ~same):
                # another word: write the pending one; lo becomes pending
                m.d.comb += [req.eq(1), w_addr.eq(p_addr), w_data.eq(p_data), w_en.eq(p_en)]
                with m.If(go):
                    m.d.sync += [p_addr.eq(waddr), p_data.eq(lo), p_en.eq(lo_en),
                                 same.eq(~load | (incoming == waddr))]
                    m.d.comb += take.eq(~has_hi)
            with m.Elif(has_hi | (merged_en == (1 << L) - 1)):
                m.d.comb += [req.eq(1), w_addr.eq(waddr), w_data.eq(merged), w_en.eq(merged_en)]
                with m.If(go):
                    m.d.comb += take.eq(1)
                    m.d.sync += [p_valid.eq(has_hi), p_addr.eq(waddr1), p_data.eq(hi),
                                 p_en.eq(hi_en), same.eq(has_hi & load & (incoming == waddr1))]
            with m.Else():
                m.d.comb += take.eq(1)
                m.d.sync += [p_valid.eq(1), p_addr.eq(waddr), p_data.eq(merged),
                             p_en.eq(merged_en), same.eq(~load | (incoming == waddr))]
        with m.Elif(self.flush & p_valid):
            m.d.comb += [req.eq(1), w_addr.eq(p_addr), w_data.eq(p_data), w_en.eq(p_en)]
            with m.If(go):
                m.d.sync += [p_valid.eq(0), same.eq(0)]
        return m
