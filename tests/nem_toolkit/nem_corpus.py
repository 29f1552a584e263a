"""Reader for the NEM conformance corpus (``tests/nem_toolkit/corpus/*.cases``).

A corpus file holds named snippets::

    === define std            # a prelude other cases can start with
    device "test_device.nem"
    === case const_dup
    expect: E501              # "valid", or the exact set of error codes (+ warnings to see)
    rule: Constant Declarations 1
    prelude: std              # optional
    device: test_npu          # optional: like npu nem check --device
    ---
    const A = 1
    const A = 2

``expect`` lists every error code the checker must report -- no more, no fewer -- and
any warning codes that must appear. ``rule`` names the spec rule(s) the case exercises,
separated by ``;``; every rule with a negative case also has a positive one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).parent / "corpus"


@dataclass(frozen=True)
class Case:
    name: str
    expect: tuple[str, ...]  # () means valid
    rules: tuple[str, ...]
    source: str
    device: str | None
    file: str
    line: int

    @property
    def valid(self) -> bool:
        return not any(c.startswith("E") for c in self.expect)


def load_cases() -> list[Case]:
    cases: list[Case] = []
    defines: dict[str, str] = {}  # shared by all files, which are read in name order
    for path in sorted(CORPUS.glob("*.cases")):
        blocks: list[tuple[str, int, list[str]]] = []
        for k, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("=== "):
                blocks.append((line[4:].strip(), k, []))
            elif blocks:
                blocks[-1][2].append(line)
        for head, line_no, lines in blocks:
            kind, _, name = head.partition(" ")
            if kind == "define":
                defines[name] = "\n".join(lines) + "\n"
                continue
            assert kind == "case", f"{path.name}:{line_no}: unknown block {head!r}"
            meta: dict[str, str] = {}
            split = lines.index("---")
            for meta_line in lines[:split]:
                key, _, value = meta_line.partition(":")
                meta[key.strip()] = value.strip()
            prelude = defines[meta["prelude"]] if "prelude" in meta else ""
            expect = meta["expect"].split()
            cases.append(Case(
                name=name,
                expect=() if expect == ["valid"] else tuple(expect),
                rules=tuple(r.strip() for r in meta["rule"].split(";")),
                source=prelude + "\n".join(lines[split + 1:]) + "\n",
                device=meta.get("device"),
                file=path.name,
                line=line_no,
            ))
    return cases
