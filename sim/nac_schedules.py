"""Random MMAP schedules for random graphs, built by the rules of spec §4.

An independent, deliberately simple scheduler: operands come from a short window of
earlier instructions, a result with one user that is not a parameter is FORWARDed,
others with users are SAVEd, everything is FREEd the tick after its last use, and each
parameter load is PRELOADed ``distance`` ticks ahead. It exists to drive the MMAP
coprocessor tests before and besides the compiler's own scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass

from npu.nac.mmap import MmapAction, encode_mmap

__all__ = ["Schedule", "random_schedule", "schedule_for_program", "schedule_from_graph"]


@dataclass(frozen=True)
class Schedule:
    n_instr: int
    param_map: dict       # instruction index -> parameter id
    records: list         # [(tick, [(action, target), ...]), ...]
    section: bytes        # encoded records (after the MMAP tag)
    peak_live: int        # most SAVED results at once


def random_schedule(rng, *, n_instr, max_params, window=4, distance=3, param_ratio=0.25):
    """A random graph of *n_instr* instructions and its schedule."""
    params = {}
    free_ids = list(range(max_params))
    rng.shuffle(free_ids)
    users = {i: [] for i in range(n_instr)}
    for i in range(n_instr):
        if i < n_instr - 1 and free_ids and (i == 0 or rng.random() < param_ratio):
            params[i] = free_ids.pop()
            continue
        if i == 0:
            continue
        lo = max(0, i - window)
        for j in set(rng.randint(lo, i - 1) for _ in range(rng.randint(1, 2))):
            users[j].append(i)
    return schedule_from_graph(n_instr, users, params, distance=distance)


def schedule_for_program(program, *, max_params, distance=3):
    """The schedule of a :class:`sim.nac_streams.Program`'s own dependency graph.

    ``<INPUT B=1>`` instructions are the parameters; they get ids ``0, 1, ...`` in order
    (at most *max_params*; later ones are treated as plain inputs).
    """
    n_instr = len(program.expected)
    users = {i: [] for i in range(n_instr)}
    params = {}
    for ins in program.expected:
        for is_const, value in ins.args:
            if not is_const and ins.index not in users[value]:
                users[value].append(ins.index)
        if ins.a == 2 and ins.b == 1 and len(params) < max_params:
            params[ins.index] = len(params)
    return schedule_from_graph(n_instr, users, params, distance=distance)


def schedule_from_graph(n_instr, users, params, *, distance=3):
    """Schedule a graph given as ``users[i]`` (consumers of i) and ``params`` (index -> id)."""
    commands = {t: [] for t in range(n_instr)}
    live = peak = 0
    frees_at = {t: [] for t in range(n_instr + 1)}
    for i in range(n_instr):
        if users[i]:
            frees_at[max(users[i]) + 1].append(i)
    for t in range(n_instr):
        for target in frees_at[t]:
            commands[t].append((MmapAction.FREE, target))
            if target not in params and len(users[target]) >= 2:
                live -= 1
        if users[t] and t not in params:
            if len(users[t]) == 1:
                commands[t].append((MmapAction.FORWARD, users[t][0]))
            else:
                commands[t].append((MmapAction.SAVE_RESULT, t))
                live += 1
                peak = max(peak, live)
    for index in params:
        if users[index]:
            commands[max(0, index - distance)].append((MmapAction.PRELOAD, index))
    records = [(t, cmds) for t, cmds in commands.items() if cmds]
    return Schedule(n_instr, dict(params), records, encode_mmap(records), peak)
