"""The NEM static checker: every rule of ``nem.md`` that can be decided before execution.

:func:`check_file` / :func:`check_text` load a document (with includes and its device), then
walk the program with loops unrolled -- loop bounds are constants -- so that offsets, extents
and shapes are checked with the values each iteration really has. One diagnostic is kept per
(code, source position), so a mistake inside a loop is reported once, with the values of the
first iteration that shows it.

The walk also builds what later stages need: the evaluated regions of every task instance
and a happens-before graph (:mod:`nem.hazards`) for the race check.
"""

from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass, field

from nem.consteval import EvalError, evaluate
from nem.device import Device
from nem.diagnostics import Diagnostic, Span
from nem.elemtypes import BITS, ELEM_TYPES, INT_TYPES
from nem.families import OperandFacts
from nem.hazards import Access, Order, find_races, peak_live_tokens
from nem.loader import Workspace, load, load_device_file, load_text
from nem.registry import Opcode, Registry, load_registry
from nem.tree import (
    Buffer,
    Compute,
    Const,
    Decorator,
    DeviceConfig,
    DeviceRef,
    ListValue,
    Loop,
    Name,
    Num,
    Operand,
    Quant,
    RegionDecl,
    RegionExpr,
    Str,
    Transfer,
    Wait,
)
from nem.units import RESOURCE_INVALID, RESOURCE_TARGETS

__all__ = [
    "BufferInfo",
    "CheckResult",
    "Plan",
    "Region",
    "TaskInstance",
    "check_file",
    "check_text",
    "check_workspace",
]


# Decorator name -> the objects it may be attached to.
DECORATORS: dict[str, frozenset[str]] = {
    "materialized": frozenset({"region"}),
    "readonly": frozenset({"region", "buffer"}),
    "writeonly": frozenset({"region", "buffer"}),
    "memmove": frozenset({"transfer"}),
    "max_in_flight": frozenset({"loop"}),
    "resource": frozenset({"transfer", "compute"}),
    "deterministic": frozenset({"transfer", "compute", "loop"}),
    "seq_engine": frozenset({"transfer", "compute"}),
    "debug": frozenset({"region", "buffer", "transfer", "compute", "wait", "loop"}),
    "profile": frozenset({"region", "buffer", "transfer", "compute", "wait", "loop"}),
}
_NO_ARGS = ("materialized", "readonly", "writeonly", "memmove", "deterministic")
#: Toolkit limit (E904, docs/nem-toolkit.md "Limits"): task instances, and loop iterations,
#: one document may unroll to. The happens-before order grows with the square of the
#: instances (measured: 50,000 -> 1.7 GB, 100,000 -> 6.2 GB peak); 32,768 stays under 1 GB.
MAX_TASK_INSTANCES = 32_768


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


@dataclass
class _Scope:
    names: dict[str, tuple[str, object, Span]]  # name -> (kind, value, span)
    parent: _Scope | None = None
    # the integer names (loop variables and integer lets) of this scope, kept apart so that
    # expression evaluation does not walk every region and token name
    ints: dict[str, int] = field(default_factory=dict)
    loopvars: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, (kind, value, _) in self.names.items():
            if kind in ("loopvar", "let_int"):
                self.ints[name] = value
            if kind == "loopvar":
                self.loopvars[name] = value

    def get(self, name: str):
        scope = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None


@dataclass
class _Thread:
    barrier: int


