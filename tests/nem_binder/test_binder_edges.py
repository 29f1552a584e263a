"""Edges of the binder (``nem.binder``), written from the survivors of its mutation run.

What the binder writes is read back with :func:`nem.taskformat.decode` and the register
maps (independent of the binder's encoding path) and compared with values worked out by
hand from the program text and ``docs/task-format.md``:

- placement and units: the engine and instance of every task on a two-engine device (round
  robin per unit type and engine, ``@resource``), the buffer table, the 32-bit DDR limit;
- ``compute_registers`` on hand-made tasks: 64-bit addresses split into ADDR_LO/ADDR_HI,
  explicit strides, rank and operand-count limits (at and one past the limit), the
  32-bit range of every register, untyped operands;
- the requantisation entry of an ``i32`` output without a descriptor, and the error of a
  missing descriptor;
- :func:`nem.binder.plan_from_binary`: the executor's task instances rebuilt from a binary
  equal hand-built ones (copy and compute), and broken records (levels, tokens, instances,
  operand counts, ranks, element codes, versions) are refused with located messages;
- :func:`nem.binder.bind`'s own refusals (invalid program, no device, allocation failure).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from nem.binder import (
    BindError,
    DataSection,
    bind,
    compute_registers,
    plan_from_binary,
)
from nem.checker import Region, check_text
from nem.diagnostics import Span
from nem.memory import allocate
from nem.registry import load_registry
from nem.taskformat import (
    ELEM_TYPES,
    NO_QUANT,
    OPCODES,
    REGISTER_MAPS,
    RequantEntry,
    TaskFormatError,
    Unit,
    decode,
    decode_requant,
    encode,
)
from nem.tree import Num, Quant

PROGRAMS = Path(__file__).resolve().parents[1] / "nem_executor" / "programs"
COMPUTE = REGISTER_MAPS[Unit.NMU]
COPY = REGISTER_MAPS[Unit.DMA]
BINARY = Span("<binary>", 0, 0)

# Two engines, three DMAs per engine (so that a round robin shows its order), small memories.
TWO_ENGINES = """include "exec_device.nem"

device two_npu extends exec_npu {
    topology {
        num_engines = 2
        l2_size_bytes = 65536
        device_units {
            sDMA = 1
        }
        per_engine {
            NMU = 1
            CSTL = 2
            DMA = 3
            l1_size_bytes = 65536
        }
    }
}
"""


@pytest.fixture(scope="module")
def devdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("dev")
    shutil.copy(PROGRAMS / "exec_device.nem", d / "exec_device.nem")
    (d / "two.nem").write_text(TWO_ENGINES)
    return d


def _check(text, base=PROGRAMS):
    result = check_text(text, file="p.nem", base_dir=str(base))
    assert result.ok, [str(d) for d in result.diagnostics]
    return result


def _named(task):
    """A task record's writes by register name (the map of its unit)."""
    regs = REGISTER_MAPS[task.unit]
    return {regs.registers[i].name: v for i, v in task.writes}


def _record(task, unit, named):
    """``task`` with its writes replaced by ``named`` (register name -> value)."""
    regs = REGISTER_MAPS[unit]
    writes = tuple((regs.index(n), v) for n, v in named.items())
    return dataclasses.replace(task, writes=writes)


def _with_task(program, k, task):
    tasks = list(program.tasks)
    tasks[k] = task
    return dataclasses.replace(program, tasks=tuple(tasks))


# --------------------------------------------------------------------------------------
# engines, instances, buffers

SPREAD = """device "two.nem"
buffer S : L2 (size=256)
buffer X : L1[1] (size=256)
buffer Y : L1[0] (size=256)
buffer D : DDR (size=64)
t0 = transfer.async(dst=region(X, 0, 64), src=region(S, 0, 64))
t1 = transfer.async(dst=region(X, 64, 64), src=region(S, 64, 64))
t2 = transfer.async(dst=region(Y, 0, 64), src=region(S, 128, 64))
t3 = transfer.async(dst=region(X, 128, 64), src=region(S, 128, 64))
t4 = transfer.async(dst=region(X, 192, 64), src=region(S, 192, 64))
t5 = transfer.async(dst=region(D, 0, 64), src=region(S, 0, 64), deps=[t0, t1, t2])
t6 = transfer.async(dst=region(Y, 64, 64), src=region(S, 64, 64)) @resource(DMA[2])
"""


def test_instances_go_round_robin_per_unit_and_engine(devdir):
    result = _check(SPREAD, devdir)
    program = decode(encode(bind(result)))
    # X lives in engine 1's L1, Y in engine 0's: the copies into X run on engine 1's DMAs
    # 0, 1, 2, 0 in turn; the copy into Y on engine 0's DMA 0 (a counter of its own); the
    # L2 -> DDR copy on the sDMA (engine field 0); t6 names DMA[2] with @resource
    got = [(t.unit, t.engine, t.instance) for t in program.tasks]
    assert got == [
        (Unit.DMA, 1, 0), (Unit.DMA, 1, 1), (Unit.DMA, 0, 0), (Unit.DMA, 1, 2),
        (Unit.DMA, 1, 0), (Unit.SDMA, 0, 0), (Unit.DMA, 0, 2),
    ]  # fmt: skip
    # buffers in declaration order, each aligned to 64 bytes from 0 in its own memory
    assert [(b.name, b.level, b.engine, b.align, b.address, b.size) for b in program.buffers] == [
        ("S", "L2", None, 64, 0, 256), ("X", "L1", 1, 64, 0, 256), ("Y", "L1", 0, 64, 0, 256),
        ("D", "DDR", None, 64, 0, 64),
    ]  # fmt: skip
    # t5 waits for t0, t1, t2 (three tokens), which signal one each
    assert [bin(t.signal).count("1") for t in program.tasks[:3]] == [1, 1, 1]
    assert program.tasks[5].wait == program.tasks[0].signal | program.tasks[1].signal | \
        program.tasks[2].signal
    assert program.data == b""


