"""The cycle model's datapath mode (``nem.cycles``: a device that sets the NMU's or the
CSTL's ``lanes``): every expected count below is worked out by hand from the formulas in
the module's docstring, on a device with a 64-MAC NMU of 8 lanes (so 8 columns) and an
8-byte CSTL; without ``lanes`` the same tasks keep the peak-rate model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nem.checker import check_text
from nem.executor import execute

PROGRAMS = Path(__file__).with_name("programs")

DATAPATH = """        NMU {
            int8_macs = 64
            latency_cycles = 10
            lanes = 8
        }
        CSTL {
            elems_per_cycle = 8
            latency_cycles = 3
            lanes = 8
            table_cycles = 70
            entry_cycles = 20
            window_cycles = 2
            average_cycles = 9
        }
"""
PEAK = """        NMU {
            int8_macs = 64
            latency_cycles = 10
        }
        CSTL {
            elems_per_cycle = 8
            latency_cycles = 3
        }
"""


def _device(tmp_path, units):
    base = (PROGRAMS / "exec_device.nem").read_text()
    old = "        NMU {\n            int8_macs = 256\n            fp16_macs = 64\n        }\n"
    assert old in base
    path = tmp_path / "dev.nem"
    path.write_text(base.replace(old, units))
    return path


def _cycles(tmp_path, units, decls, task):
    dev = _device(tmp_path, units)
    text = f'device "{dev.name}"\n{decls}t = {task}\nwait(t)\n'
    result = check_text(text, file="d.nem", base_dir=str(tmp_path))
    assert result.ok, [str(d) for d in result.diagnostics]
    (record,) = execute(result.plan, result.device, {}).records
    return record.end - record.start


Q = "quant=per_tensor(scale=0.5, zero_point=1)"
WQ = "quant=per_tensor(scale=0.25, zero_point=0)"
GEMM = f"""buffer A : L1 (size=384)
buffer B : L1 (size=576)
buffer Y : L1 (size=384)
let a = region(A, 0, 384) elem=i8, shape=[16, 24], layout=MK, {Q}
let b = region(B, 0, 576) elem=i8, shape=[24, 24], layout=KN, {WQ}
let y = region(Y, 0, 384) elem=i8, shape=[16, 24], layout=MN, {Q}
"""
GEMM12 = f"""buffer A : L1 (size=192)
buffer B : L1 (size=96)
buffer Y : L1 (size=128)
let a = region(A, 0, 192) elem=i8, shape=[16, 12], layout=MK, {Q}
let b = region(B, 0, 96) elem=i8, shape=[12, 8], layout=KN, {WQ}
let y = region(Y, 0, 128) elem=i8, shape=[16, 8], layout=MN, {Q}
"""


def _conv(offset):
    return f"""buffer X : L1 (size=300)
buffer W : L1 (size=576)
buffer Y : L1 (size=288)
let x = region(X, {offset}, 288) elem=i8, shape=[1, 6, 6, 8], layout=NHWC, {Q}
let w = region(W, 0, 576) elem=i8, shape=[3, 3, 8, 8], layout=HWIO, {WQ}
let y = region(Y, 0, 288) elem=i8, shape=[1, 6, 6, 8], layout=NHWC, {Q}
"""


ACT = f"""buffer X : L1 (size=600)
buffer Y : L1 (size=600)
buffer P : L1 (size=150)
let x = region(X, 0, 600) elem=i8, shape=[1, 10, 10, 6], layout=NHWC, {Q}
let y = region(Y, 0, 600) elem=i8, shape=[1, 10, 10, 6], layout=NHWC,
    quant=per_tensor(scale=0.25, zero_point=-1)
