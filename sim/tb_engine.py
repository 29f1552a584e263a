"""cocotb testbench: the NEM engine against the golden binder + executor.

cocotbext-axi's ``AxiRam`` is DDR and ``AxiLiteMaster`` the host. Each bound program
(``sim.engine_programs``) is loaded into DDR with its binary after the highest DDR buffer;
the host writes ``PROG_LO`` and ``START`` and polls ``STATUS``. Afterwards DDR (through
the RAM model) and L2/L1 (through the SRAM arrays) must equal the executor's memories
byte for byte. Every program runs without stalls and with random pauses on all five AXI
channels and on the AXI4-Lite master. A monitor asserts on every cycle that a task issues
only when every token of its wait mask is set. Malformed binaries must end in STATUS
error with the right cause, not a hang. The engine's counters (cycles, busy per unit,
bytes per path) go to ``engine_counters.json`` in the run directory for the benchmark.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from nem.taskformat import (
    BUFFER_ENTRY,
    HEADER,
    MAGIC,
    NO_TABLE,
    OPCODES,
    REGISTER_MAPS,
    REQUANT_CHANNEL,
    REQUANT_ENTRY,
    TASK_HEADER,
    WRITE,
    Unit,
    data_offset,
)
from npu.engine.config import EngineConfig
from npu.engine.copy_units import level_code
from npu.engine.seq import Cause, Status
from npu.engine.top import engine_register_map, unit_names
from npu.nmu.model import Cause as NmuCause
from sim.engine_programs import (
    bench_programs,
    contiguous,
    cstl_programs,
    golden,
    nmu_programs,
    program_texts,
    programs,
)
from sim.engine_tb import EngineTB

P = json.loads(os.environ["NPU_DESIGN_PARAMS"])
DEVICE = P["device"]
CFG = EngineConfig.shipped(DEVICE)
REGS = engine_register_map(CFG)
DDR_SIZE = 1 << 20  # the benchmark programs need about 200 KiB
ONLY = os.environ.get("NPU_ENGINE_PROGRAMS")  # comma-separated subset, for the benchmark


class TB(EngineTB):
    """The shared harness (``sim.engine_tb``) on this run's device and DDR size."""

    def __init__(self, dut, stalls, seed):
        super().__init__(dut, CFG, stalls=stalls, seed=seed, ddr_size=DDR_SIZE)


def _first_diff(got, want, what):
    bad = np.flatnonzero(got != want)
    if bad.size:
        k = int(bad[0])
        raise AssertionError(f"{what}: {bad.size} bytes differ, first at {k}: "
                             f"{int(got[k]):#04x}, expected {int(want[k]):#04x}")


async def _run_program(tb, name, text, seed, *, reset=True, inputs=None):
    if reset:
        await tb.reset()
    g = golden(DEVICE, text, seed=seed, inputs=inputs)
    status = await tb.run(g.ddr_init, g.base)
    counters = await tb.counters()
    if status != Status.DONE:
        state = tb.debug_state()
        raise AssertionError(
            f"{name}: status {Status(status).name}, cause "
            f"{Cause(counters['ERROR_CAUSE']).name} at task {counters['ERROR_TASK']}; "
            f"SEQ {state}; counters {counters}")
    assert counters["TASKS_ISSUED"] == g.tasks == counters["TASKS_DONE"] == tb.issues
    tb.check_counters(counters)
    ddr = np.frombuffer(tb.ram.read(0, len(g.ddr)), dtype=np.uint8)
    _first_diff(ddr, g.ddr, f"{name}: DDR")
    _first_diff(tb.sram("l2", CFG.l2_depth), g.l2, f"{name}: L2")
    _first_diff(tb.sram("l1", CFG.l1_depth), g.l1, f"{name}: L1")
    counters["executor_cycles"] = g.cycles
    counters["executor_busy"] = g.busy
    return counters


def _programs():
    texts = programs(DEVICE)
    if ONLY:
        texts = {**texts, **bench_programs(DEVICE)}
        texts = {k: v for k, v in texts.items() if k in ONLY.split(",")}
    return texts


@cocotb.test()
async def programs_no_stalls(dut):
    results = {}
    tb = TB(dut, False, cocotb.RANDOM_SEED)
    for name, (text, inputs) in _programs().items():
        results[name] = await _run_program(tb, name, text, cocotb.RANDOM_SEED,
                                           inputs=inputs)
        dut._log.info("%s: %d RTL cycles, executor %d", name, results[name]["CYCLES"],
                      results[name]["executor_cycles"])
    Path("engine_counters.json").write_text(json.dumps(results, indent=2))


