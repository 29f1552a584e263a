"""IR v2 ``condition`` strings: tokeniser and evaluator (``name``, comparisons, ``!``,
``&&`` / ``||``, parentheses)."""

from __future__ import annotations

import re

from nac.ckernel.fields import CKernelError, _real, _short

# ---------------------------------------------------------------------------------------
# Conditions

_COND_TOKEN = re.compile(r"\s*(?:(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
                         r"|(?P<name>[A-Za-z_][A-Za-z0-9_.]*)"
                         r"|(?P<op>>=|<=|==|!=|&&|\|\||[<>!()]))")
_COMPARE = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def _tokenise_condition(text, where):
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _COND_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            col = len(text) - len(text[pos:].lstrip()) + 1
            raise CKernelError(f"{where}: condition {text!r}: unexpected character at "
                               f"column {col}")
        kind = m.lastgroup
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


def _condition(text, env, where):
    """Evaluate a condition string against *env* (a name -> number function)."""
    if text is None:
        return True
    if not isinstance(text, str):
        raise CKernelError(f"{where}: field 'condition' must be a string or null, not "
                           f"{_short(text)}")
    tokens = _tokenise_condition(text, where)
    if not tokens:
        return True
    pos = 0

    def fail(message):
        raise CKernelError(f"{where}: condition {text!r}: {message}")

    def peek():
        return tokens[pos] if pos < len(tokens) else (None, None)

    def take():
        nonlocal pos
        if pos >= len(tokens):
            fail("unexpected end")
        pos += 1
        return tokens[pos - 1]

    def value():
        kind, tok = take()
        if kind == "num":
            return _real(tok)
        if kind == "name":
            return env(tok)
        fail(f"expected a name or a number, found {tok!r}")

    def atom():
        tok = peek()[1]
        if tok == "!":
            take()
            return not atom()
        if tok == "(":
            take()
            result = disjunction()
            if take()[1] != ")":
                fail("expected ')'")
            return result
        left = value()
        tok = peek()[1]
        if tok in _COMPARE:
            take()
            return bool(_COMPARE[tok](left, value()))
        return bool(left)

    def conjunction():
        result = atom()
        while peek()[1] == "&&":
            take()
            right = atom()
            result = result and right
        return result

    def disjunction():
        result = conjunction()
        while peek()[1] == "||":
            take()
            right = conjunction()
            result = result or right
        return result

    result = disjunction()
    if pos != len(tokens):
        fail(f"unexpected {tokens[pos][1]!r}")
    return result
