"""NAC ABCD instruction decoder (spec §3, §7, §8.3).

The decoder reads the instruction bytes of an ``OPS`` section (everything after the tag and
the instruction count) as a byte stream and emits one decoded instruction per output
transfer: its index, ``A``, ``B``, the constant ids of ``C`` and, per argument, either the
absolute index of the ancestor instruction or the constant id that a zero in ``D`` takes.

Why a byte-wide input
---------------------
Every ABCD field is a byte or a little-endian int16, and instruction lengths are arbitrary
byte counts, so a byte per cycle needs no realignment logic. One byte per cycle, with no
idle cycle between instructions, decodes a typical 8-16 byte instruction in 8-16 cycles;
the NEM engine spends hundreds of cycles or more executing one NAC operation, so a wider
front end would buy nothing and cost a byte-lane shifter. The capacity parameters
(``max_args``, ``max_consts``) are what scale.

Protocol and timing
-------------------
* ``i``: stream of :data:`IN_LAYOUT` (``data`` byte, ``last`` on the final byte of the
  section). ``i.ready`` is high whenever the output register is free or being read, so with
  a ready consumer the decoder accepts a byte every cycle.
* ``o``: stream of :func:`decoded_layout`; the instruction whose final byte was accepted at
  edge *n* is valid from edge *n* on (one register stage).
* ``perm``: write port (always ready) loading the signature table: entry ``B`` holds the
  signature length and a bit per argument that is a constant code (see
  :func:`perm_entry`). The table is memory: reset does not clear it, so a loader writes
  all 256 entries (``valid = 0`` for unused ids) before streaming.
* ``num_outputs``: the header's output count; ``<OUTPUT B=0>`` must carry exactly that
  many offsets.
* ``error`` is sticky (until reset) with ``error_cause`` (:class:`DecodeError`) and
  ``error_index``. After an error the decoder keeps accepting and dropping input bytes, so
  its producer never blocks, and emits nothing more. ``done`` rises when the byte marked
  ``last`` ends an instruction; the next stream then starts again at index 0.

Decoding rules (what the model and the RTL implement)
-----------------------------------------------------
* Regular ops (``A >= 10``): ``B = 0`` has no signature: no C, no D. Otherwise ``PERM[B]``
  must be loaded. C is present iff the signature has a constant code: an int16 count ``n``
  then ``n`` int16 constant ids. D has one int16 per signature character. ``D[i] != 0``
  names ancestor ``index + D[i]``, which must lie in ``[0, index)``; ``D[i] == 0`` takes
  the next constant id of C. The number of zeros must equal ``n``.
* ``<INPUT>`` (``A = 2``): ``B = 0`` has no C and no D; ``B = 1, 2, 3`` has C = two int16:
  a prefix that must be 1 or 2 (the spec writes 2, the reference compiler 1) and the
  id, reported as the single constant id. No D.
* ``<OUTPUT>`` (``A = 3``, ``B = 0`` or ``1``): C = count ``n`` then ``n`` reserved int16
  (reported as constant ids), then ``n`` offsets in D, all non-zero.
* ``<CONTROL_FLOW>`` (6) and ``<CONVERGENCE>`` (7) are reserved/experimental in the spec
  and unimplemented by its runtime: :attr:`DecodeError.UNSUPPORTED_OP`. Other ``A < 10``:
  :attr:`DecodeError.UNKNOWN_SYSTEM_OP`.
"""

from __future__ import annotations

import enum as py_enum
from dataclasses import dataclass

from amaranth import Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from nac.encoding import CONSTANT_CODES, REGULAR_OP_MIN, SystemOp

__all__ = [
    "IN_LAYOUT",
    "OP_CONTROL_FLOW",
    "OP_CONVERGENCE",
    "OP_INPUT",
    "OP_OUTPUT",
    "REGULAR_OP_MIN",
    "DecodeError",
    "DecodedInstruction",
    "DecoderModel",
    "DecoderResult",
    "InstructionDecoder",
    "decoded_layout",
    "perm_entry",
    "perm_entry_layout",
    "perm_write_layout",
]

# System operation ids (spec §7) and the first regular id (§3.2.1): from nac.encoding.
OP_INPUT = int(SystemOp.INPUT)
OP_OUTPUT = int(SystemOp.OUTPUT)
OP_CONTROL_FLOW = int(SystemOp.CONTROL_FLOW)
OP_CONVERGENCE = int(SystemOp.CONVERGENCE)
MAX_INDEX = 0xFFFF  # MMAP ticks are uint16: an OPS stream has at most 65536 instructions


