"""Token assignment against an independent model of the sequencer.

The model issues tasks in stream order; a task issues when its wait tokens are set (and,
here, after a random issue delay); issue clears the task's signal tokens, completion (after
a random duration) sets them. A binding is safe when every task starts after every task it
depends on, directly or not, has completed.
"""

from __future__ import annotations

import heapq
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nem.tokens import TokenError, assign_tokens, reduce_deps


def simulate(wait, signal, durations, tokens=32):
    """Start and end times under the sequencer semantics; None on a deadlock."""
    n = len(wait)
    state = (1 << tokens) - 1  # the initial state must not matter: start with all set
    now, k = 0, 0
    start, end = [None] * n, [None] * n
    running: list[tuple[int, int]] = []
    while k < n or running:
        if k < n and wait[k] & ~state == 0:
            state &= ~signal[k]
            start[k] = now
            heapq.heappush(running, (now + durations[k], k))
            k += 1
            continue
        if not running:
            return None  # waiting for a token nobody will set
        now, done = heapq.heappop(running)
        end[done] = now
        state |= signal[done]
    return start, end


def closure(deps):
    anc = []
    for preds in deps:
        mask = 0
        for a in preds:
            mask |= anc[a] | (1 << a)
        anc.append(mask)
    return anc


def violations(deps, wait, signal, durations):
    run = simulate(wait, signal, durations)
    assert run is not None, "deadlock"
    start, end = run
    anc = closure(deps)
    return [
        (a, b) for b in range(len(deps)) for a in range(b)
        if anc[b] >> a & 1 and start[b] < end[a]
    ]  # fmt: skip


@st.composite
def dags(draw):
    n = draw(st.integers(1, 40))
    deps = []
    for b in range(n):
        k = draw(st.integers(0, min(b, 3)))
        deps.append(
            sorted(set(draw(st.lists(st.integers(0, b - 1), min_size=k, max_size=k)))) if b else []
        )
    durations = draw(st.lists(st.integers(1, 50), min_size=n, max_size=n))
    return deps, durations


@settings(max_examples=150, deadline=None)
@given(dags(), st.integers(1, 8))
def test_binding_is_safe_or_refused(case, count):
    deps, durations = case
    reduced = reduce_deps(deps)
    try:
        wait, signal = assign_tokens(reduced, count)
    except TokenError as exc:
        assert "tokens would be live at once" in str(exc)
        # refused only when the live ranges really need more: check by counting overlaps
        last = {}
        for b, preds in enumerate(reduced):
            for a in preds:
                last[a] = max(last.get(a, -1), b)
        peak = max(sum(1 for a, e in last.items() if a <= p < e) for p in range(len(deps)))
        assert peak > count
        return
    assert all(bin(s).count("1") <= 1 for s in signal)
    assert all(w < 1 << count and s < 1 << count for w, s in zip(wait, signal, strict=True))
    assert violations(deps, wait, signal, durations) == []


def test_reduction_drops_implied_edges():
    # 2 depends on 0 and 1, 1 on 0: the edge 0 -> 2 is implied
    assert reduce_deps([[], [0], [0, 1]]) == [(), (0,), (1,)]
    assert reduce_deps([[], [], [0, 1], [0, 2]]) == [(), (), (0, 1), (2,)]


def test_reuse_under_pressure():
    # a chain of 100 tasks needs one token, reused for every link
    deps = [[]] + [[b - 1] for b in range(1, 100)]
    wait, signal = assign_tokens(deps, 1)
    assert set(signal[:-1]) == {1} and signal[-1] == 0
    assert (
        violations(deps, wait, signal, [random.Random(b).randint(1, 9) for b in range(100)]) == []
    )


def test_too_many_live_tokens_is_a_clear_error():
    # five producers, one consumer of all five: five tokens live at once
    deps = [[], [], [], [], [], [0, 1, 2, 3, 4]]
    labels = [f"t{k} (line {k + 1})" for k in range(6)]
    with pytest.raises(
        TokenError,
        match=r"t4 \(line 5\): 5 tokens would be live at once, the "
        r"device has 4.*held by: t0 \(line 1\), t1",
    ):
        assign_tokens(deps, 4, labels)
    assign_tokens(deps, 5)


def test_wrong_reuse_is_caught_by_the_model():
    # 0 -> 2 and 1 -> 3; giving 1 the token of 0 while 2 has not issued yet is wrong
    deps = [[], [], [0], [1]]
    wait, signal = [0, 0, 1, 1], [1, 1, 0, 0]  # both producers on token 0
    # 0 slow, 1 fast: 1's completion sets token 0 and releases 2 before 0 is done
    assert (0, 2) in violations(deps, wait, signal, [50, 1, 1, 1])
    good_wait, good_signal = assign_tokens(deps, 2)
    assert violations(deps, good_wait, good_signal, [50, 1, 1, 1]) == []
    assert good_signal == [1, 2, 0, 0]
