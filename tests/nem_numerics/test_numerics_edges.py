"""Edges of nem.numerics that mutation testing found unguarded: range limits, error texts,
result types and shapes, the quantiser's parameter choice, and bf16's single rounding.

Expected values are hand-derived in the comments, or come from an independent reference
(exact rationals, an enumeration of every bf16 value).
"""

import math
import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from nem.numerics import (
    NumericsError,
    QuantParams,
    activation_qparams,
    bias_codes,
    conv2d_int8_acc,
    dequantize_codes,
    fold_input_zero_point,
    gemm_int8_acc,
    quantize_multiplier,
    quantize_real,
    requant_params,
    requantize,
    round_float,
    weight_scales,
)

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


# --- quantize_multiplier / requant_params ----------------------------------------------------


def test_quantize_multiplier_shift_limits():
    # 2**-32 = 0.5 * 2**-31: m = 2**30, t = 31 - (-31) = 62, the largest shift.
    assert quantize_multiplier(2.0 ** -32) == (1 << 30, 62)
    # 2**-33 needs t = 63; 2**30 needs t = 0: both outside 1..62.
    with pytest.raises(NumericsError, match=r"outside the representable range .*shift 63 not"):
        quantize_multiplier(2.0 ** -33)
    with pytest.raises(NumericsError, match=r"shift 0 not in 1\.\.62"):
        quantize_multiplier(2.0 ** 30)
    with pytest.raises(NumericsError, match=r"must be finite and > 0, not -1\.0"):
        quantize_multiplier(-1.0)


def test_requant_params_fields():
    # Two channels: M = 0.5 * 0.25 / 1 = 2**-3 and 0.5 * 0.75 = 0.375 = 0.75 * 2**-1.
    rq = requant_params(0.5, [0.25, 0.75], 1.0, 4, out_dtype="u8", activation="relu")
    assert rq.multiplier.tolist() == [1 << 30, 3 << 29] and rq.shift.tolist() == [33, 32]
    assert (rq.zero_point, rq.out_dtype, rq.activation, rq.lo, rq.hi) == (4, "u8", "relu", 4,
                                                                          255)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"x_scale": 0.0}, r"scales must be > 0 \(x_scale=0\.0, y_scale=1\.0\)"),
    ({"y_scale": 0.0}, r"scales must be > 0 \(x_scale=1\.0, y_scale=0\.0\)"),
    ({"x_scale": -1.0, "y_scale": -1.0}, r"scales must be > 0"),
    ({"out_dtype": "i4"}, r"out_dtype must be one of \['i16', 'i8', 'u8'\], not 'i4'"),
    ({"y_zero_point": 128}, r"output zero point 128 outside i8 \[-128, 127\]"),
    ({"activation": "gelu"}, r"activation must be none, relu or relu6, not 'gelu'"),
])
def test_requant_params_errors_name_the_value(kwargs, message):
    args = {"x_scale": 1.0, "w_scales": [1.0], "y_scale": 1.0, "y_zero_point": 0, **kwargs}
    with pytest.raises(NumericsError, match=message):
        requant_params(args.pop("x_scale"), args.pop("w_scales"), args.pop("y_scale"),
                       args.pop("y_zero_point"), **args)


# --- requantize ------------------------------------------------------------------------------


def test_requantize_int32_limits_and_types():
    rq = requant_params(1.0, [2.0 ** -24], 1.0, 0, out_dtype="i16")
    # m = 2**30, t = 54: I32_MIN * 2**-24 = -128 exactly, I32_MAX * 2**-24 rounds to 128.
    got = requantize(np.array([I32_MIN, I32_MAX]), rq)
    assert got.dtype == np.int16 and got.tolist() == [-128, 128]
    for bad in (I32_MIN - 1, I32_MAX + 1):
        with pytest.raises(NumericsError, match=r"^accumulator outside int32$"):
            requantize(np.array([0, bad]), rq)
    u8 = requant_params(1.0, [1.0], 1.0, 10, out_dtype="u8")
    assert requantize(np.array([-20, 3, 300]), u8).dtype == np.uint8
    assert requantize(np.array([-20, 3, 300]), u8).tolist() == [0, 13, 255]
    assert requantize(np.array([5]), requant_params(1.0, [1.0], 1.0, 0)).dtype == np.int8


