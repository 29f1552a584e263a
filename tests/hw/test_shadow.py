"""``npu.shadow.ShadowRegisters``: kept words and write-time flags against a dict model.

Random writes (kept registers, narrow ones, registers with only a flag, registers with
neither) and clears go in through the write stream; after each cycle every kept word and
every flag equals what a Python dict of the last value written gives.
"""

from __future__ import annotations

import random

import pytest
from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from nem.taskformat import REGISTER_MAPS, TaskFormatError, Unit
from npu.shadow import WRITE_REGISTERS, ShadowRegisters

REGS = REGISTER_MAPS[Unit.CSTL]
KEPT = ["OPCODE", "OP0_RANK", "OP0_DIM0", "OP1_STRIDE3", "OP2_ADDR_LO"]   # the last: no flag
WIDTHS = {"OPCODE": 6, "OP0_RANK": 3, "OP0_DIM0": 16}
# (register, label, predicate on the 32-bit value): ATTR11 keeps no word, only a flag
FLAGS = [("OPCODE", "eq5", lambda v: v == 5), ("OP0_RANK", "nz", lambda v: v != 0),
         ("OP0_DIM0", "above16", lambda v: v >> 16 != 0), ("ATTR11", "nz", lambda v: v != 0),
         ("OP1_STRIDE3", "is_1", lambda v: v == 1),
         # several kinds on one register (their labels keep them apart); a predicate that
         # reads bit 31, which ``clear`` must see as a 32-bit zero
         ("OP0_DIM0", "eq5", lambda v: v == 5), ("OP0_DIM0", "nz", lambda v: v != 0),
         ("OP0_DIM0", "b31_clear", lambda v: (v >> 31) == 0)]


class _Dut(wiring.Component):
    def __init__(self, registered=False):
        self.registered = registered
        super().__init__({
            "clear": In(1),
            "write": In(stream.Signature(data.StructLayout({"index": 8, "value": 32}))),
            "words": Out(len(KEPT) * 32),
            "flags": Out(len(FLAGS)),
        })

    def elaborate(self, platform):
        m = Module()
        sh = ShadowRegisters(REGS, KEPT, WIDTHS)
        got = [sh.equals("OPCODE", 5), sh.nonzero("OP0_RANK"), sh.above("OP0_DIM0", 16),
               sh.nonzero("ATTR11"), sh.equals("OP1_STRIDE3", 1), sh.equals("OP0_DIM0", 5),
               sh.nonzero("OP0_DIM0"), sh.flag("OP0_DIM0", "b31_clear", lambda v: ~v[31])]
        assert sh.equals("OPCODE", 5) is got[0]          # asked twice, one register
        words = [Signal(32, name=f"w{i}") for i in range(len(KEPT))]
        m.d.comb += [w.eq(sh.r[name]) for w, name in zip(words, KEPT, strict=True)]
        for i, w in enumerate(words):
            m.d.comb += self.words[32 * i:32 * (i + 1)].eq(w)
        for i, g in enumerate(got):
            m.d.comb += self.flags[i].eq(g)
        if self.registered:
            sh.elaborate_writes(m, self.clear, self.write, registered=True)
        else:           # the keyword's default: not registered
            sh.elaborate_writes(m, self.clear, self.write)
        return m


@pytest.mark.parametrize("registered", [False, True])
def test_words_and_flags_follow_the_writes(registered):
    """``registered``: the same, :data:`npu.shadow.WRITE_REGISTERS` cycles later (the
    strobes pass registers first, as in the units)."""
    rng = random.Random(5)
    names = [*KEPT, "ATTR11", "ATTR12", "OP2_ADDR_LO"]
    ops = [("clear", None, None)]       # a unit's flags mean something from a clear on
    for _ in range(300):
        if rng.random() < 0.05:
            ops.append(("clear", None, None))
        else:
            v = rng.choice([0, 1, 5, 0xFFFF, 0x10000, 0x10005, 1 << 31, rng.getrandbits(32)])
            ops.append(("write" if rng.random() < 0.8 else "idle", rng.choice(names), v))
    lag = WRITE_REGISTERS if registered else 0
    ops += [("idle", None, None)] * lag
    dut = _Dut(registered)
    seen = []

    async def bench(ctx):
        for kind, name, value in ops:
            ctx.set(dut.clear, kind == "clear")
            ctx.set(dut.write.valid, kind == "write")
            if name is not None:
                ctx.set(dut.write.payload, {"index": REGS.index(name), "value": value})
            assert ctx.get(dut.write.ready) == 1
            await ctx.tick()
            seen.append((ctx.get(dut.words), ctx.get(dut.flags)))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    model = {}
    # what the registers hold ``lag`` cycles after an operation
    for (kind, name, value), (words, flags) in zip(ops, seen[lag:], strict=False):
        if kind == "clear":
            model = {}
        elif kind == "write":
            model[name] = value
        for i, n in enumerate(KEPT):
            want = model.get(n, 0) & ((1 << WIDTHS.get(n, 32)) - 1)
            assert (words >> 32 * i) & 0xFFFFFFFF == want, (n, kind, name, value)
        for i, (n, _, pred) in enumerate(FLAGS):
            assert (flags >> i) & 1 == int(pred(model.get(n, 0))), (n, kind, name, value)


def test_a_flag_of_a_register_the_map_lacks_is_refused():
    sh = ShadowRegisters(REGS, KEPT)
    with pytest.raises(TaskFormatError, match="NO_SUCH"):
        sh.nonzero("NO_SUCH")
