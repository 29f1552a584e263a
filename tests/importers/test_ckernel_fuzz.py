"""Fuzz-style test of the C-Kernel-Engine IR v2 importer: the shipped example mutated
(values replaced, fields deleted, list entries dropped or duplicated, integers nudged,
names swapped, text edited) must import or fail with :class:`CKernelError`, never another
exception; what imports must also compile and run. Derandomised, so every run tries the
same inputs; ``tests/fuzz/fuzz_ckernel.py`` runs :func:`mutate` for longer.
"""

import copy
import json
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nac.compile import compile_graph
from nac.import_ckernel import CKernelError, import_ckernel
from nac.runtime import run

SHIPPED_TEXT = (Path(__file__).parent / "data" / "ckernel_ir_v2_tiny.json").read_text()
SHIPPED = json.loads(SHIPPED_TEXT)
NAMES = sorted({b["name"] for b in SHIPPED["buffers"]} | {d["name"] for d in
               SHIPPED["dimensions"]} | {n["op"] for n in SHIPPED["nodes"]} |
               {b["arg"] for n in SHIPPED["nodes"] for b in n["bindings"]} | set(SHIPPED["config"]))
MAX_ELEMENTS = 1 << 16  # keeps a mutated dimension from allocating much


def _paths(obj):
    """Every (container, key) inside *obj*."""
    out = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) \
        else ()
    for key, value in items:
        out.append((obj, key))
        out.extend(_paths(value))
    return out


_LEAVES = [None, True, 0, -1, 2, 64, 2**31, -(2**40), 10**9, 0.5, -1.0, 1e-5, float("inf"),
           float("nan"), 1e300, "", "x", "rope_theta>", "a&&||b", "((", "!"]


def _value(rng, depth=0):
    """A random JSON-like value: a leaf, a known name, or (shallow) a list or object."""
    kind = rng.randrange(4 if depth < 2 else 2)
    if kind == 0:
        return rng.choice(_LEAVES)
    if kind == 1:
        return rng.choice(NAMES)
    if kind == 2:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    keys = [*NAMES, "dim", "mult", "div", "name"]
    return {rng.choice(keys): _value(rng, depth + 1) for _ in range(rng.randrange(3))}


def mutate(model, rng):
    """A mutated deep copy of *model* (1 to 4 structural edits) driven by ``random.Random``
    compatible *rng*."""
    model = copy.deepcopy(model)
    for _ in range(rng.randint(1, 4)):
        paths = _paths(model)
        # The buffer table dominates the file; half the edits go to the other sections.
        section = model.get(rng.choice(["nodes", "config", "dimensions"]))
        if rng.random() < 0.5 and isinstance(section, (dict, list)) and _paths(section):
            paths = _paths(section)
        if not paths:
            break
        container, key = rng.choice(paths)
        value = container[key]
        op = rng.randrange(6)
        if op == 0:
            container[key] = _value(rng)
        elif op == 1:
            del container[key]
        elif op == 2 and isinstance(value, int) and not isinstance(value, bool):
            container[key] = rng.choice([value + 1, value - 1, value * 2, 0, -value, value // 2])
        elif op == 3 and isinstance(value, str):
            container[key] = rng.choice(NAMES)
        elif op == 4 and isinstance(container, list):
            container.insert(rng.randrange(len(container) + 1), copy.deepcopy(value))
        else:
            other_container, other_key = rng.choice(paths)
            container[key] = copy.deepcopy(other_container[other_key])
    return model


def mutate_text(text, rng):
    """*text* with 1 to 4 character edits."""
    chars = list(text)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(chars) + 1)
        if rng.random() < 0.5 and at < len(chars):
            chars[at] = rng.choice('{}[]",:0123456789-.eE ntrufalse')
        elif at < len(chars):
            del chars[at]
        else:
            chars.append(rng.choice('{}[]",:'))
    return "".join(chars)


def check(source):
    """Import *source*; if that works, compile and run the graph. Returns whether it
    imported; any exception other than CKernelError propagates."""
    try:
        graph, info = import_ckernel(source, path="fuzz.json", max_elements=MAX_ELEMENTS)
    except CKernelError:
        return False
    nac, _, _ = compile_graph(graph)
    inputs = [np.ones(shape, np.float32) for _, shape in info.inputs]
    outputs = run(nac, inputs)
    assert len(outputs) == len(info.outputs)
    return True


@settings(derandomize=True, max_examples=150, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.randoms(use_true_random=False), st.integers(0, 9))
def test_mutated_example_gives_only_ckernel_errors(rng, kind):
    if kind == 0:
        check(mutate_text(SHIPPED_TEXT, rng))
    else:
        check(mutate(SHIPPED, rng))


def test_unmutated_example_passes_the_check():
    assert check(SHIPPED_TEXT)
