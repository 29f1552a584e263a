"""The NEM lexer: source text -> tokens with line and column.

Newlines are not tokens: the parser treats them as whitespace and ends a statement where
the next token cannot continue it (see ``docs/nem-toolkit.md``, "Layout rule"). Each token
records whether it is the first on its line, which error recovery uses to find the next
statement. Comments (``#`` to end of line) are returned separately for the formatter.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from nem.diagnostics import DiagnosticSink, Span
from nem.tree import Comment

__all__ = ["Token", "tokenize"]

# Longest first: ".." must win over ".".
_PUNCT = (
    "..",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "<",
    ">",
    ",",
    ":",
    "=",
    "@",
    "+",
    "-",
    "*",
    "/",
    ";",
    ".",
)
_ID_TAIL_RE = re.compile(r"[A-Za-z0-9_]*")
_DIGITS_RE = re.compile(r"[0-9]*")
_SPACE_RE = re.compile(r"[ \t\r\f]+")
# The common case in one C-level match: optional blanks, then an identifier, a punctuator
# or an integer that nothing could extend (a number followed by "." or a letter takes the
# careful path below).
_FAST_RE = re.compile(
    r"([ \t\r\f]*)(?:([A-Za-z_][A-Za-z0-9_]*)|("
    + "|".join(re.escape(p) for p in _PUNCT)
    + r")|([0-9]+)(?![0-9.A-Za-z_]))"
)
_FAST_KIND = {2: "ID", 4: "INT"}


class Token(NamedTuple):
    """One token. ``kind`` is ``ID``, ``INT``, ``FLOAT``, ``STRING``, a punctuator or ``EOF``.

    A named tuple: a large file has hundreds of thousands of tokens, and building tuples is
    several times cheaper than building frozen dataclasses.
    """

    kind: str
    text: str
    line: int
    col: int
    bol: bool  # first token on its line
    gap: bool  # whitespace (or a comment) precedes it
    bad: bool = False  # malformed (already reported): a STRING not closed

    def span(self, file: str) -> Span:
        """The token's position in ``file``."""
        return Span(file, self.line, self.col)


def _is_id_start(ch: str) -> bool:
    return ch.isascii() and (ch.isalpha() or ch == "_")


def tokenize(text: str, file: str, sink: DiagnosticSink) -> tuple[list[Token], list[Comment]]:
    """Split ``text`` into tokens (ending with ``EOF``) and comments.

    Lexical errors are reported to ``sink`` and the offending characters skipped, so that one
    run reports as much as possible.
    """
    tokens: list[Token] = []
    comments: list[Comment] = []
    i, n = 0, len(text)
    line, line_start = 1, 0
    bol, gap = True, True
    code_on_line = False
    fast = _FAST_RE.match
    while i < n:
        m = fast(text, i)
        if m is not None:
            at = m.end(1)
            if at != i:
                gap = True
            group = m.lastindex
            word = m.group(group)
            kind = _FAST_KIND.get(group, word)
            tokens.append(Token(kind, word, line, at - line_start + 1, bol, gap))
            bol, gap, code_on_line = False, False, True
            i = m.end()
            continue
        ch = text[i]
        col = i - line_start + 1
        if ch == "\n":
            i += 1
            line, line_start = line + 1, i
            bol, gap, code_on_line = True, True, False
            continue
        if ch in " \t\r\f":
            i = _SPACE_RE.match(text, i).end()
            gap = True
            continue
        if ch == "#":
            end = text.find("\n", i)
            end = n if end < 0 else end
            comments.append(Comment(text[i + 1 : end].rstrip(), line, code_on_line))
            i = end
            gap = True
            continue
        start = i
        # Identifiers and punctuators always take the fast path above; what is left is
        # numbers the fast path would not take, strings, and characters outside NEM.
        if "0" <= ch <= "9":
            i = _DIGITS_RE.match(text, i).end()
            kind = "INT"
            # FLOAT: DIGIT+ "." DIGIT+ ([eE][+-]?DIGIT+)? -- but "0..3" is INT then "..".
            if i + 1 < n and text[i] == "." and "0" <= text[i + 1] <= "9":
                i = _DIGITS_RE.match(text, i + 1).end()
                kind = "FLOAT"
                mantissa_end = i
                if i < n and text[i] in "eE":
                    j = i + 1
                    if j < n and text[j] in "+-":
                        j += 1
                    if j < n and "0" <= text[j] <= "9":
                        i = _DIGITS_RE.match(text, j).end()
                    else:
                        sink.add(
                            "E103",
                            f"malformed exponent in number {text[start:j]!r}",
                            Span(file, line, col),
                        )
                        # Keep the mantissa as the number so that the parser does not
                        # cascade (and float() never sees "1.5e+").
                        tokens.append(
                            Token("FLOAT", text[start:mantissa_end], line, col, bol, gap)
                        )
                        bol, gap, code_on_line = False, False, True
                        i = _ID_TAIL_RE.match(text, j).end()
                        continue
            if i < n and _is_id_start(text[i]):
                # "3x" or "1e5" (an exponent needs a fraction part in NEM).
                i = _ID_TAIL_RE.match(text, i).end()
                sink.add("E103", f"malformed number {text[start:i]!r}", Span(file, line, col))
                # Keep the digits as a number so that the parser does not cascade.
                digits = "".join(c for c in text[start:i] if c.isdigit()) or "0"
                tokens.append(Token("INT", digits[:18], line, col, bol, gap))
                bol, gap, code_on_line = False, False, True
                continue
        elif ch == '"':
            i += 1
            out = []
            while i < n and text[i] not in '"\n':
                if text[i] == "\\" and i + 1 < n and text[i + 1] in '"\\':
                    i += 1
                out.append(text[i])
                i += 1
            if i >= n or text[i] != '"':
                sink.add(
                    "E102", "string not closed before the end of the line", Span(file, line, col)
                )
                tokens.append(Token("STRING", "".join(out), line, col, bol, gap, bad=True))
                bol, gap, code_on_line = False, False, True
                continue
            i += 1
            tokens.append(Token("STRING", "".join(out), line, col, bol, gap))
            bol, gap, code_on_line = False, False, True
            continue
        else:
            sink.add("E101", f"unexpected character {ch!r}", Span(file, line, col))
            i += 1
            gap = True
            continue
        tokens.append(Token(kind, text[start:i], line, col, bol, gap))
        bol, gap, code_on_line = False, False, True
    tokens.append(Token("EOF", "", line, i - line_start + 1, True, True))
    return tokens, comments
