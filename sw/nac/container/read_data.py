"""Reader of the DATA section: parameter and input names, internal tensors."""

from __future__ import annotations

import math
import struct

from nac.container.cursor import _Cursor
from nac.container.model import DataSection, QuantParams, Tensor
from nac.container.read_tables import _read_id_names
from nac.encoding import DType, QuantMethod


def _read_quant(cur, quant, k):
    f = f"tensor[{k}].quant"
    if quant in (QuantMethod.NONE, QuantMethod.FP16):
        return None
    if quant == QuantMethod.INT8_TENSOR:
        return QuantParams(scales=(cur.unpack("f", f + ".scale"),))
    if quant == QuantMethod.INT8_CHANNEL:
        axis = cur.unpack("B", f + ".axis")
        n = cur.unpack("I", f + ".count")
        raw = cur.take(4 * n, f + ".scales")
        return QuantParams(scales=struct.unpack(f"<{n}f", raw), axis=axis)
    block = cur.unpack("H", f + ".block_size")
    rank = cur.unpack("B", f + ".orig_rank")
    dims = struct.unpack(f"<{rank}I", cur.take(4 * rank, f + ".orig_shape"))
    n = cur.unpack("I", f + ".count")
    raw = cur.take(4 * n, f + ".scales")
    return QuantParams(scales=struct.unpack(f"<{n}f", raw), block_size=block,
                       orig_shape=dims)


def _read_tensor(cur, k):
    at = cur.pos
    param_id, meta_len, data_len = cur.unpack("HIQ", f"tensor[{k}] header")
    meta_end = cur.pos + meta_len
    if meta_end > cur.end:
        cur.fail("metadata length exceeds the section", field=f"tensor[{k}].metadata_length",
                 value=meta_len, offset=at + 2)
    meta = _Cursor(cur.buf, cur.pos, meta_end, cur.section)
    dcode = meta.unpack("B", f"tensor[{k}].dtype")
    if dcode not in DType._value2member_map_:
        meta.fail(f"unknown dtype code {dcode}", field=f"tensor[{k}].dtype", value=dcode,
                  offset=meta.pos - 1)
    rank = meta.unpack("B", f"tensor[{k}].rank")
    shape = struct.unpack(f"<{rank}I", meta.take(4 * rank, f"tensor[{k}].shape"))
    qcode = meta.unpack("B", f"tensor[{k}].quant")
    if qcode not in QuantMethod._value2member_map_:
        meta.fail(f"unknown quantisation code {qcode}", field=f"tensor[{k}].quant",
                  value=qcode, offset=meta.pos - 1)
    qparams = _read_quant(meta, QuantMethod(qcode), k)
    meta.done()
    cur.pos = meta_end
    dtype = DType(dcode)
    expected = math.prod(shape) * dtype.numpy.itemsize
    if data_len != expected:
        cur.fail(f"data length {data_len} does not match dtype {dtype.name.lower()} and shape "
                 f"{list(shape)} ({expected} bytes)", field=f"tensor[{k}].data_length",
                 value=data_len, offset=at + 6)
    data = bytes(cur.take(data_len, f"tensor[{k}].data"))
    return param_id, Tensor(dtype, shape, QuantMethod(qcode), qparams, data)


def read_data(cur, internal_weights):
    """The DATA section; tensors (block 3) only when the weights are internal."""
    params = _read_id_names(cur, "params", "H", "H", "parameter id")
    inputs = _read_id_names(cur, "inputs", "H", "H", "input index")
    tensors = None
    if internal_weights:
        n = cur.count("tensor count", 14)
        tensors = tuple(_read_tensor(cur, k) for k in range(n))
        names = dict(params)
        for k, (pid, _) in enumerate(tensors):
            if pid not in names:
                cur.fail(f"tensor {k}: parameter id {pid} has no name in block 1",
                         field=f"tensor[{k}].param_id", value=pid)
    cur.done()
    return DataSection(params, inputs, tensors)
