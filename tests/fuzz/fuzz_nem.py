"""Long fuzzing run of the NEM toolkit: parser, checker and formatter (``make fuzz``).

Usage: ``python tests/fuzz/fuzz_nem.py --seconds 300 [--seed N]``. Inputs: every corpus
case and upstream example, mutated at the token level (delete, duplicate, swap, replace,
truncate; 1 to 6 mutations, sometimes applied again to an earlier mutant), character
edits, and random character strings. Every input is checked; inputs that parse are also
formatted and parsed again, which must give the same tree. Any exception, a changed tree,
or one input taking more than 2 s is reported with the input and ends the run with status
1. Prints the number of inputs tried.
"""

import argparse
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "nem_toolkit"))

from nem_mutate import Hang, mutate, random_choices, sources, time_bound  # noqa: E402

from nem.checker import check_text  # noqa: E402
from nem.diagnostics import DiagnosticSink  # noqa: E402
from nem.formatter import format_document  # noqa: E402
from nem.parser import parse  # noqa: E402

LIMIT = 2.0
ALPHABET = "abcdeilmnoprstuxy_0123456789.,:;=()[]{}<>@#\"+-*/ \n\t"


def one(name: str, text: str, base: Path) -> None:
    """Check, and round-trip through the formatter when it parses."""
    check_text(text, file=f"{name}.nem", base_dir=str(base))
    sink = DiagnosticSink()
    doc = parse(text, name, sink)
    if not sink.errors:
        out = format_document(doc)
        if parse(out, name) != doc:
            raise AssertionError(f"format changed the tree:\n{out}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    pool = sources()
    mutants: list[tuple[str, str, Path]] = []
    tried = 0
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        kind = rng.random()
        if kind < 0.75 or not mutants:
            name, text, base = rng.choice(pool)
            text = mutate(text, random_choices(rng, rng.randint(1, 6)))
        elif kind < 0.85:
            name, text, base = rng.choice(mutants)
            text = mutate(text, random_choices(rng, rng.randint(1, 3)))
        elif kind < 0.92:
            name, text, base = rng.choice(pool)
            chars = list(text)
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(len(chars) + 1)
                op = rng.random()
                if op < 0.4 and at < len(chars):
                    chars[at] = rng.choice(ALPHABET)
                elif op < 0.7:
                    chars.insert(at, rng.choice(ALPHABET))
                elif at < len(chars):
                    del chars[at]
            text = "".join(chars)
        else:
            name, base = "random", Path(".")
            text = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(300)))
        start = time.monotonic()
        try:
            with time_bound(LIMIT * 5):
                one(name, text, base)
        except Hang:
            print(f"FAIL: one input did not finish in {LIMIT * 5} s ({name}):\n{text}")
            return 1
        except Exception as exc:  # any exception is the finding
            print(f"FAIL after {tried} inputs ({name}): {type(exc).__name__}: {exc}")
            print(f"input:\n{text}")
            return 1
        if time.monotonic() - start > LIMIT:
            print(f"FAIL: one input took {time.monotonic() - start:.1f} s ({name}):\n{text}")
            return 1
        if len(mutants) < 2000:
            mutants.append((name, text, base))
        else:
            mutants[rng.randrange(len(mutants))] = (name, text, base)
        tried += 1
    print(f"fuzz_nem: {tried} inputs, no failures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
