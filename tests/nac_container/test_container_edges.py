"""Edge cases of the NAC container, module by module, with hand-built bytes.

What this file holds (the survivors of mutation testing of ``nac.container.*``):

- ``cursor``: the bounded reads at and one past the end of a section, counts that just fit,
  UTF-8 errors, trailing bytes, field names given as format tuples;
- ``read_tables``, ``read_data``, ``read_ops``: each section built byte by byte (the
  layout of ``../shared/specs/nac-v1.6.md`` and ``docs/nac-format.md``), read back, and
  every rejection with its full message, field, absolute offset and value;
- ``validate``: the cross-section checks (OPS against PERM/CNST/DATA/CMAP, MMAP against
  OPS) at both sides of each bound;
- ``reader``: the header checks and section extents;
- ``writer``: golden bytes of every section, constant type and quantisation block, and the
  encoder's errors (values that do not fit, names that are too long);
- ``model``: defaults, ``const_ids`` and ``op_name``.

Offsets are absolute byte offsets in the file: the header is 88 bytes, so the first
section's tag is at 88 and its body starts at 92 (``BODY``).
"""

import struct

import pytest

from nac import (
    Constant,
    DataSection,
    Instruction,
    MmapRecord,
    NacFile,
    NacFormatError,
    Orch,
    QuantParams,
    Tensor,
    dumps,
    loads,
)
from nac.container import section_body, tensor_metadata
from nac.container.cursor import _Cursor
from nac.encoding import MMAP_RECORD, ConstType, DType, MmapAction, QuantMethod
from nem.records import Record, RecordError

TAGS = ("MMAP", "OPS ", "CMAP", "CNST", "PERM", "DATA", "PROC", "ORCH", "RSRC")
BODY = 92  # 88-byte header + the first section's 4-byte tag


def u8(*v):
    return struct.pack(f"<{len(v)}B", *v)


def u16(*v):
    return struct.pack(f"<{len(v)}H", *v)


def i16(*v):
    return struct.pack(f"<{len(v)}h", *v)


def u32(*v):
    return struct.pack(f"<{len(v)}I", *v)


def header(table, *, version=1, qbyte=0x80, num_inputs=0, num_outputs=0, reserved=0,
           d_model=0, padding=bytes(4)):
    """The 88-byte header by the spec's layout (magic, version, quant byte, counts, table)."""
    return (b"NAC" + bytes([version, qbyte]) + struct.pack("<HHBH", num_inputs, num_outputs,
                                                            reserved, d_model)
            + struct.pack("<9Q", *table) + padding)


def nac_bytes(*sections, **fields):
    """A file with *sections* ``(tag, body)`` contiguous after the header, in that order."""
    table, pos, blob = [0] * 9, 88, b""
    for tag, body in sections:
        table[TAGS.index(tag)] = pos
        blob += tag.encode() + body
        pos += 4 + len(body)
    return header(table, **fields) + blob


def raises(call, *args):
    with pytest.raises(NacFormatError) as info:
        call(*args)
    return info.value


def failure(raw):
    return raises(loads, raw)


def check(err, section, field, offset, value, message):
    """A located error: section, field, absolute offset, value, and the whole message."""
    assert (err.section, err.field, err.offset, err.value) == (section, field, offset, value), \
        str(err)
    assert str(err).endswith(": " + message), str(err)


# ---------------------------------------------------------------------------------- cursor


def test_cursor_take_up_to_the_end_and_past_it():
    cur = _Cursor(b"\x01\x02\x03\x04\x05", 1, 4, "TEST")
    assert cur.take(0, "f") == b"" and cur.pos == 1
    assert cur.take(2, "f") == b"\x02\x03" and cur.pos == 3
    check(raises(cur.take, 2, "g"), "TEST", "g", 3, 2, "needs 2 bytes, 1 remain in the section")
    check(raises(cur.take, -1, "h"), "TEST", "h", 3, -1,
          "needs -1 bytes, 1 remain in the section")
    assert cur.take(1, "f") == b"\x04" and cur.pos == 4  # exactly the last byte
    cur.done()


def test_cursor_unpack_little_endian_scalar_and_tuple():
    cur = _Cursor(bytes([1, 2, 3, 4, 5, 6, 7]), 1, 7, "TEST")
    assert cur.unpack("BH", "f") == (2, 0x0403) and cur.pos == 4
    assert cur.unpack("B", "f") == 5 and cur.pos == 5  # one value: not a tuple
    assert cur.unpack("H", "f") == 0x0706 and cur.pos == 7  # ends exactly at the end
    check(raises(cur.unpack, "B", ("x[{}].{}", 2, "y")), "TEST", "x[2].y", 7, 1,
          "needs 1 bytes, 0 remain in the section")
    # The same format again (its struct is cached) still reads at the cursor.
    cur = _Cursor(bytes([9, 8, 7]), 0, 3, "TEST")
    assert cur.unpack("BH", "f") == (9, 0x0708)


def test_cursor_unpack_of_a_format_not_seen_before(monkeypatch):
    # Formats are compiled on first use: an empty cache must still read little-endian.
    monkeypatch.setattr(_Cursor, "_structs", {})
    cur = _Cursor(bytes([1, 2, 3, 4, 5]), 0, 5, "TEST")
    assert cur.unpack("BI", "f") == (1, 0x05040302)
    assert set(_Cursor._structs) == {"BI"}


def test_counts_are_unsigned_and_located():
    # 0xFFFFFFFF is a count of 4294967295 records (uint32), not -1.
    check(failure(nac_bytes(("CMAP", u32(0xFFFFFFFF)))), "CMAP", "entry count", BODY,
          4294967295, "count 4294967295 of records of at least 3 bytes does not fit in the "
          "0 bytes that remain")
    check(failure(nac_bytes(("CMAP", b"\0\0"))), "CMAP", "entry count", BODY, 4,
          "needs 4 bytes, 2 remain in the section")


def test_cursor_record_with_one_and_two_fields():
    one = Record("one", [("v", "u16", "a value")])
    cur = _Cursor(bytes([0x34, 0x12, 7, 0, 3]), 0, 5, "TEST")
    assert cur.record(one, "r") == {"v": 0x1234}
    assert cur.record(MMAP_RECORD, "r") == {"tick": 7, "commands": 3}
    assert cur.pos == 5


def test_cursor_count_fits_exactly_or_not():
    buf = bytes([0xEE]) + u32(2) + bytes(6)
    cur = _Cursor(buf, 1, 11, "TEST")
    assert cur.count("n", 3) == 2 and cur.pos == 5  # 2 records of 3 bytes in 6
    cur = _Cursor(buf, 1, 11, "TEST")
    check(raises(cur.count, "n", 4), "TEST", "n", 1, 2,
          "count 2 of records of at least 4 bytes does not fit in the 6 bytes that remain")


def test_cursor_text():
    raw = "hé".encode()
    cur = _Cursor(b"\0" + raw, 1, 4, "TEST")
    assert cur.text(3, "name") == "hé" and cur.pos == 4
    bad = b"ab" + b"\xff" * 40
    cur = _Cursor(b"\0" + bad, 1, 43, "TEST")
    # The value shows the first 32 bytes; the offset is where the text starts.
    check(raises(cur.text, 42, "name"), "TEST", "name", 1, b"ab" + b"\xff" * 30,
          "not valid UTF-8 (invalid start byte at byte 2)")


def test_cursor_done_and_fail():
    cur = _Cursor(bytes(5), 0, 5, "TEST")
    cur.pos = 3
    check(raises(cur.done), "TEST", "end", 3, None, "2 trailing bytes after the section's content")
    check(raises(cur.fail, "m", "f", 7, 0), "TEST", "f", 0, 7, "m")  # explicit offset 0
    check(raises(cur.fail, "m", ("a{}b{}", 1, 2)), "TEST", "a1b2", 3, None, "m")


# ------------------------------------------------------------------------------ read_tables


def test_cmap_id_bounds_and_empty_names():
    # Two entries of 3 bytes each (id, length 0) fill the 6 bytes after the count.
    raw = nac_bytes(("CMAP", u32(2) + u16(20) + u8(0) + u16(255) + u8(0)))
    assert loads(raw).cmap == ((20, ""), (255, ""))
    for bad in (256, 19, 10, 9):
        body = u32(2) + u16(20) + u8(1) + b"a" + u16(bad) + u8(0)
        check(failure(nac_bytes(("CMAP", body))), "CMAP", "entry[1].id", BODY + len(body), bad,
              f"CMAP id {bad} must be a custom id (>= 10, <= 255, not standard)")


