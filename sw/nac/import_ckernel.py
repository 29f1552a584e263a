"""C-Kernel-Engine IR v2 -> :class:`nac.ir.Graph` (spec: ``ckernel-ir-v2.md``).

An IR v2 file holds a model ``config``, a table of symbolic ``dimensions``, ``buffers``
(weights and activations with symbolic shapes, roles, aliases and conditions) and
``nodes``: kernel invocations in execution order, each binding kernel arguments to
buffer names. This importer runs the nodes symbolically: every buffer holds its current
value (a graph node), a kernel reads the values of its input bindings, expands into NAC
graph ops and stores new values into its output bindings (in-place kernels such as
``rope`` simply replace the value).

Shapes: a shape entry ``{"dim", "mult", "div"}`` is ``value(dim) * mult / div`` (exact,
or an error). ``dim`` is a dimension id (spec) or a dimension name; the generated files
carry both, the name in ``dim`` and the id in ``dim_id``, which must then agree.
``tokens=`` overrides the runtime dimension ``tokens``. ``resolved_shape`` is not used
(the spec calls it a byte size, the generated files hold element shapes; the symbolic
shape is the one source of truth). Padded layouts (an ``aligned_*`` dimension larger
than its logical one) are rejected.

Buffers and values:

* ``weight`` buffers become parameters (``<INPUT B=1>``) named ``<name>`` (global scope)
  or ``layers.<layer>.<name>`` (layer scope): synthesised, deterministic for a ``seed``,
  or read from a safetensors file (``weights=``) under those names.
* ``alias_of`` makes a buffer another name of its target (tied embeddings).
* Layer chaining: a layer-scope buffer with role ``input`` that is read before anything
  writes it takes the value of the previous layer's ``output`` buffer; without one
  (the first layer) it is a model input (``<INPUT B=0>``).
* ``rope_cos_cache`` / ``rope_sin_cache`` style caches that no node writes are computed
  at import from ``config.rope_theta`` (``cos(t * theta ** (-2 i / head_dim))``) and
  stored as parameters.
* Outputs: every value a node writes that nothing reads afterwards (for a decoder stack,
  the last layer's ``output``). Kernel side outputs kept for the backward pass
  (``rmsnorm`` ``rstd``, ``attention`` ``scores``, ``attn_proj`` ``proj_scratch``) are
  not computed.

Conditions (``condition`` of buffers and nodes) are ``name``, ``name <op> number``
(``> >= < <= == !=``), ``!x``, and ``&&`` / ``||`` with parentheses. A name is looked up
in the derived flags (``training_enabled`` = false, this is a forward import;
``rope_disabled`` = not ``rope_theta > 0``), then in ``config``; a name found in neither
is 0. A node whose condition is false is skipped; a binding to a buffer whose condition
is false is absent (allowed only for optional arguments).

Kernels (by the node's ``op``) and their expansion into graph ops (float32):

* ``rmsnorm``: ``x * rsqrt(mean(x * x, -1) + eps) * gamma``, ``eps`` = ``rms_norm_eps``.
* ``qkv_project``: head-major ``q/k/v[h, t, :] = x[t] @ w[h].T + b[h]`` as one
  ``linear`` per projection (weights viewed ``[heads * head_dim, embed]``), reshape and
  permute to ``[heads, tokens, head_dim]``.
* ``rope``: rotate-half RoPE, ``x * cos + rotate_half(x) * sin``; the half-width caches
  are widened with a constant ``[I I]`` matmul and ``rotate_half`` is a constant signed
  permutation matmul (both exact).
* ``attention``: causal ``scaled_dot_product_attention`` with scale ``1/sqrt(head_dim)``;
  grouped-query attention views ``q`` as ``[kv_heads, group, tokens, head_dim]`` against
  ``k``/``v`` as ``[kv_heads, 1, tokens, head_dim]`` (query head ``h`` uses kv head
  ``h // group``, as the engine does).
* ``attn_proj``: ``linear`` of ``attn_out`` permuted to ``[tokens, heads * head_dim]``
  with ``wo`` permuted to ``[embed, heads * head_dim]``.
* ``mlp_up`` / ``mlp_down``: ``linear`` (``x @ w.T + b``).
* ``swiglu``: ``silu(gate) * up`` with ``gate``, ``up`` the first and second halves of
  ``fc1_out``.
* ``residual_add``: ``a + b``.

Every error is a :class:`CKernelError` naming the file and the node (index, layer, op),
buffer, dimension or config field, and the offending field.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nac.ir import Graph, IRError, Node, Ref, verify

__all__ = ["KERNELS", "CKernelError", "CKernelImport", "import_ckernel", "synthesise"]

_MISSING = object()
_SCOPES = ("global", "layer")
_ALIGNED = {"aligned_embed": "embed", "aligned_head": "head_dim",
            "aligned_intermediate": "intermediate"}


class CKernelError(IRError):
    """A C-Kernel-Engine IR v2 file is malformed or uses something not supported."""


@dataclass(frozen=True)
class CKernelImport:
    """What :func:`import_ckernel` built besides the graph.

    Attributes
    ----------
    nodes : int
        IR v2 nodes expanded.
    skipped : tuple of (int, str)
        Index and op of the nodes whose condition was false.
    inputs : tuple of (str, tuple of int)
        Model inputs (``<INPUT B=0>``) in order.
    outputs : tuple of str
        The buffer (``layers.<l>.<name>`` or ``<name>``) each model output comes from.
    dimensions : dict of str to int
        Resolved dimension values (after ``tokens=``).
    weights : str
        ``"synthesised (seed N)"`` or the safetensors path the weights came from.
    """

    nodes: int
    skipped: tuple
    inputs: tuple
    outputs: tuple
    dimensions: dict = field(default_factory=dict)
    weights: str = ""


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _field(obj, name, kind, where, default=_MISSING):
    """``obj[name]`` checked against *kind* (``int``, ``str``, ``list``, ``dict``,
    ``float`` for any real number, or a tuple of those / ``None``)."""
    if not isinstance(obj, dict):
        raise CKernelError(f"{where}: must be a JSON object, not {type(obj).__name__}")
    if name not in obj:
        if default is not _MISSING:
            return default
        raise CKernelError(f"{where}: missing field {name!r}")
    value = obj[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if k is None and value is None:
            return value
        if k is int and _is_int(value):
            return value
        if k is float and (_is_int(value) or isinstance(value, float)):
            return value
        if k in (str, list, dict) and isinstance(value, k):
            return value
    names = " or ".join({int: "an integer", float: "a number", str: "a string",
                         list: "a list", dict: "an object", None: "null"}[k] for k in kinds)
    raise CKernelError(f"{where}: field {name!r} must be {names}, not {_short(value)}")


def _real(value):
    """A JSON number as a float (integers too large for a float become +-inf)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _short(value):
    text = json.dumps(value) if isinstance(value, (dict, list, str, int, float, bool)) or \
        value is None else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------------------
