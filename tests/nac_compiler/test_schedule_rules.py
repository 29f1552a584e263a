"""The MMAP scheduler's rules one at a time, on small hand-scheduled programs.

Each expected schedule is derived in the comments from the rules in docs/nac-compiler.md.
"""

import pytest

from nac import Instruction, MmapRecord
from nac.encoding import MmapAction
from nac.schedule import ScheduleError, replay, schedule

F, S, W, P = MmapAction.FREE, MmapAction.SAVE_RESULT, MmapAction.FORWARD, MmapAction.PRELOAD
INPUT, PARAM = Instruction(2, 0), Instruction(2, 1, (2, 0))


def _op(*d):
    return Instruction(21, len(d), None, d)


def _output(b=0):
    return Instruction(3, b, (1, 0), (-1,))


def test_forward_only_over_parameter_loads():
    # v0, v1 inputs; v2 = f(v0, v1); v3 = output(v2).
    # v0: one user (v2) but the regular input v1 lies between -> SAVE 0; FREE at 3.
    # v1: user v2 directly after -> FORWARD 2; FREE at 3.
    # v2: a model output -> SAVE; its last use is the last tick, so no FREE.
    ops = (INPUT, INPUT, _op(-2, -1), _output())
    records = schedule(ops)
    assert records == (MmapRecord(0, ((S, 0),)), MmapRecord(1, ((W, 2),)),
                       MmapRecord(2, ((S, 2),)), MmapRecord(3, ((F, 0), (F, 1))))
    replay(ops, records)
    # Without FREE: the same minus the FREE record.
    assert schedule(ops, free=False) == records[:3]


def test_only_a_model_output_blocks_forwarding():
    # v2 = <OUTPUT B=1>(v1) is not the model's output (B = 0): v1 is still FORWARDed.
    ops = (INPUT, _op(-1), _output(b=1))
    assert schedule(ops) == (MmapRecord(0, ((W, 1),)), MmapRecord(1, ((W, 2),)),
                             MmapRecord(2, ((F, 0),)))


def test_default_preload_distance_is_three():
    # The parameter v4 is read by v5: PRELOAD at tick 4 - 3 = 1 by default, 4 - 4 = 0 with
    # distance 4, 4 with distance 0; FREE at 6 (with v3, also last read by v5).
    ops = (INPUT, _op(-1), _op(-1), _op(-1), PARAM, _op(-2, -1), _output())

    def preloads(records):
        return [(r.tick, c) for r in records for c in r.commands if c[0] == P]

    assert preloads(schedule(ops)) == [(1, (P, 4))]
    assert preloads(schedule(ops, distance=4)) == [(0, (P, 4))]
    assert preloads(schedule(ops, distance=0)) == [(4, (P, 4))]
    assert schedule(ops)[-1] == MmapRecord(6, ((F, 3), (F, 4)))


def test_negative_distance_is_refused():
    with pytest.raises(ValueError, match="preload distance must be >= 0, not -1"):
        schedule((INPUT,), distance=-1)


# v0, v1 inputs; v2 = f(v0, v1); v3 = output(v2): the schedule of
# test_forward_only_over_parameter_loads is S0@0, W2@1, S2@2, F0 F1@3.
OPS = (INPUT, INPUT, _op(-2, -1), _output())
GOOD = {0: ((S, 0),), 1: ((W, 2),), 2: ((S, 2),), 3: ((F, 0), (F, 1))}


def _records(**changes):
    ticks = dict(GOOD)
    for key, commands in changes.items():
        ticks[int(key[1:])] = commands
    return tuple(MmapRecord(t, c) for t, c in sorted(ticks.items()) if c)


@pytest.mark.parametrize(("changes", "message"), [
    ({"t0": ((F, 0), (S, 0))}, "tick 0: FREE of 0, not an earlier result"),
    # FREE in the tick of the last read comes before the read: too early.
    ({"t2": ((F, 0), (S, 2)), "t3": ((F, 1),)}, "tick 2: FREE of 0 before its last use at 2"),
    ({"t3": ((F, 0), (F, 1), (F, 0))}, "tick 3: FREE of 0, which holds nothing"),
    ({"t3": ((F, 0), (F, 1), (F, 1))}, "tick 3: FREE of 1, which holds nothing"),
    ({"t0": ((S, 1),)}, "tick 0: SAVE_RESULT of 1, not this tick"),
    ({"t1": ((W, 1),)}, "tick 1: FORWARD to 1, not a later instruction"),
    ({"t1": ((W, 2), (P, 2))}, r"tick 1: PRELOAD of 2, not a later <INPUT B=1>"),
    ({"t0": ()}, "tick 2: instruction 2 reads result 0, which was neither saved, forwarded "
                 "here nor preloaded"),
])
def test_replay_refusals_name_tick_and_target(changes, message):
    replay(OPS, _records())
    with pytest.raises(ScheduleError, match=f"^{message}$"):
        replay(OPS, _records(**changes))


def test_freed_parameter_holds_nothing():
    # v0 param, v1 = f(v0), v2 = output(v1): PRELOAD 0@0, SAVE 1@1 (a model output), FREE
    # 0@2; freeing the parameter twice is refused.
    ops = (PARAM, _op(-1), _output())
    records = schedule(ops)
    assert records == (MmapRecord(0, ((P, 0),)), MmapRecord(1, ((S, 1),)),
                       MmapRecord(2, ((F, 0),)))
    with pytest.raises(ScheduleError, match=r"^tick 2: FREE of 0, which holds nothing$"):
        replay(ops, (*records[:2], MmapRecord(2, ((F, 0), (F, 0)))))


@pytest.mark.parametrize("width", [255, 256])
def test_one_record_holds_at_most_255_commands(width):
    # `width` inputs all read by one instruction, then the output: the tick after that
    # instruction frees every input at once.
    ops = (INPUT,) * width + (_op(*range(-width, 0)), _output())
    if width == 255:
        assert len(schedule(ops)[-1].commands) == 255
    else:
        with pytest.raises(ScheduleError, match=r"^tick 257: 256 commands do not fit one "
                                                r"record$"):
            schedule(ops)


def test_pass_is_a_regular_operation_and_two_records_per_tick_are_refused():
    # nac.pass (A = 10, the first regular id) reads its argument like any operation:
    # v0 -> v1 = pass(v0) directly: FORWARD 1, FREE 0 at 2; v1 is the output: SAVE.
    ops = (INPUT, Instruction(10, 1, None, (-1,)), _output())
    assert schedule(ops) == (MmapRecord(0, ((W, 1),)), MmapRecord(1, ((S, 1),)),
                             MmapRecord(2, ((F, 0),)))
    with pytest.raises(ScheduleError, match=r"^tick 0: two records$"):
        replay(OPS, (MmapRecord(0, ((S, 0),)), MmapRecord(0, ((W, 2),))))


def test_peak_preloaded_bytes_counts_only_known_sizes():
    ops = (PARAM, _op(-1), _output())
    records = schedule(ops)
    assert replay(ops, records).peak_preloaded_bytes == 0
    assert replay(ops, records, param_bytes={0: 96}).peak_preloaded_bytes == 96
