"""A small design around :class:`npu.bus.csr.AxiLiteCsr` for its tests (not part of the NPU).

Its read-only registers are driven by logic whose values a test can predict: a constant
id, ``scratch + 1``, and a count of ``start`` pulses.
"""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from npu.bus.csr import AxiLiteCsr, Reg, RegisterMap, axi_lite_signature

DEMO_ID = 0x4E505530  # "NPU0"

DEMO_MAP = RegisterMap([
    Reg("id", 0x00, "ro", doc="constant 0x4E505530"),
    Reg("scratch", 0x04, "rw", init=0x12345678, doc="free for the host"),
    Reg("ctrl", 0x08, "rw", doc="free for the host"),
    Reg("start", 0x0C, "pulse", doc="write 1: count a start"),
    Reg("starts", 0x10, "ro", doc="number of start pulses"),
    Reg("scratch_plus1", 0x20, "ro", doc="scratch + 1"),
])


class CsrDemo(wiring.Component):
    """:data:`DEMO_MAP` with its read-only registers driven."""

    def __init__(self):
        super().__init__({"bus": Out(axi_lite_signature(DEMO_MAP.addr_width))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.csr = csr = AxiLiteCsr(DEMO_MAP)
        wiring.connect(m, wiring.flipped(self.bus), csr.bus)
        m.d.comb += [csr.regs.id.eq(DEMO_ID), csr.regs.scratch_plus1.eq(csr.regs.scratch + 1)]
        with m.If(csr.regs.start):
            m.d.sync += csr.regs.starts.eq(csr.regs.starts + 1)
        return m
