"""The memory image: which buffers are loads and results, the file, and bad files."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nem.binder import bind, plan_from_binary
from nem.checker import check_file, check_text
from nem.executor import execute
from nem.memimage import (
    MemoryImageError,
    buffer_use,
    build_image,
    read_image,
    write_image,
)
from nem.taskformat import encode
from npu.tools.cli import main

PROGRAMS = Path(__file__).resolve().parents[1] / "nem_executor" / "programs"

STAGED = """device "exec_device.nem"
buffer IN : DDR (size=512)
buffer OUT : DDR (size=512)
buffer S : L2 (size=512)
buffer X : L1 (size=512)
buffer P : L1 (size=512)
t0 = transfer.async(dst=region(S, 0, 512), src=region(IN, 0, 512))
t1 = transfer.async(dst=region(X, 0, 256), src=region(S, 0, 256), deps=[t0])
t2 = transfer.async(dst=region(OUT, 0, 512), src=region(X, 0, 512), deps=[t1])
t3 = transfer.async(dst=region(P, 0, 64), src=region(P, 64, 64))
wait(t2)
wait(t3)
"""


def _checked(text):
    result = check_text(text, file="p.nem", base_dir=str(PROGRAMS))
    assert result.ok, [str(d) for d in result.diagnostics]
    return result


def test_loads_and_results_in_program_order():
    use = buffer_use(_checked(STAGED).plan)
    # IN is read first: a load. S is written (t0) before t1 reads it: not a load. X: t2 reads
    # 512 bytes of which t1 wrote only 256, so the rest must come from the image. P: t3
    # reads bytes nobody wrote. OUT is only written.
    assert use == {
        "IN": (True, False),
        "OUT": (False, True),
        "S": (False, True),
        "X": (True, True),
        "P": (True, True),
    }


def test_strided_output_does_not_count_as_writing_its_holes():
    text = """device "exec_device.nem"
