"""Benchmark of the NEM executor (``make bench``).

A tiled 256x256x256 int8 GEMM: B (256x256) resident in L1, A in four 64-row tiles
double-buffered in L1 (``@max_in_flight(2)``), each tile's i8 result stored back to L2.
Prints the executor's wall time (best of 5; check + run, and run alone), and the cycle
model's numbers for the device ``exec_npu`` (256 int8 MACs per cycle): total cycles, MAC
utilisation, unit busy times and bytes per path. The result is compared with a numpy
int64 reference before anything is printed.
"""

import math
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from nem.checker import check_text  # noqa: E402
from nem.executor import execute  # noqa: E402

PROGRAMS = REPO / "tests" / "nem_executor" / "programs"
M = K = N = 256
TM = 64

PROGRAM = f"""
device "exec_device.nem"
program gemm_256:
const M = {M}
const K = {K}
const N = {N}
const TM = {TM}
const T = M / TM
buffer A2 : L2 (size=M * K)
buffer B2 : L2 (size=K * N)
buffer Y2 : L2 (size=M * N)
buffer A1 : L1 (size=2 * TM * K)
buffer B1 : L1 (size=K * N)
buffer Y1 : L1 (size=2 * TM * N)
let Bl1 = region(B1, 0, K * N) elem=i8, shape=[K, N], layout=KN,
          quant=per_tensor(scale=0.01, zero_point=0)
tB = transfer.async(dst=Bl1, src=region(B2, 0, K * N))
wait(tB)
loop i in [0..T-1] @max_in_flight(2):
  let Ai = region(A1, (i mod 2) * TM * K, TM * K) elem=i8, shape=[TM, K], layout=MK,
           quant=per_tensor(scale=0.02, zero_point=3)
  let Yi = region(Y1, (i mod 2) * TM * N, TM * N) elem=i8, shape=[TM, N], layout=MN,
           quant=per_tensor(scale=0.5, zero_point=-1)
  tA = transfer.async(dst=Ai, src=region(A2, i * TM * K, TM * K))
  tG = gemm.async in Ai, Bl1 out Yi deps=[tA] accum_type=i32
  tS = store.async(dst=region(Y2, i * TM * N, TM * N), src=Yi, deps=[tG])
endloop
"""


def reference(a, b):
    acc = (a.astype(np.int64) - 3) @ b.astype(np.int64)
    real = 0.02 * 0.01 / 0.5
    mant, exp = math.frexp(real)
    m, t = math.floor(mant * 2**31 + 0.5), 31 - exp
    return np.clip(((acc * m + (1 << (t - 1))) >> t) - 1, -128, 127).astype(np.int8)


def main():
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, size=(M, K), dtype=np.int8)
    b = rng.integers(-127, 128, size=(K, N), dtype=np.int8)
    best_all = best_run = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        checked = check_text(PROGRAM, file="gemm_256.nem", base_dir=str(PROGRAMS))
        t1 = time.perf_counter()
        result = execute(checked.plan, checked.device, {"A2": a, "B2": b})
        t2 = time.perf_counter()
        best_all, best_run = min(best_all, t2 - t0), min(best_run, t2 - t1)
    assert checked.ok, [str(d) for d in checked.diagnostics]
    y = result.memory.buffer("Y2").view(np.int8).reshape(M, N)
    np.testing.assert_array_equal(y, reference(a, b))
    overall, busy = result.mac_utilisation()
    print(f"tiled {M}x{K}x{N} int8 GEMM, {len(result.records)} tasks (TM={TM}, B resident)")
    print(f"  executor wall time: run {best_run * 1e3:.1f} ms, check + run "
          f"{best_all * 1e3:.1f} ms (best of 5)")
    print(f"  cycles: {result.total_cycles}  (ideal {M * K * N // 256} at 256 MACs/cycle)")
    print(f"  MAC utilisation: {100 * overall:.2f} % of the run, {100 * busy:.2f} % while busy")
    for line in result.summary().splitlines()[2:]:
        print("  " + line)


if __name__ == "__main__":
    main()
