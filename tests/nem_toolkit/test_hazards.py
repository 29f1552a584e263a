"""nem.hazards on hand-made orders, accesses and programs (expected results derived by hand).

The checker's corpus exercises these through whole programs; here each rule is pinned on
its own: transitive order, overlap and write rules of the race search, its limit and
de-duplication, and the live-token count with loops, waits and ties.
"""

import pytest

from nem.diagnostics import Span
from nem.hazards import Access, Order, find_races, peak_live_tokens
from nem.parser import parse


def _chain():
    # 0 -> 1 -> 2, and 3 on its own.
    order = Order()
    a = order.node([])
    b = order.node([a])
    c = order.node([b, b])
    d = order.node([])
    return order, (a, b, c, d)


def test_order_is_transitive_and_directed():
    order, (a, b, c, d) = _chain()
    assert order.before(a, c) and order.before(a, b) and order.before(b, c)
    assert not order.before(c, a) and not order.before(a, a) and not order.before(a, d)
    assert order.ordered(a, a) and order.ordered(c, a) and order.ordered(a, c)
    assert not order.ordered(a, d) and not order.ordered(d, c)
    assert order.preds[c] == (b,)


def _access(node, lo, hi, write, line, buffer="X", engine=None):
    return Access(buffer, engine, lo, hi, write, node, f"t{line}", f"r{line}",
                  Span("p.nem", line, 1))


def test_races_need_overlap_a_writer_and_no_order():
    order, (a, b, c, d) = _chain()
    accesses = [
        _access(a, 0, 8, True, 1),     # ordered before c: no race with it
        _access(d, 4, 12, True, 2),    # unordered with everything: overlaps 1 on [4, 8)
        _access(c, 8, 16, False, 3),   # reads [8, 16): overlaps 2 on [8, 12)
        _access(d, 12, 20, False, 4),  # a read; only 3 overlaps it, also a read
        _access(b, 0, 4, True, 5, buffer="Y"),  # another buffer
        _access(b, 16, 24, True, 6),   # touches 3 at 16 (adjacent, no overlap); 4 on [16, 20)
    ]
    got = {(x.task, y.task, lo, hi) for x, y, lo, hi in find_races(accesses, order)}
    # pairs come as (earlier node, later node): a=0, b=1, c=2, d=3
    assert got == {("t1", "t2", 4, 8), ("t3", "t2", 8, 12), ("t6", "t4", 16, 20)}


def test_races_on_other_engines_do_not_clash():
    order = Order()
    n1, n2 = order.node([]), order.node([])
    accesses = [_access(n1, 0, 8, True, 1, engine=0), _access(n2, 0, 8, True, 2, engine=1)]
    assert list(find_races(accesses, order)) == []
    accesses[1] = _access(n2, 0, 8, True, 2, engine=0)
    assert [(x.task, y.task) for x, y, _, _ in find_races(accesses, order)] == [("t1", "t2")]


def test_race_limit_and_one_pair_per_statement_pair():
    order = Order()
    nodes = [order.node([]) for _ in range(46)]
    # 46 unordered writers of one range: 46 * 45 / 2 = 1035 pairs; the default limit is 1000.
    writers = [_access(n, 0, 4, True, n + 1) for n in nodes]
    assert len(list(find_races(writers, order))) == 1000
    assert len(list(find_races(writers[:5], order, limit=2))) == 2
    assert len(list(find_races(writers[:5], order, limit=20))) == 10
    # Two accesses from the same two statements (same spans) count once.
    twice = [_access(nodes[0], 0, 4, True, 1), _access(nodes[1], 0, 4, True, 2),
             _access(nodes[0], 8, 12, True, 1), _access(nodes[1], 8, 12, True, 2)]
    assert len(list(find_races(twice, order))) == 1


PROGRAM = """program p:
buffer X : L2 (size=64)
let r = region(X, 0, 16)
t1 = transfer.async(dst=r, src=r)
t2 = transfer.async(dst=r, src=r)
wait(t1)
t3 = transfer.async(dst=r, src=r, deps=[t2])
loop i in [0..3] @max_in_flight(2):
  a = transfer.async(dst=r, src=r)
  b = transfer.async(dst=r, src=r, deps=[a])
endloop
"""


@pytest.mark.parametrize(("shape", "peak", "line"), [
    # t1, t2 live (2, line 5); wait(t1) ends t1; t3 uses t2 (ends it): {t3}. The loop body
    # peaks at 2 on line 10 ({a, b}); 2 of its 4 iterations overlap: 1 + 2 * 2 = 5.
    ((4, 2), 5, 10),
    # One iteration in flight: 1 + 1 * 2 = 3, still reached inside the loop.
    ((4, 1), 3, 10),
    # No iteration: the loop adds nothing; the first peak (line 5) stays, t3's equal
    # count on line 7 does not move it.
    ((0, 2), 2, 5),
])
def test_peak_live_tokens_with_a_loop(shape, peak, line):
    body = parse(PROGRAM, "p.nem").body
    assert peak_live_tokens(body, lambda loop: shape) == (peak, Span("p.nem", line, 3
                                                                     if line > 8 else 1))


