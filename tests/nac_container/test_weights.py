"""Weights: internal tensors, external safetensors (memory-mapped), quantisation."""

import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open

from nac import (
    DataSection,
    Instruction,
    NacFile,
    NacFormatError,
    QuantParams,
    Weights,
    dequantize,
    read_nac,
    tensor_from_array,
    write_nac,
)
from nac.encoding import DType, QuantMethod

ALL_DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int32, np.int64,
              np.int16, np.int8, np.uint8, np.bool_]


def model(internal, tensors):
    params = tuple((k, name) for k, name in enumerate(tensors))
    data = DataSection(params=params,
                       tensors=tuple((k, t) for k, t in enumerate(tensors.values()))
                       if internal else None)
    ops = tuple(Instruction(2, 1, (2, k)) for k in range(len(tensors)))
    return NacFile(internal_weights=internal, data=data, ops=ops)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("internal", [True, False])
def test_every_dtype_round_trips(tmp_path, dtype, internal):
    rng = np.random.default_rng(0)
    array = (rng.standard_normal((3, 4)) * 10).astype(dtype)
    tensors = {"w": tensor_from_array(array)}
    path = tmp_path / "m.nac"
    write_nac(model(internal, tensors), path, weights=None if internal else tensors)
    nac = read_nac(path)
    if internal:
        (_pid, tensor), = nac.data.tensors
        got = np.frombuffer(tensor.data, dtype=tensor.dtype.numpy).reshape(tensor.shape)
        assert tensor.dtype == DType.from_numpy(dtype)
    else:
        assert (tmp_path / "m.safetensors").is_file()
        got = nac.weights["w"]
        # Independent reader: the safetensors package itself.
        with safe_open(str(tmp_path / "m.safetensors"), "np") as f:
            np.testing.assert_array_equal(f.get_tensor("w"), array)
    np.testing.assert_array_equal(np.asarray(got), array)


def test_external_weights_are_memory_mapped(tmp_path):
    array = np.arange(1 << 16, dtype=np.float32)
    tensors = {"big": tensor_from_array(array)}
    write_nac(model(False, tensors), tmp_path / "m.nac", weights=tensors)
    w = read_nac(tmp_path / "m.nac").weights
    view = w["big"]
    assert isinstance(view, np.memmap) and not view.flags.writeable
    np.testing.assert_array_equal(view, array)


def test_quantised_dequantise_at_load(tmp_path):
    q = np.array([[-128, 0, 127], [1, -1, 64]], dtype=np.int8)
    per_tensor = tensor_from_array(q, QuantMethod.INT8_TENSOR, QuantParams(scales=(0.5,)))
    per_channel = tensor_from_array(q, QuantMethod.INT8_CHANNEL,
                                    QuantParams(scales=(0.25, 2.0), axis=0))
    # BLOCK_FP8: float8 e4m3 bytes of [1.0, 2.0, 0.5] (0x38, 0x40, 0x30), blocks of 2 with
    # scales 3 and 10 -> [3.0, 6.0, 5.0], original shape [3].
    fp8 = np.array([0x38, 0x40, 0x30, 0x00], dtype=np.uint8)
    block = tensor_from_array(fp8, QuantMethod.BLOCK_FP8,
                              QuantParams(scales=(3.0, 10.0), block_size=2, orig_shape=(3,)))
    tensors = {"t": per_tensor, "c": per_channel, "b": block}
    for internal in (True, False):
        path = tmp_path / f"q{internal}.nac"
        write_nac(model(internal, tensors), path, weights=None if internal else tensors)
        nac = read_nac(path)
        if internal:
            stored = {name: t for (pid, name), (_, t) in zip(nac.data.params, nac.data.tensors,
                                                             strict=True)}
            values = {name: dequantize(np.frombuffer(t.data, t.dtype.numpy).reshape(t.shape),
                                       t.quant, t.quant_params) for name, t in stored.items()}
        else:
            values = {name: nac.weights.float32(name) for name in tensors}
        np.testing.assert_array_equal(values["t"], q.astype(np.float32) * 0.5)
        np.testing.assert_array_equal(values["c"], q * np.array([[0.25], [2.0]], np.float32))
        np.testing.assert_array_equal(values["b"], np.array([3.0, 6.0, 5.0], np.float32))


def test_bad_quant_parameters_rejected(tmp_path):
    q = np.zeros((2, 3), np.int8)
    bad = tensor_from_array(q, QuantMethod.INT8_CHANNEL, QuantParams(scales=(1.0,), axis=0))
    with pytest.raises(NacFormatError, match="one scale per index of axis 0"):
        write_nac(model(True, {"w": bad}), tmp_path / "m.nac")


def test_corrupt_safetensors_header(tmp_path):
    path = tmp_path / "w.safetensors"
    path.write_bytes((10**6).to_bytes(8, "little") + b"{}")
    with pytest.raises(NacFormatError, match="header length 1000000 exceeds the file"):
        Weights(path)
    path.write_bytes((2).to_bytes(8, "little") + b"[]")
    with pytest.raises(NacFormatError, match="not a JSON object"):
        Weights(path)
