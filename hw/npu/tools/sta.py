"""Static timing of a routed design from nextpnr's SDF: every endpoint's worst path, by unit.

nextpnr prints the one worst path per clock and a histogram of slacks; what a timing
programme needs is where the many long paths are. ``nextpnr-ecp5 --sdf FILE`` (written by
:func:`npu.tools.synth.ecp5_pnr` with ``sdf=True`` and by the board build) holds every
delay nextpnr's own analysis uses: the routed nets as ``INTERCONNECT`` arcs, each cell's
combinational and clock-to-output arcs as ``IOPATH``, its setup times as ``SETUPHOLD`` /
``SETUP`` checks. This module reads that file (:func:`read_sdf`), finds the longest path
into every endpoint (:func:`analyse`: clock-to-output, then arcs, plus the setup time;
the slowest corner of each delay triple, as nextpnr's setup analysis) and groups the
endpoints by the hierarchy of their cell names (:func:`group_by_unit`).

What it models: one clock edge per domain (a domain is the pin that drives the cells'
clock pins, ``(ideal)`` when the clock is not routed, as out of context); paths between
two domains are counted, not timed; ports are not timed (as out of context). Clock skew
and clock-network delay are not added (nextpnr's paths start at clock-to-output too).
The worst path it finds is nextpnr's critical path (``tests/hw/test_sta.py`` places and
routes a design and compares the two).

Cell names come from yosys' flattening: a cell is named after the net it drives, so the
unit of a cell is the hierarchy of that net (``cstl_0.core.elt_walk.xb3_TRELLIS_FF_Q_5``
is in ``cstl_0``, or ``cstl_0.core`` at depth 2); cells nextpnr creates while packing
(``$nextpnr_CCU2C_147``) and yosys' own (``$abc$...``) have no hierarchy.

Before placement (:func:`estimate_wires`): ``nextpnr-ecp5 --pack-only --sdf FILE`` writes
the packed cells' delays with every net at zero. Giving each net the delay that routed
nets of its fanout have on the board's ECP5-85F (:func:`wire_estimate`) makes a timing
estimate of the netlist alone: no placer seed moves it, and a netlist synthesised from the
same logic under other signal names gives the same numbers, where routed seeds of one
netlist differ by several MHz (``docs/fpga.md``, "An estimate before placement").

Command line: ``npu sta FILE.sdf [--freq MHZ] [--depth N] [--paths K] [--estimate]``.
"""

from __future__ import annotations

import math
import re
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Endpoint", "SdfDesign", "SdfError", "StaResult", "analyse", "estimate_wires",
           "format_report", "group_by_unit", "negative_slack", "read_sdf", "unit_of",
           "wire_estimate"]

#: Picoseconds per ``TIMESCALE`` unit.
_UNITS = {"fs": 1e-3, "ps": 1.0, "ns": 1e3, "us": 1e6}
#: Statements read for their value, and structure lines (an opening keyword alone).
_HEADER = {"SDFVERSION", "DESIGN", "DATE", "VENDOR", "PROGRAM", "VERSION", "VOLTAGE",
           "PROCESS", "TEMPERATURE"}
_BLOCKS = {"DELAYFILE", "CELL", "DELAY", "ABSOLUTE", "INCREMENT", "TIMINGCHECK"}
#: Timing checks that are not a setup time (hold-side or pulse checks): skipped.
_OTHER_CHECKS = {"HOLD", "WIDTH", "PERIOD", "SKEW", "REMOVAL", "NOCHANGE", "RECREM"}

_TRIPLE = r"\((?:[^()]*)\)"
_PORT = r"(?:\((?:posedge|negedge)\s+[^\s()]+\)|(?:[^\s()\\]|\\.)+)"
_RE_KEYWORD = re.compile(r"\s*\(\s*([A-Z]+)\b")
_RE_TIMESCALE = re.compile(r"\s*\(TIMESCALE\s+(1|10|100)(?:\.0*)?\s*(fs|ps|ns|us)\s*\)\s*$")
_RE_DIVIDER = re.compile(r"\s*\(DIVIDER\s+([./])\s*\)\s*$")
_RE_CELLTYPE = re.compile(r'\s*\(CELLTYPE\s+"([^"]*)"\s*\)\s*$')
_RE_INSTANCE = re.compile(r"\s*\(INSTANCE\s*((?:[^\s()\\]|\\.)*)\s*\)\s*$")
_RE_INTERCONNECT = re.compile(rf"\s*\(INTERCONNECT\s+({_PORT})\s+({_PORT})\s+({_TRIPLE})"
                              rf"(?:\s*({_TRIPLE}))?\s*\)\s*$")
