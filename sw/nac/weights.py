"""Weights of a NAC model: files on disk, external safetensors, dequantisation.

External weights live in ``<stem>.safetensors`` beside the ``.nac`` file, one tensor per
parameter name (DATA block 1). They are written with the ``safetensors`` package and read
*lazily and without copying*: the header is parsed here (8-byte length + JSON, checked
against the file size) and every tensor is a read-only ``numpy.memmap`` view of the file.
Quantisation parameters of external tensors are stored in the safetensors metadata under
``"nac.quant.<name>"`` as JSON (method, scales, axis, block_size, orig_shape).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import ml_dtypes
import numpy as np

from nac.container import QuantParams, Tensor, dumps, loads
from nac.encoding import DType, QuantMethod
from nac.errors import NacFormatError

__all__ = ["Weights", "dequantize", "read_nac", "tensor_from_array", "write_nac"]

_FROM_SAFETENSORS = {d.safetensors: d for d in DType}


def dequantize(tensor_array, quant, params):
    """Return the values of a stored tensor for computing (§8.1 step 4).

    Quantised and floating-point tensors become float32; integer and bool tensors are
    returned unchanged.

    Parameters
    ----------
    tensor_array : numpy.ndarray
        The stored values (int8 for INT8_*, uint8 bytes of float8 e4m3 for BLOCK_FP8).
    quant : QuantMethod
    params : QuantParams or None
    """
    quant = QuantMethod(quant)
    if quant in (QuantMethod.NONE, QuantMethod.FP16):
        array = np.asarray(tensor_array)
        # Floating-point tensors compute in float32; integer and bool tensors (indices,
        # masks) keep their type.
        return array.astype(np.float32) if array.dtype.kind == "f" or \
            array.dtype == ml_dtypes.bfloat16 else array
    if quant == QuantMethod.INT8_TENSOR:
        return tensor_array.astype(np.float32) * np.float32(params.scales[0])
    if quant == QuantMethod.INT8_CHANNEL:
        scales = np.asarray(params.scales, dtype=np.float32)
        shape = [1] * tensor_array.ndim
        shape[params.axis] = scales.size
        return tensor_array.astype(np.float32) * scales.reshape(shape)
    values = np.asarray(tensor_array).view(ml_dtypes.float8_e4m3fn).astype(np.float32).ravel()
    scales = np.repeat(np.asarray(params.scales, dtype=np.float32), params.block_size)
    count = math.prod(params.orig_shape)
    return (values[:count] * scales[:count]).reshape(params.orig_shape)


def _check_quant(name, tensor):
    q, p = QuantMethod(tensor.quant), tensor.quant_params
    if q in (QuantMethod.NONE, QuantMethod.FP16):
        return
    if p is None:
        raise NacFormatError(f"tensor {name}: {q.name} needs quantisation parameters")
    if q == QuantMethod.INT8_TENSOR and len(p.scales) != 1:
        raise NacFormatError(f"tensor {name}: INT8_TENSOR needs exactly one scale")
    if q == QuantMethod.INT8_CHANNEL and (
            not 0 <= p.axis < len(tensor.shape) or len(p.scales) != tensor.shape[p.axis]):
        raise NacFormatError(f"tensor {name}: INT8_CHANNEL needs one scale per index of axis "
                             f"{p.axis} of shape {list(tensor.shape)}")
    if q == QuantMethod.BLOCK_FP8 and (
            p.block_size <= 0 or len(p.scales) * p.block_size < math.prod(p.orig_shape)):
        raise NacFormatError(f"tensor {name}: BLOCK_FP8 scales do not cover the tensor")


def tensor_from_array(array, quant=QuantMethod.NONE, quant_params=None):
    """A :class:`nac.container.Tensor` holding a copy of *array*'s bytes (little-endian)."""
    array = np.ascontiguousarray(array)
    dtype = DType.from_numpy(array.dtype)
    data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    return Tensor(dtype, tuple(int(s) for s in array.shape), QuantMethod(quant), quant_params,
                  data)


