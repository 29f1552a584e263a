"""Benchmark of the NMU: MAC utilisation from the unit's own counters, and its ECP5 size.

Runs the NMU (``npu.nmu.unit.NmuUnit``, registers + AGU + array + output stage) in the Amaranth
simulator on bound NEM programs, L1 answering every request at once (no grant denied), and
prints from the unit's counters: busy cycles, MACs issued, MAC utilisation
``macs / (lanes * cols * busy)``, and where the other cycles went (array idle for weights,
activation side without a vector, read/write port stalls). The result bytes are checked
against ``nem.executor`` as in the tests. Each case runs on both variants of the unit: one
L1 read port (``1port``) and the weight read port with double-buffered weights
(``wport``, ``NmuUnit(weight_port=True)``).

Cases: on the test device's 8 x 8 array (NMU.int8_macs = 64, 8-byte L1 word, the small
engine's word, 512 weight rows): 64 x 64 x 64 and 256 x 64 x 64 int8 gemms with bias (i8
out) and a 3 x 3 conv layer (1 x 16 x 16 x 32, 32 output channels, pads 1, bias). On the
sim engine's 16 x 16 array (int8_macs = 256, 16-byte word, 256 weight rows, 128 KiB L1):
the tasks of a tiled 256 x 256 x 256 gemm, 64 x 256 x 128 and 128 x 256 x 64 (bias, i8
out). Operands 64-byte aligned. ``--sim-only``: the 16 x 16 cases only.
With ``--synth``: Yosys ``synth_ecp5`` cell counts of the array (``NmuArray``) and of the
whole unit, both variants (needs the ``fpga`` extra; minutes). With ``--pnr``: the
array's Fmax and cell use from nextpnr-ecp5 on the 85F (``bench_fpga.py``; about 4 minutes;
``bench_fpga.py --designs`` places the unit and the engine).

Run: ``.venv/bin/python tests/bench/bench_nmu.py [--synth] [--pnr] [--unaligned]
[--sim-only]``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from npu.nmu.array import NmuArray  # noqa: E402
from npu.nmu.model import NmuGeometry  # noqa: E402
from npu.nmu.unit import NmuUnit  # noqa: E402
from npu.tools.synth import SynthError, ecp5_resources, ecp5_verilog  # noqa: E402
from sim.nmu_programs import conv_case, gemm_case, run_nmu  # noqa: E402

GEOM = NmuGeometry(lanes=8, cols=8, wrows=512, channels=64)
L1 = 65536
SIM_GEOM = NmuGeometry(lanes=16, cols=16, wrows=256, channels=256)  # engine_sim.nem
SIM_L1 = 131072


def measure(name, case, unit):
    geom = unit.geometry
    mem = bytearray(case.l1_before.tobytes())
    t0 = time.time()
    done, c = run_nmu(unit, case.regs, case.entry, mem, random.Random(0), deny=0.0,
                      max_cycles=400000)
    seconds = time.time() - t0
    assert done == (0, 0), done
    assert bytes(mem) == case.l1_after.tobytes(), f"{name}: L1 differs from the executor"
    assert c["macs"] == case.macs
    util = c["macs"] / (geom.macs * c["busy"])
    mode = "wport" if unit.weight_port else "1port"
    print(f"{name} [{mode}]: {c['macs']} MACs in {c['busy']} busy cycles, utilisation "
          f"{util:.3f} (ideal {case.macs / geom.macs:.0f} cycles)")
    print(f"  array idle for weights {c['load']}, no activation vector {c['starve']}, array "
          f"held by the output {c['stall_out']}, read stalls {c['stall_read']}, write "
          f"stalls {c['stall_write']}  [{seconds:.1f} s simulated]", flush=True)
    return util


def run_cases(geom, l1, cases):
    """Every case on the one-port unit and on the weight-port unit of ``geom``."""
    units = [NmuUnit(geometry=geom, depth=l1 // geom.lanes, weight_port=wp)
             for wp in (False, True)]
    for name, case in cases:
        for unit in units:
            measure(name, case, unit)


def synth():
    work = Path(tempfile.mkdtemp(prefix="nmu-synth-"))
    # YoWASP's yosys sees the current directory only: relative paths from inside it
    here = os.getcwd()
    os.chdir(work)
    try:
        _synth_in_cwd()
    finally:
        os.chdir(here)


def _synth_in_cwd():
    for name, comp in (("nmu_array", NmuArray(lanes=8, cols=8, wrows=512)),
                       ("nmu_unit", NmuUnit(geometry=GEOM, depth=L1 // 8)),
                       ("nmu_unit_wport", NmuUnit(geometry=GEOM, depth=L1 // 8,
                                                  weight_port=True))):
        path = Path(f"{name}.v")
        path.write_text(ecp5_verilog(comp, name))
        t0 = time.time()
        try:
            counts = ecp5_resources(path, name, workdir=Path("."))
        except SynthError as exc:
            print(f"{name}: synthesis failed: {str(exc).splitlines()[0]}")
            continue
        cells = ", ".join(f"{k} {v}" for k, v in counts.items())
        print(f"{name} (8 x 8, 512 weight rows): {cells}  [{time.time() - t0:.0f} s]")


def pnr():
    """The array placed and routed on the ECP5-85F (``tests/bench/bench_fpga.py``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_fpga

    bench_fpga.run(["nmu_array"], freq=50.0, seed=1, timeout=None,
                   out=REPO / "build" / "fpga")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synth", action="store_true", help="also run yosys synth_ecp5")
    ap.add_argument("--pnr", action="store_true",
                    help="also place and route the array (nextpnr-ecp5): Fmax, cell use")
    ap.add_argument("--unaligned", action="store_true",
                    help="operands at random byte offsets instead of 64-byte aligned")
    ap.add_argument("--sim-only", action="store_true",
                    help="only the sim engine's 16 x 16 gemm tasks")
    args = ap.parse_args(argv)
    aligned = not args.unaligned
    rng = np.random.default_rng(2026)
    print(f"{'aligned' if aligned else 'unaligned'} operands, L1 never denied")
    if not args.sim_only:
        print(f"NMU {GEOM.lanes} x {GEOM.cols} ({GEOM.macs} int8 MACs/cycle)")
        run_cases(GEOM, L1, [
            ("gemm 64x64x64 (bias, i8 out)",
             gemm_case(rng, 64, 64, 64, bias=True, aligned=aligned)),
            ("gemm 256x64x64 (bias, i8 out)",
             gemm_case(rng, 256, 64, 64, bias=True, aligned=aligned)),
            ("conv2d 3x3 1x16x16x32 -> 32 (pads 1, bias, i8 out)",
             conv_case(rng, 1, 16, 16, 32, 3, 3, 32, pads=(1, 1, 1, 1), bias=True,
                       aligned=aligned)),
        ])
    g = SIM_GEOM
    print(f"NMU {g.lanes} x {g.cols} ({g.macs} int8 MACs/cycle): tasks of a tiled "
          f"256x256x256 gemm")
    sim = {"macs": g.macs, "word": g.lanes, "l1": SIM_L1, "aligned": aligned}
    run_cases(g, SIM_L1, [
        ("gemm 64x256x128 (bias, i8 out)", gemm_case(rng, 64, 256, 128, bias=True, **sim)),
        ("gemm 128x256x64 (bias, i8 out)", gemm_case(rng, 128, 256, 64, bias=True, **sim)),
    ])
    if args.synth:
        synth()
    if args.pnr:
        pnr()


if __name__ == "__main__":
    main()
