"""Every opcode of the executor against an independent numpy reference.

Each case is one small NEM program: a test device, one L1 buffer per operand, typed regions
(quant descriptors on integer data) at a non-zero offset, one compute task. It must pass the
checker without errors; it then runs in :func:`nem.executor.execute`. Inputs are written as
raw little-endian bytes (i4 packed here, two nibbles per byte, LSB first), output buffers
start filled with 0xA5 so that an element the executor forgets to write shows, and outputs
are read back from the buffer bytes.

Every case also binds (``nem.binder``) and runs the task binary through the executor's binary
front-end, which must leave the same bytes in every buffer as the NEM text.

The references never call the executor's kernels (``nem.ops``) or the numerics kernels:

* int8 NMU path (gemm, matmul, conv2d with i8 / i4 weights): the accumulator is the
  definition ``sum (x - z_x) * w + bias`` in exact integers (direct loops for the
  convolution; a padded tap contributes nothing), then the requantisation of
  ``docs/numerics.md`` written out with Python integers (``m``, ``t`` from ``math.frexp``;
  ``nem.numerics.requant_params``, which the binder shares, is only checked to agree).
* real-valued path: dequantise to float64 (``s * (q - z)``), evaluate the documented formula
  in float64, round once: ``rint`` (half to even) plus saturation for integer outputs,
  numpy's correctly rounded float64 -> f16 / f32 cast, an integer-arithmetic
  round-to-nearest-even for bf16.

Comparisons are exact (``assert_array_equal``) unless a test says why not: results of libm
functions (exp, log, tanh, erf, pow, sqrt inside a normalisation) and float sums whose
order the contract leaves open may differ by one ulp of the output type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from nem.binder import bind, plan_from_binary
from nem.checker import check_text
from nem.executor import ExecError, execute
from nem.numerics import requant_params
from nem.taskformat import decode, encode

PROGRAMS = Path(__file__).parent / "programs"
DEVICE = "exec_device.nem"
#: exec_device plus a VPU and the MAY variants used here (i4 weights, bf16, f32).
OPS_DEVICE = "ops_device.nem"

DTYPE = {
    "i4": np.dtype(np.int8),
    "i8": np.dtype(np.int8),
    "i16": np.dtype("<i2"),
    "i32": np.dtype("<i4"),
    "f16": np.dtype("<f2"),
    "f32": np.dtype("<f4"),
    "bf16": np.dtype(ml_dtypes.bfloat16),
}
BITS = {"i4": 4, "i8": 8, "i16": 16, "i32": 32, "f16": 16, "f32": 32, "bf16": 16}
RANGE = {"i4": (-8, 7), "i8": (-128, 127), "i16": (-32768, 32767), "i32": (-(2**31), 2**31 - 1)}
LAYOUT = {1: "C", 2: "MN", 3: "BMN", 4: "NHWC", 5: "ABCDE"}
OFFSET = 8  # every region starts this many bytes into its buffer


# --- programs --------------------------------------------------------------------------------


def num(v: float) -> str:
    """A NEM FLOAT literal that reads back as exactly ``v``."""
    return np.format_float_positional(float(v), trim="0")


@dataclass(frozen=True)
class Q:
    """A quantization descriptor: its NEM text and its own expansion (written here)."""

    scales: tuple[float, ...]
    zps: tuple[int, ...]
    axis: int | None = None
    group: int | None = None

    def text(self) -> str:
        s = ", ".join(num(v) for v in self.scales)
        z = ", ".join(str(v) for v in self.zps)
        if self.axis is None:
            return f"per_tensor(scale={s}, zero_point={z})"
        if self.group is None:
            return f"per_channel(axis={self.axis}, scales=[{s}], zero_points=[{z}])"
        return (
            f"per_group(axis={self.axis}, group_size={self.group}, scales=[{s}], "
            f"zero_points=[{z}])"
        )

    def expand(self, shape):
        """(scale, zero point) arrays broadcasting against ``shape``."""
        s, z = np.array(self.scales), np.array(self.zps, dtype=np.float64)
        if self.axis is None:
            return s[0], z[0]
        idx = np.arange(shape[self.axis]) // (self.group or 1)
        bshape = [1] * len(shape)
        bshape[self.axis] = shape[self.axis]
        return s[idx].reshape(bshape), z[idx].reshape(bshape)


def tensor_q(scale: float, zp: int) -> Q:
    return Q((scale,), (zp,))


@dataclass
class Opnd:
    """A typed operand: element type, shape, input values (codes or floats), quant."""

    elem: str
    shape: tuple[int, ...]
    values: np.ndarray | None = None
    quant: Q | None = None
    layout: str | None = None

    @property
    def nbytes(self) -> int:
        return math.ceil(math.prod(self.shape) * BITS[self.elem] / 8)


def pack_i4(values: np.ndarray) -> np.ndarray:
    """Two's complement nibbles, element e in byte e // 2, low nibble for even e."""
    flat = [int(v) for v in np.asarray(values).reshape(-1)]
    assert all(-8 <= v <= 7 for v in flat)
    out = np.zeros((len(flat) + 1) // 2, dtype=np.uint8)
    for e, v in enumerate(flat):
        out[e // 2] |= (v & 0xF) << (4 * (e % 2))
    return out


def to_bytes(op: Opnd) -> np.ndarray:
    if op.elem == "i4":
        data = pack_i4(op.values)
    else:
        vals = np.asarray(op.values)
        assert vals.shape == tuple(op.shape)
        if op.elem in RANGE:
            lo, hi = RANGE[op.elem]
            assert vals.min() >= lo and vals.max() <= hi
        data = np.frombuffer(vals.astype(DTYPE[op.elem]).tobytes(), dtype=np.uint8)
    return np.concatenate([np.full(OFFSET, 0x5A, np.uint8), data])


def program(opcode, ins, outs, attrs="", device=DEVICE) -> str:
    names = [f"x{k}" for k in range(len(ins))] + [f"y{k}" for k in range(len(outs))]
    lines = [f'device "{device}"']
    for name, op in zip(names, ins + outs, strict=True):
        lines.append(f"buffer {name.upper()} : L1 (size={OFFSET + op.nbytes + 8})")
    for name, op in zip(names, ins + outs, strict=True):
        layout = op.layout or LAYOUT[len(op.shape)]
        quant = f", quant={op.quant.text()}" if op.quant is not None else ""
        lines.append(
            f"let {name} = region({name.upper()}, {OFFSET}, {op.nbytes}) elem={op.elem}, "
            f"shape=[{', '.join(str(int(d)) for d in op.shape)}], layout={layout}{quant}"
        )
    lines.append(
        f"t = {opcode}.async in {', '.join(names[: len(ins)])} "
        f"out {', '.join(names[len(ins) :])} {attrs}"
    )
    lines.append("wait(t)")
    return "\n".join(lines) + "\n"


def check(text: str):
    result = check_text(text, file="case.nem", base_dir=str(PROGRAMS))
    errors = [str(d) for d in result.diagnostics if d.severity == "error"]
    assert not errors, "\n".join(errors) + "\n" + text
    return result


def run_op(opcode, ins, outs, attrs="", device=DEVICE) -> list[np.ndarray]:
    """Check and execute a one-task program; return the output values (from the bytes)."""
    text = program(opcode, ins, outs, attrs, device)
    result = check(text)
    initial = {f"X{k}": to_bytes(op) for k, op in enumerate(ins)}
    for k, op in enumerate(outs):
        initial[f"Y{k}"] = np.full(OFFSET + op.nbytes + 8, 0xA5, np.uint8)
    run = execute(result.plan, result.device, initial)
    # the bound task binary, run through the executor's binary front-end, leaves the same bytes
    binary = decode(encode(bind(result)))
    again = execute(plan_from_binary(binary, result.device), result.device, initial, in_order=True)
    for name in result.plan.buffers:
        np.testing.assert_array_equal(again.memory.buffer(name), run.memory.buffer(name), name)
    got = []
    for k, op in enumerate(outs):
        raw = run.memory.buffer(f"Y{k}")
        assert (raw[:OFFSET] == 0xA5).all() and (raw[OFFSET + op.nbytes :] == 0xA5).all(), (
            "bytes outside the output region changed"
        )
        data = raw[OFFSET : OFFSET + op.nbytes].copy()
        got.append(data.view(DTYPE[op.elem]).reshape(op.shape))
    return got


# --- reference helpers -------------------------------------------------------------------------


def dequant(codes, q: Q | None) -> np.ndarray:
    """Step 1 of the real-valued path: ``s * (q - z)`` in float64 (no descriptor: s=1, z=0)."""
    codes = np.asarray(codes, dtype=np.float64)
    if q is None:
        return codes
    s, z = q.expand(codes.shape)
    return s * (codes - z)


def quant_ref(real, elem: str, q: Q | None) -> np.ndarray:
    """Step 3 for integers: ``clamp(rint(real / s) + z)``, NaN -> z, +-inf saturate."""
    real = np.asarray(real, dtype=np.float64)
    s, z = q.expand(real.shape) if q is not None else (1.0, 0.0)
    with np.errstate(all="ignore"):
        scaled = real / s
    lo, hi = RANGE[elem]
    out = np.where(np.isnan(scaled), 0.0, np.clip(scaled, -1e300, 1e300))
    out = np.clip(np.rint(out) + z, lo, hi)
    return out.astype(DTYPE[elem])


def round_bf16(real) -> np.ndarray:
    """float64 -> bf16, one round to nearest even, in integer arithmetic (normal range)."""
    out = []
    for v in np.asarray(real, dtype=np.float64).reshape(-1):
        v = float(v)
        if v == 0 or not math.isfinite(v):
            out.append(v)
            continue
        frac, e = math.frexp(v)  # v = frac * 2**e, 0.5 <= |frac| < 1
        assert e - 1 >= -126, "subnormal bf16 results are not covered here"
        out.append(math.ldexp(round(frac * 256), e - 8))  # round(): half to even, exact
    return np.array(out).reshape(np.shape(real)).astype(ml_dtypes.bfloat16)


def to_float(real, elem: str) -> np.ndarray:
    """Step 3 for floats: one rounding of the float64 value."""
    if elem == "bf16":
        return round_bf16(real)
    with np.errstate(over="ignore"):  # beyond the largest finite value: +-inf
        return np.asarray(real, dtype=np.float64).astype(DTYPE[elem])


def result_ref(real, op: Opnd) -> np.ndarray:
    if op.elem in ("f16", "f32", "bf16"):
        return to_float(real, op.elem)
    return quant_ref(real, op.elem, op.quant)


def real_of(op: Opnd) -> np.ndarray:
    if op.elem in ("f16", "f32", "bf16"):
        return np.asarray(op.values, dtype=np.float64)
    return dequant(op.values, op.quant)


def ulps(got, want) -> np.ndarray:
    """Distance in units in the last place of two float arrays of the same type."""
    bits = {2: np.uint16, 4: np.uint32}[np.dtype(got.dtype).itemsize]
    top = 1 << (8 * np.dtype(got.dtype).itemsize - 1)

    def key(v):
        b = np.ascontiguousarray(v).view(bits).astype(np.int64)
        return np.where(b & top, -(b & (top - 1)), b)

    return np.abs(key(got) - key(want))


def assert_close_ulps(got, want, max_ulps: int):
    """Non-finite values exactly; finite ones within ``max_ulps``, most of them exact."""
    got, want = np.asarray(got), np.asarray(want, dtype=got.dtype)
    assert got.shape == want.shape
    fin = np.isfinite(want.astype(np.float64))
    assert_same(got[~fin], want[~fin])
    d = ulps(got[fin], want[fin])
    assert d.max(initial=0) <= max_ulps, (got[fin][d > max_ulps], want[fin][d > max_ulps])
    # A one-ulp difference needs the exact value within a float64 ulp or so of a rounding
    # boundary of the output type: rare. Many of them would mean a different formula.
    assert (d > 0).sum() <= max(1, d.size // 50), f"{(d > 0).sum()} of {d.size} inexact"


def assert_same(got, want, **kw):
    """assert_array_equal, with bf16 compared as (exactly widened) f32 so NaN == NaN."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype == DTYPE["bf16"]:
        assert want.dtype == got.dtype
        got, want = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(got, want, **kw)


def scale(rng, lo: float, hi: float) -> float:
    """A random scale with 4 significant digits (an exact round trip through NEM text)."""
    return float(f"{rng.uniform(lo, hi):.4g}")


def codes(rng, shape, elem="i8") -> np.ndarray:
    lo, hi = RANGE[elem]
    return rng.integers(lo, hi + 1, size=shape).astype(np.int64)


def grid_f16(rng, shape, lim=2047, den=256) -> np.ndarray:
    """f16 values k / den with |k| <= lim < 2048: 11 significant bits, exact in f16.

    Products and sums of a few hundred of them are exact in float64 in any order, so a
    float reference of a gemm / conv on them is exact; they need up to ~30 bits, more than
    f32 holds, so accumulation in f32 would show.
    """
    return (rng.integers(-lim, lim + 1, size=shape) / den).astype(np.float16)


def f16_values(rng, shape, spread=2.0) -> np.ndarray:
    return (rng.standard_normal(shape) * spread).astype(np.float16)


# --- int8 NMU references ----------------------------------------------------------------------


def requant_ref(acc, x_scale, w_scales, y_scale, y_zp, elem="i8") -> np.ndarray:
    """docs/numerics.md, with Python integers: int32 accumulators (channels last) -> codes.

    M = s_x * s_w[n] / s_y = frac * 2**e; m = floor(frac * 2**31 + 1/2) (a carry to 2**31
    halves m and bumps e), t = 31 - e; r = (a * m + 2**(t-1)) >> t; y = clamp(r + z_y).
    """
    lo, hi = RANGE[elem]
    acc = np.asarray(acc, dtype=np.int64)
    out = np.empty(acc.shape, dtype=np.int64)
    ms, ts = [], []
    for n, ws in enumerate(w_scales):
        frac, e = math.frexp(float(x_scale) * float(ws) / float(y_scale))
        m = math.floor(Fraction(frac) * 2**31 + Fraction(1, 2))
        if m == 2**31:
            m, e = m // 2, e + 1
        t = 31 - e
        assert 2**30 <= m < 2**31 and 1 <= t <= 62
        ms.append(m)
        ts.append(t)
        for idx in np.ndindex(acc.shape[:-1]):
            a = int(acc[(*idx, n)])
            assert -(2**31) <= a < 2**31, "test data leaves int32"
            r = (a * m + (1 << (t - 1))) >> t  # Python >>: floor, i.e. arithmetic shift
            out[(*idx, n)] = min(max(r + y_zp, lo), hi)
    shared = requant_params(x_scale, list(w_scales), y_scale, y_zp, out_dtype=elem)
    assert [int(v) for v in shared.multiplier] == ms and [int(v) for v in shared.shift] == ts
    return out.astype(DTYPE[elem])


def matmul_ref(a, b) -> np.ndarray:
    """Batched A[..., M, K] @ B[..., K, N] (numpy broadcasting of batch dims), by loops
    over the output with exact Python sums for integers and math.fsum for floats."""
    a, b = np.asarray(a), np.asarray(b)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    a = np.broadcast_to(a, (*batch, m, k))
    b = np.broadcast_to(b, (*batch, k, n))
    ints = a.dtype.kind in "iu"
    out = np.zeros((*batch, m, n), dtype=np.int64 if ints else np.float64)
    for idx in np.ndindex(*batch, m, n):
        *bi, i, j = idx
        terms = [a[(*bi, i, kk)] * b[(*bi, kk, j)] for kk in range(k)]
        out[idx] = sum(int(t) for t in terms) if ints else math.fsum(terms)
    return out


def conv_ref(x, w, pads, strides, dils, groups) -> np.ndarray:
    """NHWC x HWIO convolution by direct loops; taps in the padding contribute nothing.

    ``x`` holds centred integers (q - z_x) or float64 values; pads are [top, left, bottom,
    right]. Integer sums are exact; float sums use math.fsum (exact value, one rounding).
    """
    n, h, wd, c = x.shape
    kh, kw, cg, f = w.shape
    top, left, bottom, right = pads
    oh = (h + top + bottom - dils[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd + left + right - dils[1] * (kw - 1) - 1) // strides[1] + 1
    assert c == cg * groups and f % groups == 0 and oh >= 1 and ow >= 1
    fg = f // groups
    ints = x.dtype.kind in "iu"
    out = np.zeros((n, oh, ow, f), dtype=np.int64 if ints else np.float64)
    for b_ in range(n):
        for i in range(oh):
            for j in range(ow):
                for o in range(f):
                    g = o // fg
                    terms = []
                    for a in range(kh):
                        hi = i * strides[0] - top + a * dils[0]
                        if not 0 <= hi < h:
                            continue
                        for bb in range(kw):
                            wi = j * strides[1] - left + bb * dils[1]
                            if not 0 <= wi < wd:
                                continue
                            for ci in range(cg):
                                terms.append(x[b_, hi, wi, g * cg + ci] * w[a, bb, ci, o])
                    if ints:
                        out[b_, i, j, o] = sum(int(t) for t in terms)
                    else:
                        out[b_, i, j, o] = math.fsum(float(t) for t in terms)
    return out


def typical_out_scale(rng, x_scale, w_scale, k, spread):
    """An output scale putting a typical accumulator near ``spread`` codes (some saturate)."""
    typical = x_scale * w_scale * math.sqrt(k) * 74 * 74
    return float(f"{typical / spread * rng.uniform(0.5, 2.0):.4g}")


# --- gemm / matmul: int8 and int4 ---------------------------------------------------------------


def _int_gemm_case(rng, opcode, wq, bias, out_elem, w_elem="i8", batch=None):
    """Build operands of an integer gemm/matmul; return (ins, out, reference)."""
    m, k, n = (int(v) for v in rng.integers(1, 9, size=3))
    a_shape, b_shape = (m, k), (k, n)
    if batch is not None:
        a_batch, b_batch = batch
        a_shape, b_shape = (*a_batch, m, k), (*b_batch, k, n)
    xs, zx = scale(rng, 0.005, 0.05), int(rng.integers(-40, 41))
    a = codes(rng, a_shape)
    b = codes(rng, b_shape, w_elem)
    if wq == "tensor":
        w_scales = [scale(rng, 0.002, 0.02)] * n
        wquant = tensor_q(w_scales[0], 0)
    else:
        w_scales = [scale(rng, 0.002, 0.02) for _ in range(n)]
        wquant = Q(tuple(w_scales), (0,) * n, axis=len(b_shape) - 1)
    spread = 40 if out_elem == "i8" else 6000
    wmag = 74 if w_elem == "i8" else 4.6
    ys = typical_out_scale(rng, xs, np.mean(w_scales) * wmag / 74, k, spread)
    zy = int(rng.integers(-30, 31))
    ins = [
        Opnd("i8", a_shape, a, tensor_q(xs, zx), "MK" if batch is None else None),
        Opnd(w_elem, b_shape, b, wquant, "KN" if batch is None else None),
    ]
    acc = matmul_ref(a - zx, b)  # sum_k (x - z_x) * w, exact
    if bias:
        c_shape = (n,) if rng.random() < 0.5 else (m, n)
        bmax = int(math.sqrt(k) * 74 * wmag)  # about a typical accumulator
        c = rng.integers(-bmax, bmax + 1, size=c_shape)
        ins.append(Opnd("i32", c_shape, c))
        acc = acc + c
    out = Opnd(out_elem, acc.shape, quant=tensor_q(ys, zy))
    want = requant_ref(acc, xs, w_scales, ys, zy, out_elem)
    return ins, out, want


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("wq", ["tensor", "channel"])
@pytest.mark.parametrize(
    "opcode,bias,out_elem",
    [("gemm", False, "i8"), ("gemm", True, "i8"), ("gemm", True, "i16"), ("matmul", False, "i8")],
)
def test_gemm_int8(opcode, bias, out_elem, wq, seed):
    rng = np.random.default_rng([11, seed, len(opcode), bias, len(wq), out_elem == "i16"])
    ins, out, want = _int_gemm_case(rng, opcode, wq, bias, out_elem)
    (got,) = run_op(opcode, ins, [out], "accum_type=i32")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "a_batch,b_batch", [((3,), ()), ((2,), (2,)), ((3,), (1,)), ((2, 1), (3,)), ((), (2,))]
)
@pytest.mark.parametrize("opcode,wq", [("matmul", "tensor"), ("matmul", "channel"),
                                       ("gemm", "channel")])
def test_batched_matmul_int8(opcode, wq, a_batch, b_batch):
    # With a non-zero input zero point the folded bias depends on the batch of B.
    rng = np.random.default_rng([12, *a_batch, 0, *b_batch, len(wq), len(opcode)])
    ins, out, want = _int_gemm_case(rng, opcode, wq, opcode == "gemm", "i8",
                                    batch=(a_batch, b_batch))
    (got,) = run_op(opcode, ins, [out], "accum_type=i32")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("wq", ["tensor", "channel"])
def test_gemm_int4_weights(wq, bias, seed):
    # gemm.int4 (MAY): i8 activations x i4 weights (packed nibbles) -> i8.
    rng = np.random.default_rng([13, seed, bias, len(wq)])
    ins, out, want = _int_gemm_case(rng, "gemm", wq, bias, "i8", w_elem="i4")
    (got,) = run_op("gemm", ins, [out], "accum_type=i32", device=OPS_DEVICE)
    np.testing.assert_array_equal(got, want)


def test_gemm_int8_requantisation_rounds_half_up_and_saturates():
    # M = 0.5 exactly: accumulators +-1, +-3 are ties, rounded toward +infinity by the shift
    # (2**(t-1) added, arithmetic shift); large ones saturate, and i16 does not.
    a = np.array([[1, -1, 3, -3, 5, 127, -128, 0]]).T  # (8, 1)
    b = np.array([[1, 100]])
    ins = [Opnd("i8", (8, 1), a, tensor_q(0.5, 0)), Opnd("i8", (1, 2), b, tensor_q(1.0, 0))]
    c = Opnd("i32", (2,), np.array([0, 0]))
    want = {
        "i8": [[1, 50], [0, -50], [2, 127], [-1, -128], [3, 127], [64, 127], [-64, -128],
               [0, 0]],
        "i16": [[1, 50], [0, -50], [2, 150], [-1, -150], [3, 250], [64, 6350], [-64, -6400],
                [0, 0]],
    }
    for elem in ("i8", "i16"):
        out = Opnd(elem, (8, 2), quant=tensor_q(1.0, 0))
        (got,) = run_op("gemm", [*ins, c], [out], "accum_type=i32")
        np.testing.assert_array_equal(got, want[elem], err_msg=elem)


@pytest.mark.parametrize(
    "wquant,why",
    [
        (Q((0.01,), (1,)), "zero point"),
        # per group along K is the int4 format (tests/nem_executor/test_int4_groups.py);
        # groups of output channels (axis 1) are per-channel scales and run
        (Q((0.01, 0.02), (0, 0), axis=0, group=2), "that is the int4 weight format"),
        (Q((0.01, 0.02, 0.03), (0, 0, 0), axis=0), "per tensor, per output channel"),
    ],
)
def test_gemm_int8_weight_quantisation_not_supported(wquant, why):
    k = 3
    ins = [
        Opnd("i8", (2, k), np.ones((2, k), int), tensor_q(0.1, 0)),
        Opnd("i8", (k, 4), np.ones((k, 4), int), wquant),
    ]
    out = Opnd("i8", (2, 4), quant=tensor_q(0.1, 0))
    with pytest.raises(ExecError, match="not supported") as err:
        run_op("gemm", ins, [out], "accum_type=i32")
    assert why in str(err.value)


# --- gemm / matmul: float --------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize(
    "opcode,bias,batch",
    [
        ("gemm", False, None),
        ("gemm", True, None),
        ("matmul", False, None),
        ("matmul", False, ((2,), (2,))),
        ("matmul", False, ((2, 1), (3,))),
        ("gemm", True, ((3,), ())),
    ],
)
def test_gemm_f16_exact(opcode, bias, batch, seed):
    # Grid values: the float64 reference is exact, so the one rounding to f16 is bit-exact.
    rng = np.random.default_rng([21, seed, len(opcode), bias, batch is not None])
    m, k, n = (int(v) for v in rng.integers(1, 10, size=3))
    a_b, b_b = batch or ((), ())
    a = grid_f16(rng, (*a_b, m, k))
    b = grid_f16(rng, (*b_b, k, n))
    ins = [Opnd("f16", a.shape, a), Opnd("f16", b.shape, b)]
    exact = matmul_ref(a.astype(np.float64), b.astype(np.float64))
    if bias:
        c = grid_f16(rng, (n,), lim=2047, den=16)
        ins.append(Opnd("f16", c.shape, c))
        exact = exact + c.astype(np.float64)
    out = Opnd("f16", exact.shape)
    (got,) = run_op(opcode, ins, [out], "accum_type=f32")
    np.testing.assert_array_equal(got, exact.astype(np.float16))


def test_gemm_f16_general_values_within_one_ulp():
    # Arbitrary f16 values: products are exact in float64 but a sum of them generally is
    # not, and the contract leaves the summation order open. The reference (math.fsum: the
    # exact sum, rounded once to float64) may then sit on the other side of an f16 rounding
    # boundary than the executor's float64 sum: allow 1 ulp.
    rng = np.random.default_rng(22)
    a = f16_values(rng, (7, 33), spread=3.0)
    b = f16_values(rng, (33, 5), spread=0.5)
    c = f16_values(rng, (5,))
    exact = matmul_ref(a.astype(np.float64), b.astype(np.float64)) + c.astype(np.float64)
    ins = [Opnd("f16", a.shape, a), Opnd("f16", b.shape, b), Opnd("f16", c.shape, c)]
    (got,) = run_op("gemm", ins, [Opnd("f16", (7, 5))], "accum_type=f32")
    assert_close_ulps(got, exact.astype(np.float16), 1)


def test_gemm_f16_rounds_once():
    # 1024 + 0.5 + 2**-24 is just above the tie between f16 1024 and 1025: one rounding
    # gives 1025. Summing in f32 first would lose 2**-24 and round the tie to even (1024).
    a = np.array([[1024.0, 0.5, 2.0**-12], [-1024.0, -0.5, -(2.0**-12)]], np.float16)
    b = np.array([[1.0], [1.0], [2.0**-12]], np.float16)
    (got,) = run_op("matmul", [Opnd("f16", (2, 3), a), Opnd("f16", (3, 1), b)],
                    [Opnd("f16", (2, 1))], "accum_type=f32")
    np.testing.assert_array_equal(got, np.array([[1025.0], [-1025.0]], np.float16))


def test_gemm_bf16_rounds_once():
    # bf16 keeps 8 significant bits: 1 + 2**-8 is the tie between 1 and 1 + 2**-7.
    # 1 + 2**-8 + 2**-40 must round up; float64 -> f32 -> bf16 would round to 1.
    a = np.array([[1.0, 2.0**-8, 2.0**-20], [1.0, 2.0**-8, 0.0]]).astype(ml_dtypes.bfloat16)
    b = np.array([[1.0], [1.0], [2.0**-20]]).astype(ml_dtypes.bfloat16)
    (got,) = run_op("gemm", [Opnd("bf16", (2, 3), a), Opnd("bf16", (3, 1), b)],
                    [Opnd("bf16", (2, 1))], "accum_type=f32", device=OPS_DEVICE)
    np.testing.assert_array_equal(got.astype(np.float64), [[1 + 2.0**-7], [1.0]])


@pytest.mark.parametrize("elem", ["bf16", "f32"])
def test_gemm_bf16_f32_random(elem):
    rng = np.random.default_rng([23, len(elem)])
    m, k, n = 5, 11, 6
    if elem == "bf16":
        # k / 32 with |k| < 256: 8 significant bits, exact in bf16.
        a = (rng.integers(-255, 256, (m, k)) / 32).astype(ml_dtypes.bfloat16)
        b = (rng.integers(-255, 256, (k, n)) / 32).astype(ml_dtypes.bfloat16)
    else:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
    # bf16 grid products and sums are exact in float64; for f32 the reference is the exact
    # sum rounded once to float64 (math.fsum) and f32 keeps 29 bits fewer: equal unless
    # within 2**-29 of a tie, which these values are not.
    exact = matmul_ref(a.astype(np.float64), b.astype(np.float64))
    device = OPS_DEVICE if elem == "bf16" else DEVICE
    (got,) = run_op("gemm", [Opnd(elem, a.shape, a), Opnd(elem, b.shape, b)],
                    [Opnd(elem, (m, n))], "accum_type=f32", device=device)
    assert_same(got, to_float(exact, elem))


# --- conv2d --------------------------------------------------------------------------------------


def conv_config(rng, groups_max=3):
    """Random odd-ish shapes, pads [top, left, bottom, right], strides, dilations, groups."""
    while True:
        groups = int(rng.integers(1, groups_max + 1))
        cg, fg = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        kh, kw = (int(v) for v in rng.integers(1, 4, 2))
        strides = tuple(int(v) for v in rng.integers(1, 4, 2))
        dils = tuple(int(v) for v in rng.integers(1, 3, 2))
        pads = tuple(int(v) for v in rng.integers(0, 3, 4))
        n, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.integers(1, 9))
        oh = (h + pads[0] + pads[2] - dils[0] * (kh - 1) - 1) // strides[0] + 1
        ow = (w + pads[1] + pads[3] - dils[1] * (kw - 1) - 1) // strides[1] + 1
        if oh >= 1 and ow >= 1:
            return {
                "x_shape": (n, h, w, cg * groups),
                "w_shape": (kh, kw, cg, fg * groups),
                "pads": pads,
                "strides": strides,
                "dils": dils,
                "groups": groups,
            }


def conv_attrs(cfg, accum):
    return (
        f"pads=[{', '.join(map(str, cfg['pads']))}] "
        f"strides=[{', '.join(map(str, cfg['strides']))}] "
        f"dilations=[{', '.join(map(str, cfg['dils']))}] groups={cfg['groups']} "
        f"accum_type={accum}"
    )


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(
    "w_elem,bias,out_elem,wq",
    [
        ("i8", False, "i8", "channel"),
        ("i8", True, "i8", "tensor"),
        ("i8", True, "i16", "channel"),
        ("i4", False, "i8", "tensor"),
        ("i4", True, "i8", "channel"),
    ],
)
def test_conv2d_int(w_elem, bias, out_elem, wq, seed):
    rng = np.random.default_rng([31, seed, len(w_elem), bias, out_elem == "i16", len(wq)])
    cfg = conv_config(rng)
    f = cfg["w_shape"][3]
    xs, zx = scale(rng, 0.005, 0.05), int(rng.integers(-40, 41))
    x = codes(rng, cfg["x_shape"])
    w = codes(rng, cfg["w_shape"], w_elem)
    if wq == "tensor":
        w_scales = [scale(rng, 0.002, 0.02)] * f
        wquant = tensor_q(w_scales[0], 0)
    else:
        w_scales = [scale(rng, 0.002, 0.02) for _ in range(f)]
        wquant = Q(tuple(w_scales), (0,) * f, axis=3)
    k = cfg["w_shape"][0] * cfg["w_shape"][1] * cfg["w_shape"][2]
    wmag = 74 if w_elem == "i8" else 4.6
    ys = typical_out_scale(rng, xs, np.mean(w_scales) * wmag / 74, k,
                           40 if out_elem == "i8" else 6000)
    zy = int(rng.integers(-30, 31))
    ins = [Opnd("i8", x.shape, x, tensor_q(xs, zx)),
           Opnd(w_elem, w.shape, w, wquant, "HWIO")]
    acc = conv_ref(x - zx, w, cfg["pads"], cfg["strides"], cfg["dils"], cfg["groups"])
    if bias:
        bmax = int(math.sqrt(k) * 74 * wmag)  # about a typical accumulator
        b = rng.integers(-bmax, bmax + 1, size=(f,))
        ins.append(Opnd("i32", (f,), b))
        acc = acc + b
    out = Opnd(out_elem, acc.shape, quant=tensor_q(ys, zy))
    want = requant_ref(acc, xs, w_scales, ys, zy, out_elem)
    device = OPS_DEVICE if w_elem == "i4" else DEVICE
    (got,) = run_op("conv2d", ins, [out], conv_attrs(cfg, "i32"), device=device)
    np.testing.assert_array_equal(got, want)


def test_conv2d_int8_padding_holds_the_input_zero_point():
    # All-zero-point input (real 0) with padding everywhere: every output is exactly the
    # requantised bias, whatever the weights; a pad of code 0 would add -z_x * w.
    x = np.full((1, 2, 2, 3), 17)
    w = np.arange(-13, 14).reshape(3, 3, 3, 1)
    ins = [Opnd("i8", x.shape, x, tensor_q(0.1, 17)), Opnd("i8", w.shape, w,
           tensor_q(0.01, 0), "HWIO"), Opnd("i32", (1,), np.array([250]))]
    out = Opnd("i8", (1, 2, 2, 1), quant=tensor_q(0.05, -3))
    cfg = {"pads": (1, 1, 1, 1), "strides": (1, 1), "dils": (1, 1), "groups": 1}
    (got,) = run_op("conv2d", ins, [out], conv_attrs(cfg, "i32"))
    # 250 * 0.1 * 0.01 / 0.05 = 5 (+ z_y)
    np.testing.assert_array_equal(got, np.full((1, 2, 2, 1), 2))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d_f16(bias, seed):
    rng = np.random.default_rng([32, seed, bias])
    cfg = conv_config(rng)
    x = grid_f16(rng, cfg["x_shape"])
    w = grid_f16(rng, cfg["w_shape"])
    exact = conv_ref(x.astype(np.float64), w.astype(np.float64), cfg["pads"], cfg["strides"],
                     cfg["dils"], cfg["groups"])
    ins = [Opnd("f16", x.shape, x), Opnd("f16", w.shape, w, layout="HWIO")]
    if bias:
        b = grid_f16(rng, (cfg["w_shape"][3],), den=16)
        ins.append(Opnd("f16", b.shape, b))
        exact = exact + b.astype(np.float64)
    (got,) = run_op("conv2d", ins, [Opnd("f16", exact.shape)], conv_attrs(cfg, "f32"))
    # Grid values: the reference sum is exact, so one rounding to f16 is bit-exact.
    np.testing.assert_array_equal(got, exact.astype(np.float16))


def test_conv2d_f32_with_bias():
    rng = np.random.default_rng(33)
    cfg = conv_config(rng)
    x = rng.standard_normal(cfg["x_shape"]).astype(np.float32)
    w = rng.standard_normal(cfg["w_shape"]).astype(np.float32)
    b = rng.standard_normal(cfg["w_shape"][3]).astype(np.float32)
    exact = conv_ref(x.astype(np.float64), w.astype(np.float64), cfg["pads"], cfg["strides"],
                     cfg["dils"], cfg["groups"]) + b.astype(np.float64)
    ins = [Opnd("f32", x.shape, x), Opnd("f32", w.shape, w, layout="HWIO"),
           Opnd("f32", b.shape, b)]
    (got,) = run_op("conv2d", ins, [Opnd("f32", exact.shape)], conv_attrs(cfg, "f32"),
                    device=OPS_DEVICE)
    # The float64 sums of f32 products (48-bit, exact) may round in another order than the
    # reference's exact-then-rounded sum: 1 f32 ulp at most.
    assert_close_ulps(got, exact.astype(np.float32), 1)


# --- elementwise ----------------------------------------------------------------------------


def _erf(x):
    return np.vectorize(math.erf, otypes=[float])(x)


def _libm(fn):
    """A float64 function of Python's math module, elementwise; IEEE results outside its
    domain (log(0) = -inf, log / sqrt of a negative = NaN, exp overflow = inf)."""

    def run(x):
        def one(v):
            try:
                return fn(v)
            except ValueError:
                return -math.inf if (fn is math.log and v == 0) else math.nan
            except OverflowError:
                return math.inf

        return np.vectorize(one, otypes=[float])(np.asarray(x, dtype=np.float64))

    return run


_exp = _libm(math.exp)

#: The documented formulas (docs/numerics.md, ops.py), float64 in, float64 out.
UNARY = {
    "relu": lambda x, at: np.where(x > 0, x, 0.0),
    "leaky_relu": lambda x, at: np.where(x >= 0, x, at["alpha"] * x),
    "sigmoid": lambda x, at: 1.0 / (1.0 + _exp(-x)),
    "tanh": lambda x, at: _libm(math.tanh)(x),
    "exp": lambda x, at: _exp(x),
    "log": lambda x, at: _libm(math.log)(x),
    "sqrt": lambda x, at: _libm(math.sqrt)(x),
    "abs": lambda x, at: np.abs(x),
    "neg": lambda x, at: -x,
    "gelu": lambda x, at: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "silu": lambda x, at: x / (1.0 + _exp(-x)),
    "clamp": lambda x, at: np.minimum(np.maximum(x, at["min_val"]), at["max_val"]),
}
#: Operations whose float64 value comes from libm (not correctly rounded).
LIBM = {"sigmoid", "tanh", "exp", "log", "gelu", "silu", "pow"}


def _unary_attrs(rng, opcode):
    if opcode == "leaky_relu":
        return {"alpha": float(f"{rng.uniform(0.01, 0.5):.3g}")}
    if opcode == "clamp":
        lo = float(f"{rng.uniform(-2.0, 0.0):.3g}")
        return {"min_val": lo, "max_val": float(f"{lo + rng.uniform(0.1, 3.0):.3g}")}
    return {}


def _attr_text(at):
    return " ".join(f"{k}={num(v)}" for k, v in at.items())


@pytest.mark.parametrize("opcode", sorted(UNARY))
def test_unary_i8(opcode):
    # Every one of the 256 input codes, differing input and output descriptors. Exact even
    # for libm functions: the reference's math.exp & co. and numpy's may differ by a float64
    # ulp, which changes an i8 code only within an ulp of a rounding tie (docs/numerics.md).
    rng = np.random.default_rng([41, *opcode.encode()])
    x = rng.permutation(np.arange(-128, 128)).reshape(8, 32)
    xq = tensor_q(scale(rng, 0.01, 0.06), int(rng.integers(-20, 21)))
    yq = tensor_q(scale(rng, 0.01, 0.06), int(rng.integers(-20, 21)))
    at = _unary_attrs(rng, opcode)
    with np.errstate(all="ignore"):
        want = quant_ref(UNARY[opcode](dequant(x, xq), at), "i8", yq)
    (got,) = run_op(opcode, [Opnd("i8", x.shape, x, xq)], [Opnd("i8", x.shape, quant=yq)],
                    _attr_text(at))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "opcode,elem",
    [(op, "f16") for op in sorted(UNARY)]
    + [(op, elem) for elem in ("f32", "bf16") for op in ("relu", "exp", "clamp", "gelu", "neg")],
)
def test_unary_float(opcode, elem):
    rng = np.random.default_rng([42, *opcode.encode(), len(elem)])
    shape = (5, 13)
    x = rng.standard_normal(shape) * 3
    x[0, :6] = [0.0, -0.0, 1e-7, -1e-7, 11.5, -20.0]  # f16: subnormal, exp overflow
    if opcode in ("log", "sqrt"):
        x[1:] = np.abs(x[1:])  # mostly the function's domain; row 0 keeps -0, <0, 0
    x = to_float(x, elem)
    at = _unary_attrs(rng, opcode)
    with np.errstate(all="ignore"):
        want = to_float(UNARY[opcode](x.astype(np.float64), at), elem)
    device = OPS_DEVICE if elem == "bf16" else DEVICE
    (got,) = run_op(opcode, [Opnd(elem, shape, x)], [Opnd(elem, shape)], _attr_text(at),
                    device=device)
    if opcode in LIBM:
        # The reference's math.exp / log / tanh / erf and the executor's may differ by a
        # float64 ulp, which can move the value across an f16 rounding boundary: 1 ulp.
        assert_close_ulps(got, want, 1)
    else:
        assert_same(got, want)


BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "min": np.minimum,
    "max": np.maximum,
    "pow": np.power,  # C99 pow: IEEE results for 0 ** -1, (-2) ** 0.5, ...
}


@pytest.mark.parametrize("opcode", sorted(BINARY))
def test_binary_i8(opcode):
    rng = np.random.default_rng([43, *opcode.encode()])
    shape = (6, 17)
    aq = tensor_q(scale(rng, 0.01, 0.1), int(rng.integers(-20, 21)))
    bq = tensor_q(scale(rng, 0.01, 0.1), int(rng.integers(-20, 21)))
    yq = tensor_q(scale(rng, 0.01, 0.1), int(rng.integers(-20, 21)))
    a, b = codes(rng, shape), codes(rng, shape)
    za, zb = aq.zps[0], bq.zps[0]
    # Zeros on both sides: 0 / 0, x / 0, -x / 0, 0 ** -x.
    a[0, :4], b[0, :4] = [za, za + 5, za - 5, za], [zb, zb, zb, zb - 3]
    if opcode == "pow":
        b = np.clip(b, zb - 40, zb + 40)  # exponents within a few units: not all saturate
    with np.errstate(all="ignore"):
        want = quant_ref(BINARY[opcode](dequant(a, aq), dequant(b, bq)), "i8", yq)
    ins = [Opnd("i8", shape, a, aq), Opnd("i8", shape, b, bq)]
    (got,) = run_op(opcode, ins, [Opnd("i8", shape, quant=yq)])
    np.testing.assert_array_equal(got, want)


def test_binary_i8_per_channel_descriptors():
    # Activations quantised per channel / per group on the real-valued path: every element
    # is dequantised with its own channel's scale and zero point, and requantised with the
    # output's.
    rng = np.random.default_rng(45)
    shape = (3, 6)
    aq = Q((0.02, 0.05, 0.1, 0.03, 0.07, 0.5), (0, 3, -3, 10, -10, 1), axis=1)
    bq = Q((0.04, 0.01, 0.25), (5, -5, 0), axis=0)
    yq = Q((0.05, 0.125), (-2, 2), axis=1, group=4)
    a, b = codes(rng, shape), codes(rng, shape)
    (got,) = run_op("add", [Opnd("i8", shape, a, aq), Opnd("i8", shape, b, bq)],
                    [Opnd("i8", shape, quant=yq)])
    np.testing.assert_array_equal(got, quant_ref(dequant(a, aq) + dequant(b, bq), "i8", yq))


@pytest.mark.parametrize(
    "opcode,elem",
    [(op, "f16") for op in sorted(BINARY)]
    + [(op, elem) for elem in ("f32", "bf16") for op in ("add", "mul", "div")],
)
def test_binary_float(opcode, elem):
    rng = np.random.default_rng([44, *opcode.encode(), len(elem)])
    shape = (4, 19)
    a = rng.standard_normal(shape) * 4
    b = rng.standard_normal(shape) * 4
    a[0, :4], b[0, :4] = [0.0, 1.0, -1.0, 60000.0], [0.0, 0.0, -0.0, 60000.0]
    if opcode == "pow":
        b[1] = np.round(b[1])  # negative bases with integer exponents
        a[2:] = np.abs(a[2:])
    a, b = to_float(a, elem), to_float(b, elem)
    with np.errstate(all="ignore"):
        want = to_float(BINARY[opcode](a.astype(np.float64), b.astype(np.float64)), elem)
    device = OPS_DEVICE if elem == "bf16" else DEVICE
    (got,) = run_op(opcode, [Opnd(elem, shape, a), Opnd(elem, shape, b)], [Opnd(elem, shape)],
                    device=device)
    if opcode in LIBM:
        assert_close_ulps(got, want, 1)  # pow is libm's (see test_unary_float)
    else:
        # Sums, products and quotients of two f16 / f32 / bf16 values: the float64 result
        # is the exact value (add, sub, mul) or correctly rounded (div), then one rounding.
        assert_same(got, want)


def test_clamp_and_leaky_relu_attributes_on_i8_ties():
    # Power-of-two scales keep every real exact, so ties reach the rounding, which on the
    # real-valued path is half to even (the NMU requantisation rounds half up instead).
    x = np.arange(-8, 9).reshape(1, 17)  # x[0, 8 + v] == v
    xq, yq = tensor_q(0.25, 0), tensor_q(0.5, 0)
    (got,) = run_op("leaky_relu", [Opnd("i8", x.shape, x, xq)], [Opnd("i8", x.shape, quant=yq)],
                    "alpha=0.5")
    real = np.where(x >= 0, x * 0.25, x * 0.125)
    np.testing.assert_array_equal(got, np.rint(real / 0.5))
    # Output codes v / 2 for v >= 0 and v / 4 below: 1, 3, 5, 7 -> 0.5, 1.5, 2.5, 3.5 ->
    # 0, 2, 2, 4; -2, -6 -> -0.5, -1.5 -> 0, -2.
    assert [got[0, 8 + v] for v in (1, 3, 5, 7, -2, -6)] == [0, 2, 2, 4, 0, -2]
    (got,) = run_op("clamp", [Opnd("i8", x.shape, x, xq)], [Opnd("i8", x.shape, quant=yq)],
                    "min_val=-1.25 max_val=0.75")
    np.testing.assert_array_equal(got, np.rint(np.clip(x * 0.25, -1.25, 0.75) / 0.5))
    assert got.min() == -2 and got.max() == 2  # -2.5 -> -2, 1.5 -> 2


# --- pooling --------------------------------------------------------------------------------


def pool_ref(x, kind, kernel, pads, strides, total=False):
    """Direct loops over the window; padding is -inf (max) or not counted (average).

    Average: the real values inside the input summed in window order (row-major, as a
    float64 accumulation), divided by their count (``total``: not divided).
    """
    total_only = total
    n, h, w, c = x.shape
    top, left, bottom, right = pads
    oh = (h + top + bottom - kernel[0]) // strides[0] + 1
    ow = (w + left + right - kernel[1]) // strides[1] + 1
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            vals = [
                x[:, i * strides[0] - top + a, j * strides[1] - left + b, :]
                for a in range(kernel[0])
                for b in range(kernel[1])
                if 0 <= i * strides[0] - top + a < h and 0 <= j * strides[1] - left + b < w
            ]
            if kind == "maxpool":
                out[:, i, j, :] = np.max(vals, axis=0) if vals else -np.inf
            else:
                total = np.zeros((n, c))
                for v in vals:
                    total = total + v
                out[:, i, j, :] = total / (1 if total_only else max(len(vals), 1))
    return out


def pool_config(rng):
    kernel = tuple(int(v) for v in rng.integers(1, 4, 2))
    strides = tuple(int(v) for v in rng.integers(1, 4, 2))
    pads = (int(rng.integers(0, kernel[0])), int(rng.integers(0, kernel[1])),
            int(rng.integers(0, kernel[0])), int(rng.integers(0, kernel[1])))
    shape = (int(rng.integers(1, 3)), int(rng.integers(kernel[0], 9)),
             int(rng.integers(kernel[1], 9)), int(rng.integers(1, 5)))
    return shape, kernel, pads, strides


def pool_attrs(kernel, pads, strides):
    return (f"kernel_shape=[{kernel[0]}, {kernel[1]}] pads=[{', '.join(map(str, pads))}] "
            f"strides=[{strides[0]}, {strides[1]}]")


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["maxpool", "avgpool"])
@pytest.mark.parametrize("elem", ["i8", "f16"])
def test_pool(kind, elem, seed):
    rng = np.random.default_rng([51, seed, len(kind), len(elem)])
    shape, kernel, pads, strides = pool_config(rng)
    if elem == "i8":
        x = codes(rng, shape)
        xq = tensor_q(scale(rng, 0.01, 0.1), int(rng.integers(-20, 21)))
        yq = tensor_q(scale(rng, 0.01, 0.1), int(rng.integers(-20, 21)))
        x_op, real = Opnd("i8", shape, x, xq), dequant(x, xq)
    else:
        x = f16_values(rng, shape)
        yq = None
        x_op, real = Opnd("f16", shape, x), x.astype(np.float64)
    ref = pool_ref(real, kind, kernel, pads, strides)
    out = Opnd(elem, ref.shape, quant=yq)
    (got,) = run_op(kind, [x_op], [out], pool_attrs(kernel, pads, strides))
    if elem == "i8" and kind == "avgpool":
        # The int8 rule (docs/numerics.md): the mean of the in-bounds codes rounded half to
        # even (Python's round of a Fraction), then requantised to Y's descriptor.
        sums = pool_ref(x.astype(np.float64), kind, kernel, pads, strides, total=True)
        counts = pool_ref(np.ones_like(x, dtype=np.float64), kind, kernel, pads, strides,
                          total=True)
        avg = np.vectorize(lambda t, n: round(Fraction(int(t), int(n))))(sums, counts)
        np.testing.assert_array_equal(got, quant_ref(dequant(avg, xq), "i8", yq))
        return
    # f16: a sum of at most 9 f16 values is exact in float64, the division by the count is
    # the one float64 operation of the contract, then one rounding: exact.
    np.testing.assert_array_equal(got, result_ref(ref, out))


def test_avgpool_divides_by_non_pad_count_and_rounds_half_even():
    # 2x2 window, stride 1, one pad on every side; power-of-two scales keep reals exact.
    x = np.array([[1, 2], [3, 6]]).reshape(1, 2, 2, 1)
    q = tensor_q(0.5, 0)
    (got,) = run_op("avgpool", [Opnd("i8", x.shape, x, q)], [Opnd("i8", (1, 3, 3, 1), quant=q)],
                    pool_attrs((2, 2), (1, 1, 1, 1), (1, 1)))
    # Corners see one input, edges two (1.5 -> 2, 2.5 -> 2, 4 / 4.5 -> 4), the centre all
    # four (3.0); the padding is not counted (a count of 4 would give 0.25 -> 0 in the
    # corners).
    want = [[1, 2, 2], [2, 3, 4], [3, 4, 6]]
    np.testing.assert_array_equal(got.reshape(3, 3), want)


# --- normalisation and softmax ---------------------------------------------------------------


def _fsum(x, axes):
    """Sum over ``axes`` with math.fsum (exact sum, one rounding), keepdims."""
    moved = np.moveaxis(x, axes, list(range(x.ndim - len(axes), x.ndim)))
    lead = moved.shape[: x.ndim - len(axes)]
    flat = moved.reshape(*lead, -1)
    out = np.array([math.fsum(flat[idx]) for idx in np.ndindex(*lead)]).reshape(lead)
    return np.expand_dims(out, axes)


def norm_ref(opcode, x, axis, eps, scale_=None, bias=None):
    axis %= x.ndim
    if opcode in ("layernorm", "rmsnorm"):
        # Statistics along the one axis `axis`; scale and bias ([dim[axis]]) apply along it.
        count = x.shape[axis]
        along = [1] * x.ndim
        along[axis] = count
        if opcode == "layernorm":
            mean = _fsum(x, [axis]) / count
            var = _fsum((x - mean) ** 2, [axis]) / count
            y = (x - mean) / np.sqrt(var + eps)
        else:
            y = x / np.sqrt(_fsum(x * x, [axis]) / count + eps)
        if scale_ is not None:
            y = y * scale_.reshape(along)
        if bias is not None:
            y = y + bias.reshape(along)
        return y
    z = x - x.max(axis=axis, keepdims=True)
    total = _fsum(_exp(z), [axis])
    return _exp(z) / total if opcode == "softmax" else z - _libm(math.log)(total)


# layernorm / rmsnorm come with their optional scale (and bias): the checker's family
# matching (norm<f16>.default binds every input) rejects them without.
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(
    "opcode,extra", [("layernorm", 2), ("rmsnorm", 1), ("softmax", 0), ("log_softmax", 0)]
)
def test_norm_softmax_f16(opcode, extra, seed):
    rng = np.random.default_rng([61, seed, *opcode.encode(), extra])
    shape = tuple(int(v) for v in rng.integers(2, 9, size=int(rng.integers(2, 4))))
    axis = int(rng.integers(-len(shape), len(shape)))
    if opcode in ("layernorm", "rmsnorm"):
        axis = -1 if seed == 0 else axis
    x = f16_values(rng, shape, spread=3.0) + np.float16(rng.uniform(-2, 2))
    ins = [Opnd("f16", shape, x)]
    scale_ = bias = None
    norm_shape = (shape[axis],)  # [dim[axis]] (the registry)
    if extra >= 1:
        scale_ = f16_values(rng, norm_shape)
        ins.append(Opnd("f16", norm_shape, scale_))
    if extra >= 2:
        bias = f16_values(rng, norm_shape)
        ins.append(Opnd("f16", norm_shape, bias))
    eps = float(f"{rng.uniform(1e-5, 1e-2):.2g}")
    attrs = f"axis={axis}"
    if opcode in ("layernorm", "rmsnorm"):
        attrs += f" epsilon={num(eps)}"
    f64 = [None if v is None else v.astype(np.float64) for v in (scale_, bias)]
    want = norm_ref(opcode, x.astype(np.float64), axis, eps, *f64).astype(np.float16)
    (got,) = run_op(opcode, ins, [Opnd("f16", shape)], attrs)
    # exp / log / sqrt come from libm and the sums' order is open (the reference uses the
    # exact math.fsum): the float64 values agree to a few float64 ulps, which can cross an
    # f16 rounding boundary: 1 ulp.
    assert_close_ulps(got, want, 1)


def test_softmax_f32():
    rng = np.random.default_rng(62)
    x = (rng.standard_normal((3, 10)) * 5).astype(np.float32)
    want = norm_ref("softmax", x.astype(np.float64), 1, 0.0).astype(np.float32)
    (got,) = run_op("softmax", [Opnd("f32", x.shape, x)], [Opnd("f32", x.shape)], "axis=1",
                    device=OPS_DEVICE)
    assert_close_ulps(got, want, 1)  # as in test_norm_softmax_f16
    np.testing.assert_allclose(got.astype(np.float64).sum(axis=1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("opcode", ["layernorm", "rmsnorm"])
def test_norm_epsilon(opcode):
    # Row 0 is constant (layernorm: 0 / sqrt(eps) = 0, the bias comes through); row 1 has
    # mean square / variance 0.0625 = 2 * eps, so eps changes the result by a factor
    # sqrt(3 / 2), far more than an ulp.
    x = np.array([[3, 3, 3, 3], [-0.25, 0.25, -0.25, 0.25]], np.float16)
    bias = np.array([1, -2, 0.5, 0], np.float16)
    ones = np.ones(4, np.float16)
    ins = [Opnd("f16", x.shape, x), Opnd("f16", (4,), ones)]
    if opcode == "layernorm":
        ins.append(Opnd("f16", (4,), bias))
    (got,) = run_op(opcode, ins, [Opnd("f16", x.shape)], "axis=1 epsilon=0.03125")
    extra = (ones.astype(np.float64), bias.astype(np.float64))[: len(ins) - 1]
    want = norm_ref(opcode, x.astype(np.float64), 1, 0.03125, *extra).astype(np.float16)
    assert_close_ulps(got, want, 1)  # as in test_norm_softmax_f16
    shift = bias.astype(np.float64) if opcode == "layernorm" else 0.0
    if opcode == "layernorm":
        np.testing.assert_array_equal(got[0], bias)
    # Without eps row 1 would be +-1 (+ bias).
    expect = np.array([-1, 1, -1, 1]) * 0.25 / math.sqrt(0.0625 + 0.03125) + shift
    np.testing.assert_allclose(got[1].astype(np.float64), expect, rtol=1e-3)


@pytest.mark.parametrize("opcode", ["layernorm", "rmsnorm"])
def test_norm_along_a_middle_axis_with_dim_axis_scale(opcode):
    # Issue 24: the statistics run along the one axis `axis` (not axis..rank-1), and
    # scale / bias of shape [dim[axis]] apply along it. X [3, 4, 2] with axis=1: each of
    # the 3 x 2 columns x[i, :, j] is normalised on its own, element k scaled by scale[k].
    rng = np.random.default_rng(64)
    x = f16_values(rng, (3, 4, 2), spread=3.0)
    scale_ = f16_values(rng, (4,))
    bias = f16_values(rng, (4,))
    ins = [Opnd("f16", x.shape, x), Opnd("f16", (4,), scale_)]
    if opcode == "layernorm":
        ins.append(Opnd("f16", (4,), bias))
    (got,) = run_op(opcode, ins, [Opnd("f16", x.shape)], "axis=1 epsilon=0.001")
    want = np.empty(x.shape)
    for i in range(3):
        for j in range(2):
            col = [float(v) for v in x[i, :, j]]
            if opcode == "layernorm":
                mean = math.fsum(col) / 4
                var = math.fsum((v - mean) ** 2 for v in col) / 4
                for k in range(4):
                    want[i, k, j] = ((col[k] - mean) / math.sqrt(var + 0.001) * float(scale_[k])
                                     + float(bias[k]))
            else:
                rms = math.sqrt(math.fsum(v * v for v in col) / 4 + 0.001)
                for k in range(4):
                    want[i, k, j] = col[k] / rms * float(scale_[k])
    assert_close_ulps(got, want.astype(np.float16), 1)  # as in test_norm_softmax_f16


# --- views --------------------------------------------------------------------------------------


def _view_operand(rng, kind, shape):
    """(operand, output quant, value space): i8 raw, i8 quantised, or f16."""
    if kind == "f16":
        x = f16_values(rng, shape)
        return Opnd("f16", shape, x), None
    q = None if kind == "i8" else tensor_q(scale(rng, 0.01, 0.1), int(rng.integers(-20, 21)))
    return Opnd("i8", shape, codes(rng, shape), q), q


VIEW_KINDS = ["i8", "i8q", "f16"]


@pytest.mark.parametrize("kind", VIEW_KINDS)
@pytest.mark.parametrize("seed", range(2))
def test_transpose_reshape(kind, seed):
    rng = np.random.default_rng([71, seed, len(kind)])
    rank = int(rng.integers(2, 5))
    shape = tuple(int(v) for v in rng.integers(1, 6, size=rank))
    x, q = _view_operand(rng, kind, shape)
    perm = [int(v) for v in rng.permutation(rank)]
    want = np.empty(tuple(shape[p] for p in perm), dtype=x.values.dtype)
    for idx in np.ndindex(*want.shape):  # y[i0, i1, ...] = x[i at position perm^-1]
        src = [0] * rank
        for k, p in enumerate(perm):
            src[p] = idx[k]
        want[idx] = x.values[tuple(src)]
    (got,) = run_op("transpose", [x], [Opnd(x.elem, want.shape, quant=q)],
                    f"perm=[{', '.join(map(str, perm))}]")
    np.testing.assert_array_equal(got, want)
    target = (math.prod(shape[:-1]), shape[-1]) if seed else (math.prod(shape),)
    flat = [x.values[idx] for idx in np.ndindex(*shape)]  # row-major order
    (got,) = run_op("reshape", [x], [Opnd(x.elem, target, quant=q)],
                    f"target_shape=[{', '.join(map(str, target))}]")
    np.testing.assert_array_equal(got.reshape(-1), np.array(flat, dtype=x.values.dtype))


def test_transpose_requantises_to_a_different_output_descriptor():
    x = np.arange(-128, 128).reshape(16, 16)
    xq, yq = tensor_q(0.05, 3), tensor_q(0.0625, -7)
    (got,) = run_op("transpose", [Opnd("i8", x.shape, x, xq)], [Opnd("i8", x.shape, quant=yq)],
                    "perm=[1, 0]")
    np.testing.assert_array_equal(got, quant_ref(dequant(x, xq).T, "i8", yq))


def _slice_indices(dim, start, end, step):
    """ONNX / Python slice semantics, written out: clamp, then walk."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        return list(range(start, end, step))
    start, end = min(max(start, -1), dim - 1), min(max(end, -1), dim - 1)
    return list(range(start, end, step))


@pytest.mark.parametrize("kind", VIEW_KINDS)
@pytest.mark.parametrize("seed", range(3))
def test_slice(kind, seed):
    rng = np.random.default_rng([72, seed, len(kind)])
    rank = int(rng.integers(1, 4))
    shape = tuple(int(v) for v in rng.integers(2, 8, size=rank))
    x, q = _view_operand(rng, kind, shape)
    while True:
        axes = sorted(int(v) for v in rng.choice(rank, size=int(rng.integers(1, rank + 1)),
                                                 replace=False))
        starts, ends, steps, index = [], [], [], [list(range(d)) for d in shape]
        for ax in axes:
            d = shape[ax]
            step = int(rng.choice([1, 1, 2, 3, -1, -2]))
            start = int(rng.integers(-d, d))
            end = int(rng.integers(-d - 2, d + 3)) if step > 0 else int(rng.integers(-d - 2, d))
            starts.append(start), ends.append(end), steps.append(step)
            index[ax] = _slice_indices(d, start, end, step)
        if all(index):
            break
    want = np.empty(tuple(len(i) for i in index), dtype=x.values.dtype)
    for idx in np.ndindex(*want.shape):
        want[idx] = x.values[tuple(index[k][i] for k, i in enumerate(idx))]
    attrs = (f"starts=[{', '.join(map(str, starts))}] ends=[{', '.join(map(str, ends))}] "
             f"axes=[{', '.join(map(str, axes))}] steps=[{', '.join(map(str, steps))}]")
    (got,) = run_op("slice", [x], [Opnd(x.elem, want.shape, quant=q)], attrs)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", VIEW_KINDS)
@pytest.mark.parametrize("seed", range(2))
def test_concat_split(kind, seed):
    rng = np.random.default_rng([73, seed, len(kind)])
    rank = int(rng.integers(1, 4))
    base = [int(v) for v in rng.integers(1, 5, size=rank)]
    axis = int(rng.integers(-rank, rank))
    sizes = [int(v) for v in rng.integers(1, 4, size=2 + seed)]  # 2 and 3 parts
    parts, q = [], None
    for size in sizes:
        shape = list(base)
        shape[axis] = size
        op, q0 = _view_operand(rng, kind, tuple(shape))
        q = q or q0
        parts.append(Opnd(op.elem, op.shape, op.values, q))  # one descriptor for all
    out_shape = list(base)
    out_shape[axis] = sum(sizes)
    want = np.empty(out_shape, dtype=parts[0].values.dtype)
    ax = axis % rank
    at = 0
    for part, size in zip(parts, sizes, strict=True):
        for idx in np.ndindex(*part.shape):
            dst = list(idx)
            dst[ax] += at
            want[tuple(dst)] = part.values[idx]
        at += size
    (got,) = run_op("concat", parts, [Opnd(parts[0].elem, tuple(out_shape), quant=q)],
                    f"axis={axis}")
    np.testing.assert_array_equal(got, want)
    x = Opnd(parts[0].elem, tuple(out_shape), want, q)
    outs = [Opnd(p.elem, p.shape, quant=q) for p in parts]
    got = run_op("split", [x], outs, f"axis={axis} split_sizes=[{', '.join(map(str, sizes))}]")
    for g, p in zip(got, parts, strict=True):
        np.testing.assert_array_equal(g, p.values)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("kind", VIEW_KINDS)
def test_pad(mode, kind):
    rng = np.random.default_rng([74, len(mode), len(kind)])
    rank = int(rng.integers(1, 4))
    shape = tuple(int(v) for v in rng.integers(2, 6, size=rank))
    x, q = _view_operand(rng, kind, shape)
    lim = [d - 1 if mode == "reflect" else 3 for d in shape]
    begin = [int(rng.integers(0, m + 1)) for m in lim]
    end = [int(rng.integers(0, m + 1)) for m in lim]
    cv = float(f"{rng.uniform(-2, 2):.3g}")
    out_shape = tuple(d + b + e for d, b, e in zip(shape, begin, end, strict=True))
    real = real_of(x)
    want_real = np.empty(out_shape)
    for idx in np.ndindex(*out_shape):
        src = []
        for k, i in enumerate(idx):
            j, d = i - begin[k], shape[k]
            if mode == "reflect":
                j = -j if j < 0 else (2 * (d - 1) - j if j >= d else j)
            elif mode == "edge":
                j = min(max(j, 0), d - 1)
            src.append(j)
        inside = all(0 <= j < d for j, d in zip(src, shape, strict=True))
        want_real[idx] = real[tuple(src)] if inside else cv
    out = Opnd(x.elem, out_shape, quant=q)
    attrs = f"pads=[{', '.join(map(str, begin + end))}] mode={mode}"
    if mode == "constant":
        attrs += f" constant_value={num(cv)}"
    (got,) = run_op("pad", [x], [out], attrs)
    # Inner values are the input's (the same descriptor gives back the same codes); the
    # constant is a real value, rounded once to the output (for i8 with a descriptor:
    # rint(cv / s) + z).
    np.testing.assert_array_equal(got, result_ref(want_real, out))


@pytest.mark.parametrize("kind", VIEW_KINDS)
@pytest.mark.parametrize("seed", range(2))
def test_gather(kind, seed):
    rng = np.random.default_rng([75, seed, len(kind)])
    rank = int(rng.integers(1, 4))
    shape = tuple(int(v) for v in rng.integers(1, 6, size=rank))
    x, q = _view_operand(rng, kind, shape)
    axis = int(rng.integers(-rank, rank))
    size = shape[axis]
    idx_shape = tuple(int(v) for v in rng.integers(1, 4, size=int(rng.integers(1, 3))))
    indices = rng.integers(-size, size, size=idx_shape)
    ax = axis % rank
    out_shape = shape[:ax] + idx_shape + shape[ax + 1 :]
    want = np.empty(out_shape, dtype=x.values.dtype)
    for idx in np.ndindex(*out_shape):
        sel = int(indices[idx[ax : ax + len(idx_shape)]])
        src = (*idx[:ax], sel % size, *idx[ax + len(idx_shape) :])
        want[idx] = x.values[src]
    ins = [x, Opnd("i32", idx_shape, indices)]
    (got,) = run_op("gather", ins, [Opnd(x.elem, out_shape, quant=q)], f"axis={axis}")
    np.testing.assert_array_equal(got, want)


def test_gather_index_out_of_range_is_an_error():
    x = Opnd("f16", (4, 3), np.zeros((4, 3), np.float16))
    idx = Opnd("i32", (2,), np.array([1, 4]))
    with pytest.raises(ExecError, match="index outside"):
        run_op("gather", [x, idx], [Opnd("f16", (2, 3))], "axis=0")


# --- reductions (Priority 2, implemented) ----------------------------------------------------


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("opcode", ["reduce_sum", "reduce_max", "reduce_min", "argmax", "argmin"])
def test_reductions(opcode, keepdims):
    rng = np.random.default_rng([81, *opcode.encode(), keepdims])
    shape = (3, 5, 4)
    x = f16_values(rng, shape)
    if opcode.startswith("arg"):
        axis = int(rng.integers(-3, 3))
        axes = [axis % 3]
        attrs = f"axis={axis} keepdims={'true' if keepdims else 'false'}"
    else:
        axes = sorted(int(v) for v in rng.choice(3, size=2, replace=False))
        attrs = f"axes=[{', '.join(map(str, axes))}] keepdims={'true' if keepdims else 'false'}"
    kept = [d for k, d in enumerate(shape) if k not in axes]
    out_shape = tuple(1 if k in axes else d for k, d in enumerate(shape)) if keepdims else kept
    want = np.empty(tuple(kept))
    for idx in np.ndindex(*kept):
        it = iter(idx)
        sel = tuple(slice(None) if k in axes else next(it) for k in range(3))
        vals = [float(v) for v in x[sel].astype(np.float64).reshape(-1)]
        if opcode == "reduce_sum":
            want[idx] = math.fsum(vals)  # f16 sums are exact in float64 in any order
        elif opcode == "reduce_max":
            want[idx] = max(vals)
        elif opcode == "reduce_min":
            want[idx] = min(vals)
        else:  # the first index of the extreme value (vals run along the single axis)
            want[idx] = vals.index(max(vals) if opcode == "argmax" else min(vals))
    out = Opnd("i32" if opcode.startswith("arg") else "f16", tuple(out_shape))
    (got,) = run_op(opcode, [Opnd("f16", shape, x)], [out], attrs)
    np.testing.assert_array_equal(got, result_ref(want.reshape(out_shape), out))


# --- cast, quantize, dequantize ---------------------------------------------------------------


SPECIAL = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 127.5, 128.0, -128.5, -129.0, 1e4, -1e4,
           math.inf, -math.inf, math.nan, 0.49]


@pytest.mark.parametrize(
    "src,dst",
    [("f16", "i8"), ("f16", "i16"), ("f16", "i32"), ("f32", "i8"), ("f32", "f16"),
     ("f16", "f32"), ("f32", "bf16"), ("i8", "f16"), ("i32", "f16"), ("i32", "i8"),
     ("i8", "i32"), ("i16", "i8"), ("i32", "bf16")],
)
def test_cast(src, dst):
    rng = np.random.default_rng([91, len(src), len(dst), *src.encode(), *dst.encode()])
    shape = (4, 16)
    if src in RANGE:
        x = codes(rng, shape, src) if src != "i32" else rng.integers(-70000, 70001, shape)
        if src == "i32":  # extremes, and f16 / bf16 ties (2049 -> 2048, 4097 -> 4096)
            x[0, :7] = [RANGE[src][0], RANGE[src][1], 0, 2049, -2049, 4097, 2051]
        # A descriptor on an integer source plays no part in cast (values, not reals).
        x_op = Opnd(src, shape, x, tensor_q(0.5, 3))
        real = x.astype(np.float64)
    else:
        real = rng.standard_normal(shape) * 200
        real[0] = SPECIAL
        real[1] = rng.standard_normal(16) * 3
        x = to_float(real, src)
        x_op = Opnd(src, shape, x)
        real = x.astype(np.float64)
    out = Opnd(dst, shape)
    want = result_ref(real, out)  # integers: rint, saturate, NaN -> 0; floats: one rounding
    device = OPS_DEVICE if "bf16" in (src, dst) else DEVICE
    (got,) = run_op("cast", [x_op], [out], device=device)
    assert_same(got, want)


@pytest.mark.parametrize(
    "quant",
    [
        tensor_q(0.25, -3),  # a power of two: x / s exact, ties reach the rounding
        tensor_q(0.0371, 11),
        Q((0.02, 0.5, 0.125, 0.0777, 1.0), (0, -5, 7, 100, -128), axis=1),
        Q((0.1, 0.03, 0.25), (2, -2, 0), axis=0),
        Q((0.05, 0.2), (-1, 4), axis=1, group=3),
    ],
)
@pytest.mark.parametrize("src", ["f16", "f32"])
def test_quantize(quant, src):
    rng = np.random.default_rng([92, len(quant.scales), len(src)])
    shape = (3, 5)
    real = rng.standard_normal(shape) * 4
    real[0, :4] = [0.125, 0.375, -0.125, 1e9]  # ties for s = 0.25 (0.5, 1.5, -0.5); saturate
    x = to_float(real, src)
    out = Opnd("i8", shape, quant=quant)
    device = OPS_DEVICE if src == "f32" else DEVICE
    (got,) = run_op("quantize", [Opnd(src, shape, x)], [out], device=device)
    s, z = quant.expand(shape)
    want = np.clip(np.rint(x.astype(np.float64) / s) + z, -128, 127)
    np.testing.assert_array_equal(got, want)
    if quant.scales == (0.25,):
        np.testing.assert_array_equal(got[0, :4], [-3, -1, -3, 127])  # 0.5->0, 1.5->2, -0.5->-0


@pytest.mark.parametrize(
    "quant",
    [
        tensor_q(0.0371, 11),
        Q((0.02, 0.5, 0.125, 0.0777, 1.0), (0, -5, 7, 100, -128), axis=1),
        Q((0.05, 0.2), (-1, 4), axis=1, group=3),
    ],
)
@pytest.mark.parametrize("dst", ["f16", "f32"])
def test_dequantize(quant, dst):
    x = np.arange(-128, 127, 17)[:15].reshape(3, 5)
    device = OPS_DEVICE if dst == "f32" else DEVICE
    (got,) = run_op("dequantize", [Opnd("i8", x.shape, x, quant)], [Opnd(dst, x.shape)],
                    device=device)
    s, z = quant.expand(x.shape)
    np.testing.assert_array_equal(got, to_float(s * (x - z), dst))


# --- unsupported Priority-2 opcodes --------------------------------------------------------


UNSUPPORTED = {
    "conv1d": (
        [Opnd("f16", (1, 6, 2), np.ones((1, 6, 2), np.float16), layout="NWC"),
         Opnd("f16", (3, 2, 4), np.ones((3, 2, 4), np.float16), layout="WIO")],
        [Opnd("f16", (1, 4, 4), layout="NWC")],
        "pads=[0, 0] strides=[1] dilations=[1] accum_type=f32",
    ),
    "conv3d": (
        [Opnd("f16", (1, 3, 3, 3, 2), np.ones((1, 3, 3, 3, 2), np.float16)),
         Opnd("f16", (1, 1, 1, 2, 2), np.ones((1, 1, 1, 2, 2), np.float16))],
        [Opnd("f16", (1, 3, 3, 3, 2))],
        "pads=[0, 0, 0, 0, 0, 0] strides=[1, 1, 1] dilations=[1, 1, 1] accum_type=f32",
    ),
    "depthwise_conv2d": (
        [Opnd("i8", (1, 4, 4, 2), np.ones((1, 4, 4, 2), int), tensor_q(0.1, 0)),
         Opnd("i8", (3, 3, 1, 2), np.ones((3, 3, 1, 2), int), tensor_q(0.1, 0), "HWIO")],
        [Opnd("i8", (1, 2, 2, 2), quant=tensor_q(0.1, 0))],
        "pads=[0, 0, 0, 0] strides=[1, 1] dilations=[1, 1] accum_type=i32",
    ),
    "compute": (
        [Opnd("f16", (2, 3), np.ones((2, 3), np.float16))],
        [Opnd("f16", (2, 3))],
        'op="fancy_op"',
    ),
}


@pytest.mark.parametrize(
    "opcode,device",
    [
        ("conv1d", DEVICE),
        ("conv3d", DEVICE),
        ("depthwise_conv2d", DEVICE),
        ("compute", OPS_DEVICE),  # a device with a VPU, the unit `compute` maps to
        ("compute", DEVICE),  # and one without: still "not supported", not "no VPU unit"
    ],
)
def test_unsupported_priority2_opcodes(opcode, device):
    ins, outs, attrs = UNSUPPORTED[opcode]
    with pytest.raises(ExecError, match="not supported") as err:
        run_op(opcode, ins, outs, attrs, device=device)
    assert opcode in str(err.value)
