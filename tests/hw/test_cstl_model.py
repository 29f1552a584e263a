"""The CSTL's Python model (``npu.cstl.model``) against the executor, byte for byte.

Random one-task NEM programs on the CSTL's int8 operations (every table opcode, the binary
eltwise ops with broadcast, casts, pools at every border, reduce_max / argmax over the
last axis) are checked, bound to a task binary, and run twice: by ``nem.executor`` on the
checked program, and by :func:`npu.cstl.model.cstl_model` on the bound task's register
writes, the L1 bytes before the task and the binary's data section. Both L1 images must be
equal in every byte. Refusals name their cause.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nem.binder import bind
from nem.checker import check_text
from nem.executor import execute
from nem.memory import allocate
from nem.taskformat import ELEM_TYPES, NO_TABLE, OPCODES, REGISTER_MAPS, Unit
from npu.cstl.model import CstlUnsupported, cstl_model, decode_task, table_opcodes
from npu.nmu.model import Cause

PROGRAMS = Path(__file__).resolve().parents[1] / "nem_executor" / "programs"
REGS = REGISTER_MAPS[Unit.CSTL]
LAYOUT = {0: "", 1: "N", 2: "MN", 3: "NCW", 4: "NHWC"}
BYTES = {"i8": 1, "i16": 2, "i32": 4}
TABLE_OPS = sorted(table_opcodes())


def _quant(q):
    return "" if q is None else f", quant=per_tensor(scale={q[0]!r}, zero_point={q[1]})"


def _text(opcode, ins, outs, attrs):
    """A one-task program; an operand is (elem, shape, quant, offset[, broadcast]):
    ``broadcast`` flags the dimensions read with element stride 0 (NEM's broadcast)."""
    lines = ['device "exec_device.nem"']
    names = [f"x{k}" for k in range(len(ins))] + [f"y{k}" for k in range(len(outs))]
    ops = [(*o, (False,) * len(o[1]))[:5] for o in ins + outs]
    for name, (elem, shape, _, off, _bc) in zip(names, ops, strict=True):
        # the checker asks for an extent of every element even when strides repeat them
        size = BYTES[elem] * math.prod(shape)
        lines.append(f"buffer {name.upper()} : L1 (size={off + size + 8})")
    for name, (elem, shape, q, off, bc) in zip(names, ops, strict=True):
        real = [1 if b else n for n, b in zip(shape, bc, strict=True)]
        strides, step = [], 1
        for n, b in zip(reversed(real), reversed(bc), strict=True):
            strides.insert(0, 0 if b else step)
            step *= n
        form = (f"strides=[{', '.join(map(str, strides))}]" if any(bc)
                else f"layout={LAYOUT[len(shape)]}")
        lines.append(f"let {name} = region({name.upper()}, {off}, "
                     f"{BYTES[elem] * math.prod(shape)}) elem={elem}, "
                     f"shape=[{', '.join(map(str, shape))}], {form}{_quant(q)}")
    lines.append(f"t = {opcode}.async in {', '.join(names[:len(ins)])} "
                 f"out {', '.join(names[len(ins):])} {attrs}")
    lines.append("wait(t)")
    return "\n".join(lines) + "\n"


def _run_both(text, seed):
    result = check_text(text, file="cstl.nem", base_dir=str(PROGRAMS))
    errors = [str(d) for d in result.diagnostics if d.severity == "error"]
    assert not errors, "\n".join(errors) + "\n" + text
    rng = np.random.default_rng(seed)
    places, _ = allocate(result.plan.buffers, result.device)
    initial = {name: rng.integers(0, 256, b.size, dtype=np.uint8)
               for name, b in result.plan.buffers.items()}
    run = execute(result.plan, result.device, initial)
    program = bind(result)
    (task,) = [t for t in program.tasks if t.unit is Unit.CSTL]
    key = next(iter(places.values())).memory
    l1 = np.zeros_like(run.memory.mems[key])
    for name, data in initial.items():
        p = places[name]
        l1[p.address : p.address + p.size] = data
    counts = cstl_model(dict(task.writes), l1, program.data)
    np.testing.assert_array_equal(l1, run.memory.mems[key], err_msg=text)
    return task, counts


quants = st.one_of(st.none(), st.tuples(
    st.sampled_from([0.0078125, 0.01, 0.03125, 0.05, 0.1, 0.37, 1.0]),
    st.integers(-20, 20)))
shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)
offsets = st.integers(0, 9)
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _table_attrs(op, draw):
    if op == "leaky_relu":
        return f"alpha={draw(st.sampled_from([0.01, 0.125, 0.3]))}"
    if op == "clamp":
        lo = draw(st.sampled_from([-1.0, -0.5, 0.0]))
        return f"min_val={lo} max_val={draw(st.sampled_from([0.25, 1.0, 6.0]))}"
    return ""