_RE_IOPATH = re.compile(rf"\s*\(IOPATH\s+({_PORT})\s+({_PORT})\s+({_TRIPLE})"
                        rf"(?:\s*({_TRIPLE}))?\s*\)\s*$")
_RE_SETUPHOLD = re.compile(rf"\s*\(SETUPHOLD\s+({_PORT})\s+({_PORT})\s+({_TRIPLE})"
                           rf"\s*({_TRIPLE})\s*\)\s*$")
_RE_SETUP = re.compile(rf"\s*\((?:SETUP|RECOVERY)\s+({_PORT})\s+({_PORT})\s+({_TRIPLE})"
                       rf"\s*\)\s*$")
_RE_EDGE = re.compile(r"\((?:posedge|negedge)\s+([^\s()]+)\)")
_RE_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


class SdfError(ValueError):
    """An SDF file that cannot be read; the message names the file and line."""


@dataclass
class SdfDesign:
    """The timing graph of an SDF file: pins (``instance/pin`` as written, escapes kept)
    numbered in ``names``; delays in picoseconds (the slowest corner)."""

    names: list = field(default_factory=list)
    #: (from pin, to pin, delay): routed nets and cells' combinational arcs
    arcs: list = field(default_factory=list)
    #: output pin -> (clock pin, clock-to-output delay)
    launches: dict = field(default_factory=dict)
    #: data pin -> (clock pin, setup time)
    checks: dict = field(default_factory=dict)
    #: pin -> the pin whose net drives it (from INTERCONNECT)
    driver: dict = field(default_factory=dict)
    divider: str = "/"
    _ids: dict = field(default_factory=dict, repr=False)

    def pin(self, name):
        """The number of pin ``name`` (added when new)."""
        i = self._ids.get(name)
        if i is None:
            i = self._ids[name] = len(self.names)
            self.names.append(name)
        return i


def _need(regex, line, where, want):
    """``regex``'s match of a statement ``line``, else an SdfError at ``where``."""
    m = regex.match(line)
    if not m:
        key = _RE_KEYWORD.match(line).group(1)
        raise SdfError(f"{where}: {key} {line[:60]!r}: {want}")
    return m


def _rise_fall(m, where, scale):
    """The slower of a statement's rise and (optional) fall delays: groups 3 and 4."""
    rise = _delay(m.group(3), where, scale)
    return _worst(rise, _delay(m.group(4), where, scale) if m.group(4) else None)


def _delay(text, where, scale):
    """The slowest corner of a delay value ``(min:typ:max)``, ``(v)`` or ``()`` (None), in
    picoseconds."""
    body = text[1:-1].strip()
    if not body:
        return None
    values = []
    for part in body.split(":"):
        part = part.strip()
        if not part:
            continue
        if not _RE_NUMBER.fullmatch(part):
            raise SdfError(f"{where}: delay {text!r}: {part!r} is not a number")
        values.append(float(part))
    if not values or len(body.split(":")) not in (1, 3):
        raise SdfError(f"{where}: delay {text!r}: want (value) or (min:typ:max)")
    return max(values) * scale


def _worst(a, b):
    return a if b is None else b if a is None else max(a, b)


def _split_port(text, divider):
    """``instance`` and ``pin`` of an INTERCONNECT port (the last unescaped divider)."""
    for i in range(len(text) - 1, -1, -1):
        if text[i] == divider and (i == 0 or text[i - 1] != "\\"):
            return text[:i], text[i + 1:]
    return "", text


def _edge_pin(text):
    """The pin of ``(posedge CLK)`` or ``CLK``."""
    m = _RE_EDGE.fullmatch(text)
    return m.group(1) if m else text


