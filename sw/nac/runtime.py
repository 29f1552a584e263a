"""Float golden runtime: executes a ``.nac`` model in numpy float32 (spec §8).

The runtime reads the *encoded* file (instructions, PERM, CNST, DATA, weights), gathers
every instruction's arguments by §8.3 and calls the kernel named by the operation id
(standard ``nac.*`` ids or the ATen names recorded in CMAP). Kernels follow the ATen
semantics of their names; a shape mismatch is an error, never a silent zero (unlike the
reference runtime, see ``nac-notes.md``).

The file is untrusted input: arguments that would divide by zero or address outside a
tensor are refused by name, and no kernel allocates a result of more than
:data:`MAX_ELEMENTS` elements (a corrupted constant or shape costs a named error, not
gigabytes).
"""

from __future__ import annotations

import math

import numpy as np

from nac.container import gather_arguments
from nac.encoding import REGULAR_OP_MIN, QuantMethod, SystemOp
from nac.errors import NacFormatError
from nac.weights import _check_quant, dequantize

__all__ = ["KERNELS", "MAX_ELEMENTS", "NacRuntimeError", "run"]

#: Largest tensor (elements) a kernel may produce or pad to: 2**28 float32 values, 1 GiB.
MAX_ELEMENTS = 1 << 28

#: Input dtypes the runtime accepts: float32 values, integer indices, boolean masks.
_INPUT_KINDS = "biu"


class NacRuntimeError(RuntimeError):
    """A model cannot be executed (unknown op, missing input, kernel error)."""


def _cap(shape, what):
    """Refuse a tensor of *shape* larger than :data:`MAX_ELEMENTS` (before allocating it)."""
    count = math.prod(int(d) for d in shape)
    if count > MAX_ELEMENTS:
        raise NacRuntimeError(f"{what} of shape {list(shape)} has {count} elements, over the "
                              f"runtime's cap of {MAX_ELEMENTS}")


def _pairs(name, value, low):
    """A 1- or 2-element int argument as a pair, each at least *low*."""
    value = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    if len(value) not in (1, 2) or not all(isinstance(v, int) and not isinstance(v, bool)
                                           for v in value):
        raise NacRuntimeError(f"{name} must be one or two integers, got {list(value)}")
    if any(v < low for v in value):
        raise NacRuntimeError(f"{name} must be at least {low}, got {list(value)}")
    return value * 2 if len(value) == 1 else value


def _rank(x, rank, what):
    if np.ndim(x) != rank:
        raise NacRuntimeError(f"{what} must have rank {rank}, got shape {list(np.shape(x))}")


def _broadcasting(fn):
    """*fn* over broadcast operands, refusing a broadcast result over the cap."""
    def checked(*args, **kwargs):
        shapes = [np.shape(a) for a in args if isinstance(a, np.ndarray)]
        if len(shapes) > 1:
            _cap(np.broadcast_shapes(*shapes), "broadcast result")
        return fn(*args, **kwargs)
    return checked


