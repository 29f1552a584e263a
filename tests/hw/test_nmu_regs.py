"""The NMU's shadow registers and task decode against ``npu.nmu.model.decode_task``.

The register writes of bound NEM programs (gemm, matmul, conv2d with and without bias,
i8 / i16 outputs) go in through the write stream as the sequencer would send them; the
decoded task equals the model's, bit for bit. Single broken registers give the model's
refusal cause.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.sim import Simulator

from nem.taskformat import ELEM_TYPES, REGISTER_MAPS, TaskFormatError, Unit
from npu.nmu.agu import task_fields, task_fields_layout
from npu.nmu.model import Cause, NmuUnsupported, decode_task
from npu.nmu.regs import NmuRegisters, kept_registers
from sim.nmu_programs import conv_case, gemm_case

REGS = REGISTER_MAPS[Unit.NMU]


def _decode_all(dut, cases):
    """The decoded task of each register set in ``cases`` (``{index: value}``), one
    simulation: clear, the writes one a cycle, then :attr:`NmuRegisters.LATENCY` cycles."""
    got = []

    async def bench(ctx):
        for regs in cases:
            ctx.set(dut.clear, 1)
            await ctx.tick()
            ctx.set(dut.clear, 0)
            ctx.set(dut.write.valid, 1)
            for index, value in regs.items():
                ctx.set(dut.write.payload, {"index": index, "value": value})
                await ctx.tick()
            ctx.set(dut.write.valid, 0)
            await ctx.tick().repeat(dut.LATENCY)     # the decode's first stage
            got.append(ctx.get(dut.task.as_value()))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got


def _decode(dut, regs):
    return _decode_all(dut, [regs])[0]


def _want(regs):
    try:
        return task_fields(decode_task(regs)).as_bits()
    except NmuUnsupported as exc:
        return exc.cause


def _cases():
    rng = np.random.default_rng(9)
    return [gemm_case(rng, 3, 10, 5), gemm_case(rng, 2, 7, 12, bias=True, out_elem="i16"),
            gemm_case(rng, 4, 5, 6, opcode="matmul"),
            conv_case(rng, 2, 5, 4, 3, 3, 2, 7, pads=(1, 0, 2, 1), strides=(2, 1),
                      dils=(1, 2), bias=True),
            conv_case(rng, 1, 3, 3, 9, 1, 1, 4, out_elem="i16", bias=True),
            gemm_case(rng, 3, 5, 4, opcode="matmul", batch=((3,), (3,))),
            gemm_case(rng, 2, 6, 3, opcode="matmul", batch=((), (2,))),
            gemm_case(rng, 2, 6, 3, bias=True, batch=((2,), (1,))),
            gemm_case(rng, 4, 6, 3, bias="mn")]


def test_kept_registers_come_from_the_map():
    names = kept_registers()
    assert names[:3] == ["OPCODE", "NIN", "NOUT"]
    assert all(0 <= REGS.index(n) < 256 for n in names)


def test_decode_equals_the_model():
    dut = NmuRegisters()
    for case in _cases():
        got = _decode(dut, case.regs)
        assert got == _want(case.regs), case.text


@pytest.mark.parametrize("register,value,cause", [
    ("OPCODE", 3, Cause.OPCODE),
    ("NOUT", 2, Cause.TYPE),
    ("OP0_ELEM", ELEM_TYPES.index("u8"), Cause.TYPE),
    ("OP1_LEVEL", 1, Cause.TYPE),
    ("OP0_ADDR_HI", 1, Cause.TYPE),
    ("ATTR12", 2, Cause.LAYOUT),
    ("OP0_STRIDE3", 2, Cause.LAYOUT),
    ("OP3_STRIDE3", 3, Cause.LAYOUT),
    ("OP2_DIM0", 5, Cause.LAYOUT),
])
def test_refusal_causes(register, value, cause):
    case = _cases()[3]  # the conv2d with bias
    regs = dict(case.regs)
    regs[REGS.index(register)] = value
    assert _want(regs) == cause
    got = _decode(NmuRegisters(), regs)
    assert (got >> task_fields_layout()["cause"].offset) & 0xF == cause


def test_corrupted_registers_equal_the_model():
    """Each bound case with one or two registers overwritten (small values, 1 and 4 where
    the decode compares with them, a bit at 16 or 31 over a valid value, random words),
    all decoded in one simulation: accepted tasks equal the model bit for bit, refused
    ones give its cause. The decode compares with constants through flags set at the
    write and compares registers with each other a stage early; both are checked here
    against the model's plain comparisons."""
    rng = np.random.default_rng(23)
    names = kept_registers()
    cases = []
    for case in _cases():
        for _ in range(24):
            regs = dict(case.regs)
            for _ in range(rng.integers(1, 3)):
                name = names[rng.integers(len(names))]
                old = regs.get(REGS.index(name), 0)
                regs[REGS.index(name)] = int(rng.choice([
                    0, 1, 2, 3, 4, old + 1, old | 1 << 16, old | 1 << 31,
                    int(rng.integers(0, 2**32))]))
            cases.append(regs)
        # the bias, the batch and the rows / channels it is compared with, made equal
        regs = dict(case.regs)
        for a, b in (("OP2_DIM0", "OP0_DIM0"), ("OP2_DIM1", "OP1_DIM1"),
                     ("OP0_DIM0", "OP3_DIM0"), ("OP1_DIM0", "OP2_DIM0")):
            more = dict(regs)
            more[REGS.index(a)] = regs.get(REGS.index(b), 0)
            cases.append(more)
    got = _decode_all(NmuRegisters(), cases)
    offset = task_fields_layout()["cause"].offset
    causes, malformed = set(), 0
    for regs, g in zip(cases, got, strict=True):
        try:
            want = task_fields(decode_task(regs)).as_bits()
        except NmuUnsupported as exc:
            assert (g >> offset) & 0xF == exc.cause, (regs, exc)
        except TaskFormatError:
            # attribute words the model reads as no valid attribute list: the RTL reads
            # the conv2d attribute bodies it uses and does not check the tags
            malformed += 1
            continue
        else:
            assert g == want, regs
        causes.add((g >> offset) & 0xF)
    assert {Cause.NONE, Cause.OPCODE, Cause.TYPE, Cause.LAYOUT} <= causes
    assert malformed < len(cases) // 10
