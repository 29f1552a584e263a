"""Values and integer expressions (with the toolkit's depth and literal limits)."""

from __future__ import annotations

from nem.lexer import Token
from nem.parser.cursor import _MAX_DEPTH, MAX_EXPR_DEPTH, MAX_LITERAL_CHARS, Cursor, _Abort
from nem.tree import (
    BinOp,
    ListValue,
    Name,
    Neg,
    Num,
    Str,
)


class Expressions(Cursor):
    """Values, lists and the expression grammar."""

    # --- values and expressions ------------------------------------------------------------

    def value(self):
        tok = self.peek()
        if tok.kind == "STRING":
            self.advance()
            return Str(tok.text, self.span(tok))
        if tok.kind == "[":
            self.advance()
            items = []
            self.nest()
            if not self.at("]"):
                items.append(self.value())
                while self.at(","):
                    self.advance()
                    items.append(self.value())
            self.expect("]", "']'")
            self.depth -= 1
            return ListValue(tuple(items), self.span(tok))
        if self.at_kw("region") and self.at("(", 1):
            self.advance()
            return self.region_expr()
        return self.expr()

    def nest(self) -> None:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.fail(f"nesting deeper than {_MAX_DEPTH} levels")

    def grown(self, left_height: int, right_height: int, op: Token) -> int:
        """Height of a node over two subtrees; E204 past :data:`MAX_EXPR_DEPTH`."""
        height = max(left_height, right_height) + 1
        if height > MAX_EXPR_DEPTH:
            self.sink.add(
                "E204",
                f"expression nested deeper than {MAX_EXPR_DEPTH} levels (a chain of n "
                "operators is n levels deep); split it into consts",
                self.span(op),
            )
            raise _Abort()
        return height

    def expr(self):
        self.nest()
        left = self.term()
        height = self.height
        while self.at("+") or self.at("-"):
            op = self.advance()
            right = self.term()
            height = self.grown(height, self.height, op)
            left = BinOp(op.text, left, right, self.span(op))
        self.depth -= 1
        self.height = height
        return left

    def term(self):
        left = self.unary()
        height = self.height
        while self.at("*") or self.at("/") or self.at_kw("mod"):
            op = self.advance()
            right = self.unary()
            height = self.grown(height, self.height, op)
            left = BinOp(op.text, left, right, self.span(op))
        self.height = height
        return left

    def unary(self):
        if self.at("-"):
            tok = self.advance()
            self.nest()
            operand = self.unary()
            self.depth -= 1
            self.height = self.grown(self.height, 0, tok)
            return Neg(operand, self.span(tok))
        return self.primary()

    def primary(self):
        tok = self.peek()
        self.height = 0
        if tok.kind in ("INT", "FLOAT") and len(tok.text) > MAX_LITERAL_CHARS:
            self.sink.add(
                "E104",
                f"number literal of {len(tok.text)} characters (at most {MAX_LITERAL_CHARS}; "
                "no 64-bit value needs more)",
                self.span(tok),
            )
            raise _Abort()
        if tok.kind == "INT":
            self.advance()
            return Num(int(tok.text), tok.text, self.span(tok))
        if tok.kind == "FLOAT":
            self.advance()
            return Num(float(tok.text), tok.text, self.span(tok))
        if tok.kind == "ID" and tok.text != "mod":
            self.advance()
            return Name(tok.text, self.span(tok))
        if tok.kind == "(":
            self.advance()
            inner = self.expr()
            self.expect(")", "')'")
            return inner
        raise self.fail("expected a number, a name or '('")
