"""Block RAM behind the engine's AXI4 port, with a 32-bit host port for the UART bridge.

The board has no DDR in use: :class:`AxiRam` is the engine's memory. It is an AXI4
subordinate (the engine's :func:`npu.bus.axi.axi4_signature`, seen from the other side) on
one simple dual-port block RAM (one read, one write port, byte enables), plus a host port
(:func:`host_port_signature`) through which the bridge reads and writes 32-bit words.

Behaviour (the Python model is a byte array; ``tests/board/test_axiram.py`` drives random
bursts with random stalls against it):

* One transaction at a time: an AR burst, an AW burst with its W beats and B response, or
  one host access. The host goes first, then reads and writes take turns, so none starves.
* Bursts are INCR with full-width beats (the only kind the engine's
  :class:`~npu.bus.axi.AxiBurstPort` issues; ``ARBURST``/``ARSIZE`` are not decoded). A read
  burst streams one beat per cycle once started; W beats are taken one per cycle, the burst
  ending at ``WLAST``. Read beats go through a FIFO of :data:`R_DEPTH` beats: the block
  RAM reads a beat whenever the FIFO will have room for it, counted from registers, so its
  read enable does not wait on ``RREADY`` (which comes from deep inside the engine);
  the block RAMs themselves read every cycle, the beat's enable only decides whether the
  word goes into the FIFO.
* A beat whose word lies past the memory's end answers ``DECERR`` (read data 0; the write
  is dropped, and the burst's B response is ``DECERR``): the engine then stops with its AXI
  error cause instead of reading wrapped data.
* Host port: hold ``req`` (with ``we``, ``addr`` = byte address / 4, ``wdata``) until
  ``ack``; a read's word is on ``rdata`` in the ``ack`` cycle, from a register (a read
  takes three cycles after the request, a write one). The bridge checks the range before
  it asks.
* The block RAM's read and write addresses are registers of their own (loaded as a
  transaction starts, stepped by one per beat), with nothing between them and the
  memory: a memory as large as fits on the board spreads over block RAMs across the
  die, and an adder or a multiplexer in front of that fan-out was the board's slowest
  path (12.7 ns of routing after the burst's ``base + beat``).
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from npu.bus.axi import axi4_signature
from npu.bus.stream import StreamFIFO

__all__ = ["RESP_DECERR", "AxiRam", "host_port_signature"]

RESP_OKAY = 0
RESP_DECERR = 3
#: Read beats the R channel's FIFO holds: a beat is read from the block RAM when the beats
#: in the FIFO and the one read last cycle leave room for it, so a burst streams at one
#: beat per cycle while ``RREADY`` stays high (the FIFO's output register adds a cycle).
R_DEPTH = 4


def host_port_signature(addr_bits):
    """The bridge's word port (manager side): 32-bit words, ``addr`` = byte address / 4."""
    return wiring.Signature({
        "req": Out(1), "we": Out(1), "addr": Out(addr_bits), "wdata": Out(32),
        "ack": In(1), "rdata": In(32),
    })


