"""C-Kernel-Engine IR v2 importer: the shipped example (imported, written, run, and checked
against a numpy decoder written here), hand-written graphs per kernel against numpy, and
malformed files whose errors name the node or buffer and the field.

``data/ckernel_ir_v2_tiny.json`` is a byte-for-byte copy of the one IR v2 example shipped
with the spec (``ir-examples/ckernel/ir_v2_tiny_generated.json``: 2 layers, embed 64,
2 heads of 32, intermediate 128, 64 tokens; 52 KB). The ``kernel_maps/`` beside it are the
generator's inputs, not IR v2 files.
"""

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from nac import dumps, loads, read_nac, write_nac
from nac.compile import compile_graph
from nac.import_ckernel import CKernelError, import_ckernel
from nac.runtime import run

DATA = Path(__file__).parent / "data"
SHIPPED_PATH = DATA / "ckernel_ir_v2_tiny.json"
SHIPPED = json.loads(SHIPPED_PATH.read_text())


def execute(graph, inputs):
    nac, _, _ = compile_graph(graph)
    return run(loads(dumps(nac)), inputs)


# --- independent numpy definitions of the kernels (head-major layouts as in the engine) --

def np_rmsnorm(x, gamma, eps):
    return x / np.sqrt((x.astype(np.float64) ** 2).mean(axis=-1, keepdims=True) + eps) * gamma


def np_rope(x, theta):
    """Rotate-half RoPE on [heads, tokens, head_dim] at positions 0..tokens-1."""
    _, t, d = x.shape
    half = d // 2
    freq = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angle = np.arange(t)[:, None] * freq[None, :]
    cos, sin = np.cos(angle), np.sin(angle)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def np_causal_attention(q, k, v):
    """Per query head h, kv head h * kv_heads // heads; token i sees tokens 0..i."""
    h, t, d = q.shape
    out = np.zeros_like(q, dtype=np.float64)
    for head in range(h):
        kv = head * k.shape[0] // h
        for i in range(t):
            s = np.array([q[head, i] @ k[kv, j] for j in range(i + 1)]) / np.sqrt(d)
            p = np.exp(s - s.max())
            p /= p.sum()
            out[head, i] = sum(p[j] * v[kv, j] for j in range(i + 1))
    return out


def np_swiglu(f):
    n = f.shape[-1] // 2
    gate, up = f[:, :n], f[:, n:]
    return gate / (1 + np.exp(-gate)) * up


def np_layer(x, w, eps, theta):
    h1 = np_rmsnorm(x, w["ln1_gamma"], eps)
    q = np.einsum("te,hde->htd", h1, w["wq"]) + w["bq"][:, None, :]
    k = np.einsum("te,hde->htd", h1, w["wk"]) + w["bk"][:, None, :]
    v = np.einsum("te,hde->htd", h1, w["wv"]) + w["bv"][:, None, :]
    att = np_causal_attention(np_rope(q, theta), np_rope(k, theta), v)
    r1 = x + np.einsum("htd,hed->te", att, w["wo"]) + w["bo"]
    h2 = np_rmsnorm(r1, w["ln2_gamma"], eps)
    return r1 + np_swiglu(h2 @ w["w1"].T + w["b1"]) @ w["w2"].T + w["b2"]


# --- the shipped example --------------------------------------------------------------

@pytest.mark.parametrize("tokens", [None, 5])
def test_shipped_example_imports_writes_and_runs(tmp_path, tokens):
    graph, info = import_ckernel(SHIPPED_PATH, tokens=tokens)
    t = tokens or 64
    assert info.nodes == 22 and info.skipped == ()
    assert info.inputs == (("input", (t, 64)),)
    assert info.outputs == ("layers.1.output",)
    assert info.dimensions["tokens"] == t
    # 14 weights per layer, rope caches and the two constant rope matrices.
    assert sum(n.kind == "param" for n in graph.nodes) == 2 * 14 + 2 + 2
    nac, _, _ = compile_graph(graph)
    write_nac(nac, tmp_path / "tiny.nac")
    back = read_nac(tmp_path / "tiny.nac")
    assert back == nac
    x = np.random.default_rng(0).standard_normal((t, 64)).astype(np.float32)
    (out,) = run(back, [x])
    assert out.shape == (t, 64) and out.dtype == np.float32
    assert np.isfinite(out).all()


