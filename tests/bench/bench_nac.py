"""Benchmark of the NAC container (``make bench``).

* Parse and write time of a file with 100,000 instructions (best of 3).
* Load time of 1 GiB of external weights (16 tensors of 64 MiB in ``<stem>.safetensors``)
  and the resident-memory growth while opening and touching them: the tensors are
  memory-mapped, so the growth stays far below 1 GiB.
"""

import random
import resource
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from nac import DataSection, Instruction, NacFile, dumps, loads, read_nac  # noqa: E402


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def big_program(n):
    rng = random.Random(0)
    ops = [Instruction(2, 0)]
    for i in range(1, n - 1):
        ops.append(Instruction(11, 100, None, (-rng.randint(1, min(i, 50)),
                                               -rng.randint(1, min(i, 50)))))
    ops.append(Instruction(3, 0, (1, 0), (-1,)))
    return NacFile(num_inputs=1, num_outputs=1, perm=((100, "TT"),), ops=tuple(ops))


def bench_parse():
    nac = big_program(100_000)
    raw = dumps(nac)
    parse = min(_timed(lambda: loads(raw)) for _ in range(3))
    write = min(_timed(lambda: dumps(nac)) for _ in range(3))
    print(f"100k instructions ({len(raw) / 2**20:.2f} MiB): parse {parse * 1000:.0f} ms "
          f"({parse / 100_000 * 1e6:.2f} us/instruction), write {write * 1000:.0f} ms")


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_external_weights():
    from safetensors.numpy import save_file

    out = REPO / "build" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    nac_path = out / "big.nac"
    st_path = out / "big.safetensors"
    names = [f"layer{k}.weight" for k in range(16)]
    if not st_path.is_file() or st_path.stat().st_size < 2**30:
        block = np.ones((4096, 4096), dtype=np.float32)  # 64 MiB each
        save_file({name: block for name in names}, str(st_path))
    nac = NacFile(internal_weights=False,
                  data=DataSection(params=tuple(enumerate(names))),
                  ops=tuple(Instruction(2, 1, (2, k)) for k in range(len(names))))
    nac_path.write_bytes(dumps(nac))
    before = rss_mib()
    start = time.perf_counter()
    loaded = read_nac(nac_path)
    arrays = [loaded.weights[name] for name in names]
    opened = time.perf_counter() - start
    checksum = sum(float(a[0, 0]) + float(a[-1, -1]) for a in arrays)
    touched = time.perf_counter() - start
    grown = rss_mib() - before
    size = st_path.stat().st_size / 2**30
    print(f"external weights {size:.2f} GiB in {len(names)} tensors: open + map "
          f"{opened * 1000:.1f} ms, + touch first/last element of each {touched * 1000:.1f} ms; "
          f"resident memory grew {grown:.1f} MiB (not copied); checksum {checksum:.0f}")


if __name__ == "__main__":
    bench_parse()
    bench_external_weights()
