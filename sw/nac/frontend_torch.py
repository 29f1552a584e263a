"""PyTorch front-end: ``torch.export`` -> :class:`nac.ir.Graph`.

torch is imported here only, when a model is converted; the rest of the kit runs
without it. Arguments are bound to each ATen schema with its defaults applied, so every
node carries its full argument list with schema names.
"""

from __future__ import annotations

import numpy as np

from nac.ir import Graph, IRError, Node, Ref, verify

__all__ = ["from_torch"]


def _meta(node):
    import torch

    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return tuple(int(s) for s in val.shape), str(val.dtype).replace("torch.", "")
    raise IRError(f"node {node.name} ({node.target}): produces {type(val).__name__}, not a "
                  f"single tensor; multi-output ops are not supported")


def _constant(value, where):
    import torch

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        items = tuple(_constant(v, where) for v in value)
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            return items
        raise IRError(f"{where}: list argument {value!r} is not a list of numbers")
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(value)
    raise IRError(f"{where}: unsupported constant argument {value!r} "
                  f"({type(value).__name__})")


def from_torch(module, example_inputs):
    """Export *module* with ``torch.export`` and convert it to the graph IR.

    Parameters
    ----------
    module : torch.nn.Module
        Put into eval mode by the caller for inference graphs.
    example_inputs : tuple of torch.Tensor

    Returns
    -------
    Graph
    """
    import torch
    from torch.export import export
    from torch.export.graph_signature import InputKind

    program = export(module, tuple(example_inputs))
    specs = {s.arg.name: s for s in program.graph_signature.input_specs}
    state = dict(program.state_dict)
    state.update(getattr(program, "constants", {}) or {})
    nodes, ids, tensors = [], {}, {}
    outputs = ()
    for fx in program.graph.nodes:
        if fx.op == "placeholder":
            spec = specs[fx.name]
            shape, dtype = _meta(fx)
            if spec.kind == InputKind.USER_INPUT:
                nodes.append(Node("input", shape, dtype, name=fx.name))
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
                tensors[spec.target] = state[spec.target].detach().cpu().numpy()
                nodes.append(Node("param", shape, dtype, name=spec.target))
            elif spec.kind in (InputKind.CONSTANT_TENSOR,):
                tensors[spec.target] = state[spec.target].detach().cpu().numpy()
                nodes.append(Node("const", shape, dtype, name=spec.target))
            else:
                raise IRError(f"input {fx.name}: input kind {spec.kind.name} not supported")
            ids[fx.name] = len(nodes) - 1
        elif fx.op == "call_function":
            target = fx.target
            if not isinstance(target, torch._ops.OpOverload):
                raise IRError(f"node {fx.name}: call of {target!r} is not an ATen operator")
            where = f"node {fx.name} ({target})"
            schema = target._schema
            args, names = [], []
            for k, arg in enumerate(schema.arguments):
                if k < len(fx.args):
                    value = fx.args[k]
                elif arg.name in fx.kwargs:
                    value = fx.kwargs[arg.name]
                elif arg.has_default_value():
                    value = arg.default_value
                else:
                    raise IRError(f"{where}: missing argument {arg.name!r}")
                if isinstance(value, torch.fx.Node):
                    args.append(Ref(ids[value.name]))
                elif isinstance(value, (list, tuple)) and any(
                        isinstance(v, torch.fx.Node) for v in value):
                    raise IRError(f"{where}: a list of tensors as argument {arg.name!r} has "
                                  f"no NAC encoding (one D entry per argument)")
                else:
                    args.append(_constant(value, where))
                names.append(arg.name)
            shape, dtype = _meta(fx)
            name = f"aten.{target._schema.name.split('::')[1]}.{target._overloadname}"
            nodes.append(Node("op", shape, dtype, op=name, args=tuple(args),
                              arg_names=tuple(names)))
            ids[fx.name] = len(nodes) - 1
        elif fx.op == "output":
            values = fx.args[0]
            outputs = tuple(ids[v.name] for v in values)
        else:
            raise IRError(f"node {fx.name}: fx op {fx.op!r} not supported")
    graph = Graph(tuple(nodes), outputs, {k: np.asarray(v) for k, v in tensors.items()})
    return verify(graph)