def test_copy_tasks_read_back_as_the_executor_sees_them(devdir):
    result = _check(SPREAD, devdir)
    plan = plan_from_binary(decode(encode(bind(result))), result.device)

    def span(buffer, level, engine, offset):
        # a 64-byte run: COUNT0 = 64, dimensions 1..3 unused (count 1, stride 0)
        return Region(None, buffer, level, engine, offset, 64, "u8", (1, 1, 1, 64), None,
                      (0, 0, 0, 1))

    want = [
        (span("S", "L2", None, 0), span("X", "L1", 1, 0), ("DMA", 0), 1, "task 0 (DMA[0])"),
        (span("S", "L2", None, 64), span("X", "L1", 1, 64), ("DMA", 1), 1, "task 1 (DMA[1])"),
        # Y is at address 0 of engine 0's L1, as X is of engine 1's: the engine tells them apart
        (span("S", "L2", None, 128), span("Y", "L1", 0, 0), ("DMA", 0), 0, "task 2 (DMA[0])"),
        (span("S", "L2", None, 128), span("X", "L1", 1, 128), ("DMA", 2), 1,
         "task 3 (DMA[2])"),
        (span("S", "L2", None, 192), span("X", "L1", 1, 192), ("DMA", 0), 1,
         "task 4 (DMA[0])"),
        # the sDMA belongs to no engine
        (span("S", "L2", None, 0), span("D", "DDR", None, 0), ("sDMA", 0), None,
         "task 5 (SDMA[0])"),
        (span("S", "L2", None, 64), span("Y", "L1", 0, 64), ("DMA", 2), 0, "task 6 (DMA[2])"),
    ]
    assert len(plan.tasks) == len(want)
    for k, (task, (src, dst, unit, engine, label)) in enumerate(zip(plan.tasks, want,
                                                                  strict=True)):
        # one node per task, in stream order (nem.hazards.Order numbers them as created)
        assert task == dataclasses.replace(
            task, index=k, node=k, kind="transfer", opcode="transfer", form="async",
            ins=(src,), outs=(dst,), attrs={}, decos=frozenset(), resource=unit,
            engine=engine, label=label, span=BINARY,
        )
        assert (task.index, task.node, task.kind, task.opcode, task.form) == (
            k, k, "transfer", "transfer", "async")
        assert (task.ins, task.outs, task.resource, task.engine, task.label) == (
            (src,), (dst,), unit, engine, label)
        assert task.attrs == {} and task.decos == frozenset() and task.span == BINARY
    # t5 after t0, t1 and t2 (through their tokens), the others unordered
    assert plan.order.preds[5] == (0, 1, 2)
    assert all(plan.order.preds[k] == () for k in (0, 1, 2, 3, 4, 6))
    assert plan.buffers["X"].engine == 1 and plan.buffers["S"].size == 256


def test_ddr_ends_at_the_32_bit_address_space():
    # D0 at 0 (64 bytes), D1 aligned to 64 after it: 64 + (2**32 - 64) = 2**32 exactly fits
    fits = """device "exec_device.nem"
buffer D0 : DDR (size=64)
buffer D1 : DDR (size=4294967232)
buffer S : L2 (size=64)
t = transfer.async(dst=region(S, 0, 64), src=region(D1, 4294967168, 64))
"""
    program = bind(_check(fits))
    assert [(b.address, b.size) for b in program.buffers[:2]] == [(0, 64), (64, 2**32 - 64)]
    # the copy reads the last 64 bytes of the address space: 64 + 4294967168 = 2**32 - 64
    assert _named(program.tasks[0])["SRC_LO"] == 2**32 - 64
    over = fits.replace("4294967232", "4294967233")
    with pytest.raises(BindError, match=r"^buffer D1: DDR bytes \[64, 4294967297\) lie past "
                       r"the engine's 32-bit address space \(4294967296 bytes\)$"):
        bind(_check(over))


def test_bind_refuses_invalid_programs_devices_and_allocations():
    result = check_text('device "exec_device.nem"\nt = transfer.async(dst=region(Q, 0, 4), '
                        "src=region(Q, 4, 4))\n", file="p.nem", base_dir=str(PROGRAMS))
    errors = [d for d in result.diagnostics if d.severity == "error"]
    assert errors
    with pytest.raises(BindError) as err:
        bind(result)
    assert str(err.value) == f"the program is not valid; first error: {errors[0]}"
    good = _check(SPREAD.replace('"two.nem"', '"exec_device.nem"').replace("L1[1]", "L1")
                  .replace("L1[0]", "L1").replace("DMA[2]", "DMA[1]"))
    with pytest.raises(BindError, match=r"^binding needs a concrete device \(with a "
                                        r"topology\)$"):
        bind(dataclasses.replace(good, device=None))
    plan = dataclasses.replace(good.plan, buffers={
        **good.plan.buffers, "S": dataclasses.replace(good.plan.buffers["S"], size=None)})
    with pytest.raises(BindError, match=r"^buffer S \(.*\) has no valid size$"):
        bind(dataclasses.replace(good, plan=plan))


# --------------------------------------------------------------------------------------
# compute_registers on hand-made tasks

RELU = """device "exec_device.nem"
buffer X : L1 (size=64)
buffer Y : L1 (size=64)
let x = region(X, 8, 6) elem=i8, shape=[2, 3], layout=MN,
    quant=per_tensor(scale=0.5, zero_point=3)
let y = region(Y, 16, 6) elem=i8, shape=[2, 3], layout=MN,
    quant=per_tensor(scale=0.25, zero_point=-2)
t = leaky_relu.async in x out y alpha=0.125
wait(t)
"""

GEMM = """device "exec_device.nem"
buffer A : L1 (size=64)
buffer B : L1 (size=64)
buffer Y : L1 (size=64)
let a = region(A, 0, 6) elem=i8, shape=[2, 3], layout=MK,
    quant=per_tensor(scale=0.5, zero_point=-1)
let b = region(B, 0, 12) elem=i8, shape=[3, 4], layout=KN,
    quant=per_tensor(scale=0.25, zero_point=0)
let y = region(Y, 0, 8) elem=i8, shape=[2, 4], layout=MN,
    quant=per_tensor(scale=1.0, zero_point=3)
t = gemm.async in a, b out y accum_type=i32
wait(t)
"""


def _task(text):
    result = _check(text)
    places, _ = allocate(result.plan.buffers, result.device)
    return result.plan.tasks[0], places


def _regs(task, places, data=None):
    return compute_registers(task, places, data or DataSection(), load_registry(), {})


def test_operand_addresses_above_4_gib_split_into_two_registers():
    task, places = _task(RELU)
    high = 3 * 2**32 + 0x100  # X at 0x3_0000_0100; x starts 8 bytes in
    places = {**places, "X": dataclasses.replace(places["X"], address=high)}
    regs = dict(_regs(task, places))
    assert (regs["OP0_ADDR_LO"], regs["OP0_ADDR_HI"]) == (0x108, 3)
    # Y keeps its placement: 16 bytes into Y, below 4 GiB
    assert (regs["OP1_ADDR_LO"], regs["OP1_ADDR_HI"]) == (places["Y"].address + 16, 0)
    # 2**64 does not fit ADDR_HI's 32 bits
    places["X"] = dataclasses.replace(places["X"], address=2**64 - 8)
    with pytest.raises(BindError, match=r"^t \(line 8\): register OP0_ADDR_HI = 4294967296 "
                                        r"does not fit in 32 bits$"):
        _regs(task, places)


def test_every_register_value_must_fit_32_bits():
    task, places = _task(RELU)
    x = task.ins[0]
    # BYTES is the region's extent: 2**32 - 1 is the largest that fits
    regs = dict(_regs(dataclasses.replace(task, ins=(dataclasses.replace(x, extent=2**32 - 1),)),
                      places))
    assert regs["OP0_BYTES"] == 2**32 - 1
    with pytest.raises(BindError, match=r"register OP0_BYTES = 4294967296 does not fit"):
        _regs(dataclasses.replace(task, ins=(dataclasses.replace(x, extent=2**32),)), places)
    # a negative element stride has no 32-bit unsigned code
    with pytest.raises(BindError, match=r"^t \(line 8\): register OP0_STRIDE1 = -1 does not "
                                        r"fit in 32 bits$"):
        _regs(dataclasses.replace(task, ins=(dataclasses.replace(x, strides=(3, -1)),)), places)


