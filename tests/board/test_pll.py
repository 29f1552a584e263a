"""The EHXPLLL divider search: the ECP5 limits by hand, and against prjtrellis' ecppll
(``yowasp-ecppll``, fpga extra) where installed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from npu.board.pll import pll_params


@pytest.mark.parametrize("f_out", [25.0, 30.0, 40.0, 50.0, 27.0, 100.0, 12.5])
def test_limits_and_frequency(f_out):
    p = pll_params(25.0, f_out)
    assert 1 <= p.clki_div <= 128 and 1 <= p.clkfb_div <= 80 and 1 <= p.clkop_div <= 128
    assert 25.0 / p.clki_div >= 3.125
    assert 400 <= p.vco <= 800
    assert p.f_out == pytest.approx(25.0 * p.clkfb_div / p.clki_div)
    assert p.vco == pytest.approx(p.f_out * p.clkop_div)


def test_by_hand():
    # 25 MHz -> 50 MHz: x2 with the VCO at 600 MHz (CLKOP_DIV 12)
    p = pll_params(25.0, 50.0)
    assert (p.clki_div, p.clkfb_div, p.clkop_div) == (1, 2, 12)
    # 27 MHz is not reachable: CLKI_DIV <= 8 keeps the phase detector at >= 3.125 MHz, so
    # the candidates are 25 * FB / D with D <= 8; 25 * 9 / 8 = 28.125 is the closest
    p = pll_params(25.0, 27.0)
    assert (p.clki_div, p.clkfb_div, p.f_out) == (8, 9, 28.125)
    with pytest.raises(ValueError, match="no ECP5 PLL setting"):
        pll_params(25.0, 2000.0)


def _ecppll():
    exe = shutil.which("yowasp-ecppll") or Path(sys.executable).parent / "yowasp-ecppll"
    return str(exe) if Path(exe).is_file() else None


@pytest.mark.skipif(_ecppll() is None, reason="yowasp-ecppll (fpga extra) not installed")
@pytest.mark.parametrize("f_out", [25.0, 40.0, 50.0, 30.0])
def test_against_ecppll(f_out, tmp_path):
    proc = subprocess.run([_ecppll(), "-i", "25", "-o", f"{f_out:g}", "-f", "pll.v"],
                          cwd=tmp_path, capture_output=True, text=True, check=True)
    text = proc.stdout + proc.stderr
    got = {k: int(re.search(rf"{k}: (\d+)", text).group(1))
           for k in ("Refclk divisor", "Feedback divisor", "clkout0 divisor")}
    freq = float(re.search(r"clkout0 frequency: ([\d.]+) MHz", text).group(1))
    p = pll_params(25.0, f_out)
    assert p.f_out == pytest.approx(freq)
    assert (p.clki_div, p.clkfb_div, p.clkop_div) == (
        got["Refclk divisor"], got["Feedback divisor"], got["clkout0 divisor"])
