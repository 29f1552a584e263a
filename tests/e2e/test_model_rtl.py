"""Compiled models on the engine RTL: ``npu run DIR x.npy --on rtl|all`` (issue 22).

The zoo ``mlp`` (linear + ReLU / GELU lookup tables on the CSTL) is compiled for ``small``
and run on its RTL (the regression's cached Verilator build), once with random AXI pauses
and once through ``npu run --on all``: every buffer equals the executor's run of the same
binary byte for byte, and the dequantised outputs equal the executor's. Built with an
argmax head (``argmax=True``: i32 class indices from the CSTL's argmax) it runs on
``small`` the same way. The zoo ``cnn`` (max / average pooling on the CSTL) on ``sim``
(marker ``sim_device``: ``make test-sim-device``; ``make sim`` runs the zoo on that RTL
too) either runs and equals the executor, or, while the CSTL RTL lacks a pooling
datapath, stops with UNIT_ERROR naming the task, ``CSTL`` and the pooling opcode, the
model layer and the cause ``OPCODE`` (the op the RTL refuses) -- never a hang. Corrupted
build directories (truncated binary, an image of another build, a build bound for another
device) are refused before the simulation with the file named, also through the CLI.
"""

from __future__ import annotations

import json
import shutil
from argparse import Namespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nem.backend_cli import compile_cmd  # noqa: E402
from nem.build_dir import BuildError, run_build  # noqa: E402
from npu.tools.cli import main  # noqa: E402
from sim.model_run import compare_outputs, run_model  # noqa: E402
from sim.program_run import SimError, engine_design  # noqa: E402
from sim.report import write_model_report  # noqa: E402


def _compile(model, device, out, argmax=False):
    args = Namespace(model=model, target=device, output=str(out), calibration=None,
                     calibration_method="minmax", percentile=99.99, batch=None, argmax=argmax)
    compile_cmd(args)
    return out


def _input(build, seed=0):
    entry = json.loads((build / "manifest.json").read_text())["inputs"][0]
    return np.random.default_rng(seed).standard_normal(entry["shape"]).astype(np.float32)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    return {(m, d): _compile(m, d, root / f"{m}-{d}")
            for m, d in (("mlp", "small"), ("mlp", "sim"), ("cnn", "sim"))}


def _group(device):
    return pytest.mark.xdist_group(engine_design(device).key)


@pytest.mark.cocotb
@_group("small")
def test_mlp_on_the_rtl_equals_the_executor(builds, tmp_path):
    build = builds[("mlp", "small")]
    x = _input(build)
    run = run_model(build, [x], seed=3, stalls=True)  # random AXI pauses
    assert run.error is None, run.error
    assert run.mismatch is None, str(run.mismatch)
    c = run.rtl.counters
    assert c["TASKS_DONE"] == len(run.prep.program.tasks)
    # the relu/gelu tables ran on the CSTL, the linears on the NMU
    assert c["BUSY_NMU0"] > 0 and c["BUSY_CSTL0"] > 0
    (want,), _ = run_build(build, [x], on="executor")
    np.testing.assert_array_equal(run.outputs[0], want)
    (f,), _ = run_build(build, [x], on="float")
    (row,) = compare_outputs([f], run.outputs)
    assert row["rows"] == 3 and row["max_error"] <= 0.05 * row["scale"]
    page = write_model_report(tmp_path / "rep", run, floats=[f]).read_text()
    assert page.count("<svg") == 3 and "RTL == executor byte for byte" in page
    for layer in run.manifest["layers"]:  # a row per layer
        assert f"{layer['instruction']} {layer['op']}</td>" in page


@pytest.mark.cocotb
@_group("small")
def test_mlp_with_an_argmax_head_on_the_rtl_equals_the_executor(tmp_path):
    """The zoo ``mlp`` built with an argmax head (``--argmax``: its [N, C] output -> i32
    class indices on the CSTL) runs on the small device's RTL: every buffer equals the
    executor's byte for byte and the indices equal the executor's."""
    build = _compile("mlp", "small", tmp_path / "mlp-argmax", argmax=True)
    layers = json.loads((build / "manifest.json").read_text())["layers"]
    assert [(layer["op"], layer["unit"]) for layer in layers][-1] == ("argmax", "CSTL")
    x = _input(build, seed=2)
    run = run_model(build, [x], seed=4)
    assert run.error is None, run.error
    assert run.mismatch is None, str(run.mismatch)
    assert run.rtl.counters["TASKS_DONE"] == len(run.prep.program.tasks)
    (want,), _ = run_build(build, [x], on="executor")
    np.testing.assert_array_equal(run.outputs[0], want)
    assert np.issubdtype(np.asarray(want).dtype, np.integer) and np.asarray(want).ndim == 1