def _matmul(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        raise NacRuntimeError(f"matmul of a scalar: shapes {list(a.shape)} and {list(b.shape)}")
    k_a = a.shape[-1]
    k_b = b.shape[-2] if b.ndim > 1 else b.shape[0]
    if k_a != k_b:
        raise NacRuntimeError(f"inner dimensions differ: {list(a.shape)} @ {list(b.shape)}")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    _cap((*batch, a.shape[-2] if a.ndim > 1 else 1, b.shape[-1] if b.ndim > 1 else 1),
         "matmul result")
    return a @ b


def _window_out(size, pad, dilation, kernel, stride, what):
    out = (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    if out < 1:
        raise NacRuntimeError(f"{what}: window {kernel} (dilation {dilation}) does not fit "
                              f"input size {size} with padding {pad}")
    return out


def _conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    stride = _pairs("conv2d stride", stride, 1)
    padding = _pairs("conv2d padding", padding, 0)
    dilation = _pairs("conv2d dilation", dilation, 1)
    _rank(x, 4, "conv2d input")
    _rank(w, 4, "conv2d weight")
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    if not isinstance(groups, int) or groups < 1 or f % groups:
        raise NacRuntimeError(f"conv2d groups must be a positive divisor of the {f} filters, "
                              f"got {groups!r}")
    if c != cg * groups:
        raise NacRuntimeError(f"conv2d: input has {c} channels, weights expect {cg} x {groups}")
    ph, pw = padding
    oh = _window_out(h, ph, dilation[0], kh, stride[0], "conv2d")
    ow = _window_out(wd, pw, dilation[1], kw, stride[1], "conv2d")
    _cap((n, c, h + 2 * ph, wd + 2 * pw), "conv2d padded input")
    _cap((n, f, oh, ow), "conv2d result")
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((n, f, oh, ow), dtype=np.float32)
    fg = f // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * fg:(g + 1) * fg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dilation[0]: i * dilation[0] + stride[0] * (oh - 1) + 1:
                           stride[0], j * dilation[1]: j * dilation[1] + stride[1] * (ow - 1)
                           + 1: stride[1]]
                out[:, g * fg:(g + 1) * fg] += np.einsum("nchw,fc->nfhw", patch, ws[:, :, i, j])
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


def _pool2d(x, kernel, stride, padding, reduce, dilation=(1, 1), ceil_mode=False,
            count_include_pad=True, divisor=None):
    kernel = _pairs(f"{reduce}_pool2d kernel_size", kernel, 1)
    stride = _pairs(f"{reduce}_pool2d stride", stride, 1) if stride else kernel
    padding = _pairs(f"{reduce}_pool2d padding", padding, 0)
    dilation = _pairs(f"{reduce}_pool2d dilation", dilation, 1)
    if ceil_mode:
        raise NacRuntimeError("pooling with ceil_mode=True is not supported")
    _rank(x, 4, f"{reduce}_pool2d input")
    h, w = x.shape[-2:]
    fill = -np.inf if reduce == "max" else 0.0
    oh = _window_out(h, padding[0], dilation[0], kernel[0], stride[0], f"{reduce}_pool2d")
    ow = _window_out(w, padding[1], dilation[1], kernel[1], stride[1], f"{reduce}_pool2d")
    _cap((*x.shape[:2], h + 2 * padding[0], w + 2 * padding[1]), "pool2d padded input")
    _cap((kernel[0] * kernel[1], *x.shape[:2], oh, ow), "pool2d windows")
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2), constant_values=fill)
    windows = [xp[:, :, i * dilation[0]: i * dilation[0] + stride[0] * (oh - 1) + 1: stride[0],
                  j * dilation[1]: j * dilation[1] + stride[1] * (ow - 1) + 1: stride[1]]
               for i in range(kernel[0]) for j in range(kernel[1])]
    stack = np.stack(windows)
    if reduce == "max":
        return stack.max(axis=0)
    if not count_include_pad and any(padding):
        raise NacRuntimeError("avg_pool2d with count_include_pad=False and padding is not "
                            "supported")
    if divisor is None:
        return stack.mean(axis=0, dtype=np.float32)
    if not isinstance(divisor, int) or isinstance(divisor, bool) or divisor == 0:
        raise NacRuntimeError(f"avg_pool2d divisor_override must be a non-zero integer, got "
                              f"{divisor!r}")
    return stack.sum(axis=0, dtype=np.float32) / np.float32(divisor)


def _softmax(x, dim, *_):
    shifted = x - x.max(axis=dim, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=dim, keepdims=True)


def _layer_norm(x, shape, w=None, b=None, eps=1e-5, *_):
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + np.float32(eps))
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def _batch_norm(x, w, b, mean, var, training, momentum, eps, *_):
    if training:
        raise NacRuntimeError("batch_norm in training mode is not supported (export in eval)")
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + np.float32(eps))
    if w is not None:
        y = y * w.reshape(shape)
    if b is not None:
        y = y + b.reshape(shape)
    return y


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(np.float32(math.sqrt(2 / math.pi)) * (x + 0.044715 * x ** 3)))
    from math import erf

    return (0.5 * x * (1 + np.vectorize(erf, otypes=[np.float64])(x / math.sqrt(2)))).astype(
        np.float32)