def test_cmap_duplicate_id():
    body = u32(2) + u16(30) + u8(1) + b"a" + u16(30) + u8(0)
    check(failure(nac_bytes(("CMAP", body))), "CMAP", "entry[1].id", BODY + 8, 30,
          "duplicate operation id 30")


def test_perm_codes_and_id_zero():
    raw = nac_bytes(("PERM", u32(2) + u16(1) + u8(0) + u16(2) + u8(0)))
    assert loads(raw).perm == ((1, ""), (2, ""))
    body = u32(1) + u16(5) + u8(3) + b"Txy"
    check(failure(nac_bytes(("PERM", body))), "PERM", "entry[0]", BODY + len(body), "Txy",
          "signature 5 'Txy': unknown code 'x'")
    body = u32(1) + u16(0) + u8(1) + b"T"
    check(failure(nac_bytes(("PERM", body))), "PERM", "entry[0]", BODY + len(body), "T",
          "signature 0 'T': id 0 means 'no signature'")
    body = u32(2) + u16(4) + u8(0) + u16(4) + u8(0)
    check(failure(nac_bytes(("PERM", body))), "PERM", "entry[1].id", BODY + 7, 4,
          "duplicate signature id 4")


def test_cnst_every_type_by_hand():
    body = (u32(8)
            + u16(1) + u8(0) + u16(0)                       # null
            + u16(2) + u8(1) + u16(1) + u8(1)               # bool true
            + u16(3) + u8(1) + u16(1) + u8(0)               # bool false
            + u16(4) + u8(2) + u16(8) + struct.pack("<q", -2)
            + u16(5) + u8(3) + u16(8) + struct.pack("<d", 1.5)
            + u16(6) + u8(4) + u16(3) + "hé".encode()
            + u16(7) + u8(5) + u16(2) + struct.pack("<2i", -1, 2)
            + u16(0xFFFF) + u8(6) + u16(1) + struct.pack("<f", 0.5))
    assert loads(nac_bytes(("CNST", body))).cnst == (
        (1, Constant(ConstType.NULL)), (2, Constant(ConstType.BOOL, True)),
        (3, Constant(ConstType.BOOL, False)), (4, Constant(ConstType.INT64, -2)),
        (5, Constant(ConstType.FLOAT64, 1.5)), (6, Constant(ConstType.STRING, "hé")),
        (7, Constant(ConstType.LIST_INT32, (-1, 2))),
        (0xFFFF, Constant(ConstType.LIST_FLOAT32, (0.5,))))
    # Two null constants are 5 bytes each: a count of 2 fits 10 bytes exactly.
    assert loads(nac_bytes(("CNST", u32(2) + u16(1) + u8(0) + u16(0)
                            + u16(2) + u8(0) + u16(0)))).cnst == (
        (1, Constant(ConstType.NULL)), (2, Constant(ConstType.NULL)))


CNST_AT = BODY + 4 + 2  # the type byte of constant 0


@pytest.mark.parametrize(("entry", "field", "offset", "value", "message"), [
    (u8(7) + u16(0), "constant[0].type", CNST_AT, 7, "unknown constant type 7"),
    (u8(0) + u16(1), "constant[0].length", CNST_AT + 3, 1, "null constant must have length 0"),
    (u8(1) + u16(2) + u8(1), "constant[0].length", CNST_AT + 3, 2,
     "bool constant must have length 1"),
    (u8(1) + u16(0) + u8(1), "constant[0].length", CNST_AT + 3, 0,
     "bool constant must have length 1"),
    (u8(1) + u16(1) + u8(2), "constant[0].value", CNST_AT + 4, 2, "bool value must be 0 or 1"),
    (u8(2) + u16(4) + bytes(8), "constant[0].length", CNST_AT + 3, 4,
     "int64 constant must have length 8"),
    (u8(3) + u16(9) + bytes(8), "constant[0].length", CNST_AT + 3, 9,
     "float64 constant must have length 8"),
    (u8(4) + u16(2) + b"\xc3", "constant[0].value", CNST_AT + 3, 2,
     "needs 2 bytes, 1 remain in the section"),
    (u8(4) + u16(1) + b"\xc3", "constant[0].value", CNST_AT + 3, b"\xc3",
     "not valid UTF-8 (unexpected end of data at byte 0)"),
    (u8(5) + u16(2) + bytes(7), "constant[0].value", CNST_AT + 3, 8,
     "needs 8 bytes, 7 remain in the section"),
    (u8(2) + u16(8) + bytes(7), "constant[0].value", CNST_AT + 3, 8,
     "needs 8 bytes, 7 remain in the section"),
    (u8(1) + u16(1), "constant[0].value", CNST_AT + 3, 1,
     "needs 1 bytes, 0 remain in the section"),
])
def test_cnst_rejections(entry, field, offset, value, message):
    body = u32(1) + u16(0) + entry
    check(failure(nac_bytes(("CNST", body))), "CNST", field, offset, value, message)


def test_cnst_type_length_truncated_and_duplicates():
    body = u32(2) + u16(3) + u8(4) + u16(3) + b"abc" + u16(4)  # the second has no type
    check(failure(nac_bytes(("CNST", body))), "CNST", "constant[1].type/length", BODY + 14, 3,
          "needs 3 bytes, 0 remain in the section")
    body = u32(2) + u16(3) + u8(0) + u16(0) + u16(3) + u8(0) + u16(0)
    check(failure(nac_bytes(("CNST", body))), "CNST", "constant[1].id", BODY + 9, 3,
          "duplicate constant id 3")
    body = u32(2) + u16(3) + u8(0) + u16(0) + u8(0)
    check(failure(nac_bytes(("CNST", body))), "CNST", "constant count", BODY, 2,
          "count 2 of records of at least 5 bytes does not fit in the 6 bytes that remain")
    body = u32(1) + u16(3) + u8(0) + u16(0) + b"\x01"
    check(failure(nac_bytes(("CNST", body))), "CNST", "end", BODY + 9, None,
          "1 trailing bytes after the section's content")


def test_proc():
    assert loads(nac_bytes(("PROC", u32(3) + b"xyz"))).proc == b"xyz"
    check(failure(nac_bytes(("PROC", u32(5) + b"xy"))), "PROC", "manifest", BODY + 4, 5,
          "needs 5 bytes, 2 remain in the section")
    check(failure(nac_bytes(("PROC", b"\0\0"))), "PROC", "manifest length", BODY, 4,
          "needs 4 bytes, 2 remain in the section")
    check(failure(nac_bytes(("PROC", u32(1) + b"xy"))), "PROC", "end", BODY + 5, None,
          "1 trailing bytes after the section's content")


def test_orch():
    # Bytecode of 2 bytes, then 2 null constants of 5 bytes: the count fits exactly.
    body = u32(2, 2) + b"\xaa\xbb" + u16(1) + u8(0) + u16(0) + u16(2) + u8(0) + u16(0)
    assert loads(nac_bytes(("ORCH", body))).orch == Orch(
        b"\xaa\xbb", ((1, Constant(ConstType.NULL)), (2, Constant(ConstType.NULL))))
    body = u32(2, 3) + b"\xaa\xbb" + u16(1) + u8(0) + u16(0) + u16(2) + u8(0) + u16(0)
    check(failure(nac_bytes(("ORCH", body))), "ORCH", "const count", BODY + 10, 3,
          "const count 3 does not fit")
    check(failure(nac_bytes(("ORCH", u32(3, 0) + b"ab"))), "ORCH", "bytecode", BODY + 8, 3,
          "needs 3 bytes, 2 remain in the section")
    check(failure(nac_bytes(("ORCH", u32(0)))), "ORCH", "bytecode length/const count", BODY, 8,
          "needs 8 bytes, 4 remain in the section")
    check(failure(nac_bytes(("ORCH", u32(0, 0) + b"z"))), "ORCH", "end", BODY + 8, None,
          "1 trailing bytes after the section's content")


