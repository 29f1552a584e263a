"""The NEM back-end: .nac -> quantised, lowered, bound model run on the NEM executor.

* the digits CNN: int8 top-1 accuracy on its held-out split within 1 point of the float
  model's, top-1 agreement >= 98 %;
* the same build for ``small`` (many small tiles, activations far larger than its 32 KiB L2)
  and ``sim`` (few large tiles) gives byte-identical outputs;
* random conv/linear stacks equal an independent integer reference of the quantised graph
  (written below from the documented formulas, NCHW, Python/numpy integers) byte for byte;
* refused operations name the instruction, the operation and the reason.
"""

import json
import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nac import zoo  # noqa: E402
from nac.compile import compile_module  # noqa: E402
from nac.weights import write_nac  # noqa: E402
from nem.build_dir import compile_model, run_build  # noqa: E402
from nem.lower import LowerError  # noqa: E402


def _nac(module, example, path):
    nac, _, _ = compile_module(module, (torch.from_numpy(example),))
    write_nac(nac, path)
    return path


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    from sklearn.datasets import load_digits

    model, x_test, y_test = zoo.digits_cnn()
    # the training split, as digits_cnn makes it: calibration data the test never sees
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    x_train = x[np.random.default_rng(0).permutation(len(x))][:1400]
    tmp = tmp_path_factory.mktemp("digits")
    return model, x_test, y_test, x_train, tmp


def test_digits_int8_accuracy(digits):
    model, x_test, y_test, x_train, tmp = digits
    path = _nac(model, x_test, tmp / "digits.nac")
    compile_model(path, "sim", tmp / "build", samples=[x_train[:300]])
    (q,), run = run_build(tmp / "build", [x_test], on="executor")
    (f,), _ = run_build(tmp / "build", [x_test], on="float")
    with torch.no_grad():
        t = model(torch.from_numpy(x_test)).numpy()
    np.testing.assert_allclose(f, t, atol=1e-4)  # the float path is the model
    acc_q = float((q.argmax(1) == y_test).mean())
    acc_f = float((f.argmax(1) == y_test).mean())
    agree = float((q.argmax(1) == f.argmax(1)).mean())
    assert acc_f > 0.9
    assert acc_q >= acc_f - 0.01, (acc_q, acc_f)
    assert agree >= 0.98, agree
    # the sim device's cycle model follows the NMU's datapath (nem.cycles): a 16 x 16 array
    # whose convolutions reduce over 1 and 8 input channels fills 1/16 and 1/2 of its
    # lanes, and the small gemm loads more weights than it streams; the engine RTL
    # measured 8.2 % over a whole run of this model (docs/sim.md)
    assert 0.05 < run.mac_utilisation()[1] < 0.3, run.mac_utilisation()
    # the argmax head on the CSTL gives the classes of the int8 logits (ties: first index)
    compile_model(path, "sim", tmp / "head", samples=[x_train[:300]], argmax=True)
    (cls,), _ = run_build(tmp / "head", [x_test], on="executor")
    assert cls.dtype == np.int32
    np.testing.assert_array_equal(cls, q.argmax(1))
    (fcls,), _ = run_build(tmp / "head", [x_test], on="float")
    np.testing.assert_array_equal(fcls, f.argmax(1))


def test_small_and_sim_tilings_agree_byte_for_byte(digits):
    model, x_test, _, x_train, tmp = digits
    x = x_test[:80]
    path = _nac(model, x, tmp / "digits80.nac")
    out = {}
    for dev in ("small", "sim"):
        manifest = compile_model(path, dev, tmp / dev, samples=[x_train[:200]])
        (q,), run = run_build(tmp / dev, [x], on="executor")
        out[dev] = (q, manifest["report"]["tiles"], run)
    assert out["small"][1] > out["sim"][1]
    np.testing.assert_array_equal(out["small"][0], out["sim"][0])
    # the first convolution's output (80 x 8 x 8 x 8 bytes) is larger than small's L2
    assert 80 * 8 * 8 * 8 > 32768
    assert out["small"][2].bytes_moved()["DDR->L2"] > 32768


# --- an independent int8 reference of the quantised graph --------------------------------