def _sdpa(q, k, v, mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p:
        raise NacRuntimeError("scaled_dot_product_attention with dropout is not supported")
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q.shape[-1] == 0:
        raise NacRuntimeError(f"scaled_dot_product_attention needs q, k, v of rank >= 2 and "
                              f"a non-empty head, got {list(q.shape)}, {list(k.shape)}, "
                              f"{list(v.shape)}")
    if enable_gqa:
        # Grouped-query attention (ATen's): the key heads and the value heads (axis -3) each
        # divide the query heads and are repeated to match them.
        if min(q.ndim, k.ndim, v.ndim) < 3 or 0 in (k.shape[-3], v.shape[-3]) or \
                q.shape[-3] % k.shape[-3] or q.shape[-3] % v.shape[-3]:
            raise NacRuntimeError(f"scaled_dot_product_attention with enable_gqa: the key and "
                                  f"value heads must divide the query heads, got "
                                  f"{list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
        k = np.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
        v = np.repeat(v, q.shape[-3] // v.shape[-3], axis=-3)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = _matmul(q, np.swapaxes(k, -1, -2)) * np.float32(scale)
    if is_causal:
        n, m = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((n, m), dtype=bool)), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    return _softmax(scores, -1) @ v


def _adaptive_avg_pool2d(x, size):
    oh, ow = _pairs("adaptive_avg_pool2d output_size", size, 1)
    if np.ndim(x) < 2:
        raise NacRuntimeError(f"adaptive_avg_pool2d input must have rank >= 2, got shape "
                              f"{list(np.shape(x))}")
    h, w = x.shape[-2:]
    if h % oh or w % ow:
        raise NacRuntimeError(f"adaptive_avg_pool2d from {h}x{w} to {oh}x{ow}: only exact "
                            f"divisions are supported")
    return x.reshape(*x.shape[:-2], oh, h // oh, ow, w // ow).mean(axis=(-3, -1))


def _mean(x, dims, keepdim=False, dtype=None):
    return x.mean(axis=tuple(dims) if dims else None, keepdims=keepdim)


def _conv2d_nhwc(x, w, stride, pads):
    stride = _pairs("conv2d_nhwc strides", stride, 1)
    if len(pads) != 4 or not all(isinstance(p, int) and p >= 0 for p in pads):
        raise NacRuntimeError(f"conv2d_nhwc pads must be four integers >= 0, got {list(pads)}")
    _rank(x, 4, "conv2d_nhwc input")
    _rank(w, 4, "conv2d_nhwc filter")
    top, bottom, left, right = pads
    n, h, wd, c = x.shape
    h, wd = h + top + bottom, wd + left + right
    kh, kw, cw, f = w.shape
    if c != cw:
        raise NacRuntimeError(f"conv2d_nhwc: input has {c} channels, the filter {cw}")
    oh = _window_out(h, 0, 1, kh, stride[0], "conv2d_nhwc")
    ow = _window_out(wd, 0, 1, kw, stride[1], "conv2d_nhwc")
    _cap((n, h, wd, c), "conv2d_nhwc padded input")
    _cap((n, oh, ow, f), "conv2d_nhwc result")
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    out = np.zeros((n, oh, ow, f), dtype=np.result_type(x, w))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i: i + stride[0] * (oh - 1) + 1: stride[0],
                       j: j + stride[1] * (ow - 1) + 1: stride[1], :]
            out += patch @ w[i, j]
    return out


def _slice(x, ranges):
    if len(ranges) % 3 or len(ranges) // 3 > np.ndim(x):
        raise NacRuntimeError(f"slice ranges must be (start, end, step) per axis of the "
                              f"rank-{np.ndim(x)} input, got {list(ranges)}")
    triples = [ranges[k:k + 3] for k in range(0, len(ranges), 3)]
    if any(st == 0 for _, _, st in triples):
        raise NacRuntimeError(f"slice step 0 in {list(ranges)}")
    return x[tuple(slice(s, e, st) for s, e, st in triples)]


def _gather(x, idx):
    idx = np.asarray(idx)
    if idx.dtype.kind not in "iu":
        raise NacRuntimeError(f"gather indices must be integers, got {idx.dtype}")
    if np.ndim(x) == 0:
        raise NacRuntimeError("gather from a scalar")
    _cap((*idx.shape, *x.shape[1:]), "gather result")
    if idx.size and (idx.min() < -x.shape[0] or idx.max() >= x.shape[0]):
        raise NacRuntimeError(f"gather index out of range for axis 0 of size {x.shape[0]}")
    return np.take(x, idx, axis=0)


def _reshape(x, shape):
    shape = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise NacRuntimeError(f"reshape to {shape}: dimensions must be integers")
    return np.reshape(x, shape)


def _f(x, value):
    """*value* as a float32 scalar (a kernel's numeric argument)."""
    return np.float32(value)


def _softplus(x, beta=1, threshold=20):
    bx = x * _f(x, beta)
    return np.where(bx > threshold, x, np.log1p(np.exp(np.minimum(bx, threshold))) / _f(x, beta))


def _log_softmax(x, dim, *_):
    shifted = x - x.max(axis=dim, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=dim, keepdims=True))


def _elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    neg = _f(x, alpha) * np.expm1(np.minimum(x, 0) * _f(x, input_scale))
    return _f(x, scale) * np.where(x > 0, x, neg)


def _glu(x, dim=-1):
    a, b = np.split(x, 2, axis=dim)
    return a / (1 + np.exp(-b))


def _prelu(x, w):
    shape = [1] * x.ndim
    if x.ndim > 1:
        shape[1] = -1
    return np.where(x > 0, x, x * np.reshape(w, shape if w.size > 1 else ()))


def _clamp(x, low=None, high=None):
    if low is not None:
        x = np.maximum(x, _f(x, low))
    if high is not None:
        x = np.minimum(x, _f(x, high))
    return x


def _rms_norm(x, shape, w=None, eps=None):
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    eps = np.finfo(np.float32).eps if eps is None else eps
    y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + _f(x, eps))
    return y if w is None else y * w