# Conditions

_COND_TOKEN = re.compile(r"\s*(?:(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
                         r"|(?P<name>[A-Za-z_][A-Za-z0-9_.]*)"
                         r"|(?P<op>>=|<=|==|!=|&&|\|\||[<>!()]))")
_COMPARE = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def _tokenise_condition(text, where):
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _COND_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            col = len(text) - len(text[pos:].lstrip()) + 1
            raise CKernelError(f"{where}: condition {text!r}: unexpected character at "
                               f"column {col}")
        kind = m.lastgroup
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


def _condition(text, env, where):
    """Evaluate a condition string against *env* (a name -> number function)."""
    if text is None:
        return True
    if not isinstance(text, str):
        raise CKernelError(f"{where}: field 'condition' must be a string or null, not "
                           f"{_short(text)}")
    tokens = _tokenise_condition(text, where)
    if not tokens:
        return True
    pos = 0

    def fail(message):
        raise CKernelError(f"{where}: condition {text!r}: {message}")

    def peek():
        return tokens[pos] if pos < len(tokens) else (None, None)

    def take():
        nonlocal pos
        if pos >= len(tokens):
            fail("unexpected end")
        pos += 1
        return tokens[pos - 1]

    def value():
        kind, tok = take()
        if kind == "num":
            return _real(tok)
        if kind == "name":
            return env(tok)
        fail(f"expected a name or a number, found {tok!r}")

    def atom():
        tok = peek()[1]
        if tok == "!":
            take()
            return not atom()
        if tok == "(":
            take()
            result = disjunction()
            if take()[1] != ")":
                fail("expected ')'")
            return result
        left = value()
        tok = peek()[1]
        if tok in _COMPARE:
            take()
            return bool(_COMPARE[tok](left, value()))
        return bool(left)

    def conjunction():
        result = atom()
        while peek()[1] == "&&":
            take()
            right = atom()
            result = result and right
        return result

    def disjunction():
        result = conjunction()
        while peek()[1] == "||":
            take()
            right = conjunction()
            result = result or right
        return result

    result = disjunction()
    if pos != len(tokens):
        fail(f"unexpected {tokens[pos][1]!r}")
    return result


# ---------------------------------------------------------------------------------------
# Kernels: argument tables (inputs, optional inputs, outputs, optional outputs).

@dataclass(frozen=True)
class _Kernel:
    inputs: tuple
    optional_inputs: tuple
    outputs: tuple
    side_outputs: tuple  # bound or not, never computed


KERNELS = {
    "rmsnorm": _Kernel(("input", "gamma"), (), ("out",), ("rstd",)),
    "qkv_project": _Kernel(("input", "wq", "wk", "wv"), ("bq", "bk", "bv"), ("q", "k", "v"),
                           ()),
    "rope": _Kernel(("q", "k", "cos_cache", "sin_cache"), (), ("q", "k"), ()),
    "attention": _Kernel(("q", "k", "v"), (), ("attn_out",), ("scores",)),
    "attn_proj": _Kernel(("attn_out", "wo"), ("bo",), ("proj_tmp",), ("proj_scratch",)),
    "residual_add": _Kernel(("a", "b"), (), ("out",), ()),
    "mlp_up": _Kernel(("input", "w1"), ("b1",), ("fc1_out",), ()),
    "swiglu": _Kernel(("fc1_out",), (), ("swiglu_out",), ()),
    "mlp_down": _Kernel(("swiglu_out", "w2"), ("b2",), ("mlp_out",), ()),
}
"""Supported kernels by IR v2 ``op``: the binding names each one reads and writes."""


