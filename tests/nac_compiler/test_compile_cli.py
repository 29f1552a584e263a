"""npu compile / npu run from the command line."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from npu.cli import main  # noqa: E402


def test_compile_and_run(tmp_path, capsys):
    out = tmp_path / "mlp.nac"
    assert main(["compile", "mlp", "-o", str(out), "--external"]) == 0
    assert out.is_file() and (tmp_path / "mlp.safetensors").is_file()
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(out), str(tmp_path / "x.npy"), "--save", str(tmp_path / "y")]) == 0
    y = np.load(tmp_path / "y.0.npy")
    from nac.zoo import build

    module, _ = build("mlp")
    with torch.no_grad():
        np.testing.assert_allclose(y, module(torch.from_numpy(x)).numpy(), atol=1e-5)
    capsys.readouterr()


def test_unknown_model_is_a_user_error(tmp_path, capsys):
    assert main(["compile", "nosuch", "-o", str(tmp_path / "x.nac")]) == 1
    assert "npu: error: model 'nosuch'" in capsys.readouterr().err