def read_sdf(source):
    """Read an SDF file as nextpnr writes it (one statement per line).

    Parameters
    ----------
    source : path or str
        A file, or the text itself when it contains a newline.

    Returns
    -------
    SdfDesign

    Raises
    ------
    SdfError
        An unknown statement, a malformed delay or port, a cell statement outside a cell,
        unbalanced parentheses (a cut file); the message names the file and line.
    """
    if isinstance(source, str) and "\n" in source:
        path, lines = "<sdf>", source.splitlines()
    else:
        path = Path(source)
        try:
            lines = path.read_text(encoding="utf-8", errors="strict").splitlines()
        except UnicodeDecodeError as exc:
            raise SdfError(f"{path}: byte {exc.start}: not UTF-8 text") from None
    d = SdfDesign()
    scale = 1.0
    depth = 0
    inst = None            # the current CELL's instance (None outside a cell)
    in_cell = False
    seen_file = False
    for lineno, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped:
            continue
        where = f"{path}:{lineno}"
        opens, closes = _count_parens(stripped)
        if stripped.strip(")").strip() == "":
            depth -= closes
            if depth < 0:
                raise SdfError(f"{where}: ')' closes nothing")
            if in_cell and depth < 2:
                in_cell, inst = False, None
            continue
        km = _RE_KEYWORD.match(stripped)
        if not km:
            raise SdfError(f"{where}: expected '(KEYWORD', got {stripped[:40]!r}")
        key = km.group(1)
        if not seen_file and key != "DELAYFILE":
            raise SdfError(f"{where}: not an SDF file (no DELAYFILE first)")
        if seen_file and depth == 0:
            raise SdfError(f"{where}: {key} after the end of the DELAYFILE")
        if key in _BLOCKS and stripped == f"({key}":
            if key == "DELAYFILE":
                if seen_file:
                    raise SdfError(f"{where}: a second DELAYFILE")
                seen_file = True
            elif key == "CELL":
                if depth != 1:
                    raise SdfError(f"{where}: CELL inside another statement")
                in_cell, inst = True, None
            elif not in_cell:
                raise SdfError(f"{where}: {key} outside a CELL")
            depth += 1
            continue
        if opens != closes:
            raise SdfError(f"{where}: {key}: {opens} '(' against {closes} ')' "
                           f"(a statement over several lines, or cut)")
        if key in _HEADER:
            continue
        if key == "TIMESCALE":
            m = _need(_RE_TIMESCALE, stripped, where, "want 1, 10 or 100 and fs, ps, ns or us")
            scale = int(m.group(1)) * _UNITS[m.group(2)]
            continue
        if key == "DIVIDER":
            d.divider = _need(_RE_DIVIDER, stripped, where, "want / or .").group(1)
            continue
        if not in_cell:
            raise SdfError(f"{where}: {key} outside a CELL")
        if key == "CELLTYPE":
            _need(_RE_CELLTYPE, stripped, where, "want a quoted name")
            continue
        if key == "INSTANCE":
            inst = _need(_RE_INSTANCE, stripped, where, "want one name").group(1)
            continue
        if inst is None:
            raise SdfError(f"{where}: {key} before the cell's INSTANCE")
        if key == "INTERCONNECT":
            m = _need(_RE_INTERCONNECT, stripped, where, "want two ports and one or two delays")
            src, dst = (_join(inst, p, d.divider) for p in m.group(1, 2))
            delay = _rise_fall(m, where, scale)
            a, b = d.pin(src), d.pin(dst)
            d.arcs.append((a, b, delay or 0.0))
            d.driver[b] = a
            continue
        if key == "IOPATH":
            m = _need(_RE_IOPATH, stripped, where, "want two pins and one or two delays")
            src, dst = _edge_pin(m.group(1)), m.group(2)
            delay = _rise_fall(m, where, scale)
            d.arcs.append((d.pin(_join(inst, src, d.divider)),
                           d.pin(_join(inst, dst, d.divider)), delay or 0.0))
            continue
        if key in ("SETUPHOLD", "SETUP", "RECOVERY"):
            m = _need(_RE_SETUPHOLD if key == "SETUPHOLD" else _RE_SETUP, stripped, where,
                      "want a data pin, a clock pin and the delays")
            data, clock = _edge_pin(m.group(1)), _edge_pin(m.group(2))
            setup = _delay(m.group(3), where, scale) or 0.0
            node = d.pin(_join(inst, data, d.divider))
            clk = d.pin(_join(inst, clock, d.divider))
            old = d.checks.get(node)
            if old is None or setup > old[1]:
                d.checks[node] = (clk, setup)
            continue
        if key in _OTHER_CHECKS:
            continue
        raise SdfError(f"{where}: unknown statement {key!r}")
    if not seen_file:
        raise SdfError(f"{path}: empty: no DELAYFILE")
    if depth != 0:
        raise SdfError(f"{path}:{len(lines)}: cut: {depth} statement(s) not closed at the "
                       f"end of the file")
    _clock_arcs(d)
    return d


