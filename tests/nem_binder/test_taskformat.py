"""The task binary container: hand-derived bytes, round trips, and bad binaries."""

from __future__ import annotations

import dataclasses
import hashlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nem.taskformat import (
    REGISTER_MAPS,
    BufferEntry,
    Program,
    Task,
    TaskFormatError,
    Unit,
    decode,
    encode,
)

DEV = hashlib.sha256(b"test device").digest()


def _small() -> Program:
    dma = REGISTER_MAPS[Unit.DMA]
    return Program(
        DEV,
        (BufferEntry("X_L2", "L2", None, 64, 0x40, 256), BufferEntry("X_L1", "L1", 0, 64, 0, 256)),
        (
            Task(
                Unit.DMA, 1, 0, 0x0, 0x4, ((dma.index("SRC_LO"), 0x40), (dma.index("COUNT0"), 256))
            ),
        ),
    )


def test_bytes_by_hand():
    data = encode(_small())
    # header: "NEMB", version 1.4, header size 68, the hash, 1 task, 2 buffers, table at 68,
    # tasks at 68 + 2 * 56 = 180, task stream 12 + 2 * 5 = 22 bytes, no data section
    assert data[:4] == b"NEMB"
    assert data[4:8] == b"\x01\x00\x04\x00"
    assert data[8:12] == (68).to_bytes(4, "little")
    assert data[12:44] == DEV
    assert [int.from_bytes(data[k : k + 4], "little") for k in range(44, 68, 4)] == [
        1, 2, 68, 180, 22, 0,
    ]  # fmt: skip
    # buffer 0: name padded to 32 bytes, level L2 = 1, no engine = 0xFF, reserved, align 64,
    # address 0x40, size 256
    assert data[68:100] == b"X_L2" + bytes(28)
    assert data[100:104] == b"\x01\xff\x00\x00"
    assert data[104:108] == (64).to_bytes(4, "little")
    assert data[108:116] == (0x40).to_bytes(8, "little")
    assert data[116:124] == (256).to_bytes(8, "little")
    assert data[124 + 32 : 124 + 34] == b"\x02\x00"  # buffer 1: L1, engine 0
    # the task: DMA = 0, instance 1, engine 0, 2 writes, waits on nothing, signals token 2;
    # SRC_LO is register 0, COUNT0 register 4
    assert data[180:192] == bytes([0, 1, 0, 2]) + (0).to_bytes(4, "little") + (4).to_bytes(
        4, "little"
    )
    assert data[192:197] == b"\x00" + (0x40).to_bytes(4, "little")
    assert data[197:202] == b"\x04" + (256).to_bytes(4, "little")
    assert len(data) == 202
    assert decode(data, device_hash=DEV) == _small()


def test_register_map_names():
    dma = REGISTER_MAPS[Unit.DMA]
    names = [r.name for r in dma.registers]
    assert names[:5] == ["SRC_LO", "SRC_HI", "DST_LO", "DST_HI", "COUNT0"]
    assert dma.name(dma.index("DST_STRIDE3")) == "DST_STRIDE3"
    with pytest.raises(TaskFormatError, match="no register 'NOPE'"):
        dma.index("NOPE")


u32 = st.integers(0, (1 << 32) - 1)
buffers = st.lists(
    st.builds(
        BufferEntry,
        st.text("abcXYZ_019", min_size=1, max_size=31),
        st.sampled_from(["DDR", "L2", "L1"]),
        st.one_of(st.none(), st.integers(0, 254)),
        u32,
        st.integers(0, (1 << 64) - 1),
        st.integers(0, (1 << 64) - 1),
    ),
    max_size=4,
)


@st.composite
def tasks(draw):
    unit = draw(st.sampled_from(list(Unit)))
    n = len(REGISTER_MAPS[unit]) if unit in REGISTER_MAPS else 256
    writes = draw(st.lists(st.tuples(st.integers(0, n - 1), u32), max_size=8))
    return Task(
        unit,
        draw(st.integers(0, 255)),
        draw(st.integers(0, 255)),
        draw(u32),
        draw(u32),
        tuple(writes),
    )


