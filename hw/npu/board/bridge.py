"""The UART host bridge: request frames in, CSR and memory accesses, reply frames out.

:class:`Bridge` parses the frames of :mod:`npu.board.protocol` from a byte stream (the
UART receiver), checks the CRC, the command, the length and the address range, runs the
command on the engine's AXI4-Lite CSR bank (manager side) and on the memory's host port
(:func:`npu.board.axiram.host_port_signature`), and sends the reply frame to a byte stream
(the UART transmitter). Its Python model is :class:`npu.board.model.BridgeModel`
(``tests/board/test_bridge.py`` runs both on the same byte streams, with stalls on both
streams).

* A request's payload is kept in a 256-byte buffer and nothing is executed before its CRC
  byte has checked: a damaged MEM_WRITE writes nothing.
* Every state that waits for a byte of a frame counts cycles; after ``timeout`` cycles
  without a byte the frame is dropped with a TIMEOUT reply, so a cut frame (or a LEN larger
  than what was sent) never wedges the bridge.
* While it executes a command and sends the reply the bridge takes no bytes (the UART
  receiver holds one; the host waits for each reply before the next request).
* CSR sequences (START: PROG_LO, PROG_HI, START; STATUS: four reads) stop at the first
  error response, which gives a BUS reply.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from npu.board.axiram import host_port_signature
from npu.board.protocol import (
    INFO_MAGIC,
    MAX_WORDS,
    PROTOCOL_VERSION,
    REPLY_SYNC,
    REQUEST_SYNC,
    STATUS_REGS,
    Command,
    Status,
    crc8_update,
)
from npu.board.uart import RX_LAYOUT
from npu.bus.csr import RegisterMap, axi_lite_signature

__all__ = ["Bridge", "crc8_expr"]


def crc8_expr(crc, byte):
    """Amaranth expression: :func:`npu.board.protocol.crc8_update` of *crc* and *byte*.

    The update is linear over GF(2) in ``crc ^ byte``: output bit ``j`` is the XOR of the
    input bits ``i`` whose unit vector's update has bit ``j`` set (the matrix comes from
    the protocol's own bit-serial function, so the two cannot disagree).
    """
    c = (crc ^ byte)[:8]
    columns = [crc8_update(0, 1 << i) for i in range(8)]
    bits = []
    for j in range(8):
        taps = [c[i] for i in range(8) if columns[i] >> j & 1]
        x = taps[0]
        for t in taps[1:]:
            x = x ^ t
        bits.append(x)
    return Cat(*bits)


class Bridge(wiring.Component):
    """Frame parser, command executor and reply sender.

    Parameters
    ----------
    regmap : npu.bus.csr.RegisterMap
        The CSR map behind the ``csr`` port (the engine's); START and STATUS use its
        ``PROG_LO``, ``PROG_HI``, ``START`` and :data:`~npu.board.protocol.STATUS_REGS`.
    memory_bytes : int
        Size of the memory behind ``mem`` (a multiple of 4): the MEM_READ / MEM_WRITE range.
    engine : bool
        Reported by INFO (an engine is behind the CSR port).
    timeout : int
        Inter-byte timeout in cycles.

    Attributes
    ----------
    rx : In(stream.Signature(RX_LAYOUT))
        Received bytes with their UART framing-error flag.
    tx : Out(stream.Signature(8))
        Reply bytes.
    csr : AXI4-Lite manager
    mem : host word port of the memory
    frame_error : Out(1)
        One-cycle pulse with every error reply (for a status LED).
    busy : Out(1)
        High from a request's sync byte to the end of its reply.
    """

    def __init__(self, regmap, *, memory_bytes, engine=True, timeout=1 << 20):
        if not isinstance(regmap, RegisterMap):
            raise TypeError(f"regmap must be a RegisterMap, not {regmap!r}")
        if not isinstance(memory_bytes, int) or memory_bytes <= 0 or memory_bytes % 4 \
                or memory_bytes > 1 << 32:
            raise ValueError(f"memory_bytes must be a positive multiple of 4 up to 4 GiB, "
                             f"not {memory_bytes!r}")
        if not isinstance(timeout, int) or timeout < 16:
            raise ValueError(f"timeout must be an integer >= 16 cycles, not {timeout!r}")
        self.regmap, self.memory_bytes = regmap, memory_bytes
        self.engine, self.timeout = bool(engine), timeout
        self.mem_bits = max(1, (memory_bytes // 4 - 1).bit_length())
        self.csr_bits = regmap.addr_width
        super().__init__({
            "rx": In(stream.Signature(RX_LAYOUT)),
            "tx": Out(stream.Signature(8)),
            "csr": In(axi_lite_signature(regmap.addr_width)),
            "mem": Out(host_port_signature(self.mem_bits)),
            "frame_error": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        rx, tx, csr, mem = self.rx, self.tx, self.csr, self.mem
        byte, err = rx.payload.data, rx.payload.error

        cmd = Signal(8)
        length = Signal(8)
        count = Signal(8)
        crc = Signal(8)
        line_err = Signal()
        hdr = Signal(48)                   # the payload's first six bytes
        timer = Signal(range(self.timeout + 1))
        code = Signal(8)                   # reply status
        words = Signal(128)                # reply words of INFO, CSR_READ, STATUS
        n_words = Signal(range(MAX_WORDS + 1))
        widx = Signal(range(MAX_WORDS + 1))
        from_mem = Signal()
        maddr = Signal(self.mem_bits)
        nbyte = Signal(2)
        oword = Signal(32)
        op = Signal(2)
        n_ops = Signal(3)
        aw_done = Signal()
        w_done = Signal()
        bidx = Signal(8)
        wword = Signal(32)

        m.submodules.buf = buf = Memory(shape=8, depth=256, init=[])
        bw = buf.write_port()
        br = buf.read_port(domain="sync")
        m.d.comb += [bw.addr.eq(count), bw.data.eq(byte), br.addr.eq(bidx)]

        off16 = hdr[:16]
        val32 = hdr[16:48]
        addr32 = hdr[:32]
        nread = hdr[32:40]
        nwrite = (length - 4)[2:8]
        m.d.sync += self.frame_error.eq(0)

        # the CSR operation `op` of the command (write?, offset, data)
        reg = self.regmap
        op_we = Signal()
        op_off = Signal(self.csr_bits)
        op_data = Signal(32)
        with m.Switch(cmd):
            with m.Case(Command.CSR_READ):
                m.d.comb += op_off.eq(off16)
            with m.Case(Command.CSR_WRITE):
                m.d.comb += [op_we.eq(1), op_off.eq(off16), op_data.eq(val32)]
            with m.Case(Command.START):
                m.d.comb += op_we.eq(1)
                with m.Switch(op):
                    with m.Case(0):
                        m.d.comb += [op_off.eq(reg.offset("PROG_LO")), op_data.eq(addr32)]
                    with m.Case(1):
                        m.d.comb += [op_off.eq(reg.offset("PROG_HI")), op_data.eq(0)]
                    with m.Default():
                        m.d.comb += [op_off.eq(reg.offset("START")), op_data.eq(1)]
            with m.Case(Command.STATUS):
                with m.Switch(op):
                    for k, name in enumerate(STATUS_REGS):
                        with m.Case(k):
                            m.d.comb += op_off.eq(reg.offset(name))

        info = [int.from_bytes(INFO_MAGIC, "little"),
                PROTOCOL_VERSION | int(self.engine) << 8 | self.csr_bits << 16,
                self.memory_bytes & 0xFFFFFFFF]
        csr_limit = 1 << self.csr_bits

        def fail(status):
            m.d.sync += [code.eq(status), n_words.eq(0)]
            m.next = "REPLY_SYNC"

        def mem_range_bad(nw):
            end = addr32 + (nw << 2)  # 33 bits wide: no wrap
            return (addr32[:2] != 0) | (end > self.memory_bytes)

        def byte_wait(state_next_on_byte):
            """Count idle cycles of a frame; TIMEOUT when too many."""
            m.d.comb += rx.ready.eq(1)
            with m.If(rx.valid):
                m.d.sync += [timer.eq(0), line_err.eq(line_err | err)]
                state_next_on_byte()
            with m.Elif(timer == self.timeout - 1):
                m.d.sync += timer.eq(0)
                fail(Status.TIMEOUT)
            with m.Else():
                m.d.sync += timer.eq(timer + 1)

        with m.FSM() as fsm:
            m.d.comb += self.busy.eq(~fsm.ongoing("HUNT"))
            with m.State("HUNT"):
                m.d.comb += rx.ready.eq(1)
                with m.If(rx.valid & (byte == REQUEST_SYNC) & ~err):
                    m.d.sync += [timer.eq(0), line_err.eq(0), crc.eq(0)]
                    m.next = "CMD"
            with m.State("CMD"):
                def got_cmd():
                    m.d.sync += [cmd.eq(byte), crc.eq(crc8_expr(crc, byte))]
                    m.next = "LEN"
                byte_wait(got_cmd)
            with m.State("LEN"):
                def got_len():
                    m.d.sync += [length.eq(byte), count.eq(0), hdr.eq(0),
                                 crc.eq(crc8_expr(crc, byte))]
                    with m.If(byte == 0):
                        m.next = "CHECK"
                    with m.Else():
                        m.next = "PAYLOAD"
                byte_wait(got_len)
            with m.State("PAYLOAD"):
                def got_byte():
                    m.d.comb += bw.en.eq(1)
                    m.d.sync += [count.eq(count + 1), crc.eq(crc8_expr(crc, byte))]
                    for k in range(6):
                        with m.If(count == k):
                            m.d.sync += hdr[8 * k:8 * k + 8].eq(byte)
                    with m.If(count == length - 1):
                        m.next = "CHECK"
                byte_wait(got_byte)
            with m.State("CHECK"):
                def got_crc():
                    with m.If(line_err | err):
                        fail(Status.LINE)
                    with m.Elif(crc != byte):
                        fail(Status.CHECKSUM)
                    with m.Else():
                        m.next = "DECODE"
                byte_wait(got_crc)
            with m.State("DECODE"):
                m.d.sync += [code.eq(Status.OK), n_words.eq(0), widx.eq(0), from_mem.eq(0),
                             op.eq(0), aw_done.eq(0), w_done.eq(0), maddr.eq(addr32[2:]),
                             bidx.eq(4), nbyte.eq(0)]
                with m.Switch(cmd):
                    with m.Case(Command.INFO):
                        with m.If(length != 0):
                            fail(Status.LENGTH)
                        with m.Else():
                            m.d.sync += [words.eq(Cat(*(Const(w, 32) for w in info))),
                                         n_words.eq(len(info))]
                            m.next = "REPLY_SYNC"
                    with m.Case(Command.CSR_READ, Command.CSR_WRITE):
                        with m.If(length != Mux(cmd == Command.CSR_READ, 2, 6)):
                            fail(Status.LENGTH)
                        with m.Elif((off16[:2] != 0) | (off16 >= csr_limit)):
                            fail(Status.ADDRESS)
                        with m.Else():
                            m.d.sync += [n_ops.eq(1),
                                         n_words.eq(cmd == Command.CSR_READ)]
                            m.next = "CSR_ISSUE"
                    with m.Case(Command.START):
                        with m.If(length != 4):
                            fail(Status.LENGTH)
                        with m.Else():
                            m.d.sync += n_ops.eq(3)
                            m.next = "CSR_ISSUE"
                    with m.Case(Command.STATUS):
                        with m.If(length != 0):
                            fail(Status.LENGTH)
                        with m.Else():
                            m.d.sync += [n_ops.eq(len(STATUS_REGS)),
                                         n_words.eq(len(STATUS_REGS))]
                            m.next = "CSR_ISSUE"
                    with m.Case(Command.MEM_READ):
                        with m.If((length != 5) | (nread == 0) | (nread > MAX_WORDS)):
                            fail(Status.LENGTH)
                        with m.Elif(mem_range_bad(nread)):
                            fail(Status.ADDRESS)
                        with m.Else():
                            m.d.sync += [n_words.eq(nread), from_mem.eq(1)]
                            m.next = "REPLY_SYNC"
                    with m.Case(Command.MEM_WRITE):
                        with m.If((length < 8) | (length > 4 + 4 * MAX_WORDS)
                                  | (length[:2] != 0)):
                            fail(Status.LENGTH)
                        with m.Elif(mem_range_bad(nwrite)):
                            fail(Status.ADDRESS)
                        with m.Else():
                            m.next = "MW_READ"
                    with m.Default():
                        fail(Status.COMMAND)

            # CSR operations: op 0 .. n_ops-1
            with m.State("CSR_ISSUE"):
                m.d.comb += [csr.awaddr.eq(op_off), csr.araddr.eq(op_off),
                             csr.wdata.eq(op_data), csr.wstrb.eq(0xF)]
                with m.If(op_we):
                    m.d.comb += [csr.awvalid.eq(~aw_done), csr.wvalid.eq(~w_done)]
                    aw_now = aw_done | csr.awready
                    w_now = w_done | csr.wready
                    m.d.sync += [aw_done.eq(aw_now), w_done.eq(w_now)]
                    with m.If(aw_now & w_now):
                        m.next = "CSR_RESP"
                with m.Else():
                    m.d.comb += csr.arvalid.eq(1)
                    with m.If(csr.arready):
                        m.next = "CSR_RESP"
            with m.State("CSR_RESP"):
                m.d.sync += [aw_done.eq(0), w_done.eq(0)]
                resp = Signal(2)
                done = Signal()
                with m.If(op_we):
                    m.d.comb += [csr.bready.eq(1), resp.eq(csr.bresp), done.eq(csr.bvalid)]
                with m.Else():
                    m.d.comb += [csr.rready.eq(1), resp.eq(csr.rresp), done.eq(csr.rvalid)]
                    with m.If(csr.rvalid):
                        with m.Switch(op):
                            for k in range(4):
                                with m.Case(k):
                                    m.d.sync += words[32 * k:32 * k + 32].eq(csr.rdata)
                with m.If(done):
                    with m.If(resp != 0):
                        fail(Status.BUS)
                    with m.Elif(op == n_ops - 1):
                        m.next = "REPLY_SYNC"
                    with m.Else():
                        m.d.sync += op.eq(op + 1)
                        m.next = "CSR_ISSUE"

            # MEM_WRITE: bytes 4.. of the payload buffer, a word at a time
            with m.State("MW_READ"):
                m.d.comb += br.en.eq(1)
                m.next = "MW_SHIFT"
            with m.State("MW_SHIFT"):
                m.d.sync += [wword.eq(Cat(wword[8:], br.data)), bidx.eq(bidx + 1),
                             nbyte.eq(nbyte + 1)]
                with m.If(nbyte == 3):
                    m.next = "MW_WRITE"
                with m.Else():
                    m.next = "MW_READ"
            with m.State("MW_WRITE"):
                m.d.comb += [mem.req.eq(1), mem.we.eq(1), mem.addr.eq(maddr),
                             mem.wdata.eq(wword)]
                with m.If(mem.ack):
                    m.d.sync += maddr.eq(maddr + 1)
                    with m.If(bidx == length):
                        m.next = "REPLY_SYNC"
                    with m.Else():
                        m.next = "MW_READ"

            # the reply: sync, status, length, payload words, CRC
            with m.State("REPLY_SYNC"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(REPLY_SYNC)]
                with m.If(code != Status.OK):
                    m.d.sync += self.frame_error.eq(tx.ready)
                with m.If(tx.ready):
                    m.d.sync += crc.eq(0)
                    m.next = "REPLY_STATUS"
            with m.State("REPLY_STATUS"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(code)]
                with m.If(tx.ready):
                    m.d.sync += crc.eq(crc8_expr(crc, code))
                    m.next = "REPLY_LEN"
            with m.State("REPLY_LEN"):
                plen = (n_words << 2)[:8]
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(plen)]
                with m.If(tx.ready):
                    m.d.sync += crc.eq(crc8_expr(crc, plen))
                    with m.If(n_words == 0):
                        m.next = "REPLY_CRC"
                    with m.Else():
                        m.next = "REPLY_WORD"
            with m.State("REPLY_WORD"):
                with m.If(from_mem):
                    m.d.comb += [mem.req.eq(1), mem.addr.eq(maddr)]
                    with m.If(mem.ack):
                        m.d.sync += [oword.eq(mem.rdata), maddr.eq(maddr + 1), nbyte.eq(0)]
                        m.next = "REPLY_BYTE"
                with m.Else():
                    m.d.sync += [oword.eq(words.word_select(widx[:2], 32)), nbyte.eq(0)]
                    m.next = "REPLY_BYTE"
            with m.State("REPLY_BYTE"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(oword[:8])]
                with m.If(tx.ready):
                    m.d.sync += [oword.eq(oword >> 8), nbyte.eq(nbyte + 1),
                                 crc.eq(crc8_expr(crc, oword[:8]))]
                    with m.If(nbyte == 3):
                        m.d.sync += widx.eq(widx + 1)
                        with m.If(widx == n_words - 1):
                            m.next = "REPLY_CRC"
                        with m.Else():
                            m.next = "REPLY_WORD"
            with m.State("REPLY_CRC"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(crc)]
                with m.If(tx.ready):
                    m.next = "HUNT"
        return m
