"""ARK model JSON -> :class:`nac.ir.Graph` (spec: ``ark-model-file-format.md``).

Values are ARK tensors. An op's ``ResultTensors`` define new values; a tensor that is
read but produced by no op is a model input (``<INPUT B=0>``, named ``tensor<Id>``); a
result that no later op reads is a model output. ARK has no notion of stored weights, so
weights are inputs too.

Tensor views: a tensor names a ``Buffer`` and a window of it (``Shape`` at ``Offsets``
inside the padded buffer extent; in the shipped example ``Strides`` holds that padded
buffer shape, not element strides). Reading a window smaller than the buffer's last
written value becomes a slice; reading the whole extent is the value itself. Writes must
cover their whole buffer (partial in-place writes are rejected with an error naming the
op).

Ops: ``Matmul`` (``TransposeInput``/``TransposeOther``, batch dims via ``InputDimNC`` /
``OtherDimNC``, checked against ``ShapeMNK``), ``Add``/``Sub``/``Mul``/``Div``,
``Sigmoid``/``Relu``/``Exp``/``Sqrt``/``Rsqrt``, ``ReduceSum``/``ReduceMax``/``ReduceMean``
(``Axis``, ``KeepDim``), ``ScalarAdd``/``ScalarMul`` (``Value``), ``Transpose``
(``Permutation``: entry *i* is the output position of input dim *i*), and virtual ops
(identity over views). Multi-rank files: buffers with ``RecvTags`` become inputs and
buffers with ``SendTags`` become outputs; :func:`import_ark` returns them as
``cross_rank`` so they can be reported. Errors are :class:`ArkError` naming the node, the
op and the field. Computation is float32 in the golden runtime whatever the ARK data type.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from nac.ir import Graph, IRError, Node, Ref, verify

__all__ = ["ArkError", "import_ark"]

_ELEMENTWISE = {"Add": "aten.add.Tensor", "Sub": "aten.sub.Tensor", "Mul": "aten.mul.Tensor",
                "Div": "aten.div.Tensor"}
_UNARY = {"Sigmoid": "aten.sigmoid.default", "Relu": "aten.relu.default",
          "Exp": "aten.exp.default", "Sqrt": "aten.sqrt.default",
          "Rsqrt": "aten.rsqrt.default"}
_REDUCE = {"ReduceSum": "aten.sum.dim_IntList", "ReduceMean": "aten.mean.dim",
           "ReduceMax": "aten.amax.default"}


class ArkError(IRError):
    """An ARK model file is malformed or uses something this importer does not support."""


#: Deepest JSON nesting read (the shipped format needs 6 levels).
MAX_NESTING = 64

_KINDS = {list: "a list", dict: "an object", int: "an integer", str: "a string",
          bool: "true or false"}


def _is(value, kind):
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _dims(value, what, where):
    """*value* as a tuple of dimensions (non-negative integers)."""
    if not isinstance(value, list) or not all(_is(d, int) and d >= 0 for d in value):
        raise ArkError(f"{where}: {what} must be a list of non-negative integers, not "
                       f"{value!r}")
    return tuple(value)


def _arg(op, name, kind, where, default=None):
    args = op.get("Args")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ArkError(f"{where}: field 'Args' must be an object, not {args!r}")
    if name not in args:
        if default is not None:
            return default
        raise ArkError(f"{where}: missing argument {name!r}")
    value = args[name]
    if not isinstance(value, dict) or kind not in value:
        raise ArkError(f"{where}: argument {name!r} must be {{{kind!r}: ...}}, not {value!r}")
    inner = value[kind]
    if kind == "DIMS":
        if not isinstance(inner, list) or not all(_is(d, int) for d in inner):
            raise ArkError(f"{where}: argument {name!r}: DIMS must be a list of integers, not "
                           f"{inner!r}")
    elif kind == "FLOAT" and not (_is(inner, int) or isinstance(inner, float)):
        raise ArkError(f"{where}: argument {name!r}: FLOAT must be a number, not {inner!r}")
    elif kind in ("INT", "BOOL") and not _is(inner, int if kind == "INT" else bool):
        raise ArkError(f"{where}: argument {name!r}: {kind} must be "
                       f"{_KINDS[int if kind == 'INT' else bool]}, not {inner!r}")
    return inner


def _field(obj, name, kind, where):
    if not isinstance(obj, dict):
        raise ArkError(f"{where}: expected an object with field {name!r}, not {obj!r}")
    if name not in obj:
        raise ArkError(f"{where}: missing field {name!r}")
    value = obj[name]
    if not _is(value, kind):
        raise ArkError(f"{where}: field {name!r} must be {_KINDS[kind]}, not {value!r}")
    return value


def _optional_dims(tensor, name, where):
    value = tensor.get(name)
    return None if value in (None, []) else _dims(value, f"field {name!r}", where)


def _nesting(text, where):
    """Refuse JSON nested deeper than :data:`MAX_NESTING` (before parsing it)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_NESTING:
                    raise ArkError(f"{where}: JSON nested deeper than {MAX_NESTING} levels")
        elif ch in "]}":
            depth -= 1


