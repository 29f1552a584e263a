"""The NEM engine's copy units: DMA (L1/L2 <-> L1/L2) and sDMA (DDR <-> L2).

Both wrap :class:`npu.bus.dma.RegionCopy` (the 4-D strided byte-region datapath) and make it
*stallable*: the copy's clock enable (its ``advance``) is low in a cycle where one of the
memory accesses it asks for cannot happen (an arbitrated SRAM port granted to another unit,
no AXI read data yet, AXI write data not accepted). A stalled copy holds every register
(but the command's, which load only while it is idle and asks for nothing), and its
requests stay the same, so it retries the same cycle's work next cycle.

* :class:`DmaUnit`: source and destination are L1 or L2 (``SRC_LEVEL`` / ``DST_LEVEL``),
  both through :class:`npu.bus.ports.ArbitratedSRAM` client ports.
* :class:`SdmaUnit`: DDR -> L2 or L2 -> DDR. The DDR side goes through the AXI burst
  engines: a *row walker* walks the same rows as the copy and issues, per row, burst
  commands for exactly the bus words the copy reads (DDR -> L2) or writes (L2 -> DDR), in
  pieces of at most 256 words, so a contiguous run moves one bus word per cycle in AXI
  bursts (through a register slice, a cycle of latency per command). The task is done
  when the copy is done and, toward DDR, every write command has its B responses.

Each unit takes one task at a time on ``start`` (a :func:`unit_command_layout`: the copy
command and the two levels; the sequencer has checked that the region lies inside the
memories) and reports it on ``done`` (``error``: an AXI write response was not OKAY).
``busy`` is high from the start to the done handshake, ``stall`` when busy and stalled;
``bytes`` counts the row bytes copied (as ``RegionCopy.bytes``).
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from nem.taskformat import COPY_COUNT_BITS, LEVELS
from npu.bus.axi import MAX_BURST, command_layout
from npu.bus.dma import RegionCopy, dma_command_layout
from npu.bus.ports import read_client_signature, write_client_signature
from npu.bus.stream import SkidBuffer

__all__ = ["DmaUnit", "SdmaUnit", "level_code", "unit_command_layout"]

LEVEL_BITS = (len(LEVELS) - 1).bit_length()


def level_code(name):
    """The task format's code of memory level ``name`` (``"DDR"``, ``"L2"``, ``"L1"``)."""
    return LEVELS.index(name)


def unit_command_layout(addr_width):
    """What the sequencer hands a copy unit: the region copy and the two memory levels."""
    return data.StructLayout({"copy": dma_command_layout(addr_width),
                              "src_level": LEVEL_BITS, "dst_level": LEVEL_BITS})


def _done_signature():
    return stream.Signature(data.StructLayout({"error": 1}))


def _load_copy(m, rc_cmd, copy):
    """Drive a RegionCopy command from a (wider) copy command; addresses truncate."""
    m.d.comb += [rc_cmd.src.eq(copy.src), rc_cmd.dst.eq(copy.dst)]
    for k in range(4):
        m.d.comb += rc_cmd.count[k].eq(copy.count[k])
    for k in range(3):
        m.d.comb += [rc_cmd.src_stride[k].eq(copy.src_stride[k]),
                     rc_cmd.dst_stride[k].eq(copy.dst_stride[k])]


