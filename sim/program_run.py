"""Host side of ``npu nem sim``: a bound program on the engine RTL, checked against the
executor.

:func:`prepare` checks and binds a ``.nem`` program for a shipped device (or reads a bound
task binary) and fixes the initial memory: a memory image, arrays by buffer name, or random
bytes (seeded) in every buffer the program reads before writing. :func:`expected` runs the
executor on the binary (``plan_from_binary`` + ``execute(in_order=True)``, in stream order
as the SEQ issues). :func:`simulate` builds the engine for the device (the regression's
cached Verilator build) and runs ``sim.tb_program`` under cocotb; the job and the results
travel as files in the build's run directory. :func:`compare` finds the first task in
program order whose output region differs, and :func:`chrome_trace` puts the RTL's task
timeline beside the executor's in one Chrome/Perfetto trace.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nem.binder import bind, plan_from_binary
from nem.checker import Plan, check_file
from nem.elemtypes import BITS
from nem.executor import RunResult, execute, load_npz
from nem.memimage import PROGRAM_ALIGN, buffer_use, read_image
from nem.memory import dense_strides
from nem.taskformat import MAGIC, Program, TaskFormatError, decode, encode
from npu.engine.config import DEVICE_DIR, DEVICES, EngineConfig, load_device
from npu.engine.seq import Cause
from sim.regression import REGRESSIONS
from sim.runner import build, run_cocotb

__all__ = [
    "DEFAULT_BUDGET",
    "Mismatch",
    "Prepared",
    "RtlRun",
    "SimError",
    "chrome_trace",
    "compare",
    "engine_design",
    "expected",
    "prepare",
    "region_bytes",
    "seq_state_names",
    "simulate",
]

#: Cycles a run may take before it is stopped (``--budget``).
DEFAULT_BUDGET = 2_000_000
#: The DDR model holds at least this many bytes.
MIN_DDR = 1 << 20


class SimError(ValueError):
    """The program, the device or the initial memory cannot be simulated (the message names
    the file, buffer or field)."""


@dataclass
class Prepared:
    """A bound program, its device and its initial memory."""

    source: str
    device: str  # shipped device name
    program: Program
    binary: bytes
    plan: Plan | None  # the executor's plan of the binary; None when it refuses it
    refusal: str | None  # why plan_from_binary refused the binary
    labels: list[str]  # task labels in stream order (source names for a .nem)
    initial: dict[str, np.ndarray]  # buffer name -> the whole buffer's initial bytes
    inputs: str  # where the initial memory came from (for the report)
    base: int  # DDR byte address of the binary


def _device_file(device: str) -> str:
    if device not in DEVICES:
        raise SimError(f"device {device!r}: the engine is built for {', '.join(DEVICES)}")
    return str(DEVICE_DIR / DEVICES[device][0])


def _load(path: str, device: str) -> tuple[Program, bytes, Plan | None]:
    """The bound program of ``path`` (.nem: checked and bound; else a task binary), and the
    checker's plan it was bound from (None for a binary)."""
    with open(path, "rb") as fh:
        head = fh.read(len(MAGIC))
    if head == MAGIC:
        with open(path, "rb") as fh:
            binary = fh.read()
        try:
            return decode(binary), binary, None
        except TaskFormatError as exc:
            raise SimError(f"{path}: {exc}") from None
    result = check_file(path, device=_device_file(device))
    if not result.ok:
        errors = [str(d) for d in result.diagnostics if d.severity == "error"]
        raise SimError(f"{path}: not a valid NEM program for device {device}:\n  "
                       + "\n  ".join(errors))
    program = bind(result)
    return program, encode(program), result.plan


def _placed(name: str, size: int, values: np.ndarray, where: str) -> np.ndarray:
    raw = np.ascontiguousarray(values)
    if raw.dtype.byteorder == ">":
        raw = raw.astype(raw.dtype.newbyteorder("<"))
    raw = raw.reshape(-1).view(np.uint8)
    if raw.size > size:
        raise SimError(f"{where}: {name} holds {raw.size} bytes; buffer {name} has {size}")
    out = np.zeros(size, dtype=np.uint8)
    out[: raw.size] = raw
    return out


