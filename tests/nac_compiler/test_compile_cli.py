"""npu compile / npu run from the command line."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from npu.tools.cli import main  # noqa: E402


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


def test_lifted_constants_travel_next_to_the_file(tmp_path, monkeypatch, capsys):
    import sys
    import types

    class Scaled(torch.nn.Module):
        def forward(self, x):
            return x * torch.tensor([2.0, -1.0, 0.5])

    factory = types.ModuleType("scaled_factory")
    factory.make = lambda: (Scaled(), (torch.ones(2, 3),))
    monkeypatch.setitem(sys.modules, "scaled_factory", factory)
    out = tmp_path / "scaled.nac"
    assert main(["compile", "scaled_factory:make", "-o", str(out)]) == 0
    assert "1 lifted constants" in capsys.readouterr().out
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "x.npy", x)
    # Without the constants the run is a user error naming the missing <INPUT B=3>.
    assert main(["run", str(out), str(tmp_path / "x.npy")]) == 1
    assert "<INPUT B=3>" in capsys.readouterr().err
    assert main(["run", str(out), str(tmp_path / "x.npy"), "--constants",
                 str(tmp_path / "scaled.constants.npz"), "--save", str(tmp_path / "y")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y.0.npy"),
                                  x * np.array([2.0, -1.0, 0.5], np.float32))
