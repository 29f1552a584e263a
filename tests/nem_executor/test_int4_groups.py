"""int4 weights quantised per group (nem.md's expected int4 format) in the executor.

``gemm.int4`` / ``conv2d.int4``: i8 activations x i4 weights whose ``per_group`` descriptor
runs along a reduction axis (K of ``B[K, N]``, I of ``HWIO``), each group with its own scale
and zero point. The weights start as random bytes and are unpacked here by hand (two's
complement nibbles, element e in byte e // 2, the low nibble for even e); the reference is
the integer definition of ``docs/numerics.md`` written out with Python integers and
fractions (it never calls ``nem.numerics`` or ``nem.ops``):

    acc_g = sum over group g of (x - z_x) * (w - z_w[g])   (+ bias in group 0), int32
    M_g = s_x * s_w[g] / s_y;  t from the largest M_g (frexp: m in [2**30, 2**31));
    m_g = floor(M_g * 2**t + 1/2);  y = clamp(((sum_g acc_g * m_g) + 2**(t-1)) >> t) + z_y)

and, as a check of the definition itself, every output is within one code of the real
value ``sum_g M_g * acc_g + z_y`` rounded. Every case also binds and runs the task binary
through the executor's front-end (``test_ops.run_op``), which must leave the same bytes.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from test_ops import (
    OPS_DEVICE,
    Opnd,
    Q,
    check,
    conv_ref,
    matmul_ref,
    pack_i4,
    program,
    run_op,
    tensor_q,
)

from nem.binder import BindError, bind
from nem.executor import ExecError, execute


def unpack_nibbles(raw: np.ndarray, shape) -> np.ndarray:
    """The i4 values of packed bytes, by hand: low nibble first, two's complement."""
    out = []
    for e in range(math.prod(shape)):
        nib = (int(raw[e // 2]) >> (4 * (e % 2))) & 0xF
        out.append(nib - 16 if nib >= 8 else nib)
    return np.array(out, dtype=np.int64).reshape(shape)


def random_i4(rng, shape) -> np.ndarray:
    n = math.prod(shape)
    assert n % 2 == 0  # every nibble of the bytes is an element
    raw = rng.integers(0, 256, size=n // 2).astype(np.uint8)
    w = unpack_nibbles(raw, shape)
    # the test helper's packing (what the executor reads) gives back the same bytes
    np.testing.assert_array_equal(pack_i4(w), raw)
    return w


def group_multipliers(x_scale, w_scales, y_scale):
    """(m_g, t) of docs/numerics.md with exact rationals."""
    reals = [float(x_scale) * float(s) / float(y_scale) for s in w_scales]
    frac, e = math.frexp(max(reals))
    m = math.floor(Fraction(frac) * 2**31 + Fraction(1, 2))
    if m == 2**31:
        e += 1
    t = 31 - e
    assert 1 <= t <= 62
    return [math.floor(Fraction(r) * 2**t + Fraction(1, 2)) for r in reals], t


def group_requant_ref(accs, x_scale, w_scales, y_scale, y_zp, lo=-128, hi=127):
    """Python-integer requantisation of per-group accumulators ``accs[g][...]``."""
    ms, t = group_multipliers(x_scale, w_scales, y_scale)
    shape = np.asarray(accs[0]).shape
    out = np.empty(shape, dtype=np.int64)
    for idx in np.ndindex(shape):
        p = 0
        for acc, m in zip(accs, ms, strict=True):
            a = int(np.asarray(acc)[idx])
            assert -(2**31) <= a < 2**31, "test data leaves int32"
            p += a * m
        out[idx] = min(max(((p + (1 << (t - 1))) >> t) + y_zp, lo), hi)
    # within one code of the real-valued result (the multipliers' rounding is tiny)
    real = sum(float(x_scale) * float(s) / float(y_scale) * np.asarray(a, dtype=np.float64)
               for s, a in zip(w_scales, accs, strict=True))
    ok = np.clip(np.rint(real) + y_zp, lo, hi)
    assert np.abs(out - ok).max() <= 1
    return out.astype(np.int8)


def _group_masks(length, group):
    return [(np.arange(length) // group) == g for g in range(-(-length // group))]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("k,group,bias", [(12, 4, False), (10, 4, True), (16, 16, True)])
def test_gemm_int4_per_group(k, group, bias, seed):
    rng = np.random.default_rng([81, seed, k, group, bias])
    m, n = int(rng.integers(1, 6)), 2 * int(rng.integers(1, 4))
    x = rng.integers(-128, 128, size=(m, k))
    w = random_i4(rng, (k, n))
    masks = _group_masks(k, group)
    xs, zx = 0.04, int(rng.integers(-20, 21))
    w_scales = [float(f"{rng.uniform(0.002, 0.05):.3g}") for _ in masks]
    w_zps = [int(rng.integers(-3, 4)) for _ in masks]
    accs = [matmul_ref(x - zx, np.where(mk[:, None], w - z, 0))
            for mk, z in zip(masks, w_zps, strict=True)]
    ins = [Opnd("i8", (m, k), x, tensor_q(xs, zx), "MK"),
           Opnd("i4", (k, n), w, Q(tuple(w_scales), tuple(w_zps), axis=0, group=group), "KN")]
    if bias:
        c = rng.integers(-3000, 3001, size=(n,))
        ins.append(Opnd("i32", (n,), c))
        accs[0] = accs[0] + c
    real = sum(xs * s * a for s, a in zip(w_scales, accs, strict=True))
    ys, zy = float(f"{max(np.abs(real).max(), 1e-3) / 90:.4g}"), int(rng.integers(-10, 11))
    want = group_requant_ref(accs, xs, w_scales, ys, zy)
    out = Opnd("i8", (m, n), quant=tensor_q(ys, zy), layout="MN")
    (got,) = run_op("gemm", ins, [out], "accum_type=i32", device=OPS_DEVICE)
    np.testing.assert_array_equal(got, want)


def test_matmul_int4_batched_per_group():
    rng = np.random.default_rng(82)
    k, group = 8, 3  # groups of 3, 3 and 2
    a = rng.integers(-128, 128, size=(2, 3, k))
    b = random_i4(rng, (2, k, 4))
    w_scales, w_zps = [0.01, 0.02, 0.005], [1, 0, -2]
    masks = _group_masks(k, group)
    accs = [matmul_ref(a - 5, np.where(mk[None, :, None], b - z, 0))
            for mk, z in zip(masks, w_zps, strict=True)]
    want = group_requant_ref(accs, 0.05, w_scales, 0.25, 2)
    ins = [Opnd("i8", a.shape, a, tensor_q(0.05, 5)),
           Opnd("i4", b.shape, b, Q(tuple(w_scales), tuple(w_zps), axis=1, group=group))]
    (got,) = run_op("matmul", ins, [Opnd("i8", (2, 3, 4), quant=tensor_q(0.25, 2))],
                    "accum_type=i32", device=OPS_DEVICE)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(2))
def test_conv2d_int4_per_group_of_input_channels(seed):
    rng = np.random.default_rng([83, seed])
    c, f, group = 6, 4, 4  # input-channel groups of 4 and 2
    pads, strides, dils = (1, 0, 1, 2), (1, 2), (1, 1)
    x = rng.integers(-128, 128, size=(1, 5, 6, c))
    w = random_i4(rng, (3, 2, c, f))
    masks = _group_masks(c, group)
    w_scales = [float(f"{rng.uniform(0.002, 0.05):.3g}") for _ in masks]
    w_zps = [int(rng.integers(-2, 3)) for _ in masks]
    zx = int(rng.integers(-20, 21))
    bias = rng.integers(-2000, 2001, size=(f,))
    accs = [conv_ref(x - zx, np.where(mk[None, None, :, None], w - z, 0), pads, strides, dils, 1)
            for mk, z in zip(masks, w_zps, strict=True)]
    accs[0] = accs[0] + bias
    real = sum(0.03 * s * a for s, a in zip(w_scales, accs, strict=True))
    ys = float(f"{max(np.abs(real).max(), 1e-3) / 90:.4g}")
    want = group_requant_ref(accs, 0.03, w_scales, ys, -4)
    ins = [Opnd("i8", x.shape, x, tensor_q(0.03, zx)),
           Opnd("i4", w.shape, w, Q(tuple(w_scales), tuple(w_zps), axis=2, group=group),
                "HWIO"),
           Opnd("i32", (f,), bias)]
    attrs = ("pads=[1, 0, 1, 2] strides=[1, 2] dilations=[1, 1] groups=1 accum_type=i32")
    (got,) = run_op("conv2d", ins, [Opnd("i8", want.shape, quant=tensor_q(ys, -4))], attrs,
                    device=OPS_DEVICE)
    np.testing.assert_array_equal(got, want)


def test_one_group_equals_the_per_tensor_path():
    # One group over all of K with zero point 0 is a per-tensor weight: the group path
    # (one multiplier, the same shift) and the int8 scheme's path give the same codes.
    rng = np.random.default_rng(84)
    x = rng.integers(-128, 128, size=(4, 6))
    w = random_i4(rng, (6, 4))
    out = Opnd("i8", (4, 4), quant=tensor_q(0.0625, 3))
    got = []
    for wq in (Q((0.03,), (0,), axis=0, group=6), tensor_q(0.03, 0)):
        ins = [Opnd("i8", x.shape, x, tensor_q(0.1, -7)), Opnd("i4", w.shape, w, wq)]
        got += run_op("gemm", ins, [out], "accum_type=i32", device=OPS_DEVICE)
    np.testing.assert_array_equal(got[0], got[1])
    assert np.unique(got[0]).size > 4


def test_groups_of_output_channels_are_per_channel_scales():
    # per_group along N (the last axis): groups of output channels share a scale, which
    # is the per-channel scheme with the scales repeated.
    rng = np.random.default_rng(85)
    x = rng.integers(-128, 128, size=(3, 5))
    w = random_i4(rng, (5, 6))
    out = Opnd("i8", (3, 6), quant=tensor_q(0.05, 0))
    got = []
    for wq in (Q((0.02, 0.04), (0, 0), axis=1, group=4),
               Q((0.02,) * 4 + (0.04,) * 2, (0,) * 6, axis=1)):
        ins = [Opnd("i8", x.shape, x, tensor_q(0.1, 2)), Opnd("i4", w.shape, w, wq)]
        got += run_op("gemm", ins, [out], "accum_type=i32", device=OPS_DEVICE)
    np.testing.assert_array_equal(got[0], got[1])


def test_i8_weights_per_group_along_k_are_refused_by_name():
    # The checker accepts it (gemm.int8 asks for a descriptor of any kind); the executor
    # and the binder refuse it, naming the weight and the format it would need.
    x = Opnd("i8", (2, 4), np.zeros((2, 4), int), tensor_q(0.1, 0))
    w = Opnd("i8", (4, 2), np.zeros((4, 2), int), Q((0.1, 0.2), (0, 0), axis=0, group=2))
    result = check(program("gemm", [x, w], [Opnd("i8", (2, 2), quant=tensor_q(0.1, 0))],
                           "accum_type=i32", OPS_DEVICE))
    want = ("gemm: weight x1 is i8 quantised per group along reduction axis 0: that is the "
            r"int4 weight format \(elem=i4\)")
    with pytest.raises(ExecError, match=want):
        execute(result.plan, result.device, {})
    with pytest.raises(BindError, match=want):
        bind(result)
