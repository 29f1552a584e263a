"""A fixed sample of planted bugs that the fast tests must catch (``make mutate`` in small).

Each entry of ``SAMPLE`` is one realistic single-line bug in a module of
``tests/mutation/targets.py``, and the tests that must fail because of it. The bug is
planted in a copy of the module's package in a temporary directory, which goes first on
``PYTHONPATH`` of a pytest subprocess: the checkout is never modified, so this runs safely
beside the rest of the suite under xdist. A sample entry whose original text is no longer
in the source fails with a message saying so (update the entry with the code).

The first six entries are the survivors of issue 25 (each was missed by every test until
a directed test was written); the others are killed mutants from ``make mutate`` runs of the
modules, kept here so that weakening the tests that kill them shows up in ``make test``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.mutation.targets import PACKAGE_DIRS, TARGETS

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Planted:
    """One planted bug: replace ``original`` (exactly once) by ``replacement`` in ``module``."""

    name: str
    module: str
    original: str
    replacement: str
    tests: tuple[str, ...]


SAMPLE = (
    Planted("relu6-truncates", "nem.numerics",
            "y_zero_point + math.floor(6.0 / y_scale + 0.5))",
            "y_zero_point + int(6.0 / y_scale))",
            ("tests/nem_numerics/test_numerics.py::test_relu6_upper_bound_rounds_to_nearest",)),
    Planted("requant-entry-unchecked", "nem.taskformat",
            "    if offset + REQUANT_ENTRY.size > len(data):",
            "    if False:",
            ("tests/nem_binder/test_taskformat.py"
             "::test_decode_requant_truncated_entry_is_a_format_error",)),
    Planted("d-offset-no-lower-bound", "nac.container.arguments",
            "        elif not 0 <= index + d < index:",
            "        elif not index + d < index:",
            ("tests/nac_container/test_errors.py::test_offset_before_the_first_instruction",)),
    Planted("rtl-output-d-zero-accepted", "npu.nac.decoder",
            "                        with m.Elif(is_output):\n"
            "                            m.d.comb += [error_now.eq(1), "
            "cause_now.eq(DecodeError.BAD_OFFSET)]\n",
            "",
            ("tests/hw/test_decoder.py::test_error_causes",)),
    Planted("rtl-free-at-own-tick", "npu.nac.mmap",
            "                    with m.If(target >= cur_tick):\n"
            "                        m.d.comb += [err.eq(1), cause.eq(MmapError.BAD_TARGET)]\n"
            "                    with m.Elif((entry.state == ResultState.NONE) & ~param_held):",
            "                    with m.If(target > cur_tick):\n"
            "                        m.d.comb += [err.eq(1), cause.eq(MmapError.BAD_TARGET)]\n"
            "                    with m.Elif((entry.state == ResultState.NONE) & ~param_held):",
            ("tests/hw/test_mmap.py::test_rules",)),
    Planted("rtl-requant-33-bits", "npu.cstl.requant",
            'shifted = Signal(signed(63), name=f"shifted_{k}")',
            'shifted = Signal(signed(33), name=f"shifted_{k}")',
            ("tests/hw/test_requant.py::test_large_multipliers_and_extreme_accumulators",)),
    Planted("seq-issues-before-its-tokens", "npu.engine.seq",
            "((s.slot_wait[:T] & ~visible) == 0) & free.bit_select",
            "free.bit_select",
            ("tests/hw/test_seq.py::test_decode_ahead",)),
    Planted("dma-busy-after-out-of-range-row", "npu.bus.dma",
            "m.d.sync += [active.eq(0), self._finished.eq(1), self._error.eq(1)]",
            "m.d.sync += [active.eq(1), self._finished.eq(1), self._error.eq(1)]",
            ("tests/hw/test_dma_edges.py::test_rtl_range_check_at_the_boundary",)),
    Planted("sdma-walker-third-level-skips", "npu.engine.copy_units",
            "m.d.sync += [*restart(0), *count(1), row.eq(nb), base2.eq(nb)]",
            "m.d.sync += [*restart(0), *count(2), row.eq(nb), base2.eq(nb)]",
            ("tests/hw/test_copy_units_edges.py"
             "::test_sdma_unit_handshakes_bursts_errors_and_high_ddr",)),
    Planted("write-mux-data-from-client-0", "npu.bus.ports",
            "            with m.If(owner == k):\n"
            "                m.d.comb += [self.wr_data.valid.eq(d.valid), "
            "self.wr_data.payload.eq(d.payload),",
            "            with m.If(k == 0):\n"
            "                m.d.comb += [self.wr_data.valid.eq(d.valid), "
            "self.wr_data.payload.eq(d.payload),",
            ("tests/hw/test_axi_muxes.py::test_write_mux_against_model",)),
    Planted("requant-rounds-down", "nem.numerics",
            "scaled = (acc * m + (np.int64(1) << (t - 1))) >> t",
            "scaled = (acc * m) >> t",
            ("tests/nem_numerics/test_numerics.py::test_requantize_matches_exact_rational",)),
    Planted("loop-uses-only-last-statement", "nem.hazards",
            "            out |= _uses(s)",
            "            out = _uses(s)",
            ("tests/nem_toolkit/test_hazards.py::test_tokens_used_inside_a_loop_end_after_it",)),
    Planted("forward-over-a-regular-input", "nac.schedule",
            "        between = range(i + 1, user) if user is not None else ()",
            "        between = range(i + 2, user) if user is not None else ()",
            ("tests/nac_compiler/test_schedule_rules.py::test_forward_only_over_parameter_loads",)),
    Planted("ancestor-offset-sign", "nac.container.arguments",
            "    return tuple(Argument(False, index + d) if d else",
            "    return tuple(Argument(False, index - d) if d else",
            ("tests/nac_container/test_container_api.py::test_gather_arguments_by_hand",)),
    Planted("bridge-model-inserts-written-words", "npu.board.model",
            "            self.memory[address:address + len(data)] = data",
            "            self.memory[address:address - len(data)] = data",
            ("tests/board/test_bridge_model.py::test_memory_writes_and_reads_at_the_edges",)),
    Planted("uart-samples-a-cycle-early", "npu.board.uart",
            "                    m.d.sync += count.eq(d // 2 - 1)",
            "                    m.d.sync += count.eq(d // 2 - 2)",
            ("tests/board/test_uart.py::test_rx_samples_each_bit_at_its_middle",)),
    Planted("host-reads-past-the-deadline", "npu.board.host",
            "        while time.monotonic() < deadline:",
            "        while time.monotonic() <= deadline:",
            ("tests/board/test_host_link.py::test_the_deadline_on_a_stand_in_clock",)),
)


def _module_file(root: Path, module: str) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def _overlay(tmp_path: Path, planted: Planted) -> Path:
    """Copy the package of ``planted.module`` into *tmp_path* with the bug planted."""
    package = planted.module.split(".", 1)[0]
    shutil.copytree(ROOT / PACKAGE_DIRS[package] / package, tmp_path / package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    path = _module_file(tmp_path, planted.module)
    text = path.read_text()
    count = text.count(planted.original)
    source = TARGETS[planted.module].source
    assert count == 1, (f"sample mutant {planted.name}: its original text occurs {count} times "
                        f"in {source} (expected once); update SAMPLE in {Path(__file__).name}")
    path.write_text(text.replace(planted.original, planted.replacement))
    return tmp_path


def _run(overlay: Path, args: list[str]) -> subprocess.CompletedProcess:
    """Run Python with *overlay* first on the import path, in *overlay* as the working
    directory (so Hypothesis keeps its example database there, not in the checkout)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "COV_CORE_"))}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(overlay), str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, *args], cwd=overlay, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def _pytest_args(tests):
    return ["-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT),
            "-x", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "--hypothesis-seed=0",
            *(str(ROOT / t) for t in tests)]