let p = region(P, 0, 150) elem=i8, shape=[1, 5, 5, 6], layout=NHWC, {Q}
"""
POOL = "kernel_shape=[2, 2] strides=[2, 2] pads=[0, 0, 0, 0]"


CONV = "conv2d.async in x, w out y pads=[1, 1, 1, 1] strides=[1, 1] dilations=[1, 1] " \
    "accum_type=i32"


@pytest.mark.parametrize("decls, task, datapath, peak", [
    # 16 x 24 x 24 gemm: 3 tiles of 8 columns; a tile's load 24 weight rows + 8 bias = 32,
    # its activations 16 pixels x 1 tap x ceil(24 / 8) = 48 vectors; every row of A starts
    # at a multiple of 24 and every weight row of a tile at 24 k + 8 t: all on a word, so
    # no run lies across two words: 10 + 32 + 48 + 2 * max(48, 32). Peak: 9,216 MACs / 64.
    (GEMM, "gemm.async in a, b out y accum_type=i32", 10 + 32 + 48 + 2 * 48,
     10 + 16 * 24 * 24 // 64),
    # 16 x 12 x 8: one tile, load 12 + 8; rows of A at 12 m: the 8 odd rows start at byte 4
    # of a word, so their first 8 bytes lie across two words: 16 x 2 vectors + 8.
    (GEMM12, "gemm.async in a, b out y accum_type=i32", 10 + 20 + 32 + 8,
     10 + math.ceil(16 * 12 * 8 / 64)),
    # 3 x 3 conv, pads 1, on 6 x 6 x 8 -> 8: one tile, load 9 x 8 + 8 = 80, activations
    # 36 pixels x 9 taps x 1 vector = 324 (a padded tap too); all runs on a word.
    (_conv(0), CONV, 10 + 80 + 324, 10 + math.ceil(36 * 8 * 72 / 64)),
    # the same input 4 bytes into its buffer: every tap inside the input (16 per row and
    # column: 2 + 3 + 3 + 3 + 3 + 2, so 16 x 16 = 256) lies across two words.
    (_conv(4), CONV, 10 + 80 + 324 + 256, 10 + math.ceil(36 * 8 * 72 / 64)),
    # relu with another output scale: a table (70) and 600 bytes in words of 8 (75).
    (ACT, "relu.async in x out y", 3 + 70 + 75, 3 + 75),
    # add: an eltwise entry (20); 100 chunks of the innermost 6, each its 6 elements one a
    # cycle (eltwise_lanes unset: 1) and the read of its chunk of x.
    (ACT, "add.async in x, x out y", 3 + 20 + 100 * (6 + 1), 3 + 75),
    # 2 x 2 max pool, same quantisation (no table): 25 positions x 1 chunk of 6 channels,
    # 4 taps + 2 each. Peak: every tap of every output, 600 bytes / 8.
    (ACT, f"maxpool.async in x out p {POOL}", 3 + 25 * (4 + 2), 3 + 75),
    # the same as an average: + 9 per chunk.
    (ACT, f"avgpool.async in x out p {POOL}", 3 + 25 * (4 + 2 + 9), 3 + 75),
])  # fmt: skip
def test_datapath_cycles_by_hand(tmp_path, decls, task, datapath, peak):
    assert _cycles(tmp_path, DATAPATH, decls, task) == datapath
    assert _cycles(tmp_path, PEAK, decls, task) == peak


def test_tasks_off_the_int8_datapath_keep_the_peak_rate(tmp_path):
    # a cast to i32 is a table-less CSTL task: 2,400 output bytes in words of 8; an f32
    # relu is not on the int8 path at all (elements / elems_per_cycle, as before)
    decls = ACT + "buffer W : L1 (size=2400)\n" + \
        "let w = region(W, 0, 2400) elem=i32, shape=[1, 10, 10, 6], layout=NHWC\n"
    assert _cycles(tmp_path, DATAPATH, decls, "cast.async in x out w") == 3 + 300
    decls = "buffer F : L1 (size=2400)\nbuffer G : L1 (size=2400)\n" \
        "let f = region(F, 0, 2400) elem=f32, shape=[600], layout=C\n" \
        "let g = region(G, 0, 2400) elem=f32, shape=[600], layout=C\n"
    assert _cycles(tmp_path, DATAPATH, decls, "relu.async in f out g") == \
        _cycles(tmp_path, PEAK, decls, "relu.async in f out g")


SEQ = """        SEQ {
            max_active_tokens = 16
            issue_cycles = 5
            operand_cycles = 1
            start_cycles = 3
        }
