"""The NEM lexer: source text -> tokens with line and column.

Newlines are not tokens: the parser treats them as whitespace and ends a statement where
the next token cannot continue it (see ``docs/nem-toolkit.md``, "Layout rule"). Each token
records whether it is the first on its line, which error recovery uses to find the next
statement. Comments (``#`` to end of line) are returned separately for the formatter.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class Token:
    """One token. ``kind`` is ``ID``, ``INT``, ``FLOAT``, ``STRING``, a punctuator or ``EOF``."""

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


def _is_id_char(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch == "_")


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
    while i < n:
        ch = text[i]
        col = i - line_start + 1
        if ch == "\n":
            i += 1
            line, line_start = line + 1, i
            bol, gap, code_on_line = True, True, False
            continue
        if ch in " \t\r\f":
            i += 1
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
        if _is_id_start(ch):
            while i < n and _is_id_char(text[i]):
                i += 1
            kind = "ID"
        elif ch.isascii() and ch.isdigit():
            while i < n and text[i].isdigit():
                i += 1
            kind = "INT"
            # FLOAT: DIGIT+ "." DIGIT+ ([eE][+-]?DIGIT+)? -- but "0..3" is INT then "..".
            if i + 1 < n and text[i] == "." and text[i + 1].isdigit():
                i += 1
                while i < n and text[i].isdigit():
                    i += 1
                kind = "FLOAT"
                mantissa_end = i
                if i < n and text[i] in "eE":
                    j = i + 1
                    if j < n and text[j] in "+-":
                        j += 1
                    if j < n and text[j].isdigit():
                        while j < n and text[j].isdigit():
                            j += 1
                        i = j
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
                        i = j
                        while i < n and _is_id_char(text[i]):
                            i += 1
                        continue
            if i < n and _is_id_start(text[i]):
                # "3x" or "1e5" (an exponent needs a fraction part in NEM).
                while i < n and _is_id_char(text[i]):
                    i += 1
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
            for p in _PUNCT:
                if text.startswith(p, i):
                    i += len(p)
                    kind = p
                    break
            else:
                sink.add("E101", f"unexpected character {ch!r}", Span(file, line, col))
                i += 1
                gap = True
                continue
        tokens.append(Token(kind, text[start:i], line, col, bol, gap))
        bol, gap, code_on_line = False, False, True
    tokens.append(Token("EOF", "", line, i - line_start + 1, True, True))
    return tokens, comments
