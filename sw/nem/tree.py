"""The NEM syntax tree: small frozen dataclasses with source spans.

Spans are excluded from equality (``compare=False``) so that ``parse(format(p)) == p``
compares meaning, not layout. Parentheses are not kept: the tree of an expression is its
meaning, and the formatter puts back exactly the parentheses precedence needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nem.diagnostics import Span

__all__ = [
    "BinOp",
    "Buffer",
    "Comment",
    "Compute",
    "Const",
    "Decorator",
    "DeviceConfig",
    "DeviceRef",
    "Document",
    "Expr",
    "FamilyAttr",
    "Include",
    "ListValue",
    "Loop",
    "Name",
    "Neg",
    "Num",
    "Operand",
    "Quant",
    "RegionDecl",
    "RegionExpr",
    "Stmt",
    "Str",
    "Topology",
    "Transfer",
    "TypeAttrs",
    "TypeFamily",
    "Value",
    "Variant",
    "VariantRef",
    "Wait",
]

NOSPAN = Span("<none>", 0, 0)


# --- expressions and values ----------------------------------------------------------------


@dataclass(frozen=True)
class Num:
    """An INT or FLOAT literal; ``text`` keeps the spelling (``1.0e-5``)."""

    value: int | float
    text: str
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class Name:
    """An identifier used as a value (a const, a loop variable, ``i32``, ``constant``...)."""

    id: str
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class BinOp:
    """``left op right`` with op one of ``+ - * / mod``."""

    op: str
    left: Expr
    right: Expr
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class Neg:
    """Unary minus (an extension: the grammar has none, quant zero points need it)."""

    operand: Expr
    span: Span = field(default=NOSPAN, compare=False, repr=False)


Expr = Num | Name | BinOp | Neg


@dataclass(frozen=True)
class Str:
    """A STRING literal (without its quotes)."""

    value: str
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class ListValue:
    """``[v0, v1, ...]``."""

    items: tuple[Value, ...]
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class Quant:
    """A quantization descriptor: ``per_tensor``, ``per_channel`` or ``per_group``."""

    kind: str
    scale: Value | None = None
    zero_point: Value | None = None
    axis: Expr | None = None
    group_size: Expr | None = None
    scales: tuple[Value, ...] = ()
    zero_points: tuple[Value, ...] = ()
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class TypeAttrs:
    """``elem=E, shape=[...], layout=ID | strides=[...], quant=...``."""

    elem: str
    shape: tuple[Expr, ...]
    layout: str | None = None
    strides: tuple[Expr, ...] | None = None
    quant: Quant | None = None
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class Decorator:
    """``@name``, ``@name(args)`` or ``@resource(UNIT[index])``."""

    name: str
    args: tuple[Value, ...] = ()
    unit: str | None = None
    index: Expr | None = None
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class RegionExpr:
    """``region(buffer, offset, extent)`` with optional type attributes."""

    buffer: str
    offset: Expr
    extent: Expr
    type: TypeAttrs | None = None
    span: Span = field(default=NOSPAN, compare=False, repr=False)


Value = Num | Name | BinOp | Neg | Str | ListValue | RegionExpr


@dataclass(frozen=True)
class Operand:
    """A task operand: a region name or an inline region, with decorators."""

    ref: str | RegionExpr
    decos: tuple[Decorator, ...] = ()
    span: Span = field(default=NOSPAN, compare=False, repr=False)


# --- program statements --------------------------------------------------------------------


@dataclass(frozen=True)
class Comment:
    """A comment kept for the formatter (not part of equality: see :class:`Document`)."""

    text: str
    line: int
    trailing: bool


@dataclass(frozen=True)
class Const:
    """``const NAME = expr``."""

    name: str
    expr: Expr
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class Buffer:
    """``buffer NAME : LEVEL (size=..., align=...)``; ``engine`` is the L1 index expression."""

    name: str
    level: str
    engine: Expr | None
    size: Expr | None
    align: Expr | None
    decos: tuple[Decorator, ...] = ()
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class RegionDecl:
    """``[let] NAME = region(...) type_attrs? decos?`` (also ``let NAME = value``)."""

    name: str
    value: Value
    let: bool
    decos: tuple[Decorator, ...] = ()
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class Transfer:
    """``[tok =] transfer.async|sync(dst=..., src=..., deps=[...])`` and ``store`` alike."""

    token: str | None
    op: str
    form: str
    dst: Operand
    src: Operand
    deps: tuple[str, ...] | None = None
    decos: tuple[Decorator, ...] = ()
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class Wait:
    """``wait(t0, t1, ...)``."""

    tokens: tuple[str, ...]
    token: str | None = None
    decos: tuple[Decorator, ...] = ()
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class Compute:
    """``[tok =] OPCODE.async|sync in ... out ... deps=[...] name=value ...``."""

    token: str | None
    opcode: str
    form: str
    ins: tuple[Operand, ...]
    outs: tuple[Operand, ...]
    attrs: tuple[tuple[str, Value], ...] = ()
    deps: tuple[str, ...] | None = None
    decos: tuple[Decorator, ...] = ()
    span: Span = field(default=NOSPAN, compare=False, repr=False)
    attr_spans: tuple[Span, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class Loop:
    """``loop VAR in [start..end] decos: body endloop`` (``end`` inclusive)."""

    var: str
    start: Expr
    end: Expr
    body: tuple[Stmt, ...]
    decos: tuple[Decorator, ...] = ()
    span: Span = field(default=NOSPAN, compare=False, repr=False)


Stmt = Const | Buffer | RegionDecl | Transfer | Wait | Compute | Loop


# --- devices and type families --------------------------------------------------------------


@dataclass(frozen=True)
class VariantRef:
    """``family<T,...>.variant``; ``inst`` is ``()`` for non-parameterised families."""

    family: str
    inst: tuple[str, ...]
    variant: str
    span: Span = field(default=NOSPAN, compare=False, repr=False)

    def __str__(self) -> str:
        inst = f"<{', '.join(self.inst)}>" if self.inst else ""
        return f"{self.family}{inst}.{self.variant}"


@dataclass(frozen=True)
class Topology:
    """A ``topology`` block; fields the file leaves out are ``None``."""

    num_engines: Expr | None
    l2_size_bytes: Expr | None
    device_units: tuple[tuple[str, Expr], ...] | None
    per_engine: tuple[tuple[str, Expr], ...]
    l1_size_bytes: Expr | None
    span: Span = field(default=NOSPAN, compare=False, repr=False)
    unit_spans: tuple[Span, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class DeviceConfig:
    """``device NAME [extends PARENT] { ... }``."""

    name: str
    extends: str | None
    spec_version: str | None
    topology: Topology | None
    unit_characteristics: tuple[tuple[str, tuple[tuple[str, Expr], ...]], ...] | None
    mandatory: tuple[VariantRef, ...] | None
    extended: tuple[VariantRef, ...] | None
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class DeviceRef:
    """A program's ``device "file"`` or ``device NAME`` directive."""

    target: str
    is_path: bool
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class FamilyAttr:
    """``accum = f32``, ``quant = required`` or the baseline's ``quant = required on dst``."""

    name: str
    value: str
    on: str | None = None


