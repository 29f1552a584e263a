"""Memories of the NPU model: DDR, L2 and L1[k] as byte arrays, buffer placement, typed regions.

One deterministic allocator, :func:`allocate`, places every buffer of a program at a byte
address in its memory; the executor and the binder both call it, so "buffer X lives at
address A" is one fact. Rules:

* memories are filled in declaration order, each buffer at the next address that is a
  multiple of its ``align`` (default :data:`DEFAULT_ALIGN`, the widest bus beat);
* L2 and L1[k] must fit in the device's ``l2_size_bytes`` / ``l1_size_bytes``; when the
  device leaves a size out (the upstream examples do), the memory is as large as its
  buffers need;
* DDR is as large as its buffers need, rounded up to 4 KiB.

A typed region is a view of ``elem`` values with the given ``shape`` and element
``strides`` (explicit ``strides=``, or row-major strides of the shape for ``layout=``: the
layout names the order of the shape's axes, the storage is dense in that order). Values
are little-endian. ``i4`` values are two's complement nibbles packed two per byte, element
``e`` (the element offset ``sum(index * stride)``) in byte ``e // 2`` of the region, the low
nibble for even ``e`` and the high nibble for odd ``e`` (LSB first).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from nem.checker import BufferInfo, Region
from nem.device import Device
from nem.elemtypes import BITS, elem_type

__all__ = [
    "DEFAULT_ALIGN",
    "AllocationError",
    "Memory",
    "Placement",
    "allocate",
    "dense_strides",
    "memory_name",
]

#: Alignment of a buffer without ``align=`` (bytes): one 512-bit bus beat.
DEFAULT_ALIGN = 64
_DDR_ROUND = 4096


class AllocationError(ValueError):
    """A buffer does not fit, or initial contents do not fit their buffer."""


@dataclass(frozen=True)
class Placement:
    """Where a buffer lives: memory (``level``, ``engine``) and byte ``address``."""

    name: str
    level: str
    engine: int | None
    address: int
    size: int
    align: int

    @property
    def memory(self) -> tuple[str, int | None]:
        """The key of the memory holding the buffer."""
        return (self.level, self.engine if self.level == "L1" else None)


def memory_name(key: tuple[str, int | None]) -> str:
    """``DDR``, ``L2`` or ``L1[k]``."""
    level, engine = key
    return f"L1[{engine}]" if level == "L1" else level


def dense_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major element strides of ``shape``."""
    out = []
    acc = 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


class CopyWalkError(ValueError):
    """A copy whose two sides cannot be walked together (the message says why)."""


