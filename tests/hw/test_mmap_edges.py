"""MMAP coprocessor: directed cases for mutants of ``npu.nac.mmap`` the other tests missed.

Each case is a short hand-made schedule with a scripted order of ticks and preload
completions. The RTL runs in the Amaranth simulator (with idle cycles on the byte stream
and back-pressure on the preload requests) and is compared with ``MmapModel`` after every
event, the whole result table included (state and slot of every entry; the model's
``result_state`` gives slot 0 unless SAVED). Where the case has a point, the expected
outcome is derived by hand from the rules in the module docstring (spec §4) and checked on
the model as well, so that a wrong model cannot agree with a wrong RTL. The bytes the RTL
takes are counted against how far the model has read. The constructor's checks and the
interface widths are tested against the documented ranges, the clear of the result table
after a reset on a table left full by an earlier run.
"""

import random

import pytest
from amaranth import ClockDomain, Module, Shape
from amaranth.sim import Simulator

from npu.nac.mmap import (
    MmapAction,
    MmapCoprocessor,
    MmapError,
    MmapModel,
    ResultState,
    encode_mmap,
)
from sim.streams import stream_send

F, S, W, P = MmapAction.FREE, MmapAction.SAVE_RESULT, MmapAction.FORWARD, MmapAction.PRELOAD


def _bits(ids):
    return sum(1 << k for k in ids)


