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
from nem.registry import load_registry
from nem.taskformat import (
    ELEM_TYPES,
    NO_QUANT,
    NO_TABLE,
    OPCODES,
    REGISTER_MAPS,
    Unit,
    attr_words,
)
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
    """A one-task program; an operand is (elem, shape, quant, offset[, broadcast[, gaps]]):
    ``broadcast`` flags the dimensions read with element stride 0 (NEM's broadcast),
    ``gaps`` adds elements to each dimension's stride (a strided region)."""
    lines = ['device "exec_device.nem"']
    names = [f"x{k}" for k in range(len(ins))] + [f"y{k}" for k in range(len(outs))]
    ops = [(*o, (False,) * len(o[1]), (0,) * len(o[1]))[:6] if len(o) < 5 else
           (*o, (0,) * len(o[1]))[:6] for o in ins + outs]
    forms = []
    for elem, shape, _, _, bc, gaps in ops:
        real = [1 if b else n for n, b in zip(shape, bc, strict=True)]
        strides, step = [], 1
        for n, b, g in zip(reversed(real), reversed(bc), reversed(gaps), strict=True):
            strides.insert(0, 0 if b else step + g)
            step = (step + g) * n
        extent = sum(st * (n - 1) for st, n in zip(strides, shape, strict=True)) + 1
        # the checker asks for an extent of every element even when strides repeat them
        size = BYTES[elem] * max(math.prod(shape), extent)
        form = (f"strides=[{', '.join(map(str, strides))}]" if any(bc) or any(gaps)
                else f"layout={LAYOUT[len(shape)]}")
        forms.append((size, form))
    for name, (_, _, _, off, _, _), (size, _) in zip(names, ops, forms, strict=True):
        lines.append(f"buffer {name.upper()} : L1 (size={off + size + 8})")
    for name, (elem, shape, q, off, _, _), (size, form) in zip(names, ops, forms,
                                                                strict=True):
        lines.append(f"let {name} = region({name.upper()}, {off}, {size}) elem={elem}, "
                     f"shape=[{', '.join(map(str, shape))}], {form}{_quant(q)}")
    lines.append(f"t = {opcode}.async in {', '.join(names[:len(ins)])} "
                 f"out {', '.join(names[len(ins):])} {attrs}")
    lines.append("wait(t)")
    return "\n".join(lines) + "\n"


def _run_both(text, seed, codes=None):
    """Check, bind and run ``text`` on the executor and on the model from the same random
    L1 bytes (drawn from ``codes`` when given); both L1 images must be equal."""
    result = check_text(text, file="cstl.nem", base_dir=str(PROGRAMS))
    errors = [str(d) for d in result.diagnostics if d.severity == "error"]
    assert not errors, "\n".join(errors) + "\n" + text
    rng = np.random.default_rng(seed)
    places, _ = allocate(result.plan.buffers, result.device)
    initial = {name: (rng.integers(0, 256, b.size, dtype=np.uint8) if codes is None else
                      rng.choice(np.asarray(codes, np.int8).view(np.uint8), b.size))
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


@SETTINGS
@given(st.data())
def test_last_axis_reductions_on_ties_and_strided_rows(data):
    """reduce_max / argmax on rows longer than an L1 word or of one element, rank 1..4,
    unaligned and strided regions (gaps between elements and rows), codes from a small
    set (ties: the first index of the max wins) or all -128; ``axis`` / ``axes`` as
    ``rank - 1`` or ``-1``; argmax into i8 / i16 / i32 (saturated)."""
    op = data.draw(st.sampled_from(["reduce_max", "argmax"]))
    rank = data.draw(st.integers(1, 4))
    row = data.draw(st.sampled_from([1, 2, 7, 8, 9, 17, 40, 150]))
    shape = (*(data.draw(st.integers(1, 3)) for _ in range(rank - 1)), row)
    keep = data.draw(st.booleans()) or rank == 1
    out_shape = shape[:-1] + ((1,) if keep else ())
    axis = data.draw(st.sampled_from([rank - 1, -1]))
    gaps = tuple(data.draw(st.sampled_from([0, 0, 1, 3])) for _ in shape)
    out_gaps = tuple(data.draw(st.sampled_from([0, 0, 2])) for _ in out_shape)
    codes = data.draw(st.sampled_from([None, [-128], [-128, -127], [3, 5, 5, -2],
                                       [127, -128, 0]]))
    if op == "reduce_max":
        attrs = f"axes=[{axis}] keepdims={str(keep).lower()}"
        qx = data.draw(quants)
        qy = qx if data.draw(st.booleans()) else data.draw(quants)
        out = ("i8", out_shape, qy, data.draw(offsets), (False,) * len(out_shape), out_gaps)
    else:
        attrs = f"axis={axis} keepdims={str(keep).lower()}"
        qx = data.draw(quants)
        elem = data.draw(st.sampled_from(["i8", "i16", "i32"]))
        out = (elem, out_shape, None, data.draw(offsets), (False,) * len(out_shape),
               out_gaps)
    text = _text(op, [("i8", shape, qx, data.draw(offsets), (False,) * rank, gaps)], [out],
                 attrs)
    _, counts = _run_both(text, data.draw(st.integers(0, 2**32 - 1)), codes)
    assert counts["elems"] == math.prod(out_shape)


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


def _reduction_regs(op, axis, keep, out_shape, elem="i32"):
    """Registers of ``op`` over an i8 [3, 4] input with the given attributes."""
    regs = _regs(op, ["i8", elem if op == "argmax" else "i8"], (2, len(out_shape)))
    regs["OP1_QUANT"] = NO_QUANT
    regs |= {"OP0_DIM0": 3, "OP0_DIM1": 4, "OP0_STRIDE0": 4}
    for d, n in enumerate(out_shape):
        regs[f"OP1_DIM{d}"] = n
    specs = [(a.name, a.type) for a in load_registry()[op].attributes]
    values = {"axes" if op == "reduce_max" else "axis": [axis] if op == "reduce_max" else axis,
              "keepdims": keep}
    return regs | {f"ATTR{j}": w for j, w in attr_words(op, specs, values)}


@pytest.mark.parametrize("op", ["reduce_max", "argmax"])
def test_reductions_refuse_other_axes_and_shapes(op):
    """The last axis as 1 or -1 is taken; axis 0, axis 3 (no axis of a rank-2 input) and
    an output shape other than the reduction's are refused with LAYOUT; argmax into u8 or
    into a quantised output with TYPE."""
    assert decode_task(_reduction_regs(op, 1, True, (3, 1))).kind == op
    assert decode_task(_reduction_regs(op, -1, False, (3,))).kind == op
    for regs in (_reduction_regs(op, 0, True, (3, 1)), _reduction_regs(op, 3, True, (3, 1)),
                 _reduction_regs(op, 1, False, (3, 1)), _reduction_regs(op, 1, True, (3,)),
                 _reduction_regs(op, 1, True, (4, 1))):
        with pytest.raises(CstlUnsupported) as info:
            decode_task(regs)
        assert info.value.cause == Cause.LAYOUT
    regs = _reduction_regs(op, 1, True, (3, 1))
    with pytest.raises(CstlUnsupported) as info:
        decode_task(regs | {"OP1_ELEM": ELEM_TYPES.index("u8")})
    assert info.value.cause == Cause.TYPE
    if op == "argmax":      # indices into a quantised output: the executor's real path
        with pytest.raises(CstlUnsupported) as info:
            decode_task(regs | {"OP1_QUANT": 0})
        assert info.value.cause == Cause.TYPE and "OP1_QUANT" in str(info.value)
