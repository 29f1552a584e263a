"""Each pass on a small hand-written graph: what it removes, verified after."""

import numpy as np
import pytest

from nac.ir import Graph, IRError, Node, Ref, verify
from nac.passes import (
    algebraic_simplification,
    constant_folding,
    cse,
    dead_code_elimination,
    identity_elimination,
    inverse_pairs,
)

S = (2, 3)


def op(name, *args, names=None, shape=S):
    return Node("op", shape, op=name, args=tuple(args),
                arg_names=tuple(names or [f"a{k}" for k in range(len(args))]))


def ops_of(graph):
    return [n.op or n.kind for n in graph.nodes]


def test_dead_code_elimination_drops_unused():
    g = Graph((Node("input", S, name="x"), op("aten.relu.default", Ref(0)),
               op("aten.tanh.default", Ref(0))), outputs=(1,))
    out = dead_code_elimination(verify(g))
    assert ops_of(out) == ["input", "aten.relu.default"] and out.outputs == (1,)


def test_identity_elimination_rewires_users():
    g = Graph((Node("input", S, name="x"),
               op("aten.dropout.default", Ref(0), 0.5, False, names=["input", "p", "train"]),
               op("aten.clone.default", Ref(1), None, names=["self", "memory_format"]),
               op("aten.relu.default", Ref(2))), outputs=(3,))
    out = identity_elimination(g)
    assert ops_of(out) == ["input", "aten.relu.default"]
    assert out.nodes[1].args == (Ref(0),)


def test_training_dropout_is_kept():
    g = Graph((Node("input", S, name="x"),
               op("aten.dropout.default", Ref(0), 0.5, True, names=["input", "p", "train"])),
              outputs=(1,))
    assert ops_of(identity_elimination(g)) == ["input", "aten.dropout.default"]


def test_inverse_pairs():
    g = Graph((Node("input", S, name="x"),
               op("aten.transpose.int", Ref(0), 0, 1, shape=(3, 2)),
               op("aten.transpose.int", Ref(1), 1, 0),
               op("aten.view.default", Ref(2), (6,), shape=(6,)),
               op("aten.view.default", Ref(3), (3, 2), shape=(3, 2)),
               op("aten.view.default", Ref(0), (2, 3))), outputs=(4, 5))
    out = dead_code_elimination(inverse_pairs(g))
    # transpose of transpose -> x; view of view -> one view of x; view to own shape -> x.
    assert ops_of(out) == ["input", "aten.view.default"]
    assert out.nodes[1].args[0] == Ref(0) and out.outputs == (1, 0)


def test_algebraic_simplification():
    g = Graph((Node("input", S, name="x"),
               op("aten.mul.Tensor", Ref(0), 1, names=["self", "other"]),
               op("aten.add.Tensor", Ref(1), 0, 1, names=["self", "other", "alpha"]),
               op("aten.mul.Tensor", Ref(2), 2, names=["self", "other"])), outputs=(3,))
    out = dead_code_elimination(algebraic_simplification(g))
    assert ops_of(out) == ["input", "aten.mul.Tensor"] and out.nodes[1].args[0] == Ref(0)


def test_constant_folding():
    c = np.arange(6, dtype=np.float32).reshape(S)
    g = Graph((Node("const", S, name="c"), Node("input", S, name="x"),
               op("aten.relu.default", Ref(0)),
               op("aten.mul.Tensor", Ref(2), Ref(1), names=["self", "other"])),
              outputs=(3,), tensors={"c": c - 2})
    out = dead_code_elimination(constant_folding(g))
    # The unused original constant is gone; the folded value sits where relu was.
    assert ops_of(out) == ["input", "const", "aten.mul.Tensor"]
    folded = out.tensors[out.nodes[1].name]
    np.testing.assert_array_equal(folded, np.maximum(c - 2, 0))


def test_cse_merges_duplicates():
    g = Graph((Node("input", S, name="x"), op("aten.relu.default", Ref(0)),
               op("aten.relu.default", Ref(0)),
               op("aten.mul.Tensor", Ref(1), Ref(2), names=["self", "other"])), outputs=(3,))
    out = dead_code_elimination(cse(g))
    assert ops_of(out) == ["input", "aten.relu.default", "aten.mul.Tensor"]
    assert out.nodes[2].args == (Ref(1), Ref(1))


def test_verifier_rejects_forward_reference():
    g = Graph((Node("input", S, name="x"), op("aten.relu.default", Ref(2)),
               op("aten.relu.default", Ref(0))), outputs=(1,))
    with pytest.raises(IRError, match=r"node 1 .*reference to node 2 is not an earlier node"):
        verify(g)


