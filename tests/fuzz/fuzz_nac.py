"""Long fuzzing run of the NAC reader and the text assembler (``make fuzz``).

Usage: ``python tests/fuzz/fuzz_nac.py --seconds 300 [--seed N]``. Inputs: valid files
from the hypothesis strategy (drawn once into a corpus), mutated by bit flips, byte
replacement, insertion, deletion and truncation; plus random byte strings and mutated
text forms. Any exception other than NacFormatError, or a single input taking more than
2 s, is reported with the input (hex) and ends the run with status 1. Prints the number of
inputs tried.
"""

import argparse
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "nac_container"))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from nac_strategies import nac_files  # noqa: E402
from test_fuzz import mutate  # noqa: E402

from nac import NacFormatError, dumps, loads  # noqa: E402
from nac.text import assemble, disassemble  # noqa: E402


def corpus(size):
    found = []

    @settings(max_examples=size, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(nac_files())
    def collect(nac):
        found.append(nac)

    collect()
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus", type=int, default=300, help="valid files drawn as seeds")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    files = corpus(args.corpus)
    binaries = [dumps(n) for n in files]
    texts = [disassemble(n) for n in files]
    tried = rejected = 0
    start_all = time.monotonic()
    deadline = start_all + args.seconds
    while time.monotonic() < deadline:
        kind = rng.random()
        start = time.monotonic()
        try:
            if kind < 0.8:
                raw = mutate(rng.choice(binaries), rng)
                what = raw
                loads(raw)
            elif kind < 0.9:
                raw = bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
                what = raw
                loads(raw)
            else:
                chars = list(rng.choice(texts))
                for _ in range(rng.randint(1, 3)):
                    if chars:
                        chars[rng.randrange(len(chars))] = rng.choice("0123456789[],=\" #vx\n")
                what = "".join(chars).encode()
                assemble("".join(chars))
        except NacFormatError:
            rejected += 1
        except Exception as exc:  # any other exception is the finding
            print(f"FAIL after {tried} inputs: {type(exc).__name__}: {exc}")
            print(f"input (hex): {what.hex()}")
            return 1
        if time.monotonic() - start > 2.0:
            print(f"FAIL: one input took {time.monotonic() - start:.1f} s: {what.hex()}")
            return 1
        tried += 1
    elapsed = time.monotonic() - start_all
    print(f"fuzz_nac: {tried} inputs tried in {elapsed:.0f} s ({tried / elapsed:.0f}/s), "
          f"{rejected} rejected with "
          f"NacFormatError, 0 other exceptions (seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