@dataclass(frozen=True)
class Variant:
    """A named variant: its operand bindings and its conformance entries."""

    name: str
    operands: tuple[tuple[str, str], ...]
    conformance: tuple[tuple[str, tuple[str, ...]], ...]
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class TypeFamily:
    """``type_family id<params> { bindings; attrs; variants: ... }``."""

    name: str
    params: tuple[tuple[str, tuple[str, ...]], ...]
    operands: tuple[tuple[str, str], ...]
    attrs: tuple[FamilyAttr, ...]
    variants: tuple[Variant, ...]
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class Include:
    """``include "path"``."""

    path: str
    span: Span = field(default=NOSPAN, compare=False, repr=False)


@dataclass(frozen=True)
class Document:
    """One parsed file: includes, then a program or a config document.

    A program has ``device`` (a :class:`DeviceRef`, an inline :class:`DeviceConfig` or
    ``None``), an optional ``name`` and a ``body``; a config document has ``families`` and
    ``devices`` and an empty body. ``comments`` are for the formatter only.
    """

    includes: tuple[Include, ...] = ()
    device: DeviceRef | DeviceConfig | None = None
    name: str | None = None
    body: tuple[Stmt, ...] = ()
    families: tuple[TypeFamily, ...] = ()
    devices: tuple[DeviceConfig, ...] = ()
    is_program: bool = True
    file: str = field(default="<string>", compare=False)
    comments: tuple[Comment, ...] = field(default=(), compare=False, repr=False)
    blank_lines: tuple[int, ...] = field(default=(), compare=False, repr=False)
