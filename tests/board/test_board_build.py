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
