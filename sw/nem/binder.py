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

Copies (transfers and stores) go to a DMA or sDMA as at most 4-D strided byte copies with a
contiguous innermost run; a store is a plain copy, so it goes to a copy unit even where the
executor would pick the CSTL. Compute tasks go to the unit the executor picks
(:func:`nem.executor.unit_type`: NMU, CSTL or VPU) as an opcode, one descriptor per operand
(address, level, extent, element type, shape, element strides, quantisation entry) and the
attributes as words; quantisation entries live in the binary's data section.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from nem.checker import BufferInfo, CheckResult, Plan, Region, TaskInstance
from nem.device import Device
from nem.diagnostics import Span
from nem.elemtypes import BITS, FLOAT_TYPES
from nem.executor import copy_unit, unit_type
from nem.hazards import Order
from nem.memory import (
    AllocationError,
    CopyWalkError,
    Placement,
    allocate,
    copy_walk,
    dense_strides,
)
from nem.opcodes import groups
from nem.ops import (
    CstlInt8,
    NotSupported,
    OpError,
    cstl_int8,
    nmu_group_requant,
    nmu_requant,
    quant_params,
)
from nem.registry import Registry, load_registry
from nem.shapes import check_shapes
from nem.taskformat import (
    ATTR_WORDS,
    DDR_ADDRESS_BITS,
    ELEM_TYPES,
    GROUP_MINOR,
    LEVELS,
    MAX_COPY_COUNT,
    MAX_OPERANDS,
    MAX_RANK,
    MAX_TOKENS,
    NO_QUANT,
    NO_TABLE,
    OPCODES,
    REGISTER_MAPS,
    SLOTTED_ATTRS_MINOR,
    TABLE_MINOR,
    BufferEntry,
    GroupRequantEntry,
    Program,
    QuantEntry,
    RequantEntry,
    Task,
    TaskFormatError,
    Unit,
    attr_words,
    decode_eltwise,
    decode_group_requant,
    decode_quant,
    decode_requant,
    decode_table,
    encode_eltwise,
    encode_group_requant,
    encode_quant,
    encode_requant,
    encode_table,
    operand_register,
    read_attr_words,
)
from nem.tokens import TokenError, assign_tokens
from nem.tree import Num, Quant
from nem.units import COPY_UNITS, UNIT_CODES, UNIT_NAMES

__all__ = [
    "BindError",
    "bind",
    "compute_registers",
    "copy_registers",
    "device_hash",
    "plan_from_binary",
    "token_count",
]

_BINARY = Span("<binary>", 0, 0)


class BindError(ValueError):
    """The program cannot be bound (the message names the task and the reason)."""


def token_count(device: Device) -> int:
    """Physical tokens of the device's sequencer: ``SEQ.max_active_tokens``, at most 32."""
    return min(device.characteristic("SEQ", "max_active_tokens") or MAX_TOKENS, MAX_TOKENS)


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


