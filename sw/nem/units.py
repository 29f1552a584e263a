"""The NEM execution unit types, in one table: NEM name, scope, role and task-binary code.

Every other list of unit types derives from :data:`TABLE`: the unit types a device may
declare per engine and per device (``nem.device``), the valid and invalid ``@resource``
targets (``nem.checker``), the units the executor schedules on, the task binary's
:class:`Unit` codes and which register map each unit reads (``nem.taskformat``), and the
binder's name <-> code mapping.

The rows follow ``nem.md`` ("Execution Units"): the per-engine units ``NMU``, ``CSTL``,
``DMA``, ``VPU``, ``SEQ``, then the device-level units ``sDMA`` and ``WDM``. ``code`` is the
unit's number in the task header of the binary (``None``: no task runs on it): append only,
a code never changes meaning.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "COMPUTE_UNITS",
    "COPY_UNITS",
    "DEVICE_UNITS",
    "PER_ENGINE_UNITS",
    "RESOURCE_INVALID",
    "RESOURCE_TARGETS",
    "ROLES",
    "TABLE",
    "UNIT_CODES",
    "UNIT_NAMES",
    "Unit",
    "UnitType",
    "unit_type",
]

#: What a unit does with a task: ``copy`` moves a strided region (copy register map),
#: ``compute`` runs an opcode (compute register map), ``control`` dispatches tasks (SEQ),
#: ``datapath`` modifies another unit's transfers (WDM). Only copy and compute units run tasks.
ROLES = ("copy", "compute", "control", "datapath")


@dataclass(frozen=True)
class UnitType:
    """One unit type.

    Attributes
    ----------
    name : str
        The NEM spelling, as device files, ``@resource`` and the registry's
        ``execution_unit`` write it (``sDMA``).
    scope : str
        ``engine`` (instances in every engine, ``per_engine``) or ``device`` (shared,
        ``device_units``).
    role : str
        One of :data:`ROLES`.
    code : int or None
        Its code in the task binary's task header; ``None`` for units no task runs on.
    """

    name: str
    scope: str
    role: str
    code: int | None

    @property
    def runs_tasks(self) -> bool:
        """A task can run on this unit (a copy or a compute unit)."""
        return self.role in ("copy", "compute")

    @property
    def resource_target(self) -> bool:
        """``@resource`` may name it: a per-engine unit that runs tasks."""
        return self.scope == "engine" and self.runs_tasks


#: Every unit type, in the order of ``nem.md``.
TABLE: tuple[UnitType, ...] = (
    UnitType("NMU", "engine", "compute", 2),
    UnitType("CSTL", "engine", "compute", 3),
    UnitType("DMA", "engine", "copy", 0),  # L2 <-> L1
    UnitType("VPU", "engine", "compute", 4),
    UnitType("SEQ", "engine", "control", None),
    UnitType("sDMA", "device", "copy", 1),  # DDR <-> L2
    UnitType("WDM", "device", "datapath", None),
)


def _check(table: tuple[UnitType, ...]) -> None:
    codes = [u.code for u in table if u.code is not None]
    if sorted(codes) != list(range(len(codes))):
        raise ValueError(f"unit codes {codes} are not 0..{len(codes) - 1}")
    if len({u.name for u in table}) != len(table):
        raise ValueError("unit names repeat")
    for u in table:
        if u.scope not in ("engine", "device") or u.role not in ROLES:
            raise ValueError(f"unit {u.name}: scope {u.scope!r} / role {u.role!r}")
        if (u.code is not None) != u.runs_tasks:
            raise ValueError(f"unit {u.name}: a code exactly when tasks run on it")


_check(TABLE)
_BY_NAME = {u.name: u for u in TABLE}

#: The task binary's unit codes; a member's name is the NEM name in capitals (``SDMA``).
Unit = IntEnum(
    "Unit",
    [(u.name.upper(), u.code) for u in sorted(TABLE, key=lambda u: u.code or 0) if u.runs_tasks],
    module=__name__,
)
Unit.__doc__ = "Unit types a task can target, by task-binary code (``nem.units.TABLE``)."

#: Unit types a device declares in ``per_engine``.
PER_ENGINE_UNITS: tuple[str, ...] = tuple(u.name for u in TABLE if u.scope == "engine")
#: Unit types a device declares in ``device_units``.
DEVICE_UNITS: tuple[str, ...] = tuple(u.name for u in TABLE if u.scope == "device")
#: Valid ``@resource`` unit types (the per-engine units that run tasks).
RESOURCE_TARGETS: tuple[str, ...] = tuple(u.name for u in TABLE if u.resource_target)
#: Unit types ``@resource`` must not name.
RESOURCE_INVALID: tuple[str, ...] = tuple(u.name for u in TABLE if not u.resource_target)
#: NEM name -> task-binary code, for every unit that runs tasks.
UNIT_CODES: dict[str, Unit] = {u.name: Unit(u.code) for u in TABLE if u.runs_tasks}
#: Task-binary code -> NEM name.
UNIT_NAMES: dict[Unit, str] = {code: name for name, code in UNIT_CODES.items()}
#: Units that copy regions (the copy register map).
COPY_UNITS: tuple[Unit, ...] = tuple(sorted(Unit(u.code) for u in TABLE if u.role == "copy"))
#: Units that run opcodes (the compute register map).
COMPUTE_UNITS: tuple[Unit, ...] = tuple(sorted(Unit(u.code) for u in TABLE if u.role == "compute"))


def unit_type(name: str) -> UnitType:
    """The unit type called ``name`` (NEM spelling).

    Raises
    ------
    KeyError
        For a name that is no unit type (the message lists the known ones).
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        known = ", ".join(u.name for u in TABLE)
        raise KeyError(f"unknown unit type {name!r} (known: {known})") from None
