"""NAC v1.6 model files: container, graph IR, compiler passes, MMAP scheduler, float runtime.

The container API (``nac.container``, ``nac.weights``, ``nac.text``) is re-exported here.
"""

from nac.container import (
    Argument,
    Constant,
    DataSection,
    Instruction,
    MmapRecord,
    NacFile,
    Orch,
    QuantParams,
    Tensor,
    dumps,
    gather_arguments,
    loads,
)
from nac.errors import NacFormatError
from nac.weights import Weights, dequantize, read_nac, tensor_from_array, write_nac

__all__ = [
    "Argument",
    "Constant",
    "DataSection",
    "Instruction",
    "MmapRecord",
    "NacFile",
    "NacFormatError",
    "Orch",
    "QuantParams",
    "Tensor",
    "Weights",
    "dequantize",
    "dumps",
    "gather_arguments",
    "loads",
    "read_nac",
    "tensor_from_array",
    "write_nac",
]
