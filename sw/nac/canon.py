"""Canonisation: graph IR -> NAC v1.6 instructions, PERM, CNST, CMAP and DATA.

* Order: user inputs first; each parameter / lifted constant just before its first user
  (as the reference compiler does, so that PRELOAD has something to hoist).
* Operation ids: v1.6 standard ids where an op maps onto one (``nac.add`` ...), through the
  alias map with argument reordering (``rsub`` -> ``nac.sub(other, self)``,
  ``masked_fill`` -> ``nac.where(mask, value, self)``); every reshape-like op becomes
  ``nac.view(x, <static output shape>)``; anything else keeps its ATen name as a custom op
  recorded in CMAP from id 20 up.
* Signature codes from argument names and types (``nac-notes.md``); signatures are
  deduplicated into PERM (ids from 1), constants into CNST.
"""

from __future__ import annotations

from nac.container import Constant, DataSection, Instruction, NacFile
from nac.encoding import (
    FIRST_CUSTOM_OP,
    STANDARD_OPS,
    ConstType,
    QuantMethod,
    SystemOp,
)
from nac.ir import IRError, Ref
from nac.weights import tensor_from_array

__all__ = ["CanonError", "canonise", "signature_code"]

_STANDARD_IDS = {name: ident for ident, name in STANDARD_OPS.items()}
_VIEW_LIKE = {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default",
              "aten.flatten.using_ints", "aten.unsqueeze.default", "aten.squeeze.dim",
              "aten.squeeze.dims", "aten.squeeze.default", "aten.unflatten.int"}
_IDENTITY = {"aten.detach.default", "aten.detach_.default", "aten.alias.default",
             "aten.contiguous.default", "aten.lift_fresh_copy.default"}


class CanonError(IRError):
    """The graph cannot be encoded in NAC v1.6 (e.g. too many signatures for the B byte)."""


def signature_code(name, value):
    """The PERM code of one argument (schema *name*, Python or ``Ref`` *value*)."""
    if isinstance(value, Ref):
        return {"query": "Q", "key": "K", "value": "V", "attn_mask": "M", "mask": "M",
                "bias": "B", "weight": "W"}.get(name, "T")
    if name in ("dim", "axis", "axes"):
        return "A"
    if name in ("shape", "size"):
        return "S"
    if isinstance(value, bool):
        return "b"
    if isinstance(value, int):
        return "i"
    if isinstance(value, float):
        return "f"
    if isinstance(value, str):
        return "s"
    if isinstance(value, tuple):
        return "S"
    return "c"


def _constant(value):
    if value is None:
        return Constant(ConstType.NULL)
    if isinstance(value, bool):
        return Constant(ConstType.BOOL, value)
    if isinstance(value, int):
        return Constant(ConstType.INT64, value)
    if isinstance(value, float):
        return Constant(ConstType.FLOAT64, value)
    if isinstance(value, str):
        return Constant(ConstType.STRING, value)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return Constant(ConstType.LIST_INT32, tuple(value))
    return Constant(ConstType.LIST_FLOAT32, tuple(float(v) for v in value))


def _canonical_op(node):
    """``(name, args, arg_names)`` of the NAC operation for an IR op node."""
    op, args, names = node.op, node.args, node.arg_names
    kw = dict(zip(names, args, strict=True))
    if op in _VIEW_LIKE:
        return "nac.view", (args[0], tuple(node.shape)), ("self", "shape")
    if op in _IDENTITY:
        return "nac.pass", (args[0],), ("self",)
    if op == "aten.clone.default":
        return "nac.clone", (args[0],), ("self",)
    if op == "aten.dropout.default" and not kw.get("train"):
        return "nac.pass", (args[0],), ("input",)
    if op in ("aten.add.Tensor", "aten.sub.Tensor") and kw.get("alpha", 1) == 1:
        return ("nac.add" if "add" in op else "nac.sub"), args[:2], names[:2]
    if op == "aten.rsub.Scalar" and kw.get("alpha", 1) == 1:
        return "nac.sub", (args[1], args[0]), (names[1], names[0])
    if op == "aten.neg.default":
        return "nac.neg", args, names
    if op in ("aten.gt.Tensor", "aten.gt.Scalar"):
        return "nac.gt", args, names
    if op in ("aten.le.Tensor", "aten.le.Scalar"):
        return "nac.le", args, names
    if op == "aten.where.self":
        return "nac.where", args, names
    if op in ("aten.masked_fill.Scalar", "aten.masked_fill.Tensor"):
        return "nac.where", (args[1], args[2], args[0]), (names[1], names[2], names[0])
    return op, args, names


