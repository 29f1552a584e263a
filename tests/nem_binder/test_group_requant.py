"""The group requantisation entry (task binary 1.4): int4 weights quantised per group along
a reduction axis, bound, read back, refused when broken, and refused by the NMU.

The entry's bytes are worked out by hand; the executor runs of such tasks (text and binary
against a Python-integer reference) are in ``tests/nem_executor/test_int4_groups.py``.
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import numpy as np
import pytest
from amaranth.sim import Simulator

import npu
from nem.binder import bind, plan_from_binary
from nem.checker import check_text
from nem.executor import execute
from nem.taskformat import (
    GROUP_REQUANT_ENTRY,
    GROUP_REQUANT_GROUP,
    REGISTER_MAPS,
    GroupRequantEntry,
    TaskFormatError,
    Unit,
    decode,
    decode_group_requant,
    encode,
    encode_group_requant,
)
from npu.nmu.agu import task_fields_layout
from npu.nmu.model import Cause, NmuUnsupported, decode_task
from npu.nmu.regs import NmuRegisters

PROGRAMS = Path(__file__).resolve().parents[1] / "nem_executor" / "programs"
NMU = REGISTER_MAPS[Unit.NMU]

GEMM_I4 = """device "ops_device.nem"
buffer A : L1 (size=64)
buffer B : L1 (size=64)
buffer Y : L1 (size=64)
let a = region(A, 0, 8) elem=i8, shape=[2, 4], layout=MK,
    quant=per_tensor(scale=0.5, zero_point=-1)
let b = region(B, 0, 4) elem=i4, shape=[4, 2], layout=KN,
    quant=per_group(axis=0, group_size=3, scales=[0.25, 0.125], zero_points=[1, -2])
let y = region(Y, 0, 4) elem=i8, shape=[2, 2], layout=MN,
    quant=per_tensor(scale=1.0, zero_point=3)