def _multiplier(real):
    """``real = m * 2**-t`` with m in [2**30, 2**31) (docs/numerics.md), by hand."""
    frac, exp = math.frexp(real)
    m = math.floor(frac * 2**31 + 0.5)
    if m == 2**31:
        m //= 2
        exp += 1
    return m, 31 - exp


def _requant(acc, s_x, s_w, s_y, z_y):
    """int64 accumulators [..., C] (channel axis 1 for NCHW handled by the caller)."""
    out = np.empty(acc.shape, dtype=np.int64)
    for c in range(acc.shape[-1]):
        m, t = _multiplier(s_x * float(s_w[c]) / s_y)
        a = acc[..., c].astype(object)  # Python integers: no overflow anywhere
        r = (a * m + (1 << (t - 1))) >> t
        out[..., c] = np.clip(np.array(r, dtype=np.int64) + z_y, -128, 127)
    return out


def _ref_quant_weights(w, axis):
    amax = np.abs(w).max(axis=tuple(a for a in range(w.ndim) if a != axis))
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    shape = [1] * w.ndim
    shape[axis] = -1
    return np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int64), scale


def _reference(model, x, quant):
    """The quantised model in integers, NCHW, layer by layer."""
    acts = quant["activations"]
    keys = sorted(acts, key=int)
    first = acts[keys[0]]
    s_x, z_x = first["scale"], first["zero_point"]
    q = np.clip(np.rint(x.astype(np.float64) / s_x) + z_x, -128, 127).astype(np.int64)
    layers = iter(quant["layers"])
    mods = list(model)
    i = 0
    while i < len(mods):
        m = mods[i]
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            info = next(layers)
            y = acts[str(info["output"])]
            w = m.weight.detach().numpy().astype(np.float64)
            b = m.bias.detach().numpy().astype(np.float64)
            wq, s_w = _ref_quant_weights(w, 0)
            np.testing.assert_array_equal(s_w, info["weight_scales"])
            bq = np.rint(b / (s_x * s_w)).astype(np.int64)
            if isinstance(m, torch.nn.Conv2d):
                ph, pw = m.padding
                sh, sw = m.stride
                dh, dw = m.dilation
                n, c, h, wd = q.shape
                xp = np.full((n, c, h + 2 * ph, wd + 2 * pw), z_x, dtype=np.int64)
                xp[:, :, ph:ph + h, pw:pw + wd] = q
                f, _, kh, kw = wq.shape
                oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
                ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
                acc = np.zeros((n, oh, ow, f), dtype=np.int64)
                for a in range(oh):
                    for bb in range(ow):
                        win = xp[:, :, a * sh:a * sh + dh * (kh - 1) + 1:dh,
                                 bb * sw:bb * sw + dw * (kw - 1) + 1:dw] - z_x
                        acc[:, a, bb, :] = np.einsum("nckl,fckl->nf", win, wq)
                acc += bq
                q = _requant(acc, s_x, s_w, y["scale"], y["zero_point"]).transpose(0, 3, 1, 2)
            else:
                acc = (q - z_x) @ wq.T + bq
                q = _requant(acc, s_x, s_w, y["scale"], y["zero_point"])
            s_x, z_x = y["scale"], y["zero_point"]
            if i + 1 < len(mods) and isinstance(mods[i + 1], torch.nn.ReLU):
                # fused: the output range starts at 0, so its zero point is -128 and the
                # saturation at -128 is the ReLU
                assert z_x == -128
                i += 1
            elif i + 1 < len(mods) and isinstance(mods[i + 1], torch.nn.Hardtanh) and \
                    mods[i + 1].min_val <= 0 <= mods[i + 1].max_val:
                # fused (ReLU6 is a Hardtanh): the calibrated range lies within the bounds,
                # so saturating at -128 / 127 is the clamp
                assert s_x * (-128 - z_x) >= mods[i + 1].min_val - s_x / 2
                assert s_x * (127 - z_x) <= mods[i + 1].max_val + s_x / 2
                assert info["activation"] == ("relu6" if isinstance(mods[i + 1], torch.nn.ReLU6)
                                              else "clamp")
                i += 1
        elif isinstance(m, torch.nn.Hardtanh):  # a clamp no output stage took: a CSTL table
            info = next(layers)
            assert info["op"] == "clamp"
            y = acts[str(info["output"])]
            real = np.clip(s_x * (q - z_x), m.min_val, m.max_val)
            s_x, z_x = y["scale"], y["zero_point"]
            q = np.clip(np.rint(real / s_x) + z_x, -128, 127).astype(np.int64)
        elif isinstance(m, torch.nn.Flatten):
            q = q.reshape(q.shape[0], -1)
        else:
            raise AssertionError(f"the reference has no {m}")
        i += 1
    return q


