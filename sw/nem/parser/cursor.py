"""The parser's token cursor: look-ahead, expectations, error reporting and recovery
(:class:`Cursor`), and the grammar constants the other parts share."""

from __future__ import annotations

from nem.diagnostics import DiagnosticSink, Span
from nem.lexer import Token

TYPE_KEYS = ("elem", "shape", "layout", "strides", "quant")
_STMT_KEYWORDS = frozenset(
    {
        "const",
        "buffer",
        "let",
        "loop",
        "endloop",
        "wait",
        "include",
        "device",
        "program",
        "type_family",
        "transfer",
        "store",
    }
)
_MAX_DEPTH = 100
#: Toolkit limits (docs/nem-toolkit.md, "Limits"): the height of an expression tree (a chain
#: ``1 + 1 + ...`` is as deep as it has operators; every tree walker recurses on it) and the
#: characters of a number literal (no 64-bit value needs more than 20 digits).
MAX_EXPR_DEPTH = 256
MAX_LITERAL_CHARS = 100
# Decorators that apply to tasks and never to regions: after a compute task's last operand
# they belong to the task ("relu.async in X out Y @resource(CSTL[0])"), not to Y.
_TASK_DECOS = frozenset({"resource", "seq_engine", "memmove", "deterministic", "max_in_flight"})


class _Abort(Exception):
    """Unwinds to the nearest recovery point after an error was reported."""


class Cursor:
    """Tokens, a position in them, and the sink errors go to."""

    def __init__(self, tokens: list[Token], file: str, sink: DiagnosticSink):
        self.toks = tokens
        self.pos = 0
        self.file = file
        self.sink = sink
        self.depth = 0
        self.height = 0  # height of the expression tree returned last by expr() and below

    # --- token helpers ---------------------------------------------------------------------

    def peek(self, k: int = 0) -> Token:
        j = self.pos + k
        toks = self.toks
        return toks[j] if j < len(toks) else toks[-1]

    def span(self, tok: Token | None = None) -> Span:
        return (tok or self.peek()).span(self.file)

    def advance(self) -> Token:
        tok = self.peek()
        if tok.kind != "EOF":
            self.pos += 1
        return tok

    def at(self, kind: str, k: int = 0) -> bool:
        return self.peek(k).kind == kind

    def at_kw(self, word: str, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok.kind == "ID" and tok.text == word

    def fail(self, message: str, tok: Token | None = None) -> _Abort:
        tok = tok or self.peek()
        found = "end of file" if tok.kind == "EOF" else repr(tok.text)
        self.sink.add("E201", f"{message}, found {found}", self.span(tok))
        return _Abort()

    def expect(self, kind: str, what: str | None = None) -> Token:
        if self.peek().kind != kind:
            raise self.fail(f"expected {what or repr(kind)}")
        return self.advance()

    def expect_kw(self, word: str) -> Token:
        if not self.at_kw(word):
            raise self.fail(f"expected '{word}'")
        return self.advance()

    def ident(self, what: str = "a name") -> Token:
        return self.expect("ID", what)

    def recover(self) -> None:
        """Skip to the next token that begins a line and can begin a statement."""
        self.advance()
        while not self.at("EOF"):
            tok = self.peek()
            if tok.bol and self.starts_statement():
                return
            self.advance()

    def starts_statement(self, k: int = 0) -> bool:
        tok = self.peek(k)
        if tok.kind == ";":
            return True
        if tok.kind != "ID":
            return False
        if tok.text in _STMT_KEYWORDS:
            return True
        return self.at("=", k + 1) or self.is_call(k)

    def is_call(self, k: int) -> bool:
        """A task call starts at ``k``: ``wait(``, ``transfer.async``, ``OPCODE.sync`` ..."""
        tok = self.peek(k)
        if tok.kind != "ID":
            return False
        if tok.text == "wait":
            return self.at("(", k + 1)
        nxt = self.peek(k + 2)
        if not (self.at(".", k + 1) and not self.peek(k + 1).gap and nxt.kind == "ID"):
            return False
        # OPCODE.async / OPCODE.sync, or another form name followed by what a task call
        # continues with (so that "relu.later in X out Y" is reported as a bad form).
        return nxt.text in ("async", "sync") or self.at_kw("in", k + 3) or self.at("(", k + 3)
