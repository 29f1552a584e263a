"""The NEM task binary: the one definition of the container the binder writes and the
sequencer (golden model and RTL) reads.

All integers are little-endian. A binary is::

    program header   (HEADER, 68 bytes)
    buffer table     (buffer_count x BUFFER_ENTRY, 56 bytes each)
    task stream      (task_count task records)

A task record follows the shape of the NeuPro-M task control buffer
(``../shared/specs/nem-notes.md``): a 12-byte header naming the target unit, the number of
register writes, the set of tokens the task waits for and the set it signals on
completion, then ``nwrites`` pairs of (register index u8, value u32) written into the
unit's shadow registers before the unit starts.

This module defines the container and the register maps of the copy units. Each unit's
map is a :class:`RegisterMap`; the binder, the disassembler, the executor's binary
front-end and the Amaranth units import it, so no register index is typed twice.

Decoding checks everything it reads and raises :class:`TaskFormatError` naming the byte
offset and the field, never an exception from ``struct`` or an index error.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "BUFFER_ENTRY",
    "HEADER",
    "LEVELS",
    "MAGIC",
    "MAX_TOKENS",
    "NO_ENGINE",
    "REGISTER_MAPS",
    "TASK_HEADER",
    "VERSION",
    "WRITE",
    "BufferEntry",
    "Program",
    "Register",
    "RegisterMap",
    "Task",
    "TaskFormatError",
    "Unit",
    "decode",
    "encode",
]

MAGIC = b"NEMB"
#: (major, minor): a reader accepts its own major version and any minor version up to its own.
VERSION = (1, 0)

#: magic, major, minor, header bytes, device sha256, task count, buffer count,
#: buffer table offset, task stream offset, task stream bytes, reserved
HEADER = struct.Struct("<4sHHI32sIIIIII")
#: name (UTF-8, NUL padded), level, engine, reserved, align, address, size
BUFFER_ENTRY = struct.Struct("<32sBBHIQQ")
#: unit, instance, engine, nwrites, wait mask, signal mask
TASK_HEADER = struct.Struct("<BBBBII")
#: register index, value
WRITE = struct.Struct("<BI")

LEVELS = ("DDR", "L2", "L1")
NO_ENGINE = 0xFF
#: Token masks are 32 bits wide: at most 32 physical tokens.
MAX_TOKENS = 32


class TaskFormatError(ValueError):
    """A task binary (or a program to encode) breaks the format; the message says where."""


class Unit(IntEnum):
    """Unit types a task can target."""

    DMA = 0  # L2 <-> L1
    SDMA = 1  # DDR <-> L2
    NMU = 2
    CSTL = 3
    VPU = 4


@dataclass(frozen=True)
class Register:
    """One 32-bit shadow register of a unit."""

    name: str
    index: int
    doc: str


class RegisterMap:
    """The shadow registers of one unit type, by name and by index."""

    def __init__(self, unit: Unit, registers: list[tuple[str, str]]):
        self.unit = unit
        self.registers = tuple(Register(n, k, d) for k, (n, d) in enumerate(registers))
        self._by_name = {r.name: r for r in self.registers}
        if len(self._by_name) != len(self.registers):
            raise ValueError(f"{unit.name}: register names repeat")

    def __len__(self) -> int:
        return len(self.registers)

    def index(self, name: str) -> int:
        """Index of the register ``name``."""
        try:
            return self._by_name[name].index
        except KeyError:
            raise TaskFormatError(f"{self.unit.name} has no register {name!r}") from None

    def name(self, index: int) -> str:
        """Name of register ``index``."""
        if not 0 <= index < len(self.registers):
            raise TaskFormatError(
                f"{self.unit.name} has registers 0..{len(self.registers) - 1}, not {index}"
            )
        return self.registers[index].name


def _copy_registers() -> list[tuple[str, str]]:
    regs = [
        ("SRC_LO", "source byte address, bits 31..0"),
        ("SRC_HI", "source byte address, bits 63..32"),
        ("DST_LO", "destination byte address, bits 31..0"),
        ("DST_HI", "destination byte address, bits 63..32"),
        ("COUNT0", "bytes per innermost run (contiguous on both sides)"),
    ]
    for d in (1, 2, 3):
        regs.append((f"COUNT{d}", f"repetitions along dimension {d} (1: unused)"))
        regs.append((f"SRC_STRIDE{d}", f"source byte stride of dimension {d}"))
        regs.append((f"DST_STRIDE{d}", f"destination byte stride of dimension {d}"))
    regs.append(("SRC_LEVEL", "memory of the source: 0 DDR, 1 L2, 2 L1 (of the task's engine)"))
    regs.append(("DST_LEVEL", "memory of the destination, coded like SRC_LEVEL"))
    return regs


#: Register maps by unit type. The copy units move a strided region of up to 4 dimensions:
#: ``for i3, i2, i1: copy COUNT0 bytes from SRC + sum(ik * SRC_STRIDEk) to
#: DST + sum(ik * DST_STRIDEk)``.
REGISTER_MAPS: dict[Unit, RegisterMap] = {
    Unit.DMA: RegisterMap(Unit.DMA, _copy_registers()),
    Unit.SDMA: RegisterMap(Unit.SDMA, _copy_registers()),
}


@dataclass(frozen=True)
class BufferEntry:
    """Where one NEM buffer lives."""

    name: str
    level: str  # one of LEVELS
    engine: int | None  # L1 only
    align: int
    address: int
    size: int


@dataclass(frozen=True)
class Task:
    """One task record: target unit, tokens, and register writes in order."""

    unit: Unit
    instance: int
    engine: int
    wait: int  # token mask
    signal: int  # token mask
    writes: tuple[tuple[int, int], ...]  # (register index, value)


@dataclass(frozen=True)
class Program:
    """A decoded task binary."""

    device_hash: bytes  # sha256 of the resolved device
    buffers: tuple[BufferEntry, ...]
    tasks: tuple[Task, ...]
    version: tuple[int, int] = VERSION


def _check_task(k: int, task: Task) -> None:
    where = f"task {k}"
    if not isinstance(task.unit, Unit):
        raise TaskFormatError(f"{where}: unit {task.unit!r} is not a Unit")
    for field, value, bits in (
        ("instance", task.instance, 8),
        ("engine", task.engine, 8),
        ("wait", task.wait, MAX_TOKENS),
        ("signal", task.signal, MAX_TOKENS),
    ):
        if not 0 <= value < 1 << bits:
            raise TaskFormatError(f"{where}: {field} {value} does not fit in {bits} bits")
    if len(task.writes) > 255:
        raise TaskFormatError(f"{where}: {len(task.writes)} register writes (at most 255)")
    regs = REGISTER_MAPS.get(task.unit)
    for index, value in task.writes:
        if regs is not None:
            regs.name(index)  # raises when out of range
        if not 0 <= value < 1 << 32:
            raise TaskFormatError(f"{where}: register {index} value {value} is not a u32")


def encode(program: Program) -> bytes:
    """The binary of ``program``.

    Raises
    ------
    TaskFormatError
        When a field does not fit its encoding (the message names the task or buffer).
    """
    if len(program.device_hash) != 32:
        raise TaskFormatError(f"device hash has {len(program.device_hash)} bytes, not 32")
    table = bytearray()
    for buf in program.buffers:
        name = buf.name.encode("utf-8")
        if not 0 < len(name) < 32:
            raise TaskFormatError(f"buffer {buf.name!r}: the name needs 1 to 31 UTF-8 bytes")
        if buf.level not in LEVELS:
            raise TaskFormatError(f"buffer {buf.name!r}: level {buf.level!r} not in {LEVELS}")
        engine = NO_ENGINE if buf.engine is None else buf.engine
        if not 0 <= engine <= NO_ENGINE or (buf.engine is not None and engine == NO_ENGINE):
            raise TaskFormatError(f"buffer {buf.name!r}: engine {buf.engine} out of range")
        for field, value, bits in (
            ("align", buf.align, 32),
            ("address", buf.address, 64),
            ("size", buf.size, 64),
        ):
            if not 0 <= value < 1 << bits:
                raise TaskFormatError(f"buffer {buf.name!r}: {field} {value} is out of range")
        table += BUFFER_ENTRY.pack(
            name, LEVELS.index(buf.level), engine, 0, buf.align, buf.address, buf.size
        )
    stream = bytearray()
    for k, task in enumerate(program.tasks):
        _check_task(k, task)
        stream += TASK_HEADER.pack(
            task.unit, task.instance, task.engine, len(task.writes), task.wait, task.signal
        )
        for index, value in task.writes:
            stream += WRITE.pack(index, value)
    table_at = HEADER.size
    tasks_at = table_at + len(table)
    header = HEADER.pack(
        MAGIC,
        *program.version,
        HEADER.size,
        program.device_hash,
        len(program.tasks),
        len(program.buffers),
        table_at,
        tasks_at,
        len(stream),
        0,
    )
    return header + bytes(table) + bytes(stream)


def _unpack(fmt: struct.Struct, data: bytes, at: int, what: str) -> tuple:
    if at + fmt.size > len(data):
        raise TaskFormatError(
            f"offset {at}: {what} needs {fmt.size} bytes, the binary ends after "
            f"{max(len(data) - at, 0)} (truncated)"
        )
    return fmt.unpack_from(data, at)


def decode(data: bytes, *, device_hash: bytes | None = None) -> Program:
    """Read a task binary.

    Parameters
    ----------
    data : bytes
        The whole binary.
    device_hash : bytes, optional
        When given, the binary must have been bound for this device.

    Raises
    ------
    TaskFormatError
        On a wrong magic, version or device hash, a truncated binary, a register index
        outside the unit's map, an unknown unit or level, or bytes after the task stream.
    """
    data = bytes(data)
    (magic, major, minor, hsize, dev, ntasks, nbufs, table_at, tasks_at, nstream, _) = _unpack(
        HEADER, data, 0, "the program header"
    )
    if magic != MAGIC:
        raise TaskFormatError(f"offset 0: magic {magic!r}, expected {MAGIC!r} (not a task binary)")
    if major != VERSION[0] or minor > VERSION[1]:
        raise TaskFormatError(
            f"offset 4: format version {major}.{minor}; this reader handles "
            f"{VERSION[0]}.0 to {VERSION[0]}.{VERSION[1]}"
        )
    if hsize != HEADER.size or table_at != HEADER.size:
        raise TaskFormatError(
            f"offset 8: header size {hsize} / buffer table offset {table_at}, expected "
            f"{HEADER.size}"
        )
    if device_hash is not None and dev != device_hash:
        raise TaskFormatError(
            f"offset 12: bound for device {dev.hex()[:16]}..., this device is "
            f"{device_hash.hex()[:16]}..."
        )
    if tasks_at != table_at + nbufs * BUFFER_ENTRY.size:
        raise TaskFormatError(
            f"offset 56: task stream offset {tasks_at}, but {nbufs} buffer entries end at "
            f"{table_at + nbufs * BUFFER_ENTRY.size}"
        )
    if tasks_at + nstream != len(data):
        raise TaskFormatError(
            f"offset 60: header says the task stream has {nstream} bytes from offset "
            f"{tasks_at}, the binary has {len(data) - tasks_at}"
            + (" (truncated)" if tasks_at + nstream > len(data) else " (trailing bytes)")
        )
    buffers = []
    for k in range(nbufs):
        at = table_at + k * BUFFER_ENTRY.size
        raw, level, engine, _, align, address, size = _unpack(
            BUFFER_ENTRY, data, at, f"buffer entry {k}"
        )
        name = raw.rstrip(b"\0")
        try:
            text = name.decode("utf-8")
        except UnicodeDecodeError:
            text = ""
        if not text or b"\0" in name:
            raise TaskFormatError(f"offset {at}: buffer entry {k}: name {raw!r} is not valid")
        if level >= len(LEVELS):
            raise TaskFormatError(f"offset {at + 32}: buffer {text!r}: level {level} unknown")
        buffers.append(
            BufferEntry(
                text, LEVELS[level], None if engine == NO_ENGINE else engine, align, address, size
            )
        )
    tasks = []
    at = tasks_at
    for k in range(ntasks):
        unit, instance, engine, nwrites, wait, signal = _unpack(
            TASK_HEADER, data, at, f"task {k} header"
        )
        try:
            unit = Unit(unit)
        except ValueError:
            raise TaskFormatError(f"offset {at}: task {k}: unit type {unit} unknown") from None
        regs = REGISTER_MAPS.get(unit)
        at += TASK_HEADER.size
        writes = []
        for _ in range(nwrites):
            index, value = _unpack(WRITE, data, at, f"task {k} register write")
            if regs is not None and index >= len(regs):
                raise TaskFormatError(
                    f"offset {at}: task {k}: {unit.name} register index {index} out of range "
                    f"(0..{len(regs) - 1})"
                )
            writes.append((index, value))
            at += WRITE.size
        tasks.append(Task(unit, instance, engine, wait, signal, tuple(writes)))
    if at != len(data):
        raise TaskFormatError(f"offset {at}: {len(data) - at} bytes after the last task")
    return Program(dev, tuple(buffers), tuple(tasks), (major, minor))
