"""NAC front-end: the ABCD decoder and the MMAP coprocessor in lock-step (spec §4.1).

Every decoded instruction is presented to the coprocessor as its tick; the instruction
leaves on ``o`` only after the coprocessor has executed all memory commands scheduled for
that tick, so the compute side never sees instruction *i* before the schedule's SAVE /
FORWARD / FREE / PRELOAD for *i* have taken effect.

Timing: one cycle to hand the tick over (more while the coprocessor works on the tick's
commands), then the instruction is offered on ``o`` and held until taken. The decoder
keeps decoding the next instruction meanwhile (its output register is the only buffer).
"""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from npu.nac.decoder import (
    IN_LAYOUT,
    DecodeError,
    InstructionDecoder,
    decoded_layout,
    in_layout,
    perm_write_layout,
)
from npu.nac.mmap import MmapCoprocessor, MmapError

__all__ = ["NacFrontEnd"]


class NacFrontEnd(wiring.Component):
    """Decoder + MMAP coprocessor, synchronised by instruction index.

    Parameters
    ----------
    max_args, max_consts : int
        Decoder capacity.
    width : int
        OPS bytes per transfer: 1, or 2 (the decoder's two-byte input,
        :func:`npu.nac.decoder.in_layout`, which decodes a word per cycle; ``docs/fpga.md``).
    n_slots, max_params, max_instructions : int
        Coprocessor capacity.

    Attributes
    ----------
    ops : stream of in_layout(width), in
        OPS instruction bytes, one or two per transfer.
    mmap : stream of IN_LAYOUT, in
        MMAP section bytes.
    perm, param_map : in (always ready)
        Table loads (see the decoder and the coprocessor).
    num_outputs : Signal(16), in
    o : stream of decoded instructions, out
    preload_req : stream, out;  preload_done : stream, in
    resident, pending, dropped, free_slots, live, commands : out
        Coprocessor state.
    dec_error, dec_error_cause, dec_error_index, done : out
        Decoder status.
    mmap_error, mmap_error_cause, mmap_error_tick : out
        Coprocessor status.
    """

    def __init__(self, *, max_args=8, max_consts=8, width=1, n_slots=16, max_params=64,
                 max_instructions=1024):
        self.width = width
        self.decoder = InstructionDecoder(max_args=max_args, max_consts=max_consts,
                                          width=width)
        self.coproc = MmapCoprocessor(n_slots=n_slots, max_params=max_params,
                                      max_instructions=max_instructions)
        params_sig = self.coproc.signature.members["param_map"]
        super().__init__({
            "ops": In(stream.Signature(in_layout(width))),
            "mmap": In(stream.Signature(IN_LAYOUT)),
            "perm": In(stream.Signature(perm_write_layout(max_args))),
            "param_map": params_sig,
            "num_outputs": In(16),
            "o": Out(stream.Signature(decoded_layout(max_args, max_consts))),
            "preload_req": Out(stream.Signature(16)),
            "preload_done": In(stream.Signature(16)),
            "resident": Out(max_params),
            "pending": Out(max_params),
            "dropped": Out(max_params),
            "free_slots": Out(n_slots),
            "live": Out(range(n_slots + 1)),
            "commands": Out(32),
            "dec_error": Out(1),
            "dec_error_cause": Out(DecodeError),
            "dec_error_index": Out(16),
            "done": Out(1),
            "mmap_error": Out(1),
            "mmap_error_cause": Out(MmapError),
            "mmap_error_tick": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.decoder = dec = self.decoder
        m.submodules.coproc = cop = self.coproc

        wiring.connect(m, wiring.flipped(self.ops), dec.i)
        wiring.connect(m, wiring.flipped(self.perm), dec.perm)
        wiring.connect(m, wiring.flipped(self.mmap), cop.mmap)
        wiring.connect(m, wiring.flipped(self.param_map), cop.param_map)
        wiring.connect(m, cop.preload_req, wiring.flipped(self.preload_req))
        wiring.connect(m, wiring.flipped(self.preload_done), cop.preload_done)
        m.d.comb += [
            dec.num_outputs.eq(self.num_outputs),
            self.resident.eq(cop.resident), self.pending.eq(cop.pending),
            self.dropped.eq(cop.dropped),
            self.free_slots.eq(cop.free_slots), self.live.eq(cop.live),
            self.commands.eq(cop.commands),
            self.dec_error.eq(dec.error), self.dec_error_cause.eq(dec.error_cause),
            self.dec_error_index.eq(dec.error_index), self.done.eq(dec.done),
            self.mmap_error.eq(cop.error), self.mmap_error_cause.eq(cop.error_cause),
            self.mmap_error_tick.eq(cop.error_tick),
            cop.query_index.eq(0),
        ]

        # The decoder's output register holds the instruction while its tick is handed to
        # the coprocessor and while the instruction waits on ``o``.
        tick_done = Signal()
        m.d.comb += [
            cop.tick.payload.eq(dec.o.payload.index),
            cop.tick.valid.eq(dec.o.valid & ~tick_done),
            self.o.payload.eq(dec.o.payload),
            self.o.valid.eq(dec.o.valid & tick_done),
            dec.o.ready.eq(tick_done & self.o.ready),
        ]
        with m.If(cop.tick.valid & cop.tick.ready):
            m.d.sync += tick_done.eq(1)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += tick_done.eq(0)
        return m