class _Checker:
    def __init__(self, ws: Workspace, device: Device | None, registry: Registry):
        self.ws = ws
        self.sink = ws.sink
        self.device = device
        self.registry = registry
        self.consts: dict[str, int] = {}
        self.const_later: set[str] = set()
        self.buffers: dict[str, BufferInfo] = {}
        self.order = Order()
        self.accesses: list[Access] = []
        self.reported: set[tuple[str, Span]] = set()
        self.tasks = 0
        self.iterations = 0
        self.unroll_capped = False
        self.failed_consts: set[str] = set()  # reported once, where they failed
        self.instances: list[TaskInstance] = []
        self._family_verdicts: dict[tuple, list[tuple[str, str]]] = {}
        self.file = ws.doc.file

    # --- reporting -------------------------------------------------------------------------

    def err(self, code: str, message: str, span: Span, *notes: str) -> None:
        key = (code, span)
        if key in self.reported:
            return
        self.reported.add(key)
        self.sink.add(code, message, span, *notes)

    # --- expressions -----------------------------------------------------------------------

    def env(self, scope: _Scope) -> dict[str, int]:
        env = dict(self.consts)
        chain = []
        s = scope
        while s is not None:
            chain.append(s)
            s = s.parent
        for s in reversed(chain):
            env.update(s.ints)
        return env

    def int_of(self, expr, scope: _Scope, what: str, *, floats: bool = False):
        try:
            value = evaluate(expr, self.env(scope), floats=floats)
        except EvalError as exc:
            code = exc.code
            message = f"{what}: {exc.message}"
            if code == "E307" and exc.name in self.failed_consts:
                return None  # its declaration's error was reported
            if code == "E307":
                entry = scope.get(exc.name)
                if entry is not None:
                    code = "E507"
                    message = f"{what}: {exc.name!r} is a {entry[0]}, not an integer constant"
                elif exc.name in self.const_later:
                    message = f"{what}: const {exc.name!r} is used before its declaration"
                else:
                    near = self._near(exc.name, list(self.env(scope)))
                    message += f"; did you mean {near!r}?" if near else ""
            self.err(code, message, exc.span)
            return None
        return value

    @staticmethod
    def _near(name: str, names) -> str | None:
        best = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
        return best[0] if best else None

    # --- names -----------------------------------------------------------------------------

    def define(self, scope: _Scope, name: str, kind: str, value, span: Span) -> bool:
        prev = scope.get(name) if kind != "const" else None
        if prev is None and name in self.consts:
            prev = ("const", None, None)
        if prev is None and scope.parent is None and name in self.buffers:
            prev = ("buffer", None, self.buffers[name].span)
        if prev is not None:
            if kind == "const" and prev[0] == "const":
                self.err("E501", f"const {name!r} is declared twice", span)
            elif "const" in (kind, prev[0]):
                self.err(
                    "E505", f"{kind} {name!r} clashes with the {prev[0]} of the same name", span
                )
            else:
                where = f" (first at line {prev[2].line})" if prev[2] else ""
                self.err("E306", f"{kind} {name!r} is already defined as a {prev[0]}{where}", span)
            return False
        scope.names[name] = (kind, value, span)
        if kind in ("loopvar", "let_int"):
            scope.ints[name] = value
        return True

    # --- decorators ------------------------------------------------------------------------

    def decorators(self, decos, target: str, scope: _Scope) -> dict[str, Decorator]:
        out: dict[str, Decorator] = {}
        for d in decos:
            if d.name not in DECORATORS:
                near = self._near(d.name, DECORATORS)
                self.err(
                    "E801",
                    f"unknown decorator @{d.name}" + (f"; did you mean @{near}?" if near else ""),
                    d.span,
                )
                continue
            if target not in DECORATORS[d.name]:
                allowed = ", ".join(sorted(DECORATORS[d.name]))
                self.err(
                    "E802",
                    f"@{d.name} does not apply to a {target} (it applies to: {allowed})",
                    d.span,
                )
                continue
            if d.name in out:
                self.err("E803", f"@{d.name} given twice", d.span)
                continue
            if d.name == "resource":
                if d.unit is None:
                    self.err("E803", "@resource takes UNIT[index], e.g. @resource(CSTL[1])", d.span)
                    continue
            elif d.unit is not None:
                self.err("E803", f"@{d.name} does not take UNIT[index]", d.span)
                continue
            elif d.name in _NO_ARGS and d.args:
                self.err("E803", f"@{d.name} takes no arguments", d.span)
                continue
            elif d.name in ("max_in_flight", "seq_engine"):
                if len(d.args) != 1 or isinstance(d.args[0], (Str, ListValue, RegionExpr)):
                    self.err("E803", f"@{d.name} takes one integer", d.span)
                    continue
                value = self.int_of(d.args[0], scope, f"@{d.name}")
                if value is None:
                    continue
                floor = 1 if d.name == "max_in_flight" else 0
                if value < floor:
                    self.err("E803", f"@{d.name}({value}): must be >= {floor}", d.span)
                    continue
            elif d.name in ("debug", "profile") and len(d.args) != 1:
                self.err("E803", f"@{d.name} takes one argument (a name or a string)", d.span)
                continue
            out[d.name] = d
        if "readonly" in out and "writeonly" in out:
            self.err("E809", "@readonly and @writeonly together", out["writeonly"].span)
        return out

    # --- program ---------------------------------------------------------------------------

    def run(self) -> None:
        body = self.ws.doc.body
        for stmt in body:
            if isinstance(stmt, Const):
                self.const_later.add(stmt.name)
        top = _Scope({})
        thread = _Thread(self.order.node([]))
        self.block(body, top, thread, in_loop=False)
        self.capacity()
        self.races()
        self.tokens()

    def block(self, stmts, scope: _Scope, thread: _Thread, in_loop: bool) -> list[int]:
        nodes: list[int] = []
        for stmt in stmts:
            if isinstance(stmt, Const):
                self.const(stmt, scope, in_loop)
            elif isinstance(stmt, Buffer):
                self.buffer(stmt, scope)
            elif isinstance(stmt, RegionDecl):
                self.region_decl(stmt, scope)
            elif isinstance(stmt, Loop):
                nodes.extend(self.loop(stmt, scope, thread))
            elif isinstance(stmt, Wait):
                self.decorators(stmt.decos, "wait", scope)
                preds = [thread.barrier]
                if stmt.token is not None:
                    self.err("E713", "wait produces no token; it cannot be assigned", stmt.span)
                for tok in stmt.tokens:
                    node = self.token(scope, tok, stmt.span)
                    if node is not None:
                        preds.append(node)
                thread.barrier = self.order.node(preds)
            else:
                node = self.task(stmt, scope, thread)
                if node is not None:
                    nodes.append(node)
        return nodes

    def const(self, stmt: Const, scope: _Scope, in_loop: bool) -> None:
        if in_loop:
            self.err(
                "E503",
                f"const {stmt.name!r} inside a loop body (constants are "
                "iteration-invariant; declare it before the loop)",
                stmt.span,
            )
            return
        self.const_later.discard(stmt.name)
        try:
            value = evaluate(stmt.expr, dict(self.consts))
        except EvalError as exc:
            code, message = exc.code, exc.message
            if code == "E307" and exc.name in self.failed_consts:
                self.failed_consts.add(stmt.name)  # reported once, where it failed
                code = None
            elif code == "E307":
                code = "E502"
                if exc.name in self.const_later:
                    message = f"const {exc.name!r} is referenced before its declaration"
                elif scope.get(exc.name) is not None or exc.name in self.buffers:
                    code = "E507"
                    message = f"{exc.name!r} is not a const (constant expressions use consts)"
                else:
                    message = f"{exc.name!r} is not a const declared before {stmt.name!r}"
            if code is not None:
                self.err(code, f"const {stmt.name}: {message}", exc.span)
                self.failed_consts.add(stmt.name)
            value = None
        if self.define(scope, stmt.name, "const", value, stmt.span) and value is not None:
            self.consts[stmt.name] = value
            del scope.names[stmt.name]

    def buffer(self, stmt: Buffer, scope: _Scope) -> None:
        decos = self.decorators(stmt.decos, "buffer", scope)
        size = self.int_of(stmt.size, scope, f"size of buffer {stmt.name}") if stmt.size else None
        if stmt.size is None:
            self.err("E607", f"buffer {stmt.name} has no size=", stmt.span)
        elif size is not None and size <= 0:
            self.err("E607", f"buffer {stmt.name}: size must be > 0 bytes, not {size}", stmt.span)
            size = None
        align = None
        if stmt.align is not None:
            align = self.int_of(stmt.align, scope, f"align of buffer {stmt.name}")
            if align is not None and (align <= 0 or align & (align - 1)):
                self.err(
                    "E607",
                    f"buffer {stmt.name}: align must be a power of two, not {align}",
                    stmt.span,
                )
        engine = None
        if stmt.level == "L1":
            engine = 0
            if stmt.engine is not None:
                engine = self.int_of(stmt.engine, scope, f"engine of buffer {stmt.name}")
                n = self.device.num_engines if self.device else None
                if engine is not None and (engine < 0 or (n is not None and engine >= n)):
                    self.err(
                        "E608",
                        f"buffer {stmt.name} is in L1[{engine}] but the device has {n} engine(s)",
                        stmt.span,
                    )
        if self.define(scope, stmt.name, "buffer", None, stmt.span):
            del scope.names[stmt.name]
            self.buffers[stmt.name] = BufferInfo(
                stmt.name, stmt.level, engine, size, frozenset(decos), stmt.span, align
            )

    def region_decl(self, stmt: RegionDecl, scope: _Scope) -> None:
        if isinstance(stmt.value, RegionExpr):
            decos = self.decorators(stmt.decos, "region", scope)
            region = self.region(stmt.value, scope, stmt.name, frozenset(decos))
            self.define(scope, stmt.name, "region", region, stmt.span)
        elif isinstance(stmt.value, (Str, ListValue)):
            self.err(
                "E507", f"let {stmt.name}: a let binds a region or an integer expression", stmt.span
            )
        else:
            value = self.int_of(stmt.value, scope, f"let {stmt.name}")
            self.define(scope, stmt.name, "let_int", value if value is not None else 0, stmt.span)

    def region(
        self, expr: RegionExpr, scope: _Scope, name: str | None, decos: frozenset[str]
    ) -> Region | None:
        buf = self.buffers.get(expr.buffer)
        label = name or f"region({expr.buffer}, ...)"
        if buf is None:
            near = self._near(expr.buffer, self.buffers)
            self.err(
                "E601",
                f"{label}: no buffer named {expr.buffer!r}"
                + (f"; did you mean {near!r}?" if near else ""),
                expr.span,
            )
            return None
        offset = self.int_of(expr.offset, scope, f"{label} offset")
        extent = self.int_of(expr.extent, scope, f"{label} extent")
        if offset is None or extent is None:
            return None
        if offset < 0 or extent <= 0:
            self.err(
                "E602",
                f"{label}: offset must be >= 0 and extent > 0 (offset {offset}, extent {extent})",
                expr.span,
            )
            return None
        if buf.size is not None and offset + extent > buf.size:
            self.err(
                "E602",
                f"{label}: bytes [{offset}, {offset + extent}) lie outside "
                f"buffer {buf.name} of {buf.size} bytes",
                expr.span,
            )
        region = Region(
            name,
            buf.name,
            buf.level,
            buf.engine,
            offset,
            extent,
            decos=decos | buf.decos,
            span=expr.span,
        )
        typ = expr.type
        if typ is None:
            return region
        shape = []
        for d in typ.shape:
            v = self.int_of(d, scope, f"{label} shape")
            if v is None:
                return region
            shape.append(v)
        strides = None
        if typ.strides is not None:
            strides = []
            for s in typ.strides:
                v = self.int_of(s, scope, f"{label} strides")
                if v is None:
                    return region
                strides.append(v)
        span = typ.span
        if any(d <= 0 for d in shape):
            self.err("E605", f"{label}: shape {shape} has a dimension <= 0", span)
            return region
        if typ.layout is not None and len(typ.layout) != len(shape):
            self.err(
                "E605",
                f"{label}: layout {typ.layout} names {len(typ.layout)} "
                f"dimension(s) but the shape {shape} has rank {len(shape)}",
                span,
            )
        if strides is not None:
            if len(strides) != len(shape):
                self.err("E605", f"{label}: strides {strides} do not match rank {len(shape)}", span)
                strides = None
            elif any(s < 0 for s in strides):
                self.err("E605", f"{label}: negative stride in {strides}", span)
                strides = None
        elem = typ.elem if typ.elem in BITS else None
        if elem is not None:
            bits = BITS[elem]
            need = math.ceil(math.prod(shape) * bits / 8)
            if extent < need:
                self.err(
                    "E603",
                    f"{label}: {math.prod(shape)} x {elem} need "
                    f"ceil({math.prod(shape)} * {bits} / 8) = {need} bytes, extent is "
                    f"{extent}",
                    expr.span,
                )
            if strides is not None:
                last = sum((d - 1) * s for d, s in zip(shape, strides, strict=True))
                reach = math.ceil((last + 1) * bits / 8)
                if reach > extent:
                    self.err(
                        "E604",
                        f"{label}: strides {strides} reach element {last}, "
                        f"byte {reach - 1}, beyond the extent of {extent} bytes",
                        expr.span,
                    )
        if typ.quant is not None and elem is not None:
            self.quant(typ.quant, elem, shape, scope, label)
        return Region(
            name,
            buf.name,
            buf.level,
            buf.engine,
            offset,
            extent,
            elem,
            tuple(shape),
            typ.layout,
            tuple(strides) if strides else None,
            typ.quant,
            decos | buf.decos,
            expr.span,
        )

    def quant(self, q: Quant, elem: str, shape: list[int], scope: _Scope, label: str) -> None:
        span = q.span
        if elem not in INT_TYPES:
            self.err(
                "E606",
                f"{label}: quant descriptor on a {elem} region (quantization "
                "describes integer data)",
                span,
            )
            return
        scales = [q.scale] if q.kind == "per_tensor" else list(q.scales)
        zps = [q.zero_point] if q.kind == "per_tensor" else list(q.zero_points)
        for s in scales:
            v = self.value_num(s, scope)
            if v is None or v <= 0:
                self.err("E606", f"{label}: scales must be positive numbers", span)
                break
        for z in zps:
            v = self.value_num(z, scope)
            if not isinstance(v, int):
                self.err("E606", f"{label}: zero points must be integers", span)
                break
        if q.kind == "per_tensor":
            return
        axis = self.int_of(q.axis, scope, f"{label} quant axis")
        if axis is None:
            return
        if not 0 <= axis < len(shape):
            self.err("E606", f"{label}: quant axis {axis} outside rank {len(shape)}", span)
            return
        want = shape[axis]
        if q.kind == "per_group":
            g = self.int_of(q.group_size, scope, f"{label} group_size")
            if g is None:
                return
            if g <= 0:
                self.err("E606", f"{label}: group_size must be a positive integer, not {g}", span)
                return
            want = -(-shape[axis] // g)
        for key, values in (("scales", scales), ("zero_points", zps)):
            if len(values) != want:
                self.err(
                    "E606",
                    f"{label}: {q.kind} {key} has {len(values)} entries, dim[{axis}] needs {want}",
                    span,
                )

    def value_num(self, value, scope: _Scope):
        if isinstance(value, (Str, ListValue, RegionExpr)):
            return None
        try:
            return evaluate(value, self.env(scope), floats=True)
        except EvalError:
            return None

    # --- loops -----------------------------------------------------------------------------

    def loop(self, stmt: Loop, scope: _Scope, thread: _Thread) -> list[int]:
        decos = self.decorators(stmt.decos, "loop", scope)
        start = self.int_of(stmt.start, scope, f"loop {stmt.var} start")
        end = self.int_of(stmt.end, scope, f"loop {stmt.var} end")
        depth = 1
        if "max_in_flight" in decos:
            depth = self.int_of(decos["max_in_flight"].args[0], scope, "@max_in_flight") or 1
        if scope.get(stmt.var) is not None or stmt.var in self.consts:
            self.err("E306", f"loop variable {stmt.var!r} shadows an existing name", stmt.span)
        if start is None or end is None:
            return []
        if start > end:
            self.err(
                "E903",
                f"loop {stmt.var} in [{start}..{end}] is empty (the range is "
                "inclusive: start <= end)",
                stmt.span,
            )
            return []
        entry = thread.barrier
        done: list[int] = []
        for k, i in enumerate(range(start, end + 1)):
            self.iterations += 1
            if self.tasks > MAX_TASK_INSTANCES or self.iterations > MAX_TASK_INSTANCES:
                if not self.unroll_capped:
                    self.unroll_capped = True
                    what = "task instances" if self.tasks > MAX_TASK_INSTANCES else "iterations"
                    self.err(
                        "E904",
                        f"loop {stmt.var}: the program unrolls to more than "
                        f"{MAX_TASK_INSTANCES} {what} (the toolkit's limit); unrolling stopped",
                        stmt.span,
                    )
                break
            preds = [entry]
            if k >= depth:
                preds.append(done[k - depth])
            inner = _Thread(self.order.node(preds))
            body_scope = _Scope({stmt.var: ("loopvar", i, stmt.span)}, scope)
            nodes = self.block(stmt.body, body_scope, inner, in_loop=True)
            done.append(self.order.node([*nodes, inner.barrier]))
        join = self.order.node(done)
        thread.barrier = join
        return [join]

    # --- tasks -----------------------------------------------------------------------------

    def token(self, scope: _Scope, name: str, span: Span) -> int | None:
        entry = scope.get(name)
        if entry is None or entry[0] != "token":
            what = f"is a {entry[0]}, not a token" if entry else "is not a token defined before"
            near = self._near(name, [n for n, e in self._all_names(scope) if e[0] == "token"])
            self.err(
                "E713", f"{name!r} {what}" + (f"; did you mean {near!r}?" if near else ""), span
            )
            return None
        return entry[1]

    @staticmethod
    def _all_names(scope: _Scope):
        while scope is not None:
            yield from scope.names.items()
            scope = scope.parent

    def operand(self, op: Operand, scope: _Scope, what: str) -> Region | None:
        decos = frozenset(self.decorators(op.decos, "region", scope))
        if isinstance(op.ref, RegionExpr):
            return self.region(op.ref, scope, None, decos)
        entry = scope.get(op.ref)
        if entry is None or entry[0] != "region":
            if entry is None and op.ref in self.buffers:
                msg = f"{what}: {op.ref!r} is a buffer; operands are regions"
            elif entry is None:
                near = self._near(
                    op.ref, [n for n, e in self._all_names(scope) if e[0] == "region"]
                )
                msg = f"{what}: no region named {op.ref!r}" + (
                    f"; did you mean {near!r}?" if near else ""
                )
            else:
                msg = f"{what}: {op.ref!r} is a {entry[0]}, not a region"
            self.err("E307", msg, op.span)
            return None
        region = entry[1]
        if region is None:
            return None
        return Region(**{**region.__dict__, "decos": region.decos | decos})

    def task(self, stmt, scope: _Scope, thread: _Thread) -> int | None:
        self.tasks += 1
        kind = "transfer" if isinstance(stmt, Transfer) else "compute"
        decos = self.decorators(stmt.decos, kind, scope)
        reads: list[Region] = []
        writes: list[Region] = []
        attrs: dict = {}
        if isinstance(stmt, Transfer):
            name = f"{stmt.op}.{stmt.form}"
            dst = self.operand(stmt.dst, scope, f"{name} dst")
            src = self.operand(stmt.src, scope, f"{name} src")
            if stmt.form not in ("async", "sync"):
                self.err(
                    "E702", f"{stmt.op} has forms async and sync, not {stmt.form!r}", stmt.span
                )
            if dst is not None and src is not None:
                self.transfer_rules(stmt, name, dst, src, decos)
            reads = [src] if src else []
            writes = [dst] if dst else []
            opcode = self.registry.opcodes.get(stmt.op)
        else:
            opcode = self.registry.opcodes.get(stmt.opcode)
            ins = [
                self.operand(o, scope, f"{stmt.opcode} input {k}") for k, o in enumerate(stmt.ins)
            ]
            outs = [
                self.operand(o, scope, f"{stmt.opcode} output {k}") for k, o in enumerate(stmt.outs)
            ]
            reads = [r for r in ins if r is not None]
            writes = [r for r in outs if r is not None]
            if opcode is None:
                near = self._near(stmt.opcode, self.registry.opcodes)
                self.err(
                    "E701",
                    f"unknown opcode {stmt.opcode!r}"
                    + (f"; did you mean {near!r}?" if near else ""),
                    stmt.span,
                )
            else:
                if stmt.form not in opcode.forms:
                    self.err(
                        "E702",
                        f"{stmt.opcode} has forms {', '.join(opcode.forms)}, not {stmt.form!r}",
                        stmt.span,
                    )
                attrs = self.compute(stmt, opcode, ins, outs, scope)
        for region in writes:
            if "readonly" in region.decos:
                self.err("E715", f"{region.label} is @readonly but this task writes it", stmt.span)
        for region in reads:
            if "writeonly" in region.decos:
                self.err("E715", f"{region.label} is @writeonly but this task reads it", stmt.span)
        engine = self.placement(stmt, [*reads, *writes], decos, scope)
        bound = None
        if "resource" in decos and opcode is not None:
            bound = self.resource(stmt, decos["resource"], opcode, scope)
        preds = [thread.barrier]
        for tok in stmt.deps or ():
            node = self.token(scope, tok, stmt.span)
            if node is not None:
                preds.append(node)
        node = self.order.node(preds)
        where = stmt.token or (stmt.opcode if isinstance(stmt, Compute) else stmt.op)
        iters = []
        s = scope
        while s is not None:
            iters.extend(f"{n}={v}" for n, v in s.loopvars.items())
            s = s.parent
        label = f"{where} (line {stmt.span.line}{', ' + ', '.join(iters) if iters else ''})"
        for region in reads:
            self.accesses.append(
                Access(
                    region.buffer,
                    region.engine,
                    region.offset,
                    region.offset + region.extent,
                    False,
                    node,
                    label,
                    region.label,
                    stmt.span,
                )
            )
        for region in writes:
            self.accesses.append(
                Access(
                    region.buffer,
                    region.engine,
                    region.offset,
                    region.offset + region.extent,
                    True,
                    node,
                    label,
                    region.label,
                    stmt.span,
                )
            )
        self.instances.append(
            TaskInstance(
                len(self.instances),
                node,
                kind if isinstance(stmt, Compute) else stmt.op,
                stmt.opcode if isinstance(stmt, Compute) else stmt.op,
                stmt.form,
                tuple(reads),
                tuple(writes),
                attrs or {},
                frozenset(decos),
                bound,
                engine,
                label,
                stmt.span,
            )
        )
        if stmt.token is not None:
            self.define(scope, stmt.token, "token", node, stmt.span)
        if stmt.form == "sync":
            thread.barrier = self.order.node([thread.barrier, node])
        return node

    def transfer_rules(self, stmt: Transfer, name: str, dst: Region, src: Region, decos) -> None:
        if dst.extent < src.extent:
            self.err(
                "E711",
                f"{name}: destination {dst.label} ({dst.extent} bytes) is smaller "
                f"than source {src.label} ({src.extent} bytes)",
                stmt.span,
            )
        if dst.typed and src.typed:
            if dst.elem != src.elem:
                self.err(
                    "E711",
                    f"{name}: source is {src.elem}, destination is {dst.elem} "
                    "(no implicit casts; use cast)",
                    stmt.span,
                )
            elif math.prod(dst.shape) != math.prod(src.shape):
                self.err(
                    "E711",
                    f"{name}: source shape {list(src.shape)} and destination "
                    f"shape {list(dst.shape)} hold different element counts",
                    stmt.span,
                )
        if (
            dst.buffer == src.buffer
            and dst.offset < src.offset + src.extent
            and src.offset < dst.offset + dst.extent
            and "memmove" not in decos
        ):
            self.err(
                "E712",
                f"{name}: source and destination overlap in buffer {dst.buffer} "
                f"(bytes [{max(dst.offset, src.offset)}, "
                f"{min(dst.offset + dst.extent, src.offset + src.extent)})); add @memmove "
                "if that is intended",
                stmt.span,
            )

    def placement(self, stmt, regions: list[Region], decos, scope: _Scope) -> int | None:
        engines = sorted({r.engine for r in regions if r.level == "L1" and r.engine is not None})
        engine = engines[0] if engines else None
        if len(engines) > 1:
            self.err(
                "E807",
                "task references "
                f"{' and '.join(f'L1[{e}]' for e in engines)}; a task runs on one engine",
                stmt.span,
            )
        if "seq_engine" in decos:
            k = self.int_of(decos["seq_engine"].args[0], scope, "@seq_engine")
            n = self.device.num_engines if self.device else None
            if k is not None and n is not None and k >= n:
                self.err(
                    "E808",
                    f"@seq_engine({k}) but the device has {n} engine(s)",
                    decos["seq_engine"].span,
                )
            elif k is not None and engines and engines != [k]:
                self.err(
                    "E808",
                    f"@seq_engine({k}) but the task references L1[{engines[0]}]",
                    decos["seq_engine"].span,
                )
            elif k is not None:
                engine = k
        return engine

    def resource(
        self, stmt, deco: Decorator, opcode: Opcode, scope: _Scope
    ) -> tuple[str, int] | None:
        """Check ``@resource``; return the binding after Target Resource Validity rules 2-3."""
        unit = deco.unit
        if unit in RESOURCE_INVALID:
            self.err(
                "E804",
                f"@resource({unit}[...]): {unit} is not a valid target (valid: "
                f"{', '.join(RESOURCE_TARGETS)})",
                deco.span,
            )
            return
        if unit not in RESOURCE_TARGETS:
            self.err(
                "E804",
                f"@resource({unit}[...]): unknown unit type (valid: {', '.join(RESOURCE_TARGETS)})",
                deco.span,
            )
            return
        index = self.int_of(deco.index, scope, "@resource index")
        if index is not None and index < 0:
            self.err("E803", f"@resource index must be >= 0, not {index}", deco.span)
            return
        eligible = eligible_units(opcode)
        if unit not in eligible:
            self.err(
                "E805",
                f"{unit} cannot execute {opcode.name} (eligible unit types: {', '.join(eligible)})",
                deco.span,
            )
            return
        if self.device is None or not self.device.concrete or index is None:
            return None if index is None else (unit, index)
        count = self.device.units(unit)
        if count == 0:
            present = [u for u in eligible if self.device.units(u) > 0]
            if present:
                self.err(
                    "W802",
                    f"device {self.device.name!r} has no {unit}; the binder "
                    f"translates {opcode.name} to {present[0]}",
                    deco.span,
                )
                return present[0], index % self.device.units(present[0])
            else:
                self.err(
                    "E806",
                    f"device {self.device.name!r} has no {unit} and no other unit "
                    f"that runs {opcode.name}",
                    deco.span,
                )
        elif index >= count:
            self.err(
                "W801",
                f"{unit}[{index}] does not exist on {self.device.name!r} "
                f"({count} per engine); the binder remaps it to {unit}[{index % count}]",
                deco.span,
            )
            return unit, index % count
        return unit, index

    # --- compute ---------------------------------------------------------------------------

    def compute(self, stmt: Compute, opcode: Opcode, ins, outs, scope: _Scope) -> dict:
        specs = []
        for direction, given, spec_list, variadic in (
            ("in", ins, opcode.inputs, opcode.variadic_inputs),
            ("out", outs, opcode.outputs, opcode.variadic_outputs),
        ):
            required = [s for s in spec_list if s.required]
            names = ", ".join(s.name + ("" if s.required else "?") for s in spec_list)
            too_many = len(given) > len(spec_list) and not variadic
            if len(given) < len(required) or too_many:
                self.err(
                    "E703",
                    f"{opcode.name} takes {direction} {names}"
                    f"{' (variadic)' if variadic else ''}; {len(given)} given",
                    stmt.span,
                )
                return {}
            for k, region in enumerate(given):
                spec = spec_list[min(k, len(spec_list) - 1)]
                specs.append((spec, region))
        for spec, region in specs:
            if region is not None and not region.typed:
                self.err(
                    "E704",
                    f"{opcode.name} operand {spec.name} ({region.label}) needs "
                    "elem=, shape= and layout=/strides=",
                    stmt.span,
                )
        before = len(self.sink.items)
        attrs = self.attributes(stmt, opcode, scope)
        attrs_ok = len(self.sink.items) == before
        if any(r is None or not r.typed for _, r in specs):
            return attrs
        facts = [
            OperandFacts(s.name, r.elem, r.quant is not None, s.required, s.direction)
            for s, r in specs
        ]
        self.families(stmt, opcode, facts, attrs.get("accum_type"))
        from nem.shapes import check_shapes

        if not attrs_ok:
            return attrs
        for message in check_shapes(opcode, specs, attrs):
            self.err("E710", f"{opcode.name}: {message}", stmt.span)
        return attrs

    def attributes(self, stmt: Compute, opcode: Opcode, scope: _Scope) -> dict[str, object]:
        out: dict[str, object] = {}
        spans = list(stmt.attr_spans) or [stmt.span] * len(stmt.attrs)
        for (key, value), span in zip(stmt.attrs, spans, strict=False):
            spec = opcode.attribute(key)
            if spec is None:
                known = [a.name for a in opcode.attributes]
                near = self._near(key, known)
                self.err(
                    "E705",
                    f"{opcode.name} has no attribute {key!r} (attributes: "
                    f"{', '.join(known) or 'none'})"
                    + (f"; did you mean {near!r}?" if near else ""),
                    span,
                )
                continue
            if key in out:
                self.err("E705", f"attribute {key!r} given twice", span)
                continue
            converted = self.attr_value(value, spec.type, scope)
            if isinstance(converted, _Bad):
                self.err(
                    "E707",
                    f"{opcode.name} attribute {key}: expected "
                    f"{_TYPE_WORDS[spec.type]}, {converted.why}",
                    span,
                )
                continue
            out[key] = converted
        for spec in opcode.attributes:
            if spec.name not in out:
                if spec.required and not any(k == spec.name for k, _ in stmt.attrs):
                    self.err(
                        "E706",
                        f"{opcode.name} needs attribute {spec.name} ({_TYPE_WORDS[spec.type]})",
                        stmt.span,
                    )
                elif spec.has_default:
                    out[spec.name] = spec.default
        return out

    def attr_value(self, value, typ: str, scope: _Scope):
        if typ == "string":
            return value.value if isinstance(value, Str) else _Bad("got something else")
        if typ in ("elem_type", "id", "bool"):
            if isinstance(value, Name):
                if typ == "elem_type" and value.id not in ELEM_TYPES:
                    return _Bad(f"{value.id!r} is not an element type")
                if typ == "bool":
                    if value.id in ("true", "false"):
                        return value.id == "true"
                    return _Bad(f"{value.id!r} (use true or false)")
                return value.id
            if typ == "bool" and isinstance(value, Num) and value.value in (0, 1):
                return bool(value.value)
            return _Bad("got a value of another kind")
        if typ == "int_list":
            if not isinstance(value, ListValue):
                return _Bad("got a single value (write [a, b, ...])")
            items = []
            for item in value.items:
                if isinstance(item, (Str, ListValue, RegionExpr)):
                    return _Bad("a list item is not an integer")
                try:
                    items.append(evaluate(item, self.env(scope)))
                except EvalError as exc:
                    return _Bad(exc.message)
            return tuple(items)
        if isinstance(value, (Str, ListValue, RegionExpr)):
            return _Bad("got a value of another kind")
        try:
            return evaluate(value, self.env(scope), floats=(typ == "float"))
        except EvalError as exc:
            return _Bad(exc.message)

    def families(self, stmt: Compute, opcode: Opcode, facts, accum) -> None:
        # The verdict depends only on the opcode, the operand facts and accum_type, so it
        # is computed once per combination (a loop body repeats the same one many times).
        key = (opcode.name, tuple(facts), accum)
        verdict = self._family_verdicts.get(key)
        if verdict is None:
            verdict = self._family_verdict(opcode, facts, accum)
            self._family_verdicts[key] = verdict
        for code, message in verdict:
            self.err(code, message, stmt.span)

    def _family_verdict(self, opcode: Opcode, facts, accum) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        catalog = self.ws.catalog
        if not opcode.type_families:
            return out
        from nem.families import baseline_catalog

        candidates = []
        for fam in opcode.type_families:
            source = catalog if fam in catalog.families else baseline_catalog()
            for inst in source.by_family(fam):
                candidates.append((inst, source.mismatches(inst, opcode, facts, accum)))
        if not candidates:
            return out
        matching = [inst for inst, why in candidates if not why]
        shown = ", ".join(f"{f.name}:{f.elem}{'+q' if f.has_quant else ''}" for f in facts)
        if not matching:
            inst, why = min(candidates, key=lambda c: len(c[1]))
            out.append((
                "E708",
                f"{opcode.name} with ({shown}) matches no variant of "
                f"{', '.join(opcode.type_families)}; nearest: {inst.ref} ({'; '.join(why)})",
            ))
            return out
        dev = self.device
        if dev is None:
            return out
        legal = [inst for inst in matching if inst.ref in dev.effective]
        if not legal:
            on_device = [(i, w) for i, w in candidates if i.ref in dev.effective]
            near = ""
            if on_device:
                inst, why = min(on_device, key=lambda c: len(c[1]))
                near = f"; nearest legal on this device: {inst.ref} ({'; '.join(why)})"
            out.append((
                "E709",
                f"{opcode.name} matches {', '.join(i.ref for i in matching)}, "
                f"which device {dev.name!r} does not list in opcode.mandatory or "
                f"opcode.extended{near}",
            ))
        return out

    # --- whole-program checks ----------------------------------------------------------------

    def capacity(self) -> None:
        dev = self.device
        if dev is None or not dev.concrete:
            return
        totals: dict[tuple[str, int | None], int] = {}
        for buf in self.buffers.values():
            if buf.size is None or buf.level == "DDR":
                continue
            key = (buf.level, buf.engine)
            totals[key] = totals.get(key, 0) + buf.size
            cap = dev.l2_size_bytes if buf.level == "L2" else dev.l1_size_bytes
            if cap is not None and totals[key] > cap:
                where = "L2" if buf.level == "L2" else f"L1[{buf.engine}]"
                self.err(
                    "E609",
                    f"buffers in {where} need {totals[key]} bytes once "
                    f"{buf.name} is added; device {dev.name!r} has "
                    f"{cap} ({'l2' if buf.level == 'L2' else 'l1'}_size_bytes)",
                    buf.span,
                )

    def races(self) -> None:
        for a, b, lo, hi in find_races(self.accesses, self.order):
            regions = a.region if a.region == b.region else f"{a.region} / {b.region}"
            kinds = ("write" if a.write else "read", "write" if b.write else "read")
            self.err(
                "E901",
                f"{a.task} ({kinds[0]}) and {b.task} ({kinds[1]}) touch bytes "
                f"[{lo}, {hi}) of buffer {a.buffer} ({regions}) and are not ordered by "
                "dependencies",
                b.span,
                f"the other access is at line {a.span.line}",
            )

    def tokens(self) -> None:
        dev = self.device
        limit = dev.characteristic("SEQ", "max_active_tokens") if dev else None
        if limit is None:
            return
        peak, span = peak_live_tokens(self.ws.doc.body, self.env_const_loop)
        if peak > limit:
            self.err(
                "E902",
                f"up to {peak} tokens are live at once, device {dev.name!r} has "
                f"SEQ.max_active_tokens = {limit}",
                span or Span(self.file, 1, 1),
            )

    def env_const_loop(self, loop: Loop) -> tuple[int, int]:
        """(iterations, max_in_flight) of a loop, with consts only."""
        try:
            start = evaluate(loop.start, self.consts)
            end = evaluate(loop.end, self.consts)
        except EvalError:
            return 1, 1
        depth = 1
        for d in loop.decos:
            if d.name == "max_in_flight" and d.args:
                try:
                    depth = max(1, int(evaluate(d.args[0], self.consts)))
                except (EvalError, TypeError):
                    depth = 1
        return max(0, end - start + 1), depth


@dataclass(frozen=True)
class _Bad:
    why: str


_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "elem_type": "an element type",
    "int_list": "a list of integers",
    "string": "a quoted string",
    "id": "a name",
}


