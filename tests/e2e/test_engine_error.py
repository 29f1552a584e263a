"""``sim.model_run.engine_error``: the line that says why the engine stopped, from the
counters the testbench reads (no RTL run: the counters are written here as the engine
would leave them after refusing a task).

The program is the CSTL activation program of the engine regression (relu / sigmoid
tables, ``sim.engine_cstl_programs.table_tiles``) bound for ``small``; task 2 is the first
table task (after the two loads), so the line names task 2, its label ``a0``, ``CSTL0``
and its opcode ``relu``, and the CSTL's cause.
"""

from __future__ import annotations

from npu.engine.seq import Cause
from npu.nmu.model import Cause as UnitCause
from sim.engine_cstl_programs import table_tiles
from sim.model_run import engine_error, task_opcode
from sim.program_run import RtlRun, prepare


def _rtl(**counters):
    base = {"CYCLES": 321, "TASKS_ISSUED": 3, "TASKS_DONE": 2, "ERROR_TASK": 2,
            "ERROR_CAUSE": int(Cause.UNIT_ERROR), "CSTL_CAUSE": UnitCause.OPCODE,
            "NMU_CAUSE": 0}
    base.update(counters)
    return RtlRun("ERROR", False, base, {}, [], [], [], {})


def test_a_refused_cstl_task_is_named_with_its_opcode_and_cause(tmp_path):
    path = tmp_path / "act.nem"
    path.write_text(table_tiles(4, 8, 2, ops=("relu", "sigmoid"))[0])
    prep = prepare(path, "small", seed=0)
    assert task_opcode(prep.program, 0).startswith("SDMA0")  # a copy: no opcode
    assert task_opcode(prep.program, 2) == "CSTL0 relu"
    line = engine_error(prep, _rtl())
    assert line.startswith("the engine stopped with UNIT_ERROR after 321 cycles at task 2 (a0")
    assert "CSTL0 relu refused with cause OPCODE (the unit's RTL does not run this " \
           "operation yet)" in line
    line = engine_error(prep, _rtl(CSTL_CAUSE=UnitCause.REQUANT))
    assert "cause REQUANT (a missing or mismatched requantisation entry or lookup table)" \
        in line
    # another engine cause: no unit cause
    line = engine_error(prep, _rtl(ERROR_CAUSE=int(Cause.BAD_REGION)))
    assert "BAD_REGION" in line and "refused" not in line
    # a budget stop and a clean end
    stopped = RtlRun("BUSY", True, _rtl().counters, {}, [], [], [], {})
    assert engine_error(prep, stopped).startswith("no end within the cycle budget (321")
    n = len(prep.program.tasks)
    done = RtlRun("DONE", False, _rtl(TASKS_ISSUED=n, TASKS_DONE=n).counters, {}, [], [], [],
                  {})
    assert engine_error(prep, done) is None
