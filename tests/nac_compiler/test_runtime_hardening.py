"""The float runtime and ``npu run`` on hostile input (issue 24): corrupted constants,
wrong inputs and wrong file kinds give a named NacRuntimeError / ``npu: error`` with exit
status 1, never a traceback or a multi-gigabyte allocation.

The corrupted models are the zoo CNN with one argument of one instruction pointed at a new
constant (the other instructions keep theirs): the values are the ones the issue found
(zero strides and groups, huge paddings) and each expected message names the argument and
the value written into the file.
"""

import dataclasses
import resource

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nac import dumps, loads  # noqa: E402
from nac.compile import compile_module  # noqa: E402
from nac.container import Constant  # noqa: E402
from nac.encoding import ConstType  # noqa: E402
from nac.runtime import MAX_ELEMENTS, NacRuntimeError, run  # noqa: E402
from nac.zoo import build  # noqa: E402


@pytest.fixture(scope="module")
def cnn():
    module, (x,) = build("cnn")
    nac, _, _ = compile_module(module, (x,))
    return loads(dumps(nac)), x.numpy()


def _with_constant(nac, op, occurrence, slot, value, ctype=ConstType.LIST_INT32):
    """*nac* with constant argument *slot* of the *occurrence*-th *op* set to *value*."""
    indices = [i for i, ins in enumerate(nac.ops) if nac.op_name(ins.a) == op]
    index = indices[occurrence]
    ins = nac.ops[index]
    new_id = max(i for i, _ in nac.cnst) + 1
    c = list(ins.c)
    c[1 + slot] = new_id
    ops = list(nac.ops)
    ops[index] = dataclasses.replace(ins, c=tuple(c))
    nac = dataclasses.replace(nac, ops=tuple(ops),
                              cnst=(*nac.cnst, (new_id, Constant(ctype, value))))
    return loads(dumps(nac)), index