@dataclass
class _Buffer:
    name: str
    scope: str
    role: str
    shape: tuple
    alias_of: str | None
    enabled: bool
    index: int


class _Importer:
    def __init__(self, model, where, tokens, weights, seed, max_elements, max_total):
        self.where = where
        self.max_elements = max_elements
        self.max_total = max_total
        self.used = {}  # buffer key -> elements, of every buffer a node reads or writes
        self.model = model
        self.nodes, self.tensors = [], {}
        self.values = {}  # buffer key (layer or None, name) -> node id
        self.readers = {}  # node id -> number of reads after its write
        self.written = []  # (key, node id) in write order
        self.inputs = []
        self.seed = seed
        self.weight_file = None
        self.weights_desc = f"synthesised (seed {seed})"
        if weights is not None:
            from nac.weights import Weights

            try:
                self.weight_file = weights if hasattr(weights, "float32") else Weights(weights)
            except OSError as exc:
                raise CKernelError(f"{where}: weights file: {exc}") from None
            self.weights_desc = str(getattr(self.weight_file, "path", weights))
        self.cache = {}
        version = _field(model, "version", int, where)
        if version != 2:
            raise CKernelError(f"{where}: field 'version' is {version}; this importer reads "
                               f"IR v2")
        self.config = _field(model, "config", dict, where)
        self.dims = self._dimensions(tokens)
        self.buffers = self._buffers()

    # -- tables -------------------------------------------------------------------------

    def _dimensions(self, tokens):
        table = _field(self.model, "dimensions", list, self.where)
        by_id, by_name = {}, {}
        for k, entry in enumerate(table):
            where = f"{self.where}: dimensions[{k}]"
            ident = _field(entry, "id", int, where)
            name = _field(entry, "name", str, where)
            value = _field(entry, "value", int, where)
            if value <= 0:
                raise CKernelError(f"{where} ({name}): field 'value' must be positive, not "
                                   f"{value}")
            if ident in by_id:
                raise CKernelError(f"{where} ({name}): duplicate dimension id {ident}")
            if name in by_name:
                raise CKernelError(f"{where}: duplicate dimension name {name!r}")
            by_id[ident], by_name[name] = name, value
        if tokens is not None:
            if not _is_int(tokens) or tokens <= 0:
                raise CKernelError(f"{self.where}: tokens must be a positive integer, not "
                                   f"{tokens!r}")
            if "tokens" not in by_name:
                raise CKernelError(f"{self.where}: dimensions: no dimension named 'tokens' "
                                   f"for the tokens option to resolve")
            by_name["tokens"] = tokens
        for aligned, logical in _ALIGNED.items():
            if aligned in by_name and logical in by_name and by_name[aligned] != by_name[logical]:
                raise CKernelError(
                    f"{self.where}: dimensions: {aligned!r} ({by_name[aligned]}) differs from "
                    f"{logical!r} ({by_name[logical]}); padded layouts are not supported")
        self.dim_ids = by_id
        return by_name

    def _extent(self, entry, where):
        if not isinstance(entry, dict):
            raise CKernelError(f"{where}: must be an object {{dim, mult, div}}, not "
                               f"{_short(entry)}")
        dim = _field(entry, "dim", (int, str), where)
        dim_id = _field(entry, "dim_id", (int, None), where, None)
        if _is_int(dim):
            if dim not in self.dim_ids:
                raise CKernelError(f"{where}: field 'dim': no dimension with id {dim}")
            name = self.dim_ids[dim]
        else:
            name = dim
            if name not in self.dims:
                raise CKernelError(f"{where}: field 'dim': no dimension named {name!r}")
        if dim_id is not None:
            if dim_id not in self.dim_ids:
                raise CKernelError(f"{where}: field 'dim_id': no dimension with id {dim_id}")
            if self.dim_ids[dim_id] != name:
                raise CKernelError(f"{where}: field 'dim_id' {dim_id} is "
                                   f"{self.dim_ids[dim_id]!r}, field 'dim' names {name!r}")
        mult = _field(entry, "mult", int, where, 1)
        div = _field(entry, "div", int, where, 1)
        if mult <= 0 or div <= 0:
            raise CKernelError(f"{where}: fields 'mult' and 'div' must be positive, not "
                               f"{mult} and {div}")
        value = self.dims[name] * mult
        if value % div:
            raise CKernelError(f"{where}: {name} ({self.dims[name]}) * {mult} / {div} is not "
                               f"an integer")
        return value // div

    def _buffers(self):
        out = {}
        for k, entry in enumerate(_field(self.model, "buffers", list, self.where)):
            where = f"{self.where}: buffers[{k}]"
            name = _field(entry, "name", str, where)
            where = f"{where} ({name!r})"
            if name in out:
                raise CKernelError(f"{where}: duplicate buffer name")
            scope = _field(entry, "scope", str, where)
            if scope not in _SCOPES:
                raise CKernelError(f"{where}: field 'scope' must be one of {list(_SCOPES)}, "
                                   f"not {scope!r}")
            role = _field(entry, "role", str, where)
            shape = tuple(self._extent(e, f"{where}: shape[{j}]")
                          for j, e in enumerate(_field(entry, "shape", list, where)))
            _field(entry, "dtype", str, where, "fp32")
            alias = _field(entry, "alias_of", (str, None), where, None)
            enabled = _condition(_field(entry, "condition", (str, None), where, None),
                                 self.env, f"{where}: field 'condition'")
            out[name] = _Buffer(name, scope, role, shape, alias, enabled, k)
        for buf in out.values():
            seen, target = {buf.name}, buf
            while target.alias_of is not None:
                where = f"{self.where}: buffers[{target.index}] ({target.name!r})"
                if target.alias_of not in out:
                    raise CKernelError(f"{where}: field 'alias_of' names no buffer: "
                                       f"{target.alias_of!r}")
                target = out[target.alias_of]
                if target.name in seen:
                    raise CKernelError(f"{where}: field 'alias_of' forms a cycle")
                seen.add(target.name)
            if target.shape != buf.shape or target.scope != buf.scope:
                raise CKernelError(
                    f"{self.where}: buffers[{buf.index}] ({buf.name!r}): alias of "
                    f"{target.name!r} with shape {list(buf.shape)} ({buf.scope}), the target "
                    f"has {list(target.shape)} ({target.scope})")
        return out

    def env(self, name):
        """Value of a name in a condition (derived flags, then config, else 0)."""
        theta = self.config.get("rope_theta", 0)
        theta = theta if isinstance(theta, (int, float)) and not isinstance(theta, bool) else 0
        if name == "training_enabled":
            return 0.0
        if name == "rope_disabled":
            return float(not theta > 0)
        value = self.config.get(name, 0)
        if isinstance(value, (bool, int, float)):
            return _real(value)
        return float(bool(value))

    # -- graph building -----------------------------------------------------------------

    def add(self, node):
        self.nodes.append(node)
        return len(self.nodes) - 1

    def op(self, name, args, names, shape):
        return self.add(Node("op", tuple(int(s) for s in shape), "float32", op=name,
                             args=tuple(args), arg_names=tuple(names)))

    def shape(self, node):
        return self.nodes[node].shape

    def param(self, name, array):
        if name in self.tensors:
            raise CKernelError(f"{self.where}: two parameters named {name!r} (a global "
                               f"buffer has the name of a layer-scope weight)")
        self.tensors[name] = np.ascontiguousarray(array, dtype=np.float32)
        return self.add(Node("param", tuple(array.shape), "float32", name=name))

    def constant(self, key, make):
        if key not in self.cache:
            array = make()
            self.cache[key] = self.param(f"ckernel.{key}", array)
        return self.cache[key]

    def linear(self, x, w, b, out_features):
        args, names = [Ref(x), Ref(w)], ["input", "weight"]
        if b is not None:
            args.append(Ref(b))
            names.append("bias")
        return self.op("aten.linear.default", args, names,
                       (*self.shape(x)[:-1], out_features))

    def reshape(self, x, shape):
        return self.op("aten.reshape.default", [Ref(x), tuple(shape)], ["self", "shape"], shape)

    def permute(self, x, dims):
        shape = self.shape(x)
        return self.op("aten.permute.default", [Ref(x), tuple(dims)], ["self", "dims"],
                       tuple(shape[d] for d in dims))

    def binary(self, kind, a, b):
        shape = np.broadcast_shapes(self.shape(a), self.shape(b))
        if kind == "mul":
            return self.op("aten.mul.Tensor", [Ref(a), Ref(b)], ["self", "other"], shape)
        return self.op(f"aten.{kind}.Tensor", [Ref(a), Ref(b), 1], ["self", "other", "alpha"],
                       shape)

    def slice_last(self, x, start, stop):
        shape = self.shape(x)
        ranges = (*(v for d in shape[:-1] for v in (0, d, 1)), start, stop, 1)
        return self.op("mind.slice", [Ref(x), ranges], ["self", "ranges"],
                       (*shape[:-1], stop - start))

    # -- buffers ------------------------------------------------------------------------

    def key(self, buf, layer, where):
        while buf.alias_of is not None:
            buf = self.buffers[buf.alias_of]
        if buf.scope == "global":
            return (None, buf.name), buf
        if layer < 0:
            raise CKernelError(f"{where}: layer-scope buffer {buf.name!r} bound in a global "
                               f"node (layer -1)")
        return (layer, buf.name), buf

    def use(self, key, root, kernel_arg, where):
        """Count a buffer a node binds; refuse one, or all together, over the caps."""
        if key in self.used:
            return
        if root.role == "grad":
            raise CKernelError(f"{where}: binding {kernel_arg!r}: buffer {root.name!r} has role "
                               f"'grad', so this is a backward (training) plan; backward plans "
                               f"are not supported (this importer builds inference graphs)")
        count = math.prod(root.shape)
        if count > self.max_elements:
            raise CKernelError(f"{where}: binding {kernel_arg!r}: buffer {root.name!r} "
                               f"{list(root.shape)} has more than {self.max_elements} elements")
        self.used[key] = count
        total = sum(self.used.values())
        if total > self.max_total:
            raise CKernelError(f"{where}: binding {kernel_arg!r}: buffer {root.name!r} "
                               f"{list(root.shape)} brings the buffers the nodes use to {total} "
                               f"elements, more than {self.max_total}")

    def read(self, buf, layer, kernel_arg, where):
        key, root = self.key(buf, layer, where)
        self.use(key, root, kernel_arg, where)
        if key in self.values:
            node = self.values[key]
        elif root.role == "weight":
            node = self.values[key] = self.weight(_label(key), root, kernel_arg, where)
        elif root.role == "input":
            previous = (layer - 1, "output")
            if root.scope == "layer" and previous in self.values:
                node = self.values[previous]
                if self.shape(node) != root.shape:
                    raise CKernelError(
                        f"{where}: buffer {buf.name!r} {list(root.shape)} chains to layer "
                        f"{layer - 1}'s 'output' {list(self.shape(node))}")
            else:
                name = root.name
                if any(n == name for n, _ in self.inputs):
                    name = _label(key)
                node = self.add(Node("input", root.shape, "float32", name=name))
                self.inputs.append((name, root.shape))
            self.values[key] = node
        elif kernel_arg in ("cos_cache", "sin_cache"):
            node = self.values[key] = self.rope_cache(_label(key), root, kernel_arg, where)
        else:
            raise CKernelError(f"{where}: binding {kernel_arg!r} reads buffer {buf.name!r} "
                               f"(role {root.role!r}) before any node writes it")
        self.readers[node] = self.readers.get(node, 0) + 1
        return node

    def write(self, buf, layer, node, kernel_arg, where):
        key, root = self.key(buf, layer, where)
        self.use(key, root, kernel_arg, where)
        if root.role == "weight":
            raise CKernelError(f"{where}: binding {kernel_arg!r} writes weight buffer "
                               f"{buf.name!r}")
        if self.shape(node) != root.shape:
            raise CKernelError(f"{where}: binding {kernel_arg!r}: buffer {buf.name!r} has "
                               f"shape {list(root.shape)}, the kernel computes "
                               f"{list(self.shape(node))}")
        self.values[key] = node
        self.readers.setdefault(node, 0)
        self.written.append((key, node))

    def weight(self, key, buf, kernel_arg, where):
        if self.weight_file is not None:
            if key not in self.weight_file:
                raise CKernelError(f"{where}: binding {kernel_arg!r}: weight {key!r} is not in "
                                   f"{self.weights_desc}")
            array = np.asarray(self.weight_file.float32(key), dtype=np.float32)
            if tuple(array.shape) != buf.shape:
                raise CKernelError(f"{where}: binding {kernel_arg!r}: weight {key!r} in "
                                   f"{self.weights_desc} has shape {list(array.shape)}, the "
                                   f"buffer {list(buf.shape)}")
        else:
            array = synthesise(key, buf.shape, kernel_arg, self.seed)
        return self.param(key, array)

    def rope_cache(self, key, buf, kernel_arg, where):
        theta = self.config.get("rope_theta")
        if not isinstance(theta, (int, float)) or isinstance(theta, bool) or \
                not 0 < _real(theta) < math.inf:
            raise CKernelError(f"{where}: binding {kernel_arg!r}: buffer {buf.name!r} is "
                               f"written by no node and config field 'rope_theta' "
                               f"({_short(theta)}) is not a positive finite number to "
                               f"compute it")
        if len(buf.shape) != 2:
            raise CKernelError(f"{where}: binding {kernel_arg!r}: buffer {buf.name!r} must "
                               f"be [tokens, head_dim / 2], not {list(buf.shape)}")
        positions, half = buf.shape
        inv_freq = _real(theta) ** (-2.0 * np.arange(half) / (2 * half))
        angles = np.arange(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
        table = np.cos(angles) if kernel_arg == "cos_cache" else np.sin(angles)
        return self.param(key, table.astype(np.float32))


def _label(key):
    """The name of a buffer key: ``<name>`` (global) or ``layers.<layer>.<name>``."""
    layer, name = key
    return name if layer is None else f"layers.{layer}.{name}"


def synthesise(name, shape, kernel_arg, seed):
    """Deterministic float32 weights for parameter *name*.

    The generator is seeded with *seed* and the CRC-32 of *name*, so the same name, shape
    and seed give the same values on every machine and in every import order.

    Parameters
    ----------
    name : str
        Parameter name (``layers.<layer>.<buffer>`` or ``<buffer>``).
    shape : tuple of int
    kernel_arg : str
        The kernel argument that first reads the weight: ``gamma`` (a norm scale) gets
        ``1 + 0.1 N(0, 1)``; biases (1-D, or an argument starting with ``b``) get
        ``0.02 N(0, 1)``; matrices get ``N(0, 1) / sqrt(fan_in)``, the last dimension
        being the fan-in.
    seed : int

    Returns
    -------
    numpy.ndarray
        float32 array of *shape*.
    """
    rng = np.random.default_rng([seed & 0xFFFFFFFF, zlib.crc32(name.encode())])
    values = rng.standard_normal(shape)
    if kernel_arg == "gamma":
        values = 1.0 + 0.1 * values
    elif len(shape) <= 1 or kernel_arg.startswith("b"):
        values = 0.02 * values
    else:
        values = values / math.sqrt(shape[-1])
    return values.astype(np.float32)


# ---------------------------------------------------------------------------------------
# Kernel expansions: each takes the importer, the bound input nodes, the config, and the
# location string, and returns {output binding: node}.

def _need(cond, where, message):
    if not cond:
        raise CKernelError(f"{where}: {message}")


def _expect(b, node, shape, what, where):
    got = b.shape(node)
    if tuple(got) != tuple(shape):
        raise CKernelError(f"{where}: binding {what!r} has shape {list(got)}, expected "
                           f"{list(shape)}")


def _rmsnorm(b, x, where):
    _need(len(b.shape(x["input"])) >= 1, where, "binding 'input' must have rank >= 1")
    e = b.shape(x["input"])[-1]
    _expect(b, x["gamma"], (e,), "gamma", where)
    eps = _real(_field(b.config, "rms_norm_eps", float, f"{where}: config"))
    _need(math.isfinite(eps) and eps >= 0, where,
          f"config field 'rms_norm_eps' must be finite and >= 0, not {eps}")
    inp = x["input"]
    square = b.binary("mul", inp, inp)
    mean = b.op("aten.mean.dim", [Ref(square), (-1,), True, None],
                ["self", "dim", "keepdim", "dtype"], (*b.shape(inp)[:-1], 1))
    shifted = b.op("aten.add.Tensor", [Ref(mean), float(eps), 1], ["self", "other", "alpha"],
                   b.shape(mean))
    rstd = b.op("aten.rsqrt.default", [Ref(shifted)], ["self"], b.shape(mean))
    normed = b.binary("mul", inp, rstd)
    return {"out": b.binary("mul", normed, x["gamma"])}


def _heads(b, x, w_name, b_name, where):
    inp, w = x["input"], x[w_name]
    _need(len(b.shape(inp)) == 2, where,
          f"binding 'input' must be [tokens, embed], not {list(b.shape(inp))}")
    t, e = b.shape(inp)
    _need(len(b.shape(w)) == 3 and b.shape(w)[2] == e, where,
          f"binding {w_name!r} must be [heads, head_dim, {e}], not {list(b.shape(w))}")
    h, d, _ = b.shape(w)
    bias = None
    if b_name in x:
        _expect(b, x[b_name], (h, d), b_name, where)
        bias = b.reshape(x[b_name], (h * d,))
    out = b.linear(inp, b.reshape(w, (h * d, e)), bias, h * d)
    return b.permute(b.reshape(out, (t, h, d)), (1, 0, 2))


def _qkv_project(b, x, where):
    q = _heads(b, x, "wq", "bq", where)
    k = _heads(b, x, "wk", "bk", where)
    v = _heads(b, x, "wv", "bv", where)
    _need(b.shape(k) == b.shape(v), where,
          f"wk and wv give different shapes {list(b.shape(k))} and {list(b.shape(v))}")
    _need(b.shape(q)[2] == b.shape(k)[2], where,
          f"q and k head sizes differ: {b.shape(q)[2]} and {b.shape(k)[2]}")
    return {"q": q, "k": k, "v": v}


def _rope(b, x, where):
    q, k = x["q"], x["k"]
    for name in ("q", "k"):
        _need(len(b.shape(x[name])) == 3, where,
              f"binding {name!r} must be [heads, tokens, head_dim], not "
              f"{list(b.shape(x[name]))}")
    _, t, d = b.shape(q)
    _need(b.shape(k)[1:] == (t, d), where,
          f"bindings 'q' {list(b.shape(q))} and 'k' {list(b.shape(k))} differ in tokens or "
          f"head_dim")
    _need(d % 2 == 0, where, f"head_dim {d} must be even for rope")
    half = d // 2
    for name in ("cos_cache", "sin_cache"):
        shape = b.shape(x[name])
        _need(len(shape) == 2 and shape[1] == half and shape[0] >= t, where,
              f"binding {name!r} has shape {list(shape)}, expected [>= {t}, {half}]")
    widen = b.constant(f"rope_widen_{half}", lambda: np.concatenate(
        [np.eye(half), np.eye(half)], axis=1))
    rotate = b.constant(f"rope_rotate_half_{d}", lambda: _rotate_half_matrix(d))
    tables = []
    for name in ("cos_cache", "sin_cache"):
        cache = x[name]
        if b.shape(cache)[0] != t:
            cache = b.op("mind.slice", [Ref(cache), (0, t, 1, 0, half, 1)], ["self", "ranges"],
                         (t, half))
        tables.append(b.op("aten.matmul.default", [Ref(cache), Ref(widen)], ["self", "other"],
                           (t, d)))
    cos, sin = tables
    out = {}
    for name in ("q", "k"):
        value = x[name]
        rotated = b.op("aten.matmul.default", [Ref(value), Ref(rotate)], ["self", "other"],
                       b.shape(value))
        out[name] = b.binary("add", b.binary("mul", value, cos),
                             b.binary("mul", rotated, sin))
    return out


def _rotate_half_matrix(d):
    """``x @ R = concat(-x[d/2:], x[:d/2])``."""
    half = d // 2
    r = np.zeros((d, d))
    r[np.arange(half) + half, np.arange(half)] = -1.0
    r[np.arange(half), np.arange(half) + half] = 1.0
    return r


def _attention(b, x, where):
    q, k, v = x["q"], x["k"], x["v"]
    for name in ("q", "k", "v"):
        _need(len(b.shape(x[name])) == 3, where,
              f"binding {name!r} must be [heads, tokens, head_dim], not "
              f"{list(b.shape(x[name]))}")
    h, t, d = b.shape(q)
    kvh = b.shape(k)[0]
    _expect(b, k, (kvh, t, d), "k", where)
    _expect(b, v, (kvh, t, d), "v", where)
    _need(h % kvh == 0, where, f"{h} query heads are not a multiple of {kvh} kv heads")
    scale = 1.0 / math.sqrt(d)
    names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale"]
    if kvh == h:
        return {"attn_out": b.op("aten.scaled_dot_product_attention.default",
                                 [Ref(q), Ref(k), Ref(v), None, 0.0, True, scale], names,
                                 (h, t, d))}
    group = h // kvh
    qg = b.reshape(q, (kvh, group, t, d))
    kg = b.reshape(k, (kvh, 1, t, d))
    vg = b.reshape(v, (kvh, 1, t, d))
    out = b.op("aten.scaled_dot_product_attention.default",
               [Ref(qg), Ref(kg), Ref(vg), None, 0.0, True, scale], names, (kvh, group, t, d))
    return {"attn_out": b.reshape(out, (h, t, d))}


def _attn_proj(b, x, where):
    a, wo = x["attn_out"], x["wo"]
    _need(len(b.shape(a)) == 3, where,
          f"binding 'attn_out' must be [heads, tokens, head_dim], not {list(b.shape(a))}")
    h, t, d = b.shape(a)
    _need(len(b.shape(wo)) == 3 and b.shape(wo)[0] == h and b.shape(wo)[2] == d, where,
          f"binding 'wo' must be [{h}, embed, {d}], not {list(b.shape(wo))}")
    e = b.shape(wo)[1]
    bias = None
    if "bo" in x:
        _expect(b, x["bo"], (e,), "bo", where)
        bias = x["bo"]
    flat = b.reshape(b.permute(a, (1, 0, 2)), (t, h * d))
    weight = b.reshape(b.permute(wo, (1, 0, 2)), (e, h * d))
    return {"proj_tmp": b.linear(flat, weight, bias, e)}


def _dense(inp_name, w_name, b_name, out_name):
    def expand(b, x, where):
        inp, w = x[inp_name], x[w_name]
        _need(len(b.shape(inp)) == 2, where,
              f"binding {inp_name!r} must be [tokens, features], not {list(b.shape(inp))}")
        _need(len(b.shape(w)) == 2 and b.shape(w)[1] == b.shape(inp)[1], where,
              f"binding {w_name!r} must be [out, {b.shape(inp)[1]}], not {list(b.shape(w))}")
        n = b.shape(w)[0]
        bias = None
        if b_name in x:
            _expect(b, x[b_name], (n,), b_name, where)
            bias = x[b_name]
        return {out_name: b.linear(inp, w, bias, n)}

    return expand


def _swiglu(b, x, where):
    inp = x["fc1_out"]
    shape = b.shape(inp)
    _need(len(shape) >= 1 and shape[-1] % 2 == 0, where,
          f"binding 'fc1_out' must have an even last dimension, not {list(shape)}")
    half = shape[-1] // 2
    gate = b.slice_last(inp, 0, half)
    up = b.slice_last(inp, half, shape[-1])
    sig = b.op("aten.sigmoid.default", [Ref(gate)], ["self"], b.shape(gate))
    return {"swiglu_out": b.binary("mul", b.binary("mul", gate, sig), up)}


def _residual_add(b, x, where):
    _need(b.shape(x["a"]) == b.shape(x["b"]), where,
          f"bindings 'a' {list(b.shape(x['a']))} and 'b' {list(b.shape(x['b']))} differ")
    return {"out": b.binary("add", x["a"], x["b"])}


_EXPAND = {
    "rmsnorm": _rmsnorm,
    "qkv_project": _qkv_project,
    "rope": _rope,
    "attention": _attention,
    "attn_proj": _attn_proj,
    "residual_add": _residual_add,
    "mlp_up": _dense("input", "w1", "b1", "fc1_out"),
    "swiglu": _swiglu,
    "mlp_down": _dense("swiglu_out", "w2", "b2", "mlp_out"),
}


def _load(source, path):
    where = str(path or "<ckernel>")
    if isinstance(source, dict):
        return source, where
    text = source
    if isinstance(source, Path) or (isinstance(source, str) and source.endswith(".json")
                                    and "\n" not in source and Path(source).is_file()):
        where = str(source)
        try:
            text = Path(source).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CKernelError(f"{where}: cannot read: {exc}") from None
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CKernelError(f"{where}: not UTF-8: {exc}") from None
    if not isinstance(text, str):
        raise CKernelError(f"{where}: expected JSON text, a path or a dict, not "
                           f"{type(source).__name__}")
    try:
        model = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CKernelError(f"{where}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    except RecursionError:
        raise CKernelError(f"{where}: JSON nested too deeply") from None
    if not isinstance(model, dict):
        raise CKernelError(f"{where}: the IR must be a JSON object")
    return model, where


def import_ckernel(source, path=None, *, tokens=None, weights=None, seed=0,
                   max_elements=1 << 28, max_total_elements=1 << 28):
    """Import a C-Kernel-Engine IR v2 model as a verified :class:`Graph`.

    Parameters
    ----------
    source : str, bytes, pathlib.Path or dict
        A path to the ``.json`` file, its text, or the parsed object.
    path : str, optional
        File name used in error messages when *source* is text or a dict.
    tokens : int, optional
        Value of the runtime dimension ``tokens`` (default: the one in the file).
    weights : str, pathlib.Path or nac.weights.Weights, optional
        A safetensors file holding every weight the graph reads, named ``<buffer>``
        (global scope) or ``layers.<layer>.<buffer>`` (layer scope); without it the
        weights are synthesised with :func:`synthesise`.
    seed : int
        Seed of the synthesised weights.
    max_elements : int
        Largest buffer a node may bind (elements), a guard against corrupt dimensions.
    max_total_elements : int
        Most elements of all the buffers the nodes bind together (each layer's copy of a
        layer-scope buffer counts): the weights among them are allocated while importing.
        Buffers no node binds are not counted; the caps see the shapes after ``tokens``.

    Returns
    -------
    graph : Graph
    info : CKernelImport

    Raises
    ------
    CKernelError
        For a malformed file or an unsupported kernel, naming the node and the field.
    """
    model, where = _load(source, path)
    b = _Importer(model, where, tokens, weights, seed, max_elements, max_total_elements)
    nodes = _field(model, "nodes", list, where)
    skipped = []
    for i, node in enumerate(nodes):
        loc = f"{where}: nodes[{i}]"
        if not isinstance(node, dict):
            raise CKernelError(f"{loc}: must be a JSON object, not {_short(node)}")
        layer = _field(node, "layer", int, loc)
        op = _field(node, "op", str, loc)
        loc = f"{where}: nodes[{i}] (layer {layer}, {op})"
        if layer < -1:
            raise CKernelError(f"{loc}: field 'layer' must be >= -1, not {layer}")
        _field(node, "kernel", str, loc, "")
        _field(node, "flags", int, loc, 0)
        bindings = _field(node, "bindings", list, loc)
        if not _condition(_field(node, "condition", (str, None), loc, None), b.env,
                          f"{loc}: field 'condition'"):
            skipped.append((i, op))
            continue
        kernel_name = node.get("kernel") or ""
        if "backward" in op or "backward" in kernel_name:
            raise CKernelError(f"{loc}: kernel {kernel_name or op!r} belongs to a backward "
                               f"(training) plan; backward plans are not supported (this "
                               f"importer builds inference graphs)")
        kernel = KERNELS.get(op)
        if kernel is None:
            raise CKernelError(f"{loc}: field 'op': kernel {op!r} is not supported (supported: "
                               f"{', '.join(sorted(KERNELS))})")
        bound = {}
        for j, binding in enumerate(bindings):
            bwhere = f"{loc}: bindings[{j}]"
            arg = _field(binding, "arg", str, bwhere)
            name = _field(binding, "buffer", str, bwhere)
            if arg in bound:
                raise CKernelError(f"{bwhere}: argument {arg!r} bound twice")
            known = (*kernel.inputs, *kernel.optional_inputs, *kernel.outputs,
                     *kernel.side_outputs)
            if arg not in known:
                raise CKernelError(f"{bwhere}: field 'arg': {op} has no argument {arg!r} "
                                   f"(it takes {', '.join(dict.fromkeys(known))})")
            if name not in b.buffers:
                raise CKernelError(f"{bwhere}: field 'buffer': no buffer named {name!r}")
            bound[arg] = b.buffers[name]
        present = {arg: buf for arg, buf in bound.items() if b.buffers[buf.name].enabled}
        values = {}
        for arg in (*kernel.inputs, *kernel.optional_inputs):
            if arg not in present:
                if arg in kernel.inputs:
                    why = "disabled by its condition" if arg in bound else "not bound"
                    raise CKernelError(f"{loc}: required argument {arg!r} is {why}")
                continue
            values[arg] = b.read(present[arg], layer, arg, loc)
        for arg in kernel.outputs:
            if arg not in present:
                why = "disabled by its condition" if arg in bound else "not bound"
                raise CKernelError(f"{loc}: output argument {arg!r} is {why}")
        results = _EXPAND[op](b, values, loc)
        for arg in kernel.outputs:
            b.write(present[arg], layer, results[arg], arg, loc)
    outputs, names = [], []
    for key, node in b.written:
        if b.readers.get(node, 0) == 0 and node not in outputs and b.values.get(key) == node:
            outputs.append(node)
            names.append(_label(key))
    if not outputs:
        raise CKernelError(f"{where}: the model produces no output (no node writes a value "
                           f"that nothing reads)")
    graph = verify(Graph(tuple(b.nodes), tuple(outputs), b.tensors))
    info = CKernelImport(len(nodes) - len(skipped), tuple(skipped), tuple(b.inputs),
                         tuple(names), dict(b.dims), b.weights_desc)
    return graph, info
