"""npu dis / npu asm: text both ways, JSON, and one-line errors with exit status 1."""

import json
import subprocess
import sys

from test_errors import BASE

from nac import dumps, loads
from npu.tools.cli import main


def test_dis_asm_round_trip(tmp_path, capsys):
    nac_path = tmp_path / "m.nac"
    nac_path.write_bytes(dumps(BASE))
    assert main(["dis", str(nac_path)]) == 0
    text = capsys.readouterr().out
    assert "v2 = nac.add(v1, 3)" in text
    (tmp_path / "m.txt").write_text(text)
    assert main(["asm", str(tmp_path / "m.txt"), "-o", str(tmp_path / "back.nac")]) == 0
    assert (tmp_path / "back.nac").read_bytes() == nac_path.read_bytes()


def test_dis_json(tmp_path, capsys):
    (tmp_path / "m.nac").write_bytes(dumps(BASE))
    assert main(["dis", "--json", str(tmp_path / "m.nac")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["header"]["outputs"] == 1
    assert [op["A"] for op in doc["ops"]] == [2, 2, 11, 3]


def test_errors_are_one_line_exit_1(tmp_path):
    bad = tmp_path / "bad.nac"
    bad.write_bytes(b"NAC\x07" + bytes(84))
    proc = subprocess.run([sys.executable, "-m", "npu", "dis", str(bad)], capture_output=True,
                          text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"npu: error: {bad}: section header, field version, "
                                  f"offset 3")
    assert "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "npu", "dis", str(tmp_path / "missing.nac")],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "No such file" in proc.stderr
    assert loads(dumps(BASE)) == BASE
