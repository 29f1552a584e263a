"""Lowering of a quantised model graph to layers of int8 work in NHWC (the back-end's IR).

:func:`plan_layers` walks the graph the NAC reader gives back (``nem.modelgraph``) and
matches it to layers the NPU runs:

* ``conv2d`` (groups 1) [+ ``batch_norm`` folded] [+ clamp] -> one NMU ``conv2d`` with the
  requantising output stage (bias i32, per-channel weights, the clamp as its saturation);
  a clamp is ``relu``, ``hardtanh`` (ReLU6 is ``hardtanh(0, 6)``) or ``clamp`` with bounds
  that hold 0 (see ``_Planner.fuse_relu``);
* ``linear`` / ``addmm`` / ``mm`` / ``matmul`` with a parameter operand [+ clamp] -> NMU
  ``gemm``;
* ``max_pool2d``, ``avg_pool2d`` (no padding), ``adaptive_avg_pool2d`` (exact divisions),
  ``mean`` over H and W -> CSTL ``maxpool`` / ``avgpool`` (output quantised like the input);
* ``add`` of two activations [+ clamp], ``relu``, ``sigmoid``, ``tanh``, ``gelu``, any other
  ``hardtanh`` / ``clamp`` -> CSTL elementwise (a clamp after an add, like one after conv /
  gemm, is the output's saturation: a ReLU's range starts at 0, so its zero point is -128);
* ``view`` (flatten) -> a view: the bytes stay, a following ``linear`` takes its weight
  columns in NHWC order; any other reshape of a 4-D tensor to rank 1-3 -> a CSTL
  ``transpose`` to NCHW (a copy), which the reshape views; ``clone`` / ``pass`` -> the same
  tensor.

Layouts: 4-D activations are stored NHWC, convolution weights HWIO, linear weights KN.
Anything else is refused with :class:`LowerError` naming the instruction, the operation and
the reason. The layers are turned into NEM text by ``nem.emit``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nem.modelgraph import Ref
from nem.quantize import quantize_bias, quantize_weights, tensor_quant

__all__ = ["Act", "Layer", "LowerError", "plan_layers"]


class LowerError(ValueError):
    """An operation the back-end cannot lower for the target."""

    def __init__(self, index, op, reason):
        super().__init__(f"instruction {index} ({op}): not supported by the NEM back-end: "
                         f"{reason}")
        self.index, self.op, self.reason = index, op, reason


@dataclass
class Act:
    """An int8 activation tensor in DDR.

    ``shape`` is the stored shape (NHWC for 4-D values, else the logical shape);
    ``logical`` the model's shape; ``nhwc_flat`` the ``(H, W, C)`` of a 4-D tensor seen
    through a flatten (its bytes are in NHWC order, the model's in CHW order).
    """

    index: int
    shape: tuple
    logical: tuple
    quant: object
    buffer: str
    nhwc_flat: tuple | None = None
    elem: str = "i8"

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor (i8, or i32 for the argmax head's indices)."""
        return int(np.prod(self.shape)) * (4 if self.elem == "i32" else 1)


@dataclass
class Layer:
    """One unit of work: ``kind`` is ``conv``, ``gemm``, ``pool``, ``elt``, ``transpose`` or
    ``argmax``.

    ``op`` the NEM opcode; ``ins`` / ``out`` the activations; ``attrs`` the NEM attributes
    (conv: pads, strides, dilations; pool: kernel_shape, pads, strides); for conv / gemm
    ``weights`` (HWIO or KN codes), ``w_scales``, ``bias`` (i32 codes) and ``activation``.
    """

    kind: str
    op: str
    index: int
    ins: list
    out: Act
    attrs: dict = field(default_factory=dict)
    weights: np.ndarray | None = None
    w_scales: np.ndarray | None = None
    bias: np.ndarray | None = None
    activation: str = "none"

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the layer (0 for CSTL layers)."""
        if self.kind == "conv":
            kh, kw, c, _ = self.weights.shape
            return int(np.prod(self.out.shape)) * kh * kw * c
        if self.kind == "gemm":
            return int(np.prod(self.out.shape)) * self.weights.shape[0]
        return 0


_ELTWISE = {"aten.relu.default": "relu", "aten.sigmoid.default": "sigmoid",
            "aten.tanh.default": "tanh", "aten.gelu.default": "gelu"}
#: The bound written for an unbounded side of a CSTL clamp (float32's largest value).
_F32_MAX = float(np.finfo(np.float32).max)
_CLAMPS = ("aten.relu.default", "aten.hardtanh.default", "aten.clamp.default")
_ADD = ("nac.add", "aten.add.Tensor")
_IDENTITY = ("nac.pass", "nac.clone")
_LINEAR = ("aten.linear.default", "aten.addmm.default", "aten.mm.default",
           "aten.matmul.default")


def _clamp_bounds(node):
    """``(lo, hi)`` of a ReLU, ``hardtanh`` or ``clamp`` node as floats (``None``: unbounded)."""
    if node.name == "aten.relu.default":
        return 0.0, None
    a = [*node.args, None, None]
    if node.name == "aten.hardtanh.default":
        a[1] = -1.0 if len(node.args) < 2 else a[1]
        a[2] = 1.0 if len(node.args) < 3 else a[2]
    return tuple(None if v is None else float(v) for v in a[1:3])


def _pair(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return (int(v[0]), int(v[-1]))


class _Planner:
    def __init__(self, graph, values, ranges, target):
        self.graph, self.values, self.ranges, self.target = graph, values, ranges, target
        self.nodes = {n.index: n for n in graph.nodes}
        self.users = graph.users()
        self.acts: dict[int, Act] = {}
        self.layers: list[Layer] = []
        self.consumed: set[int] = set()

    # --- tensors ----------------------------------------------------------------------------
    def quant(self, index):
        lo, hi = self.ranges[index]
        return tensor_quant(lo, hi)

    def new_act(self, index, quant=None):
        logical = tuple(self.values[index].shape)
        shape = (logical[0], logical[2], logical[3], logical[1]) if len(logical) == 4 \
            else logical
        act = Act(index, shape, logical, quant or self.quant(index), f"T{index}")
        self.acts[index] = act
        return act

    def act_of(self, node, arg):
        if not isinstance(arg, Ref) or arg.index not in self.acts:
            what = "a constant" if not isinstance(arg, Ref) else \
                f"the result of instruction {arg.index} ({self.nodes[arg.index].kind})"
            raise LowerError(node.index, node.name, f"an activation operand is {what}")
        return self.acts[arg.index]

    def param(self, node, arg, what):
        if arg is None:
            return None
        if not isinstance(arg, Ref) or self.nodes[arg.index].kind != "param":
            raise LowerError(node.index, node.name, f"{what} must be a parameter")
        return np.asarray(self.nodes[arg.index].value, dtype=np.float64)

    def sole_user(self, index, names):
        users = self.users[index]
        if len(users) == 1 and index not in self.graph.outputs:
            user = self.nodes[users[0]]
            if user.kind == "op" and user.name in names:
                return user
        return None

    def fuse_relu(self, index):
        """Fuse the clamp that is the only user of ``index`` into its output stage: ReLU,
        ReLU6 (``hardtanh(0, 6)``), any ``hardtanh`` / ``clamp`` whose bounds hold 0.

        The clamp's output is calibrated, so its int8 range lies within the bounds and
        holds 0 (``activation_qparams`` widens to 0): below the lower bound and above the
        upper one the requantised value saturates at -128 / 127, which are the bounds'
        codes. A clamp whose range excludes 0 is left to the CSTL (the widening would
        keep values under its lower bound)."""
        clamp = self.sole_user(index, _CLAMPS)
        if clamp is None:
            return index, "none"
        lo, hi = _clamp_bounds(clamp)
        if (lo is not None and lo > 0) or (hi is not None and hi < 0):
            return index, "none"
        self.consumed.add(clamp.index)
        label = {(0.0, None): "relu", (0.0, 6.0): "relu6"}.get((lo, hi), "clamp")
        return clamp.index, label

    # --- ops --------------------------------------------------------------------------------
    def run(self):
        for index in self.graph.inputs:
            self.new_act(index)
        for node in self.graph.nodes:
            if node.kind != "op" or node.index in self.consumed:
                continue
            name = node.name
            if name == "aten.conv2d.default":
                self.conv(node)
            elif name in _LINEAR:
                self.linear(node)
            elif name in ("aten.max_pool2d.default", "aten.avg_pool2d.default",
                          "aten.adaptive_avg_pool2d.default", "aten.mean.dim"):
                self.pool(node)
            elif name in _ADD or name in _ELTWISE or name in _CLAMPS:
                self.eltwise(node)
            elif name == "nac.view":
                self.view(node)
            elif name in _IDENTITY:
                self.acts[node.index] = self.act_of(node, node.args[0])
            elif name == "aten.batch_norm.default":
                raise LowerError(node.index, name, "a batch norm is folded into the "
                                 "convolution it follows (as its only user); this one is not")
            else:
                raise LowerError(node.index, name, "no lowering for this operation")
        for index in self.graph.outputs:
            if index not in self.acts:
                raise LowerError(index, self.nodes[index].name, "the output is not a tensor "
                                 "the lowered program computes")
        return self.layers

    def conv(self, node):
        x = self.act_of(node, node.args[0])
        w = self.param(node, node.args[1], "the weight")
        b = self.param(node, node.args[2], "the bias")
        stride, padding, dilation, groups = (node.args + [None] * 7)[3:7]
        if groups not in (None, 1):
            raise LowerError(node.index, node.name, f"groups={groups} (the NMU runs groups=1)")
        f = w.shape[0]
        b = np.zeros(f) if b is None else b
        end = node.index
        bn = self.sole_user(end, ("aten.batch_norm.default",))
        if bn is not None:
            gamma, beta, mean, var = (self.param(bn, a, "a batch-norm operand")
                                      for a in bn.args[1:5])
            if bn.args[5]:
                raise LowerError(bn.index, bn.name, "batch norm in training mode")
            eps = float(bn.args[7])
            k = (1.0 if gamma is None else gamma) / np.sqrt(var + eps)
            w = w * k.reshape(-1, 1, 1, 1)
            b = (b - mean) * k + (0.0 if beta is None else beta)
            self.consumed.add(bn.index)
            end = bn.index
        end, activation = self.fuse_relu(end)
        self.check_nmu(node, w.shape[2] * w.shape[3], w.shape[1], f)
        wq, scales = quantize_weights(np.transpose(w, (2, 3, 1, 0)), axis=3)  # OIHW -> HWIO
        y = self.new_act(end)
        ph, pw = _pair(padding or 0)
        self.layers.append(Layer(
            "conv", "conv2d", node.index, [x], y,
            {"pads": [ph, pw, ph, pw], "strides": list(_pair(stride or 1)),
             "dilations": list(_pair(dilation or 1))},
            wq, scales, quantize_bias(b, x.quant.scale, scales), activation))
        if end != node.index:
            self.acts[node.index] = y

    def check_nmu(self, node, taps, cin, cout):
        t = self.target
        rows = taps * -(-cin // t.lanes)
        if rows > t.weight_rows:
            raise LowerError(node.index, node.name, f"the reduction needs {rows} weight rows "
                             f"({taps} taps x ceil({cin} / {t.lanes})), the NMU has "
                             f"{t.weight_rows} (splitting K with partial sums is not "
                             f"supported)")
        del cout

    def linear(self, node):
        name = node.name
        if name == "aten.addmm.default":
            bias_arg, x_arg, w_arg = node.args[0], node.args[1], node.args[2]
            if node.args[3:5] not in ([], [1, 1], [1.0, 1.0]) and len(node.args) > 3:
                if any(v not in (1, 1.0) for v in node.args[3:5]):
                    raise LowerError(node.index, name, "addmm with beta or alpha other than 1")
            wk = self.param(node, w_arg, "the second operand")  # [K, N]
        elif name == "aten.linear.default":
            x_arg, w_arg, bias_arg = node.args[0], node.args[1], node.args[2]
            wk = self.param(node, w_arg, "the weight").T
        else:
            x_arg, w_arg, bias_arg = node.args[0], node.args[1], None
            wk = self.param(node, w_arg, "the second operand")
            if wk.ndim != 2:
                raise LowerError(node.index, name, "a batched second operand")
        x = self.act_of(node, x_arg)
        if len(x.shape) != 2:
            raise LowerError(node.index, name, f"the input has rank {len(x.shape)}; the "
                             f"back-end lowers 2-D inputs [M, K] (flatten first)")
        b = self.param(node, bias_arg, "the bias")
        k, n = wk.shape
        if x.nhwc_flat is not None:  # the input's bytes are NHWC: take the rows in that order
            h, wd, c = x.nhwc_flat
            order = np.arange(k).reshape(c, h, wd).transpose(1, 2, 0).ravel()
            wk = wk[order]
        self.check_nmu(node, 1, k, n)
        end, activation = self.fuse_relu(node.index)
        wq, scales = quantize_weights(wk, axis=1)
        y = self.new_act(end)
        self.layers.append(Layer("gemm", "gemm", node.index, [x], y, {}, wq, scales,
                                 quantize_bias(np.zeros(n) if b is None else b, x.quant.scale,
                                               scales), activation))
        if end != node.index:
            self.acts[node.index] = y

    def pool(self, node):
        x = self.act_of(node, node.args[0])
        if len(x.shape) != 4:
            raise LowerError(node.index, node.name, "pooling needs a 4-D input")
        _, h, w, _ = x.shape
        name, a = node.name, node.args
        if name == "aten.max_pool2d.default":
            kernel = _pair(a[1])
            stride = _pair(a[2]) if len(a) > 2 and a[2] else kernel
            pads = _pair(a[3]) if len(a) > 3 else (0, 0)
            if len(a) > 4 and _pair(a[4]) != (1, 1):
                raise LowerError(node.index, name, "dilated pooling")
            if len(a) > 5 and a[5]:
                raise LowerError(node.index, name, "ceil_mode=True")
            op = "maxpool"
        elif name == "aten.avg_pool2d.default":
            kernel = _pair(a[1])
            stride = _pair(a[2]) if len(a) > 2 and a[2] else kernel
            pads = _pair(a[3]) if len(a) > 3 else (0, 0)
            if pads != (0, 0):
                raise LowerError(node.index, name, "average pooling with padding (NEM's "
                                 "avgpool does not count the padding, ATen's does)")
            if len(a) > 4 and a[4]:
                raise LowerError(node.index, name, "ceil_mode=True")
            if len(a) > 6 and a[6] is not None:
                raise LowerError(node.index, name, "divisor_override")
            op = "avgpool"
        elif name == "aten.adaptive_avg_pool2d.default":
            oh, ow = _pair(a[1])
            if h % oh or w % ow:
                raise LowerError(node.index, name, f"{h}x{w} to {oh}x{ow} is not an exact "
                                 f"division")
            kernel = stride = (h // oh, w // ow)
            pads, op = (0, 0), "avgpool"
        else:  # mean over H and W (keepdim): global average pooling
            dims = sorted(d % 4 for d in (a[1] or ()))
            if dims != [2, 3] or not (len(a) > 2 and a[2]):
                raise LowerError(node.index, name, "mean other than over H and W with "
                                 "keepdim=True")
            kernel = stride = (h, w)
            pads, op = (0, 0), "avgpool"
        y = self.new_act(node.index, x.quant)  # pooling keeps the input's quantisation
        self.layers.append(Layer("pool", op, node.index, [x], y,
                                 {"kernel_shape": list(kernel),
                                  "pads": [pads[0], pads[1], pads[0], pads[1]],
                                  "strides": list(stride)}))

    def eltwise(self, node):
        attrs = {}
        if node.name in _ADD:
            if len(node.args) > 2 and node.args[2] not in (1, 1.0):
                raise LowerError(node.index, node.name, "add with alpha other than 1")
            ins = [self.act_of(node, a) for a in node.args[:2]]
            if ins[0].shape != ins[1].shape or ins[0].nhwc_flat != ins[1].nhwc_flat:
                raise LowerError(node.index, node.name, f"operands of shapes "
                                 f"{list(ins[0].logical)} and {list(ins[1].logical)} "
                                 f"(broadcasting is not supported)")
            op = "add"
        else:
            if node.name == "aten.gelu.default" and len(node.args) > 1 and \
                    node.args[1] not in (None, "none"):
                raise LowerError(node.index, node.name, "gelu with approximate="
                                 f"{node.args[1]!r} (NEM's gelu is the erf form)")
            ins = [self.act_of(node, node.args[0])]
            op = _ELTWISE.get(node.name, "clamp")
            if op == "clamp":  # a clamp no output stage took: a CSTL table of its bounds
                lo, hi = _clamp_bounds(node)
                attrs = {"min_val": -_F32_MAX if lo is None else lo,
                         "max_val": _F32_MAX if hi is None else hi}
        if not self.target.has("CSTL"):
            raise LowerError(node.index, node.name, f"the target device has no CSTL to run "
                             f"{op}")
        end, activation = node.index, "none"
        if op == "add":  # a ReLU after the add is its output's saturation at zero point -128
            end, activation = self.fuse_relu(node.index)
        y = self.new_act(end)
        y.shape, y.nhwc_flat = ins[0].shape, ins[0].nhwc_flat
        self.layers.append(Layer("elt", op, node.index, ins, y, attrs, activation=activation))
        if end != node.index:
            self.acts[node.index] = y

    def view(self, node):
        x = self.act_of(node, node.args[0])
        out = tuple(self.values[node.index].shape)
        if len(x.shape) == 4:
            n, h, w, c = x.shape
            users = [self.nodes[u] for u in self.users[node.index]]
            if h * w == 1 or c == 1:  # NHWC and NCHW orders agree
                if len(out) == 4:
                    raise LowerError(node.index, node.name, "reshape to a 4-D tensor")
                self.acts[node.index] = Act(node.index, out, out, x.quant, x.buffer)
                return
            if out == (n, h * w * c) and all(u.kind == "op" and u.name in _LINEAR
                                            for u in users):
                # a view: the bytes stay NHWC, the linear layers (or the host, for a model
                # output) take them in that order
                self.acts[node.index] = Act(node.index, out, out, x.quant, x.buffer, (h, w, c))
                return
            if len(out) == 4:
                raise LowerError(node.index, node.name, f"reshape of an NHWC tensor "
                                 f"{list(x.logical)} to the 4-D {list(out)}")
            if not self.target.has("CSTL"):
                raise LowerError(node.index, node.name, "the reshape needs an NHWC -> NCHW "
                                 "copy and the target device has no CSTL to run transpose")
            # the model's order is NCHW: a CSTL transpose makes a copy in that order, which
            # the reshape then views
            y = Act(node.index, (n, c, h, w), (n, c, h, w), x.quant, f"T{node.index}")
            self.layers.append(Layer("transpose", "transpose", node.index, [x], y,
                                     {"perm": [0, 3, 1, 2]}))
            self.acts[node.index] = Act(node.index, out, out, x.quant, y.buffer)
            return
        if x.nhwc_flat is not None:
            raise LowerError(node.index, node.name, "reshape of a flattened NHWC tensor")
        self.acts[node.index] = Act(node.index, out, out, x.quant, x.buffer)


def plan_layers(graph, values, ranges, target, *, argmax=False):
    """Match the graph to layers, fold batch norms, quantise weights and biases.

    Parameters
    ----------
    graph : nem.modelgraph.ModelGraph
    values : dict of int to numpy.ndarray
        Float values of one evaluation (:func:`nem.modelgraph.evaluate`; gives the shapes).
    ranges : dict of int to (float, float)
        Calibrated ranges (:func:`nem.quantize.calibrate`).
    target : nem.target.Target
    argmax : bool
        Append an argmax head: the (single) output ``[N, C]`` becomes its i32 indices along
        the last axis, computed on the CSTL.

    Returns
    -------
    (list of Layer, dict of int to Act)
        The layers in execution order and the activation of every lowered value.

    Raises
    ------
    LowerError
    """
    planner = _Planner(graph, values, ranges, target)
    for node in graph.nodes:
        if node.kind == "op" and node.name in (*_LINEAR, "aten.conv2d.default") and \
                len(node.args) and not isinstance(node.args[0], Ref):
            raise LowerError(node.index, node.name, "the input is a constant")
    layers = planner.run()
    if argmax:
        if len(graph.outputs) != 1:
            raise LowerError(graph.outputs[-1], "output", "an argmax head needs exactly one "
                             "model output")
        index = graph.outputs[0]
        x = planner.acts[index]
        if len(x.shape) != 2 or x.nhwc_flat is not None:
            raise LowerError(index, "argmax", f"the output {list(x.logical)} is not [N, C]")
        if not target.has("CSTL"):
            raise LowerError(index, "argmax", "the target device has no CSTL to run argmax")
        y = Act(index, (x.shape[0],), (x.shape[0],), None, f"ARGMAX{index}", elem="i32")
        layers.append(Layer("argmax", "argmax", index, [x], y, {"axis": 1}))
        planner.acts[index] = y
    return layers, planner.acts