LAYER_WEIGHTS = {"ln1_gamma": (64,), "wq": (2, 32, 64), "bq": (2, 32), "wk": (2, 32, 64),
                 "bk": (2, 32), "wv": (2, 32, 64), "bv": (2, 32), "wo": (2, 64, 32),
                 "bo": (64,), "ln2_gamma": (64,), "w1": (256, 64), "b1": (256,),
                 "w2": (64, 128), "b2": (64,)}


def random_weights(seed, layers=2):
    rng = np.random.default_rng(seed)
    out = {}
    for layer in range(layers):
        for name, shape in LAYER_WEIGHTS.items():
            scale = 1.0 if "gamma" in name else 0.2
            base = 1.0 if "gamma" in name else 0.0
            out[f"layers.{layer}.{name}"] = (base + scale * rng.standard_normal(shape)).astype(
                np.float32)
    return out


def test_shipped_example_with_safetensors_weights_matches_numpy_decoder(tmp_path):
    weights = random_weights(1)
    save_file(weights, str(tmp_path / "w.safetensors"))
    graph, info = import_ckernel(SHIPPED_PATH, tokens=7, weights=tmp_path / "w.safetensors")
    assert info.weights.endswith("w.safetensors")
    x = np.random.default_rng(2).standard_normal((7, 64)).astype(np.float32)
    (out,) = execute(graph, [x])
    want = x.astype(np.float64)
    for layer in range(2):
        w = {name: weights[f"layers.{layer}.{name}"].astype(np.float64) for name in LAYER_WEIGHTS}
        want = np_layer(want, w, eps=1e-5, theta=10000.0)
    np.testing.assert_allclose(out, want, rtol=2e-4, atol=2e-4)


def test_shipped_example_without_rope_skips_the_rope_nodes():
    model = copy.deepcopy(SHIPPED)
    model["config"]["rope_theta"] = 0
    graph, info = import_ckernel(model, tokens=3)
    assert info.skipped == ((2, "rope"), (13, "rope")) and info.nodes == 20
    (out,) = execute(graph, [np.ones((3, 64), np.float32)])
    assert out.shape == (3, 64) and np.isfinite(out).all()


def test_synthesised_weights_are_deterministic_per_seed():
    a, _ = import_ckernel(SHIPPED_PATH, tokens=2, seed=5)
    b, _ = import_ckernel(json.loads(SHIPPED_PATH.read_text()), tokens=2, seed=5)
    c, _ = import_ckernel(SHIPPED_PATH, tokens=2, seed=6)
    assert a.tensors.keys() == b.tensors.keys() == c.tensors.keys()
    for name in a.tensors:
        np.testing.assert_array_equal(a.tensors[name], b.tensors[name])
    assert not np.array_equal(a.tensors["layers.0.wq"], c.tensors["layers.0.wq"])
    np.testing.assert_array_equal(a.tensors["layers.0.ln1_gamma"].shape, (64,))


