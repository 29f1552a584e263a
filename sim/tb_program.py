"""cocotb side of ``npu nem sim``: run one bound program on the engine and write back what
happened (the host side, :mod:`sim.program_run`, checks it against the executor).

The job comes as a JSON file named by ``NPU_PROGRAM_JOB`` (written by
:func:`sim.program_run.simulate`): the DDR image (buffers, then the task binary at
``base``) and the initial L2 / L1 contents as raw files, the options (AXI stalls, seed,
cycle budget, watchdog) and the buffer table. The test loads them into the AXI memory
model and the SRAMs, starts the program, and waits until ``STATUS`` is done or error or
the cycle budget runs out (never longer). It then writes the result JSON (status, error
cause and task, the SEQ's state and its last state changes, every CSR counter, each task's
issue and completion cycle) and an ``.npz`` with the final bytes of every buffer, read from
DDR and the SRAMs.
The test passes whatever the program did: judging is the host's job.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
import numpy as np

from npu.engine.config import EngineConfig
from npu.engine.seq import Status
from npu.engine.top import unit_names
from sim.engine_tb import EngineTB


def _read(path):
    return None if path is None else Path(path).read_bytes()


@cocotb.test()
async def run_program(dut):
    job = json.loads(Path(os.environ["NPU_PROGRAM_JOB"]).read_text())
    cfg = EngineConfig.shipped(json.loads(os.environ["NPU_DESIGN_PARAMS"])["device"])
    tb = EngineTB(dut, cfg, stalls=job["stalls"], seed=job["seed"], ddr_size=job["ddr_size"])
    await tb.reset()
    await tb.launch(_read(job["ddr"]), job["base"], watchdog=job["watchdog"],
                    l2=_read(job["l2"]), l1=_read(job["l1"]))
    status = await tb.wait_end(job["budget"])
    budget_hit = status is None
    if budget_hit:
        status = await tb.read("STATUS")
    counters = await tb.counters()
    state = tb.debug_state()
    start = tb.started if tb.started is not None else tb.cycle
    spans = [[s.task, s.unit, s.start - start, None if s.end is None else s.end - start]
             for s in tb.spans]
    result = {
        "status": Status(status).name,
        "budget_hit": budget_hit,
        "counters": counters,
        "seq": state,
        "units": unit_names(cfg),
        "spans": spans,
        "testbench_cycles": tb.cycle - start,
        "seq_states": [[cycle - start, code] for cycle, code in tb.states],
    }
    srams = {"L2": tb.sram("l2"), "L1": tb.sram("l1")}
    final = {}
    for b in job["buffers"]:
        lo, hi = b["address"], b["address"] + b["size"]
        if b["level"] == "DDR":
            final[b["name"]] = np.frombuffer(tb.ram.read(lo, b["size"]), dtype=np.uint8)
        else:
            final[b["name"]] = srams[b["level"]][lo:hi].copy()
    np.savez(job["memory"], **final)
    Path(job["result"]).write_text(json.dumps(result, indent=1))
    dut._log.info("program: %s after %d cycles", result["status"], counters["CYCLES"])