def test_sample_covers_every_kind_and_names_real_tests():
    assert len({p.name for p in SAMPLE}) == len(SAMPLE)
    for planted in SAMPLE:
        assert planted.module in TARGETS, planted.module
        for test in planted.tests:
            assert (ROOT / test.split("::")[0]).is_file(), test


def test_overlay_shadows_the_checkout(tmp_path):
    # Without this, every planted bug would be "caught" or "missed" on the real code.
    planted = SAMPLE[0]
    overlay = _overlay(tmp_path, planted)
    proc = _run(overlay, ["-c", f"import {planted.module} as m; print(m.__file__)"])
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == _module_file(overlay, planted.module)


@pytest.mark.parametrize("planted", SAMPLE, ids=[p.name for p in SAMPLE])
def test_planted_bug_is_caught(planted, tmp_path):
    overlay = _overlay(tmp_path, planted)
    proc = _run(overlay, _pytest_args(planted.tests))
    # pytest's exit status 1 means tests ran and failed; 2-5 (interrupted, internal error,
    # usage error, nothing collected) would not show that the bug was seen.
    assert proc.returncode == 1, (
        f"planted bug {planted.name} in {TARGETS[planted.module].source} was not caught by "
        f"{', '.join(planted.tests)} (pytest exit {proc.returncode}):\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