def test_explicit_strides_are_written_dense_ones_derived():
    task, places = _task(RELU)
    x = task.ins[0]
    # x as the transpose of a 3 x 2 array: element (i, j) at i + 2 j
    regs = dict(_regs(dataclasses.replace(task, ins=(dataclasses.replace(x, strides=(1, 2)),)),
                      places))
    assert [regs[f"OP0_{f}"] for f in ("RANK", "DIM0", "STRIDE0", "DIM1", "STRIDE1")] == \
        [2, 2, 1, 3, 2]
    # no strides: row-major over [2, 3] gives [3, 1]
    regs = dict(_regs(task, places))
    assert [regs[f"OP1_{f}"] for f in ("RANK", "DIM0", "STRIDE0", "DIM1", "STRIDE1")] == \
        [2, 2, 3, 3, 1]
    assert "OP0_DIM2" not in regs and "OP0_STRIDE2" not in regs


def test_rank_and_operand_limits():
    task, places = _task(RELU)
    x, y = task.ins[0], task.outs[0]
    # rank 6 (MAX_RANK) fits: DIM5 / STRIDE5 are the last descriptor registers
    six = dataclasses.replace(x, shape=(1, 1, 1, 1, 2, 3))
    regs = dict(_regs(dataclasses.replace(task, ins=(six,)), places))
    assert regs["OP0_RANK"] == 6
    assert [regs[f"OP0_STRIDE{d}"] for d in range(6)] == [6, 6, 6, 6, 3, 1]
    assert [regs[f"OP0_DIM{d}"] for d in range(6)] == [1, 1, 1, 1, 2, 3]
    seven = dataclasses.replace(x, shape=(1, 1, 1, 1, 1, 2, 3))
    with pytest.raises(BindError, match=r"^t \(line 8\): operand x has 7 dimensions, the "
                                        r"descriptors hold 6$"):
        _regs(dataclasses.replace(task, ins=(seven,)), places)
    # an operand with an element type but no shape is not a tensor
    with pytest.raises(BindError, match=r"^t \(line 8\): operand x has no element type and "
                                        r"shape$"):
        _regs(dataclasses.replace(task, ins=(dataclasses.replace(x, shape=None),)), places)
    # 8 operands (MAX_OPERANDS) fit: an f16 add (no table, no requantisation) with 7 inputs
    f16 = dataclasses.replace(x, elem="f16", quant=None, extent=12)
    out = dataclasses.replace(y, elem="f16", quant=None, extent=12)
    wide = dataclasses.replace(task, opcode="add", ins=(f16,) * 7, outs=(out,), attrs={})
    regs = _regs(wide, places)
    named = dict(regs)
    assert (named["OPCODE"], named["NIN"], named["NOUT"]) == (OPCODES.index("add"), 7, 1)
    assert named["OP7_ADDR_LO"] == places["Y"].address + 16
    assert named["OP6_ADDR_LO"] == places["X"].address + 8
    assert named["OP7_ELEM"] == ELEM_TYPES.index("f16") and named["OP7_QUANT"] == NO_QUANT
    assert "REQUANT" not in named and "TABLE" not in named
    with pytest.raises(BindError, match=r"^t \(line 8\): 9 operands, the units take 8$"):
        _regs(dataclasses.replace(wide, ins=(f16,) * 8), places)


def test_raw_accumulator_requantisation_entry():
    # an i32 output without a descriptor keeps the raw accumulators: no channels, output
    # zero point 0 and the whole i32 range as clamp; the input zero point (-1) still applies
    task, places = _task(GEMM)
    y = dataclasses.replace(task.outs[0], elem="i32", quant=None, extent=32)
    data = DataSection()
    regs = dict(_regs(dataclasses.replace(task, outs=(y,)), places, data))
    entry = decode_requant(bytes(data.blob), regs["REQUANT"])
    assert entry == RequantEntry(-1, 0, -(2**31), 2**31 - 1, (), ())
    assert "TABLE" not in regs
    # an i8 output without one cannot be requantised
    y = dataclasses.replace(task.outs[0], quant=None)
    with pytest.raises(BindError, match=r"^t \(line 11\): gemm: an integer gemm with a i8 output "
                                        r"needs quantization descriptors on X, W and Y; "
                                        r"missing on y$"):
        _regs(dataclasses.replace(task, outs=(y,)), places)


# --------------------------------------------------------------------------------------
# compute tasks read back from the binary

GEMM_PC = GEMM.replace(
    "quant=per_tensor(scale=0.25, zero_point=0)",
    "quant=per_channel(axis=1, scales=[0.25, 0.5, 0.125, 1.0], zero_points=[0, 0, 0, 0])",
)


def _num(v):
    return Num(v, repr(v))


def _bound(text, base=PROGRAMS):
    result = _check(text, base)
    return result, decode(encode(bind(result)))


def test_compute_task_reads_back_with_its_regions_and_descriptors():
    result, program = _bound(RELU)
    (task,) = plan_from_binary(program, result.device).tasks
    # X at 0 and Y at 64 of engine 0's L1 (64-byte alignment); the descriptors come back as
    # literals spelt by repr
    x = Region(None, "X", "L1", 0, 8, 6, "i8", (2, 3), None, (3, 1),
               Quant("per_tensor", _num(0.5), _num(3)))
    y = Region(None, "Y", "L1", 0, 16, 6, "i8", (2, 3), None, (3, 1),
               Quant("per_tensor", _num(0.25), _num(-2)))
    assert (task.index, task.node, task.kind, task.opcode, task.form) == (
        0, 0, "compute", "leaky_relu", "async")
    assert task.ins == (x,) and task.outs == (y,)
    assert task.attrs == result.plan.tasks[0].attrs and task.attrs["alpha"] == 0.125
    assert (task.resource, task.engine, task.label) == (
        ("CSTL", 0), 0, "task 0 (leaky_relu on CSTL[0])")
    assert task.decos == frozenset() and task.span == BINARY
    # the per-channel weight of a gemm: axis, scales and zero points as literals
    result, program = _bound(GEMM_PC)
    (task,) = plan_from_binary(program, result.device).tasks
    assert [r.buffer for r in (*task.ins, *task.outs)] == ["A", "B", "Y"]
    assert [r.offset for r in (*task.ins, *task.outs)] == [0, 0, 0]
    assert task.ins[1].quant == Quant(
        "per_channel", axis=_num(1), scales=tuple(map(_num, (0.25, 0.5, 0.125, 1.0))),
        zero_points=(_num(0),) * 4)
    assert task.ins[1].quant.group_size is None
    assert task.outs[0].quant == Quant("per_tensor", _num(1.0), _num(3))
    assert (task.kind, task.opcode, task.resource, task.label) == (
        "compute", "gemm", ("NMU", 0), "task 0 (gemm on NMU[0])")
    assert task.attrs == result.plan.tasks[0].attrs


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


def test_per_group_descriptor_reads_back():
    result, program = _bound(GEMM_I4)
    (task,) = plan_from_binary(program, result.device).tasks
    assert task.ins[1].quant == Quant(
        "per_group", axis=_num(0), group_size=_num(3), scales=(_num(0.25), _num(0.125)),
        zero_points=(_num(1), _num(-2)))
    # B holds 4 x 2 i4 elements: 8 nibbles, 4 bytes
    assert (task.ins[1].elem, task.ins[1].extent, task.ins[1].shape) == ("i4", 4, (4, 2))


