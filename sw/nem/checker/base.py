"""The checker's state and the helpers every stage uses: diagnostics (one per code and
position), scopes and names, integer expressions, decorators."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from nem.checker.plan import BufferInfo, TaskInstance
from nem.consteval import EvalError, evaluate
from nem.device import Device
from nem.diagnostics import Span
from nem.hazards import Access, Order
from nem.loader import Workspace
from nem.registry import Registry
from nem.tree import Decorator, ListValue, RegionExpr, Str

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


class _CheckerBase:
    """The walk's state, diagnostics, expressions, names and decorators."""

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
        # Where the lexer or parser gave up on a statement (E1xx/E2xx, recorded before the
        # walk): the name it declared is unknown to the walk, so "undefined name" after it
        # would be a second, misleading report of the same error.
        self.parse_errors = [
            d.span for d in self.sink.items if d.code[:2] in ("E1", "E2")
        ]

    # --- reporting -------------------------------------------------------------------------

    def err(self, code: str, message: str, span: Span, *notes: str) -> None:
        if code in ("E307", "E502") and self.after_parse_error(span):
            return  # a cascade of the parse error (see __init__): reported once, there
        key = (code, span)
        if key in self.reported:
            return
        self.reported.add(key)
        self.sink.add(code, message, span, *notes)

    def after_parse_error(self, span: Span) -> bool:
        """Whether a statement of ``span``'s file failed to parse on or before its line."""
        return any(p.file == span.file and p.line <= span.line for p in self.parse_errors)

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