def _stack(rng, wide=False):
    """A random small conv/linear stack and an input batch (``wide``: channel counts that
    make small's weight groups split the output channels, images that need row bands)."""
    cin = int(rng.integers(1, 6)) if not wide else int(rng.integers(12, 20))
    h = int(rng.integers(5, 11)) if not wide else int(rng.integers(14, 20))
    layers, c, size = [], cin, h
    for _ in range(int(rng.integers(1, 3))):
        cout = int(rng.integers(1, 20)) if not wide else int(rng.integers(30, 50))
        k = int(rng.integers(1, 4))
        stride = int(rng.integers(1, 3)) if not wide else 2
        pad = int(rng.integers(0, k))
        dil = int(rng.integers(1, 3))
        out = (size + 2 * pad - dil * (k - 1) - 1) // stride + 1
        if out < 1:
            continue
        layers.append(torch.nn.Conv2d(c, cout, k, stride=stride, padding=pad, dilation=dil))
        if rng.random() < 0.7:
            layers.append(torch.nn.ReLU())
        c, size = cout, out
    layers.append(torch.nn.Flatten())
    feat = c * size * size
    for _ in range(int(rng.integers(1, 3))):
        out = int(rng.integers(1, 24))
        layers.append(torch.nn.Linear(feat, out))
        if rng.random() < 0.5:
            layers.append(torch.nn.ReLU())
        feat = out
    model = torch.nn.Sequential(*layers).eval()
    batch = int(rng.integers(1, 5))
    return model, rng.standard_normal((batch, cin, h, h)).astype(np.float32)


@pytest.mark.parametrize("seed", range(8))
def test_random_stacks_equal_independent_reference(seed, tmp_path):
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    model, x = _stack(rng, wide=seed >= 6)
    path = _nac(model, x, tmp_path / "m.nac")
    calib = rng.standard_normal((4 * x.shape[0], *x.shape[1:])).astype(np.float32)
    device = "small" if seed % 2 or seed >= 6 else "sim"
    compile_model(path, device, tmp_path / "b", samples=[calib])
    quant = json.loads((tmp_path / "b" / "quant.json").read_text())
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    _, run = run_build(tmp_path / "b", [x], on="executor")
    out = manifest["outputs"][0]
    got = run.memory.buffer(out["buffer"])[: int(np.prod(out["stored_shape"]))].view(np.int8)
    want = _reference(model, x, quant)
    np.testing.assert_array_equal(got.reshape(want.shape).astype(np.int64), want)


@pytest.mark.parametrize("device", ["small", "sim"])
def test_clamps_fuse_into_the_output_stage_or_run_on_the_cstl(device, tmp_path):
    """ReLU6 and a hardtanh whose bounds hold 0 are the saturation of the conv / linear before
    them; a hardtanh above 0 is a CSTL clamp table. Equal to the independent reference."""
    torch.manual_seed(5)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.ReLU6(),
        torch.nn.Conv2d(6, 5, 3, stride=2), torch.nn.Hardtanh(-1.5, 2.0),
        torch.nn.Flatten(), torch.nn.Linear(5 * 3 * 3, 7),
        torch.nn.Hardtanh(0.25, 0.75)).eval()
    rng = np.random.default_rng(5)
    x = (3 * rng.standard_normal((2, 3, 8, 8))).astype(np.float32)
    path = _nac(model, x, tmp_path / "m.nac")
    calib = (3 * rng.standard_normal((16, 3, 8, 8))).astype(np.float32)
    compile_model(path, device, tmp_path / "b", samples=[np.concatenate([calib, x])])
    quant = json.loads((tmp_path / "b" / "quant.json").read_text())
    assert [(entry["op"], entry["activation"]) for entry in quant["layers"]] == [
        ("conv2d", "relu6"), ("conv2d", "clamp"), ("gemm", "none"), ("clamp", "none")]
    assert "min_val=0.25 max_val=0.75" in (tmp_path / "b" / "model.nem").read_text()
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    _, run = run_build(tmp_path / "b", [x], on="executor")
    out = manifest["outputs"][0]
    got = run.memory.buffer(out["buffer"])[: int(np.prod(out["stored_shape"]))].view(np.int8)
    want = _reference(model, x, quant)
    np.testing.assert_array_equal(got.reshape(want.shape).astype(np.int64), want)


