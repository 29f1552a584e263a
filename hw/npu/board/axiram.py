"""Block RAM behind the engine's AXI4 port, with a 32-bit host port for the UART bridge.

The board has no DDR in use: :class:`AxiRam` is the engine's memory. It is an AXI4
subordinate (the engine's :func:`npu.bus.axi.axi4_signature`, seen from the other side) on
banks of simple dual-port block RAM (one read, one write port each, byte enables), plus a
host port (:func:`host_port_signature`) through which the bridge reads and writes 32-bit
words.

Behaviour (the Python model is a byte array; ``tests/board/test_axiram.py`` drives random
bursts with random stalls against it):

* One transaction at a time: an AR burst, an AW burst with its W beats and B response, or
  one host access. The host goes first, then reads and writes take turns, so none starves.
* Bursts are INCR with full-width beats (the only kind the engine's
  :class:`~npu.bus.axi.AxiBurstPort` issues; ``ARBURST``/``ARSIZE`` are not decoded). A read
  burst streams one beat per cycle once started; W beats are taken one per cycle, the burst
  ending at ``WLAST``. Read beats go through a FIFO of :data:`R_DEPTH` beats: a beat is
  read whenever the FIFO will have room for it, counted by a credit register, so the
  block RAMs' reads do not wait on ``RREADY`` (which comes from deep inside the engine).
* A beat whose word lies past the memory's end answers ``DECERR`` (read data 0; the write
  is dropped, and the burst's B response is ``DECERR``): the engine then stops with its AXI
  error cause instead of reading wrapped data.
* Host port: hold ``req`` (with ``we``, ``addr`` = byte address / 4, ``wdata``) until
  ``ack``; a read's word is on ``rdata`` in the ``ack`` cycle (:data:`READ_LATENCY` + 1
  cycles after the request is taken). The bridge checks the range before it asks.

Structure. A memory as large as fits on the board is some 128 DP16KD spread over the
whole die; one address register driving all of them and one multiplexer gathering their
outputs were the board's slowest paths (one net of 23.5 ns of routing from the write
address register to a far block RAM). So the memory is built as a tree of registers:

* **Banks** of ``bank_words`` words (about four DP16KD each), each with its own read
  address, write address, write data and byte-enable registers, and a register on its
  read data: every wire from a bank's registers to its block RAMs stays beside them.
* **Groups** of :data:`GROUP_BANKS` banks, each with its own copy of the access one cycle
  before the banks, and the group's read multiplexer into a register.
* The **front**: what the transaction FSM issues, into registers, before anything fans out.

Every copy of an address loads only when its own bank or group is the target (a clock
enable of its own), so synthesis cannot merge the copies back into one register, and a
bank's block RAMs read in every cycle (their read enable tied high). A read therefore
takes :data:`READ_LATENCY` cycles from the FSM to the R FIFO (front, group, bank, block
RAM, bank register, group register, output register); writes go down the same front,
group and bank stages, so a read issued after a write always sees it.

The FSM issues one access a cycle (its READ, WRITE and HOST states are exclusive), so no
bank is read and written in the same cycle and a read whose word is used never meets a
write. The banks' memories say so (``no_rw_check``): yosys then maps each to DP16KD
without its emulation of a same-address read and write (a copy of the write's address,
data and enables and their comparators per bank: about 2,650 flip-flops and 1,400 LUT4 of
the 256 KiB memory).
"""

from __future__ import annotations

from itertools import pairwise

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from npu.bus.axi import axi4_signature
from npu.bus.stream import StreamFIFO

__all__ = ["GROUP_BANKS", "READ_LATENCY", "RESP_DECERR", "R_DEPTH", "AxiRam",
           "host_port_signature"]

RESP_OKAY = 0
RESP_DECERR = 3
#: Cycles from the cycle the FSM issues a read to the cycle its beat enters the R FIFO:
#: the front, group and bank registers, the block RAM, the bank's and the group's data
#: registers and the output register.
READ_LATENCY = 7
#: Read beats the R channel's FIFO holds, and the credits the FSM issues reads against: a
#: credit comes back a cycle after its beat leaves the FIFO, so a burst streams at one
#: beat per cycle while ``RREADY`` stays high once the credits cover the round trip
#: (:data:`READ_LATENCY`, the FIFO's output register and the credit's return).
R_DEPTH = 16
#: Banks per group: the fan-out of a group's address copy and the width of its read
#: multiplexer.
GROUP_BANKS = 8
#: Bits per bank by default: four DP16KD (each 16 Kbit, used 8 data bits wide at 2048
#: words or 16 wide at 1024).
BANK_BITS = 4 * 16 * 1024


