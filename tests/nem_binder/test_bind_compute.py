"""Compute tasks in the task binary: whole programs, hand-derived records, bad records.

Every op case of ``tests/nem_executor/test_ops.py`` also binds and runs from its binary (see
``run_op`` there); this file adds the tiled upstream programs, the bytes of one compute
record and one data section worked out by hand, the attribute-word encoding, and broken
compute records.
"""

from __future__ import annotations

import dataclasses
import struct
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nem.binder import BindError, DataSection, bind, compute_registers, plan_from_binary
from nem.checker import check_file, check_text
from nem.elemtypes import BITS
from nem.executor import execute
from nem.memory import allocate
from nem.ops import UNSUPPORTED
from nem.registry import load_registry
from nem.taskformat import (
    ATTR_WORDS,
    ELEM_TYPES,
    OPCODES,
    REGISTER_MAPS,
    Program,
    TaskFormatError,
    Unit,
    attr_layout,
    attr_words,
    decode,
    encode,
    read_attr_words,
)

PROGRAMS = Path(__file__).resolve().parents[1] / "nem_executor" / "programs"


def _same_bytes(result, initial):
    want = execute(result.plan, result.device, initial)
    program = decode(encode(bind(result)))
    got = execute(plan_from_binary(program, result.device), result.device, initial, in_order=True)
    for name in result.plan.buffers:
        np.testing.assert_array_equal(got.memory.buffer(name), want.memory.buffer(name), name)
    return program, want, got


def test_tiled_gemm_bias_relu_binds():
    result = check_file(str(PROGRAMS / "gemm_bias_relu.nem"))
    assert result.ok
    rng = np.random.default_rng(11)
    initial = {
        "A_L2": rng.standard_normal(256 * 256).astype(np.float16).view(np.uint8),
        "B_L2": (rng.standard_normal(256 * 128) / 16).astype(np.float16).view(np.uint8),
        "C_L2": rng.standard_normal(128).astype(np.float16).view(np.uint8),
    }
    program, want, _ = _same_bytes(result, initial)
    units = [t.unit for t in program.tasks]
    # tB, then per tile: transfer (DMA), gemm (NMU), relu (CSTL), store (DMA)
    assert units == [Unit.DMA] + [Unit.DMA, Unit.NMU, Unit.CSTL, Unit.DMA] * 4
    # the two CSTL instances take the relus in turn
    assert [t.instance for t in program.tasks if t.unit is Unit.CSTL] == [0, 1, 0, 1]
    assert want.memory.buffer("Y_L2").any()


def test_tiled_int8_conv2d_relu_binds():
    result = check_file(str(PROGRAMS / "conv2d_relu.nem"))
    assert result.ok
    rng = np.random.default_rng(5)
    initial = {
        "X_L2": rng.integers(-128, 128, 4 * 16 * 16 * 64, dtype=np.int8).view(np.uint8),
        "W_L2": rng.integers(-127, 128, 3 * 3 * 64 * 128, dtype=np.int8).view(np.uint8),
        "B_L2": rng.integers(-3000, 3000, 128).astype("<i4").view(np.uint8),
    }
    program, _, _ = _same_bytes(result, initial)
    assert Unit.NMU in {t.unit for t in program.tasks}
    # the per-channel weight descriptor is stored once although every tile's conv uses it
    assert len(program.data) < 2 * (16 + 128 * 16)


RELU = """device "exec_device.nem"
buffer X : L1 (size=64)
buffer Y : L1 (size=64)
let x = region(X, 8, 6) elem=i8, shape=[2, 3], layout=MN,
    quant=per_tensor(scale=0.5, zero_point=3)
let y = region(Y, 16, 6) elem=i8, shape=[2, 3], layout=MN,
    quant=per_tensor(scale=0.25, zero_point=-2)
t = leaky_relu.async in x out y alpha=0.125
wait(t)
"""


