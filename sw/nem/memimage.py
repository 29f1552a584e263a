"""The memory image: what a bound program needs in memory before it runs, and where its
results are read back.

A memory image is a safetensors file that goes with one task binary. It holds one ``U8``
tensor per buffer whose initial contents matter (the bytes of the whole buffer), and in the
safetensors metadata (string to string):

``nem.image``
    ``"1.0"``, the version of this layout.
``nem.program_sha256``
    sha256 (hex) of the task binary the image goes with.
``nem.device_sha256``
    sha256 (hex) of the resolved device (the binary's header holds the same hash).
``nem.program_address``
    Where the loader should put the task binary in DDR: the end of the DDR buffers rounded up
    to 4 KiB (a suggestion; the sequencer takes the address from its control register).
``nem.buffers``
    A JSON list with one object per buffer of the binary, in buffer table order:
    ``{"name", "level", "engine", "address", "size", "load", "result"}``. ``load`` is true
    when a task reads some byte of the buffer before any task writes it, or when the user gave
    initial contents for it (the image then has the buffer's tensor); ``result`` when some
    task writes the buffer (read it back from ``address`` after the run).

Which bytes are read before written is decided in program order over region extents. For a
race-free program this is exact, because every task that writes a byte before a reader in
program order is ordered before it (a ``deps`` only names earlier tasks); a strided output
region is not counted as writing its holes.

Buffers at L1 or L2 can be loads too (the executor's op tests start with data in L1). The
RTL testbench writes them through the SRAMs' test port; on silicon such a program needs a
transfer from DDR first.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass

import numpy as np

from nem.checker import Plan
from nem.memory import AllocationError, Memory, allocate, dense_strides
from nem.taskformat import LEVELS, Program, encode

__all__ = [
    "IMAGE_VERSION",
    "MAX_IMAGE_BYTES",
    "ImageBuffer",
    "MemoryImage",
    "MemoryImageError",
    "buffer_use",
    "build_image",
    "read_image",
    "write_image",
]

IMAGE_VERSION = "1.0"
#: The task binary goes to DDR at the end of the DDR buffers rounded up to this.
PROGRAM_ALIGN = 4096
#: Bytes of buffers (all memories) a memory image may be built for: building one holds
#: every memory in numpy arrays.
MAX_IMAGE_BYTES = 1 << 30
_FIELDS = {"name": str, "level": str, "engine": (int, type(None)), "address": int, "size": int,
           "load": bool, "result": bool}  # fmt: skip


class MemoryImageError(ValueError):
    """A memory image cannot be written or read (the message names the file and field)."""


@dataclass(frozen=True)
class ImageBuffer:
    """One buffer of the image: where it lives and what the run does with it."""

    name: str
    level: str
    engine: int | None
    address: int
    size: int
    load: bool  # initial contents needed: the image holds them
    result: bool  # written by the program: read it back after the run


@dataclass(frozen=True)
class MemoryImage:
    """A memory image: buffers, the initial bytes of the loads, and what it belongs to."""

    buffers: tuple[ImageBuffer, ...]
    data: dict[str, np.ndarray]  # name -> uint8 bytes of the whole buffer (loads only)
    program_sha256: str
    device_sha256: str
    program_address: int

    def initial(self) -> dict[str, np.ndarray]:
        """Initial contents by buffer name, as ``nem.executor.execute`` takes them."""
        return dict(self.data)


def _dense(region) -> bool:
    return region.strides is None or tuple(region.strides) == dense_strides(tuple(region.shape))


def buffer_use(plan: Plan) -> dict[str, tuple[bool, bool]]:
    """Per buffer ``(load, result)``: read before written, and written, in program order."""
    written = {name: np.zeros(buf.size or 0, dtype=bool) for name, buf in plan.buffers.items()}
    load = dict.fromkeys(plan.buffers, False)
    result = dict.fromkeys(plan.buffers, False)
    for task in plan.tasks:
        for r in task.ins:
            if not written[r.buffer][r.offset : r.offset + r.extent].all():
                load[r.buffer] = True
        for r in task.outs:
            result[r.buffer] = True
            if not r.typed or _dense(r):
                written[r.buffer][r.offset : r.offset + r.extent] = True
    return {name: (load[name], result[name]) for name in plan.buffers}


def build_image(
    program: Program, plan: Plan, initial: dict[str, np.ndarray] | None = None
) -> MemoryImage:
    """The memory image of a bound program.

    Parameters
    ----------
    program : Program
        The bound task binary (its buffer table gives the addresses).
    plan : Plan
        The checked program it was bound from (which buffers are loads and results).
    initial : dict of str to numpy.ndarray, optional
        Initial contents by buffer name, placed at the buffer's start as the executor does
        (raw little-endian bytes); buffers without any start as zeros.

    Raises
    ------
    MemoryImageError
        When initial contents name no buffer or do not fit, or the buffers hold more than
        :data:`MAX_IMAGE_BYTES`.
    """
    total = sum(b.size or 0 for b in plan.buffers.values())
    if total > MAX_IMAGE_BYTES:
        largest = max(plan.buffers.values(), key=lambda b: b.size or 0)
        raise MemoryImageError(
            f"the buffers hold {total} bytes (largest: {largest.name}, {largest.size} bytes); "
            f"a memory image is built for at most {MAX_IMAGE_BYTES}"
        )
    use = buffer_use(plan)
    table = {b.name: b for b in program.buffers}
    if set(table) != set(plan.buffers):
        raise MemoryImageError("the binary's buffer table and the program's buffers differ")
    try:
        placements, sizes = allocate(plan.buffers, None)
        memory = Memory(placements, sizes)
        for name, values in (initial or {}).items():
            memory.load_buffer(name, values)
    except AllocationError as exc:
        raise MemoryImageError(str(exc)) from None
    given = set(initial or {})
    buffers = tuple(
        ImageBuffer(
            b.name, b.level, b.engine, b.address, b.size,
            use[b.name][0] or b.name in given, use[b.name][1],
        )
        for b in program.buffers
    )  # fmt: skip
    data = {b.name: memory.buffer(b.name).copy() for b in buffers if b.load}
    ddr_end = max((b.address + b.size for b in buffers if b.level == "DDR"), default=0)
    return MemoryImage(
        buffers,
        data,
        hashlib.sha256(encode(program)).hexdigest(),
        program.device_hash.hex(),
        -(-ddr_end // PROGRAM_ALIGN) * PROGRAM_ALIGN,
    )


def write_image(path: str | os.PathLike, image: MemoryImage) -> None:
    """Write ``image`` as a safetensors file."""
    from safetensors.numpy import save_file  # the reader below checks every field itself

    meta = {
        "nem.image": IMAGE_VERSION,
        "nem.program_sha256": image.program_sha256,
        "nem.device_sha256": image.device_sha256,
        "nem.program_address": str(image.program_address),
        "nem.buffers": json.dumps([b.__dict__ for b in image.buffers], separators=(",", ":")),
    }
    save_file({k: np.ascontiguousarray(v) for k, v in image.data.items()}, os.fspath(path), meta)


def _fail(path, message: str) -> MemoryImageError:
    return MemoryImageError(f"{os.fspath(path)}: {message}")


def _buffers(path, text: str) -> tuple[ImageBuffer, ...]:
    try:
        items = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise _fail(path, f"metadata nem.buffers is not JSON ({exc})") from None
    if not isinstance(items, list):
        raise _fail(path, "metadata nem.buffers is not a JSON list")
    out = []
    for k, item in enumerate(items):
        where = f"metadata nem.buffers[{k}]"
        if not isinstance(item, dict) or set(item) != set(_FIELDS):
            raise _fail(path, f"{where}: needs exactly the fields {', '.join(_FIELDS)}")
        for field, kind in _FIELDS.items():
            value = item[field]
            bad_bool = isinstance(value, bool) and kind is not bool
            if not isinstance(value, kind) or bad_bool:
                raise _fail(path, f"{where}.{field}: {value!r} has the wrong type")
        if item["level"] not in LEVELS or item["address"] < 0 or item["size"] < 0:
            raise _fail(path, f"{where}: level {item['level']!r} / address / size out of range")
        out.append(ImageBuffer(**item))
    if len({b.name for b in out}) != len(out):
        raise _fail(path, "metadata nem.buffers names a buffer twice")
    return tuple(out)


def _read_safetensors(path) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """Metadata and U8 tensors of a safetensors file, every field checked.

    The layout: an 8-byte little-endian header length n, n bytes of a JSON object (tensor
    name -> {dtype, shape, data_offsets}, plus ``__metadata__``), then the data.
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise _fail(path, f"cannot read ({exc.strerror})") from None
    if len(raw) < 8:
        raise _fail(path, f"offset 0: {len(raw)} bytes, a safetensors file starts with 8")
    n = int.from_bytes(raw[:8], "little")
    if n > len(raw) - 8:
        raise _fail(path, f"offset 0: header length {n} runs past the end ({len(raw)} bytes)")
    try:
        header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _fail(path, f"offset 8: the header is not UTF-8 JSON ({exc})") from None
    if not isinstance(header, dict):
        raise _fail(path, "offset 8: the header is not a JSON object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _fail(path, "__metadata__ is not an object of strings")
    body = raw[8 + n :]
    tensors = {}
    for name, info in header.items():
        where = f"tensor {name!r}"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise _fail(path, f"{where}: needs exactly dtype, shape and data_offsets")
        shape, offsets = info["shape"], info["data_offsets"]
        if info["dtype"] != "U8":
            raise _fail(path, f"{where}: dtype {info['dtype']!r}, an image holds U8 bytes")
        ints = (
            isinstance(shape, list) and isinstance(offsets, list) and len(offsets) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                    for v in (*shape, *offsets))
        )  # fmt: skip
        if not ints:
            raise _fail(path, f"{where}: shape {shape!r} / data_offsets {offsets!r} malformed")
        lo, hi = offsets
        count = 1
        for d in shape:
            count *= d
        if not lo <= hi <= len(body) or hi - lo != count:
            raise _fail(
                path,
                f"{where}: data_offsets [{lo}, {hi}) for {count} bytes, the data has {len(body)}",
            )
        tensors[name] = np.frombuffer(body, np.uint8, count, lo).reshape(shape)
    return meta, tensors


