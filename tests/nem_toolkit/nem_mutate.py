"""Token-level mutations of NEM sources, shared by ``test_nem_fuzz.py`` and ``fuzz/fuzz_nem.py``.

A source is cut into segments, each one token with the whitespace and comments that follow
it (so that deleting or moving a token keeps the text around it intact). A mutation deletes,
duplicates, swaps or replaces segments, or truncates the text at a segment boundary.
"""

from __future__ import annotations

import random
import signal
from contextlib import contextmanager
from pathlib import Path

from nem.diagnostics import DiagnosticSink
from nem.lexer import tokenize

HERE = Path(__file__).parent
CORPUS = HERE / "corpus"
EXAMPLES = HERE / "examples"

#: Replacement tokens: keywords, punctuation, literals, names the checker knows.
VOCABULARY = (
    "const", "buffer", "let", "loop", "endloop", "in", "out", "wait", "include", "device",
    "program", "type_family", "extends", "region", "transfer.async", "store.sync", "relu.async",
    "gemm.sync", "conv2d.async", "deps", "elem", "shape", "layout", "strides", "quant",
    "per_tensor", "per_group", "scale", "topology", "per_engine", "opcode.mandatory",
    "variants", "conformance", "MUST", "MAY", "@resource", "@max_in_flight", "@materialized",
    "L1", "L2", "DDR", "NMU", "CSTL", "SEQ", "i4", "i8", "f16", "=", ",", ":", "(", ")", "[",
    "]", "{", "}", "<", ">", "..", ".", "@", "+", "-", "*", "/", "mod", ";", "0", "1", "7",
    "65536", "99999999999999999999", "0.5", "1.0e-3", '"x"', '"npm_baseline_1.0.nem"', "A1",
    "X", "t1", "i", "#",
)  # fmt: skip


def segments(text: str) -> list[str]:
    """``text`` cut before every token; joining the pieces gives ``text`` back."""
    tokens, _ = tokenize(text, "<fuzz>", DiagnosticSink())
    starts = []
    line_start = [0]
    for k, ch in enumerate(text):
        if ch == "\n":
            line_start.append(k + 1)
    for tok in tokens[:-1]:  # not EOF
        starts.append(line_start[tok.line - 1] + tok.col - 1)
    starts = sorted(set(starts))
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    return [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]


def mutate(text: str, choices: list[tuple[str, int, int, int]]) -> str:
    """Apply mutations; each choice is ``(kind, a, b, c)`` with free integers ``a, b, c``.

    ``kind`` is one of ``delete``, ``duplicate``, ``swap``, ``replace``, ``truncate``; the
    integers pick segments (modulo the count) and the replacement from :data:`VOCABULARY`.
    """
    segs = segments(text)
    for kind, a, b, c in choices:
        if not segs:
            break
        i, j = a % len(segs), b % len(segs)
        if kind == "delete":
            del segs[i]
        elif kind == "duplicate":
            segs.insert(i, segs[i])
        elif kind == "swap":
            segs[i], segs[j] = segs[j], segs[i]
        elif kind == "replace":
            word = VOCABULARY[c % len(VOCABULARY)]
            trail = segs[i][len(segs[i].rstrip()) :] or " "
            segs[i] = word + trail
        elif kind == "truncate":
            segs = segs[:i]
    return "".join(segs)


def random_choices(rng: random.Random, count: int) -> list[tuple[str, int, int, int]]:
    """``count`` random mutations for :func:`mutate`."""
    kinds = ("delete", "duplicate", "swap", "replace", "replace", "truncate")
    return [
        (rng.choice(kinds), rng.randrange(1 << 16), rng.randrange(1 << 16), rng.randrange(1 << 16))
        for _ in range(count)
    ]


def sources() -> list[tuple[str, str, Path]]:
    """(name, text, base directory) of every corpus case and every example file."""
    import sys

    sys.path.insert(0, str(HERE))
    from nem_corpus import load_cases

    out = [(c.name, c.source, CORPUS) for c in load_cases()]
    for path in sorted(EXAMPLES.iterdir()):
        if path.suffix in (".nem", ".cfg"):
            out.append((path.name, path.read_text(), EXAMPLES))
    return out


class Hang(Exception):
    """An input took longer than its time bound."""


@contextmanager
def time_bound(seconds: float):
    """Raise :class:`Hang` in the block after ``seconds`` (SIGALRM; main thread only)."""

    def _alarm(signum, frame):
        raise Hang(f"more than {seconds} s")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
