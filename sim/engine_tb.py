"""The NEM engine's cocotb harness, shared by the testbenches that run programs on it.

:class:`EngineTB` drives ``npu.engine.top.NemEngine`` under cocotb: cocotbext-axi's
``AxiRam`` is DDR and ``AxiLiteMaster`` the host (both with optional random pauses on
every channel); it loads DDR, L2 and L1, starts a program (``PROG_LO``, ``START``), polls
``STATUS`` and reads the counters. A monitor checks on every cycle that a task issues only
when every token of its wait mask is set (in the SEQ's scoreboard and in one kept here from
the issues and the units' completions) and records each task's issue and completion cycle
(the RTL task timeline). Used by ``sim.tb_engine`` (the regression) and ``sim.tb_program``
(``npu nem sim``).
"""

from __future__ import annotations

import logging
from collections import deque

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

from npu.engine.seq import Status
from npu.engine.top import engine_register_map, unit_names
from sim.cocotb_streams import random_pauses

__all__ = ["EngineTB", "TaskSpan"]

#: Cycles between two ``STATUS`` polls.
POLL = 50


class TaskSpan:
    """One task on the RTL: stream index, unit index, issue and completion cycle (cycles of
    the testbench clock; ``end`` is None while the task runs)."""

    __slots__ = ("end", "start", "task", "unit")

    def __init__(self, task, unit, start):
        self.task, self.unit, self.start, self.end = task, unit, start, None


