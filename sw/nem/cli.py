"""``npu nem ...`` subcommands (see :mod:`npu.tools.cli`).

``npu nem check FILE [--device FILE_OR_NAME]`` prints diagnostics and exits 0 when the
document is valid (warnings allowed), 1 when it has errors or cannot be read (as every
``npu`` command for a missing file), 2 on a usage problem (bad option or combination).
``npu nem fmt FILE`` prints the canonical layout (or rewrites the file with ``--in-place``;
``--check`` exits 1 when the file is not canonical).
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


def _missing(path: str, command: str) -> bool:
    """Report an input file that does not exist or is not a file (exit status 1, as for
    every unreadable input of ``npu``)."""
    if os.path.isfile(path):
        return False
    why = "is a directory, expected a file" if os.path.isdir(path) else "no such file"
    print(f"npu nem {command}: error: {path}: {why}", file=sys.stderr)
    return True


def _check(args: argparse.Namespace) -> int:
    from nem.checker import check_file

    if _missing(args.file, "check"):
        return EXIT_INVALID
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

    if _missing(args.file, "fmt"):
        return EXIT_INVALID
    with open(args.file, "rb") as fh:
        raw = fh.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Never rewrite what cannot be read back: U+FFFD would replace the bytes for good.
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        print(
            f"{args.file}:{line}:{col}: error: byte 0x{raw[exc.start]:02x} at offset "
            f"{exc.start} is not UTF-8; not formatted",
            file=sys.stderr,
        )
        return EXIT_INVALID
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


def _device_of(path: str):
    """Resolve a device file (or a device name visible from it) for a binary."""
    from nem.binder import BindError
    from nem.checker import check_text

    result = check_text(
        f'device "{os.path.basename(path)}"\n',
        file=f"<device {path}>",
        base_dir=os.path.dirname(os.path.abspath(path)),
    )
    if not result.ok or result.device is None or not result.device.concrete:
        first = next((str(d) for d in result.diagnostics), "no concrete device")
        raise BindError(f"{path}: not a usable device file: {first}")
    return result.device


def _read_binary(path: str):
    from nem.taskformat import decode

    with open(path, "rb") as fh:
        data = fh.read()
    return decode(data)


def _is_binary(path: str) -> bool:
    from nem.taskformat import MAGIC

    with open(path, "rb") as fh:
        return fh.read(4) == MAGIC


def _run(args: argparse.Namespace) -> int:
    import numpy as np

    from nem.executor import execute, load_npz, run_file

    if _missing(args.file, "run"):
        return EXIT_INVALID
    initial = load_npz(args.memory) if args.memory else {}
    if _is_binary(args.file):
        from nem.binder import plan_from_binary
        from nem.memimage import read_image

        if not args.device or not os.path.isfile(args.device):
            print(
                "npu nem run: error: a task binary needs --device DEVICE_FILE (the device "
                "it was bound for)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        from nem.taskformat import TaskFormatError

        device = _device_of(args.device)
        try:
            program = _read_binary(args.file)
        except TaskFormatError as exc:
            print(f"npu nem run: error: {args.file}: {exc}", file=sys.stderr)
            return EXIT_INVALID
        plan = plan_from_binary(program, device)
        if args.image:
            if args.memory:
                print("npu nem run: error: give --memory or --image, not both", file=sys.stderr)
                return EXIT_USAGE
            initial = read_image(args.image, program).initial()
        result = execute(plan, device, initial, in_order=True)
    elif args.image:
        print("npu nem run: error: --image goes with a task binary", file=sys.stderr)
        return EXIT_USAGE
    else:
        result = run_file(args.file, initial, device=args.device)
    np.savez(args.output, **result.buffers())
    if args.trace:
        result.write_trace(args.trace)
    print(result.summary(), file=sys.stderr)
    return EXIT_OK


def _bind(args: argparse.Namespace) -> int:
    from nem.binder import bind
    from nem.checker import check_file
    from nem.taskformat import encode

    if _missing(args.file, "bind"):
        return EXIT_INVALID
    result = check_file(args.file, device=args.device)
    if not result.ok:
        for diag in result.diagnostics:
            print(diag)
        print(f"{args.file}: invalid, not bound", file=sys.stderr)
        return EXIT_INVALID
    program = bind(result)
    image = None
    if args.image:
        from nem.executor import load_npz
        from nem.memimage import build_image

        image = build_image(program, result.plan, load_npz(args.memory) if args.memory else {})
    elif args.memory:
        print("npu nem bind: error: --memory goes with --image", file=sys.stderr)
        return EXIT_USAGE
    data = encode(program)
    with open(args.output, "wb") as fh:
        fh.write(data)
    print(
        f"{args.output}: {len(program.tasks)} task(s), {len(program.buffers)} buffer(s), "
        f"{len(data)} bytes, device {result.device.name}",
        file=sys.stderr,
    )
    if image is not None:
        from nem.memimage import write_image

        write_image(args.image, image)
        loads = [b.name for b in image.buffers if b.load]
        results = [b.name for b in image.buffers if b.result]
        print(
            f"{args.image}: loads {', '.join(loads) or 'none'}; results "
            f"{', '.join(results) or 'none'}; binary at DDR 0x{image.program_address:x}",
            file=sys.stderr,
        )
    return EXIT_OK


def _dis(args: argparse.Namespace) -> int:
    from nem.taskformat import MAX_TOKENS, REGISTER_MAPS, TaskFormatError

    if _missing(args.file, "dis"):
        return EXIT_INVALID
    try:
        program = _read_binary(args.file)
    except TaskFormatError as exc:
        print(f"npu nem dis: error: {args.file}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    major, minor = program.version
    print(f"; NEM task binary {major}.{minor}, device sha256 {program.device_hash.hex()}")
    print(f"; {len(program.buffers)} buffer(s), {len(program.tasks)} task(s)")
    for b in program.buffers:
        where = f"L1[{b.engine}]" if b.level == "L1" else b.level
        print(
            f"buffer {b.name:<16} {where:<6} @ 0x{b.address:08x}  {b.size} bytes  align {b.align}"
        )
    for k, t in enumerate(program.tasks):
        waits = [str(i) for i in range(MAX_TOKENS) if t.wait >> i & 1]
        sigs = [str(i) for i in range(MAX_TOKENS) if t.signal >> i & 1]
        print(
            f"task {k}: {t.unit.name}[{t.instance}] engine {t.engine}  wait {{{', '.join(waits)}}}"
            f"  signal {{{', '.join(sigs)}}}"
        )
        regs = REGISTER_MAPS.get(t.unit)
        named = {(regs.name(i) if regs else f"R{i}"): v for i, v in t.writes}
        for index, value in t.writes:
            name = regs.name(index) if regs else f"R{index}"
            print(f"    {name:<12} = 0x{value:08x}  "
                  f"({_meaning(name, value, program.data, named)})")
    if program.data:
        print(f"; data section: {len(program.data)} bytes")
    return EXIT_OK


def _requant_kind(task: dict[str, int], data: bytes) -> str:
    """Which entry a task's ``REQUANT`` names, from its other registers as the binder
    chooses it: ``eltwise`` for a binary i8 eltwise opcode, ``group`` when an input is an
    i4 operand quantised per group, else ``requant`` (the NMU's output stage)."""
    from nem.numerics import ELTWISE_OPS
    from nem.taskformat import ELEM_TYPES, NO_QUANT, OPCODES, TaskFormatError, decode_quant

    code = task.get("OPCODE", 0)
    if code < len(OPCODES) and OPCODES[code] in ELTWISE_OPS:
        return "eltwise"
    for k in range(task.get("NIN", 0)):
        elem, quant = task.get(f"OP{k}_ELEM", 0), task.get(f"OP{k}_QUANT", NO_QUANT)
        if elem < len(ELEM_TYPES) and ELEM_TYPES[elem] == "i4" and quant != NO_QUANT:
            try:
                if decode_quant(data, quant).kind == "per_group":
                    return "group"
            except TaskFormatError:
                pass  # the QUANT line says what is wrong with it
    return "requant"


def _meaning(name: str, value: int, data: bytes, task: dict[str, int]) -> str:
    """A register value spelt out: codes by name, quantisation entries decoded (``task``:
    the task's registers by name, which say what kind of entry ``REQUANT`` names)."""
    from nem.taskformat import (
        ELEM_TYPES,
        LEVELS,
        NO_QUANT,
        OPCODES,
        TaskFormatError,
        decode_eltwise,
        decode_group_requant,
        decode_quant,
        decode_requant,
    )

    field = name.split("_", 1)[-1] if name.startswith("OP") else name
    tables = {"OPCODE": OPCODES, "ELEM": ELEM_TYPES, "LEVEL": LEVELS, "SRC_LEVEL": LEVELS,
              "DST_LEVEL": LEVELS}  # fmt: skip
    if field in tables:
        table = tables[field]
        return table[value] if value < len(table) else f"{value}: unknown code"
    if field == "REQUANT":
        kind = _requant_kind(task, data)
        try:
            r = {"eltwise": decode_eltwise, "group": decode_group_requant,
                 "requant": decode_requant}[kind](data, value)
        except TaskFormatError as exc:
            return str(exc)
        if kind == "eltwise":
            return (
                f"eltwise: zero points a {r.a_zero_point}, b {r.b_zero_point}, y "
                f"{r.y_zero_point}; left shift {r.left_shift}; multiplier/shift a "
                f"{r.a_multiplier}/{r.a_shift}, b {r.b_multiplier}/{r.b_shift}, y "
                f"{r.y_multiplier}/{r.y_shift}; clamp [{r.lo}, {r.hi}]"
            )
        if kind == "group":
            return (
                f"x zero point {r.x_zero_point}, y zero point {r.y_zero_point}, clamp "
                f"[{r.lo}, {r.hi}], {len(r.multipliers)} group(s) of {r.group_size} along "
                f"axis {r.axis}, shift {r.shift}, first multiplier {r.multipliers[0]}, "
                f"weight zero points {list(r.w_zero_points)}"
            )
        if not r.multipliers:
            return f"x zero point {r.x_zero_point}, raw i32 accumulators"
        return (
            f"x zero point {r.x_zero_point}, y zero point {r.y_zero_point}, clamp "
            f"[{r.lo}, {r.hi}], {len(r.multipliers)} channel(s), first multiplier "
            f"{r.multipliers[0]} shift {r.shifts[0]}"
        )
    if field == "QUANT":
        if value == NO_QUANT:
            return "none"
        try:
            q = decode_quant(data, value)
        except TaskFormatError as exc:
            return str(exc)
        scales = ", ".join(f"{v:g}" for v in q.scales[:4]) + (" ..." if len(q.scales) > 4 else "")
        zps = ", ".join(str(v) for v in q.zero_points[:4]) + (" ..." if len(q.scales) > 4 else "")
        axis = "" if q.kind == "per_tensor" else f" axis {q.axis}"
        return f"{q.kind}{axis}: scales [{scales}], zero points [{zps}]"
    return str(value)


def register(subparsers):
    """Add ``npu nem``; return this package's user-error exception types."""
    from nem.binder import BindError
    from nem.diagnostics import NemError
    from nem.executor import ExecError
    from nem.memimage import MemoryImageError
    from nem.registry import RegistryError
    from nem.taskformat import TaskFormatError

    nem = subparsers.add_parser("nem", help="NEM execution plans: check, format, run, bind")
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
    p = sub.add_parser("run", help="run a NEM program or task binary in the bit-exact executor")
    p.add_argument("file", help="a .nem program, or a task binary from npu nem bind")
    p.add_argument(
        "--device",
        help="target device (as for check); for a binary, the device file it was bound for",
    )
    p.add_argument("--memory", metavar="IN.npz", help="initial buffer contents by buffer name")
    p.add_argument(
        "-o", "--output", required=True, metavar="OUT.npz", help="final bytes of every buffer"
    )
    p.add_argument("--trace", metavar="TRACE.json", help="write a Chrome trace (Perfetto)")
    p.add_argument(
        "--image", metavar="IMG.safetensors", help="for a binary: initial memory from its image"
    )
    p.set_defaults(func=_run)
    p = sub.add_parser("bind", help="bind a checked NEM program to a task binary")
    p.add_argument("file", help="a .nem program")
    p.add_argument("--device", help="target device (as for check)")
    p.add_argument("-o", "--output", required=True, metavar="PROG.bin")
    p.add_argument(
        "--image",
        metavar="IMG.safetensors",
        help="also write the memory image: loads, results and addresses (docs/task-format.md)",
    )
    p.add_argument(
        "--memory", metavar="IN.npz", help="initial buffer contents for the image, by name"
    )
    p.set_defaults(func=_bind)
    p = sub.add_parser("dis", help="list the tasks of a task binary with register names")
    p.add_argument("file", help="a task binary")
    p.set_defaults(func=_dis)
    return (NemError, RegistryError, ExecError, BindError, TaskFormatError, MemoryImageError)