def test_weights_file_missing_or_misshapen(tmp_path):
    weights = random_weights(3)
    del weights["layers.1.w2"]
    save_file(weights, str(tmp_path / "partial.safetensors"))
    with pytest.raises(CKernelError, match=r"nodes\[20\] \(layer 1, mlp_down\): binding 'w2': "
                       r"weight 'layers.1.w2' is not in .*partial.safetensors"):
        import_ckernel(SHIPPED_PATH, weights=tmp_path / "partial.safetensors")
    weights["layers.1.w2"] = np.zeros((128, 64), np.float32)
    save_file(weights, str(tmp_path / "bad.safetensors"))
    with pytest.raises(CKernelError, match=r"weight 'layers.1.w2' in .* has shape \[128, 64\], "
                       r"the buffer \[64, 128\]"):
        import_ckernel(SHIPPED_PATH, weights=tmp_path / "bad.safetensors")
    with pytest.raises(CKernelError, match=r"ckernel_ir_v2_tiny\.json: weights file: .*No such "
                       r"file"):
        import_ckernel(SHIPPED_PATH, weights=tmp_path / "none.safetensors")


# --- hand-written graphs ----------------------------------------------------------------

def ir(dims, buffers, nodes, **config):
    """An IR v2 model in the spec's form (numeric ``dim`` ids, ``mult``/``div``).

    *buffers*: ``(name, role, shape[, extra])`` with shape entries a dimension name or
    ``(name, mult, div)``; *nodes*: ``(layer, op, {arg: buffer}[, condition])``.
    """
    ids = {name: k for k, name in enumerate(dims)}

    def extent(e):
        name, mult, div = (e, 1, 1) if isinstance(e, str) else e
        return {"dim": ids[name], "mult": mult, "div": div}

    return {
        "version": 2,
        "config": {"rms_norm_eps": 1e-5, "rope_theta": 10000.0, **config},
        "dimensions": [{"id": k, "name": n, "value": v} for k, (n, v) in enumerate(dims.items())],
        "buffers": [{"name": b[0], "scope": "layer", "role": b[1], "dtype": "fp32",
                     "shape": [extent(e) for e in b[2]], "alias_of": None, "condition": None,
                     **(b[3] if len(b) > 3 else {})} for b in buffers],
        "nodes": [{"layer": n[0], "op": n[1], "kernel": n[1] + "_forward", "flags": 0,
                   "condition": n[3] if len(n) > 3 else None,
                   "bindings": [{"arg": a, "buffer": buf} for a, buf in n[2].items()]}
                  for n in nodes],
    }


def with_weights(tmp_path, model, weights, **options):
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()},
              str(tmp_path / "w.safetensors"))
    return import_ckernel(model, weights=tmp_path / "w.safetensors", **options)


RNG = np.random.default_rng(7)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_rmsnorm(tmp_path):
    model = ir({"tokens": 3, "embed": 8},
               [("x", "input", ["tokens", "embed"]), ("g", "weight", ["embed"]),
                ("y", "output", ["tokens", "embed"]), ("r", "activation", ["tokens"])],
               [(0, "rmsnorm", {"input": "x", "gamma": "g", "out": "y", "rstd": "r"})],
               rms_norm_eps=1e-3)
    g = randn(8)
    graph, info = with_weights(tmp_path, model, {"layers.0.g": g})
    x = randn(3, 8)
    (out,) = execute(graph, [x])
    want = np.array([[x[t, e] * g[e] / np.sqrt(sum(x[t] ** 2) / 8 + 1e-3) for e in range(8)]
                     for t in range(3)])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    assert info.outputs == ("layers.0.y",)


