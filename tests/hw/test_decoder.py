"""ABCD decoder: generator expectations == Python model == RTL (Amaranth simulator)."""

import random

import pytest
from amaranth.sim import Simulator

from npu.nac.decoder import (
    DecodedInstruction,
    DecodeError,
    DecoderModel,
    InstructionDecoder,
    decoded_layout,
    perm_entry,
)
from sim.nac_streams import corrupt, random_program
from sim.streams import stream_recv, stream_send


def to_instruction(view):
    """Convert a decoded-layout value into the model's DecodedInstruction."""
    return DecodedInstruction(
        int(view.index), int(view.a), int(view.b),
        tuple(int(view.consts[k]) for k in range(int(view.n_consts))),
        tuple((bool(view.args[k].is_const), int(view.args[k].value))
              for k in range(int(view.n_args))))


def to_payloads(stream_bytes, width):
    """Input transfers of a byte stream: one byte each, or two (little-endian pairs; an
    odd final byte goes alone with ``half``)."""
    n = len(stream_bytes)
    if width == 1:
        return [{"data": byte, "last": int(k == n - 1)} for k, byte in enumerate(stream_bytes)]
    return [{"data": stream_bytes[k] | (stream_bytes[k + 1] << 8 if k + 1 < n else 0),
             "last": int(k + 2 >= n), "half": int(k + 1 == n)} for k in range(0, n, 2)]


def run_rtl(dut, perm, stream_bytes, num_outputs, expected_count, *, idle=0.0,
            backpressure=0.0, seed=0):
    """Load PERM, stream the bytes, collect outputs; return (instructions, status, cycles)."""
    result = {}

    async def bench(ctx):
        ctx.set(dut.num_outputs, num_outputs)
        for b, (length, mask) in perm.items():
            ctx.set(dut.perm.payload, {"b": b, "entry": {"valid": 1, "length": length,
                                                         "const_mask": mask}})
            ctx.set(dut.perm.valid, 1)
            await ctx.tick()
        ctx.set(dut.perm.valid, 0)
        payloads = to_payloads(stream_bytes, dut.width)
        result["start"] = 0
        await stream_send(ctx, dut.i, payloads, rng=random.Random(seed), idle=idle)
        result["sent"] = True

    async def collector(ctx):
        got = await stream_recv(ctx, dut.o, expected_count, rng=random.Random(seed + 1),
                                backpressure=backpressure, timeout=2000)
        result["got"] = [to_instruction(v) for v in got]
        # Nothing more may come out.
        for _ in range(50):
            ctx.set(dut.o.ready, 1)
            *_, valid = await ctx.tick().sample(dut.o.valid)
            assert not valid, "decoder emitted more instructions than the model"
        result["status"] = (ctx.get(dut.error), DecodeError(ctx.get(dut.error_cause)),
                            ctx.get(dut.error_index), ctx.get(dut.done))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(collector)
    sim.run()
    assert result.get("sent"), "input not fully accepted"
    return result["got"], result["status"]


def check(dut, model, program_perm, stream_bytes, num_outputs, **kwargs):
    want = model.decode(stream_bytes)
    got, (error, cause, error_index, done) = run_rtl(
        dut, program_perm, stream_bytes, num_outputs, len(want.instructions), **kwargs)
    for k, (g, w) in enumerate(zip(got, want.instructions, strict=True)):
        assert g == w, f"instruction {k}: RTL {g} != model {w}"
    assert cause == want.error, f"error cause: RTL {cause.name}, model {want.error.name}"
    assert bool(error) == (want.error != DecodeError.NONE)
    if want.error != DecodeError.NONE:
        assert error_index == want.error_index
    assert bool(done) == want.done