def run(section, script, *, param_map=None, map_writes=None, n_slots=6, max_params=16,
        depth=16, seed=0, idle=0.3, backpressure=0.4):
    """Run RTL and model through *script*; compare their whole state after every event.

    *section* is MMAP bytes or a list of records for ``encode_mmap``. *script* is a list
    of ``("tick", t)`` (present tick t until accepted), ``("burst", [t, ...])`` (ticks
    back to back, the next presented in the cycle after the previous was accepted) and
    ``("done", p)`` (one completion of parameter p). *map_writes*, ``(index, param,
    valid)`` transfers on ``param_map``, default to one valid write per entry of
    *param_map*; the model gets the map they leave. Returns the model and the preload
    requests the RTL handed over.
    """
    if not isinstance(section, bytes):
        section = encode_mmap(section)
    if map_writes is None:
        map_writes = [(i, p, 1) for i, p in (param_map or {}).items()]
    model_map = {}
    for index, param, valid in map_writes:
        if valid:
            model_map[index] = param
        else:
            model_map.pop(index, None)
    dut = MmapCoprocessor(n_slots=n_slots, max_params=max_params, max_instructions=depth)
    model = MmapModel(model_map, section, n_slots=n_slots, max_params=max_params,
                      max_instructions=depth)
    requests = []
    taken = {"bytes": 0}

    async def feed_bytes(ctx):
        payloads = [{"data": b, "last": int(k == len(section) - 1)}
                    for k, b in enumerate(section)]
        await stream_send(ctx, dut.mmap, payloads, rng=random.Random(seed + 1), idle=idle,
                          timeout=100_000)

    async def count_bytes(ctx):
        async for *_, valid, ready in ctx.tick().sample(dut.mmap.valid, dut.mmap.ready):
            taken["bytes"] += valid and ready

    async def take_requests(ctx):
        rng = random.Random(seed + 2)
        while True:
            ready = rng.random() >= backpressure
            ctx.set(dut.preload_req.ready, ready)
            *_, valid, payload = await ctx.tick().sample(dut.preload_req.valid,
                                                        dut.preload_req.payload)
            if valid and ready:
                requests.append(payload)

    async def compare(ctx, where):
        for _ in range(200):  # a read-ahead error shows in the RTL once the bytes are in
            if model.error == MmapError.NONE or ctx.get(dut.error):
                break
            await ctx.tick()
        assert MmapError(ctx.get(dut.error_cause)) == model.error, where
        assert ctx.get(dut.error) == (model.error != MmapError.NONE), where
        # Bytes taken: as far as the model has read (up to the next record header), or
        # all of them after an error (they are accepted and dropped).
        want = len(section) if model.error != MmapError.NONE else model._pos
        for _ in range(200):
            if taken["bytes"] >= want:
                break
            await ctx.tick()
        await ctx.tick().repeat(3)
        assert taken["bytes"] == want, f"{where}: bytes taken"
        if model.error != MmapError.NONE:
            assert ctx.get(dut.error_tick) == model.error_tick, f"{where}: error tick"
        # The model stops at an error with its state as it was (every check comes before
        # any update), and so must the RTL: the state is compared after an error too.
        assert ctx.get(dut.resident) == _bits(model.resident), f"{where}: resident"
        assert ctx.get(dut.pending) == _bits(model.pending), f"{where}: pending"
        assert ctx.get(dut.dropped) == _bits(model.dropped), f"{where}: dropped"
        free = _bits(k for k, f in enumerate(model.free_slots) if f)
        assert ctx.get(dut.free_slots) == free, f"{where}: free slots"
        assert ctx.get(dut.live) == n_slots - sum(model.free_slots), f"{where}: live"
        assert ctx.get(dut.commands) == model.commands, f"{where}: commands"
        # param_map and preload_done are always ready (class docstring).
        assert ctx.get(dut.param_map.ready) == 1 and ctx.get(dut.preload_done.ready) == 1
        assert requests == model.requests, f"{where}: preload requests"
        for index in range(depth):
            ctx.set(dut.query_index, index)
            await ctx.tick()
            await ctx.tick()
            entry = ctx.get(dut.query)
            assert (ResultState(entry.state), entry.slot) == model.result_state(index), (
                f"{where}: result {index}")

    async def bench(ctx):
        for index, param, valid in map_writes:
            ctx.set(dut.param_map.payload, {"index": index, "param": param, "valid": valid})
            ctx.set(dut.param_map.valid, 1)
            await ctx.tick()
        ctx.set(dut.param_map.valid, 0)
        for event, value in script:
            if event == "burst":  # ticks back to back, no comparison in between
                for t in value:
                    ctx.set(dut.tick.payload, t)
                    ctx.set(dut.tick.valid, 1)
                    for _ in range(2000):
                        *_, ready = await ctx.tick().sample(dut.tick.ready)
                        if ready:
                            break
                    else:
                        raise AssertionError(f"tick {t} not accepted in 2000 cycles")
                    model.tick(t)
                ctx.set(dut.tick.valid, 0)
            elif event == "tick":
                ctx.set(dut.tick.payload, value)
                ctx.set(dut.tick.valid, 1)
                for _ in range(2000):
                    *_, ready = await ctx.tick().sample(dut.tick.ready)
                    if ready:
                        break
                else:
                    raise AssertionError(f"tick {value} not accepted in 2000 cycles")
                ctx.set(dut.tick.valid, 0)
                model.tick(value)
            else:
                ctx.set(dut.preload_done.payload, value)
                ctx.set(dut.preload_done.valid, 1)
                await ctx.tick()
                ctx.set(dut.preload_done.valid, 0)
                model.complete(value)
            await ctx.tick()
            await compare(ctx, f"after {event} {value}")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(feed_bytes, background=True)
    sim.add_testbench(take_requests, background=True)
    sim.add_testbench(count_bytes, background=True)
    sim.run()
    return model, requests


def ticks(*values):
    return [("tick", t) for t in values]


# --- result table ----------------------------------------------------------------------


def test_forwarded_and_untouched_entries_have_slot_zero():
    # FORWARD at tick 2 (to 3) marks result 2 FORWARDED; only SAVED entries carry a slot,
    # so every entry reads slot 0, also the ones never written.
    model, _ = run([(2, [(W, 3)])], ticks(0, 1, 2, 3))
    assert model.error == MmapError.NONE
    assert model.result_state(2) == (ResultState.FORWARDED, 0)
    assert model.result_state(5) == (ResultState.NONE, 0)


