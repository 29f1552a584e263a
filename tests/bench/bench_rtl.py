"""Benchmark of the RTL blocks: throughput from testbench counters, ECP5 resources.

Prints:
* the ABCD decoder's sustained bytes/cycle and instructions/cycle (cocotb + Verilator,
  counters in ``sim/tb_decoder.py``, no stalls, 1200 random instructions per parameter set);
* the AXI4 burst engines' words/cycle on contiguous reads and writes;
* Yosys ``synth_ecp5`` cell counts of every top-level component (``npu synth``).

Run: ``make bench`` (or ``.venv/bin/python tests/bench/bench_rtl.py``).
"""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from npu.tools.cli import main as npu_main  # noqa: E402
from sim.regression import REGRESSIONS  # noqa: E402
from sim.runner import build, run_cocotb  # noqa: E402


def decoder_throughput():
    print("ABCD decoder throughput (cocotb + Verilator, testbench cycle counters)")
    for regression in REGRESSIONS:
        if regression.module != "sim.tb_decoder":
            continue
        built = build(regression.design)
        run_cocotb(built, regression.module, testcase="throughput_without_stalls",
                   name="bench-throughput", seed=1)
        stats = json.loads((built.directory / "runs" / "bench-throughput" /
                            "throughput.json").read_text())
        print(f"  {regression.id}: {stats['bytes']} bytes, {stats['instructions']} "
              f"instructions in {stats['cycles']} cycles -> "
              f"{stats['bytes_per_cycle']:.4f} bytes/cycle, "
              f"{stats['instructions_per_cycle']:.4f} instructions/cycle")


def axi_throughput():
    print("AXI4 burst engines, contiguous 4096-word transfers (cocotb + Verilator, AxiRam)")
    for regression in REGRESSIONS:
        if regression.module != "sim.tb_axi":
            continue
        built = build(regression.design)
        run_cocotb(built, regression.module, testcase="contiguous_throughput",
                   name="bench-throughput", seed=1)
        stats = json.loads((built.directory / "runs" / "bench-throughput" /
                            "throughput.json").read_text())
        for kind, row in stats.items():
            print(f"  {regression.id} {kind}: {row['beats']} words in {row['cycles']} cycles "
                  f"-> {row['words_per_cycle']:.4f} of bus width")


if __name__ == "__main__":
    decoder_throughput()
    axi_throughput()
    # A design that the synthesis tool fails on is reported in the table; the benchmark
    # still prints every other number and succeeds.
    npu_main(["synth", "-o", str(REPO / "build" / "synth")])