def test_inverse_pairs_negative_dims_and_permutes():
    s4 = (2, 3, 4, 5)
    g = Graph((Node("input", s4, name="x"),
               op("aten.transpose.int", Ref(0), -1, -2, shape=(2, 3, 5, 4)),
               op("aten.transpose.int", Ref(1), 2, 3, shape=s4),
               op("aten.permute.default", Ref(0), (0, 2, 3, 1), shape=(2, 4, 5, 3)),
               op("aten.permute.default", Ref(3), (0, 3, 1, 2), shape=s4),
               op("aten.permute.default", Ref(3), (0, 2, 1, 3), shape=(2, 5, 4, 3)),
               op("aten.add.Tensor", Ref(2), Ref(4), 1, names=["self", "other", "alpha"],
                  shape=s4)), outputs=(6, 5))
    out = dead_code_elimination(inverse_pairs(g))
    # transpose(-1, -2) then (2, 3) undo each other; (0, 3, 1, 2) undoes (0, 2, 3, 1);
    # (0, 2, 1, 3) after (0, 2, 3, 1) is not the identity and stays.
    assert ops_of(out) == ["input", "aten.permute.default", "aten.permute.default",
                           "aten.add.Tensor"]
    assert out.nodes[3].args[:2] == (Ref(0), Ref(0)) and out.outputs == (3, 2)
    assert out.nodes[2].args[0] == Ref(1)


def test_algebraic_simplification_constant_tensor_and_dtype_guard():
    ones = np.ones((1, 3), np.float32)
    g = Graph((Node("input", S, name="x"), Node("const", (1, 3), name="ones"),
               op("aten.mul.Tensor", Ref(0), Ref(1), names=["self", "other"]),
               Node("input", S, "int64", name="i"),
               # int64 / 1 is float32: the division changes the dtype and must stay.
               Node("op", S, "float32", op="aten.div.Tensor", args=(Ref(3), 1),
                    arg_names=("self", "other")),
               op("aten.add.Tensor", Ref(2), Ref(4), 1, names=["self", "other", "alpha"])),
              outputs=(5,), tensors={"ones": ones})
    out = dead_code_elimination(algebraic_simplification(g))
    assert ops_of(out) == ["input", "input", "aten.div.Tensor", "aten.add.Tensor"]
    assert out.nodes[3].args[0] == Ref(0)
    # A constant that is not uniform is kept.
    g2 = Graph(g.nodes, g.outputs, tensors={"ones": np.array([[1, 2, 1]], np.float32)})
    assert "aten.mul.Tensor" in ops_of(dead_code_elimination(algebraic_simplification(g2)))


def test_cse_keeps_random_ops_apart():
    train = ["input", "p", "train"]
    g = Graph((Node("input", S, name="x"),
               op("aten.dropout.default", Ref(0), 0.5, True, names=train),
               op("aten.dropout.default", Ref(0), 0.5, True, names=train),
               op("aten.dropout.default", Ref(0), 0.5, False, names=train),
               op("aten.dropout.default", Ref(0), 0.5, False, names=train),
               op("aten.add.Tensor", Ref(1), Ref(2), 1, names=["self", "other", "alpha"]),
               op("aten.add.Tensor", Ref(3), Ref(4), 1, names=["self", "other", "alpha"])),
              outputs=(5, 6))
    out = dead_code_elimination(cse(g))
    # The two training-mode dropouts draw different masks: both stay; the eval-mode pair
    # is deterministic and merges.
    assert ops_of(out).count("aten.dropout.default") == 3
    assert out.nodes[out.outputs[1]].args[:2] == (Ref(3), Ref(3))


def test_constant_folding_chains_views_and_fresh_names():
    c = np.arange(6, dtype=np.float32).reshape(S) - 2
    g = Graph((Node("input", (6,), name="x"), Node("const", S, name="c"),
               op("aten.relu.default", Ref(1)),
               op("aten.neg.default", Ref(2)),
               op("aten.view.default", Ref(3), (6,), shape=(6,)),
               op("aten.add.Tensor", Ref(0), Ref(4), 1, names=["self", "other", "alpha"],
                  shape=(6,))),
              outputs=(5,), tensors={"c": c, "folded.1": np.zeros(6, np.float32)})
    out = dead_code_elimination(constant_folding(g))
    # relu -> neg -> view of a constant fold in one pass into one constant; the name
    # "folded.1" was taken (an earlier round's tensor) and is not overwritten.
    assert ops_of(out) == ["input", "const", "aten.add.Tensor"]
    np.testing.assert_array_equal(out.tensors[out.nodes[1].name],
                                  -np.maximum(c, 0).reshape(6))
    np.testing.assert_array_equal(out.tensors["folded.1"], np.zeros(6, np.float32))
