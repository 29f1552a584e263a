"""NAC ABCD decoder: directed cases for mutants of ``npu.nac.decoder`` the other tests missed.

Each case is a short hand-assembled OPS stream whose decoding (instructions, error cause
and index) is derived by hand from the rules in the module docstring (spec §3, §7, §8.3)
and checked on ``DecoderModel``; the RTL then runs in the Amaranth simulator with both
input widths, idle cycles on the input and back-pressure on the output, and must emit the
same instructions and end in the same status. Boundaries of the capacities, the signature
table (including a write in the cycle it is read), several streams in a row and the sticky
error get their own cases; the 65536-instruction limit is checked on the model at full
length and on the RTL with its index register started at 65534.
"""

import random
import struct

import pytest
from amaranth import ClockDomain, Module
from amaranth.sim import Simulator

from npu.nac.decoder import (
    MAX_INDEX,
    DecodedInstruction,
    DecodeError,
    DecoderModel,
    InstructionDecoder,
    perm_entry,
)
from sim.streams import stream_recv, stream_send
from tests.hw.test_decoder import to_instruction, to_payloads

I = DecodedInstruction  # noqa: E741


def i16(*values):
    """Little-endian int16 fields (negative values as two's complement)."""
    return struct.pack(f"<{len(values)}H", *(v & 0xFFFF for v in values))


def inputs(n):
    """*n* ``<INPUT B=0>`` instructions: indices 0 .. n-1, and their decoding."""
    return bytes([2, 0] * n), tuple(I(k, 2, 0, (), ()) for k in range(n))


def simulate(dut, perm_writes, streams, num_outputs, counts, *, reset=False, idle=0.3,
             backpressure=0.4, seed=0):
    """Write the signature table, send each stream in turn, collect the outputs.

    *perm_writes*: ``(b, length, mask, valid)`` transfers on ``perm``. *counts*: the
    number of instructions each stream must produce. With *reset*, the decoder is reset
    between two streams (the signature table, a memory, keeps its entries). Returns per
    stream the instructions and ``(error, cause, error_index, done)`` after it.
    """
    top = Module()
    top.domains.sync = domain = ClockDomain("sync")
    top.submodules.dut = dut
    results = []
    flags = {"sent": 0, "received": 0}

    async def bench(ctx):
        ctx.set(dut.num_outputs, num_outputs)
        for b, length, mask, valid in perm_writes:
            ctx.set(dut.perm.payload, {"b": b, "entry": {"valid": valid, "length": length,
                                                         "const_mask": mask}})
            ctx.set(dut.perm.valid, 1)
            await ctx.tick()
            assert ctx.get(dut.perm.ready) == 1  # always ready
        ctx.set(dut.perm.valid, 0)
        rng = random.Random(seed)
        for k, stream_bytes in enumerate(streams):
            while flags["received"] < k:  # one stream after the other
                await ctx.tick()
            if reset and k:
                ctx.set(domain.rst, 1)
                await ctx.tick()
                ctx.set(domain.rst, 0)
            await stream_send(ctx, dut.i, to_payloads(stream_bytes, dut.width), rng=rng,
                              idle=idle, timeout=500)
            flags["sent"] = k + 1

    async def collector(ctx):
        rng = random.Random(seed + 1)
        for k, count in enumerate(counts):
            got = await stream_recv(ctx, dut.o, count, rng=rng, backpressure=backpressure,
                                    timeout=500)
            while flags["sent"] <= k:
                await ctx.tick()
            for _ in range(6):  # the last word through cur and pre: no more output
                ctx.set(dut.o.ready, 1)
                *_, valid = await ctx.tick().sample(dut.o.valid)
                assert not valid, f"stream {k}: more instructions than expected"
            results.append(([to_instruction(v) for v in got],
                            (ctx.get(dut.error), DecodeError(ctx.get(dut.error_cause)),
                             ctx.get(dut.error_index), ctx.get(dut.done))))
            flags["received"] = k + 1

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(collector)
    sim.run()
    assert len(results) == len(streams)
    return results


