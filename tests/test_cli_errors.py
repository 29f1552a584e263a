"""Command-line odds and ends of issue 24, over the whole ``npu`` hub: a missing or
directory input is exit status 1 with the path in every command; ``npu nem dis`` names the
file of a bad binary; ``npu asm`` range errors carry ``file:line:column``; ``npu verilog
--only`` with an unknown name is an error (it wrote nothing and exited 0); a reader that
closes the pipe early gets a quiet exit."""

import subprocess
import sys
from pathlib import Path

import pytest

from nac import dumps
from nac.compile import compile_graph
from nac.import_mind import import_mind
from npu.tools.cli import main

DATA = Path(__file__).parent / "importers" / "data"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "simple.nac"
    nac, _, _ = compile_graph(import_mind((DATA / "simple_module.ir").read_text(),
                                          path="simple.ir"))
    path.write_bytes(dumps(nac))
    return path


@pytest.mark.parametrize("argv", [["dis", "{}"], ["asm", "{}", "-o", "{out}"],
                                  ["run", "{}"], ["nem", "check", "{}"], ["nem", "fmt", "{}"],
                                  ["nem", "dis", "{}"], ["nem", "bind", "{}", "-o", "{out}"],
                                  ["nem", "run", "{}", "-o", "{out}"],
                                  ["import", "mind", "{}", "-o", "{out}"]])
@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_missing_or_directory_input_is_status_1(argv, kind, tmp_path, capsys):
    target = tmp_path / "nosuch" if kind == "missing" else tmp_path
    argv = [a.format(target, out=tmp_path / "out") for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert str(target) in err and "Traceback" not in err
    assert ("directory" if kind == "directory" else "no such file") in err.lower()


def test_nem_dis_names_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"NEMB" + bytes(60))
    assert main(["nem", "dis", str(bad)]) == 1
    assert capsys.readouterr().err.startswith(f"npu nem dis: error: {bad}: ")


@pytest.mark.parametrize("line, replaced, message", [
    # cmap ids are uint16 in the binary (spec 5.1): 70000 cannot be written.
    ('cmap 20 "aten.mul.Tensor"', 'cmap 70000 "aten.mul.Tensor"',
     "3:6: cmap id 70000 is out of range [0, 65535]"),
    # D offsets are int16.
    ("D=[-1]", "D=[-40000]", "D offset -40000 is out of range [-32768, 32767]"),
    # The A field is one byte.
    ("A=20", "A=300", "A 300 is out of range [0, 255]"),
])
def test_asm_range_errors_are_located(model, tmp_path, capsys, line, replaced, message):
    assert main(["dis", str(model)]) == 0
    text = capsys.readouterr().out
    assert line in text
    src = tmp_path / "m.txt"
    src.write_text(text.replace(line, replaced, 1))
    assert main(["asm", str(src), "-o", str(tmp_path / "m.nac")]) == 1
    err = capsys.readouterr().err
    assert f"npu: error: {src}:" in err and message in err


def test_verilog_only_unknown_name(tmp_path, capsys):
    assert main(["verilog", "--only", "nosuch", "-o", str(tmp_path / "v")]) == 1
    assert "--only: no top-level component nosuch; known: " in capsys.readouterr().err
    assert not list(tmp_path.glob("v/*.v"))


def test_broken_pipe_is_quiet(model):
    proc = subprocess.Popen([sys.executable, "-m", "npu", "dis", str(model)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first write
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141
    assert err == b""


@pytest.mark.parametrize("flag", [["--stalls"], ["--trace", "t.json"]])
@pytest.mark.parametrize("on", [[], ["--on", "float"], ["--on", "executor"]])
def test_rtl_only_flags_are_refused_off_the_rtl(model, flag, on, tmp_path, capsys):
    # --stalls and --trace shape an RTL run: without one they would be ignored silently
    assert main(["run", str(model), *on, *flag]) == 1
    assert f"{flag[0]} applies to --on rtl|all only" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()
