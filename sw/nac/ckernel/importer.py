"""The symbolic run of an IR v2 file: buffers, dimensions, weights and values
(:class:`_Importer`), deterministic weights (:func:`synthesise`) and loading the JSON."""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nac.ckernel.conditions import _condition
from nac.ckernel.fields import _ALIGNED, _SCOPES, CKernelError, _field, _is_int, _real, _short
from nac.ir import Node, Ref


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
