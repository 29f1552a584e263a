"""The compute units take a start exactly ``START_WAIT`` quiet cycles after their last
shadow-register clear or write: the contract the sequencer's issue is built on.

The SEQ counts the same cycles from its own strobes (``npu.bus.stream.quiet_for``) and
offers a start no earlier, without looking at the unit's ``start.ready``; a unit that
took longer would refuse the start (``START_REFUSED``), one that took less would make the
SEQ slower than it needs to be. Here an idle unit gets a clear and writes with gaps
(each gap shorter than ``START_WAIT``, so the wait starts again), and ``start.ready`` is
watched cycle by cycle: low until ``START_WAIT`` cycles have passed without a strobe,
high from then on (the core is idle and ``start.valid`` stays low).
"""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from nem.taskformat import REGISTER_MAPS, Unit
from npu.cstl.unit import START_WAIT as CSTL_START_WAIT
from npu.cstl.unit import CstlUnit
from npu.nmu.model import NmuGeometry
from npu.nmu.unit import START_WAIT as NMU_START_WAIT
from npu.nmu.unit import NmuUnit


def _units():
    nmu = NmuUnit(geometry=NmuGeometry(lanes=8, cols=8, wrows=16, channels=16), depth=256)
    cstl = CstlUnit(lanes=8, depth=256)
    return (("nmu", nmu, NMU_START_WAIT, REGISTER_MAPS[Unit.NMU]),
            ("cstl", cstl, CSTL_START_WAIT, REGISTER_MAPS[Unit.CSTL]))


@pytest.mark.parametrize("name", ["nmu", "cstl"])
def test_start_ready_exactly_start_wait_after_the_last_strobe(name):
    _, dut, wait, regs = next(u for u in _units() if u[0] == name)
    rng = random.Random(7)
    # a strobe schedule: None = quiet cycle, "clear", or a register index to write
    schedule = ["clear"]
    for _ in range(12):
        schedule += [None] * rng.randrange(wait)             # gaps shorter than the wait
        schedule.append(rng.randrange(len(regs)))
    schedule += [None] * rng.randrange(wait) + ["clear"]
    schedule += [None] * (wait + 4)
    seen = []

    async def bench(ctx):
        quiet = 0           # cycles since the last strobe (counted before this cycle)
        for cycle, strobe in enumerate(schedule):
            ctx.set(dut.clear, strobe == "clear")
            ctx.set(dut.write.valid, isinstance(strobe, int))
            if isinstance(strobe, int):
                ctx.set(dut.write.payload, {"index": strobe, "value": rng.getrandbits(32)})
            assert ctx.get(dut.write.ready)
            ready = ctx.get(dut.start.ready)
            seen.append(ready)
            want = cycle > 0 and quiet >= wait
            assert ready == want, (f"{name}: cycle {cycle}, {quiet} quiet cycles before it: "
                                   f"start.ready {ready}, want {int(want)}")
            quiet = 0 if strobe is not None else quiet + 1
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen[-1] and not seen[-wait - 5], "the schedule must end with a full wait"
