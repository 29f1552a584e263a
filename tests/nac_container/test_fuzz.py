"""Fuzz: any byte string gives a NacFile or a NacFormatError, never another exception.

A short budget here; ``tests/fuzz/fuzz_nac.py --seconds N`` (``make fuzz``) runs long.
"""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nac_strategies import nac_files

from nac import NacFormatError, dumps, loads
from nac.text import assemble, disassemble


def mutate(raw, rng):
    data = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        how = rng.randrange(5)
        if how == 0 and data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif how == 1 and data:
            data[rng.randrange(len(data))] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        elif how == 2:
            data.insert(rng.randrange(len(data) + 1), rng.randrange(256))
        elif how == 3 and data:
            del data[rng.randrange(len(data))]
        elif data:
            del data[rng.randrange(len(data)):]
    return bytes(data)


def check(raw):
    try:
        nac = loads(raw)
    except NacFormatError:
        return False
    # Whatever parses must write back to the same bytes (canonical files) or at least
    # re-parse to the same object.
    assert loads(dumps(nac)) == nac
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nac_files(), st.integers(0, 2**32 - 1))
def test_mutated_files(nac, seed):
    check(mutate(dumps(nac), random.Random(seed)))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes(raw):
    check(raw)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_with_valid_header(tail):
    # Past the magic: exercises offsets and section parsing rather than the magic check.
    check(b"NAC\x01\x80\x00\x00\x00\x00\x00\x00\x00" + tail)


@settings(max_examples=80, deadline=None)
@given(nac_files(), st.integers(0, 2**32 - 1))
def test_mutated_text(nac, seed):
    rng = random.Random(seed)
    text = disassemble(nac)
    chars = list(text)
    for _ in range(rng.randint(1, 3)):
        if chars:
            chars[rng.randrange(len(chars))] = rng.choice("0123456789[],=\" #vAB-x\n")
    try:
        assemble("".join(chars))
    except NacFormatError:
        pass


@pytest.mark.parametrize("count_field", [0, 0xFFFFFFFF])
def test_huge_counts_do_not_allocate(count_field):
    # An OPS section claiming 2**32-1 instructions in 4 bytes must fail at once.
    raw = bytearray(dumps(__import__("nac").NacFile(ops=())))
    at = raw.index(b"OPS ") + 4
    raw[at:at + 4] = count_field.to_bytes(4, "little")
    if count_field == 0:
        assert loads(bytes(raw)).ops == ()
    else:
        with pytest.raises(NacFormatError, match="count 4294967295 of records"):
            loads(bytes(raw))