# --- parameters -------------------------------------------------------------------------


def test_free_of_a_parameter_never_preloaded_is_unknown():
    # Instruction 1 is mapped to parameter 5 but nothing preloaded it: FREE 1 at tick 2
    # frees nothing -> FREE_UNKNOWN at tick 2.
    model, _ = run([(2, [(F, 1)])], ticks(0, 1, 2), param_map={1: 5})
    assert (model.error, model.error_tick) == (MmapError.FREE_UNKNOWN, 2)


def test_free_of_a_parameter_already_freed_is_unknown():
    # PRELOAD 1 at 0, completion, FREE 1 at 2 releases parameter 5; FREE 1 again at 3
    # finds nothing.
    model, requests = run([(0, [(P, 1)]), (2, [(F, 1)]), (3, [(F, 1)])],
                          [*ticks(0), ("done", 5), *ticks(1, 2, 3)], param_map={1: 5})
    assert requests == [5]
    assert (model.error, model.error_tick) == (MmapError.FREE_UNKNOWN, 3)


def test_preload_of_an_earlier_instruction_is_a_bad_target():
    # PRELOAD's target must not be earlier than the current tick: 1 < 2.
    model, requests = run([(2, [(P, 1)])], ticks(0, 1, 2), param_map={1: 5})
    assert requests == []
    assert (model.error, model.error_tick) == (MmapError.BAD_TARGET, 2)


def test_preload_of_the_current_tick_is_allowed():
    # Target == tick is "not earlier": a request for parameter 5 goes out.
    model, requests = run([(1, [(P, 1)])], ticks(0, 1, 2), param_map={1: 5})
    assert model.error == MmapError.NONE and requests == [5] and model.pending == {5}


@pytest.mark.parametrize("param", [16, 21])
def test_preload_of_a_parameter_id_out_of_range(param):
    # max_params = 16: ids 16 (one past the last) and 21 (= 5 + 16, whose low bits name
    # parameter 5) are not tracked, so PRELOAD of their instruction is a BAD_TARGET.
    model, requests = run([(0, [(P, 1)])], ticks(0, 1), param_map={1: param})
    assert requests == []
    assert (model.error, model.error_tick) == (MmapError.BAD_TARGET, 0)


@pytest.mark.parametrize(("param", "alias"), [(0, 16), (5, 21)])
def test_free_of_an_out_of_range_parameter_is_unknown_even_if_its_low_bits_are_held(
        param, alias):
    # Parameter 0 (or 5) is resident (PRELOAD 1); instruction 2 maps to id 16 (or 21),
    # >= max_params 16 with the same low bits, which is not tracked: FREE 2 holds
    # nothing -> FREE_UNKNOWN; the resident parameter stays.
    model, _ = run([(0, [(P, 1)]), (3, [(F, 2)])],
                   [*ticks(0), ("done", param), *ticks(1, 2, 3)],
                   param_map={1: param, 2: alias})
    assert (model.error, model.error_tick) == (MmapError.FREE_UNKNOWN, 3)
    assert model.resident == {param}


@pytest.mark.parametrize("complete_first", [False, True])
def test_second_preload_of_a_held_parameter_issues_nothing(complete_first):
    # PRELOAD 2 at ticks 0 and 1: the second finds parameter 7 pending (or, after its
    # completion, resident) and issues no second request.
    script = [*ticks(0), *([("done", 7)] if complete_first else []), *ticks(1, 2)]
    model, requests = run([(0, [(P, 2)]), (1, [(P, 2)])], script, param_map={2: 7})
    assert model.error == MmapError.NONE and requests == [7]
    assert (model.resident, model.pending) == (({7}, set()) if complete_first
                                                 else (set(), {7}))


# --- parameter map and completions ----------------------------------------------------


