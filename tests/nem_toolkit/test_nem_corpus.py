"""The conformance corpus: every case gives exactly its expected diagnostics, and formats back.

Each case is a snippet, the spec rule it exercises and its expected result (see
``nem_corpus.py`` for the file format). The checker must report exactly the expected error
codes; the formatter must give text that parses back to the same tree.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nem_corpus import CORPUS, load_cases
from nem_must import MUST_RULES

from nem.checker import check_text
from nem.diagnostics import CODES, DiagnosticSink
from nem.formatter import format_document
from nem.parser import parse

CASES = load_cases()


def _run(case):
    return check_text(case.source, file=f"{case.name}.nem", base_dir=str(CORPUS),
                      device=case.device)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case):
    result = _run(case)
    errors = sorted({d.code for d in result.diagnostics if d.severity == "error"})
    warnings = {d.code for d in result.diagnostics if d.severity == "warning"}
    want_errors = sorted({c for c in case.expect if c.startswith("E")})
    want_warnings = {c for c in case.expect if c.startswith("W")}
    shown = "\n".join(str(d) for d in result.diagnostics) or "(no diagnostics)"
    assert errors == want_errors, f"{case.file}:{case.line} {case.name}\n{shown}"
    assert want_warnings <= warnings, f"{case.file}:{case.line} {case.name}\n{shown}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_format_round_trip(case):
    sink = DiagnosticSink()
    doc = parse(case.source, f"{case.name}.nem", sink)
    if sink.errors:
        pytest.skip("does not parse (a syntax case)")
    text = format_document(doc)
    again = parse(text, "formatted.nem")
    assert again == doc, text
    assert format_document(again) == text, "the canonical layout is not a fixed point"


def test_corpus_size_and_coverage():
    assert len(CASES) >= 230, len(CASES)
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)), "case names must be unique"
    # Every diagnostic code is exercised by at least one case.
    expected = {code for c in CASES for code in c.expect}
    assert set(CODES) - expected == set(), sorted(set(CODES) - expected)
    # Every rule that has a negative case also has a positive case.
    negative = {r for c in CASES if not c.valid for r in c.rules}
    positive = {r for c in CASES if c.valid for r in c.rules}
    assert negative - positive == set(), sorted(negative - positive)


def test_every_must_rule_has_a_positive_and_a_negative_case():
    kinds = {"checked", "tool", "binder", "inexpressible", "registry"}
    labels = {label for kind, label, _ in MUST_RULES if kind == "checked"}
    assert {kind for kind, _, _ in MUST_RULES} <= kinds
    clean = {r for c in CASES if not c.expect for r in c.rules}
    flagged = {r for c in CASES if c.expect for r in c.rules}
    assert labels - clean == set(), f"no case free of diagnostics: {labels - clean}"
    assert labels - flagged == set(), f"no case with a finding: {labels - flagged}"
    # Corpus labels that claim a MUST are in the inventory (no typos, nothing forgotten).
    claimed = {r for c in CASES for r in c.rules if r.startswith("MUST ")}
    assert claimed - labels == set(), sorted(claimed - labels)
    # Toolkit obligations name the test module that covers them.
    here = Path(__file__).parent
    for kind, label, _ in MUST_RULES:
        if kind == "tool":
            assert (here / label).is_file(), label