"""
COPIES = """buffer S : L2 (size=192)
buffer D : L1 (size=192)
a = transfer.async(dst=region(D, 0, 64), src=region(S, 0, 64))
b = transfer.async(dst=region(D, 64, 64), src=region(S, 64, 64))
c = transfer.async(dst=region(D, 128, 64), src=region(S, 128, 64))
wait(a)
wait(b)
wait(c)
"""


@pytest.mark.parametrize("seq", [False, True])
def test_sequencer_decode_with_in_order_issue(tmp_path, seq):
    # three independent 64-byte copies on the device's two DMAs (latency 8 + 64 / 32 = 10
    # cycles each). Without the sequencer model: a and b start at 0, c at 10 when a DMA
    # frees: ends 10, 10, 20. With it (5 + 1 per operand + 3 before the first): a decoded
    # at 3 + 5 + 2 = 10, runs 10-20; b decoded from a's issue, 10 + 7 = 17, runs 17-27 on
    # the other DMA; c decoded at 17 + 7 = 24 (the first DMA free since 20), runs 24-34.
    base = (PROGRAMS / "exec_device.nem").read_text()
    old = "        SEQ {\n            max_active_tokens = 16\n        }\n"
    assert old in base
    dev = tmp_path / "dev.nem"
    dev.write_text(base.replace(old, SEQ) if seq else base)
    result = check_text(f'device "{dev.name}"\n{COPIES}', file="c.nem", base_dir=str(tmp_path))
    assert result.ok, [str(d) for d in result.diagnostics]
    run = execute(result.plan, result.device, {}, in_order=True)
    spans = [(r.start, r.end) for r in sorted(run.records, key=lambda r: r.index)]
    assert spans == ([(10, 20), (17, 27), (24, 34)] if seq else [(0, 10), (0, 10), (10, 20)])
    # out of order (NEM semantics, not a task binary) the sequencer is not modelled
    free = execute(result.plan, result.device, {})
    assert [(r.start, r.end) for r in sorted(free.records, key=lambda r: r.index)] == \
        [(0, 10), (0, 10), (10, 20)]


def test_a_cstl_keeps_the_table_it_read_last(tmp_path):
    # relu, sigmoid, relu, relu on one CSTL instance (every output scale differs from the
    # input's, so each reads a table): 3 + 70 + 75 for a table read, 3 + 75 without; the
    # second relu follows sigmoid's table (read again), the third the second relu's (kept)
    dev = _device(tmp_path, DATAPATH)
    tasks = [("a", "relu"), ("b", "sigmoid"), ("c", "relu"), ("d", "relu")]
    text = f'device "{dev.name}"\n{ACT}' + "".join(
        f"{name} = {op}.async in x out y @resource(CSTL[0])\nwait({name})\n"
        for name, op in tasks)
    result = check_text(text, file="k.nem", base_dir=str(tmp_path))
    assert result.ok, [str(d) for d in result.diagnostics]
    records = sorted(execute(result.plan, result.device, {}, in_order=True).records,
                     key=lambda r: r.index)
    assert {r.unit for r in records} == {"E0.CSTL[0]"}
    assert [r.end - r.start for r in records] == [148, 148, 148, 78]


@pytest.mark.parametrize(("alu", "per_chunk"), [(2, 3 + 1), (4, 2 + 1), (8, 1 + 1)])
def test_a_wider_eltwise_alu(tmp_path, alu, per_chunk):
    # the add above on an ALU of 2, 4 or 8 lanes: each chunk of 6 elements takes
    # ceil(6 / alu) cycles and the read of its chunk of x
    units = DATAPATH.replace("            average_cycles = 9\n",
                             f"            average_cycles = 9\n            eltwise_lanes = {alu}\n")
    assert units != DATAPATH
    assert _cycles(tmp_path, units, ACT, "add.async in x, x out y") == 3 + 20 + 100 * per_chunk


def test_an_eltwise_alu_pipeline_costs_its_depth_once(tmp_path):
    # the add above with a 12-stage ALU: its last chunk's results leave 12 cycles later,
    # once per task; other CSTL tasks are not affected
    units = DATAPATH.replace("            average_cycles = 9\n",
                             "            average_cycles = 9\n            eltwise_depth = 12\n")
    assert units != DATAPATH
    assert _cycles(tmp_path, units, ACT, "add.async in x, x out y") == 3 + 20 + 100 * 7 + 12
    assert _cycles(tmp_path, units, ACT, "relu.async in x out y") == 3 + 70 + 75
