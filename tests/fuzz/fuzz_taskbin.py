"""Long fuzzing run of the task binary readers and the memory image reader (``make fuzz``).

Usage: ``python tests/fuzz/fuzz_taskbin.py --seconds 300 [--seed N]``. Seeds: the bound
binaries and memory images of the executor's tiled gemm + relu program, of a copy
pipeline, of an i4 gemm quantised per group (a group requantisation entry, binary 1.4) and
of a broadcast i8 add with a lookup-table relu after it (an eltwise entry and a table).
Each input is a seed with 1 to 8 random byte changes (overwrite, insert, delete,
most of them in the headers and the first task records), a truncation, or (half of the
binaries) a valid container with 1 to 3 register values, token masks or instances changed or
a register write dropped. A binary goes through ``taskformat.decode`` and, when it decodes,
``binder.plan_from_binary`` and a run in the executor; an image through
``memimage.read_image``. Only ``TaskFormatError``, ``MemoryImageError`` and the executor's
``ExecError`` (a race or a deadlock that damaged tokens cause) may come out; anything else,
or an input taking more than 10 s, is reported and ends the run with status 1. Prints the
number of inputs tried.
"""

import argparse
import dataclasses
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = REPO / "tests" / "nem_executor" / "programs"

from nem.binder import bind, plan_from_binary  # noqa: E402
from nem.checker import check_file, check_text  # noqa: E402
from nem.executor import ExecError, execute  # noqa: E402
from nem.memimage import MemoryImageError, build_image, read_image, write_image  # noqa: E402
from nem.taskformat import TaskFormatError, decode, encode  # noqa: E402

LIMIT = 10.0
COPIES = """device "exec_device.nem"
buffer S : L2 (size=1024)
buffer R : L2 (size=1024)
buffer X : L1 (size=512)
loop i in [0..3] @max_in_flight(2):
    a = transfer.async(dst=region(X, (i mod 2) * 256, 256), src=region(S, i * 256, 256))
    b = transfer.async(dst=region(R, (3 - i) * 256, 256), src=region(X, (i mod 2) * 256, 256),
                       deps=[a])
    wait(b)
endloop
"""

GEMM_I4 = """device "ops_device.nem"
buffer A : L1 (size=64)
buffer B : L1 (size=64)
buffer Y : L1 (size=64)
let a = region(A, 0, 8) elem=i8, shape=[2, 4], layout=MK,
    quant=per_tensor(scale=0.5, zero_point=-1)
let b = region(B, 0, 4) elem=i4, shape=[4, 2], layout=KN,
    quant=per_group(axis=0, group_size=3, scales=[0.25, 0.125], zero_points=[1, -2])
let y = region(Y, 0, 4) elem=i8, shape=[2, 2], layout=MN,
    quant=per_tensor(scale=1.0, zero_point=3)
t = gemm.async in a, b out y accum_type=i32
wait(t)
"""
ADD_RELU = """device "exec_device.nem"
buffer X : L1 (size=64)
buffer B : L1 (size=64)
buffer Y : L1 (size=64)
buffer Z : L1 (size=64)
let x = region(X, 0, 6) elem=i8, shape=[2, 3], layout=MN,
    quant=per_tensor(scale=0.5, zero_point=3)
let b = region(B, 0, 6) elem=i8, shape=[2, 3], strides=[0, 1],
    quant=per_tensor(scale=0.25, zero_point=-2)
let y = region(Y, 0, 6) elem=i8, shape=[2, 3], layout=MN,
    quant=per_tensor(scale=1.0, zero_point=0)
let z = region(Z, 0, 6) elem=i8, shape=[2, 3], layout=MN,
    quant=per_tensor(scale=1.0, zero_point=0)
t = add.async in x, b out y
r = relu.async in y out z deps=[t]
wait(r)
"""