def _count_parens(text):
    """Unescaped '(' and ')' in ``text``."""
    opens = closes = 0
    escaped = False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "(":
            opens += 1
        elif ch == ")":
            closes += 1
    return opens, closes


def _join(inst, pin, divider):
    return f"{inst}{divider}{pin}" if inst else pin


def _clock_arcs(d):
    """Arcs that start at a clock pin (the clock of a check in the same cell) are
    clock-to-output: moved from ``arcs`` to ``launches``."""
    clocks = {clk for clk, _ in d.checks.values()}
    keep = []
    for a, b, delay in d.arcs:
        if a in clocks:
            old = d.launches.get(b)
            if old is None or delay > old[1]:
                d.launches[b] = (a, delay)
        else:
            keep.append((a, b, delay))
    d.arcs = keep


#: :func:`wire_estimate`'s table (ps): the median routed delay of a net's sink by the net's
#: fanout, in powers of two (1, 2-3, 4-7, ..., 128-255, 256 and more sinks).
_WIRE_BY_FANOUT = (838, 945, 1215, 1553, 1946, 1796, 1892, 2353, 3152)
#: Connections inside a slice or a carry chain, not routed: their delay (ps) by the sink's
#: pin, as every routed build has them (the carry chain, a LUT into its slice's PFUMX, the
#: PFUMX pair into an L6MUX21, a LUT into its slice's flip-flop, the distributed RAM's
#: write address from its slice).
_DEDICATED_SINKS = {"FCI": 0.0, "F1": 0.0, "FXA": 0.0, "FXB": 0.0, "DI": 130.0,
                    "WAD0": 80.0, "WAD1": 80.0, "WAD2": 80.0, "WAD3": 80.0}
#: Drivers of a global network (the clock and reset buffers): no routing delay.
_GLOBAL_DRIVERS = ("CLKO", "CLKOP")


def wire_estimate(fanout):
    """The delay (ps) of a routed net with ``fanout`` sinks, before placement.

    Measured on the board top (the tiny engine with 64 KiB at ab29e0c, placer seeds 2, 3
    and 4 of ``docs/fpga.md``'s 2026-12-07 builds, 520,174 routed sinks apart from
    clocks, global networks and the connections inside a slice): the median delay of a
    sink by its net's fanout is 838 ps for one sink, 945 for 2-3, 1,215 for 4-7, 1,553
    for 8-15, 1,946 for 16-31, 1,796 for 32-63, 1,892 for 64-127, 2,353 for 128-255 and
    3,152 for more.
    """
    if fanout < 1:
        raise ValueError(f"fanout {fanout}: a net has at least one sink")
    return float(_WIRE_BY_FANOUT[min(int(math.log2(fanout)), len(_WIRE_BY_FANOUT) - 1)])


def _pin_of(name, divider):
    return name.rsplit(divider, 1)[-1]


def estimate_wires(design, model=wire_estimate):
    """``design`` (:func:`read_sdf`) with every routed net's delay replaced by
    ``model(fanout)`` (the routed sinks of its driving pin), for an SDF written before
    placement (``nextpnr-ecp5 --pack-only --sdf``). Cells' delays are kept; connections
    that are not routed get their fixed delay (the carry chain's ``FCI``, the slice's
    multiplexers ``F1`` / ``FXA`` / ``FXB``, its flip-flops' ``DI``, the distributed
    RAM's ``WAD*``), and nets driven by a global buffer (``CLKO``) none. Returns a new
    design; ``design`` is unchanged."""
    div = design.divider
    fanout = Counter(a for b, a in design.driver.items()
                     if _pin_of(design.names[b], div) not in _DEDICATED_SINKS)
    arcs = []
    for a, b, delay in design.arcs:
        if design.driver.get(b) == a:
            sink = _pin_of(design.names[b], div)
            if _pin_of(design.names[a], div) in _GLOBAL_DRIVERS:
                delay = 0.0
            elif sink in _DEDICATED_SINKS:
                delay = _DEDICATED_SINKS[sink]
            else:
                delay = model(fanout[a])
        arcs.append((a, b, delay))
    return SdfDesign(names=design.names, arcs=arcs, launches=design.launches,
                     checks=design.checks, driver=design.driver, divider=design.divider,
                     _ids=design._ids)


@dataclass(frozen=True)
class Endpoint:
    """An endpoint's worst path: ``delay`` (ps) from the launching clock edge, clock-to-
    output and setup included; ``start``: the pin whose clock launches it."""

    pin: str
    delay: float
    start: str


