"""Every number of the NAC v1.6 binary format, defined once (spec and ``nac-notes.md``).

The container reader/writer, the text form, the compiler and the hardware (decoder, MMAP
coprocessor) import these definitions; no code or tag is typed anywhere else.
"""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

from nem.records import Record

__all__ = [
    "CONSTANT_CODES",
    "HEADER_SIZE",
    "MAGIC",
    "MMAP_COMMAND",
    "MMAP_COUNT",
    "MMAP_RECORD",
    "REGULAR_OP_MIN",
    "SECTION_TAGS",
    "SIGNATURE_CODES",
    "STANDARD_OPS",
    "TENSOR_CODES",
    "VERSION",
    "ConstType",
    "DType",
    "MmapAction",
    "QuantMethod",
    "SystemOp",
]

MAGIC = b"NAC"
VERSION = 1
HEADER_SIZE = 88
#: Section tags in the order of the header's offset table (§2.2.5).
SECTION_TAGS = ("MMAP", "OPS ", "CMAP", "CNST", "PERM", "DATA", "PROC", "ORCH", "RSRC")
STORAGE_INTERNAL = 0x80  # header byte 4, bit 7: weights inside DATA block 3

#: Signature characters (§5.2.3).
TENSOR_CODES = frozenset("QKVMBWTP")
CONSTANT_CODES = frozenset("ASifbsc")
SIGNATURE_CODES = TENSOR_CODES | CONSTANT_CODES

REGULAR_OP_MIN = 10
#: v1.6 standard operation ids (nac-notes.md); custom ids are recorded in CMAP.
STANDARD_OPS = {
    10: "nac.pass", 11: "nac.add", 12: "nac.sub", 13: "nac.gt", 14: "nac.neg",
    15: "nac.where", 16: "nac.clone", 17: "nac.view", 18: "nac.le", 19: "nac.arange",
}
FIRST_CUSTOM_OP = 20


class SystemOp(enum.IntEnum):
    """System operations (A < 10, §7)."""

    INPUT = 2
    OUTPUT = 3
    CONTROL_FLOW = 6
    CONVERGENCE = 7


class MmapAction(enum.IntEnum):
    """MMAP command action codes (§4.5)."""

    SAVE_RESULT = 10
    FREE = 20
    FORWARD = 30
    PRELOAD = 40


#: The MMAP section body (§4.5) after its tag: a record count, then per record its head
#: and ``commands`` command records. The container, the MMAP model and the MMAP
#: coprocessor's byte parser all take their layout from these declarations.
MMAP_COUNT = Record("MMAP record count", [("count", "u32", "records that follow")])
MMAP_RECORD = Record("MMAP record", [
    ("tick", "u16", "instruction index at which the commands run"),
    ("commands", "u8", "command records that follow"),
])
MMAP_COMMAND = Record("MMAP command", [
    ("action", "u8", "MmapAction code"),
    ("target", "u16", "instruction index the action applies to"),
])


class QuantMethod(enum.IntEnum):
    """Quantisation method ids (header byte 4 bits 0-6, tensor metadata quant code)."""

    NONE = 0
    FP16 = 1
    INT8_TENSOR = 2
    INT8_CHANNEL = 3
    BLOCK_FP8 = 4


class ConstType(enum.IntEnum):
    """CNST type codes (§5.3.2)."""

    NULL = 0
    BOOL = 1
    INT64 = 2
    FLOAT64 = 3
    STRING = 4
    LIST_INT32 = 5
    LIST_FLOAT32 = 6


class DType(enum.IntEnum):
    """DATA tensor dtype codes (§6.1.1)."""

    FLOAT32 = 0
    FLOAT64 = 1
    FLOAT16 = 2
    BFLOAT16 = 3
    INT32 = 4
    INT64 = 5
    INT16 = 6
    INT8 = 7
    UINT8 = 8
    BOOL = 9

    @property
    def numpy(self):
        """The numpy dtype (bfloat16 from ``ml_dtypes``)."""
        return _NUMPY[self]

    @property
    def safetensors(self):
        """The dtype string in a safetensors header."""
        return _SAFETENSORS[self]

    @classmethod
    def from_numpy(cls, dtype):
        dtype = np.dtype(dtype)
        for code, np_dtype in _NUMPY.items():
            if np.dtype(np_dtype) == dtype:
                return code
        raise ValueError(f"numpy dtype {dtype} has no NAC DATA dtype code")


_NUMPY = {
    DType.FLOAT32: np.dtype(np.float32), DType.FLOAT64: np.dtype(np.float64),
    DType.FLOAT16: np.dtype(np.float16), DType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    DType.INT32: np.dtype(np.int32), DType.INT64: np.dtype(np.int64),
    DType.INT16: np.dtype(np.int16), DType.INT8: np.dtype(np.int8),
    DType.UINT8: np.dtype(np.uint8), DType.BOOL: np.dtype(np.bool_),
}
_SAFETENSORS = {
    DType.FLOAT32: "F32", DType.FLOAT64: "F64", DType.FLOAT16: "F16", DType.BFLOAT16: "BF16",
    DType.INT32: "I32", DType.INT64: "I64", DType.INT16: "I16", DType.INT8: "I8",
    DType.UINT8: "U8", DType.BOOL: "BOOL",
}
