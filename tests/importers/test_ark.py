"""ARK model JSON importer: the shipped Llama MLP (imported at full size, run scaled down)
and hand-written models against numpy; malformed files name node, op and field."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from nac import dumps, loads
from nac.compile import compile_graph
from nac.import_ark import ArkError, import_ark
from nac.runtime import run

DATA = Path(__file__).parent / "data"
SHIPPED = json.loads((DATA / "ark_model.json").read_text())


def scaled(model, mapping):
    """The model with every dimension replaced through *mapping* (same structure)."""
    out = copy.deepcopy(model)

    def fix(obj):
        if isinstance(obj, dict):
            for key, value in obj.items():
                if key in ("Shape", "Strides", "PaddedShape") or (key == "DIMS" and \
                        all(isinstance(v, int) for v in value) and len(value) != 2):
                    obj[key] = [mapping.get(v, v) for v in value]
                else:
                    fix(value)
        elif isinstance(obj, list):
            for item in obj:
                fix(item)

    fix(out)
    return out


def test_shipped_model_imports_at_full_size():
    graph, cross = import_ark(DATA / "ark_model.json")
    assert cross == []
    nac, _, _ = compile_graph(graph)
    assert loads(dumps(nac)) == nac
    assert [n.shape for n in graph.nodes if n.kind == "input"] == [
        (1, 512, 4096), (11008, 4096), (11008, 4096), (4096, 11008)]
    assert [graph.nodes[o].shape for o in graph.outputs] == [(1, 512, 4096)]


def test_shipped_model_scaled_down_matches_swiglu():
    # The same graph with 512 -> 6, 4096 -> 8, 11008 -> 12: a SwiGLU MLP,
    # out = (silu(x @ W1^T) * (x @ W3^T)) @ W2^T, with silu(z) = z * sigmoid(z).
    model = scaled(SHIPPED, {512: 6, 4096: 8, 11008: 12})
    graph, _ = import_ark(model)
    nac, _, _ = compile_graph(graph)
    rng = np.random.default_rng(0)
    x, w1, w3, w2 = (rng.standard_normal(n.shape).astype(np.float32)
                     for n in graph.nodes if n.kind == "input")
    (out,) = run(loads(dumps(nac)), [x, w1, w3, w2])
    z = x @ w1.T
    want = ((z / (1 + np.exp(-z))) * (x @ w3.T)) @ w2.T
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def tensor(tid, buf, shape, offsets=None, padded=None):
    return {"Id": tid, "DataType": "FP32", "Buffer": {"Id": buf, "Rank": -1, "SendTags": [],
                                                      "RecvTags": []},
            "Shape": shape, "Strides": padded or shape, "Offsets": offsets or [0] * len(shape)}


def one_node(*ops):
    return {"Rank": 0, "WorldSize": 1,
            "Nodes": [{"Id": 0, "ProducerNodeIds": [], "ConsumerNodeIds": [], "Ops": list(ops)}]}


def op(kind, reads, result, **args):
    return {"Type": kind, "Name": kind.lower(), "IsVirtual": False, "ReadTensors": reads,
            "WriteTensors": [], "ResultTensors": [result], "Args": args}


def test_views_reductions_transpose_scalars():
    # x: [4, 6] in buffer 0. A view of rows 1..2 and columns 2..5 (offsets [1, 2]), then
    # ReduceMax over axis 1 (keepdim), ScalarMul 3, a Transpose [1, 0] of x, ReduceMean.
    model = one_node(
        op("ScalarMul", [tensor(0, 0, [2, 4], [1, 2], [4, 6])], tensor(1, 1, [2, 4]),
           Value={"FLOAT": 3.0}),
        op("ReduceMax", [tensor(1, 1, [2, 4])], tensor(2, 2, [2, 1]), Axis={"INT": 1},
           KeepDim={"BOOL": True}),
        op("Transpose", [tensor(0, 0, [4, 6])], tensor(3, 3, [6, 4]),
           Permutation={"DIMS": [1, 0]}),
        op("ReduceMean", [tensor(3, 3, [6, 4])], tensor(4, 4, [6]), Axis={"INT": -1},
           KeepDim={"BOOL": False}),
    )
    graph, _ = import_ark(model)
    nac, _, _ = compile_graph(graph)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    m, mean = run(nac, [x])
    np.testing.assert_allclose(m, (x[1:3, 2:6] * 3).max(axis=1, keepdims=True))
    np.testing.assert_allclose(mean, x.T.mean(axis=-1))


@pytest.mark.parametrize(("model", "message"), [
    ({"Rank": 0}, "missing field 'Nodes'"),
    (one_node(op("Conv", [tensor(0, 0, [2])], tensor(1, 1, [2]))),
     r"node 0 op 0 \(Conv 'conv'\): op type 'Conv' is not supported"),
    (one_node(op("Matmul", [tensor(0, 0, [2, 3]), tensor(1, 1, [4, 5])], tensor(2, 2, [2, 5]))),
     r"node 0 op 0 \(Matmul 'matmul'\): inner dimensions differ: \[2, 3\] and \[4, 5\]"),
    (one_node(op("Relu", [tensor(0, 0, [2, 3])], tensor(1, 1, [3, 2]))),
     r"result tensor 1 has shape \[3, 2\], the op computes \[2, 3\]"),
    (one_node(op("Relu", [tensor(0, 0, [2, 3], [1, 0], [2, 3])], tensor(1, 1, [2, 3]))),
     r"window \[2, 3\] at \[1, 0\] exceeds the buffer extent \[2, 3\]"),
    (one_node(op("Transpose", [tensor(0, 0, [2, 3])], tensor(1, 1, [3, 2]),
                 Permutation={"DIMS": [0, 0]})), r"Permutation \[0, 0\] is not a permutation"),
])
def test_errors(model, message):
    with pytest.raises(ArkError, match=message):
        import_ark(model, path="m.json")


def test_bad_json_names_line_and_column(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"Rank": 0,\n "Nodes": [}\n')
    with pytest.raises(ArkError, match=r"bad\.json:2:12: not JSON"):
        import_ark(bad)


def test_cli_import_ark(tmp_path, capsys):
    from npu.tools.cli import main

    path = tmp_path / "small.json"
    path.write_text(json.dumps(scaled(SHIPPED, {512: 2, 4096: 4, 11008: 6})))
    assert main(["import", "ark", str(path), "-o", str(tmp_path / "m.nac")]) == 0
    nac = loads((tmp_path / "m.nac").read_bytes())
    assert nac.num_inputs == 4
    assert f"{len(nac.ops)} instructions from {path} (ark)" in capsys.readouterr().out
