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
           completions=(), auto_complete=True):
    """Run RTL and model side by side; assert equal state after every tick.

    *completions*: extra (tick, param) completions to inject after that tick (for the
    unexpected-completion case); and, with *auto_complete*, each load in flight (pending
    or dropped) completes after a tick with probability 1/2.
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
        assert ctx.get(dut.dropped) == _bits(model.dropped), f"{where}: dropped"
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
            in_flight = sorted(model.pending | model.dropped) if auto_complete else []
            done = [p for p in in_flight if rng.random() < 0.5]
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


def test_preload_freed_in_flight():
    # Hand-derived: PRELOAD 1 (param 5) at tick 0 requests 5; FREE 1 at tick 2 comes
    # before the completion, so 5 is dropped, not resident; its completion after tick 3
    # clears it without an error, and nothing is resident. RTL against the model per tick.
    model, _ = replay(encode_mmap([(0, [(P, 1)]), (2, [(F, 1)])]), {1: 5}, 6,
                      completions=[(3, 5)], auto_complete=False)
    assert model.error == MmapError.NONE and model.requests == [5]
    assert model.resident == model.pending == model.dropped == set()


def test_dropped_preload_taken_up_again():
    # Instructions 1 and 4 load the same parameter 5. FREE 1 at tick 2 drops the load in
    # flight; PRELOAD 4 at tick 3 takes it up again without a second request, and its one
    # completion makes 5 resident.
    records = [(0, [(P, 1)]), (2, [(F, 1)]), (3, [(P, 4)])]
    model, _ = replay(encode_mmap(records), {1: 5, 4: 5}, 6, completions=[(3, 5)],
                      auto_complete=False)
    assert model.error == MmapError.NONE and model.requests == [5]
    assert model.resident == {5} and model.pending == model.dropped == set()


def test_dropped_preload_freed_again():
    # A dropped load holds nothing: a second FREE of it is FREE_UNKNOWN.
    records = [(0, [(P, 1)]), (2, [(F, 1)]), (3, [(F, 1)])]
    model, _ = replay(encode_mmap(records), {1: 5}, 6, auto_complete=False)
    assert (model.error, model.error_tick) == (MmapError.FREE_UNKNOWN, 3)


@pytest.mark.parametrize("case", ["free", "preload"])
@pytest.mark.parametrize("delay", range(14))
def test_completion_in_the_cycle_of_a_command(case, delay):
    """The completion of param 5 arrives *delay* cycles after the tick whose command acts
    on 5 is presented, so for some delay in the same cycle as that command's EXEC (which
    sees the completion first). Never an error, and no load is lost (hand-derived):

    * FREE of the pending load: nothing is held afterwards, whatever the order;
    * PRELOAD of the dropped load: if the completion came first, the load was cancelled
      and PRELOAD requests 5 again (2 requests, 5 pending); if it came after, PRELOAD
      takes the load in flight up again and its completion makes 5 resident (1 request).
      Delay 0 is before the command (its 3 bytes take 3 cycles), delay 13 after it."""
    params = {1: 5, 4: 5}
    if case == "free":
        records, at = [(0, [(P, 1)]), (2, [(S, 2), (F, 1)])], 2
    else:
        records, at = [(0, [(P, 1)]), (2, [(F, 1)]), (3, [(S, 3), (P, 4)])], 3
    dut = MmapCoprocessor(n_slots=SLOTS, max_params=PARAMS, max_instructions=DEPTH)
    section = encode_mmap(records)
    out = {"requests": 0}

    async def count_requests(ctx):
        async for _, _, valid in ctx.tick().sample(dut.preload_req.valid):
            out["requests"] += valid

    async def feed_bytes(ctx):
        await stream_send(ctx, dut.mmap, [{"data": b, "last": int(k == len(section) - 1)}
                                          for k, b in enumerate(section)], timeout=10_000)

    async def bench(ctx):
        ctx.set(dut.preload_req.ready, 1)
        for index, param in params.items():
            ctx.set(dut.param_map.payload, {"index": index, "param": param, "valid": 1})
            ctx.set(dut.param_map.valid, 1)
            await ctx.tick()
        ctx.set(dut.param_map.valid, 0)
        for t in range(5):
            ctx.set(dut.tick.payload, t)
            ctx.set(dut.tick.valid, 1)
            for cycle in range(2000):
                if t == at and cycle == delay:
                    ctx.set(dut.preload_done.payload, 5)
                    ctx.set(dut.preload_done.valid, 1)
                *_, ready = await ctx.tick().sample(dut.tick.ready)
                ctx.set(dut.preload_done.valid, 0)
                if ready:
                    break
            ctx.set(dut.tick.valid, 0)
            if t == at and cycle < delay:  # the tick was quicker: complete after it
                for _ in range(delay - cycle):
                    await ctx.tick()
                ctx.set(dut.preload_done.payload, 5)
                ctx.set(dut.preload_done.valid, 1)
                await ctx.tick()
                ctx.set(dut.preload_done.valid, 0)
        await ctx.tick()
        for name in ("error", "resident", "pending", "dropped"):
            out[name] = ctx.get(getattr(dut, name))
        out["cause"] = MmapError(ctx.get(dut.error_cause))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(feed_bytes, background=True)
    sim.add_testbench(count_requests, background=True)
    sim.run()
    assert out["cause"] == MmapError.NONE and out["error"] == 0, out
    assert out["dropped"] == 0, out
    if case == "free":
        assert (out["resident"], out["pending"], out["requests"]) == (0, 0, 1), out
    else:
        again = out["requests"] == 2
        assert (out["resident"], out["pending"]) == ((0, 1 << 5) if again else (1 << 5, 0)), out
        assert out["requests"] in (1, 2), out
        if delay in (0, 13):
            assert again == (delay == 0), out


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
