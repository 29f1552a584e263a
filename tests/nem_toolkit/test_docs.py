"""``docs/nem-toolkit.md`` lists every diagnostic code exactly as ``nem.diagnostics.CODES``
defines it. Regenerate the table with ``python tests/nem_toolkit/test_docs.py --write``."""

from __future__ import annotations

import sys
from pathlib import Path

from nem.diagnostics import CODES

DOC = Path(__file__).resolve().parents[2] / "docs" / "nem-toolkit.md"
BEGIN = "<!-- diagnostic codes: generated from nem.diagnostics.CODES -->"
END = "<!-- end of diagnostic codes -->"


def table() -> str:
    rows = ["| code | severity | meaning | nem.md section or project rule |", "|---|---|---|---|"]
    for code, (severity, meaning, section) in sorted(CODES.items()):
        rows.append(f"| {code} | {severity} | {meaning} | {section} |".replace("\n", " "))
    return "\n".join(rows)


def _split(text: str) -> tuple[str, str, str]:
    head, rest = text.split(BEGIN, 1)
    body, tail = rest.split(END, 1)
    return head, body, tail


def test_code_table_matches_the_code():
    _, body, _ = _split(DOC.read_text(encoding="utf-8"))
    assert body.strip() == table(), (
        "docs/nem-toolkit.md is out of date: python tests/nem_toolkit/test_docs.py --write"
    )


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    head, _, tail = _split(DOC.read_text(encoding="utf-8"))
    DOC.write_text(f"{head}{BEGIN}\n{table()}\n{END}{tail}", encoding="utf-8")