class _Builder:
    def __init__(self, model):
        self.nodes, self.values, self.buffers = [], {}, {}
        self.inputs, self.cross_rank = [], []
        self.rank = model.get("Rank", 0)

    def add(self, node):
        self.nodes.append(node)
        return len(self.nodes) - 1

    def op(self, name, args, names, shape):
        return self.add(Node("op", tuple(shape), "float32", op=name, args=tuple(args),
                             arg_names=tuple(names)))

    def read(self, tensor, where):
        tid = _field(tensor, "Id", int, where)
        shape = _dims(_field(tensor, "Shape", list, where), "field 'Shape'", where)
        buffer = _field(tensor, "Buffer", dict, where)
        bid = _field(buffer, "Id", int, where + ".Buffer")
        offsets = _optional_dims(tensor, "Offsets", where) or (0,) * len(shape)
        padded = _optional_dims(tensor, "PaddedShape", where) or \
            _optional_dims(tensor, "Strides", where) or shape
        if len(offsets) != len(shape) or len(padded) != len(shape):
            raise ArkError(f"{where}: tensor {tid}: Shape, Offsets and Strides differ in rank")
        if any(o + s > p for o, s, p in zip(offsets, shape, padded, strict=True)):
            raise ArkError(f"{where}: tensor {tid}: window {list(shape)} at {list(offsets)} "
                           f"exceeds the buffer extent {list(padded)}")
        if tid in self.values:
            node = self.values[tid]
        elif bid in self.buffers:
            node = self.buffers[bid]
        else:
            name = f"tensor{tid}"
            if buffer.get("RecvTags"):
                name = f"recv.buffer{bid}"
                self.cross_rank.append(("recv", bid, buffer["RecvTags"]))
            node = self.add(Node("input", padded, "float32", name=name))
            self.inputs.append(node)
            self.buffers[bid] = node
        full = tuple(self.nodes[node].shape)
        if full == shape and not any(offsets):
            return node
        if len(full) != len(shape):
            raise ArkError(f"{where}: tensor {tid} (rank {len(shape)}) is a view of a rank "
                           f"{len(full)} value")
        ranges = tuple(v for o, s in zip(offsets, shape, strict=True) for v in (o, o + s, 1))
        return self.op("mind.slice", [Ref(node), ranges], ["self", "ranges"], shape)

    def result(self, tensor, node, where):
        tid = _field(tensor, "Id", int, where)
        shape = _dims(_field(tensor, "Shape", list, where), "field 'Shape'", where)
        if tuple(self.nodes[node].shape) != shape:
            raise ArkError(f"{where}: result tensor {tid} has shape {list(shape)}, the op "
                           f"computes {list(self.nodes[node].shape)}")
        buffer = _field(tensor, "Buffer", dict, where)
        bid = _field(buffer, "Id", int, where + ".Buffer")
        offsets = _optional_dims(tensor, "Offsets", where) or ()
        padded = _optional_dims(tensor, "PaddedShape", where) or \
            _optional_dims(tensor, "Strides", where) or shape
        if any(offsets) or padded != shape:
            raise ArkError(f"{where}: result tensor {tid} is a partial window of buffer "
                           f"{bid}; partial in-place writes are not supported")
        self.values[tid] = node
        self.buffers[bid] = node
        if buffer.get("SendTags"):
            self.cross_rank.append(("send", bid, buffer["SendTags"]))


