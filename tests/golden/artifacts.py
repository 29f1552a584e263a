"""Producers of the byte artifacts the golden-byte test pins: task binaries, memory images
and NAC files, each built from inputs inside the repository.

Each producer returns the exact bytes a user would get from the command line (``npu nem
bind``, ``npu nem bind --image``, ``npu compile``). ``golden_bytes.json`` holds their
SHA-256 and length as recorded before the layout refactor (commit b885d95, issue 19); the
test proves that later refactors leave every encoded byte as it was. It was re-recorded
once, for the one intended encoding change of that work (task binary 1.2, attributes in
fixed slots): the 37 binaries differ from b885d95's in the header's minor version and,
for slice, pad and reduce_sum only, in where their attribute words sit (checked by
decoding both versions: every register, buffer, data byte and decoded attribute equal);
the 2 memory images in the program sha256 they hold; the NAC files not at all. It was
re-recorded a second time for task binary 1.3 (issue 20: the compute register TABLE and
the CSTL's data-section entries): every binary differs from 1.2's in the header's minor
version; besides, only bin/op/clamp (TABLE write + its 256-byte lookup table),
bin/op/add_i8 (REQUANT -> a 48-byte ELTWISE_ENTRY, TABLE = NO_TABLE) and
bin/example/conv2d_relu (TABLE on its 4 i8 relus, one shared table) gained register
writes and data appended after the old data section (checked by decoding both versions:
every other register, buffer, token and data byte equal); the 2 memory images differ in
the program sha256 they hold; the NAC files not at all. The four max-pool engine
programs (bin/engine/{small,sim}/maxpool{,_pads}, issue 20: maxpool on the CSTL RTL) and
the two global average pools (bin/engine/{small,sim}/global_avgpool) were
added to it as new entries, every other entry left as it was; so were the last-axis
reductions (bin/engine/{small,sim}/reduction, issue 20: argmax and reduce_max on the CSTL
RTL).
It was re-recorded a third time for task binary 1.4 (issue 24: the group requantisation
entry of int4 weights quantised per group along a reduction axis): every binary differs
from 1.3's in the header's minor version only (checked: each new binary with its minor set
back to 3 has the recorded 1.3 digest; none of them holds an int4 task), the 2 memory
images in the program sha256 they hold, the NAC files not at all. Regenerate the file
(``python tests/golden/record.py``) only for an intended change of an encoding, and say so
in the commit.
"""

from __future__ import annotations

import hashlib
import io
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "nem_executor" / "programs"
GOLDEN = Path(__file__).with_name("golden_bytes.json")

#: One-task programs on the ops test device (texts from ``tests/nem_executor/test_ops``'s
#: ``program``) that exercise every attribute type (int, float, bool, elem_type, id,
#: int_list of fixed and variable length) and absent optional attributes, so the
#: attribute-word encoding is pinned, not only the NMU's. (opcode, inputs, outputs, attrs),
#: an operand as (elem, shape, (scale, zero point) or None, layout or None).
OP_CASES = {
    "conv2d_int8": (
        "conv2d", [("i8", (1, 5, 5, 8), (0.05, 3), None),
                   ("i8", (3, 3, 8, 4), (0.02, 0), "HWIO")],
        [("i8", (1, 2, 2, 4), (0.1, -2), None)],
        "pads=[0, 1, 1, 0] strides=[2, 2] dilations=[1, 1] accum_type=i32"),
    "conv2d_f32": (
        "conv2d", [("f32", (1, 4, 4, 2), None, None), ("f32", (3, 3, 2, 3), None, "HWIO")],
        [("f32", (1, 2, 2, 3), None, None)],
        "pads=[0, 0, 0, 0] strides=[1, 1] dilations=[1, 1] groups=1 accum_type=f32"),
    "gemm_int8": (
        "gemm", [("i8", (4, 8), (0.05, 1), None), ("i8", (8, 6), (0.02, 0), None)],
        [("i8", (4, 6), (0.1, 0), None)], "accum_type=i32"),
    "maxpool": ("maxpool", [("f32", (1, 6, 6, 3), None, None)],
                [("f32", (1, 3, 3, 3), None, None)],
                "kernel_shape=[2, 2] strides=[2, 2] pads=[0, 0, 0, 0]"),
    "avgpool": ("avgpool", [("f32", (1, 5, 5, 2), None, None)],
                [("f32", (1, 3, 3, 2), None, None)],
                "kernel_shape=[3, 3] strides=[2, 2] pads=[1, 1, 1, 1]"),
    "transpose": ("transpose", [("i8", (2, 3, 4), None, None)],
                  [("i8", (4, 2, 3), None, None)], "perm=[2, 0, 1]"),
    "slice": ("slice", [("i8", (4, 6), None, None)], [("i8", (2, 3), None, None)],
              "starts=[1, 0] ends=[3, 6] axes=[0, 1] steps=[1, 2]"),
    "pad": ("pad", [("i8", (2, 3), None, None)], [("i8", (4, 6), None, None)],
            "pads=[1, 2, 1, 1] mode=edge"),
    "reduce_sum": ("reduce_sum", [("f32", (3, 4), None, None)],
                   [("f32", (3, 1), None, None)], "axes=[1] keepdims=true"),
    "leaky_relu": ("leaky_relu", [("f32", (8,), None, None)], [("f32", (8,), None, None)],
                   "alpha=0.125"),
    "clamp": ("clamp", [("i8", (8,), (0.1, 0), None)], [("i8", (8,), (0.1, 0), None)],
              "min_val=-1.5 max_val=2.25"),
    "softmax": ("softmax", [("f32", (2, 5), None, None)], [("f32", (2, 5), None, None)],
                "axis=1"),
    "add_i8": ("add", [("i8", (4, 4), (0.1, 2), None), ("i8", (4, 4), (0.05, -1), None)],
               [("i8", (4, 4), (0.2, 0), None)], ""),
}

