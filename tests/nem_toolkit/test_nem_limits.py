"""Limits of the NEM toolkit on hostile input (issue 24): every one is a diagnostic with a
code from ``nem.diagnostics.CODES``, never a Python exception or gigabytes of memory. The
corpus has the cases at and just over each limit; these tests feed the inputs the issue
found (far over the limits) and the formatter's refusal of non-UTF-8 text."""

import pytest
from nem_corpus import CORPUS

from nem.checker import check_text
from nem.checker import loops as checker_loops
from nem.parser import MAX_LITERAL_CHARS

DEVICE = 'device "test_device.nem"\nprogram t:\n'


def _codes(source):
    result = check_text(source, file="t.nem", base_dir=str(CORPUS))
    return [d.code for d in result.diagnostics], result


def test_thousand_term_expression():
    codes, _ = _codes("const A = " + " + ".join(["1"] * 1000) + "\n")
    assert codes == ["E204"]
    # Parentheses do not hide depth: 90 nested levels (under the 100 of parentheses) of
    # three operators each make a tree 270 deep.
    text = "1"
    for _ in range(90):
        text = f"({text} + 1 + 1 + 1)"
    codes, _ = _codes(f"const A = {text}\n")
    assert codes == ["E204"]


def test_hundred_thousand_digit_literal():
    codes, result = _codes("const A = " + "9" * 100_000 + "\n")
    assert codes == ["E104"]
    assert f"number literal of 100000 characters (at most {MAX_LITERAL_CHARS}" in \
        result.diagnostics[0].message


def test_task_instances_are_capped(monkeypatch):
    # The real limit (16,384) takes seconds to reach; the check is the same at 50.
    monkeypatch.setattr(checker_loops, "MAX_TASK_INSTANCES", 50)
    body = "".join(f"    t{k} = transfer.async(dst=region(A1, {64 * k}, 64), "
                   f"src=region(A2, i * 64, 64){f', deps=[t{k - 1}]' if k else ''})\n"
                   for k in range(10))
    source = DEVICE + ("buffer A2 : L2 (size=65536)\nbuffer A1 : L1 (size=16384)\n"
                       f"loop i in [0..9]:\n{body}endloop\n")
    codes, result = _codes(source)
    assert codes == ["E904"]
    assert "loop i: the program unrolls to more than 50 task instances" in \
        result.diagnostics[0].message
    # Unrolling stops before the first iteration that starts past the limit: 6 x 10 tasks.
    assert result.task_count == 60


def test_iterations_are_capped_once(monkeypatch):
    monkeypatch.setattr(checker_loops, "MAX_TASK_INSTANCES", 50)
    source = DEVICE + ("buffer A1 : L1 (size=16384)\nloop i in [0..99]:\n"
                       "    loop j in [0..99]:\n        let X = region(A1, 0, 64)\n"
                       "    endloop\nendloop\n")
    codes, result = _codes(source)
    assert codes == ["E904"]  # once, though the outer loop stops too
    assert "loop j: the program unrolls to more than 50 iterations" in \
        result.diagnostics[0].message


def test_a_failed_const_is_reported_once():
    codes, _ = _codes("const A = 1 / 0\nconst B = A + 1\nconst C = B * 2\n"
                      "buffer X : L2 (size=C)\n")
    assert codes == ["E504"]


def test_fmt_in_place_refuses_non_utf8(tmp_path, capsys):
    from npu.tools.cli import main

    path = tmp_path / "bad.nem"
    raw = b"const A = 1\nconst  B = 2 # caf\xe9\n"
    path.write_bytes(raw)
    assert main(["nem", "fmt", "-i", str(path)]) == 1
    assert path.read_bytes() == raw  # untouched, not rewritten with U+FFFD
    err = capsys.readouterr().err
    # Line 2 starts at offset 12; "const  B = 2 # caf" is 18 characters, so column 19.
    assert f"{path}:2:19: error: byte 0xe9 at offset 30 is not UTF-8; not formatted" in err


@pytest.mark.parametrize("source", ["const A = (((1)))\n", "const A = -(-(-1))\n"])
def test_shallow_expressions_still_pass(source):
    assert _codes(source)[0] == []


def test_racy_loop_checks_in_linear_time():
    # Found by fuzz_nem's grammar-aware mutations: a loop whose iterations race on the same
    # region repeats one statement pair in every iteration; the race search visited every
    # instance of it (a 12,000-task loop took over three minutes). Each statement pair is
    # reported once, so the work per access is bounded by the statements, not the instances.
    import time

    source = DEVICE + (
        "buffer A2 : L2 (size=65536)\nbuffer B2 : L2 (size=65536)\n"
        "buffer A1 : L1 (size=16384)\n"
        "loop i in [0..999] @max_in_flight(2):\n"
        "    let X = region(A1, 0, 64) elem=f16, shape=[32], layout=C\n"
        "    t1 = transfer.async(dst=X, src=region(A2, 0, 64))\n"
        "    t2 = relu.async in X out X deps=[t1]\n"
        "    loop j in [0..3]:\n"
        "        t3 = store.async(dst=region(B2, 0, 64), src=X, deps=[t2])\n"
        "    endloop\n"
        "endloop\n"
    )
    start = time.monotonic()
    _, result = _codes(source)
    assert time.monotonic() - start < 20  # was minutes
    assert result.task_count == 6000
    races = [d for d in result.diagnostics if d.code == "E901"]
    # One diagnostic per racing statement pair (t1/t2/t3 of two iterations in flight).
    assert races and len({(d.span, d.message) for d in races}) == len(races)