class DecodeError(enum.Enum, shape=4):
    """Cause codes of the decoder's sticky error."""

    NONE = 0
    UNKNOWN_SIGNATURE = 1   #: regular op whose PERM[B] is not loaded
    BAD_OFFSET = 2          #: D names an ancestor < 0 or >= the current index (or 0 in OUTPUT)
    CONST_MISMATCH = 3      #: zeros in D differ from the C count
    TRUNCATED = 4           #: the stream ended inside an instruction
    CAPACITY = 5            #: more constants/arguments than the decoder was built for
    BAD_SYSTEM_OP = 6       #: a system op with an invalid B or C prefix
    UNKNOWN_SYSTEM_OP = 7   #: A < 10 that is no system op
    UNSUPPORTED_OP = 8      #: CONTROL_FLOW / CONVERGENCE
    OUTPUT_COUNT = 9        #: <OUTPUT B=0> with a count other than the header's
    TOO_MANY = 10           #: more than 65536 instructions


IN_LAYOUT = data.StructLayout({"data": 8, "last": 1})


def _check_capacity(name, value, limit=255):
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
        raise ValueError(f"{name} must be an integer in 1..{limit}, not {value!r}")


def perm_entry_layout(max_args):
    """Layout of one signature-table entry."""
    return data.StructLayout({
        "valid": 1,
        "length": range(max_args + 1),
        "const_mask": max_args,  # bit i: signature character i is a constant code
    })




def perm_entry(signature, max_args):
    """Signature-table entry ``(length, const_mask)`` of a PERM signature string.

    Raises
    ------
    ValueError
        If the signature is longer than *max_args* (the decoder cannot hold it).
    """
    if len(signature) > max_args:
        raise ValueError(f"signature {signature!r} has {len(signature)} arguments, "
                         f"more than max_args {max_args}")
    mask = sum(1 << k for k, code in enumerate(signature) if code in CONSTANT_CODES)
    return len(signature), mask


def perm_write_layout(max_args):
    """Layout of a transfer on the ``perm`` write port: table index ``b`` and its entry."""
    return data.StructLayout({"b": 8, "entry": perm_entry_layout(max_args)})


def decoded_layout(max_args, max_consts):
    """Layout of one decoded instruction on the output stream."""
    return data.StructLayout({
        "index": 16,
        "a": 8,
        "b": 8,
        "n_consts": range(max_consts + 1),
        "consts": data.ArrayLayout(16, max_consts),
        "n_args": range(max_args + 1),
        # Per argument: is_const = 0: value is the ancestor's absolute index;
        # is_const = 1: value is the constant id taken from C.
        "args": data.ArrayLayout(data.StructLayout({"value": 16, "is_const": 1}), max_args),
    })


# --- Python model ---------------------------------------------------------------------


@dataclass(frozen=True)
class DecodedInstruction:
    """One decoded instruction (what the hardware emits, unused slots left out)."""

    index: int
    a: int
    b: int
    consts: tuple[int, ...]
    args: tuple[tuple[bool, int], ...]  # (is_const, value)


@dataclass(frozen=True)
class DecoderResult:
    """The model's answer for a whole stream."""

    instructions: tuple[DecodedInstruction, ...]
    error: DecodeError = DecodeError.NONE
    error_index: int = 0
    done: bool = False


class _Stop(Exception):
    def __init__(self, cause):
        self.cause = cause


