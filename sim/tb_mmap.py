"""cocotb testbench: the MMAP coprocessor RTL against :class:`npu.nac.mmap.MmapModel`.

Random schedules (valid and corrupted) replayed tick by tick, with random idle cycles on
the section bytes, back-pressure on the preload requests and randomly timed completions.
After every tick the residency state (resident/pending/dropped parameters, free slots, live
count, command counter, requests issued) must equal the model's; at the end the whole
result table is read back through the query port.
"""

from __future__ import annotations

import json
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from npu.nac.mmap import MmapError, MmapModel, ResultState
from sim.cocotb_streams import StreamSink, StreamSource, random_pauses
from sim.nac_schedules import random_schedule
from sim.nac_streams import corrupt

PARAMS = json.loads(os.environ["NPU_DESIGN_PARAMS"])
SLOTS, MAX_PARAMS, DEPTH = PARAMS["n_slots"], PARAMS["max_params"], PARAMS["max_instructions"]


def _bits(ids):
    return sum(1 << k for k in ids)


class TB:
    def __init__(self, dut):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())

    async def reset(self):
        dut = self.dut
        await FallingEdge(dut.clk)
        dut.rst.value = 1
        for name in ("mmap__valid", "tick__valid", "param_map__valid", "preload_done__valid",
                     "preload_req__ready"):
            getattr(dut, name).value = 0
        dut.query_index.value = 0
        await RisingEdge(dut.clk)
        await RisingEdge(dut.clk)
        await FallingEdge(dut.clk)
        dut.rst.value = 0

    async def replay(self, section, param_map, n_ticks, *, seed, idle, backpressure):
        dut = self.dut
        await self.reset()
        # The parameter map is memory (not reset): write every entry.
        for index in range(DEPTH):
            param = param_map.get(index, 0)
            dut.param_map__payload.value = index | (param << 16) | (int(index in param_map) << 32)
            dut.param_map__valid.value = 1
            await FallingEdge(dut.clk)
        dut.param_map__valid.value = 0
        model = MmapModel(param_map, section, n_slots=SLOTS, max_params=MAX_PARAMS,
                          max_instructions=DEPTH)
        rng = random.Random(seed)
        requests = []
        source = StreamSource(dut, "mmap", dut.clk, pause_generator=random_pauses(seed + 1, idle),
                              timeout_cycles=100_000)
        for k, b in enumerate(section):
            source.send_nowait(b | (int(k == len(section) - 1) << 8))
        taker = StreamSink(dut, "preload_req", dut.clk,
                           pause_generator=random_pauses(seed + 2, backpressure),
                           callback=lambda transfer: requests.append(transfer.payload))

        async def compare(where):
            for _ in range(500):  # read-ahead errors appear once the bytes have arrived
                await ReadOnly()
                if model.error == MmapError.NONE or dut.error.value == 1:
                    break
                await FallingEdge(dut.clk)
            got = MmapError(int(dut.error_cause.value))
            assert got == model.error, f"{where}: error RTL {got.name}, model {model.error.name}"
            if model.error != MmapError.NONE:
                assert int(dut.error_tick.value) == model.error_tick, f"{where}: error tick"
                return
            assert int(dut.resident.value) == _bits(model.resident), f"{where}: resident"
            assert int(dut.pending.value) == _bits(model.pending), f"{where}: pending"
            assert int(dut.dropped.value) == _bits(model.dropped), f"{where}: dropped"
            free = _bits(k for k, f in enumerate(model.free_slots) if f)
            assert int(dut.free_slots.value) == free, f"{where}: free slots"
            assert int(dut.commands.value) == model.commands, f"{where}: commands"
            assert requests == model.requests, f"{where}: requests {requests}"

        ticks = StreamSource(dut, "tick", dut.clk, timeout_cycles=5000)
        for t in range(n_ticks):
            await ticks.send(t)  # returns at the falling edge after the tick was taken
            model.tick(t)
            await compare(f"after tick {t}")
            if model.error != MmapError.NONE:
                break
            await FallingEdge(dut.clk)
            in_flight = sorted(model.pending | model.dropped)  # dropped loads complete too
            for param in [p for p in in_flight if rng.random() < 0.5]:
                dut.preload_done__payload.value = param
                dut.preload_done__valid.value = 1
                await FallingEdge(dut.clk)
                model.complete(param)
            dut.preload_done__valid.value = 0
            await compare(f"after completions of tick {t}")
        # The whole result table, through the query port.
        if model.error == MmapError.NONE:
            for index in range(DEPTH):
                await FallingEdge(dut.clk)
                dut.query_index.value = index
                await RisingEdge(dut.clk)
                await FallingEdge(dut.clk)
                await ReadOnly()
                raw = int(dut.query.value)
                state, slot = model.result_state(index)
                assert ResultState(raw & 3) == state, f"result {index}: state"
                if state == ResultState.SAVED:
                    assert raw >> 2 == slot, f"result {index}: slot"
        await FallingEdge(dut.clk)  # out of the ReadOnly phase: stop() releases the handshakes
        taker.stop()
        source.stop()
        ticks.stop()
        return model


@cocotb.test()
async def valid_schedules(dut):
    tb = TB(dut)
    rng = random.Random(cocotb.RANDOM_SEED)
    for trial in range(10):
        schedule = random_schedule(rng, n_instr=rng.randint(4, 48), max_params=MAX_PARAMS)
        idle, backpressure = [(0, 0), (0.3, 0), (0, 0.6), (0.4, 0.4)][trial % 4]
        model = await tb.replay(schedule.section, schedule.param_map, schedule.n_instr,
                                seed=rng.randrange(1 << 30), idle=idle,
                                backpressure=backpressure)
        assert model.error == MmapError.NONE


@cocotb.test()
async def corrupted_schedules_end_in_error_not_hang(dut):
    tb = TB(dut)
    rng = random.Random(cocotb.RANDOM_SEED + 3)
    causes = set()
    for _ in range(30):
        schedule = random_schedule(rng, n_instr=rng.randint(4, 24), max_params=MAX_PARAMS)
        model = await tb.replay(corrupt(schedule.section, rng), schedule.param_map,
                                schedule.n_instr, seed=rng.randrange(1 << 30), idle=0.2,
                                backpressure=0.3)
        causes.add(model.error)
    assert len(causes) >= 3, f"corruptions reached only {sorted(c.name for c in causes)}"