def copy_walk(src: Region, dst: Region) -> tuple[int, list[tuple[int, int, int]]]:
    """How a copy unit walks a transfer: the contiguous run and the outer dimensions.

    Returns ``(run, dims)``: ``run`` bytes are contiguous on both sides, and ``dims`` lists
    ``(count, source byte stride, destination byte stride)`` from the innermost outer
    dimension outwards (empty: one run). A copy between untyped or dense regions is one run
    of the source's extent (the executor copies the source's bytes to the start of the
    destination); dimensions of size 1 are dropped and the innermost dimensions that are
    contiguous on both sides merge into the run.

    Raises
    ------
    CopyWalkError
        When the two sides have different shapes (ignoring 1s) or sub-byte elements.
    """
    if (src.strides is None and dst.strides is None) or not (src.typed and dst.typed):
        return src.extent, []
    shape = [d for d in src.shape if d != 1]
    if shape != [d for d in dst.shape if d != 1]:
        raise CopyWalkError(
            f"copy from shape {list(src.shape)} to {list(dst.shape)}; the copy unit walks one "
            "shape on both sides"
        )
    bits = BITS[src.elem]
    if bits % 8:
        raise CopyWalkError(f"strided copy of sub-byte {src.elem} elements")

    def byte_strides(region: Region) -> list[int]:
        strides = region.strides or dense_strides(tuple(region.shape))
        return [s * bits // 8 for d, s in zip(region.shape, strides, strict=True) if d != 1]

    run = bits // 8
    dims: list[tuple[int, int, int]] = []
    for d, a, b in reversed(list(zip(shape, byte_strides(src), byte_strides(dst), strict=True))):
        if not dims and a == run and b == run:
            run *= d
        else:
            dims.append((d, a, b))
    return run, dims


def allocate(
    buffers: Mapping[str, BufferInfo], device: Device | None
) -> tuple[dict[str, Placement], dict[tuple[str, int | None], int]]:
    """Place every buffer; return placements and the size of every memory.

    Raises
    ------
    AllocationError
        When the buffers of a memory exceed the device's capacity, or a size is unknown.
    """
    nxt: dict[tuple[str, int | None], int] = {}
    out: dict[str, Placement] = {}
    for buf in buffers.values():
        if buf.size is None:
            raise AllocationError(f"buffer {buf.name} ({buf.span}) has no valid size")
        key = (buf.level, buf.engine if buf.level == "L1" else None)
        if key[0] == "L1" and key[1] is None:
            key = ("L1", 0)
        align = buf.align or DEFAULT_ALIGN
        address = -(-nxt.get(key, 0) // align) * align
        nxt[key] = address + buf.size
        out[buf.name] = Placement(buf.name, key[0], key[1], address, buf.size, align)
    sizes: dict[tuple[str, int | None], int] = {}
    engines = (device.num_engines if device and device.num_engines else 1) or 1
    keys = {("DDR", None), ("L2", None), *(("L1", k) for k in range(engines)), *nxt}
    for key in sorted(keys, key=lambda k: (k[0], -1 if k[1] is None else k[1])):
        used = nxt.get(key, 0)
        if key[0] == "DDR":
            sizes[key] = max(_DDR_ROUND, -(-used // _DDR_ROUND) * _DDR_ROUND)
            continue
        cap = None
        if device is not None:
            cap = device.l2_size_bytes if key[0] == "L2" else device.l1_size_bytes
        if cap is not None and used > cap:
            where = memory_name(key)
            raise AllocationError(
                f"buffers in {where} need {used} bytes (with alignment); device "
                f"{device.name!r} has {cap}"
            )
        sizes[key] = cap if cap is not None else max(used, DEFAULT_ALIGN)
    return out, sizes


class Memory:
    """The byte contents of every memory of the device, and typed access to regions."""

    def __init__(self, placements: dict[str, Placement], sizes: dict[tuple, int]):
        self.placements = placements
        self.sizes = dict(sizes)
        self.mems: dict[tuple[str, int | None], np.ndarray] = {
            key: np.zeros(size, dtype=np.uint8) for key, size in sizes.items()
        }

    # --- buffers ---------------------------------------------------------------------------

    def buffer(self, name: str) -> np.ndarray:
        """The bytes of buffer ``name`` (a writable view)."""
        p = self.placements[name]
        return self.mems[p.memory][p.address : p.address + p.size]

    def load_buffer(self, name: str, data: np.ndarray) -> None:
        """Set the first bytes of buffer ``name`` to the raw little-endian bytes of ``data``."""
        if name not in self.placements:
            raise AllocationError(
                f"initial contents for {name!r}, which is not a buffer of the program "
                f"(buffers: {', '.join(self.placements) or 'none'})"
            )
        raw = np.ascontiguousarray(data)
        if raw.dtype.byteorder == ">":
            raw = raw.astype(raw.dtype.newbyteorder("<"))
        raw = raw.reshape(-1).view(np.uint8)
        p = self.placements[name]
        if raw.size > p.size:
            raise AllocationError(
                f"initial contents for buffer {name} hold {raw.size} bytes; the buffer has "
                f"{p.size}"
            )
        self.buffer(name)[: raw.size] = raw

    # --- regions ---------------------------------------------------------------------------

    def address(self, region: Region) -> tuple[tuple[str, int | None], int]:
        """(memory key, absolute byte address) of the first byte of ``region``."""
        p = self.placements[region.buffer]
        return p.memory, p.address + region.offset

    def region_bytes(self, region: Region) -> np.ndarray:
        """The raw bytes ``[offset, offset + extent)`` of a region (a writable view)."""
        key, base = self.address(region)
        return self.mems[key][base : base + region.extent]

    def _index(self, region: Region) -> np.ndarray:
        strides = region.strides or dense_strides(region.shape)
        idx = np.zeros(region.shape, dtype=np.int64)
        for axis, (d, s) in enumerate(zip(region.shape, strides, strict=True)):
            shape = [1] * len(region.shape)
            shape[axis] = d
            idx = idx + (np.arange(d, dtype=np.int64) * s).reshape(shape)
        return idx

    def read(self, region: Region) -> np.ndarray:
        """The values of a typed region, as an array of ``shape`` (i4 unpacked to int8)."""
        raw = self.region_bytes(region)
        if region.elem == "i4":
            e = self._index(region)
            byte = raw[e // 2].astype(np.int16)
            nib = np.where(e % 2 == 0, byte & 0xF, byte >> 4)
            return np.where(nib >= 8, nib - 16, nib).astype(np.int8)
        return _typed_view(raw, region).copy()

    def write(self, region: Region, values: np.ndarray) -> None:
        """Store ``values`` (already of the region's element type and shape) into a region."""
        raw = self.region_bytes(region)
        values = np.asarray(values)
        if tuple(values.shape) != tuple(region.shape):  # pragma: no cover - executor bug
            raise AssertionError(f"{region.label}: writing {values.shape} into {region.shape}")
        if region.elem == "i4":
            e = self._index(region).reshape(-1)
            v = values.reshape(-1).astype(np.int16) & 0xF
            for parity, shift, keep in ((0, 0, 0xF0), (1, 4, 0x0F)):
                sel = e % 2 == parity
                pos = e[sel] // 2
                raw[pos] = (raw[pos] & keep) | (v[sel] << shift).astype(np.uint8)
            return
        view = _typed_view(raw, region)
        view[...] = values.astype(view.dtype)

    def touched(self, region: Region) -> tuple[tuple[str, int | None], int, int]:
        """(memory, lo, hi): the absolute byte range a task using ``region`` may touch."""
        key, base = self.address(region)
        return key, base, base + region.extent


def _typed_view(raw: np.ndarray, region: Region) -> np.ndarray:
    """A strided view of ``raw`` (the region's bytes) as the region's whole-byte elements."""
    dt = elem_type(region.elem).dtype  # i4 is unpacked to int8
    strides = region.strides or dense_strides(region.shape)
    return np.ndarray(
        region.shape, dtype=dt, buffer=raw, strides=tuple(s * dt.itemsize for s in strides)
    )


def packed_bytes(elem: str, count: int) -> int:
    """Bytes that ``count`` elements of ``elem`` occupy densely (``ceil(count * bits / 8)``)."""
    return math.ceil(count * BITS[elem] / 8)
