"""NAC ABCD instruction decoder (spec §3, §7, §8.3).

The decoder reads the instruction bytes of an ``OPS`` section (everything after the tag and
the instruction count) as a byte stream and emits one decoded instruction per output
transfer: its index, ``A``, ``B``, the constant ids of ``C`` and, per argument, either the
absolute index of the ancestor instruction or the constant id that a zero in ``D`` takes.

Input width and the core
------------------------
Every ABCD field is a byte pair (``A`` with ``B``) or a little-endian int16, so every
instruction has an even length and, from the even start of the section, every field lies
in one aligned 16-bit word. The core therefore decodes one word per cycle. ``width=1``
(the default, :data:`IN_LAYOUT`) takes a byte per transfer and pairs the bytes in a
packer: one byte per cycle, the core busy every second cycle. ``width=2``
(:func:`in_layout`) takes a word per transfer: two bytes per cycle. Either way a typical
8-16 byte instruction decodes in 4-16 cycles with no idle cycle between instructions.

Two register stages sit in front of the core, so that what the core decides on comes from
registers: ``cur`` (the word, and the signature table read at the word's high byte as the
word enters, as if it were an instruction's ``B``), then ``pre`` (the word with every
comparison the core may need: ``A``'s class, ``B == 0``, ``B <= 1``, ``B <= 3``, the
table entry's flags, ``word == 0``, ``word in (1, 2)``, ``word > max_consts``, ``word !=
num_outputs``). The core picks the ones its state needs. Measured effect on the ECP5-85F
(``docs/fpga.md``): 65-68 MHz with the table read in the core's cycle, above 85 MHz now,
so ``width=2`` decodes more than 170 MB/s.

Protocol and timing
-------------------
* ``i``: stream of ``in_layout(width)``: ``data`` (one byte, or two in stream order
  little-endian), ``last`` on the final transfer of the section and, with ``width=2``,
  ``half`` when that final transfer holds one byte (an odd-length section, which is
  always truncated). ``i.ready`` is high whenever the input stages can move on, so with
  a ready consumer the decoder accepts a transfer every cycle.
* ``o``: stream of :func:`decoded_layout`; the instruction whose final byte was accepted
  at edge *n* is valid from edge *n + 2* on, with a ready output (three register stages:
  ``cur``, ``pre``, the output register).
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

from amaranth import Cat, Module, Mux, Signal
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
    "in_layout",
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


def in_layout(width=1):
    """Layout of one input transfer of a decoder with *width* bytes per transfer.

    ``width = 1``: :data:`IN_LAYOUT` (``data`` byte, ``last``). ``width = 2``: ``data`` is
    two bytes, stream order little-endian (the earlier byte in bits 0-7), ``last`` marks the
    final transfer and ``half`` says that its bits 8-15 are not part of the stream (a
    stream of odd length; ``half`` is read on the final transfer only).
    """
    if width == 1:
        return IN_LAYOUT
    if width == 2:
        return data.StructLayout({"data": 16, "last": 1, "half": 1})
    raise ValueError(f"width must be 1 or 2 bytes per transfer, not {width!r}")


class _State(py_enum.IntEnum):
    AB = 0       # the A and B bytes
    C_COUNT = 1
    C_IDS = 2
    D = 3
    DRAIN = 4    # after an error: accept and drop


class InstructionDecoder(wiring.Component):
    """ABCD decoder: one byte per cycle (``width=1``) or two (``width=2``).

    Parameters
    ----------
    max_args : int
        Largest number of arguments (signature length, or outputs of ``<OUTPUT>``), 1..255.
    max_consts : int
        Largest number of constant ids in C, 1..255.
    width : int
        Bytes per input transfer, 1 (:data:`IN_LAYOUT`) or 2 (:func:`in_layout`).

    Attributes
    ----------
    i : stream of in_layout(width), in
    o : stream of decoded_layout(max_args, max_consts), out
    perm : stream of {"b": 8, "entry": perm_entry_layout(max_args)}, in (always ready)
    num_outputs : Signal(16), in
    error : Signal, out
    error_cause : DecodeError, out
    error_index : Signal(16), out
    done : Signal, out

    Notes
    -----
    Every ABCD field is a byte pair (A with B, or an int16) and every instruction has an
    even length, so the core works on one 16-bit word per cycle: a stream starts at an even
    offset and keeps every field in one word. With ``width=1`` a packer pairs the bytes
    (one byte accepted per cycle, a word for the core every second cycle); with
    ``width=2`` the core takes a word per cycle. In front of the core sits a register
    (``cur``): when a word enters it, the signature table is read at the word's high byte
    (B, if the word is an instruction's first), so the table entry is a register when the
    core decodes the word, and the table read is off the core's path.
    """

    def __init__(self, *, max_args=8, max_consts=8, width=1):
        _check_capacity("max_args", max_args)
        _check_capacity("max_consts", max_consts)
        self.max_args = max_args
        self.max_consts = max_consts
        self.width = width
        super().__init__({
            "i": In(stream.Signature(in_layout(width))),
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

        # Signature table: 256 entries. Read when a word enters `cur`, at the word's high
        # byte; transparent for a write in the same cycle. LUT RAM with the read register
        # in the fabric: a block RAM's output (5.8 ns clock to output on the ECP5 without
        # its output register) would start the core's longest path.
        entry_layout = perm_entry_layout(max_args)
        m.submodules.perm_mem = perm_mem = Memory(shape=entry_layout, depth=256, init=[],
                                                  attrs={"ram_style": "distributed"})
        perm_w = perm_mem.write_port()
        perm_r = perm_mem.read_port(domain="sync", transparent_for=(perm_w,))
        m.d.comb += [
            self.perm.ready.eq(1),
            perm_w.addr.eq(self.perm.payload.b),
            perm_w.data.eq(self.perm.payload.entry),
            perm_w.en.eq(self.perm.valid),
        ]

        state = Signal(_State, init=_State.AB)

        # --- input: `cur` holds the next word for the core ---------------------------
        cur_valid = Signal()
        cur_data = Signal(16)
        cur_last = Signal()
        cur_half = Signal()
        out_free = ~self.o.valid | self.o.ready
        consume = Signal()   # `cur` moves on to `pre` this cycle
        core_take = Signal()  # the core takes `pre` this cycle
        pre_valid = Signal()
        m.d.comb += [core_take.eq(pre_valid & (out_free | (state == _State.DRAIN))),
                     consume.eq(cur_valid & (~pre_valid | core_take))]
        can_load = ~cur_valid | consume
        load = Signal()
        load_data = Signal(16)
        load_last = Signal()
        load_half = Signal()
        m.d.comb += perm_r.addr.eq(load_data[8:]), perm_r.en.eq(load)
        with m.If(load):
            m.d.sync += [cur_valid.eq(1), cur_data.eq(load_data), cur_last.eq(load_last),
                         cur_half.eq(load_half)]
        with m.Elif(consume):
            m.d.sync += cur_valid.eq(0)

        if self.width == 2:
            m.d.comb += [
                self.i.ready.eq(can_load),
                load.eq(self.i.valid & can_load),
                load_data.eq(self.i.payload.data),
                load_last.eq(self.i.payload.last),
                load_half.eq(self.i.payload.last & self.i.payload.half),
            ]
        else:
            # Packer: `lo` holds an even byte; a final byte at an even offset waits in
            # `lo` (lo_last) until `cur` takes it as a half word.
            lo = Signal(8)
            lo_valid = Signal()
            lo_last = Signal()
            byte = self.i.payload.data
            m.d.comb += self.i.ready.eq(~lo_valid | (can_load & ~lo_last))
            take = self.i.valid & self.i.ready
            with m.If(lo_valid & lo_last):
                m.d.comb += [load.eq(can_load), load_data.eq(lo), load_last.eq(1),
                             load_half.eq(1)]
                with m.If(can_load):
                    m.d.sync += lo_valid.eq(0)
            with m.Elif(lo_valid):
                m.d.comb += [load.eq(take), load_data.eq(Cat(lo, byte)),
                             load_last.eq(self.i.payload.last)]
                with m.If(take):
                    m.d.sync += lo_valid.eq(0)
            with m.Elif(take):
                m.d.sync += [lo.eq(byte), lo_valid.eq(1), lo_last.eq(self.i.payload.last)]

        # --- pre-decode: `pre` holds the word in `cur` with its comparisons ------------
        # The same comparisons whatever the word turns out to be (an A/B pair or an
        # int16); the core picks what its state needs, from registers.
        pre_data = Signal(16)
        pre_last = Signal()
        pre_half = Signal()
        pre_length = Signal(range(max_args + 1))
        flags = Signal(data.StructLayout({
            "a_regular": 1, "a_input": 1, "a_output": 1, "a_unsupported": 1,
            "b_zero": 1, "b_le1": 1, "b_le3": 1,
            "e_valid": 1, "e_consts": 1, "e_args": 1,
            "w_zero": 1, "w_one_two": 1, "w_gt_consts": 1, "w_gt_out": 1,
            "w_ne_outputs": 1,
        }))
        c_lo, c_hi = cur_data[:8], cur_data[8:]
        c_entry = perm_r.data
        with m.If(consume):
            m.d.sync += [
                pre_valid.eq(1), pre_data.eq(cur_data), pre_last.eq(cur_last),
                pre_half.eq(cur_half), pre_length.eq(c_entry.length),
                flags.a_regular.eq(c_lo >= REGULAR_OP_MIN),
                flags.a_input.eq(c_lo == OP_INPUT),
                flags.a_output.eq(c_lo == OP_OUTPUT),
                flags.a_unsupported.eq((c_lo == OP_CONTROL_FLOW) | (c_lo == OP_CONVERGENCE)),
                flags.b_zero.eq(c_hi == 0),
                flags.b_le1.eq(c_hi <= 1),
                flags.b_le3.eq(c_hi <= 3),
                flags.e_valid.eq(c_entry.valid),
                flags.e_consts.eq(c_entry.const_mask != 0),
                flags.e_args.eq(c_entry.length != 0),
                flags.w_zero.eq(cur_data == 0),
                flags.w_one_two.eq((cur_data == 1) | (cur_data == 2)),
                flags.w_gt_consts.eq(cur_data > max_consts),
                flags.w_gt_out.eq(cur_data > min(max_consts, max_args)),
                flags.w_ne_outputs.eq(cur_data != self.num_outputs),
            ]
        with m.Elif(core_take):
            m.d.sync += pre_valid.eq(0)

        # --- core: one word per cycle ------------------------------------------------
        index = Signal(17)          # one bit more than 16 to detect the 65537th instruction
        work = Signal(decoded_layout(max_args, max_consts))
        count = Signal(16)          # items left in the current C or D list
        taken = Signal(range(max_consts + 1))   # constants consumed by zeros in D
        arg_pos = Signal(range(max_args + 1))
        const_pos = Signal(range(max_consts + 1))

        word = pre_data
        sword = word.as_signed()
        last = pre_last
        is_input = Signal()   # the current instruction's A (set with its A/B word)
        is_output = Signal()
        b_zero = Signal()
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)

        error_now = Signal()
        cause_now = Signal(DecodeError)
        finish = Signal()  # the word ends the current instruction

        # Action requests from the per-state logic below (combinational).
        d_arg_value = Signal(16)
        d_arg_const = Signal()
        d_write = Signal()

        with m.If(core_take & (state != _State.DRAIN)):
            with m.Switch(state):
                with m.Case(_State.AB):
                    a, b = word[:8], word[8:]
                    m.d.sync += [work.eq(0), work.index.eq(index[:16]), work.a.eq(a),
                                 work.b.eq(b), taken.eq(0), arg_pos.eq(0), const_pos.eq(0),
                                 is_input.eq(flags.a_input), is_output.eq(flags.a_output),
                                 b_zero.eq(flags.b_zero)]
                    with m.If(index[16]):
                        m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.TOO_MANY)]
                    with m.Elif(pre_half):
                        pass  # A without B: truncated (below)
                    with m.Elif(flags.a_regular):
                        with m.If(flags.b_zero):
                            m.d.comb += finish.eq(1)
                        with m.Elif(~flags.e_valid):
                            m.d.comb += [error_now.eq(1),
                                         cause_now.eq(DecodeError.UNKNOWN_SIGNATURE)]
                        with m.Else():
                            m.d.sync += work.n_args.eq(pre_length)
                            with m.If(flags.e_consts):
                                m.d.sync += state.eq(_State.C_COUNT)
                            with m.Elif(flags.e_args):
                                m.d.sync += [state.eq(_State.D), count.eq(pre_length)]
                            with m.Else():
                                m.d.comb += finish.eq(1)
                    with m.Elif(flags.a_input):
                        with m.If(flags.b_zero):
                            m.d.comb += finish.eq(1)
                        with m.Elif(flags.b_le3):
                            m.d.sync += state.eq(_State.C_COUNT)
                        with m.Else():
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.BAD_SYSTEM_OP)]
                    with m.Elif(flags.a_output):
                        with m.If(flags.b_le1):
                            m.d.sync += state.eq(_State.C_COUNT)
                        with m.Else():
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.BAD_SYSTEM_OP)]
                    with m.Elif(flags.a_unsupported):
                        m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.UNSUPPORTED_OP)]
                    with m.Else():
                        m.d.comb += [error_now.eq(1),
                                     cause_now.eq(DecodeError.UNKNOWN_SYSTEM_OP)]
                with m.Case(_State.C_COUNT):
                    with m.If(pre_half):
                        pass  # half an int16: truncated (below)
                    with m.Elif(is_input):
                        with m.If(flags.w_one_two):
                            m.d.sync += [state.eq(_State.C_IDS), count.eq(1),
                                         work.n_consts.eq(1)]
                        with m.Else():
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.BAD_SYSTEM_OP)]
                    with m.Elif(is_output):
                        with m.If(sword < 0):
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.BAD_SYSTEM_OP)]
                        with m.Elif(flags.w_gt_out):
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.CAPACITY)]
                        with m.Elif(b_zero & flags.w_ne_outputs):
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.OUTPUT_COUNT)]
                        with m.Elif(flags.w_zero):
                            m.d.comb += finish.eq(1)
                        with m.Else():
                            m.d.sync += [state.eq(_State.C_IDS), count.eq(word),
                                         work.n_consts.eq(word), work.n_args.eq(word)]
                    with m.Else():  # regular op with constant codes
                        with m.If(sword < 0):
                            m.d.comb += [error_now.eq(1),
                                         cause_now.eq(DecodeError.CONST_MISMATCH)]
                        with m.Elif(flags.w_gt_consts):
                            m.d.comb += [error_now.eq(1), cause_now.eq(DecodeError.CAPACITY)]
                        with m.Elif(~flags.w_zero):
                            m.d.sync += [state.eq(_State.C_IDS), count.eq(word),
                                         work.n_consts.eq(word)]
                        with m.Else():
                            # The signature has a constant code, so its length is >= 1.
                            m.d.sync += [state.eq(_State.D), count.eq(work.n_args)]
                with m.Case(_State.C_IDS):
                    with m.If(~pre_half):
                        m.d.sync += [work.consts[const_pos].eq(word), count.eq(count - 1),
                                     const_pos.eq(const_pos + 1)]
                        with m.If(count == 1):
                            with m.If(is_input):
                                m.d.comb += finish.eq(1)
                            with m.Else():
                                m.d.sync += [state.eq(_State.D), count.eq(work.n_args)]
                with m.Case(_State.D):
                    with m.If(~pre_half):
                        ancestor = Signal(18)
                        m.d.comb += ancestor.eq(index + sword)  # 17-bit index + signed 16
                        with m.If(~flags.w_zero):
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

            # The final word of the stream must end an instruction.
            truncated = last & ~finish & ~error_now
            with m.If(error_now | truncated):
                m.d.sync += [self.error.eq(1),
                             self.error_cause.eq(Mux(error_now, cause_now,
                                                     DecodeError.TRUNCATED)),
                             self.error_index.eq(index[:16]), state.eq(_State.DRAIN)]
            with m.Elif(finish):
                # Emit: the output register takes the work register plus this word's
                # update (later assignments to the same bits win).
                m.d.sync += self.o.valid.eq(1)
                with m.If(state == _State.AB):  # no C, no D: only index, A and B
                    m.d.sync += [self.o.payload.eq(0), self.o.payload.index.eq(index[:16]),
                                 self.o.payload.a.eq(word[:8]), self.o.payload.b.eq(word[8:])]
                with m.Else():
                    m.d.sync += self.o.payload.eq(work)
                with m.If(state == _State.C_IDS):
                    m.d.sync += self.o.payload.consts[const_pos].eq(word)
                with m.If(d_write):
                    m.d.sync += [self.o.payload.args[arg_pos].value.eq(d_arg_value),
                                 self.o.payload.args[arg_pos].is_const.eq(d_arg_const)]
                m.d.sync += [state.eq(_State.AB), index.eq(index + 1)]
                with m.If(last):
                    m.d.sync += [index.eq(0), self.done.eq(1)]
            with m.If(~last):
                m.d.sync += self.done.eq(0)
        return m
