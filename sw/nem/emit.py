"""NEM text of lowered layers: tiles in L1/L2 with double-buffered DMA.

Every activation lives in DDR (one buffer per tensor). A layer runs as a sequence of tiles;
a tile's input bytes go DDR -> L2 (sDMA) -> L1 (DMA), the compute task (NMU or CSTL) writes
its output tile in L1, which goes L1 -> L2 -> DDR. All layers share the on-chip buffers:
two input slots and two output slots in L1 and in L2, and two weight slots (weights and
bias of one *weight group*: a layer's output channels, or a chunk of them when they do not
fit). Tiles are numbered over the whole program and alternate between the slots, so the
copies of tile ``t + 1`` and the store of tile ``t - 1`` overlap the compute of tile ``t``,
and the weights of the next group load while the current one computes.

Dependencies (``deps=[...]``) are the slot reuses: the L2 input slot is refilled after the
L1 copy two tiles back, the L1 input slot after the compute two tiles back, and so on; a
layer's first loads wait for the last stores of the layer that wrote its input. The tasks
are written in a software-pipelined order (a priority topological order), because the
sequencer issues them strictly in order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from nem.lower import LowerError

__all__ = ["Emitted", "emit_program"]

ALIGN = 64


def _up(n, a=ALIGN):
    return -(-n // a) * a


def _num(v):
    return np.format_float_positional(float(v), unique=True, trim="-")


def _per_tensor(q):
    return f"per_tensor(scale={_num(q.scale)}, zero_point={q.zero_point})"


def _per_channel(scales, axis):
    return (f"per_channel(axis={axis}, scales=[{', '.join(_num(s) for s in scales)}], "
            f"zero_points=[{', '.join('0' for _ in scales)}])")


def _dims(shape):
    return ", ".join(str(int(d)) for d in shape)


@dataclass
class _Tile:
    layer: object
    group: int | None
    loads: list  # (act, ddr offset, nbytes, region shape)
    out: tuple  # (ddr offset, rows, row bytes, row stride, region shape)
    attrs: dict
    number: int = 0


@dataclass
class _Group:
    layer: object
    n0: int
    nt: int
    buffer: str
    w_bytes: int
    data: np.ndarray
    tiles: list = field(default_factory=list)


@dataclass
class Emitted:
    """The NEM program and what goes with it.

    Attributes
    ----------
    text : str
        ``model.nem``.
    initial : dict of str to numpy.ndarray
        Initial DDR contents of the weight buffers (uint8).
    tiles, groups : int
    slots : dict
        The on-chip slot sizes in bytes (``input``, ``output``, ``weights``).
    """

    text: str
    initial: dict
    tiles: int
    groups: int
    slots: dict
    task_layer: dict = field(default_factory=dict)


def _chunk_channels(layer, cap, target):
    """Output channels per weight group so that weights + bias fit ``cap`` bytes."""
    k = int(np.prod(layer.weights.shape[:-1]))
    n = layer.weights.shape[-1]
    nt = min(n, target.max_channels)
    while nt > 0 and _up(k * nt) + 4 * nt > cap:
        nt -= 1
    if nt < 1:
        raise LowerError(layer.index, layer.op, f"the weights of one output channel ({k} bytes) "
                         f"do not fit the weight slot ({cap} bytes of L1)")
    if nt < n and nt > target.lanes:
        nt -= nt % target.lanes
    return nt


def _groups(layers, target, cap):
    groups = []
    for layer in layers:
        if layer.kind not in ("conv", "gemm"):
            continue
        n = layer.weights.shape[-1]
        nt = _chunk_channels(layer, cap, target)
        for n0 in range(0, n, nt):
            c = min(nt, n - n0)
            w = np.ascontiguousarray(layer.weights[..., n0:n0 + c]).astype(np.int8)
            wb = w.tobytes()
            data = np.zeros(_up(len(wb)) + 4 * c, dtype=np.uint8)
            data[:len(wb)] = np.frombuffer(wb, np.uint8)
            data[_up(len(wb)):] = np.frombuffer(
                layer.bias[n0:n0 + c].astype("<i4").tobytes(), np.uint8)
            groups.append(_Group(layer, n0, c, f"WB{len(groups)}", len(wb), data))
    return groups


def _spatial_tiles(layer, nt, islot, oslot, kernel, strides, dils, pads, n0=0):
    """Tiles of a conv / pool chunk of output channels ``n0 .. n0 + nt`` over images or
    rows."""
    x, y = layer.ins[0], layer.out
    n, h, w, c = x.shape
    _, oh, ow, f = y.shape
    kh, _kw = kernel
    sh, _sw = strides
    dh, _dw = dils
    pt, pl, pb, pr = pads
    img_in, img_out = h * w * c, oh * ow * nt
    tiles = []
    if img_in <= islot and img_out <= oslot:
        nb = max(1, min(n, islot // img_in, oslot // img_out))
        for b0 in range(0, n, nb):
            b = min(nb, n - b0)
            tiles.append(([(x, b0 * img_in, b * img_in, (b, h, w, c))],
                          (b0 * oh * ow * f + n0, b * oh * ow, nt, f, (b, oh, ow, nt)),
                          {"pads": [pt, pl, pb, pr]}))
        return tiles

    def rows_in(count):
        return min(h, (count - 1) * sh + (kh - 1) * dh + 1)

    ohn = oh
    while ohn > 0 and (rows_in(ohn) * w * c > islot or ohn * ow * nt > oslot):
        ohn -= 1
    if ohn < 1:
        raise LowerError(layer.index, layer.op, f"one output row needs {rows_in(1) * w * c} "
                         f"input bytes and {ow * nt} output bytes; the L1 slots hold {islot} "
                         f"and {oslot} (tiling along W is not supported)")
    for img in range(n):
        for o0 in range(0, oh, ohn):
            cnt = min(ohn, oh - o0)
            first = o0 * sh - pt
            last = (o0 + cnt - 1) * sh - pt + (kh - 1) * dh
            top, bottom = max(0, -first), max(0, last - (h - 1))
            r0, r1 = max(first, 0), min(last, h - 1)
            rows = r1 - r0 + 1
            tiles.append(([(x, (img * h + r0) * w * c, rows * w * c, (1, rows, w, c))],
                          (((img * oh + o0) * ow) * f + n0, cnt * ow, nt, f,
                           (1, cnt, ow, nt)),
                          {"pads": [top, pl, bottom, pr]}))
    return tiles


def _layer_tiles(layer, groups, islot, oslot):
    """``[(group or None, tiles)]`` of one layer."""
    if layer.kind == "conv":
        kh, kw = layer.weights.shape[:2]
        out = []
        for g in groups:
            out.append((g, _spatial_tiles(layer, g.nt, islot, oslot, (kh, kw),
                                          layer.attrs["strides"], layer.attrs["dilations"],
                                          layer.attrs["pads"], g.n0)))
        return out
    if layer.kind == "pool":
        c = layer.out.shape[3]
        return [(None, _spatial_tiles(layer, c, islot, oslot, layer.attrs["kernel_shape"],
                                      layer.attrs["strides"], (1, 1), layer.attrs["pads"]))]
    if layer.kind == "gemm":
        x = layer.ins[0]
        m, k = x.shape
        n = layer.out.shape[1]
        out = []
        for g in groups:
            mt = min(m, islot // k, oslot // g.nt)
            if mt < 1:
                raise LowerError(layer.index, layer.op, f"one row needs {k} input bytes and "
                                 f"{g.nt} output bytes; the L1 slots hold {islot} and {oslot}")
            out.append((g, [([(x, m0 * k, min(mt, m - m0) * k, (min(mt, m - m0), k))],
                             (m0 * n + g.n0, min(mt, m - m0), g.nt, n, (min(mt, m - m0), g.nt)),
                             {}) for m0 in range(0, m, mt)]))
        return out
    if layer.kind == "transpose":  # whole images, NHWC -> NCHW
        n, h, w, c = layer.ins[0].shape
        img = h * w * c
        nb = min(n, islot // img, oslot // img)
        if nb < 1:
            raise LowerError(layer.index, layer.op, f"one image ({img} bytes) does not fit "
                             f"the L1 slots ({islot} bytes)")
        return [(None, [([(layer.ins[0], b0 * img, min(nb, n - b0) * img,
                           (min(nb, n - b0), h, w, c))],
                         (b0 * img, 1, min(nb, n - b0) * img, min(nb, n - b0) * img,
                          (min(nb, n - b0), c, h, w)), {}) for b0 in range(0, n, nb)])]
    if layer.kind == "argmax":
        m, c = layer.ins[0].shape
        mt = min(m, islot // c, oslot // 4)
        if mt < 1:
            raise LowerError(layer.index, layer.op, f"one row of {c} values does not fit the "
                             f"L1 slots ({islot} bytes)")
        return [(None, [([(layer.ins[0], m0 * c, min(mt, m - m0) * c, (min(mt, m - m0), c))],
                          (4 * m0, 1, 4 * min(mt, m - m0), 4 * min(mt, m - m0),
                           (min(mt, m - m0),)), {}) for m0 in range(0, m, mt)])]
    total = layer.out.nbytes
    per = len(layer.ins)
    chunk = min(total, (islot // per) // ALIGN * ALIGN or islot // per, oslot)
    if chunk < 1:
        raise LowerError(layer.index, layer.op, "the L1 slots are too small")
    return [(None, [([(a, s, min(chunk, total - s), (min(chunk, total - s),))
                      for a in layer.ins],
                     (s, 1, min(chunk, total - s), min(chunk, total - s),
                      (min(chunk, total - s),)), {})
                    for s in range(0, total, chunk)])]


#: Candidate splits of L1: the weight slot cap (a fraction of L1) and the input slots' share
#: of what the two weight slots leave.
_WEIGHT_CAPS = (1 / 8, 1 / 4, 3 / 8)
_INPUT_SHARES = (1 / 2, 2 / 3, 3 / 4, 7 / 8)


def _partition(layers, target):
    """Weight groups and slot sizes: of the candidate L1 splits, the one with the fewest
    tiles over the program (each tile costs a compute task's latency and five copies); when
    none fits, the error of the split with the most room for weights."""
    l1 = min(target.l1, target.l2)
    best, error = None, None
    for cap in _WEIGHT_CAPS:
        try:
            groups = _groups(layers, target, int(l1 * cap) // ALIGN * ALIGN)
        except LowerError as exc:
            error = exc
            continue
        wslot = max([_up(len(g.data)) for g in groups] or [0])
        rest = (l1 - 2 * wslot) // 2
        by_layer = {}
        for g in groups:
            by_layer.setdefault(id(g.layer), []).append(g)
        for share in _INPUT_SHARES:
            islot = int(rest * share) // ALIGN * ALIGN
            oslot = (rest - islot) // ALIGN * ALIGN
            try:
                tiles = sum(len(t) for layer in layers for _, t in
                            _layer_tiles(layer, by_layer.get(id(layer), []), islot, oslot))
            except LowerError as exc:
                error = exc
                continue
            if best is None or tiles < best[0]:
                best = (tiles, groups, wslot, islot, oslot)
    if best is None:
        raise error
    return best[1:]


class _Tasks:
    """Tasks with dependencies and a preferred position; written in a priority topological
    order."""

    def __init__(self):
        self.tasks = []  # (key, name, lines, deps)
        self.layer_of = {}  # task name -> number of the layer it belongs to
        self.layer = None

    def add(self, key, name, lines, deps):
        self.tasks.append((key, name, lines, [d for d in deps if d]))
        self.layer_of[name] = self.layer
        return name

    def ordered(self, serial=False):
        index = {name: i for i, (_, name, _, _) in enumerate(self.tasks)}
        waiting = [len(set(d)) for _, _, _, d in self.tasks]
        users = [[] for _ in self.tasks]
        for i, (_, _, _, deps) in enumerate(self.tasks):
            for d in set(deps):
                users[index[d]].append(i)
        heap = [(self.tasks[i][0], i) for i, w in enumerate(waiting) if w == 0]
        heapq.heapify(heap)
        out = []
        ancestors = {}  # task -> bit set of every task before it in the order (names: index)
        last = None
        while heap:
            _, i = heapq.heappop(heap)
            deps = sorted({index[d] for d in self.tasks[i][3]})
            implied = 0
            for d in deps:
                implied |= ancestors[d]
            direct = [d for d in deps if not implied >> d & 1]
            ancestors[i] = implied | sum(1 << d for d in deps)
            if serial:  # each task after the one before it: one token is enough
                direct = [last] if out else []
                last = i
            # a dependency that another one implies is left out: fewer tokens stay live
            text = f", deps=[{', '.join(self.tasks[d][1] for d in direct)}]" if direct else ""
            body = list(self.tasks[i][2])
            body[-1] = body[-1].replace("{DEPS}", text if "{DEPS})" in body[-1] else text[1:])
            out.extend(body)
            for u in users[i]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    heapq.heappush(heap, (self.tasks[u][0], u))
        if len(out) != sum(len(t[2]) for t in self.tasks):
            raise RuntimeError("dependency cycle in the emitted tasks")
        return out


def emit_program(layers, acts, inputs, outputs, target, name="model", *, serial=False):
    """Write the NEM program of ``layers`` for ``target``.

    Parameters
    ----------
    layers : list of nem.lower.Layer
    acts : dict of int to nem.lower.Act
    inputs, outputs : list of int
        Instruction indices of the model's inputs and outputs (their DDR buffers).
    target : nem.target.Target
    serial : bool
        Chain every task to the one before it (no overlap; one live token), for devices with
        too few tokens for the pipelined order.

    Returns
    -------
    Emitted

    Raises
    ------
    LowerError
        A layer whose smallest tile does not fit the device.
    """
    groups, wslot, islot, oslot = _partition(layers, target)
    by_layer = {}
    for g in groups:
        by_layer.setdefault(id(g.layer), []).append(g)

    lines = [f"program {name}:"]
    buffers = []
    seen = set()
    for a in [acts[i] for i in inputs] + [layer.out for layer in layers]:
        if a.buffer not in seen:
            seen.add(a.buffer)
            buffers.append(f"buffer {a.buffer} : DDR (size={max(1, a.nbytes)})")
    for g in groups:
        buffers.append(f"buffer {g.buffer} : DDR (size={len(g.data)})")
    for lvl in ("L2", "L1"):
        s = lvl[1]
        if wslot:
            buffers.append(f"buffer W{s} : {lvl} (size={2 * wslot}, align=64)")
        buffers.append(f"buffer I{s} : {lvl} (size={2 * islot}, align=64)")
        buffers.append(f"buffer O{s} : {lvl} (size={2 * oslot}, align=64)")
    lines += buffers

    tasks = _Tasks()
    producer_done = {}  # DDR buffer -> the last store of the layer that wrote it
    previous_done = []
    t = 0
    gnum = 0
    first_comp, first_tile_of = {}, {}  # weight group -> its first compute task / tile
    wl1_of = {}
    tile_names = []  # per tile: dict of task names
    for number, layer in enumerate(layers):
        tasks.layer = number
        layer_tiles = _layer_tiles(layer, by_layer.get(id(layer), []), islot, oslot)
        first_tile = t
        for group, tiles in layer_tiles:
            g_no = None
            if group is not None:
                g_no = gnum
                gnum += 1
                slot = (g_no % 2) * wslot
                size = len(group.data)
                # slot g % 2 held group g - 2, whose computes all precede the first compute
                # of group g - 1 (the compute chain); load once that one is done
                prev = ([f"w1_{g_no - 1}"] if g_no >= 1 else []) + \
                    ([first_comp[g_no - 1]] if g_no >= 2 else [])
                key = t - 2.05 if g_no == 0 else first_tile_of[g_no - 1] + 1.2
                deps_w2 = [f"w1_{g_no - 1}"] if g_no >= 2 else []
                wl2 = tasks.add(key, f"w2_{g_no}", [
                    f"w2_{g_no} = transfer.async(dst=region(W2, {slot}, {size}), "
                    f"src=region({group.buffer}, 0, {size})"
                    "{DEPS})"], deps_w2)
                wl1_of[g_no] = tasks.add(key + 0.1, f"w1_{g_no}", [
                    f"w1_{g_no} = transfer.async(dst=region(W1, {slot}, {size}), "
                    f"src=region(W2, {slot}, {size}){{DEPS}})"],
                    [wl2, *prev])
                first_tile_of[g_no] = t
            for loads, out, attrs in tiles:
                names = {k: f"{k}{t}" for k in ("a", "b", "c", "d", "e")}
                tile_names.append(names)
                islot_at, oslot_at = (t % 2) * islot, (t % 2) * oslot
                # chains of equal tasks (b, c, d, e each after the previous one) keep few
                # tokens live: a dependency on tile t - 1 implies tile t - 2
                deps2 = [tile_names[t - 1]["b"]] if t >= 1 else []
                if t - first_tile < 2:  # the previous layer is done (and so every earlier one)
                    deps2 += previous_done
                at, l1_regions = 0, []
                for a, _, nbytes, shape in loads:
                    l1_regions.append((at, nbytes, shape, a))
                    at = _up(at + nbytes)
                ld2 = [f"{names['a']} = transfer.async(dst=region(I2, {islot_at + r[0]}, "
                       f"{r[1]}), src=region({a.buffer}, {off}, {r[1]})"
                       for r, (a, off, _, _) in zip(l1_regions, loads, strict=True)]
                # one sDMA copy per operand: name them a{t}, a{t}_1, ...
                ld2_names = [names["a"]] + [f"{names['a']}_{k}" for k in range(1, len(loads))]
                deps2 = sorted(set(deps2))
                for k, text in enumerate(ld2):
                    text = text.replace(f"{names['a']} =", f"{ld2_names[k]} =", 1)
                    tasks.add(t - 1.9 + 0.01 * k, ld2_names[k],
                              [text + "{DEPS})"], deps2)
                span = _up(l1_regions[-1][0] + l1_regions[-1][1]) if len(loads) > 1 else \
                    l1_regions[-1][1]
                deps1 = ld2_names + ([tile_names[t - 1]["b"]] if t >= 1 else []) + \
                    ([tile_names[t - 2]["d"]] if t >= 2 else [])  # d[t-2] after c[t-2]
                tasks.add(t - 0.5, names["b"], [
                    f"{names['b']} = transfer.async(dst=region(I1, {islot_at}, {span}), "
                    f"src=region(I2, {islot_at}, {span}){{DEPS}})"], deps1)
                comp_lines = _compute(layer, group, g_no, wslot, names, islot_at, oslot_at,
                                      l1_regions, out, g_no not in first_comp)
                depsc = [names["b"]] + ([tile_names[t - 1]["c"]] if t >= 1 else []) + \
                    ([tile_names[t - 2]["d"]] if t >= 2 else []) + \
                    ([wl1_of[g_no]] if g_no is not None and g_no not in first_comp else [])
                comp_lines[-1] += "{DEPS}" + _attr_text(layer, attrs)
                tasks.add(t, names["c"], comp_lines, depsc)
                off, rows, rowb, stride, _oshape = out
                osz = rows * rowb
                depsd = [names["c"]] + ([tile_names[t - 1]["d"]] if t >= 1 else []) + \
                    ([tile_names[t - 1]["e"]] if t >= 1 else [])
                tasks.add(t + 1.3, names["d"], [
                    f"{names['d']} = transfer.async(dst=region(O2, {oslot_at}, {osz}), "
                    f"src=region(O1, {oslot_at}, {osz}){{DEPS}})"], depsd)
                if stride == rowb:
                    dst = f"region({layer.out.buffer}, {off}, {osz})"
                    src = f"region(O2, {oslot_at}, {osz})"
                else:
                    dst = (f"region({layer.out.buffer}, {off}, {(rows - 1) * stride + rowb}) "
                           f"elem=i8, shape=[{rows}, {rowb}], strides=[{stride}, 1]")
                    src = (f"region(O2, {oslot_at}, {osz}) elem=i8, shape=[{rows}, {rowb}], "
                           f"layout=MN")
                depse = [names["d"]] + ([tile_names[t - 1]["e"]] if t >= 1 else [])
                tasks.add(t + 1.7, names["e"], [
                    f"{names['e']} = transfer.async(dst={dst}, src={src}" "{DEPS})"], depse)
                if g_no is not None:
                    first_comp.setdefault(g_no, names["c"])
                t += 1
        # every task of the layer precedes its last store (the chains)
        previous_done = [tile_names[t - 1]["e"]]
        producer_done[layer.out.buffer] = previous_done
    body = tasks.ordered(serial)
    body += [f"wait({e})" for a in outputs for e in producer_done.get(acts[a].buffer, [])]
    initial = {g.buffer: g.data for g in groups}
    return Emitted("\n".join(lines + body) + "\n", initial, t, len(groups),
                   {"input": islot, "output": oslot, "weights": wslot}, tasks.layer_of)


def _attr_text(layer, attrs):
    if layer.kind == "conv":
        a = dict(layer.attrs, **attrs)
        return (f" pads=[{_dims(a['pads'])}] strides=[{_dims(a['strides'])}] "
                f"dilations=[{_dims(a['dilations'])}] groups=1 accum_type=i32")
    if layer.kind == "gemm":
        return " accum_type=i32"
    if layer.kind == "argmax":
        return f" axis={layer.attrs['axis']} keepdims=false"
    if layer.kind == "transpose":
        return f" perm=[{_dims(layer.attrs['perm'])}]"
    if layer.op == "clamp":
        return (f" min_val={_float_text(layer.attrs['min_val'])} "
                f"max_val={_float_text(layer.attrs['max_val'])}")
    if layer.kind == "pool":
        a = dict(layer.attrs, **attrs)
        return (f" kernel_shape=[{_dims(a['kernel_shape'])}] pads=[{_dims(a['pads'])}] "
                f"strides=[{_dims(a['strides'])}]")
    return ""


def _float_text(v):
    """A float as a NEM literal (``DIGITS "." DIGITS [exponent]``, a leading ``-`` for the
    sign), exact: ``repr`` round-trips."""
    text = repr(float(v))
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + (f"e{exponent}" if exponent else "")


def _layout(shape):
    return {4: "NHWC", 2: "MK", 1: "C"}.get(len(shape))


def _compute(layer, group, g_no, wslot, names, islot_at, oslot_at, l1_regions, out,
             first_in_group):
    t = names["c"][1:]
    lines = []
    operands = []
    for k, (at, nbytes, shape, a) in enumerate(l1_regions):
        lines.append(f"let rx{t}_{k} = region(I1, {islot_at + at}, {nbytes}) elem=i8, "
                     f"shape=[{_dims(shape)}], layout={_layout(shape)}, "
                     f"quant={_per_tensor(a.quant)}")
        operands.append(f"rx{t}_{k}")
    oshape = out[4]
    olayout = "MN" if len(oshape) == 2 else _layout(oshape)
    if layer.kind == "transpose":
        olayout = "NCHW"
    osz = int(np.prod(oshape))
    if layer.kind in ("conv", "gemm"):
        wslot_at = (g_no % 2) * wslot
        wshape = [*list(layer.weights.shape[:-1]), group.nt]
        axis = len(wshape) - 1
        scales = layer.w_scales[group.n0:group.n0 + group.nt]
        if first_in_group:  # the group's weight and bias regions, named once for its tiles
            lines.append(f"let rw_{g_no} = region(W1, {wslot_at}, {group.w_bytes}) elem=i8, "
                         f"shape=[{_dims(wshape)}], layout={'HWIO' if axis == 3 else 'KN'}, "
                         f"quant={_per_channel(scales, axis)}")
            lines.append(f"let rb_{g_no} = region(W1, {wslot_at + _up(group.w_bytes)}, "
                         f"{4 * group.nt}) elem=i32, shape=[{group.nt}], layout=C")
        operands += [f"rw_{g_no}", f"rb_{g_no}"]
    if layer.out.elem == "i32":  # argmax indices: no quantisation
        lines.append(f"let ry{t} = region(O1, {oslot_at}, {4 * osz}) elem=i32, "
                     f"shape=[{_dims(oshape)}], layout={olayout}")
    else:
        lines.append(f"let ry{t} = region(O1, {oslot_at}, {osz}) elem=i8, "
                     f"shape=[{_dims(oshape)}], layout={olayout}, "
                     f"quant={_per_tensor(layer.out.quant)}")
    lines.append(f"{names['c']} = {layer.op}.async in {', '.join(operands)} out ry{t}")
    return lines