class DecoderModel:
    """Behavioural model of :class:`InstructionDecoder`.

    Parameters
    ----------
    perm : dict of int to (int, int)
        Signature table: ``B -> (length, const_mask)``.
    max_args, max_consts : int
        Capacity, as for the hardware.
    num_outputs : int
        The header's output count.
    """

    def __init__(self, perm, *, max_args, max_consts, num_outputs=1):
        self.perm = dict(perm)
        self.max_args = max_args
        self.max_consts = max_consts
        self.num_outputs = num_outputs

    def decode(self, stream_bytes):
        """Decode a whole OPS byte stream (its last byte carries ``last``)."""
        data_bytes = bytes(stream_bytes)
        out = []
        pos = 0
        index = 0

        def byte():
            nonlocal pos
            if pos >= len(data_bytes):
                raise _Stop(DecodeError.TRUNCATED)
            pos += 1
            return data_bytes[pos - 1]

        def int16():
            lo = byte()
            hi = byte()
            value = lo | hi << 8
            return value - 0x10000 if value & 0x8000 else value

        try:
            while pos < len(data_bytes):
                if index > MAX_INDEX:
                    raise _Stop(DecodeError.TOO_MANY)
                a = byte()
                b = byte()
                consts, args = self._operands(a, b, index, int16)
                out.append(DecodedInstruction(index, a, b, tuple(consts), tuple(args)))
                index += 1
        except _Stop as stop:
            return DecoderResult(tuple(out), stop.cause, index, False)
        return DecoderResult(tuple(out), DecodeError.NONE, 0, True)

    def _operands(self, a, b, index, int16):
        if a >= REGULAR_OP_MIN:
            if b == 0:
                return [], []
            if b not in self.perm:
                raise _Stop(DecodeError.UNKNOWN_SIGNATURE)
            length, mask = self.perm[b]
            consts = []
            if mask:
                n = int16()
                if n < 0 or n > self.max_consts:
                    raise _Stop(DecodeError.CAPACITY if n > 0 else DecodeError.CONST_MISMATCH)
                consts = [int16() & 0xFFFF for _ in range(n)]
            args = []
            taken = 0
            for _ in range(length):
                d = int16()
                if d:
                    if not 0 <= index + d < index:
                        raise _Stop(DecodeError.BAD_OFFSET)
                    args.append((False, index + d))
                else:
                    if taken >= len(consts):
                        raise _Stop(DecodeError.CONST_MISMATCH)
                    args.append((True, consts[taken]))
                    taken += 1
            if taken != len(consts):
                raise _Stop(DecodeError.CONST_MISMATCH)
            return consts, args
        if a == OP_INPUT:
            if b == 0:
                return [], []
            if b > 3:
                raise _Stop(DecodeError.BAD_SYSTEM_OP)
            if int16() not in (1, 2):
                raise _Stop(DecodeError.BAD_SYSTEM_OP)
            return [int16() & 0xFFFF], []
        if a == OP_OUTPUT:
            if b > 1:
                raise _Stop(DecodeError.BAD_SYSTEM_OP)
            n = int16()
            if n < 0:
                raise _Stop(DecodeError.BAD_SYSTEM_OP)
            if n > self.max_consts or n > self.max_args:
                raise _Stop(DecodeError.CAPACITY)
            if b == 0 and n != self.num_outputs:
                raise _Stop(DecodeError.OUTPUT_COUNT)
            consts = [int16() & 0xFFFF for _ in range(n)]
            args = []
            for _ in range(n):
                d = int16()
                if d == 0 or not 0 <= index + d < index:
                    raise _Stop(DecodeError.BAD_OFFSET)
                args.append((False, index + d))
            return consts, args
        if a in (OP_CONTROL_FLOW, OP_CONVERGENCE):
            raise _Stop(DecodeError.UNSUPPORTED_OP)
        raise _Stop(DecodeError.UNKNOWN_SYSTEM_OP)


# --- Hardware -------------------------------------------------------------------------


class _State(py_enum.IntEnum):
    A = 0
    B = 1
    C_COUNT = 2
    C_IDS = 3
    D = 4
    DRAIN = 5  # after an error: accept and drop


