"""The NEM engine top level: SEQ, DMA and sDMA units, NMU, L1/L2 SRAM, AXI4 to DDR, CSRs.

Block diagram (one engine; ``n`` DMAs, ``s`` sDMAs and an NMU from the device)::

    host --AXI4-Lite--> AxiLiteCsr --start/base--> Sequencer --unit_start[k]--> units
                              ^ status, counters     |  ^ unit_done[k] (sets tokens)
                              |                      |  |
                              |        fetch_cmd/data v  |
    DDR <==AXI4==> AxiBurstPort <-- AxiReadMux <--- SEQ fetcher, sDMA[0..s-1] (DDR -> L2)
                                <-- AxiWriteMux <-- sDMA[0..s-1] (L2 -> DDR)

    DmaUnit[0..n-1]  --client ports-->  L1 (ArbitratedSRAM)   L2 (ArbitratedSRAM)
    SdmaUnit[0..s-1] --client ports-------------------------> L2
    NmuUnit          --client ports-->  L1 (weights: a second read port);
                     SEQ --clear/write--> its shadow registers
    EntryFetcher     <-- AxiReadMux (the NMU task's requantisation entry) --rq--> NmuUnit
    CstlUnit[0..c-1] --client ports-->  L1; SEQ --clear/write--> its shadow registers
    TableFetcher[0..c-1] <-- AxiReadMux (a unary CSTL task's table) --table--> CstlUnit

Every arbitrated port uses one rotating priority (a counter over the units), so in each
cycle the unit that goes first is granted all it asks for. The register map is
:func:`engine_register_map` (``docs/engine.md`` lists it, checked by a test).
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from nem.taskformat import LEVELS
from npu.bus.axi import AxiBurstPort, axi4_signature
from npu.bus.csr import AxiLiteCsr, Reg, RegisterMap, axi_lite_signature
from npu.bus.ports import ArbitratedSRAM, AxiReadMux, AxiWriteMux
from npu.cstl.unit import COUNTERS as CSTL_COUNTERS
from npu.cstl.unit import CstlUnit
from npu.engine.config import EngineConfig
from npu.engine.copy_units import DmaUnit, SdmaUnit, level_code
from npu.engine.entry_fetch import EntryFetcher
from npu.engine.seq import Sequencer, Status
from npu.engine.table_fetch import TableFetcher
from npu.nmu.unit import COUNTERS as NMU_COUNTERS
from npu.nmu.unit import NmuUnit

__all__ = ["ENGINE_ID", "PATHS", "NemEngine", "engine_register_map", "unit_names"]

#: ``ID`` register: "NEM1" as a little-endian word.
ENGINE_ID = int.from_bytes(b"NEM1", "little")
#: Copy paths with a byte counter each: (source level, destination level).
PATHS = (("DDR", "L2"), ("L2", "DDR"), ("L2", "L1"), ("L1", "L2"), ("L1", "L1"), ("L2", "L2"))
WATCHDOG_DEFAULT = 1 << 16


def unit_names(config):
    """Names of the units in SEQ order: ``DMA0..``, ``SDMA0..``, ``NMU0``, ``CSTL0..``."""
    return ([f"DMA{k}" for k in range(config.n_dma)]
            + [f"SDMA{k}" for k in range(config.n_sdma)]
            + [f"NMU{k}" for k in range(config.n_nmu)]
            + [f"CSTL{k}" for k in range(config.n_cstl)])


def engine_register_map(config):
    """The engine's CSR map (AXI4-Lite, 32-bit registers) for ``config``."""
    regs = [
        Reg("ID", 0x000, "ro", doc='constant "NEM1" (little-endian)'),
        Reg("START", 0x004, "pulse", doc="write 1: run the program at PROG_LO/HI; clears "
                                         "the counters"),
        Reg("STATUS", 0x008, "ro", doc="0 idle, 1 busy, 2 done, 3 error"),
        Reg("ERROR_CAUSE", 0x00C, "ro", doc="npu.engine.seq.Cause of the last error (0: none)"),
        Reg("ERROR_TASK", 0x010, "ro", doc="the failing task: decoded, in the issue slot, or "
                                           "run by the failing unit (AXI_ERROR: the next "
                                           "task to decode)"),
        Reg("PROG_LO", 0x014, "rw", doc="program byte address in DDR, bits 31..0 "
                                        "(word-aligned)"),
        Reg("PROG_HI", 0x018, "rw", doc="bits 63..32 (must be 0: 32-bit DDR addresses)"),
        Reg("WATCHDOG", 0x01C, "rw", init=WATCHDOG_DEFAULT,
            doc="cycles without progress before the WATCHDOG error (0: off)"),
        Reg("TASKS_ISSUED", 0x020, "ro", doc="tasks issued in this run"),
        Reg("TASKS_DONE", 0x024, "ro", doc="tasks completed in this run"),
        Reg("TOKENS", 0x028, "ro", doc="the token scoreboard"),
        Reg("CYCLES", 0x040, "ro", doc="cycles with STATUS busy"),
        Reg("SEQ_WAIT", 0x044, "ro", doc="cycles the SEQ held a decoded task (tokens or "
                                         "unit not ready)"),
    ]
    for k, name in enumerate(unit_names(config)):
        regs.append(Reg(f"BUSY_{name}", 0x080 + 4 * k, "ro", doc=f"cycles {name} was busy"))
        regs.append(Reg(f"STALL_{name}", 0x0C0 + 4 * k, "ro",
                        doc=f"cycles {name} was busy but stalled (port or AXI)"))
    for k, (src, dst) in enumerate(PATHS):
        regs.append(Reg(f"BYTES_{src}_{dst}", 0x100 + 4 * k, "ro",
                        doc=f"bytes copied {src} -> {dst}"))
    if config.n_nmu:
        regs.append(Reg("NMU_CAUSE", 0x140, "ro",
                        doc="npu.nmu.model.Cause of the NMU's last refused task (0: none)"))
        for k, (name, doc) in enumerate(NMU_COUNTERS.items()):
            regs.append(Reg(f"NMU_{name.upper()}", 0x144 + 4 * k, "ro",
                            doc=f"NMU {doc}, summed over its tasks"))
    if config.n_cstl:
        regs.append(Reg("CSTL_CAUSE", 0x160, "ro",
                        doc="npu.nmu.model.Cause of the last refused CSTL task (0: none)"))
    for k in range(config.n_cstl):
        for j, (name, doc) in enumerate(CSTL_COUNTERS.items()):
            regs.append(Reg(f"CSTL{k}_{name.upper()}", 0x180 + 0x20 * k + 4 * j, "ro",
                            doc=f"CSTL{k} {doc}, summed over its tasks"))
    return RegisterMap(regs, addr_width=12)


