"""MMAP coprocessor: RTL against MmapModel in the Amaranth simulator, tick by tick."""

import random

import pytest
from amaranth.sim import Simulator

from npu.nac.mmap import (
    MmapAction,
    MmapCoprocessor,
    MmapError,
    MmapFault,
    MmapModel,
    ResultState,
    encode_mmap,
)
from sim.nac_schedules import random_schedule
from sim.nac_streams import corrupt
from sim.streams import stream_send

SLOTS, PARAMS, DEPTH = 6, 16, 64


def _bits(ids):
    return sum(1 << k for k in ids)


def replay(section, param_map, n_ticks, *, seed=0, idle=0.0, backpressure=0.0,
           completions=()):
    """Run RTL and model side by side; assert equal state after every tick.

    *completions*: extra (tick, param) completions to inject after that tick (for the
    unexpected-completion case); otherwise each pending parameter completes after a tick
    with probability 1/2.
    """
    dut = MmapCoprocessor(n_slots=SLOTS, max_params=PARAMS, max_instructions=DEPTH)
    model = MmapModel(param_map, section, n_slots=SLOTS, max_params=PARAMS,
                      max_instructions=DEPTH)
    rng = random.Random(seed)
    requests = []
    checked = {"ticks": 0}

    async def feed_bytes(ctx):
        payloads = [{"data": b, "last": int(k == len(section) - 1)}
                    for k, b in enumerate(section)]
        await stream_send(ctx, dut.mmap, payloads, rng=random.Random(seed + 1), idle=idle,
                          timeout=100_000)

    async def take_requests(ctx):
        req_rng = random.Random(seed + 2)
        while True:
            ready = req_rng.random() >= backpressure
            ctx.set(dut.preload_req.ready, ready)
            *_, valid, payload = await ctx.tick().sample(dut.preload_req.valid,
                                                        dut.preload_req.payload)
            if valid and ready:
                requests.append(payload)

    async def compare(ctx, where):
        # A read-ahead error (in a record header after the last executed record) shows in
        # the model at once and in the RTL when the input bytes have arrived.
        for _ in range(500):
            if model.error == MmapError.NONE or ctx.get(dut.error):
                break
            await ctx.tick()
        assert ctx.get(dut.error_cause) == model.error, (
            f"{where}: error RTL {MmapError(ctx.get(dut.error_cause)).name}, "
            f"model {model.error.name}")
        if model.error != MmapError.NONE:
            assert ctx.get(dut.error_tick) == model.error_tick, f"{where}: error tick"
            return
        assert ctx.get(dut.resident) == _bits(model.resident), f"{where}: resident"
        assert ctx.get(dut.pending) == _bits(model.pending), f"{where}: pending"
        free = _bits(k for k, f in enumerate(model.free_slots) if f)
        assert ctx.get(dut.free_slots) == free, f"{where}: free slots"
        assert ctx.get(dut.live) == SLOTS - sum(model.free_slots), f"{where}: live"
        assert ctx.get(dut.commands) == model.commands, f"{where}: commands"
        assert requests == model.requests, f"{where}: preload requests"

    async def sweep(ctx, where):
        for index in range(DEPTH):
            ctx.set(dut.query_index, index)
            await ctx.tick()
            await ctx.tick()
            entry = ctx.get(dut.query)
            state, slot = model.result_state(index)
            assert ResultState(entry.state) == state, f"{where}: result {index} state"
            if state == ResultState.SAVED:
                assert entry.slot == slot, f"{where}: result {index} slot"

    async def ticks(ctx):
        for index, param in param_map.items():
            ctx.set(dut.param_map.payload, {"index": index, "param": param, "valid": 1})
            ctx.set(dut.param_map.valid, 1)
            await ctx.tick()
        ctx.set(dut.param_map.valid, 0)
        extra = dict(completions)
        for t in range(n_ticks):
            ctx.set(dut.tick.payload, t)
            ctx.set(dut.tick.valid, 1)
            for _ in range(2000):
                *_, ready = await ctx.tick().sample(dut.tick.ready)
                if ready:
                    break
            else:
                raise AssertionError(f"tick {t} not accepted in 2000 cycles")
            ctx.set(dut.tick.valid, 0)
            model.tick(t)
            await ctx.tick()
            await compare(ctx, f"after tick {t}")
            if model.error != MmapError.NONE:
                break
            done = [p for p in sorted(model.pending) if rng.random() < 0.5]
            if t in extra:
                done.append(extra[t])
            for param in done:
                ctx.set(dut.preload_done.payload, param)
                ctx.set(dut.preload_done.valid, 1)
                await ctx.tick()
                model.complete(param)
            ctx.set(dut.preload_done.valid, 0)
            await ctx.tick()
            await compare(ctx, f"after completions of tick {t}")
            if model.error != MmapError.NONE:
                break
            if n_ticks <= 24:
                await sweep(ctx, f"after tick {t}")
            checked["ticks"] += 1
        await sweep(ctx, "at the end")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(ticks)
    sim.add_testbench(feed_bytes, background=True)
    sim.add_testbench(take_requests, background=True)
    sim.run()
    return model, checked["ticks"]