class Weights(Mapping):
    """Lazy, memory-mapped view of an external ``.safetensors`` weight file.

    ``weights[name]`` is a read-only numpy memmap of the stored tensor (no copy);
    :meth:`float32` dequantises one tensor.
    """

    def __init__(self, path):
        self.path = Path(path)
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise NacFormatError("safetensors file shorter than its 8-byte header length",
                                     path=self.path, offset=0)
            n = int.from_bytes(raw, "little")
            if n > size - 8 or n > 100_000_000:
                raise NacFormatError(f"safetensors header length {n} exceeds the file "
                                     f"({size} bytes)", path=self.path, field="header_length",
                                     offset=0, value=n)
            try:
                header = json.loads(f.read(n))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise NacFormatError(f"safetensors header is not JSON: {exc}", path=self.path,
                                     field="header", offset=8) from None
        if not isinstance(header, dict):
            raise NacFormatError("safetensors header is not a JSON object", path=self.path,
                                 field="header", offset=8)
        self.metadata = header.pop("__metadata__", {}) or {}
        self._base = 8 + n
        self._entries = {}
        data_size = size - self._base
        for name, entry in header.items():
            try:
                dtype = _FROM_SAFETENSORS[entry["dtype"]]
                shape = tuple(int(s) for s in entry["shape"])
                start, end = (int(x) for x in entry["data_offsets"])
            except (KeyError, TypeError, ValueError):
                raise NacFormatError(f"malformed entry for tensor {name!r}", path=self.path,
                                     field="header", value=entry) from None
            if not 0 <= start <= end <= data_size or \
                    end - start != math.prod(shape) * dtype.numpy.itemsize:
                raise NacFormatError(f"tensor {name!r}: data offsets {start}..{end} do not "
                                     f"match its shape {list(shape)} and the file",
                                     path=self.path, field="data_offsets", value=[start, end])
            self._entries[name] = (dtype, shape, start)

    def __getitem__(self, name):
        dtype, shape, start = self._entries[name]
        if math.prod(shape) == 0:
            return np.zeros(shape, dtype=dtype.numpy)
        return np.memmap(self.path, dtype=dtype.numpy, mode="r", offset=self._base + start,
                         shape=shape)

    def __iter__(self):
        return iter(self._entries)

    def __len__(self):
        return len(self._entries)

    def quant(self, name):
        """``(QuantMethod, QuantParams or None)`` of tensor *name*."""
        raw = self.metadata.get(f"nac.quant.{name}")
        if raw is None:
            return QuantMethod.NONE, None
        try:
            info = json.loads(raw)
            method = QuantMethod(info["method"])
            return method, QuantParams(tuple(info.get("scales", ())), info.get("axis", 0),
                                       info.get("block_size", 0),
                                       tuple(info.get("orig_shape", ())))
        except (KeyError, ValueError, TypeError, json.JSONDecodeError):
            raise NacFormatError(f"bad quantisation metadata for {name!r}", path=self.path,
                                 field=f"nac.quant.{name}", value=raw) from None

    def float32(self, name):
        """Tensor *name* as float32 (dequantised when quantised)."""
        method, params = self.quant(name)
        return dequantize(self[name], method, params)


def _external_path(path):
    path = Path(path)
    return path.with_suffix(".safetensors")


def write_nac(nac, path, weights=None):
    """Write *nac* to *path*; with external storage also ``<stem>.safetensors``.

    Parameters
    ----------
    nac : NacFile
    path : path-like
    weights : mapping of name to Tensor, optional
        For external storage: the tensors by parameter name. Internal tensors travel in
        ``nac.data.tensors``.
    """
    path = Path(path)
    if not nac.internal_weights and weights:
        from safetensors.numpy import save_file

        arrays, metadata = {}, {}
        for name, tensor in weights.items():
            _check_quant(name, tensor)
            arrays[name] = np.frombuffer(tensor.data, dtype=tensor.dtype.numpy).reshape(
                tensor.shape)
            if tensor.quant != QuantMethod.NONE:
                p = tensor.quant_params or QuantParams()
                metadata[f"nac.quant.{name}"] = json.dumps({
                    "method": int(tensor.quant), "scales": list(p.scales), "axis": p.axis,
                    "block_size": p.block_size, "orig_shape": list(p.orig_shape)})
        save_file(arrays, str(_external_path(path)), metadata=metadata or None)
    if nac.internal_weights and nac.data and nac.data.tensors:
        names = dict(nac.data.params)
        for pid, tensor in nac.data.tensors:
            _check_quant(names.get(pid, pid), tensor)
    path.write_bytes(dumps(nac))


def read_nac(path):
    """Read a ``.nac`` file; external weights are attached lazily as ``nac.weights``.

    Raises
    ------
    NacFormatError
        Malformed file (the message starts with the path).
    """
    path = Path(path)
    try:
        nac = loads(path.read_bytes())
    except NacFormatError as exc:
        raise NacFormatError(str(exc), path=path) from None
    if not nac.internal_weights:
        external = _external_path(path)
        if external.is_file():
            nac = replace(nac, weights=Weights(external))
    return nac
