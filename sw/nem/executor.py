"""The NEM executor: a bit-exact numpy model of the NPU with a race detector and cycle model.

:func:`execute` runs an elaborated program (:class:`nem.checker.Plan`) on a resolved device:

* **Memory.** DDR, L2 and every L1[k] are byte arrays; buffers are placed by
  :func:`nem.memory.allocate` (the binder's allocator too).
* **Order.** A task may start when every task before it in the happens-before order has
  completed: its ``deps``, the ``wait``s and ``.sync`` tasks before it, the loop iterations
  ``@max_in_flight`` iterations back, and everything before an enclosing loop.
* **Units.** Each task runs on one unit instance: ``@resource`` pins the instance (after the
  Target Resource Validity Rule); otherwise transfers between DDR and L2 use an ``sDMA``, other
  transfers an engine ``DMA``, stores with an L1 side a ``CSTL`` (nem.md: Resource Classes),
  compute tasks the registry's execution unit. Instances per engine come from the device's
  ``per_engine`` counts; engine-agnostic tasks run on engine 0.
* **Schedule.** A discrete-event list scheduler: at each moment the ready tasks, in program
  order, take the lowest-numbered free instance they may use; a task keeps its unit for the
  cycles :class:`nem.cycles.CycleModel` gives. The effect of a task is applied when it
  starts; this is exact because two tasks in flight together never touch the same bytes
  with a write (the race detector below makes sure of it).
* **Races.** When a task starts, its byte ranges are compared with those of every task in
  flight; an overlap with at least one write is a :class:`RaceError` naming both tasks,
  the regions, the memory and the bytes.

The result holds the final memory, one record per task (unit, start, end) and the summary
numbers: total cycles, busy cycles per unit, MAC utilisation, bytes moved per path.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import zipfile
import zlib
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from nem.checker import Plan, Region, TaskInstance, check_file
from nem.cycles import CycleModel
from nem.device import Device
from nem.diagnostics import NemError
from nem.memory import (
    AllocationError,
    CopyWalkError,
    Memory,
    Placement,
    allocate,
    copy_walk,
    memory_name,
)
from nem.opcodes import groups
from nem.ops import UNSUPPORTED, NotSupported, OpError, Work, run_compute
from nem.registry import Registry, load_registry
from nem.units import DEVICE_UNITS, RESOURCE_TARGETS
from nem.units import unit_type as unit_kind

__all__ = [
    "ExecError",
    "RaceError",
    "RunResult",
    "TaskRecord",
    "copy_unit",
    "execute",
    "load_npz",
    "run_file",
    "unit_type",
]


#: The largest memory (DDR, L2, one L1) the executor allocates, in bytes.
MAX_MEMORY = 1 << 31


class ExecError(RuntimeError):
    """The program cannot run on this device (message names the task and the reason)."""


class RaceError(ExecError):
    """Two tasks in flight at once touch overlapping bytes and at least one writes them."""


@dataclass(frozen=True)
class TaskRecord:
    """What one task did: unit instance, start and end cycle, work."""

    index: int
    label: str
    unit: str
    start: int
    end: int
    macs: int = 0
    nbytes: int = 0
    path: str | None = None
    macs_per_cycle: int = 0


@dataclass
class RunResult:
    """Final memory contents, per-task records and summary numbers of one run."""

    memory: Memory
    records: list[TaskRecord]
    units: list[str]
    placements: dict[str, Placement] = field(default_factory=dict)

    @property
    def total_cycles(self) -> int:
        """Cycle at which the last task completes."""
        return max((r.end for r in self.records), default=0)

    def busy(self) -> dict[str, int]:
        """Busy cycles of every unit instance (instances that never ran included, as 0)."""
        out = dict.fromkeys(self.units, 0)
        for r in self.records:
            out[r.unit] += r.end - r.start
        return out

    def bytes_moved(self) -> dict[str, int]:
        """Bytes moved per path (``"DDR->L2"``, ``"L2->L1[0]"``, ...)."""
        out: dict[str, int] = defaultdict(int)
        for r in self.records:
            if r.path:
                out[r.path] += r.nbytes
        return dict(sorted(out.items()))

    def mac_utilisation(self) -> tuple[float, float]:
        """(overall, while busy): MACs done over MACs the NMUs could have done.

        ``overall`` divides by the whole run on every NMU instance; ``while busy`` only by the
        cycles NMU tasks held their unit (it shows the per-task latency overhead).
        """
        nmu = [r for r in self.records if r.macs]
        n_units = sum(1 for u in self.units if ".NMU[" in u)
        if not nmu or not n_units or not self.total_cycles:
            return 0.0, 0.0
        ideal = sum(r.macs / r.macs_per_cycle for r in nmu)
        held = sum(r.end - r.start for r in nmu)
        return ideal / (self.total_cycles * n_units), ideal / held

    def buffers(self) -> dict[str, np.ndarray]:
        """The final bytes of every buffer (copies)."""
        return {name: self.memory.buffer(name).copy() for name in self.memory.placements}

    def summary(self) -> str:
        """A readable report: cycles, unit busy %, MAC utilisation, bytes per path."""
        total = self.total_cycles
        lines = [f"tasks: {len(self.records)}", f"total cycles: {total}"]
        for unit, busy in self.busy().items():
            pct = 100.0 * busy / total if total else 0.0
            lines.append(f"  {unit:<14} busy {busy:>10} cycles  {pct:6.2f} %")
        overall, held = self.mac_utilisation()
        macs = sum(r.macs for r in self.records)
        lines.append(
            f"MACs: {macs}  utilisation {100 * overall:.2f} % of the run, "
            f"{100 * held:.2f} % while the NMU was busy"
        )
        for path, n in self.bytes_moved().items():
            lines.append(f"  bytes {path:<14} {n}")
        return "\n".join(lines)

    def chrome_trace(self) -> dict:
        """The schedule as Chrome trace JSON (opens in Perfetto); 1 cycle = 1 us."""
        events = []
        tids: dict[str, tuple[int, int]] = {}
        pids: dict[str, int] = {}
        for unit in self.units:
            proc = unit.split(".")[0] if "." in unit else "device"
            pid = pids.setdefault(proc, len(pids))
            tids[unit] = (pid, len(tids))
        for proc, pid in pids.items():
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                           "args": {"name": proc}})
        for unit, (pid, tid) in tids.items():
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": unit}})
        for r in self.records:
            pid, tid = tids[r.unit]
            args = {"task": r.index}
            if r.macs:
                args["macs"] = r.macs
            if r.path:
                args["bytes"] = r.nbytes
                args["path"] = r.path
            events.append({"ph": "X", "name": r.label, "pid": pid, "tid": tid, "ts": r.start,
                           "dur": r.end - r.start, "args": args})
        return {"traceEvents": events, "displayTimeUnit": "ns",
                "otherData": {"time_unit": "cycles (shown as microseconds)"}}

    def write_trace(self, path: str | os.PathLike) -> None:
        """Write :meth:`chrome_trace` to ``path``."""
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.chrome_trace(), fh)


# --- unit assignment --------------------------------------------------------------------------


def copy_unit(src_level: str, dst_level: str, device: Device) -> str:
    """``sDMA`` for copies between DDR and L2 when the device has one, else ``DMA``."""
    levels = {src_level, dst_level}
    if "L1" not in levels and "DDR" in levels and device.units("sDMA"):
        return "sDMA"
    return "DMA"


def unit_type(task: TaskInstance, device: Device, registry: Registry) -> str:
    """The unit type that runs ``task``.

    Its ``@resource`` when it has one; for copies :func:`copy_unit` (a store out of L1 goes to
    the CSTL when the device has one); else the registry's execution unit, or the VPU when the
    device lacks that unit and has a VPU.
    """
    if task.resource is not None:
        return task.resource[0]
    if task.kind in ("transfer", "store"):
        src, dst = task.ins[0], task.outs[0]
        if task.kind == "store" and "L1" in (src.level, dst.level) and device.units("CSTL"):
            return "CSTL"
        return copy_unit(src.level, dst.level, device)
    opcode = registry.opcodes.get(task.opcode)
    unit = opcode.execution_unit if opcode is not None else None
    if unit not in RESOURCE_TARGETS or not device.units(unit):
        unit = "VPU" if device.units("VPU") else unit
    return unit or "VPU"


def _unit_names(device: Device) -> dict[tuple[str, int | None], list[str]]:
    out: dict[tuple[str, int | None], list[str]] = {}
    for k in range(device.num_engines or 1):
        for unit, count in device.per_engine.items():
            if unit not in RESOURCE_TARGETS:
                continue
            out[(unit, k)] = [f"E{k}.{unit}[{i}]" for i in range(count)]
    for unit in DEVICE_UNITS:
        if unit_kind(unit).runs_tasks and device.units(unit):
            out[(unit, None)] = [f"{unit}[{i}]" for i in range(device.units(unit))]
    return out


@dataclass
class _Prepared:
    task: TaskInstance
    pool: list[str]
    pinned: str | None


# --- execution ---------------------------------------------------------------------------------


def _accesses(memory: Memory, task: TaskInstance):
    out = []
    for write, regions in ((False, task.ins), (True, task.outs)):
        for region in regions:
            key, lo, hi = memory.touched(region)
            out.append((key, lo, hi, write, region))
    return out


def _race(task: TaskInstance, mine, other: TaskInstance, theirs, now: int, memory) -> str | None:
    for key, lo, hi, write, region in mine:
        for key2, lo2, hi2, write2, region2 in theirs:
            if key != key2 or hi <= lo2 or hi2 <= lo or not (write or write2):
                continue
            a, b = max(lo, lo2), min(hi, hi2)
            p = memory.placements[region.buffer]
            rel = (a - p.address, b - p.address)
            return (
                f"race at cycle {now}: {task.label} {'writes' if write else 'reads'} "
                f"{region.label} and {other.label} {'writes' if write2 else 'reads'} "
                f"{region2.label} while both are in flight; they share bytes "
                f"[{rel[0]}, {rel[1]}) of buffer {region.buffer} ({memory_name(key)} "
                f"addresses [{a}, {b})) and no dependency orders them"
            )
    return None


def _copy_rows(src: Region, dst: Region) -> int:
    """Contiguous runs a copy unit walks for this copy (``nem.memory.copy_walk``)."""
    try:
        _, dims = copy_walk(src, dst)
    except CopyWalkError:
        return math.prod(d for d in src.shape if d != 1)  # element by element
    return math.prod(count for count, _, _ in dims)


def _apply(task: TaskInstance, memory: Memory, consts) -> tuple[Work, int]:
    """Perform the task's effect on memory; return its work and the bytes it moved."""
    if task.kind in ("transfer", "store"):
        src, dst = task.ins[0], task.outs[0]
        strided = (src.strides is not None) or (dst.strides is not None)
        if strided and src.typed and dst.typed:
            values = memory.read(src)
            if values.size != math.prod(dst.shape) or src.elem != dst.elem:
                raise ExecError(
                    f"{task.label}: strided copy of {src.label} ({src.elem} x {values.size}) "
                    f"into {dst.label} ({dst.elem} x {math.prod(dst.shape)})"
                )
            memory.write(dst, values.reshape(dst.shape))
            return Work(rows=_copy_rows(src, dst)), src.extent
        data = memory.region_bytes(src).copy()
        memory.region_bytes(dst)[: data.size] = data
        return Work(rows=1), src.extent
    ins = [(r, memory.read(r)) for r in task.ins]
    try:
        outs, work = run_compute(task.opcode, ins, list(task.outs), task.attrs, consts)
    except NotSupported as exc:
        raise ExecError(f"{task.label}: not supported: {exc}") from None
    except OpError as exc:
        raise ExecError(f"{task.label}: {exc}") from None
    except (ValueError, IndexError, TypeError, ArithmeticError) as exc:
        # the checker (NEM text) or the binary front-end should have refused these operands
        raise ExecError(
            f"{task.label}: {task.opcode} cannot run on these operands "
            f"({', '.join(str(list(r.shape)) for r in (*task.ins, *task.outs))}): {exc}"
        ) from None
    for region, values in zip(task.outs, outs, strict=True):
        memory.write(region, values)
    return work, 0