@pytest.mark.parametrize("seed", range(8))
def test_valid_schedules(seed):
    rng = random.Random(seed)
    schedule = random_schedule(rng, n_instr=rng.randint(4, 40), max_params=PARAMS)
    idle, backpressure = [(0, 0), (0.3, 0), (0, 0.6), (0.4, 0.4)][seed % 4]
    model, ticks = replay(schedule.section, schedule.param_map, schedule.n_instr, seed=seed,
                          idle=idle, backpressure=backpressure)
    assert model.error == MmapError.NONE and ticks == schedule.n_instr
    assert model.commands == sum(len(c) for _, c in schedule.records)


@pytest.mark.parametrize("seed", range(30))
def test_corrupted_schedules(seed):
    rng = random.Random(500 + seed)
    schedule = random_schedule(rng, n_instr=rng.randint(4, 20), max_params=PARAMS)
    replay(corrupt(schedule.section, rng), schedule.param_map, schedule.n_instr, seed=seed,
           idle=0.2, backpressure=0.3)


# Hand-made schedules, each exercising one rule. param_map: instruction 1 -> param 5.
F, S, W, P = MmapAction.FREE, MmapAction.SAVE_RESULT, MmapAction.FORWARD, MmapAction.PRELOAD


@pytest.mark.parametrize(("records", "cause", "tick"), [
    ([(0, [(P, 1)]), (2, [(S, 2)]), (3, [(F, 2), (F, 1)])], MmapError.NONE, 0xFFFF),
    ([(0, [(S, 1)])], MmapError.BAD_TARGET, 0),          # SAVE_RESULT of another tick
    ([(1, [(W, 1)])], MmapError.BAD_TARGET, 1),          # FORWARD to itself
    ([(2, [(F, 0)])], MmapError.FREE_UNKNOWN, 2),        # nothing held by 0
    ([(2, [(F, 3)])], MmapError.BAD_TARGET, 2),          # FREE of a later instruction
    # FREE of the current tick's own result (just saved): not an earlier instruction, so
    # it would release a result before anything reads it.
    ([(2, [(S, 2), (F, 2)])], MmapError.BAD_TARGET, 2),
    ([(0, [(P, 2)])], MmapError.BAD_TARGET, 0),          # PRELOAD of a non-parameter
    ([(0, [(7, 1)])], MmapError.BAD_ACTION, 0),
    ([(0, [(S, 100)])], MmapError.CAPACITY, 0),          # 100 >= max_instructions 64
    ([(0, [(S, 64)])], MmapError.CAPACITY, 0),           # 64: one past the last entry
    ([(2, [(S, 2), (S, 2)])], MmapError.BAD_TARGET, 2),  # SAVE_RESULT of a saved result
    ([(2, [(S, 2), (W, 3)])], MmapError.BAD_TARGET, 2),  # FORWARD of a saved result
    ([(2, [(S, 2)]), (1, [(S, 1)])], MmapError.TICK_ORDER, 2),
    ([(0, [(S, 0)]), (1, [(S, 1)]), (2, [(S, 2)]), (3, [(S, 3)]), (4, [(S, 4)]),
      (5, [(S, 5)]), (6, [(S, 6)])], MmapError.NO_SLOT, 6),   # 7 saves, 6 slots
])
def test_rules(records, cause, tick):
    model, _ = replay(encode_mmap(records), {1: 5}, 8)
    assert model.error == cause
    if cause != MmapError.NONE:
        assert model.error_tick == tick


def test_fault_carries_the_cause_name():
    fault = MmapFault(MmapError.NO_SLOT)
    assert fault.cause is MmapError.NO_SLOT and str(fault) == "NO_SLOT"


def test_unexpected_completion():
    model, _ = replay(encode_mmap([(3, [(S, 3)])]), {1: 5}, 6, completions=[(1, 9)])
    assert (model.error, model.error_tick) == (MmapError.UNEXPECTED_DONE, 1)


def test_preload_resident_then_freed():
    # Hand-derived: PRELOAD 1 at tick 0 issues a request for param 5; after its
    # completion param 5 is resident; FREE 1 at tick 3 clears it.
    records = [(0, [(P, 1)]), (3, [(F, 1)])]
    model = MmapModel({1: 5}, encode_mmap(records), n_slots=2, max_params=8,
                      max_instructions=8)
    model.tick(0)
    assert model.requests == [5] and model.pending == {5}
    model.complete(5)
    model.tick(1)
    model.tick(2)
    assert model.resident == {5}
    model.tick(3)
    assert model.resident == set() and model.error == MmapError.NONE


@pytest.mark.parametrize("name", ["attention", "cnn", "mlp", "residual"])
def test_compiled_zoo_schedules(name):
    # Real schedules: the compiler's MMAP section of each zoo model, RTL vs model per tick.
    torch = pytest.importorskip("torch")
    from nac import dumps
    from nac.compile import compile_module
    from nac.container import section_body
    from nac.zoo import build

    torch.set_num_threads(1)
    module, inputs = build(name)
    nac, _, report = compile_module(module, inputs)
    section = section_body(dumps(nac), "MMAP")
    param_map = {i: ins.const_ids[0] for i, ins in enumerate(nac.ops)
                 if ins.a == 2 and ins.b == 1}
    model, ticks = replay(section, param_map, len(nac.ops), seed=3, idle=0.2, backpressure=0.3)
    assert model.error == MmapError.NONE and ticks == len(nac.ops)
    assert model.commands == report.commands