def fold_run(run: int, dims: list[tuple[int, int, int]]) -> tuple[int, list]:
    """A contiguous run longer than :data:`nem.taskformat.MAX_COPY_COUNT` bytes as
    ``rows`` runs of ``c`` bytes (strides ``c`` on both sides, the same bytes in the same
    order): the largest such ``c``, when ``run`` has a divisor that makes both fit and a
    dimension is free. Otherwise ``(run, dims)`` unchanged."""
    if run <= MAX_COPY_COUNT or len(dims) >= 3:
        return run, dims
    for c in range(MAX_COPY_COUNT, 0, -1):
        if run % c == 0:
            if run // c > MAX_COPY_COUNT:
                break
            return c, [(run // c, c, c), *dims]
    return run, dims


def copy_registers(task: TaskInstance, placements: dict[str, Placement]) -> list[tuple[str, int]]:
    """Register writes of a copy unit for a transfer or store, as the executor performs it."""
    src, dst = task.ins[0], task.outs[0]
    try:
        run, dims = copy_walk(src, dst)
    except CopyWalkError as exc:
        raise BindError(f"{task.label}: {exc}") from None
    run, dims = fold_run(run, dims)
    if len(dims) > 3:
        raise BindError(
            f"{task.label}: the copy needs {len(dims) + 1} dimensions after merging "
            "contiguous ones; the copy units walk at most 4"
        )
    too_big = [c for c in (run, *(d[0] for d in dims)) if c > MAX_COPY_COUNT]
    if too_big:
        raise BindError(
            f"{task.label}: a copy dimension of {too_big[0]} (the copy units count at most "
            f"{MAX_COPY_COUNT} per dimension, and {run} bytes per run do not fold into "
            "rows); split the transfer"
        )
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


class DataSection:
    """The binary's data section as the binder fills it: identical entries are stored once."""

    def __init__(self) -> None:
        self.blob = bytearray()
        self._at: dict[bytes, int] = {}

    def add(self, raw: bytes) -> int:
        """Byte offset of ``raw`` (a multiple of 8 bytes long) in the section."""
        if raw not in self._at:
            self._at[raw] = len(self.blob)
            self.blob += raw
        return self._at[raw]


def _quant_entry(region: Region, consts: dict[str, int], label: str) -> QuantEntry:
    try:
        qp = quant_params(region, consts)
    except OpError as exc:
        raise BindError(f"{label}: {exc}") from None
    return QuantEntry(
        region.quant.kind,
        qp.axis or 0,
        qp.group_size or 0,
        tuple(float(v) for v in qp.scales),
        tuple(int(v) for v in qp.zero_points),
    )


def _requant_entry(
    task: TaskInstance, consts: dict[str, int]
) -> RequantEntry | GroupRequantEntry | None:
    """The NMU output stage of an integer gemm/matmul/conv2d (``None`` for other tasks): a
    group requantisation entry when the weight is i4 quantised per group along a reduction
    axis (``nem.ops.nmu_group_requant``), else a requantisation entry."""
    regions = [*task.ins, *task.outs]
    if task.opcode not in groups().nmu or any(r.elem in FLOAT_TYPES for r in regions[:2]):
        return None
    try:
        qps = [quant_params(r, consts) for r in regions]
        gw = nmu_group_requant(task.opcode, regions, qps)
        if gw is not None:
            g = gw.requant
            return GroupRequantEntry(
                gw.x_zero_point, g.zero_point, g.lo, g.hi, g.shift, gw.axis, gw.group_size,
                tuple(map(int, g.multipliers)), tuple(map(int, g.w_zero_points)),
            )
        zx, rq = nmu_requant(task.opcode, regions, qps)
    except (OpError, NotSupported) as exc:
        raise BindError(f"{task.label}: {exc}") from None
    if rq is None:
        return RequantEntry(zx, 0, -(1 << 31), (1 << 31) - 1, (), ())
    return RequantEntry(
        zx, rq.zero_point, rq.lo, rq.hi, tuple(map(int, rq.multiplier)), tuple(map(int, rq.shift))
    )


def _cstl_entries(task: TaskInstance, consts: dict[str, int]) -> CstlInt8 | None:
    """The lookup table and eltwise parameters of a task on the CSTL's int8 path (``None``
    for other tasks): the executor's own :func:`nem.ops.cstl_int8`."""
    regions = [*task.ins, *task.outs]
    if any(r.elem != "i8" for r in regions):
        return None
    try:
        return cstl_int8(task.opcode, regions, [quant_params(r, consts) for r in regions],
                         len(task.ins), task.attrs)
    except OpError as exc:
        raise BindError(f"{task.label}: {exc}") from None


def compute_registers(
    task: TaskInstance,
    placements: dict[str, Placement],
    data: DataSection,
    registry: Registry,
    consts: dict[str, int],
) -> list[tuple[str, int]]:
    """Register writes of a compute unit (NMU, CSTL, VPU) for ``task``.

    Quantisation descriptors are evaluated with ``consts`` and added to ``data``.

    Raises
    ------
    BindError
        When the opcode has no code, or an operand or attribute does not fit the registers.
    """
    label = task.label
    if task.opcode not in OPCODES:
        raise BindError(
            f"{label}: {task.opcode} has no code in the task format (no unit can run it)"
        )
    operands = (*task.ins, *task.outs)
    if len(operands) > MAX_OPERANDS:
        raise BindError(f"{label}: {len(operands)} operands, the units take {MAX_OPERANDS}")
    writes = [
        ("OPCODE", OPCODES.index(task.opcode)),
        ("NIN", len(task.ins)),
        ("NOUT", len(task.outs)),
    ]
    for k, region in enumerate(operands):
        if not region.typed or region.elem not in ELEM_TYPES:
            raise BindError(f"{label}: operand {region.label} has no element type and shape")
        if len(region.shape) > MAX_RANK:
            raise BindError(
                f"{label}: operand {region.label} has {len(region.shape)} dimensions, the "
                f"descriptors hold {MAX_RANK}"
            )
        address = placements[region.buffer].address + region.offset
        strides = region.strides or dense_strides(tuple(region.shape))
        quant = NO_QUANT
        if region.quant is not None:
            quant = data.add(encode_quant(_quant_entry(region, consts, label)))
        fields = [
            ("ADDR_LO", address & 0xFFFFFFFF),
            ("ADDR_HI", address >> 32),
            ("LEVEL", LEVELS.index(region.level)),
            ("BYTES", region.extent),
            ("ELEM", ELEM_TYPES.index(region.elem)),
            ("RANK", len(region.shape)),
        ]
        for d, (size, stride) in enumerate(zip(region.shape, strides, strict=True)):
            fields += [(f"DIM{d}", size), (f"STRIDE{d}", stride)]
        fields.append(("QUANT", quant))
        writes += [(operand_register(k, name), value) for name, value in fields]
    specs = [(a.name, a.type) for a in registry[task.opcode].attributes]
    try:
        words = attr_words(task.opcode, specs, task.attrs)
    except TaskFormatError as exc:
        raise BindError(f"{label}: {exc}") from None
    writes += [(f"ATTR{j}", w) for j, w in words]
    requant = _requant_entry(task, consts)
    if isinstance(requant, GroupRequantEntry):
        writes.append(("REQUANT", data.add(encode_group_requant(requant))))
    elif requant is not None:
        writes.append(("REQUANT", data.add(encode_requant(requant))))
    cstl = _cstl_entries(task, consts)
    if cstl is not None:
        if cstl.eltwise is not None:
            writes.append(("REQUANT", data.add(encode_eltwise(cstl.eltwise))))
        table = NO_TABLE if cstl.table is None else data.add(encode_table(cstl.table))
        writes.append(("TABLE", table))
    for name, value in writes:
        if not 0 <= value < 1 << 32:
            raise BindError(f"{label}: register {name} = {value} does not fit in 32 bits")
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
    for p in placements.values():
        if p.level == "DDR" and p.address + p.size > 1 << DDR_ADDRESS_BITS:
            raise BindError(
                f"buffer {p.name}: DDR bytes [{p.address}, {p.address + p.size}) lie past the "
                f"engine's {DDR_ADDRESS_BITS}-bit address space ({1 << DDR_ADDRESS_BITS} bytes)"
            )
    # _task_deps already keeps only the dependencies no other one implies
    count = token_count(device)
    try:
        wait, signal = assign_tokens(_task_deps(plan), count, [t.label for t in plan.tasks])
    except TokenError as exc:
        raise BindError(str(exc)) from None
    registry = load_registry()
    data = DataSection()
    tasks = []
    next_instance: dict[tuple[Unit, int], int] = {}
    for task in plan.tasks:
        if task.kind in ("transfer", "store"):
            name = copy_unit(task.ins[0].level, task.outs[0].level, device)
        else:
            name = unit_type(task, device, registry)
        unit = UNIT_CODES.get(name)
        count_units = device.units(name) if unit is not None else 0
        if not count_units:
            raise BindError(f"{task.label}: the device has no {name} unit to run {task.opcode}")
        engine = 0 if unit is Unit.SDMA else (task.engine or 0)
        if task.resource and task.resource[0] == name:
            instance = task.resource[1] % count_units
        else:
            # no @resource: spread over the instances in turn, so that independent tasks
            # can run at the same time (the binary fixes the instance, SEQ does not choose)
            instance = next_instance.get((unit, engine), 0)
            next_instance[(unit, engine)] = (instance + 1) % count_units
        regs = REGISTER_MAPS[unit]
        if unit in COPY_UNITS:
            named = copy_registers(task, placements)
        else:
            named = compute_registers(task, placements, data, registry, plan.consts)
        writes = tuple((regs.index(n), value) for n, value in named)
        tasks.append(Task(unit, instance, engine, wait[task.index], signal[task.index], writes))
    buffers = tuple(
        BufferEntry(p.name, p.level, p.engine, p.align, p.address, p.size)
        for p in placements.values()
    )
    return Program(device_hash(device), buffers, tuple(tasks), bytes(data.blob))


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
    try:
        placements, _ = allocate(buffers, device)
    except AllocationError as exc:
        raise TaskFormatError(f"the buffer table does not fit the device: {exc}") from None
    for b in program.buffers:
        p = placements[b.name]
        if p.address != b.address:
            raise TaskFormatError(
                f"buffer {b.name}: address {b.address}, but the device's allocator places it at "
                f"{p.address}"
            )
    registry = load_registry()
    order = Order()
    producer: dict[int, int] = {}
    tasks = []
    limit = token_count(device)
    for k, rec in enumerate(program.tasks):
        beyond = (rec.wait | rec.signal) >> limit
        if beyond:
            token = limit + (beyond & -beyond).bit_length() - 1
            raise TaskFormatError(
                f"task {k}: token {token} out of range (the device's sequencer has {limit})"
            )
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
        if rec.unit in COPY_UNITS:
            tasks.append(_copy_task(k, rec, node, program.buffers, device))
        else:
            tasks.append(_compute_task(k, rec, node, program, device, registry))
    return Plan(buffers, tasks, order, {})


def _registers(rec: Task) -> dict[str, int]:
    """The unit's registers after the task's writes, by name.

    The sequencer clears a unit's staging registers at every task header, so a register the
    task does not write reads as 0; a later write of a register wins.
    """
    regs = REGISTER_MAPS[rec.unit]
    values = dict.fromkeys((r.name for r in regs.registers), 0)
    values.update((regs.name(index), value) for index, value in rec.writes)
    return values


def _locate(k: int, what: str, level_code: int, address: int, extent: int, engine: int, table):
    """The buffer entry holding bytes [address, address + extent) of a level."""
    if level_code >= len(LEVELS):
        raise TaskFormatError(f"task {k}: {what} level {level_code} is not a level")
    level = LEVELS[level_code]
    for b in table:
        engine_ok = level != "L1" or (b.engine or 0) == engine
        if b.level == level and engine_ok and b.address <= address < b.address + b.size:
            if address + extent <= b.address + b.size:
                return b
            break
    raise TaskFormatError(
        f"task {k}: {what} bytes [{address}, {address + extent}) of {level} are not inside one "
        "buffer"
    )


def _unit_of(k: int, rec: Task, device: Device) -> tuple[str, int]:
    name = UNIT_NAMES[rec.unit]
    if rec.instance >= device.units(name):
        raise TaskFormatError(
            f"task {k}: {name} instance {rec.instance}; the device has {device.units(name)}"
        )
    return name, rec.instance


def _copy_task(k: int, rec: Task, node: int, table, device: Device) -> TaskInstance:
    values = _registers(rec)
    counts = [values[f"COUNT{d}"] for d in (3, 2, 1)]

    def side(prefix: str) -> Region:
        address = values[f"{prefix}_LO"] | values[f"{prefix}_HI"] << 32
        strides = [values[f"{prefix}_STRIDE{d}"] for d in (3, 2, 1)]
        extent = values["COUNT0"] + sum((c - 1) * s for c, s in zip(counts, strides, strict=True))
        b = _locate(k, prefix, values[f"{prefix}_LEVEL"], address, extent, rec.engine, table)
        return Region(
            None,
            b.name,
            b.level,
            b.engine,
            address - b.address,
            extent,
            "u8",
            (*counts, values["COUNT0"]),
            None,
            (*strides, 1),
        )

    if values["COUNT0"] == 0 or 0 in counts:
        raise TaskFormatError(f"task {k}: a copy count is 0")
    src, dst = side("SRC"), side("DST")
    moved = values["COUNT0"] * counts[0] * counts[1] * counts[2]
    if moved > dst.extent:
        raise TaskFormatError(
            f"task {k}: the copy moves {moved} bytes into a destination span of {dst.extent} "
            "(a destination stride of 0 or overlapping rows would write bytes twice)"
        )
    label = f"task {k} ({rec.unit.name}[{rec.instance}])"
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
        _unit_of(k, rec, device),
        engine,
        label,
        _BINARY,
    )


def _literal(value: int | float) -> Num:
    return Num(value, repr(value))


def _quant_tree(entry: QuantEntry) -> Quant:
    if entry.kind == "per_tensor":
        return Quant(
            "per_tensor", _literal(entry.scales[0]), _literal(entry.zero_points[0])
        )
    return Quant(
        entry.kind,
        axis=_literal(entry.axis),
        group_size=_literal(entry.group_size) if entry.kind == "per_group" else None,
        scales=tuple(_literal(v) for v in entry.scales),
        zero_points=tuple(_literal(v) for v in entry.zero_points),
    )


def _compute_task(
    k: int, rec: Task, node: int, program: Program, device: Device, registry: Registry
) -> TaskInstance:
    values = _registers(rec)
    read = values.__getitem__

    code = read("OPCODE")
    if code >= len(OPCODES):
        raise TaskFormatError(f"task {k}: OPCODE {code} unknown (0..{len(OPCODES) - 1})")
    opcode = OPCODES[code]
    nin, nout = read("NIN"), read("NOUT")
    if nin + nout > MAX_OPERANDS or nout == 0:
        raise TaskFormatError(f"task {k}: {nin} inputs and {nout} outputs")
    regions = []
    for j in range(nin + nout):

        def field(name: str, j=j) -> int:
            return read(operand_register(j, name))

        rank, elem = field("RANK"), field("ELEM")
        if rank > MAX_RANK or elem >= len(ELEM_TYPES):
            raise TaskFormatError(f"task {k}: operand {j}: rank {rank} / element code {elem}")
        address = field("ADDR_LO") | field("ADDR_HI") << 32
        extent = field("BYTES")
        what = f"operand {j}"
        shape = tuple(field(f"DIM{d}") for d in range(rank))
        strides = tuple(field(f"STRIDE{d}") for d in range(rank))
        last = sum((n - 1) * st for n, st in zip(shape, strides, strict=True))
        need = 0 if 0 in shape else -(-(last + 1) * BITS[ELEM_TYPES[elem]] // 8)
        if need > extent:
            raise TaskFormatError(
                f"task {k}: {what}: shape {list(shape)} with element strides {list(strides)} "
                f"reaches {need} bytes, OP{j}_BYTES is {extent}"
            )
        b = _locate(k, what, field("LEVEL"), address, extent, rec.engine, program.buffers)
        quant = None
        if field("QUANT") != NO_QUANT:
            try:
                quant = _quant_tree(decode_quant(program.data, field("QUANT")))
            except TaskFormatError as exc:
                raise TaskFormatError(f"task {k}: {what}: {exc}") from None
        regions.append(
            Region(
                None,
                b.name,
                b.level,
                b.engine,
                address - b.address,
                extent,
                ELEM_TYPES[elem],
                shape,
                None,
                strides,
                quant,
            )
        )
    op = registry[opcode]
    words = [values[f"ATTR{j}"] for j in range(ATTR_WORDS)]
    try:
        attrs = read_attr_words(opcode, [(a.name, a.type) for a in op.attributes], words,
                                packed=program.version < (1, SLOTTED_ATTRS_MINOR))
    except TaskFormatError as exc:
        raise TaskFormatError(f"task {k}: {opcode}: {exc}") from None
    # the operand counts and shapes the checker enforces on NEM text
    pairs = []
    for specs, given, variadic, side in (
        (op.inputs, regions[:nin], op.variadic_inputs, "inputs"),
        (op.outputs, regions[nin:], op.variadic_outputs, "outputs"),
    ):
        required = sum(1 for s in specs if s.required)
        if len(given) < required or (len(given) > len(specs) and not variadic):
            raise TaskFormatError(
                f"task {k}: {opcode} takes {required} to {len(specs)} {side}, {len(given)} given"
            )
        pairs += [(specs[min(j, len(specs) - 1)], r) for j, r in enumerate(given)]
    messages = check_shapes(op, pairs, attrs)
    if messages:
        raise TaskFormatError(f"task {k}: {opcode}: {messages[0]}")
    label = f"task {k} ({opcode} on {rec.unit.name}[{rec.instance}])"
    task = TaskInstance(
        k,
        node,
        "compute",
        opcode,
        "async",
        tuple(regions[:nin]),
        tuple(regions[nin:]),
        attrs,
        frozenset(),
        _unit_of(k, rec, device),
        rec.engine,
        label,
        _BINARY,
    )
    try:
        want = _requant_entry(task, {})
    except BindError as exc:
        raise TaskFormatError(f"task {k}: {exc}") from None
    if isinstance(want, GroupRequantEntry) and program.version < (1, GROUP_MINOR):
        raise TaskFormatError(
            f"task {k}: {opcode}: an i4 weight quantised per group along a reduction axis "
            f"needs a group requantisation entry (task binary 1.{GROUP_MINOR}); this binary "
            f"is {program.version[0]}.{program.version[1]}"
        )
    if want is not None:
        decode_entry = (decode_group_requant if isinstance(want, GroupRequantEntry)
                        else decode_requant)
        try:
            got = decode_entry(program.data, read("REQUANT"))
        except TaskFormatError as exc:
            raise TaskFormatError(f"task {k}: REQUANT: {exc}") from None
        if got != want:
            raise TaskFormatError(
                f"task {k}: the REQUANT entry {got} is not what the operands' quantisation "
                f"descriptors give ({want})"
            )
    if program.version >= (1, TABLE_MINOR):
        _check_cstl_entries(k, task, program, read)
    return task


def _check_cstl_entries(k: int, task: TaskInstance, program: Program, read) -> None:
    """The TABLE and eltwise REQUANT entry of a binary of 1.3 or later are what the executor
    computes."""
    try:
        want = _cstl_entries(task, {})
    except BindError as exc:
        raise TaskFormatError(f"task {k}: {exc}") from None
    if want is None:
        return
    try:
        got = decode_eltwise(program.data, read("REQUANT")) if want.eltwise else None
    except TaskFormatError as exc:
        raise TaskFormatError(f"task {k}: REQUANT: {exc}") from None
    if got != want.eltwise:
        raise TaskFormatError(
            f"task {k}: the REQUANT eltwise entry {got} is not what the operands' "
            f"quantisation descriptors give ({want.eltwise})"
        )
    at = read("TABLE")
    if want.table is None:
        if at != NO_TABLE:
            raise TaskFormatError(
                f"task {k}: TABLE = {at:#x}, but the task needs no lookup table (NO_TABLE)"
            )
        return
    if at == NO_TABLE:
        raise TaskFormatError(f"task {k}: TABLE is NO_TABLE, but the task needs a lookup table")
    try:
        codes = decode_table(program.data, at)
    except TaskFormatError as exc:
        raise TaskFormatError(f"task {k}: TABLE: {exc}") from None
    wrong = [b for b in range(256) if codes[b] != int(want.table[b])]
    if wrong:
        b = wrong[0]
        raise TaskFormatError(
            f"task {k}: TABLE at data offset {at}: entry {b} is {codes[b]}, the executor's "
            f"formula gives {int(want.table[b])} ({len(wrong)} entries differ)"
        )
