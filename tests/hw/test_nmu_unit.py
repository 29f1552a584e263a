"""The whole NMU (AGU + run reader + array + output stage) on bound NEM programs.

Each case is a one-task NEM program (``sim.nmu_programs``: gemm, matmul, conv2d with odd
shapes, edge tiles, pads, strides, dilations, bias, i8 and i16 outputs, per-tensor and
per-channel weights, unaligned operands), checked and bound with ``nem.binder.bind``. The
testbench decodes the NMU task's registers (``npu.nmu.model.decode_task``), hands the NMU
the task and the requantisation entry of the data section word by word, plays L1 behind
the read and write client ports the way ``ArbitratedSRAM`` serves them (grants denied at
random, read data one cycle after ``go`` and held, read-first), and compares the whole L1
with what ``nem.executor.execute`` leaves, byte for byte; the MAC counter with the
executor's MAC count. A raw i32 output (no NEM type family has one, so the case is an i8
program with the output retyped) is checked against the model and numpy.

Both variants of the unit: one L1 read port (the default) and ``weight_port=True`` (weights
and bias on ``l1_wrd``, double-buffered), grants denied at random on every port, and the
weight port's overlap measured: only the first tile's weights keep the array idle.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from nem.taskformat import ELEM_TYPES, REGISTER_MAPS, RequantEntry, Unit
from npu.nmu.model import (
    Cause,
    NmuGeometry,
    NmuUnsupported,
    check_geometry,
    decode_task,
    nmu_model,
)
from npu.nmu.unit import Nmu, NmuUnit
from sim.nmu_programs import conv_case, gemm_case, run_nmu

GEOM = NmuGeometry(lanes=8, cols=8, wrows=128, channels=64)
L1_BYTES = 65536
REGS = REGISTER_MAPS[Unit.NMU]


def _compare(got, want, what):
    got, want = np.frombuffer(bytes(got), np.uint8), np.asarray(want, np.uint8)
    bad = np.nonzero(got != want)[0]
    assert not len(bad), (f"{what}: L1 byte {bad[0]}: {got[bad[0]]:#04x}, expected "
                          f"{want[bad[0]]:#04x} ({len(bad)} bytes differ)")


@pytest.fixture(scope="module")
def dut():
    return Nmu(geometry=GEOM, depth=L1_BYTES // GEOM.lanes)


@pytest.fixture(scope="module")
def unit():
    return NmuUnit(geometry=GEOM, depth=L1_BYTES // GEOM.lanes)


@pytest.fixture(scope="module")
def wunit():
    return NmuUnit(geometry=GEOM, depth=L1_BYTES // GEOM.lanes, weight_port=True)


CASES = {
    "gemm_odd": lambda r: gemm_case(r, 5, 13, 11, bias=True),
    "gemm_edge_tiles_i16": lambda r: gemm_case(r, 3, 9, 19, bias=True, out_elem="i16",
                                               per_channel=False),
    "matmul": lambda r: gemm_case(r, 6, 24, 8, opcode="matmul"),
    "gemm_k1": lambda r: gemm_case(r, 4, 1, 3),
    "conv_pads_strides_dils": lambda r: conv_case(r, 2, 5, 6, 3, 3, 3, 10, pads=(1, 2, 0, 1),
                                                  strides=(2, 1), dils=(1, 2), bias=True),
    "conv_3x3_same": lambda r: conv_case(r, 1, 5, 5, 9, 3, 3, 12, pads=(1, 1, 1, 1)),
    "conv_i16_stride": lambda r: conv_case(r, 1, 7, 6, 16, 2, 3, 5, strides=(2, 2),
                                           out_elem="i16", bias=True, per_channel=False),
    "matmul_batched": lambda r: gemm_case(r, 3, 11, 10, opcode="matmul",
                                          batch=((3,), (3,))),
    "matmul_broadcast_b": lambda r: gemm_case(r, 4, 9, 5, opcode="matmul", batch=((2,), ())),
    "gemm_bias_mn": lambda r: gemm_case(r, 6, 10, 13, bias="mn"),
    "gemm_bias_mn_i16_batched": lambda r: gemm_case(r, 3, 17, 9, bias="mn", out_elem="i16",
                                                    batch=((2,), ())),
    "gemm_batched_bias": lambda r: gemm_case(r, 2, 7, 9, bias=True, batch=((1,), (2,))),
    "conv_all_pad": lambda r: conv_case(r, 1, 1, 1, 2, 3, 3, 3, pads=(2, 2, 2, 2), bias=True),
}


MODES = [(name, wp) for name in sorted(CASES) for wp in (False, True)]  # every case, both


@pytest.mark.parametrize(("name", "weight_port"), MODES,
                         ids=[f"{n}-{'wport' if wp else '1port'}" for n, wp in MODES])
def test_nmu_against_the_executor(unit, wunit, name, weight_port):
    rng = np.random.default_rng(sorted(CASES).index(name) + 1)
    case = CASES[name](rng)
    mem = bytearray(case.l1_before.tobytes())
    denials = {}
    done, counters = run_nmu(wunit if weight_port else unit, case.regs, case.entry, mem,
                             random.Random(name), denials=denials)
    assert done == (0, 0)
    _compare(mem, case.l1_after, name)
    assert counters["macs"] == case.macs
    # every denied cycle counted once, the last one too (the counters count a cycle late)
    assert (counters["stall_read"], counters["stall_write"]) == (denials["read"],
                                                                 denials["write"])
    if case.macs >= 200:  # the random denial bit
        assert counters["stall_read"] > 0 and counters["stall_write"] > 0
    # the model too
    model_mem = case.l1_before.copy()
    nmu_model(case.regs, case.entry, model_mem, GEOM)
    _compare(model_mem, case.l1_after, f"{name} (model)")


@pytest.mark.parametrize(("kh", "kw", "cin", "cout"), [
    (43, 3, 8, 3),          # 129 taps, one row each: more than the buffer's 128 alone
    (3, 1, 8 * 43, 3),      # 3 taps x 43 rows = 129: only the product is too many
    (1, 1, 8 * 129, 3),     # 129 rows of one tap
    (65535, 65535, 8, 3),   # taps near 2**32
    (1, 1, 8, 65),          # one channel more than the table holds
])
def test_size_refusals_at_the_boundary(dut, kh, kw, cin, cout):
    """The staged size check against the model's ``check_geometry``, one past each
    limit (the accepted side: ``test_size_accepted_at_the_boundary``)."""
    rng = np.random.default_rng(43)
    case = gemm_case(rng, 2, 4, 3)
    task = replace(decode_task(case.regs), kh=kh, kw=kw, cin=cin, cout=cout)
    with pytest.raises(NmuUnsupported) as info:
        check_geometry(task, GEOM, cout)
    assert info.value.cause == Cause.SIZE
    mem = bytearray(case.l1_before.tobytes())
    assert run_nmu(dut, task, case.entry, mem, random.Random(5))[0] == (1, Cause.SIZE)
    assert mem == bytearray(case.l1_before.tobytes())


@pytest.mark.parametrize(("kh", "kw", "cin"), [(2, 2, 256), (16, 8, 8)])
def test_size_accepted_at_the_boundary(unit, kh, kw, cin):
    """Convolutions whose weights fill the buffer's 128 rows exactly (4 taps x 32 rows;
    128 taps x 1 row) run and equal the executor."""
    rng = np.random.default_rng(44)
    case = conv_case(rng, 1, kh, kw, cin, kh, kw, 3, bias=True)
    check_geometry(decode_task(case.regs), GEOM, 3)   # the model accepts it: no raise
    mem = bytearray(case.l1_before.tobytes())
    done, _ = run_nmu(unit, case.regs, case.entry, mem, random.Random(6))
    assert done == (0, 0)
    _compare(mem, case.l1_after, f"conv {kh}x{kw}x{cin}")


def test_raw_i32_output(dut):
    rng = np.random.default_rng(40)
    case = conv_case(rng, 1, 4, 5, 11, 2, 2, 9, pads=(1, 0, 0, 1), bias=True)
    regs = dict(case.regs)
    y = 3  # X, W, B, then Y
    regs[REGS.index(f"OP{y}_ELEM")] = ELEM_TYPES.index("i32")
    task = decode_task(regs)
    entry = RequantEntry(case.entry.x_zero_point, 0, -(1 << 31), (1 << 31) - 1, (), ())
    # the output region grows to 4 bytes per element: keep it inside L1, away from the rest
    task = replace(task, y_addr=40000)
    model_mem = case.l1_before.copy()
    regs[REGS.index(f"OP{y}_ADDR_LO")] = 40000
    nmu_model(regs, entry, model_mem, GEOM)
    mem = bytearray(case.l1_before.tobytes())
    done, _ = run_nmu(dut, task, entry, mem, random.Random(4))
    assert done == (0, 0)
    _compare(mem, model_mem, "raw i32")
    # numpy: sum (x - zx) * w + bias
    x = np.frombuffer(bytes(mem[task.x_addr:task.x_addr + 4 * 5 * 11]), np.int8)
    x = x.reshape(1, 4, 5, 11).astype(np.int64) - entry.x_zero_point
    w = np.frombuffer(bytes(mem[task.w_addr:task.w_addr + 2 * 2 * 11 * 9]), np.int8)
    w = w.reshape(2, 2, 11, 9).astype(np.int64)
    b = np.frombuffer(bytes(mem[task.b_addr:task.b_addr + 36]), "<i4").astype(np.int64)
    xp = np.zeros((1, 5, 6, 11), np.int64)
    xp[:, 1:5, 0:5, :] = x
    want = np.zeros((1, task.oh, task.ow, 9), np.int64) + b
    for i in range(2):
        for j in range(2):
            want += np.einsum("nhwc,cf->nhwf", xp[:, i:i + task.oh, j:j + task.ow, :], w[i, j])
    got = np.frombuffer(bytes(mem[40000:40000 + want.size * 4]), "<i4").reshape(want.shape)
    np.testing.assert_array_equal(got, want)


def test_refusals(dut, unit):
    rng = np.random.default_rng(41)
    case = gemm_case(rng, 2, 4, 3)
    task = decode_task(case.regs)
    mem = bytearray(case.l1_before.tobytes())
    regs = dict(case.regs)
    regs[REGS.index("OP0_STRIDE1")] = 2  # A not contiguous along K
    assert run_nmu(unit, regs, case.entry, mem, random.Random(3))[0] == (1, Cause.LAYOUT)
    entry = replace(case.entry, multipliers=case.entry.multipliers[:2],
                    shifts=case.entry.shifts[:2])
    assert run_nmu(dut, task, entry, mem, random.Random(1))[0] == (1, Cause.REQUANT)
    # more records than the channel table has rows for: every word is still read (the
    # unit finishes, no wedge), the rows past the table are not written, the task refused
    n = GEOM.channels + GEOM.cols + 3
    entry = replace(case.entry, multipliers=[1 << 30] * n, shifts=[31] * n)
    assert run_nmu(dut, task, entry, mem, random.Random(4))[0] == (1, Cause.REQUANT)
    big = replace(task, cin=GEOM.wrows * GEOM.lanes + 1)
    assert run_nmu(dut, big, case.entry, mem, random.Random(2))[0] == (1, Cause.SIZE)
    _compare(mem, case.l1_before, "refused tasks write nothing")


@pytest.mark.parametrize("seed", range(6))
def test_random_programs(unit, wunit, seed):
    """Random conv2d / gemm geometries (odd sizes, pads, strides, dilations, bias or not,
    i8 or i16 out, per-tensor or per-channel weights), one tenth of the grants denied;
    seeds 4 and 5 on the unit with the weight port."""
    rng = np.random.default_rng([77, seed])
    if seed % 2:
        m, k, n = (int(v) for v in rng.integers(1, 20, 3))
        bias = bool(rng.integers(2))  # i16 outputs only come with a bias (MAY variant)
        case = gemm_case(rng, m, k, n, bias=bias,
                         out_elem="i16" if bias and rng.integers(2) else "i8",
                         per_channel=bool(rng.integers(2)))
    else:
        while True:
            kh, kw = (int(v) for v in rng.integers(1, 4, 2))
            st = tuple(int(v) for v in rng.integers(1, 3, 2))
            dl = tuple(int(v) for v in rng.integers(1, 3, 2))
            pads = tuple(int(v) for v in rng.integers(0, 3, 4))
            b, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 8)), int(rng.integers(1, 8))
            cin, cout = int(rng.integers(1, 20)), int(rng.integers(1, 20))
            try:
                bias = bool(rng.integers(2))
                case = conv_case(rng, b, h, w, cin, kh, kw, cout, pads=pads, strides=st,
                                 dils=dl, bias=bias, out_elem="i16" if bias and
                                 rng.integers(2) else "i8", per_channel=bool(rng.integers(2)))
                break
            except ValueError:
                continue
    mem = bytearray(case.l1_before.tobytes())
    done, counters = run_nmu(wunit if seed >= 4 else unit, case.regs, case.entry, mem,
                             random.Random(seed), deny=0.1)
    assert done == (0, 0)
    _compare(mem, case.l1_after, case.text)
    assert counters["macs"] == case.macs


@pytest.mark.parametrize("weight_port", [False, True], ids=["1port", "wport"])
def test_sixteen_lanes(weight_port):
    """The sim engine's geometry: 16-byte L1 word, int8_macs = 256 (a 16 x 16 array); the
    weight-port unit on the gemm only."""
    geom = NmuGeometry(lanes=16, cols=16, wrows=64, channels=64)
    unit16 = NmuUnit(geometry=geom, depth=L1_BYTES // 16, weight_port=weight_port)
    rng = np.random.default_rng(16)
    cases = [gemm_case(rng, 5, 37, 21, bias=True, macs=256, word=16)]
    if not weight_port:
        cases.append(conv_case(rng, 1, 5, 4, 19, 3, 2, 18, pads=(1, 1, 0, 0), strides=(1, 2),
                               bias=True, macs=256, word=16))
    for case in cases:
        mem = bytearray(case.l1_before.tobytes())
        done, counters = run_nmu(unit16, case.regs, case.entry, mem, random.Random(16))
        assert done == (0, 0)
        _compare(mem, case.l1_after, case.text)
        assert counters["macs"] == case.macs


def test_weight_port_overlaps_the_weight_loads(unit, wunit):
    """A gemm whose tiles stream longer (M * K / lanes cycles) than their weights load (K
    rows + the bias words): with the weight port only the first tile's load keeps the array
    idle; the one-port unit pays every tile's. L1 never denied, aligned operands."""
    m, k, n = 16, 24, 32
    case = gemm_case(np.random.default_rng(9), m, k, n, bias=True, aligned=True)
    tiles = -(-n // GEOM.cols)
    load = k + GEOM.cols  # weight rows + bias words of one tile
    assert m * -(-k // GEOM.lanes) > load  # (the loads fit under the streaming)
    got = {}
    for name, dut in (("1port", unit), ("wport", wunit)):
        mem = bytearray(case.l1_before.tobytes())
        done, got[name] = run_nmu(dut, case.regs, case.entry, mem, random.Random(0), deny=0)
        assert done == (0, 0)
        _compare(mem, case.l1_after, name)
        assert got[name]["macs"] == case.macs
    one, two = got["1port"], got["wport"]
    assert one["load"] >= tiles * load
    # the first tile, plus the latency of the reader (8 cycles here: 7 before its words
    # waited a cycle in the queue's registers) and of the weight slice (1)
    reader, wslice = 8, 1
    assert load <= two["load"] <= load + reader + wslice
    assert two["busy"] <= one["busy"] - (tiles - 1) * load


@pytest.mark.parametrize("batch", [None, ((2,), (2,))])
def test_row_ok_is_rows_done_above_tile(wunit, batch):
    """The weight-port unit's ``row_ok`` register equals ``rows_done > tile`` in every
    cycle (it is set from the next cycle's values; A_START waits on it). The entry comes
    slowly (a word in about every 8th cycle), so that tiles wait for their table rows; a
    batched matmul takes the tile back to 0 at each product."""
    case = gemm_case(np.random.default_rng(5), 8, 16, 32, bias=True, batch=batch)
    seen = {"waited": 0, "cycles": 0}

    def watch(ctx):
        flag, rows_done, tile = (ctx.get(s) for s in wunit.core.row_ok_probe)
        assert flag == (rows_done > tile), (seen["cycles"], flag, rows_done, tile)
        seen["cycles"] += 1
        seen["waited"] += rows_done <= tile and rows_done > 0

    mem = bytearray(case.l1_before.tobytes())
    done, _ = run_nmu(wunit, case.regs, case.entry, mem, random.Random(1), deny=0.2,
                      rq_rate=0.12, watch=watch)
    assert done == (0, 0)
    _compare(mem, case.l1_after, "wport")
    assert seen["waited"] > 0  # (some tile's row came after the tile was reached)
