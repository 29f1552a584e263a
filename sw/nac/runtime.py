"""Float golden runtime: executes a ``.nac`` model in numpy float32 (spec §8).

The runtime reads the *encoded* file (instructions, PERM, CNST, DATA, weights), gathers
every instruction's arguments by §8.3 and calls the kernel named by the operation id
(standard ``nac.*`` ids or the ATen names recorded in CMAP). Kernels follow the ATen
semantics of their names; a shape mismatch is an error, never a silent zero (unlike the
reference runtime, see ``nac-notes.md``).
"""

from __future__ import annotations

import math

import numpy as np

from nac.container import gather_arguments
from nac.encoding import REGULAR_OP_MIN, SystemOp
from nac.weights import dequantize

__all__ = ["KERNELS", "NacRuntimeError", "run"]


class NacRuntimeError(RuntimeError):
    """A model cannot be executed (unknown op, missing input, kernel error)."""


def _f32(x):
    return np.asarray(x, dtype=np.float32) if not isinstance(x, np.ndarray) or \
        x.dtype == np.float64 else x


def _conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    stride, padding, dilation = (tuple(v) * (2 // len(v)) if len(v) == 1 else tuple(v)
                                 for v in (stride, padding, dilation))
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    if c != cg * groups:
        raise NacRuntimeError(f"conv2d: input has {c} channels, weights expect {cg} x {groups}")
    ph, pw = padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * pw - dilation[1] * (kw - 1) - 1) // stride[1] + 1
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
            count_include_pad=True):
    kernel = tuple(kernel) * (2 // len(kernel)) if len(kernel) == 1 else tuple(kernel)
    stride = tuple(stride) if stride else kernel
    stride = stride * (2 // len(stride)) if len(stride) == 1 else stride
    padding = tuple(padding) * (2 // len(padding)) if len(padding) == 1 else tuple(padding)
    if ceil_mode:
        raise NacRuntimeError("pooling with ceil_mode=True is not supported")
    h, w = x.shape[-2:]
    fill = -np.inf if reduce == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2), constant_values=fill)
    oh = (h + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    ow = (w + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    windows = [xp[:, :, i * dilation[0]: i * dilation[0] + stride[0] * (oh - 1) + 1: stride[0],
                  j * dilation[1]: j * dilation[1] + stride[1] * (ow - 1) + 1: stride[1]]
               for i in range(kernel[0]) for j in range(kernel[1])]
    stack = np.stack(windows)
    if reduce == "max":
        return stack.max(axis=0)
    if not count_include_pad and any(padding):
        raise NacRuntimeError("avg_pool2d with count_include_pad=False and padding is not "
                            "supported")
    return stack.mean(axis=0, dtype=np.float32)


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
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ np.swapaxes(k, -1, -2)) * np.float32(scale)
    if is_causal:
        n, m = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((n, m), dtype=bool)), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    return _softmax(scores, -1) @ v


def _adaptive_avg_pool2d(x, size):
    oh, ow = size
    h, w = x.shape[-2:]
    if h % oh or w % ow:
        raise NacRuntimeError(f"adaptive_avg_pool2d from {h}x{w} to {oh}x{ow}: only exact "
                            f"divisions are supported")
    return x.reshape(*x.shape[:-2], oh, h // oh, ow, w // ow).mean(axis=(-3, -1))


def _mean(x, dims, keepdim=False, dtype=None):
    return x.mean(axis=tuple(dims) if dims else None, keepdims=keepdim)


def _conv2d_nhwc(x, w, stride, pads):
    top, bottom, left, right = pads
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    n, h, wd, _ = xp.shape
    kh, kw, _, f = w.shape
    oh = (h - kh) // stride[0] + 1
    ow = (wd - kw) // stride[1] + 1
    out = np.zeros((n, oh, ow, f), dtype=np.result_type(x, w))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i: i + stride[0] * (oh - 1) + 1: stride[0],
                       j: j + stride[1] * (ow - 1) + 1: stride[1], :]
            out += patch @ w[i, j]
    return out


def _slice(x, ranges):
    triples = [ranges[k:k + 3] for k in range(0, len(ranges), 3)]
    return x[tuple(slice(s, e, st) for s, e, st in triples)]


KERNELS = {
    "nac.pass": lambda x, *_: x,
    "nac.clone": lambda x, *_: x.copy(),
    "nac.add": lambda a, b: a + b,
    "nac.sub": lambda a, b: a - b,
    "nac.neg": lambda a: -a,
    "nac.gt": lambda a, b: a > b,
    "nac.le": lambda a, b: a <= b,
    "nac.where": lambda c, a, b: np.where(c, a, b),
    "nac.view": lambda x, shape: np.reshape(x, shape),
    "aten.linear.default": lambda x, w, b=None: x @ w.T + (0 if b is None else b),
    "aten.conv2d.default": _conv2d,
    "aten.batch_norm.default": _batch_norm,
    "aten.relu.default": lambda x: np.maximum(x, np.float32(0)),
    "aten.gelu.default": _gelu,
    "aten.tanh.default": np.tanh,
    "aten.sigmoid.default": lambda x: 1 / (1 + np.exp(-x)),
    "aten.max_pool2d.default": lambda x, k, s=(), p=(0, 0), d=(1, 1), ceil=False: _pool2d(
        x, k, s, p, "max", d, ceil),
    "aten.avg_pool2d.default": lambda x, k, s=(), p=(0, 0), ceil=False, incl=True, div=None:
        _pool2d(x, k, s, p, "avg", ceil_mode=ceil, count_include_pad=incl),
    "aten.adaptive_avg_pool2d.default": _adaptive_avg_pool2d,
    "aten.softmax.int": _softmax,
    "aten.layer_norm.default": _layer_norm,
    "aten.matmul.default": lambda a, b: a @ b,
    "aten.mm.default": lambda a, b: a @ b,
    "aten.bmm.default": lambda a, b: a @ b,
    "aten.mul.Tensor": lambda a, b: a * b,
    "aten.div.Tensor": lambda a, b: a / b,
    "aten.transpose.int": lambda x, a, b: np.swapaxes(x, a, b),
    "aten.permute.default": lambda x, dims: np.transpose(x, dims),
    "aten.t.default": lambda x: x.T,
    "aten.mean.dim": _mean,
    "aten.sum.dim_IntList": lambda x, dims, keepdim=False, dtype=None: x.sum(
        axis=tuple(dims) if dims else None, keepdims=keepdim),
    "aten.scaled_dot_product_attention.default": _sdpa,
    "aten.addmm.default": lambda c, a, b, beta=1, alpha=1: beta * c + alpha * (a @ b),
    "aten.exp.default": np.exp,
    "aten.sqrt.default": np.sqrt,
    "aten.rsqrt.default": lambda x: 1 / np.sqrt(x),
    "aten.amax.default": lambda x, dims=(), keepdim=False: x.max(
        axis=tuple(dims) if dims else None, keepdims=keepdim),
    "aten.log.default": np.log,
    "aten.neg.default": lambda x: -x,
    "aten.add.Tensor": lambda a, b, alpha=1: a + alpha * b,
    "aten.sub.Tensor": lambda a, b, alpha=1: a - alpha * b,
    "aten.reshape.default": lambda x, shape: np.reshape(x, shape),
    # MIND Core IR operations without an ATen counterpart of the same signature.
    "mind.index": lambda x, indices: np.asarray(x[tuple(indices)]),
    "mind.slice": _slice,
    "mind.gather": lambda x, idx: np.take(x, idx, axis=0),
    "mind.conv2d_nhwc": _conv2d_nhwc,
}


def _load_param(nac, pid, name, tensors_by_pid):
    if nac.weights is not None and name in nac.weights:
        return nac.weights.float32(name)
    tensor = tensors_by_pid.get(pid)
    if tensor is None:
        raise NacRuntimeError(f"parameter {pid} ({name!r}) has no tensor (internal or external)")
    raw = np.frombuffer(tensor.data, dtype=tensor.dtype.numpy).reshape(tensor.shape)
    return dequantize(raw, tensor.quant, tensor.quant_params)


def run(nac, inputs, *, extra_tensors=None):
    """Execute *nac* on *inputs* and return the model outputs.

    Parameters
    ----------
    nac : NacFile
        As read by :func:`nac.read_nac` (external weights attached) or built in memory.
    inputs : sequence of numpy.ndarray
        User inputs in the order of the ``<INPUT B=0>`` instructions.
    extra_tensors : dict, optional
        Values of lifted constants (``<INPUT B=3>``) by their DATA input name, when the
        model's weight store does not hold them.

    Returns
    -------
    list of numpy.ndarray
    """
    perm = dict(nac.perm or ())
    constants = {i: c.value for i, c in nac.cnst or ()}
    params = dict(nac.data.params) if nac.data else {}
    input_names = dict(nac.data.inputs) if nac.data else {}
    tensors_by_pid = dict(nac.data.tensors or ()) if nac.data else {}
    extra = dict(extra_tensors or {})
    user = list(inputs)
    results = [None] * len(nac.ops)
    for index, ins in enumerate(nac.ops):
        if ins.a == SystemOp.INPUT:
            if ins.b == 0:
                if not user:
                    raise NacRuntimeError(f"instruction {index}: more <INPUT B=0> than inputs "
                                        f"given")
                results[index] = _f32(user.pop(0))
            elif ins.b == 1:
                pid = ins.const_ids[0]
                results[index] = _load_param(nac, pid, params.get(pid), tensors_by_pid)
            elif ins.b == 3:
                name = input_names.get(index)
                if name in extra:
                    results[index] = extra[name]
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
            values = [results[index + d] for d in ins.d]
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
                value = constants.get(arg.value)
                args.append(list(value) if isinstance(value, tuple) else value)
            else:
                args.append(results[arg.value])
        try:
            results[index] = kernel(*args)
        except (ValueError, TypeError, IndexError) as exc:
            raise NacRuntimeError(f"instruction {index} ({name}): {exc}") from None
    raise NacRuntimeError("the model has no <OUTPUT B=0>")
