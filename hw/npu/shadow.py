"""A unit's shadow registers, written one word at a time, with flags set at the write.

The sequencer clears a compute unit's shadow registers and writes a task's words one by
one (``{"index", "value"}``, :func:`npu.cstl.regs.write_layout`); the unit decodes them.
A decode that compares a 32-bit word with a constant (``RANK > 4``, ``DIM == 1``,
``LEVEL != L1``) spends two or three LUT levels on the comparison, in front of the rest of
its logic. Here such a comparison is a one-bit register set in the cycle of the write,
from the value written (:meth:`ShadowRegisters.flag`), so the decode reads one bit. A
word the decode only uses in a few low bits when the task is not refused can be kept
narrow (``widths``) with a flag for the rest of the word.

Until the first ``clear`` the flags read 0 whatever their predicate says of a zero word
(the sequencer clears a unit's registers before each task's writes).

The flags are asked for while the decode is built and the write logic comes last
(:meth:`ShadowRegisters.elaborate_writes`), so a flag exists only where the decode reads
it. A flag may name a register map index that keeps no word (an attribute word a unit only
checks to be 0).
"""

from __future__ import annotations

from amaranth import Const, Signal

__all__ = ["WRITE_REGISTERS", "ShadowRegisters"]


class ShadowRegisters:
    """The shadow registers ``names`` of register map ``regs``, for a unit's
    ``elaborate``.

    Parameters
    ----------
    regs : nem.taskformat.RegisterMap
        The unit's register map (``regs.index(name)`` is a register's index).
    names : iterable of str
        The registers whose words are kept (:attr:`r`).
    widths : dict, optional
        Bits kept of some registers (default 32); the rest of the word is only seen
        through :meth:`flag`.

    Attributes
    ----------
    r : dict of str -> Signal
        The kept words, 0 after ``clear``.
    """

    def __init__(self, regs, names, widths=None):
        self._regs = regs
        widths = widths or {}
        self.r = {name: Signal(widths.get(name, 32), name=name.lower()) for name in names}
        self._flags = {}

    def flag(self, name, label, fn):
        """A one-bit register set with each write of register ``name`` to ``fn(value)``
        (``value`` the 32-bit word written) and at ``clear`` to ``fn(0)``; the same
        ``(name, label)`` gives the same register."""
        self._regs.index(name)          # a name the map does not have raises here
        if (name, label) not in self._flags:
            self._flags[name, label] = (Signal(name=f"{name.lower()}_{label}"), fn)
        return self._flags[name, label][0]

    def equals(self, name, value):
        """Register ``name`` holds ``value`` (a flag)."""
        return self.flag(name, f"is_{value:x}", lambda v: v == value)

    def nonzero(self, name):
        """Register ``name`` is not 0 (a flag)."""
        return self.flag(name, "nz", lambda v: v != 0)

    def above(self, name, bits):
        """Register ``name`` has a bit set at ``bits`` or above (a flag)."""
        return self.flag(name, f"above{bits}", lambda v: v[bits:] != 0)

    def elaborate_writes(self, m, clear, write, *, registered=False):
        """The registers' and flags' updates: ``clear`` (a pulse) sets every word to 0,
        a valid ``write`` (a stream of ``{"index", "value"}``, always taken) one word and
        its flags; indices with neither a word nor a flag are ignored. Call once, after
        the decode has asked for its flags.

        ``registered``: the strobes reach the registers :data:`WRITE_REGISTERS` cycles
        later, through registers here: ``clear``, the word, and one select per register
        (``write.valid`` and the index compared before the register), so each register's
        enable is a flip-flop of its own. (A registered ``valid`` and index decoded after
        it put one flip-flop in front of every shadow register's enable: 297-490 of the
        board's paths above 10 ns started at it, ``docs/fpga.md``.) The word's register
        loads only with a write (its enable is the unit's own strobe), so two units fed
        the same word keep a register each.
        """
        m.d.comb += write.ready.eq(1)
        by_name = {}
        for (name, _), (sig, fn) in self._flags.items():
            by_name.setdefault(name, []).append((sig, fn))
        names = sorted(set(self.r) | set(by_name), key=self._regs.index)
        index, value = write.payload.index, write.payload.value
        sel = {name: write.valid & (index == self._regs.index(name)) for name in names}
        if registered:
            clear_q = Signal(name="clear_q")
            value_q = Signal(32, name="write_value_q")
            sel_q = {name: Signal(name=f"write_{name.lower()}_q") for name in names}
            m.d.sync += [clear_q.eq(clear), *(sel_q[n].eq(sel[n]) for n in names)]
            with m.If(write.valid):
                m.d.sync += value_q.eq(value)
            clear, value, sel = clear_q, value_q, sel_q
        with m.If(clear):
            m.d.sync += [s.eq(0) for s in self.r.values()]
            m.d.sync += [sig.eq(fn(Const(0, 32))) for sig, fn in self._flags.values()]
        with m.Else():
            for name in names:
                with m.If(sel[name]):
                    if name in self.r:
                        m.d.sync += self.r[name].eq(value)
                    m.d.sync += [sig.eq(fn(value)) for sig, fn in by_name.get(name, [])]


#: Registers between the sequencer's ``clear`` / ``write`` strobes and a unit's shadow
#: registers (:meth:`ShadowRegisters.elaborate_writes` with ``registered``). The strobes
#: and the words come from the sequencer's window, which also feeds its own decode; a
#: register beside each unit lets the window stay beside the sequencer (the wire across
#: the die gets a cycle of its own).
WRITE_REGISTERS = 1
