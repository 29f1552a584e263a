"""Checks of the declarations: consts and buffers."""

from __future__ import annotations

from nem.checker.base import _Scope
from nem.checker.plan import BufferInfo
from nem.consteval import EvalError, evaluate
from nem.tree import Buffer, Const, ListValue, RegionExpr, Str


class _DeclarationChecks:
    """``const`` and ``buffer`` declarations."""

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

    def value_num(self, value, scope: _Scope):
        if isinstance(value, (Str, ListValue, RegionExpr)):
            return None
        try:
            return evaluate(value, self.env(scope), floats=True)
        except EvalError:
            return None
