"""Integer numerics of the NPU: the bit-exact contract shared by executor, binder and RTL.

The formulas are written out in ``docs/numerics.md``; this module is their one
implementation in Python. The RTL implements the same integer steps.

int8 path (TFLite-style scheme)
-------------------------------
* Weights are symmetric per output channel (zero point 0); activations are asymmetric
  per tensor (scale ``s``, zero point ``z``): ``real = s * (q - z)``.
* Products ``x * w`` of int8 values are accumulated exactly in int32.
* The input zero point is folded into the bias (one choice, documented):
  ``bias_eff[n] = bias[n] - z_x * sum_k w[k, n]``. Consequently a padded input position
  holds ``z_x`` (the quantised real zero), never 0, so that it contributes nothing.
* Requantisation of an accumulator ``a`` (int32) to the output type:
  ``y = sat(z_y + ((a * m + 2**(t-1)) >> t))`` with ``m`` a 32-bit multiplier in
  ``[2**30, 2**31)``, ``t`` in ``[1, 62]``, ``>>`` an arithmetic shift of the exact 64-bit
  product: one rounding, half toward +infinity. ``(m, t)`` come from the real multiplier
  ``M = s_x * s_w[n] / s_y`` by :func:`quantize_multiplier`.
* Saturation to int8 ``[-128, 127]`` or int16; optional fused ReLU / ReLU6 clamp the
  lower (and upper) bound at the quantised 0 (and 6) before saturation.

int4 weights quantised per group along a reduction axis
--------------------------------------------------------
One int32 accumulator per group, ``acc_g = sum (x - z_x) * (w - z_w[g])`` over the group's
elements (the bias joins group 0), then one rounding of the 64-bit sum
``p = sum_g acc_g * m_g`` with integer multipliers sharing one shift ``t``:
:func:`group_requant_params`, :func:`requantize_groups`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nem.elemtypes import ELEM_RANGES, elem_type

__all__ = [
    "ELTWISE_LEFT_SHIFT",
    "ELTWISE_OPS",
    "GROUP_SUM_LIMIT",
    "INT_RANGES",
    "REQUANT_TYPES",
    "EltwiseParams",
    "GroupRequant",
    "NumericsError",
    "QuantParams",
    "Requant",
    "activation_qparams",
    "argmax_int8",
    "avgpool_int8",
    "bias_codes",
    "cast_int",
    "conv2d_int8_acc",
    "dequantize_codes",
    "eltwise_int8",
    "eltwise_params",
    "fold_input_zero_point",
    "gemm_int8_acc",
    "group_requant_params",
    "maxpool_int8",
    "quantize_multiplier",
    "quantize_real",
    "reduce_max_int8",
    "requant_params",
    "requantize",
    "requantize_groups",
    "rescale",
    "round_div",
    "round_float",
    "weight_scales",
]

#: The requantiser's output types (:func:`requantize`; the RTL's ``npu.cstl.requant``).
REQUANT_TYPES = ("i8", "u8", "i16")
#: Value range of every requantiser output type (from ``nem.elemtypes``).
INT_RANGES = {e: ELEM_RANGES[e] for e in REQUANT_TYPES}


class NumericsError(ValueError):
    """A quantisation parameter is outside what the hardware can represent."""


def quantize_multiplier(real):
    """Represent a positive real multiplier as ``m * 2**-t``.

    Parameters
    ----------
    real : float
        The multiplier ``M`` (> 0).

    Returns
    -------
    (m, t) : tuple of int
        ``m`` in ``[2**30, 2**31)`` and ``t`` in ``[1, 62]`` with ``m * 2**-t`` the
        nearest such value to ``M`` (``m`` rounded half away from zero).

    Raises
    ------
    NumericsError
        If ``M`` is not finite and positive, or is outside ``[2**-32, 2**30)``.
    """
    if not (isinstance(real, (int, float)) and math.isfinite(real) and real > 0):
        raise NumericsError(f"requantisation multiplier must be finite and > 0, not {real!r}")
    mantissa, exponent = math.frexp(real)  # real = mantissa * 2**exponent, 0.5 <= mantissa < 1
    m = math.floor(mantissa * (1 << 31) + 0.5)
    if m == 1 << 31:  # rounding carried into the next power of two
        m >>= 1
        exponent += 1
    t = 31 - exponent
    if not 1 <= t <= 62:
        raise NumericsError(
            f"requantisation multiplier {real!r} is outside the representable range "
            f"[2**-31, 2**30) (shift {t} not in 1..62)"
        )
    return m, t


@dataclass(frozen=True)
class Requant:
    """Per-output-channel requantisation parameters.

    Attributes
    ----------
    multiplier, shift : numpy.ndarray of int64
        ``m`` and ``t`` per output channel.
    zero_point : int
        Output zero point.
    out_dtype : str
        ``"i8"``, ``"u8"`` or ``"i16"``.
    activation : str
        ``"none"``, ``"relu"`` or ``"relu6"``.
    lo, hi : int
        Clamp bounds after adding the zero point (saturation and activation folded in).
    """

    multiplier: np.ndarray
    shift: np.ndarray
    zero_point: int
    out_dtype: str
    activation: str
    lo: int
    hi: int


def requant_params(x_scale, w_scales, y_scale, y_zero_point, *, out_dtype="i8", activation="none"):
    """Derive requantisation parameters from the quant descriptors of X, W and Y.

    Parameters
    ----------
    x_scale : float
        Input activation scale.
    w_scales : array_like of float
        Weight scale per output channel (or one value).
    y_scale : float
        Output scale.
    y_zero_point : int
        Output zero point.
    out_dtype : {"i8", "u8", "i16"}
    activation : {"none", "relu", "relu6"}

    Returns
    -------
    Requant
    """
    if out_dtype not in INT_RANGES:
        raise NumericsError(f"out_dtype must be one of {sorted(INT_RANGES)}, not {out_dtype!r}")
    lo, hi = INT_RANGES[out_dtype]
    if not lo <= y_zero_point <= hi:
        raise NumericsError(f"output zero point {y_zero_point} outside {out_dtype} [{lo}, {hi}]")
    if not (y_scale > 0 and x_scale > 0):
        raise NumericsError(f"scales must be > 0 (x_scale={x_scale!r}, y_scale={y_scale!r})")
    pairs = [
        quantize_multiplier(float(x_scale) * float(ws) / float(y_scale))
        for ws in np.atleast_1d(np.asarray(w_scales, dtype=np.float64))
    ]
    if activation == "relu":
        lo = max(lo, y_zero_point)
    elif activation == "relu6":
        lo = max(lo, y_zero_point)
        hi = min(hi, y_zero_point + math.floor(6.0 / y_scale + 0.5))
    elif activation != "none":
        raise NumericsError(f"activation must be none, relu or relu6, not {activation!r}")
    return Requant(
        np.array([p[0] for p in pairs], dtype=np.int64),
        np.array([p[1] for p in pairs], dtype=np.int64),
        int(y_zero_point),
        out_dtype,
        activation,
        lo,
        hi,
    )


def requantize(acc, rq, channel_axis=-1):
    """Apply requantisation to int32 accumulators.

    Parameters
    ----------
    acc : numpy.ndarray of int32 (or int64 holding int32 values)
    rq : Requant
    channel_axis : int
        Axis of ``acc`` along which the per-channel parameters apply.

    Returns
    -------
    numpy.ndarray
        int8 / uint8 / int16 result.
    """
    acc = np.asarray(acc, dtype=np.int64)
    if acc.size and (acc.min() < -(1 << 31) or acc.max() >= 1 << 31):
        raise NumericsError("accumulator outside int32")
    shape = [1] * acc.ndim
    if rq.multiplier.size > 1:
        shape[channel_axis] = rq.multiplier.size
    m = rq.multiplier.reshape(shape)
    t = rq.shift.reshape(shape)
    # |acc| < 2**31 and m < 2**31: the product fits in int64 exactly.
    scaled = (acc * m + (np.int64(1) << (t - 1))) >> t
    y = np.clip(scaled + rq.zero_point, rq.lo, rq.hi)
    return y.astype(elem_type(rq.out_dtype).dtype)


def fold_input_zero_point(bias, w, x_zero_point, reduce_axes, *, keepdims=False):
    """``bias_eff = bias - z_x * sum(w over reduce_axes)`` in int32 (checked).

    With ``keepdims`` the reduced axes stay (size 1), so that ``bias_eff`` broadcasts against
    the accumulator of a batched matmul (``w`` of shape ``[..., K, N]``, reduced over ``K``).
    """
    w_sum = np.asarray(w, dtype=np.int64).sum(axis=reduce_axes, keepdims=keepdims)
    out = np.asarray(bias, dtype=np.int64) - int(x_zero_point) * w_sum
    if out.min() < -(1 << 31) or out.max() >= 1 << 31:
        raise NumericsError("folded bias does not fit in int32")
    return out.astype(np.int32)


def _check_int32(acc):
    if acc.size and (acc.min() < -(1 << 31) or acc.max() >= 1 << 31):
        raise NumericsError("int32 accumulator overflow")
    return acc.astype(np.int32)


def gemm_int8_acc(x, w, bias_eff=None):
    """``x[M, K] @ w[K, N] + bias_eff[N]`` accumulated exactly in int32."""
    acc = np.asarray(x, dtype=np.int64) @ np.asarray(w, dtype=np.int64)
    if bias_eff is not None:
        acc = acc + np.asarray(bias_eff, dtype=np.int64)
    return _check_int32(acc)


def conv2d_int8_acc(
    x, w, bias_eff=None, *, stride=(1, 1), dilation=(1, 1), pads=(0, 0, 0, 0), pad_value=0
):
    """NHWC x HWIO convolution (groups = 1) accumulated exactly in int32.

    Parameters
    ----------
    x : array (N, H, W, C) of int8
    w : array (KH, KW, C, F) of int8
    bias_eff : array (F,) of int32, optional
    stride, dilation : (int, int)
    pads : (top, left, bottom, right)
        The order of NEM's ``pads`` attribute (and ``nem.shapes``, ``nem.ops``).
    pad_value : int
        Value of padded input positions (the input zero point, see module docs).
    """
    x = np.asarray(x, dtype=np.int64)
    w = np.asarray(w, dtype=np.int64)
    n, h, wd, c = x.shape
    kh, kw, wc, f = w.shape
    if wc != c:
        raise NumericsError(f"conv2d: input has {c} channels, weights expect {wc}")
    top, left, bottom, right = pads
    xp = np.full((n, h + top + bottom, wd + left + right, c), pad_value, dtype=np.int64)
    xp[:, top : top + h, left : left + wd, :] = x
    sh, sw = stride
    dh, dw = dilation
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise NumericsError(f"conv2d: empty output ({oh}x{ow})")
    acc = np.zeros((n, oh, ow, f), dtype=np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[
                :,
                i * dh : i * dh + sh * (oh - 1) + 1 : sh,
                j * dw : j * dw + sw * (ow - 1) + 1 : sw,
                :,
            ]
            acc += patch @ w[i, j]
    if bias_eff is not None:
        acc = acc + np.asarray(bias_eff, dtype=np.int64)
    return _check_int32(acc)


# --- choosing quantisation parameters (the compiler's quantiser) ------------------------------


def activation_qparams(lo, hi, elem="i8"):
    """Asymmetric per-tensor parameters ``(scale, zero_point)`` covering ``[lo, hi]``.

    The range is widened to contain 0 (so that the real zero, used by padding, has an exact
    code), ``scale = (hi - lo) / (qmax - qmin)`` and ``zero_point = qmin - rne(lo / scale)``
    clamped to the type's range; a range of zero width gets ``scale = 1``.

    Parameters
    ----------
    lo, hi : float
        Calibrated minimum and maximum of the real values.
    elem : {"i8", "u8", "i16"}

    Returns
    -------
    (float, int)
    """
    if elem not in INT_RANGES:
        raise NumericsError(f"activation type must be one of {sorted(INT_RANGES)}, not {elem!r}")
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise NumericsError(f"activation range [{lo!r}, {hi!r}] is not a finite interval")
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    qmin, qmax = INT_RANGES[elem]
    if hi == lo:
        return 1.0, 0 if qmin < 0 else qmin
    scale = (hi - lo) / (qmax - qmin)
    zero_point = int(min(max(qmin - np.rint(lo / scale), qmin), qmax))
    return scale, zero_point


def weight_scales(w, axis):
    """Symmetric per-channel int8 scales: ``max |w| / 127`` over all axes but ``axis``.

    A channel of zeros gets scale 1 (its codes are all 0 whatever the scale).
    """
    w = np.asarray(w, dtype=np.float64)
    axis = axis % w.ndim
    amax = np.abs(w).max(axis=tuple(a for a in range(w.ndim) if a != axis))
    return np.where(amax > 0, amax / 127.0, 1.0)


def bias_codes(bias, x_scale, w_scales):
    """Bias in the accumulator domain: ``rne(bias[n] / (s_x * s_w[n]))`` as int32 (checked)."""
    q = np.rint(np.asarray(bias, dtype=np.float64) / (float(x_scale) * np.asarray(w_scales)))
    if q.size and (q.min() < -(1 << 31) or q.max() >= 1 << 31):
        raise NumericsError("quantised bias does not fit in int32")
    return q.astype(np.int32)


# --- the real-valued path: CSTL / VPU operations and the float types -------------------------


@dataclass(frozen=True)
class QuantParams:
    """An evaluated quantization descriptor of a region.

    ``scales`` / ``zero_points`` have one entry (per tensor) or one per channel (``axis``) or
    per group of ``group_size`` along ``axis``.
    """

    scales: np.ndarray
    zero_points: np.ndarray
    axis: int | None = None
    group_size: int | None = None

    def expand(self, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Scale and zero point arrays broadcastable against an array of ``shape``."""
        if self.axis is None:
            return self.scales.reshape(()), self.zero_points.reshape(())
        axis = self.axis % len(shape)
        per = np.arange(shape[axis]) // (self.group_size or 1)
        bshape = [1] * len(shape)
        bshape[axis] = shape[axis]
        return self.scales[per].reshape(bshape), self.zero_points[per].reshape(bshape)


