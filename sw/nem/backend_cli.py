"""The back-end behind ``npu compile MODEL --target DEV -o DIR`` and ``npu run DIR``.

``nac.compile_cli`` hands over to these two functions when ``--target`` is given or the file
to run is a build directory; :data:`USER_ERRORS` are the exceptions the hub prints as
``npu: error: ...``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from nem.binder import BindError
from nem.build_dir import BuildError, compile_model, layer_report, load_build, run_build
from nem.lower import LowerError
from nem.memimage import MemoryImageError
from nem.modelgraph import GraphError
from nem.numerics import NumericsError
from nem.target import TargetError
from nem.taskformat import TaskFormatError

__all__ = ["USER_ERRORS", "compile_cmd", "run_cmd", "zoo_calibration"]

USER_ERRORS = (BuildError, LowerError, GraphError, TargetError, NumericsError, BindError,
               TaskFormatError, MemoryImageError)


def zoo_calibration(example_inputs, batches=32, seed=0):
    """Calibration data of a zoo model: its inputs are standard normal (``torch.randn``), so
    ``batches`` batches of standard normal samples of the example shapes."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((batches * x.shape[0], *x.shape[1:])).astype(np.float32)
            for x in example_inputs]


def compile_cmd(args):
    """``npu compile MODEL --target DEV -o DIR``: a ``.nac`` file or a zoo model."""
    model = Path(args.model)
    samples, batch = None, None
    with tempfile.TemporaryDirectory() as tmp:
        if model.suffix == ".nac" and model.is_file():
            nac_path = model
        else:
            from nac import zoo
            from nac.compile import compile_module
            from nac.weights import write_nac

            if args.model not in zoo.ZOO:
                raise BuildError(f"model {args.model!r}: --target takes a .nac file or a zoo "
                                 f"name ({', '.join(sorted(zoo.ZOO))})")
            module, inputs = zoo.build(args.model)
            nac, _, _ = compile_module(module, inputs)
            nac_path = Path(tmp) / "model.nac"
            write_nac(nac, nac_path)
            batch = int(inputs[0].shape[0])
            if args.calibration is None:
                samples = zoo_calibration([x.numpy() for x in inputs])
        if args.calibration is None and samples is None:
            raise BuildError(f"{model}: give --calibration FILE.npz (one array per model "
                             f"input, samples along axis 0)")
        manifest = compile_model(nac_path, args.target, args.output,
                                 calibration=args.calibration, samples=samples,
                                 method=args.calibration_method,
                                 percentile=args.percentile,
                                 batch=args.batch or batch, argmax=args.argmax)
    r = manifest["report"]
    shapes = ", ".join(f"{e['buffer']} {e['shape']}" for e in manifest["inputs"])
    print(f"wrote {args.output}: inputs {shapes}; {len(manifest['layers'])} layers, "
          f"{r['tiles']} tiles, "
          f"{r['tasks']} tasks, {r['binary_bytes']} bytes of binary for {manifest['device']} "
          f"in {r['compile_seconds']:.2f} s")
    return 0


def run_cmd(args):
    """``npu run DIR x.npy ... --on float|executor [--save STEM]``."""
    inputs = []
    for path in args.inputs:
        try:
            inputs.append(np.load(path))
        except (OSError, ValueError) as exc:
            raise BuildError(f"input {path}: {exc}") from None
    outputs, result = run_build(args.file, inputs, on=args.on or "executor")
    for k, out in enumerate(outputs):
        if args.save:
            target = Path(f"{args.save}.{k}.npy")
            np.save(target, out)
            print(f"output {k}: shape {list(out.shape)} {out.dtype} -> {target}")
        else:
            print(f"output {k}: shape {list(out.shape)} {out.dtype}\n{out}")
    if result is not None:
        overall, busy = result.mac_utilisation()
        print(f"executor: {result.total_cycles} cycles, NMU utilisation {overall:.3f} over the "
              f"run ({busy:.3f} while busy); bytes " + ", ".join(
                  f"{p} {n}" for p, n in result.bytes_moved().items()))
        if getattr(args, "report", False):
            print(f"{'instr':>6} {'op':<8}{'unit':<5}{'tasks':>6}{'cycles':>9}{'compute':>9}"
                  f"{'MACs':>11}{'util':>7}  bytes per path")
            for row in layer_report(load_build(args.file), result):
                span = row["last"] - (row["first"] or 0)
                print(f"{row['instruction']:>6} {row['op']:<8}{row['unit']:<5}{row['tasks']:>6}"
                      f"{span:>9}{row['compute_cycles']:>9}{row['macs']:>11}"
                      f"{row['utilisation']:>7.3f}  " + ", ".join(
                          f"{p} {n}" for p, n in sorted(row["bytes"].items())))
    return 0
