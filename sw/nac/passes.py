"""Graph passes: each takes a :class:`nac.ir.Graph` and returns a new, verified one.

``optimise`` runs them in order until nothing changes: identity elimination, removal of
paired inverse ops, algebraic simplification, constant folding, common-subexpression
elimination, dead-code elimination. Each pass is a small function, testable alone.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from nac.ir import Node, Ref, verify

__all__ = [
    "PASSES",
    "algebraic_simplification",
    "constant_folding",
    "cse",
    "dead_code_elimination",
    "identity_elimination",
    "inverse_pairs",
    "optimise",
]

_IDENTITY_OPS = {"aten.detach.default", "aten.alias.default", "aten.clone.default",
                 "aten.contiguous.default", "aten.lift_fresh_copy.default"}
_VIEW_OPS = {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default"}


def _is_identity(node):
    if node.kind != "op":
        return False
    if node.op in _IDENTITY_OPS:
        return True
    if node.op in ("aten.dropout.default", "aten.feature_dropout.default"):
        return not dict(zip(node.arg_names, node.args, strict=True)).get("train")
    return False


def dead_code_elimination(graph):
    """Drop nodes whose values no output depends on."""
    live = set(graph.outputs)
    for i in range(len(graph.nodes) - 1, -1, -1):
        if i in live:
            live.update(graph.nodes[i].refs())
    return verify(graph.rebuilt(live))


def identity_elimination(graph):
    """Replace no-op nodes (detach, clone, eval-mode dropout, ...) by their input."""
    substitute = {i: node.args[0].node for i, node in enumerate(graph.nodes)
                  if _is_identity(node) and isinstance(node.args[0], Ref)}
    return verify(graph.rebuilt(set(range(len(graph.nodes))), substitute))


def inverse_pairs(graph):
    """Remove paired inverse ops: transpose(transpose(x, a, b), a, b) -> x;
    view(view(x)) -> one view; a view to the input's own shape -> x."""
    nodes = graph.nodes
    substitute, new_nodes = {}, {}
    for i, node in enumerate(nodes):
        if node.kind != "op" or not node.args or not isinstance(node.args[0], Ref):
            continue
        inner_id = node.args[0].node
        inner = nodes[inner_id]
        if node.op == "aten.transpose.int" and inner.op == "aten.transpose.int" and \
                sorted(node.args[1:]) == sorted(inner.args[1:]) and \
                isinstance(inner.args[0], Ref):
            substitute[i] = inner.args[0].node
        elif node.op in _VIEW_OPS:
            source = inner.args[0] if inner.op in _VIEW_OPS else node.args[0]
            if tuple(nodes[source.node].shape) == tuple(node.shape):
                substitute[i] = source.node
            elif inner.op in _VIEW_OPS:
                new_nodes[i] = replace(node, args=(source, *node.args[1:]))
    return verify(graph.rebuilt(set(range(len(nodes))), substitute, new_nodes))


def _scalar(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def algebraic_simplification(graph):
    """x * 1, x / 1, x + 0, x - 0 (scalar or scalar-valued alpha) -> x when shapes agree."""
    substitute = {}
    for i, node in enumerate(graph.nodes):
        if node.kind != "op" or not node.args or not isinstance(node.args[0], Ref):
            continue
        kw = dict(zip(node.arg_names, node.args, strict=True))
        other = kw.get("other")
        same_shape = tuple(graph.nodes[node.args[0].node].shape) == tuple(node.shape)
        if not same_shape or not _scalar(other):
            continue
        if node.op in ("aten.mul.Tensor", "aten.mul.Scalar", "aten.div.Tensor",
                       "aten.div.Scalar") and other == 1:
            substitute[i] = node.args[0].node
        elif node.op in ("aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor",
                         "aten.sub.Scalar") and other == 0:
            substitute[i] = node.args[0].node
    return verify(graph.rebuilt(set(range(len(graph.nodes))), substitute))


def constant_folding(graph):
    """Evaluate ops whose tensor inputs are all constants (lifted constants or earlier
    folds) with the runtime's kernels; the result becomes a new constant."""
    from nac.runtime import KERNELS

    tensors = dict(graph.tensors)
    new_nodes = {}
    constant = {i for i, n in enumerate(graph.nodes) if n.kind == "const"}
    for i, node in enumerate(graph.nodes):
        if node.kind != "op" or node.op not in KERNELS or not node.refs():
            continue
        if not all(r in constant for r in node.refs()):
            continue
        args = [tensors[graph.nodes[a.node].name] if isinstance(a, Ref) else
                (list(a) if isinstance(a, tuple) else a) for a in node.args]
        value = np.asarray(KERNELS[node.op](*args))
        name = f"folded.{i}"
        tensors[name] = value.astype(node.dtype) if node.dtype in np.sctypeDict else value
        new_nodes[i] = Node("const", tuple(value.shape), node.dtype, name=name)
        constant.add(i)
    if not new_nodes:
        return graph
    folded = type(graph)(graph.nodes, graph.outputs, tensors)
    return verify(folded.rebuilt(set(range(len(graph.nodes))), new_nodes=new_nodes))


def cse(graph):
    """Merge op nodes that compute the same op on the same arguments."""
    seen, substitute = {}, {}
    for i, node in enumerate(graph.nodes):
        if node.kind != "op":
            continue
        args = tuple(("ref", substitute.get(a.node, a.node)) if isinstance(a, Ref) else
                     ("value", repr(a)) for a in node.args)
        key = (node.op, args)
        if key in seen:
            substitute[i] = seen[key]
        else:
            seen[key] = i
    return verify(graph.rebuilt(set(range(len(graph.nodes))), substitute))


PASSES = (identity_elimination, inverse_pairs, algebraic_simplification, constant_folding,
          cse, dead_code_elimination)


def optimise(graph, passes=PASSES, max_rounds=10):
    """Run *passes* until the graph stops changing (at most *max_rounds* rounds)."""
    for _ in range(max_rounds):
        before = graph
        for p in passes:
            graph = p(graph)
        if graph.nodes == before.nodes and graph.outputs == before.outputs:
            break
    return graph
