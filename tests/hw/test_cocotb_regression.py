"""Every cocotb + Verilator regression of ``sim/regression.py``, one pytest test each.

Tests sharing a design parameter set run in the same xdist group, so each Verilator
model is built once per run (and reused across runs from ``build/sim``).
"""

import pytest

from sim.regression import REGRESSIONS
from sim.runner import build, run_cocotb

pytestmark = pytest.mark.cocotb


def _marks(regression):
    marks = [pytest.mark.xdist_group(regression.design.key)]
    if regression.design.params.get("device") == "sim":  # `make sim` runs it (npu sim)
        marks.append(pytest.mark.sim_device)
    return marks


@pytest.mark.parametrize(
    "regression", [pytest.param(r, id=r.id, marks=_marks(r)) for r in REGRESSIONS])
def test_regression(regression):
    tests, failed = run_cocotb(build(regression.design), regression.module)
    assert tests > 0 and failed == 0


def test_waves_written():
    regression = next(r for r in REGRESSIONS if r.design.name == "stream_fifo")
    built = build(regression.design, waves=True)
    run_cocotb(built, regression.module, testcase="no_stalls", name="waves")
    dumps = [p for p in (built.directory / "runs" / "waves").glob("dump.*")
             if p.suffix in (".fst", ".vcd")]
    assert dumps and dumps[0].stat().st_size > 100, dumps