@pytest.mark.parametrize("width", [1, 2])
@pytest.mark.parametrize("seed", range(6))
def test_valid_streams(seed, width):
    rng = random.Random(seed)
    max_args, max_consts = rng.choice([(4, 4), (6, 3), (8, 8)])
    program = random_program(rng, max_args=max_args, max_consts=max_consts,
                             n_instr=rng.randint(2, 60), num_outputs=rng.randint(1, 3))
    model = DecoderModel(program.perm, max_args=max_args, max_consts=max_consts,
                         num_outputs=program.num_outputs)
    assert model.decode(program.stream).instructions == program.expected
    dut = InstructionDecoder(max_args=max_args, max_consts=max_consts, width=width)
    idle, backpressure = [(0, 0), (0.3, 0), (0, 0.5), (0.4, 0.4)][seed % 4]
    check(dut, model, program.perm, program.stream, program.num_outputs, idle=idle,
          backpressure=backpressure, seed=seed)


@pytest.mark.parametrize("width", [1, 2])
@pytest.mark.parametrize("seed", range(40))
def test_corrupted_streams(seed, width):
    rng = random.Random(1000 + seed)
    program = random_program(rng, max_args=5, max_consts=3, n_instr=rng.randint(2, 25),
                             num_outputs=rng.randint(1, 2))
    model = DecoderModel(program.perm, max_args=5, max_consts=3,
                         num_outputs=program.num_outputs)
    damaged = corrupt(program.stream, rng)
    if not damaged:
        damaged = b"\x0a"
    dut = InstructionDecoder(max_args=5, max_consts=3, width=width)
    check(dut, model, program.perm, damaged, program.num_outputs, idle=0.2,
          backpressure=0.2, seed=seed)


@pytest.mark.parametrize("width", [1, 2])
def test_throughput_width_bytes_per_cycle(width):
    # With no stalls on either side, N transfers (of `width` bytes) are accepted in N
    # consecutive cycles.
    rng = random.Random(5)
    program = random_program(rng, max_args=8, max_consts=8, n_instr=80)
    dut = InstructionDecoder(max_args=8, max_consts=8, width=width)
    payloads = to_payloads(program.stream, width)
    assert len(payloads) * width == len(program.stream)  # instructions have even lengths
    cycles = {}

    async def bench(ctx):
        ctx.set(dut.num_outputs, 1)
        for b, (length, mask) in program.perm.items():
            ctx.set(dut.perm.payload, {"b": b, "entry": {"valid": 1, "length": length,
                                                         "const_mask": mask}})
            ctx.set(dut.perm.valid, 1)
            await ctx.tick()
        ctx.set(dut.perm.valid, 0)
        ctx.set(dut.o.ready, 1)
        accepted = 0
        n = 0
        for payload in payloads:
            ctx.set(dut.i.payload, payload)
            ctx.set(dut.i.valid, 1)
            *_, ready = await ctx.tick().sample(dut.i.ready)
            n += 1
            accepted += ready
        ctx.set(dut.i.valid, 0)
        for _ in range(3):  # the input register and the packer
            await ctx.tick()
        cycles["n"], cycles["accepted"] = n, accepted
        assert ctx.get(dut.done) and not ctx.get(dut.error)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert cycles["accepted"] == cycles["n"] == len(payloads)


def test_hand_assembled_instruction():
    # PERM[100] = "TSc" (spec §5.2.2 example): T is a tensor code, S and c are constant
    # codes -> length 3, const_mask 0b110. Instruction 5: A=201, B=100,
    # C = [2, 50, 51] (two constant ids), D = [-3, 0, 0]:
    #   arg0 = ancestor 5 - 3 = 2, arg1 = constant 50, arg2 = constant 51.
    perm = {100: perm_entry("TSc", 4)}
    assert perm[100] == (3, 0b110)
    stream_bytes = bytes(
        [2, 0] * 5                                   # five <INPUT B=0>: indices 0..4
        + [201, 100, 2, 0, 50, 0, 51, 0, 0xFD, 0xFF, 0, 0, 0, 0]
        + [3, 0, 1, 0, 0, 0, 0xFF, 0xFF])            # <OUTPUT B=0> C=[1, 0] D=[-1]
    want = (DecodedInstruction(5, 201, 100, (50, 51), ((False, 2), (True, 50), (True, 51))),
            DecodedInstruction(6, 3, 0, (0,), ((False, 5),)))
    model = DecoderModel(perm, max_args=4, max_consts=4, num_outputs=1)
    assert model.decode(stream_bytes).instructions[5:] == want
    for width in (1, 2):
        got, status = run_rtl(InstructionDecoder(max_args=4, max_consts=4, width=width), perm,
                              stream_bytes, 1, 7)
        assert tuple(got[5:]) == want and status[0] == 0 and status[3] == 1


