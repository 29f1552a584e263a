"""Reads a requantisation entry from the binary's data section in DDR for the NMU.

An NMU task's ``REQUANT`` register is the byte offset of its entry in the data section
(``docs/task-format.md``); the entry is the 32-bit words ``nem.taskformat.encode_requant``
writes: a head of :data:`HEAD_WORDS` words (input zero point, output zero point, clamp
low, clamp high, channel count ``n``, reserved), then ``n`` (multiplier, shift) pairs.
The sequencer hands the entry's DDR address and the data section's end at issue; this
block reads the bus words over the engine's shared AXI reader and passes the entry on as
32-bit words (the NMU's ``rq`` stream).

It first reads the words covering the head; once the channel count has gone by it
reads the rest. An entry whose pairs would reach past the data section's end (or more
than :data:`MAX_CHANNELS` channels) raises ``error`` for one cycle and is cut after its
head, with the channel count passed on as 0, so that the NMU ends (refusing the task or
producing raw results) and the sequencer reports ``BAD_ENTRY``: never a read of
arbitrary length. Commands are at most :data:`PIECE` words and issued only when the
FIFO has room for everything in flight, so the shared reader is never held.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from nem.taskformat import REQUANT_CHANNEL, REQUANT_ENTRY
from npu.bus.axi import command_layout
from npu.bus.ports import fetch_into

__all__ = ["HEAD_WORDS", "MAX_CHANNELS", "EntryFetcher", "entry_request_layout"]

#: 32-bit words of the entry's head (``nem.taskformat.REQUANT_ENTRY``).
HEAD_WORDS = REQUANT_ENTRY.size // 4
#: index of the channel count in the head
COUNT_WORD = REQUANT_ENTRY.word_fields(4)["channels"]
assert COUNT_WORD + 1 < HEAD_WORDS   # EntryFetcher's ``want`` after the count
#: larger channel counts are refused (the NMU's channel table is far smaller)
MAX_CHANNELS = 1 << 16
PIECE = 16   # words per command at most
DEPTH = 16   # words of the FIFO


def entry_request_layout(addr_width):
    """What the sequencer hands over: the entry's byte address, the data section's end."""
    return data.StructLayout({"addr": addr_width, "limit": addr_width + 1})


class EntryFetcher(wiring.Component):
    """Requantisation entry reader (DDR -> 32-bit word stream).

    Parameters
    ----------
    addr_width : int
        DDR byte address bits.
    data_width : int
        AXI data bits (a multiple of 32).

    Attributes
    ----------
    start : In(stream of :func:`entry_request_layout`)
        An entry to read (``addr`` 4-byte aligned); taken when idle.
    rd_cmd, rd_data : a client of the engine's AXI read mux
    words : Out(stream of 32 bits)
        The entry, word by word.
    error : Out(1)
        One cycle: the entry reaches past ``limit``.
    busy : Out(1)
    """

    def __init__(self, *, addr_width=32, data_width=64):
        if data_width % 32 or data_width < 32:
            raise ValueError(f"data_width must be a multiple of 32, not {data_width}")
        self.addr_width, self.data_width = addr_width, data_width
        super().__init__({
            "start": In(stream.Signature(entry_request_layout(addr_width))),
            "rd_cmd": Out(stream.Signature(command_layout(addr_width))),
            "rd_data": In(stream.Signature(data.StructLayout({"data": data_width,
                                                              "last": 1}))),
            "words": Out(stream.Signature(32)),
            "error": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        aw = self.addr_width
        W = self.data_width // 8
        lw = W.bit_length() - 1
        per_word = W // 4

        m.submodules.fifo = fifo = SyncFIFOBuffered(width=self.data_width, depth=DEPTH)
        addr = Signal(aw)
        limit = Signal(aw + 1)
        next_word = Signal(aw - lw + 1)
        end_word = Signal(aw - lw + 1)
        total = Signal(range(HEAD_WORDS + 2 * MAX_CHANNELS + 1))
        emitted = Signal.like(total)
        cur = Signal(self.data_width)
        cur_valid = Signal()
        pi = Signal(range(per_word))
        first = Signal()
        active = Signal()

        cmd_fire, piece, inflight = fetch_into(
            m, fifo, DEPTH, self.rd_cmd, self.rd_data, enable=active, word=next_word,
            end=end_word, lw=lw, max_beats=PIECE)
        with m.If(cmd_fire):
            m.d.sync += next_word.eq(next_word + piece)

        # words out: bus words split into 32-bit pieces, the ones before the entry skipped
        pieces = [cur[32 * k: 32 * (k + 1)] for k in range(per_word)]
        word = Signal(32)
        with m.Switch(pi):
            for k in range(per_word):
                with m.Case(k):
                    m.d.comb += word.eq(pieces[k])
        # ``want`` (``emitted < total``) is a register of its own, set where the two
        # counts change, so no comparison lies between them and ``words.valid`` (the
        # NMU's head registers, across the die)
        want = Signal()

        def entry_end(count):
            return addr + REQUANT_ENTRY.size + REQUANT_CHANNEL.size * count

        # whether each piece, were it the channel count, would refuse the entry: worked
        # out as the bus word is taken (from the FIFO's output register) and kept beside
        # it, so that no addition and comparison lie between the word and the NMU's head
        # registers across the die (``words.payload`` is 0 for a refused count)
        cur_bad = Signal(per_word)
        with m.If(~cur_valid & fifo.r_rdy):
            m.d.comb += fifo.r_en.eq(1)
            m.d.sync += [cur.eq(fifo.r_data), cur_valid.eq(1),
                         pi.eq(Mux(first, addr[2:lw] if lw > 2 else 0, 0)), first.eq(0)]
            for k in range(per_word):
                piece = fifo.r_data[32 * k: 32 * (k + 1)]
                m.d.sync += cur_bad[k].eq((piece >= MAX_CHANNELS) |
                                          (entry_end(piece)[:aw + 20] > limit))
        with m.If(cur_valid & ~want):
            m.d.sync += cur_valid.eq(0)   # the bytes after the entry
        last_piece = pi == per_word - 1
        bad = Signal()
        m.d.comb += bad.eq(cur_bad.bit_select(pi, 1))
        is_count = emitted == COUNT_WORD
        m.d.comb += [self.words.valid.eq(cur_valid & want),
                     self.words.payload.eq(Mux(is_count & bad, 0, word))]
        with m.If(self.words.valid & self.words.ready):
            m.d.sync += [emitted.eq(emitted + 1), pi.eq(pi + 1),
                         want.eq(emitted + 1 != total)]
            with m.If(last_piece):
                m.d.sync += cur_valid.eq(0)
            with m.If(is_count):
                with m.If(bad):
                    m.d.comb += self.error.eq(1)
                with m.Else():
                    # the count is not the head's last word, so words are still due
                    m.d.sync += [want.eq(1), total.eq(HEAD_WORDS + 2 * word[:17]),
                                 end_word.eq((entry_end(word)[:aw + 20] + W - 1) >> lw)]

        done = (~want & ~cur_valid & (next_word >= end_word) & (inflight == 0) & ~fifo.r_rdy)
        with m.If(active & done):
            m.d.sync += active.eq(0)
        with m.If(~active & ~fifo.r_rdy & (inflight == 0)):
            m.d.comb += self.start.ready.eq(1)
        # the request's registers load in every idle cycle, not on ``start.valid`` (the
        # SEQ's issue, across the die): only ``active`` waits on it. Nothing looks at them
        # while idle (no command goes out, the FIFO is empty, no word is offered), so the
        # start cycle loads the same values as before
        with m.If(~active):
            a = self.start.payload.addr
            m.d.sync += [addr.eq(a), limit.eq(self.start.payload.limit),
                         next_word.eq(a >> lw),
                         end_word.eq((a + REQUANT_ENTRY.size + W - 1) >> lw),
                         total.eq(HEAD_WORDS), emitted.eq(0), first.eq(1), want.eq(1)]
        with m.If(self.start.valid & self.start.ready):
            m.d.sync += active.eq(1)
        m.d.comb += self.busy.eq(active)
        return m