def _split(named):
    """A compute record's registers as (head, [operand fields...], tail)."""
    head = {n: v for n, v in named.items() if not n.startswith("OP") or n == "OPCODE"}
    ops = {}
    for n, v in named.items():
        if n.startswith("OP") and n != "OPCODE":
            k, field = n[2:].split("_", 1)
            ops.setdefault(int(k), {})[field] = v
    return head, [ops[k] for k in sorted(ops)]


def _join(head, operands):
    named = {n: v for n, v in head.items() if n in ("OPCODE", "NIN", "NOUT")}
    for k, fields in enumerate(operands):
        named.update({f"OP{k}_{f}": v for f, v in fields.items()})
    named.update({n: v for n, v in head.items() if n not in ("OPCODE", "NIN", "NOUT")})
    return named


def _refused(result, program, named, message, k=0):
    task = _record(program.tasks[k], program.tasks[k].unit, named)
    with pytest.raises(TaskFormatError, match=message):
        plan_from_binary(_with_task(program, k, task), result.device)


def test_operand_counts_of_a_compute_record():
    result, program = _bound(RELU)
    head, (x, y) = _split(_named(program.tasks[0]))
    # 7 inputs and an output are 8 operands, as many as the registers hold: the record is
    # read, and leaky_relu's one input is what refuses it
    _refused(result, program, _join({**head, "NIN": 7}, [x] * 7 + [y]),
             r"^task 0: leaky_relu takes 1 to 1 inputs, 7 given$")
    # 9 operands do not fit the registers
    _refused(result, program, _join({**head, "NIN": 8}, [x] * 8),
             r"^task 0: 8 inputs and 1 outputs$")
    _refused(result, program, _join({**head, "NIN": 1, "NOUT": 2}, [x, y, y]),
             r"^task 0: leaky_relu takes 1 to 1 outputs, 2 given$")
    _refused(result, program, _join({**head, "NIN": 0}, [y]),
             r"^task 0: leaky_relu takes 1 to 1 inputs, 0 given$")
    _refused(result, program, {**head, "OPCODE": len(OPCODES)},
             rf"^task 0: OPCODE {len(OPCODES)} unknown \(0\.\.{len(OPCODES) - 1}\)$")


def test_operand_descriptors_of_a_compute_record():
    result, program = _bound(RELU)
    head, (x, y) = _split(_named(program.tasks[0]))
    # rank 6 is the most the descriptors hold: [1, 1, 1, 1, 2, 3] on both sides reads back
    six = {"RANK": 6, **{f"DIM{d}": 1 for d in range(4)}, "DIM4": 2, "DIM5": 3,
           **{f"STRIDE{d}": 6 for d in range(4)}, "STRIDE4": 3, "STRIDE5": 1}
    task = _record(program.tasks[0], Unit.CSTL, _join(head, [{**x, **six}, {**y, **six}]))
    (got,) = plan_from_binary(_with_task(program, 0, task), result.device).tasks
    assert got.ins[0].shape == got.outs[0].shape == (1, 1, 1, 1, 2, 3)
    assert got.ins[0].strides == (6, 6, 6, 6, 3, 1)
    _refused(result, program, _join(head, [{**x, "RANK": 7}, y]),
             r"^task 0: operand 0: rank 7 / element code 1$")
    _refused(result, program, _join(head, [x, {**y, "ELEM": len(ELEM_TYPES)}]),
             rf"^task 0: operand 1: rank 2 / element code {len(ELEM_TYPES)}$")
    # X is at 0 of L1: ADDR_HI 1 puts the operand 4 GiB further, outside every buffer
    _refused(result, program, _join(head, [{**x, "ADDR_HI": 1}, y]),
             r"^task 0: operand 0 bytes \[4294967304, 4294967310\) of L1 are not inside one "
             r"buffer$")
    # 6 bytes from offset 60 of the 64-byte X cross its end
    _refused(result, program, _join(head, [{**x, "ADDR_LO": 60}, y]),
             r"^task 0: operand 0 bytes \[60, 66\) of L1 are not inside one buffer$")
    # [2, 3] with element strides [3, 1] reaches element 5: 6 bytes
    _refused(result, program, _join(head, [{**x, "BYTES": 5}, y]),
             r"^task 0: operand 0: shape \[2, 3\] with element strides \[3, 1\] reaches 6 "
             r"bytes, OP0_BYTES is 5$")
    _refused(result, program, _join(head, [{**x, "LEVEL": 3}, y]),
             r"^task 0: operand 0 level 3 is not a level$")
    # the CSTL instance must exist: exec_device has 2 per engine
    task = dataclasses.replace(program.tasks[0], instance=2)
    with pytest.raises(TaskFormatError, match=r"^task 0: CSTL instance 2; the device has 2$"):
        plan_from_binary(_with_task(program, 0, task), result.device)


def test_i4_operand_bytes_round_up():
    # B is 4 x 2 i4 with element strides [2, 1]: 8 nibbles, 4 bytes; 3 are too few
    result, program = _bound(GEMM_I4, PROGRAMS)
    head, (a, b, y) = _split(_named(program.tasks[0]))
    assert (b["BYTES"], b["ELEM"]) == (4, ELEM_TYPES.index("i4"))
    _refused(result, program, _join(head, [a, {**b, "BYTES": 3}, y]),
             r"^task 0: operand 1: shape \[4, 2\] with element strides \[2, 1\] reaches 4 "
             r"bytes, OP1_BYTES is 3$")


def test_requantisation_of_a_compute_record():
    result, program = _bound(GEMM)
    head, (a, b, y) = _split(_named(program.tasks[0]))
    # the output without its descriptor: the front-end cannot derive the entry
    _refused(result, program, _join(head, [a, b, {**y, "QUANT": NO_QUANT}]),
             r"^task 0: task 0 \(gemm on NMU\[0\]\): gemm: an integer gemm with a i8 output "
             r"needs quantization descriptors on X, W and Y; missing on region\(Y, 0, 8\)$")
    # REQUANT 4 is not on an 8-byte boundary
    _refused(result, program, {**_join(head, [a, b, y]), "REQUANT": 4},
             r"^task 0: REQUANT: .*offset 4")


VARIADIC = """device "ops_device.nem"
buffer X : L1 (size=256)
buffer Y : L1 (size=256)
let a = region(X, 0, 12) elem=f16, shape=[2, 3], layout=MN
let b = region(X, 16, 8) elem=f16, shape=[2, 2], layout=MN
let c = region(X, 32, 4) elem=f16, shape=[2, 1], layout=MN
let y = region(Y, 0, 24) elem=f16, shape=[2, 6], layout=MN
t = concat.async in a, b, c out y axis=1
let p = region(Y, 64, 8) elem=f16, shape=[2, 2], layout=MN
let q = region(Y, 96, 16) elem=f16, shape=[2, 4], layout=MN
s = split.async in y out p, q axis=1 split_sizes=[2, 4] deps=[t]
let z = region(Y, 128, 4) elem=f16, shape=[2, 1], layout=MN
r = reduce_sum.async in a out z axes=[1] keepdims=true
"""


