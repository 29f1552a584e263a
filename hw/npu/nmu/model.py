"""Python models of the NMU (int8 MAC array unit): task decode, AGU, run reader, array, output.

The RTL in ``npu.nmu.unit`` / ``npu.nmu.agu`` / ``npu.nmu.array`` / ``npu.nmu.output`` follows these
functions step by step; the tests compare each block against its model and the whole unit
against ``nem.executor.execute`` of the same bound program (``docs/nmu.md``).

Geometry
--------
The array has ``lanes`` rows along the reduction (one L1 word of int8 activations per cycle,
``lanes`` = the L1 word in bytes) and ``cols`` output channels (``lanes * cols`` =
``NMU.int8_macs``); each column sums its ``lanes`` products (an adder tree) into one i32
accumulator. A weight tile (every reduction row of ``cols`` output channels) stays in the
weight buffer while the activations stream past: weight-stationary, as NVDLA's CMAC.

Every task is a convolution in this view (gemm / matmul: one image of ``M x 1`` pixels,
``K`` input channels, a 1 x 1 kernel). The reduction runs over taps (kh, kw) and, inside a
tap, over the input channels in chunks of ``lanes``; weight buffer row ``tap * Q + q`` holds
channels ``q*lanes .. q*lanes+lanes-1`` of tap ``tap`` for the tile's ``cols`` channels
(``Q = ceil(Cin / lanes)``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from nem.elemtypes import BITS
from nem.numerics import REQUANT_TYPES
from nem.opcodes import groups
from nem.registry import load_registry
from nem.taskformat import (
    ATTR_WORDS,
    ELEM_TYPES,
    OPCODES,
    REGISTER_MAPS,
    Unit,
    read_attr_words,
)

__all__ = [
    "OUT_BYTES",
    "Cause",
    "NmuGeometry",
    "NmuTask",
    "NmuUnsupported",
    "Run",
    "act_runs",
    "array_model",
    "bias_runs",
    "check_geometry",
    "decode_task",
    "nmu_model",
    "read_runs",
    "requant_model",
    "weight_runs",
]

REGS = REGISTER_MAPS[Unit.NMU]
#: Output element type -> bytes: the requantiser's types, and i32 for the raw accumulator.
OUT_BYTES = {name: BITS[name] // 8 for name in (*REQUANT_TYPES, "i32")}


class Cause:
    """Error causes the NMU reports on ``done`` (``error`` = cause != NONE)."""

    NONE = 0
    OPCODE = 1  # not gemm, matmul or conv2d
    TYPE = 2  # operands not i8 x i8 (+ i32 bias) -> i8/u8/i16/i32, or not in L1
    LAYOUT = 3  # rank, batch, groups, inner strides other than 1, bias not per channel
    SIZE = 4  # reduction longer than the weight buffer, more channels than the table
    REQUANT = 5  # requantisation entry does not match the output (channels, raw vs typed)



class NmuUnsupported(ValueError):
    """A task the NMU refuses; ``cause`` is a :class:`Cause` code."""

    def __init__(self, cause, message):
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class NmuGeometry:
    """Array shape and buffer sizes of one NMU.

    Parameters
    ----------
    lanes : int
        Reduction lanes = L1 word bytes (a power of two).
    cols : int
        Output channels per tile, ``1 <= cols <= lanes``.
    wrows : int
        Weight buffer rows (each ``lanes x cols`` bytes): at most ``wrows * lanes``
        reduction elements (``KH * KW * Q * lanes``).
    channels : int
        Output channels the requantisation table holds (a multiple of ``cols``).
    """

    lanes: int = 8
    cols: int = 8
    wrows: int = 256
    channels: int = 256

    def __post_init__(self):
        if self.lanes < 1 or self.lanes & (self.lanes - 1):
            raise ValueError(f"lanes must be a power of two, not {self.lanes}")
        if not 1 <= self.cols <= self.lanes:
            raise ValueError(f"cols must be in 1..lanes ({self.lanes}), not {self.cols}")
        if self.wrows < 1:
            raise ValueError(f"wrows must be a positive integer, not {self.wrows}")
        if self.channels < self.cols or self.channels % self.cols:
            raise ValueError(f"channels must be a positive multiple of cols ({self.cols}), "
                             f"not {self.channels}")

    @property
    def macs(self):
        return self.lanes * self.cols

    @classmethod
    def from_device(cls, device, word_bytes, **kw):
        """``lanes`` = ``word_bytes``, ``cols`` = ``NMU.int8_macs / word_bytes``."""
        macs = device.characteristic("NMU", "int8_macs")
        if not macs or macs % word_bytes:
            raise ValueError(f"NMU.int8_macs ({macs}) must be a positive multiple of the "
                             f"L1 word ({word_bytes} bytes)")
        return cls(lanes=word_bytes, cols=macs // word_bytes, **kw)


@dataclass(frozen=True)
class NmuTask:
    """A gemm / matmul / conv2d task in the NMU's convolution view (byte addresses in L1).

    x[b, ih, iw, c] at ``x_addr + b*xs[0] + ih*xs[1] + iw*xs[2] + c`` (bytes, i8);
    w[kh, kw, ci, co] at ``w_addr + kh*ws[0] + kw*ws[1] + ci*ws[2] + co``;
    bias[co] (i32) at ``b_addr + 4*co*b_stride`` (``has_bias``);
    y[b, oh, ow, co] at ``y_addr + E*(b*ys[0] + oh*ys[1] + ow*ys[2] + co)``, E output bytes.
    A batched gemm / matmul is ``mats`` such tasks, product ``i`` with the three addresses
    moved by ``i*x_mat``, ``i*w_mat`` and ``E*i*y_mat`` (a broadcast operand: stride 0).
    """

    batch: int
    h: int
    w: int
    cin: int
    kh: int
    kw: int
    cout: int
    oh: int
    ow: int
    x_addr: int
    xs: tuple
    w_addr: int
    ws: tuple
    has_bias: bool
    b_addr: int
    b_stride: int
    y_addr: int
    ys: tuple
    out_elem: str
    pads: tuple  # top, left (bottom/right follow from the output size)
    strides: tuple
    dils: tuple
    pix_bias: bool = False  # gemm bias of shape [M, N]: bias[m, co] at
    b_mstride: int = 0  # b_addr + 4*(m*b_mstride + co*b_stride), loaded pixel by pixel
    mats: int = 1  # batched matmul: this many products, operands stepped by the strides
    x_mat: int = 0
    w_mat: int = 0
    y_mat: int = 0

    @property
    def out_bytes(self):
        return OUT_BYTES[self.out_elem]


def _field(regs, k, name):
    return regs.get(REGS.index(f"OP{k}_{name}"), 0)


def _signed(v):
    return v - (1 << 32) if v & (1 << 31) else v


def decode_task(regs):
    """The NMU's view of a compute task from its register values (``{index: value}``).

    Raises
    ------
    NmuUnsupported
        With the cause the hardware reports.
    """
    opcode = regs.get(REGS.index("OPCODE"), 0)
    name = OPCODES[opcode] if opcode < len(OPCODES) else None
    if name not in groups().nmu:
        raise NmuUnsupported(Cause.OPCODE, f"opcode {opcode} ({name}) is not an NMU opcode")
    nin = regs.get(REGS.index("NIN"), 0)
    nout = regs.get(REGS.index("NOUT"), 0)
    if nout != 1 or not 2 <= nin <= (3 if name != "matmul" else 2):
        raise NmuUnsupported(Cause.TYPE, f"{nin} inputs and {nout} outputs")
    ops = [*range(nin), nin]
    codes = [_field(regs, k, "ELEM") for k in ops]
    elems = [ELEM_TYPES[c] if c < len(ELEM_TYPES) else f"code {c}" for c in codes]
    out_elem = elems[-1]
    if elems[0] != "i8" or elems[1] != "i8" or (nin == 3 and elems[2] != "i32") \
            or out_elem not in OUT_BYTES:
        raise NmuUnsupported(Cause.TYPE, f"element types {elems}")
    if any(_field(regs, k, "LEVEL") != 2 or _field(regs, k, "ADDR_HI") for k in ops):
        raise NmuUnsupported(Cause.TYPE, "every operand must be in L1")

    def dims(k):
        rank = _field(regs, k, "RANK")
        if rank > 4:      # no operand of the NMU's opcodes has more than four dimensions
            raise NmuUnsupported(Cause.LAYOUT, f"operand {k} of rank {rank}")
        return ([_field(regs, k, f"DIM{d}") for d in range(rank)],
                [_field(regs, k, f"STRIDE{d}") for d in range(rank)])

    (xd, xs), (wd, wstr), (yd, ys) = dims(0), dims(1), dims(nin)
    addr = [_field(regs, k, "ADDR_LO") for k in range(nin + 1)]
    attr_words = [regs.get(REGS.index(f"ATTR{j}"), 0) for j in range(ATTR_WORDS)]
    batching = {}
    if name == "conv2d":
        specs = [(a.name, a.type) for a in load_registry()["conv2d"].attributes]
        attrs = read_attr_words("conv2d", specs, attr_words)
        if len(xd) != 4 or len(wd) != 4 or len(yd) != 4:
            raise NmuUnsupported(Cause.LAYOUT, "conv2d operands must have rank 4")
        if (attrs.get("groups") or 1) != 1:
            raise NmuUnsupported(Cause.LAYOUT, "groups must be 1")
        pads = attrs.get("pads") or [0, 0, 0, 0]
        strides = attrs.get("strides") or [1, 1]
        dils = attrs.get("dilations") or [1, 1]
        batch, h, w, cin = xd
        kh, kw, _, cout = wd
        x_s, w_s, y_s = xs[:3], wstr[:3], ys[:3]
        inner = (xs[3], wstr[3], ys[3])
        oh, ow = yd[1], yd[2]
    else:
        if not (2 <= len(xd) <= 3 and 2 <= len(wd) <= 3
                and len(yd) == max(len(xd), len(wd))):
            raise NmuUnsupported(Cause.LAYOUT, f"{name} operands must have rank 2 or 3")
        mats = yd[0] if len(yd) == 3 else 1
        steps = []
        for d, st in ((xd, xs), (wd, wstr), (yd, ys)):
            if len(d) == 2 or d[0] == 1:
                steps.append(0)
            elif d[0] == mats:
                steps.append(st[0])
            else:
                raise NmuUnsupported(Cause.LAYOUT, f"batch {d[0]} of {mats}")
        xd, xs, wd, wstr, yd, ys = xd[-2:], xs[-2:], wd[-2:], wstr[-2:], yd[-2:], ys[-2:]
        m, k = xd
        cout = wd[1]
        batch, h, w, cin, kh, kw, oh, ow = 1, m, 1, k, 1, 1, m, 1
        x_s, w_s, y_s = (0, xs[0], 0), (0, 0, wstr[0]), (0, ys[0], 0)
        inner = (xs[1], wstr[1], ys[1])
        pads, strides, dils = [0, 0, 0, 0], [1, 1], [1, 1]
        batching = {"mats": mats, "x_mat": steps[0], "w_mat": steps[1], "y_mat": steps[2]}
    if inner != (1, 1, 1):
        raise NmuUnsupported(Cause.LAYOUT, f"innermost element strides {inner}, not 1")
    b_addr, b_stride, pix = 0, 0, {}
    if nin == 3:
        bd, bs = dims(2)
        per_pixel = name != "conv2d" and len(bd) == 2 and bd[0] == h and bd[0] != 1
        if not 1 <= len(bd) <= 2 or bd[-1] != cout or (bd[:-1] not in ([], [1])
                                                        and not per_pixel):
            raise NmuUnsupported(Cause.LAYOUT, f"bias shape {bd}: per output channel, or "
                                 "[M, N] for gemm")
        b_addr, b_stride = addr[2], bs[-1]
        if per_pixel:
            pix = {"pix_bias": True, "b_mstride": bs[0]}
    return NmuTask(
        batch=batch, h=h, w=w, cin=cin, kh=kh, kw=kw, cout=cout, oh=oh, ow=ow,
        x_addr=addr[0], xs=tuple(x_s), w_addr=addr[1], ws=tuple(w_s),
        has_bias=nin == 3 and not pix,
        b_addr=b_addr, b_stride=b_stride, y_addr=addr[nin], ys=tuple(y_s), out_elem=out_elem,
        pads=(pads[0], pads[1]), strides=tuple(strides), dils=tuple(dils), **batching, **pix,
    )


def check_geometry(task, geom, n_channels):
    """Raise :class:`NmuUnsupported` when ``task`` does not fit ``geom``."""
    q = -(-task.cin // geom.lanes)
    if task.kh * task.kw * q > geom.wrows:
        raise NmuUnsupported(Cause.SIZE, f"{task.kh * task.kw * q} weight rows, the buffer "
                             f"holds {geom.wrows}")
    if task.cout > geom.channels:
        raise NmuUnsupported(Cause.SIZE, f"{task.cout} output channels, the table holds "
                             f"{geom.channels}")
    if task.out_elem == "i32":
        if n_channels:
            raise NmuUnsupported(Cause.REQUANT, "an i32 output takes no requantisation")
    elif n_channels != task.cout:
        raise NmuUnsupported(Cause.REQUANT, f"{n_channels} requantisation channels for "
                             f"{task.cout} output channels")


@dataclass(frozen=True)
class Run:
    """One AGU command: ``length`` bytes from ``addr`` (or, ``pad``, that many pad bytes)."""

    addr: int
    length: int
    pad: bool = False
    tag: tuple = ()


def weight_runs(task, geom, n0):
    """Weight rows of the tile starting at output channel ``n0``: one run per (kh, kw, ci).

    Tag: (buffer row, lane)."""
    q = -(-task.cin // geom.lanes)
    n = min(geom.cols, task.cout - n0)
    for kh in range(task.kh):
        for kw in range(task.kw):
            for ci in range(task.cin):
                addr = task.w_addr + kh * task.ws[0] + kw * task.ws[1] + ci * task.ws[2] + n0
                yield Run(addr, n, tag=((kh * task.kw + kw) * q + ci // geom.lanes,
                                        ci % geom.lanes))


def bias_runs(task, geom, n0):
    """The bias of the tile's channels: one 4-byte run per channel. Tag: (column,)."""
    for c in range(min(geom.cols, task.cout - n0)):
        yield Run(task.b_addr + 4 * (n0 + c) * task.b_stride, 4, tag=(c,))


