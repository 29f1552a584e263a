"""The compute opcodes of the task binary, with their registry category and unit, and the
opcode groups derived from them.

:data:`OPCODES` is the one list of opcode *codes*: an opcode's position is its number in
the task binary's ``OPCODE`` register. Append only: a code never changes meaning (the
golden task binaries in ``tests/golden/`` hold them). The registry's other compute opcodes
(conv1d, conv3d, depthwise_conv2d, compute) have no executable kernel and no code.

Everything else about an opcode is read from the shipped registry (``nem.registry``), never
typed here: :func:`table` pairs each code with the registry's ``category`` and
``execution_unit``, and :func:`groups` derives the sets the tools branch on (the NMU's
opcodes, elementwise, pooling, normalisation, layout, conversions, reductions). Loading the
registry takes a moment, so both are computed on first use and cached, never at import.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

__all__ = ["OPCODES", "Groups", "OpcodeInfo", "groups", "opcode_code", "table"]

#: Compute opcodes by code (the ``OPCODE`` register).
OPCODES: tuple[str, ...] = (
    "gemm", "matmul", "conv2d",
    "relu", "leaky_relu", "sigmoid", "tanh", "exp", "log", "sqrt", "abs", "neg", "gelu",
    "silu", "clamp",
    "add", "sub", "mul", "div", "min", "max", "pow",
    "maxpool", "avgpool", "layernorm", "rmsnorm", "softmax", "log_softmax",
    "transpose", "reshape", "slice", "concat", "split", "pad", "gather",
    "cast", "quantize", "dequantize",
    "reduce_sum", "reduce_max", "reduce_min", "argmax", "argmin",
)  # fmt: skip
if len(set(OPCODES)) != len(OPCODES):
    raise ValueError("opcode names repeat in OPCODES")
_CODES = {name: code for code, name in enumerate(OPCODES)}


@dataclass(frozen=True)
class OpcodeInfo:
    """One coded opcode: its code and what the registry says of it.

    Attributes
    ----------
    name : str
        The registry name.
    code : int
        Its ``OPCODE`` value in the task binary.
    category : str
        The registry's ``category`` (``elementwise_unary``, ``pooling``, ...).
    unit : str
        The registry's ``execution_unit`` (``NMU``, ``CSTL``).
    """

    name: str
    code: int
    category: str
    unit: str


@dataclass(frozen=True)
class Groups:
    """Opcode groups, each a frozenset of coded opcode names (from the registry's fields).

    Attributes
    ----------
    nmu : frozenset
        ``execution_unit`` NMU: the integer matrix engine's opcodes (gemm, matmul, conv2d).
    unary, binary, other_eltwise : frozenset
        ``category`` elementwise_unary, elementwise_binary, elementwise_other.
    eltwise : frozenset
        The three elementwise categories together.
    pooling, normalization, softmax, layout, conversion, reduction : frozenset
        ``category`` pooling, normalization, softmax, layout (the views: transpose,
        reshape, slice, concat, split, pad, gather), type_conversion and reduction.
    """

    nmu: frozenset[str]
    unary: frozenset[str]
    binary: frozenset[str]
    other_eltwise: frozenset[str]
    eltwise: frozenset[str]
    pooling: frozenset[str]
    normalization: frozenset[str]
    softmax: frozenset[str]
    layout: frozenset[str]
    conversion: frozenset[str]
    reduction: frozenset[str]


def opcode_code(name: str) -> int:
    """The task-binary code of opcode ``name``.

    Raises
    ------
    KeyError
        For an opcode without a code (the message names it).
    """
    try:
        return _CODES[name]
    except KeyError:
        raise KeyError(f"opcode {name!r} has no task-binary code") from None


@functools.cache
def table() -> tuple[OpcodeInfo, ...]:
    """Every coded opcode with the shipped registry's category and execution unit, by code.

    Raises
    ------
    ValueError
        When a coded opcode is missing from the registry or has no execution unit there.
    """
    from nem.registry import load_registry

    registry = load_registry()
    rows = []
    for code, name in enumerate(OPCODES):
        if name not in registry:
            raise ValueError(f"OPCODES[{code}] = {name!r} is not in the opcode registry")
        op = registry[name]
        if op.execution_unit is None:
            raise ValueError(f"opcode {name!r} has no execution_unit in the registry")
        rows.append(OpcodeInfo(name, code, op.category, op.execution_unit))
    return tuple(rows)


@functools.cache
def groups() -> Groups:
    """The opcode groups, derived from :func:`table`."""
    rows = table()

    def category(*names: str) -> frozenset[str]:
        return frozenset(r.name for r in rows if r.category in names)

    return Groups(
        nmu=frozenset(r.name for r in rows if r.unit == "NMU"),
        unary=category("elementwise_unary"),
        binary=category("elementwise_binary"),
        other_eltwise=category("elementwise_other"),
        eltwise=category("elementwise_unary", "elementwise_binary", "elementwise_other"),
        pooling=category("pooling"),
        normalization=category("normalization"),
        softmax=category("softmax"),
        layout=category("layout"),
        conversion=category("type_conversion"),
        reduction=category("reduction"),
    )
