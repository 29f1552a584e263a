"""A product in a register, on the FPGA's multiplier and its own output register.

Yosys 0.70's ``synth_ecp5`` maps ``a * b`` to a MULT18X18D but leaves the register after it
in the fabric, where the placer puts it beside the logic that reads it: a cycle then holds
the route into the multiplier, the multiplier and the route out of it. The MULT18X18D has
an output register of its own (``REG_OUTPUT_CLK``); :func:`registered_product` uses it when
the design is elaborated for the ECP5 (``platform`` is :data:`ECP5`, as
``npu.tools.synth.ecp5_verilog`` passes it to ``verilog.convert`` for every FPGA flow), so
that the route out of the multiplier gets a cycle of its own. Elaborated for anything else
(simulation, Verilator) it is the same register in Amaranth: ``p`` loads ``a * b`` on the
cycles ``en`` is high, and is never reset (the MULT18X18D's register is not wired to a
reset), so both elaborations behave alike cycle for cycle.

The MULT18X18D: ``A`` and ``B`` are 18 bits, signed when ``SIGNEDA`` / ``SIGNEDB`` is high;
``P`` is their 36-bit product; ``REG_OUTPUT_CLK = "CLK0"`` registers ``P`` on ``CLK0``, loading
when the clock enable named by ``REG_OUTPUT_CE`` is high (Lattice TN1267, "ECP5 and ECP5-5G
sysDSP Usage Guide"). ``tests/hw/test_dsp.py`` simulates the instance through a model of
the primitive written from that description.
"""

from __future__ import annotations

from amaranth import ClockSignal, Const, Instance, Signal, signed

__all__ = ["ECP5", "Ecp5Target", "constant_product", "is_ecp5", "mult18x18d",
           "registered_product"]

#: Operand bits of the MULT18X18D (signed).
WIDTH = 18


class Ecp5Target:
    """Elaboration target of the ECP5 flows: pass :data:`ECP5` as ``platform`` to
    ``amaranth.back.verilog.convert`` and :func:`registered_product` instantiates the
    MULT18X18D with its output register."""

    dsp = "ecp5"

    def __repr__(self):
        return "ECP5"


#: The ECP5 target (``npu.tools.synth.ecp5_verilog``, which every ECP5 flow uses).
ECP5 = Ecp5Target()


def is_ecp5(platform):
    """True when *platform* asks for the ECP5's DSP primitives."""
    return getattr(platform, "dsp", None) == "ecp5"


def mult18x18d(**ports):
    """The MULT18X18D primitive with *ports* (Amaranth ``Instance`` keywords); tests replace
    it with a model of the primitive."""
    return Instance("MULT18X18D", **ports)


def _operand(value, what, name):
    """*value* as an 18-bit two's-complement operand (sign or zero extended)."""
    width, is_signed = len(value), value.shape().signed
    if width > WIDTH or (not is_signed and width > WIDTH - 1) or width < 1:
        raise ValueError(f"{name}: operand {what} is {value.shape()}; the MULT18X18D takes "
                         f"at most signed({WIDTH}) or unsigned({WIDTH - 1})")
    return value.as_signed() if is_signed else value.as_unsigned()


def registered_product(m, a, b, *, en, name, platform):
    """``a * b`` in a register that loads on *en*: one cycle of latency.

    Parameters
    ----------
    m : amaranth.Module
        Where the register (or the MULT18X18D) goes (``sync`` domain).
    a, b : amaranth.Value
        Operands: signed of at most 18 bits, or unsigned of at most 17.
    en : amaranth.Value
        The register loads when high.
    name : str
        Name of the register (and of the MULT18X18D instance).
    platform : object or None
        :data:`ECP5` for the ECP5's multiplier with its output register; anything else
        for a register in Amaranth.

    Call it outside ``m.If`` / ``m.Switch``: the ECP5 form drives the multiplier's operands
    with ``m.d.comb``, which a surrounding condition would gate.

    Returns
    -------
    amaranth.Signal
        ``signed(wa + wb)``, where ``wa`` / ``wb`` are the operands' widths with one bit
        added to an unsigned one: the product of the operands of the last cycle *en* was
        high (zero before the first).
    """
    a = _operand(a, "a", name)
    b = _operand(b, "b", name)
    wa = len(a) + (0 if a.shape().signed else 1)
    wb = len(b) + (0 if b.shape().signed else 1)
    p = Signal(signed(wa + wb), name=name, reset_less=True)
    if not is_ecp5(platform):
        with m.If(en):
            m.d.sync += p.eq(a * b)
        return p
    a18, b18 = Signal(signed(WIDTH), name=f"{name}_a"), Signal(signed(WIDTH), name=f"{name}_b")
    p36 = Signal(2 * WIDTH, name=f"{name}_p36")
    m.d.comb += [a18.eq(a), b18.eq(b), p.eq(p36[:wa + wb])]
    ports = {"p_REG_INPUTA_CLK": "NONE", "p_REG_INPUTB_CLK": "NONE",
             "p_REG_PIPELINE_CLK": "NONE", "p_REG_OUTPUT_CLK": "CLK0",
             "p_REG_OUTPUT_CE": "CE0", "p_REG_OUTPUT_RST": "RST0",
             "p_RESETMODE": "SYNC", "p_GSR": "DISABLED", "p_MULT_BYPASS": "DISABLED",
             "p_SOURCEB_MODE": "B_SHIFT", "p_CAS_MATCH_REG": "FALSE",
             "i_CLK0": ClockSignal("sync"), "i_CE0": en, "i_RST0": 0,
             "i_SIGNEDA": 1, "i_SIGNEDB": 1, "i_SOURCEA": 0, "i_SOURCEB": 0}
    for bit in range(WIDTH):
        ports[f"i_A{bit}"] = a18[bit]
        ports[f"i_B{bit}"] = b18[bit]
        ports[f"i_C{bit}"] = 0
    for bit in range(2 * WIDTH):
        ports[f"o_P{bit}"] = p36[bit]
    m.submodules[name] = mult18x18d(**ports)
    return p


def constant_product(value, constant):
    """``value * constant`` for a constant, as shifted adds and subtracts, not a multiplier.

    Yosys maps a product by a constant that is not a power of two to a MULT18X18D (two for
    an operand above 17 bits), 3.93 ns from input to output on the ECP5-85F speed 6, with
    the routes to and from it. The canonical signed digits of the constant (no two
    adjacent digits non-zero) give the fewest terms: ``v * 56`` is ``(v << 6) - (v << 3)``,
    one carry chain.

    Parameters
    ----------
    value : amaranth.Value
        Unsigned operand.
    constant : int
        Non-negative constant.

    Returns
    -------
    amaranth.Value
        The product (its width may exceed what it needs; assign it to a signal wide enough
        for ``value``'s largest product).
    """
    if not isinstance(constant, int) or constant < 0:
        raise ValueError(f"constant must be a non-negative integer, not {constant!r}")
    if value.shape().signed:
        raise ValueError(f"value must be unsigned, not {value.shape()}")
    plus, minus = [], []
    c, k = constant, 0
    while c:
        if c & 1:
            digit = 2 - (c & 3)           # +1 when c = 1 mod 4, -1 when c = 3 mod 4
            (plus if digit > 0 else minus).append(value << k)
            c -= digit
        c >>= 1
        k += 1
    if not plus:
        return Const(0, 1)
    total = plus[0]
    for term in plus[1:]:
        total = total + term
    for term in minus:
        total = total - term
    return total
