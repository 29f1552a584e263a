"""Benchmark of the NEM back-end (``npu compile --target``): compile time and executor numbers.

For the zoo models the back-end lowers (cnn, residual, mlp; attention is refused at its
layer norm), the digits CNN (batch 64) and one 256 x 256 x 256 gemm layer
(``nn.Linear(256, 256)`` on 256 rows), on both shipped devices: compile time (.nac ->
checked, bound build directory), tiles and tasks, executor cycles of the bound binary
(in-order issue, as the sequencer), NMU utilisation over the whole run and while busy, bytes
moved per path.

Run: ``.venv/bin/python tests/bench/bench_backend.py`` (part of ``make bench``).
"""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _models():
    import torch

    from nac import zoo

    out = []
    for name in ("cnn", "residual", "mlp", "attention"):
        module, inputs = zoo.build(name)
        x = inputs[0].numpy()
        rng = np.random.default_rng(0)
        out.append((name, module, x, rng.standard_normal((8 * len(x), *x.shape[1:]))
                    .astype(np.float32)))
    model, x_test, _ = zoo.digits_cnn()
    out.append(("digits", model, x_test[:64], x_test[64:264]))
    torch.manual_seed(0)
    gemm = torch.nn.Linear(256, 256).eval()
    rng = np.random.default_rng(0)
    out.append(("gemm256", gemm, rng.standard_normal((256, 256)).astype(np.float32),
                rng.standard_normal((512, 256)).astype(np.float32)))
    return out


def main():
    import torch

    from nac.compile import compile_module
    from nac.weights import write_nac
    from nem.build_dir import compile_model, run_build
    from nem.lower import LowerError

    print(f"{'model':<10}{'device':<7}{'compile s':>10}{'tiles':>7}{'tasks':>7}{'cycles':>10}"
          f"{'NMU run':>9}{'NMU busy':>9}  bytes per path")
    with tempfile.TemporaryDirectory() as tmp:
        for name, module, x, calib in _models():
            nac, _, _ = compile_module(module, (torch.from_numpy(x),))
            path = Path(tmp) / f"{name}.nac"
            write_nac(nac, path)
            for device in ("small", "sim"):
                out = Path(tmp) / f"{name}-{device}"
                started = time.perf_counter()
                try:
                    manifest = compile_model(path, device, out, samples=[calib],
                                             batch=len(x))
                except LowerError as exc:
                    print(f"{name:<10}{device:<7}refused: {exc}")
                    continue
                seconds = time.perf_counter() - started
                _, run = run_build(out, [x], on="executor")
                overall, busy = run.mac_utilisation()
                r = manifest["report"]
                paths = ", ".join(f"{p} {n}" for p, n in run.bytes_moved().items())
                print(f"{name:<10}{device:<7}{seconds:>10.2f}{r['tiles']:>7}{r['tasks']:>7}"
                      f"{run.total_cycles:>10}{overall:>9.3f}{busy:>9.3f}  {paths}")


if __name__ == "__main__":
    main()
