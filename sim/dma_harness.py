"""RegionCopy with its two memories, for tests (Amaranth simulator and cocotb).

The memories are :class:`amaranth.lib.memory.Memory` objects created in the constructor
so that simulator testbenches can preload and read them (``ctx.set/get(mem.data[i])``).
"""

from __future__ import annotations

from amaranth import Module, Mux
from amaranth.lib import wiring
from amaranth.lib.memory import Memory

from npu.bus.dma import RegionCopy


class RegionCopyHarness(wiring.Component):
    """``RegionCopy`` between a source and a destination memory (``depth`` words each).

    With ``refusals``, ``refuse`` (in) plays a caller whose memory ports are taken by
    someone else in that cycle: the copy's ``advance`` is low when ``refuse`` is high and
    the copy asks for a read or a write, and that access does not happen (it is asked for
    again). Without, ``advance`` is left undriven (its default, high).
    """

    def __init__(self, *, data_width=64, depth=256, src_init=(), dst_init=(), refusals=False):
        self.refusals = refusals
        self.dma = RegionCopy(data_width=data_width, src_depth=depth, dst_depth=depth)
        self.src_mem = Memory(shape=data_width, depth=depth, init=list(src_init))
        self.dst_mem = Memory(shape=data_width, depth=depth, init=list(dst_init))
        members = self.dma.signature.members
        super().__init__({"cmd": members["cmd"], "done": members["done"],
                          "bytes": members["bytes"], "busy": members["busy"],
                          "refuse": wiring.In(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.dma = dma = self.dma
        m.submodules.src_mem = self.src_mem
        m.submodules.dst_mem = self.dst_mem
        rd = self.src_mem.read_port(domain="sync")
        wr = self.dst_mem.write_port(granularity=8)
        advance = dma.advance
        if self.refusals:
            advance = ~(self.refuse & (dma.rd.en | dma.wr.valid))
            m.d.comb += dma.advance.eq(advance)
        m.d.comb += [rd.addr.eq(dma.rd.addr), rd.en.eq(dma.rd.en & advance),
                     dma.rd.data.eq(rd.data), wr.addr.eq(dma.wr.addr), wr.data.eq(dma.wr.data),
                     wr.en.eq(Mux(advance, dma.wr.en, 0))]
        wiring.connect(m, wiring.flipped(self.cmd), dma.cmd)
        wiring.connect(m, dma.done, wiring.flipped(self.done))
        m.d.comb += [self.bytes.eq(dma.bytes), self.busy.eq(dma.busy)]
        return m
