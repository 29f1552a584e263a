"""What mutation testing covers: each module, its source file and the fast tests that see it.

One table for ``make mutate`` (``tests/mutation/mutate.py``), its report
(``tests/mutation/report.py``) and the fixed sample that runs in ``make test``
(``tests/mutation/test_mutation_sample.py``). The test files are the fast ones that exercise
the module (unit, property and Amaranth-simulator tests; no cocotb, no fuzzing runs); the
tool narrows them further to the tests that reach each mutated function.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PACKAGE_DIRS", "TARGETS", "Target"]

#: Where each installed package lives in the checkout (``pyproject.toml``'s package find).
PACKAGE_DIRS = {"nac": "sw", "nem": "sw", "npu": "hw"}


@dataclass(frozen=True)
class Target:
    """One module under mutation testing.

    Attributes
    ----------
    module : str
        Dotted module name.
    tests : tuple of str
        Test files (relative to the checkout) run against its mutants.
    kind : str
        ``"sw"`` (target score 90 %) or ``"rtl"`` (the Python of an RTL block, 80 %).
    """

    module: str
    tests: tuple[str, ...]
    kind: str = "sw"

    @property
    def source(self) -> str:
        """The module's file, relative to the checkout."""
        package = self.module.split(".", 1)[0]
        return f"{PACKAGE_DIRS[package]}/{self.module.replace('.', '/')}.py"

    @property
    def target_score(self) -> float:
        """The score the issue asks for (fraction of mutants killed)."""
        return 0.9 if self.kind == "sw" else 0.8


_T = Target
#: The fast tests of the NAC container package, run against the mutants of each of its modules.
_CONTAINER_TESTS = ("tests/nac_container/test_errors.py",
                    "tests/nac_container/test_container_api.py",
                    "tests/nac_container/test_golden.py",
                    "tests/nac_container/test_roundtrip.py",
                    "tests/nac_container/test_container_edges.py")
TARGETS = {t.module: t for t in (
    _T("nem.numerics", ("tests/nem_numerics/test_numerics.py",
                        "tests/nem_numerics/test_numerics_edges.py",
                        "tests/nem_executor/test_ops.py")),
    _T("nem.ops", ("tests/nem_executor/test_ops.py", "tests/nem_executor/test_programs.py",
                   "tests/nem_executor/test_ops_edges.py")),
    _T("nem.taskformat", ("tests/nem_binder/test_taskformat.py",
                          "tests/nem_binder/test_bind_compute.py",
                          "tests/nem_binder/test_binder.py",
                          "tests/nem_binder/test_group_requant.py",
                          "tests/nem_binder/test_taskformat_edges.py")),
    _T("nem.binder", ("tests/nem_binder/test_binder.py", "tests/nem_binder/test_bind_compute.py",
                      "tests/nem_binder/test_tokens.py",
                      "tests/nem_binder/test_group_requant.py",
                      "tests/nem_binder/test_binder_edges.py")),
    _T("nem.hazards", ("tests/nem_toolkit/test_hazards.py", "tests/nem_toolkit/test_nem_corpus.py",
                       "tests/nem_toolkit/test_examples.py", "tests/nem_binder/test_tokens.py")),
    *(_T(f"nac.container.{part}", _CONTAINER_TESTS)
      for part in ("model", "arguments", "cursor", "read_tables", "read_data", "read_ops",
                   "validate", "reader", "writer")),
    _T("nac.schedule", ("tests/nac_compiler/test_schedule.py",
                        "tests/nac_compiler/test_schedule_rules.py")),
    _T("nac.runtime", ("tests/nac_compiler/test_frontend.py",
                       "tests/nac_compiler/test_op_coverage.py",
                       "tests/nac_compiler/test_runtime_hardening.py",
                       "tests/nac_compiler/test_runtime_kernels.py",
                       "tests/nac_compiler/test_zoo.py")),
    _T("npu.nac.decoder", ("tests/hw/test_decoder.py", "tests/hw/test_decoder_vs_container.py",
                           "tests/hw/test_decoder_edges.py"), "rtl"),
    _T("npu.nac.mmap", ("tests/hw/test_mmap.py", "tests/hw/test_mmap_edges.py"), "rtl"),
    _T("npu.cstl.requant", ("tests/hw/test_requant.py", "tests/hw/test_dsp.py"), "rtl"),
    _T("npu.product", ("tests/hw/test_cstl_eltalu.py", "tests/hw/test_requant.py",
                       "tests/hw/test_dsp.py"), "rtl"),
    _T("npu.dsp", ("tests/hw/test_dsp.py",), "rtl"),
    _T("npu.cstl.eltalu", ("tests/hw/test_cstl_eltalu.py",), "rtl"),
    _T("npu.shadow", ("tests/hw/test_shadow.py",), "rtl"),
    _T("npu.nmu.agu", ("tests/hw/test_nmu_agu.py", "tests/hw/test_nmu_agu_step.py",
                       "tests/hw/test_nmu_agu_edges.py"), "rtl"),
    _T("npu.nmu.agu_step", ("tests/hw/test_nmu_agu_step.py", "tests/hw/test_nmu_agu_edges.py"),
       "rtl"),
    _T("npu.nmu.output", ("tests/hw/test_nmu_output.py",), "rtl"),
    _T("npu.engine.seq", ("tests/hw/test_engine_blocks.py", "tests/hw/test_seq.py"), "rtl"),
    _T("npu.bus.dma", ("tests/hw/test_dma.py", "tests/hw/test_dma_edges.py",
                       "tests/hw/test_engine_units.py", "tests/hw/test_copy_units_edges.py"),
       "rtl"),
    _T("npu.bus.ports", ("tests/hw/test_engine_blocks.py", "tests/hw/test_sram_ports.py",
                         "tests/hw/test_fetch_into.py", "tests/hw/test_axi_muxes.py"), "rtl"),
    _T("npu.bus.stream", ("tests/hw/test_stream_fifo.py", "tests/hw/test_quiet_for.py"), "rtl"),
    _T("npu.cstl.store", ("tests/hw/test_cstl_store.py",), "rtl"),
    _T("npu.cstl.nest", ("tests/hw/test_cstl_nest.py",), "rtl"),
    _T("npu.board.axiram", ("tests/board/test_axiram.py",), "rtl"),
    _T("npu.board.protocol", ("tests/board/test_protocol.py", "tests/board/test_bridge.py",
                              "tests/board/test_host.py")),
    _T("npu.board.model", ("tests/board/test_bridge_model.py", "tests/board/test_bridge.py",
                           "tests/board/test_host.py")),
    _T("npu.board.uart", ("tests/board/test_uart.py", "tests/board/test_bridge.py"), "rtl"),
    _T("npu.board.bridge", ("tests/board/test_bridge.py", "tests/board/test_bridge_edges.py"),
       "rtl"),
    _T("npu.board.host", ("tests/board/test_host.py", "tests/board/test_host_cli.py",
                          "tests/board/test_host_link.py")),
    _T("npu.bus.csr", ("tests/hw/test_csr_map.py", "tests/hw/test_csr_bank.py",
                       "tests/hw/test_axilite_slice.py"), "rtl"),
    _T("npu.engine.copy_units", ("tests/hw/test_engine_units.py",
                                 "tests/hw/test_copy_units_edges.py"), "rtl"),
)}
