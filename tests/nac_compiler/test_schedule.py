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
    from nac.zoo import ZOO, build
    from npu.mmap import MmapError, MmapModel

    torch.set_num_threads(1)
    for name in sorted(ZOO):
        module, inputs = build(name)
        nac, _, report = compile_module(module, inputs)
        raw = dumps(nac)
        start = raw.index(b"MMAP") + 4
        section = raw[start:start + 4 + sum(3 + 3 * len(r.commands) for r in nac.mmap)]
        param_map = {i: ins.const_ids[0] for i, ins in enumerate(nac.ops)
                     if ins.a == 2 and ins.b == 1}
        model = MmapModel(param_map, section, n_slots=16, max_params=64, max_instructions=1024)
        for t in range(len(nac.ops)):
            assert model.tick(t), f"{name}: tick {t}: {model.error.name}"
            for p in sorted(model.pending):
                model.complete(p)
        assert model.error == MmapError.NONE
        assert model.commands == report.commands
