"""Shape rules of the compute opcodes (Compute Tasks: typing rules, registry constraints).

:func:`derive` computes the output shape(s) an opcode instance must have from its inputs and
attributes; :func:`check_shapes` compares them with the declared output regions. The same
functions serve the executor, so the checker and the model cannot disagree.

Conventions (documented in ``docs/nem-toolkit.md``): conv2d and pooling use NHWC
activations and HWIO weights; ``pads`` is ``[top, left, bottom, right]`` (ONNX order
``[x1_begin, x2_begin, x1_end, x2_end]``); ``strides`` and ``dilations`` are ``[h, w]``.
gemm/matmul take ``A[..., M, K] x B[..., K, N] -> Y[..., M, N]`` with numpy batch
broadcasting, and gemm's ``C`` must broadcast to ``Y``.
"""

from __future__ import annotations

import math

from nem import opcodes

__all__ = ["ShapeError", "broadcast", "check_shapes", "conv_out", "derive"]


class ShapeError(ValueError):
    """The inputs and attributes of an opcode instance are inconsistent."""


def broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy broadcasting of two shapes, or ``None`` when they do not broadcast."""
    out = []
    for x, y in zip((1,) * (len(b) - len(a)) + a, (1,) * (len(a) - len(b)) + b, strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(out)


def conv_out(size: int, kernel: int, pad_lo: int, pad_hi: int, stride: int, dilation: int) -> int:
    """Output extent of one convolution/pooling axis: floor((n+p-d(k-1)-1)/s)+1."""
    return (size + pad_lo + pad_hi - dilation * (kernel - 1) - 1) // stride + 1


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise ShapeError(message)


def _ints(attrs, key: str, n: int, low: int) -> tuple[int, ...]:
    value = tuple(attrs.get(key) or ())
    _need(len(value) == n, f"{key} must have {n} entries, has {len(value)}")
    _need(all(v >= low for v in value), f"{key} entries must be >= {low}, got {list(value)}")
    return value


def derive(
    opcode: str, ins: list[tuple[int, ...]], attrs: dict, layouts: list[str | None] | None = None
) -> list[tuple[int, ...]] | None:
    """Output shapes of ``opcode`` for input shapes ``ins``; ``None`` if not derivable here.

    Raises
    ------
    ShapeError
        When the inputs or attributes are inconsistent.
    """
    layouts = layouts or [None] * len(ins)
    group = opcodes.groups()
    if opcode in ("gemm", "matmul"):
        a, b = ins[0], ins[1]
        _need(len(a) >= 2 and len(b) >= 2, f"A and B need rank >= 2 (A {list(a)}, B {list(b)})")
        _need(
            a[-1] == b[-2],
            f"inner dimensions differ: A {list(a)} has K={a[-1]}, B {list(b)} has K={b[-2]}",
        )
        batch = broadcast(a[:-2], b[:-2])
        _need(
            batch is not None, f"batch dimensions of A {list(a)} and B {list(b)} do not broadcast"
        )
        y = (*batch, a[-2], b[-1])
        if len(ins) > 2:
            _need(
                broadcast(ins[2], y) == y,
                f"C {list(ins[2])} does not broadcast to the output shape {list(y)}",
            )
        return [y]
    if opcode == "conv2d":
        x, w = ins[0], ins[1]
        _need(len(x) == 4 and len(w) == 4, f"X and W need rank 4 (X {list(x)}, W {list(w)})")
        _need(layouts[0] in (None, "NHWC"), f"X layout must be NHWC, not {layouts[0]}")
        _need(layouts[1] in (None, "HWIO"), f"W layout must be HWIO, not {layouts[1]}")
        pads = _ints(attrs, "pads", 4, 0)
        strides = _ints(attrs, "strides", 2, 1)
        dil = _ints(attrs, "dilations", 2, 1)
        groups = attrs.get("groups", 1)
        _need(isinstance(groups, int) and groups >= 1, f"groups must be >= 1, not {groups}")
        n, h, wd, cin = x
        kh, kw, cin_g, cout = w
        _need(
            cin == cin_g * groups,
            f"X has {cin} channels, W expects {cin_g} x groups {groups} = {cin_g * groups}",
        )
        _need(cout % groups == 0, f"Cout {cout} is not divisible by groups {groups}")
        ho = conv_out(h, kh, pads[0], pads[2], strides[0], dil[0])
        wo = conv_out(wd, kw, pads[1], pads[3], strides[1], dil[1])
        _need(ho >= 1 and wo >= 1, f"the kernel does not fit: output would be {ho}x{wo}")
        if len(ins) > 2:
            _need(tuple(ins[2]) == (cout,), f"B must have shape [{cout}], has {list(ins[2])}")
        return [(n, ho, wo, cout)]
    if opcode in group.pooling:
        x = ins[0]
        _need(len(x) == 4, f"X needs rank 4 (NHWC), has shape {list(x)}")
        _need(layouts[0] in (None, "NHWC"), f"X layout must be NHWC, not {layouts[0]}")
        k = _ints(attrs, "kernel_shape", 2, 1)
        pads = _ints(attrs, "pads", 4, 0)
        strides = _ints(attrs, "strides", 2, 1)
        ho = conv_out(x[1], k[0], pads[0], pads[2], strides[0], 1)
        wo = conv_out(x[2], k[1], pads[1], pads[3], strides[1], 1)
        _need(ho >= 1 and wo >= 1, f"the window does not fit: output would be {ho}x{wo}")
        return [(x[0], ho, wo, x[3])]
    if opcode == "transpose":
        perm = tuple(attrs.get("perm") or ())
        _need(
            sorted(perm) == list(range(len(ins[0]))),
            f"perm {list(perm)} is not a permutation of the {len(ins[0])} axes",
        )
        return [tuple(ins[0][p] for p in perm)]
    if opcode == "reshape":
        target = tuple(attrs.get("target_shape") or ())
        _need(
            math.prod(target) == math.prod(ins[0]),
            f"target_shape {list(target)} holds {math.prod(target)} elements, X "
            f"{list(ins[0])} holds {math.prod(ins[0])}",
        )
        return [target]
    if opcode in group.normalization | group.softmax:
        axis = attrs.get("axis", -1)
        rank = len(ins[0])
        _need(isinstance(axis, int) and -rank <= axis < rank, f"axis {axis} outside rank {rank}")
        # layernorm / rmsnorm: scale and bias have shape [dim[axis]] (the registry's
        # constraint); they apply along the normalised axis (docs/nem-toolkit.md).
        dim = ins[0][axis % rank]
        for name, extra in zip(("scale", "bias"), ins[1:], strict=False):
            _need(
                tuple(extra) == (dim,),
                f"{name} has shape {list(extra)}, it must be [dim[axis]] = [{dim}] "
                f"(axis {axis} of X {list(ins[0])})",
            )
        return [tuple(ins[0])]
    if opcode in group.conversion | group.eltwise:
        for other in ins[1:]:
            _need(
                tuple(other) == tuple(ins[0]),
                f"input shapes differ: {list(ins[0])} and "
                f"{list(other)} (elementwise shapes must be identical)",
            )
        return [tuple(ins[0])]
    if opcode == "concat":
        axis = attrs.get("axis", 0)
        rank = len(ins[0])
        _need(-rank <= axis < rank, f"axis {axis} outside rank {rank}")
        axis %= rank
        for other in ins[1:]:
            _need(
                len(other) == rank
                and all(
                    o == s for k, (o, s) in enumerate(zip(other, ins[0], strict=True)) if k != axis
                ),
                f"{list(other)} differs from {list(ins[0])} outside axis {axis}",
            )
        out = list(ins[0])
        out[axis] = sum(s[axis] for s in ins)
        return [tuple(out)]
    if opcode == "pad":
        pads = tuple(attrs.get("pads") or ())
        rank = len(ins[0])
        _need(
            len(pads) == 2 * rank,
            f"pads needs {2 * rank} entries (begin then end per axis), has {len(pads)}",
        )
        return [tuple(d + pads[k] + pads[k + rank] for k, d in enumerate(ins[0]))]
    if opcode == "slice":
        return [_slice_shape(ins[0], attrs)]
    if opcode == "gather":
        x, idx = ins[0], ins[1]
        axis = attrs.get("axis", 0) or 0
        _need(-len(x) <= axis < len(x), f"axis {axis} outside rank {len(x)}")
        axis %= len(x)
        return [(*x[:axis], *idx, *x[axis + 1 :])]
    if opcode in group.reduction:
        return [_reduce_shape(opcode, ins[0], attrs)]
    return None


def _axis_list(axes, rank: int, what: str) -> list[int]:
    out = []
    for a in axes:
        _need(-rank <= a < rank, f"{what} {a} outside rank {rank}")
        out.append(a % rank)
    _need(len(set(out)) == len(out), f"{what} {list(axes)} name an axis twice")
    return out


def _slice_shape(x: tuple[int, ...], attrs) -> tuple[int, ...]:
    # numpy/ONNX slicing: negative positions count from the end, out-of-range ends clamp
    starts, ends = list(attrs.get("starts") or ()), list(attrs.get("ends") or ())
    _need(len(starts) == len(ends), f"starts has {len(starts)} entries, ends {len(ends)}")
    axes = _axis_list(attrs.get("axes") or range(len(starts)), len(x), "slice axis")
    steps = list(attrs.get("steps") or [1] * len(starts))
    _need(
        len(axes) == len(starts) == len(steps),
        f"starts, ends, axes and steps need one entry per sliced axis ({len(starts)}, "
        f"{len(ends)}, {len(axes)}, {len(steps)})",
    )
    _need(all(st != 0 for st in steps), f"steps {steps} contain 0")
    out = list(x)
    for s, e, ax, st in zip(starts, ends, axes, steps, strict=True):
        out[ax] = len(range(*slice(s, e, st).indices(x[ax])))
    _need(all(d >= 1 for d in out), f"the slice is empty: output shape {out}")
    return tuple(out)


def _reduce_shape(opcode: str, x: tuple[int, ...], attrs) -> tuple[int, ...]:
    keep = attrs.get("keepdims")
    keep = True if keep is None else bool(keep)
    if opcode in ("argmax", "argmin"):
        axes = _axis_list([attrs.get("axis", 0) or 0], len(x), "axis")
    else:
        axes = _axis_list(attrs.get("axes") or range(len(x)), len(x), "axis")
    if keep:
        return tuple(1 if k in axes else d for k, d in enumerate(x))
    return tuple(d for k, d in enumerate(x) if k not in axes)


def check_shapes(opcode, specs, attrs) -> list[str]:
    """Messages for every declared output whose shape differs from the derived one.

    ``specs`` pairs registry operand specs with evaluated regions (see :mod:`nem.checker`).
    """
    ins = [r for s, r in specs if s.direction == "in"]
    outs = [r for s, r in specs if s.direction == "out"]
    if opcode.name == "split":
        return _check_split(ins, outs, attrs)
    try:
        derived = derive(opcode.name, [r.shape for r in ins], attrs, [r.layout for r in ins])
    except ShapeError as exc:
        return [str(exc)]
    if derived is None:
        return []
    messages = []
    for region, want in zip(outs, derived, strict=False):
        if tuple(region.shape) != tuple(want):
            messages.append(
                f"output {region.label} has shape {list(region.shape)}, the "
                f"inputs and attributes give {list(want)}"
            )
        if opcode.name in ("conv2d", "maxpool", "avgpool") and region.layout not in (None, "NHWC"):
            messages.append(f"output {region.label} layout must be NHWC, not {region.layout}")
    if opcode.name in ("maxpool", "avgpool", "transpose", "reshape", "concat", "pad"):
        for region in outs:
            if region.elem != ins[0].elem:
                messages.append(
                    f"output {region.label} is {region.elem}, the input is "
                    f"{ins[0].elem} (the element type is preserved)"
                )
    return messages


def _check_split(ins, outs, attrs) -> list[str]:
    x = ins[0].shape
    axis = attrs.get("axis", 0)
    sizes = tuple(attrs.get("split_sizes") or ())
    if not -len(x) <= axis < len(x):
        return [f"axis {axis} outside rank {len(x)}"]
    axis %= len(x)
    if sum(sizes) != x[axis] or len(sizes) != len(outs):
        return [
            f"split_sizes {list(sizes)} must sum to dim {x[axis]} and match the {len(outs)} outputs"
        ]
    messages = []
    for region, size in zip(outs, sizes, strict=True):
        want = tuple(size if k == axis else d for k, d in enumerate(x))
        if tuple(region.shape) != want:
            messages.append(
                f"output {region.label} has shape {list(region.shape)}, expected {list(want)}"
            )
    return messages