IDENTITY = QuantParams(np.ones(1), np.zeros(1, dtype=np.int64))


def dequantize_codes(q, qp: QuantParams | None):
    """``real = scale * (q - zero_point)`` in float64 (exact for 32-bit codes and scales)."""
    q = np.asarray(q, dtype=np.float64)
    if qp is None:
        return q
    s, z = qp.expand(q.shape)
    return s * (q - z)


def quantize_real(real, elem: str, qp: QuantParams | None):
    """Real values -> integer codes of ``elem``: one rounding, then saturation.

    ``q = clamp(rne(real / scale) + zero_point, lo, hi)`` evaluated in float64, ``rne`` the
    round-half-to-even of IEEE 754; NaN maps to the zero point, +-inf saturate.
    """
    real = np.asarray(real, dtype=np.float64)
    if qp is not None:
        s, z = qp.expand(real.shape)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            scaled = real / s
    else:
        scaled, z = real, 0
    scaled = np.where(np.isnan(scaled), 0.0, scaled)
    lo, hi = ELEM_RANGES[elem]
    codes = np.clip(np.rint(np.clip(scaled, -2.0**40, 2.0**40)) + z, lo, hi)
    return codes.astype(elem_type(elem).dtype)


def round_float(real, elem: str):
    """float64 values -> ``f16`` / ``bf16`` / ``f32``: one round-to-nearest-even."""
    real = np.asarray(real, dtype=np.float64)
    if elem in ("f16", "f32"):
        with np.errstate(over="ignore"):  # beyond the largest finite value: +-inf, as IEEE
            return real.astype(elem_type(elem).dtype)
    if elem == "bf16":
        import ml_dtypes

        # ml_dtypes rounds float64 through float32 (two roundings). Round to float32 with
        # round-to-odd first (truncate, then set the last bit when inexact): a later RNE to
        # the 8-bit bf16 significand then equals one direct rounding.
        with np.errstate(over="ignore", invalid="ignore"):
            r32 = real.astype(np.float32)
            wide = r32.astype(np.float64)
            too_far = np.isfinite(real) & (np.abs(wide) > np.abs(real))
            r32 = np.where(too_far, np.nextafter(r32, np.float32(0)), r32)
            inexact = np.isfinite(real) & (r32.astype(np.float64) != real)
        bits = r32.view(np.uint32) | inexact.astype(np.uint32)
        return bits.view(np.float32).astype(ml_dtypes.bfloat16)
    raise NumericsError(f"{elem} is not a float type")


