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

_IDENTITY_OPS = {"aten.detach.default", "aten.detach_.default", "aten.alias.default",
                 "aten.clone.default", "aten.contiguous.default",
                 "aten.lift_fresh_copy.default"}
_VIEW_OPS = {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default"}


_RANDOM_OPS = {"aten.rand.default", "aten.randn.default", "aten.rand_like.default",
               "aten.randn_like.default", "aten.bernoulli.default", "aten.bernoulli.p",
               "aten.native_dropout.default", "aten.randint.low", "aten.randperm.default"}


def _is_random(node):
    """Ops whose two evaluations on equal arguments may differ (never merged by CSE)."""
    if node.op in _RANDOM_OPS:
        return True
    if node.op in ("aten.dropout.default", "aten.feature_dropout.default"):
        return bool(dict(zip(node.arg_names, node.args, strict=True)).get("train"))
    return False


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


def _swapped_dims(node):
    """The two dims of a transpose, made non-negative and sorted."""
    rank = len(node.shape)
    return sorted(d % rank if rank else d for d in node.args[1:3])


def _composed_permutation(node, inner):
    """``permute(permute(x, p), q)`` is ``permute(x, [p[k] for k in q])``."""
    rank = len(node.shape)
    p = [d % rank for d in inner.args[1]]
    return [p[k % rank] for k in node.args[1]]


def inverse_pairs(graph):
    """Remove paired inverse ops: transpose(transpose(x, a, b), a, b) -> x (negative
    dims normalised); permute(permute(x, p), q) -> x when q undoes p; view(view(x)) ->
    one view; a view to the input's own shape -> x."""
    nodes = graph.nodes
    substitute, new_nodes = {}, {}
    for i, node in enumerate(nodes):
        if node.kind != "op" or not node.args or not isinstance(node.args[0], Ref):
            continue
        inner_id = node.args[0].node
        inner = nodes[inner_id]
        inner_source = inner.args[0] if inner.kind == "op" and inner.args else None
        if node.op == "aten.transpose.int" and inner.op == "aten.transpose.int" and \
                _swapped_dims(node) == _swapped_dims(inner) and \
                isinstance(inner_source, Ref):
            substitute[i] = inner_source.node
        elif node.op == "aten.permute.default" and inner.op == "aten.permute.default" and \
                isinstance(inner_source, Ref) and \
                _composed_permutation(node, inner) == list(range(len(node.shape))):
            substitute[i] = inner_source.node
        elif node.op in _VIEW_OPS:
            source = inner.args[0] if inner.op in _VIEW_OPS else node.args[0]
            if tuple(nodes[source.node].shape) == tuple(node.shape):
                substitute[i] = source.node
            elif inner.op in _VIEW_OPS:
                new_nodes[i] = replace(node, args=(source, *node.args[1:]))
    return verify(graph.rebuilt(set(range(len(nodes))), substitute, new_nodes))


def _scalar(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _uniform_value(graph, arg):
    """The single value of a scalar argument or of a constant tensor whose elements are all
    equal; None otherwise."""
    if _scalar(arg):
        return arg
    if isinstance(arg, Ref):
        node = graph.nodes[arg.node]
        if node.kind == "const":
            value = np.asarray(graph.tensors[node.name])
            if value.size and np.all(value == value.flat[0]):
                return value.flat[0].item()
    return None


def algebraic_simplification(graph):
    """x * 1, x / 1, x + 0, x - 0 -> x, where the 1 or 0 is a scalar or a constant tensor of
    equal elements, when the result has x's shape and dtype (no broadcast, no promotion)."""
    substitute = {}
    for i, node in enumerate(graph.nodes):
        if node.kind != "op" or not node.args or not isinstance(node.args[0], Ref):
            continue
        kw = dict(zip(node.arg_names, node.args, strict=True))
        other = _uniform_value(graph, kw.get("other"))
        x = graph.nodes[node.args[0].node]
        unchanged = tuple(x.shape) == tuple(node.shape) and x.dtype == node.dtype
        if not unchanged or other is None:
            continue
        if node.op in ("aten.mul.Tensor", "aten.mul.Scalar", "aten.div.Tensor",
                       "aten.div.Scalar") and other == 1:
            substitute[i] = node.args[0].node
        elif node.op in ("aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor",
                         "aten.sub.Scalar") and other == 0:
            substitute[i] = node.args[0].node
    return verify(graph.rebuilt(set(range(len(graph.nodes))), substitute))


def _fresh_name(tensors, i):
    name, k = f"folded.{i}", 0
    while name in tensors:  # earlier rounds numbered their nodes differently
        k += 1
        name = f"folded.{i}.{k}"
    return name


def constant_folding(graph):
    """Evaluate ops whose tensor inputs are all constants (lifted constants or earlier
    folds, also within this pass) with the runtime's kernels, and reshapes of constants;
    the result becomes a new constant."""
    from nac.runtime import KERNELS

    tensors = dict(graph.tensors)
    new_nodes = {}
    values = {i: tensors[n.name] for i, n in enumerate(graph.nodes) if n.kind == "const"}
    for i, node in enumerate(graph.nodes):
        if node.kind != "op" or not node.refs() or not all(r in values for r in node.refs()):
            continue
        if node.op in _VIEW_OPS:
            value = np.reshape(values[node.args[0].node], node.shape)
        elif node.op in KERNELS:
            args = [values[a.node] if isinstance(a, Ref) else
                    (list(a) if isinstance(a, tuple) else a) for a in node.args]
            value = np.asarray(KERNELS[node.op](*args))
        else:
            continue
        name = _fresh_name(tensors, i)
        value = value.astype(node.dtype) if node.dtype in np.sctypeDict else value
        tensors[name] = values[i] = value
        new_nodes[i] = Node("const", tuple(value.shape), node.dtype, name=name)
    if not new_nodes:
        return graph
    folded = type(graph)(graph.nodes, graph.outputs, tensors)
    return verify(folded.rebuilt(set(range(len(graph.nodes))), new_nodes=new_nodes))


def cse(graph):
    """Merge op nodes that compute the same op on the same arguments (random ops, such as
    training-mode dropout, are never merged)."""
    seen, substitute = {}, {}
    for i, node in enumerate(graph.nodes):
        if node.kind != "op" or _is_random(node):
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
