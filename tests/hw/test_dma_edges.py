"""``RegionCopy`` and its model at their edges (each case a survivor of ``make mutate``).

* the model's range check at the exact boundary, on both sides: a row whose last byte is
  the memory's last byte is copied, one byte further is an error, nothing of that row
  and after it copied; a zero count copies nothing and is not an error;
* the RTL's word-granular range check at the boundary (a row ending in the last word
  fits, a row reaching one byte into the word after it is an error), on both sides;
* a zero in each count (nothing read or written, no error, the next command runs);
* a fourth dimension of three slices (the outermost counter's step);
* third and fourth dimensions of four and five (a counter that steps by two, or wraps
  backwards, still ends a count of three on time: ``more2`` / ``more3`` are worked out
  from the counter before the step);
* the constructor: every allowed word width, the depth checks and their messages.
"""

from __future__ import annotations

import random

import pytest

from npu.bus.dma import RegionCopy, copy_region_model
from tests.hw.test_dma import SIZE, W, run, source_words_read


def _cmd(src, dst, count, ss=(0, 0, 0), ds=(0, 0, 0)):
    return {"src": src, "dst": dst, "count": list(count), "src_stride": list(ss),
            "dst_stride": list(ds)}


@pytest.mark.parametrize("side", ["src", "dst"])
def test_model_range_check_at_the_boundary(side):
    mem = bytes(range(64))
    n = 8
    fits = 64 - n            # the row's last byte is the memory's last byte
    for start, error in ((fits, False), (fits + 1, True)):
        src, dst = bytearray(mem), bytearray(64)
        args = {"src": start if side == "src" else 0, "dst": start if side == "dst" else 0}
        got = copy_region_model(src, dst, count=[n, 1, 1, 1], src_stride=[0, 0, 0],
                                dst_stride=[0, 0, 0], **args)
        assert got is error
        want = bytearray(64)
        if not error:
            want[args["dst"]:args["dst"] + n] = mem[args["src"]:args["src"] + n]
        assert dst == want


def test_model_zero_count_copies_nothing():
    src, dst = bytearray(range(32)), bytearray(32)
    for k in range(4):
        count = [4, 2, 2, 2]
        count[k] = 0
        assert copy_region_model(src, dst, src=0, dst=0, count=count, src_stride=[4, 8, 16],
                                 dst_stride=[4, 8, 16]) is False
        assert dst == bytearray(32)


@pytest.mark.parametrize("side", ["src", "dst"])
def test_rtl_range_check_at_the_boundary(side):
    rng = random.Random(5)
    src = bytes(rng.randrange(256) for _ in range(SIZE))
    dst = bytes(SIZE)
    n = 3 * W
    fits = SIZE - n                  # ends on the memory's last byte
    over = SIZE - n + 1              # its last byte is the first of word DEPTH
    for start, error in ((fits, 0), (over, 1)):
        cmd = _cmd(start if side == "src" else 0, start if side == "dst" else 0, [n, 1, 1, 1])
        want = bytearray(dst)
        assert copy_region_model(src, want, **cmd) is bool(error)
        out = run([cmd], src, dst)
        assert out["errors"] == [error]
        assert out["dst"] == bytes(want)
        assert out["bytes"] == (0 if error else n)
    # after an out-of-range row the unit is idle again: the next command runs, once
    good = _cmd(0, 0, [n, 1, 1, 1])
    bad = _cmd(over if side == "src" else 0, over if side == "dst" else 0, [n, 1, 1, 1])
    want = bytearray(dst)
    copy_region_model(src, want, **good)
    out = run([bad, good, bad], src, dst)
    assert out["errors"] == [1, 0, 1]
    assert out["dst"] == bytes(want)
    assert out["bytes"] == n


