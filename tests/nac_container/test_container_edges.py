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
