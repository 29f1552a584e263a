"""Long fuzzing run of the C-Kernel-Engine IR v2 importer (``make fuzz``).

Usage: ``python tests/fuzz/fuzz_ckernel.py --seconds 300 [--seed N]``. Inputs: the
shipped example (``tests/importers/data/ckernel_ir_v2_tiny.json``) mutated structurally
(``test_ckernel_fuzz.mutate``: values replaced, fields deleted, entries duplicated,
integers nudged, names swapped; sometimes applied again to an earlier mutant) or as text
(character edits). Every input is imported; what imports is compiled and run. Any
exception other than CKernelError, or one input taking more than 2 s, is reported with
the input and ends the run with status 1. Prints the number of inputs tried and how many
imported.
"""

import argparse
import json
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "importers"))

from test_ckernel_fuzz import SHIPPED, SHIPPED_TEXT, check, mutate, mutate_text  # noqa: E402

LIMIT = 2.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    pool = [SHIPPED]
    tried = imported = 0
    start_all = time.monotonic()
    deadline = start_all + args.seconds
    while time.monotonic() < deadline:
        if rng.random() < 0.1:
            source = mutate_text(SHIPPED_TEXT, rng)
        else:
            source = mutate(rng.choice(pool), rng)
            if len(pool) < 500:
                pool.append(source)
            else:
                pool[rng.randrange(1, len(pool))] = source
        start = time.monotonic()
        try:
            imported += check(source)  # False when rejected with CKernelError
        except Exception as exc:  # any other exception is the finding
            text = source if isinstance(source, str) else json.dumps(source)
            print(f"FAIL after {tried} inputs: {type(exc).__name__}: {exc}")
            print(f"input:\n{text}")
            return 1
        if time.monotonic() - start > LIMIT:
            print(f"FAIL: one input took {time.monotonic() - start:.1f} s")
            return 1
        tried += 1
    elapsed = time.monotonic() - start_all
    print(f"fuzz_ckernel: {tried} inputs tried in {elapsed:.0f} s ({tried / elapsed:.0f}/s), "
          f"{imported} imported, "
          f"compiled and ran, the rest rejected with CKernelError, 0 other exceptions "
          f"(seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
