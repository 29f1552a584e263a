"""The MMAP scheduler and replayer; compiled schedules run on the coprocessor model."""

import pytest

from nac import Instruction, MmapRecord
from nac.encoding import MmapAction
from nac.schedule import ScheduleError, replay, schedule

# v0 input, v1 param, v2 = f(v0, v1), v3 = g(v2), v4 = h(v2, v3), v5 output(v4)
OPS = (Instruction(2, 0), Instruction(2, 1, (2, 0)), Instruction(20, 1, None, (-2, -1)),
       Instruction(21, 2, None, (-1,)), Instruction(22, 1, None, (-2, -1)),
       Instruction(3, 0, (1, 0), (-1,)))
F, S, W, P = MmapAction.FREE, MmapAction.SAVE_RESULT, MmapAction.FORWARD, MmapAction.PRELOAD


def test_hand_derived_schedule():
    # v0 has one user (v2) with only a param load between: FORWARD 2, FREE at 3. v1
    # (param): PRELOAD one tick ahead (distance 1 -> tick 0), FREE at 3. v2 has two users
    # (v3, v4): SAVE, FREE at 5. v3 -> v4 directly: FORWARD, FREE at 5. v4 is the model
    # output: SAVE (never FORWARD), read last by v5 = the end, so no FREE.
    records = schedule(OPS, distance=1)
    assert records == (
        MmapRecord(0, ((W, 2), (P, 1))),
        MmapRecord(2, ((S, 2),)),
        MmapRecord(3, ((F, 0), (F, 1), (W, 4))),
        MmapRecord(4, ((S, 4),)),
        MmapRecord(5, ((F, 2), (F, 3))),
    )
    report = replay(OPS, records, param_bytes={1: 64})
    assert (report.peak_live_results, report.peak_preloaded_bytes) == (2, 64)


@pytest.mark.parametrize(("records", "message"), [
    ((MmapRecord(0, ((W, 2),)), MmapRecord(2, ((S, 2),))), "reads result 1"),
    ((MmapRecord(0, ((W, 2), (P, 1))), MmapRecord(2, ((S, 2),)), MmapRecord(3, ((F, 2),))),
     "FREE of 2 before its last use at 4"),
    ((MmapRecord(0, ((W, 3), (P, 1))),), "FORWARDed to 3 is also read by 2"),
    ((MmapRecord(0, ((W, 2), (P, 1))), MmapRecord(2, ((W, 3),))), "also read by 4"),
])
def test_replayer_rejects_unsafe(records, message):
    with pytest.raises(ScheduleError, match=message):
        replay(OPS, records)


def test_compiled_schedules_run_on_the_coprocessor_model():
    torch = pytest.importorskip("torch")
    from nac import dumps
    from nac.compile import compile_module
    from nac.container import section_body
    from nac.zoo import ZOO, build
    from npu.nac.mmap import MmapError, MmapModel

    torch.set_num_threads(1)
    for name in sorted(ZOO):
        module, inputs = build(name)
        nac, _, report = compile_module(module, inputs)
        section = section_body(dumps(nac), "MMAP")
        param_map = {i: ins.const_ids[0] for i, ins in enumerate(nac.ops)
                     if ins.a == 2 and ins.b == 1}
        model = MmapModel(param_map, section, n_slots=16, max_params=64, max_instructions=1024)
        for t in range(len(nac.ops)):
            assert model.tick(t), f"{name}: tick {t}: {model.error.name}"
            for p in sorted(model.pending):
                model.complete(p)
        assert model.error == MmapError.NONE
        assert model.commands == report.commands


def _random_program(rng):
    """Inputs, parameters interleaved with ops reading 1-3 earlier values, one output."""
    ops, values = [Instruction(2, 0)], [0]
    pid = 0
    for _ in range(int(rng.integers(3, 25))):
        k = len(ops)
        if rng.random() < 0.3:
            ops.append(Instruction(2, 1, (2, pid)))
            pid += 1
        else:
            reads = rng.choice(values, size=min(len(values), int(rng.integers(1, 4))),
                               replace=False)
            ops.append(Instruction(20, 1, None, tuple(int(r) - k for r in sorted(reads))))
        values.append(k)
    k = len(ops)
    outs = sorted({values[-1], int(rng.choice(values))})
    ops.append(Instruction(3, 0, (len(outs), *[0] * len(outs)), tuple(o - k for o in outs)))
    return tuple(ops)


def test_random_programs_schedules_are_safe_and_every_command_matters():
    import numpy as np

    from nac.schedule import instruction_users

    rng = np.random.default_rng(4)
    for _ in range(150):
        ops = _random_program(rng)
        users = instruction_users(ops)
        for distance in (0, 1, 3, 7):
            records = schedule(ops, distance=distance)
            replay(ops, records)
            replay(ops, schedule(ops, distance=distance, free=False))
        # Dropping any SAVE_RESULT, FORWARD or PRELOAD of a value that is read breaks it;
        # a FREE one tick earlier (still at or before the last use) breaks it too.
        for r, rec in enumerate(records):
            for c, (action, target) in enumerate(rec.commands):
                commands = rec.commands[:c] + rec.commands[c + 1:]
                changed = list(records)
                changed[r] = MmapRecord(rec.tick, commands)
                changed = [x for x in changed if x.commands]
                if action in (S, W, P):
                    with pytest.raises(ScheduleError):
                        replay(ops, changed)
                elif action == F and rec.tick - 1 > target:
                    earlier = [x for x in changed if x.tick != rec.tick - 1]
                    before = [x for x in changed if x.tick == rec.tick - 1]
                    moved = MmapRecord(rec.tick - 1, ((F, target),) +
                                       (before[0].commands if before else ()))
                    with pytest.raises(ScheduleError, match=r"before its last use|reads"):
                        replay(ops, sorted([*earlier, moved], key=lambda x: x.tick))
                    assert max(users[target]) == rec.tick - 1