def _matmul(b, op, reads, where):
    a_id, o_id = reads
    a, o = b.nodes[a_id].shape, b.nodes[o_id].shape
    if len(a) < 2 or len(o) < 2:
        raise ArkError(f"{where}: Matmul operands need rank >= 2, not {list(a)} and {list(o)}")
    if _arg(op, "TransposeInput", "BOOL", where, False):
        a = (*a[:-2], a[-1], a[-2])
        a_id = b.op("aten.transpose.int", [Ref(a_id), -1, -2], ["self", "dim0", "dim1"], a)
    if _arg(op, "TransposeOther", "BOOL", where, False):
        o = (*o[:-2], o[-1], o[-2])
        o_id = b.op("aten.transpose.int", [Ref(o_id), -1, -2], ["self", "dim0", "dim1"], o)
    if a[-1] != o[-2]:
        raise ArkError(f"{where}: inner dimensions differ: {list(a)} and {list(o)}")
    mnk = _arg(op, "ShapeMNK", "DIMS", where, [a[-2], o[-1], a[-1]])
    if list(mnk) != [a[-2], o[-1], a[-1]]:
        raise ArkError(f"{where}: ShapeMNK {mnk} does not match operands {list(a)} x {list(o)}")
    batch = _broadcast(where, a[:-2], o[:-2])
    return b.op("aten.matmul.default", [Ref(a_id), Ref(o_id)], ["self", "other"],
                (*batch, a[-2], o[-1]))


def _broadcast(where, *shapes):
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise ArkError(f"{where}: shapes {', '.join(str(list(s)) for s in shapes)} do not "
                       f"broadcast") from None


def _one_read(reads, kind, where):
    if len(reads) != 1:
        raise ArkError(f"{where}: {kind} reads one tensor, not {len(reads)}")
    return reads[0]


