"""AXI4 manager side toward DDR: the bus signature and word-granular burst engines.

The engines move whole bus words between a stream and memory; byte-level alignment of
regions is the job of the DMA units above them.

* :class:`AxiBurstReader`: a command ``{addr, beats}`` (word-aligned address, number of
  bus words) becomes INCR bursts on AR, and the R data comes out as a stream, ``last`` on
  the command's final word.
* :class:`AxiBurstWriter`: a command ``{addr, beats}`` plus a stream of ``{data, strb}``
  words becomes AW bursts and W beats; when every B response is in, a ``done`` transfer
  reports the command (``error`` if any response was not OKAY).

Burst rule (shared with the Python model :func:`split_bursts`): a burst is as long as
the command allows, at most 256 beats (AXI4 INCR), and never crosses a 4 KiB boundary.
Several bursts of one command may be outstanding (``max_outstanding``), so a long
contiguous transfer streams one word per cycle once the first data arrive. Commands are
taken one at a time: a new command starts when the previous one has completed.

At the Verilog boundary the bus flattens to ``<port>__awaddr``, ``<port>__wdata``, ...,
which is what ``cocotbext.axi.AxiBus.from_prefix(dut, "<port>_")`` expects.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

__all__ = [
    "AxiBurstPort",
    "AxiBurstReader",
    "AxiBurstWriter",
    "axi4_signature",
    "command_layout",
    "split_bursts",
]

MAX_BURST = 256
BOUNDARY = 4096
RESP_OKAY = 0


def _check_widths(addr_width, data_width):
    if not isinstance(addr_width, int) or not 12 <= addr_width <= 64:
        raise ValueError(f"addr_width must be an integer in 12..64, not {addr_width!r}")
    if data_width not in (32, 64, 128, 256, 512):
        raise ValueError(f"data_width must be one of 32, 64, 128, 256, 512, not {data_width!r}")


def _check_engine(engine, addr_width, data_width, max_outstanding):
    _check_widths(addr_width, data_width)
    if not isinstance(max_outstanding, int) or not 1 <= max_outstanding <= 16:
        raise ValueError(f"max_outstanding must be an integer in 1..16, "
                         f"not {max_outstanding!r}")
    engine.addr_width, engine.data_width = addr_width, data_width
    engine.max_outstanding = max_outstanding


def axi4_signature(addr_width, data_width, id_width=1):
    """AXI4 manager-side signature (flat member names, as on a Verilog port list)."""
    _check_widths(addr_width, data_width)
    return wiring.Signature({
        "awid": Out(id_width), "awaddr": Out(addr_width), "awlen": Out(8), "awsize": Out(3),
        "awburst": Out(2), "awvalid": Out(1), "awready": In(1),
        "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
        "wvalid": Out(1), "wready": In(1),
        "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
        "arid": Out(id_width), "araddr": Out(addr_width), "arlen": Out(8), "arsize": Out(3),
        "arburst": Out(2), "arvalid": Out(1), "arready": In(1),
        "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
        "rvalid": In(1), "rready": Out(1),
    })


def command_layout(addr_width):
    """A transfer command: word-aligned byte address and number of bus words."""
    return data.StructLayout({"addr": addr_width, "beats": 16})


def split_bursts(addr, beats, bytes_per_beat):
    """The bursts ``[(addr, beats), ...]`` a command becomes (the engines' rule)."""
    bursts = []
    while beats:
        room = (BOUNDARY - addr % BOUNDARY) // bytes_per_beat
        n = min(beats, MAX_BURST, room)
        bursts.append((addr, n))
        addr += n * bytes_per_beat
        beats -= n
    return bursts


class _BurstIssuer:
    """Shared AR/AW issuing logic: the next burst of the current command."""

    def __init__(self, m, addr_width, bytes_per_beat):
        self.addr = Signal(addr_width)
        self.left = Signal(17)            # beats of the command not yet requested
        shift = bytes_per_beat.bit_length() - 1
        room = Signal(range(BOUNDARY // bytes_per_beat + 1))
        m.d.comb += room.eq((BOUNDARY - self.addr[:12]) >> shift)
        self.length = Signal(range(MAX_BURST + 1))
        limit = Mux(room < MAX_BURST, room, MAX_BURST)
        m.d.comb += self.length.eq(Mux(self.left < limit, self.left, limit))
        self.shift = shift

    def advance(self, m):
        m.d.sync += [self.addr.eq(self.addr + (self.length << self.shift)),
                     self.left.eq(self.left - self.length)]


class AxiBurstReader(wiring.Component):
    """Reads whole bus words from AXI4 memory into a stream.

    Parameters
    ----------
    addr_width, data_width : int
    max_outstanding : int
        Bursts in flight at once (1..16).

    Attributes
    ----------
    axi : AXI4 manager (only the read channels are driven; AW/W idle, B ignored)
    cmd : stream of command_layout, in
    data : stream of {"data", "last"}, out
    error : Signal, out
        Sticky: an R response was not OKAY.
    beats : Signal(32), out
        Counter of words delivered.
    """

    def __init__(self, *, addr_width=32, data_width=64, max_outstanding=4):
        _check_engine(self, addr_width, data_width, max_outstanding)
        super().__init__({
            "axi": Out(axi4_signature(addr_width, data_width)),
            "cmd": In(stream.Signature(command_layout(addr_width))),
            "data": Out(stream.Signature(data.StructLayout({"data": data_width, "last": 1}))),
            "error": Out(1),
            "beats": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        bpb = self.data_width // 8
        axi = self.axi
        issue = _BurstIssuer(m, self.addr_width, bpb)
        outstanding = Signal(range(self.max_outstanding + 1))
        rx_left = Signal(17)               # words of the command still to be delivered

        m.d.comb += [axi.arsize.eq(bpb.bit_length() - 1), axi.arburst.eq(1),
                     axi.arid.eq(0), axi.bready.eq(1)]

        idle = (issue.left == 0) & (rx_left == 0)
        m.d.comb += self.cmd.ready.eq(idle)
        with m.If(self.cmd.valid & idle):
            m.d.sync += [issue.addr.eq(self.cmd.payload.addr),
                         issue.left.eq(self.cmd.payload.beats),
                         rx_left.eq(self.cmd.payload.beats)]

        ar_fire = axi.arvalid & axi.arready
        m.d.comb += [axi.arvalid.eq((issue.left != 0) & (outstanding < self.max_outstanding)),
                     axi.araddr.eq(issue.addr), axi.arlen.eq(issue.length - 1)]
        with m.If(ar_fire):
            issue.advance(m)

        r_fire = axi.rvalid & axi.rready
        m.d.comb += [axi.rready.eq(self.data.ready),
                     self.data.valid.eq(axi.rvalid),
                     self.data.payload.data.eq(axi.rdata),
                     self.data.payload.last.eq(rx_left == 1)]
        with m.If(r_fire):
            m.d.sync += [rx_left.eq(rx_left - 1), self.beats.eq(self.beats + 1)]
            with m.If(axi.rresp != RESP_OKAY):
                m.d.sync += self.error.eq(1)
        burst_done = r_fire & axi.rlast
        with m.If(ar_fire & ~burst_done):
            m.d.sync += outstanding.eq(outstanding + 1)
        with m.Elif(~ar_fire & burst_done):
            m.d.sync += outstanding.eq(outstanding - 1)
        return m


class AxiBurstWriter(wiring.Component):
    """Writes a stream of bus words (with byte strobes) to AXI4 memory.

    Parameters
    ----------
    addr_width, data_width, max_outstanding : int
        As for :class:`AxiBurstReader`.

    Attributes
    ----------
    axi : AXI4 manager (only the write channels are driven; AR idle, R ignored)
    cmd : stream of command_layout, in
    data : stream of {"data", "strb"}, in
    done : stream of {"error"}, out
        One transfer per command, after its last B response.
    beats : Signal(32), out
        Counter of words written.
    """

    def __init__(self, *, addr_width=32, data_width=64, max_outstanding=4):
        _check_engine(self, addr_width, data_width, max_outstanding)
        super().__init__({
            "axi": Out(axi4_signature(addr_width, data_width)),
            "cmd": In(stream.Signature(command_layout(addr_width))),
            "data": In(stream.Signature(data.StructLayout({
                "data": data_width, "strb": data_width // 8}))),
            "done": Out(stream.Signature(data.StructLayout({"error": 1}))),
            "beats": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        bpb = self.data_width // 8
        axi = self.axi
        issue = _BurstIssuer(m, self.addr_width, bpb)
        m.submodules.lengths = lengths = SyncFIFOBuffered(width=9, depth=self.max_outstanding)
        b_left = Signal(17)     # bursts whose B response is still due
        error = Signal()
        busy = Signal()

        m.d.comb += [axi.awsize.eq(bpb.bit_length() - 1), axi.awburst.eq(1), axi.awid.eq(0),
                     axi.rready.eq(1)]

        m.d.comb += self.cmd.ready.eq(~busy)
        with m.If(self.cmd.valid & ~busy):
            m.d.sync += [issue.addr.eq(self.cmd.payload.addr),
                         issue.left.eq(self.cmd.payload.beats), busy.eq(1), error.eq(0)]

        # AW: one burst at a time, its length queued for the W side.
        aw_fire = axi.awvalid & axi.awready
        m.d.comb += [axi.awvalid.eq((issue.left != 0) & lengths.w_rdy),
                     axi.awaddr.eq(issue.addr), axi.awlen.eq(issue.length - 1),
                     lengths.w_data.eq(issue.length), lengths.w_en.eq(aw_fire)]
        with m.If(aw_fire):
            issue.advance(m)

        # W: beats of the burst at the head of the queue.
        w_count = Signal(9)
        w_fire = axi.wvalid & axi.wready
        m.d.comb += [axi.wvalid.eq(self.data.valid & lengths.r_rdy),
                     self.data.ready.eq(axi.wready & lengths.r_rdy),
                     axi.wdata.eq(self.data.payload.data), axi.wstrb.eq(self.data.payload.strb),
                     axi.wlast.eq(w_count + 1 == lengths.r_data)]
        with m.If(w_fire):
            m.d.sync += self.beats.eq(self.beats + 1)
            with m.If(axi.wlast):
                m.d.sync += w_count.eq(0)
                m.d.comb += lengths.r_en.eq(1)
            with m.Else():
                m.d.sync += w_count.eq(w_count + 1)

        # B: count responses; the command is done when none is due and all were issued.
        b_fire = axi.bvalid & axi.bready
        m.d.comb += axi.bready.eq(1)
        with m.If(aw_fire & ~b_fire):
            m.d.sync += b_left.eq(b_left + 1)
        with m.Elif(~aw_fire & b_fire):
            m.d.sync += b_left.eq(b_left - 1)
        with m.If(b_fire & (axi.bresp != RESP_OKAY)):
            m.d.sync += error.eq(1)

        finished = busy & (issue.left == 0) & (b_left == 0) & ~lengths.r_rdy
        m.d.comb += [self.done.valid.eq(finished), self.done.payload.error.eq(error)]
        with m.If(self.done.valid & self.done.ready):
            m.d.sync += busy.eq(0)
        return m


_READ_MEMBERS = ("arid", "araddr", "arlen", "arsize", "arburst", "arvalid", "arready",
                 "rid", "rdata", "rresp", "rlast", "rvalid", "rready")
_WRITE_MEMBERS = ("awid", "awaddr", "awlen", "awsize", "awburst", "awvalid", "awready",
                  "wdata", "wstrb", "wlast", "wvalid", "wready", "bid", "bresp", "bvalid",
                  "bready")


class AxiBurstPort(wiring.Component):
    """A reader and a writer sharing one AXI4 manager port (read and write channels).

    Attributes
    ----------
    axi : AXI4 manager
    rd_cmd, rd_data, rd_error, rd_beats : the reader's ports
    wr_cmd, wr_data, wr_done, wr_beats : the writer's ports
    """

    def __init__(self, *, addr_width=32, data_width=64, max_outstanding=4):
        self.reader = AxiBurstReader(addr_width=addr_width, data_width=data_width,
                                     max_outstanding=max_outstanding)
        self.writer = AxiBurstWriter(addr_width=addr_width, data_width=data_width,
                                     max_outstanding=max_outstanding)
        rd, wr = self.reader.signature.members, self.writer.signature.members
        super().__init__({
            "axi": Out(axi4_signature(addr_width, data_width)),
            "rd_cmd": rd["cmd"], "rd_data": rd["data"], "rd_error": rd["error"],
            "rd_beats": rd["beats"],
            "wr_cmd": wr["cmd"], "wr_data": wr["data"], "wr_done": wr["done"],
            "wr_beats": wr["beats"],
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader = rd = self.reader
        m.submodules.writer = wr = self.writer
        for engine, names in ((rd, _READ_MEMBERS), (wr, _WRITE_MEMBERS)):
            for name in names:
                ours, theirs = getattr(self.axi, name), getattr(engine.axi, name)
                if self.axi.signature.members[name].flow == Out:
                    m.d.comb += ours.eq(theirs)
                else:
                    m.d.comb += theirs.eq(ours)
        wiring.connect(m, wiring.flipped(self.rd_cmd), rd.cmd)
        wiring.connect(m, rd.data, wiring.flipped(self.rd_data))
        wiring.connect(m, wiring.flipped(self.wr_cmd), wr.cmd)
        wiring.connect(m, wiring.flipped(self.wr_data), wr.data)
        wiring.connect(m, wr.done, wiring.flipped(self.wr_done))
        m.d.comb += [self.rd_error.eq(rd.error), self.rd_beats.eq(rd.beats),
                     self.wr_beats.eq(wr.beats)]
        return m