@dataclass
class StaResult:
    """:func:`analyse`'s result.

    Attributes
    ----------
    domains : dict
        Clock domain (the pin driving the clock pins, ``(ideal)`` when unrouted) -> its
        endpoints (:class:`Endpoint`), worst first.
    untimed : int
        Endpoints no path from a clocked pin of their own domain reaches (driven by ports
        or constants only).
    cross : int
        Endpoints reached from another domain as well (not timed across).
    """

    domains: dict
    untimed: int
    cross: int
    _design: SdfDesign = field(repr=False)
    _pred: dict = field(repr=False)

    @property
    def divider(self):
        """The SDF's hierarchy divider (``/`` from nextpnr)."""
        return self._design.divider

    def path(self, endpoint, domain):
        """The pins of ``endpoint``'s worst path, launch first, with the arrival (ps) at
        each."""
        d = self._design
        pred, arrival = self._pred[domain]
        i = d._ids[endpoint.pin]
        out = []
        while i >= 0:
            out.append((d.names[i], arrival[i]))
            i = pred[i]
        return out[::-1]


def _domain(d, clk):
    drv = d.driver.get(clk)
    return d.names[drv] if drv is not None else "(ideal)"


def analyse(design):
    """Every endpoint's worst path in ``design`` (:func:`read_sdf`).

    Raises
    ------
    SdfError
        The arcs form a loop (a combinational loop: no longest path).
    """
    d = design
    n = len(d.names)
    succ = [[] for _ in range(n)]
    indeg = [0] * n
    for a, b, delay in d.arcs:
        succ[a].append((b, delay))
        indeg[b] += 1
    order = [i for i in range(n) if indeg[i] == 0]
    queue = deque(order)
    while queue:
        u = queue.popleft()
        for v, _ in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                order.append(v)
                queue.append(v)
    if len(order) < n:
        stuck = sorted(d.names[i] for i in range(n) if indeg[i] > 0)[:3]
        raise SdfError(f"combinational loop: {n - len(order)} pins on or behind a loop, "
                       f"e.g. {', '.join(stuck)}")
    by_domain = {}
    for out, (clk, delay) in d.launches.items():
        by_domain.setdefault(_domain(d, clk), []).append((out, delay))
    domains, pred_by = {}, {}
    reached_by = Counter()
    for dom, launches in sorted(by_domain.items()):
        arrival = [-math.inf] * n
        pred = [-1] * n
        start = [-1] * n
        for out, delay in launches:
            if delay > arrival[out]:
                arrival[out], start[out] = delay, out
        for u in order:
            au = arrival[u]
            if au == -math.inf:
                continue
            for v, delay in succ[u]:
                if au + delay > arrival[v]:
                    arrival[v], pred[v], start[v] = au + delay, u, start[u]
        pred_by[dom] = (pred, arrival)
        for node, (clk, setup) in d.checks.items():
            if arrival[node] == -math.inf:
                continue
            reached_by[node] += 1
            if _domain(d, clk) != dom:
                continue
            domains.setdefault(dom, []).append(
                Endpoint(d.names[node], arrival[node] + setup, d.names[start[node]]))
    for eps in domains.values():
        eps.sort(key=lambda e: -e.delay)
    timed = {e.pin for eps in domains.values() for e in eps}
    untimed = sum(1 for node in d.checks if d.names[node] not in timed)
    cross = sum(1 for node, k in reached_by.items() if k > 1 or d.names[node] not in timed)
    return StaResult(domains, untimed, cross, d, pred_by)


def _instance(pin, divider):
    inst, _ = _split_port(pin, divider)
    return inst or pin


def unit_of(pin, depth=1, divider="/"):
    """The unit of a pin's cell: the first ``depth`` levels of its hierarchical name
    (yosys' flattened names join levels with ``.``); ``(top)`` for a name without
    hierarchy, ``(unnamed)`` for cells yosys or nextpnr named (``$...``)."""
    name = re.sub(r"\\(.)", r"\1", _instance(pin, divider))
    if name.lstrip("\\").startswith("$"):
        return "(unnamed)"
    parts = name.split(".")
    if len(parts) == 1:
        return "(top)"
    return ".".join(parts[:min(depth, len(parts) - 1)])


#: The suffixes yosys and nextpnr add to a mapped cell's name (the net it implements,
#: then the cell type and output port, a bit index): stripped by :func:`register_of`.
_CELL_SUFFIX = re.compile(
    r"_(TRELLIS_FF|TRELLIS_COMB|TRELLIS_DPR16X4|LUT4|CCU2C|PFUMX|L6MUX21|DP16KD|MULT18X18D|"
    r"ALU54B|DPR16X4)(_|\$|$).*$")


