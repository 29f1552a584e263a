"""The integer definitions of the CSTL's int8 path (``nem.numerics``, docs/numerics.md).

* binary eltwise (add, sub, mul, min, max of two i8 tensors with their own descriptors):
  property tests against the exact real-valued result (Fractions), within one code;
* the average pool's division (half to even) against Python's ``round`` of a Fraction;
* the integer pools and casts against direct loops.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nem.numerics import (
    ELTWISE_LEFT_SHIFT,
    NumericsError,
    argmax_int8,
    avgpool_int8,
    cast_int,
    eltwise_int8,
    eltwise_params,
    maxpool_int8,
    reduce_max_int8,
    rescale,
    round_div,
)

OPS = ("add", "sub", "mul", "min", "max")
codes = st.integers(-128, 127)
zero_points = st.integers(-128, 127)
# scales 2**e * (1 + f): any ratio between two of them lies within 2**-12 .. 2**12
scales = st.builds(lambda e, f: 2.0**e * (1 + f), st.integers(-10, 1),
                   st.floats(0, 1, exclude_max=True))

REAL = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "min": min, "max": max}


def exact_code(op, qa, za, sa, qb, zb, sb, sy, zy):
    """The real-valued result in exact arithmetic, rounded half to even and saturated."""
    a = Fraction(sa) * (qa - za)
    b = Fraction(sb) * (qb - zb)
    y = REAL[op](a, b) / Fraction(sy) + zy
    return min(max(round(y), -128), 127)


@settings(max_examples=3000, deadline=None)
@given(st.sampled_from(OPS), codes, zero_points, scales, codes, zero_points, scales, scales,
       zero_points)
def test_eltwise_is_within_one_code_of_the_real_result(op, qa, za, sa, qb, zb, sb, sy, zy):
    p = eltwise_params(op, sa, za, sb, zb, sy, zy)
    got = int(eltwise_int8(op, np.array([qa]), np.array([qb]), p)[0])
    want = exact_code(op, qa, za, sa, qb, zb, sb, sy, zy)
    assert abs(got - want) <= 1, (p, got, want)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(OPS), zero_points, scales, zero_points, scales, scales, zero_points,
       st.integers(0, 2**32 - 1))
def test_eltwise_broadcasts_like_numpy(op, za, sa, zb, sb, sy, zy, seed):
    rng = np.random.default_rng(seed)
    qa = rng.integers(-128, 128, (3, 1, 4))
    qb = rng.integers(-128, 128, (5, 1))
    p = eltwise_params(op, sa, za, sb, zb, sy, zy)
    got = eltwise_int8(op, qa, qb, p)
    assert got.shape == (3, 5, 4) and got.dtype == np.int8
    for i, j, k in np.ndindex(3, 5, 4):
        one = eltwise_int8(op, np.array([qa[i, 0, k]]), np.array([qb[j, 0]]), p)[0]
        assert got[i, j, k] == one


def test_equal_descriptors_add_exactly():
    # s_a = s_b = s_y, equal zero points: every multiplier a power of two, the sum exact
    p = eltwise_params("add", 0.25, 3, 0.25, 3, 0.25, 3)
    assert (p.a_multiplier, p.a_shift) == (1 << 30, 31)  # 1/2
    assert (p.y_multiplier, p.y_shift) == (1 << 30, 30 + ELTWISE_LEFT_SHIFT - 1)  # 2**-19
    qa = np.arange(-128, 128)
    got = eltwise_int8("add", qa, np.full(256, 10), p)
    np.testing.assert_array_equal(got, np.clip(qa + 10 - 3, -128, 127))


def test_mul_uses_one_output_multiplier():
    p = eltwise_params("mul", 0.5, 0, 0.25, 1, 0.125, -1)
    assert (p.left_shift, p.a_multiplier, p.a_shift, p.b_multiplier, p.b_shift) == (0,) * 5
    # (4 - 0) * (9 - 1) * 0.5 * 0.25 / 0.125 = 32, + zero point -1
    assert eltwise_int8("mul", np.array([4]), np.array([9]), p)[0] == 31


def test_rescale_rounds_half_up():
    # 5 * 2**30 >> 31 = 2.5 -> 3; -5 -> -2.5 -> -2 (toward +infinity)
    assert int(rescale(5, 1 << 30, 31)) == 3
    assert int(rescale(-5, 1 << 30, 31)) == -2


@pytest.mark.parametrize("args, words", [
    (("div", 1.0, 0, 1.0, 0, 1.0, 0), "'div' has no integer elementwise definition"),
    (("add", 1.0, 200, 1.0, 0, 1.0, 0), "A zero point 200 outside i8"),
    (("add", 1.0, 0, 2.0**-40, 0, 1.0, 0), "outside the representable range"),
    (("mul", 1.0, 0, 1.0, 0, 2.0**-40, 0), "outside the representable range"),
])  # fmt: skip
def test_unrepresentable_parameters_are_refused(args, words):
    with pytest.raises(NumericsError, match=words.replace("(", r"\(")):
        eltwise_params(*args)


@settings(max_examples=2000, deadline=None)
@given(st.integers(-128 * 49, 127 * 49), st.integers(1, 49))
def test_round_div_is_half_to_even(total, count):
    assert int(round_div(total, count)) == round(Fraction(total, count))


def _pool_loops(q, kind, kernel, strides, pads):
    n, h, w, c = q.shape
    top, left, bottom, right = pads
    oh = (h + top + bottom - kernel[0]) // strides[0] + 1
    ow = (w + left + right - kernel[1]) // strides[1] + 1
    out = np.zeros((n, oh, ow, c), np.int64)
    for b, i, j, ch in np.ndindex(n, oh, ow, c):
        vals = [int(q[b, i * strides[0] - top + u, j * strides[1] - left + v, ch])
                for u in range(kernel[0]) for v in range(kernel[1])
                if 0 <= i * strides[0] - top + u < h and 0 <= j * strides[1] - left + v < w]
        out[b, i, j, ch] = max(vals) if kind == "max" else round(Fraction(sum(vals), len(vals)))
    return out


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
       st.data())
def test_pools_against_loops(kh, kw, sh, sw, data):
    pads = tuple(data.draw(st.integers(0, k - 1)) for k in (kh, kw, kh, kw))
    h, w = data.draw(st.integers(kh, 7)), data.draw(st.integers(kw, 7))
    seed = data.draw(st.integers(0, 2**32 - 1))
    q = np.random.default_rng(seed).integers(-128, 128, (2, h, w, 3))
    for kind, fn in (("max", maxpool_int8), ("avg", avgpool_int8)):
        got = fn(q, (kh, kw), (sh, sw), pads)
        np.testing.assert_array_equal(got, _pool_loops(q, kind, (kh, kw), (sh, sw), pads))


def test_global_average_pool_is_the_whole_window():
    q = np.array([1, 2, 2, 0, -7, 3, 5, 4, 1], np.int64).reshape(1, 3, 3, 1)
    # sum 11 over 9 positions: 1.22 -> 1
    assert avgpool_int8(q, (3, 3), (1, 1), (0, 0, 0, 0)).reshape(()) == 1


def test_casts_saturate_and_sign_extend():
    q = np.array([-40000, -129, -128, -1, 0, 127, 128, 70000])
    np.testing.assert_array_equal(cast_int(q, "i8"), [-128, -128, -128, -1, 0, 127, 127, 127])
    assert cast_int(np.array([-1], np.int8), "i32").dtype == np.int32
    np.testing.assert_array_equal(cast_int(np.array([-1, -128], np.int8), "i16"), [-1, -128])
    np.testing.assert_array_equal(cast_int(q, "i16"),
                                  [-32768, -129, -128, -1, 0, 127, 128, 32767])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(-128, 127), min_size=1, max_size=6), min_size=1,
                max_size=4).filter(lambda rows: len({len(r) for r in rows}) == 1))
def test_last_axis_reductions_against_loops(rows):
    q = np.array(rows, np.int8)
    np.testing.assert_array_equal(reduce_max_int8(q, (1,), False), [max(r) for r in rows])
    # the first of equal maxima
    np.testing.assert_array_equal(argmax_int8(q, 1, True),
                                  [[r.index(max(r))] for r in rows])
