"""Every validation rule names section, field, offset and value (or file:line:col)."""

import struct

import pytest

from nac import (
    Constant,
    DataSection,
    Instruction,
    MmapRecord,
    NacFile,
    NacFormatError,
    dumps,
    loads,
)
from nac.container import gather_arguments
from nac.encoding import ConstType, MmapAction
from nac.text import assemble, disassemble

BASE = NacFile(num_inputs=1, num_outputs=1, perm=((100, "Ti"),),
               cnst=((5, Constant(ConstType.INT64, 3)),),
               data=DataSection(params=((0, "w"),), tensors=()),
               ops=(Instruction(2, 0), Instruction(2, 1, (2, 0)),
                    Instruction(11, 100, (1, 5), (-1, 0)), Instruction(3, 0, (1, 0), (-1,))))


def patched(nac, offset_in_section, tag, new):
    raw = bytearray(dumps(nac))
    at = raw.index(tag.encode()) + offset_in_section
    raw[at:at + len(new)] = new
    return bytes(raw), at


def expect(raw, *fragments):
    with pytest.raises(NacFormatError) as info:
        loads(raw)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)
    return info.value


def test_valid_base():
    assert loads(dumps(BASE)) == BASE


def test_magic_and_version():
    raw = dumps(BASE)
    expect(b"NAX" + raw[3:], "section header", "field magic", "offset 0")
    expect(raw[:3] + b"\x02" + raw[4:], "field version", "offset 3", "value 2")
    expect(raw[:50], "shorter than the 88-byte header")


def test_section_offset_outside_file():
    raw = bytearray(dumps(BASE))
    struct.pack_into("<Q", raw, 12 + 8 * 1, 10**9)  # OPS offset
    expect(bytes(raw), "field ops_offset", "offset 20", "outside the file")


def test_wrong_tag():
    raw, at = patched(BASE, 0, "PERM", b"PERX")
    expect(raw, "section PERM", "field tag", f"offset {at}")


def test_unknown_signature_in_ops():
    # OPS: tag 4, count 4, v0 2 bytes, v1 6 bytes, then v2: A at +16, B at +17.
    raw, _ = patched(BASE, 4 + 4 + 2 + 6 + 1, "OPS ", bytes([99]))
    expect(raw, "section OPS", "signature id 99 is not in PERM", "value 99")


def test_forward_offset():
    nac = NacFile(num_outputs=1, perm=((100, "T"),), ops=(
        Instruction(2, 0), Instruction(11, 100, None, (1,)), Instruction(3, 0, (1, 0), (-1,))))
    expect(dumps(nac), "section OPS", "instruction 1", "D offset 1", "not an earlier one")


def test_zeros_do_not_match_c_count():
    nac = NacFile(num_outputs=0, perm=((100, "Ti"),),
                  cnst=((5, Constant(ConstType.INT64, 3)),),
                  ops=(Instruction(2, 0), Instruction(11, 100, (1, 5), (-1, -1))))
    expect(dumps(nac), "C has 1 constant ids, D has 0 zeros")


def test_output_count_differs_from_header():
    nac = NacFile(num_outputs=2, ops=(Instruction(2, 0), Instruction(3, 0, (1, 0), (-1,))))
    expect(dumps(nac), "<OUTPUT B=0> count 1 differs from the header's 2 outputs")


def test_parameter_not_in_data():
    nac = NacFile(ops=(Instruction(2, 1, (2, 9)),), data=DataSection(tensors=()))
    expect(dumps(nac), "parameter id 9 is not in DATA", "value 9")


def test_mmap_targets_and_ticks():
    ops = (Instruction(2, 0), Instruction(2, 0))
    bad = [
        (MmapRecord(5, ((MmapAction.FREE, 0),)), "tick 5 is outside OPS"),
        (MmapRecord(1, ((MmapAction.SAVE_RESULT, 0),)), "SAVE_RESULT target 0 is not valid"),
        (MmapRecord(0, ((MmapAction.FREE, 1),)), "FREE target 1 is not valid"),
        (MmapRecord(0, ((MmapAction.PRELOAD, 1),)), "PRELOAD target 1 is not valid"),
        (MmapRecord(0, ()), "a record without commands"),
    ]
    for record, message in bad:
        expect(dumps(NacFile(ops=ops, mmap=(record,))), "section MMAP", message)


def test_trailing_bytes_in_section():
    raw = dumps(NacFile(rsrc=(("a", b"x"),)))
    expect(raw + b"\0", "section RSRC", "1 trailing bytes")


def test_bad_utf8_name():
    raw, at = patched(NacFile(cmap=((20, "ab"),)), 8 + 3, "CMAP", b"\xff")
    expect(raw, "section CMAP", "not valid UTF-8", f"offset {at}")


def test_tensor_length_mismatch():
    from nac import Tensor
    from nac.encoding import DType

    nac = NacFile(data=DataSection(params=((0, "w"),),
                                   tensors=((0, Tensor(DType.FLOAT32, (2,), data=b"\0" * 8)),)))
    raw = bytearray(dumps(nac))
    at = raw.index(b"\x02\x00\x00\x00\x00")  # the shape [2]
    raw[at] = 3
    expect(bytes(raw), "section DATA", "field tensor[0].data_length", "does not match dtype")


def test_text_errors_name_line_and_column():
    text = disassemble(BASE)
    lines = text.splitlines()
    bad = list(lines)
    bad[-2] = bad[-2].replace("D=[-1, 0]", "D=[-1, x]")
    with pytest.raises(NacFormatError, match=r"m\.txt:\d+:\d+: expected an integer"):
        assemble("\n".join(bad), path="m.txt")
    edited = text.replace("nac.add(v1, 3)", "nac.add(v1, 4)")
    assert edited != text
    with pytest.raises(NacFormatError, match=r"m\.txt:\d+:\d+: readable form 'nac.add\(v1, 4\)'"):
        assemble(edited, path="m.txt")
    with pytest.raises(NacFormatError, match=r"m\.txt:1:1: unknown line kind 'hello'"):
        assemble("hello\n", path="m.txt")
    with pytest.raises(NacFormatError, match="odd number of digits"):
        assemble(text.replace("sections", "proc hex:abc\nsections"), path="m.txt")


def test_offset_before_the_first_instruction():
    # Instruction 1 with D = [-2] names instruction 1 - 2 = -1, before the first.
    nac = NacFile(num_outputs=1, perm=((100, "T"),), ops=(
        Instruction(2, 0), Instruction(11, 100, None, (-2,)), Instruction(3, 0, (1, 0), (-1,))))
    expect(dumps(nac), "section OPS", "instruction 1", "D offset -2", "instruction -1",
           "not an earlier one")
    with pytest.raises(NacFormatError, match="D offset -2 names instruction -1"):
        gather_arguments(nac.ops[1], 1, dict(nac.perm))


def test_output_offset_before_the_first_instruction():
    # <OUTPUT> at index 1 with D = [-3] names instruction -2.
    nac = NacFile(num_outputs=1, ops=(Instruction(2, 0), Instruction(3, 0, (1, 0), (-3,))))
    expect(dumps(nac), "section OPS", "instruction 1", "D offset -3",
           "does not name an earlier instruction")