def test_variadic_operands_and_slotted_attributes_read_back():
    result, program = _bound(VARIADIC)
    tasks = plan_from_binary(program, result.device).tasks
    assert [(t.opcode, len(t.ins), len(t.outs)) for t in tasks] == [
        ("concat", 3, 1), ("split", 1, 2), ("reduce_sum", 1, 1)]
    assert [t.ins[2].shape for t in tasks[:1]] == [(2, 1)]
    assert [t.attrs for t in tasks] == [t.attrs for t in result.plan.tasks]
    # reduce_sum's axes slot holds 6 words (MAX_RANK): keepdims' tag is ATTR7, where a 1.0 /
    # 1.1 binary would have packed it at ATTR2. A 1.2 binary already has the slots.
    attrs = {n: v for n, v in _named(program.tasks[2]).items() if n.startswith("ATTR")}
    assert attrs == {"ATTR0": 0x80000001, "ATTR1": 1, "ATTR7": 0x80000001, "ATTR8": 1}
    old = plan_from_binary(dataclasses.replace(program, version=(1, 2)), result.device)
    assert old.tasks[2].attrs == {"axes": (1,), "keepdims": True}
    # the same words in a 1.1 binary are read packed: axes (tag ATTR0, one word ATTR1), then
    # keepdims' tag at ATTR2, which is 0 (absent)
    old = plan_from_binary(dataclasses.replace(program, version=(1, 1)), result.device)
    assert old.tasks[2].attrs == {"axes": (1,)}


def test_tables_are_checked_from_version_1_3():
    result, program = _bound(RELU)
    at = _named(program.tasks[0])["TABLE"]
    # entry q of the table is the output code of input code q: 0.5 (q - 3) is >= 0 for q = 7
    # and 9 and kept by leaky_relu, then / 0.25 - 2: 6 and 10. Flip bit 0 of both.
    data = bytearray(program.data)
    assert (data[at + 7], data[at + 9]) == (6, 10)
    data[at + 7] ^= 1
    data[at + 9] ^= 1
    broken = dataclasses.replace(program, data=bytes(data), version=(1, 3))
    with pytest.raises(TaskFormatError, match=rf"^task 0: TABLE at data offset {at}: entry 7 is "
                                              r"7, the executor's formula gives 6 \(2 entries "
                                              r"differ\)$"):
        plan_from_binary(broken, result.device)


# --------------------------------------------------------------------------------------
# copy records and tokens

COPIES = """device "exec_device.nem"
buffer S : L2 (size=256)
buffer X : L1 (size=256)
t0 = transfer.async(dst=region(X, 0, 64), src=region(S, 0, 64))
t1 = transfer.async(dst=region(S, 128, 64), src=region(X, 64, 64))
"""


def test_copy_record_shapes_and_extents():
    result, program = _bound(COPIES)
    named = _named(program.tasks[0])
    # a 4-D walk: runs of 2 bytes, 5 x 3 x 2 of them. Source strides 2, 10, 30 (dense):
    # extent 2 + 4*2 + 2*10 + 1*30 = 60. Destination strides 2, 10, 40: 2 + 8 + 20 + 40 = 70
    walk = {"COUNT0": 2, "COUNT1": 5, "COUNT2": 3, "COUNT3": 2,
            "SRC_STRIDE1": 2, "SRC_STRIDE2": 10, "SRC_STRIDE3": 30,
            "DST_STRIDE1": 2, "DST_STRIDE2": 10, "DST_STRIDE3": 40}
    task = _record(program.tasks[0], Unit.DMA, {**named, **walk})
    got = plan_from_binary(_with_task(program, 0, task), result.device).tasks[0]
    (src,), (dst,) = got.ins, got.outs
    assert (src.buffer, src.offset, src.extent, src.shape, src.strides) == (
        "S", 0, 60, (2, 3, 5, 2), (30, 10, 2, 1))
    assert (dst.buffer, dst.offset, dst.extent, dst.shape, dst.strides) == (
        "X", 0, 70, (2, 3, 5, 2), (40, 10, 2, 1))
    # 1-byte runs are a valid walk: 64 runs of one byte each
    single = {"COUNT0": 1, "COUNT1": 64, "SRC_STRIDE1": 1, "DST_STRIDE1": 1}
    task = _record(program.tasks[0], Unit.DMA, {**named, **single})
    got = plan_from_binary(_with_task(program, 0, task), result.device).tasks[0]
    assert got.ins[0].shape == (1, 1, 64, 1) and got.outs[0].extent == 64
    # destination rows of 2 bytes at stride 1 overlap: 2*2*3*5 = 60 bytes moved into a span
    # of 2 + 4*1 + 2*10 + 1*12 = 38
    overlap = {**walk, "DST_STRIDE1": 1, "DST_STRIDE3": 12}
    _refused(result, program, {**named, **overlap},
             r"^task 0: the copy moves 60 bytes into a destination span of 38 \(a destination "
             r"stride of 0 or overlapping rows would write bytes twice\)$")
    # a count of 0 in any dimension
    for d in (1, 2, 3):
        _refused(result, program, {**named, f"COUNT{d}": 0}, r"^task 0: a copy count is 0$")
    _refused(result, program, {**named, "SRC_LEVEL": 3}, r"^task 0: SRC level 3 is not a level$")
    # S at 0 of L2: SRC_HI 1 is 4 GiB further
    _refused(result, program, {**named, "SRC_HI": 1},
             r"^task 0: SRC bytes \[4294967296, 4294967360\) of L2 are not inside one buffer$")
    _refused(result, program, {**named, "DST_HI": 1},
             r"^task 0: DST bytes \[4294967296, 4294967360\) of L1 are not inside one buffer$")
    # 64 bytes from offset 200 of the 256-byte X cross its end
    _refused(result, program, {**named, "DST_LO": 200},
             r"^task 0: DST bytes \[200, 264\) of L1 are not inside one buffer$")
    # the DMA instance must exist: exec_device has 2 per engine
    with pytest.raises(TaskFormatError, match=r"^task 0: DMA instance 2; the device has 2$"):
        plan_from_binary(_with_task(program, 0, dataclasses.replace(program.tasks[0],
                                                                    instance=2)), result.device)


def test_tokens_beyond_the_sequencer():
    result, program = _bound(COPIES)
    t0, t1 = program.tasks
    # exec_device's sequencer has 16 tokens: a signal of token 20 is out of range too, and
    # of several the lowest is named
    for change, token in (({"signal": 1 << 20}, 20), ({"wait": 1 << 20 | 1 << 18}, 18),
                          ({"signal": 1 << 16 | 1 << 31}, 16)):
        broken = _with_task(program, 1, dataclasses.replace(t1, **change))
        with pytest.raises(TaskFormatError, match=rf"^task 1: token {token} out of range \(the "
                                                  r"device's sequencer has 16\)$"):
            plan_from_binary(broken, result.device)
    # t1 waiting on token 15 that t0 signals: ordered after it
    ordered = dataclasses.replace(program, tasks=(dataclasses.replace(t0, signal=1 << 15),
                                                  dataclasses.replace(t1, wait=1 << 15)))
    assert plan_from_binary(ordered, result.device).order.preds == [(), (0,)]
    broken = dataclasses.replace(ordered, tasks=(ordered.tasks[0], dataclasses.replace(
        ordered.tasks[1], wait=1 << 15 | 1 << 3)))
    with pytest.raises(TaskFormatError, match=r"^task 1 waits on token 3, which no earlier task "
                                              r"signals \(it would wait forever\)$"):
        plan_from_binary(broken, result.device)


