"""The graph of a ``.nac`` model as the back-end sees it, and its float evaluation.

:func:`read_graph` turns the instructions the NAC reader gives back into ``Node``s (operation
name, arguments as node references or constants, parameter values); :func:`evaluate` runs the
graph with the kernels of the NAC float golden runtime (``nac.runtime.KERNELS``) and keeps
every intermediate value, which the quantiser's calibration needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nac.container import gather_arguments
from nac.encoding import REGULAR_OP_MIN, SystemOp
from nac.runtime import KERNELS
from nac.weights import dequantize

__all__ = ["GraphError", "ModelGraph", "Node", "Ref", "evaluate", "read_graph"]


class GraphError(ValueError):
    """A model the back-end cannot read (names the instruction)."""


@dataclass(frozen=True)
class Ref:
    """An argument that is the result of instruction ``index``."""

    index: int


@dataclass
class Node:
    """One instruction: ``kind`` is ``input``, ``param``, ``op`` or ``output``."""

    index: int
    kind: str
    name: str
    args: list = field(default_factory=list)
    value: np.ndarray | None = None  # parameters


@dataclass
class ModelGraph:
    """Nodes by instruction index, user input indices, output references."""

    nodes: list[Node]
    inputs: list[int]
    outputs: list[int]

    def users(self) -> dict[int, list[int]]:
        """Instruction index -> indices of the op/output nodes that read it."""
        out: dict[int, list[int]] = {n.index: [] for n in self.nodes}
        for n in self.nodes:
            for a in n.args:
                if isinstance(a, Ref):
                    out[a.index].append(n.index)
        return out


def _param(nac, pid, name):
    if nac.weights is not None and name in nac.weights:
        return np.asarray(nac.weights.float32(name))
    tensors = dict(nac.data.tensors or ()) if nac.data else {}
    tensor = tensors.get(pid)
    if tensor is None:
        raise GraphError(f"parameter {pid} ({name!r}) has no tensor (internal or external)")
    raw = np.frombuffer(tensor.data, dtype=tensor.dtype.numpy).reshape(tensor.shape)
    return np.asarray(dequantize(raw, tensor.quant, tensor.quant_params), dtype=np.float32)


def read_graph(nac):
    """The back-end's graph of a NAC file.

    Parameters
    ----------
    nac : nac.container.NacFile
        As :func:`nac.weights.read_nac` returns it (external weights attached).

    Returns
    -------
    ModelGraph

    Raises
    ------
    GraphError
        For state inputs, lifted constants without a stored value, system ops other than
        INPUT / OUTPUT, or a model without an output.
    """
    perm = dict(nac.perm or ())
    constants = {i: c.value for i, c in nac.cnst or ()}
    params = dict(nac.data.params) if nac.data else {}
    input_names = dict(nac.data.inputs) if nac.data else {}
    nodes, inputs = [], []
    for index, ins in enumerate(nac.ops):
        if ins.a == SystemOp.INPUT:
            if ins.b == 0:
                nodes.append(Node(index, "input", input_names.get(index, f"input{len(inputs)}")))
                inputs.append(index)
            elif ins.b == 1:
                pid = ins.const_ids[0]
                nodes.append(Node(index, "param", params.get(pid, f"param{pid}"),
                                  value=_param(nac, pid, params.get(pid))))
            elif ins.b == 3 and nac.weights is not None and input_names.get(index) in nac.weights:
                name = input_names[index]
                nodes.append(Node(index, "param", name,
                                  value=np.asarray(nac.weights[name], dtype=np.float32)))
            else:
                raise GraphError(f"instruction {index}: <INPUT B={ins.b}> is not supported by "
                                 f"the back-end (user inputs and parameters only)")
            continue
        if ins.a == SystemOp.OUTPUT:
            refs = [Ref(index + d) for d in ins.d]
            nodes.append(Node(index, "output", "output", refs))
            if ins.b == 0:
                return ModelGraph(nodes, inputs, [r.index for r in refs])
            continue
        if ins.a < REGULAR_OP_MIN:
            raise GraphError(f"instruction {index}: system op A={ins.a} is not supported")
        args = []
        for arg in gather_arguments(ins, index, perm):
            if arg.is_const:
                value = constants.get(arg.value)
                args.append(list(value) if isinstance(value, tuple) else value)
            else:
                args.append(Ref(arg.value))
        nodes.append(Node(index, "op", nac.op_name(ins.a) or f"A={ins.a}", args))
    raise GraphError("the model has no <OUTPUT B=0>")


def evaluate(graph, inputs):
    """Run the graph in float32 with the golden runtime's kernels; every value by index.

    Parameters
    ----------
    graph : ModelGraph
    inputs : sequence of numpy.ndarray
        One per user input, in order.

    Returns
    -------
    dict of int to numpy.ndarray
    """
    if len(inputs) != len(graph.inputs):
        raise GraphError(f"the model has {len(graph.inputs)} input(s), {len(inputs)} given")
    values = dict(zip(graph.inputs, (np.asarray(x, dtype=np.float32) for x in inputs),
                      strict=True))
    for node in graph.nodes:
        if node.kind == "param":
            values[node.index] = node.value
        elif node.kind == "op":
            kernel = KERNELS.get(node.name)
            if kernel is None:
                raise GraphError(f"instruction {node.index}: no float kernel for {node.name}")
            args = [values[a.index] if isinstance(a, Ref) else a for a in node.args]
            values[node.index] = np.asarray(kernel(*args))
    return values
