"""The declarative record layer (``nem.records``): packing, unpacking, errors, slices."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nem.records import Record, RecordError

REC = Record("example", [
    ("tag", "bytes4", "a name"),
    ("a", "u8", "a byte"),
    ("b", "u16", "a half word"),
    ("c", "i32", "a signed word"),
    ("d", "u64", "a double word"),
    ("e", "f64", "a double"),
])


def test_offsets_and_struct_derive_from_the_declaration():
    # 4 + 1 + 2 + 4 + 8 + 8 bytes, no padding
    assert REC.size == 27
    assert [REC.offset(n) for n in REC.names] == [0, 4, 5, 7, 11, 19]
    assert REC.struct.format == "<4sBHiQd"
    assert REC.bit_fields()["c"] == (56, 32)


def test_pack_gives_hand_derived_bytes():
    raw = REC.pack(tag=b"AB", a=0x12, b=0x3456, c=-2, d=1 << 40, e=1.5)
    # tag NUL padded; little-endian integers; -2 as 0xfffffffe; 1.5 = 0x3ff8000000000000
    want = (b"AB\0\0" + b"\x12" + b"\x56\x34" + b"\xfe\xff\xff\xff"
            + b"\0\0\0\0\0\x01\0\0" + b"\0\0\0\0\0\0\xf8\x3f")
    assert raw == want
    assert REC.unpack(raw) == {"tag": b"AB\0\0", "a": 0x12, "b": 0x3456, "c": -2,
                               "d": 1 << 40, "e": 1.5}


@pytest.mark.parametrize("field,value,message", [
    ("a", 256, "a 256 does not fit in a u8"),
    ("a", -1, "a -1 does not fit in a u8"),
    ("c", 1 << 31, "c 2147483648 does not fit in a i32"),
    ("b", True, "b True does not fit in a u16"),
    ("tag", b"toolong", "tag must be at most 4 bytes"),
    ("e", "x", "e 'x' is not a number"),
])
def test_pack_range_errors_name_the_field(field, value, message):
    values = dict(tag=b"", a=0, b=0, c=0, d=0, e=0.0)
    values[field] = value
    with pytest.raises(RecordError, match=f"^here: {message}"):
        REC.pack(values, where="here")


def test_pack_needs_every_field_and_no_other():
    with pytest.raises(RecordError, match=r"fields missing \['e'\], unknown \['z'\]"):
        REC.pack(tag=b"", a=0, b=0, c=0, d=0, z=1)


def test_unpack_past_the_end_names_the_offset():
    with pytest.raises(RecordError, match=r"offset 3: example needs 27 bytes, the data ends "
                                          r"after 24 \(truncated\)"):
        REC.unpack(bytes(27), 3)


def test_patch_overwrites_one_field():
    raw = bytearray(REC.pack(tag=b"x", a=1, b=2, c=3, d=4, e=5.0))
    REC.patch(raw, 0, "c", -7)
    assert struct.unpack_from("<i", raw, 7)[0] == -7
    assert REC.unpack(raw)["b"] == 2


def test_word_fields():
    words = Record("w", [("x", "i32", ""), ("y", "u32", "")])
    assert words.word_fields() == {"x": 0, "y": 1}
    with pytest.raises(ValueError, match=r"example\.a is not one aligned 4-byte word"):
        REC.word_fields()


def test_bad_declarations_are_refused():
    with pytest.raises(ValueError, match="unknown field type 'u24'"):
        Record("r", [("x", "u24", "")])
    with pytest.raises(ValueError, match="field names repeat"):
        Record("r", [("x", "u8", ""), ("x", "u8", "")])


@given(st.integers(0, 255), st.integers(0, 65535), st.integers(-(1 << 31), (1 << 31) - 1),
       st.integers(0, (1 << 64) - 1), st.floats(allow_nan=False))
def test_round_trip(a, b, c, d, e):
    values = dict(tag=b"NEMB", a=a, b=b, c=c, d=d, e=e)
    assert REC.unpack(REC.pack(values)) == values
    # the bytes agree with struct packing the same values independently
    assert REC.pack(values) == struct.pack("<4sBHiQd", b"NEMB", a, b, c, d, e)