def test_rsrc():
    # Two files with empty names and contents are 6 bytes each: the count fits exactly.
    raw = nac_bytes(("RSRC", u32(2) + u16(0) + u32(0) + u16(0) + u32(0)))
    assert loads(raw).rsrc == (("", b""), ("", b""))
    raw = nac_bytes(("RSRC", u32(1) + u16(3) + b"a.b" + u32(2) + b"\x01\x02"))
    assert loads(raw).rsrc == (("a.b", b"\x01\x02"),)
    body = u32(1) + u16(3) + b"a.b" + u32(3) + b"\x01\x02"
    check(failure(nac_bytes(("RSRC", body))), "RSRC", "file[0].data", BODY + 13, 3,
          "needs 3 bytes, 2 remain in the section")
    body = u32(1) + u16(7) + b"abcd"
    check(failure(nac_bytes(("RSRC", body))), "RSRC", "file[0].name", BODY + 6, 7,
          "needs 7 bytes, 4 remain in the section")
    body = u32(1) + u16(1) + b"a" + b"zzz"
    check(failure(nac_bytes(("RSRC", body))), "RSRC", "file[0].data_length", BODY + 7, 4,
          "needs 4 bytes, 3 remain in the section")
    body = u32(2) + bytes(11)
    check(failure(nac_bytes(("RSRC", body))), "RSRC", "file count", BODY, 2,
          "count 2 of records of at least 6 bytes does not fit in the 11 bytes that remain")


# -------------------------------------------------------------------------------- read_data


def names(entries):
    """A DATA name block: uint32 count, then per entry uint16 id, uint16 length, UTF-8."""
    return u32(len(entries)) + b"".join(u16(i, len(n.encode())) + n.encode() for i, n in entries)


def tensor(pid, meta, data, *, meta_len=None, data_len=None):
    """One DATA block-3 record: uint16 id, uint32 metadata length, uint64 data length."""
    return (u16(pid) + u32(len(meta) if meta_len is None else meta_len)
            + struct.pack("<Q", len(data) if data_len is None else data_len) + meta + data)


def data_file(params, tensors, qbyte=0x80):
    body = names(params) + names(()) + u32(len(tensors)) + b"".join(tensors)
    return nac_bytes(("DATA", body), qbyte=qbyte)


# Where tensor 0 starts when block 1 holds the one name "w": count 4 + entry 5, block 2
# count 4, block 3 count 4.
T0 = BODY + 17


def test_data_names_without_block_3():
    body = u32(2) + u16(1, 0) + u16(2, 0) + names(((0, "x"),))  # 4-byte entries fit exactly
    nac = loads(nac_bytes(("DATA", body), qbyte=0))
    assert nac.data == DataSection(((1, ""), (2, "")), ((0, "x"),), None)
    assert nac.data.tensors is None and not nac.internal_weights
    # With internal weights the same bytes lack block 3.
    check(failure(nac_bytes(("DATA", body))), "DATA", "tensor count", BODY + len(body), 4,
          "needs 4 bytes, 0 remain in the section")
    body = u32(2) + u16(1, 0) + u16(1, 0)
    check(failure(nac_bytes(("DATA", body + u32(0)), qbyte=0)), "DATA", "params[1].id",
          BODY + 8, 1, "duplicate parameter id 1")
    body = u32(0) + u32(2) + u16(1, 0) + u16(1, 0)
    check(failure(nac_bytes(("DATA", body), qbyte=0)), "DATA", "inputs[1].id", BODY + 12, 1,
          "duplicate input index 1")


def test_data_tensors_of_every_quantisation_by_hand():
    f32 = struct.Struct("<f")
    records = [
        # int8 [4], INT8_TENSOR: scale 0.25.
        tensor(1, u8(7, 1) + u32(4) + u8(2) + f32.pack(0.25), b"\x01\x02\x03\x04"),
        # int8 [2, 1], INT8_CHANNEL: axis 1, 2 scales.
        tensor(2, u8(7, 2) + u32(2, 1) + u8(3) + u8(1) + u32(2) + struct.pack("<2f", 1, 2),
               b"\x05\x06"),
        # uint8 [3], BLOCK_FP8: block 32, original shape [2, 3], one scale.
        tensor(3, u8(8, 1) + u32(3) + u8(4) + u16(32) + u8(2) + u32(2, 3) + u32(1)
               + f32.pack(0.5), b"\x07\x08\x09"),
        # float16 scalar (rank 0: one element), FP16: no parameters.
        tensor(4, u8(2, 0) + u8(1), b"\x00\x3c"),
        # float32 [0], no quantisation, no data: ends exactly at the end of the section.
        tensor(5, u8(0, 1) + u32(0) + u8(0), b""),
    ]
    params = tuple((i, f"p{i}") for i in range(1, 6))
    nac = loads(data_file(params, records))
    assert nac.data.tensors == (
        (1, Tensor(DType.INT8, (4,), QuantMethod.INT8_TENSOR, QuantParams(scales=(0.25,)),
                   b"\x01\x02\x03\x04")),
        (2, Tensor(DType.INT8, (2, 1), QuantMethod.INT8_CHANNEL,
                   QuantParams(scales=(1.0, 2.0), axis=1), b"\x05\x06")),
        (3, Tensor(DType.UINT8, (3,), QuantMethod.BLOCK_FP8,
                   QuantParams(scales=(0.5,), block_size=32, orig_shape=(2, 3)), b"\x07\x08\x09")),
        (4, Tensor(DType.FLOAT16, (), QuantMethod.FP16, None, b"\x00\x3c")),
        (5, Tensor(DType.FLOAT32, (0,), QuantMethod.NONE, None, b"")),
    )
    # The writer gives back the same bytes (canonical layout).
    assert dumps(nac) == data_file(params, records)


def test_tensor_count_of_14_byte_records():
    # Two tensors need at least 2 * 14 bytes: 28 remain, so the count passes and the
    # second tensor's 14-byte header is what does not fit (21 + 7 bytes).
    body = names(((0, "w"),)) + names(()) + u32(2) + tensor(0, u8(0, 1) + u32(0) + u8(0),
                                                              b"") + bytes(7)
    check(failure(nac_bytes(("DATA", body))), "DATA", "tensor[1] header", T0 + 21, 14,
          "needs 14 bytes, 7 remain in the section")
    body = names(((0, "w"),)) + names(()) + u32(2) + bytes(27)
    check(failure(nac_bytes(("DATA", body))), "DATA", "tensor count", T0 - 4, 2,
          "count 2 of records of at least 14 bytes does not fit in the 27 bytes that remain")


@pytest.mark.parametrize(("record", "field", "offset", "value", "message"), [
    (tensor(0, u8(0, 0, 0), b"\0" * 4, meta_len=100), "tensor[0].metadata_length", T0 + 2, 100,
     "metadata length exceeds the section"),
    (tensor(0, u8(0, 0, 0), b"\0" * 4, meta_len=8), "tensor[0].metadata_length", T0 + 2, 8,
     "metadata length exceeds the section"),
    (tensor(0, u8(10, 0, 0), b"\0" * 4), "tensor[0].dtype", T0 + 14, 10, "unknown dtype code 10"),
    (tensor(0, u8(0, 0, 5), b"\0" * 4), "tensor[0].quant", T0 + 16, 5,
     "unknown quantisation code 5"),
    (tensor(0, u8(0, 0, 0, 9), b"\0" * 4), "end", T0 + 17, None,
     "1 trailing bytes after the section's content"),
    (tensor(0, u8(6, 2) + u32(2, 3) + u8(0), b"\0" * 5), "tensor[0].data_length", T0 + 6, 5,
     "data length 5 does not match dtype int16 and shape [2, 3] (12 bytes)"),
    (tensor(0, u8(0, 1) + u32(2) + u8(0), b"\0" * 4, data_len=8), "tensor[0].data", T0 + 21, 8,
     "needs 8 bytes, 4 remain in the section"),
    (tensor(0, b"", b"\0" * 4), "tensor[0].dtype", T0 + 14, 1,
     "needs 1 bytes, 0 remain in the section"),
    (tensor(0, u8(0), b"\0" * 4), "tensor[0].rank", T0 + 15, 1,
     "needs 1 bytes, 0 remain in the section"),
    (tensor(0, u8(0, 2) + u32(1), b"\0" * 4), "tensor[0].shape", T0 + 16, 8,
     "needs 8 bytes, 4 remain in the section"),
    (tensor(0, u8(0, 0), b"\0" * 4), "tensor[0].quant", T0 + 16, 1,
     "needs 1 bytes, 0 remain in the section"),
    (tensor(0, u8(7, 0, 2) + b"\0\0", b"\0"), "tensor[0].quant.scale", T0 + 17, 4,
     "needs 4 bytes, 2 remain in the section"),
    (tensor(0, u8(7, 0, 3), b"\0"), "tensor[0].quant.axis", T0 + 17, 1,
     "needs 1 bytes, 0 remain in the section"),
    (tensor(0, u8(7, 0, 3, 1) + b"\0\0", b"\0"), "tensor[0].quant.count", T0 + 18, 4,
     "needs 4 bytes, 2 remain in the section"),
    (tensor(0, u8(7, 0, 3, 1) + u32(2) + bytes(4), b"\0"), "tensor[0].quant.scales", T0 + 22, 8,
     "needs 8 bytes, 4 remain in the section"),
    (tensor(0, u8(7, 0, 4, 1), b"\0"), "tensor[0].quant.block_size", T0 + 17, 2,
     "needs 2 bytes, 1 remain in the section"),
    (tensor(0, u8(7, 0, 4) + u16(32), b"\0"), "tensor[0].quant.orig_rank", T0 + 19, 1,
     "needs 1 bytes, 0 remain in the section"),
    (tensor(0, u8(7, 0, 4) + u16(32) + u8(2) + u32(2), b"\0"), "tensor[0].quant.orig_shape",
     T0 + 20, 8, "needs 8 bytes, 4 remain in the section"),
    (tensor(0, u8(7, 0, 4) + u16(32) + u8(1) + u32(2), b"\0"), "tensor[0].quant.count",
     T0 + 24, 4, "needs 4 bytes, 0 remain in the section"),
    (tensor(0, u8(7, 0, 4) + u16(32) + u8(1) + u32(2) + u32(1), b"\0"),
     "tensor[0].quant.scales", T0 + 28, 4, "needs 4 bytes, 0 remain in the section"),
])
def test_tensor_rejections(record, field, offset, value, message):
    check(failure(data_file(((0, "w"),), [record])), "DATA", field, offset, value, message)


