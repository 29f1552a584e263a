"""The NAC object model: frozen dataclasses for a whole file and what its sections hold."""

from __future__ import annotations

from dataclasses import dataclass, field

from nac.encoding import STANDARD_OPS, VERSION, ConstType, DType, MmapAction, QuantMethod

__all__ = ["Constant", "DataSection", "Instruction", "MmapRecord", "NacFile", "Orch",
           "QuantParams", "Tensor"]


@dataclass(frozen=True)
class Instruction:
    """One ABCD instruction (§3). ``c`` is the raw C field (prefix first) or None."""

    a: int
    b: int
    c: tuple[int, ...] | None = None
    d: tuple[int, ...] = ()

    @property
    def const_ids(self):
        """The ids in C after the prefix, as unsigned 16-bit values.

        C holds int16 values (§3.4) while CNST and DATA ids are uint16: an id of 32768 or
        more is stored as its int16 bit pattern (-32768 for 32768).
        """
        return tuple(v & 0xFFFF for v in self.c[1:]) if self.c else ()


@dataclass(frozen=True)
class MmapRecord:
    """Commands for one tick: ``commands`` are ``(MmapAction, target)`` pairs."""

    tick: int
    commands: tuple[tuple[MmapAction, int], ...]


@dataclass(frozen=True)
class Constant:
    """A typed constant (CNST, ORCH pool). ``value``: None, bool, int, float, str or tuple."""

    type: ConstType
    value: object = None


@dataclass(frozen=True)
class QuantParams:
    """Where the scales of a quantised tensor live (decision of this project, see docs).

    INT8_TENSOR: ``scales = (s,)``. INT8_CHANNEL: ``axis`` and one scale per index along it.
    BLOCK_FP8: ``block_size``, ``orig_shape`` and one scale per block of the flattened
    tensor.
    """

    scales: tuple[float, ...] = ()
    axis: int = 0
    block_size: int = 0
    orig_shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class Tensor:
    """A tensor as stored: dtype, shape, quant code and parameters, raw little-endian data."""

    dtype: DType
    shape: tuple[int, ...]
    quant: QuantMethod = QuantMethod.NONE
    quant_params: QuantParams | None = None
    data: bytes = b""


@dataclass(frozen=True)
class DataSection:
    """DATA: parameter names (block 1), input names (block 2), internal tensors (block 3)."""

    params: tuple[tuple[int, str], ...] = ()
    inputs: tuple[tuple[int, str], ...] = ()
    tensors: tuple[tuple[int, Tensor], ...] | None = None


@dataclass(frozen=True)
class Orch:
    """ORCH: MEP bytecode and its constant pool (empty in v1.6 files)."""

    bytecode: bytes = b""
    constants: tuple[tuple[int, Constant], ...] = ()


@dataclass(frozen=True)
class NacFile:
    """A whole ``.nac`` file. Absent sections are None."""

    quant_method: QuantMethod = QuantMethod.NONE
    internal_weights: bool = True
    num_inputs: int = 0
    num_outputs: int = 0
    d_model: int = 0
    version: int = VERSION
    mmap: tuple[MmapRecord, ...] | None = None
    ops: tuple[Instruction, ...] | None = None
    cmap: tuple[tuple[int, str], ...] | None = None
    cnst: tuple[tuple[int, Constant], ...] | None = None
    perm: tuple[tuple[int, str], ...] | None = None
    data: DataSection | None = None
    proc: bytes | None = None
    orch: Orch | None = None
    rsrc: tuple[tuple[str, bytes], ...] | None = None
    #: External weights (a :class:`nac.weights.Weights` mapping) attached by read_nac.
    weights: object = field(default=None, compare=False, repr=False)

    def op_name(self, a):
        """Canonical name of operation id *a* (standard or CMAP)."""
        if a in STANDARD_OPS:
            return STANDARD_OPS[a]
        return dict(self.cmap or ()).get(a)

