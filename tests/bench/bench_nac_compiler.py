"""Benchmark of the NAC compiler (``make bench``).

Per zoo model: compile time (export + passes + canonise + schedule, best of 3), number
of instructions, size of the .nac without weights (external storage) and, where the
``onnx`` package can export the model, the size of its ONNX graph without weights; MMAP
peak live saved results and peak preloaded parameter bytes, with FREE and without FREE.
"""

import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from nac import dumps  # noqa: E402
from nac.compile import compile_module, param_bytes  # noqa: E402
from nac.schedule import replay, schedule  # noqa: E402
from nac.zoo import ZOO, build  # noqa: E402


def onnx_graph_bytes(module, inputs):
    """Size of the exported .onnx file with every initializer in an external data file."""
    try:
        import onnx
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        program = torch.onnx.export(module, inputs, dynamo=True)
        onnx.save_model(program.model_proto, str(path), save_as_external_data=True,
                        all_tensors_to_one_file=True, location="weights.bin",
                        size_threshold=0)
        return path.stat().st_size


def main():
    torch.set_num_threads(1)
    print(f"{'model':<10} {'compile ms':>10} {'instr':>6} {'nac bytes':>10} {'onnx bytes':>10} "
          f"{'live w/ FREE':>12} {'live w/o FREE':>13} {'preload B w/ FREE':>17} "
          f"{'preload B w/o FREE':>18}")
    for name in sorted(ZOO):
        module, inputs = build(name)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            nac, weights, report = compile_module(module, inputs, internal_weights=False)
            times.append(time.perf_counter() - start)
        size = len(dumps(nac))
        no_free = replay(nac.ops, schedule(nac.ops, free=False),
                         param_bytes=param_bytes(nac, weights))
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
            onnx_size = onnx_graph_bytes(module, inputs)
        print(f"{name:<10} {min(times) * 1000:>10.1f} {len(nac.ops):>6} {size:>10} "
              f"{onnx_size if onnx_size is not None else 'n/a':>10} "
              f"{report.peak_live_results:>12} {no_free.peak_live_results:>13} "
              f"{report.peak_preloaded_bytes:>17} {no_free.peak_preloaded_bytes:>18}")
    try:
        import onnx  # noqa: F401
    except ImportError:
        print("(onnx n/a: the onnx package is not installed; ONNX sizes are not measured)")


if __name__ == "__main__":
    main()