class _Seq:
    """A device stub with one characteristic: the sequencer's token count."""

    def __init__(self, tokens):
        self.tokens = tokens

    def characteristic(self, unit, name):
        return self.tokens if (unit, name) == ("SEQ", "max_active_tokens") else None


def test_token_count_is_the_sequencers_up_to_32():
    from nem.binder import token_count

    assert [token_count(_Seq(n)) for n in (1, 16, 32, 64)] == [1, 16, 32, 32]
    assert token_count(_Seq(None)) == 32  # not given: the format's 32


def test_device_hash_is_sha256_of_the_canonical_json():
    import hashlib
    import json

    from nem.binder import device_hash

    device = _check(COPIES).device
    # the documented canonical form, built here with json's own hooks: sorted keys, no
    # spaces, sets as sorted lists
    text = json.dumps(dataclasses.asdict(device), sort_keys=True, separators=(",", ":"),
                      default=sorted)
    assert device_hash(device) == hashlib.sha256(text.encode()).digest()


# --------------------------------------------------------------------------------------
# the CSTL's int8 entries in a binary

ADD = """device "exec_device.nem"
buffer X : L1 (size=64)
buffer Y : L1 (size=64)
buffer Z : L1 (size=64)
let x = region(X, 0, 6) elem=i8, shape=[2, 3], layout=MN,
    quant=per_tensor(scale=0.5, zero_point=3)
let y = region(Y, 0, 6) elem=i8, shape=[2, 3], layout=MN,
    quant=per_tensor(scale=0.25, zero_point=-2)
let z = region(Z, 0, 6) elem=i8, shape=[2, 3], layout=MN,
    quant=per_tensor(scale=1.0, zero_point=0)
t = add.async in x, y out z
wait(t)
"""


def test_cstl_entries_of_a_compute_record():
    from nem.taskformat import QuantEntry, encode_quant

    result, program = _bound(ADD)
    named = _named(program.tasks[0])
    assert named["TABLE"] == 0xFFFFFFFF
    # an add needs no table: TABLE must be NO_TABLE
    _refused(result, program, {**named, "TABLE": 0},
             r"^task 0: TABLE = 0x0, but the task needs no lookup table \(NO_TABLE\)$")
    _refused(result, program, {**named, "REQUANT": 4}, r"^task 0: REQUANT: .*offset 4")
    # A's zero point 200 is outside i8: no eltwise entry exists for it
    data = program.data + encode_quant(QuantEntry("per_tensor", 0, 0, (0.5,), (200,)))
    bad = dataclasses.replace(program, data=data)
    _refused(result, bad, {**named, "OP0_QUANT": len(program.data)},
             r"^task 0: task 0 \(add on CSTL\[0\]\): add: A zero point 200 outside i8 "
             r"\[-128, 127\]$")
    # the binder refuses it the same way
    task, places = _task(ADD)
    x = dataclasses.replace(task.ins[0], quant=Quant("per_tensor", _num(0.5), _num(200)))
    with pytest.raises(BindError, match=r"^t \(line 11\): add: A zero point 200 outside i8 "
                                        r"\[-128, 127\]$"):
        _regs(dataclasses.replace(task, ins=(x, task.ins[1])), places)
    # a table offset that is no table
    result, program = _bound(RELU)
    named = _named(program.tasks[0])
    _refused(result, program, {**named, "TABLE": 4}, r"^task 0: TABLE: .*offset 4")


# --------------------------------------------------------------------------------------
# more of bind and plan_from_binary


def test_dependencies_are_reduced_before_tokens():
    # t2 depends on t0, t1 and tx, t4 on t0 and t1; t1 already waits for t0, so t2 and t4
    # need not: they wait on t1's (and tx's) token only. t3 still waits on t0's, which keeps
    # it live, so t1 signals a token of its own.
    text = """device "exec_device.nem"
buffer S : L2 (size=1024)
buffer X : L1 (size=1024)
t0 = transfer.async(dst=region(X, 0, 64), src=region(S, 0, 64))
t1 = transfer.async(dst=region(X, 64, 64), src=region(S, 64, 64), deps=[t0])
tx = transfer.async(dst=region(X, 128, 64), src=region(S, 128, 64))
t2 = transfer.async(dst=region(X, 192, 64), src=region(S, 192, 64), deps=[t0, t1, tx])
t4 = transfer.async(dst=region(X, 320, 64), src=region(S, 320, 64), deps=[t0, t1])
t3 = transfer.async(dst=region(X, 256, 64), src=region(S, 256, 64), deps=[t0])
t5 = transfer.async(dst=region(X, 384, 64), src=region(S, 384, 64), deps=[t0, tx])
"""
    t0, t1, tx, t2, t4, t3, t5 = bind(_check(text)).tasks
    # t0 and tx are unordered: t5 needs both
    assert t5.wait == t0.signal | tx.signal
    assert len({t0.signal, t1.signal, tx.signal}) == 3 and 0 not in (t0.signal, t1.signal,
                                                                    tx.signal)
    assert t1.wait == t0.signal and t3.wait == t0.signal
    assert t2.wait == t1.signal | tx.signal
    assert t4.wait == t1.signal
    assert tx.wait == 0 and t0.wait == 0


def test_the_sdma_runs_for_no_engine(devdir):
    # @seq_engine(1) on an L2 -> DDR copy: the sDMA is a device unit, its record says engine 0
    text = """device "two.nem"
buffer S : L2 (size=256)
buffer D : DDR (size=64)
t = transfer.async(dst=region(D, 0, 64), src=region(S, 0, 64)) @seq_engine(1)
"""
    result = _check(text, devdir)
    assert result.plan.tasks[0].engine == 1
    (task,) = bind(result).tasks
    assert (task.unit, task.instance, task.engine) == (Unit.SDMA, 0, 0)


def test_a_unit_type_the_device_lacks_is_refused():
    result = _check(RELU)
    device = dataclasses.replace(result.device,
                                 per_engine={**result.device.per_engine, "CSTL": 0})
    with pytest.raises(BindError, match=r"^t \(line 8\): the device has no CSTL unit to run "
                                        r"leaky_relu$"):
        bind(dataclasses.replace(result, device=device))


def test_buffer_table_of_a_binary_is_checked_against_the_device(devdir):
    from nem.binder import device_hash
    from nem.checker import BufferInfo

    result = _check(SPREAD, devdir)
    program = bind(result)
    plan = plan_from_binary(program, result.device)
    assert plan.buffers == {
        "S": BufferInfo("S", "L2", None, 256, frozenset(), BINARY, 64),
        "X": BufferInfo("X", "L1", 1, 256, frozenset(), BINARY, 64),
        "Y": BufferInfo("Y", "L1", 0, 256, frozenset(), BINARY, 64),
        "D": BufferInfo("D", "DDR", None, 64, frozenset(), BINARY, 64),
    }
    assert plan.consts == {}
    s, x, y, d = program.buffers
    # the device's allocator puts Y at 0 of engine 0's L1
    moved = dataclasses.replace(program, buffers=(s, x, dataclasses.replace(y, address=64), d))
    with pytest.raises(TaskFormatError, match=r"^buffer Y: address 64, but the device's "
                                              r"allocator places it at 0$"):
        plan_from_binary(moved, result.device)
    # two.nem's L1 holds 65536 bytes per engine
    big = dataclasses.replace(program, buffers=(s, dataclasses.replace(x, size=65537), y, d))
    with pytest.raises(TaskFormatError, match=r"^the buffer table does not fit the device: "
                                              r".*65537"):
        plan_from_binary(big, result.device)
    other = _check(COPIES).device
    with pytest.raises(TaskFormatError) as err:
        plan_from_binary(program, other)
    assert str(err.value) == (
        f"the binary was bound for another device (hash {device_hash(result.device).hex()[:16]}"
        f"..., exec_npu is {device_hash(other).hex()[:16]}...)")


