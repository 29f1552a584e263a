"""MMAP scheduling (spec §4) and a replayer that proves a schedule safe.

Scheduler (liveness over the instruction list, rules as in ``nac-notes.md``):

* a result with exactly one user, which is not a model output and with only parameter
  loads (``<INPUT B=1>``) between producer and user, is FORWARDed to that user;
* any other result with users gets SAVE_RESULT at its own tick;
* every result with users, and every used parameter, is FREEd at the tick after its last
  use (when that tick exists);
* each used parameter is PRELOADed ``distance`` ticks before its ``<INPUT B=1>``
  (at tick 0 at the earliest).

Commands of one tick are ordered FREE, SAVE_RESULT/FORWARD, PRELOAD. The hardware MMAP
coprocessor (``npu.nac.mmap``) accepts exactly such schedules.

Replayer: runs a schedule tick by tick and checks that every argument an instruction
reads is available (saved and not freed, forwarded to exactly this instruction, or a
preloaded and not freed parameter), that nothing is freed before its last use and that
a forwarded result has no other reader; it reports peak live saved results and peak
preloaded bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from nac.container import MmapRecord
from nac.encoding import REGULAR_OP_MIN, MmapAction, SystemOp

__all__ = ["ReplayReport", "ScheduleError", "instruction_users", "replay", "schedule"]


class ScheduleError(ValueError):
    """A schedule is unsafe: names the tick, the instruction and the rule broken."""


def _reads(index, ins):
    """Absolute indices of the results instruction *index* reads."""
    if ins.a >= REGULAR_OP_MIN or ins.a in (SystemOp.OUTPUT, SystemOp.CONTROL_FLOW):
        return [index + d for d in ins.d if d]
    return []


def instruction_users(ops):
    """``users[i]``: indices of the instructions that read result i."""
    users = {i: [] for i in range(len(ops))}
    for index, ins in enumerate(ops):
        for a in _reads(index, ins):
            if index not in users[a]:
                users[a].append(index)
    return users


def _is_param(ins):
    return ins.a == SystemOp.INPUT and ins.b == 1


def schedule(ops, *, distance=3, free=True):
    """Build MMAP records for instruction list *ops*.

    Parameters
    ----------
    ops : sequence of Instruction
    distance : int
        How many ticks before its ``<INPUT B=1>`` a parameter is preloaded.
    free : bool
        Emit FREE commands (False: for measuring what FREE buys).

    Returns
    -------
    tuple of MmapRecord
    """
    if distance < 0:
        raise ValueError(f"preload distance must be >= 0, not {distance}")
    n = len(ops)
    users = instruction_users(ops)
    outputs = {index + d for index, ins in enumerate(ops)
               if ins.a == SystemOp.OUTPUT and ins.b == 0 for d in ins.d}
    frees, keeps, preloads = ({t: [] for t in range(n)} for _ in range(3))
    for i, ins in enumerate(ops):
        if not users[i]:
            continue
        last = max(users[i])
        if free and last + 1 < n:
            frees[last + 1].append((MmapAction.FREE, i))
        if _is_param(ins):
            preloads[max(0, i - distance)].append((MmapAction.PRELOAD, i))
            continue
        (user,) = users[i] if len(users[i]) == 1 else (None,)
        between = range(i + 1, user) if user is not None else ()
        if user is not None and i not in outputs and all(_is_param(ops[k]) for k in between):
            keeps[i].append((MmapAction.FORWARD, user))
        else:
            keeps[i].append((MmapAction.SAVE_RESULT, i))
    records = []
    for t in range(n):
        commands = tuple(frees[t] + keeps[t] + preloads[t])
        if len(commands) > 255:  # the record's count field is one byte
            raise ScheduleError(f"tick {t}: {len(commands)} commands do not fit one record")
        if commands:
            records.append(MmapRecord(t, commands))
    return tuple(records)


@dataclass(frozen=True)
class ReplayReport:
    """What a safe schedule costs."""

    peak_live_results: int
    peak_preloaded_bytes: int
    commands: int


def replay(ops, records, *, param_bytes=None):
    """Prove *records* safe for *ops*; return a :class:`ReplayReport`.

    Parameters
    ----------
    ops : sequence of Instruction
    records : sequence of MmapRecord
    param_bytes : dict, optional
        Instruction index of each ``<INPUT B=1>`` -> its tensor size in bytes.

    Raises
    ------
    ScheduleError
    """
    param_bytes = dict(param_bytes or {})
    by_tick = {}
    for rec in records:
        if rec.tick in by_tick:
            raise ScheduleError(f"tick {rec.tick}: two records")
        by_tick[rec.tick] = rec.commands
    users = instruction_users(ops)
    saved, forwarded, resident = set(), {}, set()
    freed = set()
    peak_live = peak_bytes = commands = 0
    for t, ins in enumerate(ops):
        for action, target in by_tick.get(t, ()):
            commands += 1
            if action == MmapAction.FREE:
                if target >= t:
                    raise ScheduleError(f"tick {t}: FREE of {target}, not an earlier result")
                later = [u for u in users[target] if u >= t]
                if later:
                    raise ScheduleError(f"tick {t}: FREE of {target} before its last use at "
                                        f"{max(later)}")
                if target not in saved and target not in forwarded and target not in resident:
                    raise ScheduleError(f"tick {t}: FREE of {target}, which holds nothing")
                saved.discard(target)
                forwarded.pop(target, None)
                resident.discard(target)
                freed.add(target)
            elif action == MmapAction.SAVE_RESULT:
                if target != t:
                    raise ScheduleError(f"tick {t}: SAVE_RESULT of {target}, not this tick")
                saved.add(t)
            elif action == MmapAction.FORWARD:
                if target <= t:
                    raise ScheduleError(f"tick {t}: FORWARD to {target}, not a later instruction")
                others = [u for u in users[t] if u != target]
                if others:
                    raise ScheduleError(f"tick {t}: result FORWARDed to {target} is also read by "
                                        f"{others[0]}")
                forwarded[t] = target
            elif action == MmapAction.PRELOAD:
                if not _is_param(ops[target]) or target < t:
                    raise ScheduleError(f"tick {t}: PRELOAD of {target}, not a later "
                                        f"<INPUT B=1>")
                resident.add(target)
        for a in _reads(t, ins):
            if _is_param(ops[a]):
                ok = a in resident
            else:
                ok = a in saved or forwarded.get(a) == t
            if not ok:
                why = "was freed" if a in freed else "was neither saved, forwarded here nor " \
                    "preloaded"
                raise ScheduleError(f"tick {t}: instruction {t} reads result {a}, which {why}")
        peak_live = max(peak_live, len(saved))
        peak_bytes = max(peak_bytes, sum(param_bytes.get(p, 0) for p in resident))
    return ReplayReport(peak_live, peak_bytes, commands)
