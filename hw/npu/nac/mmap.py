"""NAC MMAP memory coprocessor (spec §4).

The coprocessor reads the ``MMAP`` section (after its tag: ``uint32`` record count, then
records ``<HB`` tick and command count, commands ``<BH`` action and target) as a byte
stream, and runs in lock-step with the compute side: for every instruction index the
compute side presents on ``tick``, it executes all commands scheduled for that tick and
then accepts the tick. It keeps the residency table the schedule implies.

State
-----
* Result table (``max_instructions`` entries): per instruction result NONE, SAVED (in
  shared-memory slot ``slot``) or FORWARDED (to its single consumer).
* Slot pool: ``n_slots`` shared-memory slots; SAVE_RESULT takes the lowest free one.
* Parameter residency: ``pending`` (PRELOAD requested, not complete), ``resident`` and
  ``dropped`` (requested, not complete, and freed since: a cancelled preload) bits per
  parameter id (``max_params``); at most one of the three is set for a parameter.
* Parameter map: instruction index of an ``<INPUT B=1>`` -> its parameter id, loaded by the
  host through ``param_map`` before the run (the PRELOAD target is an instruction index;
  the DMA side needs the parameter id).

Commands (what the model and the RTL implement)
-----------------------------------------------
* SAVE_RESULT (10) ``t``: ``t`` must be the current tick and its result NONE; allocate a
  slot (error NO_SLOT when none is free).
* FORWARD (30) ``t``: ``t`` must be a later instruction; the current tick's result must be
  NONE and becomes FORWARDED.
* FREE (20) ``t``: ``t`` must be an earlier instruction. Releases ``t``'s result (and its
  slot) if SAVED or FORWARDED, and ``t``'s parameter if ``t`` is a mapped ``<INPUT B=1>``
  that is resident or pending. Freeing nothing is an error (FREE_UNKNOWN). A pending
  parameter's load is still in flight: it becomes ``dropped``, and its completion, when
  it comes, is absorbed without making it resident.
* PRELOAD (40) ``t``: ``t`` must be a mapped ``<INPUT B=1>``, not earlier than the current
  tick. If its parameter is neither resident nor pending, a request carrying the parameter
  id goes out on ``preload_req`` and the parameter becomes pending; a dropped parameter
  becomes pending again without a request (its load is still in flight); otherwise
  nothing happens. A completion on ``preload_done`` makes a pending parameter resident
  and clears a dropped one; a completion for any other parameter is an error
  (UNEXPECTED_DONE). A completion in the same cycle as a command takes effect first.

Timing
------
After reset the result table is cleared, one entry per cycle (``max_instructions``
cycles), before the first byte is taken. Bytes are then taken one per cycle. Each command
costs 4 cycles (3 bytes, then the table read and the update), plus the wait for
``preload_req.ready`` on a PRELOAD that issues a request. A tick with no record is
accepted in the cycle it is presented (once the next record's header has been read).
``error`` is sticky with ``error_cause`` and ``error_tick``; after an error the
coprocessor accepts and drops all ``mmap`` bytes and ticks, so nothing that feeds it can
block.
"""

from __future__ import annotations

import enum as py_enum
from dataclasses import dataclass, field

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from nac.encoding import MMAP_COMMAND, MMAP_COUNT, MMAP_RECORD
from nac.encoding import MmapAction as _Action
from npu.nac.decoder import IN_LAYOUT

__all__ = [
    "MmapAction",
    "MmapCoprocessor",
    "MmapError",
    "MmapFault",
    "MmapModel",
    "ResultState",
    "encode_mmap",
]


class MmapAction(enum.Enum, shape=8):
    """MMAP command action codes (spec §4.5), valued from :class:`nac.encoding.MmapAction`."""

    SAVE_RESULT = int(_Action.SAVE_RESULT)
    FREE = int(_Action.FREE)
    FORWARD = int(_Action.FORWARD)
    PRELOAD = int(_Action.PRELOAD)