@pytest.mark.parametrize(("stream_bytes", "cause", "index"), [
    # INPUT B=0, then A=20 with unloaded signature 9 -> UNKNOWN_SIGNATURE at index 1.
    (bytes([2, 0, 20, 9]), DecodeError.UNKNOWN_SIGNATURE, 1),
    # Signature 100 = (1, mask 0): D = [+1] points forward -> BAD_OFFSET.
    (bytes([2, 0, 20, 100, 1, 0]), DecodeError.BAD_OFFSET, 1),
    # D = [-2] at index 1 -> ancestor -1 -> BAD_OFFSET.
    (bytes([2, 0, 20, 100, 0xFE, 0xFF]), DecodeError.BAD_OFFSET, 1),
    # D = [0] but the signature has no constant code, so there is no C -> CONST_MISMATCH.
    (bytes([2, 0, 20, 100, 0, 0]), DecodeError.CONST_MISMATCH, 1),
    # Stream ends after A -> TRUNCATED at index 1.
    (bytes([2, 0, 20]), DecodeError.TRUNCATED, 1),
    # CONTROL_FLOW (A=6) -> UNSUPPORTED_OP; A=5 -> UNKNOWN_SYSTEM_OP.
    (bytes([6, 0]), DecodeError.UNSUPPORTED_OP, 0),
    (bytes([5, 0]), DecodeError.UNKNOWN_SYSTEM_OP, 0),
    # INPUT B=1 with C prefix 3 -> BAD_SYSTEM_OP.
    (bytes([2, 1, 3, 0, 7, 0]), DecodeError.BAD_SYSTEM_OP, 0),
    # OUTPUT B=0 with 2 outputs when the header says 1 -> OUTPUT_COUNT.
    (bytes([2, 0, 3, 0, 2, 0]), DecodeError.OUTPUT_COUNT, 1),
    # OUTPUT B=0, C = [1, 0] (one output, reserved id 0), D = [0]: an <OUTPUT> offset of
    # 0 names no instruction (there are no constants to take) -> BAD_OFFSET at index 1.
    (bytes([2, 0, 3, 0, 1, 0, 0, 0, 0, 0]), DecodeError.BAD_OFFSET, 1),
])
def test_error_causes(stream_bytes, cause, index):
    perm = {100: (1, 0)}
    model = DecoderModel(perm, max_args=4, max_consts=4, num_outputs=1)
    want = model.decode(stream_bytes)
    assert (want.error, want.error_index) == (cause, index)
    for width in (1, 2):
        got, (error, rtl_cause, rtl_index, done) = run_rtl(
            InstructionDecoder(max_args=4, max_consts=4, width=width), perm, stream_bytes, 1,
            len(want.instructions))
        assert tuple(got) == want.instructions
        assert (error, rtl_cause, rtl_index, done) == (1, cause, index, 0)


