"""Long fuzzing run of the float runtime on mutated valid models (``make fuzz``).

Usage: ``python tests/fuzz/fuzz_runtime.py --seconds 300 [--seed N] [--no-torch]``.
Seeds: the zoo models compiled by ``npu compile`` (needs torch; ``--no-torch`` skips them)
plus the shipped MIND examples imported by ``npu import mind``, each with inputs of the
shapes it was compiled for. Each input is a seed changed in one of three ways: bytes of
the file (bit flips, replacements, insertions, deletions, truncation), the decoded model
(a CNST value replaced by 0, -1, a huge or a random value, a list shortened or grown; an
instruction's D offsets or signature changed; a tensor's quantisation parameters
changed), or the inputs (one dropped or added, another rank, dtype or shape). Every file
that loads is run. Only ``NacFormatError`` and ``NacRuntimeError`` may come out; any other
exception, an input taking more than 5 s, or an allocation over the address-space cap
(``resource.RLIMIT_AS``, 1.5 GB above the start, so a MemoryError) is reported with the
input and ends the run with status 1. Prints inputs tried, per second, and how many ran.
"""

import argparse
import dataclasses
import random
import resource
import sys
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "nac_container"))

from test_fuzz import mutate as mutate_bytes  # noqa: E402

from nac import NacFormatError, dumps, loads  # noqa: E402
from nac.container import Constant, Instruction, QuantParams  # noqa: E402
from nac.runtime import NacRuntimeError, run  # noqa: E402

LIMIT = 5.0
DATA = HERE.parents[1] / "importers" / "data"
_INTS = [0, -1, 1, 2, 3, 7, 255, 65535, 2**31 - 1, -(2**31), 2**40, -(2**62)]
_FLOATS = [0.0, -0.0, 1e-30, -1.0, 1e30, float("inf"), float("nan")]


def seeds(use_torch=True):
    """The seed models: a list of ``(name, nac, inputs)``."""
    from nac.compile import compile_graph
    from nac.import_mind import import_mind

    rng = np.random.default_rng(0)
    out = []
    for path in sorted(DATA.glob("*.ir")):
        try:
            graph = import_mind(path.read_text(), path=path)
        except Exception:  # examples the importer refuses are not seeds
            continue
        nac, _, _ = compile_graph(graph)
        nac = loads(dumps(nac))
        inputs = [rng.standard_normal(n.shape).astype(n.dtype) if n.dtype.startswith("float")
                  else rng.integers(0, 2, n.shape).astype(n.dtype)
                  for n in graph.nodes if n.kind == "input"]
        out.append((path.name, nac, inputs))
    if use_torch:
        from nac.compile import compile_module
        from nac.zoo import ZOO, build

        for name in sorted(ZOO):
            module, example = build(name)
            nac, _, _ = compile_module(module, example)
            nac = loads(dumps(nac))
            out.append((name, nac, [x.numpy() for x in example]))
    return out


def _new_value(value, rng):
    if isinstance(value, tuple):
        items = list(value)
        how = rng.randrange(4)
        if how == 0 and items:
            items.pop(rng.randrange(len(items)))
        elif how == 1:
            items.append(rng.choice(_INTS))
        elif items:
            k = rng.randrange(len(items))
            items[k] = _new_value(items[k], rng)
        return tuple(items)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return rng.choice([*_INTS, value + rng.choice((-1, 1))])
    if isinstance(value, float):
        return rng.choice(_FLOATS)
    if isinstance(value, str):
        return rng.choice(["", "tanh", "none", "x" * 3])
    return rng.choice(_INTS)


