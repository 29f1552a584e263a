"""Long fuzzing run of the MIND Core IR importer (``make fuzz``).

Usage: ``python tests/fuzz/fuzz_mind.py --seconds 300 [--seed N]``. Seeds: the shipped
examples (``tests/importers/data/*.ir``). Inputs: token-level mutations (a token deleted,
duplicated, swapped with another, or replaced by one of the grammar's words: opcodes,
dtypes, ``?``, brackets, numbers such as 0, -1 and 2**63), line-level ones (a line
deleted, duplicated or moved), character edits, and 1 to 4 of them on an earlier mutant.
Every input is imported; what imports is compiled and run on inputs of the declared
shapes. Only ``IRError`` (``MindError`` is one), ``ScheduleError`` and ``NacRuntimeError``
may come out; any other exception, or one input taking more than 2 s, is reported with
the input and ends the run with status 1. Prints inputs tried, per second.
"""

import argparse
import random
import re
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from nac.compile import compile_graph
from nac.import_mind import import_mind
from nac.ir import IRError
from nac.runtime import NacRuntimeError, run
from nac.schedule import ScheduleError

LIMIT = 2.0
DATA = Path(__file__).resolve().parents[1] / "importers" / "data"
SEEDS = [p.read_text() for p in sorted(DATA.glob("*.ir"))]
WORDS = ["Input", "ConstI64", "ConstF32", "ConstTensor", "BinOp", "Add", "Sub", "Mul", "Div",
         "Sum", "Mean", "Reshape", "Transpose", "ExpandDims", "Squeeze", "Index", "Slice",
         "Gather", "Dot", "MatMul", "Conv2d", "Relu", "Neg", "Exp", "Log", "Valid", "Same",
         "Custom", "Tensor", "f32", "f64", "i32", "i64", "bool", "f16", "true", "false",
         "outputs", "?", "[", "]", "(", ")", "{", "}", "<", ">", ",", ":", "=", "%0", "%1",
         "%9", '"x"', "name", "0", "1", "-1", "2", "3", "1.5", "nan", "inf",
         "9223372036854775808", "100000"]
_TOKEN = re.compile(r'%\w+|"(?:[^"\\]|\\.)*"|[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\w+|\S')
MAX_RUN_ELEMENTS = 1 << 16


def _token_edit(text, rng):
    lines = text.split("\n")
    k = rng.randrange(len(lines))
    toks = _TOKEN.findall(lines[k])
    if not toks:
        return text
    i = rng.randrange(len(toks))
    how = rng.randrange(4)
    if how == 0:
        del toks[i]
    elif how == 1:
        toks.insert(i, toks[i])
    elif how == 2:
        j = rng.randrange(len(toks))
        toks[i], toks[j] = toks[j], toks[i]
    else:
        toks[i] = rng.choice(WORDS)
    lines[k] = " ".join(toks)
    return "\n".join(lines)


def _line_edit(text, rng):
    lines = text.split("\n")
    k = rng.randrange(len(lines))
    how = rng.randrange(3)
    if how == 0:
        del lines[k]
    elif how == 1:
        lines.insert(rng.randrange(len(lines) + 1), lines[k])
    else:
        lines.insert(rng.randrange(len(lines) + 1), lines.pop(k))
    return "\n".join(lines)


def _char_edit(text, rng):
    chars = list(text)
    at = rng.randrange(len(chars) + 1)
    if at < len(chars) and rng.random() < 0.5:
        chars[at] = rng.choice("%[](){}<>,:=?#\"0123456789-. \nfi")
    elif at < len(chars):
        del chars[at]
    else:
        chars.append(rng.choice("%[]()?"))
    return "".join(chars)


def mutate(text, rng):
    """*text* with 1 to 4 token, line or character edits."""
    for _ in range(rng.randint(1, 4)):
        how = rng.random()
        text = _token_edit(text, rng) if how < 0.7 else _line_edit(text, rng) if how < 0.85 \
            else _char_edit(text, rng)
    return text


def check(text):
    """Import *text*; compile what imports and run it on inputs of the declared shapes."""
    try:
        graph = import_mind(text, path="fuzz.ir")
        nac, _, _ = compile_graph(graph)
        inputs = [n for n in graph.nodes if n.kind == "input"]
        if sum(int(np.prod(n.shape)) for n in inputs) > MAX_RUN_ELEMENTS:
            return True
        rng = np.random.default_rng(0)
        arrays = [rng.standard_normal(n.shape).astype(np.float32) if n.dtype.startswith("f")
                  else np.zeros(n.shape, n.dtype) for n in inputs]
        run(nac, arrays)
    except (IRError, ScheduleError, NacRuntimeError):
        return False
    return True


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    np.seterr(all="ignore")
    pool = list(SEEDS)
    tried = imported = 0
    start_all = time.monotonic()
    deadline = start_all + args.seconds
    while time.monotonic() < deadline:
        text = mutate(rng.choice(pool), rng)
        if len(pool) < 500:
            pool.append(text)
        else:
            pool[rng.randrange(len(SEEDS), len(pool))] = text
        start = time.monotonic()
        try:
            imported += check(text)
        except Exception as exc:  # any other exception is the finding
            print(f"FAIL after {tried} inputs: {type(exc).__name__}: {exc}")
            print(f"input:\n{text}")
            print("".join(traceback.format_exc(limit=-4)))
            return 1
        if time.monotonic() - start > LIMIT:
            print(f"FAIL: one input took {time.monotonic() - start:.1f} s:\n{text}")
            return 1
        tried += 1
    elapsed = time.monotonic() - start_all
    print(f"fuzz_mind: {tried} inputs in {elapsed:.0f} s ({tried / elapsed:.0f}/s), {imported} "
          f"imported, compiled and ran, the rest rejected with MindError/IRError, 0 other "
          f"exceptions (seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