def model_decode(perm, stream_bytes, instructions, error=DecodeError.NONE, index=0, *,
                 max_args=4, max_consts=4, num_outputs=1):
    """The model must decode *stream_bytes* as derived by hand; returns the RTL status."""
    want = DecoderModel(perm, max_args=max_args, max_consts=max_consts,
                        num_outputs=num_outputs).decode(stream_bytes)
    assert want.instructions == tuple(instructions)
    assert (want.error, want.error_index, want.done) == (
        error, index, error == DecodeError.NONE)
    return (int(error != DecodeError.NONE), error, index, int(error == DecodeError.NONE))


def expect(perm, cases, *, max_args=4, max_consts=4, num_outputs=1, seed=0):
    """Model and RTL (both widths) must decode each stream as derived by hand.

    *cases*: ``(stream_bytes, instructions, error, error_index)``; the RTL decodes them
    one after the other with a reset in between.
    """
    statuses = [model_decode(perm, stream_bytes, instructions, error, index,
                             max_args=max_args, max_consts=max_consts,
                             num_outputs=num_outputs)
                for stream_bytes, instructions, error, index in cases]
    writes = [(b, length, mask, 1) for b, (length, mask) in perm.items()]
    for width in (1, 2):
        dut = InstructionDecoder(max_args=max_args, max_consts=max_consts, width=width)
        results = simulate(dut, writes, [c[0] for c in cases], num_outputs,
                           [len(c[1]) for c in cases], reset=True, seed=seed + width)
        for k, ((got, status), case, want) in enumerate(zip(results, cases, statuses,
                                                            strict=True)):
            assert tuple(got) == tuple(case[1]), f"width {width}, case {k}"
            assert status == want, f"width {width}, case {k}: {status}"


#: Signature table of the cases: B -> (length, const_mask).
PERM = {
    100: (1, 0),         # one argument, a tensor
    101: (2, 0b10),      # a tensor, then a constant code
    102: (0, 0),         # no arguments at all
    103: (4, 0b1111),    # four constant codes
}
PRE, PRE_OUT = inputs(3)  # instructions 0..2: <INPUT B=0>
E = DecodeError


def ins(a, b, consts=(), args=(), index=3):
    return I(index, a, b, tuple(consts), tuple(args))


T, C = False, True   # argument kinds: ancestor (tensor) or constant id

