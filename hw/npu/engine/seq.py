"""The NEM engine's sequencer (SEQ): fetch, decode and issue the task binary, with tokens.

The binary's layout comes from :mod:`nem.taskformat` only (``HEADER``, ``TASK_HEADER``,
``WRITE``, ``BUFFER_ENTRY``, ``MAGIC``, ``VERSION``, ``Unit``, ``REGISTER_MAPS``): every
offset and width below is derived from those record declarations (``nem.records``) at
elaboration time.

Fetch
-----
From the program base address (word-aligned) the fetcher reads bus words over AXI into a
32-word FIFO, in commands of at most 16 words and only when the FIFO has room for every
word in flight (so the shared AXI reader is never held by a fetch the SEQ cannot take). It
first reads the program header; once the header gives the task stream's offset it jumps
over the buffer table, and reads up to the stream's end. Words enter a *byte window*
(``max(12, 5 K) + word - 1`` bytes) from which the decoder takes what one step needs.

Decode (states of the FSM)
--------------------------
``HEADER``
    up to 8 header bytes per cycle (whole fields, the device hash in 8-byte pieces),
    checked in the order ``nem.taskformat.decode`` checks them: magic, version, header
    size and buffer table offset, device hash (baked in at generation), task stream
    offset.
``SKIP``
    what lies between the header and the task stream in the fetched words.
``TASK``
    a 12-byte task header: the unit type must be one of this engine's (DMA, sDMA), the
    instance below the device's count, the engine 0, the token masks inside
    ``SEQ.max_active_tokens``; after the last task (``task_count`` of the header, a flag
    set where the task index moves) FINISH. The staging registers are already cleared
    (an unwritten register is 0, as in the executor's front-end): in the cycle after the
    task before was handed to the issue slot, or after START for the first task.
``HOLD``
    (an NMU or CSTL task) waits while the issue slot still holds a task for the same
    unit, whose shadow registers then still hold that task; then clears them (a cycle
    per compute task).
``WRITES``
    register writes into the staging registers, as many per cycle as the window holds up
    to ``max(2, word bytes // 5)`` (index checked against the unit's ``REGISTER_MAPS``
    entry).
``HAND``
    levels allowed for the unit, counts in 1..65535, high address words 0; then the task
    moves into the *issue slot* as soon as the slot is free, and decoding goes on with
    the next task (decode ahead).
``FINISH``
    after the last task, waits for the slot to issue, every unit to finish and every
    fetch to arrive: status DONE.

Issue slot (beside the FSM): first the region check, one dimension per cycle,
``end = addr + COUNT0 + sum((COUNTk - 1) * STRIDEk)`` on each side inside its memory;
then the task issues once every token of its wait mask is set and its unit instance is
free. Issuing clears the task's signal tokens and hands the command to the unit in one
cycle. Tasks issue strictly in stream order.

A unit's completion sets the signal tokens of the task it ran (its ``done`` is always
accepted, also after an error), from a register: they count for an issue in the cycle
after the completion. Any check failing ends in status ERROR with a cause
(:class:`Cause`) and the index of the failing task (the one being decoded, the one in
the issue slot, or the one the failing unit runs; for ``AXI_ERROR`` the one being
decoded). The cause is visible at once;
the status stays BUSY until the units have finished the tasks already issued, the
fetches in flight have arrived and the fetched words not decoded are dropped, so that
ERROR (like DONE) means quiescent. A watchdog ends
a run that makes no progress (no byte decoded, no task issued or completed, no unit moving data) for
``watchdog`` cycles in status ERROR, cause ``WATCHDOG``.
"""

from __future__ import annotations

import operator
from enum import IntEnum
from functools import reduce

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from nem.taskformat import (
    BUFFER_ENTRY,
    COPY_COUNT_BITS,
    DATA_ALIGN,
    ELTWISE_ENTRY,
    HEADER,
    MAGIC,
    NO_TABLE,
    REGISTER_MAPS,
    REQUANT_ENTRY,
    TABLE_ALIGN,
    TABLE_BYTES,
    TASK_HEADER,
    VERSION,
    WRITE,
    Unit,
)
from npu.bus.axi import command_layout
from npu.bus.ports import fetch_into
from npu.bus.stream import quiet_for
from npu.cstl.regs import elt_codes, reads_table_codes
from npu.cstl.unit import START_WAIT as CSTL_START_WAIT
from npu.dsp import constant_product, registered_product
from npu.engine.copy_units import level_code, unit_command_layout
from npu.engine.entry_fetch import entry_request_layout
from npu.nmu.regs import write_layout
from npu.nmu.unit import START_WAIT as NMU_START_WAIT

__all__ = [
    "Cause",
    "Sequencer",
    "Status",
    "copy_register_names",
]


FETCH_DEPTH = 32   # words of the fetch FIFO
FETCH_PIECE = 16   # words per fetch command at most
HEADER_STEP = 8    # header bytes checked per cycle at most


class Status(IntEnum):
    """``STATUS`` register values."""

    IDLE = 0
    BUSY = 1
    DONE = 2
    ERROR = 3


class Cause(IntEnum):
    """``ERROR_CAUSE`` register values."""

    NONE = 0
    BAD_MAGIC = 1       # header magic is not nem.taskformat.MAGIC
    BAD_VERSION = 2     # major version differs, or minor is newer
    BAD_DEVICE = 3      # device hash is not the one the engine was generated for
    BAD_HEADER = 4      # sizes/offsets do not add up, base not word-aligned, stream length
    BAD_UNIT = 5        # unit type, instance or engine the engine does not have
    BAD_REGISTER = 6    # register index outside the unit's map
    BAD_TOKEN = 7       # wait/signal mask names a token beyond SEQ.max_active_tokens
    BAD_LEVEL = 8       # SRC_LEVEL/DST_LEVEL not a pair the unit copies between
    BAD_REGION = 9      # a side of the copy reaches outside its memory
    BAD_VALUE = 10      # a count is 0 or does not fit 16 bits
    UNIT_ERROR = 11     # a unit reported an error (AXI write response not OKAY)
    AXI_ERROR = 12      # an AXI read response was not OKAY
    WATCHDOG = 13       # no progress for WATCHDOG cycles
    BAD_ENTRY = 14      # an NMU task's REQUANT entry is misaligned or outside the data section
    START_REFUSED = 15  # a free unit did not take its task's start (an engine fault)


def _header_steps():
    """The header in steps of at most 8 bytes: whole fields packed together, a longer
    field (the device hash) in 8-byte pieces. Each step is a list of
    ``(field, piece, offset, size)``."""
    pieces = []
    for f in HEADER.fields:
        for piece, at in enumerate(range(0, f.size, HEADER_STEP)):
            pieces.append((f.name, piece, f.offset + at, min(HEADER_STEP, f.size - at)))
    steps, current = [], []
    for p in pieces:
        if current and sum(q[3] for q in current) + p[3] > HEADER_STEP:
            steps.append(current)
            current = []
        current.append(p)
    steps.append(current)
    step_of = {p[0]: k for k, step in enumerate(steps) for p in step}
    if step_of["stream_offset"] <= step_of["buffer_count"]:
        raise ValueError("the SEQ checks stream_offset against the registered buffer count: "
                         "buffer_count must come in an earlier header step")
    return steps


def copy_register_names():
    """Register names shared by the copy units (DMA and sDMA have one map layout)."""
    names = [r.name for r in REGISTER_MAPS[Unit.DMA].registers]
    if names != [r.name for r in REGISTER_MAPS[Unit.SDMA].registers]:
        raise ValueError("the DMA and sDMA register maps differ; the SEQ stages one layout")
    return names


