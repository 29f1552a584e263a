"""Random small bound programs for the RTL-against-executor property test (issue 22).

:func:`random_program` draws, from a seed, one program of a kind -- random copies with the
token graph their slot conflicts need (``sim.engine_programs.random_copies``), a tiled int8
gemm (``gemm_tiles``), a conv2d with random pads / strides / dilations (``conv_tiles``),
quantised activations through CSTL lookup tables (``table_tiles``, a random mix of relu,
sigmoid and tanh), CSTL casts (``cast_tiles``), max / average pools with random kernels,
strides and pads (``pool_tiles``), binary eltwise ops with a broadcast row
(``eltwise_tiles``, a random mix of add, sub, mul, min and max) or last-axis reductions
(``reduction_tiles``) -- with random sizes that bind on the device. :func:`run_random`
runs one through the ``npu nem sim`` runner (:mod:`sim.program_run`) and returns the
first difference from the executor, or None.
Used by ``tests/e2e/test_random_rtl.py`` (a few seeds) and ``npu sim`` (more).
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from nem.binder import BindError
from sim.engine_cstl_programs import (
    ELT_OUT,
    Y_QUANT,
    cast_tiles,
    eltwise_tiles,
    pool_tiles,
    reduction_tiles,
    table_tiles,
)
from sim.engine_nmu_programs import conv_tiles, gemm_tiles
from sim.engine_programs import random_copies
from sim.program_run import SimError, compare, expected, prepare, simulate

__all__ = ["KINDS", "random_program", "run_random"]

KINDS = ("copies", "gemm", "conv", "table", "cast", "pool", "eltwise", "reduction")


def _draw(kind, rng, seed):
    r = rng.randint
    if kind == "copies":
        return random_copies(seed), None
    if kind == "gemm":
        m = r(1, 24)
        return gemm_tiles(m, r(1, 40), r(1, 24), r(1, m), seed=seed, bias=rng.random() < 0.6)
    if kind == "conv":
        while True:
            h, w, kh, kw = r(3, 8), r(3, 8), r(1, 3), r(1, 3)
            pads = tuple(r(0, 1) for _ in range(4))
            strides, dils = (r(1, 2), r(1, 2)), (r(1, 2), r(1, 2))
            try:
                return conv_tiles(r(1, 2), h, w, r(1, 12), kh, kw, r(1, 12), pads=pads,
                                  strides=strides, dils=dils, seed=seed,
                                  bias=rng.random() < 0.6)
            except ValueError:  # an empty output: draw again
                continue
    if kind == "table":
        rows = r(1, 12)
        ops = rng.sample(sorted(Y_QUANT), r(1, len(Y_QUANT)))
        return table_tiles(rows, r(1, 24), r(1, rows), ops=tuple(ops))
    if kind == "pool":
        kh, kw = r(1, 3), r(1, 3)
        h, w = r(kh, 7), r(kw, 7)  # at least the kernel: one output row or more
        pads = (r(0, kh - 1), r(0, kw - 1), r(0, kh - 1), r(0, kw - 1))
        strides = (r(1, 2), r(1, 2))
        oh = (h + pads[0] + pads[2] - kh) // strides[0] + 1
        return pool_tiles(rng.choice(["maxpool", "avgpool"]), r(1, 2), h, w, r(1, 12),
                          (kh, kw), strides, pads, r(1, oh),
                          requant=tuple(rng.random() < 0.5 for _ in range(2)))
    if kind == "eltwise":
        rows = r(1, 10)
        ops = rng.sample(sorted(ELT_OUT), r(1, len(ELT_OUT)))
        return eltwise_tiles(rows, r(1, 24), r(1, rows), ops=tuple(ops))
    if kind == "reduction":
        rows = r(1, 10)
        return reduction_tiles(rows, r(1, 24), r(1, rows), seed=seed)
    rows = r(1, 10)
    return cast_tiles(rows, r(1, 16), r(1, rows))


def random_program(seed, device, directory, kind=None):
    """Draw a program that binds on ``device`` and prepare it for a run.

    Parameters
    ----------
    seed : int
    device : str
        ``small`` or ``sim``.
    directory : path-like
        Where the ``.nem`` file is written.
    kind : str, optional
        One of :data:`KINDS`; default ``KINDS[seed % len(KINDS)]``.

    Returns
    -------
    (str, sim.program_run.Prepared)
        A description (kind, seed, file) and the prepared program (random initial bytes
        from the seed, then the generator's inputs, such as an i32 bias, over them).
    """
    kind = kind or KINDS[seed % len(KINDS)]
    rng = random.Random(seed)
    for attempt in range(50):
        text, inputs = _draw(kind, rng, seed + 1000 * attempt)
        path = Path(directory) / f"random-{kind}-{seed}.nem"
        path.write_text(text)
        try:
            prep = prepare(path, device, seed=seed)
        except (SimError, BindError):  # does not fit this device: draw again
            continue
        for name, raw in (inputs or {}).items():
            prep.initial[name][: len(raw)] = raw
        return f"{kind} (seed {seed}, {len(prep.program.tasks)} tasks)", prep
    raise SimError(f"no {kind} program of seed {seed} binds on {device} in 50 draws")


def run_random(seed, device, *, kind=None, stalls=False):
    """Run one random program on the RTL; ``(description, prep, rtl, mismatch or error)``
    where the last item is None when the RTL ends done and equals the executor."""
    with tempfile.TemporaryDirectory() as tmp:
        what, prep = random_program(seed, device, tmp, kind)
    want = expected(prep)
    rtl = simulate(prep, stalls=stalls, seed=seed)
    if rtl.status != "DONE" or rtl.budget_hit:
        from sim.model_run import engine_error

        return what, prep, rtl, engine_error(prep, rtl)
    return what, prep, rtl, compare(prep, want.buffers(), rtl.buffers)
