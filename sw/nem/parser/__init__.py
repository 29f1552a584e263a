"""The NEM parser: tokens -> :class:`nem.tree.Document`, with error recovery.

Layout rule (the grammar has no line ends): newlines are whitespace, and a statement ends
where the next token cannot continue it. The places where that needs a decision are:

* after a compute task's operands, ``NAME = value`` is an attribute *unless* the value
  starts a region (``region(``) or a task call (``transfer.async``, ``relu.sync``, ``wait(``),
  in which case it is the next statement;
* a region's type attributes continue while a ``,`` is followed by one of ``elem``,
  ``shape``, ``layout``, ``strides``, ``quant`` and ``=``; otherwise the ``,`` belongs to
  the surrounding operand list;
* decorators (``@...``) attach to what precedes them, with one exception: after a compute
  task's operand, a decorator that applies only to tasks (``@resource``, ``@seq_engine``,
  ``@memmove``, ``@deterministic``, ``@max_in_flight``) ends the operand and belongs to the
  task (``relu.async in X out Y @materialized @resource(CSTL[0])``: Y is materialized, the
  task is bound to CSTL[0]).

Errors are reported to the sink and parsing resumes at the next token that starts a line
and can start a statement, so one run reports every independent syntax error.

The grammar is split by what it parses: :mod:`nem.parser.cursor` (tokens, errors,
recovery), :mod:`~nem.parser.expressions`, :mod:`~nem.parser.operands`,
:mod:`~nem.parser.statements` and :mod:`~nem.parser.config`; :class:`_Parser` joins them.
"""

from __future__ import annotations

from nem.diagnostics import DiagnosticSink
from nem.lexer import tokenize
from nem.parser.config import ConfigDocs
from nem.parser.cursor import MAX_EXPR_DEPTH, MAX_LITERAL_CHARS, TYPE_KEYS
from nem.parser.statements import Statements
from nem.tree import Document

__all__ = ["MAX_EXPR_DEPTH", "MAX_LITERAL_CHARS", "TYPE_KEYS", "parse"]


class _Parser(Statements, ConfigDocs):
    """The NEM grammar: program statements and configuration documents."""


def parse(text: str, file: str = "<string>", sink: DiagnosticSink | None = None) -> Document:
    """Parse NEM source text into a :class:`Document`.

    Parameters
    ----------
    text : str
        The source.
    file : str
        Name used in spans and diagnostics.
    sink : DiagnosticSink, optional
        Receives lexical and syntax diagnostics. Without one, the first error raises
        :class:`nem.diagnostics.NemError`.

    Returns
    -------
    Document
        The tree; parts that did not parse are left out (and reported).
    """
    from nem.diagnostics import NemError

    own = sink is None
    sink = sink if sink is not None else DiagnosticSink()
    tokens, comments = tokenize(text, file, sink)
    blanks = tuple(k + 1 for k, line in enumerate(text.split("\n")) if not line.strip())
    doc = _Parser(tokens, file, sink).document(comments, blanks)
    if own and sink.errors:
        raise NemError(sink.sorted())
    return doc
