"""Long fuzzing run of the NEM toolkit: parser, checker and formatter (``make fuzz``).

Usage: ``python tests/fuzz/fuzz_nem.py --seconds 300 [--seed N]``. Inputs: every corpus
case and upstream example, mutated at the token level (delete, duplicate, swap, replace,
truncate; 1 to 6 mutations, sometimes applied again to an earlier mutant), by grammar-aware
edits (:func:`grammar_mutate`: a number replaced by an edge value or a literal of 100+
digits, an expression by a chain or nest hundreds of levels deep, a loop bound scaled up to
10^12, statements wrapped in a loop nest, a statement line duplicated, moved or deleted,
an opcode, element type or shape exchanged), character edits, and random character
strings. Every input is checked; inputs that parse are also formatted and parsed again,
which must give the same tree. Any exception (a MemoryError included: the address space is
capped 1.5 GB above the start), a changed tree, or one input taking more than 15 s is
reported with the input and ends the run with status 1. Prints inputs tried, per second.
"""

import argparse
import random
import re
import resource
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

#: Seconds one input may take: a loop nest at the E904 limit (16,384 task instances) takes
#: about 3 s of CPU to check, more on a loaded machine, so the bound sits well above that;
#: a hang is 5 x LIMIT.
LIMIT = 15.0
ALPHABET = "abcdeilmnoprstuxy_0123456789.,:;=()[]{}<>@#\"+-*/ \n\t"
_NUMBER = re.compile(r"(?<![\w.])\d+(?![\w.])")
_LOOP = re.compile(r"loop (\w+) in \[([^\]]*)\.\.([^\]]*)\]")
_OPCODE = re.compile(r"\b(relu|gemm|conv2d|matmul|add|mul|softmax|layernorm|transfer|store|"
                     r"requant|sigmoid|gelu|exp|maxpool2d)\.(async|sync)\b")
_ELEM = re.compile(r"elem=(\w+)")
_SHAPE = re.compile(r"shape=\[([^\]]*)\]")
_OPS = ["relu", "gemm", "conv2d", "matmul", "add", "mul", "softmax", "layernorm", "transfer",
        "store", "requant", "gelu", "maxpool2d", "nosuch"]
_ELEMS = ["i4", "i8", "u8", "i16", "u16", "i32", "u32", "f16", "bf16", "f32", "q8"]


def _number(rng):
    return rng.choice(["0", "1", "-1", "2", "63", "64", "4096", str(2**31), str(2**32),
                       str(2**63 - 1), str(2**63), "9" * rng.randrange(20, 300)])


def _expression(rng):
    n = rng.choice([2, 50, 255, 256, 257, 1000, 5000])
    how = rng.randrange(4)
    if how == 0:
        return " + ".join(["1"] * n)
    if how == 1:
        return "(" * min(n, 200) + "1" + ")" * min(n, 200)
    if how == 2:
        return "-" * min(n, 300) + "1"
    text = "1"
    for _ in range(min(n, 99)):
        text = f"({text} * 2 + 1 - 1)"
    return text


def grammar_mutate(text, rng):
    """*text* with one to three edits that know NEM's statements and expressions."""
    for _ in range(rng.randint(1, 3)):
        how = rng.randrange(9)
        lines = text.split("\n")
        if how == 0:
            spots = list(_NUMBER.finditer(text))
            if spots:
                m = rng.choice(spots)
                text = text[:m.start()] + _number(rng) + text[m.end():]
        elif how == 1:
            spots = list(_NUMBER.finditer(text))
            if spots:
                m = rng.choice(spots)
                text = text[:m.start()] + f"({_expression(rng)})" + text[m.end():]
        elif how == 2:
            spots = list(_LOOP.finditer(text))
            if spots:
                m = rng.choice(spots)
                end = rng.choice([f"({m.group(3)}) * 1000", "999999999999", "100000",
                                  f"{m.group(2)} - 1"])
                text = text[:m.start()] + f"loop {m.group(1)} in [{m.group(2)}..{end}]" + \
                    text[m.end():]
        elif how == 3 and len(lines) > 2:
            a = rng.randrange(1, len(lines))
            b = rng.randrange(a, min(len(lines), a + 6)) + 1
            var = rng.choice(["zz", "i", "q"])
            bound = rng.choice(["3", "999", "99999"])
            body = ["    " + ln for ln in lines[a:b]]
            lines[a:b] = [f"loop {var} in [0..{bound}]:", *body, "endloop"]
            text = "\n".join(lines)
        elif how == 4:
            k = rng.randrange(len(lines))
            what = rng.randrange(3)
            if what == 0:
                lines.insert(rng.randrange(len(lines) + 1), lines[k])
            elif what == 1:
                lines.insert(rng.randrange(len(lines) + 1), lines.pop(k))
            else:
                del lines[k]
            text = "\n".join(lines)
        elif how == 5:
            spots = list(_OPCODE.finditer(text))
            if spots:
                m = rng.choice(spots)
                text = text[:m.start()] + f"{rng.choice(_OPS)}.{rng.choice(['async', 'sync'])}" \
                    + text[m.end():]
        elif how == 6:
            spots = list(_ELEM.finditer(text))
            if spots:
                m = rng.choice(spots)
                text = text[:m.start()] + f"elem={rng.choice(_ELEMS)}" + text[m.end():]
        elif how == 7:
            spots = list(_SHAPE.finditer(text))
            if spots:
                m = rng.choice(spots)
                dims = [d.strip() for d in m.group(1).split(",") if d.strip()]
                edit = rng.randrange(4)
                if edit == 0 and dims:
                    dims.pop(rng.randrange(len(dims)))
                elif edit == 1:
                    dims.insert(rng.randrange(len(dims) + 1), rng.choice(["1", "0", "7"]))
                elif dims:
                    dims[rng.randrange(len(dims))] = _number(rng)
                text = text[:m.start()] + f"shape=[{', '.join(dims)}]" + text[m.end():]
        else:
            k = rng.randrange(len(lines))
            lines[k] = lines[k] + rng.choice([" @max_in_flight(0)", " @max_in_flight(99999)",
                                              " deps=[t1]", " @resource(NMU[7])", " #"])
            text = "\n".join(lines)
    return text


def one(name: str, text: str, base: Path) -> None:
    """Check, and round-trip through the formatter when it parses."""
    check_text(text, file=f"{name}.nem", base_dir=str(base))
    sink = DiagnosticSink()
    doc = parse(text, name, sink)
    if not sink.errors:
        out = format_document(doc)
        if parse(out, name) != doc:
            raise AssertionError(f"format changed the tree:\n{out}")


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    pool = sources()
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        used = int(f.read().split()[0]) * resource.getpagesize()
    if hard == resource.RLIM_INFINITY or used + (1536 << 20) < hard:
        resource.setrlimit(resource.RLIMIT_AS, (used + (1536 << 20), hard))
    start_all = time.monotonic()
    mutants: list[tuple[str, str, Path]] = []
    tried = 0
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        kind = rng.random()
        if kind < 0.3:
            name, text, base = rng.choice(mutants if mutants and rng.random() < 0.3 else pool)
            text = grammar_mutate(text, rng)
        elif kind < 0.75 or not mutants:
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
    elapsed = time.monotonic() - start_all
    print(f"fuzz_nem: {tried} inputs in {elapsed:.0f} s ({tried / elapsed:.0f}/s), no failures "
          f"(seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