def test_copy_registers_split_addresses_above_4_gib():
    from nem.binder import copy_registers

    result = _check(COPIES)
    places, _ = allocate(result.plan.buffers, result.device)
    # S at 0x5_0000_0040, X at 0x1_0000_0000: t0 reads S from 0 and writes X from 0
    places = {"S": dataclasses.replace(places["S"], address=5 * 2**32 + 0x40),
              "X": dataclasses.replace(places["X"], address=2**32)}
    regs = dict(copy_registers(result.plan.tasks[0], places))
    assert [regs[n] for n in ("SRC_LO", "SRC_HI", "DST_LO", "DST_HI")] == [0x40, 5, 0, 1]
    # t1 reads X from 64, writes S from 128
    regs = dict(copy_registers(result.plan.tasks[1], places))
    assert [regs[n] for n in ("SRC_LO", "SRC_HI", "DST_LO", "DST_HI")] == [64, 1, 0xC0, 5]
    assert (regs["SRC_LEVEL"], regs["DST_LEVEL"]) == (2, 1)  # L1, L2


def test_a_run_of_max_count_squared_folds():
    from nem.binder import fold_run

    # 65535 * 65535 bytes: 65535 rows of 65535, both counts at the limit
    assert fold_run(65535 * 65535, []) == (65535, [(65535, 65535, 65535)])
    # one more row does not fit: 65535 * 65536 has no divisor <= 65535 leaving <= 65535 rows
    assert fold_run(65535 * 65536, []) == (65535 * 65536, [])


def test_zero_sized_operands_and_rank_six_extents():
    result, program = _bound(RELU)
    head, (x, y) = _split(_named(program.tasks[0]))
    # a [2, 0] operand reaches no bytes (whatever its strides [3, 1] would give for a
    # non-empty shape): BYTES 0 at the first byte of Y (address 64, where X ends) lies in Y,
    # not at the end of X
    empty = {"DIM1": 0, "BYTES": 0}
    task = _record(program.tasks[0], Unit.CSTL,
                   _join(head, [{**x, **empty, "ADDR_LO": 64}, {**y, **empty}]))
    (got,) = plan_from_binary(_with_task(program, 0, task), result.device).tasks
    assert (got.ins[0].buffer, got.ins[0].offset, got.ins[0].shape) == ("Y", 0, (2, 0))
    six = {"RANK": 6, **{f"DIM{d}": 1 for d in range(4)}, "DIM4": 2, "DIM5": 3,
           **{f"STRIDE{d}": 6 for d in range(4)}, "STRIDE4": 3, "STRIDE5": 1}
    _refused(result, program, _join(head, [{**x, **six, "BYTES": 5}, {**y, **six}]),
             r"^task 0: operand 0: shape \[1, 1, 1, 1, 2, 3\] with element strides "
             r"\[6, 6, 6, 6, 3, 1\] reaches 6 bytes, OP0_BYTES is 5$")


def test_an_integer_gemm_with_a_float_output_record_is_refused():
    # the NMU's int8 path has no f32 output: the front-end cannot derive an output stage
    result, program = _bound(GEMM)
    head, (a, b, y) = _split(_named(program.tasks[0]))
    f32 = {"ELEM": ELEM_TYPES.index("f32"), "BYTES": 32, "QUANT": NO_QUANT}
    _refused(result, program, _join(head, [a, b, {**y, **f32}]),
             r"^task 0: task 0 \(gemm on NMU\[0\]\): gemm: an integer gemm with a f32 output "
             r"needs quantization descriptors on X, W and Y; missing on region\(Y, 0, 32\)$")


def test_operands_without_descriptors_read_back_without_one():
    result, program = _bound(VARIADIC)
    concat = plan_from_binary(program, result.device).tasks[0]
    assert concat.ins[0] == Region(None, "X", "L1", 0, 0, 12, "f16", (2, 3), None, (3, 1), None)
    assert concat.ins[0].quant is None


# --------------------------------------------------------------------------------------
# copy walks at their limits

WALK = """device "exec_device.nem"
buffer A : L2 (size=400)
buffer B : L2 (size=1024)
let src = region(A, 0, 120) elem=u8, shape=[2, 3, 5, 4], layout=NCHW
let dst = region(B, 0, 364) elem=u8, shape=[2, 3, 5, 4], strides=[200, 60, 10, 1]
t = transfer.async(dst=dst, src=src)
"""


def test_four_dimensional_walks_bind_five_do_not():
    # runs of 4 bytes (contiguous on both sides), then 5, 3 and 2 of them: the destination
    # rows of 4 sit 10 apart, its planes 60 (5 x 10 = 50 < 60) and blocks 200 (3 x 60 < 200),
    # so nothing merges. The source is dense: strides 4, 20, 60.
    _, program = _bound(WALK)
    regs = _named(program.tasks[0])
    assert [regs[f"COUNT{d}"] for d in range(4)] == [4, 5, 3, 2]
    assert [regs[f"SRC_STRIDE{d}"] for d in (1, 2, 3)] == [4, 20, 60]
    assert [regs[f"DST_STRIDE{d}"] for d in (1, 2, 3)] == [10, 60, 200]
    five = WALK.replace("400", "800").replace("1024", "2048").replace(
        "region(A, 0, 120) elem=u8, shape=[2, 3, 5, 4]",
        "region(A, 0, 240) elem=u8, shape=[2, 2, 3, 5, 4]").replace("NCHW", "NCDHW").replace(
        "region(B, 0, 364) elem=u8, shape=[2, 3, 5, 4], strides=[200, 60, 10, 1]",
        "region(B, 0, 1364) elem=u8, shape=[2, 2, 3, 5, 4], strides=[1000, 200, 60, 10, 1]")
    with pytest.raises(BindError, match=r"^t \(line 6\): the copy needs 5 dimensions after "
                                        r"merging contiguous ones; the copy units walk at "
                                        r"most 4$"):
        bind(_check(five))


