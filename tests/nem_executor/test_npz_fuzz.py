"""The executor's memory-image reader (``npu nem run --memory``): any bytes give buffers or
an ExecError naming the file, never another exception."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nem.executor import ExecError, load_npz


def _valid_npz() -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, A=np.arange(100, dtype=np.int16), B=np.ones((3, 4), np.float16))
    return buf.getvalue()


VALID = _valid_npz()


def test_valid_file_round_trips(tmp_path):
    path = tmp_path / "m.npz"
    path.write_bytes(VALID)
    got = load_npz(path)
    np.testing.assert_array_equal(got["A"], np.arange(100, dtype=np.int16))
    assert got["B"].shape == (3, 4)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "not a readable .npz file"),
        (b"PK\x03\x04 truncated", "not a readable .npz file"),
        (VALID[: len(VALID) // 2], "not a readable .npz file"),
    ],
)
def test_bad_files(tmp_path, content, message):
    path = tmp_path / "bad.npz"
    path.write_bytes(content)
    with pytest.raises(ExecError, match=message):
        load_npz(path)


def test_npy_is_not_npz(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.zeros(3))
    with pytest.raises(ExecError, match=r"not an \.npz archive"):
        load_npz(path)


def test_object_arrays_are_refused(tmp_path):
    path = tmp_path / "o.npz"
    np.savez(path, A=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ExecError, match=r"not a readable \.npz file"):
        load_npz(path)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=8
    ),
    cut=st.integers(0, len(VALID)),
)
def test_mutated_files(tmp_path, edits, cut):
    raw = bytearray(VALID)
    for pos, value in edits:
        raw[pos] = value
    path = tmp_path / "f.npz"
    path.write_bytes(bytes(raw[:cut] if cut < len(raw) // 2 else raw))
    try:
        got = load_npz(path)
    except ExecError as exc:
        assert str(path) in str(exc)
    else:
        assert all(isinstance(v, np.ndarray) for v in got.values())
