"""Record ``golden_bytes.json`` from the current code (only for an intended encoding change).

Usage: ``python tests/golden/record.py``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.golden.artifacts import GOLDEN, digest, producers


def main() -> None:
    table = {name: digest(make()) for name, make in sorted(producers().items())}
    GOLDEN.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"{len(table)} artifacts -> {GOLDEN}")


if __name__ == "__main__":
    main()
