"""Long fuzzing run of the ARK model importer (``make fuzz``).

Usage: ``python tests/fuzz/fuzz_ark.py --seconds 300 [--seed N]``. Seeds: the shipped
example (``tests/importers/data/ark_model.json``) and a small three-op model built here.
Inputs: structural mutations (``json_mutate.mutate``: values of another JSON type,
deleted keys, nudged integers, swapped names, duplicated entries; sometimes applied again
to an earlier mutant), character edits of the text, and nesting 10^4 to 10^5 levels deep.
Every input is imported; what imports is compiled (``compile_graph``), and the small
models are also run. Only ``IRError`` (``ArkError`` is one) and the runtime's
``NacRuntimeError`` may come out; any other exception, or one input taking more than 2 s,
is reported with the input and ends the run with status 1. Prints inputs tried, per second.
"""

import argparse
import json
import random
import sys
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from json_mutate import deep, mutate, mutate_text  # noqa: E402

from nac.compile import compile_graph  # noqa: E402
from nac.import_ark import import_ark  # noqa: E402
from nac.ir import IRError  # noqa: E402
from nac.runtime import NacRuntimeError, run  # noqa: E402
from nac.schedule import ScheduleError  # noqa: E402

LIMIT = 2.0
SHIPPED_TEXT = (HERE.parents[1] / "importers" / "data" / "ark_model.json").read_text()
MAX_RUN_ELEMENTS = 1 << 16


def _tensor(tid, bid, shape):
    return {"Id": tid, "DataType": "FP32", "Buffer": {"Id": bid, "SendTags": [],
            "RecvTags": []}, "Shape": shape, "Strides": shape, "Offsets": [0] * len(shape),
            "PaddedShape": shape}


def small_model():
    """Matmul -> Relu -> ReduceSum over [2, 3] x [3, 4] (runs in microseconds)."""
    op = lambda kind, reads, result, args=None: {  # noqa: E731
        "Type": kind, "Name": kind.lower(), "IsVirtual": False, "ReadTensors": reads,
        "WriteTensors": [], "ResultTensors": [result], "Args": args or {}}
    return {"Rank": 0, "WorldSize": 1, "Nodes": [
        {"Id": 0, "Ops": [op("Matmul", [_tensor(0, 0, [2, 3]), _tensor(1, 1, [3, 4])],
                             _tensor(2, 2, [2, 4]))]},
        {"Id": 1, "Ops": [op("Relu", [_tensor(2, 2, [2, 4])], _tensor(3, 3, [2, 4]))]},
        {"Id": 2, "Ops": [op("ReduceSum", [_tensor(3, 3, [2, 4])], _tensor(4, 4, [2, 1]),
                             {"Axis": {"INT": 1}, "KeepDim": {"BOOL": True}})]},
    ]}


SEEDS = [json.loads(SHIPPED_TEXT), small_model()]
NAMES = sorted({"Id", "Type", "Name", "Shape", "Buffer", "Offsets", "Strides", "PaddedShape",
                "ReadTensors", "ResultTensors", "Args", "Ops", "Nodes", "IsVirtual",
                "RecvTags", "SendTags", "Axis", "INT", "BOOL", "DIMS", "FLOAT", "Value",
                "Permutation", "TransposeInput", "ShapeMNK", "Relu", "Add", "Transpose",
                "ReduceMax", "ScalarMul", "KeepDim"})


def check(source):
    """Import *source* (text or dict); compile what imports; run it when it is small."""
    try:
        graph, _ = import_ark(source, path="fuzz.json")
        nac, _, _ = compile_graph(graph)
        shapes = [n.shape for n in graph.nodes if n.kind == "input"]
        if sum(int(np.prod(s)) for s in shapes) <= MAX_RUN_ELEMENTS:
            run(nac, [np.ones(s, np.float32) for s in shapes])
    except (IRError, ScheduleError, NacRuntimeError):
        return False
    return True


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    pool = list(SEEDS)
    tried = imported = 0
    start_all = time.monotonic()
    deadline = start_all + args.seconds
    while time.monotonic() < deadline:
        kind = rng.random()
        if kind < 0.02:
            source = deep(rng)
        elif kind < 0.12:
            source = mutate_text(json.dumps(rng.choice(SEEDS)), rng)
        else:
            source = mutate(rng.choice(pool), rng, NAMES)
            if len(pool) < 500:
                pool.append(source)
            else:
                pool[rng.randrange(len(SEEDS), len(pool))] = source
        start = time.monotonic()
        try:
            imported += check(source)
        except Exception as exc:  # any other exception is the finding
            text = source if isinstance(source, str) else json.dumps(source)
            print(f"FAIL after {tried} inputs: {type(exc).__name__}: {exc}")
            print(f"input:\n{text[:20000]}")
            print("".join(traceback.format_exc(limit=-4)))
            return 1
        if time.monotonic() - start > LIMIT:
            print(f"FAIL: one input took {time.monotonic() - start:.1f} s")
            return 1
        tried += 1
    elapsed = time.monotonic() - start_all
    print(f"fuzz_ark: {tried} inputs in {elapsed:.0f} s ({tried / elapsed:.0f}/s), {imported} "
          f"imported and compiled, the rest rejected with ArkError/IRError, 0 other exceptions "
          f"(seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
