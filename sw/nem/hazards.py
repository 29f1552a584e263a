"""Happens-before order, the static race check, and live-token counting.

Ordering model (``docs/nem-toolkit.md``, "Execution order"): tasks are issued in program
order and run asynchronously. Task B is ordered after task A only when

* B lists A's token in ``deps`` (directly or through a chain of such edges), or
* a ``wait`` on A's token, or A itself in its ``.sync`` form, comes before B in the same
  sequence of statements (a wait is a barrier for what follows it), or
* A belongs to loop iteration ``j`` and B to iteration ``j + N`` or later, where N is the
  loop's ``@max_in_flight`` (default 1: sequential); iterations closer than N overlap, or
* A is inside a loop and B follows the loop (``endloop`` waits for every iteration).

The order is a DAG whose nodes are tasks and barriers; every node gets the set of its
ancestors as a Python integer bitset, so "is A before B" is one bit test.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from nem.diagnostics import Span
from nem.tree import Compute, Loop, Transfer, Wait

__all__ = ["Access", "Order", "find_races", "peak_live_tokens"]


class Order:
    """A growing DAG; nodes are numbered in creation order, which is a topological order."""

    def __init__(self) -> None:
        self.ancestors: list[int] = []
        self.preds: list[tuple[int, ...]] = []

    def node(self, preds: list[int]) -> int:
        """Add a node after ``preds``; return its number."""
        mask = 0
        for p in preds:
            mask |= self.ancestors[p] | (1 << p)
        self.ancestors.append(mask)
        self.preds.append(tuple(sorted(set(preds))))
        return len(self.ancestors) - 1

    def before(self, a: int, b: int) -> bool:
        """True when node ``a`` happens before node ``b``."""
        return bool(self.ancestors[b] >> a & 1)

    def ordered(self, a: int, b: int) -> bool:
        """True when ``a`` and ``b`` are ordered either way."""
        return a == b or self.before(a, b) or self.before(b, a)


@dataclass(frozen=True)
class Access:
    """One task touching bytes ``[lo, hi)`` of a buffer."""

    buffer: str
    engine: int | None
    lo: int
    hi: int
    write: bool
    node: int
    task: str
    region: str
    span: Span


def find_races(
    accesses: list[Access], order: Order, limit: int = 1000
) -> Iterator[tuple[Access, Access, int, int]]:
    """Pairs of accesses that overlap, at least one writing, and are not ordered.

    Yields ``(earlier, later, lo, hi)`` with the overlapping byte range; at most ``limit``
    pairs, and one pair per pair of source statements.

    Accesses are visited in node order, which is topological, so an earlier access is
    ordered with a later one exactly when it is among the later one's ancestors. Accesses
    are grouped by their exact byte range; each range keeps the bitsets of the nodes that
    wrote and read it, so one access is compared with all earlier ones on an overlapping
    range in a few big-integer operations (a 10,000-task program checks in well under a
    second, where comparing pairs was quadratic).
    """
    by_buffer: dict[tuple[str, int | None], list[Access]] = {}
    for acc in accesses:
        by_buffer.setdefault((acc.buffer, acc.engine), []).append(acc)
    seen: set[tuple[Span, Span]] = set()
    found = 0
    for group in by_buffer.values():
        group.sort(key=lambda a: a.node)
        ranges = sorted({(a.lo, a.hi) for a in group})
        los = [lo for lo, _ in ranges]
        longest = max(hi - lo for lo, hi in ranges)
        index = {r: k for k, r in enumerate(ranges)}
        writers = [0] * len(ranges)
        readers = [0] * len(ranges)
        by_node: list[dict[int, list[Access]]] = [{} for _ in ranges]
        # per range, the nodes of each source statement: a statement pair already reported
        # is skipped as a whole (a racy loop repeats the same pair in every iteration, and
        # visiting each instance made a racy 10,000-task loop take minutes)
        by_span: list[dict[Span, int]] = [{} for _ in ranges]
        for acc in group:
            # ranges with lo in (acc.lo - longest, acc.hi) may overlap [acc.lo, acc.hi)
            first = bisect_right(los, acc.lo - longest)
            last = bisect_left(los, acc.hi)
            unordered = ~(order.ancestors[acc.node] | (1 << acc.node))
            for k in range(first, last):
                lo, hi = ranges[k]
                if hi <= acc.lo:
                    continue
                clash = writers[k] | readers[k] if acc.write else writers[k]
                clash &= unordered
                if not clash:
                    continue
                for span, nodes in by_span[k].items():
                    mine = clash & nodes
                    if not mine or (span, acc.span) in seen:
                        continue
                    while mine:
                        bit = mine & -mine
                        mine ^= bit
                        other = next((o for o in by_node[k][bit.bit_length() - 1]
                                      if o.span == span and (o.write or acc.write)), None)
                        if other is None:
                            continue
                        seen.add((span, acc.span))
                        yield other, acc, max(acc.lo, lo), min(acc.hi, hi)
                        found += 1
                        if found >= limit:
                            return
                        break
            k = index[(acc.lo, acc.hi)]
            bit = 1 << acc.node
            if acc.write:
                writers[k] |= bit
            else:
                readers[k] |= bit
            by_node[k].setdefault(acc.node, []).append(acc)
            by_span[k][acc.span] = by_span[k].get(acc.span, 0) | bit


def _uses(stmt) -> set[str]:
    if isinstance(stmt, Wait):
        return set(stmt.tokens)
    if isinstance(stmt, (Transfer, Compute)):
        return set(stmt.deps or ())
    if isinstance(stmt, Loop):
        out: set[str] = set()
        for s in stmt.body:
            out |= _uses(s)
        return out
    return set()


def peak_live_tokens(
    body, loop_shape: Callable[[Loop], tuple[int, int]]
) -> tuple[int, Span | None]:
    """The most tokens live at once, and the statement where that peak is reached.

    A token is live from the task that produces it until the last statement of its scope
    that names it (in ``deps`` or ``wait``); a token never named stays live to the end of its
    scope (the program, or its loop iteration). A loop with ``@max_in_flight(N)`` holds up to
    ``min(N, iterations)`` iterations' worth of its body's peak at once.
    """
    peak, at = 0, None
    live: set[str] = set()
    last: dict[str, int] = {}
    for k, stmt in enumerate(body):
        for tok in _uses(stmt):
            last[tok] = k
    for k, stmt in enumerate(body):
        if isinstance(stmt, Loop):
            iters, depth = loop_shape(stmt)
            inner, inner_at = peak_live_tokens(stmt.body, loop_shape)
            total = len(live) + min(depth, max(iters, 0)) * inner
            if total > peak:
                peak, at = total, inner_at or stmt.span
        elif isinstance(stmt, (Transfer, Compute)) and stmt.token is not None:
            live.add(stmt.token)
        if len(live) > peak:
            peak, at = len(live), stmt.span
        for tok in [t for t in live if last.get(t, -1) == k]:
            live.discard(tok)
    return peak, at
