"""``npu run DIR x.npy --on rtl|all``: a compiled model on the engine RTL.

``npu run`` belongs to :mod:`nac.compile_cli` (``nac`` and ``nem`` never import the
hardware); this module, registered after it, takes over the two choices of ``--on`` that
need the RTL and hands every other run back.

* ``--on rtl``: quantise the inputs, run the build's bound binary and memory image on the
  engine RTL (``sim.model_run``, the runner of ``npu nem sim``), check every buffer against
  the executor byte for byte, dequantise the RTL's outputs; print or ``--save`` them as the
  other back-ends do.
* ``--on all``: float, executor and RTL; report RTL == executor, the float-vs-int8 largest
  error and the top-1 agreement.
* ``--report DIR``: also an HTML report (``sim.report``) in ``DIR``.

Exit status 1 when the RTL does not end done (the engine's error names the task, its unit
and opcode, the model layer and the unit's cause) or differs from the executor.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

__all__ = ["RtlRunError", "register"]


class RtlRunError(ValueError):
    """A build directory, input or device that ``--on rtl`` cannot use."""


def _show(outputs, save, tag=""):
    for k, out in enumerate(outputs):
        if save:
            target = Path(f"{save}{tag}.{k}.npy")
            np.save(target, out)
            print(f"output {k}{tag.replace('.', ' ')}: shape {list(out.shape)} {out.dtype} "
                  f"-> {target}")
        else:
            print(f"output {k}{tag.replace('.', ' ')}: shape {list(out.shape)} {out.dtype}\n"
                  f"{out}")


def print_counters(run):
    """Cycles and per-unit utilisation from the engine's counters (as ``npu nem sim``)."""
    from npu.engine.config import EngineConfig
    from npu.tools.nem_sim import _print_counters

    _print_counters(EngineConfig.shipped(run.prep.device), run.rtl, run.executor)


def _run(args) -> int:
    from nem.build_dir import BuildError, run_build
    from npu.tools.hwcli import _import_sim

    _import_sim()
    from sim.model_run import compare_outputs, run_model
    from sim.program_run import SimError
    from sim.runner import SimulationFailed

    d = Path(args.file)
    if not (d / "manifest.json").is_file():
        raise RtlRunError(f"--on {args.on}: {d} is not a build directory (npu compile MODEL "
                          f"--target small|sim -o DIR writes one)")
    inputs = []
    for path in args.inputs:
        try:
            inputs.append(np.load(path))
        except (OSError, ValueError) as exc:
            raise RtlRunError(f"input {path}: {exc}") from None
    try:
        run = run_model(d, inputs, stalls=getattr(args, "stalls", False))
        floats = run_build(d, inputs, on="float")[0] if args.on == "all" else None
    except (BuildError, SimError) as exc:
        raise RtlRunError(str(exc)) from None
    except SimulationFailed as exc:
        raise RtlRunError(f"the simulation failed: {exc}") from None
    c = run.rtl.counters
    print(f"{d}: {len(run.prep.program.tasks)} tasks on the {run.prep.device} engine RTL "
          f"({run.seconds:.1f} s)")
    if run.error:
        print(f"RTL: {run.error}")
    else:
        print(f"RTL: done in {c['CYCLES']} cycles; executor {run.executor.total_cycles} "
              f"cycles; RTL / executor {run.ratio:.2f}")
    print_counters(run)
    status = 0
    if run.error:
        status = 1
    elif run.mismatch is not None:
        print(f"MISMATCH: {run.mismatch}")
        status = 1
    else:
        total = sum(b.size for b in run.prep.program.buffers)
        print(f"RTL == executor: {len(run.prep.program.buffers)} buffers, {total} bytes "
              f"equal byte for byte")
    if args.on == "rtl":
        if run.outputs is not None:
            _show(run.outputs, args.save)
    else:
        _show(floats, args.save, ".float")
        _show(run.executor_outputs, args.save, ".executor")
        if run.outputs is not None:
            _show(run.outputs, args.save, ".rtl")
        for k, row in enumerate(compare_outputs(floats, run.executor_outputs)):
            err = ("" if row["max_error"] is None else
                   f"max |float - int8| {row['max_error']:.4g} (largest |float| "
                   f"{row['scale']:.4g}); ")
            print(f"output {k}: {err}top-1 agreement {row['agree']} of {row['rows']} "
                  f"({100.0 * row['agree'] / max(row['rows'], 1):.1f} %)")
    if args.report:
        from sim.report import layer_rows

        print(f"{'instr':>6} {'op':<9}{'unit':<5}{'tasks':>6}{'RTL span':>10}{'model':>8}"
              f"{'RTL compute':>13}{'model':>8}{'MACs':>10}")
        for r in layer_rows(run):
            print(f"{r['instruction']:>6} {r['op']:<9}{r['unit']:<5}{r['tasks']:>6}"
                  f"{r['rtl_last'] - (r['rtl_first'] or 0):>10}"
                  f"{r['exe_last'] - (r['exe_first'] or 0):>8}{r['rtl_compute']:>13}"
                  f"{r['exe_compute']:>8}{r['macs']:>10}")
    if getattr(args, "trace", None):
        import json

        from sim.program_run import chrome_trace

        try:
            with open(args.trace, "w", encoding="utf-8") as fh:
                json.dump(chrome_trace(run.prep, run.rtl, run.executor), fh)
        except OSError as exc:
            raise RtlRunError(f"--trace {args.trace}: {exc.strerror or exc}") from None
        print(f"trace: {args.trace} (RTL and executor task timelines; open in "
              f"ui.perfetto.dev)")
    if isinstance(args.report, str):
        from sim.report import write_model_report

        path = write_model_report(args.report, run, floats=floats)
        print(f"report: {path}")
    return status


def register(subparsers):
    """Take over ``npu run --on rtl|all`` (registered after ``nac.compile_cli``)."""
    run = subparsers.choices.get("run")
    if run is None:
        raise RuntimeError("npu.tools.run_rtl registers after nac.compile_cli "
                           "(COMMAND_MODULES)")
    other = run.get_default("func")
    run.add_argument("--stalls", action="store_true",
                     help="with --on rtl|all: random pauses on every AXI channel")
    run.add_argument("--trace", metavar="T.json",
                     help="with --on rtl|all: a Chrome/Perfetto trace of the RTL's task "
                          "timeline beside the executor's")

    def dispatch(args):
        if getattr(args, "on", None) in ("rtl", "all"):
            try:
                return _run(args)
            except RtlRunError as exc:
                print(f"npu: error: {exc}", file=sys.stderr)
                return 1
        for flag in ("stalls", "trace"):
            if getattr(args, flag, None):
                print(f"npu: error: --{flag} applies to --on rtl|all only",
                      file=sys.stderr)
                return 1
        return other(args)

    run.set_defaults(func=dispatch)
    return (RtlRunError,)