CASES = {
    # --- regular ops (A >= 10) ---
    "a10-b0": (bytes([10, 0]), [ins(10, 0)], E.NONE),
    "a255-b0": (bytes([255, 0]), [ins(255, 0)], E.NONE),
    "empty-signature": (bytes([20, 102]), [ins(20, 102)], E.NONE),
    "zero-constants": (bytes([20, 101]) + i16(0, -1, -3), [ins(20, 101, (), [(T, 2), (T, 0)])],
                       E.NONE),
    "constant-last": (bytes([20, 101]) + i16(1, 777, -1, 0),
                      [ins(20, 101, [777], [(T, 2), (C, 777)])], E.NONE),
    "constant-first": (bytes([20, 101]) + i16(1, 0xFFFF, 0, -2),
                       [ins(20, 101, [0xFFFF], [(C, 0xFFFF), (T, 1)])], E.NONE),
    "two-constants": (bytes([20, 101]) + i16(2, 7, 8, 0, 0),
                      [ins(20, 101, [7, 8], [(C, 7), (C, 8)])], E.NONE),
    "full-constants": (bytes([30, 103]) + i16(4, 1, 2, 3, 4, 0, 0, 0, 0),
                       [ins(30, 103, [1, 2, 3, 4], [(C, 1), (C, 2), (C, 3), (C, 4)])],
                       E.NONE),
    "constant-unused": (bytes([20, 101]) + i16(2, 7, 8, 0, -1), [], E.CONST_MISMATCH),
    "constant-missing": (bytes([20, 101]) + i16(1, 7, 0, 0), [], E.CONST_MISMATCH),
    "zero-without-c": (bytes([20, 100]) + i16(0), [], E.CONST_MISMATCH),
    "count-negative": (bytes([20, 101]) + i16(-1, 0, 0), [], E.CONST_MISMATCH),
    "count-most-negative": (bytes([20, 101]) + i16(-0x8000), [], E.CONST_MISMATCH),
    "count-over-capacity": (bytes([30, 103]) + i16(5, 1, 2, 3, 4, 5), [], E.CAPACITY),
    "count-0x7fff": (bytes([30, 103]) + i16(0x7FFF), [], E.CAPACITY),
    "unknown-signature": (bytes([20, 99]), [], E.UNKNOWN_SIGNATURE),
    # --- ancestors: index 3 may name 0, 1, 2 ---
    "ancestor-0": (bytes([20, 100]) + i16(-3), [ins(20, 100, (), [(T, 0)])], E.NONE),
    "ancestor-2": (bytes([20, 100]) + i16(-1), [ins(20, 100, (), [(T, 2)])], E.NONE),
    "ancestor-minus-1": (bytes([20, 100]) + i16(-4), [], E.BAD_OFFSET),
    "ancestor-most-negative": (bytes([20, 100]) + i16(-0x8000), [], E.BAD_OFFSET),
    "ancestor-most-positive": (bytes([20, 100]) + i16(0x7FFF), [], E.BAD_OFFSET),
    "ancestor-self-plus-1": (bytes([20, 100]) + i16(1), [], E.BAD_OFFSET),
    # --- system ops ---
    "a0": (bytes([0, 0]), [], E.UNKNOWN_SYSTEM_OP),
    "a1": (bytes([1, 0]), [], E.UNKNOWN_SYSTEM_OP),
    "a4": (bytes([4, 0]), [], E.UNKNOWN_SYSTEM_OP),
    "a8": (bytes([8, 0]), [], E.UNKNOWN_SYSTEM_OP),
    "a9": (bytes([9, 1]), [], E.UNKNOWN_SYSTEM_OP),
    "a7-convergence": (bytes([7, 0]), [], E.UNSUPPORTED_OP),
    "input-b1": (bytes([2, 1]) + i16(1, 42), [ins(2, 1, [42])], E.NONE),
    "input-b2-prefix2": (bytes([2, 2]) + i16(2, 0xFFFF), [ins(2, 2, [0xFFFF])], E.NONE),
    "input-b3": (bytes([2, 3]) + i16(1, 0), [ins(2, 3, [0])], E.NONE),
    "input-b4": (bytes([2, 4]) + i16(1, 5), [], E.BAD_SYSTEM_OP),
    "input-b255": (bytes([2, 255]) + i16(1, 5), [], E.BAD_SYSTEM_OP),
    "input-prefix0": (bytes([2, 1]) + i16(0, 5), [], E.BAD_SYSTEM_OP),
    "input-prefix3": (bytes([2, 1]) + i16(3, 5), [], E.BAD_SYSTEM_OP),
    "input-prefix-0x101": (bytes([2, 1]) + i16(0x101, 5), [], E.BAD_SYSTEM_OP),
    "input-prefix-0x201": (bytes([2, 1]) + i16(0x201, 5), [], E.BAD_SYSTEM_OP),
    "input-prefix-minus1": (bytes([2, 1]) + i16(-1, 5), [], E.BAD_SYSTEM_OP),
    "output-b1-none": (bytes([3, 1]) + i16(0), [ins(3, 1)], E.NONE),
    "output-b1-two": (bytes([3, 1]) + i16(2, 9, -9, -1, -3),
                      [ins(3, 1, [9, 0xFFF7], [(T, 2), (T, 0)])], E.NONE),
    "output-b2": (bytes([3, 2]) + i16(1, 0, -1), [], E.BAD_SYSTEM_OP),
    "output-count-negative": (bytes([3, 1]) + i16(-1), [], E.BAD_SYSTEM_OP),
    "output-count-0x8000": (bytes([3, 0]) + i16(-0x8000), [], E.BAD_SYSTEM_OP),
    "output-count-capacity": (bytes([3, 1]) + i16(5), [], E.CAPACITY),
    "output-b0-count0": (bytes([3, 0]) + i16(0), [], E.OUTPUT_COUNT),
    "output-b0-count2": (bytes([3, 0]) + i16(2, 0, 0, -1, -2), [], E.OUTPUT_COUNT),
    "output-offset-positive": (bytes([3, 0]) + i16(1, 0, 1), [], E.BAD_OFFSET),
    "output-offset-out": (bytes([3, 0]) + i16(1, 0, -4), [], E.BAD_OFFSET),
}