def _group_norm(x, groups, w=None, b=None, eps=1e-5, *_):
    if not isinstance(groups, int) or groups < 1 or x.ndim < 2 or x.shape[1] % groups:
        raise NacRuntimeError(f"group_norm: {groups!r} groups do not divide the "
                              f"{x.shape[1] if x.ndim > 1 else 0} channels")
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    y = (g - g.mean(axis=-1, keepdims=True)) / np.sqrt(g.var(axis=-1, keepdims=True) +
                                                       _f(x, eps))
    y = y.reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    if w is not None:
        y = y * w.reshape(shape)
    if b is not None:
        y = y + b.reshape(shape)
    return y


def _instance_norm(x, w, b, mean, var, use_input_stats, momentum, eps, *_):
    if not use_input_stats:
        return _batch_norm(x, w, b, mean, var, False, momentum, eps)
    return _group_norm(x, x.shape[1], w, b, eps)


def _pool1d(reduce):
    def pool(x, kernel, stride=(), padding=(0,), *rest):
        if np.ndim(x) == 2:  # (C, L) without a batch axis, as ATen accepts it
            return pool(x[None], kernel, stride, padding, *rest)[0]
        kernel, stride = list(kernel), list(stride) or list(kernel)
        padding = list(padding)
        if reduce == "max":
            dilation = list(rest[0]) if rest else [1]
            ceil = rest[1] if len(rest) > 1 else False
            out = _pool2d(x[..., None, :], [1, *kernel], [1, *stride], [0, *padding], "max",
                          [1, *dilation], ceil)
        else:
            ceil = rest[0] if rest else False
            incl = rest[1] if len(rest) > 1 else True
            out = _pool2d(x[..., None, :], [1, *kernel], [1, *stride], [0, *padding], "avg",
                          ceil_mode=ceil, count_include_pad=incl)
        return out[..., 0, :]
    return pool


def _rrelu(x, lower=1.0 / 8, upper=1.0 / 3, training=False, *_):
    if training:
        raise NacRuntimeError("rrelu in training mode (random slopes) is not supported")
    return np.where(x >= 0, x, x * _f(x, (lower + upper) / 2))


