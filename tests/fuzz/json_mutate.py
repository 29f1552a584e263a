"""Structural mutation of JSON documents for the importer fuzzers (``fuzz_ark.py``).

:func:`mutate` edits a deep copy of a parsed document: a value replaced by a leaf of
another JSON type, a known name or a small list/object; a key deleted; an integer nudged;
a string swapped for a known name; a list entry duplicated; a subtree copied over another.
:func:`mutate_text` makes character edits to the text, and :func:`deep` builds nesting far
past the recursion limit.
"""

import copy

LEAVES = [None, True, False, 0, -1, 1, 2, 64, 2**31, -(2**40), 10**12, 0.5, -1.0, 1e300,
          float("inf"), float("nan"), "", "x", "FP16", "Matmul", [], {}]


def paths(obj):
    """Every ``(container, key)`` inside *obj*."""
    out = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) \
        else ()
    for key, value in items:
        out.append((obj, key))
        out.extend(paths(value))
    return out


def value(rng, names, depth=0):
    """A random JSON value: a leaf, a known name, or (shallow) a list or object."""
    kind = rng.randrange(4 if depth < 2 else 2)
    if kind == 0:
        return copy.deepcopy(rng.choice(LEAVES))
    if kind == 1:
        return rng.choice(names)
    if kind == 2:
        return [value(rng, names, depth + 1) for _ in range(rng.randrange(3))]
    return {rng.choice(names): value(rng, names, depth + 1) for _ in range(rng.randrange(3))}


def mutate(doc, rng, names):
    """A mutated deep copy of *doc* (1 to 4 structural edits)."""
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 4)):
        found = paths(doc)
        if not found:
            break
        container, key = rng.choice(found)
        old = container[key]
        how = rng.randrange(6)
        if how == 0:
            container[key] = value(rng, names)
        elif how == 1:
            del container[key]
        elif how == 2 and isinstance(old, int) and not isinstance(old, bool):
            container[key] = rng.choice([old + 1, old - 1, old * 2, 0, -old, old // 2, 2**40])
        elif how == 3 and isinstance(old, str):
            container[key] = rng.choice(names)
        elif how == 4 and isinstance(container, list):
            container.insert(rng.randrange(len(container) + 1), copy.deepcopy(old))
        else:
            other, other_key = rng.choice(found)
            container[key] = copy.deepcopy(other[other_key])
    return doc


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


def deep(rng):
    """JSON nested 10^4 to 10^5 levels (lists or objects), sometimes inside a document."""
    depth = rng.randrange(10_000, 100_000)
    inner = "[" * depth + "]" * depth if rng.random() < 0.5 else '{"a":' * depth + "1" + \
        "}" * depth
    return inner if rng.random() < 0.5 else '{"Nodes": [' + inner + "]}"
