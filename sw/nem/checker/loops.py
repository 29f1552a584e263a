"""Loops: unrolled with their constant bounds, up to the toolkit's limit (E904)."""

from __future__ import annotations

from nem.checker.base import _Scope, _Thread
from nem.consteval import EvalError, evaluate
from nem.tree import Loop

#: Toolkit limit (E904, docs/nem-toolkit.md "Limits"): task instances, and loop iterations,
#: one document may unroll to. The happens-before order grows with the square of the
#: instances (measured peaks: 16,384 -> 0.26 GB, 32,768 -> 0.78 GB, 50,000 -> 1.7 GB,
#: 100,000 -> 6.2 GB); 16,384 keeps a check at the limit to a few seconds and well under 1 GB.
MAX_TASK_INSTANCES = 16_384


class _LoopChecks:
    """Loop unrolling and loop bounds."""

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
