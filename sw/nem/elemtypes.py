"""The NEM element types, in one table: code, bits, signedness, kind and numpy dtype.

Every other list of element types derives from :data:`TABLE`: the task binary's codes
(``nem.taskformat.ELEM_TYPES``, the ``OPk_ELEM`` register and ``elem_type`` attributes), the
bit widths the checker sizes regions with (``nem.md``, "Element Bitwidth"), the numpy
dtypes the executor's memory views and the numerics use, the integer value ranges the
quantiser saturates to, and the float / integer split of the kernels.

``code`` is the element type's number in the task binary: append only, a code never changes
meaning (the golden task binaries in ``tests/golden/`` hold them).

The numpy dtypes are resolved on first use (:attr:`ElemType.dtype`, :func:`dtypes`), so the
language toolkit (parser, checker) does not import numpy.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

__all__ = [
    "BITS",
    "ELEM_RANGES",
    "ELEM_TYPES",
    "FLOAT_TYPES",
    "INT_TYPES",
    "TABLE",
    "ElemType",
    "by_code",
    "dtypes",
    "elem_type",
]


@dataclass(frozen=True)
class ElemType:
    """One element type.

    Attributes
    ----------
    name : str
        The NEM spelling (``i8``, ``bf16``).
    code : int
        Its code in the task binary.
    bits : int
        ``bitwidth(E)`` of ``nem.md``.
    signed : bool
        Two's complement (integers) or a sign bit (floats); False for ``u8``/``u16``/``u32``.
    is_float : bool
        A floating-point type (``f16``, ``bf16``, ``f32``).
    numpy : str
        The numpy dtype of one element, as ``numpy.dtype`` spells it, little-endian
        (``bfloat16`` is ml_dtypes'); ``i4`` is held unpacked, one element per ``int8``.
    """

    name: str
    code: int
    bits: int
    signed: bool
    is_float: bool
    numpy: str

    @functools.cached_property
    def dtype(self):
        """The ``numpy.dtype`` of one element (see :attr:`numpy`)."""
        import numpy as np

        if self.numpy == "bfloat16":
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.numpy)

    @property
    def is_int(self) -> bool:
        """An integer type."""
        return not self.is_float

    @property
    def range(self) -> tuple[int, int]:
        """``(lo, hi)``: the smallest and largest value of an integer type."""
        if self.is_float:
            raise ValueError(f"{self.name} is a float type: it has no integer range")
        if self.signed:
            return -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        return 0, (1 << self.bits) - 1


def _table(rows) -> tuple[ElemType, ...]:
    table = tuple(ElemType(name, code, *rest) for code, (name, *rest) in enumerate(rows))
    if len({t.name for t in table}) != len(table):
        raise ValueError("element type names repeat")
    return table


#: Every element type, in code order (the row's position is its code).
TABLE: tuple[ElemType, ...] = _table([
    # name  bits signed float  numpy
    ("i4", 4, True, False, "i1"),
    ("i8", 8, True, False, "i1"),
    ("u8", 8, False, False, "u1"),
    ("i16", 16, True, False, "<i2"),
    ("u16", 16, False, False, "<u2"),
    ("i32", 32, True, False, "<i4"),
    ("u32", 32, False, False, "<u4"),
    ("f16", 16, True, True, "<f2"),
    ("bf16", 16, True, True, "bfloat16"),
    ("f32", 32, True, True, "<f4"),
])  # fmt: skip

_BY_NAME = {t.name: t for t in TABLE}

#: Element type names by code.
ELEM_TYPES: tuple[str, ...] = tuple(t.name for t in TABLE)
#: Name -> ``bitwidth(E)``.
BITS: dict[str, int] = {t.name: t.bits for t in TABLE}
#: The floating-point types.
FLOAT_TYPES: tuple[str, ...] = tuple(t.name for t in TABLE if t.is_float)
#: The integer types.
INT_TYPES: tuple[str, ...] = tuple(t.name for t in TABLE if t.is_int)
#: Integer name -> ``(lo, hi)``, its value range.
ELEM_RANGES: dict[str, tuple[int, int]] = {t.name: t.range for t in TABLE if t.is_int}


def elem_type(name: str) -> ElemType:
    """The element type called ``name``.

    Raises
    ------
    KeyError
        For a name that is no element type (the message lists the known ones).
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown element type {name!r} (known: {', '.join(ELEM_TYPES)})") from None


@functools.cache
def dtypes() -> dict:
    """Name -> ``numpy.dtype`` of one element (``i4`` unpacked to ``int8``)."""
    return {t.name: t.dtype for t in TABLE}


def by_code(code: int) -> ElemType:
    """The element type with task-binary code ``code``.

    Raises
    ------
    ValueError
        For a code no element type has.
    """
    if not 0 <= code < len(TABLE):
        raise ValueError(f"element type code {code} unknown (0..{len(TABLE) - 1})")
    return TABLE[code]