class ResultState(enum.Enum, shape=2):
    NONE = 0
    SAVED = 1
    FORWARDED = 2


class MmapError(enum.Enum, shape=4):
    """Cause codes of the coprocessor's sticky error."""

    NONE = 0
    BAD_ACTION = 1          #: action code not in MmapAction
    BAD_TARGET = 2          #: target not valid for its action (see the module docs)
    NO_SLOT = 3             #: SAVE_RESULT with every slot in use
    FREE_UNKNOWN = 4        #: FREE of a target that holds nothing
    TICK_ORDER = 5          #: record ticks not increasing, or ticks presented out of order
    TICK_MISSED = 6         #: a record's tick was passed without being presented
    TRUNCATED = 7           #: the byte stream ended inside the section
    TRAILING = 8            #: bytes after the last record
    UNEXPECTED_DONE = 9     #: a completion for a parameter that is not pending
    CAPACITY = 10           #: target >= max_instructions


def encode_mmap(records):
    """Encode ``[(tick, [(action, target), ...]), ...]`` as MMAP section bytes (after the tag)."""
    out = bytearray(MMAP_COUNT.pack(count=len(records)))
    for tick, commands in records:
        out += MMAP_RECORD.pack(tick=tick, commands=len(commands))
        for action, target in commands:
            out += MMAP_COMMAND.pack(action=int(getattr(action, "value", action)), target=target)
    return bytes(out)


# --- Python model ---------------------------------------------------------------------


class MmapFault(Exception):
    """Raised inside the model; carries the cause."""

    def __init__(self, cause):
        super().__init__(cause.name)
        self.cause = cause


