"""Register-map validation messages, the CSR model's hand-derived behaviour, and the
ports the bank and the slice get from a map (the AXI4-Lite widths from the AMBA AXI4-Lite
specification: 32-bit data, 4 byte strobes, 2-bit responses, 1-bit handshakes)."""

import pytest
from amaranth import Shape
from amaranth.lib.wiring import Flow

from npu.bus.csr import AxiLiteCsr, AxiLiteSlice, CsrModel, Reg, RegisterMap, axi_lite_signature


@pytest.mark.parametrize(("regs", "message"), [
    ([Reg("a", 2, "rw")], "register a: offset 0x2 is not a 4-byte aligned address"),
    ([Reg("a", 0, "rw"), Reg("b", 0, "ro")], "register b: offset 0x0 already used by a"),
    ([Reg("a", 0, "rw"), Reg("a", 4, "ro")], "register name 'a' is not a unique identifier"),
    ([Reg("a", 0, "wo")], "register a: access must be one of"),
    ([Reg("a", 0x1000, "rw")], "register a: offset 0x1000 is not a 4-byte aligned address "
                               "below 0x1000"),
    ([Reg("a", 0, "rw", init=1 << 32)], "register a: init 0x100000000 is not 32-bit"),
    ([Reg("a", 0, "rw", init=-1)], "register a: init -0x1 is not 32-bit"),
    ([Reg("s", 0, "ro", init=5)], "register s: init 0x5 on a ro register (only rw "
                                  "registers have a reset value)"),
    ([Reg("go", 0, "pulse", init=1)], "register go: init 0x1 on a pulse register"),
])
def test_map_errors(regs, message):
    with pytest.raises(ValueError) as info:
        RegisterMap(regs)
    assert str(info.value).startswith(message)


def test_model_strobes_and_pulses():
    model = CsrModel(RegisterMap([Reg("x", 0, "rw", init=0x11223344), Reg("go", 4, "pulse")]))
    # Strobe 0b0100 replaces byte 2 only: 0x11223344 -> 0x11AB3344.
    assert model.write(0, 0x00AB0000, strb=0b0100) == 0
    assert model.read(0) == (0x11AB3344, 0)
    assert model.write(4, 1) == 0 and model.pulses == ["go"]
    assert model.write(8, 1) == 2 and model.read(8) == (0, 2)  # unmapped: SLVERR


def test_map_bounds_and_lookup():
    regmap = RegisterMap([Reg("a", 0, "rw", init=(1 << 32) - 1), Reg("b", 0xFFC, "ro")])
    assert regmap["b"] is regmap.regs[1] and regmap.offset("b") == 0xFFC
    assert regmap.offset("a") == 0 and regmap["a"].init == 0xFFFFFFFF
    with pytest.raises(KeyError):
        regmap.offset("c")


def test_model_addresses_registers_and_pulses():
    model = CsrModel(RegisterMap([Reg("x", 0, "rw", init=7), Reg("st", 4, "ro"),
                                  Reg("go", 8, "pulse")]))
    assert model.values == {"x": 7}          # only rw registers hold a value
    # the bus is 12 bits wide and word addressed: 0x1001 and 0x2003 are word 0
    assert model.write(0x1001, 0x55) == 0 and model.read(0x2003) == (0x55, 0)
    # a write to a ro register is answered OKAY and changes nothing, pulses nothing
    assert model.write(4, 0xFFFFFFFF) == 0 and model.pulses == []
    assert model.read(4) == (0, 0)           # the design drives nothing: 0
    assert model.read(4, {"st": 9}) == (9, 0)
    # a pulse needs bit 0 written as 1: byte strobe 0 and value bit 0
    for value, strb in ((1, 0b1110), (2, 0xF), (0xFFFFFFFE, 0xF), (0x100, 0b0010)):
        assert model.write(8, value, strb) == 0
    assert model.pulses == []
    assert model.write(8, 3, 0b0001) == 0 and model.pulses == ["go"]
    assert model.read(8) == (0, 0) and model.values == {"x": 0x55}


def test_bus_signature_widths():
    want = {"awaddr": (Flow.In, 10), "awvalid": (Flow.In, 1), "awready": (Flow.Out, 1),
            "wdata": (Flow.In, 32), "wstrb": (Flow.In, 4), "wvalid": (Flow.In, 1),
            "wready": (Flow.Out, 1), "bresp": (Flow.Out, 2), "bvalid": (Flow.Out, 1),
            "bready": (Flow.In, 1), "araddr": (Flow.In, 10), "arvalid": (Flow.In, 1),
            "arready": (Flow.Out, 1), "rdata": (Flow.Out, 32), "rresp": (Flow.Out, 2),
            "rvalid": (Flow.Out, 1), "rready": (Flow.In, 1)}
    members = axi_lite_signature(10).members
    assert {n: (m.flow, Shape.cast(m.shape).width) for n, m in members.items()} == want
    sl = AxiLiteSlice(10)
    assert sl.addr_width == 10
    assert sl.signature.members["sub"].signature == axi_lite_signature(10)
    assert sl.signature.members["man"].signature == axi_lite_signature(10).flip()


def test_bank_ports_per_access():
    regmap = RegisterMap([Reg("a", 0, "rw", init=0xABCD), Reg("st", 4, "ro"),
                          Reg("go", 8, "pulse")], addr_width=8)
    bank = AxiLiteCsr(regmap)
    regs = bank.signature.members["regs"].signature.members
    got = {n: (m.flow, Shape.cast(m.shape).width, m.init or 0) for n, m in regs.items()}
    assert got == {"a": (Flow.Out, 32, 0xABCD), "st": (Flow.In, 32, 0),
                   "go": (Flow.Out, 1, 0)}
    assert bank.signature.members["bus"].signature == axi_lite_signature(8)
    with pytest.raises(TypeError, match=r"regmap must be a RegisterMap, not \[Reg"):
        AxiLiteCsr(list(regmap.regs))
