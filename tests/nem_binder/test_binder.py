"""Bound binaries run in the executor leave the same bytes in every buffer as the NEM text.

Programs: multi-tile copies through DDR -> L2 -> L1 and back with ping-pong slots and
``@max_in_flight(2)``, strided (transposing) transfers, and random copy programs with
exactly the dependencies they need; the token pressure cases bind with one token or are
refused.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nem.binder import BindError, bind, copy_registers, device_hash, plan_from_binary
from nem.checker import check_text
from nem.executor import RaceError, execute
from nem.memory import allocate
from nem.taskformat import TaskFormatError, decode, encode
from npu.tools.cli import main

PROGRAMS = Path(__file__).resolve().parents[1] / "nem_executor" / "programs"

TILED = """device "exec_device.nem"
program tiles:
const T = 6
const TB = 256
buffer IN : DDR (size=T * TB)
buffer OUT : DDR (size=T * TB)
buffer S : L2 (size=T * TB)
buffer R : L2 (size=T * TB)
buffer X : L1 (size=2 * TB)
t0 = transfer.sync(dst=region(S, 0, T * TB), src=region(IN, 0, T * TB))
loop i in [0..T - 1] @max_in_flight(2):
    a = transfer.async(dst=region(X, (i mod 2) * TB, TB), src=region(S, i * TB, TB))
    let back = region(R, (T - 1 - i) * TB, TB)
    b = transfer.async(dst=back, src=region(X, (i mod 2) * TB, TB), deps=[a])
    wait(b)
