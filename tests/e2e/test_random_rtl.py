"""Property test: random small bound programs on the engine RTL equal the executor.

``sim.random_programs`` draws a program from a seed (random copies with the token graph
their slot conflicts need, a tiled gemm, a conv2d with random pads / strides / dilations,
CSTL lookup-table activations, casts, pools, binary eltwise ops and last-axis reductions;
random sizes that bind on the device) and runs
it through the ``npu nem sim`` runner: the RTL must end done with every buffer equal to the
executor's run of the same binary, byte for byte. Eight seeds here, one of each kind (one
cocotb run each on the cached ``small`` engine, seed 1 with random AXI pauses); ``npu sim``
runs more of them on the ``sim`` engine (``--random N``).
"""

from __future__ import annotations

import pytest

from sim.program_run import engine_design
from sim.random_programs import KINDS, random_program, run_random


@pytest.mark.cocotb
@pytest.mark.xdist_group(engine_design("small").key)
@pytest.mark.parametrize("seed", range(len(KINDS)))  # one of each kind
def test_random_program_on_the_rtl_equals_the_executor(seed):
    what, prep, rtl, problem = run_random(seed, "small", stalls=seed == 1)
    assert problem is None, f"{what}: {problem}"
    c = rtl.counters
    assert c["TASKS_DONE"] == len(prep.program.tasks), what
    # the program did the kind of work it was drawn for
    kind = KINDS[seed % len(KINDS)]
    prefix = {"copies": "BUSY_DMA", "gemm": "BUSY_NMU", "conv": "BUSY_NMU",
              "table": "BUSY_CSTL", "cast": "BUSY_CSTL", "pool": "BUSY_CSTL",
              "eltwise": "BUSY_CSTL", "reduction": "BUSY_CSTL"}[kind]
    assert sum(v for k, v in c.items() if k.startswith(prefix)) > 0, what


def test_random_programs_bind_on_both_devices(tmp_path):
    """Every kind draws programs that check and bind on small and sim (no RTL)."""
    for device in ("small", "sim"):
        for seed in range(2 * len(KINDS)):
            what, prep = random_program(seed, device, tmp_path)
            assert prep.plan is not None and prep.program.tasks, what
            assert what.startswith(KINDS[seed % len(KINDS)])