@dataclass
class MmapModel:
    """Behavioural model of :class:`MmapCoprocessor`.

    Like the hardware, it reads the section as a stream: the record count and each
    record's header are read as soon as the previous record is done, a record's commands
    when its tick is presented. Errors therefore carry the same cause and tick as in
    hardware.

    Parameters
    ----------
    param_map : dict of int to int
        ``<INPUT B=1>`` instruction index -> parameter id.
    section : bytes
        The MMAP section after its tag.
    n_slots, max_params, max_instructions : int
        As for the hardware.
    """

    param_map: dict
    section: bytes
    n_slots: int
    max_params: int
    max_instructions: int
    results: dict = field(default_factory=dict)      # index -> (ResultState, slot)
    free_slots: list = field(default_factory=list)
    resident: set = field(default_factory=set)
    pending: set = field(default_factory=set)
    dropped: set = field(default_factory=set)        # freed while their load was in flight
    requests: list = field(default_factory=list)     # parameter ids, in issue order
    error: MmapError = MmapError.NONE
    error_tick: int = 0xFFFF
    last_tick: int = -1
    commands: int = 0
    _pos: int = 0
    _remaining: int | None = None
    _record: tuple | None = None                     # (tick, commands left) awaiting its tick
    _previous_record_tick: int = -1

    def __post_init__(self):
        self.free_slots = [True] * self.n_slots
        self._advance()

    # -- stream parsing -----------------------------------------------------------------

    def _take(self, size):
        """Take up to *size* bytes; return them and whether the section ended there."""
        raw = self.section[self._pos:self._pos + size]
        self._pos += len(raw)
        return raw, self._pos == len(self.section)

    def _advance(self):
        # Read ahead up to the next record header, as the hardware does between ticks;
        # the checks run in the hardware's order.
        try:
            if self._remaining is None:
                raw, at_end = self._take(MMAP_COUNT.size)
                if len(raw) < MMAP_COUNT.size:
                    raise MmapFault(MmapError.TRUNCATED)
                self._remaining = MMAP_COUNT.unpack(raw)["count"]
                if self._remaining == 0 and not at_end:
                    raise MmapFault(MmapError.TRAILING)
                if self._remaining != 0 and at_end:
                    raise MmapFault(MmapError.TRUNCATED)
            if self._record is None and self._remaining:
                raw, at_end = self._take(MMAP_RECORD.size)
                if len(raw) < MMAP_RECORD.size:
                    raise MmapFault(MmapError.TRUNCATED)
                head = MMAP_RECORD.unpack(raw)
                rec_tick, n = head["tick"], head["commands"]
                self._remaining -= 1
                final = self._remaining == 0 and n == 0
                if rec_tick <= self._previous_record_tick:
                    raise MmapFault(MmapError.TICK_ORDER)
                if at_end and not final:
                    raise MmapFault(MmapError.TRUNCATED)
                if final and not at_end:
                    raise MmapFault(MmapError.TRAILING)
                self._previous_record_tick = rec_tick
                self._record = (rec_tick, n)
        except MmapFault as fault:
            self._fail(fault.cause, self.last_tick & 0xFFFF)

    def _fail(self, cause, tick):
        if self.error == MmapError.NONE:
            self.error = cause
            self.error_tick = tick

    # -- events ---------------------------------------------------------------------------

    def tick(self, t):
        """Present tick *t* and run its commands. Returns True if the tick was accepted
        without error."""
        if self.error != MmapError.NONE:
            return False
        if t <= self.last_tick:
            self._fail(MmapError.TICK_ORDER, t)
            return False
        if self._record is not None and t > self._record[0]:
            self._fail(MmapError.TICK_MISSED, t)
            return False
        self.last_tick = t
        if self._record is None or t < self._record[0]:
            return True
        _, n = self._record
        try:
            for k in range(n):
                final = self._remaining == 0 and k == n - 1
                raw, at_end = self._take(MMAP_COMMAND.size)
                if len(raw) < MMAP_COMMAND.size or (at_end and not final):
                    raise MmapFault(MmapError.TRUNCATED)
                if final and not at_end:
                    raise MmapFault(MmapError.TRAILING)
                cmd = MMAP_COMMAND.unpack(raw)
                action, target = cmd["action"], cmd["target"]
                self._command(t, action, target)
        except MmapFault as fault:
            self._fail(fault.cause, t)
            return False
        self._record = None
        self._advance()
        return self.error == MmapError.NONE

    def complete(self, param):
        """A preload completion for parameter id *param*."""
        if self.error != MmapError.NONE:
            return
        if param in self.dropped:  # a cancelled preload: nothing becomes resident
            self.dropped.discard(param)
            return
        if param not in self.pending:
            self._fail(MmapError.UNEXPECTED_DONE, self.last_tick & 0xFFFF)
            return
        self.pending.discard(param)
        self.resident.add(param)

    def _command(self, t, action, target):
        self.commands += 1
        if target >= self.max_instructions:
            raise MmapFault(MmapError.CAPACITY)
        if action not in {a.value for a in MmapAction}:
            raise MmapFault(MmapError.BAD_ACTION)
        action = MmapAction(action)
        if action == MmapAction.SAVE_RESULT:
            if target != t or self.results.get(t, (ResultState.NONE,))[0] != ResultState.NONE:
                raise MmapFault(MmapError.BAD_TARGET)
            if True not in self.free_slots:
                raise MmapFault(MmapError.NO_SLOT)
            slot = self.free_slots.index(True)
            self.free_slots[slot] = False
            self.results[t] = (ResultState.SAVED, slot)
        elif action == MmapAction.FORWARD:
            if target <= t or self.results.get(t, (ResultState.NONE,))[0] != ResultState.NONE:
                raise MmapFault(MmapError.BAD_TARGET)
            self.results[t] = (ResultState.FORWARDED, 0)
        elif action == MmapAction.FREE:
            if target >= t:
                raise MmapFault(MmapError.BAD_TARGET)
            state, slot = self.results.get(target, (ResultState.NONE, 0))
            param = self.param_map.get(target)
            held = param is not None and param < self.max_params and (
                param in self.resident or param in self.pending)
            if state == ResultState.NONE and not held:
                raise MmapFault(MmapError.FREE_UNKNOWN)
            if state == ResultState.SAVED:
                self.free_slots[slot] = True
            self.results.pop(target, None)
            if held:
                if param in self.pending:  # its load is still in flight
                    self.dropped.add(param)
                self.resident.discard(param)
                self.pending.discard(param)
        else:  # PRELOAD
            param = self.param_map.get(target)
            if param is None or param >= self.max_params or target < t:
                raise MmapFault(MmapError.BAD_TARGET)
            if param in self.dropped:  # the load in flight serves again
                self.dropped.discard(param)
                self.pending.add(param)
            elif param not in self.resident and param not in self.pending:
                self.pending.add(param)
                self.requests.append(param)

    def result_state(self, index):
        """``(ResultState, slot)`` of instruction *index* (slot 0 unless SAVED)."""
        return self.results.get(index, (ResultState.NONE, 0))


