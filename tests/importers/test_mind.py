"""MIND Core IR importer: the upstream examples and hand-written graphs against numpy,
and located verification errors."""

from pathlib import Path

import numpy as np
import pytest

from nac import dumps, loads
from nac.compile import compile_graph
from nac.import_mind import MindError, import_mind
from nac.runtime import run

DATA = Path(__file__).parent / "data"


def execute(text_or_path, inputs):
    graph = import_mind(text_or_path)
    nac, _, _ = compile_graph(graph)
    nac = loads(dumps(nac))  # through the binary form
    return run(nac, inputs)


def test_simple_module():
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3))
    (out,) = execute(DATA / "simple_module.ir", [a, b, c])
    np.testing.assert_allclose(out, (a + b) * c, rtol=1e-6)


def test_matmul_module():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    ba, bb = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    va, vb = rng.standard_normal(4), rng.standard_normal(4)
    ins = [x.astype(np.float32) for x in (a, b, ba, bb, va, vb)]
    outs = execute(DATA / "matmul_module.ir", ins)
    a, b, ba, bb, va, vb = ins
    want = [a @ b, a.T @ a, np.einsum("bij,bjk->bik", ba, bb), np.float32(sum(va * vb))]
    for got, exp in zip(outs, want, strict=True):
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5)


def test_reduction_module():
    x = np.random.default_rng(3).standard_normal((4, 5, 6)).astype(np.float32)
    outs = execute(DATA / "reduction_module.ir", [x])
    want = [x.sum(), x.sum(axis=1), x.sum(axis=1, keepdims=True), x.mean(axis=(0, 2)),
            x.sum(axis=(0, 1), keepdims=True)]
    for got, exp in zip(outs, want, strict=True):
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5)


def test_autodiff_output_with_aliases():
    # %4 = sum(x + x*y); gradients: d/dx = 1 + y (%12), d/dy = x (%11).
    rng = np.random.default_rng(4)
    x, y = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    total, dx, dy = execute(DATA / "autodiff_output.ir", [x, y])
    np.testing.assert_allclose(total, (x + x * y).sum(), rtol=1e-5)
    np.testing.assert_allclose(dx, 1 + y, rtol=1e-6)
    np.testing.assert_allclose(dy, x, rtol=1e-6)