endloop
t9 = transfer.async(dst=region(OUT, 0, T * TB), src=region(R, 0, T * TB))
wait(t9)
"""

STRIDED = """device "exec_device.nem"
program transpose:
buffer A : L2 (size=96)
buffer B : L1 (size=96)
buffer C : L2 (size=192)
let src = region(A, 0, 96) elem=i16, shape=[4, 12], layout=MN
let dstT = region(B, 0, 96) elem=i16, shape=[4, 12], strides=[1, 4]
t1 = transfer.async(dst=dstT, src=src)
let back = region(C, 0, 192) elem=i16, shape=[4, 12], strides=[24, 2]
t2 = transfer.async(dst=back, src=region(B, 0, 96) elem=i16, shape=[4, 12], layout=MN, deps=[t1])
wait(t2)
"""


def _check(text):
    result = check_text(text, file="p.nem", base_dir=str(PROGRAMS))
    assert result.ok, [str(d) for d in result.diagnostics]
    return result


def _initial(result, seed):
    rng = np.random.default_rng(seed)
    return {
        name: rng.integers(0, 256, size=buf.size, dtype=np.uint8)
        for name, buf in result.plan.buffers.items()
    }


def _same_bytes(text, seed=0):
    result = _check(text)
    init = _initial(result, seed)
    want = execute(result.plan, result.device, init)
    program = bind(result)
    data = encode(program)
    assert decode(data, device_hash=device_hash(result.device)) == program
    got = execute(plan_from_binary(decode(data), result.device), result.device, init, in_order=True)
    for name in result.plan.buffers:
        np.testing.assert_array_equal(got.memory.buffer(name), want.memory.buffer(name), name)
    return result, program, want, got


def test_tiled_ping_pong_program():
    _, program, want, got = _same_bytes(TILED)
    assert len(program.tasks) == 2 + 2 * 6
    # the data really moved: OUT holds IN's tiles in reverse order
    src = want.memory.buffer("IN").reshape(6, 256)
    np.testing.assert_array_equal(want.memory.buffer("OUT").reshape(6, 256), src[::-1])
    # the copies between DDR and L2 ran on the sDMA
    assert {p.unit for p in program.tasks[:1]} == {1}
    assert got.total_cycles > 0


def test_strided_transposing_copies():
    result, _, want, _ = _same_bytes(STRIDED)
    a = want.memory.buffer("A").view("<i2").reshape(4, 12)
    # B holds A transposed (element (m, n) at m + 4 n); C takes B's 48 elements in storage
    # order as a 4 x 12 array and spreads them with element strides [24, 2]
    c = want.memory.buffer("C").view("<i2").reshape(4, 24)[:, ::2]
    np.testing.assert_array_equal(c, a.T.reshape(4, 12))
    regs = dict(
        copy_registers(result.plan.tasks[0], allocate(result.plan.buffers, result.device)[0])
    )
    # element-wise on the destination (2-byte runs), 4 x 12 elements
    assert (regs["COUNT0"], regs["COUNT1"], regs["COUNT2"]) == (2, 12, 4)
    assert (regs["SRC_STRIDE1"], regs["DST_STRIDE1"]) == (2, 8)


def _random_copies(seed):
    rng = random.Random(seed)
    slot, slots = 48, 5
    lines = [
        'device "exec_device.nem"',
        f"buffer S : L2 (size={slot * slots})",
        f"buffer X : L1 (size={slot * slots})",
    ]
    tasks = []
    for k in range(rng.randint(4, 14)):
        src = (rng.choice("SX"), rng.randrange(slots))
        dst = (("X" if src[0] == "S" else rng.choice("SX")), rng.randrange(slots))
        if dst == src:
            dst = (dst[0], (dst[1] + 1) % slots)
        deps = [j for j in range(k) if tasks[j][1] in (src, dst) or tasks[j][0] == dst]
        tasks.append((src, dst))
        dl = f", deps=[{', '.join(f't{j}' for j in deps)}]" if deps else ""
        lines.append(
            f"t{k} = transfer.async(dst=region({dst[0]}, {dst[1] * slot}, {slot}), "
            f"src=region({src[0]}, {src[1] * slot}, {slot}){dl})"
        )
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(12))
def test_random_copy_programs(seed):
    _same_bytes(_random_copies(seed), seed)


def test_token_pressure_binds_with_few_tokens_or_is_refused(tmp_path):
    for name in ("exec_device.nem",):
        shutil.copy(PROGRAMS / name, tmp_path / name)
    text = (
        (PROGRAMS / "exec_device.nem")
        .read_text()
        .replace("max_active_tokens = 16", "max_active_tokens = 2")
    )
    (tmp_path / "two.nem").write_text(text)
    chain = ['device "two.nem"', "buffer S : L2 (size=64)", "buffer X : L1 (size=64)"]
    for k in range(20):  # a chain of dependent copies: one token at a time suffices
        a, b = ("S", "X") if k % 2 == 0 else ("X", "S")
        dep = f", deps=[t{k - 1}]" if k else ""
        chain.append(f"t{k} = transfer.async(dst=region({b}, 0, 64), src=region({a}, 0, 64){dep})")
    result = check_text("\n".join(chain) + "\n", file="c.nem", base_dir=str(tmp_path))
    assert result.ok, [str(d) for d in result.diagnostics]
    program = bind(result)
    assert {t.signal for t in program.tasks[:-1]} <= {1, 2}
    init = _initial(result, 3)
    want = execute(result.plan, result.device, init)
    plan = plan_from_binary(decode(encode(program)), result.device)
    got = execute(plan, result.device, init, in_order=True)
    np.testing.assert_array_equal(got.memory.buffer("S"), want.memory.buffer("S"))
    # four loop iterations in flight together, all ordered before the task after the loop:
    # no NEM token is live (the checker accepts it), but the sequencer needs one physical
    # token per iteration to make the last task wait for all four
    fan = [
        'device "two.nem"',
        "buffer S : L2 (size=320)",
        "buffer X : L1 (size=256)",
        "loop i in [0..3] @max_in_flight(4):",
        "    transfer.async(dst=region(X, i * 64, 64), src=region(S, i * 64, 64))",
        "endloop",
        "c = transfer.async(dst=region(S, 256, 64), src=region(X, 0, 64))",
        "wait(c)",
    ]
    result = check_text("\n".join(fan) + "\n", file="f.nem", base_dir=str(tmp_path))
    assert result.ok, [str(d) for d in result.diagnostics]
    with pytest.raises(BindError, match="3 tokens would be live at once, the device has 2"):
        bind(result)


def test_binary_for_another_device_or_with_bad_tokens_is_refused():
    result = _check(TILED)
    program = bind(result)
    other = _check(TILED.replace('"exec_device.nem"', '"exec_device_small.nem"')).device
    with pytest.raises(TaskFormatError, match="bound for another device"):
        plan_from_binary(program, other)
    # a task waiting on a token nobody signals would hang the sequencer
    bad = program.tasks[1].__class__(**{**program.tasks[1].__dict__, "wait": 1 << 30})
    broken = program.__class__(
        program.device_hash, program.buffers, (program.tasks[0], bad, *program.tasks[2:])
    )
    with pytest.raises(TaskFormatError, match=r"task 1: token 30 out of range .* has 16"):
        plan_from_binary(broken, result.device)
    # exec_device's sequencer has 16 tokens: token 15 is in range, but nobody signals it
    bad = bad.__class__(**{**bad.__dict__, "wait": 1 << 15})
    broken = program.__class__(
        program.device_hash, program.buffers, (program.tasks[0], bad, *program.tasks[2:])
    )
    with pytest.raises(TaskFormatError, match="waits on token 15, which no earlier task signals"):
        plan_from_binary(broken, result.device)


def test_wrong_token_reuse_is_caught_by_the_executor_as_a_race():
    # 0: a long copy into X[0:4096]; 1: a short copy; 2 reads X[0:64] after 0; 3 after 1
    text = """device "exec_device.nem"