def _report_done(m, done, seq_done, idle):
    """A unit's ``done`` to the SEQ once its queued L1/L2 writes are written (``idle``:
    its write queues are empty, ``npu.bus.ports.ArbitratedSRAM.wr_idle``), through a
    register beside the unit.

    The unit's ``done`` comes from its FSM's state, and the SEQ's state, tokens and
    counters depend on it: the board's worst path at 09d33ac (seeds 2 and 4) was the NMU's
    state -> its ``done`` -> across the die -> the SEQ's state. The register is a forward
    slice: it takes a completion when it is empty or being emptied (the SEQ takes every
    completion at once, so it never holds one for longer than a cycle), and the SEQ sees
    it a cycle after the unit ends.
    """
    full = Signal()
    error = Signal()
    take = Signal()
    m.d.comb += [take.eq(done.valid & idle & (~full | seq_done.ready)),
                 done.ready.eq(idle & (~full | seq_done.ready)),
                 seq_done.valid.eq(full),
                 seq_done.payload.error.eq(error)]
    with m.If(take):
        m.d.sync += [full.eq(1), error.eq(done.payload.error)]
    with m.Elif(seq_done.ready):
        m.d.sync += full.eq(0)


class NemEngine(wiring.Component):
    """The NEM engine for a shipped device.

    Parameters
    ----------
    device : str
        ``"small"`` or ``"sim"`` (the shipped devices), or ``"FILE.nem:NAME"`` for any NEM
        device file (see :mod:`npu.engine.config`).

    Attributes
    ----------
    axi : AXI4 manager toward DDR
    csr : AXI4-Lite subordinate (the register map)
    dbg_issue, dbg_issue_unit, dbg_issue_wait, dbg_issue_signal, dbg_tokens : Out
        The SEQ's issue strobe, the issued task's unit and token masks, and the token
        scoreboard (for testbench assertions).
    """

    def __init__(self, *, device="small"):
        self.config = cfg = EngineConfig.shipped(device)
        self.regmap = engine_register_map(cfg)
        self.n_units = cfg.n_dma + cfg.n_sdma + cfg.n_nmu + cfg.n_cstl
        super().__init__({
            "axi": Out(axi4_signature(cfg.addr_width, cfg.data_width)),
            "csr": Out(axi_lite_signature(self.regmap.addr_width)),
            "dbg_issue": Out(1),
            "dbg_issue_unit": Out(range(self.n_units)),
            "dbg_issue_wait": Out(32),
            "dbg_issue_signal": Out(32),
            "dbg_tokens": Out(cfg.tokens),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        n = self.n_units
        m.submodules.csr = csr = AxiLiteCsr(self.regmap)
        wiring.connect(m, wiring.flipped(self.csr), csr.bus)
        m.submodules.seq = seq = Sequencer(cfg)
        m.submodules.port = port = AxiBurstPort(addr_width=cfg.addr_width,
                                                data_width=cfg.data_width, max_outstanding=4)
        wiring.connect(m, wiring.flipped(self.axi), port.axi)
        m.submodules.rmux = rmux = AxiReadMux(addr_width=cfg.addr_width,
                                              data_width=cfg.data_width,
                                              clients=1 + cfg.n_sdma + cfg.n_nmu + cfg.n_cstl)
        m.submodules.wmux = wmux = AxiWriteMux(addr_width=cfg.addr_width,
                                               data_width=cfg.data_width, clients=cfg.n_sdma)
        wiring.connect(m, rmux.rd_cmd, port.rd_cmd)
        wiring.connect(m, port.rd_data, rmux.rd_data)
        wiring.connect(m, wmux.wr_cmd, port.wr_cmd)
        wiring.connect(m, wmux.wr_data, port.wr_data)
        wiring.connect(m, port.wr_done, wmux.wr_done)
        wiring.connect(m, seq.fetch_cmd, rmux.cmd[0])
        wiring.connect(m, rmux.data[0], seq.fetch_data)

        # L1 serves the DMAs and the NMU (client n_dma); L2 the DMAs and sDMAs. The rotation
        # runs over the units (DMAs, sDMAs, NMU); a unit without a port on a memory hands
        # its turn to client 0 there. With an NMU, L1 has a second read port: the NMU's
        # activation stream (one word per cycle) owns the first one, and the DMAs' L1
        # reads share the second with the NMU's weight reads, which go first (xrd_first: a
        # task's first weight tile is on the NMU's critical path; the reads stop one tile
        # ahead), so a DMA storing results never takes cycles from the NMU.
        # The CSTLs are L1 clients after the NMU.
        m.submodules.l1 = l1 = ArbitratedSRAM(data_width=cfg.data_width, depth=cfg.l1_depth,
                                              clients=cfg.n_dma + cfg.n_nmu + cfg.n_cstl,
                                              extra_read_clients=(cfg.n_dma + 1) * cfg.n_nmu,
                                              xrd_first=cfg.n_dma if cfg.n_nmu else None)
        n_copy = cfg.n_dma + cfg.n_sdma
        m.submodules.l2 = l2 = ArbitratedSRAM(data_width=cfg.data_width, depth=cfg.l2_depth,
                                              clients=n_copy)
        prio = Signal(range(n))
        m.d.sync += prio.eq(Mux(prio == n - 1, 0, prio + 1))
        l1_prio = Mux(prio < cfg.n_dma, prio, 0)
        if cfg.n_nmu:
            l1_prio = Mux(prio == n_copy, cfg.n_dma, l1_prio)
        for k in range(cfg.n_cstl):
            l1_prio = Mux(prio == n_copy + cfg.n_nmu + k, cfg.n_dma + cfg.n_nmu + k, l1_prio)
        m.d.comb += [l1.prio.eq(l1_prio), l2.prio.eq(Mux(prio < n_copy, prio, 0))]

        units = []
        for k in range(cfg.n_dma):
            u = DmaUnit(data_width=cfg.data_width, l1_depth=cfg.l1_depth,
                        l2_depth=cfg.l2_depth, addr_width=cfg.addr_width)
            m.submodules[f"dma{k}"] = u
            wiring.connect(m, u.l1_rd, l1.xrd[k] if cfg.n_nmu else l1.rd[k])
            wiring.connect(m, u.l1_wr, l1.wr[k])
            wiring.connect(m, u.l2_rd, l2.rd[k])
            wiring.connect(m, u.l2_wr, l2.wr[k])
            units.append(u)
        for j in range(cfg.n_sdma):
            k = cfg.n_dma + j
            u = SdmaUnit(data_width=cfg.data_width, l2_depth=cfg.l2_depth,
                         addr_width=cfg.addr_width)
            m.submodules[f"sdma{j}"] = u
            wiring.connect(m, u.l2_rd, l2.rd[k])
            wiring.connect(m, u.l2_wr, l2.wr[k])
            wiring.connect(m, u.rd_cmd, rmux.cmd[1 + j])
            wiring.connect(m, rmux.data[1 + j], u.rd_data)
            wiring.connect(m, u.wr_cmd, wmux.cmd[j])
            wiring.connect(m, u.wr_data, wmux.data[j])
            wiring.connect(m, wmux.done[j], u.wr_done)
            units.append(u)
        for k, u in enumerate(units):
            wiring.connect(m, seq.unit_start[k], u.start)
            idle = l2.wr_idle[k]
            if k < cfg.n_dma:
                idle = idle & l1.wr_idle[k]
            _report_done(m, u.done, seq.unit_done[k], idle)
        nmu = None
        if cfg.n_nmu:
            nmu = self._nmu(m, seq, rmux, l1, 1 + cfg.n_sdma)
        cstls = [self._cstl(m, seq, rmux, l1, k) for k in range(cfg.n_cstl)]
        cstl_stall = []
        for k, u in enumerate(cstls):
            st = Signal(name=f"cstl{k}_stall")
            m.d.comb += st.eq((u.l1_rd.req & ~u.l1_rd.gnt) | (u.l1_wr.req & ~u.l1_wr.gnt))
            cstl_stall.append(st)

        regs = csr.regs
        nmu_stall = Signal()
        if nmu is not None:
            # waiting for L1 only (an idle read or write port is not a stall)
            m.d.comb += nmu_stall.eq((nmu.l1_rd.req & ~nmu.l1_rd.gnt) |
                                     (nmu.l1_wrd.req & ~nmu.l1_wrd.gnt) |
                                     (nmu.l1_wr.req & ~nmu.l1_wr.gnt))

        def late(cond, name):
            # a unit's stall or progress, gathered from its grants: registered beside the
            # unit before it crosses the die to the counters (counted a cycle late, as the
            # units' own counters) or to the watchdog's progress
            q = Signal(name=name)
            m.d.sync += q.eq(cond)
            return q

        # a unit moved data ("busy and not stalled"): registered beside each unit first,
        # then gathered from every unit across the die into one register before the SEQ's
        # watchdog, so that no unit's stall (its level -> its copy flags -> a queue's room,
        # the board's worst path on seed 4 at 64e4b2d) crosses the die in the same cycle.
        # The watchdog sees a unit's progress two cycles late: it counts quiet cycles up to
        # WATCHDOG (65,536 out of reset), and the delay only moves a unit's run of progress
        # a cycle later (one more quiet cycle before it, one fewer after it)
        names = unit_names(cfg)
        moving = [late(u.busy & ~u.stall, f"progress_{name.lower()}_q")
                  for name, u in zip(names[:len(units)], units, strict=True)]
        if nmu is not None:
            moving.append(late(nmu.busy & ~nmu_stall, "progress_nmu0_q"))
        moving += [late(u.busy & ~st, f"progress_cstl{k}_q")
                   for k, (u, st) in enumerate(zip(cstls, cstl_stall, strict=True))]
        progress = Signal()
        m.d.sync += progress.eq(Cat(*moving).any())
        rd_error_before = Signal()
        with m.If(regs.START):
            m.d.sync += rd_error_before.eq(port.rd_error)
        m.d.comb += [
            seq.start.eq(regs.START), seq.base.eq(regs.PROG_LO),
            seq.watchdog.eq(regs.WATCHDOG),
            # the reader's error flag is sticky: only a rise during this run counts
            seq.fetch_error.eq(port.rd_error & ~rd_error_before),
            seq.progress.eq(progress),
            regs.ID.eq(ENGINE_ID), regs.STATUS.eq(seq.status),
            regs.ERROR_CAUSE.eq(seq.cause), regs.ERROR_TASK.eq(seq.error_task),
            regs.TASKS_ISSUED.eq(seq.issued), regs.TASKS_DONE.eq(seq.completed),
            regs.TOKENS.eq(seq.tokens),
            self.dbg_issue.eq(seq.issue), self.dbg_issue_unit.eq(seq.issue_unit),
            self.dbg_issue_wait.eq(seq.issue_wait), self.dbg_issue_signal.eq(seq.issue_signal),
            self.dbg_tokens.eq(seq.tokens),
        ]

        # Performance counters: cleared by START, counting while the SEQ is busy (units
        # also count while they finish after an error).
        busy = seq.status == Status.BUSY

        def counter(reg, inc):
            with m.If(regs.START):
                m.d.sync += reg.eq(0)
            with m.Else():
                m.d.sync += reg.eq(reg + inc)

        counter(regs.CYCLES, busy)
        # the SEQ's waiting comes through its scoreboard and issue: registered beside the
        # SEQ, not a path across the die into a counter's enables (counted a cycle late)
        waiting = Signal()
        m.d.sync += waiting.eq(seq.waiting)
        counter(regs.SEQ_WAIT, waiting)
        def at_end(ended, value, name):
            # a unit's per-task count, added at the task's end: the addend registered
            # beside the unit (its state -> ``ended`` crossed the die into every bit of
            # the counters' adders: ~350 of the board's paths above 10 ns)
            q = Signal(len(value), name=name)
            m.d.sync += q.eq(Mux(ended, value, 0))
            return q

        # every counter's condition registered beside its unit (counted a cycle late: the
        # units are idle at START and at the end, so the totals are the same)
        for name, u in zip(names[:len(units)], units, strict=True):
            counter(getattr(regs, f"BUSY_{name}"), late(u.busy, f"busy_{name.lower()}_q"))
            counter(getattr(regs, f"STALL_{name}"), late(u.stall, f"stall_{name.lower()}_q"))
        if nmu is not None:
            counter(regs.BUSY_NMU0, late(nmu.busy, "busy_nmu0_q"))
            counter(regs.STALL_NMU0, late(nmu.busy & nmu_stall, "stall_nmu0_q"))
            # the NMU's own counters run per task: added up at each task's end
            ended = nmu.done.valid & nmu.done.ready
            for name in NMU_COUNTERS:
                counter(getattr(regs, f"NMU_{name.upper()}"),
                        at_end(ended, getattr(nmu, f"cnt_{name}"), f"nmu_{name}_add"))
            with m.If(regs.START):
                m.d.sync += regs.NMU_CAUSE.eq(0)
            with m.Elif(ended & nmu.done.payload.error):
                m.d.sync += regs.NMU_CAUSE.eq(nmu.done.payload.cause)
        for k, (u, st) in enumerate(zip(cstls, cstl_stall, strict=True)):
            counter(getattr(regs, f"BUSY_CSTL{k}"), late(u.busy, f"busy_cstl{k}_q"))
            counter(getattr(regs, f"STALL_CSTL{k}"), late(u.busy & st, f"stall_cstl{k}_q"))
            ended = u.done.valid & u.done.ready
            for name in CSTL_COUNTERS:
                counter(getattr(regs, f"CSTL{k}_{name.upper()}"),
                        at_end(ended, getattr(u, f"cnt_{name}"), f"cstl{k}_{name}_add"))
        if cstls:
            with m.If(regs.START):
                m.d.sync += regs.CSTL_CAUSE.eq(0)
            for u in cstls:
                with m.Elif(u.done.valid & u.done.ready & u.done.payload.error):
                    m.d.sync += regs.CSTL_CAUSE.eq(u.done.payload.cause)
        deltas = []
        for k, u in enumerate(units):
            prev = Signal(32, name=f"bytes_prev{k}")
            m.d.sync += prev.eq(u.bytes)
            deltas.append((u, (u.bytes - prev)[:32]))
        for src, dst in PATHS:
            hits = [Mux((u.src_level == level_code(src)) & (u.dst_level == level_code(dst)),
                        d, 0) for u, d in deltas]
            counter(getattr(regs, f"BYTES_{src}_{dst}"), sum(hits[1:], hits[0]))
        assert len(LEVELS) == 3
        return m

    def _nmu(self, m, seq, rmux, l1, rd_client):
        """The NMU, its shadow registers on the SEQ and its entry fetcher on the AXI reader."""
        cfg = self.config
        k = seq.nmu_index
        nmu = NmuUnit(geometry=cfg.nmu, depth=cfg.l1_depth, weight_port=True)
        m.submodules.nmu = nmu
        m.submodules.entry = entry = EntryFetcher(addr_width=cfg.addr_width,
                                                  data_width=cfg.data_width)
        wiring.connect(m, nmu.l1_rd, l1.rd[cfg.n_dma])
        wiring.connect(m, nmu.l1_wr, l1.wr[cfg.n_dma])
        wiring.connect(m, nmu.l1_wrd, l1.xrd[cfg.n_dma])
        wiring.connect(m, entry.rd_cmd, rmux.cmd[rd_client])
        wiring.connect(m, rmux.data[rd_client], entry.rd_data)
        wiring.connect(m, entry.words, nmu.rq)
        m.d.comb += [nmu.clear.eq(seq.nmu_clear), seq.entry_error.eq(entry.error)]
        wiring.connect(m, seq.nmu_write, nmu.write)
        # a task starts the NMU and its entry fetch together (both idle whenever the NMU
        # is free: the NMU reads its whole entry before it reports done)
        go = seq.unit_start[k]
        m.d.comb += [nmu.start.valid.eq(go.valid & entry.start.ready),
                     entry.start.valid.eq(go.valid & nmu.start.ready),
                     entry.start.payload.eq(seq.nmu_entry),
                     go.ready.eq(nmu.start.ready & entry.start.ready)]
        _report_done(m, nmu.done, seq.unit_done[k], l1.wr_idle[cfg.n_dma])
        return nmu

    def _cstl(self, m, seq, rmux, l1, k):
        """CSTL ``k``: its shadow registers on the SEQ, its L1 client ports and its table
        fetcher on the AXI reader."""
        cfg = self.config
        unit = seq.cstl_index + k
        u = CstlUnit(lanes=cfg.wbytes, depth=cfg.l1_depth, elt_lanes=cfg.cstl_elt_lanes)
        m.submodules[f"cstl{k}"] = u
        m.submodules[f"table{k}"] = fetch = TableFetcher(addr_width=cfg.addr_width,
                                                        data_width=cfg.data_width)
        client = cfg.n_dma + cfg.n_nmu + k
        wiring.connect(m, u.l1_rd, l1.rd[client])
        wiring.connect(m, u.l1_wr, l1.wr[client])
        rd = 1 + cfg.n_sdma + cfg.n_nmu + k
        wiring.connect(m, fetch.rd_cmd, rmux.cmd[rd])
        wiring.connect(m, rmux.data[rd], fetch.rd_data)
        wiring.connect(m, fetch.words, u.table)
        m.d.comb += [u.clear.eq(seq.cstl_clear[k]),
                     u.write.valid.eq(seq.cstl_write.valid & (seq.cstl_sel == k)),
                     u.write.payload.eq(seq.cstl_write.payload)]
        # a task that reads a table (or an eltwise entry) starts the CSTL and the fetch
        # together (the CSTL reads all of it before it reports done); a table at the DDR
        # address of the last table this CSTL read in this run is still in its lane
        # tables: the task starts with ``keep`` and nothing is fetched. The start waits for
        # both the CSTL and its fetcher to be free whether or not it fetches (the fetcher
        # is idle by the time the CSTL is free: the CSTL takes the whole table first), so
        # the table-address comparison is not in the SEQ's issue (and from there in the
        # issue slot's enables) in the same cycle
        go, table = seq.unit_start[unit], seq.cstl_has_table
        last = Signal(cfg.addr_width, name=f"cstl{k}_last_table")
        last_ok = Signal(name=f"cstl{k}_last_ok")
        keep = Signal(name=f"cstl{k}_keep")
        fetch_it = Signal(name=f"cstl{k}_fetch")
        m.d.comb += [keep.eq(table & ~seq.cstl_elt_entry & last_ok & (last == seq.cstl_table)),
                     fetch_it.eq(table & ~keep)]
        with m.If(go.valid & go.ready & table & ~seq.cstl_elt_entry):
            m.d.sync += [last.eq(seq.cstl_table), last_ok.eq(1)]
        with m.If(seq.start):
            m.d.sync += last_ok.eq(0)  # a new program: its tables may differ
        m.d.comb += [u.start.valid.eq(go.valid & fetch.start.ready),
                     u.start.payload.eq(keep),
                     fetch.start.valid.eq(go.valid & fetch_it & u.start.ready),
                     fetch.start.payload.eq(seq.cstl_table),
                     fetch.entry.eq(seq.cstl_elt_entry),
                     go.ready.eq(u.start.ready & fetch.start.ready)]
        _report_done(m, u.done, seq.unit_done[unit], l1.wr_idle[client])
        return u