def register_of(pin, divider="/"):
    """The register (or block RAM, multiplier) a pin's cell implements: its hierarchical
    name without the mapped cell's suffix, so that the bits of one register name the
    same register (``cstl0.core.can_issue_TRELLIS_FF_Q/Q`` and ``..._Q_3/Q`` are
    ``cstl0.core.can_issue``)."""
    name = re.sub(r"\\(.)", r"\1", _instance(pin, divider))
    return _CELL_SUFFIX.sub("", name) or name


def negative_slack(endpoints, period):
    """``(endpoints above period, total negative slack)``: how many worst paths are longer
    than ``period`` (ps) and the sum of their excess (ps, positive)."""
    late = [e.delay - period for e in endpoints if e.delay > period]
    return len(late), sum(late)


def group_by_start(endpoints, *, threshold, divider="/"):
    """Per register where a worst path starts (:func:`register_of` of its launch pin),
    the endpoints whose worst path is above ``threshold`` (ps)."""
    return Counter(register_of(e.start, divider) for e in endpoints if e.delay > threshold)


def group_by_unit(endpoints, *, threshold, depth=1, divider="/"):
    """Per unit (:func:`unit_of` of the endpoint's cell): ``(endpoints, above threshold,
    worst delay)``; and per (start unit, end unit) the endpoints whose worst path is above
    ``threshold`` (ps)."""
    units = {}
    pairs = Counter()
    for e in endpoints:
        u = unit_of(e.pin, depth, divider)
        total, above, worst = units.get(u, (0, 0, -math.inf))
        hit = e.delay > threshold
        units[u] = (total + 1, above + hit, max(worst, e.delay))
        if hit:
            pairs[(unit_of(e.start, depth, divider), u)] += 1
    return units, pairs


def format_report(result, *, freq_mhz=100.0, depth=1, paths=1, top=20, starts=0):
    """Lines: per clock domain the worst path, the endpoints above the period of
    ``freq_mhz`` (and the sum of their excess, the total negative slack) by unit and by
    (start unit -> end unit), the ``starts`` registers where
    most of those paths start, and the ``paths`` worst paths."""
    period = 1e6 / freq_mhz
    divider = result.divider
    lines = []
    for dom, eps in result.domains.items():
        worst = eps[0]
        above, tns = negative_slack(eps, period)
        lines.append(f"clock {dom}: {len(eps)} endpoints, worst {worst.delay / 1e3:.2f} ns "
                     f"({1e6 / worst.delay:.2f} MHz); {above} above {period / 1e3:.2f} ns "
                     f"({freq_mhz:g} MHz), total negative slack {-tns / 1e3:.2f} ns")
        units, pairs = group_by_unit(eps, threshold=period, depth=depth, divider=divider)
        lines.append(f"  {'unit (where the path ends)':<40} {'endpoints':>9} "
                     f"{'> ' + format(period / 1e3, '.2f') + ' ns':>10} {'worst ns':>9}")
        for u, (total, hit, w) in sorted(units.items(), key=lambda kv: (-kv[1][1], kv[0])):
            lines.append(f"  {u:<40} {total:>9} {hit:>10} {w / 1e3:>9.2f}")
        if pairs and top:
            lines.append(f"  paths above {period / 1e3:.2f} ns by start unit -> end unit "
                         f"(the {min(top, len(pairs))} largest of {len(pairs)}):")
            for (a, b), k in sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[:top]:
                lines.append(f"    {a} -> {b}: {k}")
        by_start = group_by_start(eps, threshold=period, divider=divider) if starts else {}
        if by_start:
            lines.append(f"  paths above {period / 1e3:.2f} ns by the register they start at "
                         f"(the {min(starts, len(by_start))} largest of {len(by_start)}):")
            for reg, k in sorted(by_start.items(), key=lambda kv: (-kv[1], kv[0]))[:starts]:
                lines.append(f"    {reg}: {k}")
        for e in eps[:paths]:
            lines.append(f"  path to {e.pin} ({e.delay / 1e3:.2f} ns):")
            for name, t in result.path(e, dom):
                lines.append(f"    {t / 1e3:7.2f}  {name}")
    if result.untimed or result.cross:
        lines.append(f"untimed endpoints (from ports or constants only): {result.untimed}; "
                     f"reached from another clock domain: {result.cross}")
    return lines