class EngineTB:
    """Clock, DDR model, host and monitors around a ``NemEngine``.

    Parameters
    ----------
    dut : cocotb handle
        The engine's top level.
    cfg : npu.engine.config.EngineConfig
        The configuration it was generated from.
    stalls : bool
        Random pauses on all five AXI channels of DDR and on the AXI4-Lite master.
    seed : int
        Seed of the pause generators.
    ddr_size : int
        Bytes of the DDR model.
    """

    def __init__(self, dut, cfg, *, stalls=False, seed=0, ddr_size=1 << 20):
        self.dut = dut
        self.cfg = cfg
        self.regs = engine_register_map(cfg)
        self.ddr_size = ddr_size
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        self.ram = AxiRam(AxiBus.from_prefix(dut, "axi_"), dut.clk, dut.rst, size=ddr_size)
        self.host = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "csr_"), dut.clk, dut.rst)
        for model in (self.ram, self.host):
            for side in (model.write_if, model.read_if):
                side.log.setLevel(logging.WARNING)
        if stalls:
            channels = [self.ram.write_if.aw_channel, self.ram.write_if.w_channel,
                        self.ram.write_if.b_channel, self.ram.read_if.ar_channel,
                        self.ram.read_if.r_channel, self.host.write_if.aw_channel,
                        self.host.write_if.w_channel, self.host.write_if.b_channel,
                        self.host.read_if.ar_channel, self.host.read_if.r_channel]
            for k, channel in enumerate(channels):
                channel.set_pause_generator(random_pauses(seed + 10 + k, 0.3))
        self.issues = 0
        self.model_tokens = 0
        self.late_tokens = 0    # tokens of the completions of the cycle before
        self.running = {}
        self.spans = []        # TaskSpan of every task issued in this run, in stream order
        self.cycle = 0         # testbench clock cycles since the monitor started
        self.started = None    # cycle the SEQ left IDLE in this run
        self.states = deque(maxlen=8)  # (cycle, seq_state code) of the SEQ's last changes
        self._tally_handles = self._unit_handles()
        self.tally = {}        # counter name -> cycles counted here since the last launch
        self._clear_tally()
        cocotb.start_soon(self._watch_tokens())

    def _unit_handles(self):
        """Per counter, the handles whose AND is the condition it counts, taken from the
        units' own ports: ``busy``; a copy unit's ``stall``; for the NMU and the CSTLs, a
        request on one of their L1 ports without a grant (a port waiting, as the register
        map documents ``STALL_<unit>``), not the engine's own stall wires."""
        dut, cfg = self.dut, self.cfg
        out = {"CYCLES": None}     # the SEQ's status BUSY (read as a value, not a bit)
        units = ([(f"DMA{k}", f"dma{k}") for k in range(cfg.n_dma)]
                 + [(f"SDMA{k}", f"sdma{k}") for k in range(cfg.n_sdma)])
        for name, inst in units:
            u = getattr(dut, inst)
            out[f"BUSY_{name}"] = (u.busy, [])
            out[f"STALL_{name}"] = (u.stall, [])
        ports = []
        if cfg.n_nmu:
            ports.append(("NMU0", dut.nmu, ("l1_rd", "l1_wrd", "l1_wr")))
        ports += [(f"CSTL{k}", getattr(dut, f"cstl{k}"), ("l1_rd", "l1_wr"))
                  for k in range(cfg.n_cstl)]
        for name, u, which in ports:
            out[f"BUSY_{name}"] = (u.busy, [])
            out[f"STALL_{name}"] = (u.busy, [(getattr(u, f"{p}__req"), getattr(u, f"{p}__gnt"))
                                             for p in which])
        return out

    def _clear_tally(self):
        self.tally = dict.fromkeys(self._tally_handles, 0)

    def _count_cycle(self):
        """Add this cycle to :attr:`tally` (called by the monitor once per cycle)."""
        tally = self.tally
        for name, handles in self._tally_handles.items():
            if handles is None:
                tally[name] += int(self.dut.seq.status.value) == Status.BUSY
                continue
            cond, waits = handles
            if cond.value != 1:
                continue
            if waits and not any(req.value == 1 and gnt.value != 1 for req, gnt in waits):
                continue
            tally[name] += 1

    def check_counters(self, counters):
        """``CYCLES``, ``BUSY_<unit>`` and ``STALL_<unit>`` of a finished run equal the
        cycles the monitor counted from the units' ports since :meth:`launch` (the units
        are idle at ``START`` and at the end, so where a counter registers its condition
        first does not change its total)."""
        wrong = {name: (counters[name], want) for name, want in self.tally.items()
                 if counters[name] != want}
        assert not wrong, f"counters (RTL, testbench): {wrong}"

    async def _watch_tokens(self):
        """A task never issues before its wait tokens are set.

        Checked in the cycle it issues against the SEQ's own scoreboard and against an
        independent one kept here from the issues and the units' completions (a
        completion sets the signal tokens of the task its unit runs, from the cycle after
        it: completions of a cycle count before an issue in the next one; an issue clears
        its signal tokens).
        Records every task's issue and completion cycle in :attr:`spans` and the SEQ's
        last state changes in :attr:`states`.
        """
        dut = self.dut
        cfg = self.cfg
        mask = (1 << cfg.tokens) - 1
        done = [getattr(dut, f"unit_done__{k}__valid") for k in range(len(unit_names(cfg)))]
        state = dut.seq.seq_state
        while True:
            await FallingEdge(dut.clk)
            await ReadOnly()
            self.cycle += 1
            code = int(state.value)
            if not self.states or self.states[-1][1] != code:
                self.states.append((self.cycle, code))
            if self.started is None and code != 0:  # 0: IDLE (the init state)
                self.started = self.cycle
            self._count_cycle()
            self.model_tokens |= self.late_tokens
            self.late_tokens = 0
            for k, valid in enumerate(done):
                if valid.value == 1 and k in self.running:
                    signal, span = self.running.pop(k)
                    self.late_tokens |= signal
                    span.end = self.cycle
            if dut.dbg_issue.value == 1:
                wait = int(dut.dbg_issue_wait.value) & mask
                tokens = int(dut.dbg_tokens.value)
                unit = int(dut.dbg_issue_unit.value)
                assert wait & ~tokens == 0, (
                    f"task {self.issues} issued with wait mask {wait:#x} while the SEQ's "
                    f"tokens are {tokens:#x}")
                assert wait & ~self.model_tokens == 0, (
                    f"task {self.issues} issued with wait mask {wait:#x}; the tokens set by "
                    f"completions are {self.model_tokens:#x}")
                assert unit not in self.running, f"task {self.issues}: unit {unit} is busy"
                signal = int(dut.dbg_issue_signal.value) & mask
                self.model_tokens &= ~signal
                span = TaskSpan(self.issues, unit, self.cycle)
                self.spans.append(span)
                self.running[unit] = (signal, span)
                self.issues += 1

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    async def read(self, name):
        data = (await self.host.read(self.regs.offset(name), 4)).data
        return int.from_bytes(data, "little")

    async def write(self, name, value):
        await self.host.write(self.regs.offset(name), value.to_bytes(4, "little"))

    def _sram_mem(self, name):
        return getattr(self.dut, name).sram.mem

    def sram_depth(self, name):
        return {"l2": self.cfg.l2_depth, "l1": self.cfg.l1_depth}[name]

    def load_sram(self, name, data=None):
        """Set every word of SRAM ``name`` (``"l1"``/``"l2"``) from the bytes ``data``
        (zeros when None or past its end); SRAM contents survive a reset, as in hardware."""
        mem = self._sram_mem(name)
        W = self.cfg.wbytes
        raw = bytes(data) if data is not None else b""
        for k in range(self.sram_depth(name)):
            chunk = raw[k * W:(k + 1) * W]
            mem[k].value = int.from_bytes(chunk, "little") if chunk else 0

    def clear_memories(self):
        """Zero DDR, L2 and L1 (SRAM contents survive the reset, as in hardware)."""
        self.ram.write(0, bytes(self.ddr_size))
        self.load_sram("l2")
        self.load_sram("l1")

    async def launch(self, image, base, *, watchdog=None, l2=None, l1=None):
        """Clear the memories, load ``image`` at DDR 0 (and ``l2``/``l1`` into the SRAMs),
        start the program at ``base``."""
        self.clear_memories()
        if l2 is not None:
            self.load_sram("l2", l2)
        if l1 is not None:
            self.load_sram("l1", l1)
        self.issues = 0
        self.model_tokens = 0     # START clears the tokens
        self.late_tokens = 0
        self.running = {}
        self.spans = []
        self._clear_tally()        # START clears the counters
        self.ram.write(0, bytes(image))
        if watchdog is not None:
            await self.write("WATCHDOG", watchdog)
        await self.write("PROG_LO", base)
        await self.write("PROG_HI", 0)
        self.started = None
        await self.write("START", 1)

    async def wait_end(self, max_cycles):
        """Poll ``STATUS`` until done or error; None when ``max_cycles`` cycles of the run
        (from the SEQ leaving IDLE, or from this call if it has not) pass first."""
        first = self.cycle
        while True:
            status = await self.read("STATUS")
            if status in (Status.DONE, Status.ERROR):
                return status
            await ClockCycles(self.dut.clk, POLL)
            since = self.started if self.started is not None else first
            if self.cycle - since >= max_cycles:
                return None

    async def run(self, image, base, *, max_cycles=200_000, watchdog=None):
        """Clear the memories, load ``image`` at DDR 0, run the program at ``base``; return
        the final status (an AssertionError after ``max_cycles`` without an end)."""
        await self.launch(image, base, watchdog=watchdog)
        status = await self.wait_end(max_cycles)
        if status is None:
            status = await self.read("STATUS")
            raise AssertionError(f"no end after {max_cycles} cycles (status {status}); "
                                 f"{self.debug_state()}; {await self.counters()}")
        return status

    def debug_state(self):
        """SEQ internals for failure messages."""
        seq = self.dut.seq
        return {k: int(getattr(seq, k).value) for k in ("seq_state", "step", "count",
                                                         "inflight")}

    async def counters(self):
        return {reg.name: await self.read(reg.name) for reg in self.regs.regs
                if reg.access == "ro"}

    def sram(self, name, depth=None):
        mem = self._sram_mem(name)
        out = bytearray()
        for k in range(self.sram_depth(name) if depth is None else depth):
            out += int(mem[k].value).to_bytes(self.cfg.wbytes, "little")
        return np.frombuffer(bytes(out), dtype=np.uint8)

