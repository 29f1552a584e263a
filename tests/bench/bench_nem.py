"""Benchmark of the NEM toolkit checker (``make bench``).

Generates programs of 10,000 task instances for the device ``test_npu`` of the conformance
corpus and times the whole check (parse, device resolution, the walk with loops unrolled,
type families, shapes, hazards, live tokens), best of 5:

* ``loop``: a tiled pipeline, 2,500 iterations of transfer -> gemm -> relu -> store with
  ping-pong L1 slots and ``@max_in_flight(2)`` after one weight transfer; the source is 20
  lines, the work is in unrolling and in the happens-before/race analysis;
* ``flat``: the same 10,000 tasks written out (2,500 groups of four with their own regions
  and a wait), so that parsing counts too; parse and format times are printed as well.

Then it binds two 10,000-task programs (``copies``: 5,000 iterations of two transfers;
``pipeline``: the loop program above, with gemm and relu on the compute units), encodes and
decodes the binaries and rebuilds the executor's plan from them.

Each program is first checked to be valid (no diagnostics) and to have 10,000 task
instances; then prints milliseconds per check and microseconds per task.
"""

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from nem.checker import check_text  # noqa: E402
from nem.formatter import format_document  # noqa: E402
from nem.parser import parse  # noqa: E402

CORPUS = REPO / "tests" / "nem_toolkit" / "corpus"
TASKS = 10_000
GROUPS = TASKS // 4

HEADER = f"""device "test_device.nem"
program bench:
const TM = 4
const K = 16
const N = 16
const T = {GROUPS}
buffer A_L2 : L2 (size=T * TM * K * 2)
buffer B_L2 : L2 (size=K * N * 2)
buffer Y_L2 : L2 (size=T * TM * N * 2)
buffer A_L1 : L1 (size=2 * TM * K * 2)
buffer B_L1 : L1 (size=K * N * 2)
buffer Y_L1 : L1 (size=2 * TM * N * 2)
let B = region(B_L1, 0, K * N * 2) elem=f16, shape=[K, N], layout=KN @readonly
tB = transfer.sync(dst=region(B_L1, 0, K * N * 2), src=region(B_L2, 0, K * N * 2))
"""

LOOP = (
    HEADER
    + """loop i in [0..T - 1] @max_in_flight(2):
    let A = region(A_L1, (i mod 2) * TM * K * 2, TM * K * 2) elem=f16, shape=[TM, K], layout=MK
    let Y = region(Y_L1, (i mod 2) * TM * N * 2, TM * N * 2) elem=f16, shape=[TM, N], layout=MN
    tA = transfer.async(dst=A, src=region(A_L2, i * TM * K * 2, TM * K * 2))
    tG = gemm.async in A, B out Y deps=[tA] accum_type=f32
    tR = relu.async in Y out Y deps=[tG]
    tS = store.async(dst=region(Y_L2, i * TM * N * 2, TM * N * 2), src=Y, deps=[tR])
endloop
"""
)


def flat_program() -> str:
    lines = [HEADER]
    for i in range(GROUPS):
        s = i % 2
        lines.append(
            f"let A{i} = region(A_L1, {s * 128}, 128) elem=f16, shape=[4, 16], layout=MK\n"
            f"let Y{i} = region(Y_L1, {s * 128}, 128) elem=f16, shape=[4, 16], layout=MN\n"
            f"a{i} = transfer.async(dst=A{i}, src=region(A_L2, {i * 128}, 128))\n"
            f"g{i} = gemm.async in A{i}, B out Y{i} deps=[a{i}] accum_type=f32\n"
            f"r{i} = relu.async in Y{i} out Y{i} deps=[g{i}]\n"
            f"s{i} = store.async(dst=region(Y_L2, {i * 128}, 128), src=Y{i}, deps=[r{i}])\n"
            f"wait(s{i})\n"
        )
    return "".join(lines)


def _best(fn, repeat=5):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench(name: str, text: str) -> float:
    result = check_text(text, file=f"{name}.nem", base_dir=str(CORPUS))
    assert result.diagnostics == [], "\n".join(str(d) for d in result.diagnostics[:5])
    # 4 tasks per group and the weight transfer; waits are not tasks
    assert result.task_count == TASKS + 1, result.task_count
    assert len(result.plan.tasks) == result.task_count
    best = _best(lambda: check_text(text, file=f"{name}.nem", base_dir=str(CORPUS)))
    lines = text.count("\n")
    print(
        f"check {name:4s}: {result.task_count} task instances, {lines} source lines: "
        f"{best * 1000:.0f} ms ({best / result.task_count * 1e6:.1f} us/task)"
    )
    return best


def main():
    bench("loop", LOOP)
    flat = flat_program()
    bench("flat", flat)
    doc = parse(flat, "flat.nem")
    fmt = _best(lambda: format_document(doc), repeat=3)
    par = _best(lambda: parse(flat, "flat.nem"), repeat=3)
    print(f"flat: parse {par * 1000:.0f} ms, format {fmt * 1000:.0f} ms")
    bench_bind("copies", COPIES)
    bench_bind("pipeline", LOOP)



COPIES = """device "test_device.nem"
program copies:
const T = 5000
const TB = 64
buffer S : L2 (size=T * TB)
buffer R : L2 (size=T * TB)
buffer X : L1 (size=2 * TB)
loop i in [0..T - 1] @max_in_flight(2):
    a = transfer.async(dst=region(X, (i mod 2) * TB, TB), src=region(S, i * TB, TB))
    b = transfer.async(dst=region(R, i * TB, TB), src=region(X, (i mod 2) * TB, TB), deps=[a])
    wait(b)
endloop
"""


def bench_bind(name: str, text: str) -> None:
    """Bind, encode and decode a 10,000-task program; rebuild the executor's plan from it."""
    from nem.binder import bind, plan_from_binary
    from nem.taskformat import decode, encode

    result = check_text(text, file=f"{name}.nem", base_dir=str(CORPUS))
    assert result.ok and result.task_count >= TASKS, result.diagnostics[:3]
    program = bind(result)
    data = encode(program)
    t_bind = _best(lambda: bind(result), repeat=3)
    t_enc = _best(lambda: encode(program), repeat=3)
    t_dec = _best(lambda: decode(data), repeat=3)
    t_plan = _best(lambda: plan_from_binary(decode(data), result.device), repeat=3)
    tokens = max(t.signal for t in program.tasks).bit_length()
    print(
        f"bind {name}: {len(program.tasks)} tasks, {len(data)} bytes, {tokens} physical "
        f"token(s): bind {t_bind * 1000:.0f} ms, encode {t_enc * 1000:.0f} ms, decode "
        f"{t_dec * 1000:.0f} ms, binary front-end {t_plan * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