class DmaUnit(wiring.Component):
    """L1/L2 <-> L1/L2 region copy on arbitrated SRAM ports.

    Parameters
    ----------
    data_width : int
    l1_depth, l2_depth : int
        Words of L1 and L2.
    addr_width : int
        Width of the addresses in the ``start`` command.
    """

    def __init__(self, *, data_width, l1_depth, l2_depth, addr_width=32):
        self.data_width, self.l1_depth, self.l2_depth = data_width, l1_depth, l2_depth
        depth = max(l1_depth, l2_depth)
        self.copy = RegionCopy(data_width=data_width, src_depth=depth, dst_depth=depth)
        super().__init__({
            "start": In(stream.Signature(unit_command_layout(addr_width))),
            "done": Out(_done_signature()),
            "l1_rd": Out(read_client_signature(l1_depth, data_width)),
            "l1_wr": Out(write_client_signature(l1_depth, data_width)),
            "l2_rd": Out(read_client_signature(l2_depth, data_width)),
            "l2_wr": Out(write_client_signature(l2_depth, data_width)),
            "busy": Out(1),
            "stall": Out(1),
            "bytes": Out(32),
            "src_level": Out(LEVEL_BITS),
            "dst_level": Out(LEVEL_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        advance = Signal()
        m.submodules.copy = rc = self.copy
        m.d.comb += rc.advance.eq(advance)
        l1 = level_code("L1")

        m.d.comb += [self.start.ready.eq(~self.busy & rc.cmd.ready),
                     rc.cmd.valid.eq(self.start.valid & ~self.busy)]
        _load_copy(m, rc.cmd.payload, self.start.payload.copy)
        # idle, the levels follow the payload (as the copy's command registers do): the
        # start handshake reaches only ``busy``. The port selections load flip-flops of
        # their own (``src_l1``, ``dst_l1``) rather than decode ``src_level`` and
        # ``dst_level``, which also go to the engine's byte counters across the die (the
        # board's worst path on seed 4 at 0ecd3af ran from ``src_level`` through that
        # decode, 5 ns of wire, to the read grant's selection and ``advance``)
        src_l1, dst_l1 = Signal(), Signal()
        with m.If(~self.busy):
            m.d.sync += [self.src_level.eq(self.start.payload.src_level),
                         self.dst_level.eq(self.start.payload.dst_level),
                         src_l1.eq(self.start.payload.src_level == l1),
                         dst_l1.eq(self.start.payload.dst_level == l1)]
        with m.If(self.start.valid & self.start.ready):
            m.d.sync += self.busy.eq(1)

        rd_req = rc.rd.en
        wr_req = rc.wr.valid
        rd_ok = Mux(src_l1, self.l1_rd.gnt, self.l2_rd.gnt)
        wr_ok = Mux(dst_l1, self.l1_wr.gnt, self.l2_wr.gnt)
        stall = (rd_req & ~rd_ok) | (wr_req & ~wr_ok)
        m.d.comb += [advance.eq(~stall), self.stall.eq(self.busy & stall)]
        for port, sel in ((self.l1_rd, src_l1), (self.l2_rd, ~src_l1)):
            m.d.comb += [port.req.eq(rd_req & sel), port.addr.eq(rc.rd.addr),
                         port.go.eq(rd_req & sel & advance)]
        m.d.comb += rc.rd.data.eq(Mux(src_l1, self.l1_rd.data, self.l2_rd.data))
        for port, sel in ((self.l1_wr, dst_l1), (self.l2_wr, ~dst_l1)):
            m.d.comb += [port.req.eq(wr_req & sel), port.addr.eq(rc.wr.addr),
                         port.data.eq(rc.wr.data), port.en.eq(rc.wr.en),
                         port.go.eq(wr_req & sel & advance)]

        wiring.connect(m, rc.done, wiring.flipped(self.done))
        with m.If(self.done.valid & self.done.ready):
            m.d.sync += self.busy.eq(0)
        m.d.comb += self.bytes.eq(rc.bytes)
        return m


class _RowWalker:
    """Walks the rows of a copy on one side and issues AXI commands for their words.

    Built inside :meth:`SdmaUnit.elaborate`. While ``idle`` the side's address, the
    strides and the counts follow ``copy``; ``load`` (a start, in an idle cycle) starts
    the walk; ``cmd`` is the AXI command stream; ``finished`` goes high when every
    command has been issued.
    """

    def __init__(self, m, addr_width, wbytes, copy, idle, load, to_ddr, cmd):
        lw = wbytes.bit_length() - 1
        strides = [Signal(addr_width, name=f"walk_stride{k}") for k in range(3)]
        counts = [Signal(COPY_COUNT_BITS, name=f"walk_count{k}") for k in range(4)]
        i = [Signal(COPY_COUNT_BITS, name=f"walk_i{k}") for k in range(1, 4)]
        # ``i[k] + 1 < counts[k + 1]`` in registers kept with the counters (as the copy's
        # ``more1``..``more3``): a row's last command picks the next row from flip-flops
        more = [Signal(name=f"walk_more{k}") for k in range(1, 4)]
        row = Signal(addr_width)
        base2, base3 = Signal(addr_width), Signal(addr_width)
        word = Signal(addr_width - lw)       # next word of the row to request
        left = Signal(17)                    # words of the row still to request
        in_row = Signal()
        active = Signal()
        self.finished = Signal()
        self.active = active

        with m.If(idle):
            addr = Mux(to_ddr, copy.dst, copy.src)
            m.d.sync += [row.eq(addr), base2.eq(addr), base3.eq(addr),
                         in_row.eq(0)]
            m.d.sync += [c.eq(copy.count[k]) for k, c in enumerate(counts)]
            m.d.sync += [x.eq(0) for x in i]
            m.d.sync += [f.eq(copy.count[k + 1] > 1) for k, f in enumerate(more)]
            for k in range(3):
                m.d.sync += strides[k].eq(Mux(to_ddr, copy.dst_stride[k], copy.src_stride[k]))
        with m.If(load):
            m.d.sync += [active.eq(1), self.finished.eq(0)]
            empty = (copy.count[0] == 0) | (copy.count[1] == 0) | (copy.count[2] == 0) | \
                (copy.count[3] == 0)
            with m.If(empty):
                m.d.sync += [active.eq(0), self.finished.eq(1)]

        n = counts[0]
        with m.If(active & ~in_row & ~load):
            first = row >> lw
            last = (row + n - 1) >> lw
            m.d.sync += [word.eq(first), left.eq(last - first + 1), in_row.eq(1)]

        piece = Signal(range(MAX_BURST + 1))
        m.d.comb += piece.eq(Mux(left > MAX_BURST, MAX_BURST, left))
        m.d.comb += [cmd.valid.eq(active & in_row), cmd.payload.addr.eq(word << lw),
                     cmd.payload.beats.eq(piece)]
        with m.If(cmd.valid & cmd.ready):
            m.d.sync += [word.eq(word + piece), left.eq(left - piece)]
            with m.If(left == piece):
                m.d.sync += in_row.eq(0)
                def restart(k):
                    return [i[k].eq(0), more[k].eq(counts[k + 1] > 1)]

                def count(k):
                    return [i[k].eq(i[k] + 1), more[k].eq(i[k] + 2 < counts[k + 1])]
                with m.If(more[0]):
                    m.d.sync += [*count(0), row.eq(row + strides[0])]
                with m.Elif(more[1]):
                    nb = base2 + strides[1]
                    m.d.sync += [*restart(0), *count(1), row.eq(nb), base2.eq(nb)]
                with m.Elif(more[2]):
                    nb = base3 + strides[2]
                    m.d.sync += [*restart(0), *restart(1), *count(2), row.eq(nb),
                                 base2.eq(nb), base3.eq(nb)]
                with m.Else():
                    m.d.sync += [active.eq(0), self.finished.eq(1)]


class SdmaUnit(wiring.Component):
    """DDR <-> L2 region copy: AXI burst engines on the DDR side, an arbitrated L2 port.

    Parameters
    ----------
    data_width : int
    l2_depth : int
    addr_width : int
        AXI (DDR) byte-address width; also the width of the ``start`` addresses.
    """

    def __init__(self, *, data_width, l2_depth, addr_width=32):
        self.data_width, self.l2_depth, self.addr_width = data_width, l2_depth, addr_width
        wbytes = data_width // 8
        ddr_words = (1 << addr_width) // wbytes
        self.copy = RegionCopy(data_width=data_width, src_depth=ddr_words, dst_depth=ddr_words)
        cmd = stream.Signature(command_layout(addr_width))
        super().__init__({
            "start": In(stream.Signature(unit_command_layout(addr_width))),
            "done": Out(_done_signature()),
            "l2_rd": Out(read_client_signature(l2_depth, data_width)),
            "l2_wr": Out(write_client_signature(l2_depth, data_width)),
            "rd_cmd": Out(cmd),
            "rd_data": In(stream.Signature(data.StructLayout({"data": data_width,
                                                              "last": 1}))),
            "wr_cmd": Out(cmd),
            "wr_data": Out(stream.Signature(data.StructLayout({"data": data_width,
                                                               "strb": wbytes}))),
            "wr_done": In(_done_signature()),
            "busy": Out(1),
            "stall": Out(1),
            "bytes": Out(32),
            "src_level": Out(LEVEL_BITS),
            "dst_level": Out(LEVEL_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        advance = Signal()
        m.submodules.copy = rc = self.copy
        m.d.comb += rc.advance.eq(advance)
        wbytes = self.data_width // 8
        to_ddr = Signal()

        load = Signal()
        m.d.comb += [self.start.ready.eq(~self.busy & rc.cmd.ready),
                     rc.cmd.valid.eq(self.start.valid & ~self.busy),
                     load.eq(self.start.valid & self.start.ready)]
        _load_copy(m, rc.cmd.payload, self.start.payload.copy)
        new_to_ddr = self.start.payload.dst_level == level_code("DDR")
        with m.If(~self.busy):
            m.d.sync += [self.src_level.eq(self.start.payload.src_level),
                         self.dst_level.eq(self.start.payload.dst_level),
                         to_ddr.eq(new_to_ddr)]
        with m.If(load):
            m.d.sync += self.busy.eq(1)

        # One walker, on the DDR side of the copy; its commands go to the reader (DDR ->
        # L2) or to the writer (L2 -> DDR).
        # The walker's commands pass a register slice: the shared reader's or writer's
        # ready (which depends on the other clients' requests) reaches the slice's
        # registers, not the walker's counters and address arithmetic.
        m.submodules.walk_slice = walk_slice = SkidBuffer(command_layout(self.addr_width))
        walker = _RowWalker(m, self.addr_width, wbytes, self.start.payload.copy, ~self.busy,
                            load, new_to_ddr, walk_slice.i)
        walk_cmd = walk_slice.o
        m.d.comb += [self.rd_cmd.payload.eq(walk_cmd.payload),
                     self.wr_cmd.payload.eq(walk_cmd.payload)]
        with m.If(to_ddr):
            m.d.comb += [self.wr_cmd.valid.eq(walk_cmd.valid), walk_cmd.ready.eq(self.wr_cmd.ready)]
        with m.Else():
            m.d.comb += [self.rd_cmd.valid.eq(walk_cmd.valid), walk_cmd.ready.eq(self.rd_cmd.ready)]

        # Write commands whose done is still due, and a sticky error.
        pending = Signal(16)
        error = Signal()
        issued = self.wr_cmd.valid & self.wr_cmd.ready
        m.d.comb += self.wr_done.ready.eq(1)
        finished_one = self.wr_done.valid
        with m.If(issued & ~finished_one):
            m.d.sync += pending.eq(pending + 1)
        with m.Elif(~issued & finished_one):
            m.d.sync += pending.eq(pending - 1)
        with m.If(finished_one & self.wr_done.payload.error):
            m.d.sync += error.eq(1)
        with m.If(load):
            m.d.sync += error.eq(0)

        rd_req = rc.rd.en
        wr_req = rc.wr.valid
        rd_ok = Mux(to_ddr, self.l2_rd.gnt, self.rd_data.valid)
        wr_ok = Mux(to_ddr, self.wr_data.ready, self.l2_wr.gnt)
        stall = (rd_req & ~rd_ok) | (wr_req & ~wr_ok)
        m.d.comb += [advance.eq(~stall), self.stall.eq(self.busy & stall)]

        # Source side: L2 port (toward DDR) or the reader's data, held like an SRAM word.
        held = Signal(self.data_width)
        m.d.comb += [self.l2_rd.req.eq(rd_req & to_ddr), self.l2_rd.addr.eq(rc.rd.addr),
                     self.l2_rd.go.eq(rd_req & to_ddr & advance),
                     self.rd_data.ready.eq(rd_req & ~to_ddr & (~wr_req | wr_ok))]
        with m.If(self.rd_data.valid & self.rd_data.ready):
            m.d.sync += held.eq(self.rd_data.payload.data)
        m.d.comb += rc.rd.data.eq(Mux(to_ddr, self.l2_rd.data, held))

        # Destination side: the writer's data stream (toward DDR) or the L2 port.
        m.d.comb += [self.l2_wr.req.eq(wr_req & ~to_ddr), self.l2_wr.addr.eq(rc.wr.addr),
                     self.l2_wr.data.eq(rc.wr.data), self.l2_wr.en.eq(rc.wr.en),
                     self.l2_wr.go.eq(wr_req & ~to_ddr & advance),
                     self.wr_data.valid.eq(wr_req & to_ddr & (~rd_req | rd_ok)),
                     self.wr_data.payload.data.eq(rc.wr.data),
                     self.wr_data.payload.strb.eq(rc.wr.en)]

        complete = walker.finished & ~walk_cmd.valid & (pending == 0) & ~issued
        m.d.comb += [self.done.valid.eq(rc.done.valid & complete),
                     self.done.payload.error.eq(rc.done.payload.error | error),
                     rc.done.ready.eq(self.done.ready & complete)]
        with m.If(self.done.valid & self.done.ready):
            m.d.sync += self.busy.eq(0)
        m.d.comb += self.bytes.eq(rc.bytes)
        return m
