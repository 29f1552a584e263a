"""Benchmark of the NEM engine: throughput and RTL cycles from its own hardware counters.

Prints, for each engine device in the cocotb regression (cocotb + Verilator, AxiRam DDR
answering at once, no stalls):
* contiguous 4096-byte copies: sDMA (DDR <-> L2) and DMA (L2 <-> L1) bytes per busy cycle
  of the unit as a fraction of the bus width (``BUSY_*`` and the byte counters, read over
  AXI4-Lite);
* for each regression program: the engine's ``CYCLES`` counter, the executor's cycle
  model for the same bound binary, and their ratio;
* for each program with NMU tasks (and, on the sim device, ``gemm256``: a 256 x 256 x 256
  int8 gemm in 128 x 64 tiles with double-buffered weights, and ``conv3x3``: a 3 x 3
  layer 16 x 16 x 64 -> 64 over two images): NMU utilisation from the
  counters, ``NMU_MACS / (int8_macs * NMU_BUSY)`` (while the NMU is busy) and
  ``NMU_MACS / (int8_macs * CYCLES)`` (over the whole run), and where the NMU's cycles
  went (``NMU_LOAD``, ``NMU_STARVE``, L1 stalls);
* for each program with CSTL tasks: result elements per busy cycle of the CSTLs
  (``CSTL<k>_ELEMS / CSTL<k>_BUSY``, and per busy cycle not spent loading a table or an
  eltwise entry, ``CSTL<k>_TABLE``) against the word-width limit (one L1 word of i8
  results per cycle), and the CSTLs' RTL busy cycles against the executor's cycle model
  of the same tasks (``executor_busy``);
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

from npu.engine.config import EngineConfig  # noqa: E402
from npu.tools.cli import main as npu_main  # noqa: E402
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
        if regression.design.params["device"] == "sim":
            run_cocotb(built, regression.module, testcase="programs_no_stalls",
                       name="bench-gemm256", seed=1, env={"NPU_ENGINE_PROGRAMS": "gemm256,conv3x3"})
            results.update(json.loads(
                (runs / "bench-gemm256" / "engine_counters.json").read_text()))
        for name, c in results.items():
            print(f"  {name:<12}{c['TASKS_DONE']:>7}{c['CYCLES']:>12}{c['executor_cycles']:>10}"
                  f"{c['CYCLES'] / c['executor_cycles']:>8.2f}{c['SEQ_WAIT']:>10}")
        macs = EngineConfig.shipped(regression.design.params["device"]).nmu.macs
        print(f"  {'NMU program':<12}{'MACs':>10}{'busy':>8}{'util busy':>10}{'util run':>9}"
              f"{'load':>7}{'starve':>7}{'stall rd':>9}{'stall wr':>9}")
        for name, c in results.items():
            if not c.get("NMU_MACS"):
                continue
            print(f"  {name:<12}{c['NMU_MACS']:>10}{c['NMU_BUSY']:>8}"
                  f"{c['NMU_MACS'] / (macs * c['NMU_BUSY']):>10.3f}"
                  f"{c['NMU_MACS'] / (macs * c['CYCLES']):>9.3f}{c['NMU_LOAD']:>7}"
                  f"{c['NMU_STARVE']:>7}{c['NMU_STALL_READ']:>9}{c['NMU_STALL_WRITE']:>9}")

        cstl_table(results, regression.design.params["device"])


def cstl_table(results, device):
    """Print the CSTL rows of the benchmark (see the module) from the engine's counters."""
    cfg = EngineConfig.shipped(device)
    if not cfg.n_cstl:
        return
    print(f"  {'CSTL program':<15}{'elems':>7}{'busy':>7}{'table':>7}{'el/busy':>9}"
          f"{'el/work':>9}{'limit':>7}{'model':>7}{'RTL/model':>10}")
    for name, c in results.items():
        ks = range(cfg.n_cstl)
        elems = sum(c.get(f"CSTL{k}_ELEMS", 0) for k in ks)
        if not elems:
            continue
        busy = sum(c[f"CSTL{k}_BUSY"] for k in ks)
        table = sum(c[f"CSTL{k}_TABLE"] for k in ks)
        model = sum(v for unit, v in c["executor_busy"].items() if ".CSTL[" in unit)
        print(f"  {name:<15}{elems:>7}{busy:>7}{table:>7}{elems / busy:>9.2f}"
              f"{elems / max(busy - table, 1):>9.2f}{cfg.wbytes:>7}{model:>7}"
              f"{busy / max(model, 1):>10.2f}")


if __name__ == "__main__":
    engine_numbers()
    if "--synth" in sys.argv[1:]:
        npu_main(["synth", "--only", "nem_engine", "-o", str(REPO / "build" / "synth")])