def test_requantize_scalar_and_channel_axis_0():
    rq = requant_params(1.0, [0.5], 1.0, 0)
    assert requantize(np.int32(7), rq).shape == ()  # 3.5 rounds half up to 4
    assert int(requantize(np.int32(7), rq)) == 4
    # Channels along axis 0 (rows): multipliers 1/2 and 1/4 (exact), acc rows [6, -6, 10].
    rq2 = requant_params(1.0, [0.5, 0.25], 1.0, 0)
    acc = np.array([[6, -6, 10], [6, -6, 10]])
    want = [[3, -3, 5], [math.floor(Fraction(6, 4) + Fraction(1, 2)),
                         math.floor(Fraction(-6, 4) + Fraction(1, 2)), 3]]  # 2, -1, 3 (2.5 up)
    assert requantize(acc, rq2, channel_axis=0).tolist() == want


# --- accumulation ----------------------------------------------------------------------------


def test_gemm_int32_limits():
    # 1 x 2 @ 2 x 1: 127*127 + bias; the bias puts the sum exactly on each int32 limit.
    x = np.array([[127, 127]], np.int8)
    w = np.array([[127], [127]], np.int8)
    top = I32_MAX - 2 * 127 * 127
    assert gemm_int8_acc(x, w, np.array([top], np.int32)).tolist() == [[I32_MAX]]
    assert gemm_int8_acc(-x, w, np.array([-top - 1], np.int32)).tolist() == [[I32_MIN]]
    with pytest.raises(NumericsError, match=r"^int32 accumulator overflow$"):
        gemm_int8_acc(x, w, np.array([top + 1], np.int64))
    with pytest.raises(NumericsError, match=r"^int32 accumulator overflow$"):
        gemm_int8_acc(-x, w, np.array([-top - 2], np.int64))


def test_fold_input_zero_point_limits_and_shape():
    w = np.array([[1, 2], [3, 4]], np.int8)  # column sums 4 and 6
    out = fold_input_zero_point(np.array([10, 20], np.int32), w, 3, 0)
    assert out.dtype == np.int32 and out.shape == (2,) and out.tolist() == [10 - 12, 20 - 18]
    assert fold_input_zero_point([0, 0], w, 1, 0, keepdims=True).shape == (1, 2)
    # bias - z * 4 on the limits: z = -1 adds 4.
    assert fold_input_zero_point([I32_MAX - 4, 0], w, -1, 0).tolist()[0] == I32_MAX
    assert fold_input_zero_point([I32_MIN + 4, 0], w, 1, 0).tolist()[0] == I32_MIN
    with pytest.raises(NumericsError, match=r"^folded bias does not fit in int32$"):
        fold_input_zero_point([I32_MAX - 3, 0], w, -1, 0)
    with pytest.raises(NumericsError, match=r"^folded bias does not fit in int32$"):
        fold_input_zero_point([I32_MIN + 3, 0], w, 1, 0)


def test_conv2d_output_of_one_and_errors():
    # 2x2 input, 2x2 kernel, no padding: one output = sum of products, hand-computed
    # 1*1 + 2*2 + 3*3 + 4*4 = 30; with pads (1, 0, 0, 0) and the default pad value 0 the
    # first output row sees [0, 0] and [1, 2] against the kernel rows: 1*3 + 2*4 = 11.
    x = np.array([1, 2, 3, 4], np.int8).reshape(1, 2, 2, 1)
    w = np.array([1, 2, 3, 4], np.int8).reshape(2, 2, 1, 1)
    assert conv2d_int8_acc(x, w).reshape(-1).tolist() == [30]
    assert conv2d_int8_acc(x, w, pads=(1, 0, 0, 0)).reshape(-1).tolist() == [11, 30]
    with pytest.raises(NumericsError, match=r"conv2d: empty output \(0x1\)"):
        conv2d_int8_acc(x, w, dilation=(2, 1))
    with pytest.raises(NumericsError, match=r"conv2d: empty output \(1x0\)"):
        conv2d_int8_acc(x, w, dilation=(1, 2))
    with pytest.raises(NumericsError, match="conv2d: input has 1 channels, weights expect 2"):
        conv2d_int8_acc(x, np.zeros((1, 1, 2, 1), np.int8))