class Sequencer(wiring.Component):
    """Fetches, checks and issues a task binary; token scoreboard; watchdog.

    Parameters
    ----------
    config : npu.engine.config.EngineConfig

    Attributes
    ----------
    start : In(1)
        Pulse: run the program at ``base`` (taken when idle/done/error and quiescent).
    base : In(addr_width)
        Byte address of the program in DDR (word-aligned).
    watchdog : In(32)
        Cycles without progress before the watchdog error.
    progress : In(1)
        A unit moved data (from the engine, which registers each unit's "busy and not
        stalled" beside the unit and then their OR: two cycles after the move).
    fetch_cmd, fetch_data : AXI reader client streams
    fetch_error : In(1)
        Sticky read-response error of the AXI reader.
    unit_start, unit_done : arrays, one per unit (DMA instances first, then sDMA, then
        the NMU if the engine has one; the NMU ignores the start payload)
    nmu_clear, nmu_write : Out
        The NMU's shadow registers: cleared at an NMU task's header, then its register
        writes one per cycle (the NMU's ``write`` is always ready).
    cstl_clear, cstl_write, cstl_sel : Out (engines with CSTLs)
        The same for the CSTLs (after the NMU in the unit order): ``cstl_clear`` one bit
        per instance; ``cstl_write`` goes to instance ``cstl_sel``.
    cstl_table, cstl_has_table : Out (engines with CSTLs)
        The DDR address of the issuing CSTL task's table
        (:class:`npu.engine.table_fetch.TableFetcher`, started with the CSTL), and whether
        the task reads one (an opcode of ``npu.cstl.regs.reads_table_codes``: a table
        opcode or a pool, with ``TABLE`` not ``NO_TABLE``; the table lies in the data
        section, else ``BAD_ENTRY`` at decode). A binary eltwise reads its
        ``ELTWISE_ENTRY`` at data offset ``REQUANT`` the same way (``cstl_has_table`` and
        ``cstl_elt_entry``; ``DATA_ALIGN``-aligned and inside the data section, else
        ``BAD_ENTRY``).
    cstl_elt_entry : Out (engines with CSTLs)
        The fetch is the issuing task's eltwise entry (``ELTWISE_ENTRY.size`` bytes), not
        a table.
    nmu_entry : Out(entry_request_layout)
        The DDR address of the issuing NMU task's requantisation entry and the data
        section's end (for :class:`npu.engine.entry_fetch.EntryFetcher`, started with the NMU).
    entry_error : In(1)
        The entry fetcher found the entry reaching past the data section.
    status, cause : Out
    error_task : Out(32)
        Index of the task being decoded or issued when the error happened.
    issued, completed : Out(32)
        Tasks issued and completed in this run.
    tokens : Out(tokens)
        The token scoreboard as the issue logic sees it: the register, with the tokens of
        the completions of the cycle before already set.
    issue, issue_unit, issue_wait, issue_signal : Out
        High for the cycle a task is issued, with its unit index and token masks (for
        testbench assertions: a task never issues before its wait tokens are set).
    waiting : Out(1)
        The SEQ holds a decoded task (waiting for tokens or for its unit).
    """

    def __init__(self, config):
        self.config = config
        self.n_units = config.n_dma + config.n_sdma + config.n_nmu + config.n_cstl
        #: unit index of the NMU (after the DMAs and sDMAs), if the engine has one
        self.nmu_index = config.n_dma + config.n_sdma if config.n_nmu else None
        #: unit index of CSTL 0 (after the NMU), if the engine has CSTLs
        self.cstl_index = config.n_dma + config.n_sdma + config.n_nmu \
            if config.n_cstl else None
        cstl_ports = {} if not config.n_cstl else {
            "cstl_clear": Out(config.n_cstl),
            "cstl_write": Out(stream.Signature(write_layout())),
            "cstl_sel": Out(range(max(config.n_cstl, 2))),  # >= 1 bit: no [-1:0] vector
            "cstl_table": Out(config.addr_width),
            "cstl_has_table": Out(1),
            "cstl_elt_entry": Out(1),
        }
        aw = config.addr_width
        cmd = stream.Signature(command_layout(aw))
        rdata = stream.Signature(data.StructLayout({"data": config.data_width, "last": 1}))
        done = stream.Signature(data.StructLayout({"error": 1}))
        super().__init__({
            "start": In(1),
            "base": In(aw),
            "watchdog": In(32),
            "progress": In(1),
            "fetch_cmd": Out(cmd),
            "fetch_data": In(rdata),
            "fetch_error": In(1),
            "unit_start": Out(stream.Signature(unit_command_layout(aw))).array(self.n_units),
            "unit_done": In(done).array(self.n_units),
            "status": Out(2),
            "cause": Out(8),
            "error_task": Out(32),
            "issued": Out(32),
            "completed": Out(32),
            "tokens": Out(config.tokens),
            "issue": Out(1),
            "issue_unit": Out(range(self.n_units)),
            "issue_wait": Out(32),
            "issue_signal": Out(32),
            "waiting": Out(1),
            "nmu_clear": Out(1),
            "nmu_write": Out(stream.Signature(write_layout())),
            "nmu_entry": Out(entry_request_layout(aw)),
            "entry_error": In(1),
            **cstl_ports,
        })

    def elaborate(self, platform):
        # One method per stage, called in the order the stages were once written inline (so
        # the netlist, signal names included, is what one long function gave). The signals
        # the stages share are attributes of ``s``.
        m = Module()
        s = _Shared(self.config)
        s.platform = platform
        s.running = Signal()
        self._fetcher(m, s)
        self._byte_window(m, s)
        self._run_registers(m, s)
        self._scoreboard(m, s)
        self._error_latch(m, s)
        self._slot_registers(m, s)
        s.watchdog_fired = self._watchdog(m, s.take, s.issue, s.done_any, s.append)
        # the register writes at the front of the window (WRITES; the NMU's come one by one)
        s.indices = [s.field(WRITE, "index", at=j * WRITE.size) for j in range(s.K)]
        s.values = [s.field(WRITE, "value", at=j * WRITE.size) for j in range(s.K)]
        self._stage_writes(m, s)

        with m.FSM(name="seq"):
            with m.State("IDLE"):
                self._idle(m, s)
            with m.State("HEADER"):
                self._header(m, s)
                self._errors(m, s)
            with m.State("SKIP"):
                self._skip(m, s)
                self._errors(m, s)
            with m.State("TASK"):
                self._task_header(m, s)
                self._errors(m, s)
            with m.State("HOLD"):
                self._hold(m, s)
                self._errors(m, s)
            with m.State("WRITES"):
                self._writes(m, s)
                self._errors(m, s)
            with m.State("HAND"):
                self._hand(m, s)
                self._errors(m, s)
            with m.State("FINISH"):
                m.d.comb += [s.running.eq(1), self.status.eq(Status.BUSY)]
                with m.If(~s.slot_valid & (s.unit_busy == 0) & ~s.done_any &
                          (s.inflight == 0)):
                    m.d.sync += s.finished.eq(1)
                    m.next = "IDLE"
                self._errors(m, s)
            with m.State("ERROR"):
                # still draining: units finishing their tasks, fetches in flight, and the
                # words fetched but not decoded (else a run started at once would read them)
                m.d.comb += [s.running.eq(0), self.status.eq(Status.BUSY)]
                with m.If((s.inflight == 0) & (s.unit_busy == 0) & (s.fifo.level == 0)):
                    m.next = "IDLE"

        self._region_check(m, s)
        self._dispatch(m, s)
        return m

    # ---------------- datapath beside the FSM --------------------------------------------

    def _fetcher(self, m, s):
        """Program words from DDR into the fetch FIFO; the jump over the buffer table."""
        aw, lw = s.aw, s.lw
        m.submodules.fifo = s.fifo = SyncFIFOBuffered(width=s.cfg.data_width,
                                                      depth=FETCH_DEPTH)
        s.fetch_word = Signal(aw - lw + 1)           # next word to request (no wrap at 2**aw)
        s.end_word = Signal(aw - lw + 1)             # words before this one are wanted
        s.header_end = Signal(aw - lw + 1)           # first word after the program header
        s.jump_pending = Signal()                    # skip to jump_to after the header
        s.jump_to = Signal(aw - lw)
        s.limit = Signal(aw - lw + 1)
        m.d.comb += s.limit.eq(Mux(s.jump_pending, s.header_end, s.end_word))
        cmd_fire, piece, s.inflight = fetch_into(
            m, s.fifo, FETCH_DEPTH, self.fetch_cmd, self.fetch_data, enable=s.running,
            word=s.fetch_word, end=s.limit, lw=lw, max_beats=FETCH_PIECE)
        with m.If(cmd_fire):
            m.d.sync += s.fetch_word.eq(s.fetch_word + piece)
        with m.Elif(s.jump_pending & (s.fetch_word == s.header_end)):
            m.d.sync += [s.fetch_word.eq(s.jump_to), s.jump_pending.eq(0)]

    def _byte_window(self, m, s):
        """The window of fetched bytes the decoder takes from (``take`` bytes a cycle).

        A state takes its bytes whether or not the checks on them pass: a failed check
        ends in ERROR, and the window is not read again until a start empties it. So
        ``take`` follows the state and the counts, not the values of the bytes (except
        TASK waiting for a unit whose shadow registers are still held), and no check lies
        on the path from the window through ``take`` back into it.
        """
        C, W, fifo = s.C, s.W, s.fifo
        s.buf = Signal(8 * C)
        s.count = Signal(range(C + 1))
        s.take = Signal(range(C + 1))
        s.append = Signal()
        m.d.comb += s.append.eq(s.running & fifo.r_rdy & (s.count + W <= C))
        m.d.comb += fifo.r_en.eq(s.append | ~s.running)      # drain when not running
        # The fetched word goes in above the bytes held (placed by ``count``, a register)
        # before the window shifts by ``take``: (buf | word << count) >> take is
        # buf >> take | word << (count - take) as take <= count, and only one shifter
        # lies after ``take``, not a subtraction and a second shifter
        s.incoming = Signal(8 * C)
        m.d.comb += s.incoming.eq(Mux(s.append, fifo.r_data << (s.count * 8), 0))
        m.d.sync += [s.buf.eq((s.buf | s.incoming) >> (s.take * 8)),
                     s.count.eq(s.count - s.take + Mux(s.append, W, 0))]

    def _run_registers(self, m, s):
        """What the header gave, the task being decoded and its staging registers."""
        s.ntasks = Signal(32)
        # The stream offset the buffer count implies (header + table), computed when the
        # count is stored so that the check a step later compares registers only.
        s.stream_want = Signal(32 + (BUFFER_ENTRY.size - 1).bit_length() + 1)
        s.stream_off = Signal(32)
        s.stream_left = Signal(33)
        # "stream_left >= t" for the thresholds the states compare it with, as registers
        # (set beside every store to stream_left, :meth:`_stream_left`): no comparison of
        # the 33-bit count lies between it and ``take``
        s.stream_at_least = {t: Signal(name=f"stream_left_ge{t}") for t in sorted(
            {1, TASK_HEADER.size, *(n * WRITE.size for n in range(1, s.K + 1))})}
        s.stream_total = Signal(32)
        s.data_bytes = Signal(32)
        s.skip_left = Signal(32)
        s.task_index = Signal(32)
        # "task_index == ntasks" (every task decoded) as a register, set where either moves
        # (the header's task count, each hand-over: :meth:`_next_task`), so that TASK's
        # end-of-program test is a flip-flop and not a 32-bit comparison ahead of the
        # header checks and the staging (the board's worst path on seed 3 at 64e4b2d)
        s.at_end = Signal()
        s.step = Signal(range(len(s.steps)))
        s.base = Signal(s.aw)

        s.reg_names = copy_register_names()
        s.staging = Array(Signal(32, name=f"stage_{n}") for n in s.reg_names)
        s.reg = {n: s.staging[k] for k, n in enumerate(s.reg_names)}
        # HAND's checks of the copy counts as flags per dimension, set as each count is
        # written (:meth:`_count_flags`): "the count is 0", "it does not fit
        # COPY_COUNT_BITS"; the cleared staging registers are counts of 0
        s.count_zero = Signal(4, init=0b1111)
        s.count_big = Signal(4)
        s.cur_unit = Signal(range(self.n_units))
        s.cur_is_sdma = Signal()
        s.cur_is_nmu = Signal()
        s.cur_requant = Signal(32)
        # where the task's entry and table lie, checked as they are written (the HAND
        # state then tests flags): the requantisation entry misaligned or past the data
        # section (NMU entry, eltwise entry), the table named, the table out of place
        s.requant_bad_nmu = Signal()
        s.requant_bad_elt = Signal()
        s.nmu_regs = REGISTER_MAPS[Unit.NMU]
        s.requant_index = s.nmu_regs.index("REQUANT")
        if s.cfg.n_cstl:
            s.cur_is_cstl = Signal()
            s.cur_inst = Signal(range(max(s.cfg.n_cstl, 2)))
            s.cur_table = Signal(32)
            s.table_named = Signal()
            s.table_bad = Signal()
            s.cur_table_op = Signal()
            s.cur_elt_op = Signal()
        # the data section: after the task stream, at a multiple of 8 (nem.taskformat)
        s.data_base = Signal(s.aw + 2)
        stream_end = s.stream_off + s.stream_total
        m.d.comb += s.data_base.eq(s.base + ((stream_end + DATA_ALIGN - 1) & ~(DATA_ALIGN - 1)))
        s.data_end = s.data_base + s.data_bytes
        s.cur_wait = Signal(32)
        s.cur_signal = Signal(32)
        s.writes_left = Signal(8)
        # "writes_left >= n" for the write counts WRITES takes at once, as registers set
        # beside every store to writes_left (:meth:`_writes_left`), like stream_at_least
        s.writes_at_least = {n: Signal(name=f"writes_left_ge{n}") for n in range(1, s.K + 1)}

    def _stage_writes(self, m, s):
        """The writes WRITES takes from the window reach the staging registers a cycle
        later, from registers: which register each write names (one-hot, no bit for an
        index out of range) and its value. The staging registers' enables are then an OR
        of register bits, not the window's decode and the state's conditions (the board's
        worst path on seed 2 at 8ebe584). HAND reads the staging registers no earlier than
        two cycles after the last write: WRITES leaves for HAND in a cycle that takes no
        write, so the last writes have landed when HAND starts.

        The staging registers (and the copy counts' flags, :meth:`_count_flags`) are
        cleared for the next task in the cycle after a hand-over to the issue slot (and
        after START, for a run's first task), from a register (``stage_clear``), not in
        TASK under the header's checks (the board's worst path on seed 3 at 64e4b2d: the
        task index -> the end-of-program test and the checks -> a staging register's
        input). Nothing reads them between a hand-over and the next task's HAND (the slot
        took its command in the hand-over), and the clear never meets a write: after a
        hand-over in cycle t (HAND, in which no write is staged: see above) the clear
        comes at the end of t + 1 (TASK), the next task's first writes are taken in WRITES
        at t + 2 at the earliest and reach the staging at the end of t + 3 (their count
        flags at the end of t + 2). After START the clear comes in HEADER. The writes'
        statements follow the clear all the same, so a write would win."""
        R = len(s.reg_names)
        s.stage_hit = [Signal(R, name=f"stage_hit{j}") for j in range(s.K)]
        s.stage_value = [Signal(32, name=f"stage_value{j}") for j in range(s.K)]
        # cleared every cycle unless WRITES sets them (statements after this one win)
        m.d.sync += [h.eq(0) for h in s.stage_hit]
        m.d.sync += [v.eq(s.values[j]) for j, v in enumerate(s.stage_value)]
        # a hand-over of this cycle clears the staging in the next; START sets it too
        # (:meth:`_idle`, a later statement)
        s.stage_clear = Signal()
        m.d.sync += s.stage_clear.eq(s.slot_load)
        with m.If(s.stage_clear):
            m.d.sync += [r.eq(0) for r in s.staging]
            m.d.sync += [s.count_zero.eq(0b1111), s.count_big.eq(0)]
        for k in range(R):
            # in order, so a later write to the same register wins
            for j in range(s.K):
                with m.If(s.stage_hit[j][k]):
                    m.d.sync += s.staging[k].eq(s.stage_value[j])

    def _scoreboard(self, m, s):
        """Token scoreboard and unit occupancy: completions set the signal tokens of the
        task the unit ran; the task each unit runs (for ERROR_TASK)."""
        T = s.T
        s.tokens = Signal(T)
        s.pending = Array(Signal(T, name=f"pending{k}") for k in range(self.n_units))
        s.unit_busy = Signal(self.n_units)
        s.token_set = Signal(T)
        s.token_clear = Signal(T)
        s.done_any = Signal()
        s.unit_error = Signal()
        # A completion's tokens are set from a register: a unit's done comes from across
        # the die, and a dependent task's command goes back across it, so the completion
        # counts for an issue in the cycle after it (the unit is free for its next task in
        # that cycle too: unit_busy clears at the same edge). The register holds the
        # tokens themselves, not the completions, so the issue's wait test sees one OR
        # after it: ``pending[k]`` is the same in the done cycle and the one after,
        # because a unit is busy in its done cycle and takes no task (its next issue
        # writes ``pending[k]`` at the end of the cycle after).
        sets = []
        for k, done in enumerate(self.unit_done):
            m.d.comb += done.ready.eq(1)
            sets.append(Mux(done.valid, s.pending[k], 0))
            with m.If(done.valid):
                m.d.sync += s.unit_busy[k].eq(0)
        m.d.sync += s.token_set.eq(reduce(operator.or_, sets))
        m.d.comb += [s.done_any.eq(Cat(*[d.valid for d in self.unit_done]).any()),
                     s.unit_error.eq(Cat(*[d.valid & d.payload.error
                                           for d in self.unit_done]).any())]
        # the completions registered in the cycle before count before an issue in this
        # cycle (the issue already sees their tokens), so a task that waits on a token and
        # signals it again clears it
        m.d.sync += s.tokens.eq((s.tokens | s.token_set) & ~s.token_clear)
        with m.If(s.done_any & s.running):
            m.d.sync += self.completed.eq(self.completed + sum(
                d.valid for d in self.unit_done))

        s.running_task = Array(Signal(32, name=f"running_task{k}")
                               for k in range(self.n_units))
        s.unit_err_task = Signal(32)
        for k, done in enumerate(self.unit_done):
            with m.If(done.valid & done.payload.error):
                m.d.comb += s.unit_err_task.eq(s.running_task[k])

    def _error_latch(self, m, s):
        """The error of this cycle: cause and task (:meth:`_fail`), latched by
        :meth:`_errors`."""
        s.err = Signal()
        s.err_cause = Signal(8)
        s.err_task = Signal(32)
        m.d.comb += s.err_task.eq(s.task_index)    # decode errors: the task being decoded
        # ``error_task`` of the error (0 without one): the task of this cycle's error is
        # taken in every running cycle (:meth:`_errors`), so that the OR of every check
        # (``err``) is the enable of no register but the state's; shown once ``cause``
        # says there was an error, which it does from the cycle after the error as before
        s.err_task_q = Signal(32)
        m.d.comb += self.error_task.eq(Mux(self.cause != Cause.NONE, s.err_task_q, 0))

    @staticmethod
    def _fail(m, s, cause, task=None):
        m.d.comb += [s.err.eq(1), s.err_cause.eq(cause)]
        if task is not None:
            m.d.comb += s.err_task.eq(task)

    def _slot_registers(self, m, s):
        """The issue slot: one decoded task, its region check and its issue."""
        # region check of the slot's task
        s.src_end = Signal(s.aw + 20)
        s.dst_end = Signal(s.aw + 20)

        s.issue = Signal()
        m.d.comb += self.issue.eq(s.issue)
        s.slot_valid = Signal()
        s.slot_load = Signal()
        s.slot_unit = Signal(range(self.n_units))
        s.slot_wait = Signal(32)
        s.slot_signal = Signal(32)
        s.slot_cmd = Signal(unit_command_layout(s.aw))
        s.slot_is_nmu = Signal()
        s.slot_entry = Signal(s.aw)
        if s.cfg.n_cstl:
            s.slot_is_cstl = Signal()
            s.slot_has_table = Signal()
            s.slot_elt_entry = Signal()
        s.slot_checked = Signal()
        s.slot_dim = Signal(range(5))
        s.slot_index = Signal(32)
        s.finished = Signal()
        s.refused = Signal(self.n_units)   # per unit: its start not taken in the cycle before
        s.refused_task = Signal(32)

    def _errors(self, m, s):
        """End of every running state: the errors any state can meet, then stop."""
        with m.If(s.unit_error):
            self._fail(m, s, Cause.UNIT_ERROR, s.unit_err_task)
        with m.Elif(self.fetch_error):
            self._fail(m, s, Cause.AXI_ERROR)
        with m.Elif(s.watchdog_fired):
            # the task waiting in the issue slot, if any
            self._fail(m, s, Cause.WATCHDOG, Mux(s.slot_valid, s.slot_index, s.task_index))
        with m.Elif(self.entry_error):
            self._fail(m, s, Cause.BAD_ENTRY, s.running_task[self.nmu_index or 0])
        with m.Elif(s.refused.any()):
            self._fail(m, s, Cause.START_REFUSED, s.refused_task)
        # in a running state ``cause`` is NONE, and ``err_cause`` is NONE but in a cycle
        # with an error: loaded in every cycle, it changes exactly when the error stops
        # the run, as under an enable ``err`` (which reaches the state register alone)
        m.d.sync += [self.cause.eq(s.err_cause), s.err_task_q.eq(s.err_task)]
        with m.If(s.err):
            m.next = "ERROR"

    def _watchdog(self, m, take, issue, done_any, append):
        """``fired`` once ``watchdog`` cycles in a row moved nothing (0: never).

        What moved is gathered across the SEQ and the units, so it goes into one register
        (``moved_r``, this cycle's ``moved`` seen the next) and the counter counts from
        that: ``quiet_before`` is the quiet count of the cycle before, and this cycle's
        count is 0 after a move, else ``quiet_before + 1``. ``fired`` compares
        ``quiet_before`` with ``watchdog - 1`` (a register), so it fires in the same cycle
        as a counter reset by ``moved`` itself would.
        """
        moved = (take != 0) | issue | done_any | append | self.progress | self.start
        moved_r = Signal(init=1)           # the count is 0 out of reset, as after a move
        quiet_before = Signal(32)
        limit_m1 = Signal(32)
        on = Signal()
        m.d.sync += [moved_r.eq(moved), limit_m1.eq(self.watchdog - 1),
                     on.eq(self.watchdog != 0)]
        with m.If(moved_r):
            m.d.sync += quiet_before.eq(0)
        with m.Else():
            m.d.sync += quiet_before.eq(quiet_before + 1)
        fired = Signal()
        m.d.comb += fired.eq(on & ~moved_r & (quiet_before >= limit_m1))
        return fired

    # ---------------- states of the decode FSM -------------------------------------------

    def _idle(self, m, s):
        """IDLE: start a run at ``base`` once quiescent; status DONE / ERROR of the last."""
        lw, W = s.lw, s.W
        m.d.comb += s.running.eq(0)
        quiet = (s.inflight == 0) & (s.unit_busy == 0)
        with m.If(self.start & quiet):
            first_after = (self.base >> lw) + (HEADER.size + W - 1) // W
            m.d.sync += [s.base.eq(self.base), s.fetch_word.eq(self.base >> lw),
                         s.end_word.eq(first_after), s.header_end.eq(first_after),
                         s.jump_pending.eq(0),
                         s.step.eq(0), s.buf.eq(0), s.count.eq(0), s.task_index.eq(0),
                         self.issued.eq(0), self.completed.eq(0), s.tokens.eq(0),
                         self.cause.eq(Cause.NONE), s.err_task_q.eq(0),
                         s.finished.eq(0), s.slot_valid.eq(0)]
            # the first task's staging cleared (a failed run may have left values there)
            m.d.sync += s.stage_clear.eq(1)
            with m.If(self.base[:lw] != 0):
                m.d.sync += self.cause.eq(Cause.BAD_HEADER)
                m.next = "ERROR"
            with m.Else():
                m.next = "HEADER"
        with m.If(self.cause != Cause.NONE):
            m.d.comb += self.status.eq(Status.ERROR)
        with m.Elif(s.finished):
            m.d.comb += self.status.eq(Status.DONE)

    def _header(self, m, s):
        """HEADER: the program header in :func:`_header_steps`, one step per cycle."""
        m.d.comb += [s.running.eq(1), self.status.eq(Status.BUSY)]
        with m.Switch(s.step):
            for k, pieces in enumerate(s.steps):
                with m.Case(k):
                    self._header_step(m, s, k, pieces)
                    if k == len(s.steps) - 1:
                        total = sum(p[3] for p in pieces)
                        with m.If((s.count >= total) & ~s.err):
                            m.next = "SKIP"

    def _header_step(self, m, s, k, pieces):
        """Check and store the header fields of step ``k`` (taken together in one cycle).

        Checks are ordered as ``nem.taskformat.decode`` orders them; the first failing one
        gives the cause. A field may use one stored by an earlier field of the same step.
        """
        W, lw, buf = s.W, s.lw, s.buf
        start = pieces[0][2]
        total = sum(p[3] for p in pieces)
        value = {}
        for name, piece, offset, size in pieces:
            value[name, piece] = buf[8 * (offset - start): 8 * (offset - start + size)]

        def current(name, register):
            return value[name, 0] if (name, 0) in value else register

        checks = []   # (bad, cause) in order
        stores = []
        for name, piece, _, size in pieces:
            v = value[name, piece]
            at = HEADER_STEP * piece
            if name == "magic":
                checks.append((v != int.from_bytes(MAGIC[at: at + size], "little"),
                               Cause.BAD_MAGIC))
            elif name == "major":
                checks.append((v != VERSION[0], Cause.BAD_VERSION))
            elif name == "minor":
                checks.append((v > VERSION[1], Cause.BAD_VERSION))
            elif name in ("header_bytes", "table_offset"):
                checks.append((v != HEADER.size, Cause.BAD_HEADER))
            elif name == "device_hash":
                want = int.from_bytes(self.config.device_hash[at: at + size], "little")
                checks.append((v != want, Cause.BAD_DEVICE))
            elif name == "task_count":
                # task_index is 0 here (START set it; no task is handed over before the
                # header ends), so the program is at its end at once if it has no task
                stores += [s.ntasks.eq(v), s.at_end.eq(v == 0)]
            elif name == "buffer_count":
                # shifted adds and subtracts, not a multiplier on the FPGA
                stores.append(s.stream_want.eq(
                    HEADER.size + constant_product(v, BUFFER_ENTRY.size)))
            elif name == "stream_offset":
                checks.append((v != s.stream_want, Cause.BAD_HEADER))
                stores.append(s.stream_off.eq(v))
                stream_at = v
            elif name == "stream_bytes":
                end = s.base + current("stream_offset", s.stream_off) + v
                stores += [*self._stream_left(s, v), s.stream_total.eq(v),
                           s.end_word.eq((end + W - 1) >> lw)]
            elif name == "data_bytes":
                stores.append(s.data_bytes.eq(v))
        with m.If(s.count >= total):
            # taken whether or not a check fails (see ``_byte_window``)
            m.d.comb += s.take.eq(total)
            for n, (bad, cause) in enumerate(checks):
                with (m.If if n == 0 else m.Elif)(bad):
                    self._fail(m, s, cause)
            with (m.Else() if checks else m.If(1)):
                m.d.sync += stores
                if k < len(s.steps) - 1:
                    m.d.sync += s.step.eq(k + 1)
                if any(p[0] == "stream_offset" for p in pieces):
                    # The buffer table is not needed: when the task stream starts in a word
                    # after the header's last one, the fetcher jumps there, and the bytes to
                    # skip are the rest of the header's last word and the task stream's
                    # offset inside its first word.
                    header_words = (HEADER.size + W - 1) // W
                    with m.If((stream_at >> lw) >= header_words):
                        m.d.sync += [s.jump_pending.eq(1),
                                     s.jump_to.eq((s.base >> lw) + (stream_at >> lw)),
                                     s.skip_left.eq(header_words * W - HEADER.size
                                                    + stream_at[:lw])]
                    with m.Else():
                        m.d.sync += s.skip_left.eq(stream_at - HEADER.size)

    def _skip(self, m, s):
        """SKIP: the fetched bytes between the header and the task stream."""
        m.d.comb += [s.running.eq(1), self.status.eq(Status.BUSY)]
        with m.If(s.skip_left == 0):
            m.next = "TASK"
        with m.Else():
            n = Mux(s.skip_left < s.count, s.skip_left, s.count)
            m.d.comb += s.take.eq(n)
            m.d.sync += s.skip_left.eq(s.skip_left - n)

    @staticmethod
    def _store_count(count, at_least, value=None, *, minus=None):
        """Statements storing ``value`` (or ``count - minus``, ``minus`` a constant no
        larger than ``count``) into the register ``count`` and its threshold flags
        ``at_least`` (``{t: "count >= t"}``). A flag after a subtraction compares the
        current count with ``t + minus``, beside the subtraction rather than after it."""
        if minus is None:
            return [count.eq(value), *(f.eq(value >= t) for t, f in at_least.items())]
        return [count.eq(count - minus),
                *(f.eq(count >= t + minus) for t, f in at_least.items())]

    def _stream_left(self, s, value=None, *, minus=None):
        """:meth:`_store_count` of ``stream_left``."""
        return self._store_count(s.stream_left, s.stream_at_least, value, minus=minus)

    def _writes_left(self, s, value=None, *, minus=None):
        """:meth:`_store_count` of ``writes_left``."""
        return self._store_count(s.writes_left, s.writes_at_least, value, minus=minus)

    def _task_header(self, m, s):
        """TASK: check a task header (unit, engine, token masks); a compute task's header
        goes on to HOLD. The staging registers are cleared before (:meth:`_stage_writes`)."""
        cfg, T = s.cfg, s.T
        m.d.comb += [s.running.eq(1), self.status.eq(Status.BUSY)]
        with m.If(s.at_end):
            with m.If(s.stream_at_least[1]):
                self._fail(m, s, Cause.BAD_HEADER)       # bytes after the last task
            with m.Else():
                m.next = "FINISH"
        with m.Elif(~s.stream_at_least[TASK_HEADER.size]):
            self._fail(m, s, Cause.BAD_HEADER)           # stream ends inside a record
        with m.Elif(s.count >= TASK_HEADER.size):
            unit = s.field(TASK_HEADER, "unit")
            inst = s.field(TASK_HEADER, "instance")
            eng = s.field(TASK_HEADER, "engine")
            wait = s.field(TASK_HEADER, "wait")
            signal = s.field(TASK_HEADER, "signal")
            is_dma = unit == Unit.DMA
            is_sdma = unit == Unit.SDMA
            is_nmu = Const(0) if self.nmu_index is None else \
                (unit == Unit.NMU) & (inst < cfg.n_nmu)
            is_cstl = Const(0) if self.cstl_index is None else \
                (unit == Unit.CSTL) & (inst < cfg.n_cstl)
            # taken whether or not a check fails (see ``_byte_window``), and whether or
            # not the unit's shadow registers are free: that waits in HOLD, from registers
            m.d.comb += s.take.eq(TASK_HEADER.size)
            with m.If(~(is_dma & (inst < cfg.n_dma)) & ~(is_sdma & (inst < cfg.n_sdma))
                      & ~is_nmu & ~is_cstl):
                self._fail(m, s, Cause.BAD_UNIT)
            with m.Elif(eng != 0):
                self._fail(m, s, Cause.BAD_UNIT)
            with m.Elif(((wait | signal) >> T) != 0 if T < 32 else Const(0)):
                self._fail(m, s, Cause.BAD_TOKEN)
            with m.Else():
                unit_index = Mux(is_sdma, cfg.n_dma + inst, inst)
                if self.nmu_index is not None:
                    unit_index = Mux(is_nmu, self.nmu_index, unit_index)
                if self.cstl_index is not None:
                    unit_index = Mux(is_cstl, self.cstl_index + inst, unit_index)
                    m.d.sync += [s.cur_is_cstl.eq(is_cstl), s.cur_inst.eq(inst),
                                 s.cur_table.eq(0), *self._table_flags(s, 0),
                                 s.cur_table_op.eq(0), s.cur_elt_op.eq(0)]
                m.d.sync += [s.cur_unit.eq(unit_index), s.cur_is_nmu.eq(is_nmu),
                             s.cur_requant.eq(0), *self._requant_flags(s, 0),
                             s.cur_is_sdma.eq(is_sdma), s.cur_wait.eq(wait),
                             s.cur_signal.eq(signal),
                             *self._writes_left(s, s.field(TASK_HEADER, "nwrites")),
                             *self._stream_left(s, minus=TASK_HEADER.size)]
                with m.If(is_nmu | is_cstl):
                    m.next = "HOLD"
                with m.Else():
                    m.next = "WRITES"

    def _hold(self, m, s):
        """HOLD: a compute task's header waits while its unit's shadow registers still
        hold the task in the issue slot; then they are cleared (a pulse) for its writes."""
        m.d.comb += [s.running.eq(1), self.status.eq(Status.BUSY)]
        held = s.cur_is_nmu & s.slot_valid & s.slot_is_nmu
        if self.cstl_index is not None:
            held = held | (s.cur_is_cstl & s.slot_valid & s.slot_is_cstl &
                           (s.slot_unit == s.cur_unit))
        with m.If(~held):
            m.d.comb += self.nmu_clear.eq(s.cur_is_nmu)
            if self.cstl_index is not None:
                for k in range(s.cfg.n_cstl):
                    m.d.comb += self.cstl_clear[k].eq(s.cur_is_cstl & (s.cur_inst == k))
            m.next = "WRITES"

    def _writes(self, m, s):
        """WRITES: register writes into the staging registers (up to ``K`` a cycle) or,
        for an NMU task, one a cycle into the NMU's shadow registers."""
        K, indices, values = s.K, s.indices, s.values
        m.d.comb += [s.running.eq(1), self.status.eq(Status.BUSY)]
        with m.If(~s.writes_at_least[1]):
            m.next = "HAND"
        with m.Elif(~s.stream_at_least[WRITE.size]):
            self._fail(m, s, Cause.BAD_HEADER)
        with m.Elif(s.cur_is_nmu):
            # one write per cycle straight into the NMU's shadow registers
            with m.If(s.count >= WRITE.size):
                m.d.comb += s.take.eq(WRITE.size)
                with m.If(indices[0] >= len(s.nmu_regs)):
                    self._fail(m, s, Cause.BAD_REGISTER)
                with m.Else():
                    m.d.comb += self.nmu_write.valid.eq(1)
                    m.d.sync += [*self._writes_left(s, minus=1),
                                 *self._stream_left(s, minus=WRITE.size)]
                    with m.If(indices[0] == s.requant_index):
                        m.d.sync += [s.cur_requant.eq(values[0]),
                                     *self._requant_flags(s, values[0])]
        if self.cstl_index is not None:
            with m.Elif(s.cur_is_cstl):
                self._cstl_write(m, s)
        # as many writes (up to K) as the window holds; in order, so a later write to
        # the same register wins
        for n in range(K, 0, -1):
            nbytes = n * WRITE.size
            cond = (s.count >= nbytes) & s.stream_at_least[nbytes]
            if n > 1:
                cond = cond & s.writes_at_least[n]
            with m.Elif(cond):
                m.d.comb += s.take.eq(nbytes)
                # staged (:meth:`_stage_writes`) whether or not an index is in range (the
                # index checks stay off the staging): a bad index ends the run in ERROR,
                # and the next START clears the staging registers
                m.d.sync += [s.stage_hit[j][k].eq(indices[j] == k)
                             for j in range(n) for k in range(len(s.reg_names))]
                self._count_flags(m, s, n)
                bad = Cat(*[indices[j] >= len(s.reg_names) for j in range(n)]).any()
                with m.If(bad):
                    self._fail(m, s, Cause.BAD_REGISTER)
                with m.Else():
                    m.d.sync += [*self._writes_left(s, minus=n),
                                 *self._stream_left(s, minus=nbytes)]

    def _hand(self, m, s):
        """HAND: the checks that need the full registers, then hand the task to the issue
        slot as soon as it is free (or frees this cycle) and decode the next one."""
        reg, slot_cmd = s.reg, s.slot_cmd
        m.d.comb += [s.running.eq(1), self.status.eq(Status.BUSY)]
        counts = [reg[f"COUNT{d}"] for d in range(4)]
        sl, dl = reg["SRC_LEVEL"], reg["DST_LEVEL"]
        on_chip = [level_code("L1"), level_code("L2")]
        dma_ok = ((sl == on_chip[0]) | (sl == on_chip[1])) & \
            ((dl == on_chip[0]) | (dl == on_chip[1]))
        ddr, l2 = level_code("DDR"), level_code("L2")
        sdma_ok = ((sl == ddr) & (dl == l2)) | ((sl == l2) & (dl == ddr))
        big, zero = s.count_big.any(), s.count_zero.any()
        # a copy task's command loads into the slot whenever its hand-over finds the slot
        # free, whatever the checks below say: a failed check stops the run with the slot
        # not valid (nothing reads the command then: the region check and the issue wait
        # on ``slot_valid``), so the checks' chain reaches ``slot_valid`` and the state,
        # not the ~200 enables of the command (the board's worst path at 2e6d1f8, seed 2:
        # the staged ``SRC_LEVEL`` -> the level checks -> the command's enables)
        is_copy = ~s.cur_is_nmu
        if self.cstl_index is not None:
            is_copy = is_copy & ~s.cur_is_cstl
        with m.If(is_copy & (~s.slot_valid | s.issue)):
            m.d.sync += [slot_cmd.copy.src.eq(reg["SRC_LO"]),
                         slot_cmd.copy.dst.eq(reg["DST_LO"]),
                         slot_cmd.src_level.eq(sl), slot_cmd.dst_level.eq(dl)]
            for d in range(4):
                m.d.sync += slot_cmd.copy.count[d].eq(counts[d])
            for d in range(3):
                m.d.sync += [slot_cmd.copy.src_stride[d].eq(reg[f"SRC_STRIDE{d + 1}"]),
                             slot_cmd.copy.dst_stride[d].eq(reg[f"DST_STRIDE{d + 1}"])]
        with m.If(s.cur_is_nmu):
            # the NMU checks its own registers; here only where its entry lies
            with m.If(s.requant_bad_nmu):
                self._fail(m, s, Cause.BAD_ENTRY)
            with m.Elif(~s.slot_valid | s.issue):
                m.d.comb += s.slot_load.eq(1)
                m.d.sync += [s.slot_valid.eq(1), s.slot_checked.eq(1), s.slot_is_nmu.eq(1),
                             *self._not_cstl(s),
                             s.slot_entry.eq(s.data_base + s.cur_requant),
                             s.slot_index.eq(s.task_index), s.slot_unit.eq(s.cur_unit),
                             s.slot_wait.eq(s.cur_wait), s.slot_signal.eq(s.cur_signal),
                             *self._next_task(s)]
                m.next = "TASK"
        if self.cstl_index is not None:
            with m.Elif(s.cur_is_cstl):
                self._cstl_hand(m, s)
        with m.Elif(Mux(s.cur_is_sdma, ~sdma_ok, ~dma_ok)):
            self._fail(m, s, Cause.BAD_LEVEL)
        with m.Elif(big | zero):
            self._fail(m, s, Cause.BAD_VALUE)
        with m.Elif((reg["SRC_HI"] != 0) | (reg["DST_HI"] != 0)):
            self._fail(m, s, Cause.BAD_REGION)
        with m.Elif(~s.slot_valid | s.issue):
            m.d.comb += s.slot_load.eq(1)
            m.d.sync += [s.slot_valid.eq(1), s.slot_checked.eq(0), s.slot_dim.eq(0),
                         s.slot_is_nmu.eq(0), *self._not_cstl(s),
                         s.slot_index.eq(s.task_index), s.slot_unit.eq(s.cur_unit),
                         s.slot_wait.eq(s.cur_wait), s.slot_signal.eq(s.cur_signal),
                         *self._next_task(s)]
            m.next = "TASK"

    @staticmethod
    def _next_task(s):
        """Statements of a hand-over: the task index moves to the next task, and
        ``at_end`` says whether that is past the last one (``task_index + 1`` is at most
        ``ntasks``: TASK decodes no task once ``at_end`` is set)."""
        return [s.task_index.eq(s.task_index + 1), s.at_end.eq(s.task_index + 1 == s.ntasks)]

    @staticmethod
    def _not_cstl(s):
        """Slot statements of a task that is not a CSTL's."""
        return [s.slot_is_cstl.eq(0)] if s.cfg.n_cstl else []

    def _cstl_write(self, m, s):
        """WRITES of a CSTL task: one a cycle into the CSTL's shadow registers; the opcode
        (does the task read a table?) and the table's offset noted for the hand-over."""
        indices, values = s.indices, s.values
        regs = REGISTER_MAPS[Unit.CSTL]
        with m.If(s.count >= WRITE.size):
            m.d.comb += s.take.eq(WRITE.size)
            with m.If(indices[0] >= len(regs)):
                self._fail(m, s, Cause.BAD_REGISTER)
            with m.Else():
                m.d.comb += self.cstl_write.valid.eq(1)
                m.d.sync += [*self._writes_left(s, minus=1),
                             *self._stream_left(s, minus=WRITE.size)]
                with m.If(indices[0] == regs.index("OPCODE")):
                    m.d.sync += [s.cur_table_op.eq(0), s.cur_elt_op.eq(0)]
                    with m.Switch(values[0]):
                        with m.Case(*reads_table_codes()):
                            m.d.sync += s.cur_table_op.eq(1)
                        with m.Case(*elt_codes()):
                            m.d.sync += s.cur_elt_op.eq(1)
                with m.If(indices[0] == regs.index("REQUANT")):
                    m.d.sync += [s.cur_requant.eq(values[0]),
                                 *self._requant_flags(s, values[0])]
                with m.If(indices[0] == regs.index("TABLE")):
                    m.d.sync += [s.cur_table.eq(values[0]), *self._table_flags(s, values[0])]

    @staticmethod
    def _count_flags(m, s, n):
        """Update the copy counts' flags for the first ``n`` writes of the window, in order
        like the staging registers (a later write to the same count wins)."""
        for j in range(n):
            index, value = s.indices[j], s.values[j]
            for d in range(4):
                with m.If(index == s.reg_names.index(f"COUNT{d}")):
                    m.d.sync += [s.count_zero[d].eq(value == 0),
                                 s.count_big[d].eq(value[COPY_COUNT_BITS:] != 0)]

    @staticmethod
    def _requant_flags(s, v):
        """Statements noting where a requantisation entry at data offset ``v`` lies (the
        NMU's entry and the eltwise entry: ``DATA_ALIGN``-aligned and inside the data
        section)."""
        misaligned = v % DATA_ALIGN != 0
        return [s.requant_bad_nmu.eq(misaligned | (v + REQUANT_ENTRY.size > s.data_bytes)),
                s.requant_bad_elt.eq(misaligned | (v + ELTWISE_ENTRY.size > s.data_bytes))]

    @staticmethod
    def _table_flags(s, v):
        """Statements noting whether ``TABLE`` = ``v`` names a table and whether that
        table is out of place (not ``TABLE_ALIGN``-aligned or not inside the data
        section)."""
        return [s.table_named.eq(v != NO_TABLE),
                s.table_bad.eq((v % TABLE_ALIGN != 0) | (v + TABLE_BYTES > s.data_bytes))]

    def _cstl_hand(self, m, s):
        """HAND of a CSTL task: the CSTL checks its own registers; here only where its
        table lies, for a task that reads one (a table opcode or a pool, ``TABLE`` not
        ``NO_TABLE``: ``TABLE_ALIGN``-aligned and inside the data section, else
        ``BAD_ENTRY``)."""
        table = s.cur_table_op & s.table_named
        with m.If((table & s.table_bad) | (s.cur_elt_op & s.requant_bad_elt)):
            self._fail(m, s, Cause.BAD_ENTRY)
        with m.Elif(~s.slot_valid | s.issue):
            m.d.comb += s.slot_load.eq(1)
            m.d.sync += [s.slot_valid.eq(1), s.slot_checked.eq(1), s.slot_is_nmu.eq(0),
                         s.slot_is_cstl.eq(1), s.slot_has_table.eq(table | s.cur_elt_op),
                         s.slot_elt_entry.eq(s.cur_elt_op),
                         s.slot_entry.eq(s.data_base + Mux(s.cur_elt_op, s.cur_requant,
                                                           s.cur_table)),
                         s.slot_index.eq(s.task_index), s.slot_unit.eq(s.cur_unit),
                         s.slot_wait.eq(s.cur_wait), s.slot_signal.eq(s.cur_signal),
                         *self._next_task(s)]
            m.next = "TASK"

    # ---------------- issue slot ----------------------------------------------------------

    def _region_check(self, m, s):
        """The slot's region, one dimension per cycle: ``end = addr + COUNT0 +
        sum((COUNTk - 1) * STRIDEk)`` on each side must lie inside the side's memory."""
        cfg, aw, W = s.cfg, s.aw, s.W
        cmd = s.slot_cmd.copy
        # dimension d's products are registered in the cycle before they are added (the
        # command does not change while the slot is checked), so that no cycle holds both
        # a multiplication and an addition: ``COUNT(d) - 1`` and the strides of dimension
        # d are chosen in the cycle of dimension d - 1, multiplied into registers (on the
        # ECP5 the MULT18X18D's own, :func:`npu.dsp.registered_product`: a stride in
        # pieces of 17 bits), and added the cycle after
        checking = Signal(name="region_checking")
        m.d.comb += checking.eq(s.slot_valid & ~s.slot_checked & s.running)
        c1 = Signal(16, name="region_c1")
        strides = {side: Signal(aw, name=f"region_{side}_stride") for side in ("src", "dst")}
        with m.Switch(s.slot_dim):
            for d in (0, 1, 2):
                with m.Case(d):
                    m.d.comb += [c1.eq((cmd.count[d + 1] - 1)[:16]),
                                 strides["src"].eq(cmd.src_stride[d]),
                                 strides["dst"].eq(cmd.dst_stride[d])]
        half = 17   # the widest unsigned operand of a MULT18X18D

        def product(side):
            total = 0
            for k, lo in enumerate(range(0, aw, half)):
                p = registered_product(m, c1, strides[side][lo:lo + half], en=checking,
                                       name=f"{side}_prod{k}", platform=s.platform)
                total = total + (p.as_unsigned() << lo)
            return total

        src_prod, dst_prod = product("src"), product("dst")
        # the comparison with the memories' sizes goes into a register and the error
        # follows in the cycle after (a region inside its memories marks the slot checked
        # in the cycle of the comparison, as before: no cycle for a task that passes)
        over = Signal(name="region_over")
        m.d.sync += over.eq(0)
        with m.If(over & s.running):
            self._fail(m, s, Cause.BAD_REGION, s.slot_index)
        with m.If(checking):
            with m.Switch(s.slot_dim):
                for d in (0, 1, 2, 3):
                    with m.Case(d):
                        if d == 0:
                            m.d.sync += [s.src_end.eq(cmd.src + cmd.count[0]),
                                         s.dst_end.eq(cmd.dst + cmd.count[0])]
                        else:
                            m.d.sync += [s.src_end.eq(s.src_end + src_prod),
                                         s.dst_end.eq(s.dst_end + dst_prod)]
                with m.Case(4):
                    sizes = Array([Const(cfg.ddr_bytes, aw + 1),
                                   Const(cfg.l2_depth * W, aw + 1),
                                   Const(cfg.l1_depth * W, aw + 1)])
                    assert [level_code(x) for x in ("DDR", "L2", "L1")] == [0, 1, 2]
                    out = (s.src_end > sizes[s.slot_cmd.src_level]) | \
                        (s.dst_end > sizes[s.slot_cmd.dst_level])
                    m.d.sync += [over.eq(out), s.slot_checked.eq(~out)]
            m.d.sync += s.slot_dim.eq(s.slot_dim + 1)

    def _unit_free(self, m, s):
        """Per unit: free for a task in this cycle. Not busy (a unit is busy from its issue
        to its ``done``, and its start is ready again from the cycle after), and for the NMU
        and the CSTLs their shadow registers' decode settled: ``START_WAIT`` cycles without
        a write or clear to them, counted here from the same strobes by
        :func:`npu.bus.stream.quiet_for` as the unit's ``start_after_decode`` counts them
        (a ``copy``: registers of another form, which yosys does not join with the
        unit's). The units' own
        ``start.ready`` is thus no input of the issue (no path from a unit's state through
        the issue into the slot's enables); a start that is not taken all the same stops
        the run with ``START_REFUSED`` (:meth:`_dispatch`)."""
        settled = []
        for k in range(self.n_units):
            if k == self.nmu_index:
                changed, wait = self.nmu_clear | self.nmu_write.valid, NMU_START_WAIT
            elif self.cstl_index is not None and k >= self.cstl_index:
                i = k - self.cstl_index
                changed = self.cstl_clear[i] | (self.cstl_write.valid & (self.cstl_sel == i))
                wait = CSTL_START_WAIT
            else:
                settled.append(Const(1))
                continue
            settled.append(quiet_for(m, changed, wait, name=f"decode{k}", copy=True))
        free = Signal(self.n_units)
        m.d.comb += free.eq(~s.unit_busy & Cat(*settled))
        return free

    def _dispatch(self, m, s):
        """Issue the slot's task, in stream order, when its wait tokens are set and its
        unit is free (:meth:`_unit_free`): clear its signal tokens, mark the unit busy,
        start it."""
        T = s.T
        # a completion of the cycle before counts (from s.token_set): its tokens are set at
        # this clock edge, which is also when the waiting task issues
        visible = s.tokens | s.token_set
        free = self._unit_free(m, s)
        ready = s.slot_valid & s.slot_checked & s.running & \
            ((s.slot_wait[:T] & ~visible) == 0) & free.bit_select(s.slot_unit, 1)
        m.d.comb += [self.nmu_write.payload.index.eq(s.indices[0]),
                     self.nmu_write.payload.value.eq(s.values[0]),
                     self.nmu_entry.addr.eq(s.slot_entry), self.nmu_entry.limit.eq(s.data_end)]
        if self.cstl_index is not None:
            m.d.comb += [self.cstl_write.payload.index.eq(s.indices[0]),
                         self.cstl_write.payload.value.eq(s.values[0]),
                         self.cstl_sel.eq(s.cur_inst),
                         self.cstl_table.eq(s.slot_entry),
                         self.cstl_has_table.eq(s.slot_has_table),
                         self.cstl_elt_entry.eq(s.slot_elt_entry)]
        for k, port in enumerate(self.unit_start):
            m.d.comb += port.payload.eq(s.slot_cmd)
            with m.If(s.slot_unit == k):
                m.d.comb += port.valid.eq(ready)
                with m.If(ready):
                    m.d.comb += s.issue.eq(1)
                    m.d.sync += [s.pending[k].eq(s.slot_signal[:T]), s.unit_busy[k].eq(1),
                                 s.running_task[k].eq(s.slot_index)]
        # a free unit takes its start: one that does not (an engine fault) stops the run in
        # the cycle after, naming the task, and the unit is not waited for (its ``ready``
        # goes into these registers only)
        m.d.sync += [s.refused.eq(Cat(*[p.valid & ~p.ready for p in self.unit_start])),
                     s.refused_task.eq(s.slot_index)]
        for k in range(self.n_units):
            with m.If(s.refused[k]):
                m.d.sync += s.unit_busy[k].eq(0)
        with m.If(s.issue):
            m.d.comb += s.token_clear.eq(s.slot_signal[:T])
            m.d.sync += self.issued.eq(self.issued + 1)
            with m.If(~s.slot_load):
                m.d.sync += s.slot_valid.eq(0)
        m.d.comb += [self.tokens.eq(visible),
                     self.waiting.eq(s.slot_valid & s.running & ~s.issue),
                     self.issue_unit.eq(s.slot_unit), self.issue_wait.eq(s.slot_wait),
                     self.issue_signal.eq(s.slot_signal)]


class _Shared:
    """What the SEQ's stages share in one elaboration: the geometry derived from the
    configuration and ``nem.taskformat`` here, and the signals each stage adds."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.W = cfg.wbytes
        self.lw = self.W.bit_length() - 1
        self.aw = cfg.addr_width
        self.T = cfg.tokens
        self.steps = _header_steps()
        # register writes decoded per cycle: what a bus word brings, at least two
        self.K = max(2, self.W // WRITE.size)
        max_take = max(TASK_HEADER.size, self.K * WRITE.size, 4)   # largest field(s) a cycle
        self.C = max_take + self.W - 1                              # window capacity in bytes

    def field(self, record, name, at=0):
        """Field ``name`` of a ``nem.records.Record`` that starts at window byte ``at``."""
        f = record[name]
        return self.buf[8 * at + f.bit_offset: 8 * at + f.bit_offset + f.bits]
