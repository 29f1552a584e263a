"""``npu sim`` (the main job) and ``npu run --on rtl``: the paths that need no RTL run.

A model the back-end refuses is a ``skip`` row with the reason (exit 0 when nothing
failed); an unknown ``--models`` name is a usage error naming it; a build for a device file
(not a shipped engine) is refused before any simulation, naming the device file and the
shipped devices.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from npu.tools.cli import main

torch = pytest.importorskip("torch")


def test_a_refused_model_is_a_skip_row(capsys):
    assert main(["sim", "--models", "attention", "--no-blocks", "--random", "0"]) == 0
    out = capsys.readouterr().out
    assert "[ SKIP ] model attention (sim)" in out
    assert "layer_norm" in out  # the back-end's reason
    assert "0 passed, 0 failed, 1 skipped of 1 steps" in out


def test_unknown_model_is_named(capsys):
    assert main(["sim", "--models", "nosuch", "--no-blocks"]) == 1
    err = capsys.readouterr().err
    assert "--models: no model nosuch" in err and "digits" in err


def test_a_device_file_build_is_refused_before_the_run(tmp_path, capsys):
    from nem.target import SHIPPED, _shipped_dir

    device = tmp_path / "mydev.nem"
    shutil.copyfile(_shipped_dir() / SHIPPED["small"][0], device)
    assert main(["compile", "mlp", "--target", str(device), "-o", str(tmp_path / "b")]) == 0
    np.save(tmp_path / "x.npy", np.zeros((3, 16), np.float32))
    capsys.readouterr()
    assert main(["run", str(tmp_path / "b"), str(tmp_path / "x.npy"), "--on", "rtl"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("npu: error: ") and "mydev.nem" in err and "small" in err