def test_param_map_write_with_valid_low_unmaps():
    # Instruction 1 is mapped to parameter 5, then written again with valid = 0: it is no
    # <INPUT B=1> any more, so PRELOAD 1 is a BAD_TARGET. Instruction 2 stays mapped.
    model, requests = run([(0, [(P, 2), (P, 1)])], ticks(0, 1),
                          map_writes=[(1, 5, 1), (2, 7, 1), (1, 5, 0)])
    assert requests == [7] and model.pending == {7}
    assert (model.error, model.error_tick) == (MmapError.BAD_TARGET, 0)


@pytest.mark.parametrize(("param", "bad_id"), [(0, 16), (5, 21)])
def test_completion_of_an_untracked_id_is_unexpected(param, bad_id):
    # Parameter 0 (or 5) is pending; a completion for 16 (or 21), an id >= max_params 16
    # whose low bits name the pending one, is not one for it: UNEXPECTED_DONE at the last
    # tick (0), and the parameter stays pending.
    model, requests = run([(0, [(P, 1)])], [*ticks(0), ("done", bad_id), *ticks(1)],
                          param_map={1: param})
    assert requests == [param] and model.pending == {param} and model.resident == set()
    assert (model.error, model.error_tick) == (MmapError.UNEXPECTED_DONE, 0)


def test_completion_after_an_error_is_ignored():
    # PRELOAD 1 at 0 leaves parameter 5 pending; the record of tick 1 has action 7
    # (BAD_ACTION at 1). A completion for 5 afterwards changes nothing: the error and
    # its cause stay and 5 stays pending.
    model, _ = run([(0, [(P, 1)]), (1, [(7, 1)])],
                   [*ticks(0, 1), ("done", 5), ("done", 9), *ticks(2)], param_map={1: 5})
    assert (model.error, model.error_tick) == (MmapError.BAD_ACTION, 1)
    assert model.pending == {5} and model.resident == set()


@pytest.mark.parametrize("max_params", [5, 9])
def test_parameter_ids_of_a_non_power_of_two_table(max_params):
    # max_params 5 (or 9): ids 0..4 (0..8) need 3 (4) bits; the highest id, 4 (8), is a
    # power of two. PRELOAD 1 (-> the highest id) and 2 (-> id 0) at tick 0, both
    # complete (id 0 first), FREE 1 at 3 releases only the highest id; id max_params is
    # untracked.
    top = max_params - 1
    model, requests = run([(0, [(P, 1), (P, 2)]), (3, [(F, 1)]), (4, [(P, 5)])],
                          [*ticks(0), ("done", 0), ("done", top), *ticks(1, 2, 3, 4)],
                          param_map={1: top, 2: 0, 5: max_params}, max_params=max_params,
                          depth=8)
    assert requests == [top, 0]
    assert (model.error, model.error_tick) == (MmapError.BAD_TARGET, 4)
    assert model.resident == {0} and model.pending == set()


def test_single_parameter_and_slot():
    # max_params 1, n_slots 1: parameter 0 is preloaded, completes and is freed; the
    # single slot is taken by SAVE 1, freed at 3, taken again by SAVE 3; SAVE 4 finds no
    # free slot.
    model, requests = run([(0, [(P, 2)]), (1, [(S, 1)]), (3, [(F, 1), (F, 2), (S, 3)]),
                           (4, [(S, 4)])],
                          [*ticks(0), ("done", 0), *ticks(1, 2, 3, 4)],
                          param_map={2: 0}, max_params=1, n_slots=1, depth=8)
    assert requests == [0] and model.resident == set()
    assert model.result_state(3) == (ResultState.SAVED, 0)
    assert (model.error, model.error_tick) == (MmapError.NO_SLOT, 4)