def execute(
    plan: Plan,
    device: Device,
    initial: dict[str, np.ndarray] | None = None,
    *,
    registry: Registry | None = None,
    in_order: bool = False,
) -> RunResult:
    """Run an elaborated program on a device.

    Parameters
    ----------
    plan : Plan
        From :func:`nem.checker.check_file` (``result.plan``).
    device : Device
        A concrete (resolved) device.
    initial : dict of str to numpy.ndarray, optional
        Initial contents per buffer name (raw little-endian bytes of the array, from the
        buffer's first byte); other bytes start at zero.
    registry : Registry, optional
    in_order : bool
        Issue tasks strictly in program order, as the sequencer does with a task binary: a
        task starts only after every earlier task has started. By default a task starts as
        soon as its dependencies are done and a unit is free (the NEM semantics).

    Returns
    -------
    RunResult

    Raises
    ------
    ExecError
        A task cannot run (unsupported, bad operands, no unit), or a race.
    """
    if device is None or not device.concrete:
        name = device.name if device else "none"
        raise ExecError(f"the executor needs a device with a topology (device: {name})")
    registry = registry or load_registry()
    try:
        placements, sizes = allocate(plan.buffers, device)
        for key, size in sizes.items():
            if size > MAX_MEMORY:
                raise AllocationError(
                    f"{memory_name(key)} needs {size} bytes; the executor holds at most "
                    f"{MAX_MEMORY} bytes per memory"
                )
        memory = Memory(placements, sizes)
        for name, data in (initial or {}).items():
            memory.load_buffer(name, data)
    except AllocationError as exc:
        raise ExecError(str(exc)) from None
    model = CycleModel(device)
    pools = _unit_names(device)
    units = [u for names in pools.values() for u in names]

    prepared: list[_Prepared] = []
    for task in plan.tasks:
        if task.kind == "compute" and task.opcode in UNSUPPORTED:
            raise ExecError(f"{task.label}: not supported: {UNSUPPORTED[task.opcode]}")
        unit = unit_type(task, device, registry)
        engine = None if unit in DEVICE_UNITS else (task.engine or 0)
        pool = pools.get((unit, engine), [])
        if not pool:
            where = "the device" if engine is None else f"engine {engine}"
            raise ExecError(f"{task.label}: {where} has no {unit} unit to run {task.opcode}")
        pinned = None
        if task.resource is not None:
            pinned = pool[task.resource[1] % len(pool)]
        prepared.append(_Prepared(task, pool, pinned))

    order = plan.order
    n_nodes = len(order.preds)
    task_of = {t.node: t.index for t in plan.tasks}
    succs: list[list[int]] = [[] for _ in range(n_nodes)]
    pending = [len(p) for p in order.preds]
    for node, preds in enumerate(order.preds):
        for p in preds:
            succs[p].append(node)

    ready: list[int] = []  # heap of task indices
    free_at: dict[str, bool] = dict.fromkeys(units, True)
    in_flight: dict[int, tuple[str, list]] = {}
    events: list[tuple[int, int]] = []  # (end cycle, task index)
    records: list[TaskRecord | None] = [None] * len(plan.tasks)

    def complete(node: int) -> None:
        stack = [node]
        while stack:
            n = stack.pop()
            for s in succs[n]:
                pending[s] -= 1
                if pending[s] == 0:
                    if s in task_of:
                        heapq.heappush(ready, task_of[s])
                    else:
                        stack.append(s)

    for node in [n for n in range(n_nodes) if not order.preds[n]]:
        if node in task_of:
            heapq.heappush(ready, task_of[node])
        else:
            complete(node)

    now = 0
    done = 0
    next_issue = 0  # in_order: the only task that may start next
    # in_order: when the sequencer has decoded task next_issue (nem.cycles.CycleModel.decode)
    decoded_at = model.decode(plan.tasks[0], 0) if in_order and plan.tasks else 0
    while done < len(plan.tasks):
        waiting: list[int] = []
        while ready:
            idx = heapq.heappop(ready)
            if in_order and idx != next_issue:
                waiting.append(idx)
                break
            if in_order and decoded_at > now:
                waiting.append(idx)
                heapq.heappush(events, (decoded_at, -1))  # wake up when it is decoded
                break
            prep = prepared[idx]
            choices = [prep.pinned] if prep.pinned else prep.pool
            unit = next((u for u in choices if free_at[u]), None)
            if unit is None:
                waiting.append(idx)
                if in_order:
                    break
                continue
            next_issue += 1
            if in_order and next_issue < len(plan.tasks):
                # one task of decode ahead: the next one once this one has left the slot
                decoded_at = max(decoded_at, now) + model.decode(plan.tasks[next_issue], 1)
            task = prep.task
            mine = _accesses(memory, task)
            for other_idx, (_, theirs) in in_flight.items():
                msg = _race(task, mine, plan.tasks[other_idx], theirs, now, memory)
                if msg:
                    raise RaceError(msg)
            work, nbytes = _apply(task, memory, plan.consts)
            kind = unit.split(".")[-1].split("[")[0]
            elems = tuple(r.elem for r in (*task.ins, *task.outs) if r.elem)
            cycles = model.cycles(kind, work, nbytes, elems, task=task, instance=unit)
            path = None
            if nbytes:
                path = f"{_level(task.ins[0])}->{_level(task.outs[0])}"
            rate = model.macs_per_cycle(elems) if task.opcode in groups().nmu else 0
            records[idx] = TaskRecord(
                idx, task.label, unit, now, now + cycles, work.macs, nbytes, path, rate
            )
            free_at[unit] = False
            in_flight[idx] = (unit, mine)
            heapq.heappush(events, (now + cycles, idx))
        for idx in waiting:
            heapq.heappush(ready, idx)
        if not events:
            stuck = [plan.tasks[i].label for i in range(len(plan.tasks)) if records[i] is None]
            raise ExecError(
                f"deadlock at cycle {now}: {len(stuck)} task(s) can never start, first "
                f"{stuck[0]}"
            )
        now = events[0][0]
        while events and events[0][0] == now:
            _, idx = heapq.heappop(events)
            if idx < 0:
                continue  # a sequencer wake-up
            unit, _ = in_flight.pop(idx)
            free_at[unit] = True
            done += 1
            complete(plan.tasks[idx].node)
    return RunResult(memory, [r for r in records if r is not None], units, placements)