buffer S : L2 (size=8192)
buffer X : L1 (size=8192)
t0 = transfer.async(dst=region(X, 0, 4096), src=region(S, 0, 4096))
t1 = transfer.async(dst=region(X, 4096, 64), src=region(S, 4096, 64))
t2 = transfer.async(dst=region(S, 6144, 64), src=region(X, 0, 64), deps=[t0])
t3 = transfer.async(dst=region(S, 7168, 64), src=region(X, 4096, 64), deps=[t1])
"""
    result = _check(text)
    program = bind(result)
    assert [t.signal for t in program.tasks] == [1, 2, 0, 0]
    execute(plan_from_binary(program, result.device), result.device, in_order=True)  # fine as bound
    # both producers on token 0: task 2 now waits for task 1 and may start during task 0
    wrong = [
        program.tasks[0],
        program.tasks[1].__class__(**{**program.tasks[1].__dict__, "signal": 1}),
        *program.tasks[2:],
    ]
    wrong[3] = wrong[3].__class__(**{**wrong[3].__dict__, "wait": 1})
    # and task 2 on the DMA that task 1 frees early
    wrong[2] = wrong[2].__class__(**{**wrong[2].__dict__, "instance": wrong[1].instance})
    bad = program.__class__(program.device_hash, program.buffers, tuple(wrong))
    with pytest.raises(RaceError, match=r"task 2 .*task 0"):
        execute(plan_from_binary(bad, result.device), result.device, in_order=True)


def test_cli_bind_dis_run(tmp_path):
    src = tmp_path / "tiles.nem"
    src.write_text(TILED)
    shutil.copy(PROGRAMS / "exec_device.nem", tmp_path / "exec_device.nem")
    binary = tmp_path / "tiles.bin"
    assert main(["nem", "bind", str(src), "-o", str(binary)]) == 0
    assert binary.read_bytes()[:4] == b"NEMB"
    assert main(["nem", "dis", str(binary)]) == 0
    listing = subprocess.run(
        [sys.executable, "-m", "npu", "nem", "dis", str(binary)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "task 0: SDMA[0]" in listing and "SRC_LO" in listing and "COUNT0" in listing
    assert "buffer IN" in listing
    result = _check(TILED)
    init = _initial(result, 9)
    inp = tmp_path / "in.npz"
    np.savez(inp, **init)
    out_text, out_bin = tmp_path / "a.npz", tmp_path / "b.npz"
    assert main(["nem", "run", str(src), "--memory", str(inp), "-o", str(out_text)]) == 0
    dev = str(tmp_path / "exec_device.nem")
    assert (
        main(["nem", "run", str(binary), "--device", dev, "--memory", str(inp), "-o", str(out_bin)])
        == 0
    )
    a, b = np.load(out_text), np.load(out_bin)
    assert sorted(a.files) == sorted(b.files)
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name])
    # a truncated binary and a binary without its device are clear errors
    short = tmp_path / "short.bin"
    short.write_bytes(binary.read_bytes()[:-3])
    proc = subprocess.run(
        [sys.executable, "-m", "npu", "nem", "dis", str(short)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "truncated" in proc.stderr and "Traceback" not in proc.stderr
    assert main(["nem", "run", str(binary), "-o", str(out_bin)]) == 2


def test_copy_task_register_left_unwritten_reads_as_zero():
    result = _check(STRIDED)
    program = bind(result)
    task = program.tasks[0]
    count0 = 4  # COUNT0 in the copy map (docs/task-format.md)
    short = task.__class__(**{**task.__dict__, "writes": tuple(w for w in task.writes
                                                            if w[0] != count0)})  # fmt: skip
    broken = program.__class__(program.device_hash, program.buffers, (short, *program.tasks[1:]))
    # the sequencer clears the staging registers at each task header: COUNT0 is 0
    with pytest.raises(TaskFormatError, match="task 0: a copy count is 0"):
        plan_from_binary(broken, result.device)


def test_copy_writing_bytes_twice_is_refused():
    result = _check(STRIDED)
    program = bind(result)
    task = program.tasks[0]
    # DST_STRIDE1 (register 7) = 0: the rows of dimension 1 land on the same bytes
    writes = dict(task.writes)
    assert writes[5] > 1 and writes[7] > 0
    writes[7] = 0
    bad = task.__class__(**{**task.__dict__, "writes": tuple(writes.items())})
    broken = program.__class__(program.device_hash, program.buffers, (bad, *program.tasks[1:]))
    with pytest.raises(TaskFormatError, match=r"task 0: the copy moves .* bytes into a destinat"):
        plan_from_binary(broken, result.device)


def test_binary_issues_in_order_like_the_sequencer():
    # t1 waits for the long t0; t2 (on the sDMA) depends on nothing. The NEM semantics
    # start t2 at once;
    # the sequencer reads t2 only after it has issued t1, that is after t0 is done.
    text = """device "exec_device.nem"
