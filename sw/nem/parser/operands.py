"""Operands of tasks: names, regions, type attributes, quantisation, decorators."""

from __future__ import annotations

from nem.elemtypes import ELEM_TYPES
from nem.parser.cursor import _TASK_DECOS, TYPE_KEYS
from nem.parser.expressions import Expressions
from nem.tree import (
    Decorator,
    ListValue,
    Operand,
    Quant,
    RegionExpr,
    TypeAttrs,
)


class Operands(Expressions):
    """Operand lists, region expressions, type attributes and decorators."""

    def id_list(self) -> tuple[str, ...]:
        ids = [self.ident("a token name").text]
        while self.at(","):
            self.advance()
            ids.append(self.ident("a token name").text)
        return tuple(ids)

    def operand_list(self) -> tuple[Operand, ...]:
        """A compute task's operands; task-only decorators end an operand (layout rule)."""
        ops = [self.operand(_TASK_DECOS)]
        while self.at(","):
            self.advance()
            ops.append(self.operand(_TASK_DECOS))
        return tuple(ops)

    def operand(self, stop: frozenset[str] = frozenset()) -> Operand:
        tok = self.peek()
        if self.at_kw("region") and self.at("(", 1):
            self.advance()
            ref = self.region_expr()
        else:
            ref = self.ident("a region name or region(...)").text
        return Operand(ref, self.decos(stop), self.span(tok))

    def region_expr(self) -> RegionExpr:
        """After ``region``: ``(buffer, offset, extent)`` and optional type attributes."""
        tok = self.toks[self.pos - 1]
        self.expect("(", "'('")
        buf = self.ident("a buffer name")
        self.expect(",", "','")
        offset = self.expr()
        self.expect(",", "','")
        extent = self.expr()
        self.expect(")", "')'")
        typ = None
        if self.peek().kind == "ID" and self.peek().text in TYPE_KEYS and self.at("=", 1):
            typ = self.type_attrs()
        return RegionExpr(buf.text, offset, extent, typ, self.span(tok))

    def type_attrs(self) -> TypeAttrs:
        start = self.peek()
        seen: dict[str, object] = {}
        while True:
            key = self.advance()
            self.advance()  # "="
            if key.text in seen:
                raise self.fail(f"type attribute '{key.text}' given twice", key)
            if key.text == "elem":
                elem = self.ident("an element type")
                if elem.text not in ELEM_TYPES:
                    self.sink.add(
                        "E610",
                        f"unknown element type {elem.text!r} (known: {', '.join(ELEM_TYPES)})",
                        self.span(elem),
                    )
                seen["elem"] = elem.text
            elif key.text in ("shape", "strides"):
                self.expect("[", "'['")
                dims = [self.expr()]
                while self.at(","):
                    self.advance()
                    dims.append(self.expr())
                self.expect("]", "']'")
                seen[key.text] = tuple(dims)
            elif key.text == "layout":
                seen["layout"] = self.ident("a layout name").text
            else:
                seen["quant"] = self.quant()
            if (
                self.at(",")
                and self.peek(1).kind == "ID"
                and self.peek(1).text in TYPE_KEYS
                and self.at("=", 2)
            ):
                self.advance()
                continue
            break
        span = self.span(start)
        if "elem" not in seen or "shape" not in seen:
            missing = " and ".join(k for k in ("elem", "shape") if k not in seen)
            self.sink.add("E605", f"region type attributes need {missing}", span)
        if "layout" in seen and "strides" in seen:
            self.sink.add("E605", "give either layout= or strides=, not both", span)
        elif "layout" not in seen and "strides" not in seen:
            self.sink.add("E605", "region type attributes need layout= or strides=", span)
        return TypeAttrs(
            seen.get("elem", "?"),
            seen.get("shape", ()),
            seen.get("layout"),
            seen.get("strides"),
            seen.get("quant"),
            span,
        )

    def quant(self) -> Quant:
        kind = self.ident("per_tensor, per_channel or per_group")
        if kind.text not in ("per_tensor", "per_channel", "per_group"):
            raise self.fail("expected per_tensor, per_channel or per_group", kind)
        keys = {
            "per_tensor": ("scale", "zero_point"),
            "per_channel": ("axis", "scales", "zero_points"),
            "per_group": ("axis", "group_size", "scales", "zero_points"),
        }[kind.text]
        self.expect("(", "'('")
        fields: dict[str, object] = {}
        for i, key in enumerate(keys):
            if i:
                self.expect(",", "','")
            name = self.ident(f"'{key}'")
            if name.text != key:
                raise self.fail(f"expected '{key}' ({kind.text} takes {', '.join(keys)})", name)
            self.expect("=", "'='")
            if key in ("scales", "zero_points"):
                value = self.value()
                if not isinstance(value, ListValue):
                    raise self.fail(f"'{key}' must be a list [...]")
                fields[key] = value.items
            elif key in ("axis", "group_size"):
                fields[key] = self.expr()
            else:
                fields[key] = self.value()
        self.expect(")", "')'")
        return Quant(
            kind.text,
            fields.get("scale"),
            fields.get("zero_point"),
            fields.get("axis"),
            fields.get("group_size"),
            fields.get("scales", ()),
            fields.get("zero_points", ()),
            self.span(kind),
        )

    def decos(self, stop: frozenset[str] = frozenset()) -> tuple[Decorator, ...]:
        """Decorators here; stops before one whose name is in ``stop``."""
        out = []
        while self.at("@") and not (self.at("ID", 1) and self.peek(1).text in stop):
            out.append(self.decorator())
        return tuple(out)

    def decorator(self) -> Decorator:
        at = self.advance()
        name = self.ident("a decorator name")
        if name.gap:
            raise self.fail("no space allowed between '@' and the decorator name", name)
        if not self.at("("):
            return Decorator(name.text, span=self.span(at))
        self.advance()
        if self.at("ID") and self.at("[", 1):
            unit = self.advance().text
            self.advance()
            index = self.expr()
            self.expect("]", "']'")
            self.expect(")", "')'")
            return Decorator(name.text, (), unit, index, self.span(at))
        args = [] if self.at(")") else [self.value()]
        while self.at(","):
            self.advance()
            args.append(self.value())
        self.expect(")", "')'")
        return Decorator(name.text, tuple(args), span=self.span(at))