def read_image(path: str | os.PathLike, program: Program | None = None) -> MemoryImage:
    """Read a memory image; with ``program``, check that it belongs to that binary.

    Raises
    ------
    MemoryImageError
        When the file is not a safetensors file, lacks or has malformed metadata, a load has
        no tensor (or one of the wrong type or size), or it belongs to another binary.
    """
    meta, tensors = _read_safetensors(path)
    for key in ("nem.image", "nem.program_sha256", "nem.device_sha256", "nem.program_address",
                "nem.buffers"):  # fmt: skip
        if key not in meta:
            raise _fail(path, f"metadata has no {key} (not a NEM memory image)")
    if meta["nem.image"].split(".")[0] != IMAGE_VERSION.split(".")[0]:
        raise _fail(path, f"image version {meta['nem.image']}, this reader reads 1.x")
    if not re.fullmatch(r"[0-9]{1,20}", meta["nem.program_address"]):
        raise _fail(path, f"metadata nem.program_address {meta['nem.program_address']!r}")
    buffers = _buffers(path, meta["nem.buffers"])
    data = {}
    for b in buffers:
        if not b.load:
            continue
        arr = tensors.get(b.name)
        if arr is None:
            raise _fail(path, f"buffer {b.name} is a load but the file has no tensor for it")
        if arr.dtype != np.uint8 or arr.shape != (b.size,):
            raise _fail(
                path,
                f"tensor {b.name}: {arr.dtype} {list(arr.shape)}, expected uint8 [{b.size}]",
            )
        data[b.name] = arr
    extra = set(tensors) - set(data)
    if extra:
        raise _fail(path, f"tensor(s) {', '.join(sorted(extra))} are not loads of the image")
    image = MemoryImage(
        buffers,
        data,
        meta["nem.program_sha256"],
        meta["nem.device_sha256"],
        int(meta["nem.program_address"]),
    )
    if program is not None:
        digest = hashlib.sha256(encode(program)).hexdigest()
        if digest != image.program_sha256:
            raise _fail(
                path,
                f"made for the binary with sha256 {image.program_sha256[:16]}..., not this one "
                f"({digest[:16]}...)",
            )
        placed = [(b.name, b.level, b.engine, b.address, b.size) for b in program.buffers]
        mine = [(b.name, b.level, b.engine, b.address, b.size) for b in buffers]
        if placed != mine:
            raise _fail(path, "its buffers differ from the binary's buffer table")
    return image