KERNELS = {
    "nac.pass": lambda x, *_: x,
    "nac.clone": lambda x, *_: x.copy(),
    "nac.add": _broadcasting(lambda a, b: a + b),
    "nac.sub": _broadcasting(lambda a, b: a - b),
    "nac.neg": lambda a: -a,
    "nac.gt": _broadcasting(lambda a, b: a > b),
    "nac.le": _broadcasting(lambda a, b: a <= b),
    "nac.where": _broadcasting(lambda c, a, b: np.where(c, a, b)),
    "nac.view": _reshape,
    "aten.linear.default": lambda x, w, b=None: _broadcasting(lambda y, c: y + c)(
        _matmul(x, np.asarray(w).T), 0 if b is None else b),
    "aten.conv2d.default": _conv2d,
    "aten.batch_norm.default": _batch_norm,
    "aten.relu.default": lambda x: np.maximum(x, np.float32(0)),
    "aten.gelu.default": _gelu,
    "aten.tanh.default": np.tanh,
    "aten.sigmoid.default": lambda x: 1 / (1 + np.exp(-x)),
    "aten.max_pool2d.default": lambda x, k, s=(), p=(0, 0), d=(1, 1), ceil=False: _pool2d(
        x, k, s, p, "max", d, ceil),
    "aten.avg_pool2d.default": lambda x, k, s=(), p=(0, 0), ceil=False, incl=True, div=None:
        _pool2d(x, k, s, p, "avg", ceil_mode=ceil, count_include_pad=incl, divisor=div),
    "aten.adaptive_avg_pool2d.default": _adaptive_avg_pool2d,
    "aten.softmax.int": _softmax,
    "aten.layer_norm.default": _layer_norm,
    "aten.matmul.default": _matmul,
    "aten.mm.default": _matmul,
    "aten.bmm.default": _matmul,
    "aten.mul.Tensor": _broadcasting(lambda a, b: a * b),
    "aten.div.Tensor": _broadcasting(lambda a, b: a / b),
    "aten.transpose.int": lambda x, a, b: np.swapaxes(x, a, b),
    "aten.permute.default": lambda x, dims: np.transpose(x, dims),
    "aten.t.default": lambda x: x.T,
    "aten.mean.dim": _mean,
    "aten.sum.dim_IntList": lambda x, dims, keepdim=False, dtype=None: x.sum(
        axis=tuple(dims) if dims else None, keepdims=keepdim),
    "aten.scaled_dot_product_attention.default": _sdpa,
    "aten.addmm.default": lambda c, a, b, beta=1, alpha=1: _broadcasting(
        lambda x, y: beta * x + alpha * y)(c, _matmul(a, b)),
    "aten.exp.default": np.exp,
    "aten.sqrt.default": np.sqrt,
    "aten.rsqrt.default": lambda x: 1 / np.sqrt(x),
    "aten.amax.default": lambda x, dims=(), keepdim=False: x.max(
        axis=tuple(dims) if dims else None, keepdims=keepdim),
    "aten.log.default": np.log,
    "aten.neg.default": lambda x: -x,
    "aten.add.Tensor": _broadcasting(lambda a, b, alpha=1: a + alpha * b),
    "aten.sub.Tensor": _broadcasting(lambda a, b, alpha=1: a - alpha * b),
    "aten.reshape.default": _reshape,
    "aten.select.int": lambda x, dim, index: np.take(x, index, axis=dim),
    "aten.rrelu.default": _rrelu,
    "aten.hardtanh.default": lambda x, low=-1.0, high=1.0: _clamp(x, low, high),
    "aten.clamp.default": _clamp,
    "aten.leaky_relu.default": lambda x, slope=0.01: np.where(x > 0, x, x * _f(x, slope)),
    "aten.prelu.default": _prelu,
    "aten.elu.default": _elu,
    "aten.selu.default": lambda x: _elu(x, 1.6732632423543772, 1.0507009873554805),
    "aten.celu.default": lambda x, alpha=1.0: _elu(x, alpha, 1.0, 1.0 / alpha),
    "aten.silu.default": lambda x: x / (1 + np.exp(-x)),
    "aten.mish.default": lambda x: x * np.tanh(_softplus(x)),
    "aten.hardswish.default": lambda x: x * np.clip(x + 3, 0, 6) / np.float32(6),
    "aten.hardsigmoid.default": lambda x: np.clip(x + 3, 0, 6) / np.float32(6),
    "aten.softplus.default": _softplus,
    "aten.softshrink.default": lambda x, lambd=0.5: np.where(
        x > lambd, x - _f(x, lambd), np.where(x < -lambd, x + _f(x, lambd), np.float32(0))),
    "aten.hardshrink.default": lambda x, lambd=0.5: np.where(np.abs(x) > lambd, x,
                                                             np.float32(0)),
    "aten.log_sigmoid.default": lambda x: -_softplus(-x),
    "aten.log_softmax.int": _log_softmax,
    "aten.threshold.default": lambda x, threshold, value: np.where(x > threshold, x,
                                                                   _f(x, value)),
    "aten.glu.default": _glu,
    "aten.abs.default": np.abs,
    "aten.sign.default": np.sign,
    "aten.erf.default": lambda x: np.vectorize(math.erf, otypes=[np.float64])(x).astype(
        np.float32),
    "aten.pow.Tensor_Scalar": lambda x, exponent: np.power(x, _f(x, exponent)),
    "aten.cumsum.default": lambda x, dim, dtype=None: np.cumsum(x, axis=dim, dtype=x.dtype),
    "aten.rms_norm.default": _rms_norm,
    "aten.group_norm.default": _group_norm,
    "aten.instance_norm.default": _instance_norm,
    "aten.max_pool1d.default": _pool1d("max"),
    "aten.avg_pool1d.default": _pool1d("avg"),
    "aten.adaptive_avg_pool1d.default": lambda x, size: _adaptive_avg_pool2d(
        x[..., None, :], (1, *size))[..., 0, :],
    # MIND Core IR operations without an ATen counterpart of the same signature.
    "mind.index": lambda x, indices: np.asarray(x[tuple(indices)]),
    "mind.slice": _slice,
    "mind.gather": _gather,
    "mind.conv2d_nhwc": _conv2d_nhwc,
}