def act_runs(task, geom, n0=0):
    """Activation runs of the tile at channel ``n0``, pixel by pixel (b, oh, ow), tap by
    tap (kh, kw).

    A tap outside the input (padding) is a pad run: ``cin`` bytes that read as the input
    zero point. Tag: (weight row of the tap's first chunk, first tap, last tap, output
    byte address of the pixel's channel ``n0``). With a per-pixel bias (gemm ``[M, N]``),
    each pixel's taps follow its ``ncols`` bias words: 4-byte runs tagged ("bias", c).
    """
    q = -(-task.cin // geom.lanes)
    e = task.out_bytes
    for b in range(task.batch):
        for oh in range(task.oh):
            for ow in range(task.ow):
                yaddr = task.y_addr + e * (b * task.ys[0] + oh * task.ys[1] + ow * task.ys[2]
                                           + n0)
                if task.pix_bias:
                    for c in range(min(geom.cols, task.cout - n0)):
                        yield Run(task.b_addr + 4 * (oh * task.b_mstride
                                                     + (n0 + c) * task.b_stride), 4,
                                  tag=("bias", c))
                for kh in range(task.kh):
                    for kw in range(task.kw):
                        ih = oh * task.strides[0] - task.pads[0] + kh * task.dils[0]
                        iw = ow * task.strides[1] - task.pads[1] + kw * task.dils[1]
                        pad = not (0 <= ih < task.h and 0 <= iw < task.w)
                        addr = 0 if pad else (task.x_addr + b * task.xs[0] + ih * task.xs[1]
                                              + iw * task.xs[2])
                        tap = kh * task.kw + kw
                        yield Run(addr, task.cin, pad, tag=(
                            tap * q, tap == 0, tap == task.kh * task.kw - 1, yaddr))


def read_runs(runs, mem, lanes, pad_byte=0):
    """The run reader: each run as vectors of ``lanes`` bytes (the last one partial).

    Yields (bytes as a list of ``lanes`` ints, valid count, vector index in the run, run).
    Lanes past the valid count are 0.
    """
    for run in runs:
        for j in range(-(-run.length // lanes)):
            n = min(lanes, run.length - j * lanes)
            if run.pad:
                data = [pad_byte] * n
            else:
                start = run.addr + j * lanes
                data = [int(v) for v in mem[start:start + n]]
            yield data + [0] * (lanes - n), n, j, run


def _s8(v):
    return v - 256 if v >= 128 else v


def array_model(vectors, wbuf, bias, zx, cols):
    """The MAC array: per pixel, ``acc[c] = bias[c] + sum (x - zx) * w`` over its vectors.

    ``vectors`` are :func:`read_runs` items of activation runs; ``wbuf[row][lane][col]``.
    Yields (accumulators (i32 wrap), the pixel's output byte address); counts MACs.
    """
    acc = None
    bias = list(bias)
    for data, n, j, run in vectors:
        if run.tag[0] == "bias":  # a per-pixel bias word
            bias[run.tag[1]] = int.from_bytes(bytes(data[:4]), "little", signed=True)
            continue
        row0, first, last, yaddr = run.tag
        if first and j == 0:
            acc = list(bias)
        for c in range(cols):
            acc[c] += sum((_s8(data[lane]) - zx) * wbuf[row0 + j][lane][c] for lane in range(n))
        if last and j == -(-run.length // len(data)) - 1:
            yield [((a + (1 << 31)) % (1 << 32)) - (1 << 31) for a in acc], yaddr


def requant_model(acc, m, t, zy, lo, hi):
    """docs/numerics.md on one accumulator."""
    r = (acc * m + (1 << (t - 1))) >> t
    return min(max(r + zy, lo), hi)


def nmu_model(regs, entry, mem, geom):
    """Run one task on ``mem`` (a numpy uint8 array, L1 bytes), as the RTL does.

    ``entry`` is the :class:`nem.taskformat.RequantEntry`. Returns counters
    ``{"macs": ..., "vectors": ...}``.
    """
    whole = decode_task(regs)
    check_geometry(whole, geom, len(entry.multipliers))
    counts = {"macs": 0, "vectors": 0}
    e = whole.out_bytes
    for i in range(whole.mats):
        task = replace(whole, x_addr=whole.x_addr + i * whole.x_mat,
                       w_addr=whole.w_addr + i * whole.w_mat,
                       y_addr=whole.y_addr + e * i * whole.y_mat)
        one = _one_product(task, entry, mem, geom)
        counts = {k: counts[k] + one[k] for k in counts}
    return counts


def _one_product(task, entry, mem, geom):
    zx = entry.x_zero_point
    e = task.out_bytes
    macs = vectors = 0
    for n0 in range(0, task.cout, geom.cols):
        ncols = min(geom.cols, task.cout - n0)
        wrows = [[[0] * geom.cols for _ in range(geom.lanes)] for _ in range(geom.wrows)]
        for data, n, _, run in read_runs(weight_runs(task, geom, n0), mem, geom.lanes):
            row, lane = run.tag
            for c in range(n):
                wrows[row][lane][c] = _s8(data[c])
        bias = [0] * geom.cols
        if task.has_bias:
            for data, _, _, run in read_runs(bias_runs(task, geom, n0), mem, geom.lanes):
                bias[run.tag[0]] = int.from_bytes(bytes(data[:4]), "little", signed=True)
        vecs = list(read_runs(act_runs(task, geom, n0), mem, geom.lanes, zx & 0xFF))
        vecs_a = [v for v in vecs if v[3].tag[0] != "bias"]
        vectors += len(vecs_a)
        macs += sum(n for _, n, _, _ in vecs_a) * ncols
        for acc, yaddr in array_model(vecs, wrows, bias, zx, geom.cols):
            for c in range(ncols):
                ch = n0 + c
                if task.out_elem == "i32":
                    v = acc[c]
                else:
                    v = requant_model(acc[c], entry.multipliers[ch], entry.shifts[ch],
                                      entry.y_zero_point, entry.lo, entry.hi)
                at = yaddr + e * c
                mem[at:at + e] = np.frombuffer((v & ((1 << 8 * e) - 1)).to_bytes(e, "little"),
                                               np.uint8)
    return {"macs": macs, "vectors": vectors}