class InstructionDecoder(wiring.Component):
    """ABCD decoder, one input byte per cycle.

    Parameters
    ----------
    max_args : int
        Largest number of arguments (signature length, or outputs of ``<OUTPUT>``), 1..255.
    max_consts : int
        Largest number of constant ids in C, 1..255.

    Attributes
    ----------
    i : stream of IN_LAYOUT, in
    o : stream of decoded_layout(max_args, max_consts), out
    perm : stream of {"b": 8, "entry": perm_entry_layout(max_args)}, in (always ready)
    num_outputs : Signal(16), in
    error : Signal, out
    error_cause : DecodeError, out
    error_index : Signal(16), out
    done : Signal, out
    """

    def __init__(self, *, max_args=8, max_consts=8):
        _check_capacity("max_args", max_args)
        _check_capacity("max_consts", max_consts)
        self.max_args = max_args
        self.max_consts = max_consts
        super().__init__({
            "i": In(stream.Signature(IN_LAYOUT)),
            "o": Out(stream.Signature(decoded_layout(max_args, max_consts))),
            "perm": In(stream.Signature(perm_write_layout(max_args))),
            "num_outputs": In(16),
            "error": Out(1),
            "error_cause": Out(DecodeError),
            "error_index": Out(16),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        max_args, max_consts = self.max_args, self.max_consts

        # Signature table: 256 entries, combinational read (LUT RAM), so the B byte can
        # choose the next state in the cycle it arrives.
        entry_layout = perm_entry_layout(max_args)
        m.submodules.perm_mem = perm_mem = Memory(shape=entry_layout, depth=256, init=[])
        perm_w = perm_mem.write_port()
        perm_r = perm_mem.read_port(domain="comb")
        m.d.comb += [
            self.perm.ready.eq(1),
            perm_w.addr.eq(self.perm.payload.b),
            perm_w.data.eq(self.perm.payload.entry),
            perm_w.en.eq(self.perm.valid),
        ]

        state = Signal(_State, init=_State.A)
        index = Signal(17)          # one bit more than 16 to detect the 65537th instruction
        work = Signal(decoded_layout(max_args, max_consts))
        count = Signal(16)          # items left in the current C or D list
        taken = Signal(range(max_consts + 1))   # constants consumed by zeros in D
        const_mask = Signal(max_args)
        arg_pos = Signal(range(max_args + 1))
        const_pos = Signal(range(max_consts + 1))
        hi_phase = Signal()         # 0: expecting the low byte of an int16
        lo = Signal(8)

        byte = self.i.payload.data
        last = self.i.payload.last
        word = Signal(16)
        m.d.comb += word.eq(Mux(hi_phase, (byte << 8) | lo, 0))
        sword = word.as_signed()

        out_free = ~self.o.valid | self.o.ready
        m.d.comb += self.i.ready.eq(out_free | (state == _State.DRAIN))
        take = self.i.valid & self.i.ready
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)

        error_now = Signal()
        cause_now = Signal(DecodeError)
        finish = Signal()  # the accepted byte ends the current instruction

        # Action requests from the per-state logic below (combinational).
        d_arg_value = Signal(16)
        d_arg_const = Signal()
        d_write = Signal()

        with m.If(take & (state != _State.DRAIN)):
            with m.Switch(state):
                with m.Case(_State.A):
                    m.d.sync += [work.eq(0), work.index.eq(index[:16]), work.a.eq(byte),
                                 taken.eq(0), arg_pos.eq(0), const_pos.eq(0),
                                 hi_phase.eq(0)]
                    with m.If(index[16]):
                        m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.TOO_MANY)]
                    with m.Else():
                        m.d.sync += state.eq(_State.B)
                with m.Case(_State.B):
                    m.d.sync += work.b.eq(byte)
                    a = work.a
                    m.d.comb += perm_r.addr.eq(byte)
                    entry = perm_r.data
                    with m.If(a >= REGULAR_OP_MIN):
                        with m.If(byte == 0):
                            m.d.comb += finish.eq(1)
                        with m.Elif(~entry.valid):
                            m.d.comb += [error_now.eq(1),
                                         cause_now.eq(DecodeError.UNKNOWN_SIGNATURE)]
                        with m.Else():
                            m.d.sync += [work.n_args.eq(entry.length),
                                         const_mask.eq(entry.const_mask)]
                            with m.If(entry.const_mask != 0):
                                m.d.sync += state.eq(_State.C_COUNT)
                            with m.Elif(entry.length != 0):
                                m.d.sync += [state.eq(_State.D), count.eq(entry.length)]
                            with m.Else():
                                m.d.comb += finish.eq(1)
                    with m.Elif(a == OP_INPUT):
                        with m.If(byte == 0):
                            m.d.comb += finish.eq(1)
                        with m.Elif(byte <= 3):
                            m.d.sync += state.eq(_State.C_COUNT)
                        with m.Else():
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.BAD_SYSTEM_OP)]
                    with m.Elif(a == OP_OUTPUT):
                        with m.If(byte <= 1):
                            m.d.sync += state.eq(_State.C_COUNT)
                        with m.Else():
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.BAD_SYSTEM_OP)]
                    with m.Elif((a == OP_CONTROL_FLOW) | (a == OP_CONVERGENCE)):
                        m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.UNSUPPORTED_OP)]
                    with m.Else():
                        m.d.comb += [error_now.eq(1),
                                     cause_now.eq(DecodeError.UNKNOWN_SYSTEM_OP)]
                with m.Case(_State.C_COUNT):
                    m.d.sync += hi_phase.eq(~hi_phase)
                    with m.If(~hi_phase):
                        m.d.sync += lo.eq(byte)
                    with m.Elif(work.a == OP_INPUT):
                        with m.If((sword == 1) | (sword == 2)):
                            m.d.sync += [state.eq(_State.C_IDS), count.eq(1),
                                         work.n_consts.eq(1)]
                        with m.Else():
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.BAD_SYSTEM_OP)]
                    with m.Elif(work.a == OP_OUTPUT):
                        with m.If(sword < 0):
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.BAD_SYSTEM_OP)]
                        with m.Elif((word > max_consts) | (word > max_args)):
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.CAPACITY)]
                        with m.Elif((work.b == 0) & (word != self.num_outputs)):
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.OUTPUT_COUNT)]
                        with m.Elif(word == 0):
                            m.d.comb += finish.eq(1)
                        with m.Else():
                            m.d.sync += [state.eq(_State.C_IDS), count.eq(word),
                                         work.n_consts.eq(word), work.n_args.eq(word)]
                    with m.Else():  # regular op with constant codes
                        with m.If(sword < 0):
                            m.d.comb += [error_now.eq(1),
                                         cause_now.eq(DecodeError.CONST_MISMATCH)]
                        with m.Elif(word > max_consts):
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.CAPACITY)]
                        with m.Elif(word != 0):
                            m.d.sync += [state.eq(_State.C_IDS), count.eq(word),
                                         work.n_consts.eq(word)]
                        with m.Else():
                            # The signature has a constant code, so its length is >= 1.
                            m.d.sync += [state.eq(_State.D), count.eq(work.n_args)]
                with m.Case(_State.C_IDS):
                    m.d.sync += hi_phase.eq(~hi_phase)
                    with m.If(~hi_phase):
                        m.d.sync += lo.eq(byte)
                    with m.Else():
                        m.d.sync += [work.consts[const_pos].eq(word), count.eq(count - 1),
                                     const_pos.eq(const_pos + 1)]
                        with m.If(count == 1):
                            with m.If(work.a == OP_INPUT):
                                m.d.comb += finish.eq(1)
                            with m.Else():
                                m.d.sync += [state.eq(_State.D), count.eq(work.n_args)]
                with m.Case(_State.D):
                    m.d.sync += hi_phase.eq(~hi_phase)
                    with m.If(~hi_phase):
                        m.d.sync += lo.eq(byte)
                    with m.Else():
                        ancestor = Signal(18)
                        m.d.comb += ancestor.eq(index + sword)  # 17-bit index + signed 16
                        is_output = work.a == OP_OUTPUT
                        with m.If(word != 0):
                            # A negative ancestor wraps to >= 2**17 > index as an
                            # unsigned 18-bit value, so one comparison covers both ends.
                            with m.If(ancestor >= index):
                                m.d.comb += [error_now.eq(1),
                                             cause_now.eq(DecodeError.BAD_OFFSET)]
                            with m.Else():
                                m.d.comb += [d_write.eq(1), d_arg_value.eq(ancestor[:16])]
                        with m.Elif(is_output):
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.BAD_OFFSET)]
                        with m.Elif(taken >= work.n_consts):
                            m.d.comb += [error_now.eq(1),
                                         cause_now.eq(DecodeError.CONST_MISMATCH)]
                        with m.Else():
                            m.d.comb += [d_write.eq(1), d_arg_const.eq(1),
                                         d_arg_value.eq(work.consts[taken])]
                            m.d.sync += taken.eq(taken + 1)
                        with m.If(d_write):
                            m.d.sync += [work.args[arg_pos].value.eq(d_arg_value),
                                         work.args[arg_pos].is_const.eq(d_arg_const),
                                         arg_pos.eq(arg_pos + 1), count.eq(count - 1)]
                            with m.If(count == 1):
                                taken_after = taken + d_arg_const
                                with m.If(~is_output & (taken_after != work.n_consts)):
                                    m.d.comb += [error_now.eq(1),
                                                 cause_now.eq(DecodeError.CONST_MISMATCH)]
                                with m.Else():
                                    m.d.comb += finish.eq(1)

            # The final byte of the stream must end an instruction.
            truncated = last & ~finish & ~error_now
            with m.If(error_now | truncated):
                m.d.sync += [self.error.eq(1),
                             self.error_cause.eq(Mux(error_now, cause_now,
                                                     DecodeError.TRUNCATED)),
                             self.error_index.eq(index[:16]), state.eq(_State.DRAIN)]
            with m.Elif(finish):
                # Emit: the output register takes the work register plus this byte's
                # update (later assignments to the same bits win).
                m.d.sync += [self.o.valid.eq(1), self.o.payload.eq(work)]
                with m.If(state == _State.B):
                    m.d.sync += self.o.payload.b.eq(byte)
                with m.If(state == _State.C_IDS):
                    m.d.sync += self.o.payload.consts[const_pos].eq(word)
                with m.If(d_write):
                    m.d.sync += [self.o.payload.args[arg_pos].value.eq(d_arg_value),
                                 self.o.payload.args[arg_pos].is_const.eq(d_arg_const)]
                m.d.sync += [state.eq(_State.A), index.eq(index + 1)]
                with m.If(last):
                    m.d.sync += [index.eq(0), self.done.eq(1)]
            with m.If(~last):
                m.d.sync += self.done.eq(0)
        return m
