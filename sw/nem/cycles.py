"""The executor's cycle model: how long a task keeps its unit busy.

Rates come from the device's ``unit_characteristics`` (keys below; a device may set any of
them, unknown keys are kept on the device untouched). Every task costs a fixed latency plus
its work divided by the unit's rate, rounded up:

==========  ======================  =======  =============================================
unit        key                     default  meaning
==========  ======================  =======  =============================================
NMU         ``int8_macs``           256      int8 x int8 (and int8 x int4) MACs per cycle
NMU         ``int4_macs``           = int8   int8 x int4 MACs per cycle
NMU         ``fp16_macs``           64       f16 / bf16 MACs per cycle
NMU         ``fp32_macs``           16       f32 MACs per cycle
NMU         ``latency_cycles``      8        pipeline fill and drain per task
CSTL        ``elems_per_cycle``     16       elements per cycle (largest operand); on the
                                             int8 path bytes per cycle, the L1 word
                                             (``nem.ops``: a cast to i32 moves 4 bytes per
                                             element, a pool every window tap)
CSTL        ``latency_cycles``      4
VPU         ``elems_per_cycle``     4
VPU         ``latency_cycles``      8
DMA         ``bytes_per_cycle``     32       L2 <-> L1 copy rate (a 256-bit path)
DMA         ``latency_cycles``      8
DMA         ``row_cycles``          0        extra cycles per contiguous run of a copy
sDMA        ``bytes_per_cycle``     16       DDR <-> L2 copy rate (a 128-bit AXI port)
sDMA        ``latency_cycles``      32       DDR access latency
sDMA        ``row_cycles``          0        extra cycles per contiguous run of a copy
==========  ======================  =======  =============================================

A copy walks ``rows`` contiguous runs (``nem.memory.copy_walk``: one for a dense copy) and
costs ``latency_cycles + ceil(bytes / bytes_per_cycle) + row_cycles * rows``.

The datapath model
------------------
A device that sets ``lanes`` for the NMU or the CSTL (the shipped engines of
``hw/npu/devices/`` do) is costed the way that unit's datapath works (``docs/nmu.md``,
``docs/cstl.md``) rather than by its peak rate; the constants below were fitted to the
RTL's hardware counters (``tests/bench/bench_engine.py``):

==========  ======================  =======  =============================================
unit        key                     default  meaning
==========  ======================  =======  =============================================
NMU         ``lanes``               unset    reduction elements per activation vector
                                             (the L1 word); ``cols = int8_macs / lanes``
CSTL        ``lanes``               unset    bytes per vector (the L1 word)
CSTL        ``table_cycles``        0        reading a 256-byte lookup table from DDR
CSTL        ``entry_cycles``        0        reading a binary eltwise entry from DDR
CSTL        ``window_cycles``       0        a pool's cost per output chunk beyond its taps
CSTL        ``average_cycles``      0        an average pool's division per output chunk
CSTL        ``eltwise_lanes``       1        lanes the binary eltwise ALU computes a cycle
CSTL        ``eltwise_depth``       0        register stages of the binary eltwise ALU's
                                             pipeline (an eltwise task's last results
                                             leave that many cycles after they enter it)
==========  ======================  =======  =============================================

With in-order issue (a task binary, as the engine's sequencer runs it) and a device that
sets ``SEQ.issue_cycles``, the sequencer's decode is modelled too: it decodes one task
ahead, a task's decode (``issue_cycles`` plus ``operand_cycles`` per operand: the header
and the register writes) starting once the previous task has issued (the first task's
plus ``start_cycles`` at the start), and a task issues once decoded.

==========  ======================  =======  =============================================
SEQ         ``issue_cycles``        0        decode of a task (header and fixed registers)
SEQ         ``operand_cycles``      0        decode per operand (its register writes)
SEQ         ``start_cycles``        0        before the first task (fetching the program)
==========  ======================  =======  =============================================

An int8 gemm / matmul (``[..., M, K] x [K, N]``) or NHWC conv2d (HWIO weights; a bound
binary's operands carry no layout name and are taken as these) with i8 weights, of
``pixels`` output positions, ``taps`` kernel taps and a reduction of ``red`` elements per
tap, runs in ``T = ceil(N / cols)`` tiles of output channels. A tile's weights and bias
take ``load = taps * red + cols`` cycles, its activations ``act = pixels * taps *
ceil(red / lanes)`` vectors (a tap in the padding reads nothing but still gives its
vectors); the first tile's weights load before any activation, a later tile's under the
previous tile's activations, so the task costs ``latency_cycles + load + act + (T - 1) *
max(act, load)``. Each run (a weight row of a tile, or a pixel's tap of ``red`` bytes)
whose first vector of ``lanes`` bytes lies across two L1 words costs the run reader one
cycle more, and so does a bias word (4 bytes per column) across two words: ``load`` and
``act`` count them from the operands' offsets and strides (buffers start on a multiple of
``lanes``). Both run readers take their runs through a skid register, so a run waits
while the one before it is read: a tile with a bias whose last weight row lies across two
words loads one cycle faster (the bias runs start while that row's second word is read),
and a later tile whose activations take at least its load saves
``max(0, 3 - d(L)) - max(0, 4 - d(S) - d(L))`` cycles at its start (``d``: words the last
activation run ``L`` and the one before it ``S`` read). Other NMU tasks (an ``[M, N]``
bias among them) keep the peak-rate model.

A CSTL int8 task costs ``latency_cycles`` plus ``table_cycles`` / ``entry_cycles`` when it
reads a table / an eltwise entry (no ``table_cycles`` when the same CSTL instance read the
same table last: it still holds it, as the engine's CSTL does), plus its datapath cycles:
a table op or cast one vector per ``lanes`` bytes of its largest operand; a pool per
output position and chunk of ``lanes`` channels one cycle per tap plus ``window_cycles``
(and ``average_cycles`` for an average); a binary eltwise, per chunk of up to ``lanes``
elements of the innermost dimension, one cycle per ``eltwise_lanes`` of its elements (the
ALU's lanes) plus one (the chunk of the first input; the second's is read as the ALU
starts, the results leave through an output register while the next chunk is read), and
once per task ``eltwise_depth`` (its last chunk's way through the ALU's pipeline).

Overlap is not modelled here: the executor's event schedule decides which tasks run at
the same time on different units.
"""