def test_tensor_without_a_parameter_name():
    records = [tensor(0, u8(7, 0, 0), b"\0"), tensor(7, u8(7, 0, 0), b"\0")]
    raw = data_file(((0, "w"),), records)
    check(failure(raw), "DATA", "tensor[1].param_id", len(raw), 7,
          "tensor 1: parameter id 7 has no name in block 1")


# --------------------------------------------------------------------------------- read_ops


def ops_file(*instructions, perm=(), cnst=None, mmap=None, **fields):
    """OPS (and PERM, CNST, MMAP bodies when given) built by hand; OPS body at BODY."""
    sections = [("OPS ", u32(len(instructions)) + b"".join(instructions))]
    if mmap is not None:
        sections.insert(0, ("MMAP", mmap))
    if cnst is not None:
        sections.append(("CNST", cnst))
    if perm:
        sections.append(("PERM", u32(len(perm)) + b"".join(
            u16(i) + u8(len(s)) + s.encode() for i, s in perm)))
    return nac_bytes(*sections, **fields)


INPUT = u8(2, 0)
I1 = BODY + 4 + 2  # instruction 1 after a 2-byte <INPUT B=0>
CNST5 = u32(1) + u16(5) + u8(2) + u16(8) + struct.pack("<q", 3)


def test_ops_by_hand():
    nac = loads(ops_file(INPUT, u8(10, 0), u8(11, 1) + i16(1, 5) + i16(-1, 0),
                         u8(12, 2) + i16(-1, -2), u8(13, 3) + i16(0) + i16(-3, -1),
                         u8(6, 4) + i16(1, 2, 3) + i16(-1), u8(2, 3) + i16(1, 5),
                         u8(2, 2) + i16(2, 0), u8(2, 2) + i16(1, 9),
                         perm=((1, "Ti"), (2, "TT"), (3, "AT")), cnst=CNST5,
                         **{"qbyte": 0x80}))
    assert nac.ops[1:] == (
        Instruction(10, 0), Instruction(11, 1, (1, 5), (-1, 0)),
        Instruction(12, 2, None, (-1, -2)), Instruction(13, 3, (0,), (-3, -1)),
        Instruction(6, 4, (1, 2, 3), (-1,)), Instruction(2, 3, (1, 5)),
        Instruction(2, 2, (2, 0)), Instruction(2, 2, (1, 9)))
    assert nac.ops[0] == Instruction(2, 0) and len(nac.ops) == 9


def test_ops_count_of_2_byte_records():
    assert loads(ops_file(INPUT, INPUT)).ops == (Instruction(2, 0), Instruction(2, 0))
    raw = nac_bytes(("OPS ", u32(3) + INPUT * 2 + b"\0"))
    check(failure(raw), "OPS ", "instruction count", BODY, 3,
          "count 3 of records of at least 2 bytes does not fit in the 5 bytes that remain")
    raw = ops_file(u8(11, 1) + i16(-1), b"\x02", perm=((1, "T"),))
    check(failure(raw), "OPS ", "instruction[1].A/B", BODY + 8, 2,
          "needs 2 bytes, 1 remain in the section")


@pytest.mark.parametrize("n", [63, 64, 65])
def test_output_with_many_entries(n):
    # <OUTPUT B=1> with n entries: C = [n, 0, 1, ...], D = [-1] * n (int16 runs of 63 to 65).
    raw = ops_file(INPUT, u8(3, 1) + i16(n, *range(n)) + i16(*[-1] * n))
    assert loads(raw).ops[1] == Instruction(3, 1, (n, *range(n)), (-1,) * n)


@pytest.mark.parametrize(("ins", "field", "offset", "value", "message"), [
    (u8(11, 5), "instruction[1].B", I1 + 1, 5, "instruction 1: signature id 5 is not in PERM"),
    (u8(11, 1) + i16(-1, 0), "instruction[1].C", I1 + 2, -1, "instruction 1: negative C count"),
    (u8(11, 1) + i16(3) + b"\0\0\0", "instruction[1].C", I1 + 4, 3,
     "instruction 1: C needs 3 int16, 1 remain"),
    (u8(11, 1) + i16(1, 5) + b"\0", "instruction[1].D", I1 + 6, 2,
     "instruction 1: D needs 2 int16, 0 remain"),
    (u8(2, 4) + i16(1, 0), "instruction[1].B", I1 + 1, 4,
     "instruction 1: <INPUT> variant B=4 does not exist"),
    (u8(2, 1) + i16(3, 0), "instruction[1].C", I1 + 2, 3,
     "instruction 1: <INPUT> C prefix must be 1 or 2"),
    (u8(2, 1) + i16(0, 0), "instruction[1].C", I1 + 2, 0,
     "instruction 1: <INPUT> C prefix must be 1 or 2"),
    (u8(3, 2) + i16(0), "instruction[1].B", I1 + 1, 2,
     "instruction 1: <OUTPUT> variant B=2 does not exist"),
    (u8(3, 1) + i16(-1), "instruction[1].C", I1 + 2, -1, "instruction 1: <OUTPUT B=1> count -1"),
    (u8(3, 0) + i16(2, 0, 0, -1, -1), "instruction[1].C", I1 + 2, 2,
     "instruction 1: <OUTPUT B=0> count 2 differs from the header's 1 outputs"),
    (u8(7, 0), "instruction[1].A", I1, 7,
     "instruction 1: <CONVERGENCE> (A=7) is experimental in the spec and not supported"),
    (u8(9, 0), "instruction[1].A", I1, 9,
     "instruction 1: A=9 is neither a system op nor >= 10"),
    (u8(0, 0), "instruction[1].A", I1, 0,
     "instruction 1: A=0 is neither a system op nor >= 10"),
])
def test_ops_rejections(ins, field, offset, value, message):
    raw = ops_file(INPUT, ins, perm=((1, "Ti"),), num_outputs=1)
    check(failure(raw), "OPS ", field, offset, value, message)


def test_ops_trailing_bytes():
    check(failure(nac_bytes(("OPS ", u32(1) + INPUT + b"\0"))), "OPS ", "end", BODY + 6, None,
          "1 trailing bytes after the section's content")


