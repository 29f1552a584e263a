"""Golden bytes: every example the spec gives, written out byte by byte."""

import struct

import pytest

from nac import (
    Constant,
    DataSection,
    Instruction,
    MmapRecord,
    NacFile,
    NacFormatError,
    Tensor,
    dumps,
    loads,
)
from nac.container import section_body, tensor_metadata
from nac.encoding import ConstType, DType, MmapAction


def section(nac, tag):
    """One section of dumps(nac), tag included, found through the header's offset table."""
    return tag.encode() + section_body(dumps(nac), tag)


def test_perm_tsc():
    # §5.2.2: signature "TSc" with id 100 -> 64 00 (id), 03 (length), 54 53 63 ("TSc").
    nac = NacFile(perm=((100, "TSc"),))
    assert section(nac, "PERM") == b"PERM" + bytes([1, 0, 0, 0]) + bytes(
        [0x64, 0x00, 0x03, 0x54, 0x53, 0x63])


def test_cnst_list_int():
    # §5.3.2: [1, 2] with id 50 -> 32 00 (id), 05 (list_int32), 02 00 (2 elements),
    # 01 00 00 00, 02 00 00 00.
    nac = NacFile(cnst=((50, Constant(ConstType.LIST_INT32, (1, 2))),))
    assert section(nac, "CNST") == b"CNST" + bytes([1, 0, 0, 0]) + bytes(
        [0x32, 0x00, 0x05, 0x02, 0x00, 0x01, 0, 0, 0, 0x02, 0, 0, 0])


def test_cmap_custom_op_length_is_nine():
    # §5.1.2 says C9 00 (id 201), 0A (length 10), "custom.op" -- but "custom.op" is 9 bytes.
    # Decision (docs/nac-format.md): the length is the exact UTF-8 byte length, so 09.
    nac = NacFile(cmap=((201, "custom.op"),))
    assert section(nac, "CMAP") == b"CMAP" + bytes([1, 0, 0, 0]) + bytes(
        [0xC9, 0x00, 0x09]) + b"custom.op"
    # The spec's literal bytes (length 0A) are rejected: they ask for a byte that the
    # section does not have.
    raw = bytearray(dumps(nac))
    raw[raw.index(b"\xc9\x00\x09") + 2] = 0x0A
    with pytest.raises(NacFormatError, match=r"section CMAP.*needs 10 bytes, 9 remain"):
        loads(bytes(raw))


def test_f16_tensor_metadata():
    # §6.1.1: float16 [768, 768], no quantisation -> 11 bytes:
    # 02 (float16) 02 (rank) 00 03 00 00 (768) 00 03 00 00 (768) 00 (quant none).
    meta = tensor_metadata(Tensor(DType.FLOAT16, (768, 768)))
    assert meta == bytes([0x02, 0x02, 0x00, 0x03, 0, 0, 0x00, 0x03, 0, 0, 0x00])
    assert len(meta) == 11


def test_mmap_tick_43():
    # §4.5: tick 43 with FREE -> 26, SAVE_RESULT -> 43, PRELOAD -> 44:
    # 2B 00 (tick 43), 03 (3 commands), 14 1A 00 (FREE 26), 0A 2B 00 (SAVE 43),
    # 28 2C 00 (PRELOAD 44).
    ops = [Instruction(2, 0)] * 44 + [Instruction(2, 1, (2, 7))] + [Instruction(2, 0)]
    nac = NacFile(ops=tuple(ops), data=DataSection(params=((7, "w"),), tensors=()),
                  mmap=(MmapRecord(43, ((MmapAction.FREE, 26), (MmapAction.SAVE_RESULT, 43),
                                        (MmapAction.PRELOAD, 44))),))
    assert section(nac, "MMAP") == b"MMAP" + bytes([1, 0, 0, 0]) + bytes(
        [0x2B, 0x00, 0x03, 0x14, 0x1A, 0x00, 0x0A, 0x2B, 0x00, 0x28, 0x2C, 0x00])
    assert loads(dumps(nac)) == nac


def test_header_and_ops_by_hand():
    # A two-instruction model: <INPUT B=0>, <OUTPUT B=0> C=[1, 0] D=[-1]; one output.
    nac = NacFile(num_inputs=1, num_outputs=1, internal_weights=True,
                  ops=(Instruction(2, 0), Instruction(3, 0, (1, 0), (-1,))))
    ops = b"OPS " + bytes([2, 0, 0, 0]) + bytes([2, 0]) + bytes([3, 0, 1, 0, 0, 0, 0xFF, 0xFF])
    header = (b"NAC" + bytes([1])          # magic, version 1
              + bytes([0x80])              # internal weights, quantisation 0
              + bytes([1, 0, 1, 0, 0])     # 1 input, 1 output, reserved
              + bytes([0, 0])              # d_model 0
              + struct.pack("<9Q", 0, 88, 0, 0, 0, 0, 0, 0, 0)  # only OPS, right after
              + bytes(4))                  # padding
    assert dumps(nac) == header + ops
    assert loads(header + ops) == nac
