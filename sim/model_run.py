"""A compiled model (a back-end build directory) on the engine RTL: ``npu run DIR --on rtl``.

:func:`prepare_model` quantises the inputs into the build's memory image
(``nem.build_dir.prepare_run``) and turns it into the :class:`sim.program_run.Prepared` that
``npu nem sim`` runs; :func:`run_model` runs the bound binary on the RTL through the same
runner (:func:`sim.program_run.simulate`), checks every buffer against the executor byte for
byte and dequantises the RTL's outputs. A run the engine stops with an error names the
task, its unit and opcode, the layer of the model it belongs to and the unit's cause
(:func:`engine_error`): a CSTL that does not run an operation yet reports ``UNIT_ERROR``
with ``CSTL_CAUSE`` ``OPCODE``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from nem.binder import device_hash
from nem.build_dir import decode_outputs, execute_prepared, prepare_run
from nem.executor import RunResult
from nem.taskformat import OPCODES, REGISTER_MAPS, Unit
from npu.engine.config import DEVICES, load_device
from sim.program_run import (
    DEFAULT_BUDGET,
    Mismatch,
    Prepared,
    RtlRun,
    SimError,
    compare,
    simulate,
)

__all__ = ["ModelRun", "compare_outputs", "engine_error", "prepare_model", "run_model",
           "task_opcode"]


def _whole(raw, size):
    out = np.zeros(size, dtype=np.uint8)
    raw = np.asarray(raw, dtype=np.uint8).reshape(-1)[:size]
    out[: raw.size] = raw
    return out


def prepare_model(build_dir, inputs):
    """The build's binary and initial memory (inputs quantised) as a ``Prepared`` program.

    Parameters
    ----------
    build_dir : path-like
        A build directory of ``npu compile MODEL --target small|sim``.
    inputs : list of numpy.ndarray
        Float inputs in the model's layout.

    Returns
    -------
    (sim.program_run.Prepared, nem.build_dir.PreparedRun)

    Raises
    ------
    nem.build_dir.BuildError
        A missing or inconsistent file of the build directory.
    SimError
        A build for a device the RTL is not generated for.
    """
    run = prepare_run(build_dir, inputs)
    target = run.manifest.get("target")
    if target not in DEVICES:
        raise SimError(f"{run.directory}: built for device file {target!r}; the engine RTL is "
                       f"generated for the shipped devices ({', '.join(DEVICES)}): compile "
                       f"with --target {' or --target '.join(DEVICES)}")
    if run.program.device_hash != device_hash(load_device(target)):
        raise SimError(f"{run.directory / run.manifest['files']['binary']}: bound for device "
                       f"{run.device.name}, not the shipped {target} engine the RTL is "
                       f"generated from (its device hash differs; the SEQ would refuse it "
                       f"with BAD_DEVICE): compile it again with npu compile --target {target}")
    sizes = {b.name: b.size for b in run.program.buffers}
    initial = {n: _whole(v, sizes[n]) for n, v in run.initial.items()}
    prep = Prepared(str(run.directory), target, run.program, run.binary, run.plan, None,
                    run.labels, initial, "quantised inputs + memory image",
                    run.program_address)
    return prep, run


def task_opcode(program, k) -> str:
    """``"CSTL0 maxpool"``-style description of task ``k``'s unit and opcode."""
    task = program.tasks[k]
    name = f"{task.unit.name}{task.instance}"
    regs = REGISTER_MAPS[task.unit]
    if all(r.name != "OPCODE" for r in regs.registers):  # a copy unit
        return name
    index = regs.index("OPCODE")
    code = next((v for i, v in task.writes if i == index), None)
    if code is None:
        return name
    return f"{name} {OPCODES[code] if 0 <= code < len(OPCODES) else f'opcode {code}'}"


def _unit_cause(rtl, unit):
    from npu.nmu.model import Cause

    names = {v: k for k, v in vars(Cause).items() if k.isupper()}
    register = {Unit.CSTL: "CSTL_CAUSE", Unit.NMU: "NMU_CAUSE"}.get(unit)
    if register is None or register not in rtl.counters:
        return None
    code = rtl.counters[register]
    return names.get(code, str(code))


#: What a unit's cause means for a user, when the unit refused a task.
CAUSE_MEANING = {
    "OPCODE": "the unit's RTL does not run this operation yet",
    "TYPE": "operand element types or memories the unit's RTL does not take",
    "LAYOUT": "a shape, rank, broadcast or attribute the unit's RTL does not take",
    "SIZE": "larger than the unit's buffers",
    "REQUANT": "a missing or mismatched requantisation entry or lookup table",
}