def test_mmap_parse_errors():
    ops = u32(1) + INPUT
    cmd = u8(10) + u16(0)
    raw = nac_bytes(("MMAP", u32(1) + u16(0) + u8(1) + u8(11) + u16(0)), ("OPS ", ops))
    check(failure(raw), "MMAP", "record[0].command[0].action", BODY + 7, 11,
          "unknown action code 11")
    raw = nac_bytes(("MMAP", u32(1) + u16(0) + u8(2) + cmd), ("OPS ", ops))
    check(failure(raw), "MMAP", "record[0].command[1]", BODY + 10, 3,
          "needs 3 bytes, 0 remain in the section")
    raw = nac_bytes(("MMAP", u32(2) + u16(0) + u8(1) + cmd), ("OPS ", ops))
    check(failure(raw), "MMAP", "record[1]", BODY + 10, 3,
          "needs 3 bytes, 0 remain in the section")
    # Two 3-byte records fit the count (6 bytes); the checks against OPS come after.
    raw = nac_bytes(("MMAP", u32(2) + u16(0) + u8(0) + u16(1) + u8(0)), ("OPS ", ops))
    check(failure(raw), "MMAP", "record[0].count", BODY + 4, 0,
          "record 0: a record without commands")
    raw = nac_bytes(("MMAP", u32(1) + u16(0) + u8(1) + cmd + b"\0"), ("OPS ", ops))
    check(failure(raw), "MMAP", "end", BODY + 10, None,
          "1 trailing bytes after the section's content")


# --------------------------------------------------------------------------------- validate

# In dumps' canonical layout without MMAP, OPS is the first section: instruction 0 starts
# after its count at BODY + 4 and each <INPUT B=0> is 2 bytes.
OPS0 = BODY + 4


def located(nac):
    return failure(dumps(nac))


def test_regular_operation_ids():
    ops = (Instruction(2, 0), Instruction(25, 0))
    check(located(NacFile(ops=ops)), "OPS ", "instruction[1].A", OPS0 + 2, 25,
          "instruction 1: operation id 25 is neither standard nor in CMAP")
    assert loads(dumps(NacFile(ops=ops, cmap=((25, "x"),)))).ops == ops
    # A = 10 (nac.pass, the lowest regular id) is checked like every regular op.
    nac = NacFile(perm=((1, "T"),), ops=(Instruction(2, 0), Instruction(10, 1, None, (1,))))
    check(located(nac), "OPS ", "instruction[1].D", OPS0 + 2, 1,
          "instruction 1: D offset 1 names instruction 2, not an earlier one")
    nac = NacFile(perm=((1, "Ti"),), cnst=((5, Constant(ConstType.NULL)),),
                  ops=(Instruction(2, 0), Instruction(11, 1, (1, 5), (-1, -1))))
    check(located(nac), "OPS ", "instruction[1].C", OPS0 + 2, None,
          "instruction 1: C has 1 constant ids, D has 0 zeros")


def test_constant_ids_in_cnst():
    perm = ((1, "Ti"),)
    ops = (Instruction(2, 0), Instruction(11, 1, (1, 6), (-1, 0)))
    check(located(NacFile(perm=perm, cnst=((5, Constant(ConstType.NULL)),), ops=ops)), "OPS ",
          "instruction[1].C", OPS0 + 2, 6, "instruction 1: constant id 6 is not in CNST")
    check(located(NacFile(perm=perm, ops=ops)), "OPS ", "instruction[1].C", OPS0 + 2, 6,
          "instruction 1: constant id 6 is not in CNST")
    # C is int16: id 32768 is stored as -32768 and found in CNST as 32768.
    ops = (Instruction(2, 0), Instruction(11, 1, (1, -32768), (-1, 0)))
    nac = NacFile(perm=perm, cnst=((32768, Constant(ConstType.NULL)),), ops=ops)
    assert loads(dumps(nac)) == nac
    check(located(NacFile(perm=perm, cnst=((5, Constant(ConstType.NULL)),), ops=ops)), "OPS ",
          "instruction[1].C", OPS0 + 2, 32768, "instruction 1: constant id 32768 is not in CNST")


def test_input_references():
    data = DataSection(params=((40000, "w"),), tensors=())
    nac = NacFile(ops=(Instruction(2, 1, (2, 40000 - 65536)),), data=data)
    assert loads(dumps(nac)) == nac
    check(located(NacFile(ops=(Instruction(2, 0), Instruction(2, 1, (2, 9))))), "OPS ",
          "instruction[1].C", OPS0 + 2, 9, "instruction 1: parameter id 9 is not in DATA")
    check(located(NacFile(ops=(Instruction(2, 1, (2, 9)),), data=data)), "OPS ",
          "instruction[0].C", OPS0, 9, "instruction 0: parameter id 9 is not in DATA")
    cnst = ((4, Constant(ConstType.NULL)),)
    nac = NacFile(ops=(Instruction(2, 3, (1, 4)),), cnst=cnst)
    assert loads(dumps(nac)) == nac
    check(located(NacFile(ops=(Instruction(2, 0), Instruction(2, 3, (1, 5))), cnst=cnst)),
          "OPS ", "instruction[1].C", OPS0 + 2, 5,
          "instruction 1: lifted constant id 5 is not in CNST")
    # <INPUT B=2> names a graph input by index: nothing to look up.
    nac = NacFile(ops=(Instruction(2, 2, (1, 123)),))
    assert loads(dumps(nac)) == nac


@pytest.mark.parametrize("a", [3, 6])
def test_output_and_control_flow_offsets(a):
    def ins(d):
        return Instruction(3, 1, (1, 0), (d,)) if a == 3 else Instruction(6, 0, (0, 0, 0), (d,))
    nac = NacFile(ops=(Instruction(2, 0), Instruction(2, 0), ins(-2)))
    assert loads(dumps(nac)) == nac
    for d in (0, 1, -3):
        check(located(NacFile(ops=(Instruction(2, 0), Instruction(2, 0), ins(d)))), "OPS ",
              "instruction[2].D", OPS0 + 4, d,
              f"instruction 2: D offset {d} does not name an earlier instruction")


def test_one_output_b0_at_most():
    out0 = Instruction(3, 0, (0,), ())
    nac = NacFile(ops=(Instruction(2, 0), out0, Instruction(3, 1, (0,), ())))
    assert loads(dumps(nac)) == nac
    err = located(NacFile(ops=(Instruction(2, 0), out0, out0)))
    assert (err.section, err.field, err.offset, err.value) == ("OPS ", "A", None, None)
    assert str(err) == "section OPS, field A: more than one <OUTPUT B=0>"


# Three instructions; index 1 loads parameter 7 (the one PRELOAD target).
MMAP_OPS = (Instruction(2, 0), Instruction(2, 1, (2, 7)), Instruction(2, 0))
MMAP_DATA = DataSection(params=((7, "w"),), tensors=())
REC0 = BODY + 4  # MMAP is the first section; record 0 follows its count
S, FR, FW, P = MmapAction.SAVE_RESULT, MmapAction.FREE, MmapAction.FORWARD, MmapAction.PRELOAD


def mmap_file(*records, ops=MMAP_OPS):
    return NacFile(ops=ops, data=MMAP_DATA, mmap=records)


def test_mmap_valid_bounds():
    nac = mmap_file(MmapRecord(0, ((S, 0), (FW, 2))),
                    MmapRecord(1, ((S, 1), (FR, 0), (FW, 2), (P, 1))),
                    MmapRecord(2, ((FR, 1),)))
    assert loads(dumps(nac)) == nac


@pytest.mark.parametrize(("records", "offset", "field", "value", "message"), [
    ((MmapRecord(3, ((S, 3),)),), REC0, "record[0].tick", 3,
     "record 0: tick 3 is outside OPS (3 instructions)"),
    ((MmapRecord(0, ((S, 0),)), MmapRecord(0, ((S, 0),))), REC0 + 6, "record[1].tick", 0,
     "record 1: tick 0 does not follow tick 0"),
    ((MmapRecord(2, ((S, 2),)), MmapRecord(1, ((S, 1),))), REC0 + 6, "record[1].tick", 1,
     "record 1: tick 1 does not follow tick 2"),
    ((MmapRecord(1, ()),), REC0, "record[0].count", 0, "record 0: a record without commands"),
    ((MmapRecord(1, ((S, 1), (S, 2))),), REC0, "record[0].command[1].target", 2,
     "record 0 (tick 1): SAVE_RESULT target 2 is not valid for this action"),
    ((MmapRecord(1, ((FR, 1),)),), REC0, "record[0].command[0].target", 1,
     "record 0 (tick 1): FREE target 1 is not valid for this action"),
    ((MmapRecord(1, ((FW, 1),)),), REC0, "record[0].command[0].target", 1,
     "record 0 (tick 1): FORWARD target 1 is not valid for this action"),
    ((MmapRecord(1, ((FW, 3),)),), REC0, "record[0].command[0].target", 3,
     "record 0 (tick 1): FORWARD target 3 is not valid for this action"),
    ((MmapRecord(0, ((P, 2),)),), REC0, "record[0].command[0].target", 2,
     "record 0 (tick 0): PRELOAD target 2 is not valid for this action"),
    ((MmapRecord(2, ((P, 1),)),), REC0, "record[0].command[0].target", 1,
     "record 0 (tick 2): PRELOAD target 1 is not valid for this action"),
])
def test_mmap_rejections(records, offset, field, value, message):
    check(located(mmap_file(*records)), "MMAP", field, offset, value, message)