def _level(region: Region) -> str:
    return f"L1[{region.engine or 0}]" if region.level == "L1" else region.level


def run_file(
    path: str | os.PathLike,
    initial: dict[str, np.ndarray] | None = None,
    *,
    device: str | None = None,
) -> RunResult:
    """Check a NEM file and run it (:func:`execute`); checker errors raise :class:`NemError`."""
    result = check_file(path, device=device)
    errors = [d for d in result.diagnostics if d.severity == "error"]
    if errors:
        raise NemError(errors)
    if result.device is None:
        raise ExecError(
            f"{os.fspath(path)}: no device: give one with a device directive or --device"
        )
    return execute(result.plan, result.device, initial)


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Initial buffer contents from an ``.npz`` file (name -> array), read completely.

    Raises
    ------
    ExecError
        When the file is missing, not an npz archive, corrupt, or holds object arrays.
    """
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ExecError(f"{os.fspath(path)}: an .npy array, not an .npz archive of buffers")
        with data:
            return {name: np.asarray(data[name]) for name in data.files}
    except ExecError:
        raise
    except (
        OSError, ValueError, EOFError, KeyError, NotImplementedError, RuntimeError,
        zipfile.BadZipFile, zlib.error,
    ) as exc:
        # zipfile raises NotImplementedError / RuntimeError for unsupported or encrypted members.
        raise ExecError(f"{os.fspath(path)}: not a readable .npz file ({exc})") from None