@SETTINGS
@given(st.data())
def test_table_ops_equal_the_executor(data):
    op = data.draw(st.sampled_from(TABLE_OPS))
    shape = data.draw(shapes)
    qx, qy = data.draw(quants), data.draw(quants)
    text = _text(op, [("i8", shape, qx, data.draw(offsets))],
                 [("i8", shape, qy, data.draw(offsets))], _table_attrs(op, data.draw))
    task, counts = _run_both(text, data.draw(st.integers(0, 2**32 - 1)))
    assert dict(task.writes)[REGS.index("TABLE")] != NO_TABLE
    assert counts["elems"] == math.prod(shape)


@SETTINGS
@given(st.data())
def test_eltwise_ops_with_broadcast_equal_the_executor(data):
    op = data.draw(st.sampled_from(["add", "sub", "mul", "min", "max"]))
    out = data.draw(shapes)

    def broadcast():
        return tuple(data.draw(st.booleans()) for _ in out)

    scales = st.tuples(st.sampled_from([0.01, 0.02, 0.05, 0.1, 0.25]), st.integers(-20, 20))
    text = _text(op, [("i8", out, data.draw(scales), data.draw(offsets), broadcast()),
                      ("i8", out, data.draw(scales), data.draw(offsets), broadcast())],
                 [("i8", out, data.draw(scales), data.draw(offsets))], "")
    task, counts = _run_both(text, data.draw(st.integers(0, 2**32 - 1)))
    assert counts["elems"] == math.prod(out)
    assert dict(task.writes)[REGS.index("TABLE")] == NO_TABLE


@SETTINGS
@given(st.data())
def test_casts_equal_the_executor(data):
    shape = data.draw(shapes)
    wide = data.draw(st.sampled_from(["i8", "i16", "i32"]))
    src, dst = ("i8", wide) if data.draw(st.booleans()) else (wide, "i8")
    text = _text("cast", [(src, shape, None, data.draw(offsets))],
                 [(dst, shape, None, data.draw(offsets))], "")
    _run_both(text, data.draw(st.integers(0, 2**32 - 1)))


@SETTINGS
@given(st.data())
def test_pools_equal_the_executor(data):
    op = data.draw(st.sampled_from(["maxpool", "avgpool"]))
    k = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    s = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    p = (data.draw(st.integers(0, k[0] - 1)), data.draw(st.integers(0, k[1] - 1)),
         data.draw(st.integers(0, k[0] - 1)), data.draw(st.integers(0, k[1] - 1)))
    n, c = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 4))
    h, w = data.draw(st.integers(k[0], 7)), data.draw(st.integers(k[1], 7))
    oh, ow = (h + p[0] + p[2] - k[0]) // s[0] + 1, (w + p[1] + p[3] - k[1]) // s[1] + 1
    qx = data.draw(quants)
    qy = qx if data.draw(st.booleans()) else data.draw(quants)
    attrs = (f"kernel_shape=[{k[0]}, {k[1]}] pads=[{', '.join(map(str, p))}] "
             f"strides=[{s[0]}, {s[1]}]")
    text = _text(op, [("i8", (n, h, w, c), qx, data.draw(offsets))],
                 [("i8", (n, oh, ow, c), qy, data.draw(offsets))], attrs)
    task, _ = _run_both(text, data.draw(st.integers(0, 2**32 - 1)))
    # a table only when the descriptors differ (max / mean commute with the identity)
    same = (qx or (1.0, 0)) == (qy or (1.0, 0))
    assert (dict(task.writes)[REGS.index("TABLE")] == NO_TABLE) == same