# --- the CSTL's int8 rules (issue 20) --------------------------------------------------------

#: Binary elementwise opcodes with an integer definition on i8 (:func:`eltwise_int8`).
ELTWISE_OPS = ("add", "sub", "mul", "min", "max")
#: Left shift of ``q - z`` before the input rescale of add/sub/min/max: 20 bits of headroom
#: below the common scale (|q - z| <= 255 fits 28 bits, as TFLite's ``left_shift``).
ELTWISE_LEFT_SHIFT = 20


def rescale(v, m, t):
    """The one rounding of the integer path: ``(v * m + 2**(t-1)) >> t``.

    ``v`` and ``m`` are integers whose product fits 63 bits, ``t`` in ``[1, 62]``, ``>>``
    an arithmetic shift: round half toward +infinity (as :func:`requantize`).
    """
    v = np.asarray(v, dtype=np.int64)
    return (v * np.int64(m) + (np.int64(1) << np.int64(t - 1))) >> np.int64(t)


@dataclass(frozen=True)
class EltwiseParams:
    """Integer parameters of a binary i8 elementwise task (``ELTWISE_ENTRY`` holds them).

    Attributes
    ----------
    a_zero_point, b_zero_point, y_zero_point : int
        Zero points of the inputs A, B and of the output.
    left_shift : int
        :data:`ELTWISE_LEFT_SHIFT` for add/sub/min/max, 0 for mul.
    a_multiplier, a_shift, b_multiplier, b_shift : int
        Rescale of each input to the common scale (add/sub/min/max; 0 for mul).
    y_multiplier, y_shift : int
        Rescale of the result to the output scale.
    lo, hi : int
        Clamp bounds after adding the output zero point (the output type's range).
    """

    a_zero_point: int
    b_zero_point: int
    y_zero_point: int
    left_shift: int
    a_multiplier: int
    a_shift: int
    b_multiplier: int
    b_shift: int
    y_multiplier: int
    y_shift: int
    lo: int
    hi: int


