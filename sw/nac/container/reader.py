"""The NAC reader: header and section extents, then each section, then the cross-section
checks (:func:`loads`); :func:`section_body` finds one section's bytes in an encoded file."""

from __future__ import annotations

import struct

from nac.container.cursor import _Cursor
from nac.container.model import NacFile
from nac.container.read_data import read_data
from nac.container.read_ops import read_mmap, read_ops
from nac.container.read_tables import (
    read_cmap,
    read_cnst,
    read_orch,
    read_perm,
    read_proc,
    read_rsrc,
)
from nac.container.validate import _validate_mmap, _validate_ops
from nac.encoding import (
    HEADER_SIZE,
    MAGIC,
    SECTION_TAGS,
    STORAGE_INTERNAL,
    VERSION,
    QuantMethod,
    SystemOp,
)
from nac.errors import NacFormatError

__all__ = ["loads", "section_body"]


def _read_header(buf):
    """The header's fields (as :class:`NacFile` keywords) and each present section's extent.

    Extents are ``{tag: (start, end)}``, the start after the 4-byte tag.
    """
    size = len(buf)
    if size < HEADER_SIZE:
        raise NacFormatError(f"file is {size} bytes, shorter than the {HEADER_SIZE}-byte header",
                             section="header", field="length", offset=0, value=size)
    head = bytes(buf[:HEADER_SIZE])
    if head[:3] != MAGIC:
        raise NacFormatError("not a NAC file (magic is not b'NAC')", section="header",
                             field="magic", offset=0, value=head[:3])
    if head[3] != VERSION:
        raise NacFormatError(f"unsupported version (this reader reads version {VERSION})",
                             section="header", field="version", offset=3, value=head[3])
    qbyte = head[4]
    if qbyte & 0x7F not in QuantMethod._value2member_map_:
        raise NacFormatError("unknown quantisation method", section="header",
                             field="quantization", offset=4, value=qbyte & 0x7F)
    num_inputs, num_outputs, reserved, d_model = struct.unpack_from("<HHBH", head, 5)
    if reserved:
        raise NacFormatError("reserved byte must be 0", section="header", field="reserved",
                             offset=9, value=reserved)
    offsets = struct.unpack_from("<9Q", head, 12)
    if head[84:88] != b"\0\0\0\0":
        raise NacFormatError("padding must be zero", section="header", field="padding",
                             offset=84, value=head[84:88])
    present = sorted((off, k) for k, off in enumerate(offsets) if off)
    extents = {}
    for j, (off, k) in enumerate(present):
        tag = SECTION_TAGS[k]
        if not HEADER_SIZE <= off <= size - 4:
            raise NacFormatError(f"section offset {off} is outside the file ({size} bytes) or "
                                 f"inside the header", section="header",
                                 field=f"{tag.strip().lower()}_offset", offset=12 + 8 * k,
                                 value=off)
        if j and present[j - 1][0] + 4 > off:
            other = SECTION_TAGS[present[j - 1][1]]
            raise NacFormatError(f"section {tag.strip()} overlaps section {other.strip()}",
                                 section="header", field=f"{tag.strip().lower()}_offset",
                                 offset=12 + 8 * k, value=off)
        end = present[j + 1][0] if j + 1 < len(present) else size
        if bytes(buf[off:off + 4]) != tag.encode():
            raise NacFormatError(f"expected tag {tag!r}", section=tag, field="tag", offset=off,
                                 value=bytes(buf[off:off + 4]))
        extents[tag] = (off + 4, end)
    if present and present[0][0] != HEADER_SIZE:
        raise NacFormatError(f"{present[0][0] - HEADER_SIZE} unexplained bytes between the "
                             f"header and the first section", section="header",
                             field="layout", offset=HEADER_SIZE, value=present[0][0])
    if not present and size != HEADER_SIZE:
        raise NacFormatError("trailing bytes after a header with no sections",
                             section="header", field="layout", offset=HEADER_SIZE)
    fields = {"quant_method": QuantMethod(qbyte & 0x7F),
              "internal_weights": bool(qbyte & STORAGE_INTERNAL), "num_inputs": num_inputs,
              "num_outputs": num_outputs, "d_model": d_model, "version": head[3]}
    return fields, extents


def loads(buf):
    """Parse a whole ``.nac`` file from bytes.

    Raises
    ------
    NacFormatError
        For anything malformed, naming section, field, offset and value.
    """
    buf = memoryview(bytes(buf)) if not isinstance(buf, (bytes, memoryview)) else buf
    fields, extents = _read_header(buf)

    def cursor(tag):
        start, end = extents[tag]
        return _Cursor(buf, start, end, tag)

    if "CMAP" in extents:
        fields["cmap"] = read_cmap(cursor("CMAP"))
    if "CNST" in extents:
        fields["cnst"] = read_cnst(cursor("CNST"))
    if "PERM" in extents:
        fields["perm"] = read_perm(cursor("PERM"))
    if "DATA" in extents:
        fields["data"] = read_data(cursor("DATA"), fields["internal_weights"])
    if "OPS " in extents:
        fields["ops"], ops_offsets = read_ops(cursor("OPS "), fields.get("perm", ()),
                                              fields["num_outputs"])
    if "MMAP" in extents:
        fields["mmap"], rec_offsets = read_mmap(cursor("MMAP"))
    if "PROC" in extents:
        fields["proc"] = read_proc(cursor("PROC"))
    if "ORCH" in extents:
        fields["orch"] = read_orch(cursor("ORCH"))
    if "RSRC" in extents:
        fields["rsrc"] = read_rsrc(cursor("RSRC"))

    nac = NacFile(**fields)
    if nac.ops is not None:
        _validate_ops(nac, ops_offsets)
        outputs = [ins for ins in nac.ops if ins.a == SystemOp.OUTPUT and ins.b == 0]
        if len(outputs) > 1:
            raise NacFormatError("more than one <OUTPUT B=0>", section="OPS ", field="A")
    if nac.mmap is not None:
        _validate_mmap(nac, rec_offsets)
    return nac


def section_body(raw, tag):
    """The bytes of section *tag* in an encoded file, after its 4-byte tag.

    This is what the hardware streams consume (the MMAP coprocessor reads the MMAP body;
    the ABCD decoder reads the OPS body after its ``uint32`` count). The extent is found
    through the header's offset table: up to the next section or the end of the file.

    Raises
    ------
    NacFormatError
        If the section is absent.
    """
    offsets = struct.unpack_from("<9Q", raw, 12)
    k = SECTION_TAGS.index(tag)
    start = offsets[k]
    if not start:
        raise NacFormatError("section is absent", section="header",
                             field=f"{tag.strip().lower()}_offset", offset=12 + 8 * k, value=0)
    later = [o for o in offsets if o > start]
    return bytes(raw[start + 4:min(later) if later else len(raw)])
