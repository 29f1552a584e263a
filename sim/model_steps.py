"""The model steps of ``npu sim`` (``make sim``): compiled models on the engine RTL.

Each step compiles a model for a shipped device (``nem.build_dir.compile_model`` into
``build/e2e/<model>-<device>/``), runs its bound binary on the RTL (``sim.model_run``),
checks every buffer against the executor byte for byte and the outputs against the float
model (largest error, top-1 agreement). The digits CNN (``nac.zoo.digits_cnn``) runs a small
batch of held-out images on the RTL and all held-out images on the executor and in float
(accuracy); the zoo models run their example shapes on standard normal inputs. A model the
back-end refuses is skipped with the reason; a model the RTL cannot run yet fails with the
engine's error, which names the task, its opcode and the unit's cause.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sim.runner import BUILD_ROOT

__all__ = ["DIGITS_BATCH", "MODELS", "StepResult", "run_model_step"]

#: Held-out digits images per RTL run (the executor and float runs take all of them).
DIGITS_BATCH = 8
#: Model steps in order: the digits CNN, then the zoo (``nac.zoo.ZOO``).
MODELS = ("digits", "mlp", "cnn", "residual", "attention")


@dataclass
class StepResult:
    """One model step: ``result`` is ``pass``, ``FAIL`` or ``skip``."""

    name: str
    result: str
    detail: str
    seconds: float
    run: object = None  # sim.model_run.ModelRun
    floats: list | None = None
    numbers: dict = field(default_factory=dict)


def _nac_of(module, example, path):
    from nac.compile import compile_module
    from nac.weights import write_nac

    nac, _, _ = compile_module(module, tuple(example))
    write_nac(nac, path)
    return path


def _trained_digits(progress):
    """``nac.zoo.digits_cnn()``, its trained weights cached in ``build/e2e`` under the hash
    of ``nac/zoo.py`` (training is deterministic; a change to the zoo trains again)."""
    import hashlib

    import torch

    from nac import zoo

    key = hashlib.sha256(Path(zoo.__file__).read_bytes()).hexdigest()[:12]
    cache = BUILD_ROOT / "e2e" / f"digits-weights-{key}.pt"
    if cache.is_file():
        progress(f"the trained digits CNN from {cache}")
        model, x_test, y_test = zoo.digits_cnn(epochs=0)  # the split and the architecture
        model.load_state_dict(torch.load(cache, weights_only=True))
        model.eval()
        return model, x_test, y_test
    progress("train the digits CNN (nac.zoo.digits_cnn)")
    model, x_test, y_test = zoo.digits_cnn()
    cache.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), cache)
    return model, x_test, y_test


def _digits(device, out, batch, progress):
    import torch
    from sklearn.datasets import load_digits

    from nem.build_dir import compile_model, run_build

    model, x_test, y_test = _trained_digits(progress)
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    x_train = x[np.random.default_rng(0).permutation(len(x))][:1400]
    numbers = {}
    with tempfile.TemporaryDirectory() as tmp:
        progress(f"compile for {device} (batch {batch} for the RTL, {len(x_test)} for "
                 "accuracy)")
        small = _nac_of(model, (torch.from_numpy(x_test[:batch]),), Path(tmp) / "b.nac")
        compile_model(small, device, out, samples=[x_train[:300]], batch=batch)
        whole = _nac_of(model, (torch.from_numpy(x_test),), Path(tmp) / "all.nac")
        compile_model(whole, device, out / "all", samples=[x_train[:300]],
                      batch=len(x_test))
    progress(f"executor and float on all {len(x_test)} held-out images")
    (q,), _ = run_build(out / "all", [x_test], on="executor")
    (f,), _ = run_build(out / "all", [x_test], on="float")
    numbers.update(int8_accuracy=float((q.argmax(1) == y_test).mean()),
                   float_accuracy=float((f.argmax(1) == y_test).mean()),
                   agreement=float((q.argmax(1) == f.argmax(1)).mean()), held_out=len(x_test))
    return [x_test[:batch]], numbers


def _zoo(name, device, out, progress):
    from nac import zoo
    from nem.backend_cli import zoo_calibration
    from nem.build_dir import compile_model

    module, inputs = zoo.build(name)
    with tempfile.TemporaryDirectory() as tmp:
        progress(f"compile for {device}")
        nac = _nac_of(module, inputs, Path(tmp) / "model.nac")
        compile_model(nac, device, out, samples=zoo_calibration([x.numpy() for x in inputs]),
                      batch=int(inputs[0].shape[0]))
    rng = np.random.default_rng(7)
    return [rng.standard_normal(tuple(x.shape)).astype(np.float32) for x in inputs], {}


def run_model_step(name, *, device="sim", batch=DIGITS_BATCH, stalls=False, seed=1,
                   progress=print) -> StepResult:
    """Compile model ``name`` for ``device``, run it on the RTL, check it.

    Parameters
    ----------
    name : str
        ``digits`` or a zoo model.
    device : str
        ``small`` or ``sim``.
    batch : int
        Held-out digits images per RTL run.
    stalls : bool
        Random AXI pauses.
    seed : int
        Seed of the AXI pauses.
    progress : callable
        Called with a line per stage.

    Returns
    -------
    StepResult
        ``pass`` when the RTL ends done and equals the executor byte for byte; ``skip``
        when the back-end refuses the model (the reason in ``detail``); else ``FAIL``.
    """
    from nem.backend_cli import USER_ERRORS
    from nem.build_dir import run_build
    from sim.model_run import compare_outputs, run_model

    began = time.monotonic()
    out = BUILD_ROOT / "e2e" / f"{name}-{device}"
    try:
        if name == "digits":
            inputs, numbers = _digits(device, out, batch, progress)
        else:
            inputs, numbers = _zoo(name, device, out, progress)
    except USER_ERRORS as exc:
        return StepResult(name, "skip", f"the back-end refuses it: {exc}",
                          time.monotonic() - began)
    progress(f"RTL run ({'x'.join(map(str, inputs[0].shape))} input) against the executor")
    run = run_model(out, inputs, stalls=stalls, seed=seed)
    floats, _ = run_build(out, inputs, on="float")
    numbers.update(rtl_cycles=run.rtl.counters["CYCLES"],
                   executor_cycles=run.executor.total_cycles, ratio=run.ratio,
                   rtl_seconds=run.seconds)
    seconds = time.monotonic() - began
    if run.error:
        return StepResult(name, "FAIL", run.error, seconds, run, floats, numbers)
    if run.mismatch is not None:
        return StepResult(name, "FAIL", f"MISMATCH: {run.mismatch}", seconds, run, floats,
                          numbers)
    (row,) = compare_outputs(floats[:1], run.outputs[:1])
    numbers.update(max_error=row["max_error"], scale=row["scale"],
                   agree=row["agree"], rows=row["rows"])
    detail = (f"RTL == executor ({run.rtl.counters['CYCLES']} cycles, executor "
              f"{run.executor.total_cycles}, ratio {run.ratio:.2f}); float vs RTL: max "
              f"error {row['max_error']:.3g} of {row['scale']:.3g}, top-1 "
              f"{row['agree']}/{row['rows']}")
    if "int8_accuracy" in numbers:
        detail += (f"; all {numbers['held_out']} held-out: int8 "
                   f"{100 * numbers['int8_accuracy']:.2f} %, float "
                   f"{100 * numbers['float_accuracy']:.2f} %, agreement "
                   f"{100 * numbers['agreement']:.2f} %")
    return StepResult(name, "pass", detail, seconds, run, floats, numbers)