def test_shape_ops_index_slice_gather_conv():
    text = """
%0 = Input() {name: "x"} : Tensor<f32, [2, 3, 4]>
%1 = Reshape(%0, [4, -1]) : Tensor<f32, [4, 6]>
%2 = ExpandDims(%1, [0, 2]) : Tensor<f32, [1, 4, 1, 6]>
%3 = Squeeze(%2, [0, 2]) : Tensor<f32, [4, 6]>
%4 = Slice(%3, [1:4:2, 0:6:3]) : Tensor<f32, [2, 2]>
%5 = Index(%0, [1, 2, 3]) : Tensor<f32, []>
%6 = ConstTensor([2, 0]) : Tensor<i64, [2]>
%7 = Gather(%3, %6) : Tensor<f32, [2, 6]>
%8 = Neg(%7) : Tensor<f32, [2, 6]>
%9 = Input() {name: "img"} : Tensor<f32, [1, 5, 5, 2]>
%10 = Input() {name: "w"} : Tensor<f32, [3, 3, 2, 4]>
%11 = Conv2d(%9, %10, [2, 2], Same) : Tensor<f32, [1, 3, 3, 4]>
%12 = Relu(%11) : Tensor<f32, [1, 3, 3, 4]>
outputs: %4, %5, %8, %12
"""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    img = rng.standard_normal((1, 5, 5, 2)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 4)).astype(np.float32)
    sliced, element, gathered, conv = execute(text, [x, img, w])
    m = x.reshape(4, 6)
    np.testing.assert_array_equal(sliced, m[1:4:2, 0:6:3])
    assert element == x[1, 2, 3]
    np.testing.assert_array_equal(gathered, -m[[2, 0]])
    # SAME with stride 2 on 5x5, kernel 3: output 3x3, total padding 2 -> 1 before, 1 after.
    padded = np.pad(img, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros((1, 3, 3, 4), np.float32)
    for oy in range(3):
        for ox in range(3):
            for f in range(4):
                want[0, oy, ox, f] = sum(
                    padded[0, 2 * oy + i, 2 * ox + j, c] * w[i, j, c, f]
                    for i in range(3) for j in range(3) for c in range(2))
    np.testing.assert_allclose(conv, np.maximum(want, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("text", "message"), [
    ('%0 = Input() {name: "a"} : Tensor<f32, [2]>\n%0 = Relu(%0) : Tensor<f32, [2]>\n'
     "outputs: %0", r"m\.ir:2:1: %0 is defined twice \(first on line 1\)"),
    ('%0 = Input() {name: "a"} : Tensor<f32, [2]>\n%1 = Relu(%5) : Tensor<f32, [2]>\n'
     "outputs: %1", r"m\.ir:2:11: %5 is not defined before use"),
    ('%0 = Input() {name: "a"} : Tensor<f32, [2, 3]>\n%1 = Input() {name: "b"} : '
     "Tensor<f32, [4]>\n%2 = BinOp(Add, %0, %1) : Tensor<f32, [2, 3]>\noutputs: %2",
     r"m\.ir:3:6: shapes \[2, 3\] and \[4\] do not broadcast"),
    ('%0 = Input() {name: "a"} : Tensor<f32, [2, 3]>\n%1 = Reshape(%0, [4, 2]) : '
     "Tensor<f32, [4, 2]>\noutputs: %1", r"reshape from \[2, 3\] \(6 elements\) to \[4, 2\]"),
    ('%0 = Input() {name: "a"} : Tensor<f32, [2, 3]>\n%1 = Relu(%0) : Tensor<f32, [3, 2]>\n'
     "outputs: %1", r"m\.ir:2:17: declared type Tensor<float32, \[3, 2\]> differs"),
    ('%0 = Input() {name: "a"} : Tensor<f32, [2, 3]>\n%1 = Input() {name: "b"} : '
     "Tensor<i64, [2, 3]>\n%2 = BinOp(Mul, %0, %1) : Tensor<f32, [2, 3]>\noutputs: %2",
     "different dtypes float32 and int64"),
    ('%0 = Input() {name: "a"} : Tensor<f32, [2, 3]>\n%1 = BinOp(Div, %0, %0) : '
     "Tensor<f32, [2, 3]>\noutputs: %1", "Div is not Core v1"),
    ('%0 = Input() {name: "a"} : Tensor<f32, [3, 4]>\n%1 = Input() {name: "b"} : '
     "Tensor<f32, [5, 2]>\n%2 = MatMul(%0, %1) : Tensor<f32, [3, 2]>\noutputs: %2",
     r"inner dimensions differ: \[3, 4\] and \[5, 2\]"),
    ('%0 = Input() {name: "a"} : Tensor<f32, [1, 3]>\n%1 = Squeeze(%0, [1]) : '
     "Tensor<f32, [1]>\noutputs: %1", "cannot squeeze axis 1 of size 3"),
    ('%0 = Input() {name: "a"} : Tensor<f32, [2]>\n', r"missing the 'outputs: \.\.\.'"),
    ('%0 = Input() {name: "a"} : Tensor<q8, [2]>\noutputs: %0', "unknown dtype 'q8'"),
    ('%0 = Input() {name: "a"} : Tensor<f32, [2, 3]>\n%1 = Transpose(%0, [0, 0]) : '
     "Tensor<f32, [2, 2]>\noutputs: %1", "not a permutation of the 2 axes"),
])
def test_verification_errors(text, message):
    with pytest.raises(MindError, match=message):
        import_mind(text, path="m.ir")


def test_cli_import_and_run(tmp_path, capsys):
    from npu.tools.cli import main

    out = tmp_path / "simple.nac"
    assert main(["import", "mind", str(DATA / "simple_module.ir"), "-o", str(out)]) == 0
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3)]
    for k, a in enumerate(arrays):
        np.save(tmp_path / f"in{k}.npy", a)
    assert main(["run", str(out), *(str(tmp_path / f"in{k}.npy") for k in range(3)),
                 "--save", str(tmp_path / "y")]) == 0
    a, b, c = arrays
    np.testing.assert_allclose(np.load(tmp_path / "y.0.npy"), (a + b) * c, rtol=1e-6)
    bad = tmp_path / "bad.ir"
    bad.write_text('%0 = Input() {name: "a"} : Tensor<f32, [2]>\noutputs: %3\n')
    capsys.readouterr()
    assert main(["import", "mind", str(bad), "-o", str(tmp_path / "bad.nac")]) == 1
    assert f"npu: error: {bad}:2:10: output %3 is not defined" in capsys.readouterr().err
