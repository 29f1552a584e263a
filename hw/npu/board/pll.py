"""ECP5 PLL (``EHXPLLL``): divider search and the primitive.

:func:`pll_params` finds the dividers for an output frequency from the input clock under
the ECP5 limits (the same limits ``ecppll`` of prjtrellis uses; ``tests/board/test_pll.py``
compares the two where ``yowasp-ecppll`` is installed):

* ``CLKI_DIV`` 1..128, ``CLKFB_DIV`` 1..80, ``CLKOP_DIV`` 1..128;
* phase-detector input ``f_in / CLKI_DIV`` at least 3.125 MHz;
* VCO ``f_in / CLKI_DIV * CLKFB_DIV * CLKOP_DIV`` in 400..800 MHz (feedback from CLKOP);
* ``f_out = f_in * CLKFB_DIV / CLKI_DIV``.

The closest output frequency wins; among equals the VCO closest to 600 MHz, then the
smallest dividers; a target more than 5 % away from every setting is an error.
:class:`EcpPll` instantiates ``EHXPLLL`` with them (``CLKOP_CPHASE = (CLKOP_DIV - 1) // 2``,
as ``ecppll`` writes it) and the attributes nextpnr reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Elaboratable, Instance, Module, Signal

__all__ = ["EcpPll", "PllParams", "pll_params"]

VCO_MIN, VCO_MAX = 400.0, 800.0
PFD_MIN = 3.125


@dataclass(frozen=True)
class PllParams:
    """Dividers of one EHXPLLL output (CLKOP) and what they give."""

    clki_div: int
    clkfb_div: int
    clkop_div: int
    f_in: float
    f_out: float
    vco: float


def pll_params(f_in_mhz, f_out_mhz):
    """The dividers for ``f_out_mhz`` from ``f_in_mhz``; ``ValueError`` if none is in range."""
    best, key_best = None, None
    for clki in range(1, 129):
        pfd = f_in_mhz / clki
        if pfd < PFD_MIN:
            break
        for fb in range(1, 81):
            f_out = pfd * fb
            for op in range(1, 129):
                vco = f_out * op
                if vco < VCO_MIN:
                    continue
                if vco > VCO_MAX:
                    break
                key = (round(abs(f_out - f_out_mhz), 9), abs(vco - 600.0), clki, fb, op)
                if key_best is None or key < key_best:
                    best = PllParams(clki, fb, op, f_in_mhz, f_out, vco)
                    key_best = key
    if best is None or abs(best.f_out - f_out_mhz) > 0.05 * f_out_mhz:
        raise ValueError(f"no ECP5 PLL setting gives {f_out_mhz} MHz from {f_in_mhz} MHz "
                         "within 5 %" + (f" (closest {best.f_out:g} MHz)" if best else ""))
    return best


class EcpPll(Elaboratable):
    """One ``EHXPLLL`` with CLKOP fed back: ``clk_in`` -> ``clk_out``, ``locked``.

    Parameters
    ----------
    f_in_mhz, f_out_mhz : float
        Input and wanted output frequency.
    """

    def __init__(self, f_in_mhz, f_out_mhz):
        self.params = pll_params(f_in_mhz, f_out_mhz)
        self.clk_in = Signal()
        self.clk_out = Signal()
        self.locked = Signal()

    def elaborate(self, platform):
        m = Module()
        p = self.params
        m.submodules.pll = Instance(
            "EHXPLLL",
            a_FREQUENCY_PIN_CLKI=f"{p.f_in:g}",
            a_FREQUENCY_PIN_CLKOP=f"{p.f_out:g}",
            a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1",
            a_MFG_GMCREF_SEL="2",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB",
            p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD",
            p_CLKI_DIV=p.clki_div, p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=p.clkop_div,
            p_CLKOP_CPHASE=(p.clkop_div - 1) // 2, p_CLKOP_FPHASE=0,
            p_FEEDBK_PATH="CLKOP", p_CLKFB_DIV=p.clkfb_div,
            i_RST=0, i_STDBY=0, i_CLKI=self.clk_in, o_CLKOP=self.clk_out,
            i_CLKFB=self.clk_out, i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1,
            i_PHASESTEP=1, i_PHASELOADREG=1, i_PLLWAKESYNC=0, i_ENCLKOP=0,
            o_LOCK=self.locked,
        )
        return m
