"""Benchmark of the NMU: MAC utilisation from the unit's own counters, and its ECP5 size.

Runs the NMU (``npu.nmu.NmuUnit``, registers + AGU + array + output stage) in the Amaranth
simulator on bound NEM programs, L1 answering every request at once (no grant denied), and
prints from the unit's counters: busy cycles, MACs issued, MAC utilisation
``macs / (lanes * cols * busy)``, and where the other cycles went (weight/bias loading,
activation phase without a vector, read/write port stalls). The result bytes are checked
against ``nem.executor`` as in the tests.

Cases: 64 x 64 x 64 and 256 x 64 x 64 int8 gemms with bias (i8 out) and a 3 x 3 conv layer
(1 x 16 x 16 x 32, 32 output channels, pads 1, bias), operands 64-byte aligned, on the test
device's 8 x 8 array (NMU.int8_macs = 64, 8-byte L1 word, the small engine's word).
With ``--synth``: Yosys ``synth_ecp5`` cell counts of the array (``NmuArray``) and of the
whole unit (needs the ``fpga`` extra; minutes).

Run: ``.venv/bin/python tests/bench/bench_nmu.py [--synth] [--unaligned]``.
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

from amaranth.back import verilog  # noqa: E402

from npu.nmu import NmuUnit  # noqa: E402
from npu.nmu_array import NmuArray  # noqa: E402
from npu.nmu_model import NmuGeometry  # noqa: E402
from npu.nmu_programs import conv_case, gemm_case, run_nmu  # noqa: E402
from npu.synth import SynthError, ecp5_resources  # noqa: E402

GEOM = NmuGeometry(lanes=8, cols=8, wrows=512, channels=64)
L1 = 65536


def measure(name, case, unit):
    mem = bytearray(case.l1_before.tobytes())
    t0 = time.time()
    done, c = run_nmu(unit, case.regs, case.entry, mem, random.Random(0), deny=0.0,
                      max_cycles=400000)
    seconds = time.time() - t0
    assert done == (0, 0), done
    assert bytes(mem) == case.l1_after.tobytes(), f"{name}: L1 differs from the executor"
    assert c["macs"] == case.macs
    util = c["macs"] / (GEOM.macs * c["busy"])
    print(f"{name}: {c['macs']} MACs in {c['busy']} busy cycles, utilisation {util:.3f} "
          f"(ideal {case.macs / GEOM.macs:.0f} cycles)")
    print(f"  load (weights, bias, entry) {c['load']}, activation phase without a vector "
          f"{c['starve']}, array held by the output {c['stall_out']}, read stalls "
          f"{c['stall_read']}, write stalls {c['stall_write']}  [{seconds:.1f} s simulated]")
    return util


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
                       ("nmu_unit", NmuUnit(geometry=GEOM, depth=L1 // 8))):
        path = Path(f"{name}.v")
        path.write_text(verilog.convert(comp, name=name, emit_src=False))
        t0 = time.time()
        try:
            counts = ecp5_resources(path, name, workdir=Path("."))
        except SynthError as exc:
            print(f"{name}: synthesis failed: {str(exc).splitlines()[0]}")
            continue
        cells = ", ".join(f"{k} {v}" for k, v in counts.items())
        print(f"{name} (8 x 8, 512 weight rows): {cells}  [{time.time() - t0:.0f} s]")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synth", action="store_true", help="also run yosys synth_ecp5")
    ap.add_argument("--unaligned", action="store_true",
                    help="operands at random byte offsets instead of 64-byte aligned")
    args = ap.parse_args(argv)
    aligned = not args.unaligned
    rng = np.random.default_rng(2026)
    unit = NmuUnit(geometry=GEOM, depth=L1 // 8)
    print(f"NMU {GEOM.lanes} x {GEOM.cols} ({GEOM.macs} int8 MACs/cycle), "
          f"{'aligned' if aligned else 'unaligned'} operands, L1 never denied")
    measure("gemm 64x64x64 (bias, i8 out)",
            gemm_case(rng, 64, 64, 64, bias=True, aligned=aligned), unit)
    measure("gemm 256x64x64 (bias, i8 out)",
            gemm_case(rng, 256, 64, 64, bias=True, aligned=aligned), unit)
    measure("conv2d 3x3 1x16x16x32 -> 32 (pads 1, bias, i8 out)",
            conv_case(rng, 1, 16, 16, 32, 3, 3, 32, pads=(1, 1, 1, 1), bias=True,
                      aligned=aligned), unit)
    if args.synth:
        synth()


if __name__ == "__main__":
    main()
