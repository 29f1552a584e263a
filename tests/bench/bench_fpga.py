"""Benchmark: Fmax and cell use of the NMU and the small engine on the ECP5-85F (nextpnr).

Yosys ``synth_ecp5`` then ``nextpnr-ecp5 --85k --package CABGA381 --speed 6
--out-of-context`` (the ULX3S 85F's FPGA; ``npu.tools.synth.ecp5_pnr``), one design after the
other, and prints per design: the achieved Fmax per clock against the target, the
critical path's start and end, nextpnr's utilisation (LUT4 before packing, FF,
TRELLIS_COMB, MULT18X18D, DP16KD), the tools' run times. Out of context: no pins, an
ideal clock, ports untimed (see ``docs/fpga.md``).

Designs (``--designs``, default ``nmu_array``):

* ``nmu_array``: ``NmuArray(lanes=8, cols=8, wrows=512)``, the small engine's array (the
  one ``bench_nmu.py --synth`` counts); about 1 minute of synthesis, 3 of place and route.
* ``nmu_unit``: the small engine's NMU as ``NemEngine`` builds it (``NmuUnit`` with the
  small device's geometry: 8 x 8, 512 weight rows, 128 channels, 1024-word L1, and the
  weight read port).
* ``nmu_unit_1port``: the same without the weight port.
* ``nmu_reader``, ``nmu_agu``, ``nmu_output``: the unit's blocks alone with the small
  engine's parameters (``RunReader`` with its command skid register as the weight reader,
  ``SteppedAgu``, ``NmuOutput``); a block that misses the clock alone misses
  it inside the unit. Minutes each.
* ``cstl``, ``seq``: the small engine's CSTL (``CstlUnit`` with its lanes, L1 depth and
  eltwise lanes) and sequencer (``Sequencer`` of its ``EngineConfig``).
* ``nem_engine``: ``NemEngine(device="small")``.
* ``nac_decoder``: the NAC ABCD decoder as ``npu.tools.toplevels`` builds it
  (``InstructionDecoder(max_args=8, max_consts=8)``, a byte per transfer); seconds.
* ``nac_decoder_w2``: the same with ``width=2`` (two bytes per transfer).

``--seeds 1 2 3`` places and routes each design once per seed (work directory
``build/fpga/<design>/seed<N>/`` when more than one seed is given) and prints, per design
and clock, the Fmax over the seeds as min / median / max.

Outputs go to ``build/fpga/<design>/`` (Verilog, JSON netlist, logs, nextpnr's report).
Needs the ``fpga`` extra. Kept apart from ``bench_nmu.py`` (``--pnr`` of issue 10) so the
two can be edited independently.

Run: ``.venv/bin/python tests/bench/bench_fpga.py [--designs nmu_array nmu_unit ...]
[--freq 50] [--seeds 1 2 3] [--timeout 1800] [--placer static] [--router router2] [--sdf]``
(``--placer static --router router2``: the board build's nextpnr options).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from npu.tools import sta  # noqa: E402
from npu.tools.synth import SynthError, ecp5_pnr, ecp5_verilog, tool_versions  # noqa: E402


def _small():
    from npu.engine.config import EngineConfig

    return EngineConfig.shipped("small")


def _array():
    from npu.nmu.array import NmuArray

    g = _small().nmu
    return NmuArray(lanes=g.lanes, cols=g.cols, wrows=g.wrows)


def _unit(weight_port):
    from npu.nmu.unit import NmuUnit

    cfg = _small()
    return NmuUnit(geometry=cfg.nmu, depth=cfg.l1_depth, weight_port=weight_port)


def _reader():
    from npu.nmu.agu import RunReader

    cfg = _small()
    return RunReader(lanes=cfg.nmu.lanes, depth=cfg.l1_depth, skid=True)


def _agu():
    from npu.nmu.agu_step import SteppedAgu

    g = _small().nmu
    return SteppedAgu(lanes=g.lanes, cols=g.cols)


def _output():
    from npu.nmu.output import NmuOutput

    cfg = _small()
    g = cfg.nmu
    return NmuOutput(cols=g.cols, rows=g.channels // g.cols, lanes=g.lanes, depth=cfg.l1_depth)


def _cstl():
    from npu.cstl.unit import CstlUnit

    cfg = _small()
    return CstlUnit(lanes=cfg.wbytes, depth=cfg.l1_depth, elt_lanes=cfg.cstl_elt_lanes)


def _seq():
    from npu.engine.seq import Sequencer

    return Sequencer(_small())


def _decoder(width):
    from npu.nac.decoder import InstructionDecoder

    return InstructionDecoder(max_args=8, max_consts=8, width=width)


def _engine():
    from npu.engine.top import NemEngine

    return NemEngine(device="small")


# name -> (factory, description)
DESIGNS = {
    "nmu_array": (_array, "NmuArray 8 x 8, 512 weight rows"),
    "nmu_unit": (lambda: _unit(True),
                 "the small engine's NmuUnit: 8 x 8, 512 weight rows, 128 channels, "
                 "1024-word L1, weight port"),
    "nmu_unit_1port": (lambda: _unit(False), "NmuUnit as nmu_unit, one L1 read port"),
    "nmu_reader": (_reader, "RunReader(lanes=8, depth=1024, skid=True), the weight reader"),
    "nmu_agu": (_agu, "SteppedAgu(lanes=8, cols=8)"),
    "nmu_output": (_output, "NmuOutput of the small engine's NMU"),
    "cstl": (_cstl, "the small engine's CstlUnit"),
    "seq": (_seq, "the small engine's Sequencer"),
    "nem_engine": (_engine, 'NemEngine(device="small")'),
    "nac_decoder": (lambda: _decoder(1),
                    "InstructionDecoder(max_args=8, max_consts=8), 1 byte per transfer"),
    "nac_decoder_w2": (lambda: _decoder(2),
                       "InstructionDecoder(max_args=8, max_consts=8, width=2), 2 bytes per "
                       "transfer"),
}


def format_report(report, description):
    """Lines describing a :class:`npu.tools.synth.PnrReport`."""
    lines = [f"{report.top} ({description})"]
    for clock, mhz in report.fmax.items():
        verdict = "PASS" if mhz >= report.target_mhz else "FAIL"
        lines.append(f"  Fmax {clock}: {mhz:.2f} MHz ({verdict} at {report.target_mhz:g} MHz)")
        path = report.critical_paths.get(clock)
        if path is not None:
            lines.append(f"    critical path {path.delay_ns:.2f} ns ({path.logic_ns:.2f} "
                         f"logic, {path.routing_ns:.2f} routing): {path.start} -> {path.end}")
    logic = report.logic
    util = report.utilisation
    cells = [f"LUT4 {logic.get('Total LUT4s', 0)} (logic {logic.get('logic LUTs', 0)}, "
             f"carry {logic.get('carry LUTs', 0)}, RAM {logic.get('RAM LUTs', 0)})",
             f"FF {logic.get('Total DFFs', 0)}"]
    cells += [f"{name} {used}/{avail}" for name, (used, avail) in util.items()
              if name != "TRELLIS_FF"]
    lines.append("  " + ", ".join(cells))
    lines.append(f"  synth_ecp5 {report.synth_seconds:.0f} s, nextpnr {report.pnr_seconds:.0f} s;"
                 f" log {report.pnr_log}")
    return lines


def seed_summary(fmax_by_seed):
    """``{clock: (min, median, max)}`` of ``{seed: {clock: MHz}}`` (clocks seen in any run).

    The median of an even number of seeds is the mean of the middle two.
    """
    clocks = sorted({clock for per in fmax_by_seed.values() for clock in per})
    out = {}
    for clock in clocks:
        values = sorted(per[clock] for per in fmax_by_seed.values() if clock in per)
        mid = len(values) // 2
        median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
        out[clock] = (values[0], median, values[-1])
    return out


def run(names, *, freq, timeout, out, seeds=(1,), seed=None, placer=None, router=None,
        sdf=False):
    """Place and route each design of *names* once per seed; print as each finishes.

    *seed* (one seed) is the older spelling of ``seeds=[seed]`` (``bench_nmu.py --pnr``).
    *placer* and *router*: nextpnr's (None: its defaults; see
    :func:`npu.tools.synth.ecp5_pnr`). *sdf*: write ``<design>.sdf`` and print the
    endpoints above the target's period by unit (:mod:`npu.tools.sta`).
    Returns True if every run finished.
    """
    if seed is not None:
        seeds = [seed]
    versions = tool_versions()
    print("; ".join(f"{k}: {v}" for k, v in versions.items()))
    ok = True
    for name in names:
        factory, description = DESIGNS[name]
        fmax_by_seed = {}
        for seed in seeds:
            work = out / name if len(seeds) == 1 else out / name / f"seed{seed}"
            work.mkdir(parents=True, exist_ok=True)
            t0 = time.monotonic()
            path = work / f"{name}.v"
            path.write_text(ecp5_verilog(factory(), name))
            gen = time.monotonic() - t0
            try:
                report = ecp5_pnr(path, name, workdir=work, freq_mhz=freq,
                                  seed=seed, timeout=timeout, placer=placer,
                                  router=router, sdf=sdf)
            except SynthError as exc:
                ok = False
                print(f"{name} seed {seed}: {exc}", flush=True)
                continue
            fmax_by_seed[seed] = dict(report.fmax)
            print(f"seed {seed}: " + "\n".join(format_report(report, description)))
            print(f"  Verilog {gen:.0f} s; synth_ecp5 with {report.mapper.upper()} LUT mapping; "
                  f"{' '.join(report.command)}", flush=True)
            if sdf:
                result = sta.analyse(sta.read_sdf(report.sdf))
                lines = sta.format_report(result, freq_mhz=freq, depth=2)
                print("\n".join("  " + line for line in lines), flush=True)
        if len(fmax_by_seed) > 1:
            for clock, (lo, med, hi) in seed_summary(fmax_by_seed).items():
                print(f"{name} Fmax {clock} over seeds {sorted(fmax_by_seed)}: min {lo:.2f}, "
                      f"median {med:.2f}, max {hi:.2f} MHz", flush=True)
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--designs", nargs="+", choices=sorted(DESIGNS), default=["nmu_array"],
                    help="designs to place and route, in order (default nmu_array)")
    ap.add_argument("--freq", type=float, default=50.0, help="target clock in MHz")
    ap.add_argument("--seeds", "--seed", type=int, nargs="+", default=[1],
                    help="placer seeds, one run each (default 1)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds allowed per tool run (default: no limit)")
    ap.add_argument("--placer", choices=("heap", "sa", "static"), default=None,
                    help="nextpnr's placer (default: nextpnr's, HeAP; the board build's "
                         "is static)")
    ap.add_argument("--router", choices=("router1", "router2"), default=None,
                    help="nextpnr's router (default: nextpnr's, router1; the board build's "
                         "is router2)")
    ap.add_argument("--sdf", action="store_true",
                    help="write nextpnr's SDF and print the endpoints above the target's "
                         "period by unit (npu.tools.sta)")
    ap.add_argument("-o", "--output", default=str(REPO / "build" / "fpga"),
                    help="work directory")
    args = ap.parse_args(argv)
    try:
        ok = run(args.designs, freq=args.freq, seeds=args.seeds, timeout=args.timeout,
                 out=Path(args.output), placer=args.placer, router=args.router,
                 sdf=args.sdf)
    except SynthError as exc:  # a missing tool
        print(exc)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
