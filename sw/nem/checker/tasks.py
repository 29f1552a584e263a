"""Checks of tasks (transfer and compute statements): tokens, operands, the task's
accesses and order, transfer rules."""

from __future__ import annotations

import math

from nem.checker.base import _Scope, _Thread
from nem.checker.plan import Region, TaskInstance
from nem.diagnostics import Span
from nem.hazards import Access
from nem.tree import Compute, Operand, RegionExpr, Transfer


class _TaskChecks:
    """Tasks, their operands, tokens and transfer rules."""

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
