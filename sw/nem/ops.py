"""What every compute opcode computes: the executor's kernels, on numpy arrays.

Two paths, both written out in ``docs/numerics.md``:

* **NMU integer path** (``gemm``, ``matmul``, ``conv2d`` with integer operands): int8 (or
  int4 weight) codes multiplied and summed exactly in int32, the input zero point folded
  into the bias, then requantised to the output type by :func:`nem.numerics.requantize`
  with parameters from :func:`nem.numerics.requant_params` (the binder calls the same
  function). An i32 output receives the raw accumulator.
* **Real-valued path** (every other opcode, and the NMU with float operands): integer
  operands are dequantised exactly to float64 (``s * (q - z)``; no descriptor means
  ``s = 1, z = 0``), float operands widened exactly to float64; the operation is evaluated in
  float64; the result is rounded once to the output type (:func:`nem.numerics.quantize_real`
  for integers: round half to even, then saturate; :func:`nem.numerics.round_float` for
  floats: round to nearest even). For f16 gemm/conv this means products and sums in float64,
  i.e. at least the precision ``accum_type=f32`` asks for, and one rounding to f16.

Every kernel returns its outputs and the work it did (``macs`` for the NMU, ``elems``
otherwise), which the cycle model turns into time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from nem import opcodes
from nem.checker import Region
from nem.consteval import EvalError, evaluate
from nem.elemtypes import BITS, ELEM_RANGES, FLOAT_TYPES
from nem.numerics import (
    ELTWISE_OPS,
    REQUANT_TYPES,
    EltwiseParams,
    GroupRequant,
    NumericsError,
    QuantParams,
    Requant,
    argmax_int8,
    avgpool_int8,
    cast_int,
    dequantize_codes,
    eltwise_int8,
    eltwise_params,
    fold_input_zero_point,
    group_requant_params,
    maxpool_int8,
    quantize_real,
    reduce_max_int8,
    requant_params,
    requantize,
    requantize_groups,
    round_float,
)
from nem.shapes import conv_out
from nem.tree import Quant

__all__ = [
    "BINARY",
    "UNARY",
    "CstlInt8",
    "GroupWeights",
    "NotSupported",
    "OpError",
    "Work",
    "cstl_int8",
    "lookup_table",
    "nmu_group_requant",
    "nmu_requant",
    "quant_params",
    "reduction_axes",
    "run_compute",
    "table_opcodes",
]

#: Priority-2 opcodes this executor rejects (with the reason).
UNSUPPORTED = {
    "conv1d": "conv1d has no hardware support (nem.md: Future); lower it to conv2d",
    "conv3d": "conv3d has no hardware support (nem.md: Future)",
    "depthwise_conv2d": "depthwise_conv2d has no hardware support yet (nem.md: Future); "
    "use conv2d with groups = channels",
    "compute": "the generic compute escape hatch names no executable operation",
}


class OpError(ValueError):
    """An operation cannot be evaluated with these operands (message names the task)."""


class NotSupported(OpError):
    """The opcode or operand combination is valid NEM that this executor does not run."""


@dataclass(frozen=True)
class Work:
    """What a task did, for the cycle model: MACs (NMU), elements (CSTL/VPU), or the
    contiguous runs a copy walks (DMA/sDMA); ``table`` / ``entry``: a CSTL int8 task read
    a lookup table (its 256 bytes) / a binary eltwise entry from the data section."""

    macs: int = 0
    elems: int = 0
    rows: int = 0
    table: bytes = b""
    entry: bool = False


# --- quantization descriptors -----------------------------------------------------------------


def _num(value, consts) -> float:
    return float(evaluate(value, consts, floats=True))


def quant_params(region: Region, consts: dict[str, int]) -> QuantParams | None:
    """The evaluated quantization descriptor of ``region`` (``None`` when it has none)."""
    q: Quant | None = region.quant
    if q is None:
        return None
    try:
        if q.kind == "per_tensor":
            scales = [_num(q.scale, consts)]
            zps = [_num(q.zero_point, consts)]
            axis = group = None
        else:
            scales = [_num(v, consts) for v in q.scales]
            zps = [_num(v, consts) for v in q.zero_points]
            axis = int(evaluate(q.axis, consts))
            group = int(evaluate(q.group_size, consts)) if q.kind == "per_group" else None
    except (EvalError, TypeError) as exc:
        raise OpError(f"{region.label}: quantization descriptor does not evaluate: {exc}") from None
    if any(not (math.isfinite(s) and s > 0) for s in scales):
        raise OpError(f"{region.label}: quantization scales must be finite and > 0, got {scales}")
    if any(z != int(z) for z in zps):
        raise OpError(f"{region.label}: zero points must be integers, got {zps}")
    return QuantParams(
        np.array(scales, dtype=np.float64), np.array([int(z) for z in zps], dtype=np.int64),
        axis, group,
    )


# --- result rounding -----------------------------------------------------------------------


def _to_elem(real: np.ndarray, region: Region, qp: QuantParams | None) -> np.ndarray:
    if region.elem in FLOAT_TYPES:
        return round_float(real, region.elem)
    return quantize_real(real, region.elem, qp)


def _real(values: np.ndarray, region: Region, qp: QuantParams | None) -> np.ndarray:
    if region.elem in FLOAT_TYPES:
        return np.asarray(values, dtype=np.float64)
    return dequantize_codes(values, qp)


# --- NMU ----------------------------------------------------------------------------------------


def _weight_scales(qp: QuantParams, region: Region, channels: int, what: str) -> np.ndarray:
    if np.any(qp.zero_points != 0):
        raise NotSupported(
            f"{what}: weight {region.label} has a non-zero zero point; the int8 scheme has "
            "symmetric weights (docs/numerics.md)"
        )
    if qp.axis is None:
        return np.repeat(qp.scales, channels)
    if qp.axis % len(region.shape) != len(region.shape) - 1:
        raise NotSupported(
            f"{what}: weight {region.label} must be quantised per tensor, per output channel "
            "(the last axis), or per group along the last axis or a reduction axis"
        )
    if qp.group_size is not None:  # groups of output channels: one scale per channel
        return qp.scales[np.arange(channels) // qp.group_size]
    return qp.scales


def reduction_axes(name: str, rank: int) -> tuple[int, ...]:
    """The axes of an NMU opcode's weight (B of gemm/matmul, HWIO W of conv2d) that the
    accumulation sums over: K of ``[..., K, N]``, H, W and I of ``HWIO``."""
    return (0, 1, 2) if name == "conv2d" else (rank - 2,)


@dataclass(frozen=True)
class GroupWeights:
    """The int4 per-group scheme of one NMU task (``docs/numerics.md``): the weight's
    groups run along ``axis`` (a reduction axis), ``group_size`` elements each."""

    x_zero_point: int
    axis: int
    group_size: int
    requant: GroupRequant


def nmu_group_requant(name: str, regions: list[Region], qps: list) -> GroupWeights | None:
    """The per-group output stage of an integer gemm/matmul/conv2d whose weight is
    quantised per group along a reduction axis; ``None`` for any other task.

    ``regions`` and ``qps`` as for :func:`nmu_requant`; the binder stores the result.

    Raises
    ------
    OpError, NotSupported
        When the other operands do not fit the scheme (i4 weights, X and Y per tensor).
    """
    wr, yr = regions[1], regions[-1]
    qx, qw, qy = qps[0], qps[1], qps[-1]
    if name not in opcodes.groups().nmu or qw is None or qw.group_size is None:
        return None
    rank = len(wr.shape)
    axis = qw.axis % rank
    if axis == rank - 1:
        return None  # groups of output channels: per-channel scales (nmu_requant)
    if axis not in reduction_axes(name, rank):
        raise NotSupported(
            f"{name}: weight {wr.label} is quantised per group along batch axis {qw.axis}; "
            "groups run along a reduction axis or the output channels"
        )
    if wr.elem != "i4":
        raise NotSupported(
            f"{name}: weight {wr.label} is {wr.elem} quantised per group along reduction axis "
            f"{qw.axis}: that is the int4 weight format (elem=i4); quantise {wr.elem} weights "
            "per tensor or per output channel"
        )
    if qx is None or qy is None or yr.elem not in REQUANT_TYPES:
        raise OpError(
            f"{name}: a weight quantised per group needs a quantised input and a quantised "
            f"{'/'.join(REQUANT_TYPES)} output (each group has its own scale)"
        )
    if qx.axis is not None or qy.axis is not None:
        raise NotSupported(f"{name}: input and output must be quantised per tensor")
    try:
        rq = group_requant_params(
            float(qx.scales[0]), qw.scales, qw.zero_points, float(qy.scales[0]),
            int(qy.zero_points[0]), out_dtype=yr.elem, w_range=ELEM_RANGES[wr.elem],
        )
    except NumericsError as exc:
        raise OpError(f"{name}: {exc}") from None
    return GroupWeights(int(qx.zero_points[0]), axis, qw.group_size, rq)


def _group_path(name, x, w, bias, gw: GroupWeights, acc_fn):
    """int4 weights per group: one int32 accumulator per group of ``w`` along ``gw.axis``
    (``acc_fn(x - z_x, w_g)`` with ``w_g`` the group's ``w - z_w[g]``, 0 elsewhere), the
    bias in group 0, then :func:`nem.numerics.requantize_groups`."""
    w = np.asarray(w, np.int64)
    xz = np.asarray(x, np.int64) - gw.x_zero_point
    index = np.arange(w.shape[gw.axis]) // gw.group_size
    along = [1] * w.ndim
    along[gw.axis] = w.shape[gw.axis]
    index = index.reshape(along)
    accs = []
    for g, zw in enumerate(gw.requant.w_zero_points):
        if acc_fn is np.matmul:  # K is the last axis of x: the group's slice alone
            ks = slice(g * gw.group_size, (g + 1) * gw.group_size)
            acc = np.matmul(xz[..., ks], w[..., ks, :] - int(zw))
        else:
            acc = acc_fn(xz, np.where(index == g, w - int(zw), 0))
        if g == 0 and bias is not None:
            acc = acc + bias
        accs.append(acc)
    try:
        return requantize_groups(np.stack(accs), gw.requant)
    except NumericsError as exc:
        raise OpError(f"{name}: {exc}") from None


def nmu_requant(name: str, regions: list[Region], qps: list) -> tuple[int, Requant | None]:
    """The int8 NMU output stage of gemm/matmul/conv2d: (input zero point, requantisation).

    ``regions`` are the task's operands, inputs (X, W, optional bias) then the output, and
    ``qps`` their :func:`quant_params`. The requantisation is ``None`` for an ``i32``
    output without a descriptor (raw accumulators). The binder stores the same values for
    the hardware's output stage.

    Raises
    ------
    OpError, NotSupported
        When descriptors are missing or of a kind the int8 scheme does not support.
    """
    wr, yr = regions[1], regions[-1]
    qx, qw, qy = qps[0], qps[1], qps[-1]
    zx = 0 if qx is None else int(qx.zero_points[0])
    if yr.elem == "i32" and qy is None:
        return zx, None
    if qx is None or qw is None or qy is None:
        missing = [r.label for r, q in zip(regions, qps, strict=True) if q is None]
        raise OpError(
            f"{name}: an integer {name} with a {yr.elem} output needs quantization descriptors "
            f"on X, W and Y; missing on {', '.join(missing)}"
        )
    if qx.axis is not None or qy.axis is not None:
        raise NotSupported(f"{name}: input and output must be quantised per tensor")
    ws = _weight_scales(qw, wr, wr.shape[-1], name)
    try:
        return zx, requant_params(
            float(qx.scales[0]), ws, float(qy.scales[0]), int(qy.zero_points[0]),
            out_dtype=yr.elem,
        )
    except NumericsError as exc:
        raise OpError(f"{name}: {exc}") from None


def _int_path(name, x, w, bias, regions, qps, acc_fn, reduce_axes):
    """Shared int8 x int8 (or int4) -> i32 -> requantised output of gemm/matmul/conv2d."""
    channels = regions[1].shape[-1]
    zx, rq = nmu_requant(name, regions, qps)
    base = np.zeros(channels, np.int64) if bias is None else bias
    try:
        # keepdims: for a batched matmul the folded bias is per batch of B ([..., 1, N]).
        eff = fold_input_zero_point(base, w, zx, reduce_axes, keepdims=True)
        acc = acc_fn(x, w, eff, zx)
        return acc if rq is None else requantize(acc, rq, channel_axis=-1)
    except NumericsError as exc:
        raise OpError(f"{name}: {exc}") from None


def _matmul_acc(x, w, eff, zx):
    acc = np.matmul(np.asarray(x, np.int64), np.asarray(w, np.int64)) + np.asarray(eff, np.int64)
    if acc.size and (acc.min() < -(1 << 31) or acc.max() >= 1 << 31):
        raise NumericsError("int32 accumulator overflow")
    return acc


def _gemm(name, vals, regions, qps, attrs):
    a, b = vals[0], vals[1]
    y = regions[-1]
    c = vals[2] if len(vals) > 3 else None
    k = regions[0].shape[-1]
    macs = math.prod(y.shape) * k
    ints = all(r.elem not in FLOAT_TYPES for r in regions[:2])
    if ints:
        bias = None
        if c is not None:
            if regions[2].elem != "i32":
                raise NotSupported(f"{name}: an integer gemm's bias must be i32")
            bias = np.asarray(c, np.int64)
        gw = nmu_group_requant(name, regions, qps)
        if gw is not None:
            out = _group_path(name, a, b, bias, gw, np.matmul)
            return [out], Work(macs=macs)
        out = _int_path(name, a, b, bias, regions, qps, _matmul_acc, reduce_axes=-2)
        return [out], Work(macs=macs)
    real = np.matmul(_real(a, regions[0], qps[0]), _real(b, regions[1], qps[1]))
    if c is not None:
        real = real + _real(c, regions[2], qps[2])
    return [_to_elem(real, y, qps[-1])], Work(macs=macs)


def _conv_real(x, w, pads, strides, dil, groups):
    """NHWC x HWIO convolution in float64 by summing shifted window products."""
    n, h, wd, c = x.shape
    kh, kw, cg, f = w.shape
    top, left, bottom, right = pads
    xp = np.zeros((n, h + top + bottom, wd + left + right, c), dtype=x.dtype)
    xp[:, top : top + h, left : left + wd, :] = x
    oh = conv_out(h, kh, top, bottom, strides[0], dil[0])
    ow = conv_out(wd, kw, left, right, strides[1], dil[1])
    out = np.zeros((n, oh, ow, f), dtype=x.dtype)
    fg = f // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = xp[
                    :,
                    i * dil[0] : i * dil[0] + strides[0] * (oh - 1) + 1 : strides[0],
                    j * dil[1] : j * dil[1] + strides[1] * (ow - 1) + 1 : strides[1],
                    g * cg : (g + 1) * cg,
                ]
                out[..., g * fg : (g + 1) * fg] += patch @ w[i, j, :, g * fg : (g + 1) * fg]
    return out


def _conv2d(name, vals, regions, qps, attrs):
    x, w = vals[0], vals[1]
    y = regions[-1]
    b = vals[2] if len(vals) > 3 else None
    pads = tuple(attrs.get("pads") or (0, 0, 0, 0))
    strides = tuple(attrs.get("strides") or (1, 1))
    dil = tuple(attrs.get("dilations") or (1, 1))
    groups = int(attrs.get("groups", 1) or 1)
    kh, kw, cg, _ = regions[1].shape
    macs = math.prod(y.shape) * kh * kw * cg
    ints = all(r.elem not in FLOAT_TYPES for r in regions[:2])
    if ints:
        bias = None
        if b is not None:
            if regions[2].elem != "i32":
                raise NotSupported(f"{name}: an integer conv2d's bias must be i32")
            bias = np.asarray(b, np.int64)

        def acc_fn(xv, wv, eff, zx):
            # A padded position holds the input zero point (docs/numerics.md).
            xv = np.asarray(xv, np.int64)
            n_, h_, w_, c_ = xv.shape
            top, left, bottom, right = pads
            xp = np.full((n_, h_ + top + bottom, w_ + left + right, c_), zx, np.int64)
            xp[:, top : top + h_, left : left + w_, :] = xv
            acc = _conv_real(xp, np.asarray(wv, np.int64), (0, 0, 0, 0), strides, dil, groups)
            acc = acc + np.asarray(eff, np.int64)
            if acc.size and (acc.min() < -(1 << 31) or acc.max() >= 1 << 31):
                raise NumericsError("int32 accumulator overflow")
            return acc

        gw = nmu_group_requant(name, regions, qps)
        if gw is not None:
            def group_acc(xz, wg):
                # x - z_x is 0 at a padded position (docs/numerics.md)
                return _conv_real(xz, wg, pads, strides, dil, groups)

            out = _group_path(name, x, w, bias, gw, group_acc)
            return [out], Work(macs=macs)
        out = _int_path(name, x, w, bias, regions, qps, acc_fn, reduce_axes=(0, 1, 2))
        return [out], Work(macs=macs)
    real = _conv_real(
        _real(x, regions[0], qps[0]), _real(w, regions[1], qps[1]), pads, strides, dil, groups
    )
    if b is not None:
        real = real + _real(b, regions[2], qps[2])
    return [_to_elem(real, y, qps[-1])], Work(macs=macs)


# --- real-valued operations --------------------------------------------------------------------


def _erf(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


def _safe(fn):
    def run(*args):
        with np.errstate(all="ignore"):
            return fn(*args)

    return run


#: Kernels of the one-input elementwise opcodes (``groups().unary | groups().other_eltwise``),
#: on float64 values; ``a`` holds the attributes.
UNARY: dict[str, Callable] = {
    "relu": lambda x, a: np.maximum(x, 0.0),
    "leaky_relu": lambda x, a: np.where(x >= 0, x, x * float(a.get("alpha", 0.01))),
    "sigmoid": lambda x, a: 1.0 / (1.0 + np.exp(-x)),
    "tanh": lambda x, a: np.tanh(x),
    "exp": lambda x, a: np.exp(x),
    "log": lambda x, a: np.log(x),
    "sqrt": lambda x, a: np.sqrt(x),
    "abs": lambda x, a: np.abs(x),
    "neg": lambda x, a: -x,
    "gelu": lambda x, a: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "silu": lambda x, a: x / (1.0 + np.exp(-x)),
    "clamp": lambda x, a: np.clip(
        x, float(a.get("min_val", -np.inf)), float(a.get("max_val", np.inf))
    ),
}
#: Kernels of the two-input elementwise opcodes (``groups().binary``).
BINARY: dict[str, Callable] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "min": np.minimum,
    "max": np.maximum,
    "pow": np.power,
}


def _pool(name, x, attrs):
    k = attrs.get("kernel_shape")
    pads = tuple(attrs.get("pads") or (0, 0, 0, 0))
    strides = tuple(attrs.get("strides") or (1, 1))
    n, h, w, c = x.shape
    top, left, bottom, right = pads
    fill = -np.inf if name == "maxpool" else 0.0
    xp = np.full((n, h + top + bottom, w + left + right, c), fill)
    xp[:, top : top + h, left : left + w, :] = x
    valid = np.zeros(xp.shape[1:3])
    valid[top : top + h, left : left + w] = 1.0
    oh = (h + top + bottom - k[0]) // strides[0] + 1
    ow = (w + left + right - k[1]) // strides[1] + 1
    windows = [(i, j) for i in range(k[0]) for j in range(k[1])]
    acc = None
    count = np.zeros((oh, ow))
    for i, j in windows:
        part = xp[:, i : i + strides[0] * (oh - 1) + 1 : strides[0],
                  j : j + strides[1] * (ow - 1) + 1 : strides[1], :]
        count += valid[i : i + strides[0] * (oh - 1) + 1 : strides[0],
                       j : j + strides[1] * (ow - 1) + 1 : strides[1]]
        if acc is None:
            acc = part.copy()
        elif name == "maxpool":
            acc = np.maximum(acc, part)
        else:
            acc = acc + part
    if name == "avgpool":
        # The mean over the window's positions inside the input (padding not counted).
        acc = acc / np.maximum(count, 1.0)[None, :, :, None]
    return acc


def _norm(name, x, extra, attrs):
    # Every opcode here works along the one axis ``axis`` (nem.md: "along a specified
    # axis"); layernorm / rmsnorm's scale and bias have shape [dim[axis]] and apply along it.
    axis = attrs.get("axis", -1) % x.ndim
    axes = axis
    eps = float(attrs.get("epsilon", 1e-5) if attrs.get("epsilon") is not None else 1e-5)
    if name == "layernorm":
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
        y = (x - mean) / np.sqrt(var + eps)
    elif name == "rmsnorm":
        y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    elif name == "softmax":
        e = np.exp(x - x.max(axis=axes, keepdims=True))
        return e / e.sum(axis=axes, keepdims=True)
    else:  # log_softmax
        z = x - x.max(axis=axes, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=axes, keepdims=True))
    along = [1] * x.ndim
    along[axis] = x.shape[axis]
    if extra:
        y = y * np.reshape(extra[0], along)
    if len(extra) > 1:
        y = y + np.reshape(extra[1], along)
    return y


def _slice(x, attrs):
    starts, ends = list(attrs.get("starts") or ()), list(attrs.get("ends") or ())
    axes = list(attrs.get("axes") or range(len(starts)))
    steps = list(attrs.get("steps") or [1] * len(starts))
    index = [slice(None)] * x.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps, strict=False):
        index[ax % x.ndim] = slice(s, e, st)
    return x[tuple(index)]


def _pad(x, attrs, cv):
    pads = list(attrs.get("pads") or ())
    rank = x.ndim
    width = [(pads[k], pads[k + rank]) for k in range(rank)]
    mode = attrs.get("mode") or "constant"
    if mode == "constant":
        return np.pad(x, width, mode="constant", constant_values=cv)
    if mode in ("reflect", "edge"):
        return np.pad(x, width, mode=mode)
    raise OpError(f"pad: mode must be constant, reflect or edge, not {mode!r}")


def _reduce(name, x, attrs):
    keep = bool(attrs.get("keepdims", True) if attrs.get("keepdims") is not None else True)
    if name in ("argmax", "argmin"):
        axis = attrs.get("axis", 0) or 0
        fn = np.argmax if name == "argmax" else np.argmin
        out = fn(x, axis=axis)
        return np.expand_dims(out, axis) if keep else out
    axes = attrs.get("axes")
    axes = tuple(axes) if axes else None
    fn = {"reduce_sum": np.sum, "reduce_max": np.max, "reduce_min": np.min}[name]
    return fn(x, axis=axes, keepdims=keep)


def _real_op(name, vals, regions, qps, ins_n, attrs):
    """Evaluate a real-valued (CSTL/VPU) operation; returns float64 results per output."""
    reals = [_real(v, r, q) for v, r, q in zip(vals[:ins_n], regions[:ins_n], qps[:ins_n],
                                                strict=True)]
    x = reals[0]
    group = opcodes.groups()
    fn = UNARY.get(name)
    if fn is not None:
        return [_safe(fn)(x, attrs)]
    if name in BINARY:
        return [_safe(BINARY[name])(x, reals[1])]
    if name in group.pooling:
        return [_pool(name, x, attrs)]
    if name in group.normalization | group.softmax:
        return [_safe(_norm)(name, x, reals[1:], attrs)]
    if name == "transpose":
        return [np.transpose(x, attrs.get("perm"))]
    if name == "reshape":
        return [x.reshape(attrs.get("target_shape"))]
    if name == "slice":
        return [_slice(x, attrs)]
    if name == "concat":
        return [np.concatenate(reals, axis=attrs.get("axis", 0) or 0)]
    if name == "split":
        axis = attrs.get("axis", 0) or 0
        cuts = np.cumsum(list(attrs.get("split_sizes") or ()))[:-1]
        return list(np.split(x, cuts, axis=axis))
    if name == "pad":
        return [_pad(x, attrs, float(attrs.get("constant_value") or 0.0))]
    if name == "gather":
        idx = np.asarray(vals[1], dtype=np.int64)
        axis = attrs.get("axis", 0) or 0
        size = x.shape[axis]
        if idx.size and (idx.min() < -size or idx.max() >= size):
            raise OpError(f"gather: index outside [-{size}, {size}) on axis {axis}")
        return [np.take(x, idx, axis=axis)]
    if name in group.conversion:
        return [x]
    if name in group.reduction:
        return [_reduce(name, x, attrs)]
    raise NotSupported(f"{name}: no executor kernel")


# --- the CSTL's int8 path ----------------------------------------------------------------------

#: The 256 i8 codes in table order: entry ``b`` is the code whose byte is ``b``.
TABLE_CODES = np.arange(256, dtype=np.int64).astype(np.uint8).view(np.int8)


def table_opcodes() -> frozenset[str]:
    """Opcodes whose i8 -> i8 task is a lookup table: the unary elementwise ones and clamp."""
    g = opcodes.groups()
    return g.unary | g.other_eltwise


def lookup_table(opcode: str, attrs: dict, q_in: QuantParams | None,
                 q_out: QuantParams | None) -> np.ndarray:
    """The 256 output codes (int8, entry ``b`` for input byte ``b``) of an i8 -> i8 task.

    ``opcode`` is a :func:`table_opcodes` opcode, or ``None`` for a requantisation alone
    (pooling / reduce_max to another descriptor). Computed with the executor's own formula:
    dequantise, the float64 kernel of :data:`UNARY`, :func:`nem.numerics.quantize_real`;
    every step is elementwise, so ``table[q & 0xFF]`` equals the formula for every code.
    """
    real = dequantize_codes(TABLE_CODES, q_in)
    if opcode is not None:
        real = _safe(UNARY[opcode])(real, attrs)
    return quantize_real(real, "i8", q_out)


@dataclass(frozen=True)
class CstlInt8:
    """What a task on the CSTL's int8 path needs beyond its operands: a lookup table (the
    ``TABLE`` register's entry) and the binary eltwise parameters (``REQUANT``'s entry)."""

    table: np.ndarray | None
    eltwise: EltwiseParams | None


def _same(a: QuantParams | None, b: QuantParams | None) -> bool:
    def key(q):
        return (1.0, 0) if q is None else (float(q.scales[0]), int(q.zero_points[0]))

    return key(a) == key(b)


def cstl_int8(opcode: str, regions: list[Region], qps: list, nin: int,
              attrs: dict) -> CstlInt8 | None:
    """The int8 path of a CSTL task, or ``None`` when the task does not take it.

    The path is taken when every operand is i8 with a per-tensor descriptor (or none) and
    the opcode is a :func:`table_opcodes` one (a table), maxpool, avgpool or reduce_max (a
    table when the output descriptor differs from the input's), or a binary
    :data:`nem.numerics.ELTWISE_OPS` one (eltwise parameters).

    Raises
    ------
    OpError
        When the eltwise parameters cannot be represented (the message says why).
    """
    if any(r.elem != "i8" for r in regions) or any(
            q is not None and q.axis is not None for q in qps):
        return None
    if len(regions) - nin != 1:
        return None
    if opcode in table_opcodes() and nin == 1:
        return CstlInt8(lookup_table(opcode, attrs, qps[0], qps[1]), None)
    if opcode in ("maxpool", "avgpool", "reduce_max") and nin == 1:
        same = _same(qps[0], qps[1])
        return CstlInt8(None if same else lookup_table(None, {}, qps[0], qps[1]), None)
    if opcode in ELTWISE_OPS and nin == 2:
        sz = [(1.0, 0) if q is None else (float(q.scales[0]), int(q.zero_points[0]))
              for q in qps]
        try:
            return CstlInt8(None, eltwise_params(opcode, *sz[0], *sz[1], *sz[2]))
        except NumericsError as exc:
            raise OpError(str(exc)) from None
    return None


def _cstl_run(opcode, info: CstlInt8, vals, attrs):
    """The CSTL int8 path's result codes (docs/numerics.md)."""
    x = np.asarray(vals[0])
    if info.eltwise is not None:
        return eltwise_int8(opcode, x, np.asarray(vals[1]), info.eltwise)
    if opcode in table_opcodes():
        return info.table[x.astype(np.int8).view(np.uint8)]
    if opcode in ("maxpool", "avgpool"):
        pool = maxpool_int8 if opcode == "maxpool" else avgpool_int8
        y = pool(x, attrs.get("kernel_shape"), tuple(attrs.get("strides") or (1, 1)),
                 tuple(attrs.get("pads") or (0, 0, 0, 0)))
    else:
        axes = attrs.get("axes")
        keep = attrs.get("keepdims") is not False
        y = reduce_max_int8(x, tuple(axes) if axes else None, keep)
    y = np.asarray(y, dtype=np.int8)
    return y if info.table is None else info.table[y.view(np.uint8)]


def _cstl_work(opcode: str, regions: list[Region], attrs: dict) -> int:
    """Work of a CSTL int8 task in L1 bytes moved through its datapath (the cycle model
    divides it by ``elems_per_cycle``, the L1 word in bytes): the bytes of the largest
    operand (a cast to i32 writes four bytes per element), and for a pool every window tap
    of every output element."""
    nbytes = max(math.prod(r.shape) * BITS[r.elem] // 8 for r in regions)
    if opcode in ("maxpool", "avgpool"):
        kh, kw = attrs.get("kernel_shape") or (1, 1)
        nbytes = max(nbytes, math.prod(regions[-1].shape) * kh * kw)
    return nbytes


def run_compute(
    opcode: str,
    ins: list[tuple[Region, np.ndarray]],
    outs: list[Region],
    attrs: dict,
    consts: dict[str, int],
) -> tuple[list[np.ndarray], Work]:
    """Evaluate one compute task.

    Parameters
    ----------
    opcode : str
        Registry opcode name.
    ins : list of (Region, numpy.ndarray)
        Input regions and their current values.
    outs : list of Region
        Output regions (their types decide the rounding).
    attrs : dict
        Evaluated attributes (defaults included).
    consts : dict
        Program constants, for quantization descriptors that name them.

    Returns
    -------
    (list of numpy.ndarray, Work)
        One array per output region, of its element type and shape.

    Raises
    ------
    NotSupported, OpError
    """
    if opcode in UNSUPPORTED:
        raise NotSupported(UNSUPPORTED[opcode])
    regions = [r for r, _ in ins] + list(outs)
    vals = [v for _, v in ins] + [None] * len(outs)
    qps = [quant_params(r, consts) for r in regions]
    if opcode in ("gemm", "matmul"):
        return _gemm(opcode, vals, regions, qps, attrs)
    if opcode == "conv2d":
        return _conv2d(opcode, vals, regions, qps, attrs)
    if opcode == "cast":
        # A value conversion: quantization descriptors play no part.
        qps = [None] * len(regions)
        if all(r.elem not in FLOAT_TYPES for r in regions):
            y = cast_int(vals[0], outs[0].elem)
            return [y], Work(elems=_cstl_work(opcode, regions, attrs))
    if opcode == "argmax" and regions[0].elem == "i8" and outs[0].elem not in FLOAT_TYPES \
            and (qps[0] is None or qps[0].axis is None) and qps[-1] is None:
        axis = attrs.get("axis", 0) or 0
        y = argmax_int8(vals[0], axis, attrs.get("keepdims") is not False)
        return [cast_int(y, outs[0].elem)], Work(elems=_cstl_work(opcode, regions, attrs))
    info = cstl_int8(opcode, regions, qps, len(ins), attrs)
    if info is not None:
        y = _cstl_run(opcode, info, vals, attrs)
        if tuple(y.shape) != tuple(outs[0].shape):
            raise OpError(f"{opcode}: result has shape {list(y.shape)}, output "
                          f"{outs[0].label} has {list(outs[0].shape)}")
        return [y], Work(elems=_cstl_work(opcode, regions, attrs),
                         table=b"" if info.table is None else
                         np.asarray(info.table, np.int8).tobytes(),
                         entry=info.eltwise is not None)
    reals = _real_op(opcode, vals, regions, qps, len(ins), attrs)
    if len(reals) != len(outs):
        raise OpError(f"{opcode}: computes {len(reals)} output(s), {len(outs)} given")
    results = []
    for real, region, qp in zip(reals, outs, qps[len(ins):], strict=True):
        if tuple(np.shape(real)) != tuple(region.shape):
            raise OpError(
                f"{opcode}: result has shape {list(np.shape(real))}, output {region.label} "
                f"has {list(region.shape)}"
            )
        results.append(_to_elem(real, region, qp))
    elems = max([math.prod(r.shape) for r in regions] or [0])
    return results, Work(elems=elems)