def mutate_model(nac, rng):
    """*nac* with 1 to 3 structural edits (constants, D offsets, quantisation)."""
    for _ in range(rng.randint(1, 3)):
        how = rng.randrange(6)
        if how < 3 and nac.cnst:
            cnst = list(nac.cnst)
            k = rng.randrange(len(cnst))
            cid, c = cnst[k]
            cnst[k] = (cid, Constant(c.type, _new_value(c.value, rng)))
            nac = dataclasses.replace(nac, cnst=tuple(cnst))
        elif how == 3 and nac.ops:
            ops = list(nac.ops)
            k = rng.randrange(len(ops))
            ins = ops[k]
            if ins.d:
                d = list(ins.d)
                d[rng.randrange(len(d))] = rng.choice([0, -1, -2, -k, 1, -(k + 1)])
                ops[k] = dataclasses.replace(ins, d=tuple(d))
            else:
                ops[k] = Instruction(ins.a, ins.b, ins.c, ins.d)
            nac = dataclasses.replace(nac, ops=tuple(ops))
        elif how == 4 and nac.ops:
            ops = list(nac.ops)
            k = rng.randrange(len(ops))
            ops[k] = dataclasses.replace(ops[k], a=rng.choice([ins.a for ins in ops]))
            nac = dataclasses.replace(nac, ops=tuple(ops))
        elif nac.data and nac.data.tensors:
            tensors = list(nac.data.tensors)
            k = rng.randrange(len(tensors))
            pid, t = tensors[k]
            q = t.quant_params or QuantParams()
            q = dataclasses.replace(q, block_size=rng.choice(_INTS[:8]),
                                    axis=rng.choice([0, 1, 5, 255]),
                                    scales=q.scales[:rng.randrange(len(q.scales) + 1)])
            tensors[k] = (pid, dataclasses.replace(t, quant_params=q,
                                                   quant=rng.choice([0, 1, 2, 3, 4])))
            nac = dataclasses.replace(nac, data=dataclasses.replace(nac.data,
                                                                    tensors=tuple(tensors)))
    return nac


def mutate_inputs(inputs, rng):
    """*inputs* with one dropped, added, reshaped or cast."""
    inputs = list(inputs)
    how = rng.randrange(5)
    if how == 0 and inputs:
        inputs.pop(rng.randrange(len(inputs)))
    elif how == 1:
        inputs.append(np.zeros(rng.choice([(), (3,), (2, 2)]), np.float32))
    elif inputs:
        k = rng.randrange(len(inputs))
        x = inputs[k]
        if how == 2:
            inputs[k] = x.reshape(*x.shape, 1) if rng.random() < 0.5 else x.reshape(-1)
        elif how == 3:
            inputs[k] = x.astype(rng.choice([np.float64, np.int64, np.bool_, np.complex64,
                                             np.float16]))
        else:
            shape = [max(1, d + rng.choice((-1, 1))) for d in x.shape]
            inputs[k] = np.ones(shape, x.dtype)
    return inputs


def one(pool, rng, note):
    """Draw and run one input; its description goes to ``note[0]`` first."""
    name, nac, inputs = rng.choice(pool)
    note[0] = name
    kind = rng.random()
    if kind < 0.3:
        raw = mutate_bytes(dumps(nac), rng)
        note[0] = f"{name}: bytes {raw.hex()}"
        nac = loads(raw)
    elif kind < 0.85:
        nac = mutate_model(nac, rng)
        note[0] = f"{name}: model {nac!r}"
        try:
            raw = dumps(nac)
        except Exception:  # the writer may refuse an edit; not a finding
            raise NacFormatError("edit not writable") from None
        nac = loads(raw)
    else:
        inputs = mutate_inputs(inputs, rng)
        note[0] = f"{name}: inputs {[(x.dtype.name, x.shape) for x in inputs]}"
    run(nac, inputs)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-torch", action="store_true", help="MIND seeds only")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    np.seterr(all="ignore")
    pool = seeds(use_torch=not args.no_torch)
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        used = int(f.read().split()[0]) * resource.getpagesize()
    cap = used + (1536 << 20)
    if hard == resource.RLIM_INFINITY or cap < hard:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    tried = ran = rejected = 0
    start_all = time.monotonic()
    deadline = start_all + args.seconds
    while time.monotonic() < deadline:
        start = time.monotonic()
        note = [""]
        try:
            one(pool, rng, note)
            ran += 1
        except (NacFormatError, NacRuntimeError):
            rejected += 1
        except Exception as exc:  # any other exception is the finding
            print(f"FAIL after {tried} inputs: {type(exc).__name__}: {exc}")
            print(f"input: {note[0]}"[:20000])
            print("".join(traceback.format_exc(limit=-4)))
            return 1
        if time.monotonic() - start > LIMIT:
            print(f"FAIL: one input took {time.monotonic() - start:.1f} s: {note[0]}"[:20000])
            return 1
        tried += 1
    elapsed = time.monotonic() - start_all
    print(f"fuzz_runtime: {tried} inputs in {elapsed:.0f} s ({tried / elapsed:.0f}/s), {ran} ran, "
          f"{rejected} rejected with NacFormatError or NacRuntimeError, 0 other exceptions "
          f"(seed {args.seed}, {len(pool)} seed models)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
