"""Integer numerics against independent references (Python integers, Fractions, loops)."""

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nem.numerics import (
    NumericsError,
    conv2d_int8_acc,
    fold_input_zero_point,
    gemm_int8_acc,
    quantize_multiplier,
    requant_params,
    requantize,
)


@pytest.mark.parametrize(("real", "m", "t"), [
    (0.5, 1 << 30, 31),            # 0.5 = 2**30 * 2**-31
    (1.0, 1 << 30, 30),            # 1.0 = 2**30 * 2**-30
    (0.75, 3 << 29, 31),           # 0.75 = 0.75 * 2**31 * 2**-31 = 1610612736 * 2**-31
    (2.0 ** -20, 1 << 30, 50),
])
def test_quantize_multiplier_hand_derived(real, m, t):
    assert quantize_multiplier(real) == (m, t)


@given(st.floats(min_value=2.0 ** -31, max_value=2.0 ** 29, allow_nan=False))
def test_quantize_multiplier_is_nearest(real):
    m, t = quantize_multiplier(real)
    assert (1 << 30) <= m < (1 << 31) and 1 <= t <= 62
    assert abs(Fraction(m, 1 << t) - Fraction(real)) <= Fraction(real) / (1 << 31)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan, 2.0 ** 31, 2.0 ** -40])
def test_quantize_multiplier_rejects(bad):
    with pytest.raises(NumericsError):
        quantize_multiplier(bad)


def _reference_requant(acc, m, t, zp, lo, hi):
    # floor(acc * m / 2**t + 1/2) with exact rationals, then zero point and clamp.
    value = math.floor(Fraction(acc * m, 1 << t) + Fraction(1, 2))
    return min(max(value + zp, lo), hi)


@settings(max_examples=300)
@given(st.integers(-(1 << 31), (1 << 31) - 1), st.floats(1e-6, 10.0), st.integers(-128, 127),
       st.sampled_from(["none", "relu", "relu6"]))
def test_requantize_matches_exact_rational(acc, real, zp, activation):
    rq = requant_params(1.0, [real], 1.0, zp, activation=activation)
    got = int(requantize(np.array([acc]), rq)[0])
    assert got == _reference_requant(acc, int(rq.multiplier[0]), int(rq.shift[0]), zp,
                                     rq.lo, rq.hi)


def test_requantize_close_to_real_arithmetic():
    rng = np.random.default_rng(0)
    acc = rng.integers(-20000, 20000, size=(64, 8))
    w_scales = rng.uniform(0.001, 0.02, size=8)
    rq = requant_params(0.05, w_scales, 0.1, 3, out_dtype="i16")
    got = requantize(acc, rq).astype(np.int64)
    real = np.round(acc * (0.05 * w_scales / 0.1)) + 3
    assert np.max(np.abs(got - real)) <= 1


def test_relu6_bounds_hand_derived():
    # y_scale 0.05, zero point -10: real 0 -> -10, real 6 -> -10 + 120 = 110.
    rq = requant_params(1.0, [1.0], 0.05, -10, activation="relu6")
    assert (rq.lo, rq.hi) == (-10, 110)


@pytest.mark.parametrize(("y_scale", "zero_point", "hi"), [
    # 6 / 0.07 = 85.714...: the nearest integer is 86 (truncation would give 85).
    (0.07, -20, -20 + 86),
    # 6 / 0.11 = 54.545...: nearest 55 (truncation 54).
    (0.11, 0, 55),
    # 6 / 0.13 = 46.153...: nearest 46 (rounding up would give 47).
    (0.13, 3, 3 + 46),
    # 6 / 0.045 = 133.3...: 0 + 133 is past the i8 range, so saturation wins.
    (0.045, 0, 127),
])
def test_relu6_upper_bound_rounds_to_nearest(y_scale, zero_point, hi):
    # Quantised 6 is floor(6 / s + 1/2), hand-derived above for scales where 6 / s is
    # not a whole number (every other test uses scales where it is).
    rq = requant_params(1.0, [1.0], y_scale, zero_point, activation="relu6")
    assert (rq.lo, rq.hi) == (zero_point, hi)


def test_gemm_matches_loops():
    rng = random.Random(1)
    m, k, n = 5, 7, 3
    x = [[rng.randint(-128, 127) for _ in range(k)] for _ in range(m)]
    w = [[rng.randint(-128, 127) for _ in range(n)] for _ in range(k)]
    b = [rng.randint(-1000, 1000) for _ in range(n)]
    want = [[sum(x[i][q] * w[q][j] for q in range(k)) + b[j] for j in range(n)]
            for i in range(m)]
    got = gemm_int8_acc(np.array(x, np.int8), np.array(w, np.int8), np.array(b, np.int32))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def _conv_loops(x, w, stride, dilation, pads, zx):
    # Direct convolution of (x - zx) with zero padding: the definition, no folding.
    n, h, wd, c = x.shape
    kh, kw, _, f = w.shape
    top, left, bottom, right = pads  # NEM order
    oh = (h + top + bottom - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + left + right - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, oh, ow, f), dtype=np.int64)
    for b in range(n):
        for oy in range(oh):
            for ox in range(ow):
                for fo in range(f):
                    total = 0
                    for i in range(kh):
                        for j in range(kw):
                            iy = oy * stride[0] + i * dilation[0] - top
                            ix = ox * stride[1] + j * dilation[1] - left
                            if 0 <= iy < h and 0 <= ix < wd:
                                for ci in range(c):
                                    total += (int(x[b, iy, ix, ci]) - zx) * int(w[i, j, ci, fo])
                    out[b, oy, ox, fo] = total
    return out


@pytest.mark.parametrize(("stride", "dilation", "pads"), [
    ((1, 1), (1, 1), (0, 0, 0, 0)), ((2, 1), (1, 1), (1, 1, 1, 1)),
    ((1, 2), (2, 1), (2, 0, 1, 2)), ((2, 2), (2, 2), (1, 2, 0, 1)),
])
def test_conv2d_with_folded_zero_point_matches_definition(stride, dilation, pads):
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, size=(2, 7, 6, 3), dtype=np.int8)
    w = rng.integers(-128, 128, size=(3, 2, 3, 4), dtype=np.int8)
    zx = 11
    bias = rng.integers(-500, 500, size=4, dtype=np.int32)
    folded = fold_input_zero_point(bias, w, zx, reduce_axes=(0, 1, 2))
    got = conv2d_int8_acc(x, w, folded, stride=stride, dilation=dilation, pads=pads,
                          pad_value=zx)
    want = _conv_loops(x, w, stride, dilation, pads, zx) + bias
    np.testing.assert_array_equal(got, want)


def test_accumulator_overflow_is_an_error():
    # 140000 * 127 * 127 = 2.26e9 > 2**31 - 1.
    x = np.full((1, 140000), 127, dtype=np.int64)
    w = np.full((140000, 1), 127, dtype=np.int64)
    with pytest.raises(NumericsError, match="int32 accumulator overflow"):
        gemm_int8_acc(x, w)