@pytest.mark.parametrize("width", [1, 2])
@pytest.mark.parametrize(("stream_bytes", "index"), [
    # Odd lengths end inside an instruction: after A (index 1), inside C's count, inside a
    # C id, inside D (all of instruction 1 with PERM[100] = (1, 0) or <INPUT B=1>).
    (bytes([2, 0, 20]), 1),
    (bytes([2, 0, 2, 1, 1]), 1),
    (bytes([2, 0, 2, 1, 1, 0, 7]), 1),
    (bytes([2, 0, 20, 100, 0xFF]), 1),
    # Even lengths too: the stream ends after B or after C's count.
    (bytes([2, 0, 20, 100]), 1),
    (bytes([2, 0, 2, 1, 1, 0]), 1),
])
def test_truncated_streams(stream_bytes, index, width):
    # Derived by hand from the rules: each stream stops before its instruction 1 is
    # complete, so instruction 0 (<INPUT B=0>) comes out and the error is TRUNCATED at 1.
    perm = {100: (1, 0)}
    want = DecoderModel(perm, max_args=4, max_consts=4, num_outputs=1).decode(stream_bytes)
    assert want.instructions == (DecodedInstruction(0, 2, 0, (), ()),)
    assert (want.error, want.error_index) == (DecodeError.TRUNCATED, index)
    got, status = run_rtl(InstructionDecoder(max_args=4, max_consts=4, width=width), perm,
                          stream_bytes, 1, 1)
    assert tuple(got) == want.instructions
    assert status == (1, DecodeError.TRUNCATED, index, 0)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_width_must_be_one_or_two():
    from npu.nac.decoder import IN_LAYOUT, in_layout

    assert in_layout(1) is IN_LAYOUT and in_layout(2).size == 18
    assert InstructionDecoder(width=2).i.payload.shape() == in_layout(2)
    for width in (0, 3, 4, "2"):
        with pytest.raises(ValueError, match=rf"^width must be 1 or 2 bytes per transfer, "
                                             rf"not {width!r}$"):
            InstructionDecoder(width=width)


def test_layout_width_is_what_the_docs_say():
    layout = decoded_layout(8, 8)
    # index 16 + a 8 + b 8 + n_consts 4 + consts 8*16 + n_args 4 + args 8*17
    assert layout.size == 16 + 8 + 8 + 4 + 128 + 4 + 136


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_capacity_limits():
    # 1..255 arguments and constants (a count is one byte in the decoded layout's sense).
    assert InstructionDecoder(max_args=1, max_consts=1).max_args == 1
    assert InstructionDecoder(max_args=255, max_consts=255).max_consts == 255
    for name, value in (("max_args", 0), ("max_args", 256), ("max_consts", 256),
                        ("max_consts", True), ("max_args", 2.0)):
        with pytest.raises(ValueError, match=rf"^{name} must be an integer in 1\.\.255, "
                                             rf"not {value!r}$"):
            InstructionDecoder(**{"max_args": 4, "max_consts": 4, name: value})


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_interface_widths_and_defaults():
    from npu.nac.decoder import perm_entry_layout, perm_write_layout

    dut = InstructionDecoder()
    assert (dut.max_args, dut.max_consts) == (8, 8)
    # num_outputs and error_index are 16-bit; error and done single bits.
    assert [p.shape().width for p in (dut.num_outputs, dut.error_index)] == [16, 16]
    assert [p.shape().width for p in (dut.error, dut.done)] == [1, 1]
    # A PERM entry for 7 arguments: valid 1 + length 0..7 (3 bits) + mask 7 = 11 bits; the
    # write port adds the 8-bit signature id B.
    assert perm_entry_layout(7).size == 11 and perm_write_layout(7).size == 19


@pytest.mark.parametrize("width", [1, 2])
def test_latency_two_edges_after_the_final_byte(width):
    # Module docstring: the instruction whose final byte is accepted at edge n is valid
    # from edge n + 2 on (registers cur, pre, output). <INPUT B=0> = bytes 2, 0.
    dut = InstructionDecoder(max_args=4, max_consts=4, width=width)
    seen = {}

    async def bench(ctx):
        ctx.set(dut.o.ready, 0)
        edges = []  # edge count at which each transfer was accepted
        edge = 0
        for payload in to_payloads(bytes([2, 0]), width):
            ctx.set(dut.i.payload, payload)
            ctx.set(dut.i.valid, 1)
            *_, ready = await ctx.tick().sample(dut.i.ready)
            edge += 1
            assert ready
            edges.append(edge)
        ctx.set(dut.i.valid, 0)
        valid_at = []
        for _ in range(4):
            valid_at.append(ctx.get(dut.o.valid))
            await ctx.tick()
            edge += 1
        seen["final"], seen["valid_from"] = edges[-1], edge - 4 + valid_at.index(1)
        assert ctx.get(dut.o.payload.a) == 2 and ctx.get(dut.o.payload.index) == 0

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen["valid_from"] == seen["final"] + 2
