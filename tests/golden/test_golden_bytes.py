"""Every encoded byte pinned: task binaries, memory images and NAC files.

The expected digests in ``golden_bytes.json`` were recorded from the code at commit
b885d95, before the layout refactor of issue 19, by ``tests/golden/record.py`` (and
re-recorded once for task binary 1.2: see ``artifacts.py``): this is a characterisation
test whose independent path is the earlier implementation. A refactor of
the record layouts, the element-type / opcode tables or the packages must leave every
artifact as it was. An intended change of an encoding re-records the file in the same
commit and says so.
"""

from __future__ import annotations

import json

import pytest

from tests.golden.artifacts import GOLDEN, digest, producers

EXPECTED = json.loads(GOLDEN.read_text())
PRODUCERS = producers()


def test_every_artifact_is_pinned():
    assert sorted(PRODUCERS) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(PRODUCERS))
def test_bytes_unchanged(name):
    got = digest(PRODUCERS[name]())
    want = EXPECTED[name]
    assert got == want, (
        f"{name}: {got['bytes']} bytes, sha256 {got['sha256'][:16]}...; recorded "
        f"{want['bytes']} bytes, sha256 {want['sha256'][:16]}... (an encoding changed: if "
        "that was intended, re-record with python tests/golden/record.py)"
    )