def eltwise_params(op, a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point):
    """The integer parameters of ``op`` (one of :data:`ELTWISE_OPS`) on i8 operands.

    Per-tensor descriptors ``(scale, zero point)``; an operand without a descriptor is
    ``(1.0, 0)``. add/sub/min/max rescale both inputs to the common scale
    ``2 * max(s_a, s_b) / 2**L`` (multipliers ``s_a / (2 max)``, ``s_b / (2 max)``, both at
    most 1/2) and the result by ``2 max / (2**L s_y)``; mul rescales the product of the
    centred codes by ``s_a s_b / s_y``. Every multiplier comes from
    :func:`quantize_multiplier`.

    Raises
    ------
    NumericsError
        When an operation is not in :data:`ELTWISE_OPS`, a zero point is outside i8, or a
        multiplier is outside the representable range.
    """
    if op not in ELTWISE_OPS:
        raise NumericsError(f"{op!r} has no integer elementwise definition ({ELTWISE_OPS})")
    lo, hi = ELEM_RANGES["i8"]
    for what, z in (("A", a_zero_point), ("B", b_zero_point), ("output", y_zero_point)):
        if not lo <= z <= hi:
            raise NumericsError(f"{op}: {what} zero point {z} outside i8 [{lo}, {hi}]")
    sa, sb, sy = float(a_scale), float(b_scale), float(y_scale)
    zs = (int(a_zero_point), int(b_zero_point), int(y_zero_point))
    try:
        if op == "mul":
            ym, yt = quantize_multiplier(sa * sb / sy)
            return EltwiseParams(*zs, 0, 0, 0, 0, 0, ym, yt, lo, hi)
        twice = 2.0 * max(sa, sb)
        am, at = quantize_multiplier(sa / twice)
        bm, bt = quantize_multiplier(sb / twice)
        ym, yt = quantize_multiplier(twice / ((1 << ELTWISE_LEFT_SHIFT) * sy))
    except NumericsError as exc:
        raise NumericsError(f"{op}: scales {sa!r}, {sb!r} -> {sy!r}: {exc}") from None
    return EltwiseParams(*zs, ELTWISE_LEFT_SHIFT, am, at, bm, bt, ym, yt, lo, hi)


