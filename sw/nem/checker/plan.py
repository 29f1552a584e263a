"""What the checker hands on: evaluated regions and buffers, unrolled task instances, the
elaborated :class:`Plan` and the :class:`CheckResult`."""

from __future__ import annotations

from dataclasses import dataclass, field

from nem.device import Device
from nem.diagnostics import Diagnostic, Span
from nem.hazards import Order
from nem.loader import Workspace
from nem.tree import Quant


@dataclass(frozen=True)
class Region:
    """A region with every expression evaluated."""

    name: str | None
    buffer: str
    level: str
    engine: int | None
    offset: int
    extent: int
    elem: str | None = None
    shape: tuple[int, ...] | None = None
    layout: str | None = None
    strides: tuple[int, ...] | None = None
    quant: Quant | None = None
    decos: frozenset[str] = frozenset()
    span: Span = field(default=Span("?", 0, 0), compare=False)

    @property
    def typed(self) -> bool:
        """Has elem, shape and layout/strides (required for compute operands)."""
        return self.elem is not None and self.shape is not None

    @property
    def label(self) -> str:
        return self.name or f"region({self.buffer}, {self.offset}, {self.extent})"


@dataclass
class BufferInfo:
    """A declared buffer with its expressions evaluated."""

    name: str
    level: str
    engine: int | None
    size: int | None
    decos: frozenset[str]
    span: Span
    align: int | None = None


@dataclass(frozen=True)
class TaskInstance:
    """One task of the program with loops unrolled: what the executor and binder run.

    ``index`` is the program (issue) order, ``node`` the task's node in the happens-before
    :class:`~nem.hazards.Order`. ``resource`` is the ``@resource`` binding after the Target
    Resource Validity Rule (``(unit, index)``), ``engine`` the engine from L1 placement or
    ``@seq_engine`` (``None``: engine-agnostic). ``attrs`` holds every registry attribute,
    evaluated, defaults included.
    """

    index: int
    node: int
    kind: str
    opcode: str
    form: str
    ins: tuple[Region, ...]
    outs: tuple[Region, ...]
    attrs: dict
    decos: frozenset[str]
    resource: tuple[str, int] | None
    engine: int | None
    label: str
    span: Span


@dataclass
class Plan:
    """The elaborated program: buffers in declaration order, task instances in issue order,
    and the happens-before order over them (see :mod:`nem.hazards`)."""

    buffers: dict[str, BufferInfo]
    tasks: list[TaskInstance]
    order: Order
    consts: dict[str, int]


@dataclass
class CheckResult:
    """What :func:`check_file` found and resolved."""

    diagnostics: list[Diagnostic]
    device: Device | None
    workspace: Workspace
    task_count: int = 0
    plan: Plan | None = None

    @property
    def ok(self) -> bool:
        """No errors (warnings allowed)."""
        return not any(d.severity == "error" for d in self.diagnostics)