buffer D : DDR (size=64)
buffer S : L2 (size=8192)
buffer X : L1 (size=8192)
t0 = transfer.async(dst=region(X, 0, 4096), src=region(S, 0, 4096))
t1 = transfer.async(dst=region(S, 4096, 64), src=region(X, 0, 64), deps=[t0])
t2 = transfer.async(dst=region(S, 6144, 64), src=region(D, 0, 64))
"""
    result = _check(text)
    plan = plan_from_binary(bind(result), result.device)
    free = {r.index: r for r in execute(plan, result.device).records}
    seq = {r.index: r for r in execute(plan, result.device, in_order=True).records}
    assert free[2].start == 0
    assert seq[2].start == seq[1].start == seq[0].end > 0


def test_long_contiguous_copies_fold_into_rows_of_at_most_max_copy_count():
    """The copy units count 16 bits per dimension (nem.taskformat.MAX_COPY_COUNT): a
    200,000-byte contiguous transfer binds as rows (200,000 = 4 x 50,000, the largest
    divisor that fits is 50,000) and moves the same bytes; a prime length cannot fold."""
    from nem.binder import fold_run
    from nem.taskformat import MAX_COPY_COUNT, REGISTER_MAPS, Unit

    assert MAX_COPY_COUNT == 65535
    assert fold_run(65535, []) == (65535, [])
    assert fold_run(65536, []) == (32768, [(2, 32768, 32768)])
    assert fold_run(200_000, [(3, 7, 9)]) == (50_000, [(4, 50_000, 50_000), (3, 7, 9)])
    assert fold_run(65537, []) == (65537, [])             # prime: no divisor fits
    assert fold_run(70_000, [(2, 1, 1)] * 3) == (70_000, [(2, 1, 1)] * 3)   # no free dim
    text = """device "exec_device.nem"
program long:
buffer A : DDR (size=200000)
buffer B : L2 (size=200000)
t = transfer.async(dst=region(B, 0, 200000), src=region(A, 0, 200000))
wait(t)
"""
    _, program, _, _ = _same_bytes(text)
    regs = REGISTER_MAPS[Unit.SDMA]
    writes = {regs.registers[i].name: v for i, v in program.tasks[0].writes}
    assert (writes["COUNT0"], writes["COUNT1"], writes["SRC_STRIDE1"]) == (50_000, 4, 50_000)
    prime = text.replace("200000", "65537")
    with pytest.raises(BindError, match=r"a copy dimension of 65537 \(the copy units count "
                                        r"at most 65535"):
        bind(_check(prime))