def _load_param(nac, pid, name, tensors_by_pid):
    if nac.weights is not None and name in nac.weights:
        return nac.weights.float32(name)
    tensor = tensors_by_pid.get(pid)
    if tensor is None:
        raise NacRuntimeError(f"parameter {pid} ({name!r}) has no tensor (internal or external)")
    try:
        _check_quant(name, tensor)
    except NacFormatError as exc:
        raise NacRuntimeError(f"parameter {pid}: {exc}") from None
    raw = np.frombuffer(tensor.data, dtype=tensor.dtype.numpy).reshape(tensor.shape)
    q = tensor.quant_params
    if tensor.quant == QuantMethod.BLOCK_FP8 and math.prod(q.orig_shape) > raw.size:
        raise NacRuntimeError(f"parameter {pid} ({name!r}): BLOCK_FP8 orig_shape "
                              f"{list(q.orig_shape)} has more elements than the {raw.size} "
                              f"stored")
    try:
        return dequantize(raw, tensor.quant, tensor.quant_params)
    except (ValueError, IndexError) as exc:
        raise NacRuntimeError(f"parameter {pid} ({name!r}): cannot dequantise: {exc}") from None


def _describe(array):
    return f"{array.dtype} {list(array.shape)}"


def _user_inputs(nac, inputs):
    """Check the user inputs against the model's ``<INPUT B=0>`` instructions."""
    names = dict(nac.data.inputs) if nac.data else {}
    slots = [i for i, ins in enumerate(nac.ops or ()) if ins.a == SystemOp.INPUT and ins.b == 0]
    labels = [f"input {k} ({names[i]!r})" if i in names else f"input {k}"
              for k, i in enumerate(slots)]
    inputs = list(inputs)
    if len(inputs) != len(slots):
        raise NacRuntimeError(f"the model takes {len(slots)} input(s) "
                              f"({', '.join(labels) or 'none'}), got {len(inputs)}")
    checked = []
    for label, value in zip(labels, inputs, strict=True):
        array = np.asarray(value)
        if array.dtype.kind == "f":
            if array.dtype != np.float32:
                raise NacRuntimeError(f"{label}: expected float32 (the float runtime computes "
                                      f"in float32), got {_describe(array)}; convert it with "
                                      f".astype(numpy.float32)")
        elif array.dtype.kind not in _INPUT_KINDS:
            raise NacRuntimeError(f"{label}: expected float32 values, integer indices or a "
                                  f"boolean mask, got {_describe(array)}")
        checked.append(array)
    return dict(zip(slots, zip(labels, checked, strict=True), strict=True))