def eligible_units(opcode: Opcode) -> tuple[str, ...]:
    """Unit types that may run ``opcode`` (Resource Classes and Task Mapping).

    transfer -> DMA; store -> CSTL or DMA (the spec's table says CSTL, the registry DMA;
    both are accepted); linear algebra and convolution -> NMU; the rest -> CSTL; VPU is
    the fallback for every compute opcode.
    """
    if opcode.name == "transfer":
        return ("DMA",)
    if opcode.name == "store":
        return ("CSTL", "DMA")
    primary = opcode.execution_unit if opcode.execution_unit in RESOURCE_TARGETS else "VPU"
    return (primary,) if primary == "VPU" else (primary, "VPU")


def _target_device(ws: Workspace, device: str | None, base_dir: str) -> Device | None:
    doc = ws.doc
    span = doc.device.span if doc.device is not None else Span(doc.file, 1, 1)
    name = None
    if device is not None:
        if os.path.isfile(device):
            name = load_device_file(ws, device, ".", span)
        else:
            name = device
    elif isinstance(doc.device, DeviceRef):
        if doc.device.is_path:
            name = load_device_file(ws, doc.device, base_dir, span)
        else:
            name = doc.device.target
    elif isinstance(doc.device, DeviceConfig):
        name = doc.device.name
    if name is None:
        return None
    return ws.resolve(name, span)