def test_rope_in_place_with_caches_from_rope_theta():
    model = ir({"tokens": 5, "head_dim": 8, "num_heads": 2, "num_kv_heads": 1},
               [("q", "input", ["num_heads", "tokens", "head_dim"]),
                ("k", "input", ["num_kv_heads", "tokens", "head_dim"]),
                ("cos", "activation", ["tokens", ("head_dim", 1, 2)],
                 {"scope": "global", "condition": "rope_theta"}),
                ("sin", "activation", ["tokens", ("head_dim", 1, 2)],
                 {"scope": "global", "condition": "rope_theta"})],
               [(0, "rope", {"q": "q", "k": "k", "cos_cache": "cos", "sin_cache": "sin"},
                 "rope_theta>0")], rope_theta=500.0)
    graph, info = import_ckernel(model)
    assert info.outputs == ("layers.0.q", "layers.0.k")
    q, k = randn(2, 5, 8), randn(1, 5, 8)
    out_q, out_k = execute(graph, [q, k])
    # Position t, pair (i, i + 4): rotation by t * 500 ** (-i / 4).
    want_q = np.empty_like(q)
    for h in range(2):
        for t in range(5):
            for i in range(4):
                a = t * 500.0 ** (-2 * i / 8)
                want_q[h, t, i] = q[h, t, i] * np.cos(a) - q[h, t, i + 4] * np.sin(a)
                want_q[h, t, i + 4] = q[h, t, i] * np.sin(a) + q[h, t, i + 4] * np.cos(a)
    np.testing.assert_allclose(out_q, want_q, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out_k, np_rope(k.astype(np.float64), 500.0), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_causal_attention_with_grouped_kv_heads(kv_heads):
    model = ir({"tokens": 6, "head_dim": 4, "num_heads": 4, "num_kv_heads": kv_heads},
               [("q", "input", ["num_heads", "tokens", "head_dim"]),
                ("k", "input", ["num_kv_heads", "tokens", "head_dim"]),
                ("v", "input", ["num_kv_heads", "tokens", "head_dim"]),
                ("s", "activation", ["num_heads", "tokens", "tokens"],
                 {"condition": "training_enabled"}),
                ("o", "output", ["num_heads", "tokens", "head_dim"])],
               [(0, "attention", {"q": "q", "k": "k", "v": "v", "scores": "s",
                                  "attn_out": "o"})])
    graph, _ = import_ckernel(model)
    q, k, v = randn(4, 6, 4), randn(kv_heads, 6, 4), randn(kv_heads, 6, 4)
    (out,) = execute(graph, [q, k, v])
    np.testing.assert_allclose(out, np_causal_attention(q, k, v), rtol=1e-5, atol=1e-6)
    # Causality: changing the last token's k and v leaves earlier rows unchanged.
    k2, v2 = k.copy(), v.copy()
    k2[:, -1] += 3
    v2[:, -1] -= 2
    (out2,) = execute(graph, [q, k2, v2])
    np.testing.assert_array_equal(out2[:, :-1], out[:, :-1])


def test_swiglu_mlp_with_residual(tmp_path):
    model = ir({"tokens": 4, "embed": 6, "intermediate": 5},
               [("x", "input", ["tokens", "embed"]), ("w1", "weight", [("intermediate", 2, 1),
                                                                      "embed"]),
                ("b1", "weight", [("intermediate", 2, 1)]),
                ("f", "output", ["tokens", ("intermediate", 2, 1)]),
                ("s", "output", ["tokens", "intermediate"]),
                ("w2", "weight", ["embed", "intermediate"]),
                ("m", "output", ["tokens", "embed"]), ("y", "output", ["tokens", "embed"])],
               [(0, "mlp_up", {"input": "x", "w1": "w1", "b1": "b1", "fc1_out": "f"}),
                (0, "swiglu", {"fc1_out": "f", "swiglu_out": "s"}),
                (0, "mlp_down", {"swiglu_out": "s", "w2": "w2", "mlp_out": "m"}),
                (0, "residual_add", {"a": "x", "b": "m", "out": "y"})])
    w1, b1, w2 = randn(10, 6), randn(10), randn(6, 5)
    graph, _ = with_weights(tmp_path, model, {"layers.0.w1": w1, "layers.0.b1": b1,
                                              "layers.0.w2": w2})
    x = randn(4, 6)
    (out,) = execute(graph, [x])
    f = x @ w1.T + b1
    gate, up = f[:, :5], f[:, 5:]
    want = x + (gate * (1 / (1 + np.exp(-gate))) * up) @ w2.T
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_qkv_projection_and_attention_projection(tmp_path):
    model = ir({"tokens": 3, "embed": 6, "head_dim": 2, "num_heads": 3, "num_kv_heads": 3},
               [("x", "input", ["tokens", "embed"]),
                ("wq", "weight", ["num_heads", "head_dim", "embed"]),
                ("wk", "weight", ["num_kv_heads", "head_dim", "embed"]),
                ("wv", "weight", ["num_kv_heads", "head_dim", "embed"]),
                ("bv", "weight", ["num_kv_heads", "head_dim"]),
                ("q", "output", ["num_heads", "tokens", "head_dim"]),
                ("k", "output", ["num_kv_heads", "tokens", "head_dim"]),
                ("v", "output", ["num_kv_heads", "tokens", "head_dim"]),
                ("wo", "weight", ["num_heads", "embed", "head_dim"]),
                ("bo", "weight", ["embed"]), ("p", "output", ["tokens", "embed"])],
               [(0, "qkv_project", {"input": "x", "wq": "wq", "wk": "wk", "wv": "wv",
                                    "bv": "bv", "q": "q", "k": "k", "v": "v"}),
                (0, "attn_proj", {"attn_out": "v", "wo": "wo", "bo": "bo", "proj_tmp": "p"})])
    w = {n: randn(*s) for n, s in [("wq", (3, 2, 6)), ("wk", (3, 2, 6)), ("wv", (3, 2, 6)),
                                   ("bv", (3, 2)), ("wo", (3, 6, 2)), ("bo", (6,))]}
    graph, info = with_weights(tmp_path, model, {f"layers.0.{k}": v for k, v in w.items()})
    assert info.outputs == ("layers.0.q", "layers.0.k", "layers.0.p")
    x = randn(3, 6)
    q, k, p = execute(graph, [x])
    want_q = np.stack([x @ w["wq"][h].T for h in range(3)])
    want_k = np.stack([x @ w["wk"][h].T for h in range(3)])
    want_v = np.stack([x @ w["wv"][h].T + w["bv"][h] for h in range(3)])
    want_p = sum(want_v[h] @ w["wo"][h].T for h in range(3)) + w["bo"]
    np.testing.assert_allclose(q, want_q, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(k, want_k, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(p, want_p, rtol=1e-5, atol=1e-5)


def two_layer_residual(**config):
    return ir({"tokens": 2, "embed": 3},
              [("input", "input", ["tokens", "embed"]), ("output", "output", ["tokens", "embed"])],
              [(0, "residual_add", {"a": "input", "b": "input", "out": "output"}),
               (1, "residual_add", {"a": "input", "b": "input", "out": "output"},
                "num_layers > 1 && !(skip_second || training_enabled)")], **config)


def test_layers_chain_and_conditions_skip_nodes():
    x = randn(2, 3)
    graph, info = import_ckernel(two_layer_residual(num_layers=2))
    assert info.outputs == ("layers.1.output",) and info.skipped == ()
    np.testing.assert_allclose(execute(graph, [x])[0], 4 * x)
    graph, info = import_ckernel(two_layer_residual(num_layers=2, skip_second=True))
    assert info.outputs == ("layers.0.output",) and info.skipped == ((1, "residual_add"),)
    np.testing.assert_allclose(execute(graph, [x])[0], 2 * x)


def test_alias_shares_one_weight(tmp_path):
    model = ir({"tokens": 2, "embed": 3},
               [("x", "input", ["tokens", "embed"]), ("w", "weight", ["embed", "embed"]),
                ("w_tied", "weight", ["embed", "embed"], {"alias_of": "w"}),
                ("h", "output", ["tokens", "embed"]), ("y", "output", ["tokens", "embed"])],
               [(0, "mlp_up", {"input": "x", "w1": "w", "fc1_out": "h"}),
                (0, "mlp_down", {"swiglu_out": "h", "w2": "w_tied", "mlp_out": "y"})])
    graph, _ = import_ckernel(model)
    assert [n.name for n in graph.nodes if n.kind == "param"] == ["layers.0.w"]
    x = randn(2, 3)
    w = graph.tensors["layers.0.w"]
    np.testing.assert_allclose(execute(graph, [x])[0], x @ w.T @ w.T, rtol=1e-5, atol=1e-6)


def test_global_name_equal_to_a_layer_weight_name_is_an_error():
    model = ir({"tokens": 2, "embed": 3},
               [("x", "input", ["tokens", "embed"]), ("w", "weight", ["embed", "embed"]),
                ("layers.0.w", "weight", ["embed", "embed"], {"scope": "global"}),
                ("h", "output", ["tokens", "embed"]), ("y", "output", ["tokens", "embed"])],
               [(0, "mlp_up", {"input": "x", "w1": "w", "fc1_out": "h"}),
                (0, "mlp_down", {"swiglu_out": "h", "w2": "layers.0.w", "mlp_out": "y"})])
    with pytest.raises(CKernelError, match=r"two parameters named 'layers.0.w'"):
        import_ckernel(model)


# --- malformed files ----------------------------------------------------------------------

def mutated(edit):
    model = copy.deepcopy(SHIPPED)
    edit(model)
    return model


def drop(obj, key):
    del obj[key]


def set_(obj, key, value):
    obj[key] = value


def binding(model, node, arg):
    return next(b for b in model["nodes"][node]["bindings"] if b["arg"] == arg)


ERRORS = [
    (lambda m: drop(m, "version"), r"t\.json: missing field 'version'"),
    (lambda m: set_(m, "version", 3), r"field 'version' is 3; this importer reads IR v2"),
    (lambda m: drop(m, "dimensions"), r"t\.json: missing field 'dimensions'"),
    (lambda m: set_(m["dimensions"][0], "value", "64"),
     r"dimensions\[0\]: field 'value' must be an integer, not \"64\""),
    (lambda m: set_(m["dimensions"][0], "value", 0),
     r"dimensions\[0\] \(tokens\): field 'value' must be positive"),
    (lambda m: set_(m["dimensions"][1], "id", 0), r"dimensions\[1\] \(embed\): duplicate "
     r"dimension id 0"),
    (lambda m: set_(m["buffers"][3]["shape"][1], "div", 3),
     r"buffers\[3\] \('rope_cos_cache'\): shape\[1\]: head_dim \(32\) \* 1 / 3 is not an "
     r"integer"),
    (lambda m: set_(m["buffers"][0]["shape"][0], "dim", "vocabulary"),
     r"buffers\[0\] \('token_emb'\): shape\[0\]: field 'dim': no dimension named 'vocabulary'"),
    (lambda m: set_(m["buffers"][0]["shape"][0], "dim_id", 9),
     r"shape\[0\]: field 'dim_id' 9 is 'aligned_intermediate', field 'dim' names 'vocab'"),
    (lambda m: set_(m["buffers"][0]["shape"][0], "mult", -1),
     r"shape\[0\]: fields 'mult' and 'div' must be positive"),
    (lambda m: set_(m["buffers"][0]["shape"][0], "mult", 1.5),
     r"shape\[0\]: field 'mult' must be an integer, not 1.5"),
    (lambda m: drop(m["buffers"][20], "shape"), r"buffers\[20\] \('ln1_out'\): missing field "
     r"'shape'"),
    (lambda m: set_(m["buffers"][20], "scope", "encoder"),
     r"buffers\[20\] \('ln1_out'\): field 'scope' must be one of \['global', 'layer'\]"),
    (lambda m: set_(m["buffers"][10], "alias_of", "token_embedding"),
     r"buffers\[10\] \('lm_head_weight'\): field 'alias_of' names no buffer: "
     r"'token_embedding'"),
    (lambda m: set_(m["buffers"][0], "alias_of", "lm_head_weight"),
     r"field 'alias_of' forms a cycle"),
    (lambda m: m["buffers"].append(dict(m["buffers"][0])),
     r"buffers\[77\] \('token_emb'\): duplicate buffer name"),
    (lambda m: set_(m["buffers"][3], "condition", "rope_theta >"),
     r"buffers\[3\] \('rope_cos_cache'\): field 'condition': condition 'rope_theta >': "
     r"unexpected end"),
    (lambda m: set_(m["nodes"][2], "condition", "rope_theta $ 0"),
     r"nodes\[2\] \(layer 0, rope\): field 'condition': condition 'rope_theta \$ 0': "
     r"unexpected character at column 12"),
    (lambda m: drop(m["nodes"][4], "bindings"),
     r"nodes\[4\] \(layer 0, attn_proj\): missing field 'bindings'"),
    (lambda m: set_(m["nodes"][4], "layer", "0"),
     r"nodes\[4\]: field 'layer' must be an integer, not \"0\""),
    (lambda m: set_(m["nodes"][3], "op", "flash_attention"),
     r"nodes\[3\] \(layer 0, flash_attention\): field 'op': kernel 'flash_attention' is not "
     r"supported"),
    (lambda m: set_(binding(m, 1, "wq"), "buffer", "w_q"),
     r"nodes\[1\] \(layer 0, qkv_project\): bindings\[1\]: field 'buffer': no buffer named "
     r"'w_q'"),
    (lambda m: set_(binding(m, 1, "wq"), "arg", "w_query"),
     r"nodes\[1\] \(layer 0, qkv_project\): bindings\[1\]: field 'arg': qkv_project has no "
     r"argument 'w_query'"),
    (lambda m: m["nodes"][0]["bindings"].pop(1),
     r"nodes\[0\] \(layer 0, rmsnorm\): required argument 'gamma' is not bound"),
    (lambda m: set_(binding(m, 3, "q"), "buffer", "attn_out"),
     r"nodes\[3\] \(layer 0, attention\): binding 'q' reads buffer 'attn_out' \(role "
     r"'output'\) before any node writes it"),
    (lambda m: set_(binding(m, 0, "out"), "buffer", "ln2_gamma"),
     r"nodes\[0\] \(layer 0, rmsnorm\): binding 'out' writes weight buffer 'ln2_gamma'"),
    (lambda m: set_(binding(m, 7, "w1"), "buffer", "w2"),
     r"nodes\[7\] \(layer 0, mlp_up\): binding 'w1' must be \[out, 64\], not \[64, 128\]"),
    (lambda m: set_(binding(m, 8, "swiglu_out"), "buffer", "fc1_out"),
     r"nodes\[8\] \(layer 0, swiglu\): binding 'swiglu_out': buffer 'fc1_out' has shape "
     r"\[64, 256\], the kernel computes \[64, 128\]"),
    (lambda m: set_(binding(m, 5, "b"), "buffer", "q"),
     r"nodes\[5\] \(layer 0, residual_add\): bindings 'a' \[64, 64\] and 'b' \[2, 64, 32\] "
     r"differ"),
    (lambda m: set_(m["nodes"][0], "layer", -1),
     r"nodes\[0\] \(layer -1, rmsnorm\): layer-scope buffer 'input' bound in a global node"),
    (lambda m: drop(m["config"], "rms_norm_eps"),
     r"nodes\[0\] \(layer 0, rmsnorm\): config: missing field 'rms_norm_eps'"),
    (lambda m: set_(m["config"], "rope_theta", "1e4") or set_(m["buffers"][3], "condition", None),
     r"nodes\[2\] \(layer 0, rope\): binding 'cos_cache': buffer 'rope_cos_cache' is written "
     r"by no node and config field 'rope_theta' \(\"1e4\"\) is not a positive finite number"),
    (lambda m: set_(m["config"], "rms_norm_eps", 10**400),
     r"nodes\[0\] \(layer 0, rmsnorm\): config field 'rms_norm_eps' must be finite and >= 0, "
     r"not inf"),
    (lambda m: set_(m["nodes"][2], "condition", "rope_theta > 1e999 || ("),
     r"nodes\[2\] \(layer 0, rope\): field 'condition': .*: unexpected end"),
    (lambda m: set_(m["dimensions"][2], "value", 80),
     r"dimensions: 'aligned_embed' \(80\) differs from 'embed' \(64\); padded layouts are not "
     r"supported"),
    (lambda m: set_(m, "nodes", []), r"t\.json: the model produces no output"),
]


@pytest.mark.parametrize(("edit", "message"), ERRORS)
def test_errors_name_the_place_and_the_field(edit, message):
    with pytest.raises(CKernelError, match=message):
        import_ckernel(mutated(edit), path="t.json")


def test_bad_json_and_bad_tokens(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 2,\n "nodes": [}\n')
    with pytest.raises(CKernelError, match=r"bad\.json:2:12: not JSON"):
        import_ckernel(bad)
    with pytest.raises(CKernelError, match="tokens must be a positive integer, not 0"):
        import_ckernel(SHIPPED, tokens=0)
    model = two_layer_residual()
    model["dimensions"][0]["name"] = "seq"
    model["buffers"][0]["shape"][0]["dim"] = 0
    with pytest.raises(CKernelError, match="no dimension named 'tokens'"):
        import_ckernel(model, tokens=4)
    with pytest.raises(CKernelError, match=r"nodes\[0\] \(layer 0, rmsnorm\): binding 'input': "
                       r"buffer 'input' \[1000000, 64\] has more than 1048576 elements"):
        import_ckernel(SHIPPED, tokens=10**6, max_elements=1 << 20)


# --- command line -------------------------------------------------------------------------

def test_cli_compile_detects_the_format_and_import(tmp_path, capsys):
    from nac.compile_cli import detect_format
    from npu.tools.cli import main

    assert detect_format(SHIPPED_PATH) == "ckernel-ir2"
    assert detect_format(DATA / "ark_model.json") == "ark"
    assert detect_format(DATA / "simple_module.ir") == "mind"
    out = tmp_path / "tiny.nac"
    assert main(["compile", str(SHIPPED_PATH), "-o", str(out), "--tokens", "4"]) == 0
    text = capsys.readouterr().out
    assert "ckernel-ir2: 22 nodes expanded, 0 skipped" in text
    assert f"from {SHIPPED_PATH} (ckernel-ir2)" in text
    nac = read_nac(out)
    (y,) = run(nac, [np.ones((4, 64), np.float32)])
    assert y.shape == (4, 64) and np.isfinite(y).all()
    copy_path = tmp_path / "model.txt"  # no telling suffix: --from decides
    copy_path.write_text(SHIPPED_PATH.read_text())
    assert main(["compile", str(copy_path), "--from", "ckernel-ir2", "-o", str(out),
                 "--tokens", "3", "--seed", "2"]) == 0
    assert main(["import", "ckernel-ir2", str(SHIPPED_PATH), "-o", str(out), "--tokens",
                 "2"]) == 0
    assert read_nac(out).num_inputs == 1
    capsys.readouterr()
    assert main(["import", "ckernel-ir2", str(DATA / "ark_model.json"), "-o", str(out)]) == 1
    assert "missing field 'version'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:  # an option that does not apply: usage error
        main(["compile", str(DATA / "ark_model.json"), "-o", str(out), "--tokens", "2"])
    assert usage.value.code == 2
    assert "--tokens applies only to ckernel-ir2 imports, not ark" in capsys.readouterr().err
    assert main(["compile", str(DATA / "simple_module.ir"), "-o", str(out)]) == 0
    assert "(mind)" in capsys.readouterr().out
