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

from dataclasses import dataclass, field

from nac.ckernel.conditions import _condition
from nac.ckernel.fields import CKernelError, _field, _short
from nac.ckernel.importer import _Importer, _label, _load, synthesise
from nac.ckernel.kernels import EXPAND, KERNELS
from nac.ir import Graph, verify

__all__ = ["KERNELS", "CKernelError", "CKernelImport", "import_ckernel", "synthesise"]


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
        results = EXPAND[op](b, values, loc)
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