def engine_error(prep, rtl, manifest=None) -> str | None:
    """One line saying why the engine stopped (None when it ended done).

    Names the status, the engine's ``ERROR_CAUSE`` and task (label, unit and opcode); for
    ``UNIT_ERROR`` the unit's own cause (``CSTL_CAUSE`` / ``NMU_CAUSE``) and its meaning;
    with a build's ``manifest`` the model layer the task belongs to.
    """
    c = rtl.counters
    n = len(prep.program.tasks)
    if rtl.status == "DONE" and not rtl.budget_hit:
        if c["TASKS_ISSUED"] == c["TASKS_DONE"] == n:
            return None
        return f"STATUS DONE but {c['TASKS_DONE']} of {n} tasks done"
    if rtl.budget_hit:
        return (f"no end within the cycle budget ({c['CYCLES']} cycles, STATUS {rtl.status}; "
                f"{c['TASKS_DONE']} of {n} tasks done)")
    k = c["ERROR_TASK"]
    line = f"the engine stopped with {rtl.cause} after {c['CYCLES']} cycles"
    if 0 <= k < n:
        label = prep.labels[k] if k < len(prep.labels) else f"task {k}"
        line += f" at task {k} ({label}): {task_opcode(prep.program, k)}"
        if rtl.cause == "UNIT_ERROR":
            cause = _unit_cause(rtl, prep.program.tasks[k].unit)
            if cause is not None:
                line += f" refused with cause {cause}"
                if cause in CAUSE_MEANING:
                    line += f" ({CAUSE_MEANING[cause]})"
        owners = (manifest or {}).get("task_layers") or []
        if k < len(owners):
            layer = manifest["layers"][owners[k][0]]
            line += f"; model layer: instruction {layer['instruction']} {layer['op']}"
    return line


@dataclass
class ModelRun:
    """A compiled model's run on the RTL, beside the executor's run of the same binary."""

    prep: Prepared
    manifest: dict
    rtl: RtlRun
    executor: RunResult
    outputs: list | None  # dequantised RTL outputs (None when the engine did not end done)
    executor_outputs: list
    error: str | None  # engine_error's line
    mismatch: Mismatch | None
    seconds: float  # wall time of the RTL run (build check + cocotb)

    @property
    def ok(self) -> bool:
        """The RTL ended done and equals the executor byte for byte."""
        return self.error is None and self.mismatch is None

    @property
    def ratio(self) -> float:
        """RTL cycles / executor cycles."""
        cycles = self.executor.total_cycles
        return self.rtl.counters["CYCLES"] / cycles if cycles else float("nan")


def run_model(build_dir, inputs, *, stalls=False, budget=DEFAULT_BUDGET, watchdog=None,
              seed=1) -> ModelRun:
    """Run a build directory's binary on the RTL and check it against the executor.

    Parameters
    ----------
    build_dir : path-like
    inputs : list of numpy.ndarray
        Float inputs in the model's layout.
    stalls : bool
        Random pauses on every AXI channel.
    budget, watchdog, seed
        As :func:`sim.program_run.simulate`.

    Returns
    -------
    ModelRun
        ``ok`` when the engine ended done and every buffer equals the executor's.
    """
    prep, run = prepare_model(build_dir, inputs)
    want = execute_prepared(run)
    began = time.monotonic()
    rtl = simulate(prep, stalls=stalls, budget=budget, watchdog=watchdog, seed=seed)
    seconds = time.monotonic() - began
    error = engine_error(prep, rtl, run.manifest)
    mismatch = None if error else compare(prep, want.buffers(), rtl.buffers)
    outputs = None if error else decode_outputs(run.manifest, rtl.buffers.__getitem__)
    return ModelRun(prep, run.manifest, rtl, want, outputs,
                    decode_outputs(run.manifest, want.memory.buffer), error, mismatch, seconds)


def compare_outputs(reference, outputs):
    """Largest absolute error and top-1 agreement of ``outputs`` against ``reference``.

    Parameters
    ----------
    reference, outputs : list of numpy.ndarray
        One array per model output (float values, or i32 class indices of an argmax head).

    Returns
    -------
    list of dict
        Per output: ``max_error`` (None for class indices), ``scale`` (the largest
        ``|reference|``), ``agree`` and ``rows``: rows whose argmax over the flattened
        non-batch axes (or whose class index) is the same.
    """
    rows = []
    for ref, out in zip(reference, outputs, strict=True):
        ref, out = np.asarray(ref), np.asarray(out)
        if np.issubdtype(out.dtype, np.integer):
            a, b = ref.reshape(-1), out.reshape(-1)
            rows.append({"max_error": None, "scale": None, "agree": int((a == b).sum()),
                         "rows": int(a.size)})
            continue
        n = ref.shape[0] if ref.ndim > 1 else 1
        a, b = ref.reshape(n, -1), out.reshape(n, -1)
        rows.append({"max_error": float(np.abs(a - b).max()) if a.size else 0.0,
                     "scale": float(np.abs(a).max()) if a.size else 0.0,
                     "agree": int((a.argmax(1) == b.argmax(1)).sum()), "rows": int(n)})
    return rows