def test_counts_at_the_limit_and_large_strides():
    # a 65535-byte run is the largest count: no folding
    text = """device "exec_device.nem"
buffer A : DDR (size=200000)
buffer B : L2 (size=200000)
t = transfer.async(dst=region(B, 0, 65535), src=region(A, 0, 65535))
"""
    regs = _named(bind(_check(text)).tasks[0])
    assert (regs["COUNT0"], regs["COUNT1"]) == (65535, 1)
    # strides are 32-bit: two 64-byte rows written 100000 bytes apart
    strided = text.replace(
        "dst=region(B, 0, 65535)",
        "dst=region(A, 0, 100064) elem=u8, shape=[2, 64], strides=[100000, 1]").replace(
        "src=region(A, 0, 65535)", "src=region(B, 0, 128) elem=u8, shape=[2, 64], layout=MN")
    regs = _named(bind(_check(strided)).tasks[0])
    assert [regs[n] for n in ("COUNT0", "COUNT1", "SRC_STRIDE1", "DST_STRIDE1")] == \
        [64, 2, 64, 100000]
    # and read 100000 apart too
    both = strided.replace("src=region(B, 0, 128) elem=u8, shape=[2, 64], layout=MN",
                           "src=region(B, 0, 100064) elem=u8, shape=[2, 64], "
                           "strides=[100000, 1]")
    regs = _named(bind(_check(both)).tasks[0])
    assert [regs[n] for n in ("COUNT0", "COUNT1", "SRC_STRIDE1", "DST_STRIDE1")] == \
        [64, 2, 100000, 100000]
    # 65537 is prime: no rows of at most 65535 bytes make it up
    prime = text.replace("65535", "65537")
    with pytest.raises(BindError) as err:
        bind(_check(prime))
    assert str(err.value) == (
        "t (line 4): a copy dimension of 65537 (the copy units count at most 65535 per "
        "dimension, and 65537 bytes per run do not fold into rows); split the transfer")


def test_a_copy_between_different_shapes_is_refused():
    from nem.binder import copy_registers

    result = _check(WALK)
    places, _ = allocate(result.plan.buffers, result.device)
    task = result.plan.tasks[0]
    dst = dataclasses.replace(task.outs[0], shape=(3, 2, 5, 4))
    with pytest.raises(BindError, match=r"^t \(line 6\): copy from shape \[2, 3, 5, 4\] to "
                                        r"\[3, 2, 5, 4\]; the copy unit walks one shape on "
                                        r"both sides$"):
        copy_registers(dataclasses.replace(task, outs=(dst,)), places)


def test_a_descriptor_that_does_not_evaluate_is_refused():
    task, places = _task(RELU)
    x = dataclasses.replace(task.ins[0], quant=Quant("per_tensor", _num(0.0), _num(3)))
    with pytest.raises(BindError, match=r"^t \(line 8\): x: quantization scales must be finite "
                                        r"and > 0, got \[0\.0\]$"):
        _regs(dataclasses.replace(task, ins=(x,)), places)


def test_an_eltwise_record_reads_back():
    # the add's REQUANT names its eltwise entry and TABLE is NO_TABLE: accepted as bound
    result, program = _bound(ADD)
    (task,) = plan_from_binary(program, result.device).tasks
    assert (task.opcode, task.resource, len(task.ins)) == ("add", ("CSTL", 0), 2)
    assert [r.quant for r in (*task.ins, *task.outs)] == [
        Quant("per_tensor", _num(0.5), _num(3)), Quant("per_tensor", _num(0.25), _num(-2)),
        Quant("per_tensor", _num(1.0), _num(0))]


def test_descriptors_may_name_constants():
    # zero points given as consts bind to the same records and data as the literals
    for text in (RELU, GEMM):
        named = text.replace("buffer X", "const ZX = 3\nconst ZY = -2\nbuffer X").replace(
            "buffer A", "const ZA = -1\nconst ZY = 3\nbuffer A")
        named = named.replace("zero_point=3)\nlet y", "zero_point=ZX)\nlet y").replace(
            "zero_point=-2)", "zero_point=ZY)").replace("zero_point=-1)", "zero_point=ZA)")
        named = named.replace("scale=1.0, zero_point=3)", "scale=1.0, zero_point=ZY)")
        result = _check(named)
        assert result.plan.consts and "Name" in repr(result.plan.tasks[0].ins[0].quant)
        got, want = bind(result), bind(_check(text))
        assert got.tasks == want.tasks and got.data == want.data


def test_buffers_beyond_the_device_memory_are_refused():
    result = _check(RELU)
    # X and Y take 64 bytes each at 64-byte alignment: 128 bytes of L1
    small = dataclasses.replace(result.device, l1_size_bytes=100)
    with pytest.raises(BindError, match=r"^buffers in L1\[0\] need 128 bytes \(with "
                                        r"alignment\); device 'exec_npu' has 100$"):
        bind(dataclasses.replace(result, device=small))


def test_token_errors_name_the_tasks(devdir):
    text = (PROGRAMS / "exec_device.nem").read_text().replace(
        "max_active_tokens = 16", "max_active_tokens = 2").replace("exec_npu", "tok2_npu")
    (devdir / "tok2.nem").write_text(text)
    fan = """device "tok2.nem"
buffer S : L2 (size=256)
buffer X : L1 (size=256)
loop i in [0..2] @max_in_flight(3):
    transfer.async(dst=region(X, i * 64, 64), src=region(S, i * 64, 64))
endloop
c = transfer.async(dst=region(S, 192, 64), src=region(X, 192, 64))
wait(c)
"""
    with pytest.raises(BindError) as err:
        bind(_check(fan, devdir))
    # c waits for all three iterations: the third one finds both tokens held by the first two
    assert str(err.value) == (
        "transfer (line 5, i=2): 3 tokens would be live at once, the device has 2 "
        "(SEQ.max_active_tokens); tokens held by: transfer (line 5, i=0), transfer (line 5, "
        "i=1). Add a wait or a .sync to shorten their lives")


def test_copies_between_ddr_and_l2_go_to_the_sdma_whatever_the_resource():
    # docs/task-format.md: copies go to nem.executor.copy_unit (the sDMA between DDR and L2);
    # @resource(DMA[i]) picks the instance of a DMA copy only
    text = """device "exec_device.nem"
buffer S : L2 (size=256)
buffer D : DDR (size=64)
t = transfer.async(dst=region(D, 0, 64), src=region(S, 0, 64)) @resource(DMA[1])
"""
    (task,) = bind(_check(text)).tasks
    assert (task.unit, task.instance) == (Unit.SDMA, 0)


def test_a_bias_of_the_wrong_shape_in_a_record_is_refused():
    text = GEMM.replace("buffer Y", "buffer C : L1 (size=64)\nbuffer Y").replace(
        "t = gemm.async in a, b out y",
        "let c = region(C, 0, 16) elem=i32, shape=[4], layout=N\nt = gemm.async in a, b, c out y")
    result, program = _bound(text)
    assert len(plan_from_binary(program, result.device).tasks[0].ins) == 3
    head, (a, b, c, y) = _split(_named(program.tasks[0]))
    # the bias C must broadcast to Y's [2, 4]: [3] does not
    _refused(result, program, _join(head, [a, b, {**c, "DIM0": 3}, y]),
             r"^task 0: gemm: C \[3\] does not broadcast to the output shape \[2, 4\]$")


def test_an_attribute_without_an_encoding_is_refused():
    task, places = _task(GEMM)
    bad = dataclasses.replace(task, attrs={**task.attrs, "accum_type": "q9"})
    with pytest.raises(BindError, match=r"^t \(line 11\): attribute accum_type: 'q9' has no "
                                        r"code \(codes: "):
        _regs(bad, places)