def _limited(fn):
    """Run *fn* with the address space capped 1 GB above what the process uses now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        used = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + (1 << 30), hard))
    try:
        return fn()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.parametrize("op, occurrence, slot, value, message", [
    # conv2d(x, w, b, stride, padding, dilation, groups): C slots 0..3 of the first conv.
    ("aten.conv2d.default", 0, 0, (0, 0), r"conv2d stride must be at least 1, got \[0, 0\]"),
    ("aten.conv2d.default", 0, 2, (0, 1), r"conv2d dilation must be at least 1, got \[0, 1\]"),
    ("aten.conv2d.default", 0, 1, (-2, 1), r"conv2d padding must be at least 0, got \[-2, 1\]"),
    # 40000 rows of padding on a [2, 3, 16, 16] input: 2 * 3 * 80016 * 80016 elements padded.
    ("aten.conv2d.default", 0, 1, (40000, 40000),
     rf"conv2d padded input of shape \[2, 3, 80016, 80016\] has 38415361536 elements, over "
     rf"the runtime's cap of {MAX_ELEMENTS}"),
    # max_pool2d(x, kernel, stride, padding, dilation, ceil): slots 0..4.
    ("aten.max_pool2d.default", 0, 0, (0, 2), r"max_pool2d kernel_size must be at least 1"),
    ("aten.max_pool2d.default", 0, 1, (2, 0), r"max_pool2d stride must be at least 1"),
    ("aten.max_pool2d.default", 0, 0, (17, 17), r"max_pool2d: window 17 .* does not fit "
     r"input size 16"),
    ("aten.adaptive_avg_pool2d.default", 0, 0, (0, 1),
     r"adaptive_avg_pool2d output_size must be at least 1, got \[0, 1\]"),
])
def test_corrupted_list_constants_are_named(cnn, op, occurrence, slot, value, message):
    nac, x = cnn
    bad, index = _with_constant(nac, op, occurrence, slot, value)
    with pytest.raises(NacRuntimeError, match=rf"instruction {index} \({op}\): {message}"):
        _limited(lambda: run(bad, [x]))


def test_zero_groups_is_named(cnn):
    nac, x = cnn
    bad, index = _with_constant(nac, "aten.conv2d.default", 0, 3, 0, ConstType.INT64)
    with pytest.raises(NacRuntimeError, match=rf"instruction {index} .*groups must be a "
                       r"positive divisor of the 8 filters, got 0"):
        run(bad, [x])


def test_missing_constant_id_is_named(cnn):
    nac, x = cnn
    index = next(i for i, ins in enumerate(nac.ops)
                 if nac.op_name(ins.a) == "aten.conv2d.default")
    c = list(nac.ops[index].c)
    c[1] = 999  # no CNST entry has id 999
    ops = list(nac.ops)
    ops[index] = dataclasses.replace(ops[index], c=tuple(c))
    bad = dataclasses.replace(nac, ops=tuple(ops))
    with pytest.raises(NacRuntimeError, match=rf"instruction {index} .*constant id 999 is not "
                       r"in CNST"):
        run(bad, [x])


def test_broadcast_over_the_cap_is_refused_before_allocating():
    from nac.runtime import KERNELS

    a = np.zeros((1 << 15, 1), np.float32)
    b = np.zeros((1, 1 << 14), np.float32)  # 2**29 elements broadcast, over the 2**28 cap
    with pytest.raises(NacRuntimeError, match="broadcast result of shape \\[32768, 16384\\]"):
        _limited(lambda: KERNELS["nac.add"](a, b))


def test_input_count_dtype_and_origin(cnn):
    nac, x = cnn
    with pytest.raises(NacRuntimeError, match=r"takes 1 input\(s\) \(input 0 \('input'\)\), got 2"):
        run(nac, [x, x])
    with pytest.raises(NacRuntimeError, match=r"takes 1 input\(s\) .*, got 0"):
        run(nac, [])
    with pytest.raises(NacRuntimeError, match=r"input 0 \('input'\): expected float32 .*got "
                       r"float64 \[2, 3, 16, 16\]"):
        run(nac, [x.astype(np.float64)])
    with pytest.raises(NacRuntimeError, match=r"input 0 \('input'\): expected float32 values, "
                       r"integer indices or a boolean mask, got complex64"):
        run(nac, [x.astype(np.complex64)])
    # A wrong rank reaches the first kernel, whose error names the input it came from.
    with pytest.raises(NacRuntimeError, match=r"conv2d input must have rank 4, got shape "
                       r"\[2, 3, 16, 16, 1\] \(tensor operands: float32 \[2, 3, 16, 16, 1\] "
                       r"from input 0 \('input'\)"):
        run(nac, [x[..., None]])


def test_cli_file_kinds_and_save_stem(cnn, tmp_path, capsys):
    from npu.tools.cli import main

    nac, x = cnn
    model = tmp_path / "cnn.nac"
    model.write_bytes(dumps(nac))
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "x.npz", x=x)
    assert main(["run", str(model), str(tmp_path / "x.npz")]) == 1
    err = capsys.readouterr().err
    assert f"npu: error: input {tmp_path / 'x.npz'}: an .npz archive" in err
    assert "Traceback" not in err
    assert main(["run", str(model), str(tmp_path / "x.npy"), "--constants",
                 str(tmp_path / "x.npy")]) == 1
    assert f"constants {tmp_path / 'x.npy'}: a single .npy array, expected an .npz archive" \
        in capsys.readouterr().err
    assert main(["run", str(model), str(tmp_path)]) == 1
    assert f"input {tmp_path}: is a directory" in capsys.readouterr().err
    (tmp_path / "junk.npy").write_bytes(b"\x93NUMPY\x01\x00junk")
    assert main(["run", str(model), str(tmp_path / "junk.npy")]) == 1
    assert f"input {tmp_path / 'junk.npy'}:" in capsys.readouterr().err
    # --save keeps every dot of the stem: r.v1 and r.v2 do not overwrite each other.
    for stem in ("r.v1", "r.v2"):
        assert main(["run", str(model), str(tmp_path / "x.npy"), "--save",
                     str(tmp_path / stem)]) == 0
    assert (tmp_path / "r.v1.0.npy").is_file() and (tmp_path / "r.v2.0.npy").is_file()
    capsys.readouterr()
