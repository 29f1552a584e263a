"""Simulation models of the ECP5 primitives the RTL instantiates for the FPGA.

Yosys ships the ECP5's MULT18X18D as a black box, so the Amaranth simulator cannot run an
instance of it. :class:`Mult18x18dModel` takes the same keywords as
``npu.dsp.mult18x18d`` (the instance's ``p_`` parameters, ``i_`` inputs and ``o_``
outputs) and behaves as the primitive does by Lattice's description (TN1267, "ECP5 and
ECP5-5G sysDSP Usage Guide"): ``A`` and ``B`` are 18 bits, signed when ``SIGNEDA`` /
``SIGNEDB`` is high; ``P`` is their 36-bit product; each of the input A, input B, pipeline
and output registers is present when its ``REG_*_CLK`` names a clock, and then loads on
the clock enable its ``REG_*_CE`` names and clears on the reset its ``REG_*_RST`` names.
Written apart from ``npu.dsp`` so that a wrong pin, parameter or bit order there shows as a
difference from the Amaranth register the instance replaces. A parameter or port the model
does not know is refused.
"""

from __future__ import annotations

from amaranth import Cat, ClockSignal, Elaboratable, Module, Mux, Signal
from amaranth.hdl import Const, Value

_REGS = ("INPUTA", "INPUTB", "PIPELINE", "OUTPUT")
_KNOWN_PARAMS = ({f"REG_{r}_{k}" for r in _REGS for k in ("CLK", "CE", "RST")}
                 | {"RESETMODE", "GSR", "MULT_BYPASS", "SOURCEB_MODE", "CAS_MATCH_REG"})
_KNOWN_INPUTS = ({f"{p}{i}" for p in "ABC" for i in range(18)}
                 | {f"{p}{i}" for p in ("CLK", "CE", "RST") for i in range(4)}
                 | {"SIGNEDA", "SIGNEDB", "SOURCEA", "SOURCEB"})
#: Inputs the model does not model (the C operand, the cascade's shift-in selects): only
#: a constant 0 is accepted on them.
_UNMODELLED = {f"C{i}" for i in range(18)} | {"SOURCEA", "SOURCEB"}
#: The legal values of the parameters (TN1267).
_LEGAL = {"RESETMODE": {"SYNC", "ASYNC"}, "GSR": {"ENABLED", "DISABLED"},
          "MULT_BYPASS": {"ENABLED", "DISABLED"}, "CAS_MATCH_REG": {"TRUE", "FALSE"},
          "SOURCEB_MODE": {"B_SHIFT", "C_SHIFT", "B_C_DYNAMIC", "HIGHSPEED"},
          **{f"REG_{r}_CLK": {"NONE", "CLK0", "CLK1", "CLK2", "CLK3"} for r in _REGS},
          **{f"REG_{r}_CE": {"CE0", "CE1", "CE2", "CE3"} for r in _REGS},
          **{f"REG_{r}_RST": {"RST0", "RST1", "RST2", "RST3"} for r in _REGS}}


class Mult18x18dModel(Elaboratable):
    """A MULT18X18D from its instance keywords, for the ``sync`` domain's clock."""

    def __init__(self, **ports):
        self.params, self.inputs, self.outputs = {}, {}, {}
        for key, value in ports.items():
            kind, name = key[:2], key[2:]
            table = {"p_": self.params, "i_": self.inputs, "o_": self.outputs}.get(kind)
            known = {"p_": _KNOWN_PARAMS, "i_": _KNOWN_INPUTS,
                     "o_": {f"P{i}" for i in range(36)}}.get(kind, set())
            if table is None or name not in known:
                raise ValueError(f"MULT18X18D model: unknown keyword {key!r}")
            if kind == "p_" and value not in _LEGAL[name]:
                raise ValueError(f"MULT18X18D model: {name} = {value!r} is not one of "
                                 f"{sorted(_LEGAL[name])}")
            if kind == "i_" and not isinstance(value, ClockSignal):
                value = Value.cast(value)
                if len(value) != 1:
                    raise ValueError(f"MULT18X18D model: pin {name} is one bit, given "
                                     f"{len(value)}")
                if name in _UNMODELLED and not (isinstance(value, Const)
                                                and value.value == 0):
                    raise ValueError(f"MULT18X18D model: {name} is not modelled; tie it "
                                     "to 0")
            table[name] = value
        if self.params.get("MULT_BYPASS", "DISABLED") != "DISABLED":
            raise ValueError("MULT18X18D model: MULT_BYPASS must be DISABLED")

    def _bus(self, prefix, width):
        return Cat(*[self.inputs.get(f"{prefix}{i}", Const(0, 1)) for i in range(width)])

    def _register(self, m, value, which):
        clk = self.params.get(f"REG_{which}_CLK", "NONE")
        if clk == "NONE":
            return value
        if clk != "CLK0" or not isinstance(self.inputs.get("CLK0"), ClockSignal) \
                or self.inputs["CLK0"].domain != "sync":
            raise ValueError(f"MULT18X18D model: REG_{which}_CLK={clk!r}; the model "
                             "runs CLK0 = the sync domain's clock only")
        if self.params.get("RESETMODE", "SYNC") != "SYNC":
            raise ValueError("MULT18X18D model: RESETMODE must be SYNC")
        ce = self.inputs.get(self.params.get(f"REG_{which}_CE", "CE0"), Const(0, 1))
        rst = self.inputs.get(self.params.get(f"REG_{which}_RST", "RST0"), Const(0, 1))
        reg = Signal(value.shape(), name=f"model_{which.lower()}", reset_less=True)
        with m.If(rst):
            m.d.sync += reg.eq(0)
        with m.Elif(ce):
            m.d.sync += reg.eq(value)
        return reg

    def elaborate(self, platform):
        m = Module()
        a = self._register(m, self._bus("A", 18), "INPUTA")
        b = self._register(m, self._bus("B", 18), "INPUTB")
        sa = self.inputs.get("SIGNEDA", Const(0, 1))
        sb = self.inputs.get("SIGNEDB", Const(0, 1))
        # 19-bit two's complement of each operand by its SIGNED pin, then the product
        ax = Signal(range(-(1 << 17), 1 << 18), name="model_a")
        bx = Signal(range(-(1 << 17), 1 << 18), name="model_b")
        m.d.comb += [ax.eq(Mux(sa, a.as_signed(), a)), bx.eq(Mux(sb, b.as_signed(), b))]
        prod = Signal(36, name="model_p")
        m.d.comb += prod.eq(ax * bx)
        prod = self._register(m, prod, "PIPELINE")
        prod = self._register(m, prod, "OUTPUT")
        for i, out in self.outputs.items():
            m.d.comb += out.eq(prod[int(i[1:])])
        return m