@pytest.mark.parametrize("complete_1", [False, True])
def test_neighbouring_parameter_ids(complete_1):
    # Instructions 1, 2 map to parameters 1, 0. PRELOAD 1 then 2 at tick 0: id 0 is
    # requested although its neighbour 1 is pending. Completions: 1 (optionally) then 0.
    # FREE 2 at tick 4 releases id 0 only; id 1 stays pending or resident.
    script = [*ticks(0), *([("done", 1)] if complete_1 else []), ("done", 0),
              *ticks(1, 2, 3, 4)]
    model, requests = run([(0, [(P, 1), (P, 2)]), (4, [(F, 2)])], script,
                          param_map={1: 1, 2: 0})
    assert model.error == MmapError.NONE and requests == [1, 0]
    assert (model.resident, model.pending) == (({1}, set()) if complete_1 else (set(), {1}))


def test_free_of_an_unmapped_instruction_is_unknown():
    # Parameter 0 is resident (instruction 1); instruction 2 was never mapped (its map
    # entry reads as parameter 0, not valid): FREE 2 holds nothing -> FREE_UNKNOWN.
    model, _ = run([(0, [(P, 1)]), (3, [(F, 2)])], [*ticks(0), ("done", 0), *ticks(1, 2, 3)],
                   param_map={1: 0})
    assert (model.error, model.error_tick) == (MmapError.FREE_UNKNOWN, 3)
    assert model.resident == {0}


# --- records and ticks --------------------------------------------------------------------


def test_empty_schedule_accepts_every_tick():
    # Record count 0 and nothing else: every tick is accepted with nothing to do.
    model, _ = run([], ticks(0, 1, 2, 5))
    assert model.error == MmapError.NONE and model.commands == 0


def test_bytes_after_an_empty_schedule_are_trailing():
    # Record count 0 followed by a byte: TRAILING, before any tick (error tick 0xFFFF).
    model, _ = run(encode_mmap([]) + b"\x00", ticks(0, 1))
    assert (model.error, model.error_tick) == (MmapError.TRAILING, 0xFFFF)


def test_records_without_commands():
    # Records may carry no command: tick 1 (empty), 3 (SAVE 3), 4 (empty, the last).
    model, _ = run([(1, []), (3, [(S, 3)]), (4, [])], ticks(0, 1, 2, 3, 4, 5))
    assert model.error == MmapError.NONE and model.commands == 1
    assert model.result_state(3) == (ResultState.SAVED, 0)


def test_equal_record_ticks_are_out_of_order():
    # Record ticks must increase: a second record for tick 2 is TICK_ORDER, found when
    # its header is read after tick 2 has run (error tick 2).
    model, _ = run([(2, [(S, 2)]), (2, [(W, 3)])], ticks(0, 1, 2, 3))
    assert (model.error, model.error_tick) == (MmapError.TICK_ORDER, 2)
    assert model.result_state(2) == (ResultState.SAVED, 0)


def test_tick_presented_twice_is_out_of_order():
    model, _ = run([(3, [(S, 3)])], ticks(0, 1, 1))
    assert (model.error, model.error_tick) == (MmapError.TICK_ORDER, 1)


@pytest.mark.parametrize("again", [2, 1])
def test_tick_presented_again_after_the_last_record_is_out_of_order(again):
    # After the last record (END), a tick not above the last one (2) is TICK_ORDER, and
    # the error tick is the tick presented.
    model, _ = run([(1, [(S, 1)])], ticks(0, 1, 2, again))
    assert (model.error, model.error_tick) == (MmapError.TICK_ORDER, again)


def test_read_ahead_error_while_the_next_tick_waits():
    # After tick 2 runs its record, the next header (tick 1) is out of order. Tick 3 is
    # presented at once and waits while the header comes in: the error belongs to the
    # last tick that ran (2), not to the waiting one.
    model, _ = run([(2, [(S, 2)]), (1, [(S, 1)])], [*ticks(0, 1), ("burst", [2, 3])],
                   idle=0.6)
    assert (model.error, model.error_tick) == (MmapError.TICK_ORDER, 2)


ONE = encode_mmap([(1, [(S, 1)])])


