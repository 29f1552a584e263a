"""Evaluation of NEM integer expressions (``const`` right-hand sides, sizes, offsets, shapes).

Rules (Constant Declarations 2-5): values are integers; ``/`` truncates toward zero;
division by zero is an error. ``mod`` is the remainder that goes with truncating division
(``a == (a / b) * b + (a mod b)``, so ``-7 mod 2 == -1``); the spec does not say, and this is
the choice that keeps that identity. ``*``, ``/`` and ``mod`` bind tighter than ``+`` and
``-``; operators of equal precedence group to the left. FLOAT literals are accepted only
where a caller allows them (compute attribute values).
"""

from __future__ import annotations

from nem.diagnostics import Span
from nem.tree import BinOp, Name, Neg, Num

__all__ = ["LIMIT", "EvalError", "evaluate", "tdiv", "tmod"]

#: Integer values must stay below this in magnitude (64-bit signed, like every binder).
LIMIT = 1 << 63


class EvalError(Exception):
    """An expression cannot be evaluated: ``code`` is a diagnostic code, ``span`` the place."""

    def __init__(self, code: str, message: str, span: Span, name: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.span = span
        self.name = name


def tdiv(a: int, b: int) -> int:
    """Integer division truncating toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def tmod(a: int, b: int) -> int:
    """Remainder of :func:`tdiv` (sign of the dividend)."""
    return a - b * tdiv(a, b)


def evaluate(expr, env: dict[str, int], *, floats: bool = False) -> int | float:
    """Evaluate ``expr`` with names from ``env``.

    Raises
    ------
    EvalError
        ``E307`` for an unknown name (``name`` set), ``E202`` for a FLOAT literal when
        ``floats`` is false, ``E504`` for division or mod by zero.
    """
    if isinstance(expr, Num):
        if isinstance(expr.value, float) and not floats:
            raise EvalError(
                "E202",
                f"FLOAT literal {expr.text} where an integer is required "
                "(FLOAT literals are permitted only in compute attribute values)",
                expr.span,
            )
        if isinstance(expr.value, int) and expr.value >= LIMIT:
            raise EvalError("E506", f"literal {expr.text} is out of range (< 2^63)", expr.span)
        return expr.value
    if isinstance(expr, Name):
        if expr.id not in env:
            raise EvalError("E307", f"{expr.id!r} is not a declared constant", expr.span, expr.id)
        return env[expr.id]
    if isinstance(expr, Neg):
        return -evaluate(expr.operand, env, floats=floats)
    if isinstance(expr, BinOp):
        a = evaluate(expr.left, env, floats=floats)
        b = evaluate(expr.right, env, floats=floats)
        if expr.op in "+-*":
            value = a + b if expr.op == "+" else a - b if expr.op == "-" else a * b
            if isinstance(value, int) and abs(value) >= LIMIT:
                raise EvalError(
                    "E506",
                    f"value {'-' if value < 0 else ''}2^"
                    f"{abs(value).bit_length() - 1}+ is out of range "
                    "(|value| < 2^63)",
                    expr.span,
                )
            return value
        if b == 0:
            raise EvalError("E504", f"{'division' if expr.op == '/' else 'mod'} by zero", expr.span)
        if isinstance(a, float) or isinstance(b, float):
            return a / b if expr.op == "/" else a % b
        return tdiv(a, b) if expr.op == "/" else tmod(a, b)
    raise EvalError("E506", "not an integer expression", getattr(expr, "span", Span("?", 0, 0)))
