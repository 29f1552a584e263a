"""A short run of every fuzzer in ``tests/fuzz/`` (``make test``; ``make fuzz`` runs them
for minutes). Each runs in its own process, as ``make fuzz`` starts it, for a few seconds
with a fixed seed, and must end with status 0 and its summary line; a finding prints the
input and ends with status 1, which fails the test with that output."""

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent

#: fuzzer -> extra arguments that keep the start-up short (smaller seed sets).
FUZZERS = {
    "fuzz_nac": ["--corpus", "30"],
    "fuzz_ckernel": [],
    "fuzz_taskbin": [],
    "fuzz_nem": [],
    "fuzz_runtime": ["--no-torch"],
    "fuzz_ark": [],
    "fuzz_mind": [],
}


def test_every_fuzzer_is_listed():
    assert {p.stem for p in HERE.glob("fuzz_*.py")} == set(FUZZERS)


@pytest.mark.parametrize("name", sorted(FUZZERS))
def test_fuzzer_smoke(name):
    proc = subprocess.run(
        [sys.executable, str(HERE / f"{name}.py"), "--seconds", "3", "--seed", "1",
         *FUZZERS[name]],
        capture_output=True, text=True, timeout=300, cwd=HERE.parents[1], check=False)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    assert proc.stdout.strip().splitlines()[-1].startswith(f"{name}: "), proc.stdout
