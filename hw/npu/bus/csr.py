"""Control/status registers over AXI4-Lite, generated from a register map defined once.

A :class:`RegisterMap` lists 32-bit registers by name and byte offset. From it come:

* :class:`AxiLiteCsr`, the Amaranth subordinate: each ``rw`` register is an output port
  ``regs__<name>`` holding the value written by the host; each ``ro`` register is an input
  port the design drives (status, counters); each ``pulse`` register is an output that is
  high for one cycle after the host writes a 1 to bit 0 (start, clear);
* :class:`CsrModel`, the Python model of the same behaviour;
* :meth:`RegisterMap.offset` for host code (drivers, cocotb tests);
* :class:`AxiLiteSlice`, a register slice for the bus between a manager and a bank that
  sit far apart on the die (the board's UART bridge and the engine).

Bus behaviour
-------------
AW and W are accepted independently (each held in a one-entry buffer); once both are
present the write is performed (byte strobes honoured on ``rw`` registers; writes to
``ro`` registers are ignored) and B answers OKAY, or SLVERR for an unmapped address.
AR is answered on R one cycle later with the register value, or 0 and SLVERR for an
unmapped address. One write and one read may be in progress at once; each channel holds
its response until taken, so back-pressure on B or R stalls only that channel.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from npu.bus.stream import SkidBuffer

__all__ = ["AxiLiteCsr", "AxiLiteSlice", "CsrModel", "Reg", "RegisterMap",
           "axi_lite_signature"]

RESP_OKAY, RESP_SLVERR = 0, 2
ACCESS = ("rw", "ro", "pulse")


@dataclass(frozen=True)
class Reg:
    """One 32-bit register: ``name``, byte ``offset``, ``access``, reset value, meaning."""

    name: str
    offset: int
    access: str
    init: int = 0
    doc: str = ""


class RegisterMap:
    """An ordered, validated set of registers.

    Parameters
    ----------
    regs : iterable of Reg
    addr_width : int
        Byte-address width of the bus (offsets must fit).

    Raises
    ------
    ValueError
        Naming the register and the problem (bad name, misaligned or duplicate offset,
        unknown access, init out of range or on a register that is not ``rw``).
    """

    def __init__(self, regs, *, addr_width=12):
        self.addr_width = addr_width
        self.regs = tuple(regs)
        seen_names, seen_offsets = set(), {}
        for reg in self.regs:
            if not reg.name.isidentifier() or reg.name in seen_names:
                raise ValueError(f"register name {reg.name!r} is not a unique identifier")
            if reg.offset % 4 or not 0 <= reg.offset < (1 << addr_width):
                raise ValueError(f"register {reg.name}: offset {reg.offset:#x} is not a "
                                 f"4-byte aligned address below {1 << addr_width:#x}")
            if reg.offset in seen_offsets:
                raise ValueError(f"register {reg.name}: offset {reg.offset:#x} already used "
                                 f"by {seen_offsets[reg.offset]}")
            if reg.access not in ACCESS:
                raise ValueError(f"register {reg.name}: access must be one of {ACCESS}, "
                                 f"not {reg.access!r}")
            if not 0 <= reg.init < 1 << 32:
                raise ValueError(f"register {reg.name}: init {reg.init:#x} is not 32-bit")
            if reg.init and reg.access != "rw":
                raise ValueError(f"register {reg.name}: init {reg.init:#x} on a "
                                 f"{reg.access} register (only rw registers have a reset "
                                 f"value)")
            seen_names.add(reg.name)
            seen_offsets[reg.offset] = reg.name
        self._by_name = {reg.name: reg for reg in self.regs}

    def __getitem__(self, name):
        return self._by_name[name]

    def offset(self, name):
        """Byte offset of register *name*."""
        return self._by_name[name].offset


def axi_lite_signature(addr_width):
    """AXI4-Lite signature as seen by the subordinate (use it as ``Out(...)`` there)."""
    return wiring.Signature({
        "awaddr": In(addr_width), "awvalid": In(1), "awready": Out(1),
        "wdata": In(32), "wstrb": In(4), "wvalid": In(1), "wready": Out(1),
        "bresp": Out(2), "bvalid": Out(1), "bready": In(1),
        "araddr": In(addr_width), "arvalid": In(1), "arready": Out(1),
        "rdata": Out(32), "rresp": Out(2), "rvalid": Out(1), "rready": In(1),
    })


class CsrModel:
    """Python model: register values as the host sees them.

    Attributes
    ----------
    values : dict
        The value of each ``rw`` register by name (the design drives the ``ro`` ones; a
        ``pulse`` register holds nothing).
    pulses : list of str
        The ``pulse`` registers triggered, in order.
    """

    def __init__(self, regmap):
        self.map = regmap
        self.values = {reg.name: reg.init for reg in regmap.regs if reg.access == "rw"}
        self.pulses = []   # names of pulse registers triggered, in order

    def _find(self, addr):
        for reg in self.map.regs:
            if reg.offset == addr & ~3 & ((1 << self.map.addr_width) - 1):
                return reg
        return None

    def write(self, addr, value, strb=0xF):
        """Return the B response code."""
        reg = self._find(addr)
        if reg is None:
            return RESP_SLVERR
        if reg.access == "rw":
            mask = sum(0xFF << (8 * k) for k in range(4) if strb >> k & 1)
            self.values[reg.name] = (self.values[reg.name] & ~mask) | (value & mask)
        elif reg.access == "pulse" and strb & 1 and value & 1:
            self.pulses.append(reg.name)
        return RESP_OKAY

    def read(self, addr, ro_values=None):
        """Return ``(data, resp)``; *ro_values* supplies what the design drives."""
        reg = self._find(addr)
        if reg is None:
            return 0, RESP_SLVERR
        if reg.access == "ro":
            return (ro_values or {}).get(reg.name, 0), RESP_OKAY
        if reg.access == "pulse":
            return 0, RESP_OKAY
        return self.values[reg.name], RESP_OKAY


class AxiLiteCsr(wiring.Component):
    """AXI4-Lite register bank generated from a :class:`RegisterMap`.

    Attributes
    ----------
    bus : AXI4-Lite subordinate
    regs : one member per register (``rw``/``pulse``: out, ``ro``: in), 32 bits each
    """

    def __init__(self, regmap):
        if not isinstance(regmap, RegisterMap):
            raise TypeError(f"regmap must be a RegisterMap, not {regmap!r}")
        self.map = regmap
        members = {}
        for reg in regmap.regs:
            width = 1 if reg.access == "pulse" else 32
            flow = In if reg.access == "ro" else Out
            # (only an rw register has a reset value: the map holds the others' at 0)
            members[reg.name] = flow(width, init=reg.init)
        super().__init__({
            "bus": Out(axi_lite_signature(regmap.addr_width)),
            "regs": Out(wiring.Signature(members)),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        aw = Signal(self.map.addr_width)
        aw_full = Signal()
        wd = Signal(32)
        ws = Signal(4)
        w_full = Signal()

        for reg in self.map.regs:
            if reg.access == "pulse":
                m.d.sync += getattr(self.regs, reg.name).eq(0)

        # Write address and data, each into a one-entry buffer.
        m.d.comb += [bus.awready.eq(~aw_full), bus.wready.eq(~w_full)]
        with m.If(bus.awvalid & bus.awready):
            m.d.sync += [aw.eq(bus.awaddr), aw_full.eq(1)]
        with m.If(bus.wvalid & bus.wready):
            m.d.sync += [wd.eq(bus.wdata), ws.eq(bus.wstrb), w_full.eq(1)]

        # Perform the write when both are present and no B is pending.
        with m.If(aw_full & w_full & ~bus.bvalid):
            m.d.sync += [aw_full.eq(0), w_full.eq(0), bus.bvalid.eq(1),
                         bus.bresp.eq(RESP_SLVERR)]
            with m.Switch(aw[2:]):
                for reg in self.map.regs:
                    with m.Case(reg.offset >> 2):
                        m.d.sync += bus.bresp.eq(RESP_OKAY)
                        port = getattr(self.regs, reg.name)
                        if reg.access == "rw":
                            for lane in range(4):
                                with m.If(ws[lane]):
                                    m.d.sync += port[8 * lane: 8 * lane + 8].eq(
                                        wd[8 * lane: 8 * lane + 8])
                        elif reg.access == "pulse":
                            m.d.sync += port.eq(ws[0] & wd[0])
        with m.If(bus.bvalid & bus.bready):
            m.d.sync += bus.bvalid.eq(0)

        # Reads: answer one cycle after AR, hold until taken.
        m.d.comb += bus.arready.eq(~bus.rvalid)
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += [bus.rvalid.eq(1), bus.rdata.eq(0), bus.rresp.eq(RESP_SLVERR)]
            with m.Switch(bus.araddr[2:]):
                for reg in self.map.regs:
                    with m.Case(reg.offset >> 2):
                        m.d.sync += bus.rresp.eq(RESP_OKAY)
                        if reg.access != "pulse":
                            m.d.sync += bus.rdata.eq(getattr(self.regs, reg.name))
        with m.Elif(bus.rvalid & bus.rready):
            m.d.sync += bus.rvalid.eq(0)
        return m


#: AXI4-Lite channels: (name, direction, payload members in order). ``fwd`` channels go
#: from the manager to the subordinate, ``back`` ones the other way.
_CHANNELS = (("aw", "fwd", ("awaddr",)), ("w", "fwd", ("wdata", "wstrb")),
             ("b", "back", ("bresp",)), ("ar", "fwd", ("araddr",)),
             ("r", "back", ("rdata", "rresp")))


class AxiLiteSlice(wiring.Component):
    """AXI4-Lite register slice: each of the five channels through a :class:`SkidBuffer`.

    Every signal out of the slice, on either side, comes from a flip-flop, so no
    combinational path crosses it: a manager's state machine and a register bank's read
    multiplexer placed far apart each see a register beside them instead of the other's
    logic. Each channel keeps its order and one transfer a cycle; a transaction takes one
    more cycle each way (two per read or write).

    Parameters
    ----------
    addr_width : int

    Attributes
    ----------
    sub : AXI4-Lite subordinate (connect the manager here)
    man : AXI4-Lite manager (connect the register bank here)
    """

    def __init__(self, addr_width):
        self.addr_width = addr_width
        super().__init__({"sub": Out(axi_lite_signature(addr_width)),
                          "man": In(axi_lite_signature(addr_width))})

    def elaborate(self, platform):
        m = Module()
        for name, way, members in _CHANNELS:
            src, dst = (self.sub, self.man) if way == "fwd" else (self.man, self.sub)
            fields_in = Cat(*(getattr(src, f) for f in members))
            m.submodules[name] = buf = SkidBuffer(len(fields_in))
            m.d.comb += [buf.i.valid.eq(getattr(src, f"{name}valid")),
                         getattr(src, f"{name}ready").eq(buf.i.ready),
                         buf.i.payload.eq(fields_in),
                         getattr(dst, f"{name}valid").eq(buf.o.valid),
                         buf.o.ready.eq(getattr(dst, f"{name}ready")),
                         Cat(*(getattr(dst, f) for f in members)).eq(buf.o.payload)]
        return m