# --- the quantiser's parameter choice --------------------------------------------------------


@pytest.mark.parametrize(("lo", "hi", "elem", "scale", "zero_point"), [
    # [-1, 3] on i8: scale 4/255, zp = -128 - rne(-1 / (4/255)) = -128 - rne(-63.75) = -64.
    (-1.0, 3.0, "i8", 4 / 255, -64),
    # [0.5, 2] widened to [0, 2] on u8: scale 2/255, zp = 0 - rne(0) = 0.
    (0.5, 2.0, "u8", 2 / 255, 0),
    # [-2, -1] widened to [-2, 0] on i8: zp = -128 - rne(-255) = 127.
    (-2.0, -1.0, "i8", 2 / 255, 127),
    # [-3, 1] on i16: scale 4/65535, zp = -32768 - rne(-3 * 65535 / 4) = -32768 + 49151.
    (-3.0, 1.0, "i16", 4 / 65535, 16383),
    # Zero width: scale 1, zero point 0 (for u8 the type's minimum, also 0).
    (0.0, 0.0, "i8", 1.0, 0),
    (0.0, 0.0, "u8", 1.0, 0),
])
def test_activation_qparams_hand_derived(lo, hi, elem, scale, zero_point):
    got_scale, got_zp = activation_qparams(lo, hi, elem)
    assert got_scale == pytest.approx(scale, rel=1e-15) and got_zp == zero_point
    assert isinstance(got_zp, int)


def test_activation_qparams_default_type_and_errors():
    assert activation_qparams(-1.0, 3.0) == activation_qparams(-1.0, 3.0, "i8")
    with pytest.raises(NumericsError, match=r"activation type must be one of \['i16', 'i8', "
                                            r"'u8'\], not 'f32'"):
        activation_qparams(0.0, 1.0, "f32")
    with pytest.raises(NumericsError, match=r"activation range \[2\.0, 1\.0\] is not a finite"):
        activation_qparams(2.0, 1.0)
    with pytest.raises(NumericsError, match=r"activation range \[nan, 1\.0\]"):
        activation_qparams(float("nan"), 1.0)
    with pytest.raises(NumericsError, match=r"activation range \[0\.0, inf\]"):
        activation_qparams(0.0, float("inf"))


def test_weight_scales_per_channel():
    # Channels along axis 1: max |w| of the columns 127, 63.5 and 0 -> 1, 0.5 and 1 (zeros).
    w = np.array([[127.0, -63.5, 0.0], [-1.0, 2.0, 0.0]])
    assert weight_scales(w, 1).tolist() == [1.0, 0.5, 1.0]
    assert weight_scales(w, -1).tolist() == [1.0, 0.5, 1.0]
    # Along axis 0: rows 127 and 2 -> 1 and 2/127.
    assert weight_scales(w, 0).tolist() == [1.0, 2.0 / 127]
    # Channels with max |w| below 1 keep their scale; int8 -128 counts as 128 (no wrap).
    assert weight_scales([[0.5, -0.25]], 0).tolist() == [0.5 / 127]
    assert weight_scales(np.array([[-128, 1]], np.int8), 0).tolist() == [128 / 127]


def test_bias_codes_round_half_even_and_limits():
    # s_x * s_w = 0.5 * 0.25 = 0.125 (exact): 0.3125 / 0.125 = 2.5 -> 2, -0.4375 -> -3.5 -> -4.
    got = bias_codes([0.3125, -0.4375], 0.5, [0.25, 0.25])
    assert got.dtype == np.int32 and got.tolist() == [2, -4]
    assert bias_codes([I32_MAX * 0.125, I32_MIN * 0.125], 0.5, 0.25).tolist() == [I32_MAX,
                                                                                  I32_MIN]
    for bad in (2.0 ** 31 * 0.125, (I32_MIN - 1) * 0.125):
        with pytest.raises(NumericsError, match=r"^quantised bias does not fit in int32$"):
            bias_codes([bad], 0.5, 0.25)


# --- the real-valued path --------------------------------------------------------------------


