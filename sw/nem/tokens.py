"""Physical token assignment for the task binary.

Sequencer semantics (the contract between the binder, the executor's binary front-end and
the RTL; ``docs/task-format.md``):

* tasks are issued strictly in stream order; a task issues when every token in its wait
  mask is set and its unit instance is free;
* issuing a task first checks its wait mask, then **clears** the tokens in its signal mask;
  its completion **sets** them.

A dependency ``A -> B`` (B must not start before A completes) is carried by a token that A
signals and B waits on. A token is live from its producer's position in the stream to the
position of its last consumer. It may be given to a new producer from that position on
(the last consumer may itself be the new producer: it checks the token before clearing
it): the new producer is issued after every consumer of the previous one, and those
consumers issued only after the previous producer completed, so clearing the token cannot
lose or fake a completion. Live ranges are intervals over stream positions, so assigning
tokens greedily by start position uses the fewest tokens possible; when a program needs
more than the device has, the binder refuses it with :class:`TokenError` rather than
binding something unsafe.

Dependencies implied by others should be dropped first (:func:`reduce_deps`; the binder's
walk of the happens-before order yields them reduced already): when B depends on A and on
C, and C depends on A, B does not wait on A.
"""

from __future__ import annotations

from collections.abc import Sequence

from nem.hazards import Order
from nem.taskformat import MAX_TOKENS

__all__ = ["TokenError", "assign_tokens", "reduce_deps"]


class TokenError(ValueError):
    """The program needs more live tokens than the device provides."""


def reduce_deps(deps: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """Transitive reduction of a dependency DAG given in stream order.

    ``deps[b]`` lists tasks before ``b`` (indices ``< b``) that ``b`` depends on. Returns, per
    task, the direct dependencies that no other dependency implies.
    """
    order = Order()
    out: list[tuple[int, ...]] = []
    for b, preds in enumerate(deps):
        _check_earlier(b, preds)
        implied = 0
        for a in preds:
            implied |= order.ancestors[a]
        order.node(list(preds))
        out.append(tuple(sorted({a for a in preds if not implied >> a & 1})))
    return out


def _check_earlier(b: int, preds: Sequence[int]) -> None:
    for a in preds:
        if not 0 <= a < b:
            raise ValueError(f"task {b} depends on task {a}, which does not come before it")


def assign_tokens(
    deps: Sequence[Sequence[int]], count: int, labels: Sequence[str] | None = None
) -> tuple[list[int], list[int]]:
    """Wait and signal masks for every task.

    Parameters
    ----------
    deps : sequence of sequences of int
        Per task in stream order, the earlier tasks it must wait for (ideally reduced with
        :func:`reduce_deps`).
    count : int
        Physical tokens available (``SEQ.max_active_tokens``, at most 32).
    labels : sequence of str, optional
        Names of the tasks, for error messages.

    Returns
    -------
    wait, signal : list of int
        Token masks per task.

    Raises
    ------
    TokenError
        When more than ``count`` tokens would be live at once.
    """
    if not 1 <= count <= MAX_TOKENS:
        raise TokenError(f"{count} physical tokens: the task format carries 1 to {MAX_TOKENS}")
    n = len(deps)
    last_use = [-1] * n
    for b, preds in enumerate(deps):
        _check_earlier(b, preds)
        for a in preds:
            last_use[a] = max(last_use[a], b)
    wait = [0] * n
    signal = [0] * n
    token_of = [-1] * n
    free_after = [-1] * count  # stream position after which each token is free again
    for b in range(n):
        for a in deps[b]:
            wait[b] |= 1 << token_of[a]
        if last_use[b] < 0:
            continue  # nobody waits for this task
        # a token whose last consumer is issued no later than this task
        choice = next((t for t in range(count) if free_after[t] <= b), None)
        if choice is None:
            name = labels[b] if labels else f"task {b}"
            holders = sorted(
                (labels[p] if labels else f"task {p}")
                for p in range(b)
                if token_of[p] >= 0 and last_use[p] > b
            )
            raise TokenError(
                f"{name}: {count + 1} tokens would be live at once, the device has {count} "
                f"(SEQ.max_active_tokens); tokens held by: {', '.join(holders)}. Add a wait "
                "or a .sync to shorten their lives"
            )
        token_of[b] = choice
        free_after[choice] = last_use[b]
        signal[b] = 1 << choice
    return wait, signal