def _case(name):
    # Instructions 0..2 are <INPUT B=0>; the case is instruction 3 (and the stream's end).
    body, tail, error = CASES[name]
    return PRE + body, PRE_OUT + tuple(tail), error, 3 if error != E.NONE else 0


@pytest.mark.parametrize("name", CASES)
def test_case_model(name):
    stream_bytes, instructions, error, index = _case(name)
    model_decode(PERM, stream_bytes, instructions, error, index)


@pytest.mark.parametrize("width", [1, 2])
def test_cases_rtl(width):
    # All cases through one decoder, reset between them: each must give the hand-derived
    # instructions and status (a reset restarts the index at 0 and clears the error).
    cases = [_case(name) for name in CASES]
    writes = [(b, length, mask, 1) for b, (length, mask) in PERM.items()]
    dut = InstructionDecoder(max_args=4, max_consts=4, width=width)
    results = simulate(dut, writes, [c[0] for c in cases], 1, [len(c[1]) for c in cases],
                       reset=True, seed=width)
    for name, (_, instructions, error, index), (got, status) in zip(
            CASES, cases, results, strict=True):
        assert tuple(got) == instructions, name
        assert status == (int(error != E.NONE), error, index, int(error == E.NONE)), name


@pytest.mark.parametrize("width", [1, 2])
def test_streams_in_a_row(width):
    # Without a reset: `done` rises when the byte marked last ends an instruction and the
    # next stream starts again at index 0 (module docstring). Stream 3 ends inside its
    # instruction 1 (TRUNCATED at 1, done low again); the error is sticky, so stream 4,
    # valid on its own, gives nothing and leaves cause and index as they were.
    first = bytes([2, 0, 20, 100]) + i16(-1)                       # 0: INPUT, 1: op(0)
    second = bytes([2, 1]) + i16(2, 77) + bytes([20, 102])         # 0: INPUT id 77, 1: op
    third = bytes([2, 0, 20, 101]) + i16(1, 5)                     # ends in C
    fourth = bytes([2, 0])
    want = [
        ([I(0, 2, 0, (), ()), I(1, 20, 100, (), ((T, 0),))], (0, E.NONE, 0, 1)),
        ([I(0, 2, 1, (77,), ()), I(1, 20, 102, (), ())], (0, E.NONE, 0, 1)),
        ([I(0, 2, 0, (), ())], (1, E.TRUNCATED, 1, 0)),
        ([], (1, E.TRUNCATED, 1, 0)),
    ]
    streams = [first, second, third, fourth]
    for stream_bytes, (instructions, status) in zip(streams[:3], want, strict=False):
        assert model_decode(PERM, stream_bytes, instructions, status[1], status[2]) == status
    writes = [(b, length, mask, 1) for b, (length, mask) in PERM.items()]
    dut = InstructionDecoder(max_args=4, max_consts=4, width=width)
    results = simulate(dut, writes, streams, 1, [len(w[0]) for w in want], seed=5 + width)
    assert [(list(got), status) for got, status in results] == want


