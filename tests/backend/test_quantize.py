"""The quantiser's parameter formulas (nem.numerics) and calibration, against hand-derived
values."""

import numpy as np
import pytest

from nem.modelgraph import GraphError, ModelGraph, Node, Ref
from nem.numerics import NumericsError, activation_qparams, bias_codes, weight_scales
from nem.quantize import calibrate, load_calibration, quantize_weights


def test_activation_qparams_by_hand():
    # [-1, 3]: scale 4/255; zero point -128 - rne(-1 / (4/255)) = -128 + rne(63.75) = -64
    scale, zp = activation_qparams(-1.0, 3.0)
    assert scale == 4.0 / 255 and zp == -64
    # a range above 0 is widened to contain 0: [0, 2], zero point -128 (the ReLU case)
    assert activation_qparams(0.5, 2.0) == (2.0 / 255, -128)
    # below 0: [-2, 0] -> zero point 127
    assert activation_qparams(-2.0, -0.5) == (2.0 / 255, 127)
    assert activation_qparams(0.0, 0.0) == (1.0, 0)
    with pytest.raises(NumericsError, match="not a finite interval"):
        activation_qparams(1.0, float("nan"))


def test_weight_scales_and_codes_by_hand():
    w = np.array([[1.0, -2.0], [0.5, 0.25], [0.0, 0.0]])
    np.testing.assert_array_equal(weight_scales(w, axis=1), [1 / 127, 2 / 127])
    np.testing.assert_array_equal(weight_scales(w, axis=0), [2 / 127, 0.5 / 127, 1.0])
    codes, _ = quantize_weights(w, axis=1)
    # 0.5 / (1/127) = 63.5 -> 64 (half to even); 0.25 / (2/127) = 15.875 -> 16
    np.testing.assert_array_equal(codes, [[127, -127], [64, 16], [0, 0]])


def test_bias_codes_by_hand():
    # 1.0 / (0.5 * 0.25) = 8; -0.3 / (0.5 * 0.1) = -6
    np.testing.assert_array_equal(bias_codes([1.0, -0.3], 0.5, [0.25, 0.1]), [8, -6])
    with pytest.raises(NumericsError, match="int32"):
        bias_codes([1.0], 1e-6, [1e-6])


def _relu_graph():
    return ModelGraph([Node(0, "input", "x"), Node(1, "op", "aten.relu.default", [Ref(0)]),
                       Node(2, "output", "output", [Ref(1)])], [0], [1])


def test_calibration_minmax_and_percentile():
    x = np.arange(101, dtype=np.float32).reshape(101, 1) - 50.0  # -50 .. 50
    ranges = calibrate(_relu_graph(), [x], batch=10)
    assert ranges[0] == (-50.0, 50.0) and ranges[1] == (0.0, 50.0)
    # 101 evenly spaced values: the 99th percentile is 49, the 1st is -49
    ranges = calibrate(_relu_graph(), [x], batch=101, method="percentile", percentile=99.0)
    assert ranges[0] == pytest.approx((-49.0, 49.0))
    with pytest.raises(GraphError, match="calibration method"):
        calibrate(_relu_graph(), [x], batch=1, method="mse")


def test_load_calibration_names_the_mismatch(tmp_path):
    np.savez(tmp_path / "c.npz", a=np.zeros((2, 1)), b=np.zeros((2, 1)))
    with pytest.raises(GraphError, match=r"c.npz: 2 array\(s\), the model has 1 input\(s\) "
                       r"\(x\)"):
        load_calibration(tmp_path / "c.npz", _relu_graph())
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(GraphError, match=r"bad\.npz"):
        load_calibration(tmp_path / "bad.npz", _relu_graph())