def import_ark(source, path=None):
    """Import an ARK model (a path, JSON text or a parsed dict).

    Returns
    -------
    graph : Graph
    cross_rank : list of (direction, buffer id, tags)
        Buffers exchanged with other ranks (empty for single-rank models).
    """
    where_file = str(path or "<ark>")
    if isinstance(source, dict):
        model = source
    else:
        text = source
        if isinstance(source, Path) or (isinstance(source, str) and source.endswith(".json")
                                        and Path(source).is_file()):
            where_file = str(source)
            text = Path(source).read_text(encoding="utf-8")
        _nesting(text, where_file)
        try:
            model = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ArkError(f"{where_file}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    if not isinstance(model, dict):
        raise ArkError(f"{where_file}: the model must be a JSON object")
    b = _Builder(model)
    read_later = set()
    nodes = _field(model, "Nodes", list, where_file)
    for j, node in enumerate(nodes):
        for op in _field(node, "Ops", list, f"{where_file}: Nodes[{j}]"):
            tensors = op.get("ReadTensors") if isinstance(op, dict) else None
            for t in tensors if isinstance(tensors, list) else ():
                if isinstance(t, dict) and _is(t.get("Id"), int):
                    read_later.add(t["Id"])
    produced = []
    for j, node in enumerate(nodes):
        nid = _field(node, "Id", int, f"{where_file}: Nodes[{j}]")
        for k, op in enumerate(_field(node, "Ops", list, f"{where_file}: node {nid}")):
            if not isinstance(op, dict):
                raise ArkError(f"{where_file}: node {nid} op {k}: must be an object, not "
                               f"{op!r}")
            kind = _field(op, "Type", str, f"{where_file}: node {nid} op {k}")
            where = f"{where_file}: node {nid} op {k} ({kind} {op.get('Name', '')!r})"
            reads = [b.read(t, f"{where}.ReadTensors[{j}]")
                     for j, t in enumerate(_field(op, "ReadTensors", list, where))]
            results = _field(op, "ResultTensors", list, where)
            if len(results) != 1:
                raise ArkError(f"{where}: expected one result tensor, found {len(results)}")
            out_shape = tuple(_field(results[0], "Shape", list, where))
            if op.get("IsVirtual") not in (None, True, False):
                raise ArkError(f"{where}: field 'IsVirtual' must be true or false, not "
                               f"{op['IsVirtual']!r}")
            if op.get("IsVirtual"):
                if len(reads) != 1:
                    raise ArkError(f"{where}: a virtual op must read exactly one tensor")
                value = reads[0]
                if tuple(b.nodes[value].shape) != out_shape:
                    value = b.op("aten.reshape.default", [Ref(value), out_shape],
                                 ["self", "shape"], out_shape)
            elif kind == "Matmul":
                if len(reads) != 2:
                    raise ArkError(f"{where}: Matmul reads two tensors, not {len(reads)}")
                value = _matmul(b, op, reads, where)
            elif kind in _ELEMENTWISE:
                if len(reads) != 2:
                    raise ArkError(f"{where}: {kind} reads two tensors, not {len(reads)}")
                shape = _broadcast(where, *(b.nodes[r].shape for r in reads))
                args = [Ref(reads[0]), Ref(reads[1])]
                names = ["self", "other"]
                if kind in ("Add", "Sub"):
                    args.append(1)
                    names.append("alpha")
                value = b.op(_ELEMENTWISE[kind], args, names, shape)
            elif kind in _UNARY:
                read = _one_read(reads, kind, where)
                value = b.op(_UNARY[kind], [Ref(read)], ["self"], b.nodes[read].shape)
            elif kind in ("ScalarAdd", "ScalarMul"):
                _one_read(reads, kind, where)
                scalar = float(_arg(op, "Value", "FLOAT", where))
                name = "aten.add.Tensor" if kind == "ScalarAdd" else "aten.mul.Tensor"
                args = [Ref(reads[0]), scalar] + ([1] if kind == "ScalarAdd" else [])
                names = ["self", "other"] + (["alpha"] if kind == "ScalarAdd" else [])
                value = b.op(name, args, names, b.nodes[reads[0]].shape)
            elif kind in _REDUCE:
                shape = b.nodes[_one_read(reads, kind, where)].shape
                axis = _arg(op, "Axis", "INT", where)
                keep = bool(_arg(op, "KeepDim", "BOOL", where, True))
                if not -len(shape) <= axis < len(shape):
                    raise ArkError(f"{where}: Axis {axis} out of range for rank {len(shape)}")
                axis %= len(shape)
                out = tuple(1 if k == axis else d for k, d in enumerate(shape)) if keep else \
                    tuple(d for k, d in enumerate(shape) if k != axis)
                args = [Ref(reads[0]), (axis,), keep] + ([] if kind == "ReduceMax" else [None])
                names = ["self", "dim", "keepdim"] + ([] if kind == "ReduceMax" else ["dtype"])
                value = b.op(_REDUCE[kind], args, names, out)
            elif kind == "Transpose":
                perm = list(_arg(op, "Permutation", "DIMS", where))
                shape = b.nodes[_one_read(reads, kind, where)].shape
                if sorted(perm) != list(range(len(shape))):
                    raise ArkError(f"{where}: Permutation {perm} is not a permutation of "
                                   f"{len(shape)} dims")
                dims = [perm.index(k) for k in range(len(perm))]  # output k <- input dims[k]
                value = b.op("aten.permute.default", [Ref(reads[0]), tuple(dims)],
                             ["self", "dims"], tuple(shape[d] for d in dims))
            else:
                raise ArkError(f"{where}: op type {kind!r} is not supported")
            b.result(results[0], value, f"{where}.ResultTensors[0]")
            produced.append((results[0]["Id"], value))  # an int: result() checked it
    outputs = []
    for tid, value in produced:
        if tid not in read_later and value not in outputs:
            outputs.append(value)
    for direction, bid, _ in b.cross_rank:
        if direction == "send" and b.buffers[bid] not in outputs:
            outputs.append(b.buffers[bid])
    if not outputs:
        raise ArkError(f"{where_file}: the model produces no output")
    return verify(Graph(tuple(b.nodes), tuple(outputs), {})), b.cross_rank
