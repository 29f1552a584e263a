"""Fuzz: token-level mutations of corpus snippets and examples give diagnostics, never an
exception or a hang; whatever still parses formats back to the same tree.

Modest example counts keep this to a few seconds; ``tests/fuzz/fuzz_nem.py`` is the long
run (``make fuzz``).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nem_mutate import mutate, sources, time_bound

from nem.checker import check_text
from nem.diagnostics import CODES, DiagnosticSink
from nem.formatter import format_document
from nem.parser import parse

SOURCES = sources()
BOUND = 5.0  # seconds per input: generous for 2 slow CI cores; a hang is far beyond it

choice = st.tuples(
    st.sampled_from(["delete", "duplicate", "swap", "replace", "replace", "truncate"]),
    st.integers(0, 1 << 16),
    st.integers(0, 1 << 16),
    st.integers(0, 1 << 16),
)
SETTINGS = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _check(name: str, text: str, base) -> None:
    with time_bound(BOUND):
        result = check_text(text, file=f"{name}.nem", base_dir=str(base))
    for diag in result.diagnostics:
        assert diag.code in CODES
        line = str(diag).splitlines()[0]
        assert line.startswith(f"{diag.span}: "), line


@SETTINGS
@given(st.sampled_from(SOURCES), st.lists(choice, min_size=1, max_size=4))
def test_mutations_give_diagnostics(source, choices):
    name, text, base = source
    _check(name, mutate(text, choices), base)


@SETTINGS
@given(st.sampled_from(SOURCES), st.lists(choice, min_size=1, max_size=3))
def test_mutations_that_parse_format_back(source, choices):
    name, text, _ = source
    mutated = mutate(text, choices)
    sink = DiagnosticSink()
    with time_bound(BOUND):
        doc = parse(mutated, name, sink)
    if sink.errors:
        return
    out = format_document(doc)
    again = parse(out, name)
    assert again == doc, out
    assert format_document(again) == out


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.text(alphabet=st.sampled_from(list("abil0123456789.,:=()[]{}<>@#\"+-*/ \n\t_")),
               max_size=200))
def test_random_text_gives_diagnostics(text):
    _check("random", text, ".")


def test_mutation_helpers_are_faithful():
    # Cutting and re-joining changes nothing; each mutation kind changes something.
    for _, text, _ in SOURCES[:50]:
        assert mutate(text, []) == text
    _name, text, _ = SOURCES[0]
    assert text.strip()
    for kind in ("delete", "duplicate", "replace", "truncate"):
        assert mutate(text, [(kind, 1, 0, 3)]) != text, kind