def test_model_instruction_limit():
    # MMAP ticks are uint16, so a stream holds at most MAX_INDEX + 1 = 65536 instructions:
    # the 65537th is TOO_MANY at index 65536 (model; the RTL would need 65537 cycles).
    assert MAX_INDEX == 0xFFFF
    model = DecoderModel({}, max_args=1, max_consts=1)
    full = model.decode(bytes([2, 0]) * 0x10000)
    assert (full.error, full.done, len(full.instructions)) == (E.NONE, True, 0x10000)
    assert full.instructions[-1] == I(0xFFFF, 2, 0, (), ())
    over = model.decode(bytes([2, 0]) * 0x10001)
    assert (over.error, over.error_index, over.done) == (E.TOO_MANY, 0x10000, False)
    assert len(over.instructions) == 0x10000


def test_perm_entry():
    # Length and a mask bit per constant code: in "TSTc" (spec §5.2.2 codes) T is a tensor
    # code, S and c are constant codes -> (4, 0b1010); longer than max_args is refused.
    assert perm_entry("", 1) == (0, 0)
    assert perm_entry("TSTc", 4) == (4, 0b1010)
    assert perm_entry("TTT", 3) == (3, 0)
    with pytest.raises(ValueError, match=r"^signature 'TTT' has 3 arguments, more than "
                                         r"max_args 2$"):
        perm_entry("TTT", 2)


@pytest.mark.parametrize(("max_args", "max_consts"), [(2, 5), (5, 2)])
def test_output_count_limited_by_both_capacities(max_args, max_consts):
    # <OUTPUT> puts n reserved ids in the constants and n offsets in the arguments, so n
    # may not exceed either capacity: 2 outputs fit, 3 are CAPACITY (before the header's
    # count is compared: B=0 with 3 outputs and num_outputs 2 is CAPACITY too).
    two = bytes([3, 1]) + i16(2, 5, 6, -1, -2)
    three = bytes([3, 1]) + i16(3, 5, 6, 7, -1, -2, -3)
    three_b0 = bytes([3, 0]) + i16(3, 5, 6, 7, -1, -2, -3)
    expect({100: (1, 0)}, [
        (PRE + two, (*PRE_OUT, ins(3, 1, [5, 6], [(T, 2), (T, 1)])), E.NONE, 0),
        (PRE + three, PRE_OUT, E.CAPACITY, 3),
        (PRE + three_b0, PRE_OUT, E.CAPACITY, 3),
    ], max_args=max_args, max_consts=max_consts, num_outputs=2)


@pytest.mark.parametrize(("num_outputs", "count", "error"), [
    (0x102, 2, E.OUTPUT_COUNT),   # the header's count is 16 bits: 0x102 is not 2
    (0x100, 0, E.OUTPUT_COUNT),
    (0, 0, E.NONE),               # no outputs at all: <OUTPUT B=0> with an empty C
    (3, 3, E.NONE),
])
def test_output_count_against_a_16_bit_header(num_outputs, count, error):
    body = bytes([3, 0]) + i16(count, *range(count), *(-1 for _ in range(count)))
    tail = (ins(3, 0, range(count), [(T, 2)] * count),) if error == E.NONE else ()
    expect(PERM, [(PRE + body, PRE_OUT + tail, error, 3 if error != E.NONE else 0)],
           num_outputs=num_outputs)


