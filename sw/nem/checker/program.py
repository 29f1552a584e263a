"""The walk over the program's statements, and the whole-program checks run after it
(memory capacity, races, live tokens)."""

from __future__ import annotations

from nem.checker.base import _Scope, _Thread
from nem.diagnostics import Span
from nem.hazards import find_races, peak_live_tokens
from nem.tree import Buffer, Const, Loop, RegionDecl, Wait


class _ProgramChecks:
    """Statement walk and whole-program checks."""

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
