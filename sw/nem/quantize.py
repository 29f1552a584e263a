"""Post-training int8 quantisation of a model graph (TFLite-style, ``docs/numerics.md``).

Activations: asymmetric per tensor, ranges from calibration (``minmax``: the observed
extremes; ``percentile``: the ``p`` and ``100 - p`` percentiles of all observed values, which
clips rare outliers). Weights: symmetric per output channel. Bias: int32 in the accumulator
domain. Every formula is a function of ``nem.numerics``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nem.modelgraph import GraphError, evaluate
from nem.numerics import QuantParams, activation_qparams, bias_codes, quantize_real, weight_scales

__all__ = ["CALIBRATION_METHODS", "TensorQuant", "calibrate", "load_calibration",
           "quantize_bias", "quantize_weights", "tensor_quant"]

CALIBRATION_METHODS = ("minmax", "percentile")
_MAX_KEPT = 1 << 20  # values kept per tensor for the percentile method


@dataclass(frozen=True)
class TensorQuant:
    """Quantisation of one activation tensor: ``real = scale * (q - zero_point)``, int8."""

    scale: float
    zero_point: int
    lo: float  # the calibrated range it was chosen from
    hi: float

    def as_json(self):
        """A JSON-able dict (the build directory's ``quant.json`` entry)."""
        return {"dtype": "i8", "scale": self.scale, "zero_point": self.zero_point,
                "range": [self.lo, self.hi]}


def load_calibration(path, graph):
    """Calibration inputs from an ``.npz`` file: one array per model input, in input order.

    Arrays are matched by the model's input name when the archive has it, else by position
    (``np.savez`` names them ``arr_0``, ``arr_1``, ...). Samples lie along axis 0.
    """
    try:
        with np.load(path) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as exc:
        raise GraphError(f"calibration file {path}: {exc}") from None
    names = [n.name for n in graph.nodes if n.kind == "input"]
    if len(arrays) != len(names):
        raise GraphError(f"calibration file {path}: {len(arrays)} array(s), the model has "
                         f"{len(names)} input(s) ({', '.join(names)})")
    if all(n in arrays for n in names):
        return [arrays[n] for n in names]
    return list(arrays.values())


def calibrate(graph, samples, batch, *, method="minmax", percentile=99.99):
    """Observed range ``(lo, hi)`` of every value of the graph over the calibration set.

    Parameters
    ----------
    graph : ModelGraph
    samples : list of numpy.ndarray
        One array per model input with samples along axis 0.
    batch : int
        The model's static batch: samples are run ``batch`` at a time (the last partial
        batch is filled up with the first samples).
    method : {"minmax", "percentile"}
    percentile : float
        For ``percentile``: the upper percentile (the lower is ``100 - percentile``).

    Returns
    -------
    dict of int to (float, float)
    """
    if method not in CALIBRATION_METHODS:
        raise GraphError(f"calibration method must be one of {CALIBRATION_METHODS}, not "
                         f"{method!r}")
    n = len(samples[0])
    if any(len(s) != n for s in samples) or n == 0:
        raise GraphError("calibration arrays must all hold the same, non-zero number of samples")
    lo, hi, kept = {}, {}, {}
    for start in range(0, n, batch):
        take = np.arange(start, start + batch) % n
        values = evaluate(graph, [np.asarray(s, dtype=np.float32)[take] for s in samples])
        for index, v in values.items():
            if not isinstance(v, np.ndarray) or v.dtype.kind != "f" or not v.size:
                continue
            lo[index] = min(lo.get(index, np.inf), float(v.min()))
            hi[index] = max(hi.get(index, -np.inf), float(v.max()))
            if method == "percentile":
                kept.setdefault(index, []).append(v.ravel()[:_MAX_KEPT])
    if method == "percentile":
        for index, parts in kept.items():
            flat = np.concatenate(parts)
            lo[index], hi[index] = (float(v) for v in np.percentile(
                flat, [100.0 - percentile, percentile]))
    return {i: (lo[i], hi[i]) for i in lo}


def tensor_quant(lo, hi):
    """The int8 :class:`TensorQuant` of a calibrated range (``nem.numerics``)."""
    scale, zero_point = activation_qparams(lo, hi, "i8")
    return TensorQuant(scale, zero_point, float(lo), float(hi))


def quantize_weights(w, axis):
    """Symmetric per-channel int8 weights: ``(codes, scales)`` along ``axis``."""
    scales = weight_scales(w, axis)
    qp = QuantParams(scales, np.zeros(len(scales), dtype=np.int64), axis=axis)
    return quantize_real(w, "i8", qp), scales


def quantize_bias(b, x_scale, w_scales):
    """Bias codes (int32) in the accumulator domain ``s_x * s_w[n]``."""
    return bias_codes(b, x_scale, w_scales)
