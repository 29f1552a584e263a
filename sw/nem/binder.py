"""The binder: a checked NEM program -> task binary, and the executor's binary front-end.

:func:`bind` places buffers with :func:`nem.memory.allocate` (the executor's allocator),
unrolls loops (the checker's plan already is unrolled: the sequencer has no loop state to
get wrong, at the price of binary size), reduces the happens-before order to direct task
dependencies and maps them onto physical tokens (:mod:`nem.tokens`), and encodes every
task as register writes of its unit (:mod:`nem.taskformat`).

:func:`plan_from_binary` turns a decoded binary back into the executor's elaborated program
(buffers, tasks with regions, and the order the tokens imply), so that
``nem.executor.execute`` runs the binary with the same units, timing model and race
detector as the NEM text.

Scope today: transfers and stores (DMA and sDMA). A copy is at most 4-D with a contiguous
innermost run. Stores go to a DMA like transfers do (the registry runs store on DMA; the
CSTL register map does not exist yet). Compute tasks are refused with a clear error until
the NMU/CSTL register maps are defined (issue 7).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from nem.checker import BITS, BufferInfo, CheckResult, Plan, Region, TaskInstance
from nem.device import Device
from nem.diagnostics import Span
from nem.executor import copy_unit
from nem.hazards import Order
from nem.memory import AllocationError, Placement, allocate, dense_strides
from nem.taskformat import (
    LEVELS,
    MAX_TOKENS,
    REGISTER_MAPS,
    BufferEntry,
    Program,
    Task,
    TaskFormatError,
    Unit,
)
from nem.tokens import TokenError, assign_tokens

__all__ = ["BindError", "bind", "device_hash", "plan_from_binary"]


_BINARY = Span("<binary>", 0, 0)


class BindError(ValueError):
    """The program cannot be bound (the message names the task and the reason)."""


def device_hash(device: Device) -> bytes:
    """sha256 of the resolved device's canonical JSON (sorted keys, sets sorted)."""

    def canon(value):
        if isinstance(value, (frozenset, set)):
            return sorted(value)
        if isinstance(value, dict):
            return {k: canon(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [canon(v) for v in value]
        return value

    text = json.dumps(canon(asdict(device)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).digest()


def _byte_strides(region: Region, label: str) -> list[int]:
    """Byte strides of the dimensions of ``region`` that are not 1, outermost first."""
    bits = BITS[region.elem]
    if bits % 8:
        raise BindError(f"{label}: strided copy of sub-byte {region.elem} elements")
    strides = region.strides or dense_strides(tuple(region.shape))
    return [s * bits // 8 for d, s in zip(region.shape, strides, strict=True) if d != 1]


def copy_registers(task: TaskInstance, placements: dict[str, Placement]) -> list[tuple[str, int]]:
    """Register writes of a copy unit for a transfer or store, as the executor performs it."""
    src, dst = task.ins[0], task.outs[0]
    dims: list[tuple[int, int, int]] = []  # (count, source stride, destination stride)
    if (src.strides is None and dst.strides is None) or not (src.typed and dst.typed):
        # the executor copies the source's bytes to the start of the destination
        run = src.extent
    else:
        shape = [d for d in src.shape if d != 1]
        if shape != [d for d in dst.shape if d != 1]:
            raise BindError(
                f"{task.label}: copy from shape {list(src.shape)} to {list(dst.shape)}; the "
                "copy unit walks one shape on both sides"
            )
        run = BITS[src.elem] // 8
        walk = zip(
            shape, _byte_strides(src, task.label), _byte_strides(dst, task.label), strict=True
        )
        # merge the innermost dimensions that are contiguous on both sides into one run
        for d, a, b in reversed(list(walk)):
            if not dims and a == run and b == run:
                run *= d
            else:
                dims.append((d, a, b))
    if len(dims) > 3:
        raise BindError(
            f"{task.label}: the copy needs {len(dims) + 1} dimensions after merging "
            "contiguous ones; the copy units walk at most 4"
        )
    if run >= 1 << 32:
        raise BindError(f"{task.label}: a contiguous run of {run} bytes (at most 2^32 - 1)")
    s_addr = placements[src.buffer].address + src.offset
    d_addr = placements[dst.buffer].address + dst.offset
    writes = [
        ("SRC_LO", s_addr & 0xFFFFFFFF),
        ("SRC_HI", s_addr >> 32),
        ("DST_LO", d_addr & 0xFFFFFFFF),
        ("DST_HI", d_addr >> 32),
        ("COUNT0", run),
    ]
    for k in range(3):
        count, a, b = dims[k] if k < len(dims) else (1, 0, 0)
        writes += [(f"COUNT{k + 1}", count), (f"SRC_STRIDE{k + 1}", a), (f"DST_STRIDE{k + 1}", b)]
    writes += [("SRC_LEVEL", LEVELS.index(src.level)), ("DST_LEVEL", LEVELS.index(dst.level))]
    return writes


def _task_deps(plan: Plan) -> list[list[int]]:
    """Per task, the nearest earlier tasks in the happens-before order (through barriers).

    Every node's set of nearest task ancestors is computed once, in node order (which is
    topological), and kept to its maximal elements, so loops with many iterations cost
    linear time rather than a walk back through every earlier barrier per task.
    """
    order = plan.order
    is_task = {t.node for t in plan.tasks}
    front: list[frozenset[int]] = []
    for preds in order.preds:
        union: set[int] = set()
        for p in preds:
            union |= {p} if p in is_task else front[p]
        if len(union) > 1:
            covered = 0
            for m in union:
                covered |= order.ancestors[m]
            union = {m for m in union if not covered >> m & 1}
        front.append(frozenset(union))
    task_of = {t.node: t.index for t in plan.tasks}
    return [sorted(task_of[m] for m in front[t.node]) for t in plan.tasks]


def bind(result: CheckResult) -> Program:
    """Bind a checked program for its device.

    Raises
    ------
    BindError
        When the program has errors, does not fit, needs more tokens than the device has, or
        uses what this binder cannot encode yet (the message names the task).
    """
    if not result.ok:
        first = next(d for d in result.diagnostics if d.severity == "error")
        raise BindError(f"the program is not valid; first error: {first}")
    device = result.device
    if device is None or not device.concrete:
        raise BindError("binding needs a concrete device (with a topology)")
    plan = result.plan
    try:
        placements, _ = allocate(plan.buffers, device)
    except AllocationError as exc:
        raise BindError(str(exc)) from None
    # _task_deps already keeps only the dependencies no other one implies
    count = min(device.characteristic("SEQ", "max_active_tokens") or MAX_TOKENS, MAX_TOKENS)
    try:
        wait, signal = assign_tokens(_task_deps(plan), count, [t.label for t in plan.tasks])
    except TokenError as exc:
        raise BindError(str(exc)) from None
    tasks = []
    next_instance: dict[tuple[Unit, int], int] = {}
    for task in plan.tasks:
        if task.kind not in ("transfer", "store"):
            raise BindError(
                f"{task.label}: {task.opcode} runs on a compute unit, whose register map is "
                "not defined yet (this binder encodes transfers and stores)"
            )
        unit_type = copy_unit(task.ins[0].level, task.outs[0].level, device)
        unit = Unit.SDMA if unit_type == "sDMA" else Unit.DMA
        count_units = device.units(unit_type) or 1
        engine = 0 if unit is Unit.SDMA else (task.engine or 0)
        if task.resource and task.resource[0] in ("DMA", "sDMA"):
            instance = task.resource[1] % count_units
        else:
            # no @resource: spread over the instances in turn, so that independent copies
            # can run at the same time (the binary fixes the instance, SEQ does not choose)
            instance = next_instance.get((unit, engine), 0)
            next_instance[(unit, engine)] = (instance + 1) % count_units
        regs = REGISTER_MAPS[unit]
        writes = tuple(
            (regs.index(name), value) for name, value in copy_registers(task, placements)
        )
        tasks.append(Task(unit, instance, engine, wait[task.index], signal[task.index], writes))
    buffers = tuple(
        BufferEntry(p.name, p.level, p.engine, p.align, p.address, p.size)
        for p in placements.values()
    )
    return Program(device_hash(device), buffers, tuple(tasks))


def plan_from_binary(program: Program, device: Device) -> Plan:
    """The executor's view of a decoded binary: buffers, copy tasks, and the token order.

    Raises
    ------
    TaskFormatError
        When the binary does not fit the device or addresses lie outside every buffer.
    """
    if program.device_hash != device_hash(device):
        raise TaskFormatError(
            f"the binary was bound for another device (hash {program.device_hash.hex()[:16]}..., "
            f"{device.name} is {device_hash(device).hex()[:16]}...)"
        )
    buffers = {
        b.name: BufferInfo(b.name, b.level, b.engine, b.size, frozenset(), _BINARY, b.align)
        for b in program.buffers
    }
    placements, _ = allocate(buffers, device)
    for b in program.buffers:
        p = placements[b.name]
        if p.address != b.address:
            raise TaskFormatError(
                f"buffer {b.name}: address {b.address}, but the device's allocator places it at "
                f"{p.address}"
            )
    order = Order()
    producer: dict[int, int] = {}
    tasks = []
    for k, rec in enumerate(program.tasks):
        waits = [t for t in range(MAX_TOKENS) if rec.wait >> t & 1]
        missing = [t for t in waits if t not in producer]
        if missing:
            raise TaskFormatError(
                f"task {k} waits on token {missing[0]}, which no earlier task signals "
                "(it would wait forever)"
            )
        node = order.node([producer[t] for t in waits])
        for t in range(MAX_TOKENS):
            if rec.signal >> t & 1:
                producer[t] = node
        tasks.append(_copy_task(k, rec, node, program.buffers))
    return Plan(buffers, tasks, order, {})


def _copy_task(k: int, rec: Task, node: int, table) -> TaskInstance:
    if rec.unit not in (Unit.DMA, Unit.SDMA):
        raise TaskFormatError(f"task {k}: unit {rec.unit.name} is not executable yet")
    regs = REGISTER_MAPS[rec.unit]
    values = dict.fromkeys((r.name for r in regs.registers), 0)
    for index, value in rec.writes:
        values[regs.name(index)] = value
    counts = [values[f"COUNT{d}"] for d in (3, 2, 1)]

    def side(prefix: str) -> Region:
        level_code = values[f"{prefix}_LEVEL"]
        if level_code >= len(LEVELS):
            raise TaskFormatError(f"task {k}: {prefix}_LEVEL {level_code} is not a level")
        level = LEVELS[level_code]
        address = values[f"{prefix}_LO"] | values[f"{prefix}_HI"] << 32
        strides = [values[f"{prefix}_STRIDE{d}"] for d in (3, 2, 1)]
        extent = values["COUNT0"] + sum((c - 1) * s for c, s in zip(counts, strides, strict=True))
        for b in table:
            engine_ok = level != "L1" or (b.engine or 0) == rec.engine
            if b.level == level and engine_ok and b.address <= address < b.address + b.size:
                if address + extent > b.address + b.size:
                    break
                return Region(
                    None,
                    b.name,
                    level,
                    b.engine,
                    address - b.address,
                    extent,
                    "u8",
                    (*counts, values["COUNT0"]),
                    None,
                    (*strides, 1),
                )
        raise TaskFormatError(
            f"task {k}: {prefix} bytes [{address}, {address + extent}) of {level} are not "
            "inside one buffer"
        )

    if values["COUNT0"] == 0 or 0 in counts:
        raise TaskFormatError(f"task {k}: a copy count is 0")
    src, dst = side("SRC"), side("DST")
    label = f"task {k} ({rec.unit.name}[{rec.instance}])"
    resource = ("sDMA" if rec.unit is Unit.SDMA else "DMA", rec.instance)
    engine = None if rec.unit is Unit.SDMA else rec.engine
    return TaskInstance(
        k,
        node,
        "transfer",
        "transfer",
        "async",
        (src,),
        (dst,),
        {},
        frozenset(),
        resource,
        engine,
        label,
        _BINARY,
    )
