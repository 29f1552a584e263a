"""cocotb testbench: the ABCD decoder RTL against :class:`npu.nac.decoder.DecoderModel`.

Random valid streams (from :mod:`sim.nac_streams`, whose own expectations are checked
too) and corrupted ones, with random input stalls and output back-pressure. A watchdog
bounds every run: a decoder that stops answering fails the test instead of hanging it.
Throughput (bytes and instructions per cycle) is measured by counters in the testbench
on unstalled runs and written to ``throughput.json`` in the run directory.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from npu.nac.decoder import (
    DecodedInstruction,
    DecodeError,
    DecoderModel,
    decoded_layout,
    perm_write_layout,
)
from sim.cocotb_streams import StreamSink, StreamSource, random_pauses
from sim.nac_streams import corrupt, random_program

PARAMS = json.loads(os.environ["NPU_DESIGN_PARAMS"])
MAX_ARGS, MAX_CONSTS = PARAMS["max_args"], PARAMS["max_consts"]
OUT_LAYOUT = decoded_layout(MAX_ARGS, MAX_CONSTS)
PERM_LAYOUT = perm_write_layout(MAX_ARGS)


def unpack(bits):
    v = OUT_LAYOUT.from_bits(bits)
    return DecodedInstruction(
        int(v.index), int(v.a), int(v.b),
        tuple(int(v.consts[k]) for k in range(int(v.n_consts))),
        tuple((bool(v.args[k].is_const), int(v.args[k].value)) for k in range(int(v.n_args))))


class TB:
    def __init__(self, dut):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())

    async def reset(self):
        dut = self.dut
        await FallingEdge(dut.clk)  # leave any ReadOnly phase the last run ended in
        dut.rst.value = 1
        dut.i__valid.value = 0
        dut.o__ready.value = 0
        dut.perm__valid.value = 0
        await RisingEdge(dut.clk)
        await RisingEdge(dut.clk)
        await FallingEdge(dut.clk)
        dut.rst.value = 0

    async def load_perm(self, perm, num_outputs):
        dut = self.dut
        dut.num_outputs.value = num_outputs
        # All 256 entries: the table is memory, not cleared by reset.
        for b in range(256):
            length, mask = perm.get(b, (0, 0))
            await FallingEdge(dut.clk)
            dut.perm__payload.value = PERM_LAYOUT.const(
                {"b": b, "entry": {"valid": int(b in perm), "length": length,
                                   "const_mask": mask}}).as_bits()
            dut.perm__valid.value = 1
        await FallingEdge(dut.clk)
        dut.perm__valid.value = 0

    async def run(self, perm, stream, num_outputs, *, seed, idle, backpressure):
        """Decode one stream; return (instructions, (error, cause, index, done), cycles)."""
        dut = self.dut
        await self.reset()
        await self.load_perm(perm, num_outputs)
        want = DecoderModel(perm, max_args=MAX_ARGS, max_consts=MAX_CONSTS,
                            num_outputs=num_outputs).decode(stream)
        source = StreamSource(dut, "i", dut.clk, pause_generator=random_pauses(seed, idle),
                              timeout_cycles=5000)
        sink = StreamSink(dut, "o", dut.clk,
                          pause_generator=random_pauses(seed + 1, backpressure),
                          timeout_cycles=5000)
        for k, b in enumerate(stream):
            source.send_nowait(b | (int(k == len(stream) - 1) << 8))
        cycles = 0

        async def count_cycles():
            nonlocal cycles
            while True:
                await RisingEdge(dut.clk)
                cycles += 1

        counter = cocotb.start_soon(count_cycles())
        got = [unpack(await sink.recv()) for _ in want.instructions]
        await source.wait()  # raises StreamTimeout if the decoder stopped accepting bytes
        counter.cancel()
        # Watchdog: nothing more comes out, and the status is final, within 20 cycles.
        sink.set_pause_generator(None)
        for _ in range(21):
            await FallingEdge(dut.clk)
        assert sink.empty(), "decoder emitted more instructions than the model"
        source.stop()
        sink.stop()
        await ReadOnly()
        status = (int(dut.error.value), DecodeError(int(dut.error_cause.value)),
                  int(dut.error_index.value), int(dut.done.value))
        return want, got, status, cycles

    @staticmethod
    def compare(want, got, status):
        for k, (g, w) in enumerate(zip(got, want.instructions, strict=True)):
            assert g == w, f"instruction {k}: RTL {g} != model {w}"
        error, cause, index, done = status
        assert cause == want.error, f"error cause: RTL {cause.name}, model {want.error.name}"
        assert error == int(want.error != DecodeError.NONE)
        if error:
            assert index == want.error_index, f"error index: RTL {index}, model"
        assert done == int(want.done)


@cocotb.test()
async def valid_streams_with_stalls(dut):
    tb = TB(dut)
    rng = random.Random(cocotb.RANDOM_SEED)
    for trial in range(24):
        program = random_program(rng, max_args=MAX_ARGS, max_consts=MAX_CONSTS,
                                 n_instr=rng.randint(2, 80),
                                 num_outputs=rng.randint(1, min(3, MAX_ARGS, MAX_CONSTS)))
        idle, backpressure = [(0, 0), (0.3, 0), (0, 0.6), (0.5, 0.5)][trial % 4]
        want, got, status, _ = await tb.run(program.perm, program.stream, program.num_outputs,
                                            seed=rng.randrange(1 << 30), idle=idle,
                                            backpressure=backpressure)
        assert want.instructions == program.expected, "model disagrees with the generator"
        tb.compare(want, got, status)


@cocotb.test()
async def corrupted_streams_end_in_error_not_hang(dut):
    tb = TB(dut)
    rng = random.Random(cocotb.RANDOM_SEED + 7)
    causes = set()
    for _ in range(120):
        program = random_program(rng, max_args=MAX_ARGS, max_consts=MAX_CONSTS,
                                 n_instr=rng.randint(2, 30),
                                 num_outputs=rng.randint(1, min(2, MAX_ARGS, MAX_CONSTS)))
        damaged = corrupt(program.stream, rng) or b"\x0a"
        want, got, status, _ = await tb.run(program.perm, damaged, program.num_outputs,
                                            seed=rng.randrange(1 << 30), idle=0.2,
                                            backpressure=0.3)
        tb.compare(want, got, status)
        causes.add(want.error)
    # The corruptions must actually reach the error paths.
    assert len(causes) >= 5, f"only {sorted(c.name for c in causes)}"


@cocotb.test()
async def throughput_without_stalls(dut):
    tb = TB(dut)
    rng = random.Random(cocotb.RANDOM_SEED + 13)
    total_bytes = total_instr = total_cycles = 0
    for _ in range(4):
        program = random_program(rng, max_args=MAX_ARGS, max_consts=MAX_CONSTS, n_instr=300)
        want, got, status, cycles = await tb.run(program.perm, program.stream, 1, seed=1,
                                                 idle=0, backpressure=0)
        tb.compare(want, got, status)
        total_bytes += len(program.stream)
        total_instr += len(got)
        total_cycles += cycles
    stats = {"bytes": total_bytes, "instructions": total_instr, "cycles": total_cycles,
             "bytes_per_cycle": total_bytes / total_cycles,
             "instructions_per_cycle": total_instr / total_cycles}
    Path("throughput.json").write_text(json.dumps(stats, indent=2))
    dut._log.info("decoder throughput: %s", stats)
    # The cycle count spans first byte to last output (+ a few cycles of start-up),
    # so one byte per cycle shows as a ratio just under 1.
    assert stats["bytes_per_cycle"] > 0.97, stats


@cocotb.test()
async def vector_files(dut):
    """Streams from real .nac files (written by tests/hw/test_decoder_files.py): the RTL's
    decoding must equal the expectation computed with the NAC container's reader."""
    path = os.environ.get("NPU_DECODER_VECTORS")
    if not path:
        return  # only run when a vector file is given
    vectors = json.loads(Path(path).read_text())
    tb = TB(dut)
    rng = random.Random(cocotb.RANDOM_SEED + 21)
    for k, vec in enumerate(vectors):
        perm = {int(b): tuple(entry) for b, entry in vec["perm"].items()}
        expected = tuple(DecodedInstruction(i["index"], i["a"], i["b"], tuple(i["consts"]),
                                            tuple((bool(c), v) for c, v in i["args"]))
                         for i in vec["expected"])
        want, got, status, _ = await tb.run(perm, bytes.fromhex(vec["stream"]),
                                            vec["num_outputs"], seed=rng.randrange(1 << 30),
                                            idle=0.3, backpressure=0.3)
        assert want.instructions == expected, f"vector {k} ({vec['name']}): model != reader"
        tb.compare(want, got, status)
        assert status[0] == 0 and status[3] == 1, f"vector {k} ({vec['name']}): {status}"
