"""Readers of the OPS section (ABCD instructions) and the MMAP section (per-tick commands)."""

from __future__ import annotations

import struct

from nac.container.model import Instruction, MmapRecord
from nac.encoding import (
    CONSTANT_CODES,
    MMAP_COMMAND,
    MMAP_RECORD,
    REGULAR_OP_MIN,
    MmapAction,
    SystemOp,
)

_INT16S = [struct.Struct(f"<{n}h") for n in range(64)]


def _parse_instruction(cur, index, perm, num_outputs):
    at = cur.pos
    a, b = cur.unpack("BB", ("instruction[{}].A/B", index))

    def ints(n, name):
        if n * 2 > cur.end - cur.pos:
            cur.fail(f"instruction {index}: {name} needs {n} int16, "
                     f"{(cur.end - cur.pos) // 2} remain", field=f"instruction[{index}].{name}",
                     value=n)
        start = cur.pos
        cur.pos += 2 * n
        return _INT16S[n].unpack_from(cur.buf, start) if n < len(_INT16S) else \
            struct.unpack_from(f"<{n}h", cur.buf, start)

    if a >= REGULAR_OP_MIN:
        if b == 0:
            return Instruction(a, b)
        if b not in perm:
            cur.fail(f"instruction {index}: signature id {b} is not in PERM",
                     field=f"instruction[{index}].B", value=b, offset=at + 1)
        signature, has_constants = perm[b]
        c = None
        if has_constants:
            (n,) = ints(1, "C count")
            if n < 0:
                cur.fail(f"instruction {index}: negative C count", value=n,
                         field=f"instruction[{index}].C", offset=cur.pos - 2)
            c = (n, *ints(n, "C"))
        return Instruction(a, b, c, ints(len(signature), "D"))
    if a == SystemOp.INPUT:
        if b == 0:
            return Instruction(a, b)
        if b > 3:
            cur.fail(f"instruction {index}: <INPUT> variant B={b} does not exist",
                     field=f"instruction[{index}].B", value=b, offset=at + 1)
        c = ints(2, "C")
        if c[0] not in (1, 2):
            cur.fail(f"instruction {index}: <INPUT> C prefix must be 1 or 2",
                     field=f"instruction[{index}].C", value=c[0], offset=cur.pos - 4)
        return Instruction(a, b, c)
    if a == SystemOp.OUTPUT:
        if b > 1:
            cur.fail(f"instruction {index}: <OUTPUT> variant B={b} does not exist",
                     field=f"instruction[{index}].B", value=b, offset=at + 1)
        (n,) = ints(1, "C count")
        if n < 0 or (b == 0 and n != num_outputs):
            cur.fail(f"instruction {index}: <OUTPUT B={b}> count {n}"
                     + (f" differs from the header's {num_outputs} outputs" if b == 0 else ""),
                     field=f"instruction[{index}].C", value=n, offset=cur.pos - 2)
        return Instruction(a, b, (n, *ints(n, "C")), ints(n, "D"))
    if a == SystemOp.CONTROL_FLOW:
        return Instruction(a, b, ints(3, "C"), ints(1, "D"))
    if a == SystemOp.CONVERGENCE:
        cur.fail(f"instruction {index}: <CONVERGENCE> (A=7) is experimental in the spec and "
                 f"not supported", field=f"instruction[{index}].A", value=a, offset=at)
    cur.fail(f"instruction {index}: A={a} is neither a system op nor >= {REGULAR_OP_MIN}",
             field=f"instruction[{index}].A", value=a, offset=at)
    raise AssertionError  # unreachable


def read_ops(cur, perm_entries, num_outputs):
    """The OPS instructions and the offset of each (for the cross-section checks)."""
    n = cur.count("instruction count", 2)
    perm = {b: (sig, any(code in CONSTANT_CODES for code in sig))
            for b, sig in perm_entries}
    ops, ops_offsets = [], []
    for index in range(n):
        ops_offsets.append(cur.pos)
        ops.append(_parse_instruction(cur, index, perm, num_outputs))
    cur.done()
    return tuple(ops), ops_offsets


def read_mmap(cur):
    """The MMAP records and the offset of each (for the cross-section checks)."""
    n = cur.count("record count", MMAP_RECORD.size)
    records, rec_offsets = [], []
    for k in range(n):
        rec_offsets.append(cur.pos)
        head = cur.record(MMAP_RECORD, ("record[{}]", k))
        tick, count = head["tick"], head["commands"]
        commands = []
        for j in range(count):
            at = cur.pos
            cmd = cur.record(MMAP_COMMAND, ("record[{}].command[{}]", k, j))
            action, target = cmd["action"], cmd["target"]
            if action not in MmapAction._value2member_map_:
                cur.fail(f"unknown action code {action}",
                         field=f"record[{k}].command[{j}].action", value=action, offset=at)
            commands.append((MmapAction(action), target))
        records.append(MmapRecord(tick, tuple(commands)))
    cur.done()
    return tuple(records), rec_offsets