# --- Hardware -------------------------------------------------------------------------


class _State(py_enum.IntEnum):
    CLEAR = 8       # after reset: write NONE into every result-table entry
    COUNT = 0       # 4 bytes of record count
    REC = 1         # 3 bytes of record header
    WAIT = 2        # waiting for the tick of the pending record
    CMD = 3         # 3 bytes of command
    EXEC = 4        # table read issued; act on the data
    REQ = 5         # waiting to hand a preload request over
    END = 6         # all records done: accept ticks, reject bytes
    DRAIN = 7       # after an error


def _check_positive(name, value, limit):
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
        raise ValueError(f"{name} must be an integer in 1..{limit}, not {value!r}")


class MmapCoprocessor(wiring.Component):
    """MMAP schedule executor with residency table and preload request stream.

    Parameters
    ----------
    n_slots : int
        Shared-memory result slots (1..64).
    max_params : int
        Parameter ids tracked for residency (1..1024).
    max_instructions : int
        Size of the result table and parameter map (1..65536).

    Attributes
    ----------
    mmap : stream of IN_LAYOUT, in
        The section bytes after the tag; ``last`` on the final byte.
    tick : stream of 16 bits, in
        Instruction index the compute side is at; accepted once its commands are done.
    param_map : stream of {"index", "param", "valid"}, in (always ready)
    preload_req : stream of 16 bits, out
        Parameter ids to bring in.
    preload_done : stream of 16 bits, in (always ready)
        Completions.
    resident, pending, dropped : Signal(max_params), out
        Residency bits per parameter id (see the module docs).
    free_slots : Signal(n_slots), out
    live : Signal, out
        Number of SAVED results.
    query_index : Signal(16), in;  query : Signal, out
        Result-table read port for inspection: ``{"state", "slot"}`` of ``query_index``,
        one cycle later.
    commands : Signal(32), out
        Commands executed.
    error, error_cause, error_tick : out
    """

    def __init__(self, *, n_slots=16, max_params=64, max_instructions=1024):
        _check_positive("n_slots", n_slots, 64)
        _check_positive("max_params", max_params, 1024)
        _check_positive("max_instructions", max_instructions, 65536)
        self.n_slots = n_slots
        self.max_params = max_params
        self.max_instructions = max_instructions
        slot_shape = range(max(n_slots, 2))
        self.entry_layout = data.StructLayout({"state": ResultState, "slot": slot_shape})
        super().__init__({
            "mmap": In(stream.Signature(IN_LAYOUT)),
            "tick": In(stream.Signature(16)),
            "param_map": In(stream.Signature(data.StructLayout({
                "index": 16, "param": 16, "valid": 1}))),
            "preload_req": Out(stream.Signature(16)),
            "preload_done": In(stream.Signature(16)),
            "resident": Out(max_params),
            "pending": Out(max_params),
            "dropped": Out(max_params),
            "free_slots": Out(n_slots, init=(1 << n_slots) - 1),
            "live": Out(range(n_slots + 1)),
            "query_index": In(16),
            "query": Out(self.entry_layout),
            "commands": Out(32),
            "error": Out(1),
            "error_cause": Out(MmapError),
            "error_tick": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        n_slots, max_params, depth = self.n_slots, self.max_params, self.max_instructions

        m.submodules.results = results = Memory(shape=self.entry_layout, depth=depth, init=[])
        res_w = results.write_port()
        res_r = results.read_port(domain="sync")
        res_q = results.read_port(domain="sync")
        m.d.comb += [res_q.addr.eq(self.query_index), res_q.en.eq(1),
                     self.query.eq(res_q.data)]

        map_layout = data.StructLayout({"param": 16, "valid": 1})
        m.submodules.pmap = pmap = Memory(shape=map_layout, depth=depth, init=[])
        pmap_w = pmap.write_port()
        pmap_r = pmap.read_port(domain="sync")
        m.d.comb += [
            self.param_map.ready.eq(1),
            pmap_w.addr.eq(self.param_map.payload.index),
            pmap_w.data.param.eq(self.param_map.payload.param),
            pmap_w.data.valid.eq(self.param_map.payload.valid),
            pmap_w.en.eq(self.param_map.valid),
        ]

        # Lowest free slot (the last assignment wins, so the loop runs high to low).
        alloc_slot = Signal(range(max(n_slots, 2)))
        alloc_none = Signal()
        m.d.comb += alloc_none.eq(self.free_slots == 0)
        for k in reversed(range(n_slots)):
            with m.If(self.free_slots[k]):
                m.d.comb += alloc_slot.eq(k)

        state = Signal(_State, init=_State.CLEAR)
        clear_index = Signal(range(depth))
        phase = Signal(range(4))      # byte position inside a record
        remaining = Signal(32)        # records left
        rec_tick = Signal(16)
        rec_cmds = Signal(8)          # commands left in the current record
        prev_rec_tick = Signal(17, init=0x1FFFF)  # bit 16 set: no record seen yet
        last_tick = Signal(17, init=0x1FFFF)
        cur_tick = Signal(16)
        action = Signal(8)
        target = Signal(16)
        req_param = Signal(16)
        # The bytes of a record before its last one, little-endian, newest on top: in the
        # cycle that takes a record's last byte, Cat(shift, byte) ends with the whole record.
        widest = max(r.size for r in (MMAP_COUNT, MMAP_RECORD, MMAP_COMMAND))
        shift = Signal(8 * (widest - 1))

        byte = self.mmap.payload.data
        last = self.mmap.payload.last

        def assembled(record, name):
            """Field ``name`` of ``record`` in the cycle that takes its last byte."""
            lo = 8 * (widest - record.size) + record[name].bit_offset
            return Cat(shift, byte)[lo : lo + record[name].bits]
        err = Signal()
        cause = Signal(MmapError)

        consuming = state.matches(_State.COUNT, _State.REC, _State.CMD, _State.END,
                                  _State.DRAIN)
        m.d.comb += self.mmap.ready.eq(consuming)
        take = self.mmap.valid & consuming

        # Completions are always accepted.
        m.d.comb += self.preload_done.ready.eq(1)
        # A command in EXEC on the same parameter sees the completion's effect first (its
        # own assignments come later and win).
        # a parameter's index in the per-parameter bit vectors (pending, resident, dropped)
        param_bits = max(1, (max_params - 1).bit_length())
        done_id = self.preload_done.payload
        done_idx = done_id[:param_bits]
        completing = Signal()
        m.d.comb += completing.eq(self.preload_done.valid & (state != _State.DRAIN))
        with m.If(completing):
            in_range = done_id < max_params
            with m.If(in_range & self.pending.bit_select(done_idx, 1)):
                m.d.sync += [self.pending.bit_select(done_idx, 1).eq(0),
                             self.resident.bit_select(done_idx, 1).eq(1)]
            with m.Elif(in_range & self.dropped.bit_select(done_idx, 1)):
                m.d.sync += self.dropped.bit_select(done_idx, 1).eq(0)
            with m.Else():
                m.d.comb += [err.eq(1), cause.eq(MmapError.UNEXPECTED_DONE)]

        m.d.comb += self.live.eq(sum(~self.free_slots[k] for k in range(n_slots)))

        with m.Switch(state):
            with m.Case(_State.CLEAR):
                m.d.comb += [res_w.addr.eq(clear_index), res_w.en.eq(1), res_w.data.eq(0)]
                m.d.sync += clear_index.eq(clear_index + 1)
                with m.If(clear_index == depth - 1):
                    m.d.sync += state.eq(_State.COUNT)
            with m.Case(_State.COUNT):
                with m.If(take):
                    m.d.sync += [shift.eq(Cat(shift[8:], byte)), phase.eq(phase + 1)]
                    with m.If(phase == MMAP_COUNT.size - 1):
                        count = assembled(MMAP_COUNT, "count")
                        m.d.sync += [remaining.eq(count), phase.eq(0)]
                        with m.If(count == 0):
                            with m.If(~last):
                                m.d.comb += [err.eq(1), cause.eq(MmapError.TRAILING)]
                            m.d.sync += state.eq(_State.END)
                        with m.Elif(last):
                            m.d.comb += [err.eq(1), cause.eq(MmapError.TRUNCATED)]
                        with m.Else():
                            m.d.sync += state.eq(_State.REC)
                    with m.Elif(last):
                        m.d.comb += [err.eq(1), cause.eq(MmapError.TRUNCATED)]
            with m.Case(_State.REC):
                with m.If(take):
                    m.d.sync += [shift.eq(Cat(shift[8:], byte)), phase.eq(phase + 1)]
                    with m.If(phase == MMAP_RECORD.size - 1):
                        tick_value = assembled(MMAP_RECORD, "tick")
                        n_cmds = assembled(MMAP_RECORD, "commands")
                        m.d.sync += [rec_tick.eq(tick_value), rec_cmds.eq(n_cmds),
                                     phase.eq(0), remaining.eq(remaining - 1),
                                     prev_rec_tick.eq(tick_value)]
                        final = (remaining == 1) & (n_cmds == 0)
                        with m.If(~prev_rec_tick[16] & (tick_value <= prev_rec_tick[:16])):
                            m.d.comb += [err.eq(1), cause.eq(MmapError.TICK_ORDER)]
                        with m.Elif(last & ~final):
                            m.d.comb += [err.eq(1), cause.eq(MmapError.TRUNCATED)]
                        with m.Elif(final & ~last):
                            m.d.comb += [err.eq(1), cause.eq(MmapError.TRAILING)]
                        with m.Else():
                            m.d.sync += state.eq(_State.WAIT)
                    with m.Elif(last):
                        m.d.comb += [err.eq(1), cause.eq(MmapError.TRUNCATED)]
            with m.Case(_State.WAIT, _State.END):
                t = self.tick.payload
                with m.If(self.tick.valid):
                    with m.If(~last_tick[16] & (t <= last_tick[:16])):
                        m.d.comb += [err.eq(1), cause.eq(MmapError.TICK_ORDER)]
                    with m.Elif((state == _State.WAIT) & (t > rec_tick)):
                        m.d.comb += [err.eq(1), cause.eq(MmapError.TICK_MISSED)]
                    with m.Elif((state == _State.WAIT) & (t == rec_tick)):
                        m.d.sync += [cur_tick.eq(t), last_tick.eq(t)]
                        with m.If(rec_cmds == 0):
                            m.d.comb += self.tick.ready.eq(1)
                            m.d.sync += state.eq(
                                Mux(remaining != 0, _State.REC, _State.END))
                        with m.Else():
                            m.d.sync += state.eq(_State.CMD)
                    with m.Else():  # nothing scheduled for this tick
                        m.d.comb += self.tick.ready.eq(1)
                        m.d.sync += last_tick.eq(t)
                with m.If((state == _State.END) & take):
                    m.d.comb += [err.eq(1), cause.eq(MmapError.TRAILING)]
            with m.Case(_State.CMD):
                with m.If(take):
                    m.d.sync += [shift.eq(Cat(shift[8:], byte)), phase.eq(phase + 1)]
                    with m.If(phase == MMAP_COMMAND.size - 1):
                        cmd_action = assembled(MMAP_COMMAND, "action")
                        cmd_target = assembled(MMAP_COMMAND, "target")
                        m.d.sync += [action.eq(cmd_action), target.eq(cmd_target),
                                     phase.eq(0), state.eq(_State.EXEC)]
                        final = (remaining == 0) & (rec_cmds == 1)
                        with m.If(last & ~final):
                            m.d.comb += [err.eq(1), cause.eq(MmapError.TRUNCATED)]
                        with m.Elif(final & ~last):
                            m.d.comb += [err.eq(1), cause.eq(MmapError.TRAILING)]
                        # Read the tables for the command (data valid in EXEC).
                        fwd = cmd_action == MmapAction.FORWARD.value
                        m.d.comb += [
                            res_r.addr.eq(Mux(fwd, cur_tick, cmd_target)),
                            res_r.en.eq(1),
                            pmap_r.addr.eq(cmd_target),
                            pmap_r.en.eq(1),
                        ]
                    with m.Elif(last):
                        m.d.comb += [err.eq(1), cause.eq(MmapError.TRUNCATED)]
            with m.Case(_State.EXEC):
                entry = res_r.data
                mapped = pmap_r.data
                pidx = mapped.param[:param_bits]
                param_in_range = mapped.param < max_params
                # The parameter's bits after this cycle's completion, if it is for it.
                done_here = completing & (done_id == mapped.param)
                p_pend_now = self.pending.bit_select(pidx, 1)
                p_res = Signal()
                p_pend = Signal()
                p_drop = Signal()
                m.d.comb += [
                    p_res.eq(self.resident.bit_select(pidx, 1) | (p_pend_now & done_here)),
                    p_pend.eq(p_pend_now & ~done_here),
                    p_drop.eq(self.dropped.bit_select(pidx, 1) & ~done_here),
                ]
                param_held = mapped.valid & param_in_range & (p_res | p_pend)
                finish_cmd = Signal()
                m.d.sync += self.commands.eq(self.commands + 1)
                with m.If(target >= depth):
                    m.d.comb += [err.eq(1), cause.eq(MmapError.CAPACITY)]
                with m.Elif(action == MmapAction.SAVE_RESULT.value):
                    with m.If((target != cur_tick) | (entry.state != ResultState.NONE)):
                        m.d.comb += [err.eq(1), cause.eq(MmapError.BAD_TARGET)]
                    with m.Elif(alloc_none):
                        m.d.comb += [err.eq(1), cause.eq(MmapError.NO_SLOT)]
                    with m.Else():
                        m.d.comb += [res_w.addr.eq(cur_tick), res_w.en.eq(1),
                                     res_w.data.state.eq(ResultState.SAVED),
                                     res_w.data.slot.eq(alloc_slot), finish_cmd.eq(1)]
                        m.d.sync += self.free_slots.bit_select(alloc_slot, 1).eq(0)
                with m.Elif(action == MmapAction.FORWARD.value):
                    with m.If((target <= cur_tick) | (entry.state != ResultState.NONE)):
                        m.d.comb += [err.eq(1), cause.eq(MmapError.BAD_TARGET)]
                    with m.Else():
                        m.d.comb += [res_w.addr.eq(cur_tick), res_w.en.eq(1),
                                     res_w.data.state.eq(ResultState.FORWARDED),
                                     finish_cmd.eq(1)]
                with m.Elif(action == MmapAction.FREE.value):
                    with m.If(target >= cur_tick):
                        m.d.comb += [err.eq(1), cause.eq(MmapError.BAD_TARGET)]
                    with m.Elif((entry.state == ResultState.NONE) & ~param_held):
                        m.d.comb += [err.eq(1), cause.eq(MmapError.FREE_UNKNOWN)]
                    with m.Else():
                        m.d.comb += finish_cmd.eq(1)
                        with m.If(entry.state != ResultState.NONE):
                            m.d.comb += [res_w.addr.eq(target), res_w.en.eq(1),
                                         res_w.data.state.eq(ResultState.NONE)]
                            with m.If(entry.state == ResultState.SAVED):
                                m.d.sync += self.free_slots.bit_select(entry.slot, 1).eq(1)
                        with m.If(param_held):  # a load in flight is dropped
                            m.d.sync += [self.resident.bit_select(pidx, 1).eq(0),
                                         self.pending.bit_select(pidx, 1).eq(0),
                                         self.dropped.bit_select(pidx, 1).eq(p_pend)]
                with m.Elif(action == MmapAction.PRELOAD.value):
                    with m.If(~mapped.valid | ~param_in_range | (target < cur_tick)):
                        m.d.comb += [err.eq(1), cause.eq(MmapError.BAD_TARGET)]
                    with m.Elif(p_res | p_pend):
                        m.d.comb += finish_cmd.eq(1)
                    with m.Elif(p_drop):  # the load in flight serves again
                        m.d.comb += finish_cmd.eq(1)
                        m.d.sync += [self.pending.bit_select(pidx, 1).eq(1),
                                     self.dropped.bit_select(pidx, 1).eq(0)]
                    with m.Else():
                        m.d.sync += [req_param.eq(mapped.param), state.eq(_State.REQ),
                                     self.pending.bit_select(pidx, 1).eq(1)]
                with m.Else():
                    m.d.comb += [err.eq(1), cause.eq(MmapError.BAD_ACTION)]
                with m.If(finish_cmd):
                    self._next_command(m, state, rec_cmds, remaining)
            with m.Case(_State.REQ):
                m.d.comb += [self.preload_req.valid.eq(1), self.preload_req.payload.eq(req_param)]
                with m.If(self.preload_req.ready):
                    self._next_command(m, state, rec_cmds, remaining)
            with m.Case(_State.DRAIN):
                m.d.comb += self.tick.ready.eq(1)

        with m.If(err & (state != _State.DRAIN)):
            m.d.sync += [self.error.eq(1), self.error_cause.eq(cause), state.eq(_State.DRAIN)]
            # The tick being worked on: presented ticks before it has been accepted,
            # the current tick while executing, the last one otherwise.
            with m.If(state.matches(_State.WAIT, _State.END) & self.tick.valid):
                m.d.sync += self.error_tick.eq(self.tick.payload)
            with m.Elif(state.matches(_State.EXEC, _State.CMD)):
                m.d.sync += self.error_tick.eq(cur_tick)
            with m.Else():
                m.d.sync += self.error_tick.eq(last_tick[:16])
        return m

    def _next_command(self, m, state, rec_cmds, remaining):
        # A command finished: more in this record, or accept the tick and move on.
        m.d.sync += rec_cmds.eq(rec_cmds - 1)
        with m.If(rec_cmds == 1):
            m.d.comb += self.tick.ready.eq(1)
            m.d.sync += state.eq(Mux(remaining != 0, _State.REC, _State.END))
        with m.Else():
            m.d.sync += state.eq(_State.CMD)