@cocotb.test()
async def programs_with_stalls(dut):
    tb = TB(dut, True, cocotb.RANDOM_SEED + 1)
    for name, (text, inputs) in _programs().items():
        await _run_program(tb, name, text, cocotb.RANDOM_SEED + 1, inputs=inputs)


@cocotb.test()
async def contiguous_throughput(dut):
    """Contiguous copies on each path; bytes per busy cycle of the unit from the counters."""
    nbytes = 4096
    tb = TB(dut, False, 1)
    counters = await _run_program(tb, "contiguous", contiguous(nbytes), 1)
    W = CFG.wbytes
    names = unit_names(CFG)
    stats = {
        "sdma_fraction": 2 * nbytes / W / sum(counters[f"BUSY_{n}"] for n in names
                                              if n.startswith("SDMA")),
        "dma_fraction": 2 * nbytes / W / sum(counters[f"BUSY_{n}"] for n in names
                                             if n.startswith("DMA")),
        "bytes": nbytes, "word_bytes": W, "counters": counters,
    }
    Path("engine_throughput.json").write_text(json.dumps(stats, indent=2))
    dut._log.info("contiguous throughput: sDMA %.3f, DMA %.3f of bus width",
                  stats["sdma_fraction"], stats["dma_fraction"])
    assert stats["sdma_fraction"] >= 0.9 and stats["dma_fraction"] >= 0.9, stats


def _corrupt(binary, offset, value, size=1):
    data = bytearray(binary)
    data[offset:offset + size] = value.to_bytes(size, "little")
    return bytes(data)


def _patch(binary, record, at, name, value):
    """``binary`` with field ``name`` of the ``record`` at byte ``at`` set to ``value``."""
    data = bytearray(binary)
    record.patch(data, at, name, value)
    return bytes(data)


def _writes(binary, at):
    """``(offset, register index, value)`` of each register write of the task at ``at``."""
    first = at + TASK_HEADER.size
    for k in range(TASK_HEADER.unpack(binary, at)["nwrites"]):
        w = WRITE.unpack(binary, first + k * WRITE.size)
        yield first + k * WRITE.size, w["index"], w["value"]


def _malformed(g):
    """(name, binary, expected cause) for binaries broken in one field each."""
    b = g.binary
    first = HEADER.size + HEADER.unpack(b)["buffer_count"] * BUFFER_ENTRY.size
    bad_magic = bytes([MAGIC[0] ^ 0xFF]) + MAGIC[1:]
    wait_all = (1 << min(CFG.tokens, 32)) - 1
    hash_at = HEADER.offset("device_hash") + 5
    return [
        ("bad magic", _patch(b, HEADER, 0, "magic", bad_magic), Cause.BAD_MAGIC),
        ("newer major", _patch(b, HEADER, 0, "major", 2), Cause.BAD_VERSION),
        ("device hash", _corrupt(b, hash_at, b[hash_at] ^ 1), Cause.BAD_DEVICE),
        ("unknown unit", _patch(b, TASK_HEADER, first, "unit", Unit.VPU), Cause.BAD_UNIT),
        ("no such instance", _patch(b, TASK_HEADER, first, "instance", 9), Cause.BAD_UNIT),
        ("register index", _patch(b, WRITE, first + TASK_HEADER.size, "index", 200),
         Cause.BAD_REGISTER),
        ("stream offset", _patch(b, HEADER, 0, "stream_offset", first + 1), Cause.BAD_HEADER),
        ("wait forever", _patch(b, TASK_HEADER, first, "wait", wait_all), Cause.WATCHDOG),
        ("signal beyond the tokens", _patch(b, TASK_HEADER, first, "signal", 1 << 31),
         Cause.BAD_TOKEN),
        ("level", _write(b, first, "SRC_LEVEL", level_code("L1")), Cause.BAD_LEVEL),
        ("count too big", _write(b, first, "COUNT1", 1 << 16), Cause.BAD_VALUE),
        ("count zero", _write(b, first, "COUNT0", 0), Cause.BAD_VALUE),
        ("outside L2", _write(b, first, "DST_LO", CFG.l2_depth * CFG.wbytes - 8),
         Cause.BAD_REGION),
    ]