def host_port_signature(addr_bits):
    """The bridge's word port (manager side): 32-bit words, ``addr`` = byte address / 4."""
    return wiring.Signature({
        "req": Out(1), "we": Out(1), "addr": Out(addr_bits), "wdata": Out(32),
        "ack": In(1), "rdata": In(32),
    })


def _bits(n):
    """Bits of an index below *n* (at least 1)."""
    return max(1, (n - 1).bit_length())


class AxiRam(wiring.Component):
    """AXI4 subordinate block RAM with a host port.

    Parameters
    ----------
    size : int
        Bytes; a positive multiple of the bus word (``data_width // 8``).
    addr_width, data_width : int
        As the engine's AXI port (:func:`npu.bus.axi.axi4_signature`).
    bank_words : int, optional
        Words per bank, a power of two (default :data:`BANK_BITS` / ``data_width``); the
        last bank holds what is left.

    Attributes
    ----------
    axi : AXI4 subordinate (``In(axi4_signature(...))``)
    host : host word port (``In(host_port_signature(...))``)
    banks, groups : int
        How many of each the memory is built of.
    """

    def __init__(self, *, size, addr_width=32, data_width=64, bank_words=None):
        if data_width % 32:
            raise ValueError(f"data_width must be a multiple of 32, not {data_width!r}")
        wbytes = data_width // 8
        if not isinstance(size, int) or size <= 0 or size % wbytes:
            raise ValueError(f"memory size must be a positive multiple of {wbytes} bytes, "
                             f"not {size!r}")
        if bank_words is None:
            bank_words = BANK_BITS // data_width
        if (not isinstance(bank_words, int) or bank_words <= 0
                or bank_words & (bank_words - 1)):
            raise ValueError(f"bank_words must be a positive power of two, not "
                             f"{bank_words!r}")
        self.size, self.addr_width, self.data_width = size, addr_width, data_width
        self.depth = size // wbytes
        self.bank_words = min(bank_words, 1 << _bits(self.depth))
        self.banks = -(-self.depth // self.bank_words)
        self.groups = -(-self.banks // GROUP_BANKS)
        self.host_bits = max(1, (size // 4 - 1).bit_length())
        super().__init__({
            "axi": In(axi4_signature(addr_width, data_width)),
            "host": In(host_port_signature(self.host_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        axi, host = self.axi, self.host
        dw = self.data_width
        wbytes = dw // 8
        shift = wbytes.bit_length() - 1
        lanes = dw // 32
        lane_bits = (lanes - 1).bit_length()
        depth = self.depth
        off_bits = (self.bank_words - 1).bit_length()      # word offset inside a bank
        in_group = _bits(GROUP_BANKS) if self.banks > 1 else 0

        length = Signal(8)                         # AxLEN
        tid = Signal(axi.arid.shape())
        issued = Signal(9)
        werr = Signal()
        turn = Signal()                            # 1: a write goes first next time
        lane = Signal(max(1, lane_bits))
        credits = Signal(range(R_DEPTH + 1), init=R_DEPTH)
        # the words the FSM reads and writes next (one bit above the memory's words, for
        # the range check: a burst may run past the end)
        raddr = Signal(self.addr_width - shift + 1)
        waddr = Signal(self.addr_width - shift + 1)
        host_word = host.addr >> lane_bits if lane_bits else host.addr
        m.d.comb += [axi.rid.eq(tid), axi.bid.eq(tid)]

        # what the FSM issues this cycle (comb), into the front registers
        rd = Signal()                              # a read of ``raddr``
        rd_last = Signal()
        rd_host = Signal()
        wr = Signal()                              # a write of ``waddr``
        wr_data = Signal(dw)
        wr_strb = Signal(wbytes)

        # -- the R channel: beats into the FIFO ({data, resp, last}), out to the engine
        # (a read burst leaves READ only once every beat has left the FIFO, so ``tid``
        # holds for all of its beats)
        m.submodules.rfifo = rfifo = StreamFIFO(width=dw + 3, depth=R_DEPTH)
        popped = Signal()
        m.d.comb += [axi.rvalid.eq(rfifo.o.valid),
                     axi.rdata.eq(rfifo.o.payload[:dw]),
                     axi.rresp.eq(rfifo.o.payload[dw:dw + 2]),
                     axi.rlast.eq(rfifo.o.payload[dw + 2]),
                     rfifo.o.ready.eq(axi.rready)]
        m.d.sync += popped.eq(rfifo.o.valid & rfifo.o.ready)
        take = rd & ~rd_host
        m.d.sync += credits.eq(credits - take + popped)

        # -- the tree: front -> groups -> banks, and back
        def tag(name):
            # the read's tag, one stage: valid, past the end, last beat, host read, bank
            return {"v": Signal(name=f"{name}_v"), "err": Signal(name=f"{name}_err"),
                    "last": Signal(name=f"{name}_last"), "host": Signal(name=f"{name}_host"),
                    "bank": Signal(_bits(self.banks), name=f"{name}_bank")}

        def bank_of(word):
            return word[off_bits:] if self.banks > 1 else Const(0, 1)

        # the front: the FSM's access in registers
        f_raddr = Signal.like(raddr, name="front_raddr")
        f_waddr = Signal.like(waddr, name="front_waddr")
        f_wdata = Signal(dw, name="front_wdata")
        f_wstrb = Signal(wbytes, name="front_wstrb")
        f_wv = Signal(name="front_wv")
        stages = [tag(f"rtag{k}") for k in range(READ_LATENCY)]
        front = stages[0]
        m.d.sync += [front["v"].eq(rd), front["last"].eq(rd_last), front["host"].eq(rd_host),
                     front["err"].eq(raddr >= depth), f_raddr.eq(raddr),
                     f_wv.eq(wr & (waddr < depth)), f_waddr.eq(waddr),
                     f_wdata.eq(wr_data), f_wstrb.eq(wr_strb)]
        m.d.sync += front["bank"].eq(bank_of(raddr)[:len(front["bank"])])
        for prev, nxt in pairwise(stages):
            m.d.sync += [nxt[k].eq(prev[k]) for k in prev]
        front_rok = front["v"] & ~front["err"]
        f_rbank, f_wbank = bank_of(f_raddr), bank_of(f_waddr)

        q_groups = []
        for g in range(self.groups):
            members = range(g * GROUP_BANKS, min(self.banks, (g + 1) * GROUP_BANKS))
            # the group's copy of the access, loaded only when it is the group's
            g_rv = Signal(name=f"g{g}_rv")
            g_raddr = Signal(len(f_raddr), name=f"g{g}_raddr")
            g_wv = Signal(name=f"g{g}_wv")
            g_waddr = Signal(len(f_waddr), name=f"g{g}_waddr")
            g_wdata = Signal(dw, name=f"g{g}_wdata")
            g_wstrb = Signal(wbytes, name=f"g{g}_wstrb")
            r_hit = front_rok & (f_rbank >> in_group == g)
            w_hit = f_wv & (f_wbank >> in_group == g)
            m.d.sync += [g_rv.eq(r_hit), g_wv.eq(w_hit)]
            with m.If(r_hit):
                m.d.sync += g_raddr.eq(f_raddr)
            with m.If(w_hit):
                m.d.sync += [g_waddr.eq(f_waddr), g_wdata.eq(f_wdata), g_wstrb.eq(f_wstrb)]
            g_rbank, g_wbank = bank_of(g_raddr), bank_of(g_waddr)
            outs = []
            for b in members:
                words = min(self.bank_words, depth - b * self.bank_words)
                # (one access a cycle down the tree: a write never meets a read whose
                # word is used, so the block RAMs' behaviour on a collision is left open)
                mem = Memory(shape=dw, depth=words, init=[], attrs={"no_rw_check": 1})
                m.submodules[f"bank{b}"] = mem
                rport = mem.read_port(domain="sync")   # read enable high
                wport = mem.write_port(granularity=8)
                ab = max(1, (words - 1).bit_length())
                b_raddr = Signal(ab, name=f"bank{b}_raddr")
                b_waddr = Signal(ab, name=f"bank{b}_waddr")
                b_wdata = Signal(dw, name=f"bank{b}_wdata")
                b_wen = Signal(wbytes, name=f"bank{b}_wen")  # the byte enables, 0 if none
                b_q = Signal(dw, name=f"bank{b}_q")
                br_hit = g_rv & (g_rbank == b)
                bw_hit = g_wv & (g_wbank == b)
                with m.If(br_hit):
                    m.d.sync += b_raddr.eq(g_raddr[:ab])
                with m.If(bw_hit):
                    m.d.sync += [b_waddr.eq(g_waddr[:ab]), b_wdata.eq(g_wdata)]
                m.d.sync += [b_wen.eq(Mux(bw_hit, g_wstrb, 0)), b_q.eq(rport.data)]
                m.d.comb += [rport.addr.eq(b_raddr), wport.addr.eq(b_waddr),
                             wport.data.eq(b_wdata), wport.en.eq(b_wen)]
                outs.append(b_q)
            # the group's read multiplexer, its select loaded only for the group's reads
            # (stage 3: the bank registers hold the read; stage 4: its block RAMs' word)
            g_sel = Signal(max(1, in_group), name=f"g{g}_sel")
            g_q = Signal(dw, name=f"g{g}_q")
            t3 = stages[3]
            with m.If(t3["v"] & (t3["bank"] >> in_group == g)):
                m.d.sync += g_sel.eq(t3["bank"][:len(g_sel)])
            with m.Switch(g_sel):
                for k, out in enumerate(outs):
                    with m.Case(k):
                        m.d.sync += g_q.eq(out)
            q_groups.append(g_q)

        # the output register: the target group's word (stage 5 holds the read's tag
        # while the group registers hold its word)
        t5, t6 = stages[5], stages[6]
        q = Signal(dw, name="read_q")
        with m.If(t5["err"]):
            m.d.sync += q.eq(0)
        with m.Else():
            with m.Switch(t5["bank"] >> in_group):
                for g, g_q in enumerate(q_groups):
                    with m.Case(g):
                        m.d.sync += q.eq(g_q)
        m.d.comb += [rfifo.i.valid.eq(t6["v"] & ~t6["host"]),
                     rfifo.i.payload.eq(Cat(q, Mux(t6["err"], RESP_DECERR, RESP_OKAY)[:2],
                                            t6["last"]))]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(host.req):
                    # (the bridge holds the address until the ack)
                    m.d.sync += [raddr.eq(host_word), waddr.eq(host_word)]
                    if lane_bits:
                        m.d.sync += lane.eq(host.addr[:lane_bits])
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
                with m.If(host.we):
                    m.d.comb += [wr.eq(1), wr_data.eq(host.wdata.replicate(lanes)),
                                 host.ack.eq(1)]
                    if lane_bits:
                        m.d.comb += wr_strb.eq(0xF << (lane * 4))
                    else:
                        m.d.comb += wr_strb.eq(0xF)
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += [rd.eq(1), rd_host.eq(1)]
                    m.next = "HOST_READ"
            with m.State("HOST_READ"):
                # the word is in the output register while its tag is in the last stage
                m.d.comb += host.rdata.eq(q.word_select(lane, 32) if lane_bits else q)
                with m.If(t6["v"] & t6["host"]):
                    m.d.comb += host.ack.eq(1)
                    m.next = "IDLE"
            with m.State("READ"):
                more = issued <= length
                m.d.comb += [rd.eq(more & (credits != 0)), rd_last.eq(issued == length)]
                with m.If(rd):
                    m.d.sync += [issued.eq(issued + 1), raddr.eq(raddr + 1)]
                with m.If(~more & (credits == R_DEPTH)):
                    m.next = "IDLE"
            with m.State("WRITE"):
                m.d.comb += axi.wready.eq(1)
                with m.If(axi.wvalid):
                    m.d.comb += [wr.eq(1), wr_data.eq(axi.wdata), wr_strb.eq(axi.wstrb)]
                    with m.If(waddr >= depth):
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
