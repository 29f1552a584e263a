"""nem.numerics' per-group requantisation (int4 weights quantised per group along a
reduction axis, docs/numerics.md) against exact rationals and hand-derived values."""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nem.numerics import (
    GROUP_SUM_LIMIT,
    NumericsError,
    group_requant_params,
    quantize_multiplier,
    requantize_groups,
)


def test_parameters_by_hand():
    # M = 0.5 * [0.25, 0.125, 0.001, 0.002] / 1: the largest, 0.125 = 0.5 * 2**-2, gives
    # m = 2**30 and t = 33; then 0.0625 * 2**33 = 2**29, 0.0005 * 2**33 = 4294967.296 ->
    # 4294967 and 0.001 * 2**33 = 8589934.592 -> 8589935 (rounded to nearest, not down).
    gq = group_requant_params(0.5, [0.25, 0.125, 0.001, 0.002], [0, 1, -8, 7], 1.0, 3)
    assert gq.shift == 33
    assert gq.multipliers.tolist() == [1 << 30, 1 << 29, 4294967, 8589935]
    assert gq.w_zero_points.tolist() == [0, 1, -8, 7]
    assert (gq.zero_point, gq.lo, gq.hi, gq.out_dtype) == (3, -128, 127, "i8")
    # The largest group's pair is quantize_multiplier's (one group = the per-tensor scheme).
    assert quantize_multiplier(0.125) == (1 << 30, 33)


def test_application_by_hand():
    gq = group_requant_params(0.5, [0.25, 0.125], [0, 0], 1.0, 3)
    # [acc_0, acc_1] = [-6, 1] -> -0.75 + 0.0625 = -0.6875 -> -1 + 3; [6, 7] -> 1.1875 -> 4;
    # [4, -4] -> 0.5 - 0.25 = 0.25 -> 3; [-4, 4] -> -0.25 -> 0 + 3; [1, 2] -> 0.25 -> 3;
    # [2, 4] -> 0.5, a tie, rounds up: 1 + 3; [-2, -4] -> -0.5 rounds up: 0 + 3.
    accs = np.array([[-6, 6, 4, -4, 1, 2, -2], [1, 7, -4, 4, 2, 4, -4]])
    got = requantize_groups(accs, gq)
    assert got.dtype == np.int8
    assert got.tolist() == [2, 4, 3, 3, 3, 4, 3]


def test_clamp_and_output_types():
    gq = group_requant_params(1.0, [1.0, 0.5], [0, 0], 1.0, 0, out_dtype="u8")
    assert (gq.lo, gq.hi) == (0, 255)
    assert requantize_groups(np.array([[300, -9], [0, 0]]), gq).tolist() == [255, 0]


@pytest.mark.parametrize("args,kwargs,message", [
    ((0.5, [0.25], [8], 1.0, 0), {}, "weight zero point 8 outside the weights' range"),
    ((0.5, [0.25, 0.0], [0, 0], 1.0, 0), {}, "scales must be > 0"),
    ((0.5, [0.25], [0, 0], 1.0, 0), {}, "1 group scales and 2 zero points"),
    ((0.5, [0.25], [0], 1.0, 200), {}, "output zero point 200 outside i8"),
    ((0.5, [0.25], [0], 1.0, 0), {"out_dtype": "i32"}, "out_dtype must be one of"),
    ((1.0, [2.0**31], [0], 1.0, 0), {}, "outside the representable range"),
])
def test_bad_parameters(args, kwargs, message):
    with pytest.raises(NumericsError, match=message):
        group_requant_params(*args, **kwargs)


def test_accumulator_and_sum_limits():
    gq = group_requant_params(1.0, [0.75, 0.75], [0, 0], 1.0, 0)  # m = 3 * 2**29, t = 31
    with pytest.raises(NumericsError, match="int32 accumulator overflow"):
        requantize_groups(np.array([[1 << 31], [0]]), gq)
    with pytest.raises(NumericsError, match="2 group accumulators, 3 groups"):
        requantize_groups(np.zeros((2, 1)), group_requant_params(1.0, [1, 1, 1], [0] * 3, 1.0, 0))
    # One accumulator of 2**31 - 1 times 3 * 2**29 is about 1.5 * 2**61 < 2**62: fine
    # (saturated); two of them, about 1.5 * 2**62, are refused.
    near = np.array([[(1 << 31) - 1], [0]])
    assert requantize_groups(near, gq).tolist() == [127]
    assert requantize_groups(-near, gq).tolist() == [-128]
    with pytest.raises(NumericsError, match="group sum reaches 2\\*\\*62"):
        requantize_groups(np.full((2, 1), (1 << 31) - 1), gq)
    assert GROUP_SUM_LIMIT == 1 << 62


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-(1 << 20), 1 << 20),
                       st.floats(1e-4, 1.0, allow_nan=False)), min_size=1, max_size=6),
    st.floats(0.01, 1.0), st.floats(0.01, 10.0), st.integers(-20, 20),
)
def test_against_exact_rationals(groups, x_scale, y_scale, y_zp):
    accs = np.array([[a] for a, _ in groups])
    scales = [s for _, s in groups]
    gq = group_requant_params(x_scale, scales, [0] * len(scales), y_scale, y_zp)
    reals = [x_scale * s / y_scale for s in scales]
    frac, e = math.frexp(max(reals))
    m = math.floor(Fraction(frac) * 2**31 + Fraction(1, 2))
    t = 31 - (e + 1 if m == 2**31 else e)
    ms = [math.floor(Fraction(r) * 2**t + Fraction(1, 2)) for r in reals]
    p = sum(a * mg for (a, _), mg in zip(groups, ms, strict=True))
    want = min(max(math.floor(Fraction(p, 2**t) + Fraction(1, 2)) + y_zp, -128), 127)
    assert requantize_groups(accs, gq).tolist() == [want]
