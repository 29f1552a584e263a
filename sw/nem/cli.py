"""``npu nem ...`` subcommands (see :mod:`npu.cli`).

``npu nem check FILE [--device FILE_OR_NAME]`` prints diagnostics and exits 0 when the
document is valid (warnings allowed), 1 when it has errors, 2 on a usage problem (bad
option, unreadable file). ``npu nem fmt FILE`` prints the canonical layout (or rewrites the
file with ``--in-place``; ``--check`` exits 1 when the file is not canonical).
``npu nem run FILE.nem --memory in.npz -o out.npz [--trace trace.json]`` checks and runs a
program in the executor: the input npz maps buffer names to initial contents (raw
little-endian bytes of each array, from the buffer's first byte), the output npz holds the
final bytes of every buffer (uint8); the run's summary goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

__all__ = ["register"]

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def _check(args: argparse.Namespace) -> int:
    from nem.checker import check_file

    if not os.path.isfile(args.file):
        print(f"npu nem check: error: {args.file}: no such file", file=sys.stderr)
        return EXIT_USAGE
    result = check_file(args.file, device=args.device)
    if args.json:
        json.dump(
            {
                "file": args.file,
                "valid": result.ok,
                "device": result.device.name if result.device else None,
                "diagnostics": [
                    {
                        "code": d.code,
                        "severity": d.severity,
                        "message": d.message,
                        "file": d.span.file,
                        "line": d.span.line,
                        "col": d.span.col,
                        "section": d.section,
                    }
                    for d in result.diagnostics
                ],
            },
            sys.stdout,
            indent=2,
        )
        print()
    else:
        for diag in result.diagnostics:
            print(diag)
        errors = sum(d.severity == "error" for d in result.diagnostics)
        warnings = len(result.diagnostics) - errors
        target = f" for device {result.device.name}" if result.device else ""
        verdict = "valid" if result.ok else "invalid"
        print(
            f"{args.file}: {verdict}{target} ({errors} error(s), {warnings} warning(s), "
            f"{result.task_count} task instance(s))",
            file=sys.stderr,
        )
    return EXIT_OK if result.ok else EXIT_INVALID


def _fmt(args: argparse.Namespace) -> int:
    from nem.diagnostics import DiagnosticSink
    from nem.formatter import format_document
    from nem.parser import parse

    if not os.path.isfile(args.file):
        print(f"npu nem fmt: error: {args.file}: no such file", file=sys.stderr)
        return EXIT_USAGE
    with open(args.file, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    sink = DiagnosticSink()
    doc = parse(text, args.file, sink)
    if sink.errors:
        for diag in sink.sorted():
            print(diag, file=sys.stderr)
        print(f"{args.file}: not formatted: it does not parse", file=sys.stderr)
        return EXIT_INVALID
    out = format_document(doc)
    if args.check:
        if out != text:
            print(f"{args.file}: not in canonical layout", file=sys.stderr)
            return EXIT_INVALID
        return EXIT_OK
    if args.in_place:
        if out != text:
            with open(args.file, "w", encoding="utf-8") as fh:
                fh.write(out)
        return EXIT_OK
    sys.stdout.write(out)
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    import numpy as np

    from nem.executor import load_npz, run_file

    if not os.path.isfile(args.file):
        print(f"npu nem run: error: {args.file}: no such file", file=sys.stderr)
        return EXIT_USAGE
    initial = load_npz(args.memory) if args.memory else {}
    result = run_file(args.file, initial, device=args.device)
    np.savez(args.output, **result.buffers())
    if args.trace:
        result.write_trace(args.trace)
    print(result.summary(), file=sys.stderr)
    return EXIT_OK


def register(subparsers):
    """Add ``npu nem``; return this package's user-error exception types."""
    from nem.diagnostics import NemError
    from nem.executor import ExecError
    from nem.registry import RegistryError

    nem = subparsers.add_parser("nem", help="NEM execution plans: check, format, run")
    sub = nem.add_subparsers(dest="nem_command", metavar="NEM_COMMAND", required=True)
    p = sub.add_parser("check", help="check a NEM program or device file against the spec")
    p.add_argument("file", help="a .nem program or a device/config document")
    p.add_argument(
        "--device",
        help="target device: a device file, or a device name visible "
        "from FILE (replaces the program's device directive)",
    )
    p.add_argument("--json", action="store_true", help="print the diagnostics as JSON")
    p.set_defaults(func=_check)
    p = sub.add_parser("fmt", help="print a NEM document in the canonical layout")
    p.add_argument("file")
    group = p.add_mutually_exclusive_group()
    group.add_argument("-i", "--in-place", action="store_true", help="rewrite FILE")
    group.add_argument(
        "--check", action="store_true", help="exit 1 when FILE is not in canonical layout"
    )
    p.set_defaults(func=_fmt)
    p = sub.add_parser("run", help="run a NEM program in the bit-exact executor")
    p.add_argument("file", help="a .nem program")
    p.add_argument("--device", help="target device (as for check)")
    p.add_argument("--memory", metavar="IN.npz", help="initial buffer contents by buffer name")
    p.add_argument(
        "-o", "--output", required=True, metavar="OUT.npz", help="final bytes of every buffer"
    )
    p.add_argument("--trace", metavar="TRACE.json", help="write a Chrome trace (Perfetto)")
    p.set_defaults(func=_run)
    return (NemError, RegistryError, ExecError)
