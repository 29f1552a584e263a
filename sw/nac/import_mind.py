"""MIND Core IR (textual form) -> :class:`nac.ir.Graph` (spec: ``mind-core-ir.md``).

Grammar: one instruction per line, ``%<id> = <Opcode>(<operands>) {attrs} : Tensor<dt,
[dims]>``; ``#`` starts a comment; the module ends with ``outputs: %a, %b``. Also accepted,
outside the EBNF but used by the upstream examples: ``ConstF32``/``ConstF64`` (defined in
the spec's text) and alias lines ``%8 = %7`` (the same value under a new id).

The verifier implements the spec's rules: single definition, operands defined earlier,
outputs exist, the declared result type equals the one the rules compute (dtype and
shape), dtype equality for binary ops and linear algebra, broadcasting, reshape element
count, permutations, axis ranges and duplicates, squeeze of size-1 dims only, slice
lengths and non-zero steps, integer gather indices, matmul inner dimension, Conv2d
NHWC/HWCF channels, strides and padding. ``Div`` is rejected (not in Core v1). Every
error is a :class:`MindError` with ``file:line:column``.

Lowering: BinOp -> ``aten.add/sub/mul``, Sum/Mean -> ``aten.sum.dim_IntList`` /
``aten.mean.dim``, Reshape/ExpandDims/Squeeze -> reshape (``nac.view``), Transpose ->
``aten.permute``, Dot/MatMul -> ``aten.matmul``, Relu/Neg/Exp/Log -> their ATen ops;
Index, Slice, Gather and the NHWC Conv2d keep MIND names (``mind.*``) as custom ops, with
kernels in the float runtime. Constants become stored parameters (``<INPUT B=1>``), so the
``.nac`` file is self-contained.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from nac.ir import Graph, IRError, Node, Ref, verify

__all__ = ["MindError", "import_mind", "parse_mind"]

_DTYPES = {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64",
           "bool": "bool", "f16": "float16"}


#: Deepest list literal read (a rank-32 tensor literal).
_MAX_NESTING = 32

#: Parameters (non-operand arguments) of each opcode, in order: ``ints`` a list of
#: integers, ``ranges`` slice ranges, ``bool``, ``int``, ``number``, ``literal`` a tensor
#: literal, ``binop`` the operator word, ``padding`` Valid / Same / Custom(...).
_PARAMS = {"Input": (), "ConstI64": ("int",), "ConstF32": ("number",),
           "ConstF64": ("number",), "ConstTensor": ("literal",), "BinOp": ("binop",),
           "Sum": ("ints", "bool"), "Mean": ("ints", "bool"), "Reshape": ("ints",),
           "Transpose": ("ints",), "ExpandDims": ("ints",), "Squeeze": ("ints",),
           "Index": ("ints",), "Slice": ("ranges",), "Gather": (), "Dot": (), "MatMul": (),
           "Conv2d": ("ints", "padding"), "Relu": (), "Neg": (), "Exp": (), "Log": ()}
_PARAM_TEXT = {"ints": "a list of integers", "ranges": "a list of start:end[:step] ranges",
               "bool": "true or false", "int": "an integer", "number": "a number",
               "literal": "a tensor literal [...]", "binop": "Add, Sub or Mul",
               "padding": "Valid, Same or Custom([[t, b], [l, r]])"}
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _param_ok(kind, v):
    if kind == "ints":
        return isinstance(v, list) and all(_is_int(x) for x in v)
    if kind == "ranges":
        return isinstance(v, list) and all(isinstance(x, tuple) for x in v)
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "int":
        return _is_int(v) and _INT64[0] <= v <= _INT64[1]
    if kind == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if kind == "literal":
        return isinstance(v, list)
    if kind == "binop":
        return v in ("Add", "Sub", "Mul")
    return v in ("Valid", "Same") or (isinstance(v, tuple) and v[0] == "Custom")


def _check_params(line, op, params, col):
    """The parameters of *op* have the count and kinds of :data:`_PARAMS`."""
    kinds = _PARAMS[op]
    if op == "BinOp" and params and params[0] == "Div":
        line.fail("BinOp operator must be Add, Sub or Mul (Div is not Core v1), not 'Div'", col)
    if op == "Conv2d" and len(params) == 1:
        kinds = kinds[:1]  # padding defaults to Valid
    wanted = ", ".join(_PARAM_TEXT[k] for k in kinds) or "no parameters"
    if len(params) != len(kinds) or not all(_param_ok(k, v) for k, v in
                                            zip(kinds, params, strict=True)):
        got = ", ".join(_describe(v) for v in params) or "none"
        line.fail(f"{op} takes {wanted}; got {got}", col)


def _describe(v):
    if isinstance(v, tuple) and v and v[0] == "Custom":
        return "Custom(...)"
    if isinstance(v, list):
        return "a list" if len(repr(v)) > 40 else repr(v)
    return repr(v) if not isinstance(v, bool) else str(v).lower()


class MindError(IRError):
    """A MIND Core IR file is malformed or fails verification (``file:line:col: ...``)."""


_TOKEN = re.compile(r"""
    (?P<ws>[ \t]+)
  | (?P<id>%[A-Za-z0-9_]+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>[-+]?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\.\d+|\d+|inf|nan))
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[()\[\]{}:,=<>?])
""", re.VERBOSE)


class _Line:
    def __init__(self, text, lineno, path):
        self.path, self.lineno, self.text = path, lineno, text
        self.tokens, pos = [], 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                self.fail(f"unexpected character {text[pos]!r}", pos)
            if m.lastgroup != "ws":
                self.tokens.append((m.lastgroup, m.group(), pos))
            pos = m.end()
        self.i = 0

    def fail(self, message, col=None):
        if col is None:
            col = self.tokens[self.i][2] if self.i < len(self.tokens) else len(self.text)
        raise MindError(f"{self.path}:{self.lineno}:{col + 1}: {message}")

    def col(self):
        return self.tokens[self.i][2] if self.i < len(self.tokens) else len(self.text)

    def peek(self):
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self, kind=None, text=None, what=None):
        if self.i >= len(self.tokens):
            self.fail(f"expected {what or text or kind}, found end of line")
        tok = self.tokens[self.i]
        if (kind and tok[0] != kind) or (text and tok[1] != text):
            self.fail(f"expected {what or text or kind}, found {tok[1]!r}")
        self.i += 1
        return tok[1]

    def number(self, integer=False):
        if self.peek() == "?":
            self.fail("dimension '?' (unknown size) is not supported: the importer needs "
                      "static shapes; give every dimension as an integer")
        tok = self.take("number", what="an integer" if integer else "a number")
        if integer:
            if not re.fullmatch(r"[-+]?\d+", tok):
                self.i -= 1
                self.fail(f"expected an integer, found {tok!r}")
            return int(tok)
        return float(tok) if re.search(r"[.eEn]", tok) else int(tok)

    def int_list(self):
        self.take("punct", "[")
        out = []
        while self.peek() != "]":
            out.append(self.number(integer=True))
            if self.peek() == ",":
                self.take("punct", ",")
        self.take("punct", "]")
        return out

    def nested(self, depth=0):
        if self.peek() == "[":
            if depth >= _MAX_NESTING:
                self.fail(f"list literal nested deeper than {_MAX_NESTING} levels")
            self.take("punct", "[")
            out = []
            while self.peek() != "]":
                out.append(self.nested(depth + 1))
                if self.peek() == ",":
                    self.take("punct", ",")
            self.take("punct", "]")
            return out
        return self.number()

    def end(self):
        if self.i != len(self.tokens):
            self.fail(f"unexpected {self.tokens[self.i][1]!r}")


def _broadcast(a, b):
    out = []
    for x, y in zip(reversed((1,) * (len(b) - len(a)) + tuple(a)),
                    reversed((1,) * (len(a) - len(b)) + tuple(b)), strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y) if 1 in (x, y) else x)
    return tuple(reversed(out))


def _strip_comment(raw):
    out, in_string = [], False
    for ch in raw:
        if ch == '"':
            in_string = not in_string
        if ch == "#" and not in_string:
            break
        out.append(ch)
    return "".join(out)


def parse_mind(text, path="<mind>"):
    """Parse and verify a MIND Core IR module; return ``(instructions, outputs)``.

    Each instruction is a dict: ``id``, ``op``, ``operands`` (ids), ``params``,
    ``attrs``, ``dtype``, ``shape``, ``line``.
    """
    defs, order, outputs = {}, [], None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        body = _strip_comment(raw)
        if not body.strip():
            continue
        line = _Line(body, lineno, path)
        if outputs is not None:
            line.fail("nothing may follow the outputs declaration")
        if line.peek() == "outputs":
            line.take("word")
            line.take("punct", ":")
            outputs = []
            while line.peek() is not None:
                col = line.col()
                ident = line.take("id", what="a value id")
                if ident not in defs:
                    line.fail(f"output {ident} is not defined", col)
                outputs.append(defs[ident]["id"])
                if line.peek() == ",":
                    line.take("punct", ",")
            continue
        col = line.col()
        ident = line.take("id", what="a value id (%N)")
        if ident in defs:
            line.fail(f"{ident} is defined twice (first on line {defs[ident]['line']})", col)
        line.take("punct", "=")
        if line.peek() is not None and line.peek().startswith("%"):
            col = line.col()
            source = line.take("id")
            if source not in defs:
                line.fail(f"{source} is not defined before use", col)
            line.end()
            defs[ident] = dict(defs[source], line=lineno)  # an alias: the same value
            continue
        op_col = line.col()
        op = line.take("word", what="an opcode")
        line.take("punct", "(")
        operands, params = [], []
        while line.peek() != ")":
            if line.peek() is None:
                line.fail("missing ')'")
            tok_col = line.col()
            if line.peek().startswith("%"):
                name = line.take("id")
                if name not in defs:
                    line.fail(f"{name} is not defined before use", tok_col)
                operands.append((defs[name], tok_col))
            elif line.peek() == "[":
                params.append(line.nested() if op == "ConstTensor" else _range_or_list(line))
            elif line.peek() in ("true", "false"):
                params.append(line.take("word") == "true")
            elif line.peek() == "Custom":
                line.take("word")
                line.take("punct", "(")
                params.append(("Custom", line.nested()))
                line.take("punct", ")")
            elif line.tokens[line.i][0] == "word":
                params.append(line.take("word"))
            elif line.tokens[line.i][0] != "number":
                line.fail(f"expected an operand, a list or a number, found {line.peek()!r}")
            else:
                params.append(line.number())
            if line.peek() == ",":
                line.take("punct", ",")
        line.take("punct", ")")
        attrs = {}
        if line.peek() == "{":
            line.take("punct", "{")
            while line.peek() != "}":
                key = line.take("word", what="an attribute name")
                line.take("punct", ":")
                if line.i < len(line.tokens) and line.tokens[line.i][0] == "string":
                    col = line.col()
                    try:
                        attrs[key] = json.loads(line.take("string"))
                    except ValueError as exc:
                        line.fail(f"bad string escape: {exc.msg}", col)
                elif line.peek() == "[":
                    attrs[key] = line.nested()
                else:
                    attrs[key] = line.take()
                if line.peek() == ",":
                    line.take("punct", ",")
            line.take("punct", "}")
        line.take("punct", ":")
        type_col = line.col()
        dtype, shape = _tensor_type(line)
        line.end()
        ins = {"id": len(order), "op": op, "operands": [o["id"] for o, _ in operands],
               "params": params, "attrs": attrs, "dtype": dtype, "shape": shape, "line": lineno}
        _verify(ins, [o for o, _ in operands], line, op_col, type_col)
        defs[ident] = ins
        order.append(ins)
    if outputs is None:
        raise MindError(f"{path}: missing the 'outputs: ...' declaration")
    if not outputs:
        raise MindError(f"{path}: the module declares no outputs")
    return order, outputs


def _range_or_list(line):
    """``[1, 2]`` or slice ranges ``[0:2, 1:3:1]``."""
    line.take("punct", "[")
    items = []
    while line.peek() != "]":
        first = line.number(integer=True)
        if line.peek() == ":":
            line.take("punct", ":")
            end = line.number(integer=True)
            step = 1
            if line.peek() == ":":
                line.take("punct", ":")
                step = line.number(integer=True)
            items.append((first, end, step))
        else:
            items.append(first)
        if line.peek() == ",":
            line.take("punct", ",")
    line.take("punct", "]")
    return items


def _tensor_type(line):
    line.take("word", "Tensor", what="Tensor<dtype, [dims]>")
    line.take("punct", "<")
    col = line.col()
    dt = line.take("word", what="a dtype")
    if dt not in _DTYPES:
        line.fail(f"unknown dtype {dt!r} (known: {', '.join(_DTYPES)})", col)
    line.take("punct", ",")
    col = line.col()
    shape = line.int_list()
    if any(d <= 0 for d in shape):
        line.fail(f"tensor dimensions must be positive, not {shape}", col)
    line.take("punct", ">")
    return _DTYPES[dt], tuple(shape)


def _axes(line, axes, rank, col, what="axis"):
    if len(set(axes)) != len(axes):
        line.fail(f"duplicate {what} in {axes}", col)
    for a in axes:
        if not 0 <= a < rank:
            line.fail(f"{what} {a} out of range for rank {rank}", col)


def _verify(ins, operands, line, op_col, type_col):
    """Compute the result type by the spec's rules and compare with the declared one."""
    op, p = ins["op"], ins["params"]
    shapes = [tuple(o["shape"]) for o in operands]
    dtypes = [o["dtype"] for o in operands]
    arity = {"Input": 0, "ConstI64": 0, "ConstF32": 0, "ConstF64": 0, "ConstTensor": 0,
             "BinOp": 2, "Sum": 1, "Mean": 1, "Reshape": 1, "Transpose": 1, "ExpandDims": 1,
             "Squeeze": 1, "Index": 1, "Slice": 1, "Gather": 2, "Dot": 2, "MatMul": 2,
             "Conv2d": 2, "Relu": 1, "Neg": 1, "Exp": 1, "Log": 1}
    if op not in arity:
        line.fail(f"unknown opcode {op!r}", op_col)
    if len(operands) != arity[op]:
        line.fail(f"{op} takes {arity[op]} operand(s), not {len(operands)}", op_col)
    _check_params(line, op, p, op_col)
    dtype = dtypes[0] if dtypes else None
    if op == "Input":
        dtype, shape = ins["dtype"], ins["shape"]
        if not isinstance(ins["attrs"].get("name"), str):
            line.fail("Input needs a name attribute with a string value, e.g. "
                      "{name: \"x\"}", op_col)
    elif op == "ConstI64":
        dtype, shape = "int64", ()
    elif op in ("ConstF32", "ConstF64"):
        dtype, shape = ("float32" if op == "ConstF32" else "float64"), ()
    elif op == "ConstTensor":
        try:
            data = np.asarray(p[0], dtype=np.float64)
        except (ValueError, TypeError):
            line.fail("ConstTensor literal is not rectangular (rows of different lengths)",
                      op_col)
        if ins["dtype"] not in ("float32", "float64", "float16") and data.size and (
                not np.all(np.isfinite(data)) or np.any(data != np.round(data)) or
                data.min() < _INT64[0] or data.max() > _INT64[1]):
            line.fail(f"ConstTensor of {ins['dtype']} holds values that are not integers of "
                      f"that type", op_col)
        if data.shape != ins["shape"]:
            line.fail(f"ConstTensor literal has shape {list(data.shape)}, the type says "
                      f"{list(ins['shape'])}", op_col)
        dtype, shape = ins["dtype"], ins["shape"]
    elif op == "BinOp":
        kind = p[0] if p else None
        if kind not in ("Add", "Sub", "Mul"):
            line.fail(f"BinOp operator must be Add, Sub or Mul (Div is not Core v1), not "
                      f"{kind!r}", op_col)
        if dtypes[0] != dtypes[1]:
            line.fail(f"BinOp operands have different dtypes {dtypes[0]} and {dtypes[1]}", op_col)
        shape = _broadcast(*shapes)
        if shape is None:
            line.fail(f"shapes {list(shapes[0])} and {list(shapes[1])} do not broadcast", op_col)
    elif op in ("Sum", "Mean"):
        axes, keep = p[0], p[1]
        _axes(line, axes, len(shapes[0]), op_col)
        if not axes:
            shape = ()
        elif keep:
            shape = tuple(1 if k in axes else d for k, d in enumerate(shapes[0]))
        else:
            shape = tuple(d for k, d in enumerate(shapes[0]) if k not in axes)
    elif op == "Reshape":
        new = list(p[0])
        count = math.prod(shapes[0])
        if new.count(-1) > 1 or any(d == 0 or d < -1 for d in new):
            line.fail(f"reshape target {new} needs positive dims and at most one -1", op_col)
        if -1 in new:
            rest = math.prod(d for d in new if d != -1)
            if count % rest:
                line.fail(f"cannot infer -1 in {new} for {count} elements", op_col)
            new[new.index(-1)] = count // rest
        if math.prod(new) != count:
            line.fail(f"reshape from {list(shapes[0])} ({count} elements) to {new} "
                      f"({math.prod(new)} elements)", op_col)
        shape = tuple(new)
    elif op == "Transpose":
        perm = p[0]
        if sorted(perm) != list(range(len(shapes[0]))):
            line.fail(f"permutation {perm} is not a permutation of the {len(shapes[0])} axes",
                      op_col)
        shape = tuple(shapes[0][k] for k in perm)
    elif op == "ExpandDims":
        shape = list(shapes[0])
        for a in sorted(p[0]):
            if not 0 <= a <= len(shape):
                line.fail(f"axis {a} out of range for rank {len(shape)} at insertion", op_col)
            shape.insert(a, 1)
        shape = tuple(shape)
    elif op == "Squeeze":
        _axes(line, p[0], len(shapes[0]), op_col)
        for a in p[0]:
            if shapes[0][a] != 1:
                line.fail(f"cannot squeeze axis {a} of size {shapes[0][a]}", op_col)
        shape = tuple(d for k, d in enumerate(shapes[0]) if k not in p[0])
    elif op == "Index":
        if len(p[0]) != len(shapes[0]):
            line.fail(f"Index has {len(p[0])} indices for rank {len(shapes[0])}", op_col)
        shape = ()
    elif op == "Slice":
        ranges = p[0]
        if len(ranges) != len(shapes[0]) or not all(isinstance(r, tuple) for r in ranges):
            line.fail(f"Slice needs one start:end[:step] per axis ({len(shapes[0])})", op_col)
        if any(r[2] == 0 for r in ranges):
            line.fail("Slice steps must be non-zero", op_col)
        shape = tuple(max(0, -(-(e - s) // st)) for s, e, st in ranges)
    elif op == "Gather":
        if dtypes[1] not in ("int32", "int64"):
            line.fail(f"Gather indices must be i32 or i64, not {dtypes[1]}", op_col)
        shape = shapes[1] + shapes[0][1:]
    elif op in ("Dot", "MatMul"):
        if dtypes[0] != dtypes[1]:
            line.fail(f"{op} operands have different dtypes {dtypes[0]} and {dtypes[1]}", op_col)
        a, b = shapes
        if op == "MatMul" and (len(a) < 2 or len(b) < 2):
            line.fail(f"MatMul operands need rank >= 2, not {len(a)} and {len(b)}", op_col)
        if op == "Dot" and not (1 <= len(a) <= 2 and 1 <= len(b) <= 2):
            line.fail(f"Dot operands must have rank 1 or 2, not {len(a)} and {len(b)}", op_col)
        k_a = a[-1]
        k_b = b[-2] if len(b) >= 2 else b[0]
        if k_a != k_b:
            line.fail(f"inner dimensions differ: {list(a)} and {list(b)}", op_col)
        if len(a) >= 2 and len(b) >= 2:
            batch = _broadcast(a[:-2], b[:-2])
            if batch is None:
                line.fail(f"batch dimensions of {list(a)} and {list(b)} do not broadcast", op_col)
            shape = (*batch, a[-2], b[-1])
        else:
            shape = (a[:-1] if len(a) == 2 else ()) + (b[1:] if len(b) == 2 else ())
    elif op == "Conv2d":
        x, w = shapes
        if len(x) != 4 or len(w) != 4:
            line.fail("Conv2d input and filter must have rank 4 (NHWC, HWCF)", op_col)
        if x[3] != w[2]:
            line.fail(f"Conv2d channels differ: input {x[3]}, filter {w[2]}", op_col)
        if dtypes[0] != dtypes[1]:
            line.fail("Conv2d input and filter dtypes differ", op_col)
        strides = p[0] if p else None
        if not (isinstance(strides, list) and len(strides) == 2 and min(strides) > 0):
            line.fail("Conv2d strides must be two positive integers", op_col)
        pads = _padding(line, p[1] if len(p) > 1 else None, x, w, strides, op_col)
        ins["pads"] = pads
        oh = (x[1] + pads[0] + pads[1] - w[0]) // strides[0] + 1
        ow = (x[2] + pads[2] + pads[3] - w[1]) // strides[1] + 1
        if oh <= 0 or ow <= 0:
            line.fail(f"Conv2d output would be empty ({oh}x{ow})", op_col)
        shape = (x[0], oh, ow, w[3])
    else:  # Relu, Neg, Exp, Log
        if op in ("Relu", "Exp", "Log") and dtype not in ("float32", "float64", "float16"):
            line.fail(f"{op} needs a floating-point input, not {dtype}", op_col)
        shape = shapes[0]
    if (dtype, tuple(shape)) != (ins["dtype"], ins["shape"]):
        line.fail(f"declared type Tensor<{ins['dtype']}, {list(ins['shape'])}> differs from "
                  f"the computed Tensor<{dtype}, {list(shape)}>", type_col)


def _padding(line, spec, x, w, strides, col):
    """Padding as (top, bottom, left, right)."""
    if spec == "Valid":
        return (0, 0, 0, 0)
    if spec == "Same":
        pads = []
        for size, kernel, stride in zip(x[1:3], w[:2], strides, strict=True):
            out = -(-size // stride)
            total = max((out - 1) * stride + kernel - size, 0)
            pads += [total // 2, total - total // 2]
        return tuple(pads)
    if isinstance(spec, tuple) and spec[0] == "Custom":
        pairs = spec[1]
        if len(pairs) != 2 or any(len(pr) != 2 or min(pr) < 0 for pr in pairs):
            line.fail("Custom padding needs 2 pairs of non-negative integers", col)
        return (pairs[0][0], pairs[0][1], pairs[1][0], pairs[1][1])
    line.fail(f"Conv2d padding must be Valid, Same or Custom(...), not {spec!r}", col)
    raise AssertionError  # unreachable


def _op(name, args, names, shape, dtype):
    return Node("op", tuple(shape), dtype, op=name, args=tuple(args), arg_names=tuple(names))


def import_mind(source, path=None):
    """Import a MIND Core IR module (text or a path) as a verified :class:`Graph`."""
    if path is None and isinstance(source, (str, Path)) and Path(str(source)).suffix == ".ir" \
            and Path(str(source)).is_file():
        path = Path(str(source))
        source = path.read_text(encoding="utf-8")
    instructions, outputs = parse_mind(source, str(path or "<mind>"))
    nodes, tensors = [], {}
    for ins in instructions:
        op, p, shape, dtype = ins["op"], ins["params"], ins["shape"], ins["dtype"]
        refs = [Ref(i) for i in ins["operands"]]
        if op == "Input":
            node = Node("input", shape, dtype, name=ins["attrs"]["name"])
        elif op.startswith("Const"):
            name = f"const.{ins['id']}"
            value = p[0] if p else []
            tensors[name] = np.asarray(value, dtype=dtype).reshape(shape)
            # Stored with the weights (``<INPUT B=1>``) so the file is self-contained;
            # a lifted constant (B=3) would have to be supplied at run time.
            node = Node("param", shape, dtype, name=name)
        elif op == "BinOp":
            name = {"Add": "aten.add.Tensor", "Sub": "aten.sub.Tensor", "Mul": "aten.mul.Tensor"}
            extra = ((1,), ("alpha",)) if p[0] != "Mul" else ((), ())
            node = _op(name[p[0]], [*refs, *extra[0]], ["self", "other", *extra[1]], shape,
                       dtype)
        elif op in ("Sum", "Mean"):
            axes, keep = p[0], p[1] and bool(p[0])
            node = _op("aten.sum.dim_IntList" if op == "Sum" else "aten.mean.dim",
                       [refs[0], tuple(axes), keep, None], ["self", "dim", "keepdim", "dtype"],
                       shape, dtype)
        elif op in ("Reshape", "ExpandDims", "Squeeze"):
            node = _op("aten.reshape.default", [refs[0], tuple(shape)], ["self", "shape"],
                       shape, dtype)
        elif op == "Transpose":
            node = _op("aten.permute.default", [refs[0], tuple(p[0])], ["self", "dims"], shape,
                       dtype)
        elif op in ("Dot", "MatMul"):
            node = _op("aten.matmul.default", refs, ["self", "other"], shape, dtype)
        elif op == "Index":
            node = _op("mind.index", [refs[0], tuple(p[0])], ["self", "indices"], shape, dtype)
        elif op == "Slice":
            flat = tuple(v for r in p[0] for v in r)
            node = _op("mind.slice", [refs[0], flat], ["self", "ranges"], shape, dtype)
        elif op == "Gather":
            node = _op("mind.gather", refs, ["self", "indices"], shape, dtype)
        elif op == "Conv2d":
            node = _op("mind.conv2d_nhwc", [*refs, tuple(p[0]), tuple(ins["pads"])],
                       ["input", "weight", "stride", "padding"], shape, dtype)
        else:
            node = _op({"Relu": "aten.relu.default", "Neg": "aten.neg.default",
                        "Exp": "aten.exp.default", "Log": "aten.log.default"}[op],
                       refs, ["self"], shape, dtype)
        nodes.append(node)
    return verify(Graph(tuple(nodes), tuple(outputs), tensors))
