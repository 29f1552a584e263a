"""The supported IR v2 kernels: their argument tables (:data:`KERNELS`) and their
expansions into NAC graph ops (:data:`EXPAND`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nac.ckernel.fields import CKernelError, _field, _need, _real
from nac.ir import Ref

# Kernels: argument tables (inputs, optional inputs, outputs, optional outputs).

@dataclass(frozen=True)
class _Kernel:
    inputs: tuple
    optional_inputs: tuple
    outputs: tuple
    side_outputs: tuple  # bound or not, never computed


KERNELS = {
    "rmsnorm": _Kernel(("input", "gamma"), (), ("out",), ("rstd",)),
    "qkv_project": _Kernel(("input", "wq", "wk", "wv"), ("bq", "bk", "bv"), ("q", "k", "v"),
                           ()),
    "rope": _Kernel(("q", "k", "cos_cache", "sin_cache"), (), ("q", "k"), ()),
    "attention": _Kernel(("q", "k", "v"), (), ("attn_out",), ("scores",)),
    "attn_proj": _Kernel(("attn_out", "wo"), ("bo",), ("proj_tmp",), ("proj_scratch",)),
    "residual_add": _Kernel(("a", "b"), (), ("out",), ()),
    "mlp_up": _Kernel(("input", "w1"), ("b1",), ("fc1_out",), ()),
    "swiglu": _Kernel(("fc1_out",), (), ("swiglu_out",), ()),
    "mlp_down": _Kernel(("swiglu_out", "w2"), ("b2",), ("mlp_out",), ()),
}
"""Supported kernels by IR v2 ``op``: the binding names each one reads and writes."""


# ---------------------------------------------------------------------------------------
# Kernel expansions: each takes the importer, the bound input nodes, the config, and the
# location string, and returns {output binding: node}.

def _expect(b, node, shape, what, where):
    got = b.shape(node)
    if tuple(got) != tuple(shape):
        raise CKernelError(f"{where}: binding {what!r} has shape {list(got)}, expected "
                           f"{list(shape)}")


def _rmsnorm(b, x, where):
    _need(len(b.shape(x["input"])) >= 1, where, "binding 'input' must have rank >= 1")
    e = b.shape(x["input"])[-1]
    _expect(b, x["gamma"], (e,), "gamma", where)
    eps = _real(_field(b.config, "rms_norm_eps", float, f"{where}: config"))
    _need(math.isfinite(eps) and eps >= 0, where,
          f"config field 'rms_norm_eps' must be finite and >= 0, not {eps}")
    inp = x["input"]
    square = b.binary("mul", inp, inp)
    mean = b.op("aten.mean.dim", [Ref(square), (-1,), True, None],
                ["self", "dim", "keepdim", "dtype"], (*b.shape(inp)[:-1], 1))
    shifted = b.op("aten.add.Tensor", [Ref(mean), float(eps), 1], ["self", "other", "alpha"],
                   b.shape(mean))
    rstd = b.op("aten.rsqrt.default", [Ref(shifted)], ["self"], b.shape(mean))
    normed = b.binary("mul", inp, rstd)
    return {"out": b.binary("mul", normed, x["gamma"])}


def _heads(b, x, w_name, b_name, where):
    inp, w = x["input"], x[w_name]
    _need(len(b.shape(inp)) == 2, where,
          f"binding 'input' must be [tokens, embed], not {list(b.shape(inp))}")
    t, e = b.shape(inp)
    _need(len(b.shape(w)) == 3 and b.shape(w)[2] == e, where,
          f"binding {w_name!r} must be [heads, head_dim, {e}], not {list(b.shape(w))}")
    h, d, _ = b.shape(w)
    bias = None
    if b_name in x:
        _expect(b, x[b_name], (h, d), b_name, where)
        bias = b.reshape(x[b_name], (h * d,))
    out = b.linear(inp, b.reshape(w, (h * d, e)), bias, h * d)
    return b.permute(b.reshape(out, (t, h, d)), (1, 0, 2))


def _qkv_project(b, x, where):
    q = _heads(b, x, "wq", "bq", where)
    k = _heads(b, x, "wk", "bk", where)
    v = _heads(b, x, "wv", "bv", where)
    _need(b.shape(k) == b.shape(v), where,
          f"wk and wv give different shapes {list(b.shape(k))} and {list(b.shape(v))}")
    _need(b.shape(q)[2] == b.shape(k)[2], where,
          f"q and k head sizes differ: {b.shape(q)[2]} and {b.shape(k)[2]}")
    return {"q": q, "k": k, "v": v}


def _rope(b, x, where):
    q, k = x["q"], x["k"]
    for name in ("q", "k"):
        _need(len(b.shape(x[name])) == 3, where,
              f"binding {name!r} must be [heads, tokens, head_dim], not "
              f"{list(b.shape(x[name]))}")
    _, t, d = b.shape(q)
    _need(b.shape(k)[1:] == (t, d), where,
          f"bindings 'q' {list(b.shape(q))} and 'k' {list(b.shape(k))} differ in tokens or "
          f"head_dim")
    _need(d % 2 == 0, where, f"head_dim {d} must be even for rope")
    half = d // 2
    for name in ("cos_cache", "sin_cache"):
        shape = b.shape(x[name])
        _need(len(shape) == 2 and shape[1] == half and shape[0] >= t, where,
              f"binding {name!r} has shape {list(shape)}, expected [>= {t}, {half}]")
    widen = b.constant(f"rope_widen_{half}", lambda: np.concatenate(
        [np.eye(half), np.eye(half)], axis=1))
    rotate = b.constant(f"rope_rotate_half_{d}", lambda: _rotate_half_matrix(d))
    tables = []
    for name in ("cos_cache", "sin_cache"):
        cache = x[name]
        if b.shape(cache)[0] != t:
            cache = b.op("mind.slice", [Ref(cache), (0, t, 1, 0, half, 1)], ["self", "ranges"],
                         (t, half))
        tables.append(b.op("aten.matmul.default", [Ref(cache), Ref(widen)], ["self", "other"],
                           (t, d)))
    cos, sin = tables
    out = {}
    for name in ("q", "k"):
        value = x[name]
        rotated = b.op("aten.matmul.default", [Ref(value), Ref(rotate)], ["self", "other"],
                       b.shape(value))
        out[name] = b.binary("add", b.binary("mul", value, cos),
                             b.binary("mul", rotated, sin))
    return out


def _rotate_half_matrix(d):
    """``x @ R = concat(-x[d/2:], x[:d/2])``."""
    half = d // 2
    r = np.zeros((d, d))
    r[np.arange(half) + half, np.arange(half)] = -1.0
    r[np.arange(half), np.arange(half) + half] = 1.0
    return r


def _attention(b, x, where):
    q, k, v = x["q"], x["k"], x["v"]
    for name in ("q", "k", "v"):
        _need(len(b.shape(x[name])) == 3, where,
              f"binding {name!r} must be [heads, tokens, head_dim], not "
              f"{list(b.shape(x[name]))}")
    h, t, d = b.shape(q)
    kvh = b.shape(k)[0]
    _expect(b, k, (kvh, t, d), "k", where)
    _expect(b, v, (kvh, t, d), "v", where)
    _need(h % kvh == 0, where, f"{h} query heads are not a multiple of {kvh} kv heads")
    scale = 1.0 / math.sqrt(d)
    names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale"]
    if kvh == h:
        return {"attn_out": b.op("aten.scaled_dot_product_attention.default",
                                 [Ref(q), Ref(k), Ref(v), None, 0.0, True, scale], names,
                                 (h, t, d))}
    group = h // kvh
    qg = b.reshape(q, (kvh, group, t, d))
    kg = b.reshape(k, (kvh, 1, t, d))
    vg = b.reshape(v, (kvh, 1, t, d))
    out = b.op("aten.scaled_dot_product_attention.default",
               [Ref(qg), Ref(kg), Ref(vg), None, 0.0, True, scale], names, (kvh, group, t, d))
    return {"attn_out": b.reshape(out, (h, t, d))}


def _attn_proj(b, x, where):
    a, wo = x["attn_out"], x["wo"]
    _need(len(b.shape(a)) == 3, where,
          f"binding 'attn_out' must be [heads, tokens, head_dim], not {list(b.shape(a))}")
    h, t, d = b.shape(a)
    _need(len(b.shape(wo)) == 3 and b.shape(wo)[0] == h and b.shape(wo)[2] == d, where,
          f"binding 'wo' must be [{h}, embed, {d}], not {list(b.shape(wo))}")
    e = b.shape(wo)[1]
    bias = None
    if "bo" in x:
        _expect(b, x["bo"], (e,), "bo", where)
        bias = x["bo"]
    flat = b.reshape(b.permute(a, (1, 0, 2)), (t, h * d))
    weight = b.reshape(b.permute(wo, (1, 0, 2)), (e, h * d))
    return {"proj_tmp": b.linear(flat, weight, bias, e)}


def _dense(inp_name, w_name, b_name, out_name):
    def expand(b, x, where):
        inp, w = x[inp_name], x[w_name]
        _need(len(b.shape(inp)) == 2, where,
              f"binding {inp_name!r} must be [tokens, features], not {list(b.shape(inp))}")
        _need(len(b.shape(w)) == 2 and b.shape(w)[1] == b.shape(inp)[1], where,
              f"binding {w_name!r} must be [out, {b.shape(inp)[1]}], not {list(b.shape(w))}")
        n = b.shape(w)[0]
        bias = None
        if b_name in x:
            _expect(b, x[b_name], (n,), b_name, where)
            bias = x[b_name]
        return {out_name: b.linear(inp, w, bias, n)}

    return expand


def _swiglu(b, x, where):
    inp = x["fc1_out"]
    shape = b.shape(inp)
    _need(len(shape) >= 1 and shape[-1] % 2 == 0, where,
          f"binding 'fc1_out' must have an even last dimension, not {list(shape)}")
    half = shape[-1] // 2
    gate = b.slice_last(inp, 0, half)
    up = b.slice_last(inp, half, shape[-1])
    sig = b.op("aten.sigmoid.default", [Ref(gate)], ["self"], b.shape(gate))
    return {"swiglu_out": b.binary("mul", b.binary("mul", gate, sig), up)}


def _residual_add(b, x, where):
    _need(b.shape(x["a"]) == b.shape(x["b"]), where,
          f"bindings 'a' {list(b.shape(x['a']))} and 'b' {list(b.shape(x['b']))} differ")
    return {"out": b.binary("add", x["a"], x["b"])}


EXPAND = {
    "rmsnorm": _rmsnorm,
    "qkv_project": _qkv_project,
    "rope": _rope,
    "attention": _attention,
    "attn_proj": _attn_proj,
    "residual_add": _residual_add,
    "mlp_up": _dense("input", "w1", "b1", "fc1_out"),
    "swiglu": _swiglu,
    "mlp_down": _dense("swiglu_out", "w2", "b2", "mlp_out"),
}