def test_peak_tie_with_a_loop_keeps_the_first():
    # Before the loop {t3} (1); one iteration of a one-token body: 1 + 1 = 2 = the peak of
    # line 5, which stays where it was.
    text = PROGRAM.replace("  b = transfer.async(dst=r, src=r, deps=[a])\n", "")
    body = parse(text, "p.nem").body
    assert peak_live_tokens(body, lambda loop: (1, 1)) == (2, Span("p.nem", 5, 1))


def test_tokens_used_inside_a_loop_end_after_it():
    # t1 is used by the loop body's first task, so it is dead after the loop: t4, t5, t6
    # make 3. (Were the loop's uses missed, t1 would live on and make 4.) The loop: t1 live
    # + 1 iteration x {a, b} = 3.
    text = """program p:
buffer X : L2 (size=64)
let r = region(X, 0, 16)
t1 = transfer.async(dst=r, src=r)
loop i in [0..1]:
  a = transfer.async(dst=r, src=r, deps=[t1])
  b = transfer.async(dst=r, src=r)
endloop
t4 = transfer.async(dst=r, src=r)
t5 = transfer.async(dst=r, src=r)
t6 = transfer.async(dst=r, src=r)
"""
    body = parse(text, "p.nem").body
    assert peak_live_tokens(body, lambda loop: (2, 1)) == (3, Span("p.nem", 7, 3))


def test_peak_of_one_token_and_of_none():
    body = parse(PROGRAM, "p.nem").body
    assert peak_live_tokens(body[:3], lambda loop: (1, 1)) == (1, Span("p.nem", 4, 1))
    assert peak_live_tokens(body[:2], lambda loop: (1, 1)) == (0, None)


def test_races_with_several_ranges_readers_and_in_place_tasks():
    order = Order()
    n = [order.node([]) for _ in range(6)]
    accesses = [
        # Sorted by start, [0, 2) ends before [5, 6) but [1, 10) after it covers it.
        _access(n[0], 0, 2, True, 1),
        _access(n[1], 1, 10, True, 2),
        _access(n[2], 5, 6, True, 3),
    ]
    got = {(x.task, y.task, lo, hi) for x, y, lo, hi in find_races(accesses, order)}
    assert got == {("t1", "t2", 1, 2), ("t2", "t3", 5, 6)}
    # Two unordered readers, then a writer: a race with each reader.
    readers = [_access(n[0], 0, 4, False, 1), _access(n[1], 0, 4, False, 2),
               _access(n[2], 0, 4, True, 3)]
    assert {(x.task, y.task) for x, y, _, _ in find_races(readers, order)} == {
        ("t1", "t3"), ("t2", "t3")}
    # An in-place task reads then writes [0, 4) (one statement); a later unordered reader
    # races with its write.
    in_place = [_access(n[3], 0, 4, False, 4), _access(n[3], 0, 4, True, 4),
                _access(n[4], 0, 4, False, 5)]
    assert [(x.task, x.write, y.task) for x, y, _, _ in find_races(in_place, order)] == [
        ("t4", True, "t5")]


def test_races_skip_ordered_instances_and_look_past_quiet_ranges():
    # Nodes in creation order: 0 (statement 1), 1 (statement 3, on its own), 2 (statement
    # 2, after node 0). All write [0, 4): 1 races with 0 and with 2; 0 -> 2 is ordered.
    order = Order()
    a = order.node([])
    b = order.node([])
    c = order.node([a])
    accesses = [_access(a, 0, 4, True, 1), _access(b, 0, 4, True, 3),
                _access(c, 0, 4, True, 2)]
    got = {(x.task, y.task) for x, y, _, _ in find_races(accesses, order)}
    assert got == {("t1", "t3"), ("t3", "t2")}
    # [0, 4) is written by an ancestor only, [2, 8) by an unordered node (both after the
    # first): a write of [3, 6) clashes with the second range although the first one
    # (sorted first) is quiet.
    order = Order()
    a = order.node([])
    b = order.node([a])
    c = order.node([a])
    accesses = [_access(a, 0, 4, True, 1), _access(b, 2, 8, True, 2),
                _access(c, 3, 6, True, 3)]
    got = [(x.task, y.task, lo, hi) for x, y, lo, hi in find_races(accesses, order)]
    assert got == [("t2", "t3", 3, 6)]


def test_race_names_the_first_instance_of_a_statement():
    # Two instances of statement 1 (a loop body: nodes 0 and 1, task names differ) race
    # with statement 2; the pair is reported once, with the earlier instance.
    order = Order()
    n = [order.node([]) for _ in range(3)]
    first = Access("X", None, 0, 4, True, n[0], "t1[0]", "r1", Span("p.nem", 1, 1))
    second = Access("X", None, 0, 4, True, n[1], "t1[1]", "r1", Span("p.nem", 1, 1))
    races = list(find_races([first, second, _access(n[2], 0, 4, True, 2)], order))
    assert [(x.task, y.task) for x, y, _, _ in races] == [("t1[0]", "t1[1]"), ("t1[0]", "t2")]
