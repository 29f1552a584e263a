"""The compiler's graph IR: frozen nodes in topological order, independent of torch.

A :class:`Graph` is a tuple of :class:`Node` (node ``i`` may only refer to nodes ``< i``),
the ids of its outputs, and the tensor values of its parameters and constants. Every node
carries the shape and dtype of the value it produces.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

__all__ = ["Graph", "IRError", "Node", "Ref", "verify"]


class IRError(ValueError):
    """A graph breaks an IR invariant, or a front-end met something it cannot express."""


@dataclass(frozen=True)
class Ref:
    """A reference to the value of node ``node``."""

    node: int


@dataclass(frozen=True)
class Node:
    """One value-producing node.

    Attributes
    ----------
    kind : {"input", "param", "const", "op"}
        ``input``: a user input (``<INPUT B=0>``); ``param``: a parameter or buffer
        (``<INPUT B=1>``); ``const``: a lifted constant tensor (``<INPUT B=3>``);
        ``op``: an operation.
    op : str
        For ``op`` nodes, the ATen name (``aten.linear.default``) or a ``nac.*`` name.
    args : tuple
        ``Ref`` for tensor arguments, plain Python values (None, bool, int, float, str,
        tuples of numbers) for constants.
    arg_names : tuple of str
        Schema names of the arguments (they choose the signature codes).
    name : str
        Input, parameter or constant name (for the other kinds).
    shape : tuple of int
    dtype : str
        numpy dtype name of the value.
    """

    kind: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    op: str = ""
    args: tuple = ()
    arg_names: tuple[str, ...] = ()
    name: str = ""

    def refs(self):
        """Node ids this node reads."""
        return [a.node for a in self.args if isinstance(a, Ref)]


@dataclass(frozen=True)
class Graph:
    """A graph: nodes in topological order, outputs, tensor values by name."""

    nodes: tuple[Node, ...]
    outputs: tuple[int, ...]
    tensors: dict = field(default_factory=dict, compare=False)

    def users(self):
        """``users[i]``: ids of the nodes (and ``-1`` for a graph output) reading node i."""
        out = {i: [] for i in range(len(self.nodes))}
        for i, node in enumerate(self.nodes):
            for r in node.refs():
                out[r].append(i)
        for o in self.outputs:
            out[o].append(-1)
        return out

    def rebuilt(self, keep, substitute=None, new_nodes=None):
        """A copy keeping nodes whose ids are in *keep*, renumbered; *substitute* maps a
        node id to the id whose value replaces it; *new_nodes* replaces node contents."""
        substitute = dict(substitute or {})
        new_nodes = dict(new_nodes or {})

        def resolve(i):
            seen = set()
            while i in substitute:
                if i in seen:
                    raise IRError(f"substitution cycle at node {i}")
                seen.add(i)
                i = substitute[i]
            return i

        mapping = {}
        nodes = []
        for i, node in enumerate(self.nodes):
            if i not in keep or i in substitute:
                continue
            node = new_nodes.get(i, node)
            args = tuple(Ref(mapping[resolve(a.node)]) if isinstance(a, Ref) else a
                         for a in node.args)
            mapping[i] = len(nodes)
            nodes.append(replace(node, args=args))
        outputs = tuple(mapping[resolve(o)] for o in self.outputs)
        return Graph(tuple(nodes), outputs, self.tensors)


def verify(graph):
    """Check the IR invariants; raise :class:`IRError` naming the node.

    References point to earlier nodes; inputs/params/consts have no arguments and a name;
    params and consts have a tensor value of the declared shape; ops have a name; outputs
    exist.
    """
    for i, node in enumerate(graph.nodes):
        if node.kind not in ("input", "param", "const", "op"):
            raise IRError(f"node {i}: unknown kind {node.kind!r}")
        for r in node.refs():
            if not 0 <= r < i:
                raise IRError(f"node {i} ({node.op or node.name}): reference to node {r} is "
                              f"not an earlier node")
        if node.kind == "op":
            if not node.op:
                raise IRError(f"node {i}: op node without an op name")
            if len(node.arg_names) != len(node.args):
                raise IRError(f"node {i} ({node.op}): {len(node.args)} arguments, "
                              f"{len(node.arg_names)} names")
        else:
            if node.args or not node.name:
                raise IRError(f"node {i}: {node.kind} nodes have a name and no arguments")
            if node.kind in ("param", "const"):
                value = graph.tensors.get(node.name)
                if value is None:
                    raise IRError(f"node {i}: no tensor value for {node.kind} {node.name!r}")
                if tuple(np.shape(value)) != tuple(node.shape):
                    raise IRError(f"node {i}: {node.name!r} has shape {np.shape(value)}, "
                                  f"declared {node.shape}")
    for o in graph.outputs:
        if not 0 <= o < len(graph.nodes):
            raise IRError(f"output refers to node {o}, which does not exist")
    return graph
