"""Random NAC ``OPS`` instruction streams with their expected decoding.

The generator builds each instruction from its own choices (which arguments are
ancestors, which take constants) and records the expected decoded form directly, so it
is an independent check of both :class:`npu.nac.decoder.DecoderModel` and the RTL.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from npu.nac.decoder import OP_INPUT, OP_OUTPUT, DecodedInstruction

__all__ = ["Program", "corrupt", "random_program"]


@dataclass(frozen=True)
class Program:
    perm: dict            # B -> (length, const_mask)
    stream: bytes         # instruction bytes of the OPS section
    expected: tuple       # DecodedInstruction per instruction
    num_outputs: int


def _i16(*values):
    return struct.pack(f"<{len(values)}h", *values)


def random_program(rng, *, max_args, max_consts, n_instr, num_outputs=1, n_sigs=12):
    """A valid stream of *n_instr* instructions ending in ``<OUTPUT B=0>``."""
    perm = {}
    for b in rng.sample(range(1, 256), n_sigs):
        length = rng.randint(0, max_args)
        mask = rng.getrandbits(length) if length and rng.random() < 0.6 else 0
        perm[b] = (length, mask)
    out = bytearray()
    expected = []
    for index in range(n_instr - 1):
        kind = rng.random()
        if index == 0 or kind < 0.15:
            b = rng.choice([0, 1, 2, 3])
            out += bytes([OP_INPUT, b])
            consts = ()
            if b:
                ident = rng.randrange(1 << 15)
                out += _i16(rng.choice([1, 2]), ident)
                consts = (ident,)
            expected.append(DecodedInstruction(index, OP_INPUT, b, consts, ()))
            continue
        if kind < 0.2:
            n = rng.randint(0, min(max_args, max_consts, index))
            reserved = [rng.randrange(1 << 16) - (1 << 15) for _ in range(n)]
            offsets = [-rng.randint(1, index) for _ in range(n)]
            out += bytes([OP_OUTPUT, 1]) + _i16(n, *reserved, *offsets)
            expected.append(DecodedInstruction(
                index, OP_OUTPUT, 1, tuple(r & 0xFFFF for r in reserved),
                tuple((False, index + d) for d in offsets)))
            continue
        a = rng.randint(10, 255)
        choices = [b for b, (length, mask) in perm.items() if mask or length == 0 or index > 0]
        b = rng.choice([0, *choices])
        if b == 0:
            out += bytes([a, 0])
            expected.append(DecodedInstruction(index, a, 0, (), ()))
            continue
        length, mask = perm[b]
        offsets, args, consts = [], [], []
        for _ in range(length):
            use_const = mask and len(consts) < max_consts and rng.random() < 0.5
            if use_const:
                cid = rng.randrange(1 << 16)
                consts.append(cid)
                offsets.append(0)
                args.append((True, cid))
            else:
                d = -rng.randint(1, index)
                offsets.append(d)
                args.append((False, index + d))
        out += bytes([a, b])
        if mask:
            out += _i16(len(consts)) + struct.pack(f"<{len(consts)}H", *consts)
        out += _i16(*offsets)
        expected.append(DecodedInstruction(index, a, b, tuple(consts), tuple(args)))
    index = n_instr - 1
    offsets = [-rng.randint(1, index) for _ in range(num_outputs)]
    out += bytes([OP_OUTPUT, 0]) + _i16(num_outputs, *([0] * num_outputs), *offsets)
    expected.append(DecodedInstruction(index, OP_OUTPUT, 0, (0,) * num_outputs,
                                       tuple((False, index + d) for d in offsets)))
    return Program(perm, bytes(out), tuple(expected), num_outputs)


def corrupt(stream, rng):
    """Damage a stream: flip, replace, insert or delete bytes, or cut it short."""
    data = bytearray(stream)
    how = rng.randrange(5)
    if how == 0 and data:
        pos = rng.randrange(len(data))
        data[pos] ^= 1 << rng.randrange(8)
    elif how == 1 and data:
        data[rng.randrange(len(data))] = rng.randrange(256)
    elif how == 2:
        data.insert(rng.randrange(len(data) + 1), rng.randrange(256))
    elif how == 3 and len(data) > 1:
        del data[rng.randrange(len(data))]
    elif len(data) > 1:
        del data[rng.randrange(1, len(data)):]
    return bytes(data)
