"""``npu nem sim``: a bound NEM program on the engine RTL (cocotb + Verilator), checked
against the executor byte for byte.

``npu nem sim FILE.nem|PROG.bin --device small|sim [--memory IN.npz | --image IMG]
[-o OUT.npz] [--stalls] [--waves] [--trace T.json] [--budget CYCLES] [--watchdog CYCLES]
[--seed N]`` checks and binds a program (or reads a task binary), builds the engine for the
device once (cached under ``build/sim``), runs it on the RTL and compares every buffer with
the executor's run of the same binary. It prints the cycles, every unit's busy time and
utilisation from the engine's counters and the RTL / executor cycle ratio. Exit status: 0
when the RTL ends done and equals the executor; 1 on a mismatch (the first task in program
order whose output region differs, the buffer, the byte and both values), an engine error
or watchdog, a run stopped by the cycle budget, a binary the executor refuses, or an input
that is missing or does not check; 2 on a usage problem (argparse: an unknown device).

The ``nem`` subcommand group belongs to :mod:`nem.cli` (registered before this module);
``nem`` never imports the hardware, so the command that needs the RTL is added here.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from nem.target import SHIPPED

__all__ = ["register"]

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _nem_commands(subparsers) -> argparse._SubParsersAction:
    nem = subparsers.choices.get("nem")
    actions = [a for a in (nem._actions if nem else ())
               if isinstance(a, argparse._SubParsersAction)]
    if not actions:
        raise RuntimeError("npu.tools.nem_sim registers after nem.cli (COMMAND_MODULES)")
    return actions[0]


def _print_counters(cfg, rtl, want) -> None:
    c = rtl.counters
    cycles = c["CYCLES"]
    print(f"  {'unit':<8}{'busy':>10}{'util':>9}{'stall':>10}")
    for unit in rtl.units:
        busy, stall = c[f"BUSY_{unit}"], c[f"STALL_{unit}"]
        util = 100.0 * busy / cycles if cycles else 0.0
        print(f"  {unit:<8}{busy:>10}{util:>8.1f}%{stall:>10}")
    if cfg.nmu is not None and c.get("NMU_MACS"):
        per_cycle = cfg.nmu.lanes * cfg.nmu.cols
        util = 100.0 * c["NMU_MACS"] / (cycles * per_cycle) if cycles else 0.0
        busy = 100.0 * c["NMU_MACS"] / (c["NMU_BUSY"] * per_cycle) if c["NMU_BUSY"] else 0.0
        line = (f"  NMU MACs {c['NMU_MACS']}: {util:.1f}% of the array over the run, "
                f"{busy:.1f}% while busy")
        if want is not None:
            line += f" (executor: {100 * want.mac_utilisation()[0]:.1f}% over its run)"
        print(line)
    moved = [f"{k[6:].replace('_', '->')} {v}" for k, v in c.items()
             if k.startswith("BYTES_") and v]
    if moved:
        print(f"  bytes: {', '.join(moved)}")


def _report_end(run, rtl, prep) -> bool:
    """Print how the run ended; True when it ended done."""
    c = rtl.counters
    tasks = f"{c['TASKS_ISSUED']} issued, {c['TASKS_DONE']} done of {len(prep.program.tasks)}"
    if rtl.status == "DONE" and not rtl.budget_hit:
        if c["TASKS_ISSUED"] == c["TASKS_DONE"] == len(prep.program.tasks):
            return True
        print(f"RTL: STATUS DONE but tasks {tasks}")
        return False
    try:
        names = run.seq_state_names(prep.device)
    except Exception:  # the state's name is a courtesy; the code is printed anyway
        names = {}
    code = rtl.seq["seq_state"]
    state = f"SEQ state {names.get(code, code)}, " + ", ".join(
        f"{k} {v}" for k, v in rtl.seq.items() if k != "seq_state")
    history = " -> ".join(f"{names.get(c, c)}@{t}" for t, c in rtl.seq_states)
    if rtl.budget_hit:
        print(f"RTL: no end within the cycle budget ({c['CYCLES']} cycles, STATUS "
              f"{rtl.status}); {state}; tasks {tasks}; tokens {c['TOKENS']:#x}")
    else:
        print(f"RTL: STATUS {rtl.status}, cause {rtl.cause} at task {c['ERROR_TASK']}"
              f"{_label(prep, c['ERROR_TASK'])} after {c['CYCLES']} cycles; {state}; "
              f"tasks {tasks}; tokens {c['TOKENS']:#x}")
    print(f"SEQ states (last changes, @cycle of the run): {history}")
    if not rtl.budget_hit and rtl.cause == "UNIT_ERROR":
        from sim.model_run import engine_error

        print(f"refused: {engine_error(prep, rtl)}")  # the task's unit, opcode and cause
    return False


def _label(prep, k) -> str:
    """`` (source label)`` of task ``k`` when it has one."""
    if not 0 <= k < len(prep.labels):
        return " (past the last task)"
    return "" if prep.labels[k] == f"task {k}" else f" ({prep.labels[k]})"


def _cmd_sim(args) -> int:
    from npu.tools.hwcli import SimSetupError, _import_sim

    _import_sim()
    import sim.program_run as run
    from sim.runner import SimulationFailed
    from sim.toolchain import ToolchainError

    try:
        return _sim(args, run)
    except run.SimError as exc:
        print(f"npu: error: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except SimulationFailed as exc:
        # a failed build, or the testbench's own checks (the token monitor) failed
        print(f"npu nem sim: the simulation failed: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except ToolchainError as exc:
        raise SimSetupError(str(exc)) from None


def _sim(args, run) -> int:
    from npu.engine.config import EngineConfig

    for option in ("file", "memory", "image"):
        path = getattr(args, option)
        if path and not os.path.isfile(path):
            # exit status 1, as for every unreadable input of npu (issue 24)
            what = "" if option == "file" else f"--{option} "
            why = "is a directory, expected a file" if os.path.isdir(path) else "no such file"
            print(f"npu nem sim: error: {what}{path}: {why}", file=sys.stderr)
            return EXIT_FAIL
    if args.budget < 1:
        print("npu nem sim: error: --budget must be at least 1 cycle", file=sys.stderr)
        return EXIT_USAGE
    prep = run.prepare(args.file, args.device, memory=args.memory, image=args.image,
                       seed=args.seed)
    cfg = EngineConfig.shipped(args.device)
    print(f"{args.file}: {len(prep.program.tasks)} task(s), {len(prep.program.buffers)} "
          f"buffer(s), binary {len(prep.binary)} bytes at DDR {prep.base:#x}, device "
          f"{args.device}")
    print(f"inputs: {prep.inputs}")
    want = run.expected(prep)
    if want is None:
        print(f"executor: refuses the binary ({prep.refusal}); the RTL runs without a "
              "reference")
    began = time.monotonic()
    rtl = run.simulate(prep, stalls=args.stalls, waves=args.waves, budget=args.budget,
                       watchdog=args.watchdog, seed=args.seed if args.seed is not None else 1)
    wall = time.monotonic() - began
    if args.waves:
        dumps = sorted(p for p in rtl.run_dir.glob("dump.*") if p.suffix in (".fst", ".vcd"))
        print(f"waveform: {dumps[0] if dumps else f'none written in {rtl.run_dir}'}")
    if args.trace:
        import json

        with open(args.trace, "w", encoding="utf-8") as fh:
            json.dump(run.chrome_trace(prep, rtl, want), fh)
        print(f"trace: {args.trace} (RTL and executor timelines; open in ui.perfetto.dev)")
    done = _report_end(run, rtl, prep)
    cycles = rtl.counters["CYCLES"]
    stalls = " (AXI stalls on)" if args.stalls else ""
    if done:
        line = f"RTL: done in {cycles} cycles"
        if want is not None:
            ratio = cycles / want.total_cycles if want.total_cycles else float("nan")
            line += f"; executor {want.total_cycles} cycles; RTL / executor {ratio:.2f}"
        print(line + stalls)
        print(f"wall time: {wall:.1f} s for the (cached) build and the cocotb run")
    else:
        print(f"counters when the run stopped{stalls}:")
    _print_counters(cfg, rtl, want)
    if args.output:
        import numpy as np

        np.savez(args.output, **rtl.buffers)
        print(f"{args.output}: final bytes of {len(rtl.buffers)} buffer(s) (RTL)")
    if not done or want is None:
        return EXIT_FAIL
    mismatch = run.compare(prep, want.buffers(), rtl.buffers)
    if mismatch is not None:
        print(f"MISMATCH: {mismatch}")
        return EXIT_FAIL
    total = sum(b.size for b in prep.program.buffers)
    print(f"match: {len(prep.program.buffers)} buffer(s), {total} bytes equal the "
          "executor's")
    return EXIT_OK


def register(subparsers):
    """Add ``npu nem sim`` to the ``nem`` group; return its user-error exception types."""
    from npu.tools.hwcli import SimSetupError

    sub = _nem_commands(subparsers)
    p = sub.add_parser("sim", help="run a NEM program or task binary on the engine RTL "
                       "(Verilator), checked against the executor")
    p.add_argument("file", help="a .nem program (checked and bound) or a task binary")
    p.add_argument("--device", required=True, choices=tuple(SHIPPED),
                   help="the shipped engine device to build and run on")
    p.add_argument("--memory", metavar="IN.npz", help="initial buffer contents by buffer name")
    p.add_argument("--image", metavar="IMG.safetensors",
                   help="initial memory from a memory image (npu nem bind --image)")
    p.add_argument("-o", "--output", metavar="OUT.npz",
                   help="write the final bytes of every buffer (read from the RTL)")
    p.add_argument("--stalls", action="store_true",
                   help="random pauses on every AXI channel of the memory model")
    p.add_argument("--waves", action="store_true",
                   help="build with tracing and write a waveform (a separate build)")
    p.add_argument("--trace", metavar="T.json",
                   help="Chrome/Perfetto trace: RTL task timeline beside the executor's")
    p.add_argument("--budget", type=int, default=2_000_000, metavar="CYCLES",
                   help="stop a run that has not ended after this many cycles "
                   "(default 2000000)")
    p.add_argument("--watchdog", type=int, metavar="CYCLES",
                   help="the engine's WATCHDOG register: cycles without progress before "
                   "it stops with cause WATCHDOG (default: its reset value, 65536)")
    p.add_argument("--seed", type=int,
                   help="seed of the random inputs and AXI stalls (default: drawn, printed)")
    p.set_defaults(func=_cmd_sim)
    return (SimSetupError,)