from __future__ import annotations

import math

import numpy as np

from nem.device import Device
from nem.elemtypes import FLOAT_TYPES
from nem.ops import Work
from nem.units import unit_type

__all__ = ["DEFAULTS", "CycleModel"]

DEFAULTS: dict[str, dict[str, int]] = {
    "NMU": {"int8_macs": 256, "fp16_macs": 64, "fp32_macs": 16, "latency_cycles": 8},
    "CSTL": {"elems_per_cycle": 16, "latency_cycles": 4},
    "VPU": {"elems_per_cycle": 4, "latency_cycles": 8},
    "DMA": {"bytes_per_cycle": 32, "latency_cycles": 8, "row_cycles": 0},
    "sDMA": {"bytes_per_cycle": 16, "latency_cycles": 32, "row_cycles": 0},
}


class CycleModel:
    """Per-task durations from a resolved device's unit characteristics."""

    def __init__(self, device: Device | None):
        self.device = device
        self._tables: dict[str, bytes] = {}  # per CSTL instance: the table it holds

    def value(self, unit: str, key: str) -> int:
        """``unit_characteristics[unit][key]`` of the device, or the documented default."""
        given = self.device.characteristic(unit, key) if self.device else None
        if given is not None and given > 0:
            return int(given)
        if unit == "NMU" and key == "int4_macs":
            return self.value("NMU", "int8_macs")
        return DEFAULTS[unit][key]

    def macs_per_cycle(self, elems: tuple[str, ...]) -> int:
        """NMU MACs per cycle for operands of these element types."""
        if "f32" in elems:
            return self.value("NMU", "fp32_macs")
        if any(e in FLOAT_TYPES for e in elems):
            return self.value("NMU", "fp16_macs")
        if "i4" in elems:
            return self.value("NMU", "int4_macs")
        return self.value("NMU", "int8_macs")

    def decode(self, task, after: int) -> int:
        """Cycles the sequencer spends decoding ``task`` (see the module; 0 when the device
        does not set ``SEQ.issue_cycles``); ``after`` 0 for the program's first task."""
        issue = self.optional("SEQ", "issue_cycles")
        if not issue:
            return 0
        operands = len(task.ins) + len(task.outs)
        return (issue + self.optional("SEQ", "operand_cycles") * operands
                + (0 if after else self.optional("SEQ", "start_cycles")))

    def optional(self, unit: str, key: str) -> int:
        """A datapath-model characteristic (see the module): the device's value, else 0."""
        given = self.device.characteristic(unit, key) if self.device else None
        return int(given) if given is not None and given > 0 else 0

    def cycles(self, unit: str, work: Work, nbytes: int = 0, elems: tuple[str, ...] = (),
               task=None, instance: str | None = None) -> int:
        """Cycles a task with ``work`` (or ``nbytes`` moved) keeps a ``unit`` busy; with the
        ``task`` (a :class:`nem.checker.plan.TaskInstance`) and a device that sets the
        unit's ``lanes``, by the datapath model (``instance``: the unit instance, whose
        CSTL keeps the last table it read; calls come in issue order)."""
        latency = self.value(unit, "latency_cycles")
        if task is not None and self.optional(unit, "lanes"):
            datapath = (self._nmu_datapath(task, elems) if unit == "NMU" else
                        self._cstl_datapath(task, work, instance) if unit == "CSTL" else None)
            if datapath is not None:
                return latency + datapath
        if unit == "NMU":
            return latency + math.ceil(work.macs / self.macs_per_cycle(elems))
        if unit_type(unit).role == "copy":
            rows = self.value(unit, "row_cycles") * work.rows
            return latency + math.ceil(nbytes / self.value(unit, "bytes_per_cycle")) + rows
        return latency + math.ceil(max(work.elems, nbytes) / self.value(unit, "elems_per_cycle"))

    def _nmu_datapath(self, task, elems: tuple[str, ...]) -> int | None:
        """The NMU's cycles beyond its latency for an int8 gemm / matmul / NHWC conv2d with
        i8 weights (see the module), ``None`` for other tasks."""
        if any(e not in ("i8", "i32") for e in elems) or len(task.ins) < 2:
            return None
        x, w, y = task.ins[0], task.ins[1], task.outs[0]
        if not (x.shape and w.shape and y.shape) or w.elem != "i8" or x.elem != "i8":
            return None
        lanes = self.optional("NMU", "lanes")
        cols = max(1, self.value("NMU", "int8_macs") // lanes)
        if task.opcode in ("gemm", "matmul") and len(w.shape) == 2 and len(x.shape) >= 2:
            taps, red, outc = 1, x.shape[-1], w.shape[-1]
            acts = _gemm_runs(x)
            wrows = _rows(w, (w.shape[0],))
        elif task.opcode == "conv2d" and y.layout in (None, "NHWC") and len(w.shape) == 4 \
                and len(x.shape) == 4 and len(y.shape) == 4:
            kh, kw, red, outc = w.shape
            taps = kh * kw
            acts = _conv_runs(task, x, y, (kh, kw))
            wrows = _rows(w, (kh, kw, red))
        else:
            return None
        bias = task.ins[2] if len(task.ins) > 2 else None
        if bias is not None and (bias.shape is None or len(bias.shape) != 1):
            return None  # a per-pixel bias comes through the activation side
        tiles = -(-outc // cols)
        saving = _boundary_saving(acts, red, lanes)  # the same at every tile boundary
        total = 0
        for t in range(tiles):
            width = min(cols, outc - t * cols)
            load = taps * red + cols + _straddles(wrows + t * cols, width, lanes)
            if bias is not None:  # a 4-byte word per column
                load += _straddles(bias.offset + 4 * (t * cols + np.arange(width)), 4, lanes)
                # the bias runs start while the last weight row's second word is read
                load -= _straddles(wrows[-1:] + t * cols, width, lanes)
            act = acts.size * -(-red // lanes) + _straddles(acts, red, lanes)
            # the first tile's weights load before any activation; a later tile's load
            # runs under the previous tile's activations
            if t == 0:
                total = load + act
            else:
                total += max(act, load) - (act >= load and saving)
        return total

    def _cstl_datapath(self, task, work: Work, instance: str | None) -> int | None:
        """The CSTL's cycles beyond its latency for an int8 task (see the module), ``None``
        for other tasks."""
        regions = (*task.ins, *task.outs)
        if any(r.elem != "i8" for r in regions) and task.opcode != "cast":
            return None
        if any(r.shape is None for r in regions):
            return None
        lanes = self.optional("CSTL", "lanes")
        kept = bool(work.table) and instance is not None and \
            self._tables.get(instance) == work.table
        if work.table and instance is not None:
            self._tables[instance] = work.table
        fetch = (self.optional("CSTL", "table_cycles") if work.table and not kept else 0) + (
            self.optional("CSTL", "entry_cycles") if work.entry else 0)
        y = task.outs[0]
        if task.opcode in ("maxpool", "avgpool") and len(y.shape) == 4:
            n, oh, ow, ch = y.shape
            kh, kw = task.attrs.get("kernel_shape") or (1, 1)
            chunks = n * oh * ow * -(-ch // lanes)
            per_chunk = kh * kw + self.optional("CSTL", "window_cycles") + (
                self.optional("CSTL", "average_cycles") if task.opcode == "avgpool" else 0)
            return fetch + chunks * per_chunk
        if work.entry:
            inner = y.shape[-1] if y.shape else 1
            alu = max(1, self.optional("CSTL", "eltwise_lanes"))
            full, part = divmod(inner, lanes)
            row = full * (-(-lanes // alu) + 1) + (-(-part // alu) + 1 if part else 0)
            return fetch + math.prod(y.shape[:-1]) * row + \
                self.optional("CSTL", "eltwise_depth")
        return fetch + -(-max(work.elems, 0) // lanes)


def _rows(region, dims) -> np.ndarray:
    """Byte offsets (from the region's buffer, ``-1`` none) of the rows of ``region``'s
    innermost dimension: one per index of its outer ``dims``, by its element strides (i8)."""
    strides = region.strides or _contiguous(region.shape)
    index = np.indices(dims).reshape(len(dims), -1)
    return region.offset + np.tensordot(np.asarray(strides[:len(dims)]), index, axes=1)


def _contiguous(shape) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def _gemm_runs(x) -> np.ndarray:
    """Start offsets of a gemm / matmul's activation runs: one per row of ``x``."""
    return _rows(x, tuple(x.shape[:-1]))


def _conv_runs(task, x, y, kernel) -> np.ndarray:
    """Start offsets of an NHWC conv2d's activation runs: one per output pixel and tap, in
    the input (``-1`` for a tap in the padding, which reads nothing)."""
    n, oh, ow, _ = y.shape
    _, h, w, _ = x.shape
    kh, kw = kernel
    strides = x.strides or _contiguous(x.shape)
    sh, sw = task.attrs.get("strides") or (1, 1)
    dh, dw = task.attrs.get("dilations") or (1, 1)
    pads = task.attrs.get("pads") or (0, 0, 0, 0)
    b, r, c, u, v = np.indices((n, oh, ow, kh, kw)).reshape(5, -1)
    ih = r * sh - pads[0] + u * dh
    iw = c * sw - pads[1] + v * dw
    inside = (ih >= 0) & (ih < h) & (iw >= 0) & (iw < w)
    at = x.offset + b * strides[0] + ih * strides[1] + iw * strides[2]
    return np.where(inside, at, -1)


def _boundary_saving(acts: np.ndarray, red: int, lanes: int) -> int:
    """Cycles the activation reader's command skid register saves between two tiles.

    The next tile's first run is out 3 cycles after the AGU takes the tile's last run; the
    reader is free ``d(L)`` cycles after it starts that last run ``L`` (``d``: words read,
    ``ceil(red / lanes)``, one more when the run lies across two words): a gap of
    ``max(0, 3 - d(L))``. With the skid register the AGU hands ``L`` over while the reader
    still reads the run ``S`` before it: ``max(0, 4 - d(S) - d(L))``."""
    if acts.size < 2:
        return 0
    words = -(-red // lanes)
    last = words + _straddles(acts[-1:], red, lanes)
    before = words + _straddles(acts[-2:-1], red, lanes)
    return max(0, 3 - last) - max(0, 4 - before - last)


def _straddles(starts: np.ndarray, length: int, lanes: int) -> int:
    """Runs (starting at ``starts``, ``-1``: no read) whose first vector of ``lanes`` bytes
    lies across two L1 words: the run reader takes a cycle more for each."""
    starts = np.asarray(starts)
    starts = starts[starts >= 0]
    return int(np.count_nonzero(starts % lanes + min(length, lanes) > lanes))