@pytest.mark.parametrize(("section", "cause", "error_tick"), [
    # The byte marked last comes before the section is complete: TRUNCATED, at the tick
    # that was reading (0xFFFF before any tick).
    (b"\x01\x00", MmapError.TRUNCATED, 0xFFFF),                # inside the record count
    (ONE[:4], MmapError.TRUNCATED, 0xFFFF),                   # count 1, then nothing
    (ONE[:6], MmapError.TRUNCATED, 0xFFFF),                   # inside the record header
    (ONE[:7], MmapError.TRUNCATED, 0xFFFF),                   # header, not its command
    (ONE[:9], MmapError.TRUNCATED, 1),                        # inside the command
    (encode_mmap([(1, [(S, 1), (W, 3)])])[:10], MmapError.TRUNCATED, 1),  # 1 command of 2
    # Bytes after the last record (the byte marked last comes later): TRAILING.
    (encode_mmap([(1, [])]) + b"\x00", MmapError.TRAILING, 0xFFFF),  # after a header
    (ONE + b"\x00", MmapError.TRAILING, 1),                     # after the last command
])
def test_sections_ending_early_or_late(section, cause, error_tick):
    model, _ = run(section, ticks(0, 1, 2))
    assert (model.error, model.error_tick) == (cause, error_tick)


def test_skipping_a_scheduled_tick_is_missed():
    # Record at tick 2, ticks 0, 1, 3 presented: 3 passes 2 -> TICK_MISSED at 3.
    model, _ = run([(2, [(S, 2)])], ticks(0, 1, 3))
    assert (model.error, model.error_tick) == (MmapError.TICK_MISSED, 3)


def test_ticks_may_start_late_and_jump():
    # Ticks need only increase: 2, then 5 (its record), then 9.
    model, _ = run([(5, [(S, 5)])], ticks(2, 5, 9))
    assert model.error == MmapError.NONE and model.result_state(5) == (ResultState.SAVED, 0)


def test_last_tick_of_the_16_bit_range():
    # Ticks are uint16: a record at 0xFFFF runs when 0xFFFF is presented.
    model, _ = run([(0xFFFF, [(F, 2)])], ticks(2, 0xFFFF), param_map={2: 3})
    assert (model.error, model.error_tick) == (MmapError.FREE_UNKNOWN, 0xFFFF)


def test_bytes_after_the_section_are_trailing():
    # The byte marked last ends the section; after the last record the coprocessor is in
    # END, where it accepts ticks and rejects bytes: a further byte (a second stream) is
    # TRAILING, at the last tick (1, no tick is presented meanwhile). Everything after
    # it is accepted and dropped, ticks included.
    section = encode_mmap([(1, [(S, 1)])])
    extra = bytes([7, 7, 7])
    dut = MmapCoprocessor(n_slots=2, max_params=2, max_instructions=4)
    seen = {}

    async def feed_bytes(ctx):
        payloads = [{"data": b, "last": int(k == len(section) - 1)}
                    for k, b in enumerate(section)]
        payloads += [{"data": b, "last": int(k == len(extra) - 1)} for k, b in enumerate(extra)]
        await stream_send(ctx, dut.mmap, payloads, rng=random.Random(3), idle=0.3)
        seen["all bytes"] = True

    async def bench(ctx):
        for t in (0, 1, 2, 3):
            if t == 2:
                await ctx.tick().repeat(40)
                seen["error"] = (ctx.get(dut.error), MmapError(ctx.get(dut.error_cause)),
                                 ctx.get(dut.error_tick))
            ctx.set(dut.tick.payload, t)
            ctx.set(dut.tick.valid, 1)
            for _ in range(100):
                *_, ready = await ctx.tick().sample(dut.tick.ready)
                if ready:
                    break
            else:
                raise AssertionError(f"tick {t} not accepted")
            ctx.set(dut.tick.valid, 0)
        await ctx.tick().repeat(5)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(feed_bytes, background=True)
    sim.run()
    assert seen == {"error": (1, MmapError.TRAILING, 1), "all bytes": True}


