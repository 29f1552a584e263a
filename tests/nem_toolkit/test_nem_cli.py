"""``npu nem check`` and ``npu nem fmt``: exit status 0 valid, 1 invalid, 2 usage problem,
diagnostics in the ``file:line:col: error[CODE]`` form, and no traceback on bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nem.checker import check_text
from nem.formatter import format_document
from nem.parser import parse
from npu.tools.cli import main

DEVICE = (Path(__file__).parent / "corpus" / "test_device.nem").read_text()

VALID = """include "npm_baseline_1.0.nem"
device "tiny.cfg"
program ok:
buffer X_L2 : L2 (size=64)
buffer X_L1 : L1 (size=64)
t = transfer.async(dst=region(X_L1, 0, 64), src=region(X_L2, 0, 64))
wait(t)
"""


@pytest.fixture
def files(tmp_path):
    (tmp_path / "tiny.cfg").write_text(DEVICE)
    valid = tmp_path / "ok.nem"
    valid.write_text(VALID)
    # two independent mistakes: a region beyond its buffer, and an unknown token in wait
    invalid = tmp_path / "bad.nem"
    invalid.write_text(
        VALID.replace("region(X_L2, 0, 64)", "region(X_L2, 32, 64)").replace("wait(t)", "wait(u)")
    )
    return tmp_path, valid, invalid


def test_check_valid_is_0(files, capsys):
    _, valid, _ = files
    result = check_text(valid.read_text(), file=str(valid), base_dir=str(valid.parent))
    assert result.ok, [str(d) for d in result.diagnostics]
    assert main(["nem", "check", str(valid)]) == 0
    err = capsys.readouterr().err
    assert "valid for device test_npu" in err


def test_check_invalid_is_1_and_reports_both_errors(files, capsys):
    _, _, invalid = files
    assert main(["nem", "check", str(invalid)]) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if ": error[" in line]
    assert len(lines) == 2, out
    # file names are printed relative to the working directory
    where = [line.split(":")[:2] for line in lines]
    assert [(w[0].endswith("bad.nem"), w[1]) for w in where] == [(True, "6"), (True, "7")]
    assert "error[E602]" in lines[0] and "[nem.md:" in lines[0]
    assert "error[E713]" in lines[1]


def test_check_json(files, capsys):
    _, _, invalid = files
    assert main(["nem", "check", "--json", str(invalid)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False
    assert [d["code"] for d in doc["diagnostics"]] == ["E602", "E713"]
    assert doc["diagnostics"][0]["line"] == 6


def test_usage_problems_are_2(files, capsys):
    tmp, _, _ = files
    # A missing input file is exit status 1, as for every npu command (issue 24).
    assert main(["nem", "check", str(tmp / "missing.nem")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["nem", "fmt", str(tmp / "missing.nem")]) == 1
    with pytest.raises(SystemExit) as exc:
        main(["nem", "check"])
    assert exc.value.code == 2


def test_check_with_device_option(files, capsys):
    tmp, valid, _ = files
    text = valid.read_text().replace('device "tiny.cfg"\n', "")
    bare = tmp / "bare.nem"
    bare.write_text(text)
    assert main(["nem", "check", str(bare), "--device", str(tmp / "tiny.cfg")]) == 0
    capsys.readouterr()


def test_fmt(files, capsys):
    tmp, _, _ = files
    messy = tmp / "messy.nem"
    messy.write_text(
        VALID.replace("t = transfer", "t   =   transfer").replace("(size=64)", "( size = 64 )")
    )
    assert main(["nem", "fmt", "--check", str(messy)]) == 1
    capsys.readouterr()
    assert main(["nem", "fmt", str(messy)]) == 0
    out = capsys.readouterr().out
    assert out == format_document(parse(messy.read_text(), str(messy)))
    assert parse(out, "x") == parse(messy.read_text(), "x")
    copy = tmp / "copy.nem"
    shutil.copy(messy, copy)
    assert main(["nem", "fmt", "--in-place", str(copy)]) == 0
    assert copy.read_text() == out
    assert main(["nem", "fmt", "--check", str(copy)]) == 0
    broken = tmp / "broken.nem"
    broken.write_text("buffer X : L2 (size=\n")
    assert main(["nem", "fmt", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "error[E201]" in err and "Traceback" not in err