def prepare(path, device, *, memory=None, image=None, seed=None) -> Prepared:
    """Bind (or read) the program at ``path`` for ``device`` and fix its initial memory.

    Parameters
    ----------
    path : str
        A ``.nem`` program (checked and bound for the device, whatever device it names) or
        a task binary from ``npu nem bind``.
    device : str
        A shipped engine device (``"small"``, ``"sim"``).
    memory : str, optional
        An ``.npz`` of initial contents by buffer name (raw little-endian bytes from the
        buffer's first byte; the rest is zero).
    image : str, optional
        A memory image (``npu nem bind --image``) that belongs to the binary.
    seed : int, optional
        Without ``memory`` and ``image``: every buffer the program reads before writing
        starts as random bytes from this seed (every DDR buffer when the executor refuses
        the binary); the default draws a seed.

    Raises
    ------
    SimError, nem.binder.BindError, nem.memimage.MemoryImageError, nem.executor.ExecError
        On a program that does not check or bind, or initial memory that does not fit.
    """
    path = os.fspath(path)
    if memory and image:
        raise SimError("give --memory or --image, not both")
    program, binary, source_plan = _load(path, device)
    dev = load_device(device)
    try:
        plan, refusal = plan_from_binary(program, dev), None
    except TaskFormatError as exc:
        plan, refusal = None, str(exc)
    sizes = {b.name: b.size for b in program.buffers}
    ddr_end = max((b.address + b.size for b in program.buffers if b.level == "DDR"), default=0)
    base = -(-ddr_end // PROGRAM_ALIGN) * PROGRAM_ALIGN
    if image:
        img = read_image(image, program)
        initial = {n: np.array(v, dtype=np.uint8) for n, v in img.data.items()}
        base = img.program_address
        inputs = f"memory image {image} (loads: {', '.join(initial) or 'none'})"
    elif memory:
        given = load_npz(memory)
        unknown = sorted(set(given) - set(sizes))
        if unknown:
            raise SimError(f"{memory}: array {unknown[0]!r} names no buffer of the program "
                           f"(buffers: {', '.join(sizes)})")
        initial = {n: _placed(n, sizes[n], v, memory) for n, v in given.items()}
        inputs = f"{memory} ({', '.join(initial) or 'no arrays'})"
    else:
        if seed is None:
            seed = int.from_bytes(os.urandom(4), "little")
        rng = np.random.default_rng(seed)
        if source_plan is not None or plan is not None:
            # the checker's regions decide which bytes are read before written; a binary's
            # copy regions come back typed and strided, which buffer_use does not count as
            # writes (tiled: S, R and X would be loads too)
            use = buffer_use(source_plan or plan)
            loads = [n for n, (load, _) in use.items() if load]
        else:
            loads = [b.name for b in program.buffers if b.level == "DDR"]
        initial = {n: rng.integers(0, 256, size=sizes[n], dtype=np.uint8) for n in loads}
        inputs = f"random bytes (seed {seed}) in {', '.join(loads) or 'no buffer'}"
    labels = [t.label for t in source_plan.tasks] if source_plan is not None else []
    if len(labels) != len(program.tasks):
        labels = [f"task {k}" for k in range(len(program.tasks))]
    return Prepared(path, device, program, binary, plan, refusal, labels, initial, inputs,
                    base)


def expected(prep: Prepared) -> RunResult | None:
    """The executor's run of the binary in stream order (None when it refuses the binary)."""
    if prep.plan is None:
        return None
    return execute(prep.plan, load_device(prep.device), dict(prep.initial), in_order=True)


@dataclass
class RtlRun:
    """What the engine did with a program (from ``sim.tb_program``)."""

    status: str  # npu.engine.seq.Status name
    budget_hit: bool  # stopped by the cycle budget while still busy
    counters: dict[str, int]  # every read-only CSR
    seq: dict[str, int]  # SEQ internals: seq_state, step, count, inflight
    units: list[str]  # unit names in SEQ order (DMA0.., SDMA0.., NMU0)
    spans: list[list]  # [task, unit index, issue cycle, completion cycle or None]
    seq_states: list[list]  # [cycle, seq_state code] of the SEQ's last state changes
    buffers: dict[str, np.ndarray] = field(repr=False)  # final bytes of every buffer
    run_dir: Path = Path()

    @property
    def cause(self) -> str:
        return Cause(self.counters["ERROR_CAUSE"]).name


def _memories(prep: Prepared, cfg: EngineConfig):
    """(DDR image, L2 bytes, L1 bytes) with the initial buffers placed and the binary at
    ``base`` in DDR."""
    ddr = np.zeros(prep.base + len(prep.binary), dtype=np.uint8)
    sram = {"L2": np.zeros(cfg.l2_depth * cfg.wbytes, dtype=np.uint8),
            "L1": np.zeros(cfg.l1_depth * cfg.wbytes, dtype=np.uint8)}
    for b in prep.program.buffers:
        if b.level == "DDR" and b.address + b.size > prep.base:
            raise SimError(f"buffer {b.name} (DDR {b.address:#x}, {b.size} bytes) overlaps "
                           f"the binary at {prep.base:#x}")
        mem = ddr if b.level == "DDR" else sram[b.level]
        if b.address + b.size > mem.size:
            raise SimError(f"buffer {b.name}: {b.level} bytes [{b.address:#x}, "
                           f"{b.address + b.size:#x}) lie outside the device's {b.level}")
        if b.name in prep.initial:
            mem[b.address:b.address + b.size] = prep.initial[b.name]
    ddr[prep.base:] = np.frombuffer(prep.binary, dtype=np.uint8)
    return ddr, sram["L2"], sram["L1"]


def engine_design(device: str):
    """The regression's design for the engine of ``device`` (so the Verilator build is
    shared with ``npu sim``)."""
    for r in REGRESSIONS:
        if r.module == "sim.tb_engine" and r.design.params == {"device": device}:
            return r.design
    raise SimError(f"no engine regression for device {device!r}")


def simulate(prep: Prepared, *, stalls=False, waves=False, budget=DEFAULT_BUDGET,
             watchdog=None, seed=1) -> RtlRun:
    """Build (cached) the engine for the program's device and run the program on it.

    Parameters
    ----------
    prep : Prepared
        From :func:`prepare`.
    stalls : bool
        Random pauses on every AXI channel.
    waves : bool
        Build with tracing and write a waveform into the run directory.
    budget : int
        Cycles after which a run that has not ended is stopped.
    watchdog : int, optional
        The engine's ``WATCHDOG`` register (cycles without progress; default: its reset
        value).
    seed : int
        Seed of the AXI pause generators.
    """
    cfg = EngineConfig.shipped(prep.device)
    ddr, l2, l1 = _memories(prep, cfg)
    built = build(engine_design(prep.device), waves=waves)
    run_dir = built.directory / "runs" / "nem-sim"
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one npu nem sim at a time per build
        files = {k: run_dir / f"{k}.bin" for k in ("ddr", "l2", "l1")}
        for key, data in (("ddr", ddr), ("l2", l2), ("l1", l1)):
            files[key].write_bytes(data.tobytes())
        result, final = run_dir / "result.json", run_dir / "final.npz"
        result.unlink(missing_ok=True)
        job = {
            "ddr": str(files["ddr"]), "l2": str(files["l2"]), "l1": str(files["l1"]),
            "base": prep.base,
            "ddr_size": max(MIN_DDR, -(-ddr.size // PROGRAM_ALIGN) * PROGRAM_ALIGN),
            "stalls": stalls, "seed": seed, "budget": budget, "watchdog": watchdog,
            "buffers": [{"name": b.name, "level": b.level, "address": b.address,
                         "size": b.size} for b in prep.program.buffers],
            "result": str(result), "memory": str(final),
        }  # fmt: skip
        (run_dir / "job.json").write_text(json.dumps(job, indent=1))
        run_cocotb(built, "sim.tb_program", name="nem-sim", seed=seed,
                   env={"NPU_PROGRAM_JOB": str(run_dir / "job.json")})
        out = json.loads(result.read_text())
        with np.load(final, allow_pickle=False) as data:
            buffers = {name: np.array(data[name]) for name in data.files}
    return RtlRun(out["status"], out["budget_hit"], out["counters"], out["seq"], out["units"],
                  out["spans"], out["seq_states"], buffers, run_dir)


def seq_state_names(device: str) -> dict[int, str]:
    """Codes of the SEQ's state register (``seq_state``) by name, from the Amaranth FSM."""
    from amaranth.hdl import Fragment

    from npu.engine.seq import Sequencer

    fragment = Fragment.get(Sequencer(EngineConfig.shipped(device)), None)
    return dict(fragment.generated["seq"].decoding)


@dataclass(frozen=True)
class Mismatch:
    """The first difference between the RTL's memory and the executor's."""

    buffer: str
    offset: int  # byte offset in the buffer
    address: int  # the byte's address in its memory
    level: str
    rtl: int
    executor: int
    differing: int  # bytes of the buffer that differ
    task: int | None  # first task in program order whose output region holds a difference
    label: str | None

    def __str__(self) -> str:
        where = (f"task {self.task} ({self.label}) wrote a wrong result"
                 if self.task is not None else "a byte no task writes differs")
        return (f"{where}: buffer {self.buffer}, byte offset {self.offset} ({self.level} "
                f"address {self.address:#x}): RTL {self.rtl:#04x}, executor "
                f"{self.executor:#04x} ({self.differing} byte(s) of {self.buffer} differ)")


def region_bytes(region) -> np.ndarray:
    """Byte offsets in its buffer that a (possibly strided, typed) region covers, sorted."""
    strided = region.typed and region.strides is not None and tuple(region.strides) != \
        dense_strides(tuple(region.shape))
    if not strided:
        return np.arange(region.offset, region.offset + region.extent, dtype=np.int64)
    idx = np.zeros((1,), dtype=np.int64)
    for d, s in zip(region.shape, region.strides, strict=True):
        idx = (idx[:, None] + np.arange(d, dtype=np.int64)[None, :] * s).reshape(-1)
    bits = BITS[region.elem]
    if bits < 8:
        out = idx * bits // 8
    else:
        n = bits // 8
        out = (idx[:, None] * n + np.arange(n, dtype=np.int64)[None, :]).reshape(-1)
    return np.unique(out + region.offset)


def compare(prep: Prepared, want: dict[str, np.ndarray],
            got: dict[str, np.ndarray]) -> Mismatch | None:
    """None when every buffer of the binary holds the same bytes in ``got`` (RTL) as in
    ``want`` (executor); else the first task in program order whose output region holds a
    differing byte, and that region's first differing byte."""
    table = {b.name: b for b in prep.program.buffers}
    diff = {name: got[name] != want[name] for name in table}
    if not any(d.any() for d in diff.values()):
        return None

    def mismatch(name, k, task, label):
        b = table[name]
        return Mismatch(name, k, b.address + k, b.level, int(got[name][k]), int(want[name][k]),
                        int(diff[name].sum()), task, label)

    if prep.plan is not None:
        for task in prep.plan.tasks:
            for region in task.outs:
                cover = region_bytes(region)
                bad = cover[diff[region.buffer][cover]]
                if bad.size:
                    return mismatch(region.buffer, int(bad[0]), task.index,
                                    prep.labels[task.index])
    name = next(n for n in table if diff[n].any())
    return mismatch(name, int(np.flatnonzero(diff[name])[0]), None, None)


def chrome_trace(prep: Prepared, rtl: RtlRun, executor: RunResult | None) -> dict:
    """One Chrome/Perfetto trace: process 1 the RTL's task timeline (issue to completion,
    from the testbench's monitor of the SEQ's issue and the units' done), process 2 the
    executor's modelled timeline; a thread per unit, 1 cycle shown as 1 us."""
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0,
               "args": {"name": f"RTL nem_engine ({prep.device})"}}]
    for k, unit in enumerate(rtl.units):
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": k,
                       "args": {"name": unit}})
    end = rtl.counters["CYCLES"]
    for task, unit, start, stop in rtl.spans:
        args = {"task": task}
        if stop is None:
            args["unfinished"] = True
        events.append({"ph": "X", "name": prep.labels[task] if task < len(prep.labels)
                       else f"task {task}", "pid": 1, "tid": unit, "ts": start,
                       "dur": (stop if stop is not None else max(end, start)) - start,
                       "args": args})
    if executor is not None:
        events.append({"ph": "M", "name": "process_name", "pid": 2, "tid": 0,
                       "args": {"name": "executor (nem.executor, in order)"}})
        tids = {}
        for event in executor.chrome_trace()["traceEvents"]:
            if event["ph"] == "M" and event["name"] == "thread_name":
                tids[(event["pid"], event["tid"])] = len(tids)
                events.append({**event, "pid": 2, "tid": tids[(event["pid"], event["tid"])]})
            elif event["ph"] == "X":
                events.append({**event, "pid": 2, "tid": tids[(event["pid"], event["tid"])],
                               "name": prep.labels[event["args"]["task"]]})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"time_unit": "cycles (shown as microseconds)",
                          "rtl_cycles": end,
                          "executor_cycles": executor.total_cycles if executor else None}}


