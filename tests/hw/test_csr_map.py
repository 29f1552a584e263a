"""Register-map validation messages and the CSR model's hand-derived behaviour."""

import pytest

from npu.bus.csr import CsrModel, Reg, RegisterMap


@pytest.mark.parametrize(("regs", "message"), [
    ([Reg("a", 2, "rw")], "register a: offset 0x2 is not a 4-byte aligned address"),
    ([Reg("a", 0, "rw"), Reg("b", 0, "ro")], "register b: offset 0x0 already used by a"),
    ([Reg("a", 0, "rw"), Reg("a", 4, "ro")], "register name 'a' is not a unique identifier"),
    ([Reg("a", 0, "wo")], "register a: access must be one of"),
    ([Reg("a", 0x1000, "rw")], "register a: offset 0x1000 is not a 4-byte aligned address "
                               "below 0x1000"),
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
