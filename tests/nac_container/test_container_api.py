"""The container's helpers beside loads/dumps: argument gathering, operation names,
section bodies, and the formatting of error locations (expected values by hand)."""

import struct

import pytest

from nac import Constant, Instruction, NacFile, NacFormatError, dumps, loads
from nac.container import Argument, gather_arguments, section_body
from nac.encoding import ConstType


def test_gather_arguments_by_hand():
    # Signature "TiT": D = [-2, 0, -1] at index 5 -> ancestor 3, constant id 7, ancestor 4.
    ins = Instruction(11, 100, (1, 7), (-2, 0, -1))
    assert gather_arguments(ins, 5, {100: "TiT"}) == (
        Argument(False, 3), Argument(True, 7), Argument(False, 4))
    # Two constants are taken in C order.
    ins = Instruction(11, 101, (2, 9, 8), (0, -1, 0))
    assert gather_arguments(ins, 1, {101: "iTi"}) == (
        Argument(True, 9), Argument(False, 0), Argument(True, 8))
    # B = 0: no signature, no arguments.
    assert gather_arguments(Instruction(2, 0), 0, {}) == ()


def test_gather_arguments_errors_name_section_field_value():
    with pytest.raises(NacFormatError) as info:
        gather_arguments(Instruction(11, 7, None, (-1,)), 2, {100: "T"})
    err = info.value
    assert (err.section, err.field, err.value) == ("OPS ", "B", 7)
    assert "instruction 2: signature 7 is not in PERM" in str(err)
    with pytest.raises(NacFormatError) as info:
        gather_arguments(Instruction(11, 100, None, (-1, -1)), 2, {100: "T"})
    err = info.value
    assert (err.section, err.field, err.value) == ("OPS ", "D", None)
    assert "instruction 2: D has 2 entries, the signature has 1" in str(err)
    with pytest.raises(NacFormatError) as info:
        gather_arguments(Instruction(11, 100, None, (3,)), 2, {100: "T"})
    assert (info.value.field, info.value.value) == ("D", 3)
    # D = [0] takes a constant, but C holds none.
    with pytest.raises(NacFormatError) as info:
        gather_arguments(Instruction(11, 100, None, (0,)), 2, {100: "i"})
    assert (info.value.section, info.value.field) == ("OPS ", "C")
    assert "instruction 2: C has 0 constant ids, D has 1 zeros" in str(info.value)


def test_op_name_standard_cmap_and_unknown():
    nac = NacFile(cmap=((300, "my.op"),))
    assert nac.op_name(11) == "nac.add" and nac.op_name(300) == "my.op"
    assert nac.op_name(301) is None
    assert NacFile().op_name(300) is None


def test_section_body_and_absent_section():
    nac = NacFile(num_outputs=0, perm=((100, "T"),),
                  cnst=((5, Constant(ConstType.INT64, 3)),), ops=(Instruction(2, 0),))
    raw = dumps(nac)
    # OPS body: uint32 count 1, then <INPUT B=0> = bytes 2, 0.
    assert section_body(raw, "OPS ") == struct.pack("<I", 1) + bytes([2, 0])
    with pytest.raises(NacFormatError) as info:
        section_body(raw, "MMAP")  # MMAP is entry 0 of the offset table at byte 12
    err = info.value
    assert (err.section, err.field, err.offset, err.value) == ("header", "mmap_offset", 12, 0)
    with pytest.raises(NacFormatError) as info:
        section_body(raw, "CMAP")  # entry 2: byte 12 + 16
    assert (info.value.field, info.value.offset) == ("cmap_offset", 28)
    assert "section is absent" in str(info.value)


def test_section_offsets_are_unsigned():
    raw = bytearray(dumps(NacFile(num_outputs=0, ops=(Instruction(2, 0),))))
    struct.pack_into("<Q", raw, 12 + 8 * 1, (1 << 63) + 5)  # OPS offset past int64
    with pytest.raises(NacFormatError, match=r"value 9223372036854775813"):
        loads(bytes(raw))


def test_record_field_names_are_formatted():
    # OPS cut one byte short: <OUTPUT> (instruction 1) lacks the second byte of its D.
    raw = dumps(NacFile(num_outputs=1, ops=(Instruction(2, 0),
                                            Instruction(3, 0, (1, 0), (-1,)))))
    with pytest.raises(NacFormatError, match=r"field instruction\[1\]\.D, .*"
                                             r"instruction 1: D needs 1 int16, 0 remain"):
        loads(raw[:-1])
