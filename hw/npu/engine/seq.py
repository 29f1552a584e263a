"""The NEM engine's sequencer (SEQ): fetch, decode and issue the task binary, with tokens.

The binary's layout comes from :mod:`nem.taskformat` only (``HEADER``, ``TASK_HEADER``,
``WRITE``, ``BUFFER_ENTRY``, ``MAGIC``, ``VERSION``, ``Unit``, ``REGISTER_MAPS``): every
offset and width below is derived from those structs at elaboration time.

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
    ``SEQ.max_active_tokens``. The staging registers are cleared (an unwritten register
    is 0, as in the executor's front-end).
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
accepted, also after an error). Any check failing ends in status ERROR with a cause
(:class:`Cause`) and the index of the failing task (the one being decoded, the one in
the issue slot, or the one the failing unit runs; for ``AXI_ERROR`` the one being
decoded). The cause is visible at once;
the status stays BUSY until the units have finished the tasks already issued and the
fetches in flight have arrived, so that ERROR (like DONE) means quiescent. A watchdog ends
a run that makes no progress (no byte decoded, no task issued or completed, no unit moving data) for
``watchdog`` cycles in status ERROR, cause ``WATCHDOG``.
"""

from __future__ import annotations

import operator
import re
import struct
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
    HEADER,
    HEADER_FIELDS,
    MAGIC,
    REGISTER_MAPS,
    REQUANT_ENTRY,
    TASK_FIELDS,
    TASK_HEADER,
    VERSION,
    WRITE,
    WRITE_FIELDS,
    Unit,
)
from npu.bus.axi import command_layout
from npu.bus.ports import fetch_into
from npu.engine.copy_units import level_code, unit_command_layout
from npu.engine.entry_fetch import entry_request_layout
from npu.nmu.regs import write_layout

