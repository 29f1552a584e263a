"""Benchmark: busy cycles of the CSTL on five random pools (Amaranth simulator).

The five pools are ``_pool_task`` of ``tests/hw/test_cstl_unit.py`` drawn from
``random.Random(5)`` (max pools of random shape, kernel, strides, pads, channel layout and
alignment, with or without a requantising table); each runs on a fresh ``CstlUnit`` by that
file's ``_run`` with no L1 denials and no gaps in the table or ``done`` streams. Printed
per pool: its window count and runs (``npu.cstl.poolwalk.pool_runs``), the ``busy``
counter, and ``busy`` less the ``table`` counter. A change of the unit's pipeline shows up
here as a fixed number of cycles per task (``docs/cstl.md``).

Run: ``make bench`` (or ``.venv/bin/python tests/bench/bench_cstl_pools.py``).
"""

import math
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "hw"))

import test_cstl_unit as cstl_tests  # noqa: E402

from npu.cstl.poolwalk import pool_runs  # noqa: E402
from npu.cstl.regs import decode  # noqa: E402


def main():
    rng = random.Random(5)
    tasks = []
    for _ in range(5):
        regs = cstl_tests._pool_task(rng)
        table = rng.randbytes(cstl_tests.TABLE_BYTES) if regs["TABLE"] == 0 else b""
        tasks.append((regs, table, bytearray(rng.randbytes(cstl_tests.LANES
                                                            * cstl_tests.DEPTH))))
    defaults = cstl_tests.L1Model.__init__.__defaults__
    cstl_tests.L1Model.__init__.__defaults__ = (0.0,)      # no denials
    try:
        results = cstl_tests._run(tasks, random.Random(1), table_gap=0, done_gap=0)
    finally:
        cstl_tests.L1Model.__init__.__defaults__ = defaults
    print(f"CSTL pools ({cstl_tests.LANES} lanes, no stalls): windows, runs, busy, "
          "busy - table")
    for (regs, _, _), (_, done, _, cnt) in zip(tasks, results, strict=True):
        task = decode(regs)
        windows = math.prod(task.dims[:3])
        runs = len(pool_runs(task, cstl_tests.LANES))
        assert done == (0, 0), done
        print(f"  {windows:5d} {runs:6d} {cnt['busy']:6d} {cnt['busy'] - cnt['table']:6d}")


if __name__ == "__main__":
    main()