def _task_offsets(binary):
    """Byte offsets of the task records in ``binary``, in stream order."""
    header = HEADER.unpack(binary)
    at = header["stream_offset"]
    end = at + header["stream_bytes"]
    out = []
    while at < end:
        out.append(at)
        at += TASK_HEADER.size + TASK_HEADER.unpack(binary, at)["nwrites"] * WRITE.size
    return out


def _malformed_nmu(g):
    """(name, binary, expected cause, expected NMU_CAUSE, expected ERROR_TASK) for broken
    NMU tasks (None: not checked)."""
    b = g.binary
    header = HEADER.unpack(b)
    index, at = next((k, a) for k, a in enumerate(_task_offsets(b))
                     if TASK_HEADER.unpack(b, a)["unit"] == Unit.NMU)
    regs = REGISTER_MAPS[Unit.NMU]
    requant = next(v for _, i, v in _writes(b, at) if i == regs.index("REQUANT"))
    entry_at = data_offset(header["stream_offset"] + header["stream_bytes"]) + requant
    data_bytes = header["data_bytes"]
    return [
        ("NMU instance", _patch(b, TASK_HEADER, at, "instance", 1), Cause.BAD_UNIT, 0, index),
        ("NMU register index", _patch(b, WRITE, at + TASK_HEADER.size, "index", len(regs)),
         Cause.BAD_REGISTER, 0, index),
        ("REQUANT misaligned", _write(b, at, "REQUANT", requant + 4), Cause.BAD_ENTRY, 0,
         index),
        ("REQUANT past the data", _write(b, at, "REQUANT", data_bytes), Cause.BAD_ENTRY, 0,
         index),
        # found by the entry fetcher while the task runs: every NMU task shares the entry
        ("entry channel count", _patch(b, REQUANT_ENTRY, entry_at, "channels", 1 << 20),
         Cause.BAD_ENTRY, None, index),
        ("entry longer than the data",
         _patch(b, REQUANT_ENTRY, entry_at, "channels", data_bytes // REQUANT_CHANNEL.size),
         Cause.BAD_ENTRY, None, index),
        ("NMU opcode", _write(b, at, "OPCODE", 0x7F), Cause.UNIT_ERROR, NmuCause.OPCODE,
         index),
        ("NMU operand level", _write(b, at, "OP0_LEVEL", level_code("L2")),
         Cause.UNIT_ERROR, NmuCause.TYPE, index),
    ]


def _first_cstl(b):
    return next((k, a) for k, a in enumerate(_task_offsets(b))
                if TASK_HEADER.unpack(b, a)["unit"] == Unit.CSTL)


def _malformed_table(g):
    """Broken tables of a table task: misaligned or past the data section (the SEQ's
    ``BAD_ENTRY`` at decode), none at all (the CSTL's ``REQUANT``)."""
    b = g.binary
    index, at = _first_cstl(b)
    table = next(v for _, i, v in _writes(b, at) if i == REGISTER_MAPS[Unit.CSTL].index("TABLE"))
    data_bytes = HEADER.unpack(b)["data_bytes"]
    return [
        ("TABLE misaligned", _write(b, at, "TABLE", table + 4), Cause.BAD_ENTRY, 0, index),
        ("TABLE past the data", _write(b, at, "TABLE", data_bytes), Cause.BAD_ENTRY, 0,
         index),
        ("table task without a table", _write(b, at, "TABLE", NO_TABLE), Cause.UNIT_ERROR,
         NmuCause.REQUANT, index),
    ]


def _malformed_cstl(g):
    """(name, binary, expected cause, expected CSTL_CAUSE, expected ERROR_TASK) for broken
    CSTL tasks: an instance the engine lacks, a register index past the map, an opcode
    and an operand memory the CSTL refuses (the error names the task)."""
    b = g.binary
    index, at = _first_cstl(b)
    regs = REGISTER_MAPS[Unit.CSTL]
    return [
        ("CSTL instance", _patch(b, TASK_HEADER, at, "instance", CFG.n_cstl), Cause.BAD_UNIT,
         0, index),
        ("CSTL register index", _patch(b, WRITE, at + TASK_HEADER.size, "index", len(regs)),
         Cause.BAD_REGISTER, 0, index),
        ("CSTL opcode", _write(b, at, "OPCODE", OPCODES.index("gemm")), Cause.UNIT_ERROR,
         NmuCause.OPCODE, index),
        ("CSTL operand level", _write(b, at, "OP1_LEVEL", level_code("L2")),
         Cause.UNIT_ERROR, NmuCause.TYPE, index),
    ]


def _write(binary, at, name, value):
    """``binary`` with the value of register ``name`` in the task record at ``at`` changed."""
    unit = Unit(TASK_HEADER.unpack(binary, at)["unit"])
    index = REGISTER_MAPS[unit].index(name)
    for w, i, _ in _writes(binary, at):
        if i == index:
            return _patch(binary, WRITE, w, "value", value)
    raise AssertionError(f"task at {at} does not write {name}")


async def _malformed_run(dut, stalls):
    g = golden(DEVICE, program_texts(DEVICE)["tiled"])
    tb = TB(dut, stalls, 7)
    cases = [(g, *case, None, None, None) for case in _malformed(g)]
    nmu = nmu_programs(DEVICE)
    if nmu:
        text, inputs = nmu["gemm"]
        g_nmu = golden(DEVICE, text, inputs=inputs)
        cases += [(g_nmu, *case, "NMU_CAUSE") for case in _malformed_nmu(g_nmu)]
    cstl = cstl_programs(DEVICE)
    if cstl:
        text, inputs = cstl["cast"]
        g_cstl = golden(DEVICE, text, inputs=inputs)
        cases += [(g_cstl, *case, "CSTL_CAUSE") for case in _malformed_cstl(g_cstl)]
        text, inputs = cstl["activation"]
        g_act = golden(DEVICE, text, inputs=inputs)
        cases += [(g_act, *case, "CSTL_CAUSE") for case in _malformed_table(g_act)]
    for owner, name, binary, cause, unit_cause, error_task, cause_reg in cases:
        await tb.reset()
        image = np.array(owner.ddr_init)
        image[owner.base:] = np.frombuffer(binary, dtype=np.uint8)
        status = await tb.run(image, owner.base, max_cycles=20_000, watchdog=2000)
        got = await tb.read("ERROR_CAUSE")
        assert status == Status.ERROR and got == cause, (
            f"{name}: status {status}, cause {Cause(got).name}, expected {cause.name}")
        if unit_cause is not None:
            got = await tb.read(cause_reg)
            assert got == unit_cause, f"{name}: {cause_reg} {got}, expected {unit_cause}"
        if error_task is not None:
            got = await tb.read("ERROR_TASK")
            assert got == error_task, f"{name}: ERROR_TASK {got}, expected {error_task}"
    # a program address inside a bus word (half a word on: word-aligned programs only)
    await tb.reset()
    status = await tb.run(g.ddr_init, g.base + CFG.wbytes // 2, max_cycles=5000)
    assert status == Status.ERROR and await tb.read("ERROR_CAUSE") == Cause.BAD_HEADER


@cocotb.test()
async def malformed_binaries_no_stalls(dut):
    await _malformed_run(dut, stalls=False)


@cocotb.test()
async def malformed_binaries_with_stalls(dut):
    await _malformed_run(dut, stalls=True)


@cocotb.test()
async def back_to_back_without_reset(dut):
    """START again after DONE (and after an ERROR) without a reset: a clean second run."""
    tb = TB(dut, False, 3)
    await tb.reset()
    texts = program_texts(DEVICE)
    names = [n for n in texts if n.startswith("random")][:2]
    first = await _run_program(tb, names[0], texts[names[0]], 3, reset=False)
    second = await _run_program(tb, names[1], texts[names[1]], 4, reset=False)
    assert second["TASKS_ISSUED"] == second["TASKS_DONE"] > 0
    assert first["CYCLES"] > 0 and second["CYCLES"] > 0
    g = golden(DEVICE, texts["tiled"])
    bad = _corrupt(g.binary, HEADER.size + 1, 0)  # a buffer name byte: harmless
    bad = _patch(bad, HEADER, 0, "magic", bytes(4))
    image = np.array(g.ddr_init)
    image[g.base:] = np.frombuffer(bad, dtype=np.uint8)
    assert await tb.run(image, g.base) == Status.ERROR
    await _run_program(tb, "tiled after an error", texts["tiled"], 5, reset=False)


@cocotb.test()
async def id_and_reset_values(dut):
    tb = TB(dut, False, 0)
    await tb.reset()
    assert await tb.read("ID") == int.from_bytes(b"NEM1", "little")
    assert await tb.read("STATUS") == Status.IDLE
    for reg in REGS.regs:
        if reg.access == "rw":
            assert await tb.read(reg.name) == reg.init, reg.name
    await RisingEdge(dut.clk)