__all__ = [
    "Cause",
    "Sequencer",
    "Status",
    "copy_register_names",
    "struct_fields",
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


def struct_fields(st: struct.Struct, names) -> dict[str, tuple[int, int]]:
    """``{name: (byte offset, byte size)}`` of a little-endian ``struct.Struct``'s items."""
    if not st.format.startswith("<"):
        raise ValueError(f"struct format {st.format!r} is not little-endian without padding")
    sizes = []
    for count, code in re.findall(r"(\d*)([a-zA-Z?])", st.format[1:]):
        if code == "s":
            sizes.append(int(count or 1))
        else:
            sizes += [struct.calcsize("<" + code)] * int(count or 1)
    if len(sizes) != len(names):
        raise ValueError(f"struct {st.format!r} has {len(sizes)} items, names {len(names)}")
    out, offset = {}, 0
    for name, size in zip(names, sizes, strict=True):
        out[name] = (offset, size)
        offset += size
    assert offset == st.size
    return out


def _header_steps():
    """The header in steps of at most 8 bytes: whole fields packed together, a longer
    field (the device hash) in 8-byte pieces. Each step is a list of
    ``(field, piece, offset, size)``."""
    pieces = []
    for name, (offset, size) in struct_fields(HEADER, HEADER_FIELDS).items():
        for piece, at in enumerate(range(0, size, HEADER_STEP)):
            pieces.append((name, piece, offset + at, min(HEADER_STEP, size - at)))
    steps, current = [], []
    for p in pieces:
        if current and sum(q[3] for q in current) + p[3] > HEADER_STEP:
            steps.append(current)
            current = []
        current.append(p)
    steps.append(current)
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
        A unit moved data this cycle (from the engine).
    fetch_cmd, fetch_data : AXI reader client streams
    fetch_error : In(1)
        Sticky read-response error of the AXI reader.
    unit_start, unit_done : arrays, one per unit (DMA instances first, then sDMA, then
        the NMU if the engine has one; the NMU ignores the start payload)
    nmu_clear, nmu_write : Out
        The NMU's shadow registers: cleared at an NMU task's header, then its register
        writes one per cycle (the NMU's ``write`` is always ready).
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
        completions in this cycle already set.
    issue, issue_unit, issue_wait, issue_signal : Out
        High for the cycle a task is issued, with its unit index and token masks (for
        testbench assertions: a task never issues before its wait tokens are set).
    waiting : Out(1)
        The SEQ holds a decoded task (waiting for tokens or for its unit).
    """

    def __init__(self, config):
        self.config = config
        self.n_units = config.n_dma + config.n_sdma + config.n_nmu
        #: unit index of the NMU (after the DMAs and sDMAs), if the engine has one
        self.nmu_index = config.n_dma + config.n_sdma if config.n_nmu else None
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
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        W = cfg.wbytes
        lw = W.bit_length() - 1
        aw = cfg.addr_width
        T = cfg.tokens
        task_fields = struct_fields(TASK_HEADER, TASK_FIELDS)
        write_fields = struct_fields(WRITE, WRITE_FIELDS)
        steps = _header_steps()
        # register writes decoded per cycle: what a bus word brings, at least two
        K = max(2, W // WRITE.size)
        max_take = max(TASK_HEADER.size, K * WRITE.size, 4)   # largest field(s) per cycle
        C = max_take + W - 1                      # window capacity in bytes

        running = Signal()
        # ---------------- fetcher -------------------------------------------------------
        m.submodules.fifo = fifo = SyncFIFOBuffered(width=cfg.data_width, depth=FETCH_DEPTH)
        fetch_word = Signal(aw - lw)               # next word to request
        end_word = Signal(aw - lw + 1)             # words before this one are wanted
        header_end = Signal(aw - lw + 1)           # first word after the program header
        jump_pending = Signal()                    # skip to jump_to after the header
        jump_to = Signal(aw - lw)
        limit = Signal(aw - lw + 1)
        m.d.comb += limit.eq(Mux(jump_pending, header_end, end_word))
        cmd_fire, piece, inflight = fetch_into(
            m, fifo, FETCH_DEPTH, self.fetch_cmd, self.fetch_data, enable=running,
            word=fetch_word, end=limit, lw=lw, max_beats=FETCH_PIECE)
        with m.If(cmd_fire):
            m.d.sync += fetch_word.eq(fetch_word + piece)
        with m.Elif(jump_pending & (fetch_word == header_end)):
            m.d.sync += [fetch_word.eq(jump_to), jump_pending.eq(0)]

        # ---------------- byte window ---------------------------------------------------
        buf = Signal(8 * C)
        count = Signal(range(C + 1))
        take = Signal(range(C + 1))
        append = Signal()
        m.d.comb += append.eq(running & fifo.r_rdy & (count + W <= C))
        m.d.comb += fifo.r_en.eq(append | ~running)      # drain when not running
        rest = Signal(range(C + 1))
        m.d.comb += rest.eq(count - take)
        incoming = Signal(8 * C)
        m.d.comb += incoming.eq(Mux(append, fifo.r_data << (rest * 8), 0))
        m.d.sync += [buf.eq((buf >> (take * 8)) | incoming),
                     count.eq(rest + Mux(append, W, 0))]

        def field(fields, name, at=0):
            offset, size = fields[name]
            return buf[8 * (at + offset): 8 * (at + offset + size)]

        # ---------------- state ---------------------------------------------------------
        ntasks = Signal(32)
        nbufs = Signal(32)
        stream_off = Signal(32)
        stream_left = Signal(33)
        stream_total = Signal(32)
        data_bytes = Signal(32)
        skip_left = Signal(32)
        task_index = Signal(32)
        step = Signal(range(len(steps)))
        base = Signal(aw)

        reg_names = copy_register_names()
        staging = Array(Signal(32, name=f"stage_{n}") for n in reg_names)
        reg = {n: staging[k] for k, n in enumerate(reg_names)}
        cur_unit = Signal(range(self.n_units))
        cur_is_sdma = Signal()
        cur_is_nmu = Signal()
        cur_requant = Signal(32)
        nmu_regs = REGISTER_MAPS[Unit.NMU]
        requant_index = nmu_regs.index("REQUANT")
        # the data section: after the task stream, at a multiple of 8 (nem.taskformat)
        data_base = Signal(aw + 2)
        stream_end = stream_off + stream_total
        m.d.comb += data_base.eq(base + ((stream_end + DATA_ALIGN - 1) & ~(DATA_ALIGN - 1)))
        data_end = data_base + data_bytes
        cur_wait = Signal(32)
        cur_signal = Signal(32)
        writes_left = Signal(8)

        tokens = Signal(T)
        pending = Array(Signal(T, name=f"pending{k}") for k in range(self.n_units))
        unit_busy = Signal(self.n_units)
        token_set = Signal(T)
        token_clear = Signal(T)
        done_any = Signal()
        unit_error = Signal()
        sets = []
        for k, done in enumerate(self.unit_done):
            m.d.comb += done.ready.eq(1)
            sets.append(Mux(done.valid, pending[k], 0))
            with m.If(done.valid):
                m.d.sync += unit_busy[k].eq(0)
        m.d.comb += [token_set.eq(reduce(operator.or_, sets)),
                     done_any.eq(Cat(*[d.valid for d in self.unit_done]).any()),
                     unit_error.eq(Cat(*[d.valid & d.payload.error
                                         for d in self.unit_done]).any())]
        # completions happen before an issue in the same cycle (the issue already sees their
        # tokens), so a task that waits on a token and signals it again clears it
        m.d.sync += tokens.eq((tokens | token_set) & ~token_clear)
        with m.If(done_any & running):
            m.d.sync += self.completed.eq(self.completed + sum(
                d.valid for d in self.unit_done))

        # the task each unit runs (for ERROR_TASK when it reports an error)
        running_task = Array(Signal(32, name=f"running_task{k}") for k in range(self.n_units))
        unit_err_task = Signal(32)
        for k, done in enumerate(self.unit_done):
            with m.If(done.valid & done.payload.error):
                m.d.comb += unit_err_task.eq(running_task[k])

        # error helper: latch the cause and its task (first one wins) and stop
        err = Signal()
        err_cause = Signal(8)
        err_task = Signal(32)
        m.d.comb += err_task.eq(task_index)    # decode errors: the task being decoded

        def fail(cause, task=None):
            m.d.comb += [err.eq(1), err_cause.eq(cause)]
            if task is not None:
                m.d.comb += err_task.eq(task)

        # region check of the slot's task
        src_end = Signal(aw + 20)
        dst_end = Signal(aw + 20)

        issue = Signal()
        m.d.comb += self.issue.eq(issue)
        slot_valid = Signal()
        slot_load = Signal()
        slot_unit = Signal(range(self.n_units))
        slot_wait = Signal(32)
        slot_signal = Signal(32)
        slot_cmd = Signal(unit_command_layout(aw))
        slot_is_nmu = Signal()
        slot_entry = Signal(aw)
        slot_checked = Signal()
        slot_dim = Signal(range(5))
        slot_index = Signal(32)
        finished = Signal()
        watchdog_fired = self._watchdog(m, take, issue, done_any, append)

        def errors():
            """End of every running state: the errors any state can meet, then stop."""
            with m.If(unit_error):
                fail(Cause.UNIT_ERROR, unit_err_task)
            with m.Elif(self.fetch_error):
                fail(Cause.AXI_ERROR)
            with m.Elif(watchdog_fired):
                # the task waiting in the issue slot, if any
                fail(Cause.WATCHDOG, Mux(slot_valid, slot_index, task_index))
            with m.Elif(self.entry_error):
                fail(Cause.BAD_ENTRY, running_task[self.nmu_index or 0])
            with m.If(err):
                m.d.sync += [self.cause.eq(err_cause), self.error_task.eq(err_task)]
                m.next = "ERROR"

        # the register writes at the front of the window (WRITES; the NMU's come one by one)
        indices = [field(write_fields, "index", at=j * WRITE.size) for j in range(K)]
        values = [field(write_fields, "value", at=j * WRITE.size) for j in range(K)]

        with m.FSM(name="seq"):
            with m.State("IDLE"):
                m.d.comb += running.eq(0)
                quiet = (inflight == 0) & (unit_busy == 0)
                with m.If(self.start & quiet):
                    first_after = (self.base >> lw) + (HEADER.size + W - 1) // W
                    m.d.sync += [base.eq(self.base), fetch_word.eq(self.base >> lw),
                                 end_word.eq(first_after), header_end.eq(first_after),
                                 jump_pending.eq(0),
                                 step.eq(0), buf.eq(0), count.eq(0), task_index.eq(0),
                                 self.issued.eq(0), self.completed.eq(0), tokens.eq(0),
                                 self.cause.eq(Cause.NONE), self.error_task.eq(0),
                                 finished.eq(0), slot_valid.eq(0)]
                    with m.If(self.base[:lw] != 0):
                        m.d.sync += self.cause.eq(Cause.BAD_HEADER)
                        m.next = "ERROR"
                    with m.Else():
                        m.next = "HEADER"
                with m.If(self.cause != Cause.NONE):
                    m.d.comb += self.status.eq(Status.ERROR)
                with m.Elif(finished):
                    m.d.comb += self.status.eq(Status.DONE)

            with m.State("HEADER"):
                m.d.comb += [running.eq(1), self.status.eq(Status.BUSY)]
                with m.Switch(step):
                    for k, pieces in enumerate(steps):
                        with m.Case(k):
                            self._header_step(m, k, pieces, buf, count, take, step, steps,
                                              fail, ntasks, nbufs, stream_off, stream_left,
                                              stream_total, data_bytes, skip_left, base,
                                              end_word, W, lw, jump_pending, jump_to)
                            if k == len(steps) - 1:
                                total = sum(p[3] for p in pieces)
                                with m.If((count >= total) & ~err):
                                    m.next = "SKIP"
                errors()

            with m.State("SKIP"):
                m.d.comb += [running.eq(1), self.status.eq(Status.BUSY)]
                with m.If(skip_left == 0):
                    m.next = "TASK"
                with m.Else():
                    n = Mux(skip_left < count, skip_left, count)
                    m.d.comb += take.eq(n)
                    m.d.sync += skip_left.eq(skip_left - n)
                errors()

            with m.State("TASK"):
                m.d.comb += [running.eq(1), self.status.eq(Status.BUSY)]
                with m.If(task_index == ntasks):
                    with m.If(stream_left != 0):
                        fail(Cause.BAD_HEADER)       # bytes after the last task
                    with m.Else():
                        m.next = "FINISH"
                with m.Elif(stream_left < TASK_HEADER.size):
                    fail(Cause.BAD_HEADER)           # stream ends inside a record
                with m.Elif(count >= TASK_HEADER.size):
                    unit = field(task_fields, "unit")
                    inst = field(task_fields, "instance")
                    eng = field(task_fields, "engine")
                    wait = field(task_fields, "wait")
                    signal = field(task_fields, "signal")
                    is_dma = unit == Unit.DMA
                    is_sdma = unit == Unit.SDMA
                    is_nmu = Const(0) if self.nmu_index is None else \
                        (unit == Unit.NMU) & (inst < cfg.n_nmu)
                    with m.If(~(is_dma & (inst < cfg.n_dma)) & ~(is_sdma & (inst < cfg.n_sdma))
                              & ~is_nmu):
                        fail(Cause.BAD_UNIT)
                    with m.Elif(eng != 0):
                        fail(Cause.BAD_UNIT)
                    with m.Elif(((wait | signal) >> T) != 0 if T < 32 else Const(0)):
                        fail(Cause.BAD_TOKEN)
                    with m.Elif(is_nmu & slot_valid & slot_is_nmu):
                        pass   # the NMU's shadow registers still hold the waiting task
                    with m.Else():
                        m.d.comb += [take.eq(TASK_HEADER.size), self.nmu_clear.eq(is_nmu)]
                        unit_index = Mux(is_sdma, cfg.n_dma + inst, inst)
                        if self.nmu_index is not None:
                            unit_index = Mux(is_nmu, self.nmu_index, unit_index)
                        m.d.sync += [cur_unit.eq(unit_index), cur_is_nmu.eq(is_nmu),
                                     cur_requant.eq(0),
                                     cur_is_sdma.eq(is_sdma), cur_wait.eq(wait),
                                     cur_signal.eq(signal),
                                     writes_left.eq(field(task_fields, "nwrites")),
                                     stream_left.eq(stream_left - TASK_HEADER.size)]
                        m.d.sync += [s.eq(0) for s in staging]
                        m.next = "WRITES"
                errors()

            with m.State("WRITES"):
                m.d.comb += [running.eq(1), self.status.eq(Status.BUSY)]
                with m.If(writes_left == 0):
                    m.next = "HAND"
                with m.Elif(stream_left < WRITE.size):
                    fail(Cause.BAD_HEADER)
                with m.Elif(cur_is_nmu):
                    # one write per cycle straight into the NMU's shadow registers
                    with m.If(count >= WRITE.size):
                        with m.If(indices[0] >= len(nmu_regs)):
                            fail(Cause.BAD_REGISTER)
                        with m.Else():
                            m.d.comb += [take.eq(WRITE.size), self.nmu_write.valid.eq(1)]
                            m.d.sync += [writes_left.eq(writes_left - 1),
                                         stream_left.eq(stream_left - WRITE.size)]
                            with m.If(indices[0] == requant_index):
                                m.d.sync += cur_requant.eq(values[0])
                # as many writes (up to K) as the window holds; in order, so a later write to
                # the same register wins
                for n in range(K, 0, -1):
                    nbytes = n * WRITE.size
                    cond = (count >= nbytes) & (stream_left >= nbytes)
                    if n > 1:
                        cond = cond & (writes_left >= n)
                    with m.Elif(cond):
                        bad = Cat(*[indices[j] >= len(reg_names) for j in range(n)]).any()
                        with m.If(bad):
                            fail(Cause.BAD_REGISTER)
                        with m.Else():
                            m.d.comb += take.eq(nbytes)
                            m.d.sync += [writes_left.eq(writes_left - n),
                                         stream_left.eq(stream_left - nbytes)]
                            m.d.sync += [staging[indices[j]].eq(values[j]) for j in range(n)]
                errors()

            with m.State("HAND"):
                # the checks that need the full registers, then hand the task to the issue
                # slot as soon as it is free (or frees this cycle) and decode the next one
                m.d.comb += [running.eq(1), self.status.eq(Status.BUSY)]
                counts = [reg[f"COUNT{d}"] for d in range(4)]
                sl, dl = reg["SRC_LEVEL"], reg["DST_LEVEL"]
                on_chip = [level_code("L1"), level_code("L2")]
                dma_ok = ((sl == on_chip[0]) | (sl == on_chip[1])) & \
                    ((dl == on_chip[0]) | (dl == on_chip[1]))
                ddr, l2 = level_code("DDR"), level_code("L2")
                sdma_ok = ((sl == ddr) & (dl == l2)) | ((sl == l2) & (dl == ddr))
                big = Cat(*[(c >> COPY_COUNT_BITS) != 0 for c in counts]).any()
                zero = Cat(*[c == 0 for c in counts]).any()
                with m.If(cur_is_nmu):
                    # the NMU checks its own registers; here only where its entry lies
                    with m.If((cur_requant % DATA_ALIGN != 0) |
                              (cur_requant + REQUANT_ENTRY.size > data_bytes)):
                        fail(Cause.BAD_ENTRY)
                    with m.Elif(~slot_valid | issue):
                        m.d.comb += slot_load.eq(1)
                        m.d.sync += [slot_valid.eq(1), slot_checked.eq(1), slot_is_nmu.eq(1),
                                     slot_entry.eq(data_base + cur_requant),
                                     slot_index.eq(task_index), slot_unit.eq(cur_unit),
                                     slot_wait.eq(cur_wait), slot_signal.eq(cur_signal),
                                     task_index.eq(task_index + 1)]
                        m.next = "TASK"
                with m.Elif(Mux(cur_is_sdma, ~sdma_ok, ~dma_ok)):
                    fail(Cause.BAD_LEVEL)
                with m.Elif(big | zero):
                    fail(Cause.BAD_VALUE)
                with m.Elif((reg["SRC_HI"] != 0) | (reg["DST_HI"] != 0)):
                    fail(Cause.BAD_REGION)
                with m.Elif(~slot_valid | issue):
                    m.d.comb += slot_load.eq(1)
                    m.d.sync += [slot_valid.eq(1), slot_checked.eq(0), slot_dim.eq(0),
                                 slot_is_nmu.eq(0),
                                 slot_index.eq(task_index), slot_unit.eq(cur_unit),
                                 slot_wait.eq(cur_wait), slot_signal.eq(cur_signal),
                                 slot_cmd.copy.src.eq(reg["SRC_LO"]),
                                 slot_cmd.copy.dst.eq(reg["DST_LO"]),
                                 slot_cmd.src_level.eq(sl), slot_cmd.dst_level.eq(dl),
                                 task_index.eq(task_index + 1)]
                    for d in range(4):
                        m.d.sync += slot_cmd.copy.count[d].eq(counts[d])
                    for d in range(3):
                        m.d.sync += [slot_cmd.copy.src_stride[d].eq(reg[f"SRC_STRIDE{d + 1}"]),
                                     slot_cmd.copy.dst_stride[d].eq(reg[f"DST_STRIDE{d + 1}"])]
                    m.next = "TASK"
                errors()

            with m.State("FINISH"):
                m.d.comb += [running.eq(1), self.status.eq(Status.BUSY)]
                with m.If(~slot_valid & (unit_busy == 0) & ~done_any & (inflight == 0)):
                    m.d.sync += finished.eq(1)
                    m.next = "IDLE"
                errors()

            with m.State("ERROR"):
                # still draining: units finishing their tasks, fetches in flight
                m.d.comb += [running.eq(0), self.status.eq(Status.BUSY)]
                with m.If((inflight == 0) & (unit_busy == 0)):
                    m.next = "IDLE"

        # Issue slot: one decoded task. First its region is checked, one dimension per
        # cycle: end = addr + COUNT0 + sum((COUNTk - 1) * STRIDEk) on each side must lie
        # inside the side's memory. Then it issues, in stream order, when its wait tokens
        # are set and its unit is free. The decoder goes on with the next task meanwhile.
        cmd = slot_cmd.copy
        with m.If(slot_valid & ~slot_checked & running):
            with m.Switch(slot_dim):
                with m.Case(0):
                    m.d.sync += [src_end.eq(cmd.src + cmd.count[0]),
                                 dst_end.eq(cmd.dst + cmd.count[0])]
                for d in (1, 2, 3):
                    with m.Case(d):
                        c1 = (cmd.count[d] - 1)[:16]
                        m.d.sync += [src_end.eq(src_end + c1 * cmd.src_stride[d - 1]),
                                     dst_end.eq(dst_end + c1 * cmd.dst_stride[d - 1])]
                with m.Case(4):
                    sizes = Array([Const(cfg.ddr_bytes, aw + 1),
                                   Const(cfg.l2_depth * W, aw + 1),
                                   Const(cfg.l1_depth * W, aw + 1)])
                    assert [level_code(x) for x in ("DDR", "L2", "L1")] == [0, 1, 2]
                    with m.If((src_end > sizes[slot_cmd.src_level]) |
                              (dst_end > sizes[slot_cmd.dst_level])):
                        fail(Cause.BAD_REGION, slot_index)
                    with m.Else():
                        m.d.sync += slot_checked.eq(1)
            m.d.sync += slot_dim.eq(slot_dim + 1)
        # a completion in this cycle counts: its tokens are set at this clock edge, which is
        # also when the waiting task issues (the executor starts it at the same time)
        visible = tokens | token_set
        ready = slot_valid & slot_checked & running & ((slot_wait[:T] & ~visible) == 0) & \
            ~unit_busy.bit_select(slot_unit, 1)
        m.d.comb += [self.nmu_write.payload.index.eq(indices[0]),
                     self.nmu_write.payload.value.eq(values[0]),
                     self.nmu_entry.addr.eq(slot_entry), self.nmu_entry.limit.eq(data_end)]
        for k, port in enumerate(self.unit_start):
            m.d.comb += port.payload.eq(slot_cmd)
            with m.If(slot_unit == k):
                m.d.comb += port.valid.eq(ready)
                with m.If(port.valid & port.ready):
                    m.d.comb += issue.eq(1)
                    m.d.sync += [pending[k].eq(slot_signal[:T]), unit_busy[k].eq(1),
                                 running_task[k].eq(slot_index)]
        with m.If(issue):
            m.d.comb += token_clear.eq(slot_signal[:T])
            m.d.sync += self.issued.eq(self.issued + 1)
            with m.If(~slot_load):
                m.d.sync += slot_valid.eq(0)
        m.d.comb += [self.tokens.eq(visible), self.waiting.eq(slot_valid & running & ~issue),
                     self.issue_unit.eq(slot_unit), self.issue_wait.eq(slot_wait),
                     self.issue_signal.eq(slot_signal)]
        return m

    def _watchdog(self, m, take, issue, done_any, append):
        quiet = Signal(32)
        moved = (take != 0) | issue | done_any | append | self.progress
        with m.If(moved):
            m.d.sync += quiet.eq(0)
        with m.Else():
            m.d.sync += quiet.eq(quiet + 1)
        fired = Signal()
        m.d.comb += fired.eq((self.watchdog != 0) & (quiet >= self.watchdog))
        with m.If(self.start):
            m.d.sync += quiet.eq(0)
        return fired

    def _header_step(self, m, k, pieces, buf, count, take, step, steps, fail, ntasks, nbufs,
                     stream_off, stream_left, stream_total, data_bytes, skip_left, base,
                     end_word, W, lw, jump_pending, jump_to):
        """Check and store the header fields of step ``k`` (taken together in one cycle).

        Checks are ordered as ``nem.taskformat.decode`` orders them; the first failing one
        gives the cause. A field may use one stored by an earlier field of the same step.
        """
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
                stores.append(ntasks.eq(v))
            elif name == "buffer_count":
                stores.append(nbufs.eq(v))
            elif name == "stream_offset":
                bufs = current("buffer_count", nbufs)
                checks.append((v != HEADER.size + bufs * BUFFER_ENTRY.size, Cause.BAD_HEADER))
                stores.append(stream_off.eq(v))
                stream_at = v
            elif name == "stream_bytes":
                end = base + current("stream_offset", stream_off) + v
                stores += [stream_left.eq(v), stream_total.eq(v),
                           end_word.eq((end + W - 1) >> lw)]
            elif name == "data_bytes":
                stores.append(data_bytes.eq(v))
        with m.If(count >= total):
            for n, (bad, cause) in enumerate(checks):
                with (m.If if n == 0 else m.Elif)(bad):
                    fail(cause)
            with (m.Else() if checks else m.If(1)):
                m.d.comb += take.eq(total)
                m.d.sync += stores
                if k < len(steps) - 1:
                    m.d.sync += step.eq(k + 1)
                if any(p[0] == "stream_offset" for p in pieces):
                    # The buffer table is not needed: when the task stream starts in a word
                    # after the header's last one, the fetcher jumps there, and the bytes to
                    # skip are the rest of the header's last word and the task stream's
                    # offset inside its first word.
                    header_words = (HEADER.size + W - 1) // W
                    with m.If((stream_at >> lw) >= header_words):
                        m.d.sync += [jump_pending.eq(1),
                                     jump_to.eq((base >> lw) + (stream_at >> lw)),
                                     skip_left.eq(header_words * W - HEADER.size
                                                  + stream_at[:lw])]
                    with m.Else():
                        m.d.sync += skip_left.eq(stream_at - HEADER.size)
