"""Benchmark of the NEM engine: throughput and RTL cycles from its own hardware counters.

Prints, for each engine device in the cocotb regression (cocotb + Verilator, AxiRam DDR
answering at once, no stalls):
* contiguous 4096-byte copies: sDMA (DDR <-> L2) and DMA (L2 <-> L1) bytes per busy cycle
  of the unit as a fraction of the bus width (``BUSY_*`` and the byte counters, read over
  AXI4-Lite);
* for each regression program: the engine's ``CYCLES`` counter, the executor's cycle
  model for the same bound binary, and their ratio;
* with ``--synth``: Yosys ``synth_ecp5`` cell counts of the small device's engine
  (``npu synth --only nem_engine``; needs the ``fpga`` extra, about 7 minutes).
  ``make bench`` gets them from ``bench_rtl.py``, which synthesises every top level.

Run: ``make bench`` (or ``.venv/bin/python tests/bench/bench_engine.py [--synth]``).
"""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from npu.cli import main as npu_main  # noqa: E402
from sim.regression import REGRESSIONS  # noqa: E402
from sim.runner import build, run_cocotb  # noqa: E402


def engine_numbers():
    for regression in REGRESSIONS:
        if regression.module != "sim.tb_engine":
            continue
        built = build(regression.design)
        runs = built.directory / "runs"
        run_cocotb(built, regression.module, testcase="contiguous_throughput",
                   name="bench-throughput", seed=1)
        stats = json.loads((runs / "bench-throughput" / "engine_throughput.json").read_text())
        print(f"NEM engine {regression.id}: contiguous {stats['bytes']}-byte copies, "
              f"{stats['word_bytes']}-byte bus")
        print(f"  sDMA (DDR <-> L2): {stats['sdma_fraction']:.3f} of bus width per busy cycle")
        print(f"  DMA  (L2 <-> L1):  {stats['dma_fraction']:.3f} of bus width per busy cycle")
        run_cocotb(built, regression.module, testcase="programs_no_stalls",
                   name="bench-programs", seed=1)
        results = json.loads((runs / "bench-programs" / "engine_counters.json").read_text())
        contiguous = dict(stats["counters"])
        results["contiguous"] = contiguous
        print(f"  {'program':<12}{'tasks':>7}{'RTL cycles':>12}{'executor':>10}{'ratio':>8}"
              f"{'SEQ wait':>10}")
        for name, c in results.items():
            print(f"  {name:<12}{c['TASKS_DONE']:>7}{c['CYCLES']:>12}{c['executor_cycles']:>10}"
                  f"{c['CYCLES'] / c['executor_cycles']:>8.2f}{c['SEQ_WAIT']:>10}")


if __name__ == "__main__":
    engine_numbers()
    if "--synth" in sys.argv[1:]:
        npu_main(["synth", "--only", "nem_engine", "-o", str(REPO / "build" / "synth")])