buffer S : L2 (size=64)
buffer X : L1 (size=64)
buffer Y : L2 (size=64)
let holes = region(X, 0, 64) elem=i8, shape=[4, 8], strides=[16, 1]
t0 = transfer.async(dst=holes, src=region(S, 0, 32) elem=i8, shape=[4, 8], layout=MN)
t1 = transfer.async(dst=region(Y, 0, 64), src=region(X, 0, 64), deps=[t0])
wait(t1)
"""
    assert buffer_use(_checked(text).plan)["X"] == (True, True)


def _gemm_image(tmp_path, seed=2):
    result = check_file(str(PROGRAMS / "gemm_bias_relu.nem"))
    program = bind(result)
    rng = np.random.default_rng(seed)
    initial = {
        "A_L2": rng.standard_normal(256 * 256).astype(np.float16),
        "B_L2": (rng.standard_normal(256 * 128) / 16).astype(np.float16),
        "C_L2": rng.standard_normal(128).astype(np.float16),
    }
    path = tmp_path / "gemm.safetensors"
    write_image(path, build_image(program, result.plan, initial))
    return result, program, initial, path


def test_image_file_round_trip_and_run(tmp_path):
    result, program, initial, path = _gemm_image(tmp_path)
    image = read_image(path, program)
    assert [b.name for b in image.buffers if b.load] == ["A_L2", "B_L2", "C_L2"]
    assert [b.name for b in image.buffers if b.result] == ["Y_L2", "A_L1", "B_L1", "Y_L1"]
    want = execute(result.plan, result.device, initial)
    plan = plan_from_binary(program, result.device)
    got = execute(plan, result.device, image.initial(), in_order=True)
    for name in result.plan.buffers:
        np.testing.assert_array_equal(got.memory.buffer(name), want.memory.buffer(name), name)
    # the file read independently: 8-byte header length, JSON header, U8 tensors of the
    # whole buffers, the metadata naming the binary by its sha256
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__")
    assert meta["nem.image"] == "1.0"
    assert meta["nem.program_sha256"] == hashlib.sha256(encode(program)).hexdigest()
    assert meta["nem.device_sha256"] == program.device_hash.hex()
    table = {b.name: b for b in program.buffers}
    for name, info in header.items():
        assert info["dtype"] == "U8" and info["shape"] == [table[name].size]
        lo, hi = info["data_offsets"]
        body = raw[8 + n + lo : 8 + n + hi]
        expect = np.zeros(table[name].size, np.uint8)
        src = initial[name].view(np.uint8)
        expect[: src.size] = src
        assert body == expect.tobytes(), name
    listed = json.loads(meta["nem.buffers"])
    assert [(b["name"], b["address"]) for b in listed] == [
        (b.name, b.address) for b in program.buffers
    ]
    # the binary goes after the DDR buffers (this program has none): address 0
    assert meta["nem.program_address"] == "0"


def test_image_of_another_binary_or_malformed_is_refused(tmp_path):
    _, program, _, path = _gemm_image(tmp_path)
    other = dataclasses.replace(program, tasks=program.tasks[:-1])
    with pytest.raises(MemoryImageError, match="made for the binary with sha256"):
        read_image(path, other)
    good = path.read_bytes()
    n = int.from_bytes(good[:8], "little")
    header = json.loads(good[8 : 8 + n])

    def rewrite(change):
        h = json.loads(json.dumps(header))
        change(h)
        text = json.dumps(h).encode()
        bad = tmp_path / "bad.safetensors"
        bad.write_bytes(len(text).to_bytes(8, "little") + text + good[8 + n :])
        return bad

    cases = [
        (lambda h: h["__metadata__"].pop("nem.buffers"), "metadata has no nem.buffers"),
        (lambda h: h["__metadata__"].update({"nem.image": "2.0"}), "image version 2.0"),
        (lambda h: h.pop("B_L2"), "buffer B_L2 is a load but the file has no tensor"),
        (lambda h: h["A_L2"].update(dtype="F16"), "tensor 'A_L2': dtype 'F16'"),
        (lambda h: h["C_L2"].update(data_offsets=[0, 10**9]), r"tensor 'C_L2': data_offsets"),
        (
            lambda h: h["__metadata__"].update({"nem.buffers": "[{}]"}),
            r"nem.buffers\[0\]: needs exactly the fields",
        ),
        (
            lambda h: h["__metadata__"].update({"nem.program_address": "x1"}),
            "nem.program_address 'x1'",
        ),
    ]
    for change, message in cases:
        with pytest.raises(MemoryImageError, match=message):
            read_image(rewrite(change), program)
    with pytest.raises(MemoryImageError, match="header length"):
        short = tmp_path / "short.safetensors"
        short.write_bytes(good[: 8 + n // 2])
        read_image(short)
    with pytest.raises(MemoryImageError, match="cannot read"):
        read_image(tmp_path / "missing.safetensors")


@pytest.fixture(scope="module")
def image_bytes(tmp_path_factory):
    *_, path = _gemm_image(tmp_path_factory.mktemp("img"), seed=4)
    return path.read_bytes()


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_damaged_images_are_clear_errors(image_bytes, tmp_path_factory, data):
    raw = bytearray(image_bytes)
    n = int.from_bytes(raw[:8], "little")
    for _ in range(data.draw(st.integers(1, 4))):
        # most damage goes to the header, where the structure is
        at = data.draw(st.integers(0, min(len(raw) - 1, 8 + n + 64)))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(raw))))
    path = tmp_path_factory.mktemp("fuzz") / "x.safetensors"
    path.write_bytes(bytes(raw[:cut]))
    try:
        read_image(path)
    except MemoryImageError as exc:
        assert str(path) in str(exc)


def test_cli_bind_image_and_run(tmp_path):
    for name in ("exec_device.nem", "npm_baseline_1.0.nem"):
        if (PROGRAMS / name).exists():
            shutil.copy(PROGRAMS / name, tmp_path / name)
    src = tmp_path / "staged.nem"
    src.write_text(STAGED)
    rng = np.random.default_rng(1)
    inp = tmp_path / "in.npz"
    np.savez(inp, IN=rng.integers(0, 256, 512, dtype=np.uint8),
             P=rng.integers(0, 256, 512, dtype=np.uint8))  # fmt: skip
    binary, img = tmp_path / "p.bin", tmp_path / "p.safetensors"
    assert main(["nem", "bind", str(src), "-o", str(binary), "--image", str(img),
                 "--memory", str(inp)]) == 0  # fmt: skip
    out_text, out_bin = tmp_path / "a.npz", tmp_path / "b.npz"
    assert main(["nem", "run", str(src), "--memory", str(inp), "-o", str(out_text)]) == 0
    dev = str(tmp_path / "exec_device.nem")
    assert main(["nem", "run", str(binary), "--device", dev, "--image", str(img),
                 "-o", str(out_bin)]) == 0  # fmt: skip
    a, b = np.load(out_text), np.load(out_bin)
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name], name)
    assert main(["nem", "bind", str(src), "-o", str(binary), "--memory", str(inp)]) == 2