def test_rtl_zero_count_in_each_dimension():
    rng = random.Random(6)
    src = bytes(rng.randrange(256) for _ in range(SIZE))
    commands = []
    for k in range(4):
        count = [5, 2, 2, 2]
        count[k] = 0
        commands.append(_cmd(1, 3, count, (7, 20, 50), (9, 24, 60)))
    tail = _cmd(2, 5, [6, 1, 1, 1])      # a real copy after them still runs
    out = run([*commands, tail], src, bytes(SIZE))
    assert out["errors"] == [0] * 5
    want = bytearray(SIZE)
    copy_region_model(src, want, **tail)
    assert out["dst"] == bytes(want)
    assert out["bytes"] == 6
    assert out["reads"] == source_words_read(tail)   # the zero-count copies read nothing


def test_rtl_fourth_dimension_of_three():
    rng = random.Random(7)
    src = bytes(rng.randrange(256) for _ in range(SIZE))
    cmd = _cmd(3, 1, [5, 2, 2, 3], (6, 13, 29), (7, 15, 31))
    want = bytearray(SIZE)
    assert copy_region_model(src, want, **cmd) is False
    out = run([cmd], src, bytes(SIZE))
    assert out["errors"] == [0]
    assert out["dst"] == bytes(want)
    assert out["bytes"] == 5 * 2 * 2 * 3


def test_rtl_outer_dimensions_of_four_and_five():
    rng = random.Random(11)
    src = bytes(rng.randrange(256) for _ in range(SIZE))
    cmd = _cmd(3, 1, [3, 2, 4, 5], (6, 13, 29), (7, 15, 31))
    want = bytearray(SIZE)
    assert copy_region_model(src, want, **cmd) is False
    out = run([cmd], src, bytes(SIZE))
    assert out["errors"] == [0]
    assert out["dst"] == bytes(want)
    assert out["bytes"] == 3 * 2 * 4 * 5


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_constructor_widths_and_depths():
    for bits in (16, 32, 64, 128, 256, 512):
        assert RegionCopy(data_width=bits, src_depth=1, dst_depth=1).wbytes == bits // 8
    for name in ("src_depth", "dst_depth"):
        for bad in (0, -3, 2.0, "8"):
            with pytest.raises(ValueError, match=rf"^{name} must be a positive integer, "
                                                 rf"not {bad!r}$"):
                RegionCopy(data_width=32, **{name: bad})
    # the byte-address width covers the larger memory, source or destination
    assert RegionCopy(data_width=32, src_depth=1000, dst_depth=10).addr_width == 12
    assert RegionCopy(data_width=32, src_depth=10, dst_depth=1000).addr_width == 12


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_constructor_defaults():
    rc = RegionCopy()
    assert (rc.wbytes, rc.src_depth, rc.dst_depth) == (8, 1024, 1024)


def test_rtl_narrow_words_in_a_memory_of_odd_depth():
    """16-bit words in memories of 100 words (200 bytes: an 8-bit byte address, word
    indices up to 99 and the fetch index's -1 need 8 bits), rows up to the last word."""
    width, depth = 16, 100
    size = width // 8 * depth
    rng = random.Random(8)
    src = bytes(rng.randrange(256) for _ in range(size))
    commands = []
    for _ in range(12):
        n0 = rng.randint(1, 9)
        cnt = [n0, rng.randint(1, 3), 1, 1]
        stride = n0 + rng.randint(0, 4)
        extent = n0 + (cnt[1] - 1) * stride
        # mostly near the top of both memories
        s0 = rng.randint(max(0, size - extent - 12), size - extent)
        d0 = rng.randint(max(0, size - extent - 12), size - extent)
        commands.append(_cmd(s0, d0, cnt, (stride, 0, 0), (stride, 0, 0)))
    want = bytearray(size)
    for cmd in commands:
        assert copy_region_model(src, want, **cmd) is False
    out = run(commands, src, bytes(size), data_width=width, depth=depth)
    assert out["errors"] == [0] * len(commands)
    assert out["dst"] == bytes(want)
