"""Edges of nem.taskformat that mutation testing found unguarded: the register maps as
``docs/task-format.md`` tables them, the range limits of every encoder (each bound from
both sides), the data-section entries read at a non-zero offset and with exactly enough
bytes, the text of each decode error, and the attribute words' corner cases.

Expected bytes are packed here with the struct formats the docs give for each record
(``<iiiiIiiI`` for the group requantisation head, ...), never with the module's records.

The register maps are built once, when the module is imported; the tests below build them
again (``_copy_registers``, ``_compute_registers``, ``RegisterMap``), and call
``_body_words`` directly because ``attr_layout`` caches the slots it computes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import struct

import pytest

from nem.elemtypes import ELEM_TYPES
from nem.numerics import EltwiseParams
from nem.taskformat import (
    ATTR_PRESENT,
    ATTR_WORDS,
    COMPUTE_UNITS,
    COPY_UNITS,
    HEADER,
    MAX_RANK,
    REGISTER_MAPS,
    TASK_HEADER,
    BufferEntry,
    GroupRequantEntry,
    Program,
    QuantEntry,
    Register,
    RegisterMap,
    RequantEntry,
    Task,
    TaskFormatError,
    Unit,
    _body_words,
    _compute_registers,
    _copy_registers,
    attr_words,
    decode,
    decode_eltwise,
    decode_group_requant,
    decode_quant,
    decode_requant,
    decode_table,
    encode,
    encode_eltwise,
    encode_group_requant,
    encode_quant,
    encode_requant,
    encode_table,
    read_attr_words,
)

DEV = hashlib.sha256(b"edge device").digest()
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


def _raises(message: str):
    """``pytest.raises`` for a TaskFormatError whose whole text is ``message``."""
    return pytest.raises(TaskFormatError, match="^" + re.escape(message) + "$")


# --- register maps -----------------------------------------------------------------------

#: The copy units' registers as docs/task-format.md tables them (index = position), with the
#: meaning each register's doc gives.
COPY_MAP = [
    ("SRC_LO", "source byte address, bits 31..0"),
    ("SRC_HI", "source byte address, bits 63..32"),
    ("DST_LO", "destination byte address, bits 31..0"),
    ("DST_HI", "destination byte address, bits 63..32"),
    ("COUNT0", "bytes per innermost run (contiguous on both sides)"),
    ("COUNT1", "repetitions along dimension 1 (1: unused)"),
    ("SRC_STRIDE1", "source byte stride of dimension 1"),
    ("DST_STRIDE1", "destination byte stride of dimension 1"),
    ("COUNT2", "repetitions along dimension 2 (1: unused)"),
    ("SRC_STRIDE2", "source byte stride of dimension 2"),
    ("DST_STRIDE2", "destination byte stride of dimension 2"),
    ("COUNT3", "repetitions along dimension 3 (1: unused)"),
    ("SRC_STRIDE3", "source byte stride of dimension 3"),
    ("DST_STRIDE3", "destination byte stride of dimension 3"),
    ("SRC_LEVEL", "memory of the source: 0 DDR, 1 L2, 2 L1 (of the task's engine)"),
    ("DST_LEVEL", "memory of the destination, coded like SRC_LEVEL"),
]

#: The operand descriptor's registers (docs: "19 registers per slot"), in slot order.
OPERAND_FIELDS = ["ADDR_LO", "ADDR_HI", "LEVEL", "BYTES", "ELEM", "RANK",
                  *(f"DIM{d}" for d in range(6)), *(f"STRIDE{d}" for d in range(6)), "QUANT"]


def test_copy_registers_are_the_documented_table():
    assert _copy_registers() == COPY_MAP


def test_compute_registers_are_the_documented_table():
    regs = _compute_registers()
    names = [n for n, _ in regs]
    assert len(regs) == 197
    assert names[:3] == ["OPCODE", "NIN", "NOUT"]
    # operand slot k: registers 3 + 19k ... 21 + 19k
    for k in range(8):
        assert names[3 + 19 * k : 22 + 19 * k] == [f"OP{k}_{f}" for f in OPERAND_FIELDS]
    assert names[155:195] == [f"ATTR{j}" for j in range(40)]
    assert names[195:] == ["REQUANT", "TABLE"]
    docs = dict(regs)
    assert docs["OPCODE"] == "operation code (OPCODES)"
    assert docs["NIN"] == "input operands: OP0 .. OP(NIN-1)"
    assert docs["NOUT"] == "output operands: OP(NIN) .. OP(NIN+NOUT-1)"
    assert docs["OP5_QUANT"].startswith("operand 5: byte offset of the quantisation entry")
    assert docs["OP0_ADDR_LO"] == "operand 0: byte address of the first element, bits 31..0"
    assert {docs[f"ATTR{j}"] for j in range(40)} == {"attribute word (layout: attr_words)"}
    assert docs["REQUANT"] == (
        "integer gemm/matmul/conv2d: byte offset of the output stage's requantisation entry "
        "in the data section; binary i8 add/sub/mul/min/max: byte offset of the ELTWISE_ENTRY")
    assert docs["TABLE"] == (
        "i8 table tasks (unary, clamp, requantising pool / reduce_max): byte offset of the "
        "LOOKUP_TABLE in the data section (NO_TABLE: none); since 1.3")


def test_register_map_built_from_a_list():
    dma = RegisterMap(Unit.SDMA, _copy_registers())
    assert dma.unit is Unit.SDMA and len(dma) == 16
    assert dma.registers[0] == Register("SRC_LO", 0, "source byte address, bits 31..0")
    assert dma.registers[15] == Register("DST_LEVEL", 15,
                                         "memory of the destination, coded like SRC_LEVEL")
    assert [r.index for r in dma.registers] == list(range(16))
    assert dma.index("COUNT3") == 11 and dma.name(11) == "COUNT3"
    assert dma.registers == REGISTER_MAPS[Unit.DMA].registers
    nmu = RegisterMap(Unit.NMU, _compute_registers())
    assert nmu.index("TABLE") == 196 and nmu.name(155) == "ATTR0"
    with pytest.raises(ValueError, match=r"^VPU: register names repeat$"):
        RegisterMap(Unit.VPU, [("A", "first"), ("B", "second"), ("A", "again")])


def test_every_unit_has_its_map():
    for unit in Unit:
        regs = REGISTER_MAPS[unit]
        assert regs.unit is unit
        assert len(regs) == (16 if unit in COPY_UNITS else 197)
    assert set(COPY_UNITS) | set(COMPUTE_UNITS) == set(Unit)


def test_register_index_and_name_errors():
    dma = REGISTER_MAPS[Unit.DMA]
    assert dma.name(0) == "SRC_LO" and dma.name(15) == "DST_LEVEL"
    with _raises("DMA has registers 0..15, not 16"):
        dma.name(16)
    with _raises("DMA has registers 0..15, not -1"):
        dma.name(-1)
    with _raises("CSTL has no register 'COUNT0'"):
        REGISTER_MAPS[Unit.CSTL].index("COUNT0")


# --- group requantisation entry ----------------------------------------------------------

#: Every field different, so that a field read from or written to the wrong place shows.
GROUP = GroupRequantEntry(x_zero_point=-5, y_zero_point=7, lo=-100, hi=90, shift=40, axis=2,
                          group_size=17, multipliers=(123456789, 1 << 30, 5),
                          w_zero_points=(-8, 6, 0))
#: GROUP by hand: the 32-byte head (<iiiiIiiI: x zero point, y zero point, lo, hi, groups,
#: shift, axis, group size), then (i32 multiplier, i32 weight zero point) per group.
GROUP_BYTES = (struct.pack("<iiiiIiiI", -5, 7, -100, 90, 3, 40, 2, 17)
               + struct.pack("<ii", 123456789, -8) + struct.pack("<ii", 1 << 30, 6)
               + struct.pack("<ii", 5, 0))


def test_group_entry_bytes_and_read_back_at_an_offset():
    assert encode_group_requant(GROUP) == GROUP_BYTES
    assert len(GROUP_BYTES) == 56
    # at offset 16 of a section that ends exactly after it, and with bytes after it
    assert decode_group_requant(bytes(16) + GROUP_BYTES, 16) == GROUP
    assert decode_group_requant(bytes(8) + GROUP_BYTES + bytes(8), 8) == GROUP
    one = dataclasses.replace(GROUP, multipliers=(7,), w_zero_points=(-1,))
    assert encode_group_requant(one) == GROUP_BYTES[:16] + struct.pack(
        "<IiiIii", 1, 40, 2, 17, 7, -1)
    assert decode_group_requant(encode_group_requant(one), 0) == one


@pytest.mark.parametrize("field", ["x_zero_point", "y_zero_point", "lo", "hi", "shift", "axis"])
def test_group_entry_i32_fields_at_their_limits(field):
    for ok in (I32_MIN, I32_MAX):
        entry = dataclasses.replace(GROUP, **{field: ok})
        assert decode_group_requant(encode_group_requant(entry), 0) == entry
    for bad in (I32_MIN - 1, I32_MAX + 1):
        with _raises("group requantisation entry: a value does not fit its field"):
            encode_group_requant(dataclasses.replace(GROUP, **{field: bad}))


def test_group_entry_group_values_and_size_at_their_limits():
    for ok in (I32_MIN, I32_MAX):
        entry = dataclasses.replace(GROUP, multipliers=(1, ok, 2), w_zero_points=(ok, 0, 0))
        assert decode_group_requant(encode_group_requant(entry), 0) == entry
    for bad in (I32_MIN - 1, I32_MAX + 1):
        for change in ({"multipliers": (1, 2, bad)}, {"w_zero_points": (bad, 0, 0)}):
            with _raises("group requantisation entry: a value does not fit its field"):
                encode_group_requant(dataclasses.replace(GROUP, **change))
    for ok in (1, (1 << 32) - 1):
        entry = dataclasses.replace(GROUP, group_size=ok)
        assert decode_group_requant(encode_group_requant(entry), 0) == entry
    for bad in (0, -1, 1 << 32):
        with _raises("group requantisation entry: a value does not fit its field"):
            encode_group_requant(dataclasses.replace(GROUP, group_size=bad))


def test_group_entry_needs_matching_groups():
    with _raises("group requantisation entry: 0 multipliers, 0 weight zero points"):
        encode_group_requant(dataclasses.replace(GROUP, multipliers=(), w_zero_points=()))
    with _raises("group requantisation entry: 3 multipliers, 2 weight zero points"):
        encode_group_requant(dataclasses.replace(GROUP, w_zero_points=(1, 2)))


def test_group_entry_decode_errors():
    data = bytes(8) + GROUP_BYTES
    with _raises("data section offset 4: a group requantisation entry starts on a multiple "
                 "of 8"):
        decode_group_requant(data, 4)
    # the head does not fit: 24 of its 32 bytes after offset 8
    with _raises("data section offset 8: a group requantisation entry needs 32 bytes, the "
                 "data section has 32"):
        decode_group_requant(data[:32], 8)
    # the head fits exactly, its group does not
    with _raises("data section offset 8: a group requantisation entry of 3 groups does not "
                 "fit in the 40-byte data section"):
        decode_group_requant(data[:40], 8)
    # one byte short of the last group
    with _raises("data section offset 8: a group requantisation entry of 3 groups does not "
                 "fit in the 63-byte data section"):
        decode_group_requant(data[:-1], 8)
    no_group = bytearray(data)
    no_group[8 + 16 : 8 + 20] = bytes(4)  # groups = 0
    with _raises("data section offset 8: a group requantisation entry of 0 groups does not "
                 "fit in the 64-byte data section"):
        decode_group_requant(bytes(no_group), 8)


# --- requantisation, quantisation, eltwise entries and lookup tables ---------------------

REQUANT = RequantEntry(x_zero_point=3, y_zero_point=-7, lo=-128, hi=127,
                       multipliers=(1 << 30, 99), shifts=(33, 2))


@pytest.mark.parametrize("field", ["x_zero_point", "y_zero_point", "lo", "hi"])
def test_requant_entry_limits(field):
    for ok in (I32_MIN, I32_MAX):
        entry = dataclasses.replace(REQUANT, **{field: ok})
        assert decode_requant(encode_requant(entry), 0) == entry
    for bad in (I32_MIN - 1, I32_MAX + 1):
        with _raises("requantisation entry: a value does not fit in an i32"):
            encode_requant(dataclasses.replace(REQUANT, **{field: bad}))


def test_requant_entry_channels_and_errors():
    entry = dataclasses.replace(REQUANT, multipliers=(I32_MIN, I32_MAX), shifts=(I32_MAX, 0))
    assert decode_requant(bytes(8) + encode_requant(entry), 8) == entry
    with _raises("requantisation entry: a value does not fit in an i32"):
        encode_requant(dataclasses.replace(REQUANT, shifts=(1, I32_MAX + 1)))
    with _raises("requantisation entry: 2 multipliers, 1 shifts"):
        encode_requant(dataclasses.replace(REQUANT, shifts=(1,)))
    with _raises("data section offset 12: a requantisation entry starts on a multiple of 8"):
        decode_requant(bytes(64), 12)


QUANT = QuantEntry("per_group", axis=-2, group_size=32, scales=(0.5, 0.25),
                   zero_points=(3, -4))


def test_quant_entry_bytes_and_read_back():
    raw = encode_quant(QUANT)
    # <BBHiII: kind 2, reserved, axis -2, group size 32, count 2; then 2 f64 and 2 i64
    assert raw == struct.pack("<BBHiII2d2q", 2, 0, 0, -2, 32, 2, 0.5, 0.25, 3, -4)
    assert decode_quant(bytes(8) + raw, 8) == QUANT
    assert decode_quant(bytes(8) + raw + bytes(8), 8) == QUANT


def test_quant_entry_limits():
    for axis in (I32_MIN, I32_MAX):
        entry = dataclasses.replace(QUANT, axis=axis)
        assert decode_quant(encode_quant(entry), 0) == entry
    for size in (0, (1 << 32) - 1):
        entry = dataclasses.replace(QUANT, group_size=size)
        assert decode_quant(encode_quant(entry), 0) == entry
    for z in (-(1 << 63), (1 << 63) - 1):
        entry = dataclasses.replace(QUANT, zero_points=(z, 0))
        assert decode_quant(encode_quant(entry), 0) == entry
    for axis in (I32_MIN - 1, I32_MAX + 1):
        with _raises(f"quantisation entry: axis {axis} / group 32 out of range"):
            encode_quant(dataclasses.replace(QUANT, axis=axis))
    for size in (-1, 1 << 32):
        with _raises(f"quantisation entry: axis -2 / group {size} out of range"):
            encode_quant(dataclasses.replace(QUANT, group_size=size))
    for z in (-(1 << 63) - 1, 1 << 63):
        with _raises(f"quantisation entry: zero point {z} is not an i64"):
            encode_quant(dataclasses.replace(QUANT, zero_points=(0, z)))
    with _raises("quantisation entry: 0 scales and 0 zero points"):
        encode_quant(dataclasses.replace(QUANT, scales=(), zero_points=()))
    with _raises("quantisation entry: 2 scales and 1 zero points"):
        encode_quant(dataclasses.replace(QUANT, zero_points=(1,)))
    with _raises("quantisation kind 'per_row' not in ('per_tensor', 'per_channel', "
                 "'per_group')"):
        encode_quant(dataclasses.replace(QUANT, kind="per_row"))


def test_quant_entry_decode_errors():
    data = bytes(8) + encode_quant(QUANT)  # 8 + 16 + 32 bytes
    with _raises("data section offset 8: a quantisation entry needs 16 bytes, the data "
                 "section has 16"):
        decode_quant(data[:16], 8)
    # the head fits exactly, its scales do not
    with _raises("data section offset 8: a quantisation entry of 2 channels does not fit in "
                 "the 24-byte data section"):
        decode_quant(data[:24], 8)
    with _raises("data section offset 8: a quantisation entry of 2 channels does not fit in "
                 "the 48-byte data section"):
        decode_quant(data[:48], 8)
    with _raises("data section offset 8: a quantisation entry of 2 channels does not fit in "
                 "the 55-byte data section"):
        decode_quant(data[:-1], 8)
    empty = bytearray(data)
    empty[8 + 12 : 8 + 16] = bytes(4)  # count 0
    with _raises("data section offset 8: a quantisation entry of 0 channels does not fit in "
                 "the 56-byte data section"):
        decode_quant(bytes(empty), 8)
    unknown = bytearray(data)
    unknown[8] = 3  # one past per_group
    with _raises("data section offset 8: quantisation kind 3 unknown"):
        decode_quant(bytes(unknown), 8)


ELTWISE = EltwiseParams(a_zero_point=1, b_zero_point=-2, y_zero_point=3, left_shift=20,
                        a_multiplier=1 << 30, a_shift=31, b_multiplier=5, b_shift=6,
                        y_multiplier=7, y_shift=8, lo=-128, hi=127)


def test_eltwise_entry_limits_and_errors():
    raw = encode_eltwise(ELTWISE)
    assert raw == struct.pack("<12i", 1, -2, 3, 20, 1 << 30, 31, 5, 6, 7, 8, -128, 127)
    assert decode_eltwise(bytes(8) + raw, 8) == ELTWISE
    for ok in (I32_MIN, I32_MAX):
        p = dataclasses.replace(ELTWISE, b_shift=ok)
        assert decode_eltwise(encode_eltwise(p), 0) == p
    for bad in (I32_MIN - 1, I32_MAX + 1):
        with _raises(f"eltwise entry: y_shift = {bad} is not an i32"):
            encode_eltwise(dataclasses.replace(ELTWISE, y_shift=bad))
    # two bad fields: the message names the first
    with _raises(f"eltwise entry: a_shift = {I32_MAX + 1} is not an i32"):
        encode_eltwise(dataclasses.replace(ELTWISE, a_shift=I32_MAX + 1, hi=I32_MIN - 1))
    with _raises("data section offset 4: an eltwise entry starts on a multiple of 8"):
        decode_eltwise(bytes(8) + raw, 4)
    with _raises("data section offset 8: an eltwise entry needs 48 bytes, the data section "
                 "has 55"):
        decode_eltwise((bytes(8) + raw)[:-1], 8)


def test_lookup_table_limits_and_errors():
    codes = list(range(-128, 128))
    raw = encode_table(codes)
    assert raw == bytes(range(128, 256)) + bytes(range(128))
    assert decode_table(bytes(8) + raw, 8) == tuple(codes)
    for bad in ([0] * 255, [0] * 257, [-129] + [0] * 255, [0] * 255 + [128]):
        with _raises("lookup table: needs 256 i8 codes"):
            encode_table(bad)
    with _raises("data section offset 4: a lookup table starts on a multiple of 8"):
        decode_table(bytes(8) + raw, 4)
    with _raises("data section offset 8: a lookup table needs 256 bytes, the data section "
                 "has 263"):
        decode_table((bytes(8) + raw)[:-1], 8)


# --- the container: encode ---------------------------------------------------------------


def _buffer(**change) -> BufferEntry:
    return dataclasses.replace(BufferEntry("B", "L1", 0, 64, 0x100, 256), **change)


def _task(**change) -> Task:
    return dataclasses.replace(Task(Unit.DMA, 0, 0, 0, 1, ((4, 256),)), **change)


def _encode(buffers=(), tasks=(), data=b"") -> bytes:
    return encode(Program(DEV, tuple(buffers), tuple(tasks), data))


def test_buffer_fields_at_their_limits():
    for change in ({"name": "x" * 31}, {"name": "é" * 15}, {"engine": 254}, {"engine": None},
                   {"align": (1 << 32) - 1}, {"address": (1 << 64) - 1},
                   {"size": (1 << 64) - 1}, {"level": "DDR", "engine": None}):
        buf = _buffer(**change)
        assert decode(_encode([buf])).buffers == (buf,)
    with _raises("buffer '': the name needs 1 to 31 UTF-8 bytes"):
        _encode([_buffer(name="")])
    with _raises("buffer 'éééééééééééééééé': the name needs 1 to 31 UTF-8 bytes"):
        _encode([_buffer(name="é" * 16)])  # 32 UTF-8 bytes
    with _raises("buffer 'B': level 'L3' not in ('DDR', 'L2', 'L1')"):
        _encode([_buffer(level="L3")])
    for engine in (255, 256, -1):  # 255 is the code of "no engine"
        with _raises(f"buffer 'B': engine {engine} out of range"):
            _encode([_buffer(engine=engine)])
    for field, bits in (("align", 32), ("address", 64), ("size", 64)):
        for bad in (-1, 1 << bits):
            with _raises(f"buffer 'B': {field} {bad} is out of range"):
                _encode([_buffer(**{field: bad})])


def test_task_fields_at_their_limits():
    for change in ({"instance": 255}, {"engine": 255}, {"wait": (1 << 32) - 1},
                   {"signal": (1 << 32) - 1}, {"writes": ((0, (1 << 32) - 1),)},
                   {"writes": ((1, 7),) * 255}):
        task = _task(**change)
        assert decode(_encode(tasks=[task])).tasks == (task,)
    for field, bits in (("instance", 8), ("engine", 8), ("wait", 32), ("signal", 32)):
        for bad in (-1, 1 << bits):
            with _raises(f"task 0: {field} {bad} does not fit in {bits} bits"):
                _encode(tasks=[_task(**{field: bad})])
    with _raises("task 1: 256 register writes (at most 255)"):
        _encode(tasks=[_task(), _task(writes=((1, 7),) * 256)])
    for bad in (-1, 1 << 32):
        with _raises(f"task 0: register 4 value {bad} is not a u32"):
            _encode(tasks=[_task(writes=((0, 1), (4, bad)))])
    with _raises("task 0: unit 0 is not a Unit"):
        _encode(tasks=[_task(unit=0)])
    with _raises("the data section has 12 bytes, not a multiple of 8"):
        _encode(data=bytes(12))


# --- the container: decode ---------------------------------------------------------------


def _good() -> bytearray:
    """Two buffers and one DMA task with two writes: 68 + 2 * 56 = 180, then a 22-byte
    stream (tasks at 180, writes at 192 and 197), 202 bytes in all."""
    return bytearray(_encode(
        [BufferEntry("X_L2", "L2", None, 64, 0x40, 256), BufferEntry("X_L1", "L1", 0, 64, 0, 256)],
        [Task(Unit.DMA, 1, 0, 0, 4, ((0, 0x40), (4, 256)))],
    ))


def _with(raw: bytearray, **fields) -> bytes:
    out = bytearray(raw)
    for name, value in fields.items():
        HEADER.patch(out, 0, name, value)
    return bytes(out)


def test_decode_header_errors_name_the_field():
    good = _good()
    assert len(good) == 202 and decode(bytes(good)).tasks[0].writes == ((0, 0x40), (4, 256))
    with _raises("offset 0: the program header needs 68 bytes, the binary ends after 4 "
                 "(truncated)"):
        decode(b"NEMB")
    with _raises("offset 8: header size 72 / buffer table offset 68, expected 68"):
        decode(_with(good, header_bytes=72))
    with _raises("offset 8: header size 68 / buffer table offset 72, expected 68"):
        decode(_with(good, table_offset=72))
    other = bytes(range(32))
    with _raises(f"offset 12: bound for device {DEV.hex()[:16]}..., this device is "
                 "0001020304050607..."):
        decode(bytes(good), device_hash=other)
    assert decode(bytes(good), device_hash=DEV).device_hash == DEV
    with _raises("offset 56: task stream offset 181, but 2 buffer entries end at 180"):
        decode(_with(good, stream_offset=181))
    with _raises("offset 56: task stream offset 180, but 3 buffer entries end at 236"):
        decode(_with(good, buffer_count=3))
    with _raises("offset 64: data section of 4 bytes, not a multiple of 8"):
        decode(_with(good, data_bytes=4))


def test_decode_length_errors():
    good = _good()
    with _raises("offset 60: header says the task stream has 22 bytes from offset 180 and the "
                 "data section 0, so the binary ends at 202; it has 203 bytes (trailing "
                 "bytes)"):
        decode(bytes(good) + b"\0")
    with _raises("offset 60: header says the task stream has 22 bytes from offset 180 and the "
                 "data section 0, so the binary ends at 202; it has 201 bytes (truncated)"):
        decode(bytes(good[:-1]))
    # with a data section: the stream ends at 202, the section starts at 208
    data = bytes(range(16))
    raw = bytearray(_encode([BufferEntry("X_L2", "L2", None, 64, 0x40, 256),
                             BufferEntry("X_L1", "L1", 0, 64, 0, 256)],
                            [Task(Unit.DMA, 1, 0, 0, 4, ((0, 0x40), (4, 256)))], data))
    assert len(raw) == 224 and raw[202:208] == bytes(6) and decode(bytes(raw)).data == data
    with _raises("offset 60: header says the task stream has 22 bytes from offset 180 and the "
                 "data section 16, so the binary ends at 224; it has 223 bytes (truncated)"):
        decode(bytes(raw[:-1]))
    with _raises("offset 60: header says the task stream has 22 bytes from offset 180 and the "
                 "data section 16, so the binary ends at 224; it has 232 bytes (trailing "
                 "bytes)"):
        decode(bytes(raw) + bytes(8))


def test_decode_task_stream_errors():
    good = _good()
    # one task more than the stream holds: its header would start at the end of the binary
    with _raises("offset 202: task 1 header needs 12 bytes, the binary ends after 0 "
                 "(truncated)"):
        decode(_with(good, task_count=2))
    # one write more than the task holds
    bad = bytearray(good)
    TASK_HEADER.patch(bad, 180, "nwrites", 3)
    with _raises("offset 202: task 0 register write needs 5 bytes, the binary ends after 0 "
                 "(truncated)"):
        decode(bytes(bad))
    # no task, but a 22-byte stream
    with _raises("offset 180: the tasks end here, the header says the stream ends at 202"):
        decode(_with(good, task_count=0))
    # one write fewer than the stream holds
    TASK_HEADER.patch(bad, 180, "nwrites", 1)
    with _raises("offset 197: the tasks end here, the header says the stream ends at 202"):
        decode(bytes(bad))
    bad = bytearray(good)
    bad[192] = 16  # one past DST_LEVEL
    with _raises("offset 192: task 0: DMA register index 16 out of range (0..15 in a 1.4 "
                 "binary)"):
        decode(bytes(bad))
    bad[192] = 15
    assert decode(bytes(bad)).tasks[0].writes[0] == (15, 0x40)


def test_decode_buffer_entry_errors():
    good = _good()
    # buffer 0 is at 68, its level at 100, buffer 1's level at 156
    for level in (3, 255):
        bad = bytearray(good)
        bad[156] = level
        with _raises(f"offset 156: buffer 'X_L1': level {level} unknown"):
            decode(bytes(bad))
    for name in (bytes(32), b"X\0L2" + bytes(28), b"\xff\xfe" + bytes(30), b"\0X_L2"
                 + bytes(27)):
        bad = bytearray(good)
        bad[68:100] = name
        with _raises(f"offset 68: buffer entry 0: name {name!r} is not valid"):
            decode(bytes(bad))
    # a 32-byte name without NUL padding is whole, and any engine but 0xFF is kept
    bad = bytearray(good)
    bad[124:156] = b"N" * 32
    bad[157] = 254
    assert decode(bytes(bad)).buffers[1] == BufferEntry("N" * 32, "L1", 254, 64, 0, 256)


def test_versions_1_2_and_1_3_read_the_registers_they_have():
    cstl = REGISTER_MAPS[Unit.CSTL]
    table = cstl.index("TABLE")
    task = Task(Unit.CSTL, 0, 0, 0, 0, ((table - 1, 5), (table, 0)))
    for minor in (3, 4):
        prog = Program(DEV, (), (task,), b"", (1, minor))
        assert decode(encode(prog)) == prog
    old = Program(DEV, (), (task,), b"", (1, 2))
    with _raises("offset 85: task 0: CSTL register index 196 out of range (0..195 in a 1.2 "
                 "binary)"):
        decode(encode(old))
    # the copy units' map did not change: a 1.0 binary reads all of it
    copy = Program(DEV, (), (Task(Unit.SDMA, 0, 0, 0, 0, ((15, 2),)),), b"", (1, 0))
    assert decode(encode(copy)) == copy
    assert decode(encode(dataclasses.replace(copy, version=(1, 4)))).version == (1, 4)


# --- attribute words ---------------------------------------------------------------------


def test_body_words_of_each_type():
    assert _body_words("leaky_relu", "alpha", "float") == 2
    for typ in ("int", "bool", "elem_type", "id"):
        assert _body_words("conv2d", "groups", typ) == 1
    assert _body_words("conv2d", "pads", "int_list") == 4
    assert _body_words("conv3d", "strides", "int_list") == 3
    assert _body_words("pad", "pads", "int_list") == 2 * MAX_RANK
    # any other list: one item per dimension
    assert _body_words("conv2d", "axes", "int_list") == MAX_RANK
    assert _body_words("transpose", "perm", "int_list") == MAX_RANK
    with _raises("compute attribute op: string attributes have no encoding"):
        _body_words("compute", "op", "string")
    with _raises("conv2d attribute pads: Int_List attributes have no encoding"):
        _body_words("conv2d", "pads", "Int_List")


def test_attribute_values_at_the_i32_limits():
    specs = [("n", "int"), ("items", "int_list")]
    values = {"n": I32_MIN, "items": (I32_MAX, I32_MIN, -1)}
    writes = attr_words("op", specs, values)
    assert writes == [(0, ATTR_PRESENT | 1), (1, 1 << 31), (2, ATTR_PRESENT | 3),
                      (3, I32_MAX), (4, 1 << 31), (5, 0xFFFFFFFF)]
    words = [0] * ATTR_WORDS
    for index, word in writes:
        words[index] = word
    assert read_attr_words("op", specs, words) == values
    for bad in (I32_MIN - 1, I32_MAX + 1, True, 1.0):
        with _raises(f"attribute n: {bad!r} is not a 32-bit integer"):
            attr_words("op", specs, {"n": bad})
        with _raises(f"attribute items: {bad!r} is not a 32-bit integer"):
            attr_words("op", specs, {"items": (1, bad)})


def test_attribute_codes_name_the_attribute():
    with _raises(f"attribute to: 'i64' has no code (codes: {ELEM_TYPES})"):
        attr_words("cast", [("to", "elem_type")], {"to": "i64"})
    with _raises("attribute mode: 'wrap' has no code (codes: ('constant', 'reflect', "
                 "'edge'))"):
        attr_words("pad", [("mode", "id")], {"mode": "wrap"})
    specs = [("to", "elem_type")]
    words = [ATTR_PRESENT | 1, len(ELEM_TYPES) - 1]
    assert read_attr_words("cast", specs, words) == {"to": ELEM_TYPES[-1]}
    with _raises(f"attribute to: code {len(ELEM_TYPES)} unknown"):
        read_attr_words("cast", specs, [ATTR_PRESENT | 1, len(ELEM_TYPES)])
    with _raises("attribute mode: code 3 unknown"):
        read_attr_words("pad", [("mode", "id")], [ATTR_PRESENT | 1, 3])


def test_read_attr_words_tags_and_strays():
    specs = [("a", "int"), ("b", "int")]
    # fewer words than ATTR_WORDS: the rest read as 0
    assert read_attr_words("op", specs, [0, 0, ATTR_PRESENT | 1, 9]) == {"b": 9}
    assert read_attr_words("op", specs, []) == {}
    # a word in absent a's body is stray, even though b (after it) is present
    with _raises("ATTR1 = 0x5 belongs to no present attribute of op"):
        read_attr_words("op", specs, [0, 5, ATTR_PRESENT | 1, 9])
    # a tag without the present bit, whatever its count
    with _raises("attribute a: ATTR0 tag 0x1 is not a int tag"):
        read_attr_words("op", specs, [1, 9])
    with _raises("attribute a: ATTR0 tag 0x80000002 is not a int tag"):
        read_attr_words("op", specs, [ATTR_PRESENT | 2, 9, 9])
    with _raises("attribute l: ATTR0 tag 0x80000007 is not a int_list tag of at most 6 "
                 "items"):
        read_attr_words("op", [("l", "int_list")], [ATTR_PRESENT | 7] + [1] * 7)


def test_packed_attributes_before_1_2():
    specs = [("alpha", "float"), ("items", "int_list"), ("n", "int"), ("to", "elem_type")]
    lo, hi = struct.unpack("<II", struct.pack("<d", 0.125))
    words = [ATTR_PRESENT | 2, lo, hi, ATTR_PRESENT | 2, 7, 8, 0, ATTR_PRESENT | 1, 1]
    assert read_attr_words("op", specs, words, packed=True) == {
        "alpha": 0.125, "items": (7, 8), "to": "i8"}
    # the list may end on the last word
    assert read_attr_words("op", specs[1:2], [ATTR_PRESENT | 2, 7, 8], packed=True) == {
        "items": (7, 8)}
    # alpha at ATTR0-2, items at ATTR3-5, n's tag at ATTR6, to's at ATTR7
    with _raises("attribute to: no tag word (ATTR7 not written)"):
        read_attr_words("op", specs, words[:7], packed=True)
    with _raises("attribute n: no tag word (ATTR6 not written)"):
        read_attr_words("op", specs, words[:6], packed=True)
    with _raises("attribute n: tag 0x1 is not a int tag"):
        read_attr_words("op", specs, [*words[:6], 1, 5], packed=True)
    with _raises("attribute alpha: tag 0x80000003 is not a float tag"):
        read_attr_words("op", specs, [ATTR_PRESENT | 3, 0, 0, 0], packed=True)
    with _raises("attribute items: needs ATTR4..ATTR6"):
        read_attr_words("op", specs, [*words[:3], ATTR_PRESENT | 3, 7, 8], packed=True)
    with _raises(f"attribute to: code {len(ELEM_TYPES)} unknown"):
        read_attr_words("op", specs, [*words[:8], len(ELEM_TYPES)], packed=True)