def run(nac, inputs, *, extra_tensors=None):
    """Execute *nac* on *inputs* and return the model outputs.

    Parameters
    ----------
    nac : NacFile
        As read by :func:`nac.read_nac` (external weights attached) or built in memory.
    inputs : sequence of numpy.ndarray
        User inputs in the order of the ``<INPUT B=0>`` instructions: float32 values,
        integer indices or boolean masks, exactly one per instruction.
    extra_tensors : dict, optional
        Values of lifted constants (``<INPUT B=3>``) by their DATA input name, when the
        model's weight store does not hold them.

    Returns
    -------
    list of numpy.ndarray

    Raises
    ------
    NacRuntimeError
        Wrong number or dtype of inputs, an operation without a kernel, arguments a kernel
        refuses (named, with the instruction index), or a result over :data:`MAX_ELEMENTS`.
    """
    perm = dict(nac.perm or ())
    constants = {i: c.value for i, c in nac.cnst or ()}
    params = dict(nac.data.params) if nac.data else {}
    input_names = dict(nac.data.inputs) if nac.data else {}
    tensors_by_pid = dict(nac.data.tensors or ()) if nac.data else {}
    extra = dict(extra_tensors or {})
    user = _user_inputs(nac, inputs)
    origin = {}
    results = [None] * len(nac.ops or ())
    for index, ins in enumerate(nac.ops or ()):
        if ins.a == SystemOp.INPUT:
            if ins.b == 0:
                origin[index], results[index] = user[index]
            elif ins.b == 1:
                if not ins.const_ids:
                    raise NacRuntimeError(f"instruction {index}: <INPUT B=1> without a "
                                          f"parameter id in C")
                pid = ins.const_ids[0]
                results[index] = _load_param(nac, pid, params.get(pid), tensors_by_pid)
            elif ins.b == 3:
                name = input_names.get(index)
                if name in extra:
                    results[index] = np.asarray(extra[name])
                elif nac.weights is not None and name in nac.weights:
                    results[index] = np.asarray(nac.weights[name])
                else:
                    raise NacRuntimeError(
                        f"instruction {index}: lifted constant <INPUT B=3> {name!r} has no "
                        f"value; give it in extra_tensors or store it with external weights")
            else:
                raise NacRuntimeError(f"instruction {index}: state inputs (<INPUT B=2>) need a "
                                    f"state store, which this runtime does not keep")
            continue
        if ins.a == SystemOp.OUTPUT:
            values = []
            for d in ins.d:
                if not -index <= d < 0 or results[index + d] is None:
                    raise NacRuntimeError(f"instruction {index}: <OUTPUT> offset {d} names no "
                                          f"computed value")
                values.append(results[index + d])
            if ins.b == 0:
                return values
            results[index] = values
            continue
        if ins.a < REGULAR_OP_MIN:
            raise NacRuntimeError(f"instruction {index}: system op A={ins.a} not supported")
        name = nac.op_name(ins.a)
        kernel = KERNELS.get(name)
        if kernel is None:
            raise NacRuntimeError(f"instruction {index}: no kernel for {name or ins.a!r}")
        args = []
        for arg in gather_arguments(ins, index, perm):
            if arg.is_const:
                if arg.value not in constants:
                    raise NacRuntimeError(f"instruction {index} ({name}): constant id "
                                          f"{arg.value} is not in CNST")
                value = constants[arg.value]
                args.append(list(value) if isinstance(value, tuple) else value)
            else:
                value = results[arg.value]
                if value is None or isinstance(value, list):
                    raise NacRuntimeError(f"instruction {index} ({name}): argument from "
                                          f"instruction {arg.value}, which has no tensor value")
                args.append(value)
        try:
            results[index] = kernel(*args)
        except NacRuntimeError as exc:
            raise NacRuntimeError(f"instruction {index} ({name}): {exc}"
                                  f"{_operands(args, origin, ins, index)}") from None
        except (ValueError, TypeError, IndexError, KeyError, AttributeError, ZeroDivisionError,
                OverflowError) as exc:
            raise NacRuntimeError(f"instruction {index} ({name}): {type(exc).__name__}: {exc}"
                                  f"{_operands(args, origin, ins, index)}") from None
    raise NacRuntimeError("the model has no <OUTPUT B=0>")


def _operands(args, origin, ins, index):
    """Where the failing kernel's tensor operands came from (user inputs are named)."""
    parts = []
    sources = iter(index + d for d in ins.d if d)
    for value in args:
        if isinstance(value, np.ndarray):
            src = next(sources, None)
            label = f" from {origin[src]}" if src in origin else ""
            parts.append(f"{_describe(value)}{label}")
    return f" (tensor operands: {'; '.join(parts)})" if parts else ""