programs = st.builds(
    Program,
    st.binary(min_size=32, max_size=32),
    buffers.map(tuple),
    st.lists(tasks(), max_size=6).map(tuple),
    st.integers(0, 5).flatmap(lambda n: st.binary(min_size=8 * n, max_size=8 * n)),
)


@settings(max_examples=200, deadline=None)
@given(programs)
def test_round_trip(program):
    data = encode(program)
    assert decode(data) == program
    assert encode(decode(data)) == data


@settings(max_examples=100, deadline=None)
@given(programs, st.data())
def test_every_truncation_and_byte_flip_is_a_clear_error(program, data):
    raw = encode(program)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(TaskFormatError, match="offset"):
        decode(raw[:cut])
    at = data.draw(st.integers(0, len(raw) - 1))
    flipped = bytearray(raw)
    flipped[at] ^= data.draw(st.integers(1, 255))
    try:
        decode(bytes(flipped))
    except TaskFormatError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes(raw):
    try:
        decode(b"NEMB\x01\x00\x00\x00" + raw)
    except TaskFormatError:
        pass


def test_bad_binaries_name_the_field():
    good = encode(_small())
    with pytest.raises(TaskFormatError, match=r"offset 0: magic b'XEMB'"):
        decode(b"X" + good[1:])
    with pytest.raises(TaskFormatError, match=r"offset 4: format version 2\.4"):
        decode(good[:4] + b"\x02\x00" + good[6:])
    with pytest.raises(TaskFormatError, match=r"offset 4: format version 1\.5; this reader "
                                              r"handles 1\.0 to 1\.4"):
        decode(good[:6] + b"\x05\x00" + good[8:])
    # a 1.0 binary (reserved 0 where 1.1 has the data section size) still reads
    assert decode(good[:6] + b"\x00\x00" + good[8:]).tasks == _small().tasks
    with pytest.raises(TaskFormatError, match="offset 12: bound for device"):
        decode(good, device_hash=bytes(32))
    with pytest.raises(TaskFormatError, match="trailing bytes"):
        decode(good + b"\0")
    with pytest.raises(TaskFormatError, match="truncated"):
        decode(good[:-1])
    # register index 17 in the first write of the DMA task (the map has 16 registers)
    bad = bytearray(good)
    bad[192] = 17
    with pytest.raises(TaskFormatError, match=r"offset 192: task 0: DMA register index 17"):
        decode(bytes(bad))
    bad = bytearray(good)
    bad[180] = 9
    with pytest.raises(TaskFormatError, match="offset 180: task 0: unit type 9 unknown"):
        decode(bytes(bad))
    bad = bytearray(good)
    bad[100] = 7
    with pytest.raises(TaskFormatError, match="buffer 'X_L2': level 7 unknown"):
        decode(bytes(bad))


def test_encode_refuses_what_does_not_fit():
    p = _small()
    with pytest.raises(TaskFormatError, match="task 0: signal 4294967296 does not fit"):
        encode(Program(DEV, (), (Task(Unit.NMU, 0, 0, 0, 1 << 32, ()),)))
    with pytest.raises(TaskFormatError, match=r"DMA has registers 0\.\.15, not 16"):
        encode(Program(DEV, (), (Task(Unit.DMA, 0, 0, 0, 0, ((16, 0),)),)))
    with pytest.raises(TaskFormatError, match="the name needs 1 to 31"):
        encode(Program(DEV, (BufferEntry("x" * 32, "L2", None, 1, 0, 1),), p.tasks))
    with pytest.raises(TaskFormatError, match="device hash has 3 bytes"):
        encode(Program(b"abc", (), ()))
    assert struct.calcsize("<4sHHI32sIIIIII") == 68


