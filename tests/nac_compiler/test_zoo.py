"""Every zoo model: float runtime vs torch eager, exact file round trip, safe schedule,
readable disassembly; the digits CNN's accuracy equals torch's."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nac import dumps, loads, read_nac, write_nac  # noqa: E402
from nac.compile import compile_module, param_bytes  # noqa: E402
from nac.runtime import run  # noqa: E402
from nac.schedule import replay  # noqa: E402
from nac.text import disassemble  # noqa: E402
from nac.zoo import ZOO, build, digits_cnn  # noqa: E402

torch.set_num_threads(1)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model(name, tmp_path):
    module, inputs = build(name)
    nac, weights, report = compile_module(module, inputs)
    with torch.no_grad():
        want = module(*inputs).numpy()
    # Through the file: write, read, run.
    path = tmp_path / f"{name}.nac"
    write_nac(nac, path)
    back = read_nac(path)
    got = run(back, [t.numpy() for t in inputs])[0]
    err = float(np.max(np.abs(got - want)))
    assert err <= 1e-5, f"{name}: max abs error {err}"
    # compile -> write -> read -> write is byte-identical.
    assert dumps(back) == path.read_bytes() == dumps(loads(path.read_bytes()))
    # The schedule is safe (replayed again from the file) and its numbers are reported.
    again = replay(back.ops, back.mmap, param_bytes=param_bytes(back, weights))
    assert again == report and report.commands > 0
    text = disassemble(back)
    assert "<OUTPUT B=0>" in text and ("SAVE_RESULT" in text or "FORWARD" in text)


def test_external_weights(tmp_path):
    module, inputs = build("cnn")
    nac, weights, _ = compile_module(module, inputs, internal_weights=False)
    write_nac(nac, tmp_path / "cnn.nac", weights=weights)
    back = read_nac(tmp_path / "cnn.nac")
    assert back.weights is not None and set(back.weights) == set(weights)
    with torch.no_grad():
        want = module(*inputs).numpy()
    assert np.max(np.abs(run(back, [t.numpy() for t in inputs])[0] - want)) <= 1e-5


def test_digits_cnn_accuracy_equals_torch(tmp_path):
    model, x_test, y_test = digits_cnn()
    with torch.no_grad():
        torch_pred = model(torch.from_numpy(x_test)).argmax(1).numpy()
    nac, _, _ = compile_module(model, (torch.from_numpy(x_test[:1]),))
    # The graph was exported for batch 1: run sample by sample.
    ours = np.array([run(nac, [x_test[k:k + 1]])[0].argmax() for k in range(len(x_test))])
    torch_acc = float((torch_pred == y_test).mean())
    our_acc = float((ours == y_test).mean())
    assert torch_acc > 0.9, f"training failed: accuracy {torch_acc}"
    assert our_acc == torch_acc
