"""Benchmark of the end-to-end model runs on the engine RTL (issue 22).

For the digits CNN and the zoo models, compiled for the ``sim`` engine (``sim.model_steps``,
the steps of ``npu sim``): wall time of the whole step (train / compile + RTL run +
compare), the RTL run alone, simulated cycles per second of the cocotb run (cycles over the
cocotb test's own real time, from its ``results.xml``), the RTL / executor cycle ratio and
the NMU's array utilisation over the whole run from the engine's counters
(``NMU_MACS / (CYCLES * lanes * cols)``). ``--cold`` first builds the engine from nothing in
a fresh build directory (``NPU_BUILD_DIR``), to time the digits step with a cold Verilator
build.

    .venv/bin/python tests/bench/bench_e2e.py [--models digits mlp ...] [--cold]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from nem.target import SHIPPED


def _cocotb_seconds(run_dir):
    """Real seconds of the cocotb test (results.xml), or None."""
    try:
        case = ET.parse(Path(run_dir) / "results.xml").getroot().find(".//testcase")
        return float(case.get("time")) if case is not None else None
    except (OSError, ET.ParseError, TypeError, ValueError):
        return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["digits", "mlp", "cnn", "residual"])
    parser.add_argument("--device", default="sim", choices=tuple(SHIPPED))
    parser.add_argument("--cold", action="store_true",
                        help="time the digits step with a cold Verilator build first")
    args = parser.parse_args(argv)
    if args.cold:
        tmp = tempfile.mkdtemp(prefix="npu-cold-")
        os.environ["NPU_BUILD_DIR"] = tmp  # read when sim.runner is imported
    from npu.engine.config import EngineConfig
    from sim.model_steps import run_model_step

    cfg = EngineConfig.shipped(args.device)
    rows = []
    for name in (["digits"] if args.cold else args.models):
        began = time.monotonic()
        step = run_model_step(name, device=args.device, progress=lambda line: None)
        wall = time.monotonic() - began
        run = step.run
        if run is None:
            rows.append((name, step.result, wall, None, None, None, None, None, step.detail))
            continue
        c = run.rtl.counters
        cocotb = _cocotb_seconds(run.rtl.run_dir)
        rate = c["CYCLES"] / cocotb if cocotb else None
        util = (c.get("NMU_MACS", 0) / (c["CYCLES"] * cfg.nmu.lanes * cfg.nmu.cols)
                if cfg.nmu and c["CYCLES"] else 0.0)
        rows.append((name, step.result, wall, run.seconds, c["CYCLES"],
                     run.executor.total_cycles, rate, util,
                     "" if step.result == "pass" else step.detail))
    print(f"device {args.device}{' (cold Verilator build)' if args.cold else ''}")
    print(f"{'model':<10}{'result':>7}{'step s':>9}{'RTL s':>8}{'RTL cyc':>10}{'exe cyc':>10}"
          f"{'ratio':>7}{'cyc/s':>9}{'NMU util':>10}")
    for name, result, wall, rtl_s, cyc, exe, rate, util, detail in rows:
        if cyc is None:
            print(f"{name:<10}{result:>7}{wall:>9.1f}  {detail}")
            continue
        print(f"{name:<10}{result:>7}{wall:>9.1f}{rtl_s:>8.1f}{cyc:>10}{exe:>10}"
              f"{cyc / exe if exe else float('nan'):>7.2f}"
              f"{rate if rate else float('nan'):>9.0f}{100 * util:>9.1f}%"
              + (f"  {detail}" if detail else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