def test_refused_op_names_instruction_and_reason(tmp_path, capsys):
    from npu.tools.cli import main

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)).eval()
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    path = _nac(model, x, tmp_path / "ln.nac")
    with pytest.raises(LowerError) as info:
        compile_model(path, "sim", tmp_path / "b", samples=[x])
    msg = str(info.value)
    assert "(aten.layer_norm.default)" in msg and "instruction " in msg
    assert "no lowering for this operation" in msg
    np.savez(tmp_path / "cal.npz", x)
    assert main(["compile", str(path), "--target", "sim", "--calibration",
                 str(tmp_path / "cal.npz"), "-o", str(tmp_path / "c")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("npu: error: instruction ") and "Traceback" not in err


def test_cli_build_directory_is_relocatable(tmp_path, monkeypatch, capsys):
    from npu.tools.cli import main

    torch.manual_seed(3)  # fixed weights: the error bound below must not depend on the draw
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 3 * 3, 5)).eval()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 2, 6, 6)).astype(np.float32)
    path = _nac(model, x, tmp_path / "m.nac")
    # the calibration set holds x: the bound is the rounding error, not clipping of outputs
    # outside the calibrated range
    cal = np.concatenate([x, rng.standard_normal((12, 2, 6, 6)).astype(np.float32)])
    np.savez(tmp_path / "cal.npz", cal)
    np.save(tmp_path / "x.npy", x)
    assert main(["compile", str(path), "--target", "small", "--calibration",
                 str(tmp_path / "cal.npz"), "-o", str(tmp_path / "build")]) == 0
    (tmp_path / "build").rename(tmp_path / "moved")
    monkeypatch.chdir(tmp_path / "moved")
    capsys.readouterr()
    assert main(["nem", "check", "model.nem"]) == 0
    assert "0 error(s)" in "".join(capsys.readouterr())
    monkeypatch.chdir("/")
    outs = {}
    for on in ("executor", "float"):
        assert main(["run", str(tmp_path / "moved"), str(tmp_path / "x.npy"), "--on", on,
                     "--save", str(tmp_path / on)]) == 0
        outs[on] = np.load(tmp_path / f"{on}.0.npy")
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(outs["float"], ref, atol=1e-5)
    scale = json.loads((tmp_path / "moved" / "manifest.json").read_text())["outputs"][0][
        "quant"]["scale"]
    assert np.abs(outs["executor"] - ref).max() < 8 * scale + 0.1 * np.abs(ref).max()


@pytest.mark.parametrize("name", ["cnn", "residual", "mlp"])
def test_zoo_models_compile_check_and_run_on_both_devices(name, tmp_path):
    from nem.backend_cli import zoo_calibration

    module, inputs = zoo.build(name)
    x = inputs[0].numpy()
    nac, _, _ = compile_module(module, inputs)
    write_nac(nac, tmp_path / "m.nac")
    with torch.no_grad():
        ref = module(*inputs).numpy()
    outs = []
    for device in ("small", "sim"):
        method = "percentile" if name == "mlp" else "minmax"
        compile_model(tmp_path / "m.nac", device, tmp_path / device, batch=len(x),
                      samples=zoo_calibration([x]), method=method, percentile=99.9)
        (q,), _ = run_build(tmp_path / device, [x], on="executor")
        outs.append(q)
        # int8 all the way (measured: at most 2 % of the largest output with minmax, 4 %
        # with the 99.9 percentile, which clips a few of the standard normal inputs)
        assert np.abs(q - ref).max() <= 0.05 * np.abs(ref).max(), device
    np.testing.assert_array_equal(outs[0], outs[1])  # tiling does not change a byte