def test_model_tick_reports_acceptance_without_error():
    # MmapModel.tick returns True if the tick was accepted without error (its docstring):
    # a tick without a record, or whose commands and the next header are fine; False for
    # a failing command, a tick out of order, a missed tick, a bad next header, and for
    # every tick after an error.
    def model(records):
        return MmapModel({}, encode_mmap(records), n_slots=2, max_params=2,
                         max_instructions=8)

    ok = model([(1, [(S, 1)]), (3, [(S, 3)])])
    assert [ok.tick(t) for t in (0, 1, 2, 3, 4)] == [True] * 5
    failing = model([(1, [(S, 2)])])
    assert [failing.tick(t) for t in (0, 1, 2)] == [True, False, False]
    assert failing.error == MmapError.BAD_TARGET
    repeated = model([(3, [(S, 3)])])
    assert [repeated.tick(t) for t in (0, 0)] == [True, False]
    assert repeated.error == MmapError.TICK_ORDER
    missed = model([(1, [(S, 1)])])
    assert [missed.tick(t) for t in (0, 2, 3)] == [True, False, False]
    assert missed.error == MmapError.TICK_MISSED
    bad_header = model([(1, [(S, 1)]), (1, [])])
    assert [bad_header.tick(t) for t in (0, 1, 2)] == [True, False, False]
    assert bad_header.error == MmapError.TICK_ORDER


# --- reset ---------------------------------------------------------------------------------


def test_reset_clears_the_result_table():
    # The result table is memory, which a reset does not clear; the coprocessor clears it
    # entry by entry after reset. Run 1 leaves entries 0 (SAVED in slot 0), 1 (FORWARDED)
    # and 7, the last (SAVED in slot 1); after a reset, run 2 (SAVE 3 at tick 3) must find
    # every other entry NONE and all the registers back at their reset values.
    depth = 8
    first = encode_mmap([(0, [(S, 0)]), (1, [(W, 5)]), (7, [(S, 7)])])
    second = encode_mmap([(3, [(S, 3)])])
    dut = MmapCoprocessor(n_slots=4, max_params=4, max_instructions=depth)
    top = Module()
    top.domains.sync = domain = ClockDomain("sync")
    top.submodules.dut = dut
    phase = {"reset": False}
    seen = {}

    async def feed_bytes(ctx):
        rng = random.Random(7)
        for section, gate in ((first, None), (second, "reset")):
            while gate and not phase[gate]:
                await ctx.tick()
            payloads = [{"data": b, "last": int(k == len(section) - 1)}
                        for k, b in enumerate(section)]
            await stream_send(ctx, dut.mmap, payloads, rng=rng, idle=0.3)

    async def present(ctx, values):
        for t in values:
            ctx.set(dut.tick.payload, t)
            ctx.set(dut.tick.valid, 1)
            for _ in range(200):
                *_, ready = await ctx.tick().sample(dut.tick.ready)
                if ready:
                    break
            else:
                raise AssertionError(f"tick {t} not accepted")
            ctx.set(dut.tick.valid, 0)

    async def table(ctx):
        entries = []
        for index in range(depth):
            ctx.set(dut.query_index, index)
            await ctx.tick()
            await ctx.tick()
            entry = ctx.get(dut.query)
            entries.append((ResultState(entry.state), entry.slot))
        return entries

    async def bench(ctx):
        await present(ctx, range(depth))
        seen["before"] = await table(ctx)
        seen["free_before"] = ctx.get(dut.free_slots)
        ctx.set(domain.rst, 1)
        await ctx.tick()
        ctx.set(domain.rst, 0)
        phase["reset"] = True
        await present(ctx, range(5))
        await ctx.tick()
        seen["after"] = await table(ctx)
        seen["state"] = (ctx.get(dut.error), ctx.get(dut.free_slots), ctx.get(dut.live),
                         ctx.get(dut.commands))

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(feed_bytes, background=True)
    sim.run()
    models = []
    for section in (first, second):
        model = MmapModel({}, section, n_slots=4, max_params=4, max_instructions=depth)
        for t in range(depth if section is first else 5):
            model.tick(t)
        assert model.error == MmapError.NONE
        models.append([model.result_state(i) for i in range(depth)])
    NONE = (ResultState.NONE, 0)
    assert models[0] == [(ResultState.SAVED, 0), (ResultState.FORWARDED, 0), NONE, NONE,
                         NONE, NONE, NONE, (ResultState.SAVED, 1)]
    assert seen["before"] == models[0] and seen["free_before"] == 0b1100
    assert models[1] == [NONE, NONE, NONE, (ResultState.SAVED, 0), NONE, NONE, NONE, NONE]
    assert seen["after"] == models[1]
    assert seen["state"] == (0, 0b1110, 1, 1)


