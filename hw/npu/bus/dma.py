"""Strided region copy between two on-chip memories (the DMA unit's datapath, L2 <-> L1).

A command copies a 4-D byte region::

    for i3 < count[3], i2 < count[2], i1 < count[1]:          # rows
        copy count[0] contiguous bytes
          from src + i1*src_stride[0] + i2*src_stride[1] + i3*src_stride[2]
          to   dst + i1*dst_stride[0] + i2*dst_stride[1] + i3*dst_stride[2]

Addresses and strides are in bytes and need no alignment: each row is realigned on the
fly. With ``W`` bytes per word, a row of ``n`` bytes from ``src`` to ``dst`` writes
``ceil((dst % W + n) / W)`` words; output word ``k`` is the two source words around source
address ``dst_word(k) - (dst - src)`` shifted by ``(src - dst) mod W`` bytes, with byte
enables masking what lies outside the row. A row costs one cycle per destination word
plus three (plan, first source word, read latency): full bus width on long rows.

Ports and timing
----------------
* ``cmd``: stream of :func:`dma_command_layout`; accepted when idle. The command's
  registers load from ``cmd.payload`` in every idle cycle (only the start waits for
  ``cmd.valid``), so ``cmd.valid`` reaches a handful of registers, not all of them.
* ``advance`` (in, high unless driven): the copy's clock enable. A caller whose memory
  ports can refuse an access (:mod:`npu.engine.copy_units`) drives it low in a cycle where
  an access the copy asks for cannot happen: every register of the copy holds, and its
  requests stay the same. Only the command's registers (loaded while idle, when the copy
  asks for nothing and so is never held) do not look at it: the stall, which comes from
  the arbitration beside the memories, does not reach their ~200 enables (the board's
  worst path on seed 3 at c0d5601 ran from DMA 0's ``fetched`` through the L1 write
  grant to the copy's enables, and the command's were 160-256 of each copy's long
  paths).
* ``rd``: read port of the source memory (``addr``, ``en``; ``data`` valid one cycle
  after ``en``, as :class:`npu.bus.memory.SRAM`). ``wr``: write port of the destination
  memory (``addr``, ``data``, byte enables ``en``; ``valid`` is high exactly when ``en`` is
  not zero, straight from registers, for a caller that stalls the copy on a write it
  cannot make). ``rd.en`` also comes from registers only. The ports are the unit's own: no
  arbitration stalls are modelled here.
* ``done``: one transfer per command when its last word has been written. ``error`` is
  set when a row would reach outside either memory: rows are checked as they start, the
  rows before the failing one are copied, the rest of the command is dropped.
* Counters: ``bytes`` (row bytes copied), ``busy`` (cycles with a command in progress).
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.hdl import EnableInserter
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from nem.taskformat import COPY_COUNT_BITS

__all__ = ["RegionCopy", "copy_region_model", "dma_command_layout"]


def dma_command_layout(addr_width):
    """A region-copy command (byte addresses, counts, byte strides of dims 1..3)."""
    return data.StructLayout({
        "src": addr_width,
        "dst": addr_width,
        # count[0]: bytes per row; count[1..3]: rows, planes, volumes. (Not called
        # "shape": that name is taken by View.shape.)
        "count": data.ArrayLayout(COPY_COUNT_BITS, 4),
        "src_stride": data.ArrayLayout(addr_width, 3),
        "dst_stride": data.ArrayLayout(addr_width, 3),
    })


def copy_region_model(src_mem, dst_mem, *, src, dst, count, src_stride, dst_stride):
    """Byte-wise model of one command on ``bytearray`` memories.

    Returns
    -------
    bool
        The ``error`` flag: a row reached outside a memory (rows before it are copied,
        that row and the rest are not). Word-granular, as in hardware: a row is out of
        range when its last byte's word is beyond the memory.
    """
    n0, n1, n2, n3 = count
    if 0 in count:
        return False
    for i3 in range(n3):
        for i2 in range(n2):
            for i1 in range(n1):
                s = src + i1 * src_stride[0] + i2 * src_stride[1] + i3 * src_stride[2]
                d = dst + i1 * dst_stride[0] + i2 * dst_stride[1] + i3 * dst_stride[2]
                if s + n0 > len(src_mem) or d + n0 > len(dst_mem):
                    return True
                dst_mem[d:d + n0] = src_mem[s:s + n0]
    return False


class RegionCopy(wiring.Component):
    """4-D strided byte-region copy with on-the-fly realignment.

    Parameters
    ----------
    data_width : int
        Word width of both memories (a power of two, 16..512 bits).
    src_depth, dst_depth : int
        Words in the source and destination memories.

    Attributes
    ----------
    cmd : stream of dma_command_layout, in
    rd : {"addr": out, "en": out, "data": in}
    wr : {"addr": out, "data": out, "en": out (byte enables), "valid": out (en != 0)}
    done : stream of {"error"}, out
    bytes, busy : Signal(32), out
    """

    def __init__(self, *, data_width=64, src_depth=1024, dst_depth=1024):
        if data_width not in (16, 32, 64, 128, 256, 512):
            raise ValueError(f"data_width must be a power of two in 16..512, "
                             f"not {data_width!r}")
        for name, depth in (("src_depth", src_depth), ("dst_depth", dst_depth)):
            if not isinstance(depth, int) or depth <= 0:
                raise ValueError(f"{name} must be a positive integer, not {depth!r}")
        self.data_width = data_width
        self.src_depth, self.dst_depth = src_depth, dst_depth
        self.wbytes = data_width // 8
        self.addr_width = max(src_depth * self.wbytes, dst_depth * self.wbytes).bit_length()
        super().__init__({
            "cmd": In(stream.Signature(dma_command_layout(self.addr_width))),
            "rd": Out(wiring.Signature({"addr": Out(range(src_depth)), "en": Out(1),
                                        "data": In(data_width)})),
            "wr": Out(wiring.Signature({"addr": Out(range(dst_depth)),
                                        "data": Out(data_width),
                                        "en": Out(data_width // 8),
                                        "valid": Out(1)})),
            "done": Out(stream.Signature(data.StructLayout({"error": 1}))),
            "bytes": Out(32),
            "busy": Out(32),
            "advance": In(1, init=1),
        })

    def elaborate(self, platform):
        top = Module()
        m = Module()                  # everything but the command's registers: stallable
        top.submodules.stepped = EnableInserter(self.advance)(m)
        W = self.wbytes
        lw = W.bit_length() - 1                       # log2(bytes per word)
        aw = self.addr_width

        self._finished = Signal()
        self._error = Signal()
        cmd = Signal(dma_command_layout(aw))
        active = Signal()
        i1, i2, i3 = (Signal(16, name=f"i{k}") for k in (1, 2, 3))
        # Whether each row level has a next iteration (``i + 1 < count``), in registers kept
        # with the counters: a row's end picks the next row from flip-flops, and no
        # counter comparison (a carry chain) lies in front of the address adders and the
        # multiplexers into the row registers (the board's worst path on seed 7 at
        # 72aa8dc ran from the sDMA copy's ``i1`` through the three comparisons to
        # ``row_src``, 17.22 ns).
        more1, more2, more3 = (Signal(name=f"more{k}") for k in (1, 2, 3))
        row_src, row_dst = Signal(aw), Signal(aw)     # addresses of the current row
        base2_src, base2_dst = Signal(aw), Signal(aw)  # start of the current i2 plane
        base3_src, base3_dst = Signal(aw), Signal(aw)  # start of the current i3 volume

        # Per-row plan, computed when a row starts.
        in_row = Signal()
        n = cmd.count[0]
        q = Signal(aw + 1)           # next source word index to fetch (may start at -1)
        q_last = Signal(aw)          # last source word of the row
        outs_left = Signal(17)       # destination words still to produce
        out_k = Signal(17)           # destination word counter within the row
        dst_word0 = Signal(aw)
        shift = Signal(range(W))     # (src - dst) mod W
        first_mask = Signal(W)
        last_mask = Signal(W)

        # Stage between read and use: the fetched word's tag.
        fetched = Signal()           # a fetch was issued last cycle (data or zero due)
        fetched_real = Signal()      # ... and it read memory (else the word is zero)
        prev = Signal(self.data_width)
        have_prev = Signal()

        m.d.comb += self.cmd.ready.eq(~active)
        # Idle: the command's registers follow the payload (nothing reads them until the
        # start); the start itself, the error and the done wait for the handshake. Idle,
        # the copy asks for no access, so ``advance`` is high: the command's registers
        # load outside the stallable part, and their enable is ``~active`` alone.
        with top.If(~active):
            top.d.sync += cmd.eq(self.cmd.payload)
        with m.If(~active):
            p = self.cmd.payload
            m.d.sync += [i1.eq(0), i2.eq(0), i3.eq(0), more1.eq(p.count[1] > 1),
                         more2.eq(p.count[2] > 1), more3.eq(p.count[3] > 1),
                         row_src.eq(p.src), row_dst.eq(p.dst),
                         base2_src.eq(p.src), base2_dst.eq(p.dst),
                         base3_src.eq(p.src), base3_dst.eq(p.dst)]
            with m.If(self.cmd.valid):
                m.d.sync += [active.eq(1), self._error.eq(0)]
                empty = (p.count[0] == 0) | (p.count[1] == 0) | (p.count[2] == 0) | \
                    (p.count[3] == 0)
                with m.If(empty):  # nothing to copy: done at once
                    m.d.sync += [active.eq(0), self._finished.eq(1)]
        with m.If(active):
            m.d.sync += self.busy.eq(self.busy + 1)

        # Fetch: one source word (or a zero word outside the row) per cycle, nout + 1 in all.
        # Whether a fetch is due and whether it reads memory (the row's first source word
        # <= q <= q_last) are registers of their own, set as a row starts (below), so the
        # read request (which a caller's stall depends on) is two flip-flops and an AND,
        # not a count and two address comparisons. q starts at the row's first word -
        # borrow and steps by one: it is before the row for the first fetch when borrow is
        # set, then in the row up to and including q_last, then past it.
        fetch = Signal()
        fetches_left = Signal(17)
        more = Signal()              # fetches_left != 0
        before = Signal()            # q is the word before the row's first
        real = Signal()              # q is a word of the row, at most q_last

        # Start a row: check it lies inside both memories, then plan fetches and writes.
        start_row = active & ~in_row & ~fetched
        src_off = row_src[:lw]
        dst_off = row_dst[:lw]
        out_of_range = (((row_src + n - 1) >> lw) >= self.src_depth) | \
            (((row_dst + n - 1) >> lw) >= self.dst_depth)
        with m.If(start_row & out_of_range):
            m.d.sync += [active.eq(0), self._finished.eq(1), self._error.eq(1)]
        with m.Elif(start_row):
            last_byte_dst = row_dst + n - 1
            nout = (last_byte_dst >> lw) - (row_dst >> lw) + 1
            # First source word needed: floor((dst_word0*W - (dst - src)) / W)
            #   = floor((src - dst_off) / W)  -> src_word - (1 if dst_off > src_off else 0)
            borrow = dst_off > src_off
            m.d.sync += [
                in_row.eq(1),
                q.eq((row_src >> lw) - borrow),
                q_last.eq((row_src + n - 1) >> lw),
                outs_left.eq(nout),
                out_k.eq(0),
                dst_word0.eq(row_dst >> lw),
                shift.eq(src_off - dst_off),
                # Lane b is written if dst_off <= b (first word) and b <= the last byte's
                # lane (last word). The end lanes are written out so that no comparison
                # with a constant result reaches the Verilog.
                first_mask.eq(Cat(dst_off == 0, *[(dst_off <= b) for b in range(1, W - 1)],
                                  1)),
                last_mask.eq(Cat(1, *[(b <= last_byte_dst[:lw]) for b in range(1, W - 1)],
                                 last_byte_dst[:lw] == W - 1)),
                have_prev.eq(0),
                fetches_left.eq(nout + 1), more.eq(1), before.eq(borrow), real.eq(~borrow),
            ]

        m.d.comb += fetch.eq(in_row & more)
        m.d.comb += [self.rd.addr.eq(q[:aw]), self.rd.en.eq(fetch & real)]
        m.d.sync += [fetched.eq(fetch), fetched_real.eq(fetch & real)]
        with m.If(fetch):
            m.d.sync += [q.eq(q + 1), fetches_left.eq(fetches_left - 1),
                         more.eq(fetches_left != 1), before.eq(0),
                         real.eq(before | (real & (q[:aw] != q_last)))]

        # Use: combine with the previous word, write one destination word.
        word = Mux(fetched_real, self.rd.data, 0)
        window = Signal(2 * self.data_width)
        m.d.comb += window.eq(Cat(prev, word) >> (shift * 8))
        m.d.comb += self.wr.valid.eq(fetched & have_prev)
        with m.If(fetched):
            m.d.sync += [prev.eq(word), have_prev.eq(1)]
            with m.If(have_prev):
                mask = Signal(W)
                m.d.comb += mask.eq(Mux(out_k == 0, first_mask, (1 << W) - 1)
                                    & Mux(outs_left == 1, last_mask, (1 << W) - 1))
                m.d.comb += [self.wr.addr.eq(dst_word0 + out_k),
                             self.wr.data.eq(window[:self.data_width]),
                             self.wr.en.eq(mask)]
                m.d.sync += [out_k.eq(out_k + 1), outs_left.eq(outs_left - 1)]
                with m.If(outs_left == 1):
                    m.d.sync += [in_row.eq(0), self.bytes.eq(self.bytes + n)]
                    self._next_row(m, cmd, active, (i1, i2, i3), (more1, more2, more3),
                                   row_src, row_dst, base2_src, base2_dst, base3_src,
                                   base3_dst)

        m.d.comb += [self.done.valid.eq(self._finished),
                     self.done.payload.error.eq(self._error)]
        with m.If(self.done.valid & self.done.ready):
            m.d.sync += self._finished.eq(0)
        return top

    def _next_row(self, m, cmd, active, counters, more, row_src, row_dst,
                  base2_src, base2_dst, base3_src, base3_dst):
        """The row after the current one: the innermost level with a next iteration
        (``more``) counts, the levels inside it start again (their ``more`` from the
        count alone, ``count > 1``), its own ``more`` from the counter it steps to."""
        (i1, i2, i3), (more1, more2, more3) = counters, more
        with m.If(more1):
            m.d.sync += [i1.eq(i1 + 1), more1.eq(i1 + 2 < cmd.count[1]),
                         row_src.eq(row_src + cmd.src_stride[0]),
                         row_dst.eq(row_dst + cmd.dst_stride[0])]
        with m.Elif(more2):
            ns, nd = base2_src + cmd.src_stride[1], base2_dst + cmd.dst_stride[1]
            m.d.sync += [i1.eq(0), more1.eq(cmd.count[1] > 1),
                         i2.eq(i2 + 1), more2.eq(i2 + 2 < cmd.count[2]),
                         row_src.eq(ns), row_dst.eq(nd), base2_src.eq(ns), base2_dst.eq(nd)]
        with m.Elif(more3):
            ns, nd = base3_src + cmd.src_stride[2], base3_dst + cmd.dst_stride[2]
            m.d.sync += [i1.eq(0), more1.eq(cmd.count[1] > 1),
                         i2.eq(0), more2.eq(cmd.count[2] > 1),
                         i3.eq(i3 + 1), more3.eq(i3 + 2 < cmd.count[3]),
                         row_src.eq(ns), row_dst.eq(nd), base2_src.eq(ns), base2_dst.eq(nd),
                         base3_src.eq(ns), base3_dst.eq(nd)]
        with m.Else():
            m.d.sync += [active.eq(0), self._finished.eq(1)]