def eltwise_int8(op, qa, qb, p: EltwiseParams):
    """The integer definition of a binary i8 elementwise op (numpy broadcasting).

    ``op`` in :data:`ELTWISE_OPS`; ``qa``, ``qb`` i8 codes, ``p`` from :func:`eltwise_params`:

    * add, sub, min, max: ``a = rescale((qa - za) << L, ma, ta)``,
      ``b = rescale((qb - zb) << L, mb, tb)``, ``r = a + b``, ``a - b``, ``min(a, b)`` or
      ``max(a, b)``;
    * mul: ``r = (qa - za) * (qb - zb)``;

    then ``y = clamp(zy + rescale(r, my, ty), lo, hi)`` (:func:`rescale`: the exact product
    rounded half up by the shift). Every intermediate fits 63 bits.
    """
    da = np.asarray(qa, dtype=np.int64) - p.a_zero_point
    db = np.asarray(qb, dtype=np.int64) - p.b_zero_point
    if op == "mul":
        r = da * db
    else:
        a = rescale(da << p.left_shift, p.a_multiplier, p.a_shift)
        b = rescale(db << p.left_shift, p.b_multiplier, p.b_shift)
        r = {"add": np.add, "sub": np.subtract, "min": np.minimum, "max": np.maximum}[op](a, b)
    y = np.clip(rescale(r, p.y_multiplier, p.y_shift) + p.y_zero_point, p.lo, p.hi)
    return y.astype(np.int8)