# --- constructor and interface ------------------------------------------------------------


@pytest.mark.parametrize(("name", "limit"), [("n_slots", 64), ("max_params", 1024),
                                             ("max_instructions", 65536)])
def test_parameter_ranges(name, limit):
    # Documented ranges: n_slots 1..64, max_params 1..1024, max_instructions 1..65536;
    # both ends are accepted, anything else (bools and floats too) is a ValueError.
    for value in (1, limit):
        assert getattr(MmapCoprocessor(**{name: value}), name) == value
    for value in (0, -1, limit + 1, True, 2.0, "4"):
        with pytest.raises(ValueError, match=rf"^{name} must be an integer in 1\.\.{limit}, "
                                             rf"not {value!r}$"):
            MmapCoprocessor(**{name: value})


def test_defaults_and_interface_widths():
    # Defaults n_slots=16, max_params=64, max_instructions=1024 (class docstring).
    dut = MmapCoprocessor()
    assert (dut.n_slots, dut.max_params, dut.max_instructions) == (16, 64, 1024)
    assert dut.free_slots.shape().width == 16 and dut.free_slots.init == 0xFFFF
    assert dut.resident.shape().width == dut.pending.shape().width == 64
    assert dut.live.shape().width == 5            # 0..16
    assert dut.commands.shape().width == 32
    assert dut.error_tick.shape().width == 16 and dut.query_index.shape().width == 16
    # A result-table entry: state (2 bits) and a slot number 0..15 (4 bits).
    assert dut.entry_layout.size == 6


@pytest.mark.parametrize(("n_slots", "slot_bits", "live_bits"), [(1, 1, 1), (2, 1, 2),
                                                                 (5, 3, 3), (64, 6, 7)])
def test_slot_widths(n_slots, slot_bits, live_bits):
    # Every slot starts free (all n_slots bits set); a slot number needs at least one bit
    # (also for a single slot); live counts 0..n_slots.
    dut = MmapCoprocessor(n_slots=n_slots, max_params=4, max_instructions=8)
    assert dut.free_slots.shape().width == n_slots
    assert dut.free_slots.init == (1 << n_slots) - 1
    assert dut.entry_layout.size == 2 + slot_bits
    assert dut.live.shape().width == live_bits


def test_stream_payload_widths():
    # Ticks, parameter ids and instruction indexes are uint16 (MMAP records); the byte
    # stream is the decoder's IN_LAYOUT; a param_map transfer is index, param and valid.
    from npu.nac.decoder import IN_LAYOUT

    dut = MmapCoprocessor(n_slots=4, max_params=8, max_instructions=16)
    assert dut.mmap.payload.shape() == IN_LAYOUT
    for port in (dut.tick, dut.preload_req, dut.preload_done):
        assert port.payload.shape().width == 16
    layout = dut.param_map.payload.shape()
    assert {name: Shape.cast(field.shape).width for name, field in layout} == {
        "index": 16, "param": 16, "valid": 1}
    assert dut.error.shape().width == 1 and dut.error_cause.shape() == MmapError
    assert dut.entry_layout["state"].shape == ResultState