@pytest.mark.parametrize(("max_args", "max_consts"), [(8, 4), (7, 3)])
def test_zeros_beyond_the_constants(max_args, max_consts):
    # A signature of max_args constant codes, C with max_consts ids (the capacity) and a
    # zero in every D entry: the zero after the last constant has nothing to take ->
    # CONST_MISMATCH at 3, however many zeros follow. With as many zeros as constants and
    # ancestors for the rest, the instruction decodes.
    perm = {110: (max_args, (1 << max_args) - 1)}
    ids = list(range(101, 101 + max_consts))
    zeros = bytes([20, 110]) + i16(max_consts, *ids, *[0] * max_args)
    rest = max_args - max_consts
    fits = bytes([20, 110]) + i16(max_consts, *ids, *[0] * max_consts, *[-1] * rest)
    decoded = ins(20, 110, ids, [(C, k) for k in ids] + [(T, 2)] * rest)
    expect(perm, [(PRE + zeros, PRE_OUT, E.CONST_MISMATCH, 3),
                  (PRE + fits, (*PRE_OUT, decoded), E.NONE, 0)],
           max_args=max_args, max_consts=max_consts)


def test_single_constant_code_signature():
    # PERM[104] = one argument that is a constant code (mask 0b1): C = [1, 900], D = [0].
    perm = {104: (1, 0b1)}
    expect(perm, [(PRE + bytes([40, 104]) + i16(1, 900, 0),
                   (*PRE_OUT, ins(40, 104, [900], [(C, 900)])), E.NONE, 0)])


@pytest.mark.parametrize("width", [1, 2])
def test_signature_written_in_the_cycle_it_is_read(width):
    # The table is read when the A/B word enters `cur` and is transparent for a write in
    # the same cycle (module docstring): PERM[50] = (1, 0) written exactly in the cycle
    # the word [20, 50] is loaded is what the decoder uses (without it the entry would
    # read as unloaded: UNKNOWN_SIGNATURE).
    stream_bytes = bytes([2, 0, 20, 50]) + i16(-1)
    want = (I(0, 2, 0, (), ()), I(1, 20, 50, (), ((T, 0),)))
    assert DecoderModel({50: (1, 0)}, max_args=4, max_consts=4).decode(
        stream_bytes).instructions == want
    dut = InstructionDecoder(max_args=4, max_consts=4, width=width)
    payloads = to_payloads(stream_bytes, width)
    # The transfer that completes the word [20, 50]: byte 3, or the second word.
    loading = 3 if width == 1 else 1
    seen = {}

    async def bench(ctx):
        ctx.set(dut.num_outputs, 1)
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.perm.payload, {"b": 50, "entry": {"valid": 1, "length": 1,
                                                      "const_mask": 0}})
        got = []
        for k, payload in enumerate(payloads):
            ctx.set(dut.i.payload, payload)
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.perm.valid, k == loading)
            *_, ready, valid, out = await ctx.tick().sample(dut.i.ready, dut.o.valid,
                                                            dut.o.payload)
            assert ready
            if valid:
                got.append(to_instruction(out))
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.perm.valid, 0)
        for _ in range(6):
            *_, valid, out = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if valid:
                got.append(to_instruction(out))
        seen["got"] = tuple(got)
        seen["status"] = (ctx.get(dut.error), ctx.get(dut.done))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {"got": want, "status": (0, 1)}


def test_defaults_and_layout_widths():
    # Defaults: width 1 (IN_LAYOUT), 8 arguments, 8 constants. Counts 0..n need
    # ceil(log2(n + 1)) bits: 7 -> 3 bits, 1 -> 1 bit.
    from npu.nac.decoder import IN_LAYOUT, decoded_layout, perm_entry_layout

    dut = InstructionDecoder()
    assert dut.width == 1 and dut.i.payload.shape() == IN_LAYOUT
    assert decoded_layout(7, 7).size == 16 + 8 + 8 + 3 + 7 * 16 + 3 + 7 * 17
    assert decoded_layout(1, 1).size == 16 + 8 + 8 + 1 + 16 + 1 + 17
    assert decoded_layout(3, 5).size == 16 + 8 + 8 + 3 + 5 * 16 + 2 + 3 * 17
    assert perm_entry_layout(1).size == 1 + 1 + 1
    assert perm_entry_layout(3).size == 1 + 2 + 3