def test_device_without_cstl_refuses_pooling(tmp_path):
    from nem.target import SHIPPED, _shipped_dir

    device = tmp_path / "plain.nem"
    # the shipped sim device has CSTLs (issue 20): this one leaves them out
    text = (_shipped_dir() / SHIPPED["sim"][0]).read_text()
    device.write_text("\n".join(line for line in text.splitlines()
                                if not line.strip().startswith("CSTL =")) + "\n")
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU(),
                                torch.nn.Sigmoid()).eval()
    x = np.zeros((1, 1, 5, 5), dtype=np.float32)
    path = _nac(model, x, tmp_path / "m.nac")
    with pytest.raises(LowerError, match=r"instruction \d+ \(aten.sigmoid.default\): .* no "
                       r"CSTL to run sigmoid"):
        compile_model(path, str(device), tmp_path / "b", samples=[x])


def test_layer_report_accounts_for_every_task(tmp_path):
    from nem.build_dir import layer_report, load_build

    model = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 3 * 3, 5)).eval()
    x = np.random.default_rng(2).standard_normal((3, 2, 6, 6)).astype(np.float32)
    path = _nac(model, x, tmp_path / "m.nac")
    compile_model(path, "small", tmp_path / "b", samples=[x])
    _, run = run_build(tmp_path / "b", [x], on="executor")
    rows = layer_report(load_build(tmp_path / "b"), run)
    assert [r["op"] for r in rows] == ["conv2d", "maxpool", "gemm"]
    # MACs by hand: 3 images x 6 x 6 pixels x 4 channels x (3 x 3 x 2) taps; 3 x 5 x 36
    assert [r["macs"] for r in rows] == [3 * 6 * 6 * 4 * 18, 0, 3 * 5 * 36]
    assert sum(r["tasks"] for r in rows) == len(run.records)
    total = {}
    for r in rows:
        for p, n in r["bytes"].items():
            total[p] = total.get(p, 0) + n
    assert total == run.bytes_moved()
    assert all(0 < r["utilisation"] <= 1 for r in rows if r["unit"] == "NMU")


def test_cli_errors_are_one_line(tmp_path, capsys):
    from npu.tools.cli import main

    model = torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
    x = np.zeros((2, 4), dtype=np.float32)
    path = _nac(model, x, tmp_path / "m.nac")
    np.savez(tmp_path / "cal.npz", np.ones((4, 4), dtype=np.float32))
    np.save(tmp_path / "bad.npy", np.zeros((3, 4), dtype=np.float32))

    def err(*argv):
        assert main([str(a) for a in argv]) == 1
        text = capsys.readouterr().err
        assert text.startswith("npu: error: ") and text.count("\n") == 1, text
        return text

    assert "target 'nowhere': not small, sim, tiny or a device file" in err(
        "compile", path, "--target", "nowhere", "--calibration", tmp_path / "cal.npz", "-o",
        tmp_path / "d")
    assert "give --calibration FILE.npz" in err("compile", path, "--target", "sim", "-o",
                                                tmp_path / "d")
    assert main(["compile", str(path), "--target", "sim", "--calibration",
                 str(tmp_path / "cal.npz"), "--batch", "2", "-o", str(tmp_path / "d")]) == 0
    assert "input 0: shape [3, 4], the model takes [2, 4]" in err("run", tmp_path / "d",
                                                                  tmp_path / "bad.npy")
    assert "--on needs a build directory" in err("run", path, tmp_path / "bad.npy", "--on",
                                                 "executor")
    (tmp_path / "d" / "manifest.json").write_text("{\n  oops")
    assert "manifest.json:2:3: " in err("run", tmp_path / "d", tmp_path / "bad.npy")


def test_flatten_feeding_a_non_linear_op_is_an_nchw_copy(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Sigmoid()).eval()
    x = np.random.default_rng(0).standard_normal((3, 2, 5, 4)).astype(np.float32)
    path = _nac(model, x, tmp_path / "m.nac")
    manifest = compile_model(path, "small", tmp_path / "b", samples=[x])
    assert [layer["op"] for layer in manifest["layers"]] == ["conv2d", "transpose", "sigmoid"]
    (q,), run = run_build(tmp_path / "b", [x], on="executor")
    quant = json.loads((tmp_path / "b" / "quant.json").read_text())
    conv, copy = quant["layers"][0]["output"], quant["layers"][1]["output"]
    nhwc = run.memory.buffer(quant["activations"][str(conv)]["buffer"])[:3 * 5 * 4 * 3]
    nchw = run.memory.buffer(f"T{copy}")[:3 * 5 * 4 * 3]
    # the copy holds exactly the conv's codes in NCHW order
    np.testing.assert_array_equal(nchw, nhwc.reshape(3, 5, 4, 3).transpose(0, 3, 1, 2).ravel())
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    assert np.abs(q - ref).max() < 0.01