NAC_MODELS = ("mlp", "cnn", "residual", "attention")


def digest(data: bytes) -> dict:
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def _bind(text: str, *, file: str, base_dir: str):
    from nem.binder import bind
    from nem.checker import check_text
    from nem.taskformat import encode

    result = check_text(text, file=file, base_dir=base_dir)
    errors = [str(d) for d in result.diagnostics if d.severity == "error"]
    if errors:
        raise ValueError("\n".join(errors))
    program = bind(result)
    return result, program, encode(program)


def _engine_binary(device: str, name: str) -> bytes:
    from npu.engine.config import DEVICE_DIR
    from sim.engine_programs import _header, bench_programs, programs

    table = {**programs(device), **bench_programs(device)}
    text = table[name][0]
    return _bind(_header(device) + text, file="p.nem", base_dir=str(DEVICE_DIR))[2]


def _example_binary(stem: str) -> bytes:
    path = PROGRAMS / f"{stem}.nem"
    return _bind(path.read_text(), file=str(path), base_dir=str(PROGRAMS))[2]


def _op_text(case: str) -> str:
    from tests.nem_executor.test_ops import OPS_DEVICE, Opnd, program, tensor_q

    opcode, ins, outs, attrs = OP_CASES[case]

    def operand(spec):
        elem, shape, q, layout = spec
        return Opnd(elem, shape, None, tensor_q(*q) if q else None, layout)

    return program(opcode, [operand(o) for o in ins], [operand(o) for o in outs], attrs,
                   OPS_DEVICE)


def _op_binary(case: str) -> bytes:
    return _bind(_op_text(case), file="case.nem", base_dir=str(PROGRAMS))[2]


def _image(stem: str) -> bytes:
    from nem.memimage import build_image, write_image

    path = PROGRAMS / f"{stem}.nem"
    result, program, _ = _bind(path.read_text(), file=str(path), base_dir=str(PROGRAMS))
    rng = np.random.default_rng(7)
    initial = {}
    for name in sorted(result.plan.buffers):
        buf = result.plan.buffers[name]
        if buf.level == "DDR" or name.endswith("_L2"):
            initial[name] = rng.integers(0, 256, size=min(buf.size, 4096), dtype=np.uint8)
    image = build_image(program, result.plan, initial)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "image.safetensors"
        write_image(out, image)
        return _canonical_safetensors(out.read_bytes())


def _canonical_safetensors(raw: bytes) -> bytes:
    """The file with its JSON header re-serialised with sorted keys: the safetensors
    writer orders ``__metadata__`` by a hash map, so the header's key order changes from
    run to run while its content and the data bytes do not."""
    import json
    import struct

    (n,) = struct.unpack_from("<Q", raw)
    header = json.loads(raw[8 : 8 + n])
    return json.dumps(header, sort_keys=True).encode() + raw[8 + n :]


def _nac(model: str, internal: bool) -> bytes:
    from nac import zoo
    from nac.compile import compile_module
    from nac.weights import write_nac

    module, inputs = zoo.build(model)
    nac, weights, _ = compile_module(module, inputs, internal_weights=internal)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{model}.nac"
        write_nac(nac, path, weights)
        out = io.BytesIO()
        for f in sorted(Path(tmp).iterdir()):
            out.write(f.name.encode() + b"\0" + f.read_bytes())
        return out.getvalue()


def producers() -> dict[str, Callable[[], bytes]]:
    """Every pinned artifact by name, as a function returning its bytes."""
    from sim.engine_programs import bench_programs, programs

    out: dict[str, Callable[[], bytes]] = {}
    for device in ("small", "sim"):
        for name in {**programs(device), **bench_programs(device)}:
            out[f"bin/engine/{device}/{name}"] = (
                lambda d=device, n=name: _engine_binary(d, n))
    for stem in ("conv2d_relu", "gemm_bias_relu"):
        out[f"bin/example/{stem}"] = lambda s=stem: _example_binary(s)
        out[f"image/{stem}"] = lambda s=stem: _image(s)
    for case in OP_CASES:
        out[f"bin/op/{case}"] = lambda c=case: _op_binary(c)
    for model in NAC_MODELS:
        for internal in (True, False):
            kind = "internal" if internal else "external"
            out[f"nac/{model}/{kind}"] = lambda m=model, i=internal: _nac(m, i)
    return out
