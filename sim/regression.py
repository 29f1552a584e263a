"""The cocotb regression: every RTL block, each with the parameter sets it is tested at.

``npu sim`` (``make sim``) runs all of them and prints a summary; pytest runs each one as a
test (``tests/hw/test_cocotb_regression.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sim.runner import Design, SimulationFailed, build, run_cocotb

__all__ = ["REGRESSIONS", "Regression", "RegressionResult", "run_regression"]


@dataclass(frozen=True)
class Regression:
    """One cocotb test module run against one design parameter set."""

    design: Design
    module: str

    @property
    def id(self) -> str:
        params = ",".join(f"{k}={v}" for k, v in sorted(self.design.params.items()))
        return f"{self.design.name}[{params}]"


REGRESSIONS: tuple[Regression, ...] = (
    Regression(Design("sram", "npu.bus.memory:SRAM", {"data_width": 32, "depth": 64}),
               "sim.tb_memory"),
    Regression(Design("sram", "npu.bus.memory:SRAM", {"data_width": 64, "depth": 512}),
               "sim.tb_memory"),
    Regression(Design("stream_fifo", "npu.bus.stream:StreamFIFO", {"width": 16, "depth": 4}),
               "sim.tb_stream_fifo"),
    Regression(Design("nac_decoder", "npu.nac.decoder:InstructionDecoder",
                      {"max_args": 8, "max_consts": 8}), "sim.tb_decoder"),
    Regression(Design("nac_decoder", "npu.nac.decoder:InstructionDecoder",
                      {"max_args": 3, "max_consts": 2}), "sim.tb_decoder"),
    Regression(Design("nac_mmap", "npu.nac.mmap:MmapCoprocessor",
                      {"n_slots": 8, "max_params": 32, "max_instructions": 64}),
               "sim.tb_mmap"),
    Regression(Design("nac_frontend", "npu.nac.frontend:NacFrontEnd",
                      {"max_args": 6, "max_consts": 4, "n_slots": 16, "max_params": 32,
                       "max_instructions": 64}), "sim.tb_nac_frontend"),
    # The same with the decoder's two-byte input (the width the FPGA figures are for).
    Regression(Design("nac_frontend", "npu.nac.frontend:NacFrontEnd",
                      {"max_args": 6, "max_consts": 4, "width": 2, "n_slots": 16,
                       "max_params": 32, "max_instructions": 64}), "sim.tb_nac_frontend"),
    Regression(Design("axi_port", "npu.bus.axi:AxiBurstPort",
                      {"addr_width": 32, "data_width": 64, "max_outstanding": 4}),
               "sim.tb_axi"),
    Regression(Design("csr_demo", "sim.csr_demo:CsrDemo", {}), "sim.tb_csr"),
    Regression(Design("requant", "npu.cstl.requant:RequantStage",
                      {"lanes": 4, "rows": 4, "out_type": "i8"}), "sim.tb_requant"),
    # The NEM engine of the shipped devices (hw/npu/devices), bound programs vs executor.
    Regression(Design("nem_engine", "npu.engine.top:NemEngine", {"device": "small"}),
               "sim.tb_engine"),
    Regression(Design("nem_engine", "npu.engine.top:NemEngine", {"device": "sim"}),
               "sim.tb_engine"),
    Regression(Design("nem_engine", "npu.engine.top:NemEngine", {"device": "tiny"}),
               "sim.tb_engine"),
)


@dataclass(frozen=True)
class RegressionResult:
    regression: Regression
    tests: int
    failed: int
    seconds: float
    error: str | None = None


def run_regression(regression: Regression, *, seed: int | None = None) -> RegressionResult:
    """Build (or reuse) and run one regression; failures are returned, not raised."""
    start = time.monotonic()
    try:
        built = build(regression.design)
        tests, failed = run_cocotb(built, regression.module, seed=seed)
        return RegressionResult(regression, tests, failed, time.monotonic() - start)
    except SimulationFailed as exc:
        return RegressionResult(regression, 0, 1, time.monotonic() - start, str(exc))