def round_div(total, count):
    """``total / count`` rounded half to even, exactly in integers (``count`` > 0): the
    floor quotient ``f`` and remainder ``r`` (``0 <= r < count``), plus one when
    ``2r > count``, or ``2r == count`` and ``f`` is odd (the average pool's division; the
    same rounding as the real-valued path's, so a pool that keeps its descriptor gives
    the real-valued result exactly)."""
    total = np.asarray(total, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    f, r = np.divmod(total, count)
    up = (2 * r > count) | ((2 * r == count) & (f % 2 == 1))
    return f + up


def _windows(x, kernel, strides, pads, fill):
    """Every window position of an NHWC pool: (stacked taps, in-bounds count per output)."""
    n, h, w, c = x.shape
    top, left, bottom, right = pads
    xp = np.full((n, h + top + bottom, w + left + right, c), fill, dtype=np.int64)
    xp[:, top : top + h, left : left + w, :] = x
    valid = np.zeros(xp.shape[1:3], dtype=np.int64)
    valid[top : top + h, left : left + w] = 1
    oh = (h + top + bottom - kernel[0]) // strides[0] + 1
    ow = (w + left + right - kernel[1]) // strides[1] + 1
    taps, count = [], np.zeros((oh, ow), dtype=np.int64)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            rows = slice(i, i + strides[0] * (oh - 1) + 1, strides[0])
            cols = slice(j, j + strides[1] * (ow - 1) + 1, strides[1])
            taps.append(xp[:, rows, cols, :])
            count += valid[rows, cols]
    return np.stack(taps), count


def maxpool_int8(q, kernel, strides, pads):
    """Max pool of i8 codes (NHWC): the largest in-bounds code of each window; a window
    with no position inside the input gives -128 (the maximum's start value). Max commutes
    with every monotonic requantisation, so a differing output descriptor is a lookup table
    after it."""
    taps, count = _windows(np.asarray(q, np.int64), kernel, strides, pads, -(1 << 40))
    out = taps.max(axis=0)
    return np.where(count[None, :, :, None] > 0, out, -128).astype(np.int8)


def avgpool_int8(q, kernel, strides, pads):
    """Average pool of i8 codes (NHWC): the sum of the in-bounds codes of each window divided
    by their number with :func:`round_div` (half to even); padding is not counted.
    The mean of codes in [-128, 127] stays in i8. A window with no position inside the
    input gives 0 (as an input code). Global average pooling is the window of the whole H x W."""
    taps, count = _windows(np.asarray(q, np.int64), kernel, strides, pads, 0)
    total = taps.sum(axis=0)
    safe = np.maximum(count, 1)[None, :, :, None]
    out = np.where(count[None, :, :, None] > 0, round_div(total, safe), 0)
    return out.astype(np.int8)


def cast_int(q, elem: str):
    """Integer -> integer cast of codes: the value kept, saturated to ``elem``'s range
    (widening i8 -> i16 / i32 is a sign extension; narrowing clamps)."""
    lo, hi = ELEM_RANGES[elem]
    return np.clip(np.asarray(q, dtype=np.int64), lo, hi).astype(elem_type(elem).dtype)


def reduce_max_int8(q, axes, keepdims: bool):
    """The largest code over ``axes`` (the CSTL reduces the last axis). Max commutes with
    every increasing requantisation: a differing output descriptor is a table after it."""
    axes = None if axes is None else tuple(axes)
    return np.max(np.asarray(q, dtype=np.int8), axis=axes, keepdims=keepdims)


def argmax_int8(q, axis: int, keepdims: bool):
    """Index of the first largest code along ``axis`` (int64); equal to the argmax of the
    dequantised values, dequantisation being increasing for a scale > 0."""
    out = np.argmax(np.asarray(q, dtype=np.int8), axis=axis)
    return np.expand_dims(out, axis) if keepdims else out


# --- int4 weights quantised per group along a reduction axis ---------------------------------

#: Bound on the 64-bit group sum ``p = sum_g acc_g * m_g`` of :func:`requantize_groups`:
#: ``|p|`` must stay below it (a margin under 2**63 so that the check is exact).
GROUP_SUM_LIMIT = 1 << 62


@dataclass(frozen=True)
class GroupRequant:
    """Requantisation of a weight quantised per group along a reduction axis.

    Attributes
    ----------
    multipliers : numpy.ndarray of int64
        ``m_g`` per group, in ``[0, 2**31)``: ``floor(M_g * 2**shift + 1/2)`` with
        ``M_g = s_x * s_w[g] / s_y``.
    w_zero_points : numpy.ndarray of int64
        The weight zero point of each group (subtracted from the group's weights).
    shift : int
        ``t`` in ``[1, 62]``, common to every group: the shift of the largest ``M_g``
        (:func:`quantize_multiplier`).
    zero_point : int
        Output zero point.
    out_dtype : str
        ``"i8"``, ``"u8"`` or ``"i16"``.
    lo, hi : int
        Clamp bounds after adding the zero point.
    """

    multipliers: np.ndarray
    w_zero_points: np.ndarray
    shift: int
    zero_point: int
    out_dtype: str
    lo: int
    hi: int


def group_requant_params(x_scale, w_scales, w_zero_points, y_scale, y_zero_point, *,
                         out_dtype="i8", w_range=(-8, 7)):
    """Requantisation parameters of a per-group weight (``docs/numerics.md``).

    Parameters
    ----------
    x_scale : float
        Input activation scale (per tensor).
    w_scales, w_zero_points : array_like
        Scale and zero point of each weight group.
    y_scale : float
        Output scale.
    y_zero_point : int
        Output zero point.
    out_dtype : {"i8", "u8", "i16"}
    w_range : (int, int)
        Code range of the weights; a zero point outside it is an error.

    Returns
    -------
    GroupRequant

    Raises
    ------
    NumericsError
        When a scale is not positive, a zero point is out of range, or the largest
        multiplier is outside what :func:`quantize_multiplier` represents.
    """
    if out_dtype not in INT_RANGES:
        raise NumericsError(f"out_dtype must be one of {sorted(INT_RANGES)}, not {out_dtype!r}")
    lo, hi = INT_RANGES[out_dtype]
    if not lo <= y_zero_point <= hi:
        raise NumericsError(f"output zero point {y_zero_point} outside {out_dtype} [{lo}, {hi}]")
    scales = [float(v) for v in np.atleast_1d(np.asarray(w_scales, dtype=np.float64))]
    zps = [int(v) for v in np.atleast_1d(np.asarray(w_zero_points))]
    if len(scales) != len(zps) or not scales:
        raise NumericsError(f"{len(scales)} group scales and {len(zps)} zero points")
    if not (x_scale > 0 and y_scale > 0 and all(v > 0 for v in scales)):
        raise NumericsError("scales must be > 0")
    bad = [z for z in zps if not w_range[0] <= z <= w_range[1]]
    if bad:
        raise NumericsError(f"weight zero point {bad[0]} outside the weights' range {w_range}")
    reals = [float(x_scale) * v / float(y_scale) for v in scales]
    _, t = quantize_multiplier(max(reals))
    ms = [math.floor(math.ldexp(r, t) + 0.5) for r in reals]
    return GroupRequant(np.array(ms, dtype=np.int64), np.array(zps, dtype=np.int64), t,
                        int(y_zero_point), out_dtype, lo, hi)


def requantize_groups(accs, gq: GroupRequant):
    """Requantise the per-group accumulators of one output (``docs/numerics.md``).

    Parameters
    ----------
    accs : numpy.ndarray
        ``acc_g`` stacked on the first axis (``[groups, ...]``), each an int32 value.
    gq : GroupRequant

    Returns
    -------
    numpy.ndarray
        ``clamp(((sum_g acc_g * m_g) + 2**(t-1)) >> t) + z_y, lo, hi)`` in the output type.

    Raises
    ------
    NumericsError
        When an accumulator leaves int32 or the group sum reaches ``GROUP_SUM_LIMIT``.
    """
    accs = np.asarray(accs, dtype=np.int64)
    if accs.shape[0] != gq.multipliers.size:
        raise NumericsError(f"{accs.shape[0]} group accumulators, {gq.multipliers.size} groups")
    if accs.size and (accs.min() < -(1 << 31) or accs.max() >= 1 << 31):
        raise NumericsError("int32 accumulator overflow")
    m = gq.multipliers.reshape((-1,) + (1,) * (accs.ndim - 1))
    # Each product is below 2**62 in magnitude; the int64 sum wraps only if the true sum
    # leaves int64, which the float64 bound below excludes (its rounding error, a relative
    # n_groups * 2**-53, is far below the margin between 2**62 and 2**63).
    bound = np.abs(accs.astype(np.float64) * m.astype(np.float64)).sum(axis=0)
    if bound.size and bound.max() >= GROUP_SUM_LIMIT:
        raise NumericsError("group sum reaches 2**62")
    p = (accs * m).sum(axis=0)
    t = np.int64(gq.shift)
    y = np.clip(((p + (np.int64(1) << (t - 1))) >> t) + gq.zero_point, gq.lo, gq.hi)
    return y.astype(elem_type(gq.out_dtype).dtype)