def check_workspace(
    ws: Workspace,
    *,
    device: str | None = None,
    base_dir: str = ".",
    registry: Registry | None = None,
) -> CheckResult:
    """Check a loaded workspace (see :func:`check_file`)."""
    registry = registry or load_registry()
    doc = ws.doc
    if not doc.is_program:
        for dev, _ in [ws.devices[d.name] for d in doc.devices if d.name in ws.devices]:
            ws.resolve(dev.name, dev.span, need_topology=False)
        return CheckResult(ws.sink.sorted(), None, ws)
    target = _target_device(ws, device, base_dir)
    checker = _Checker(ws, target, registry)
    checker.run()
    plan = Plan(checker.buffers, checker.instances, checker.order, checker.consts)
    return CheckResult(ws.sink.sorted(), target, ws, checker.tasks, plan)


def check_file(path: str | os.PathLike, *, device: str | None = None) -> CheckResult:
    """Parse and check a NEM file.

    Parameters
    ----------
    path : path-like
        A program or a config document.
    device : str, optional
        Target device: a device file, or the name of a device visible from ``path``. It
        replaces the program's own ``device`` directive.

    Returns
    -------
    CheckResult
        Diagnostics in source order, the resolved device (if any) and the workspace.
    """
    ws = load(path)
    return check_workspace(ws, device=device, base_dir=os.path.dirname(os.fspath(path)) or ".")


def check_text(
    text: str, *, file: str = "<string>", base_dir: str = ".", device: str | None = None
) -> CheckResult:
    """Check NEM source held in memory; includes and device files are relative to ``base_dir``."""
    ws = load_text(text, file, base_dir)
    return check_workspace(ws, device=device, base_dir=base_dir)