@pytest.mark.cocotb
@_group("small")
def test_npu_run_on_all_through_the_cli(builds, tmp_path, capsys):
    build = builds[("mlp", "small")]
    x = _input(build, seed=1)
    np.save(tmp_path / "x.npy", x)
    stem = tmp_path / "out"
    assert main(["run", str(build), str(tmp_path / "x.npy"), "--on", "all", "--save",
                 str(stem), "--report", str(tmp_path / "rep"), "--trace",
                 str(tmp_path / "t.json")]) == 0
    text = capsys.readouterr().out
    # the trace: one span per task on the RTL (pid 1) and on the executor (pid 2)
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    tasks = len(json.loads((build / "manifest.json").read_text())["task_layers"])
    for pid in (1, 2):
        spans = sorted(e["args"]["task"] for e in events if e["ph"] == "X" and e["pid"] == pid)
        assert spans == list(range(tasks))
    assert "RTL == executor: " in text and "bytes equal byte for byte" in text
    assert "top-1 agreement" in text and "RTL / executor" in text
    rtl, exe = np.load(f"{stem}.rtl.0.npy"), np.load(f"{stem}.executor.0.npy")
    np.testing.assert_array_equal(rtl, exe)
    (want,), _ = run_build(build, [x], on="executor")
    np.testing.assert_array_equal(rtl, want)
    (f,), _ = run_build(build, [x], on="float")
    np.testing.assert_array_equal(np.load(f"{stem}.float.0.npy"), f)
    assert (tmp_path / "rep" / "report.html").is_file()
    for layer in json.loads((build / "manifest.json").read_text())["layers"]:
        assert f"{layer['op']:<9}{layer['unit']:<5}" in text  # the per-layer table


@pytest.mark.cocotb
@pytest.mark.sim_device
@_group("sim")
def test_cnn_on_the_rtl_equals_the_executor_or_names_the_refused_op(builds):
    build = builds[("cnn", "sim")]
    run = run_model(build, [_input(build)], seed=5)
    if run.error is None:
        assert run.mismatch is None, str(run.mismatch)
        return
    k = run.rtl.counters["ERROR_TASK"]
    task = run.prep.program.tasks[k]
    assert task.unit.name == "CSTL", run.error
    layer = run.manifest["layers"][run.manifest["task_layers"][k][0]]
    assert layer["unit"] == "CSTL"
    assert run.rtl.cause == "UNIT_ERROR"
    assert f"at task {k} ({run.prep.labels[k]}): CSTL{task.instance} {layer['op']} " \
           f"refused with cause OPCODE" in run.error
    assert f"model layer: instruction {layer['instruction']} {layer['op']}" in run.error


def test_corrupted_build_directories_are_refused_by_file(builds, tmp_path, capsys):
    src = builds[("mlp", "small")]
    x = _input(src)
    np.save(tmp_path / "x.npy", x)
    cut = tmp_path / "cut"
    shutil.copytree(src, cut)
    (cut / "model.bin").write_bytes((src / "model.bin").read_bytes()[:100])
    with pytest.raises(BuildError, match=r"cut/model\.bin: "):
        run_model(cut, [x])
    assert main(["run", str(cut), str(tmp_path / "x.npy"), "--on", "rtl"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("npu: error: ") and "model.bin" in err and "Traceback" not in err
    # the memory image of another build (sim) does not belong to this binary
    other = tmp_path / "other"
    shutil.copytree(src, other)
    shutil.copyfile(builds[("mlp", "sim")] / "model.image.safetensors",
                    other / "model.image.safetensors")
    with pytest.raises(BuildError, match=r"model\.image\.safetensors"):
        run_model(other, [x])
    # a binary bound for another device than the shipped engine the manifest names
    moved = tmp_path / "moved"
    shutil.copytree(builds[("mlp", "sim")], moved)
    manifest = json.loads((moved / "manifest.json").read_text())
    manifest["target"] = "small"
    (moved / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SimError, match=r"not the shipped small engine.*BAD_DEVICE"):
        run_model(moved, [x])
    assert main(["run", str(tmp_path), str(tmp_path / "x.npy"), "--on", "rtl"]) == 1
    assert "is not a build directory" in capsys.readouterr().err