def seeds(workdir: Path):
    """(binary bytes, image bytes, device) of each seed program."""
    results = [
        check_file(str(PROGRAMS / "gemm_bias_relu.nem")),
        check_text(COPIES, file="copies.nem", base_dir=str(PROGRAMS)),
        check_text(GEMM_I4, file="gemm_i4.nem", base_dir=str(PROGRAMS)),
        check_text(ADD_RELU, file="add_relu.nem", base_dir=str(PROGRAMS)),
    ]
    out = []
    for k, result in enumerate(results):
        assert result.ok, result.diagnostics[:3]
        program = bind(result)
        rng = np.random.default_rng(k)
        initial = {
            name: rng.integers(0, 256, buf.size, dtype=np.uint8)
            for name, buf in result.plan.buffers.items()
            if buf.level != "L1"
        }
        path = workdir / f"seed{k}.safetensors"
        write_image(path, build_image(program, result.plan, initial))
        out.append((encode(program), path.read_bytes(), result.device))
    return out


def damage(rng: random.Random, raw: bytes, hot: int) -> bytes:
    data = bytearray(raw)
    if rng.random() < 0.15:
        return bytes(data[: rng.randrange(len(data) + 1)])
    for _ in range(rng.randint(1, 8)):
        limit = hot if rng.random() < 0.8 else len(data)
        at = rng.randrange(min(limit, len(data)) + 1)
        op = rng.random()
        if op < 0.7 and at < len(data):
            data[at] = rng.randrange(256)
        elif op < 0.85:
            data.insert(at, rng.randrange(256))
        elif at < len(data):
            del data[at]
    return bytes(data)


INTERESTING = (0, 1, 2, 3, 7, 8, 255, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFF)


def damage_registers(rng: random.Random, raw: bytes) -> bytes:
    """Change 1 to 3 register values (or a token mask) of a valid binary and re-encode it."""
    program = decode(raw)
    tasks = list(program.tasks)
    for _ in range(rng.randint(1, 3)):
        k = rng.randrange(len(tasks))
        task = tasks[k]
        if rng.random() < 0.15:
            field = rng.choice(["wait", "signal", "instance"])
            value = rng.randrange(256) if field == "instance" else 1 << rng.randrange(32)
            tasks[k] = dataclasses.replace(task, **{field: value})
            continue
        writes = list(task.writes)
        at = rng.randrange(len(writes))
        value = rng.choice(INTERESTING) if rng.random() < 0.5 else rng.randrange(1 << 32)
        if rng.random() < 0.2:
            del writes[at]
        else:
            writes[at] = (writes[at][0], value)
        tasks[k] = dataclasses.replace(task, writes=tuple(writes))
    return encode(dataclasses.replace(program, tasks=tuple(tasks)))


def one_binary(raw: bytes, device) -> None:
    try:
        program = decode(raw)
        plan = plan_from_binary(program, device)
        execute(plan, device)
    except (TaskFormatError, ExecError):
        pass


def one_image(raw: bytes, path: Path) -> None:
    path.write_bytes(raw)
    try:
        read_image(path)
    except MemoryImageError:
        pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pool = seeds(work)
        scratch = work / "x.safetensors"
        tried = 0
        start_all = time.monotonic()
        deadline = start_all + args.seconds
        while time.monotonic() < deadline:
            binary, image, device = rng.choice(pool)
            is_image = rng.random() < 0.3
            if not is_image and rng.random() < 0.5:
                raw = damage_registers(rng, binary)
            else:
                raw = damage(rng, image if is_image else binary, 2048 if is_image else 1200)
            start = time.monotonic()
            try:
                if is_image:
                    one_image(raw, scratch)
                else:
                    one_binary(raw, device)
            except Exception as exc:  # the report is the point
                kind = "image" if is_image else "binary"
                print(f"FAILED on a damaged {kind} ({len(raw)} bytes): {exc!r}")
                (Path.cwd() / f"fuzz_taskbin_failure.{kind}").write_bytes(raw)
                sys.exit(1)
            if time.monotonic() - start > LIMIT:
                print(f"an input took {time.monotonic() - start:.1f} s")
                sys.exit(1)
            tried += 1
    elapsed = time.monotonic() - start_all
    print(f"fuzz_taskbin: {tried} inputs in {elapsed:.0f} s ({tried / elapsed:.0f}/s), no "
          f"failures (seed {args.seed})")


if __name__ == "__main__":
    main()