def test_mmap_without_ops():
    check(located(NacFile(mmap=(MmapRecord(0, ((S, 0),)),))), "MMAP", "record[0].tick", REC0,
          0, "record 0: tick 0 is outside OPS (0 instructions)")


# ----------------------------------------------------------------------------------- reader


def test_header_fields():
    raw = header([0] * 9, qbyte=0x83, num_inputs=0x0102, num_outputs=0x0304, d_model=0x0506)
    assert loads(raw) == NacFile(quant_method=QuantMethod.INT8_CHANNEL, internal_weights=True,
                                 num_inputs=0x0102, num_outputs=0x0304, d_model=0x0506)
    nac = loads(header([0] * 9, qbyte=0x04))
    assert (nac.quant_method, nac.internal_weights) == (QuantMethod.BLOCK_FP8, False)
    assert loads(bytearray(raw)) == loads(memoryview(raw)) == loads(raw)


@pytest.mark.parametrize(("raw", "field", "offset", "value", "message"), [
    (header([0] * 9)[:87], "length", 0, 87, "file is 87 bytes, shorter than the 88-byte header"),
    (b"NAX" + header([0] * 9)[3:], "magic", 0, b"NAX", "not a NAC file (magic is not b'NAC')"),
    (header([0] * 9, version=2), "version", 3, 2,
     "unsupported version (this reader reads version 1)"),
    (header([0] * 9, version=0), "version", 3, 0,
     "unsupported version (this reader reads version 1)"),
    (header([0] * 9, qbyte=0x85), "quantization", 4, 5, "unknown quantisation method"),
    (header([0] * 9, reserved=1), "reserved", 9, 1, "reserved byte must be 0"),
    (header([0] * 9, padding=b"\0\0\0\1"), "padding", 84, b"\0\0\0\1", "padding must be zero"),
    (header([0] * 9) + b"\0", "layout", 88, None, "trailing bytes after a header with no sections"),
])
def test_header_rejections(raw, field, offset, value, message):
    check(failure(raw), "header", field, offset, value, message)


def with_offset(raw, k, offset):
    out = bytearray(raw)
    struct.pack_into("<Q", out, 12 + 8 * k, offset)
    return bytes(out)


def test_section_extents():
    raw = nac_bytes(("PROC", u32(0)))  # 96 bytes, PROC is entry 6 of the table (byte 60)
    for bad in (87, 93, 10**6):
        check(failure(with_offset(raw, 6, bad)), "header", "proc_offset", 60, bad,
              f"section offset {bad} is outside the file (96 bytes) or inside the header")
    # At 92 (the last 4 bytes) the offset is inside the file, but no PROC tag is there.
    check(failure(with_offset(raw, 6, 92)), "PROC", "tag", 92, b"\0\0\0\0",
          "expected tag 'PROC'")
    raw = nac_bytes(("PROC", u32(0)), ("RSRC", u32(0)))  # RSRC: entry 8 (byte 76) at 96
    check(failure(with_offset(raw, 8, 91)), "header", "rsrc_offset", 76, 91,
          "section RSRC overlaps section PROC")
    check(failure(with_offset(raw, 8, 92)), "RSRC", "tag", 92, b"\0\0\0\0", "expected tag 'RSRC'")
    raw = header([0, 0, 0, 0, 0, 0, 90, 0, 0]) + b"\0\0PROC" + u32(0)
    check(failure(raw), "header", "layout", 88, 90,
          "2 unexplained bytes between the header and the first section")


def test_sections_in_any_order():
    # RSRC first in the file, then PROC: each extent ends where the next section starts.
    raw = header([0, 0, 0, 0, 0, 0, 96, 0, 88]) + b"RSRC" + u32(0) + b"PROC" + u32(1) + b"z"
    nac = loads(raw)
    assert (nac.rsrc, nac.proc) == ((), b"z")
    assert section_body(raw, "RSRC") == u32(0)
    assert section_body(raw, "PROC") == u32(1) + b"z"
    raw = nac_bytes(("OPS ", u32(1) + INPUT), ("CMAP", u32(0)), ("PROC", u32(0)))
    assert section_body(raw, "CMAP") == u32(0)
    assert section_body(raw, "OPS ") == u32(1) + INPUT


def test_ops_without_perm():
    raw = ops_file(INPUT, u8(11, 1) + i16(-1))
    check(failure(raw), "OPS ", "instruction[1].B", I1 + 1, 1,
          "instruction 1: signature id 1 is not in PERM")


# ----------------------------------------------------------------------------------- writer


def test_dumps_header_and_sections_by_hand():
    nac = NacFile(quant_method=QuantMethod.INT8_CHANNEL, internal_weights=False, num_inputs=2,
                  num_outputs=0, d_model=0x1234, cmap=((20, "x"),), proc=b"xyz",
                  orch=Orch(b"\xaa", ((1, Constant(ConstType.NULL)),)),
                  rsrc=(("a.bin", b"\x01\x02"),))
    assert dumps(nac) == nac_bytes(
        ("CMAP", u32(1) + u16(20) + u8(1) + b"x"), ("PROC", u32(3) + b"xyz"),
        ("ORCH", u32(1, 1) + b"\xaa" + u16(1) + u8(0) + u16(0)),
        ("RSRC", u32(1) + u16(5) + b"a.bin" + u32(2) + b"\x01\x02"),
        qbyte=0x03, num_inputs=2, d_model=0x1234)
    assert dumps(NacFile()) == header([0] * 9)
    assert dumps(NacFile(version=3, num_outputs=7)) == header([0] * 9, version=3, num_outputs=7)


def test_dumps_constants_by_hand():
    cnst = ((1, Constant(ConstType.NULL)), (2, Constant(ConstType.BOOL, 5)),
            (3, Constant(ConstType.BOOL, 0)), (4, Constant(ConstType.INT64, -2)),
            (5, Constant(ConstType.FLOAT64, 1.5)), (6, Constant(ConstType.STRING, "hé")),
            (7, Constant(ConstType.LIST_INT32, (-1, 2))),
            (8, Constant(ConstType.LIST_FLOAT32, (0.5,))))
    body = (u32(8) + u16(1) + u8(0) + u16(0)
            + u16(2) + u8(1) + u16(1) + u8(1)       # any true value is stored as 1
            + u16(3) + u8(1) + u16(1) + u8(0)
            + u16(4) + u8(2) + u16(8) + bytes([0xFE] + [0xFF] * 7)
            + u16(5) + u8(3) + u16(8) + bytes([0, 0, 0, 0, 0, 0, 0xF8, 0x3F])
            + u16(6) + u8(4) + u16(3) + b"h\xc3\xa9"
            + u16(7) + u8(5) + u16(2) + bytes([0xFF] * 4 + [2, 0, 0, 0])
            + u16(8) + u8(6) + u16(1) + bytes([0, 0, 0, 0x3F]))
    assert dumps(NacFile(cnst=cnst)) == nac_bytes(("CNST", body))


def test_dumps_ops_and_data_by_hand():
    nac = NacFile(num_outputs=1, perm=((1, "Ti"),), cnst=((5, Constant(ConstType.NULL)),),
                  ops=(Instruction(2, 0), Instruction(11, 1, (1, 5), (-1, 0)),
                       Instruction(3, 0, (1, 0), (-1,))))
    assert section_body(dumps(nac), "OPS ") == (u32(3) + u8(2, 0) + u8(11, 1) + i16(1, 5, -1, 0)
                                                + u8(3, 0) + i16(1, 0, -1))
    t = Tensor(DType.INT8, (2,), data=b"\x01\xff")
    data = DataSection(params=((7, "w"),), inputs=((0, "x"),), tensors=((7, t),))
    block12 = u32(1) + u16(7, 1) + b"w" + u32(1) + u16(0, 1) + b"x"
    meta = u8(7, 1) + u32(2) + u8(0)
    assert section_body(dumps(NacFile(data=data)), "DATA") == (
        block12 + u32(1) + u16(7) + u32(7) + struct.pack("<Q", 2) + meta + b"\x01\xff")
    # External weights: no block 3, whatever the object holds.
    assert section_body(dumps(NacFile(internal_weights=False, data=data)), "DATA") == block12
    assert section_body(dumps(NacFile(data=DataSection())), "DATA") == u32(0, 0, 0)