class AxiRam(wiring.Component):
    """AXI4 subordinate block RAM with a host port.

    Parameters
    ----------
    size : int
        Bytes; a positive multiple of the bus word (``data_width // 8``).
    addr_width, data_width : int
        As the engine's AXI port (:func:`npu.bus.axi.axi4_signature`).

    Attributes
    ----------
    axi : AXI4 subordinate (``In(axi4_signature(...))``)
    host : host word port (``In(host_port_signature(...))``)
    """

    def __init__(self, *, size, addr_width=32, data_width=64):
        if data_width % 32:
            raise ValueError(f"data_width must be a multiple of 32, not {data_width!r}")
        wbytes = data_width // 8
        if not isinstance(size, int) or size <= 0 or size % wbytes:
            raise ValueError(f"memory size must be a positive multiple of {wbytes} bytes, "
                             f"not {size!r}")
        self.size, self.addr_width, self.data_width = size, addr_width, data_width
        self.depth = size // wbytes
        self.host_bits = max(1, (size // 4 - 1).bit_length())
        super().__init__({
            "axi": In(axi4_signature(addr_width, data_width)),
            "host": In(host_port_signature(self.host_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        axi, host = self.axi, self.host
        wbytes = self.data_width // 8
        shift = wbytes.bit_length() - 1
        lanes = self.data_width // 32
        lane_bits = (lanes - 1).bit_length()
        depth = self.depth
        m.submodules.mem = mem = Memory(shape=self.data_width, depth=depth, init=[])
        rport = mem.read_port(domain="sync")
        wport = mem.write_port(granularity=8)

        length = Signal(8)                         # AxLEN
        tid = Signal(axi.arid.shape())
        issued = Signal(9)
        inflight = Signal()                        # a beat read last cycle: in the FIFO now
        rerr = Signal()
        rlast = Signal()
        werr = Signal()
        turn = Signal()                            # 1: a write goes first next time
        lane = Signal(max(1, lane_bits))

        host_word = host.addr >> lane_bits if lane_bits else host.addr
        # the host's read word from a register: the block RAMs' outputs gather across the
        # die, and the bridge that takes the word sits elsewhere (18 ns of routing on one
        # placement, the board's slowest path, when the word went straight on)
        host_rdata = Signal(32)
        m.d.comb += host.rdata.eq(host_rdata)
        m.d.comb += [axi.rid.eq(tid), axi.bid.eq(tid)]
        # the words the ports read and write next (one bit above the memory's words, for
        # the range check: a burst may run past the end)
        raddr = Signal(self.addr_width - shift + 1)
        waddr = Signal(self.addr_width - shift + 1)
        # the block RAMs read every cycle (``rport.en`` stays at its reset value, 1): a
        # beat is taken from ``rport.data`` in the cycle after its address was presented,
        # and nothing else ever looks at that output. A read enable of a beat's own was
        # a net from the FSM to all of the block RAMs' clock enables across the die
        # (17 ns of routing on one placement, the board's slowest path).
        m.d.comb += [rport.addr.eq(raddr), wport.addr.eq(waddr)]

        # the R channel: beats from the block RAM into the FIFO ({data, resp, last}), out
        # to the engine (a read burst leaves READ only once the FIFO is empty, so ``tid``
        # holds for all of its beats)
        dw = self.data_width
        m.submodules.rfifo = rfifo = StreamFIFO(width=dw + 3, depth=R_DEPTH)
        m.d.comb += [rfifo.i.valid.eq(inflight),
                     rfifo.i.payload.eq(Cat(Mux(rerr, 0, rport.data),
                                            Mux(rerr, RESP_DECERR, RESP_OKAY)[:2], rlast)),
                     axi.rvalid.eq(rfifo.o.valid),
                     axi.rdata.eq(rfifo.o.payload[:dw]),
                     axi.rresp.eq(rfifo.o.payload[dw:dw + 2]),
                     axi.rlast.eq(rfifo.o.payload[dw + 2]),
                     rfifo.o.ready.eq(axi.rready)]
        m.d.sync += inflight.eq(0)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(host.req):
                    # (the bridge holds the address until the ack)
                    m.d.sync += [raddr.eq(host_word), waddr.eq(host_word)]
                    m.next = "HOST"
                with m.Elif(axi.arvalid & (~axi.awvalid | ~turn)):
                    m.d.comb += axi.arready.eq(1)
                    m.d.sync += [raddr.eq(axi.araddr[shift:]), length.eq(axi.arlen),
                                 tid.eq(axi.arid), issued.eq(0), turn.eq(1)]
                    m.next = "READ"
                with m.Elif(axi.awvalid):
                    m.d.comb += axi.awready.eq(1)
                    m.d.sync += [waddr.eq(axi.awaddr[shift:]), tid.eq(axi.awid), werr.eq(0),
                                 turn.eq(0)]
                    m.next = "WRITE"
            with m.State("HOST"):
                if lane_bits:
                    m.d.sync += lane.eq(host.addr[:lane_bits])
                with m.If(host.we):
                    m.d.comb += [wport.data.eq(host.wdata.replicate(lanes)),
                                 host.ack.eq(1)]
                    if lane_bits:
                        m.d.comb += wport.en.eq(0xF << (host.addr[:lane_bits] * 4))
                    else:
                        m.d.comb += wport.en.eq(0xF)
                    m.next = "IDLE"
                with m.Else():
                    m.next = "HOST_READ"
            with m.State("HOST_READ"):
                m.d.sync += host_rdata.eq(rport.data.word_select(lane, 32) if lane_bits
                                          else rport.data)
                m.next = "HOST_ACK"
            with m.State("HOST_ACK"):
                m.d.comb += host.ack.eq(1)
                m.next = "IDLE"
            with m.State("READ"):
                more = issued <= length
                read = Signal()
                m.d.comb += read.eq(more & (rfifo.level + inflight < R_DEPTH))
                with m.If(read):
                    m.d.sync += [inflight.eq(1), rerr.eq(raddr >= depth),
                                 rlast.eq(issued == length), issued.eq(issued + 1),
                                 raddr.eq(raddr + 1)]
                with m.If(~more & ~inflight & (rfifo.level == 0)):
                    m.next = "IDLE"
            with m.State("WRITE"):
                m.d.comb += axi.wready.eq(1)
                with m.If(axi.wvalid):
                    m.d.comb += wport.data.eq(axi.wdata)
                    with m.If(waddr < depth):
                        m.d.comb += wport.en.eq(axi.wstrb)
                    with m.Else():
                        m.d.sync += werr.eq(1)
                    m.d.sync += waddr.eq(waddr + 1)
                    with m.If(axi.wlast):
                        m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += [axi.bvalid.eq(1), axi.bresp.eq(Mux(werr, RESP_DECERR,
                                                                RESP_OKAY))]
                with m.If(axi.bready):
                    m.next = "IDLE"
        return m