@SETTINGS
@given(st.data())
def test_last_axis_reductions_equal_the_executor(data):
    op = data.draw(st.sampled_from(["reduce_max", "argmax"]))
    shape = data.draw(shapes)
    keep = data.draw(st.booleans()) or len(shape) == 1
    out_shape = shape[:-1] + ((1,) if keep else ())
    qx = data.draw(quants)
    if op == "reduce_max":
        attrs = f"axes=[{len(shape) - 1}] keepdims={str(keep).lower()}"
        out = ("i8", out_shape, data.draw(quants), data.draw(offsets))
    else:
        attrs = f"axis={len(shape) - 1} keepdims={str(keep).lower()}"
        out = ("i32", out_shape, None, data.draw(offsets))
    text = _text(op, [("i8", shape, qx, data.draw(offsets))], [out], attrs)
    _run_both(text, data.draw(st.integers(0, 2**32 - 1)))


def _regs(opcode, elems, ranks=(1, 1), nin=1, level=2):
    regs = {"OPCODE": OPCODES.index(opcode), "NIN": nin, "NOUT": 1}
    for k, (elem, rank) in enumerate(zip(elems, ranks, strict=True)):
        regs |= {f"OP{k}_ELEM": ELEM_TYPES.index(elem), f"OP{k}_RANK": rank,
                 f"OP{k}_LEVEL": level, f"OP{k}_DIM0": 4, f"OP{k}_STRIDE0": 1}
        for d in range(1, rank):
            regs |= {f"OP{k}_DIM{d}": 1}
    return regs


@pytest.mark.parametrize("regs, cause, words", [
    (_regs("gemm", ["i8", "i8"]), Cause.OPCODE, "OPCODE 0 (gemm)"),
    (_regs("div", ["i8", "i8", "i8"], (1, 1, 1), nin=2), Cause.OPCODE, "(div)"),
    (_regs("relu", ["f16", "f16"]), Cause.TYPE, "element types ['f16', 'f16']"),
    (_regs("relu", ["i8", "i8"], level=1), Cause.TYPE, "not in L1"),
    (_regs("add", ["i8", "i8"]), Cause.TYPE, "NIN 1"),
    (_regs("relu", ["i8", "i8"], (5, 5)), Cause.LAYOUT, "OP0_RANK 5"),
    (_regs("relu", ["i8", "i8"]) | {"OP1_DIM0": 3}, Cause.LAYOUT, "differ"),
    (_regs("relu", ["i8", "i8"]) | {"TABLE": NO_TABLE}, Cause.REQUANT, "NO_TABLE"),
    (_regs("cast", ["i16", "i32"]), Cause.TYPE, "element types ['i16', 'i32']"),
])  # fmt: skip
def test_refusals_name_their_cause(regs, cause, words):
    with pytest.raises(CstlUnsupported, match=None) as info:
        decode_task(regs)
    assert info.value.cause == cause and words in str(info.value)


def test_table_outside_the_data_section_is_refused():
    regs = _regs("relu", ["i8", "i8"]) | {"TABLE": 64}
    with pytest.raises(CstlUnsupported) as info:
        cstl_model(regs, np.zeros(64, np.uint8), bytes(64))
    assert info.value.cause == Cause.REQUANT and "TABLE" in str(info.value)
