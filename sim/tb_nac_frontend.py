"""cocotb testbench: the NAC front-end (decoder + MMAP coprocessor in lock-step).

Random programs and the schedules of their own dependency graphs: both byte streams
stall at random, the instruction output sees back-pressure, preload completions come back
after random delays. Checks: the instructions equal the generator's expectation; when
instruction *i* leaves, the coprocessor has executed exactly the commands of ticks
``0..i`` (lock-step); every preload request names a parameter the schedule preloads; no
error in either block.
"""

from __future__ import annotations

import json
import os
import random
from itertools import accumulate

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from npu.nac.decoder import DecodedInstruction, decoded_layout, perm_write_layout
from sim.cocotb_streams import StreamSink, StreamSource, StreamTimeout, random_pauses
from sim.nac_schedules import schedule_for_program
from sim.nac_streams import random_program

P = json.loads(os.environ["NPU_DESIGN_PARAMS"])
OUT_LAYOUT = decoded_layout(P["max_args"], P["max_consts"])
PERM_LAYOUT = perm_write_layout(P["max_args"])


def ops_transfers(stream, width):
    """The OPS bytes as the front-end's ``ops`` transfers (``npu.nac.decoder.in_layout``):
    ``(data bits, flag bits)`` per transfer, one byte + ``last`` (bit 8) for width 1; two
    bytes, earlier in bits 0-7, + ``last`` (bit 16) and ``half`` (bit 17: the final
    transfer holds one byte) for width 2."""
    if width == 1:
        return [(b, int(k == len(stream) - 1) << 8) for k, b in enumerate(stream)]
    out = []
    for k in range(0, len(stream), 2):
        pair = stream[k:k + 2]
        last = k + 2 >= len(stream)
        out.append((pair[0] | (pair[1] << 8 if len(pair) == 2 else 0),
                    int(last) << 16 | int(len(pair) == 1) << 17))
    return out


def unpack(bits):
    v = OUT_LAYOUT.from_bits(bits)
    return DecodedInstruction(
        int(v.index), int(v.a), int(v.b),
        tuple(int(v.consts[k]) for k in range(int(v.n_consts))),
        tuple((bool(v.args[k].is_const), int(v.args[k].value)) for k in range(int(v.n_args))))


async def run_program(dut, rng):
    while True:  # a schedule must fit the slots (the compiler's job; here: pick another)
        program = random_program(rng, max_args=P["max_args"], max_consts=P["max_consts"],
                                 n_instr=rng.randint(3, 60), num_outputs=1)
        schedule = schedule_for_program(program, max_params=P["max_params"])
        if schedule.peak_live <= P["n_slots"]:
            break
    await FallingEdge(dut.clk)
    dut.rst.value = 1
    for name in ("ops__valid", "mmap__valid", "perm__valid", "param_map__valid",
                 "preload_done__valid", "o__ready", "preload_req__ready"):
        getattr(dut, name).value = 0
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    dut.num_outputs.value = 1
    for b in range(256):
        length, mask = program.perm.get(b, (0, 0))
        dut.perm__payload.value = PERM_LAYOUT.const(
            {"b": b, "entry": {"valid": int(b in program.perm), "length": length,
                               "const_mask": mask}}).as_bits()
        dut.perm__valid.value = 1
        await FallingEdge(dut.clk)
    dut.perm__valid.value = 0
    for index in range(P["max_instructions"]):
        param = schedule.param_map.get(index, 0)
        dut.param_map__payload.value = index | (param << 16) | (
            int(index in schedule.param_map) << 32)
        dut.param_map__valid.value = 1
        await FallingEdge(dut.clk)
    dut.param_map__valid.value = 0

    seed = rng.randrange(1 << 30)
    feeders = [StreamSource(dut, "ops", dut.clk, pause_generator=random_pauses(seed, 0.3),
                            timeout_cycles=100_000),
               StreamSource(dut, "mmap", dut.clk, pause_generator=random_pauses(seed + 1, 0.3),
                            timeout_cycles=100_000)]
    for lo, hi in ops_transfers(program.stream, P.get("width", 1)):
        feeders[0].send_nowait(lo | hi)
    for k, b in enumerate(schedule.section):
        feeders[1].send_nowait(b | (int(k == len(schedule.section) - 1) << 8))
    requests = []
    outstanding = []
    delay_rng = random.Random(seed + 2)

    def take_request(transfer):  # in ReadOnly, after this cycle's completion was driven
        requests.append(transfer.payload)
        outstanding.append([delay_rng.randint(1, 20), transfer.payload])

    async def complete_preloads():
        # preload_done has no ready: each completion is a one-cycle valid pulse.
        while True:
            await FallingEdge(dut.clk)
            dut.preload_done__valid.value = 0
            due = [item for item in outstanding if item[0] <= 0]
            if due:
                outstanding.remove(due[0])
                dut.preload_done__payload.value = due[0][1]
                dut.preload_done__valid.value = 1
            for item in outstanding:
                item[0] -= 1

    taker = StreamSink(dut, "preload_req", dut.clk, pause_generator=random_pauses(seed + 3, 0.3),
                       callback=take_request)
    responder = cocotb.start_soon(complete_preloads())
    per_tick = [0] * schedule.n_instr
    for tick, cmds in schedule.records:
        per_tick[tick] = len(cmds)
    cumulative = list(accumulate(per_tick))

    def check_lock_step(transfer):  # in ReadOnly, the cycle the instruction leaves
        ins = unpack(transfer.payload)
        executed = int(dut.commands.value)
        assert executed == cumulative[ins.index], (
            f"instruction {ins.index} left with {executed} commands executed, "
            f"schedule has {cumulative[ins.index]} up to its tick")
        assert dut.dec_error.value == 0 and dut.mmap_error.value == 0, (
            f"instruction {ins.index}: decoder error {int(dut.dec_error_cause.value)}, "
            f"mmap error {int(dut.mmap_error_cause.value)}")

    sink = StreamSink(dut, "o", dut.clk, pause_generator=random_pauses(seed + 4, 0.4),
                      callback=check_lock_step, timeout_cycles=5000)
    got = []
    while len(got) < len(program.expected):
        try:
            got.append(unpack(await sink.recv()))
        except StreamTimeout as exc:
            raise AssertionError(
                f"front-end stalled after {len(got)} instructions: decoder error "
                f"{int(dut.dec_error_cause.value)}, mmap error "
                f"{int(dut.mmap_error_cause.value)}") from exc
    for feeder in feeders:
        await feeder.wait()
        feeder.stop()
    responder.cancel()
    taker.stop()
    sink.stop()
    assert got == list(program.expected)
    preloaded = {schedule.param_map[t] for _, cmds in schedule.records
                 for action, t in cmds if action.value == 40}
    assert sorted(requests) == sorted(preloaded), (requests, preloaded)
    await FallingEdge(dut.clk)
    await ReadOnly()
    assert dut.dec_error.value == 0 and dut.mmap_error.value == 0 and dut.done.value == 1


@cocotb.test()
async def random_programs_in_lock_step(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    rng = random.Random(cocotb.RANDOM_SEED)
    for _ in range(8):
        await run_program(dut, rng)