def test_compute_record_and_data_section_by_hand():
    result = check_text(RELU, file="r.nem", base_dir=str(PROGRAMS))
    assert result.ok, [str(d) for d in result.diagnostics]
    program = bind(result)
    (task,) = program.tasks
    places, _ = allocate(result.plan.buffers, result.device)
    x_at, y_at = places["X"].address + 8, places["Y"].address + 16
    # registers: OPCODE 0, NIN 1, NOUT 2, then 19 per operand slot from 3 (ADDR_LO, ADDR_HI,
    # LEVEL, BYTES, ELEM, RANK, DIM0..5, STRIDE0..5, QUANT), ATTR0 at 3 + 8 * 19 = 155.
    # Only the dimensions the rank names are written.
    leaky = 4  # OPCODES: gemm, matmul, conv2d, relu, leaky_relu
    i8, l1 = 1, 2  # ELEM_TYPES[1], LEVELS[2]
    x_regs = [(3, x_at), (4, 0), (5, l1), (6, 6), (7, i8), (8, 2), (9, 2), (15, 3), (10, 3),
              (16, 1), (21, 0)]  # fmt: skip
    y_regs = [(22, y_at), (23, 0), (24, l1), (25, 6), (26, i8), (27, 2), (28, 2), (34, 3),
              (29, 3), (35, 1), (40, 32)]  # fmt: skip
    # alpha: tag 0x80000002 (present, 2 words), 0.125 = 0x3FC0000000000000 low word first
    attrs = [(155, 0x80000002), (156, 0), (157, 0x3FC00000)]
    assert task.unit is Unit.CSTL and task.instance == 0
    # TABLE (index 196, after REQUANT): the lookup table follows the two quant entries
    table = [(196, 64)]
    assert list(task.writes) == [(0, leaky), (1, 1), (2, 1), *x_regs, *y_regs, *attrs, *table]
    # data section: the two per-tensor entries, 16-byte head (kind 0, 0, 0, axis 0, group 0,
    # count 1), one f64 scale, one i64 zero point
    head = bytes(12) + (1).to_bytes(4, "little")
    # then the table: input code q (byte q & 0xFF) is 0.5 (q - 3); leaky_relu keeps it when
    # >= 0 and multiplies it by 1/8 otherwise; the output code is that / 0.25, rounded half
    # to even (Python's round), - 2, saturated to i8.
    def code(q):
        real = Fraction(q - 3, 2)
        y = real if real >= 0 else real / 8
        return min(max(round(y / Fraction(1, 4)) - 2, -128), 127)

    lut = bytes(code(b - 256 if b >= 128 else b) & 0xFF for b in range(256))
    assert program.data == (
        head + struct.pack("<d", 0.5) + (3).to_bytes(8, "little")
        + head + struct.pack("<d", 0.25) + (-2).to_bytes(8, "little", signed=True)
        + lut
    )  # fmt: skip
    raw = encode(program)
    # the data section starts at the next multiple of 8 after the task stream
    stream_end = 68 + 56 * 2 + 12 + 5 * len(task.writes)
    assert raw[-320:] == program.data and len(raw) == -(-stream_end // 8) * 8 + 320
    assert int.from_bytes(raw[64:68], "little") == 320
    x = np.zeros(64, np.uint8)
    x[8:14] = np.array([0, 3, 4, 127, -128, 10], np.int8).view(np.uint8)
    _same_bytes(result, {"X": x})


def test_codes_cover_the_registry_and_the_executor():
    registry = load_registry()
    compute = {n for n, op in registry.opcodes.items() if n not in ("transfer", "store")}
    assert set(OPCODES) == compute - set(UNSUPPORTED)
    assert len(set(OPCODES)) == len(OPCODES)
    assert set(ELEM_TYPES) == set(BITS)
    # every attribute of every coded opcode has an encoding
    for name in OPCODES:
        specs = [(a.name, a.type) for a in registry[name].attributes]
        assert {t for _, t in specs} <= {"int", "bool", "float", "int_list", "elem_type", "id"}
    compute_map = REGISTER_MAPS[Unit.NMU]
    assert compute_map.index("ATTR0") == 155 and compute_map.index("REQUANT") == 195
    assert compute_map.index("TABLE") == 196 and len(compute_map) == 197


def test_opcode_without_a_kernel_is_refused():
    result = check_text(RELU, file="r.nem", base_dir=str(PROGRAMS))
    task = dataclasses.replace(result.plan.tasks[0], opcode="conv1d")
    places, _ = allocate(result.plan.buffers, result.device)
    with pytest.raises(BindError, match="conv1d has no code"):
        compute_registers(task, places, DataSection(), load_registry(), {})


ATTR_TYPES = {
    "int": st.integers(-(2**31), 2**31 - 1),
    "bool": st.booleans(),
    "float": st.floats(allow_nan=False),
    "int_list": st.lists(st.integers(-(2**31), 2**31 - 1), max_size=6).map(tuple),
    "elem_type": st.sampled_from(ELEM_TYPES),
    "id": st.sampled_from(["constant", "reflect", "edge"]),
}


@st.composite
def attr_sets(draw):
    names = st.text("abc", min_size=1, max_size=3)
    pair = st.tuples(names, st.sampled_from(list(ATTR_TYPES)))
    specs = draw(st.lists(pair, max_size=4, unique_by=lambda s: s[0]))
    values = {name: draw(ATTR_TYPES[typ]) for name, typ in specs if draw(st.booleans())}
    return specs, values


def _registers(writes):
    regs = [0] * ATTR_WORDS
    for j, w in writes:
        regs[j] = w
    return regs


@settings(max_examples=200, deadline=None)
@given(attr_sets(), st.sampled_from(["add", "conv2d", "pad"]))
def test_attribute_words_round_trip(case, opcode):
    specs, values = case
    try:
        writes = attr_words(opcode, specs, values)
    except TaskFormatError as exc:
        assert "at most" in str(exc)
        return
    assert all(0 <= j < ATTR_WORDS for j, _ in writes)
    assert read_attr_words(opcode, specs, _registers(writes)) == values


CONV_SPECS = [("pads", "int_list"), ("strides", "int_list"), ("dilations", "int_list"),
              ("groups", "int"), ("accum_type", "elem_type")]


def test_attribute_words_by_hand_and_bad_ones():
    # conv2d slots: pads tag ATTR0 + 4 words, strides tag ATTR5 + 2, dilations tag ATTR8
    # + 2, groups tag ATTR11 + 1, accum_type tag ATTR13 + 1
    writes = attr_words("conv2d", CONV_SPECS, {"pads": (1, 0, 2, -1), "accum_type": "i32"})
    # pads: tag, then -1 as 0xFFFFFFFF; strides, dilations, groups absent: tag 0 in their
    # slots; accum_type: tag, code of i32 (5) - at ATTR13 whatever was left out before it
    assert writes == [(0, 0x80000004), (1, 1), (2, 0), (3, 2), (4, 0xFFFFFFFF), (5, 0),
                      (8, 0), (11, 0), (13, 0x80000001), (14, 5)]
    regs = [0] * ATTR_WORDS
    regs[11], regs[12] = 0x80000002, 1
    with pytest.raises(TaskFormatError, match="groups: ATTR11 tag 0x80000002 is not a int tag"):
        read_attr_words("conv2d", CONV_SPECS, regs)
    regs = [0] * ATTR_WORDS
    regs[13], regs[14] = 0x80000001, 99
    with pytest.raises(TaskFormatError, match="accum_type: code 99 unknown"):
        read_attr_words("conv2d", CONV_SPECS, regs)
    regs = [0] * ATTR_WORDS
    regs[0] = 0x80000005  # five pads: the slot holds four
    with pytest.raises(TaskFormatError, match="pads: ATTR0 tag 0x80000005 is not a "
                                              "int_list tag of at most 4 items"):
        read_attr_words("conv2d", CONV_SPECS, regs)
    regs = [0] * ATTR_WORDS
    regs[9] = 3  # a dilation word while dilations is absent
    with pytest.raises(TaskFormatError, match="ATTR9 = 0x3 belongs to no present attribute"):
        read_attr_words("conv2d", CONV_SPECS, regs)
    with pytest.raises(TaskFormatError, match="not a 32-bit integer"):
        attr_words("conv2d", CONV_SPECS, {"groups": 1 << 40})
    with pytest.raises(TaskFormatError, match="'wrap' has no code"):
        attr_words("pad", [("mode", "id")], {"mode": "wrap"})
    with pytest.raises(TaskFormatError, match="strides: 3 items, at most 2"):
        attr_words("conv2d", CONV_SPECS, {"strides": (1, 1, 1)})


def test_attribute_positions_do_not_depend_on_what_is_given():
    # The reason for slots: an omitted attribute no longer moves the ones after it.
    registry = load_registry()
    for opcode in OPCODES:
        specs = [(a.name, a.type) for a in registry[opcode].attributes]
        layout = attr_layout(opcode, specs)
        assert layout[-1].tag + 1 + layout[-1].words <= ATTR_WORDS if layout else True
        for k, slot in enumerate(layout):
            assert slot.tag == sum(1 + s.words for s in layout[:k])  # consecutive slots
    given = attr_words("conv2d", CONV_SPECS, {"groups": 1})
    assert dict(given)[11] == 0x80000001 and dict(given)[12] == 1
    assert attr_words("conv2d", CONV_SPECS, {"pads": (0,) * 4, "strides": (1, 1),
                                             "dilations": (1, 1), "groups": 1})[-3:-1] == \
        [(11, 0x80000001), (12, 1)]


def test_packed_attributes_of_version_1_1_still_read():
    # Before 1.2 each attribute followed the previous one: pads absent (one 0 tag), then
    # groups at ATTR1-2 instead of ATTR11-12.
    words = [0, 0, 0, 0x80000001, 4] + [0] * (ATTR_WORDS - 5)
    assert read_attr_words("conv2d", CONV_SPECS, words, packed=True) == {"groups": 4}
    with pytest.raises(TaskFormatError, match=r"pads: needs ATTR1\.\.ATTR3"):
        read_attr_words("conv2d", CONV_SPECS, [0x80000003, 1], packed=True)


def _broken(program: Program, k: int, **change) -> Program:
    tasks = list(program.tasks)
    tasks[k] = dataclasses.replace(tasks[k], **change)
    return dataclasses.replace(program, tasks=tuple(tasks))


def test_bad_compute_records_name_the_task_and_register():
    result = check_text(RELU, file="r.nem", base_dir=str(PROGRAMS))
    program = bind(result)
    dev = result.device
    writes = list(program.tasks[0].writes)
    cases = [
        ([(0, 200), *writes[1:]], "task 0: OPCODE 200 unknown"),
        (
            [w for w in writes if w[0] != 8],
            r"output .* has shape \[2, 3\], the inputs and attributes give \[\]",
        ),
        (
            [*writes[:-4], (40, 4096), *writes[-3:]],
            "task 0: operand 1: data section offset 4096: a quantisation entry needs 16",
        ),
        ([*writes[:-4], (40, 4), *writes[-3:]], "offset 4: a quantisation entry starts on"),
        ([*writes[:7], (7, 77), *writes[8:]], "operand 0: rank 2 / element code 77"),
        ([*writes[:3], (3, 1 << 30), *writes[4:]], "operand 0 bytes .* not inside one buffer"),
        ([*writes[:-3], (155, 0x80000001), *writes[-2:]], "leaky_relu: attribute alpha: ATTR0 tag"),
    ]
    # writes[22] is OP1_DIM1 (register 29): 2 instead of 3 gives an output of another shape;
    # writes[9] is OP0_DIM0 (register 9): 3 rows of stride 3 reach 9 bytes, OP0_BYTES is 6
    assert writes[22] == (29, 3) and writes[9] == (9, 2)
    cases += [
        ([*writes[:22], (29, 2), *writes[23:]], r"output .* has shape \[2, 2\]"),
        ([*writes[:9], (9, 3), *writes[10:]], "reaches 9 bytes, OP0_BYTES is 6"),
        ([writes[0], writes[1], (2, 0), *writes[3:]], "task 0: 1 inputs and 0 outputs"),
    ]
    for new, message in cases:
        with pytest.raises(TaskFormatError, match=message):
            plan_from_binary(_broken(program, 0, writes=tuple(new)), dev)
    with pytest.raises(TaskFormatError, match="CSTL instance 5; the device has 2"):
        plan_from_binary(_broken(program, 0, instance=5), dev)
    # and each of them still round-trips through the container: the errors are semantic
    assert decode(encode(_broken(program, 0, writes=tuple(cases[0][0])))).tasks[0].writes[0] == (
        0, 200,
    )  # fmt: skip


GEMM_I8 = """device "exec_device.nem"
buffer A : L1 (size=64)
buffer B : L1 (size=64)
buffer Y : L1 (size=64)
let a = region(A, 0, 6) elem=i8, shape=[2, 3], layout=MK,
    quant=per_tensor(scale=0.5, zero_point=-1)
let b = region(B, 0, 12) elem=i8, shape=[3, 4], layout=KN,
    quant=per_tensor(scale=0.25, zero_point=0)
let y = region(Y, 0, 8) elem=i8, shape=[2, 4], layout=MN,
    quant=per_tensor(scale=1.0, zero_point=3)
t = gemm.async in a, b out y accum_type=i32
wait(t)
"""


def test_requantisation_entry_by_hand():
    result = check_text(GEMM_I8, file="g.nem", base_dir=str(PROGRAMS))
    assert result.ok, [str(d) for d in result.diagnostics]
    program = bind(result)
    (task,) = program.tasks
    regs = REGISTER_MAPS[Unit.NMU]
    writes = dict(task.writes)
    at = writes[regs.index("REQUANT")]
    # x * w / y = 0.5 * 0.25 / 1 = 0.125 = 0.5 * 2**-2: multiplier 0.5 * 2**31 = 2**30 and
    # shift 31 - (-2) = 33 for each of the 4 output channels; input zero point -1, output
    # zero point 3, i8 clamp [-128, 127]
    head = struct.pack("<iiiiII", -1, 3, -128, 127, 4, 0)
    assert program.data[at : at + 24 + 32] == head + struct.pack("<ii", 1 << 30, 33) * 4
    a = np.array([[1, -1, 5], [127, -128, 0]], np.int8)
    b = np.arange(-6, 6, dtype=np.int8)
    _same_bytes(result, {"A": a, "B": b})
    # a tampered entry, or none, is refused
    data = bytearray(program.data)
    data[at + 24] ^= 1
    with pytest.raises(TaskFormatError, match=r"the REQUANT entry .* is not what the operands"):
        plan_from_binary(dataclasses.replace(program, data=bytes(data)), result.device)
    # unwritten, REQUANT reads as 0: the bytes at offset 0 are A's quantisation entry
    dropped = tuple(w for w in task.writes if w[0] != regs.index("REQUANT"))
    assert at != 0
    with pytest.raises(TaskFormatError, match=r"the REQUANT entry .* is not what the operands"):
        plan_from_binary(_broken(program, 0, writes=dropped), result.device)


def test_dis_spells_out_compute_registers(tmp_path, capsys):
    from npu.tools.cli import main

    result = check_text(GEMM_I8, file="g.nem", base_dir=str(PROGRAMS))
    path = tmp_path / "g.bin"
    path.write_bytes(encode(bind(result)))
    assert main(["nem", "dis", str(path)]) == 0
    out = capsys.readouterr().out
    assert "OPCODE       = 0x00000000  (gemm)" in out
    assert "OP0_ELEM     = 0x00000001  (i8)" in out
    assert "per_tensor: scales [0.5], zero points [-1]" in out
    assert "x zero point -1, y zero point 3, clamp [-128, 127], 4 channel(s), first " \
        "multiplier 1073741824 shift 33" in out
    assert "; data section: " in out


CONV = """device "exec_device.nem"
buffer X : L1 (size=64)
buffer W : L1 (size=64)
buffer Y : L1 (size=64)
let x = region(X, 0, 32) elem=i8, shape=[1, 4, 4, 2], layout=NHWC,
    quant=per_tensor(scale=0.5, zero_point=2)
let w = region(W, 0, 36) elem=i8, shape=[3, 3, 2, 2], layout=HWIO,
    quant=per_tensor(scale=0.25, zero_point=0)
let y = region(Y, 0, 18) elem=i8, shape=[1, 3, 3, 2], layout=NHWC,
    quant=per_tensor(scale=0.5, zero_point=-4)
t = conv2d.async
      in x, w
      out y
      pads=[1, 0, 0, 1]
      strides=[1, 1]
      dilations=[1, 1]
      accum_type=i32
wait(t)
"""


def test_conv2d_attributes_sit_at_fixed_words():
    # conv2d's pads, strides, dilations and accum_type are required and groups has a
    # default, so every conv2d task has the same attribute layout: the NMU reads fixed words
    result = check_text(CONV, file="c.nem", base_dir=str(PROGRAMS))
    assert result.ok, [str(d) for d in result.diagnostics]
    program = bind(result)
    regs = REGISTER_MAPS[Unit.NMU]
    writes = dict(program.tasks[0].writes)
    words = [writes[regs.index(f"ATTR{j}")] for j in range(15)]
    # pads [1, 0, 0, 1] (tag, 4 words), strides [1, 1], dilations [1, 1], groups 1 (the
    # default), accum_type i32 (code 5)
    assert words == [0x80000004, 1, 0, 0, 1, 0x80000002, 1, 1, 0x80000002, 1, 1,
                     0x80000001, 1, 0x80000001, 5]  # fmt: skip
    rng = np.random.default_rng(0)
    _same_bytes(result, {"X": rng.integers(-128, 128, 32, dtype=np.int8),
                         "W": rng.integers(-127, 128, 36, dtype=np.int8)})  # fmt: skip


ADD = """device "exec_device.nem"
buffer X : L1 (size=64)
buffer Y : L1 (size=64)
buffer Z : L1 (size=64)
let x = region(X, 0, 6) elem=i8, shape=[2, 3], layout=MN,
    quant=per_tensor(scale=0.5, zero_point=3)
let y = region(Y, 0, 6) elem=i8, shape=[2, 3], layout=MN,
    quant=per_tensor(scale=0.25, zero_point=-2)
let z = region(Z, 0, 6) elem=i8, shape=[2, 3], layout=MN,
    quant=per_tensor(scale=1.0, zero_point=0)
t = add.async in x, y out z
wait(t)
"""


def test_eltwise_entry_by_hand():
    result = check_text(ADD, file="a.nem", base_dir=str(PROGRAMS))
    assert result.ok, [str(d) for d in result.diagnostics]
    program = bind(result)
    (task,) = program.tasks
    regs = REGISTER_MAPS[Unit.CSTL]
    writes = dict(task.writes)
    assert writes[regs.index("TABLE")] == 0xFFFFFFFF
    at = writes[regs.index("REQUANT")]
    # three 32-byte quant entries, then the eltwise entry: M = 2 * max(0.5, 0.25) = 1;
    # A: 0.5 / 1 = 2^30 * 2^-31, B: 0.25 = 2^30 * 2^-32, Y: 1 / (2^20 * 1) = 2^30 * 2^-50
    assert at == 96
    words = struct.unpack_from("<12i", program.data, at)
    assert words == (3, -2, 0, 20, 1 << 30, 31, 1 << 30, 32, 1 << 30, 50, -128, 127)
    assert len(program.data) == 96 + 48


def _tampered(text, edit):
    result = check_text(text, file="t.nem", base_dir=str(PROGRAMS))
    program = bind(result)
    return decode(encode(edit(program))), result.device


def test_front_end_refuses_a_wrong_table_or_entry():
    table = REGISTER_MAPS[Unit.CSTL].index("TABLE")

    def flip_table_byte(p):
        data = bytearray(p.data)
        data[64 + 200] ^= 1  # entry 200 of the table after the two quant entries
        return dataclasses.replace(p, data=bytes(data))

    def no_table(p):
        (t,) = p.tasks
        writes = tuple((i, 0xFFFFFFFF if i == table else v) for i, v in t.writes)
        return dataclasses.replace(p, tasks=(dataclasses.replace(t, writes=writes),))

    def flip_entry(p):
        data = bytearray(p.data)
        data[96 + 4 * 8] ^= 1  # y_multiplier
        return dataclasses.replace(p, data=bytes(data))

    for text, edit, words in (
        (RELU, flip_table_byte, "TABLE at data offset 64: entry 200 is"),
        (RELU, no_table, "TABLE is NO_TABLE, but the task needs a lookup table"),
        (ADD, flip_entry, "the REQUANT eltwise entry"),
    ):
        program, device = _tampered(text, edit)
        with pytest.raises(TaskFormatError, match=words):
            plan_from_binary(program, device)


def test_dis_decodes_an_eltwise_entry_as_one(tmp_path, capsys):
    # ADD's REQUANT names the 48-byte eltwise entry of test_eltwise_entry_by_hand, not an
    # NMU requantisation entry: dis must read it with the eltwise layout
    from npu.tools.cli import main

    result = check_text(ADD, file="a.nem", base_dir=str(PROGRAMS))
    path = tmp_path / "a.bin"
    path.write_bytes(encode(bind(result)))
    assert main(["nem", "dis", str(path)]) == 0
    out = capsys.readouterr().out
    assert ("eltwise: zero points a 3, b -2, y 0; left shift 20; multiplier/shift a "
            f"{1 << 30}/31, b {1 << 30}/32, y {1 << 30}/50; clamp [-128, 127]") in out
    assert "channel(s)" not in out
