"""The compiler pipeline: PyTorch module -> optimised graph -> NAC file with MMAP schedule.

``compile_module`` = ``frontend_torch.from_torch`` -> ``passes.optimise`` ->
``canon.canonise`` -> ``schedule.schedule`` (+ ``schedule.replay`` as a safety proof).
"""

from __future__ import annotations

from dataclasses import replace

from nac.canon import canonise
from nac.passes import optimise
from nac.schedule import replay, schedule

__all__ = ["compile_graph", "compile_module", "lifted_constants", "param_bytes"]


def param_bytes(nac, weights):
    """Instruction index of each ``<INPUT B=1>`` -> its tensor size in bytes."""
    names = dict(nac.data.params) if nac.data else {}
    out = {}
    for index, ins in enumerate(nac.ops):
        if ins.a == 2 and ins.b == 1:
            tensor = weights.get(names.get(ins.const_ids[0]))
            out[index] = len(tensor.data) if tensor is not None else 0
    return out


def lifted_constants(nac, weights):
    """Values of the lifted constants (``<INPUT B=3>``) by DATA input name.

    Like user inputs, their values are not part of the instruction stream (spec 7.1.4);
    the runtime takes them as ``extra_tensors`` unless they are stored with external
    weights.

    Parameters
    ----------
    nac : NacFile
    weights : dict of str to Tensor
        As returned by :func:`compile_graph`.

    Returns
    -------
    dict of str to numpy.ndarray
    """
    import numpy as np

    names = dict(nac.data.inputs) if nac.data else {}
    out = {}
    for index, ins in enumerate(nac.ops):
        if ins.a == 2 and ins.b == 3:
            name = names[index]
            tensor = weights[name]
            out[name] = np.frombuffer(tensor.data, dtype=tensor.dtype.numpy).reshape(
                tensor.shape).copy()
    return out


def _check_kernels(nac, graph):
    """Refuse a file the float runtime could not run: name each op without a kernel and
    the graph nodes that use it (canonisation keeps ATen names it does not map, so the
    instruction's name is the node's)."""
    from nac.encoding import REGULAR_OP_MIN
    from nac.ir import IRError
    from nac.runtime import KERNELS

    missing = sorted({nac.op_name(ins.a) or f"A={ins.a}" for ins in nac.ops
                      if ins.a >= REGULAR_OP_MIN and nac.op_name(ins.a) not in KERNELS})
    if missing:
        parts = []
        for name in missing:
            nodes = [i for i, n in enumerate(graph.nodes) if n.kind == "op" and n.op == name]
            where = f"node{'s' if len(nodes) > 1 else ''} {', '.join(map(str, nodes))}" \
                if nodes else "no graph node"
            parts.append(f"{name} ({where})")
        raise IRError(f"the float runtime has no kernel for {'; '.join(parts)}: the model "
                      f"would compile but not run, so it is refused")


def compile_graph(graph, *, run_passes=True, preload_distance=3, internal_weights=True):
    """Optimise, canonise and schedule a graph; return ``(nac, weights, report)``.

    Raises
    ------
    nac.ir.IRError
        An operation the float runtime has no kernel for, named with its graph nodes.
    """
    if run_passes:
        graph = optimise(graph)
    nac, weights = canonise(graph, internal_weights=internal_weights)
    _check_kernels(nac, graph)
    records = schedule(nac.ops, distance=preload_distance)
    report = replay(nac.ops, records, param_bytes=param_bytes(nac, weights))
    return replace(nac, mmap=records), weights, report


def compile_module(module, example_inputs, **options):
    """Compile a ``torch.nn.Module`` (put in eval mode) with example inputs.

    Returns
    -------
    (NacFile, dict of str to Tensor, ReplayReport)
    """
    from nac.frontend_torch import from_torch

    module.eval()
    return compile_graph(from_torch(module, tuple(example_inputs)), **options)
