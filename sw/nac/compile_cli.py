"""``npu compile``, ``npu import`` and ``npu run``: compilers and the float runtime."""

from __future__ import annotations

import argparse
import importlib
import math
from pathlib import Path

import numpy as np

from nac.errors import NacFormatError
from nac.ir import IRError
from nac.runtime import NacRuntimeError
from nac.schedule import ScheduleError

__all__ = ["IMPORT_FORMATS", "detect_format", "register"]


class CompileInputError(ValueError):
    """A model specification or input file the CLI cannot use."""


#: Elements of one ``--shape`` example input at most (torch.randn allocates them).
MAX_SHAPE_ELEMENTS = 1 << 26


def _count(text, low):
    """argparse type: an integer of at least *low*."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
    return value


def _shape(text):
    """argparse type of ``--shape``: comma-separated positive dimensions, e.g. ``1,3,32,32``."""
    dims = []
    for part in text.split(","):
        try:
            dims.append(int(part))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: dimension {part.strip()!r} is not an "
                                             f"integer (e.g. --shape 1,3,32,32)") from None
    if any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"{text!r}: dimensions must be at least 1")
    if math.prod(dims) > MAX_SHAPE_ELEMENTS:
        raise argparse.ArgumentTypeError(f"{text!r}: {math.prod(dims)} elements, more than "
                                         f"{MAX_SHAPE_ELEMENTS}")
    return tuple(dims)


def _not_applicable(args, options, where):
    """Usage error (exit 2) for *options* given where they do not apply."""
    given = [o for o in options if getattr(args, o.lstrip("-").replace("-", "_"), None)
             is not None]
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        args.parser.error(f"{' and '.join(given)} {verb} only to {where}")


def _load_model(spec, shapes):
    import torch

    from nac import zoo

    if spec in zoo.ZOO:
        return zoo.build(spec)
    if ":" not in spec:
        raise CompileInputError(f"model {spec!r}: give a zoo name ({', '.join(sorted(zoo.ZOO))})"
                                f" or 'module:factory'")
    module_name, _, attr = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise CompileInputError(f"model {spec!r}: {exc}") from None
    made = factory()
    if isinstance(made, tuple):
        return made
    if not shapes:
        raise CompileInputError(f"model {spec!r}: the factory returned only a module; give "
                                f"--shape for each input, e.g. --shape 1,3,32,32")
    inputs = tuple(torch.randn(*s) for s in shapes)
    return made, inputs


def _zoo_names():
    from nac import zoo

    return zoo.ZOO


def _cmd_compile(args):
    from nac.compile import compile_module, lifted_constants
    from nac.weights import write_nac

    if args.target:  # the NPU back-end: a build directory (nem.backend_cli)
        from nem.backend_cli import USER_ERRORS, compile_cmd

        try:
            return compile_cmd(args)
        except USER_ERRORS as exc:
            raise CompileInputError(str(exc)) from None
    if args.from_format or Path(args.model).is_file():
        _not_applicable(args, ("--shape",), "a 'module:factory' model")
        return _compile_file(args, args.from_format or detect_format(args.model))
    _not_applicable(args, ("--tokens", "--weights"), "ckernel-ir2 files")
    if args.shape and args.model in _zoo_names():
        args.parser.error(f"--shape applies only to a 'module:factory' model, not the zoo "
                          f"model {args.model!r}")
    module, inputs = _load_model(args.model, args.shape)
    nac, weights, report = compile_module(module, inputs, preload_distance=args.preload,
                                          internal_weights=not args.external,
                                          run_passes=not args.no_opt)
    write_nac(nac, args.output, weights=weights if args.external else None)
    print(f"wrote {args.output}: {len(nac.ops)} instructions, {len(nac.mmap)} MMAP records, "
          f"peak live results {report.peak_live_results}, peak preloaded bytes "
          f"{report.peak_preloaded_bytes}")
    lifted = lifted_constants(nac, weights)
    if lifted and not args.external:
        # <INPUT B=3> values are runtime inputs (spec 7.1.4): keep them next to the file.
        target = Path(args.output).with_suffix(".constants.npz")
        np.savez(target, **lifted)
        print(f"wrote {target}: {len(lifted)} lifted constants (npu run --constants)")
    return 0


IMPORT_FORMATS = ("ark", "ckernel-ir2", "mind")


def detect_format(path):
    """The importer format of the file *path*.

    ``.ir`` files and text that does not start like JSON are MIND Core IR; a JSON object
    with ``Nodes`` is an ARK model, one with ``version`` 2 and ``nodes`` or ``buffers`` is
    C-Kernel-Engine IR v2.

    Parameters
    ----------
    path : str or pathlib.Path

    Returns
    -------
    str
        ``"mind"``, ``"ark"`` or ``"ckernel-ir2"``.

    Raises
    ------
    CompileInputError
        The file cannot be read, or is JSON of none of these formats.
    """
    import json

    path = Path(path)
    if path.suffix == ".ir":
        return "mind"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CompileInputError(f"{path}: {exc}") from None
    if not text.lstrip().startswith(("{", "[")):
        return "mind"
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise CompileInputError(f"{path}: looks like JSON but does not parse; give --from") \
            from None
    if isinstance(obj, dict) and "Nodes" in obj:
        return "ark"
    if isinstance(obj, dict) and obj.get("version") == 2 and ("nodes" in obj or
                                                                "buffers" in obj):
        return "ckernel-ir2"
    raise CompileInputError(f"{path}: JSON of no known format (ARK has 'Nodes', "
                            f"C-Kernel-Engine IR v2 has 'version': 2 and 'nodes'); give --from")


def _import_graph(path, fmt, args):
    """Import *path* in format *fmt*; print what the importer reports; return the graph."""
    from nac.import_ark import import_ark
    from nac.import_ckernel import import_ckernel
    from nac.import_mind import import_mind

    tokens, weights = getattr(args, "tokens", None), getattr(args, "weights", None)
    if fmt != "ckernel-ir2":
        _not_applicable(args, ("--tokens", "--weights"), f"ckernel-ir2 imports, not {fmt}")
    if fmt == "mind":
        return import_mind(path.read_text(encoding="utf-8"), path=path)
    if fmt == "ckernel-ir2":
        graph, info = import_ckernel(path, tokens=tokens, weights=weights,
                                     seed=getattr(args, "seed", 0))
        print(f"ckernel-ir2: {info.nodes} nodes expanded, {len(info.skipped)} skipped by their "
              f"condition; inputs {', '.join(f'{n} {list(s)}' for n, s in info.inputs) or '-'};"
              f" outputs {', '.join(info.outputs)}; weights {info.weights}")
        return graph
    graph, cross_rank = import_ark(path)
    for direction, buffer, tags in cross_rank:
        print(f"cross-rank edge: buffer {buffer} {direction} {tags} (becomes a model "
              f"{'input' if direction == 'recv' else 'output'})")
    return graph


def _compile_file(args, fmt):
    from nac.compile import compile_graph
    from nac.weights import write_nac

    path = Path(args.model)
    graph = _import_graph(path, fmt, args)
    nac, weights, report = compile_graph(graph, preload_distance=args.preload,
                                         internal_weights=not args.external,
                                         run_passes=not args.no_opt)
    write_nac(nac, args.output, weights=weights if args.external else None)
    print(f"wrote {args.output}: {len(nac.ops)} instructions from {path} ({fmt}), "
          f"{len(nac.mmap)} MMAP records, peak live results {report.peak_live_results}")
    return 0


def _cmd_import(args):
    from nac.compile import compile_graph
    from nac.weights import write_nac

    path = Path(args.file)
    graph = _import_graph(path, args.format, args)
    nac, _, report = compile_graph(graph, preload_distance=args.preload)
    write_nac(nac, args.output)
    print(f"wrote {args.output}: {len(nac.ops)} instructions from {path} ({args.format}), "
          f"peak live results {report.peak_live_results}")
    return 0


def _add_ckernel_options(p):
    p.add_argument("--tokens", type=lambda t: _count(t, 1),
                   help="ckernel-ir2: value of the runtime dimension 'tokens'")
    p.add_argument("--weights", help="ckernel-ir2: safetensors file with the weights "
                   "(<buffer> or layers.<l>.<buffer>); default: synthesised")
    p.add_argument("--seed", type=int, default=0,
                   help="ckernel-ir2: seed of the synthesised weights")


def _load_array_file(path, what, archive):
    """The contents of the ``.npy`` (*archive* False) or ``.npz`` (*archive* True) *path*."""
    import zipfile
    import zlib

    path = Path(path)
    if path.is_dir():
        raise CompileInputError(f"{what} {path}: is a directory, expected a file")
    try:
        loaded = np.load(path)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                names = loaded.files
                arrays = {name: loaded[name] for name in names} if archive else None
            if not archive:
                raise CompileInputError(f"{what} {path}: an .npz archive "
                                        f"({', '.join(names) or 'empty'}), expected one .npy "
                                        f"array")
            return arrays
    except CompileInputError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise CompileInputError(f"{what} {path}: not a readable numpy file: {reason}") \
            from None
    if archive:
        raise CompileInputError(f"{what} {path}: a single .npy array, expected an .npz archive "
                                f"(as npu compile writes <stem>.constants.npz)")
    return loaded


def _cmd_run(args):
    from nac.runtime import run
    from nac.weights import read_nac

    if Path(args.file).is_dir() and (Path(args.file) / "manifest.json").is_file():
        from nem.backend_cli import USER_ERRORS, run_cmd  # a build directory (--target)

        try:
            return run_cmd(args)
        except USER_ERRORS as exc:
            raise CompileInputError(str(exc)) from None
    if args.on:
        raise CompileInputError(f"--on needs a build directory (npu compile --target), not "
                                f"{args.file}")
    nac = read_nac(args.file)
    inputs = [_load_array_file(path, "input", archive=False) for path in args.inputs]
    extra = _load_array_file(args.constants, "constants", archive=True) if args.constants \
        else {}
    outputs = run(nac, inputs, extra_tensors=extra)
    for k, out in enumerate(outputs):
        out = np.asarray(out)
        if args.save:
            # Appended, never with_suffix: every dot of the stem stays (r.v1 -> r.v1.0.npy).
            target = Path(f"{args.save}.{k}.npy")
            np.save(target, out)
            print(f"output {k}: shape {list(out.shape)} {out.dtype} -> {target}")
        else:
            print(f"output {k}: shape {list(out.shape)} {out.dtype}\n{out}")
    return 0


def register(subparsers):
    """Add ``compile`` and ``run``; return the user-error types."""
    p = subparsers.add_parser("compile", help="compile a PyTorch model to .nac (torch extra)")
    p.add_argument("model", help="zoo name, 'module:factory', or a file to import (MIND, ARK "
                   "or C-Kernel-Engine IR v2)")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--shape", action="append", type=_shape,
                   help="input shape for a module-only factory, e.g. 1,3,32,32")
    p.add_argument("--external", action="store_true", help="weights in <stem>.safetensors")
    p.add_argument("--preload", type=lambda t: _count(t, 0), default=3,
                   help="preload distance in ticks (>= 0)")
    p.add_argument("--no-opt", action="store_true", help="skip the optimisation passes")
    p.add_argument("--from", dest="from_format", choices=IMPORT_FORMATS,
                   help="MODEL is a file in this format (default: detected when MODEL is a "
                   "file)")
    _add_ckernel_options(p)
    p.add_argument("--target", help="lower for the NPU: small, sim, tiny or a NEM device file; "
                   "-o is then a build directory (docs/backend.md)")
    p.add_argument("--calibration", help="with --target: .npz, one array per model input, "
                   "samples along axis 0")
    p.add_argument("--calibration-method", choices=("minmax", "percentile"), default="minmax")
    p.add_argument("--percentile", type=float, default=99.99,
                   help="upper percentile of --calibration-method percentile")
    p.add_argument("--batch", type=lambda t: _count(t, 1),
                   help="with --target: the model's batch (default: the reshape's or the "
                   "example's)")
    p.add_argument("--argmax", action="store_true",
                   help="with --target: append an argmax head (i32 class indices)")
    p.set_defaults(func=_cmd_compile, parser=p)
    p = subparsers.add_parser("import", help="import a model in another IR format to .nac")
    p.add_argument("format", choices=IMPORT_FORMATS,
                   help="mind: MIND Core IR text; ark: ARK model JSON; ckernel-ir2: "
                   "C-Kernel-Engine IR v2 JSON")
    p.add_argument("file")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--preload", type=lambda t: _count(t, 0), default=3,
                   help="preload distance in ticks (>= 0)")
    _add_ckernel_options(p)
    p.set_defaults(func=_cmd_import, parser=p)
    p = subparsers.add_parser("run", help="run a .nac model in the float golden runtime")
    p.add_argument("file")
    p.add_argument("inputs", nargs="*", help=".npy files, one per <INPUT B=0>")
    p.add_argument("--save", help="write outputs as <SAVE>.<k>.npy")
    p.add_argument("--constants", help="lifted constants (<INPUT B=3>) as written by "
                   "npu compile: <stem>.constants.npz")
    p.add_argument("--on", choices=("float", "executor", "rtl", "all"),
                   help="FILE is a build directory: run on the float golden runtime, the NEM "
                   "executor (default), the engine RTL in Verilator (checked against the "
                   "executor; npu.tools.run_rtl), or all three with a comparison")
    p.add_argument("--report", nargs="?", const=True, metavar="DIR",
                   help="with --on executor: cycles, MACs, utilisation, bytes per layer; "
                   "with --on rtl|all and DIR: also an HTML report in DIR")
    p.set_defaults(func=_cmd_run)
    return (CompileInputError, IRError, ScheduleError, NacRuntimeError, NacFormatError)