def test_records_match_the_documented_layouts():
    from nem.taskformat import (
        BUFFER_ENTRY,
        HEADER,
        QUANT_ENTRY,
        REQUANT_CHANNEL,
        REQUANT_ENTRY,
        TASK_HEADER,
        WRITE,
    )

    # The layouts as docs/task-format.md writes them, as struct formats typed here: the
    # declarations must give the same packing.
    documented = {
        HEADER: "<4sHHI32sIIIIII", BUFFER_ENTRY: "<32sBBHIQQ", TASK_HEADER: "<BBBBII",
        WRITE: "<BI", QUANT_ENTRY: "<BBHiII", REQUANT_ENTRY: "<iiiiII", REQUANT_CHANNEL: "<ii",
    }
    for record, fmt in documented.items():
        assert record.struct.format == fmt, record
        assert record.size == struct.calcsize(fmt)
    # offsets the docs name: task count at 44, stream offset at 56, data bytes at 64;
    # a buffer entry's level at 32, its address at 40; a task's wait mask at 4
    assert (HEADER.offset("task_count"), HEADER.offset("stream_offset"),
            HEADER.offset("data_bytes")) == (44, 56, 64)
    assert (BUFFER_ENTRY.offset("level"), BUFFER_ENTRY.offset("address")) == (32, 40)
    assert TASK_HEADER.offset("wait") == 4
    raw = encode(_small())
    fields = HEADER.unpack(raw)
    assert fields["magic"] == b"NEMB" and fields["task_count"] == 1
    assert fields["stream_offset"] == 180 and fields["stream_bytes"] == 22
    assert fields["data_bytes"] == 0


def _requant_bytes(channels, declared=None):
    # Hand-built entry (docs/task-format.md): i32 x_zero_point, y_zero_point, lo, hi,
    # u32 channel count, u32 reserved = 24 bytes, then an (i32 m, i32 t) pair per channel.
    pairs = [(1 << 30, 31 + c) for c in range(channels)]
    head = struct.pack("<iiiiII", 3, -7, -128, 127,
                       channels if declared is None else declared, 0)
    return head + b"".join(struct.pack("<ii", m, t) for m, t in pairs)


def test_decode_requant_reads_a_hand_built_entry():
    from nem.taskformat import decode_requant

    entry = decode_requant(bytes(8) + _requant_bytes(2), 8)
    assert (entry.x_zero_point, entry.y_zero_point, entry.lo, entry.hi) == (3, -7, -128, 127)
    assert tuple(entry.multipliers) == (1 << 30, 1 << 30) and tuple(entry.shifts) == (31, 32)


@pytest.mark.parametrize(("data", "offset", "message"), [
    # 16 of the 24 header bytes.
    (_requant_bytes(0)[:16], 0, "data section offset 0: a requantisation entry needs 24 "
                                "bytes, the data section has 16"),
    # Header complete at offset 8, but the section ends 8 bytes later.
    (bytes(8) + _requant_bytes(0)[:16], 8, "needs 24 bytes, the data section has 24"),
    # Header says 3 channels, only 2 pairs follow: 24 + 16 = 40 bytes of the 48 needed.
    (_requant_bytes(2, declared=3), 0, "entry of 3 channels does not fit in the 40-byte"),
    # Header says 1 channel, nothing follows.
    (_requant_bytes(0, declared=1), 0, "entry of 1 channels does not fit in the 24-byte"),
], ids=["short-header", "short-header-at-8", "missing-pair", "no-pairs"])
def test_decode_requant_truncated_entry_is_a_format_error(data, offset, message):
    from nem.taskformat import decode_requant

    with pytest.raises(TaskFormatError) as info:
        decode_requant(data, offset)
    assert message in str(info.value)


def test_a_1_2_binary_has_no_table_register():
    # TABLE (the last compute register) came with 1.3: a 1.2 binary writing it is refused,
    # naming the index and the version; the same write in a 1.3 binary reads back.
    cstl = REGISTER_MAPS[Unit.CSTL]
    task = Task(Unit.CSTL, 0, 0, 0, 0, ((cstl.index("TABLE"), 0),))
    prog = dataclasses.replace(_small(), tasks=(task,))
    assert decode(encode(prog)).tasks == (task,)
    with pytest.raises(TaskFormatError, match=r"index 196 out of range \(0\.\.195 in a 1\.2"):
        decode(encode(dataclasses.replace(prog, version=(1, 2))))
