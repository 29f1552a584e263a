"""Edge cases of the executor's kernels (``nem.ops``), called directly.

:func:`nem.ops.run_compute` and its public helpers run here on hand-built typed regions
(no checker, no program), so that what a NEM program cannot reach by itself is also
checked: attribute defaults, the dispatch between the NMU integer path, the CSTL's int8
path and the real-valued path, the exact error types and messages (naming the task's
opcode and the operand), the quantization descriptors' evaluation, and the ``Work``
record the cycle model reads (MACs, elements, the CSTL table bytes and eltwise entry).

References never call ``nem.ops`` or the numerics kernels: hand-derived values (each test
says how), numpy written here, or torch (float64) for the float kernels; the requantisation
is written out with Python integers from ``docs/numerics.md``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nem import ops
from nem.checker.plan import Region
from nem.ops import NotSupported, OpError, Work, run_compute
from nem.tree import Name, Num, Quant

# One thread: torch's OpenMP pool does not survive fork() (mutmut runs each mutant in a
# forked child of the process that ran the tests first), and the tensors here are tiny.
torch.set_num_threads(1)

I8 = (-128, 127)

# --- helpers -----------------------------------------------------------------------------------


def num(v):
    """A literal for a Python number; an expression (a ``Name``) as it is."""
    return Num(v, repr(v)) if isinstance(v, int | float) else v


def pt(scale, zp) -> Quant:
    """A per-tensor descriptor."""
    return Quant("per_tensor", scale=num(scale), zero_point=num(zp))


def pc(axis, scales, zps) -> Quant:
    """A per-channel descriptor."""
    return Quant("per_channel", axis=num(axis), scales=tuple(num(s) for s in scales),
                 zero_points=tuple(num(z) for z in zps))


def pg(axis, group, scales, zps) -> Quant:
    """A per-group descriptor."""
    return Quant("per_group", axis=num(axis), group_size=num(group),
                 scales=tuple(num(s) for s in scales), zero_points=tuple(num(z) for z in zps))


def reg(name, elem, shape, quant=None) -> Region:
    return Region(name=name, buffer="B", level="L1", engine=None, offset=0, extent=4096,
                  elem=elem, shape=tuple(shape), quant=quant)


#: The numpy type the executor reads each element type as (``Memory.read``; i4 unpacked).
READ_AS = {"i4": np.int8, "i8": np.int8, "i16": np.int16, "i32": np.int32, "f32": np.float32}


def inp(name, elem, values, quant=None):
    """An input operand: its region and its values as the executor reads them."""
    values = np.asarray(values)
    typed = values.astype(READ_AS[elem])
    assert np.array_equal(typed, values), "values not representable in " + elem
    return reg(name, elem, values.shape, quant), typed


def run(opcode, ins, outs, attrs=None, consts=None):
    return run_compute(opcode, ins, outs, dict(attrs or {}), dict(consts or {}))


def raises(exc_type, opcode, ins, outs, attrs=None, consts=None) -> str:
    """Run and return the message of the exception, which must be exactly ``exc_type``."""
    with pytest.raises(exc_type) as info:
        run(opcode, ins, outs, attrs, consts)
    assert type(info.value) is exc_type
    return str(info.value)


def f32(values) -> np.ndarray:
    """float64 values that an f32 operand holds exactly."""
    return np.asarray(values, np.float64).astype(np.float32).astype(np.float64)


def requant_ref(acc, mult, zy, lo=-128, hi=127):
    """docs/numerics.md: M = frac 2**e, m = floor(frac 2**31 + 1/2), t = 31 - e (a carry to
    2**31 halves m), y = clamp(((a m + 2**(t-1)) >> t) + z_y): Python integers."""
    frac, e = math.frexp(mult)
    m, t = math.floor(frac * 2**31 + 0.5), 31 - e
    if m == 2**31:
        m, t = m // 2, t - 1
    flat = [min(hi, max(lo, ((int(a) * m + (1 << (t - 1))) >> t) + zy))
            for a in np.asarray(acc).reshape(-1)]
    return np.array(flat, dtype=np.int64).reshape(np.shape(acc))


def rne_codes(real, scale, zp, lo=-128, hi=127):
    """Step 3 of the real-valued path for integers: clamp(rint(real / s) + z)."""
    return np.clip(np.rint(np.asarray(real, np.float64) / scale) + zp, lo, hi).astype(np.int64)


# --- run_compute: the opcodes this executor refuses ------------------------------------------


@pytest.mark.parametrize("opcode, message", [
    ("conv1d", "conv1d has no hardware support (nem.md: Future); lower it to conv2d"),
    ("conv3d", "conv3d has no hardware support (nem.md: Future)"),
    ("depthwise_conv2d", "depthwise_conv2d has no hardware support yet (nem.md: Future); "
                         "use conv2d with groups = channels"),
    ("compute", "the generic compute escape hatch names no executable operation"),
])
def test_unsupported_opcodes_are_refused_with_their_reason(opcode, message):
    x = inp("x", "f32", np.zeros((1, 2, 2, 1)))
    assert raises(NotSupported, opcode, [x], [reg("y", "f32", (1, 2, 2, 1))]) == message


def test_an_opcode_without_kernel_is_not_supported():
    x = inp("x", "f32", np.zeros(3))
    msg = raises(NotSupported, "frobnicate", [x], [reg("y", "f32", (3,))])
    assert msg == "frobnicate: no executor kernel"


# --- quantization descriptors -------------------------------------------------------------------


def test_quant_params_evaluates_constants_and_kinds():
    assert ops.quant_params(reg("r", "i8", (2,)), {}) is None
    q = ops.quant_params(reg("r", "i8", (2,), Quant("per_tensor", scale=num(0.25),
                                                     zero_point=Name("Z"))), {"Z": -3})
    assert q.scales.dtype == np.float64 and q.zero_points.dtype == np.int64
    assert q.scales.tolist() == [0.25] and q.zero_points.tolist() == [-3]
    assert q.axis is None and q.group_size is None
    q = ops.quant_params(reg("r", "i8", (2, 3), pc(Name("A"), [0.5, 1.0, 2.0], [0, 1, 2.0])),
                         {"A": 1})
    assert q.axis == 1 and q.group_size is None
    assert q.scales.tolist() == [0.5, 1.0, 2.0] and q.zero_points.tolist() == [0, 1, 2]
    assert q.zero_points.dtype == np.int64
    q = ops.quant_params(reg("r", "i4", (4, 3), pg(0, 2, [0.5, 1.0], [1, -2])), {})
    assert (q.axis, q.group_size) == (0, 2)
    assert q.scales.tolist() == [0.5, 1.0] and q.zero_points.tolist() == [1, -2]


def test_quant_params_errors_name_the_region():
    r = reg("xin", "i8", (2,), Quant("per_tensor", scale=Name("S"), zero_point=num(0)))
    with pytest.raises(OpError) as info:
        ops.quant_params(r, {})
    assert type(info.value) is OpError
    assert str(info.value) == ("xin: quantization descriptor does not evaluate: "
                               "'S' is not a declared constant")
    # a descriptor that is no expression at all (a TypeError inside): the same error
    bad = reg("xin", "i8", (2,), Quant("per_channel", axis=num(0), scales=None,
                                       zero_points=(num(0),)))
    with pytest.raises(OpError, match=r"^xin: quantization descriptor does not evaluate: "):
        ops.quant_params(bad, {})
    # an unnamed region is labelled by its place
    anon = Region(None, "BUF", "L1", None, 16, 4, "i8", (2,), quant=pt(0.0, 0))
    with pytest.raises(OpError) as info:
        ops.quant_params(anon, {})
    assert str(info.value) == ("region(BUF, 16, 4): quantization scales must be finite and "
                               "> 0, got [0.0]")


@pytest.mark.parametrize("scale", [0.0, -0.5, math.inf, math.nan])
def test_quant_params_scales_must_be_finite_and_positive(scale):
    r = reg("w", "i8", (2,), pc(0, [0.5, scale], [0, 0]))
    with pytest.raises(OpError) as info:
        ops.quant_params(r, {})
    assert str(info.value) == (
        f"w: quantization scales must be finite and > 0, got {[0.5, float(scale)]}")


def test_quant_params_small_scales_and_integral_float_zero_points_are_accepted():
    q = ops.quant_params(reg("r", "i8", (2,), pt(0.001, 4.0)), {})
    assert q.scales.tolist() == [0.001] and q.zero_points.tolist() == [4]


def test_quant_params_zero_points_must_be_integers():
    r = reg("y", "i8", (2,), pt(1.0, 0.5))
    with pytest.raises(OpError) as info:
        ops.quant_params(r, {})
    assert str(info.value) == "y: zero points must be integers, got [0.5]"


# --- NMU integer path: gemm / matmul ----------------------------------------------------------


def _gemm_i8(rng, m=3, k=5, n=4):
    a = rng.integers(-128, 128, (m, k))
    b = rng.integers(-128, 128, (k, n))
    return a, b


def test_gemm_int8_per_tensor_with_bias():
    rng = np.random.default_rng(1)
    a, b = _gemm_i8(rng)
    bias = rng.integers(-3000, 3000, 4)
    sx, sw, sy, zx, zy = 0.05, 0.01, 0.125, 3, -7
    out, work = run("gemm", [inp("a", "i8", a, pt(sx, zx)), inp("b", "i8", b, pt(sw, 0)),
                             inp("c", "i32", bias)],
                    [reg("y", "i8", (3, 4), pt(sy, zy))], {"accum_type": "i32"})
    acc = (a - zx) @ b + bias  # the definition: sum (x - z_x) w + bias
    np.testing.assert_array_equal(out[0], requant_ref(acc, sx * sw / sy, zy))
    assert out[0].dtype == np.int8
    assert work == Work(macs=3 * 4 * 5)


def test_gemm_int8_raw_i32_output_folds_the_input_zero_point():
    rng = np.random.default_rng(2)
    a, b = _gemm_i8(rng)
    out, work = run("gemm", [inp("a", "i8", a, pt(0.5, 11)), inp("b", "i8", b)],
                    [reg("y", "i32", (3, 4))])
    np.testing.assert_array_equal(out[0], (a - 11) @ b)
    assert work.macs == 60 and work.elems == 0
    # no descriptor on X: z_x = 0
    out, _ = run("gemm", [inp("a", "i8", a), inp("b", "i8", b)], [reg("y", "i32", (3, 4))])
    np.testing.assert_array_equal(out[0], a @ b)


def test_batched_matmul_int8_folds_the_zero_point_per_batch_of_b():
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (2, 3, 4))
    b = rng.integers(-128, 128, (2, 4, 5))
    out, work = run("matmul", [inp("a", "i8", a, pt(1.0, -9)), inp("b", "i8", b)],
                    [reg("y", "i32", (2, 3, 5))])
    np.testing.assert_array_equal(out[0], np.einsum("bmk,bkn->bmn", a + 9, b))
    assert work == Work(macs=2 * 3 * 5 * 4)


def test_gemm_int8_weight_scales_per_channel_and_per_group_of_channels():
    rng = np.random.default_rng(4)
    a, b = _gemm_i8(rng)
    sx, sy = 0.02, 0.1
    ws = [0.01, 0.02, 0.03, 0.04]
    acc = (a - 2) @ b
    want = np.stack([requant_ref(acc[:, n], sx * ws[n] / sy, 1) for n in range(4)], axis=1)
    for wq in (pc(1, ws, [0] * 4), pc(-1, ws, [0] * 4)):
        out, _ = run("gemm", [inp("a", "i8", a, pt(sx, 2)), inp("b", "i8", b, wq)],
                     [reg("y", "i8", (3, 4), pt(sy, 1))])
        np.testing.assert_array_equal(out[0], want)
    # per group of output channels: channels 0, 1 share 0.01, channels 2, 3 share 0.03
    gs = [0.01, 0.01, 0.03, 0.03]
    want = np.stack([requant_ref(acc[:, n], sx * gs[n] / sy, 1) for n in range(4)], axis=1)
    out, _ = run("gemm", [inp("a", "i8", a, pt(sx, 2)),
                          inp("b", "i8", b, pg(1, 2, [0.01, 0.03], [0, 0]))],
                 [reg("y", "i8", (3, 4), pt(sy, 1))])
    np.testing.assert_array_equal(out[0], want)
    # per tensor: one scale for every channel
    out, _ = run("gemm", [inp("a", "i8", a, pt(sx, 2)), inp("b", "i8", b, pt(0.02, 0))],
                 [reg("y", "i8", (3, 4), pt(sy, 1))])
    np.testing.assert_array_equal(out[0], requant_ref(acc, sx * 0.02 / sy, 1))


def test_gemm_int8_u8_and_i16_outputs():
    a = np.array([[10, -20, 30]])
    b = np.array([[1, 2], [3, -4], [5, 6]])
    acc = a @ b  # [[100, 250]]
    out, _ = run("gemm", [inp("a", "i8", a, pt(1.0, 0)), inp("b", "i8", b, pt(1.0, 0))],
                 [reg("y", "i16", (1, 2), pt(0.5, 7))])
    np.testing.assert_array_equal(out[0], acc * 2 + 7)
    assert out[0].dtype == np.int16


def test_gemm_int8_weight_errors():
    a, b = np.ones((2, 3), int), np.ones((3, 4), int)
    x, y = inp("a", "i8", a, pt(0.1, 0)), reg("y", "i8", (2, 4), pt(0.1, 0))
    msg = raises(NotSupported, "gemm", [x, inp("wt", "i8", b, pt(0.1, 1))], [y])
    assert msg == ("gemm: weight wt has a non-zero zero point; the int8 scheme has symmetric "
                   "weights (docs/numerics.md)")
    # a zero point of 0 in channel 0 but not in channel 2 is still refused
    msg = raises(NotSupported, "gemm", [x, inp("wt", "i8", b, pc(1, [.1] * 4, [0, 0, 3, 0]))],
                 [y])
    assert msg.startswith("gemm: weight wt has a non-zero zero point")
    msg = raises(NotSupported, "gemm", [x, inp("wt", "i8", b, pc(0, [.1] * 3, [0] * 3))], [y])
    assert msg == ("gemm: weight wt must be quantised per tensor, per output channel (the last "
                   "axis), or per group along the last axis or a reduction axis")


def test_gemm_int8_missing_descriptors_are_listed():
    a, b = np.ones((2, 3), int), np.ones((3, 4), int)
    msg = raises(OpError, "gemm", [inp("a", "i8", a, pt(0.1, 0)), inp("wt", "i8", b),
                                   inp("bias", "i32", np.zeros(4, int))],
                 [reg("out", "i8", (2, 4), pt(0.1, 0))])
    assert msg == ("gemm: an integer gemm with a i8 output needs quantization descriptors on "
                   "X, W and Y; missing on wt, bias")
    msg = raises(OpError, "matmul", [inp("a", "i8", a), inp("wt", "i8", b, pt(0.1, 0))],
                 [reg("out", "i16", (2, 4), pt(0.1, 0))])
    assert msg.endswith("needs quantization descriptors on X, W and Y; missing on a")
    assert msg.startswith("matmul: an integer matmul with a i16 output")
    # an i32 output with a descriptor is requantised too, so it needs all three
    msg = raises(OpError, "gemm", [inp("a", "i8", a, pt(0.1, 0)), inp("wt", "i8", b)],
                 [reg("out", "i32", (2, 4), pt(1.0, 0))])
    assert msg.endswith("missing on wt")


@pytest.mark.parametrize("which", ["x", "y"])
def test_gemm_int8_activations_must_be_per_tensor(which):
    a, b = np.ones((2, 3), int), np.ones((3, 4), int)
    qx = pc(1, [0.1] * 3, [0] * 3) if which == "x" else pt(0.1, 0)
    qy = pc(1, [0.1] * 4, [0] * 4) if which == "y" else pt(0.1, 0)
    msg = raises(NotSupported, "gemm", [inp("a", "i8", a, qx), inp("b", "i8", b, pt(0.1, 0))],
                 [reg("y", "i8", (2, 4), qy)])
    assert msg == "gemm: input and output must be quantised per tensor"


def test_gemm_int8_unrepresentable_multiplier_names_the_opcode():
    a, b = np.ones((2, 3), int), np.ones((3, 4), int)
    # M = 1e6 * 1e6 / 1e-6 = 1e18 is far beyond 2**30
    msg = raises(OpError, "gemm", [inp("a", "i8", a, pt(1e6, 0)), inp("b", "i8", b, pt(1e6, 0))],
                 [reg("y", "i8", (2, 4), pt(1e-6, 0))])
    assert msg.startswith("gemm: ") and "multiplier" in msg


def test_gemm_int8_bias_must_be_i32():
    a, b = np.ones((2, 3), int), np.ones((3, 4), int)
    msg = raises(NotSupported, "gemm", [inp("a", "i8", a), inp("b", "i8", b),
                                        inp("c", "i16", np.zeros(4, int))],
                 [reg("y", "i32", (2, 4))])
    assert msg == "gemm: an integer gemm's bias must be i32"


def test_gemm_accumulator_limits_are_int32():
    """acc = bias + x w: 2**31 - 1 and -2**31 fit, one more either way is refused."""
    one = np.ones((1, 1), int)
    top, bottom = 2**31 - 1, -(2**31)
    for bias, xw, ok in [(top - 1, 1, True), (top, 1, False), (bottom + 1, -1, True),
                         (bottom, -1, False)]:
        ins = [inp("a", "i8", one * xw), inp("b", "i8", one), inp("c", "i32", np.array([bias]))]
        if ok:
            out, _ = run("gemm", ins, [reg("y", "i32", (1, 1))])
            assert int(out[0][0, 0]) == bias + xw
        else:
            assert raises(OpError, "gemm", ins, [reg("y", "i32", (1, 1))]) == (
                "gemm: int32 accumulator overflow")


def test_gemm_float_and_mixed_operands_take_the_real_path():
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (2, 3))
    b = rng.standard_normal((3, 4)).astype(np.float32)
    c = rng.standard_normal(4).astype(np.float32)
    out, work = run("gemm", [inp("a", "i8", a, pt(0.25, 5)), inp("b", "f32", b),
                             inp("c", "f32", c)], [reg("y", "f32", (2, 4))])
    want = ((0.25 * (a - 5.0)) @ b.astype(np.float64) + c).astype(np.float32)
    np.testing.assert_array_equal(out[0], want)
    assert work == Work(macs=2 * 4 * 3)
    # an integer output of the real path: rounded half to even with its descriptor
    out, _ = run("gemm", [inp("a", "f32", np.array([[1.0, 2.0]])),
                          inp("b", "f32", np.array([[0.25], [0.5]]))],
                 [reg("y", "i8", (1, 1), pt(0.5, 1))])
    assert out[0].tolist() == [[3]]  # 1.25 / 0.5 = 2.5 -> 2 (even) + 1
    # a quantised bias is dequantised: 2 * (3 - 1) = 4 added
    out, _ = run("gemm", [inp("a", "f32", np.array([[1.0]])), inp("b", "f32", np.array([[2.0]])),
                          inp("c", "i8", np.array([3]), pt(2.0, 1))], [reg("y", "f32", (1, 1))])
    assert out[0].tolist() == [[6.0]]


# --- int4 weights per group along a reduction axis --------------------------------------------


def _group_ref(accs, bias, sx, gscales, sy, zy):
    """docs/numerics.md, int4 per group: acc_g with (w - z_g) of the group only, bias in
    group 0, one shared shift from the largest multiplier, m_g = floor(M_g 2**t + 1/2)."""
    reals = [sx * s / sy for s in gscales]
    frac, e = math.frexp(max(reals))
    m, t = math.floor(frac * 2**31 + 0.5), 31 - e
    if m == 2**31:
        t -= 1
    ms = [math.floor(math.ldexp(r, t) + 0.5) for r in reals]
    accs = list(accs)
    if bias is not None:
        accs[0] = accs[0] + bias
    p = sum(np.asarray(a, object) * mg for a, mg in zip(accs, ms, strict=True))
    flat = [min(127, max(-128, ((int(v) + (1 << (t - 1))) >> t) + zy))
            for v in np.asarray(p).reshape(-1)]
    return np.array(flat, dtype=np.int64).reshape(np.shape(p))


def test_gemm_int4_per_group_along_k():
    rng = np.random.default_rng(6)
    k, n, gsize = 5, 3, 2  # groups of K: [0, 2), [2, 4), [4, 5)
    a = rng.integers(-128, 128, (2, k))
    w = rng.integers(-8, 8, (k, n))
    bias = rng.integers(-500, 500, n)
    scales, zps = [0.02, 0.05, 0.03], [1, -2, 0]
    sx, zx, sy, zy = 0.04, -3, 0.2, 4
    parts = []
    for g, zg in enumerate(zps):
        part = np.zeros_like(w)
        part[g * gsize:(g + 1) * gsize] = w[g * gsize:(g + 1) * gsize] - zg
        parts.append(part)
    want = _group_ref([(a - zx) @ p for p in parts], bias, sx, scales, sy, zy)
    out, work = run("gemm", [inp("a", "i8", a, pt(sx, zx)),
                             inp("w", "i4", w, pg(0, gsize, scales, zps)), inp("c", "i32", bias)],
                    [reg("y", "i8", (2, n), pt(sy, zy))])
    np.testing.assert_array_equal(out[0], want)
    assert work == Work(macs=2 * n * k)
    # the same with axis=-2 (K of a rank-2 B)
    out, _ = run("gemm", [inp("a", "i8", a, pt(sx, zx)),
                          inp("w", "i4", w, pg(-2, gsize, scales, zps)), inp("c", "i32", bias)],
                 [reg("y", "i8", (2, n), pt(sy, zy))])
    np.testing.assert_array_equal(out[0], want)


def test_batched_matmul_int4_per_group_along_k():
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (2, 3, 4))
    w = rng.integers(-8, 8, (2, 4, 3))
    scales, zps = [0.5, 0.25], [-1, 2]
    parts = []
    for g, zg in enumerate(zps):
        part = np.zeros_like(w)
        part[:, 2 * g:2 * g + 2] = w[:, 2 * g:2 * g + 2] - zg
        parts.append(part)
    want = _group_ref([(a - 1) @ p for p in parts], None, 0.01, scales, 0.5, 0)
    out, _ = run("matmul", [inp("a", "i8", a, pt(0.01, 1)),
                            inp("w", "i4", w, pg(1, 2, scales, zps))],
                 [reg("y", "i8", (2, 3, 3), pt(0.5, 0))])
    np.testing.assert_array_equal(out[0], want)


def test_nmu_group_requant_returns_none_off_its_scheme():
    w = reg("w", "i4", (4, 3))
    x, y = reg("x", "i8", (2, 4)), reg("y", "i8", (2, 3))
    qx = ops.quant_params(reg("x", "i8", (1,), pt(0.1, 0)), {})
    qg = ops.quant_params(reg("w", "i4", (4, 3), pg(0, 2, [0.1, 0.2], [0, 0])), {})
    qc = ops.quant_params(reg("w", "i4", (4, 3), pc(1, [0.1] * 3, [0] * 3)), {})
    qlast = ops.quant_params(reg("w", "i4", (4, 3), pg(1, 2, [0.1, 0.2], [0, 0])), {})
    assert ops.nmu_group_requant("add", [x, w, y], [qx, qg, qx]) is None
    assert ops.nmu_group_requant("gemm", [x, w, y], [qx, None, qx]) is None
    assert ops.nmu_group_requant("gemm", [x, w, y], [qx, qc, qx]) is None
    assert ops.nmu_group_requant("gemm", [x, w, y], [qx, qlast, qx]) is None
    gw = ops.nmu_group_requant("gemm", [x, w, y], [
        ops.quant_params(reg("x", "i8", (1,), pt(0.1, -5)), {}), qg, qx])
    assert (gw.x_zero_point, gw.axis, gw.group_size) == (-5, 0, 2)
    assert gw.requant.w_zero_points.tolist() == [0, 0]
    assert ops.reduction_axes("conv2d", 4) == (0, 1, 2)
    assert ops.reduction_axes("gemm", 2) == (0,)
    assert ops.reduction_axes("matmul", 3) == (1,)


def test_int4_per_group_errors():
    a = np.ones((2, 3, 4), int)
    w = np.ones((2, 4, 3), int)
    x, y = inp("a", "i8", a, pt(0.1, 0)), reg("y", "i8", (2, 3, 3), pt(0.1, 0))
    msg = raises(NotSupported, "matmul", [x, inp("wt", "i4", w, pg(0, 1, [.1, .1], [0, 0]))], [y])
    assert msg == ("matmul: weight wt is quantised per group along batch axis 0; groups run "
                   "along a reduction axis or the output channels")
    msg = raises(NotSupported, "matmul", [x, inp("wt", "i8", w, pg(1, 2, [.1, .1], [0, 0]))], [y])
    assert msg == ("matmul: weight wt is i8 quantised per group along reduction axis 1: that is "
                   "the int4 weight format (elem=i4); quantise i8 weights per tensor or per "
                   "output channel")
    wq = inp("wt", "i4", w, pg(-2, 2, [.1, .1], [0, 0]))
    need = ("matmul: a weight quantised per group needs a quantised input and a quantised "
            "i8/u8/i16 output (each group has its own scale)")
    assert raises(OpError, "matmul", [inp("a", "i8", a), wq], [y]) == need
    assert raises(OpError, "matmul", [x, wq], [reg("y", "i8", (2, 3, 3))]) == need
    assert raises(OpError, "matmul", [x, wq], [reg("y", "i32", (2, 3, 3), pt(.1, 0))]) == need
    per_t = "matmul: input and output must be quantised per tensor"
    assert raises(NotSupported, "matmul", [inp("a", "i8", a, pc(2, [.1] * 4, [0] * 4)), wq],
                  [y]) == per_t
    assert raises(NotSupported, "matmul", [x, wq],
                  [reg("y", "i8", (2, 3, 3), pc(2, [.1] * 3, [0] * 3))]) == per_t
    # a weight zero point outside the i4 range: the numerics error, naming the opcode
    msg = raises(OpError, "matmul", [x, inp("wt", "i4", w, pg(1, 2, [.1, .1], [0, 9]))], [y])
    assert msg == "matmul: weight zero point 9 outside the weights' range (-8, 7)"


def test_int4_per_group_accumulator_limits():
    """acc_0 = bias + (x - z_x)(w - z_0): 2**31 - 1 fits (and saturates the output), one
    more is refused; likewise -2**31."""
    one = np.ones((1, 1), int)
    for bias, xw, ok in [(2**31 - 2, 1, True), (2**31 - 1, 1, False),
                         (-(2**31) + 1, -1, True), (-(2**31), -1, False)]:
        ins = [inp("a", "i8", one * xw, pt(1.0, 0)), inp("w", "i4", one, pg(0, 1, [1.0], [0])),
               inp("c", "i32", np.array([bias]))]
        y = reg("y", "i8", (1, 1), pt(1.0, 0))
        if ok:
            out, _ = run("gemm", ins, [y])
            assert out[0].tolist() == [[127 if xw > 0 else -128]]
        else:
            assert raises(OpError, "gemm", ins, [y]) == "gemm: int32 accumulator overflow"


# --- conv2d -----------------------------------------------------------------------------------


def _torch_conv(x, w, pads, strides, dil, groups):
    """NHWC x HWIO through torch (NCHW x OIHW), float64, asymmetric pads by F.pad."""
    top, left, bottom, right = pads
    xt = torch.tensor(np.asarray(x, np.float64)).permute(0, 3, 1, 2)
    xt = F.pad(xt, (left, right, top, bottom))
    wt = torch.tensor(np.asarray(w, np.float64)).permute(3, 2, 0, 1)
    y = F.conv2d(xt, wt, stride=strides, dilation=dil, groups=groups)
    return y.permute(0, 2, 3, 1).numpy()


def test_conv2d_float_strides_dilations_groups_and_pads_against_torch():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 7, 8, 4))
    w = rng.standard_normal((3, 2, 2, 6))  # kh=3, kw=2, cg=2 -> groups=2, f=6
    b = rng.standard_normal(6)
    pads, strides, dil = (1, 2, 0, 1), (2, 1), (1, 2)
    want = _torch_conv(x, w, pads, strides, dil, 2) + b
    shape = want.shape
    out, work = run("conv2d", [inp("x", "f32", x.astype(np.float32)),
                               inp("w", "f32", w.astype(np.float32)),
                               inp("b", "f32", b.astype(np.float32))],
                    [reg("y", "f32", shape)],
                    {"pads": list(pads), "strides": list(strides), "dilations": list(dil),
                     "groups": 2})
    xr, wr, br = (v.astype(np.float32).astype(np.float64) for v in (x, w, b))
    want = _torch_conv(xr, wr, pads, strides, dil, 2) + br
    np.testing.assert_allclose(out[0], want.astype(np.float32), rtol=1e-6, atol=1e-6)
    assert work == Work(macs=math.prod(shape) * 3 * 2 * 2)


def test_conv2d_attribute_defaults():
    """No pads / strides / dilations / groups (or None): 0, 1, 1, 1."""
    x = np.arange(2 * 3 * 3 * 2, dtype=np.float64).reshape(1, 3, 3, 4) / 8
    w = np.arange(2 * 2 * 4 * 2, dtype=np.float64).reshape(2, 2, 4, 2) / 16
    want = _torch_conv(x, w, (0, 0, 0, 0), (1, 1), (1, 1), 1)
    for attrs in ({}, {"pads": None, "strides": None, "dilations": None, "groups": None}):
        out, _ = run("conv2d", [inp("x", "f32", x), inp("w", "f32", w)],
                     [reg("y", "f32", (1, 2, 2, 2))], attrs)
        np.testing.assert_array_equal(out[0], want.astype(np.float32))


def test_conv2d_int8_strided_dilated_grouped_padding_holds_the_zero_point():
    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, (1, 6, 5, 4))
    w = rng.integers(-128, 128, (2, 3, 2, 4))
    bias = rng.integers(-1000, 1000, 4)
    zx = 17
    pads, strides, dil = (2, 1, 1, 0), (1, 2), (2, 1)
    # padded taps hold z_x, so they add (z_x - z_x) w = 0: the conv of x - z_x with zero pads
    acc = np.rint(_torch_conv(x - zx, w, pads, strides, dil, 2)).astype(np.int64) + bias
    attrs = {"pads": list(pads), "strides": list(strides), "dilations": list(dil), "groups": 2}
    out, work = run("conv2d", [inp("x", "i8", x, pt(0.5, zx)), inp("w", "i8", w),
                               inp("b", "i32", bias)], [reg("y", "i32", acc.shape)], attrs)
    np.testing.assert_array_equal(out[0], acc)
    assert work == Work(macs=math.prod(acc.shape) * 2 * 3 * 2)
    sx, sw, sy = 0.5, 0.01, 0.75
    out, _ = run("conv2d", [inp("x", "i8", x, pt(sx, zx)), inp("w", "i8", w, pt(sw, 0)),
                            inp("b", "i32", bias)], [reg("y", "i8", acc.shape, pt(sy, -2))], attrs)
    np.testing.assert_array_equal(out[0], requant_ref(acc, sx * sw / sy, -2))


def test_conv2d_int_errors():
    x, w = np.ones((1, 2, 2, 1), int), np.ones((1, 1, 1, 1), int)
    msg = raises(NotSupported, "conv2d", [inp("x", "i8", x), inp("w", "i8", w),
                                          inp("b", "i8", np.zeros(1, int))],
                 [reg("y", "i32", (1, 2, 2, 1))])
    assert msg == "conv2d: an integer conv2d's bias must be i32"
    # the accumulator limits: bias 2**31 - 1 plus one product of 1
    for bias, ok in [(2**31 - 2, True), (2**31 - 1, False)]:
        ins = [inp("x", "i8", x), inp("w", "i8", w), inp("b", "i32", np.array([bias]))]
        if ok:
            out, _ = run("conv2d", ins, [reg("y", "i32", (1, 2, 2, 1))])
            assert out[0].reshape(-1).tolist() == [2**31 - 1] * 4
        else:
            assert raises(OpError, "conv2d", ins, [reg("y", "i32", (1, 2, 2, 1))]) == (
                "conv2d: int32 accumulator overflow")
    for bias, ok in [(-(2**31) + 1, True), (-(2**31), False)]:
        ins = [inp("x", "i8", -x), inp("w", "i8", w), inp("b", "i32", np.array([bias]))]
        if ok:
            out, _ = run("conv2d", ins, [reg("y", "i32", (1, 2, 2, 1))])
            assert out[0].reshape(-1).tolist() == [-(2**31)] * 4
        else:
            assert raises(OpError, "conv2d", ins, [reg("y", "i32", (1, 2, 2, 1))]) == (
                "conv2d: int32 accumulator overflow")


def test_conv2d_int4_per_group_over_input_channels_with_padding():
    rng = np.random.default_rng(10)
    x = rng.integers(-128, 128, (1, 4, 4, 4))
    w = rng.integers(-8, 8, (2, 2, 4, 3))
    scales, zps = [0.03, 0.06], [2, -3]
    sx, zx, sy, zy = 0.05, 9, 0.25, -1
    pads, strides = (1, 0, 0, 1), (1, 2)
    bias = rng.integers(-300, 300, 3)
    parts = []
    for g, zg in enumerate(zps):
        part = np.zeros_like(w)
        part[:, :, 2 * g:2 * g + 2] = w[:, :, 2 * g:2 * g + 2] - zg
        parts.append(part)
    accs = [np.rint(_torch_conv(x - zx, p, pads, strides, (1, 1), 1)).astype(np.int64)
            for p in parts]
    want = _group_ref(accs, bias, sx, scales, sy, zy)
    out, work = run("conv2d", [inp("x", "i8", x, pt(sx, zx)),
                               inp("w", "i4", w, pg(2, 2, scales, zps)), inp("b", "i32", bias)],
                    [reg("y", "i8", accs[0].shape, pt(sy, zy))],
                    {"pads": list(pads), "strides": list(strides)})
    np.testing.assert_array_equal(out[0], want)
    assert work == Work(macs=math.prod(accs[0].shape) * 2 * 2 * 4)


# --- real-valued elementwise kernels ----------------------------------------------------------

#: torch's float64 definitions of the one-input kernels (attributes as in the registry).
TORCH_UNARY = {
    "relu": (torch.relu, {}),
    "leaky_relu": (lambda t: F.leaky_relu(t, 0.2), {"alpha": 0.2}),
    "sigmoid": (torch.sigmoid, {}),
    "tanh": (torch.tanh, {}),
    "exp": (torch.exp, {}),
    "log": (torch.log, {}),
    "sqrt": (torch.sqrt, {}),
    "abs": (torch.abs, {}),
    "neg": (torch.neg, {}),
    "gelu": (F.gelu, {}),  # the erf form
    "silu": (F.silu, {}),
    "clamp": (lambda t: torch.clamp(t, -0.75, 1.5), {"min_val": -0.75, "max_val": 1.5}),
}
UNARY_X = np.array([-30.0, -3.5, -1.0, -0.25, 0.0, 0.125, 0.5, 1.0, 2.75, 9.0, 30.0])


@pytest.mark.filterwarnings("error")  # log / sqrt of negatives: NaN without a warning
@pytest.mark.parametrize("opcode", sorted(TORCH_UNARY))
def test_unary_float_kernels_against_torch(opcode):
    fn, attrs = TORCH_UNARY[opcode]
    want = fn(torch.tensor(UNARY_X, dtype=torch.float64)).numpy()
    with np.errstate(all="ignore"):  # the bare kernel; run_compute silences these itself
        direct = ops.UNARY[opcode](UNARY_X, attrs)
    np.testing.assert_allclose(direct, want, rtol=1e-13, atol=1e-300)
    out, work = run(opcode, [inp("x", "f32", UNARY_X.astype(np.float32))],
                    [reg("y", "f32", UNARY_X.shape)], attrs)
    np.testing.assert_allclose(out[0], want.astype(np.float32), rtol=2e-7, atol=1e-30)
    assert out[0].dtype == np.float32
    assert work == Work(elems=UNARY_X.size)


def test_unary_attribute_defaults():
    """Without the attribute: leaky_relu's alpha is torch's (and ONNX's) 0.01; clamp without
    bounds clamps nothing."""
    t = torch.tensor(UNARY_X, dtype=torch.float64)
    np.testing.assert_array_equal(ops.UNARY["leaky_relu"](UNARY_X, {}), F.leaky_relu(t).numpy())
    np.testing.assert_array_equal(ops.UNARY["clamp"](UNARY_X, {}), UNARY_X)
    np.testing.assert_array_equal(ops.UNARY["clamp"](UNARY_X, {"min_val": 0.5}),
                                  torch.clamp(t, min=0.5).numpy())
    np.testing.assert_array_equal(ops.UNARY["clamp"](UNARY_X, {"max_val": -0.5}),
                                  torch.clamp(t, max=-0.5).numpy())


BINARY_A = np.array([[-3.0, -0.5, 0.0, 2.0], [4.0, 1.5, -2.0, 9.0]])
BINARY_B = np.array([[2.0, -4.0, 0.5, 3.0], [-1.0, 0.0, 2.0, 0.5]])


@pytest.mark.filterwarnings("error")  # division by zero, 0 ** negative: inf / NaN, no warning
@pytest.mark.parametrize("opcode, fn", [
    ("add", torch.add), ("sub", torch.sub), ("mul", torch.mul), ("div", torch.div),
    ("min", torch.minimum), ("max", torch.maximum), ("pow", torch.pow),
])
def test_binary_float_kernels_against_torch(opcode, fn):
    a, b = BINARY_A, BINARY_B
    want = fn(torch.tensor(a), torch.tensor(b)).numpy().astype(np.float32)
    out, work = run(opcode, [inp("a", "f32", a), inp("b", "f32", b)], [reg("y", "f32", a.shape)])
    np.testing.assert_array_equal(out[0], want)
    assert work == Work(elems=8)
    # broadcasting (a stride-0 operand): b's first row against both rows of a
    want = fn(torch.tensor(a), torch.tensor(b[:1])).numpy().astype(np.float32)
    out, _ = run(opcode, [inp("a", "f32", a), inp("b", "f32", b[:1])], [reg("y", "f32", a.shape)])
    np.testing.assert_array_equal(out[0], want)


def test_binary_i8_div_takes_the_real_path():
    """div is no CSTL eltwise op: dequantise, divide in float64, round half to even."""
    a, b = np.array([7, -9, 10, 0]), np.array([2, 4, -4, 3])
    out, work = run("div", [inp("a", "i8", a, pt(0.5, 1)), inp("b", "i8", b)],
                    [reg("y", "i8", (4,), pt(0.25, 0))])
    real = 0.5 * (a - 1.0) / b  # 1.5, -1.25, -1.125, -0.1667
    np.testing.assert_array_equal(out[0], rne_codes(real, 0.25, 0))
    assert out[0].tolist() == [6, -5, -4, -1]
    assert work == Work(elems=4)


# --- pooling ----------------------------------------------------------------------------------


def pool_ref(x, kind, kernel, pads, strides):
    """Direct loops: max over in-bounds positions (-inf for none), or their mean."""
    n, h, w, c = x.shape
    top, left, bottom, right = pads
    oh = (h + top + bottom - kernel[0]) // strides[0] + 1
    ow = (w + left + right - kernel[1]) // strides[1] + 1
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            vals = [x[:, r, s, :] for r in range(i * strides[0] - top,
                                                 i * strides[0] - top + kernel[0])
                    for s in range(j * strides[1] - left, j * strides[1] - left + kernel[1])
                    if 0 <= r < h and 0 <= s < w]
            if kind == "maxpool":
                out[:, i, j] = np.max(vals, axis=0) if vals else -np.inf
            else:
                out[:, i, j] = np.mean(vals, axis=0) if vals else 0.0
    return out


@pytest.mark.parametrize("kind", ["maxpool", "avgpool"])
def test_pool_float_with_padding_and_strides(kind):
    rng = np.random.default_rng(11)
    x = f32(rng.standard_normal((2, 5, 6, 3)))
    pads, strides, kernel = (1, 2, 2, 0), (2, 3), (3, 2)
    want = pool_ref(x, kind, kernel, pads, strides)
    out, work = run(kind, [inp("x", "f32", x)], [reg("y", "f32", want.shape)],
                    {"kernel_shape": list(kernel), "pads": list(pads), "strides": list(strides)})
    np.testing.assert_allclose(out[0], want.astype(np.float32), rtol=1e-7)
    assert work == Work(elems=x.size)


@pytest.mark.parametrize("kind", ["maxpool", "avgpool"])
def test_pool_float_defaults_and_a_window_in_the_padding(kind):
    x = np.arange(1 * 3 * 4 * 2, dtype=np.float64).reshape(1, 3, 4, 2) - 10.0
    want = pool_ref(x, kind, (2, 2), (0, 0, 0, 0), (1, 1))
    for attrs in ({"kernel_shape": [2, 2]},
                  {"kernel_shape": [2, 2], "pads": None, "strides": None}):
        out, _ = run(kind, [inp("x", "f32", x)], [reg("y", "f32", want.shape)], attrs)
        np.testing.assert_array_equal(out[0], want.astype(np.float32))
    # a 1x1 window two rows into the bottom padding sees no input: max -inf, mean 0
    out, _ = run(kind, [inp("x", "f32", x)], [reg("y", "f32", (1, 5, 4, 2))],
                 {"kernel_shape": [1, 1], "pads": [0, 0, 2, 0], "strides": [1, 1]})
    assert np.all(out[0][:, 3:] == (-np.inf if kind == "maxpool" else 0.0))
    np.testing.assert_array_equal(out[0][:, :3], x.astype(np.float32))


# --- normalisations and softmax ---------------------------------------------------------------


def test_layernorm_and_rmsnorm_against_torch_with_default_epsilon():
    rng = np.random.default_rng(12)
    # a small variance (about 1e-5) so that epsilon matters
    x = f32(1.0 + 0.003 * rng.standard_normal((3, 8)))
    g, b = f32(rng.standard_normal(8)), f32(rng.standard_normal(8))
    t = torch.tensor(x)
    cases = [
        ("layernorm", [g, b], F.layer_norm(t, (8,), torch.tensor(g), torch.tensor(b), 1e-5)),
        ("layernorm", [g], F.layer_norm(t, (8,), torch.tensor(g), None, 1e-5)),
        ("layernorm", [], F.layer_norm(t, (8,), None, None, 1e-5)),
        ("rmsnorm", [g], F.rms_norm(t, (8,), torch.tensor(g), 1e-5)),
        ("rmsnorm", [g, b], F.rms_norm(t, (8,), torch.tensor(g), 1e-5) + torch.tensor(b)),
    ]
    for opcode, extra, want in cases:
        ins = [inp("x", "f32", x)] + [inp(f"p{k}", "f32", v) for k, v in enumerate(extra)]
        for attrs in ({}, {"axis": -1, "epsilon": None}, {"axis": 1, "epsilon": 1e-5}):
            out, work = run(opcode, ins, [reg("y", "f32", x.shape)], attrs)
            np.testing.assert_allclose(out[0], want.numpy().astype(np.float32), rtol=2e-6,
                                       atol=2e-6, err_msg=f"{opcode} {len(extra)} {attrs}")
            assert work == Work(elems=24)
    # another epsilon is used as given
    out, _ = run("layernorm", [inp("x", "f32", x)], [reg("y", "f32", x.shape)], {"epsilon": 1e-3})
    np.testing.assert_allclose(out[0], F.layer_norm(t, (8,), eps=1e-3).numpy(), rtol=2e-6)


def test_layernorm_along_the_first_axis():
    rng = np.random.default_rng(13)
    x = f32(rng.standard_normal((5, 3)))
    g, b = f32(rng.standard_normal(5)), f32(rng.standard_normal(5))
    want = F.layer_norm(torch.tensor(x.T), (5,), torch.tensor(g), torch.tensor(b)).numpy().T
    out, _ = run("layernorm", [inp("x", "f32", x), inp("g", "f32", g), inp("b", "f32", b)],
                 [reg("y", "f32", x.shape)], {"axis": 0})
    np.testing.assert_allclose(out[0], want.astype(np.float32), rtol=2e-6, atol=2e-6)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("opcode, fn", [("softmax", torch.softmax),
                                        ("log_softmax", torch.log_softmax)])
def test_softmax_subtracts_the_maximum_and_defaults_to_the_last_axis(opcode, fn):
    # values near 1000: exp overflows unless the maximum is subtracted first
    x = np.array([[1000.0, 999.0, 998.5, 1001.0], [-1000.0, -999.0, -1002.0, -998.0],
                  [0.5, 0.25, -0.5, 0.0]])
    t = torch.tensor(x)
    for attrs, axis in (({}, -1), ({"axis": 1}, 1), ({"axis": 0}, 0), ({"axis": -2}, 0)):
        out, _ = run(opcode, [inp("x", "f32", x)], [reg("y", "f32", x.shape)], attrs)
        np.testing.assert_allclose(out[0], fn(t, axis).numpy().astype(np.float32), rtol=2e-7,
                                   atol=1e-7, err_msg=str(attrs))


# --- layout operations ------------------------------------------------------------------------


def test_slice_defaults_negative_axes_and_steps():
    x = np.arange(4 * 6, dtype=np.float64).reshape(4, 6)
    cases = [
        ({"starts": [1], "ends": [3]}, x[1:3]),
        ({"starts": [1, 0], "ends": [4, 5], "axes": None, "steps": None}, x[1:4, 0:5]),
        ({"starts": [5], "ends": [0], "axes": [-1], "steps": [-2]}, x[:, 5:0:-2]),
        ({"starts": [0, 1], "ends": [6, 3], "axes": [1, 0], "steps": [3, 1]}, x[1:3, 0:6:3]),
    ]
    for attrs, want in cases:
        out, work = run("slice", [inp("x", "f32", x)], [reg("y", "f32", want.shape)], attrs)
        np.testing.assert_array_equal(out[0], want, err_msg=str(attrs))
        assert work == Work(elems=24)


def test_pad_modes_and_defaults():
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    pads = [1, 2, 0, 1]  # begin of axes 0, 1, then end of axes 0, 1
    cases = [
        ({"pads": pads}, np.pad(x, ((1, 0), (2, 1)))),
        ({"pads": pads, "mode": None, "constant_value": None}, np.pad(x, ((1, 0), (2, 1)))),
        ({"pads": pads, "mode": "constant", "constant_value": -1.5},
         np.pad(x, ((1, 0), (2, 1)), constant_values=-1.5)),
        ({"pads": pads, "mode": "reflect"}, np.pad(x, ((1, 0), (2, 1)), mode="reflect")),
        ({"pads": pads, "mode": "edge"}, np.pad(x, ((1, 0), (2, 1)), mode="edge")),
    ]
    for attrs, want in cases:
        out, work = run("pad", [inp("x", "f32", x)], [reg("y", "f32", want.shape)], attrs)
        np.testing.assert_array_equal(out[0], want, err_msg=str(attrs))
        assert work == Work(elems=want.size)
    # reflect and edge differ from each other and from constant: the modes are not mixed up
    assert np.pad(x, ((1, 0), (2, 1)), mode="reflect")[0, 0] == 6.0
    assert np.pad(x, ((1, 0), (2, 1)), mode="edge")[0, 0] == 1.0
    msg = raises(OpError, "pad", [inp("x", "f32", x)], [reg("y", "f32", (3, 6))],
                 {"pads": pads, "mode": "wrap"})
    assert msg == "pad: mode must be constant, reflect or edge, not 'wrap'"


def test_transpose_reshape_concat_split():
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    out, _ = run("transpose", [inp("x", "f32", x)], [reg("y", "f32", (4, 2, 3))],
                 {"perm": [2, 0, 1]})
    np.testing.assert_array_equal(out[0], np.moveaxis(x, 2, 0))
    out, work = run("reshape", [inp("x", "f32", x)], [reg("y", "f32", (6, 4))],
                    {"target_shape": [6, 4]})
    np.testing.assert_array_equal(out[0], x.reshape(6, 4))
    assert work == Work(elems=24)
    y = np.arange(8, dtype=np.float64).reshape(2, 1, 4) + 100
    out, work = run("concat", [inp("x", "f32", x), inp("y", "f32", y)],
                    [reg("z", "f32", (2, 4, 4))], {"axis": 1})
    np.testing.assert_array_equal(out[0], np.concatenate([x, y], axis=1))
    assert work == Work(elems=32)
    for attrs in ({}, {"axis": None}):  # default axis 0
        out, _ = run("concat", [inp("x", "f32", x), inp("y", "f32", x + 1)],
                     [reg("z", "f32", (4, 3, 4))], attrs)
        np.testing.assert_array_equal(out[0], np.concatenate([x, x + 1]))
    out, work = run("split", [inp("x", "f32", x)],
                    [reg("a", "f32", (2, 1, 4)), reg("b", "f32", (2, 2, 4))],
                    {"axis": 1, "split_sizes": [1, 2]})
    np.testing.assert_array_equal(out[0], x[:, :1])
    np.testing.assert_array_equal(out[1], x[:, 1:])
    assert work == Work(elems=24)
    z = np.arange(10, dtype=np.float64).reshape(5, 2)
    for attrs in ({"split_sizes": [2, 3]}, {"axis": None, "split_sizes": [2, 3]}):
        out, _ = run("split", [inp("x", "f32", z)],
                     [reg("a", "f32", (2, 2)), reg("b", "f32", (3, 2))], attrs)
        np.testing.assert_array_equal(out[0], z[:2])
        np.testing.assert_array_equal(out[1], z[2:])


def test_output_count_and_shape_errors():
    x = np.arange(6, dtype=np.float64)
    msg = raises(OpError, "split", [inp("x", "f32", x)],
                 [reg("a", "f32", (2,)), reg("b", "f32", (4,))], {"split_sizes": [2, 2, 2]})
    assert msg == "split: computes 3 output(s), 2 given"
    msg = raises(OpError, "relu", [inp("x", "f32", x)], [reg("out", "f32", (2, 3))])
    assert msg == "relu: result has shape [6], output out has [2, 3]"


def test_gather_indices_and_axis():
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    idx = np.array([[2, -3], [0, -1]])
    for attrs in ({}, {"axis": None}, {"axis": 0}):
        out, work = run("gather", [inp("x", "f32", x), inp("i", "i32", idx)],
                        [reg("y", "f32", (2, 2, 4))], attrs)
        np.testing.assert_array_equal(out[0], x[[[2, 0], [0, 2]]])
        assert work == Work(elems=16)
    out, _ = run("gather", [inp("x", "f32", x), inp("i", "i32", np.array([3, -4]))],
                 [reg("y", "f32", (3, 2))], {"axis": 1})
    np.testing.assert_array_equal(out[0], x[:, [3, 0]])
    # the index operand is taken as it is, not dequantised with its descriptor
    out, _ = run("gather", [inp("x", "f32", x), inp("i", "i8", np.array([1]), pt(2.0, 1))],
                 [reg("y", "f32", (1, 4))])
    np.testing.assert_array_equal(out[0], x[[1]])
    for bad, axis, size in ((3, 0, 3), (-4, 0, 3), (4, 1, 4), (-5, 1, 4)):
        msg = raises(OpError, "gather", [inp("x", "f32", x), inp("i", "i32", np.array([0, bad]))],
                     [reg("y", "f32", (2, 4))], {"axis": axis})
        assert msg == f"gather: index outside [-{size}, {size}) on axis {axis}"


@pytest.mark.parametrize("keep", ["absent", None, True, False])
def test_reductions_float(keep):
    """keepdims absent or None: kept (as ONNX's default keepdims=1)."""
    x = np.array([[3.0, -1.0, 7.0, 7.0], [-2.0, 5.0, -2.0, 0.5], [4.0, 4.0, -8.0, 1.0]])
    attrs = {} if keep == "absent" else {"keepdims": keep}
    k = keep is not False
    cases = [
        ("reduce_sum", {"axes": [1]}, x.sum(axis=1, keepdims=k)),
        ("reduce_max", {"axes": [0]}, x.max(axis=0, keepdims=k)),
        ("reduce_min", {"axes": [0, 1]}, x.min(axis=(0, 1), keepdims=k)),
        ("reduce_sum", {}, x.sum(keepdims=k)),
        ("reduce_max", {"axes": []}, x.max(keepdims=k)),
        ("argmax", {"axis": 1}, np.array([2, 1, 0]).reshape((3, 1) if k else (3,))),
        ("argmin", {"axis": 1}, np.array([1, 0, 2]).reshape((3, 1) if k else (3,))),
        ("argmax", {}, np.array([2, 1, 0, 0]).reshape((1, 4) if k else (4,))),
        ("argmin", {"axis": None}, np.array([1, 0, 2, 1]).reshape((1, 4) if k else (4,))),
    ]
    for opcode, more, want in cases:
        out, _ = run(opcode, [inp("x", "f32", x)], [reg("y", "f32", want.shape)],
                     {**attrs, **more})
        np.testing.assert_array_equal(out[0], want, err_msg=f"{opcode} {more}")


def test_argmax_of_float_into_an_integer_output_takes_the_real_path():
    x = np.array([[0.5, 2.0, 2.0], [-1.0, -3.0, -0.5]])
    out, work = run("argmax", [inp("x", "f32", x)], [reg("y", "i32", (2, 1))], {"axis": 1})
    assert out[0].tolist() == [[1], [2]]
    assert work == Work(elems=6)  # elements, not the CSTL's bytes


def test_conversions_quantize_dequantize_cast():
    x = f32([-1.25, 0.3, 0.75, 100.0, -100.0])
    out, work = run("quantize", [inp("x", "f32", x)], [reg("y", "i8", (5,), pt(0.5, 3))])
    np.testing.assert_array_equal(out[0], rne_codes(x, 0.5, 3))
    assert out[0].tolist() == [1, 4, 5, 127, -128]  # -2.5 -> -2, 0.6 -> 1, 1.5 -> 2 (+3)
    assert work == Work(elems=5)
    q = np.array([-128, -1, 0, 5, 127])
    out, _ = run("dequantize", [inp("q", "i8", q, pt(0.25, -2))], [reg("y", "f32", (5,))])
    np.testing.assert_array_equal(out[0], 0.25 * (q + 2.0))
    # cast: descriptors play no part, the value converts
    out, work = run("cast", [inp("q", "i8", q, pt(0.25, -2))], [reg("y", "f32", (5,))])
    np.testing.assert_array_equal(out[0], q.astype(np.float32))
    assert work == Work(elems=5)
    out, _ = run("cast", [inp("x", "f32", x)], [reg("y", "i8", (5,), pt(0.5, 3))])
    assert out[0].tolist() == [-1, 0, 1, 100, -100]  # rint, no scale, no zero point


def test_cast_between_integer_types_saturates():
    v = np.array([[-40000, -129, -128, 0], [127, 128, 300, 40000]])
    out, work = run("cast", [inp("x", "i32", v, pt(3.0, 5))], [reg("y", "i8", (2, 4), pt(.5, 1))])
    assert out[0].tolist() == [[-128, -128, -128, 0], [127, 127, 127, 127]]
    assert out[0].dtype == np.int8
    assert work == Work(elems=32)  # the i32 input's bytes
    out, work = run("cast", [inp("x", "i8", np.array([[-128, 5, 127]]))],
                    [reg("y", "i16", (1, 3))])
    assert out[0].tolist() == [[-128, 5, 127]] and out[0].dtype == np.int16
    assert work == Work(elems=6)


# --- the CSTL's int8 path ---------------------------------------------------------------------

#: i8 code of each byte 0..255 (two's complement), written out.
BYTE_CODES = [b if b < 128 else b - 256 for b in range(256)]


def table_ref(fn, s_in, z_in, s_out, z_out):
    """T[b] = clamp(rint(fn(s_in (code(b) - z_in)) / s_out) + z_out): docs/numerics.md."""
    real = np.array([s_in * (c - z_in) for c in BYTE_CODES], dtype=np.float64)
    return rne_codes(fn(real), s_out, z_out).astype(np.int8)


def test_table_codes_and_table_opcodes():
    assert ops.TABLE_CODES.dtype == np.int8
    assert ops.TABLE_CODES.tolist() == BYTE_CODES
    assert ops.table_opcodes() == frozenset({
        "relu", "leaky_relu", "sigmoid", "tanh", "exp", "log", "sqrt", "abs", "neg", "gelu",
        "silu", "clamp"})


@pytest.mark.parametrize("opcode, attrs, fn", [
    ("relu", {}, lambda r: np.maximum(r, 0.0)),
    ("leaky_relu", {"alpha": 0.125}, lambda r: np.where(r < 0, r * 0.125, r)),
    ("clamp", {"min_val": -1.5, "max_val": 2.25}, lambda r: np.clip(r, -1.5, 2.25)),
    ("abs", {}, np.abs),
    ("neg", {}, np.negative),
])
def test_unary_i8_is_a_lookup_table(opcode, attrs, fn):
    s_in, z_in, s_out, z_out = 0.0625, -6, 0.03125, 9
    want_table = table_ref(fn, s_in, z_in, s_out, z_out)
    table = ops.lookup_table(opcode, attrs, ops.quant_params(reg("x", "i8", (1,),
                                                                 pt(s_in, z_in)), {}),
                             ops.quant_params(reg("y", "i8", (1,), pt(s_out, z_out)), {}))
    np.testing.assert_array_equal(table, want_table)
    x = np.array([[-128, -7, -6, 0], [1, 33, 100, 127]])
    out, work = run(opcode, [inp("x", "i8", x, pt(s_in, z_in))],
                    [reg("y", "i8", (2, 4), pt(s_out, z_out))], attrs)
    np.testing.assert_array_equal(out[0], want_table[x % 256])
    assert out[0].dtype == np.int8
    assert work == Work(elems=8, table=want_table.tobytes(), entry=False)


def test_unary_i8_without_descriptors_and_the_requantisation_table():
    x = np.array([-128, -3, 0, 4, 127])
    out, work = run("neg", [inp("x", "i8", x)], [reg("y", "i8", (5,))])
    assert out[0].tolist() == [127, 3, 0, -4, -127]  # -(-128) saturates
    assert work.table == table_ref(np.negative, 1.0, 0, 1.0, 0).tobytes()
    # opcode None: the requantisation alone
    qi = ops.quant_params(reg("x", "i8", (1,), pt(0.5, 2)), {})
    qo = ops.quant_params(reg("y", "i8", (1,), pt(0.75, -1)), {})
    np.testing.assert_array_equal(ops.lookup_table(None, {}, qi, qo),
                                  table_ref(lambda r: r, 0.5, 2, 0.75, -1))
    np.testing.assert_array_equal(ops.lookup_table(None, {}, None, None), BYTE_CODES)


def test_unary_i8_shape_and_output_count_errors():
    x = inp("x", "i8", np.array([1, 2, 3]))
    msg = raises(OpError, "relu", [x], [reg("out", "i8", (4,))])
    assert msg == "relu: result has shape [3], output out has [4]"
    # two outputs: not the int8 path (it has one output); the real path computes one
    msg = raises(OpError, "relu", [x], [reg("a", "i8", (3,)), reg("b", "i8", (3,))])
    assert msg == "relu: computes 1 output(s), 2 given"


def test_unary_on_non_i8_or_per_channel_operands_takes_the_real_path():
    x = np.array([[-3, 5], [7, -1]])
    # per channel along axis 1: scales 0.5 and 0.25
    out, work = run("relu", [inp("x", "i8", x, pc(1, [0.5, 0.25], [0, 1]))],
                    [reg("y", "i8", (2, 2), pt(0.25, 0))])
    real = np.maximum(x * np.array([0.5, 0.25]) - np.array([0.0, 0.25]), 0.0)
    np.testing.assert_array_equal(out[0], rne_codes(real, 0.25, 0))
    assert work == Work(elems=4)  # no table
    out, work = run("relu", [inp("x", "i8", x)], [reg("y", "i16", (2, 2))])
    assert out[0].tolist() == [[0, 5], [7, 0]] and work == Work(elems=4)
    out, work = run("relu", [inp("x", "i8", x)], [reg("y", "i8", (2, 2), pc(0, [1, 1], [0, 0]))])
    assert out[0].tolist() == [[0, 5], [7, 0]] and work == Work(elems=4)


@pytest.mark.parametrize("opcode", ["add", "sub", "min", "max"])
def test_binary_i8_with_equal_descriptors_is_exact(opcode):
    """Equal descriptors (s, z): the rescales are exact, so y = clamp(op(qa - z, qb - z) + z)
    (min / max of the centred codes): the exact real result."""
    rng = np.random.default_rng(14)
    a = rng.integers(-128, 128, (3, 4))
    b = rng.integers(-128, 128, (1, 4))  # broadcast along the rows
    z = -5
    fn = {"add": np.add, "sub": np.subtract, "min": np.minimum, "max": np.maximum}[opcode]
    want = np.clip(fn(a - z, b - z) + z, -128, 127)
    out, work = run(opcode, [inp("a", "i8", a, pt(0.1, z)), inp("b", "i8", b, pt(0.1, z))],
                    [reg("y", "i8", (3, 4), pt(0.1, z))])
    np.testing.assert_array_equal(out[0], want)
    assert out[0].dtype == np.int8
    assert work == Work(elems=12, table=b"", entry=True)


def test_binary_i8_mul_with_unit_multiplier():
    """mul: r = (qa - za)(qb - zb) rescaled by s_a s_b / s_y = 1 (m = 2**30, t = 30): r."""
    a, b = np.array([[3, -4, 12, 100]]), np.array([[5, 7, -9, 100]])
    out, work = run("mul", [inp("a", "i8", a, pt(0.5, 1)), inp("b", "i8", b, pt(4.0, -2))],
                    [reg("y", "i8", (1, 4), pt(2.0, 3))])
    assert out[0].tolist() == [[2 * 7 + 3, -5 * 9 + 3, 11 * -7 + 3, 127]]
    assert work == Work(elems=4, entry=True)
    # no descriptors: s = 1, z = 0 on every operand
    out, _ = run("mul", [inp("a", "i8", a), inp("b", "i8", b)], [reg("y", "i8", (1, 4))])
    assert out[0].tolist() == [[15, -28, -108, 127]]


def test_binary_i8_unrepresentable_parameters():
    # s_b / (2 s_a) = 2**-40 is below the smallest multiplier, 2**-31
    with pytest.raises(OpError) as info:
        run("add", [inp("a", "i8", np.array([1]), pt(1.0, 0)),
                    inp("b", "i8", np.array([1]), pt(2.0**-39, 0))],
            [reg("y", "i8", (1,), pt(1.0, 0))])
    assert type(info.value) is OpError
    assert str(info.value).startswith("add: scales 1.0, ")


def test_binary_i8_div_pow_and_three_operand_tasks_leave_the_int8_path():
    a, b = np.array([6, -8]), np.array([2, 2])
    out, work = run("pow", [inp("a", "i8", a), inp("b", "i8", b)], [reg("y", "i8", (2,))])
    assert out[0].tolist() == [36, 64] and work == Work(elems=2)
    # a unary opcode with two inputs is no table task
    out, work = run("relu", [inp("a", "i8", a), inp("b", "i8", b)], [reg("y", "i8", (2,))])
    assert out[0].tolist() == [6, 0] and work == Work(elems=2)


def _pool_codes_ref(x, kind, kernel, pads, strides):
    """maxpool: the largest in-bounds code, -128 for none; avgpool: their sum divided by
    their count, rounded half to even (Python's round of an exact Fraction), 0 for none."""
    from fractions import Fraction

    n, h, w, c = x.shape
    top, left, bottom, right = pads
    oh = (h + top + bottom - kernel[0]) // strides[0] + 1
    ow = (w + left + right - kernel[1]) // strides[1] + 1
    out = np.zeros((n, oh, ow, c), dtype=np.int64)
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                for ch in range(c):
                    vals = [int(x[b, r, s, ch])
                            for r in range(i * strides[0] - top, i * strides[0] - top + kernel[0])
                            for s in range(j * strides[1] - left,
                                           j * strides[1] - left + kernel[1])
                            if 0 <= r < h and 0 <= s < w]
                    if kind == "maxpool":
                        out[b, i, j, ch] = max(vals, default=-128)
                    else:
                        out[b, i, j, ch] = round(Fraction(sum(vals), len(vals))) if vals else 0
    return out


@pytest.mark.parametrize("kind", ["maxpool", "avgpool"])
def test_pool_i8(kind):
    rng = np.random.default_rng(15)
    x = rng.integers(-128, 128, (1, 5, 4, 2))
    kernel, pads, strides = (2, 3), (1, 2, 3, 0), (2, 1)
    want = _pool_codes_ref(x, kind, kernel, pads, strides)
    attrs = {"kernel_shape": list(kernel), "pads": list(pads), "strides": list(strides)}
    # the same descriptor: the pooled codes, no table
    out, work = run(kind, [inp("x", "i8", x, pt(0.5, 3))], [reg("y", "i8", want.shape,
                                                                 pt(0.5, 3))], attrs)
    np.testing.assert_array_equal(out[0], want)
    assert work == Work(elems=want.size * 6, table=b"")  # every tap of every output
    # another descriptor: then the requantisation table
    table = table_ref(lambda r: r, 0.5, 3, 0.75, -4)
    out, work = run(kind, [inp("x", "i8", x, pt(0.5, 3))], [reg("y", "i8", want.shape,
                                                                 pt(0.75, -4))], attrs)
    np.testing.assert_array_equal(out[0], table[want % 256])
    assert work == Work(elems=want.size * 6, table=table.tobytes())


@pytest.mark.parametrize("kind", ["maxpool", "avgpool"])
def test_pool_i8_defaults_and_work_of_a_large_input(kind):
    x = np.arange(-64, 64).reshape(1, 8, 8, 2)
    want = _pool_codes_ref(x, kind, (2, 2), (0, 0, 0, 0), (1, 1))
    for attrs in ({"kernel_shape": [2, 2]}, {"kernel_shape": [2, 2], "strides": None,
                                             "pads": None}):
        out, work = run(kind, [inp("x", "i8", x)], [reg("y", "i8", want.shape)], attrs)
        np.testing.assert_array_equal(out[0], want)
        assert work == Work(elems=want.size * 4)  # 98 outputs x 4 taps > 128 input bytes
    # a 1x1 window at stride 2: fewer taps than input bytes, so the input's bytes count
    out, work = run(kind, [inp("x", "i8", x)], [reg("y", "i8", (1, 4, 4, 2))],
                    {"kernel_shape": [1, 1], "strides": [2, 2]})
    np.testing.assert_array_equal(out[0], x[:, ::2, ::2])
    assert work == Work(elems=128)


def test_pool_descriptor_without_one_is_scale_one_zero_point_zero():
    x = np.arange(-8, 8).reshape(1, 2, 4, 2)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    want = _pool_codes_ref(x, "maxpool", (2, 2), (0, 0, 0, 0), (2, 2))
    for qi, qo in ((None, pt(1.0, 0)), (pt(1.0, 0), None)):
        out, work = run("maxpool", [inp("x", "i8", x, qi)], [reg("y", "i8", (1, 1, 2, 2), qo)],
                        attrs)
        np.testing.assert_array_equal(out[0], want)
        assert work.table == b""
    # the same scale but another zero point, or the other way round: a table
    for qo, table in ((pt(1.0, 2), table_ref(lambda r: r, 1.0, 0, 1.0, 2)),
                      (pt(2.0, 0), table_ref(lambda r: r, 1.0, 0, 2.0, 0))):
        out, work = run("maxpool", [inp("x", "i8", x)], [reg("y", "i8", (1, 1, 2, 2), qo)],
                        attrs)
        np.testing.assert_array_equal(out[0], table[want % 256])
        assert work.table == table.tobytes()


def test_reduce_max_i8():
    x = np.array([[[5, -3, 9], [-128, 127, 0]], [[-7, -7, -9], [1, 2, 3]]])
    cases = [({}, x.max(keepdims=True)), ({"axes": [2]}, x.max(axis=2, keepdims=True)),
             ({"axes": [0, 2], "keepdims": False}, x.max(axis=(0, 2))),
             ({"axes": None, "keepdims": None}, x.max(keepdims=True)),
             ({"axes": [-1], "keepdims": True}, x.max(axis=-1, keepdims=True))]
    for attrs, want in cases:
        out, work = run("reduce_max", [inp("x", "i8", x, pt(0.5, 1))],
                        [reg("y", "i8", want.shape, pt(0.5, 1))], attrs)
        np.testing.assert_array_equal(out[0], want, err_msg=str(attrs))
        assert work == Work(elems=12)
    table = table_ref(lambda r: r, 0.5, 1, 0.25, 0)
    out, work = run("reduce_max", [inp("x", "i8", x, pt(0.5, 1))],
                    [reg("y", "i8", (2, 2), pt(0.25, 0))], {"axes": [2], "keepdims": False})
    np.testing.assert_array_equal(out[0], table[x.max(axis=2) % 256])
    assert work == Work(elems=12, table=table.tobytes())
    msg = raises(OpError, "reduce_max", [inp("x", "i8", x)], [reg("out", "i8", (2, 2))])
    assert msg == "reduce_max: result has shape [1, 1, 1], output out has [2, 2]"


def test_argmax_i8_path_and_its_work():
    """The first largest code; work is the CSTL's bytes: the i32 output's 4 per index."""
    x = np.array([[3, 9, 9, -2], [-128, -128, -5, -6], [0, 1, 2, 127]])
    for attrs, want in (({"axis": 1}, [[1], [2], [3]]), ({"axis": 1, "keepdims": False},
                                                          [1, 2, 3]),
                        ({"axis": -1, "keepdims": None}, [[1], [2], [3]])):
        out, work = run("argmax", [inp("x", "i8", x, pt(0.5, 7))],
                        [reg("y", "i32", np.shape(want))], attrs)
        assert out[0].tolist() == want and out[0].dtype == np.int32
        assert work == Work(elems=12)  # max(12 input bytes, 3 x 4 output bytes)
    for attrs in ({}, {"axis": None}):
        out, work = run("argmax", [inp("x", "i8", x)], [reg("y", "i32", (1, 4))], attrs)
        assert out[0].tolist() == [[0, 0, 0, 2]]
        assert work == Work(elems=16)  # 4 indices x 4 bytes
    # into i8 (no descriptor): the index as a code
    out, work = run("argmax", [inp("x", "i8", x)], [reg("y", "i8", (3,))],
                    {"axis": 1, "keepdims": False})
    assert out[0].tolist() == [1, 2, 3] and out[0].dtype == np.int8 and work.elems == 12


def test_argmax_off_the_i8_path():
    x = np.array([[3, 9, 9, -2], [-128, -128, -5, -6]])
    # a descriptor on the output: the real path requantises the index (2 / 0.5 = 4)
    out, work = run("argmax", [inp("x", "i8", x)], [reg("y", "i32", (2, 1), pt(0.5, 0))],
                    {"axis": 1})
    assert out[0].tolist() == [[2], [4]] and work == Work(elems=8)
    # per channel input: the argmax of the dequantised values [3, 0.9, 0.9, -2] and
    # [-128, -12.8, -0.5, -6], not of the codes
    out, work = run("argmax", [inp("x", "i8", x, pc(1, [1.0, 0.1, 0.1, 1.0], [0] * 4))],
                    [reg("y", "i32", (2, 1))], {"axis": 1})
    assert out[0].tolist() == [[0], [2]] and work == Work(elems=8)
    # a float output, an i16 input: the real path (elements, not bytes)
    for x_in, y in ((inp("x", "i8", x), reg("y", "f32", (2, 1))),
                    (inp("x", "i16", x), reg("y", "i32", (2, 1)))):
        out, work = run("argmax", [x_in], [y], {"axis": 1})
        assert out[0].tolist() == [[1], [2]] and work == Work(elems=8)
    # a per-tensor input descriptor stays on the i8 path (bytes: 2 indices x 4 = 8, input 8)
    out, work = run("argmax", [inp("x", "i8", x[:, :2], pt(2.0, 1))], [reg("y", "i32", (2, 1))],
                    {"axis": 1})
    assert out[0].tolist() == [[1], [0]] and work == Work(elems=8)


# --- Work records and operand-type dispatch ---------------------------------------------------


def test_work_defaults_are_no_work():
    """A compute task reports only what it did: every other field is zero / empty."""
    w = Work()
    assert (w.macs, w.elems, w.rows, w.table, w.entry) == (0, 0, 0, b"", False)
    one = np.ones((1, 2), int)
    _, work = run("gemm", [inp("a", "i8", one), inp("b", "i8", one.T)], [reg("y", "i32", (1, 1))])
    assert (work.macs, work.elems, work.rows, work.table, work.entry) == (2, 0, 0, b"", False)
    _, work = run("relu", [inp("x", "f32", np.ones(3))], [reg("y", "f32", (3,))])
    assert (work.macs, work.elems, work.rows, work.table, work.entry) == (0, 3, 0, b"", False)


def test_nmu_bias_type_decides_nothing_but_must_be_i32_on_the_integer_path():
    """The operand types of X and W alone choose the path: an integer gemm / conv2d with a
    float bias is refused, a float one with an integer bias dequantises it."""
    a, b = np.ones((1, 2), int), np.ones((2, 3), int)
    msg = raises(NotSupported, "gemm", [inp("a", "i8", a), inp("b", "i8", b),
                                        inp("c", "f32", np.zeros(3))], [reg("y", "f32", (1, 3))])
    assert msg == "gemm: an integer gemm's bias must be i32"
    x, w = np.ones((1, 1, 1, 2), int), np.ones((1, 1, 2, 3), int)
    msg = raises(NotSupported, "conv2d", [inp("x", "i8", x), inp("w", "i8", w),
                                          inp("c", "f32", np.zeros(3))],
                 [reg("y", "f32", (1, 1, 1, 3))])
    assert msg == "conv2d: an integer conv2d's bias must be i32"
    # float W, integer X and bias: the real path (2 * 0.5 * 1 + 0.25 * (4 - 2) = 1.5)
    out, work = run("conv2d", [inp("x", "i8", x, pt(0.5, 0)), inp("w", "f32", w.astype(float)),
                               inp("c", "i32", np.array([4, 4, 4]), pt(0.25, 2))],
                    [reg("y", "f32", (1, 1, 1, 3))])
    assert out[0].reshape(-1).tolist() == [1.5, 1.5, 1.5]
    assert work == Work(macs=3 * 2)
    out, _ = run("conv2d", [inp("x", "f32", x.astype(float)), inp("w", "i8", w, pt(0.5, 1))],
                 [reg("y", "f32", (1, 1, 1, 3))])
    assert out[0].reshape(-1).tolist() == [0.0, 0.0, 0.0]  # 0.5 * (1 - 1) = 0
    out, _ = run("gemm", [inp("a", "f32", a.astype(float)), inp("b", "i8", b, pt(0.25, -1))],
                 [reg("y", "f32", (1, 3))])
    assert out[0].tolist() == [[1.0, 1.0, 1.0]]  # 2 * 0.25 * (1 + 1), B dequantised


# --- one rounding: the real path evaluates in float64 -----------------------------------------

#: f32 values whose float64 sum 1 + 2**-11 + 2**-30 lies just above the f16 tie between 1 and
#: 1 + 2**-10 (so it rounds up), while a float32 sum drops the 2**-30 and lands on the tie
#: (which rounds to even, 1).
TIE_A, TIE_B = 1.0, 2.0**-11 + 2.0**-30
ABOVE_TIE = 1.0 + 2.0**-10


def test_float_ops_round_once_from_float64():
    out, _ = run("add", [inp("a", "f32", [TIE_A]), inp("b", "f32", [TIE_B])],
                 [reg("y", "f16", (1,))])
    assert out[0].dtype == np.float16 and out[0].tolist() == [ABOVE_TIE]
    out, _ = run("gemm", [inp("a", "f32", [[TIE_A, TIE_B]]), inp("b", "f32", [[1.0], [1.0]])],
                 [reg("y", "f16", (1, 1))])
    assert out[0].tolist() == [[ABOVE_TIE]]
    out, _ = run("gemm", [inp("a", "f32", [[TIE_A]]), inp("b", "f32", [[1.0]]),
                          inp("c", "f32", [TIE_B])], [reg("y", "f16", (1, 1))])
    assert out[0].tolist() == [[ABOVE_TIE]]
    y1 = reg("y", "f16", (1, 1, 1, 1))
    out, _ = run("conv2d", [inp("x", "f32", [[[[TIE_A, TIE_B]]]]),
                            inp("w", "f32", np.ones((1, 1, 2, 1)))], [y1])
    assert out[0].reshape(-1).tolist() == [ABOVE_TIE]
    out, _ = run("conv2d", [inp("x", "f32", [[[[TIE_A]]]]), inp("w", "f32", np.ones((1, 1, 1, 1))),
                            inp("b", "f32", [TIE_B])], [y1])
    assert out[0].reshape(-1).tolist() == [ABOVE_TIE]
    out, _ = run("reduce_sum", [inp("x", "f32", [TIE_A, TIE_B])], [reg("y", "f16", (1,))])
    assert out[0].tolist() == [ABOVE_TIE]
    out, _ = run("layernorm", [inp("x", "f32", [[-1.0, 1.0]]), inp("g", "f32", [1.0, 1.0]),
                               inp("b", "f32", [TIE_A, TIE_B])], [reg("y", "f16", (1, 2))],
                 {"epsilon": 0.0})
    assert out[0].tolist() == [[0.0, ABOVE_TIE]]  # (1 - 0) / 1 * 1 + TIE_B, then 1 + ...


def test_int4_per_group_into_i16():
    """The group path's output type is the output region's: i16 codes beyond i8."""
    a = np.array([[100, -100]])
    w = np.array([[7], [-8]])
    # one group of two, z = 0, M = 1 * 1 / 0.25 = 4: y = 4 * (700 + 800) = 6000
    out, _ = run("gemm", [inp("a", "i8", a, pt(1.0, 0)), inp("w", "i4", w, pg(0, 2, [1.0], [0]))],
                 [reg("y", "i16", (1, 1), pt(0.25, 0))])
    assert out[0].tolist() == [[6000]] and out[0].dtype == np.int16


def test_folded_bias_overflow_names_the_opcode():
    # bias - z_x * sum(w) = 2**31 - 1 - (-1) * 1 leaves int32
    msg = raises(OpError, "gemm", [inp("a", "i8", [[0]], pt(1.0, -1)), inp("b", "i8", [[1]]),
                                   inp("c", "i32", [2**31 - 1])], [reg("y", "i32", (1, 1))])
    assert msg == "gemm: folded bias does not fit in int32"


@pytest.mark.parametrize("opcode", ["layernorm", "rmsnorm", "softmax", "log_softmax"])
def test_norms_of_a_rank_3_input_default_to_the_last_axis(opcode):
    rng = np.random.default_rng(16)
    x = f32(rng.standard_normal((2, 3, 4)))
    t = torch.tensor(x)
    want = {"layernorm": lambda: F.layer_norm(t, (4,)),
            "rmsnorm": lambda: F.rms_norm(t, (4,), eps=1e-5),
            "softmax": lambda: torch.softmax(t, -1),
            "log_softmax": lambda: torch.log_softmax(t, -1)}[opcode]().numpy()
    out, _ = run(opcode, [inp("x", "f32", x)], [reg("y", "f32", x.shape)])
    np.testing.assert_allclose(out[0], want.astype(np.float32), rtol=2e-6, atol=2e-6)


def test_work_counts_are_integers():
    """Work holds whole numbers of MACs, elements and bytes (the cycle model divides them)."""
    cases = [
        run("cast", [inp("x", "i8", [1, 2, 3])], [reg("y", "i32", (3,))]),
        run("relu", [inp("x", "i8", [1, -2, 3])], [reg("y", "i8", (3,))]),
        run("maxpool", [inp("x", "i8", np.zeros((1, 2, 2, 1)))], [reg("y", "i8", (1, 1, 1, 1))],
            {"kernel_shape": [2, 2]}),
        run("argmax", [inp("x", "i8", [[1, 2, 3]])], [reg("y", "i32", (1, 1))], {"axis": 1}),
        run("relu", [inp("x", "f32", [1.0, 2.0])], [reg("y", "f32", (2,))]),
        run("gemm", [inp("a", "f32", [[1.0]]), inp("b", "f32", [[1.0]])],
            [reg("y", "f32", (1, 1))]),
    ]
    for _, work in cases:
        assert type(work.elems) is int and type(work.macs) is int, work
    assert [w.elems for _, w in cases] == [12, 3, 4, 4, 2, 0]


def test_float_conv2d_into_a_quantised_integer_output():
    # 1 * 1 + 2 * 1 = 3 (+ 0.5 bias) -> rne(3.5 / 0.5) + 3 = 10, rne(3 / 0.5) + 3 = 9
    x, w = inp("x", "f32", [[[[1.0, 2.0]]]]), inp("w", "f32", np.ones((1, 1, 2, 1)))
    out, _ = run("conv2d", [x, w], [reg("y", "i8", (1, 1, 1, 1), pt(0.5, 3))])
    assert out[0].reshape(-1).tolist() == [9]
    out, _ = run("conv2d", [x, w, inp("b", "f32", [0.5])], [reg("y", "i8", (1, 1, 1, 1),
                                                                pt(0.5, 3))])
    assert out[0].reshape(-1).tolist() == [10]


def test_conv2d_int4_per_group_accumulator_overflow_names_the_opcode():
    one = np.ones((1, 1, 1, 1), int)
    msg = raises(OpError, "conv2d", [inp("x", "i8", one, pt(1.0, 0)),
                                     inp("w", "i4", one, pg(2, 1, [1.0], [0])),
                                     inp("b", "i32", [2**31 - 1])],
                 [reg("y", "i8", (1, 1, 1, 1), pt(1.0, 0))])
    assert msg == "conv2d: int32 accumulator overflow"


@pytest.mark.parametrize("axis", [0, 1])
def test_conv2d_int4_per_group_along_the_kernel_height_or_width(axis):
    """H and W of HWIO are reduction axes too: groups of kernel rows (or columns)."""
    rng = np.random.default_rng(17 + axis)
    x = rng.integers(-128, 128, (1, 5, 5, 2))
    w = rng.integers(-8, 8, (3, 3, 2, 2))
    scales, zps = [0.04, 0.02], [-1, 3]  # groups [0, 2) and [2, 3) along the axis
    sx, zx, sy, zy = 0.1, 4, 0.5, 2
    parts = []
    for g, zg in enumerate(zps):
        part = np.zeros_like(w)
        sel = [slice(None)] * 4
        sel[axis] = slice(2 * g, 2 * g + 2)
        part[tuple(sel)] = w[tuple(sel)] - zg
        parts.append(part)
    accs = [np.rint(_torch_conv(x - zx, p, (1, 1, 1, 1), (1, 1), (1, 1), 1)).astype(np.int64)
            for p in parts]
    want = _group_ref(accs, None, sx, scales, sy, zy)
    out, _ = run("conv2d", [inp("x", "i8", x, pt(sx, zx)),
                            inp("w", "i4", w, pg(axis, 2, scales, zps))],
                 [reg("y", "i8", accs[0].shape, pt(sy, zy))], {"pads": [1, 1, 1, 1]})
    np.testing.assert_array_equal(out[0], want)


def test_descriptors_naming_constants():
    """Scales, zero points, the axis and the group size may name program constants."""
    q = np.array([[-3, 0, 5, 9], [127, -128, 1, 2]])
    quant = Quant("per_group", axis=Name("AX"), group_size=Name("G"),
                  scales=(Name("S"), num(0.5)), zero_points=(Name("Z"), num(1)))
    out, _ = run("dequantize", [inp("q", "i8", q, quant)], [reg("y", "f32", (2, 4))],
                 consts={"AX": 1, "G": 2, "S": 2, "Z": -1})
    s = np.array([2.0, 2.0, 0.5, 0.5])
    z = np.array([-1.0, -1.0, 1.0, 1.0])
    np.testing.assert_array_equal(out[0], s * (q - z))


def test_gather_with_a_float_index_tensor_holding_whole_numbers():
    """The checker accepts an f16 / f32 index tensor (view<f16> on a device listing it):
    its whole-number values index like integers, negatives from the end."""
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    out, _ = run("gather", [inp("x", "f32", x), inp("i", "f32", [2.0, -1.0, 0.0])],
                 [reg("y", "f32", (3, 4))], {"axis": 0})
    np.testing.assert_array_equal(out[0], x[[2, -1, 0]])
    msg = raises(OpError, "gather", [inp("x", "f32", x), inp("i", "f32", [3.0])],
                 [reg("y", "f32", (1, 4))], {"axis": 0})
    assert msg == "gather: index outside [-3, 3) on axis 0"