@pytest.mark.parametrize("width", [1, 2])
def test_input_never_blocks_after_an_odd_length_stream(width):
    # An odd-length stream ends in half a word: TRUNCATED (here at index 1). The error is
    # sticky and the decoder keeps accepting and dropping bytes, so the next streams go
    # in completely (simulate's sender would time out otherwise) and change nothing.
    streams = [bytes([2, 0, 20]), bytes([2, 0, 2, 0]), bytes([2, 1]) + i16(1, 5), bytes([7])]
    assert model_decode(PERM, streams[0], [I(0, 2, 0, (), ())], E.TRUNCATED, 1)
    writes = [(b, length, mask, 1) for b, (length, mask) in PERM.items()]
    dut = InstructionDecoder(max_args=4, max_consts=4, width=width)
    results = simulate(dut, writes, streams, 1, [1, 0, 0, 0], seed=9 + width)
    stuck = (1, E.TRUNCATED, 1, 0)
    assert results == [([I(0, 2, 0, (), ())], stuck), ([], stuck), ([], stuck), ([], stuck)]


@pytest.mark.parametrize("width", [1, 2])
def test_instruction_limit_in_rtl(width):
    # 65537 instructions would take 65537 cycles; instead the index register starts at
    # 65534, as if 65534 instructions had been decoded. Three <INPUT B=0> then give
    # instructions 65534 and 65535 and TOO_MANY for the third (index 65536, whose low 16
    # bits, 0, are what the 16-bit error_index shows), as the model does at full length
    # (test_model_instruction_limit).
    from amaranth.hdl import Fragment

    dut = InstructionDecoder(max_args=1, max_consts=1, width=width)
    top = Fragment.get(dut, None)
    # The decoder's index register, found by name among the signals its logic assigns.
    [index] = [sig for stmts in top.statements.values() for stmt in stmts
               for sig in stmt._lhs_signals() if sig.name == "index"]
    seen = {}

    async def bench(ctx):
        ctx.set(index, 0xFFFE)
        await stream_send(ctx, dut.i, to_payloads(bytes([2, 0] * 3), width),
                          rng=random.Random(width), idle=0.3, timeout=100)

    async def collector(ctx):
        got = await stream_recv(ctx, dut.o, 2, rng=random.Random(3), backpressure=0.4,
                                timeout=100)
        for _ in range(8):
            ctx.set(dut.o.ready, 1)
            *_, valid = await ctx.tick().sample(dut.o.valid)
            assert not valid
        seen["got"] = [to_instruction(v) for v in got]
        seen["status"] = (ctx.get(dut.error), DecodeError(ctx.get(dut.error_cause)),
                          ctx.get(dut.error_index), ctx.get(dut.done))

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(collector)
    sim.run()
    assert seen == {"got": [I(0xFFFE, 2, 0, (), ()), I(0xFFFF, 2, 0, (), ())],
                    "status": (1, E.TOO_MANY, 0, 0)}


def test_model_and_layout_defaults():
    # DecoderModel's header output count defaults to 1 (an <OUTPUT B=0> with one output
    # decodes, with two it is OUTPUT_COUNT); in_layout defaults to one byte per transfer.
    from npu.nac.decoder import IN_LAYOUT, in_layout

    model = DecoderModel({}, max_args=2, max_consts=2)
    one = model.decode(bytes([2, 0, 3, 0]) + i16(1, 0, -1))
    assert (one.error, one.instructions[1]) == (E.NONE, I(1, 3, 0, (0,), ((T, 0),)))
    two = model.decode(bytes([2, 0, 2, 0, 3, 0]) + i16(2, 0, 0, -1, -2))
    assert (two.error, two.error_index) == (E.OUTPUT_COUNT, 2)
    assert in_layout() is IN_LAYOUT
