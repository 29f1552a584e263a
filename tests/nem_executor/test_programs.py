"""Whole programs in the executor: the corrected upstream examples against independent
references, the race detector, and overlap in the cycle model.

The references here never call the executor's kernels: the convolution is an im2col
matrix product (the executor sums shifted windows), the requantisation is written out from
``docs/numerics.md`` with numpy int64 arithmetic.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nem.checker import check_file, check_text
from nem.executor import ExecError, RaceError, execute, run_file

PROGRAMS = Path(__file__).parent / "programs"


def _requant_ref(acc, x_scale, w_scales, y_scale, y_zp, lo=-128, hi=127):
    """acc (int64) -> int8 by the docs/numerics.md formulas, one channel at a time."""
    out = np.empty(acc.shape, dtype=np.int64)
    for n, ws in enumerate(w_scales):
        real = x_scale * ws / y_scale
        mant, exp = math.frexp(real)
        m = math.floor(mant * 2**31 + 0.5)
        if m == 2**31:
            m //= 2
            exp += 1
        t = 31 - exp
        col = acc[..., n] * m
        out[..., n] = np.clip(((col + (1 << (t - 1))) >> t) + y_zp, lo, hi)
    return out


def _im2col_conv(x, w, pad_value, pads):
    """NHWC x HWIO, stride 1, dilation 1, via an explicit im2col matrix (int64)."""
    n, h, wd, c = x.shape
    kh, kw, _, f = w.shape
    top, left, bottom, right = pads
    xp = np.full((n, h + top + bottom, wd + left + right, c), pad_value, dtype=np.int64)
    xp[:, top : top + h, left : left + wd] = x
    oh, ow = h + top + bottom - kh + 1, wd + left + right - kw + 1
    cols = np.empty((n, oh, ow, kh, kw, c), dtype=np.int64)
    for i in range(oh):
        for j in range(ow):
            cols[:, i, j] = xp[:, i : i + kh, j : j + kw, :]
    return cols.reshape(n * oh * ow, -1) @ w.reshape(-1, f).astype(np.int64), (n, oh, ow, f)


def test_conv2d_relu_matches_reference():
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, size=(4, 16, 16, 64), dtype=np.int8)
    w = rng.integers(-127, 128, size=(3, 3, 64, 128), dtype=np.int8)
    b = rng.integers(-3000, 3000, size=128).astype("<i4")
    result = run_file(PROGRAMS / "conv2d_relu.nem", {"X_L2": x, "W_L2": w, "B_L2": b})
    y = result.memory.buffer("Y_L2").view(np.int8).reshape(4, 16, 16, 128)
    w_scales = [0.004, 0.005, 0.006, 0.007] * 32
    for tile in range(4):
        acc, shape = _im2col_conv(x[tile : tile + 1], w, pad_value=-3, pads=(1, 1, 1, 1))
        # (x - zx) * w summed: subtract the zero point's contribution explicitly.
        acc = acc.reshape(shape) + b - (-3) * w.astype(np.int64).sum(axis=(0, 1, 2))
        # The executor folds zx into the bias and pads with zx; the sum above pads with zx
        # too and removes zx * sum(w) over the whole window, which is the same number.
        want = _requant_ref(acc, 0.05, w_scales, 0.1, 5)
        want = np.maximum(want, 5)  # ReLU on the quantised output: max(q, zero point)
        np.testing.assert_array_equal(y[tile], want[0], err_msg=f"tile {tile}")


def test_gemm_bias_relu_matches_reference():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((256, 256)).astype(np.float16)
    b = (rng.standard_normal((256, 128)) / 16).astype(np.float16)
    c = rng.standard_normal(128).astype(np.float16)
    result = run_file(PROGRAMS / "gemm_bias_relu.nem", {"A_L2": a, "B_L2": b, "C_L2": c})
    y = result.memory.buffer("Y_L2").view(np.float16).reshape(256, 128)
    # gemm: float64 sum rounded once to f16; relu on f16 values is exact.
    exact = a.astype(np.float64) @ b.astype(np.float64) + c.astype(np.float64)
    want = np.maximum(exact.astype(np.float16), np.float16(0))
    np.testing.assert_array_equal(y, want)


RACY = """
device "exec_device.nem"
buffer S : L2 (size=4096)
buffer X : L1 (size=4096)
buffer Y : L1 (size=4096)
let s = region(S, 0, 1024)
let x = region(X, 0, 1024) elem=i8, shape=[1024], layout=C
let y = region(Y, 0, 1024) elem=i8, shape=[1024], layout=C
tA = transfer.async(dst=x, src=s)
tB = relu.async in x out y{deps}
wait(tB)
"""


def _plan(text):
    result = check_text(text, file="racy.nem", base_dir=str(PROGRAMS))
    return result


def test_race_detector_names_both_tasks_region_and_bytes():
    result = _plan(RACY.format(deps=""))
    # The static checker sees it too (E901); the executor's detector finds it in flight.
    assert {d.code for d in result.diagnostics if d.severity == "error"} == {"E901"}
    with pytest.raises(RaceError) as err:
        execute(result.plan, result.device, {"S": np.arange(1024, dtype=np.uint8)})
    msg = str(err.value)
    assert "tA" in msg and "tB" in msg, msg
    assert "bytes [0, 1024) of buffer X" in msg, msg
    assert "x" in msg


def test_same_program_with_the_dependency_runs():
    result = _plan(RACY.format(deps=" deps=[tA]"))
    assert result.ok, [str(d) for d in result.diagnostics]
    data = np.arange(1024, dtype=np.uint8)
    run = execute(result.plan, result.device, {"S": data})
    got = run.memory.buffer("Y")[:1024].view(np.int8)
    np.testing.assert_array_equal(got, np.maximum(data.view(np.int8), 0))
    first, second = run.records
    assert second.start >= first.end


def _gemm_with_depth(depth: int) -> str:
    text = (PROGRAMS / "gemm_bias_relu.nem").read_text()
    return text.replace("@max_in_flight(2)", f"@max_in_flight({depth})")


@pytest.mark.parametrize("depth", [1, 2])
def test_cycle_model_overlap_follows_max_in_flight(depth):
    result = check_text(_gemm_with_depth(depth), file="g.nem", base_dir=str(PROGRAMS))
    assert result.ok
    run = execute(result.plan, result.device)
    busy = sum(run.busy().values())
    if depth == 1:
        # Every task waits for the one before it: no two units are ever busy together.
        assert run.total_cycles == busy
        spans = sorted((r.start, r.end) for r in run.records)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    else:
        assert run.total_cycles < busy
        # The next tile's transfer runs while the current gemm computes.
        overlap = [
            (r, s)
            for r in run.records
            for s in run.records
            if r.label.startswith("tA") and s.label.startswith("tG")
            and r.start < s.end and s.start < r.end
        ]
        assert overlap


def test_trace_and_summary(tmp_path):
    result = check_file(PROGRAMS / "gemm_bias_relu.nem")
    run = execute(result.plan, result.device)
    path = tmp_path / "trace.json"
    run.write_trace(path)
    trace = json.loads(path.read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(result.plan.tasks)
    assert {e["name"] for e in spans} >= {"tG (line 60, i=0)"}
    assert max(e["ts"] + e["dur"] for e in spans) == run.total_cycles
    text = run.summary()
    assert f"total cycles: {run.total_cycles}" in text
    assert "E0.NMU[0]" in text
    overall, busy = run.mac_utilisation()
    assert 0 < overall <= busy <= 1
    moved = run.bytes_moved()
    assert moved["L2->L1[0]"] == 4 * 64 * 256 * 2 + 256 * 128 * 2
    assert moved["L1[0]->L2"] == 4 * 64 * 128 * 2


def test_initial_contents_errors():
    result = check_file(PROGRAMS / "gemm_bias_relu.nem")
    with pytest.raises(ExecError, match="not a buffer of the program"):
        execute(result.plan, result.device, {"nope": np.zeros(4, np.uint8)})
    with pytest.raises(ExecError, match=r"hold 65537 bytes; the buffer has 65536"):
        execute(result.plan, result.device, {"B_L2": np.zeros(65537, np.uint8)})


def test_abstract_device_is_rejected():
    text = 'include "npm_baseline_1.0.nem"\ndevice npm_baseline_1_0\nbuffer X : L2 (size=64)\n'
    result = check_text(text, file="a.nem", base_dir=str(PROGRAMS))
    with pytest.raises(ExecError, match="needs a device with a topology"):
        execute(result.plan, result.device)


def test_cli_run(tmp_path):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((256, 256)).astype(np.float16)
    inp = tmp_path / "in.npz"
    np.savez(inp, A_L2=a, B_L2=np.ones((256, 128), np.float16), C_L2=np.zeros(128, np.float16))
    out = tmp_path / "out.npz"
    trace = tmp_path / "t.json"
    cmd = [sys.executable, "-m", "npu", "nem", "run", str(PROGRAMS / "gemm_bias_relu.nem"),
           "--memory", str(inp), "-o", str(out), "--trace", str(trace)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "total cycles" in proc.stderr
    got = np.load(out)
    y = got["Y_L2"].view(np.float16).reshape(256, 128)
    want = np.maximum(a.astype(np.float64).sum(axis=1), 0).astype(np.float16)
    np.testing.assert_array_equal(y, np.repeat(want[:, None], 128, axis=1))
    assert set(got.files) == {"A_L2", "B_L2", "C_L2", "Y_L2", "A_L1", "B_L1", "Y_L1"}
    assert json.loads(trace.read_text())["traceEvents"]
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    proc = subprocess.run([*cmd[:-4], "--memory", str(bad), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "not a readable .npz file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_copy_cycles_count_the_runs_the_copy_unit_walks(tmp_path):
    # a device with 3 extra cycles per contiguous run on the DMA
    (tmp_path / "rows.nem").write_text(
        (PROGRAMS / "exec_device.nem").read_text().replace(
            "bytes_per_cycle = 32", "bytes_per_cycle = 32\n            row_cycles = 3"
        )
    )
    text = """device "rows.nem"
buffer A : L2 (size=96)
buffer B : L1 (size=96)
let src = region(A, 0, 96) elem=i16, shape=[4, 12], layout=MN
t1 = transfer.async(dst=region(B, 0, 96) elem=i16, shape=[4, 12], strides=[1, 4], src=src)
t2 = transfer.async(dst=region(A, 0, 96), src=region(B, 0, 96), deps=[t1])
"""
    result = check_text(text, file="r.nem", base_dir=str(tmp_path))
    assert result.ok, [str(d) for d in result.diagnostics]
    first, second = execute(result.plan, result.device).records
    # t1 transposes: every 2-byte element is its own run, 48 runs; t2 is one dense run.
    # DMA latency 8 (default) + ceil(96 / 32) bytes + 3 per run
    assert first.end - first.start == 8 + 3 + 3 * 48
    assert second.end - second.start == 8 + 3 + 3 * 1