t = gemm.async in a, b out y accum_type=i32
wait(t)
"""

# x * w / y: group 0 0.5 * 0.25 = 0.125 = 0.5 * 2**-2, the largest: m = 0.5 * 2**31 = 2**30,
# t = 31 - (-2) = 33; group 1 0.0625 * 2**33 = 2**29. Input zero point -1, output zero
# point 3, i8 clamp, 2 groups, axis 0, 3 weights (rows of B) per group.
HEAD = struct.pack("<iiiiIiiI", -1, 3, -128, 127, 2, 33, 0, 3)
GROUPS = struct.pack("<ii", 1 << 30, 1) + struct.pack("<ii", 1 << 29, -2)


def _bound():
    result = check_text(GEMM_I4, file="g.nem", base_dir=str(PROGRAMS))
    assert result.ok, [str(d) for d in result.diagnostics]
    program = bind(result)
    return result, program, dict(program.tasks[0].writes)[NMU.index("REQUANT")]


def test_group_entry_by_hand():
    assert GROUP_REQUANT_ENTRY.size == 32 and GROUP_REQUANT_GROUP.size == 8
    result, program, at = _bound()
    assert program.version == (1, 4)
    assert program.data[at : at + 48] == HEAD + GROUPS
    entry = decode_group_requant(program.data, at)
    assert entry == GroupRequantEntry(-1, 3, -128, 127, 33, 0, 3, (1 << 30, 1 << 29), (1, -2))
    assert encode_group_requant(entry) == HEAD + GROUPS
    # The binary runs in the executor's front-end to the same bytes as the text. The i4
    # bytes hold B = [[1, -2], [7, -8], [0, 3], [-1, 5]] (low nibble first): 0xE1, 0x87,
    # 0x30, 0x5F.
    initial = {"A": np.array([1, -1, 5, 0, 127, -128, 0, 2], np.int8).view(np.uint8),
               "B": np.array([0xE1, 0x87, 0x30, 0x5F], np.uint8)}
    want = execute(result.plan, result.device, initial)
    got = execute(plan_from_binary(decode(encode(program)), result.device), result.device,
                  initial, in_order=True)
    y = got.memory.buffer("Y")[:4].view(np.int8)
    np.testing.assert_array_equal(y, want.memory.buffer("Y")[:4].view(np.int8))
    # By hand: x - z_x = [[2, 0, 6, 1], [128, -127, 1, 3]]; group 0 (rows 0-2 of B minus 1)
    # [[0, -3], [6, -9], [-1, 2]], group 1 (row 3 plus 2) [1, 7].
    # p / 2**33 = acc_0 * 0.125 + acc_1 * 0.0625 (exact here), rounded half up, plus 3.
    # Row 0: acc_0 = [0 + 0 - 6, -6 + 0 + 12] = [-6, 6], acc_1 = [1, 7]:
    # [-0.75 + 0.0625, 0.75 + 0.4375] = [-0.6875, 1.1875] -> [-1, 1] -> [2, 4].
    # Row 1: acc_0 = [0 - 762 - 1, -384 + 1143 + 2] = [-763, 761], acc_1 = [3, 21]:
    # [-95.375 + 0.1875, 95.125 + 1.3125] = [-95.1875, 96.4375] -> [-95, 96] -> [-92, 99].
    np.testing.assert_array_equal(y, [2, 4, -92, 99])


def test_entry_errors_name_the_offset():
    entry = decode_group_requant(HEAD + GROUPS, 0)
    with pytest.raises(TaskFormatError, match="offset 0: a group requantisation entry of 2 "
                                              "groups does not fit in the 40-byte"):
        decode_group_requant((HEAD + GROUPS)[:40], 0)
    with pytest.raises(TaskFormatError, match="offset 4: a group requantisation entry starts"):
        decode_group_requant(bytes(4) + HEAD + GROUPS, 4)
    with pytest.raises(TaskFormatError, match="of 0 groups"):
        decode_group_requant(HEAD[:16] + bytes(16), 0)
    with pytest.raises(TaskFormatError, match="1 multipliers, 2 weight zero points"):
        encode_group_requant(dataclasses.replace(entry, multipliers=(1,)))
    with pytest.raises(TaskFormatError, match="does not fit its field"):
        encode_group_requant(dataclasses.replace(entry, multipliers=(1 << 31, 1)))


def test_front_end_refuses_a_wrong_entry_and_an_older_version():
    result, program, at = _bound()
    data = bytearray(program.data)
    data[at + 32] ^= 1  # group 0's multiplier
    with pytest.raises(TaskFormatError, match=r"task 0: the REQUANT entry .* is not what"):
        plan_from_binary(dataclasses.replace(program, data=bytes(data)), result.device)
    old = decode(encode(dataclasses.replace(program, version=(1, 3))))
    with pytest.raises(TaskFormatError, match=r"task 0: gemm: an i4 weight quantised per group "
                       r"along a reduction axis needs a group requantisation entry \(task "
                       r"binary 1\.4\); this binary is 1\.3"):
        plan_from_binary(old, result.device)


def test_older_binaries_without_groups_still_read():
    text = GEMM_I4.replace(
        "quant=per_group(axis=0, group_size=3, scales=[0.25, 0.125], zero_points=[1, -2])",
        "quant=per_tensor(scale=0.25, zero_point=0)",
    )
    result = check_text(text, file="g.nem", base_dir=str(PROGRAMS))
    old = decode(encode(dataclasses.replace(bind(result), version=(1, 3))))
    assert old.version == (1, 3)
    initial = {"A": np.arange(8, dtype=np.uint8), "B": np.array([0xE1, 0x87, 0x30, 0x5F],
                                                               np.uint8)}
    want = execute(result.plan, result.device, initial).memory.buffer("Y")
    got = execute(plan_from_binary(old, result.device), result.device, initial, in_order=True)
    np.testing.assert_array_equal(got.memory.buffer("Y"), want)


def _rtl_cause(regs):
    out = {}
    dut = NmuRegisters()

    async def bench(ctx):
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        ctx.set(dut.write.valid, 1)
        for index, value in regs.items():
            ctx.set(dut.write.payload, {"index": index, "value": value})
            await ctx.tick()
        ctx.set(dut.write.valid, 0)
        out["task"] = ctx.get(dut.task.as_value())

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return (out["task"] >> task_fields_layout()["cause"].offset) & 0xF


def test_the_nmu_refuses_int4_weights_as_a_type():
    # The NMU's datapath is i8 x i8: the model and the register decode of the RTL both
    # refuse the bound int4 task with cause TYPE (the engine ends the run in UNIT_ERROR
    # with that cause) rather than reading the packed nibbles as bytes.
    _, program, _ = _bound()
    regs = dict(program.tasks[0].writes)
    with pytest.raises(NmuUnsupported, match=r"element types \['i8', 'i4', 'i8'\]") as err:
        decode_task(regs)
    assert err.value.cause == Cause.TYPE
    assert _rtl_cause(regs) == Cause.TYPE


@pytest.mark.parametrize("device", ["engine_small", "engine_sim"])
def test_the_engine_devices_do_not_offer_int4(device):
    # The first guard before the RTL: the engine's devices list no gemm.int4 / conv2d.int4
    # variant, so an int4 program for them fails the check, naming the variant it needs.
    # the devices of the npu package (a path from this file would miss them in the copy
    # of tests/ that mutation testing runs)
    devices = Path(npu.__file__).resolve().parent / "devices"
    text = GEMM_I4.replace('device "ops_device.nem"', f'device "{device}.nem"')
    (d,) = check_text(text, file="g.nem", base_dir=str(devices)).diagnostics
    assert d.code == "E709" and "gemm matches gemm.int4.no_bias, which device" in d.message


def test_dis_decodes_a_group_entry_as_one(tmp_path, capsys):
    # the task's weight operand is i4 per group, so REQUANT names HEAD + GROUPS above
    from npu.tools.cli import main

    _, program, _ = _bound()
    path = tmp_path / "g.bin"
    path.write_bytes(encode(program))
    assert main(["nem", "dis", str(path)]) == 0
    out = capsys.readouterr().out
    assert ("x zero point -1, y zero point 3, clamp [-128, 127], 2 group(s) of 3 along "
            f"axis 0, shift 33, first multiplier {1 << 30}, weight zero points [1, -2]") in out