def canonise(graph, *, internal_weights=True, d_model=0):
    """Encode *graph* as a :class:`NacFile`.

    Returns
    -------
    nac : NacFile
    weights : dict of str to Tensor
        The parameter (and lifted constant) tensors by name, for external storage; with
        ``internal_weights`` they are also inside ``nac.data.tensors``.
    """
    nodes = graph.nodes
    order = [i for i, n in enumerate(nodes) if n.kind == "input"]
    placed = set(order)
    for i, node in enumerate(nodes):
        if node.kind != "op":
            continue
        for r in node.refs():
            if r not in placed:
                order.append(r)
                placed.add(r)
        order.append(i)
        placed.add(i)
    for o in graph.outputs:  # a parameter or constant that is itself a model output
        if o not in placed:
            order.append(o)
            placed.add(o)
    position = {node_id: k for k, node_id in enumerate(order)}

    perm, cnst, cmap = {}, {}, {}
    params, inputs, tensors, weights = [], [], [], {}
    ops = []

    def const_id(value):
        const = _constant(value)
        key = (const.type, repr(const.value))  # repr keeps -0.0 apart from 0.0
        if key not in cnst:
            cnst[key] = (len(cnst), const)
        return cnst[key][0]

    for k, node_id in enumerate(order):
        node = nodes[node_id]
        if node.kind == "input":
            inputs.append((k, node.name))
            ops.append(Instruction(SystemOp.INPUT, 0))
        elif node.kind == "param":
            pid = len(params)
            params.append((pid, node.name))
            tensor = tensor_from_array(graph.tensors[node.name])
            weights[node.name] = tensor
            tensors.append((pid, tensor))
            ops.append(Instruction(SystemOp.INPUT, 1, (2, pid)))
        elif node.kind == "const":
            inputs.append((k, node.name))
            weights[node.name] = tensor_from_array(graph.tensors[node.name])
            cid = const_id(node.name)
            ops.append(Instruction(SystemOp.INPUT, 3, (2, cid)))
        else:
            name, args, names = _canonical_op(node)
            if name in _STANDARD_IDS:
                a = _STANDARD_IDS[name]
            else:
                if name not in cmap:
                    cmap[name] = FIRST_CUSTOM_OP + len(cmap)
                    if cmap[name] > 255:
                        raise CanonError(f"more than {256 - FIRST_CUSTOM_OP} custom operations: "
                                         f"the A byte cannot hold {name!r}")
                a = cmap[name]
            signature = "".join(signature_code(n, v) for n, v in zip(names, args, strict=True))
            c, d = [], []
            for value in args:
                if isinstance(value, Ref):
                    d.append(position[value.node] - k)
                else:
                    d.append(0)
                    c.append(const_id(value))
            b = 0
            if signature:
                if signature not in perm:
                    perm[signature] = len(perm) + 1
                    if perm[signature] > 255:
                        raise CanonError("more than 255 signatures: the B byte cannot hold them")
                b = perm[signature]
            has_c = any(ch in "ASifbsc" for ch in signature)
            ops.append(Instruction(a, b, (len(c), *c) if has_c else None, tuple(d)))
    n_out = len(graph.outputs)
    k = len(ops)
    ops.append(Instruction(SystemOp.OUTPUT, 0, (n_out, *([0] * n_out)),
                           tuple(position[o] - k for o in graph.outputs)))
    nac = NacFile(
        quant_method=QuantMethod.NONE, internal_weights=internal_weights,
        num_inputs=sum(1 for n in nodes if n.kind == "input"), num_outputs=n_out,
        d_model=d_model, ops=tuple(ops),
        cmap=tuple((ident, name) for name, ident in cmap.items()),
        cnst=tuple((ident, const) for ident, const in cnst.values()),
        perm=tuple((ident, sig) for sig, ident in perm.items()),
        data=DataSection(tuple(params), tuple(inputs),
                         tuple(tensors) if internal_weights else None),
    )
    return nac, weights