def test_device_with_few_tokens_gets_a_serial_program(tmp_path):
    from nem.target import SHIPPED, _shipped_dir

    text = (_shipped_dir() / SHIPPED["small"][0]).read_text()
    assert "max_active_tokens = 8" in text
    lines = text.replace("max_active_tokens = 8", "max_active_tokens = 2").splitlines()
    at = next(i for i, line in enumerate(lines) if "per_engine {" in line)
    if not any(line.strip().startswith("CSTL =") for line in lines):
        lines.insert(at + 1, "            CSTL = 1")
    (tmp_path / "two.nem").write_text("\n".join(lines) + "\n")
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 4 * 4, 3)).eval()
    x = np.random.default_rng(3).standard_normal((6, 2, 8, 8)).astype(np.float32)
    path = _nac(model, x, tmp_path / "m.nac")
    out = {}
    for device in ("small", str(tmp_path / "two.nem")):
        manifest = compile_model(path, device, tmp_path / str(len(out)), samples=[x])
        (q,), _ = run_build(tmp_path / str(len(out)), [x], on="executor")
        out[device] = (q, manifest["report"]["serial"])
    assert out["small"][1] is False and out[str(tmp_path / "two.nem")][1] is True
    np.testing.assert_array_equal(out["small"][0], out[str(tmp_path / "two.nem")][0])


def test_device_file_with_includes_travels_with_the_build(tmp_path):
    from nem.checker import check_file
    from nem.target import SHIPPED, _shipped_dir

    devs = tmp_path / "devs"
    devs.mkdir()
    (devs / "base.nem").write_text((_shipped_dir() / SHIPPED["small"][0]).read_text())
    (devs / "mine.nem").write_text('include "base.nem"\n\ndevice mine extends nem_engine_small {\n'
                                   "    unit_characteristics {\n        SEQ {\n"
                                   "            max_active_tokens = 12\n        }\n    }\n}\n")
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3)).eval()
    x = np.random.default_rng(4).standard_normal((2, 3, 2, 2)).astype(np.float32)
    path = _nac(model, x, tmp_path / "m.nac")
    compile_model(path, str(devs / "mine.nem"), tmp_path / "b", samples=[x])
    (tmp_path / "b").rename(tmp_path / "moved")
    assert sorted(p.name for p in (tmp_path / "moved").glob("*.nem")) == [
        "base.nem", "mine.nem", "model.nem"]
    result = check_file(tmp_path / "moved" / "model.nem")
    assert result.ok and result.device.name == "mine"
    (q,), _ = run_build(tmp_path / "moved", [x], on="executor")
    assert q.shape == (2, 3)


def test_damaged_manifest_fields_are_named(tmp_path):
    from nem.build_dir import BuildError

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3)).eval()
    x = np.random.default_rng(4).standard_normal((2, 3, 2, 2)).astype(np.float32)
    path = _nac(model, x, tmp_path / "m.nac")
    compile_model(path, "sim", tmp_path / "b", samples=[x])
    good = json.loads((tmp_path / "b" / "manifest.json").read_text())
    cases = [
        (("files", "binary"), "../elsewhere.bin", "field 'files.binary'"),
        (("inputs", 0, "shape"), [2, -12], "field 'inputs[0].shape'"),
        (("outputs", 0, "dtype"), "f32", "field 'outputs[0].dtype'"),
        (("outputs", 0, "quant"), {"scale": 0, "zero_point": 3}, "field 'outputs[0].quant'"),
        (("inputs", 0, "stored_shape"), [5], "field 'inputs[0].stored_shape'"),
        (("inputs",), "x", "field 'inputs'"),
    ]
    for keys, value, message in cases:
        broken = json.loads(json.dumps(good))
        where = broken
        for k in keys[:-1]:
            where = where[k]
        where[keys[-1]] = value
        (tmp_path / "b" / "manifest.json").write_text(json.dumps(broken))
        with pytest.raises(BuildError, match=re.escape(message)):
            run_build(tmp_path / "b", [x], on="executor")