def test_tensor_metadata_by_hand():
    assert tensor_metadata(Tensor(DType.INT8, (4,), QuantMethod.INT8_TENSOR,
                                  QuantParams(scales=(0.25,)))) == (
        u8(7, 1) + u32(4) + u8(2) + bytes([0, 0, 0x80, 0x3E]))
    assert tensor_metadata(Tensor(DType.INT8, (2, 1), QuantMethod.INT8_CHANNEL,
                                  QuantParams(scales=(1.0, 2.0), axis=1))) == (
        u8(7, 2) + u32(2, 1) + u8(3) + u8(1) + u32(2) + bytes([0, 0, 0x80, 0x3F, 0, 0, 0, 0x40]))
    assert tensor_metadata(Tensor(DType.UINT8, (3,), QuantMethod.BLOCK_FP8,
                                  QuantParams(scales=(0.5,), block_size=32,
                                              orig_shape=(2, 3)))) == (
        u8(8, 1) + u32(3) + u8(4) + u16(32) + u8(2) + u32(2, 3) + u32(1) + bytes([0, 0, 0, 0x3F]))
    assert tensor_metadata(Tensor(DType.FLOAT16, (), QuantMethod.FP16)) == u8(2, 0, 1)


@pytest.mark.parametrize(("make", "what", "limit"), [
    (lambda s: NacFile(cmap=((20, s),)), "operation name", 255),
    (lambda s: NacFile(perm=((1, s),)), "signature", 255),
    (lambda s: NacFile(data=DataSection(params=((1, s),))), "parameter name", 65535),
    (lambda s: NacFile(data=DataSection(inputs=((1, s),))), "input name", 65535),
    (lambda s: NacFile(rsrc=((s, b""),)), "resource name", 65535),
])
def test_names_up_to_the_length_limit(make, what, limit):
    ok = "T" * limit
    assert len(dumps(make(ok))) > limit
    too_long = "é" * ((limit + 1) // 2) + "T" * ((limit + 1) % 2)  # limit + 1 UTF-8 bytes
    with pytest.raises(NacFormatError) as info:
        dumps(make(too_long))
    assert str(info.value) == (f"{what} {'é' * 40!r}... is {limit + 1} bytes, "
                               f"more than {limit}")


def test_values_that_do_not_fit():
    with pytest.raises(struct.error) as expected:
        struct.pack("<H", 70000)
    with pytest.raises(NacFormatError) as info:
        dumps(NacFile(cmap=((70000, "x"),)))
    assert str(info.value) == f"cannot encode (70000,) as 'H': {expected.value}"
    with pytest.raises(RecordError) as expected:
        MMAP_RECORD.pack({"tick": 70000, "commands": 1})
    with pytest.raises(NacFormatError) as info:
        dumps(NacFile(ops=(Instruction(2, 0),), mmap=(MmapRecord(70000, ((S, 0),)),)))
    assert str(info.value) == f"cannot encode {expected.value}"


# ------------------------------------------------------------------------------------ model


def test_model_defaults():
    assert NacFile() == NacFile(QuantMethod.NONE, True, 0, 0, 0, 1, None, None, None, None,
                                None, None, None, None, None)
    assert Instruction(11, 0) == Instruction(11, 0, None, ())
    assert Constant(ConstType.NULL) == Constant(ConstType.NULL, None)
    assert QuantParams() == QuantParams((), 0, 0, ())
    assert Tensor(DType.INT8, ()) == Tensor(DType.INT8, (), QuantMethod.NONE, None, b"")
    assert DataSection() == DataSection((), (), None)
    assert Orch() == Orch(b"", ())
    # Attached weights are neither compared nor shown.
    assert NacFile(weights={"w": 1}) == NacFile()
    assert repr(NacFile(weights={"w": 1})) == repr(NacFile())


def test_const_ids():
    assert Instruction(11, 1, (2, -1, 5), (0, 0)).const_ids == (65535, 5)
    assert Instruction(11, 1, (1, -32768), (0,)).const_ids == (32768,)
    assert Instruction(11, 1, (0,), (-1,)).const_ids == ()
    assert Instruction(11, 1, None, (-1,)).const_ids == ()
    assert Instruction(11, 1, (), (-1,)).const_ids == ()


def test_op_name():
    nac = NacFile(cmap=((20, "my.op"), (21, "other")))
    assert [nac.op_name(a) for a in (10, 19, 20, 21, 22)] == [
        "nac.pass", "nac.arange", "my.op", "other", None]
    assert NacFile(cmap=((11, "shadow"),)).op_name(11) == "nac.add"


# ------------------------------------------------------------------ unsigned fields (§6.1)


def test_data_fields_are_unsigned():
    long = "n" * 40000  # a name length above 32767
    body = names(((1, long),)) + names(((2, long),))
    assert loads(nac_bytes(("DATA", body), qbyte=0)).data == DataSection(((1, long),),
                                                                           ((2, long),))
    # INT8_CHANNEL axis 200; BLOCK_FP8 block size 40000.
    records = [tensor(0, u8(7, 0, 3, 200) + u32(1) + struct.pack("<f", 2.0), b"\0"),
               tensor(1, u8(7, 0, 4) + u16(40000) + u8(0) + u32(0), b"\0")]
    tensors = loads(data_file(((0, "a"), (1, "b")), records)).data.tensors
    assert tensors[0][1].quant_params == QuantParams(scales=(2.0,), axis=200)
    assert tensors[1][1].quant_params == QuantParams(block_size=40000)


@pytest.mark.parametrize(("meta", "field", "offset", "value", "message"), [
    (u8(200, 0, 0), "tensor[0].dtype", T0 + 14, 200, "unknown dtype code 200"),
    (u8(0, 0, 200), "tensor[0].quant", T0 + 16, 200, "unknown quantisation code 200"),
    (u8(0, 200), "tensor[0].shape", T0 + 16, 800, "needs 800 bytes, 0 remain in the section"),
    (u8(7, 0, 3, 0) + u32(0xFFFFFFFF), "tensor[0].quant.scales", T0 + 22, 4 * 0xFFFFFFFF,
     "needs 17179869180 bytes, 0 remain in the section"),
    (u8(7, 0, 4) + u16(1) + u8(200), "tensor[0].quant.orig_shape", T0 + 20, 800,
     "needs 800 bytes, 0 remain in the section"),
    (u8(7, 0, 4) + u16(1) + u8(0) + u32(0xFFFFFFFF), "tensor[0].quant.scales", T0 + 24,
     4 * 0xFFFFFFFF, "needs 17179869180 bytes, 0 remain in the section"),
])
def test_metadata_bytes_are_unsigned(meta, field, offset, value, message):
    check(failure(data_file(((0, "w"),), [tensor(0, meta, b"\0")])), "DATA", field, offset,
          value, message)


def test_table_fields_are_unsigned():
    name = "c" * 200  # a uint8 length above 127
    nac = loads(nac_bytes(("CMAP", u32(1) + u16(200) + u8(200) + name.encode()),
                          ("PERM", u32(1) + u16(200) + u8(200) + b"T" * 200)))
    assert (nac.cmap, nac.perm) == (((200, name),), ((200, "T" * 200),))
    text = "s" * 40000  # a uint16 length above 32767
    cnst = loads(nac_bytes(("CNST", u32(1) + u16(1) + u8(4) + u16(40000) + text.encode()))).cnst
    assert cnst == ((1, Constant(ConstType.STRING, text)),)
    rsrc = loads(nac_bytes(("RSRC", u32(1) + u16(40000) + text.encode() + u32(0)))).rsrc
    assert rsrc == ((text, b""),)
    big = 0x80000000  # a uint32 length above 2**31 - 1
    check(failure(nac_bytes(("PROC", u32(big)))), "PROC", "manifest", BODY + 4, big,
          "needs 2147483648 bytes, 0 remain in the section")
    check(failure(nac_bytes(("ORCH", u32(big, 0)))), "ORCH", "bytecode", BODY + 8, big,
          "needs 2147483648 bytes, 0 remain in the section")
    check(failure(nac_bytes(("ORCH", u32(0, big)))), "ORCH", "const count", BODY + 8, big,
          "const count 2147483648 does not fit")
    check(failure(nac_bytes(("RSRC", u32(1) + u16(0) + u32(big)))), "RSRC", "file[0].data",
          BODY + 10, big, "needs 2147483648 bytes, 0 remain in the section")


def test_instruction_bytes_are_unsigned():
    # A and B are uint8: custom op 200 (CMAP), signature 200 (PERM).
    raw = nac_bytes(("OPS ", u32(2) + INPUT + u8(200, 200) + i16(-1)),
                    ("CMAP", u32(1) + u16(200) + u8(1) + b"x"),
                    ("PERM", u32(1) + u16(200) + u8(1) + b"T"))
    assert loads(raw).ops == (Instruction(2, 0), Instruction(200, 200, None, (-1,)))
    check(failure(ops_file(INPUT, u8(2, 200))), "OPS ", "instruction[1].B", I1 + 1, 200,
          "instruction 1: <INPUT> variant B=200 does not exist")
    check(failure(ops_file(INPUT, u8(3, 200))), "OPS ", "instruction[1].B", I1 + 1, 200,
          "instruction 1: <OUTPUT> variant B=200 does not exist")
    check(failure(ops_file(INPUT, u8(11, 200))), "OPS ", "instruction[1].B", I1 + 1, 200,
          "instruction 1: signature id 200 is not in PERM")


@pytest.mark.parametrize(("ins", "field", "at", "value", "message"), [
    (u8(11, 1) + b"\0", "instruction[1].C count", 2, 1,
     "instruction 1: C count needs 1 int16, 0 remain"),
    (u8(11, 1) + i16(4) + b"\0" * 5, "instruction[1].C", 4, 4,
     "instruction 1: C needs 4 int16, 2 remain"),
    (u8(2, 1) + b"\0" * 3, "instruction[1].C", 2, 2, "instruction 1: C needs 2 int16, 1 remain"),
    (u8(3, 1) + b"\0", "instruction[1].C count", 2, 1,
     "instruction 1: C count needs 1 int16, 0 remain"),
    (u8(3, 1) + i16(2) + b"\0" * 3, "instruction[1].C", 4, 2,
     "instruction 1: C needs 2 int16, 1 remain"),
    (u8(6, 0) + i16(1, 2), "instruction[1].C", 2, 3, "instruction 1: C needs 3 int16, 2 remain"),
    (u8(6, 0) + i16(1, 2, 3) + b"\0", "instruction[1].D", 8, 1,
     "instruction 1: D needs 1 int16, 0 remain"),
])
def test_instruction_cut_short(ins, field, at, value, message):
    # *at*: where the read that fails starts, from the start of instruction 1.
    raw = ops_file(INPUT, ins, perm=((1, "Ti"),))
    check(failure(raw), "OPS ", field, I1 + at, value, message)


def test_mmap_record_count_located():
    raw = nac_bytes(("MMAP", b"\0\0"), ("OPS ", u32(1) + INPUT))
    check(failure(raw), "MMAP", "record count", BODY, 4, "needs 4 bytes, 2 remain in the section")
    raw = nac_bytes(("MMAP", u32(2) + bytes(5)), ("OPS ", u32(1) + INPUT))
    check(failure(raw), "MMAP", "record count", BODY, 2,
          "count 2 of records of at least 3 bytes does not fit in the 5 bytes that remain")


def test_loads_takes_whatever_bytes_takes():
    import array

    # A name in the file: reading it from a memoryview (what loads makes of a bytearray
    # or any other buffer) used to fail with AttributeError (no memoryview.decode).
    raw = nac_bytes(("CMAP", u32(1) + u16(20) + u8(2) + b"ab"))
    expected = NacFile(cmap=((20, "ab"),))
    for buf in (raw, bytearray(raw), memoryview(raw), array.array("B", raw), list(raw)):
        assert loads(buf) == expected


def test_table_entries_cut_short():
    # CNST: a 9-byte string constant, then 1 byte where constant 1's uint16 id should be.
    body = u32(2) + u16(1) + u8(4) + u16(4) + b"abcd" + b"\0"
    check(failure(nac_bytes(("CNST", body))), "CNST", "constant[1].id", BODY + 13, 2,
          "needs 2 bytes, 1 remain in the section")
    # CMAP: entry 0 is 5 bytes, then 1 byte of entry 1's 3-byte id/length.
    body = u32(2) + u16(20) + u8(2) + b"ab" + b"\0"
    check(failure(nac_bytes(("CMAP", body))), "CMAP", "entry[1]", BODY + 9, 3,
          "needs 3 bytes, 1 remain in the section")
    body = u32(1) + u16(20) + u8(5)
    check(failure(nac_bytes(("CMAP", body))), "CMAP", "entry[0].name", BODY + 7, 5,
          "needs 5 bytes, 0 remain in the section")
    # RSRC: file 0 is 11 bytes, then 1 byte of file 1's uint16 name length.
    body = u32(2) + u16(5) + b"abcde" + u32(0) + b"\0"
    check(failure(nac_bytes(("RSRC", body))), "RSRC", "file[1].name_length", BODY + 15, 2,
          "needs 2 bytes, 1 remain in the section")


def test_table_ids_and_bool_byte_are_unsigned():
    body = u32(1) + u16(40000) + u8(0)
    check(failure(nac_bytes(("CMAP", body))), "CMAP", "entry[0].id", BODY + 7, 40000,
          "CMAP id 40000 must be a custom id (>= 10, <= 255, not standard)")
    assert loads(nac_bytes(("PERM", u32(1) + u16(40000) + u8(1) + b"T"))).perm == (
        (40000, "T"),)
    body = u32(1) + u16(0) + u8(1) + u16(1) + u8(200)
    check(failure(nac_bytes(("CNST", body))), "CNST", "constant[0].value", BODY + 10, 200,
          "bool value must be 0 or 1")


def test_writer_fields_are_unsigned():
    # Lengths, ids and sizes above the signed range of their field are written as unsigned.
    text, ints = "s" * 40000, tuple(range(40000))
    body = section_body(dumps(NacFile(cnst=((1, Constant(ConstType.STRING, text)),
                                            (2, Constant(ConstType.LIST_INT32, ints))))), "CNST")
    assert body == (u32(2) + u16(1) + u8(4) + u16(40000) + text.encode()
                    + u16(2) + u8(5) + u16(40000) + struct.pack("<40000i", *ints))
    assert section_body(dumps(NacFile(perm=((40000, "T"),))), "PERM") == (
        u32(1) + u16(40000) + u8(1) + b"T")
    t = Tensor(DType.INT8, (1,) * 200, QuantMethod.INT8_CHANNEL,
               QuantParams(scales=(1.0,), axis=200), b"\x05")
    meta = u8(7, 200) + u32(*(1,) * 200) + u8(3, 200) + u32(1) + struct.pack("<f", 1.0)
    assert tensor_metadata(t) == meta
    data = DataSection(params=((40000, "w"),), tensors=((40000, t),))
    assert section_body(dumps(NacFile(data=data)), "DATA") == (
        names(((40000, "w"),)) + names(()) + u32(1) + tensor(40000, meta, b"\x05"))
    t = Tensor(DType.UINT8, (), QuantMethod.BLOCK_FP8,
               QuantParams(scales=(), block_size=40000, orig_shape=(1,) * 200), b"\0")
    assert tensor_metadata(t) == (u8(8, 0, 4) + u16(40000) + u8(200) + u32(*(1,) * 200)
                                  + u32(0))


def test_section_body_offsets_are_unsigned_and_absence_message():
    # Nine tag-only sections (124 bytes); RSRC's entry (byte 76) set to 2**64 - 50, an
    # offset past the end of any file: the body is empty (as int64 it would be -50 and
    # slice the header's last bytes).
    raw = with_offset(nac_bytes(*((tag, b"") for tag in TAGS)), 8, 2**64 - 50)
    assert len(raw) == 124 and section_body(raw, "RSRC") == b""
    assert section_body(raw, "PROC") == b""  # up to ORCH's tag
    err = raises(section_body, header([0] * 9), "PROC")
    assert str(err) == "section header, field proc_offset, offset 60 (0x3c), value 0: " \
        "section is absent"