def test_per_tensor_parameters_keep_scalars_scalar():
    qp = QuantParams(np.array([0.5]), np.array([3]))
    s, z = qp.expand((2, 3))
    assert s.shape == () and z.shape == ()
    assert dequantize_codes(np.int8(5), qp).shape == ()
    assert float(dequantize_codes(np.int8(5), qp)) == 1.0  # 0.5 * (5 - 3)


def test_quantize_real_types_and_no_warnings():
    qp = QuantParams(np.array([0.5]), np.array([1]))
    real = np.array([np.nan, np.inf, -np.inf, 1e308, 1.25, -0.75])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NaN, infinities and overflow are defined, not warned
        got = quantize_real(real, "i8", qp)
        tiny = quantize_real(np.array([1.0, np.inf]), "i8", QuantParams(np.array([1e-320]),
                                                                        np.array([0])))
        halves = round_float(np.array([1e300, -1e300]), "f16")
        bf = round_float(np.array([1e300, np.nan, np.inf]), "bf16")
        # A degenerate scale of 0: x / 0 is +-inf, 0 / 0 is NaN.
        zero = quantize_real(np.array([1.0, 0.0, -1.0, np.inf]), "i8",
                             QuantParams(np.array([0.0]), np.array([2])))
    # NaN -> zero point 1; +-inf and 1e308 / 0.5 saturate; 1.25 / 0.5 = 2.5 -> 2 (even) + 1;
    # -0.75 / 0.5 = -1.5 -> -2 + 1.
    assert got.dtype == np.int8 and got.tolist() == [1, 127, -128, 127, 3, -1]
    assert tiny.tolist() == [127, 127]
    assert zero.tolist() == [127, 2, -128, 127]  # 1/0 = +inf, 0/0 = NaN -> zero point, ...
    assert halves.dtype == np.float16 and np.isinf(halves).all()
    assert bf.dtype == ml_dtypes.bfloat16 and np.isinf(bf[0]) and np.isnan(bf[1])
    assert quantize_real([300, -3], "u8", None).dtype == np.uint8
    assert quantize_real([300, -3], "u8", None).tolist() == [255, 0]
    assert quantize_real([70000], "i16", None).dtype == np.int16
    assert round_float([1.0], "f32").dtype == np.float32
    with pytest.raises(NumericsError, match="i8 is not a float type"):
        round_float([1.0], "i8")


def _bf16_values():
    """Every finite bf16 value as float64, sorted (a bf16 is the top half of a float32)."""
    as_f32 = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
    finite = as_f32[np.isfinite(as_f32)]
    return np.unique(finite.astype(np.float64))  # -0.0 and 0.0 merged


def _bf16_reference(x, values):
    """Round float64 *x* to bf16 with one round-to-nearest-even, from the list of all values."""
    k = np.searchsorted(values, x)
    lo, hi = values[k - 1], values[k]
    if x == lo:
        return lo
    dlo, dhi = Fraction(x) - Fraction(lo), Fraction(hi) - Fraction(x)
    if dlo != dhi:
        return lo if dlo < dhi else hi
    # tie: the value whose last significand bit is 0
    return lo if np.float32(lo).view(np.uint32) >> 16 & 1 == 0 else hi


def test_bf16_single_rounding_at_the_traps():
    # Just above / below the midpoint of two neighbouring bf16 values, where rounding to
    # float32 first and then to bf16 (two roundings) goes the wrong way.
    rng = np.random.default_rng(5)
    xs = []
    # magnitudes from 1e-6 to 1e4, both signs (the round-to-odd step moves toward zero)
    starts = rng.choice([-1, 1], size=80) * 10.0 ** rng.uniform(-6, 4, size=80)
    for start in starts:
        a = np.float64(ml_dtypes.bfloat16(start))
        # the next bf16 value away from zero... or toward it for a < 0: a neighbour either way
        b = float(ml_dtypes.bfloat16(np.float64(a) + 2.0 ** (math.frexp(a)[1] - 8)))
        mid = (a + b) / 2
        xs += [mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf)]
    got = round_float(np.array(xs), "bf16").astype(np.float64)
    values = _bf16_values()
    want = [_bf16_reference(x, values) for x in xs]
    assert got.tolist() == want
