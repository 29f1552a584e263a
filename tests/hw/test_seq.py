"""The SEQ sequencer (``npu.engine.seq``) in the Amaranth simulator against a Python model.

The :class:`~npu.engine.seq.Sequencer` runs alone, on small engine configurations (a 4-byte
word with two DMAs, an sDMA, an NMU and three CSTLs; the same on a 16-byte word; a 16-byte
word with copy units only and 32 tokens) and on the shipped ``small`` device. Its
surroundings are Python models:

* DDR: the task binary at a word-aligned base, served on the fetch command/data streams
  with random delays, one command at a time (as the engine's shared AXI reader does); every
  command is checked (aligned, 1..16 words, only header and task-stream words, none twice,
  every one of them for a complete run); an AXI error is the ``fetch_error`` input rising;
* the units: responders that take the issued commands with random back-pressure, finish
  after random (or fixed) delays, or not at all (a stuck unit), and report done, optionally
  with an error; the NMU's and CSTLs' shadow registers collect the ``clear`` / ``write``
  traffic. Stream payloads are random while not valid.

The programs are built with ``nem.taskformat`` (random copy, NMU and CSTL tasks with random
token masks, register writes in random order, buffer tables that the fetcher jumps over) and
with the binder (``nem.binder.bind``) from small NEM programs. What the SEQ issues is checked
in stream order against ``nem.taskformat.decode`` of the same binary: unit and instance, the
copy command built from the register writes (a later write wins, an unwritten register is
0), the compute units' shadow registers (written only between the task's clear and its
issue), the NMU's requantisation entry and the CSTL's table or eltwise entry address; a task
never issues before its wait tokens are set (the token scoreboard is modelled from the
completions and issues seen, and compared with the ``tokens`` output every cycle), nor to a
busy unit; the issue strobe, ``waiting`` and the counters agree.

Corrupt binaries (header fields, unit types and instances, token masks, register indices,
levels, counts, regions, entries, stream lengths) must end in the cause and failing task
that the SEQ's docstring rules give (:func:`expected_error`, cross-checked with
``nem.taskformat.decode``'s error for what the decoder also refuses), with status ``ERROR``
only once every unit has finished and every fetch has arrived, and a run started right
after must read its own program. Unit errors, AXI errors, the entry fetcher's error and the
watchdog (stuck unit, what counts as progress, ``WATCHDOG`` 0) are driven from the outside.
A few timing rules of the docstring are checked relative to each other: a header check
fails as many cycles after the first as its step comes later, the register writes the
window holds are checked together, decoding goes on while the issue slot waits, and a task
whose writes follow right after a hand-over reads only its own writes (the staging is
cleared in between).
"""

from __future__ import annotations

import itertools
import os
import random
from dataclasses import dataclass, field, replace
from types import SimpleNamespace

import pytest
from amaranth.sim import Simulator

from nem.binder import bind
from nem.checker import check_text
from nem.taskformat import (
    BUFFER_ENTRY,
    DATA_ALIGN,
    ELTWISE_ENTRY,
    HEADER,
    NO_TABLE,
    REGISTER_MAPS,
    REQUANT_ENTRY,
    TABLE_ALIGN,
    TABLE_BYTES,
    TASK_HEADER,
    VERSION,
    WRITE,
    BufferEntry,
    Program,
    Task,
    TaskFormatError,
    Unit,
    data_offset,
    decode,
    encode,
)
from npu.cstl.regs import elt_codes, reads_table_codes
from npu.cstl.unit import START_WAIT as CSTL_START_WAIT
from npu.engine.config import DEVICE_DIR, DEVICES, EngineConfig
from npu.engine.seq import Cause, Sequencer, Status, copy_register_names
from npu.nmu.model import NmuGeometry
from npu.nmu.unit import START_WAIT as NMU_START_WAIT

HASH = bytes((37 * k + 11) & 0xFF for k in range(32))
#: 4-byte word, every unit type (three CSTLs: a 2-bit instance select), 4 tokens
CFG = EngineConfig(name="seq4", data_width=32, l1_depth=64, l2_depth=128, n_dma=2, n_sdma=1,
                   tokens=4, device_hash=HASH,
                   nmu=NmuGeometry(lanes=4, cols=4, wrows=16, channels=8), n_cstl=3)
#: CFG on a 16-byte word: the same memories, three register writes a cycle
CFG16 = replace(CFG, name="seq16c", data_width=128, l1_depth=16, l2_depth=32)
#: 16-byte word (three writes a cycle), copy units only, 32 tokens
WIDE = EngineConfig(name="seq16", data_width=128, l1_depth=32, l2_depth=64, n_dma=1, n_sdma=2,
                    tokens=32, device_hash=HASH[::-1])

COPY = REGISTER_MAPS[Unit.DMA]
COMPUTE = REGISTER_MAPS[Unit.NMU]
CSTL_REGS = REGISTER_MAPS[Unit.CSTL]
DDR, L2, L1 = 0, 1, 2
TABLE_OPS = reads_table_codes()
ELT_OPS = elt_codes()
OTHER_OPS = tuple(c for c in range(40) if c not in TABLE_OPS and c not in ELT_OPS)


def mem_bytes(cfg, level):
    """Bytes of memory ``level`` (DDR: the 32-bit address space)."""
    return (1 << cfg.addr_width, cfg.l2_depth * cfg.wbytes, cfg.l1_depth * cfg.wbytes)[level]


def unit_index(cfg, unit, instance):
    """The SEQ's unit index: DMAs, sDMAs, the NMU, the CSTLs."""
    return {Unit.DMA: 0, Unit.SDMA: cfg.n_dma, Unit.NMU: cfg.n_dma + cfg.n_sdma,
            Unit.CSTL: cfg.n_dma + cfg.n_sdma + cfg.n_nmu}[unit] + instance


def registers(task, regs):
    """The shadow registers after the task's writes: a later write wins, unwritten are 0."""
    values = dict.fromkeys(range(len(regs)), 0)
    for index, value in task.writes:
        values[index] = value
    return values


def region_end(addr, counts, strides):
    """One past the last byte of a copy side: ``addr + COUNT0 + sum((COUNTk-1)*STRIDEk)``."""
    return addr + counts[0] + sum((c - 1) * s for c, s in zip(counts[1:], strides, strict=True))


# ---------------------------------------------------------------------------------------------
# programs

def copy_writes(rng, *, src, dst, counts, src_strides=(0, 0, 0), dst_strides=(0, 0, 0),
                levels=(L2, L1), noise=True):
    """Register writes of a copy task, in random order, with overwritten junk values."""
    values = {"SRC_LO": src, "DST_LO": dst, "SRC_LEVEL": levels[0], "DST_LEVEL": levels[1]}
    for d in range(4):
        values[f"COUNT{d}"] = counts[d]
    for d in range(3):
        values[f"SRC_STRIDE{d + 1}"] = src_strides[d]
        values[f"DST_STRIDE{d + 1}"] = dst_strides[d]
    writes = [(COPY.index(n), v) for n, v in values.items() if v or not noise or
              rng.random() < 0.5]
    if noise:
        writes += [(COPY.index(n), 0) for n in ("SRC_HI", "DST_HI") if rng.random() < 0.5]
        rng.shuffle(writes)
        for _ in range(rng.randint(0, 2)):  # a junk value that a later write replaces
            k = rng.randrange(len(writes))
            writes.insert(k, (writes[k][0], rng.getrandbits(32)))
    return tuple(writes)


def random_copy(cfg, rng, unit):
    """A copy task's writes for ``unit`` that passes every check."""
    if unit == Unit.DMA:
        levels = (rng.choice((L1, L2)), rng.choice((L1, L2)))
    else:
        levels = rng.choice(((DDR, L2), (L2, DDR)))
    counts = [rng.randint(1, 9), rng.randint(1, 3), rng.randint(1, 2), rng.randint(1, 2)]
    src_strides = [rng.randint(0, 12) for _ in range(3)]
    dst_strides = [rng.randint(0, 12) for _ in range(3)]
    ends = [region_end(0, counts, s) for s in (src_strides, dst_strides)]
    src = rng.randint(0, mem_bytes(cfg, levels[0]) - ends[0])
    dst = rng.randint(0, mem_bytes(cfg, levels[1]) - ends[1])
    if rng.random() < 0.3:  # a region that ends on the memory's last byte
        src = mem_bytes(cfg, levels[0]) - ends[0]
    return copy_writes(rng, src=src, dst=dst, counts=counts, src_strides=src_strides,
                       dst_strides=dst_strides, levels=levels)


def random_compute(rng, unit, data_bytes):
    """An NMU or CSTL task's writes with entries inside a ``data_bytes`` data section."""
    writes = [(rng.randrange(3, 190), rng.getrandbits(32)) for _ in range(rng.randint(0, 4))]
    if unit == Unit.NMU:
        at = 8 * rng.randrange((data_bytes - REQUANT_ENTRY.size) // 8 + 1)
        writes.insert(rng.randint(0, len(writes)), (COMPUTE.index("REQUANT"), at))
        if rng.random() < 0.3:
            writes.insert(0, (COMPUTE.index("REQUANT"), 4))
        return tuple(writes)
    op = rng.choice((rng.choice(TABLE_OPS), rng.choice(ELT_OPS), rng.choice(OTHER_OPS)))
    table = rng.choice((NO_TABLE, TABLE_ALIGN * rng.randrange(
        (data_bytes - TABLE_BYTES) // TABLE_ALIGN + 1)))
    entry = DATA_ALIGN * rng.randrange((data_bytes - ELTWISE_ENTRY.size) // DATA_ALIGN + 1)
    if op in OTHER_OPS:  # nothing is fetched: any values
        table, entry = rng.getrandbits(32), rng.getrandbits(32)
    if rng.random() < 0.3:  # an opcode that a later write replaces
        writes.append((CSTL_REGS.index("OPCODE"), rng.choice(TABLE_OPS + ELT_OPS)))
    writes += [(CSTL_REGS.index("OPCODE"), op), (CSTL_REGS.index("TABLE"), table),
               (CSTL_REGS.index("REQUANT"), entry)]
    return tuple(writes)


def random_program(cfg, seed, ntasks, *, nbufs=None, data_bytes=None):
    """A random valid program: random units, tokens (a task waits only for tokens an earlier
    task signals, so it never deadlocks), a buffer table and a data section."""
    rng = random.Random(seed)
    units = [Unit.DMA, Unit.SDMA] + [Unit.NMU] * cfg.n_nmu + [Unit.CSTL] * bool(cfg.n_cstl)
    if data_bytes is None:
        data_bytes = 8 * rng.randint(40, 48) if cfg.n_nmu or cfg.n_cstl else 0
    nbufs = rng.randint(0, 2) if nbufs is None else nbufs
    buffers = tuple(BufferEntry(f"b{k}", "DDR", None, 1, 64 * k, 64) for k in range(nbufs))
    tasks, signalled = [], 0
    full = (1 << cfg.tokens) - 1
    for _ in range(ntasks):
        unit = rng.choice(units)
        count = {Unit.DMA: cfg.n_dma, Unit.SDMA: cfg.n_sdma, Unit.NMU: cfg.n_nmu,
                 Unit.CSTL: cfg.n_cstl}[unit]
        inst = rng.randrange(count)
        wait = signalled & rng.getrandbits(cfg.tokens) if rng.random() < 0.6 else 0
        signal = rng.getrandbits(cfg.tokens) & full if rng.random() < 0.7 else 0
        signalled |= signal
        writes = (random_copy(cfg, rng, unit) if unit in (Unit.DMA, Unit.SDMA)
                  else random_compute(rng, unit, data_bytes))
        tasks.append(Task(unit, inst, 0, wait, signal, writes))
    return Program(cfg.device_hash, buffers, tuple(tasks), rng.randbytes(data_bytes))


def dma(rng, wait=0, signal=0, inst=0, **kw):
    """A valid L2 -> L1 DMA task (keywords: :func:`copy_writes`)."""
    args = {"src": 16, "dst": 32, "counts": (8, 2, 1, 1), "src_strides": (8, 0, 0)} | kw
    return Task(Unit.DMA, inst, 0, wait, signal, copy_writes(rng, **args))


# ---------------------------------------------------------------------------------------------
# the expected outcome, from the SEQ's docstring rules

def decode_cause(binary, cfg):
    """``(cause, task)`` of the error ``nem.taskformat.decode`` raises, or None: what the
    decoder refuses that the SEQ checks too, mapped to the SEQ's causes."""
    try:
        decode(binary, device_hash=cfg.device_hash)
    except TaskFormatError as exc:
        text = str(exc)
        for key, cause in (("magic", Cause.BAD_MAGIC), ("format version", Cause.BAD_VERSION),
                           ("header size", Cause.BAD_HEADER),
                           ("bound for device", Cause.BAD_DEVICE),
                           ("task stream offset", Cause.BAD_HEADER),
                           ("unit type", Cause.BAD_UNIT),
                           ("register index", Cause.BAD_REGISTER)):
            if key in text:
                task = 0
                if "task " in text and key in ("unit type", "register index"):
                    task = int(text.split("task ")[1].split(":")[0])
                return cause, task
        return "other", text
    return None


def expected_error(binary, cfg, base):
    """``(cause, failing task)`` by the SEQ's rules, or None when the program runs.

    Header: base word-aligned, then magic, version (major equal, minor not newer), header
    size and buffer table offset, device hash, stream offset after the buffer table. Each
    task: stream long enough for the task header, unit type and instance this engine has,
    engine 0, tokens inside ``SEQ.max_active_tokens``; each write: in the stream, index in
    the unit's map; then levels, counts 1..65535, high words 0, regions inside their
    memories (copy units) or entries inside the data section (NMU, table-reading CSTLs);
    after the last task no stream byte left.
    """
    W = cfg.wbytes
    if base % W:
        return Cause.BAD_HEADER, 0
    h = HEADER.unpack(binary + bytes(HEADER.size), 0)
    if h["magic"] != b"NEMB":
        return Cause.BAD_MAGIC, 0
    if h["major"] != VERSION[0] or h["minor"] > VERSION[1]:
        return Cause.BAD_VERSION, 0
    if h["header_bytes"] != HEADER.size or h["table_offset"] != HEADER.size:
        return Cause.BAD_HEADER, 0
    if h["device_hash"] != cfg.device_hash:
        return Cause.BAD_DEVICE, 0
    if h["stream_offset"] != HEADER.size + h["buffer_count"] * BUFFER_ENTRY.size:
        return Cause.BAD_HEADER, 0
    at, left = h["stream_offset"], h["stream_bytes"]
    data_bytes = h["data_bytes"]
    raw = binary + bytes(4096)
    counts = {Unit.DMA: cfg.n_dma, Unit.SDMA: cfg.n_sdma, Unit.NMU: cfg.n_nmu,
              Unit.CSTL: cfg.n_cstl}
    for k in range(h["task_count"]):
        if left < TASK_HEADER.size:
            return Cause.BAD_HEADER, k
        t = TASK_HEADER.unpack(raw, at)
        at, left = at + TASK_HEADER.size, left - TASK_HEADER.size
        if t["unit"] not in counts or t["instance"] >= counts[t["unit"]] or t["engine"]:
            return Cause.BAD_UNIT, k
        if (t["wait"] | t["signal"]) >> cfg.tokens:
            return Cause.BAD_TOKEN, k
        unit = Unit(t["unit"])
        regs = REGISTER_MAPS[unit]
        writes = []
        for _ in range(t["nwrites"]):
            if left < WRITE.size:
                return Cause.BAD_HEADER, k
            w = WRITE.unpack(raw, at)
            if w["index"] >= len(regs):
                return Cause.BAD_REGISTER, k
            writes.append((w["index"], w["value"]))
            at, left = at + WRITE.size, left - WRITE.size
        task = Task(unit, t["instance"], 0, t["wait"], t["signal"], tuple(writes))
        cause = task_error(cfg, task, data_bytes)
        if cause is not None:
            return cause, k
    if left:
        return Cause.BAD_HEADER, h["task_count"]
    return None


def task_error(cfg, task, data_bytes):
    """The HAND and issue-slot checks of one decoded task (None: it passes)."""
    if task.unit == Unit.NMU:
        at = registers(task, COMPUTE)[COMPUTE.index("REQUANT")]
        bad = at % DATA_ALIGN or at + REQUANT_ENTRY.size > data_bytes
        return Cause.BAD_ENTRY if bad else None
    if task.unit == Unit.CSTL:
        r = registers(task, CSTL_REGS)
        op, table = r[CSTL_REGS.index("OPCODE")], r[CSTL_REGS.index("TABLE")]
        entry = r[CSTL_REGS.index("REQUANT")]
        if op in TABLE_OPS and table != NO_TABLE and (
                table % TABLE_ALIGN or table + TABLE_BYTES > data_bytes):
            return Cause.BAD_ENTRY
        if op in ELT_OPS and (entry % DATA_ALIGN or entry + ELTWISE_ENTRY.size > data_bytes):
            return Cause.BAD_ENTRY
        return None
    r = {COPY.name(i): v for i, v in registers(task, COPY).items()}
    levels = (r["SRC_LEVEL"], r["DST_LEVEL"])
    allowed = ({(a, b) for a in (L1, L2) for b in (L1, L2)} if task.unit == Unit.DMA
               else {(DDR, L2), (L2, DDR)})
    if levels not in allowed:
        return Cause.BAD_LEVEL
    counts = [r[f"COUNT{d}"] for d in range(4)]
    if not all(1 <= c <= 0xFFFF for c in counts):
        return Cause.BAD_VALUE
    if r["SRC_HI"] or r["DST_HI"]:
        return Cause.BAD_REGION
    for side, level in (("SRC", levels[0]), ("DST", levels[1])):
        strides = [r[f"{side}_STRIDE{d}"] for d in (1, 2, 3)]
        if region_end(r[f"{side}_LO"], counts, strides) > mem_bytes(cfg, level):
            return Cause.BAD_REGION
    return None


def expected_issues(cfg, binary, base):
    """What the SEQ must issue for a valid binary, in stream order: ``(unit index, task,
    extra)`` with the NMU's entry request or the CSTL's table fetch as ``extra``."""
    program = decode(binary, device_hash=cfg.device_hash)
    h = HEADER.unpack(binary, 0)
    data_base = base + data_offset(h["stream_offset"] + h["stream_bytes"])
    out = []
    for task in program.tasks:
        extra = None
        if task.unit == Unit.NMU:
            extra = {"addr": data_base + registers(task, COMPUTE)[COMPUTE.index("REQUANT")],
                     "limit": data_base + h["data_bytes"]}
        elif task.unit == Unit.CSTL:
            r = registers(task, CSTL_REGS)
            op = r[CSTL_REGS.index("OPCODE")]
            elt = op in ELT_OPS
            table = op in TABLE_OPS and r[CSTL_REGS.index("TABLE")] != NO_TABLE
            extra = {"has_table": int(table or elt), "elt": int(elt)}
            if table or elt:
                extra["addr"] = data_base + r[CSTL_REGS.index("REQUANT" if elt else "TABLE")]
        out.append((unit_index(cfg, task.unit, task.instance), task, extra))
    return out


# ---------------------------------------------------------------------------------------------
# the testbench

@dataclass
class Job:
    """One run of the SEQ: a binary at ``base`` and what the outside does.

    ``hold``: task index (or indices) whose unit does not finish until the error cause
    shows (or for ``hold_cycles`` cycles after its issue, or until cycle ``hold_until``);
    ``unit_error``: task whose done reports an error; ``axi_error``: ``"first"`` (on the
    first data beat) or ``"stalled"`` (once the SEQ has issued and been quiet for 40
    cycles); ``entry_error``: NMU task index during whose run the entry fetcher reports an
    error; ``progress_until``: drive ``progress`` high for that many cycles after the start;
    ``refuse``: task index whose start its (free) unit does not take.
    """

    binary: bytes
    base: int = 0
    watchdog: int = 300   # a hang ends in WATCHDOG, not at max_cycles
    hold: int | tuple | None = None
    hold_cycles: int | None = None
    hold_until: int | None = None
    unit_error: int | None = None
    axi_error: str | None = None
    entry_error: int | None = None
    progress_until: int = 0
    start_again: int | None = None
    refuse: int | None = None
    max_cycles: int = 4000
    #: probabilities of a fetch command taken, a data beat offered
    pace: tuple = (0.6, 0.7)
    #: task index -> cycles its unit runs (else random)
    delays: dict = field(default_factory=dict)
    #: tasks during whose run ``progress`` is high (until their done, included)
    progress_tasks: tuple = ()


@dataclass
class Result:
    """What one run showed."""

    issues: list = field(default_factory=list)     # (unit index, payload, extra)
    status: int = Status.IDLE
    cause: int = Cause.NONE
    error_task: int = 0
    issued: int = 0
    completed: int = 0
    reads: list = field(default_factory=list)       # word indices relative to base
    issue_cycles: list = field(default_factory=list)
    waiting: list = field(default_factory=list)     # cycles with ``waiting`` high
    done_cycles: list = field(default_factory=list)
    progress_cycles: list = field(default_factory=list)
    clears: list = field(default_factory=list)      # (cycle, "nmu" or "cstlK")
    cause_cycle: int | None = None   # first cycle the cause showed
    progress_last: int | None = None  # last cycle ``progress`` was high
    cycles: int = 0


def _allowed_words(ddr, base, W):
    """Words the fetcher may read: the header's, then (once the header is accepted up to its
    stream fields) the task stream's; the buffer table's words after the header are not read."""
    hw = -(-HEADER.size // W)
    h = HEADER.unpack(bytes(ddr.get(base + k, 0) for k in range(HEADER.size)), 0)
    words = set(range(hw))
    so, sb = h["stream_offset"], h["stream_bytes"]
    if so == HEADER.size + h["buffer_count"] * BUFFER_ENTRY.size and \
            h["header_bytes"] == h["table_offset"] == HEADER.size and h["magic"] == b"NEMB":
        words |= set(range(max(so // W, hw), -(-(so + sb) // W)))
    return words


_BENCHES = {}


def run_jobs(cfg, jobs, seed=0):
    """Run ``jobs`` one after the other on one SEQ; return a :class:`Result` per job.

    One simulation per configuration serves every call in a process (building one takes
    longer than most runs): it waits, idle, for the next call's jobs. A failed call drops
    it.
    """
    key = (os.getpid(), repr(cfg))   # a forked process (mutation testing) builds its own
    if key not in _BENCHES:
        _BENCHES[key] = _bench(cfg)
    bench = _BENCHES[key]
    bench.rng.seed(seed)
    bench.todo[:] = jobs
    bench.done.clear()
    try:
        while len(bench.done) < len(jobs):
            bench.sim.advance()
    except BaseException:
        del _BENCHES[key]
        raise
    return list(bench.done)


def _bench(cfg):
    """The simulation of one SEQ and its surroundings, running the jobs put in ``todo``.

    Checked on every cycle: fetch commands (aligned, 1..16 words, inside the allowed words,
    never a word twice), fetch data and unit done always accepted, a start only to a free
    unit and after its wait tokens, the token scoreboard, the issue strobe and counters,
    status DONE / ERROR only when quiescent and the cause steady once shown.

    The units' ``start.ready`` is what the units drive: high when the unit is free (no task,
    or its done seen) and, for the NMU and the CSTLs, their shadow registers' decode has
    settled (``START_WAIT`` cycles without a clear or write to them, counted here from the
    SEQ's clear and write strobes); low for the task of ``Job.refuse``. A start offered
    while it is low fails the bench unless the job refuses it.
    """
    dut = Sequencer(cfg)
    W = cfg.wbytes
    n = dut.n_units
    settle = {}   # unit index -> its START_WAIT (the units with shadow registers)
    if cfg.n_nmu:
        settle[dut.nmu_index] = NMU_START_WAIT
    for k in range(cfg.n_cstl):
        settle[dut.cstl_index + k] = CSTL_START_WAIT
    state = SimpleNamespace(rng=random.Random(0), todo=[], done=[])
    # the ports, resolved once (attribute look-ups on interfaces are slow)
    st_valid = [p.valid for p in dut.unit_start]
    st_ready = [p.ready for p in dut.unit_start]
    dn_valid = [p.valid for p in dut.unit_done]
    dn_error = [p.payload.error for p in dut.unit_done]
    dn_ready = [p.ready for p in dut.unit_done]
    cmd_ready, cmd_valid = dut.fetch_cmd.ready, dut.fetch_cmd.valid
    cmd_addr, cmd_beats = dut.fetch_cmd.payload.addr, dut.fetch_cmd.payload.beats
    rd_valid, rd_ready = dut.fetch_data.valid, dut.fetch_data.ready
    rd_data, rd_last = dut.fetch_data.payload.data, dut.fetch_data.payload.last
    nmu_wv, nmu_wi, nmu_wd = (dut.nmu_write.valid, dut.nmu_write.payload.index,
                              dut.nmu_write.payload.value)
    if cfg.n_cstl:
        cs_wv, cs_wi, cs_wd = (dut.cstl_write.valid, dut.cstl_write.payload.index,
                               dut.cstl_write.payload.value)

    async def bench(ctx):
        last = {}

        def put(sig, value):
            value = int(value)
            if last.get(id(sig)) != value:
                ctx.set(sig, value)
                last[id(sig)] = value

        while True:
            if state.todo:
                job = state.todo.pop(0)
                state.done.append(await run_one(ctx, put, job))
            else:
                await ctx.tick()

    async def run_one(ctx, put, job):
        rng = state.rng
        res = Result()
        ddr = {job.base + k: b for k, b in enumerate(job.binary)}
        allowed = _allowed_words(ddr, job.base, W)
        try:
            tasks = decode(job.binary).tasks
        except TaskFormatError:
            tasks = None
        signals = {}         # unit -> signal mask of its running task
        running = {}         # unit -> task index
        left = {}            # unit -> cycles to done (None: held)
        issue_cycle = {}
        shadow = {"nmu": [], **{f"cstl{k}": [] for k in range(cfg.n_cstl)}}
        tokens, beats, fetch_error = 0, [], 0
        late = 0    # the signal tokens of the completions of the cycle before
        changed = {}   # unit index -> last cycle its shadow registers were cleared or written

        def settled(k, cycle):
            return k not in settle or cycle - changed.get(k, -1 << 30) > settle[k]
        quiet, progress_last = 0, None
        put(dut.base, job.base)
        put(dut.watchdog, job.watchdog)
        put(dut.start, 1)
        put(dut.fetch_error, 0)
        await ctx.tick()
        put(dut.start, 0)
        for k in range(n):
            assert ctx.get(dn_ready[k]), k      # done is always accepted
        cause_seen = None
        ndone, counted = 0, True
        junk = [0] * n
        open_ = set()        # compute units with a task decoded (cleared) but not issued
        for cycle in range(job.max_cycles):
            res.cycles = cycle
            if counted:   # the counters, in the cycle after an issue or a completion
                assert ctx.get(dut.issued) == len(res.issues), cycle
                if cause_seen is None:
                    assert ctx.get(dut.completed) == ndone, cycle
            # --- inputs of this cycle
            put(dut.start, job.start_again is not None and cycle == job.start_again)
            take_cmd = not beats and rng.random() < job.pace[0]
            put(cmd_ready, take_cmd)
            give = bool(beats) and rng.random() < job.pace[1]
            put(rd_valid, give)
            if give:
                word = beats[0]
                put(rd_data, int.from_bytes(bytes(ddr.get(word * W + k, 0) for k in range(W)),
                                            "little"))
                put(rd_last, len(beats) == 1)
                if job.axi_error == "first":
                    fetch_error = 1
            elif rng.random() < 0.1:   # the payload is not looked at without valid
                put(rd_data, rng.getrandbits(8 * W))
                put(rd_last, rng.getrandbits(1))
            if job.axi_error == "stalled" and res.issues and quiet >= 40:
                fetch_error = 1
            put(dut.fetch_error, fetch_error)
            progress = cycle < job.progress_until or any(
                running.get(k) in job.progress_tasks for k in running)
            put(dut.progress, progress)
            if progress:
                progress_last = cycle
                res.progress_cycles.append(cycle)
            if job.entry_error is not None:
                put(dut.entry_error, running.get(dut.nmu_index) == job.entry_error and
                    cycle == issue_cycle[dut.nmu_index] + 3)
            done_mask, done_units, ready = 0, [], []
            for k in range(n):
                d = k in running and left[k] == 0
                put(dn_valid[k], d)
                if rng.random() < 0.1:   # the payload is not looked at without valid
                    junk[k] ^= 1
                put(dn_error[k], running[k] == job.unit_error if d else junk[k])
                if d:
                    done_mask |= signals[k]
                    done_units.append(k)
                ready.append(k not in running and settled(k, cycle) and
                             job.refuse != len(res.issues))
                put(st_ready[k], ready[k])
            # --- outputs
            status, cause = ctx.get(dut.status), ctx.get(dut.cause)
            # a completion's tokens count for an issue from the cycle after it
            visible = tokens | late
            late = done_mask
            assert ctx.get(dut.tokens) == visible, (cycle, ctx.get(dut.tokens), visible)
            if cause_seen is None and cause != Cause.NONE:
                cause_seen, res.cause_cycle = cause, cycle
            assert cause == (cause_seen or Cause.NONE), (cycle, cause, cause_seen)
            if status != Status.BUSY:
                assert not running and not beats, (cycle, Status(status), running, beats)
                assert status == (Status.ERROR if cause_seen else Status.DONE), cycle
            if give:
                assert ctx.get(rd_ready), cycle
            if take_cmd and ctx.get(cmd_valid):
                addr, nbeats = ctx.get(cmd_addr), ctx.get(cmd_beats)
                assert addr % W == 0 and 1 <= nbeats <= 16, (cycle, addr, nbeats)
                first = addr // W
                for w in range(first, first + nbeats):
                    rel = w - job.base // W
                    assert rel in allowed and rel not in res.reads, (cycle, rel, sorted(allowed))
                    res.reads.append(rel)
                beats = list(range(first, first + nbeats))
            if cfg.n_nmu:
                nmu_clear = ctx.get(dut.nmu_clear)
                if nmu_clear:
                    shadow["nmu"] = []
                    res.clears.append((cycle, "nmu"))
                    open_.add("nmu")
                    changed[dut.nmu_index] = cycle
                if ctx.get(nmu_wv):
                    # only the writes of an NMU task, between its clear and its issue
                    assert not nmu_clear and "nmu" in open_, cycle
                    shadow["nmu"].append((ctx.get(nmu_wi), ctx.get(nmu_wd)))
                    changed[dut.nmu_index] = cycle
            if cfg.n_cstl:
                clears = ctx.get(dut.cstl_clear)
                for k in range(cfg.n_cstl):
                    if clears >> k & 1:
                        shadow[f"cstl{k}"] = []
                        res.clears.append((cycle, f"cstl{k}"))
                        open_.add(f"cstl{k}")
                        changed[dut.cstl_index + k] = cycle
                if ctx.get(cs_wv):
                    sel = f"cstl{ctx.get(dut.cstl_sel)}"
                    assert not clears and sel in open_, cycle
                    shadow[sel].append((ctx.get(cs_wi), ctx.get(cs_wd)))
                    changed[dut.cstl_index + ctx.get(dut.cstl_sel)] = cycle
            issued_now, refused_now = [], []
            for k in range(n):
                if ctx.get(st_valid[k]):
                    # the unit is free and its decode settled: it takes the start, but for
                    # the task the job refuses (the SEQ does not look at ``ready`` to issue)
                    assert k not in running and settled(k, cycle), (cycle, k)
                    if ready[k]:
                        issued_now.append(k)
                    else:
                        assert job.refuse == len(res.issues), (cycle, k)
                        refused_now.append(k)
            started = issued_now + refused_now
            assert len(started) <= 1
            assert ctx.get(dut.issue) == bool(started), cycle
            # waiting: a decoded task is held (not in the cycle it issues, not after an error)
            if ctx.get(dut.waiting):
                res.waiting.append(cycle)
                assert not issued_now and cause == Cause.NONE, cycle
                assert tasks is None or len(res.issues) < len(tasks), cycle
            if started:
                k = started[0]
                index = len(res.issues)
                wait, signal = ctx.get(dut.issue_wait), ctx.get(dut.issue_signal)
                assert ctx.get(dut.issue_unit) == k, cycle
                assert wait & ~visible == 0, (cycle, index, wait, visible)
                if tasks is not None and index < len(tasks):
                    assert (wait, signal) == (tasks[index].wait, tasks[index].signal), index
                extra = None
                open_.discard("nmu" if k == dut.nmu_index else f"cstl{k - (dut.cstl_index or 0)}")
                if k == dut.nmu_index:
                    extra = ("nmu", list(shadow["nmu"]),
                             {"addr": ctx.get(dut.nmu_entry.addr),
                              "limit": ctx.get(dut.nmu_entry.limit)})
                elif dut.cstl_index is not None and k >= dut.cstl_index:
                    c = {"has_table": ctx.get(dut.cstl_has_table),
                         "elt": ctx.get(dut.cstl_elt_entry)}
                    if c["has_table"]:
                        c["addr"] = ctx.get(dut.cstl_table)
                    extra = ("cstl", list(shadow[f"cstl{k - dut.cstl_index}"]), c)
                p = ctx.get(dut.unit_start[k].payload)
                payload = {"src": p.copy.src, "dst": p.copy.dst,
                           "counts": [p.copy.count[d] for d in range(4)],
                           "src_strides": [p.copy.src_stride[d] for d in range(3)],
                           "dst_strides": [p.copy.dst_stride[d] for d in range(3)],
                           "levels": (p.src_level, p.dst_level)}
                res.issues.append((k, payload, extra))
                res.issue_cycles.append(cycle)
                if issued_now:   # (a refused start: the unit stays free)
                    running[k], signals[k] = index, signal
                    issue_cycle[k] = cycle
                    held = job.hold == index if isinstance(job.hold, int) else \
                        index in (job.hold or ())
                    left[k] = None if held else job.delays.get(
                        index, rng.choice((1, 1, 2, 3, 5, 8)))
                visible &= ~signal
            tokens = visible
            for k in done_units:
                del running[k]
                res.done_cycles.append(cycle)
                ndone += 1
            for k in running:
                if left[k] is None:
                    release = (cycle >= job.hold_until if job.hold_until is not None
                               else cause_seen is not None if job.hold_cycles is None
                               else cycle >= issue_cycle[k] + job.hold_cycles)
                    if release:
                        left[k] = 3
                elif left[k] and k not in issued_now:
                    left[k] -= 1
            quiet = 0 if issued_now or done_units or give else quiet + 1
            counted = bool(started or done_units)
            if give:
                beats.pop(0)
            if status != Status.BUSY:
                break
            await ctx.tick()
        else:
            raise AssertionError(f"the run did not end in {job.max_cycles} cycles")
        res.status, res.cause = ctx.get(dut.status), ctx.get(dut.cause)
        res.error_task = ctx.get(dut.error_task)
        res.issued, res.completed = ctx.get(dut.issued), ctx.get(dut.completed)
        assert res.issued == len(res.issues)
        res.progress_last = progress_last
        # it stays so while idle
        for _ in range(3):
            await ctx.tick()
            assert (ctx.get(dut.status), ctx.get(dut.cause)) == (res.status, res.cause)
        return res

    state.sim = Simulator(dut)
    state.sim.add_clock(1e-8)
    state.sim.add_testbench(bench)
    return state


def check_issues(cfg, res, want, count=None):
    """The issues of a run against the expected ``(unit, task, extra)`` list (its first
    ``count`` entries when given: a run that stopped at an error)."""
    want = want if count is None else want[:count]
    assert len(res.issues) == len(want), (len(res.issues), len(want))
    for n, ((k, payload, extra), (unit, task, wextra)) in enumerate(
            zip(res.issues, want, strict=True)):
        assert k == unit, (n, k, unit)
        if task.unit in (Unit.DMA, Unit.SDMA):
            r = {COPY.name(i): v for i, v in registers(task, COPY).items()}
            assert payload == {
                "src": r["SRC_LO"], "dst": r["DST_LO"],
                "counts": [r[f"COUNT{d}"] for d in range(4)],
                "src_strides": [r[f"SRC_STRIDE{d}"] for d in (1, 2, 3)],
                "dst_strides": [r[f"DST_STRIDE{d}"] for d in (1, 2, 3)],
                "levels": (r["SRC_LEVEL"], r["DST_LEVEL"])}, n
        else:
            _, writes, got = extra
            assert writes == list(task.writes), (n, writes, task.writes)
            assert got == wextra, (n, got, wextra)


def run_valid(cfg, binaries, seed):
    """Run valid binaries (with their bases) and check each against decode."""
    jobs = [Job(b, base=base) for b, base in binaries]
    for (binary, base), res in zip(binaries, run_jobs(cfg, jobs, seed), strict=True):
        assert expected_error(binary, cfg, base) is None
        assert decode_cause(binary, cfg) is None
        assert (res.status, res.cause, res.error_task) == (Status.DONE, Cause.NONE, 0)
        want = expected_issues(cfg, binary, base)
        check_issues(cfg, res, want)
        assert res.issued == res.completed == len(want)
        assert sorted(res.reads) == sorted(_allowed_words(
            {base + k: b for k, b in enumerate(binary)}, base, cfg.wbytes))


# ---------------------------------------------------------------------------------------------
# valid programs

def test_smoke():
    """One random program with every unit type, quick (mutation testing runs it first)."""
    binary = encode(random_program(CFG, 5, ntasks=9, nbufs=1))
    run_valid(CFG, [(binary, 12)], 5)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_programs(seed):
    rng = random.Random(seed)
    binaries = []
    for j in range(3):
        program = random_program(CFG, 100 * seed + j, ntasks=rng.randint(6, 12))
        binaries.append((encode(program), CFG.wbytes * rng.randrange(0, 64)))
    binaries[seed] = (binaries[seed][0], (1 << 32) - 4096 - 4 * seed)   # the top of DDR
    run_valid(CFG, binaries, seed)


def test_random_programs_wide_word():
    rng = random.Random(7)
    binaries = []
    for j in range(3):
        program = random_program(WIDE, 300 + j, ntasks=rng.randint(5, 10), nbufs=j)
        binaries.append((encode(program), WIDE.wbytes * rng.randrange(1, 32)))
    binaries[1] = (binaries[1][0], (1 << 32) - 4096)   # the top of the address space
    run_valid(WIDE, binaries, 7)


def test_empty_and_one_task_programs():
    rng = random.Random(3)
    empty = Program(HASH, (), ())
    old = replace(Program(HASH, (BufferEntry("x", "L2", None, 8, 0, 8),),
                          (dma(rng, signal=1), dma(rng, wait=1, inst=1))), version=(1, 0))
    run_valid(CFG, [(encode(empty), 0), (encode(old), 4), (encode(empty), 8)], 3)


TILED_SMALL = """program tiles:
const T = 3
const TB = 64
buffer IN : DDR (size=T * TB)
buffer OUT : DDR (size=T * TB)
buffer S : L2 (size=T * TB)
buffer X : L1 (size=2 * TB)
t0 = transfer.sync(dst=region(S, 0, T * TB), src=region(IN, 0, T * TB))
loop i in [0..T - 1] @max_in_flight(2):
    a = transfer.async(dst=region(X, (i mod 2) * TB, TB), src=region(S, i * TB, TB))
    b = store.async(dst=region(S, i * TB, TB), src=region(X, (i mod 2) * TB, TB), deps=[a])
    wait(b)
endloop
t9 = transfer.async(dst=region(OUT, 0, T * TB), src=region(S, 0, T * TB))
wait(t9)
"""


def _bound(text):
    result = check_text(f'device "{DEVICES["small"][0]}"\n' + text, file="p.nem",
                        base_dir=str(DEVICE_DIR))
    assert result.ok, [str(d) for d in result.diagnostics]
    return encode(bind(result))


def test_bound_programs_on_the_small_device():
    from sim.engine_cstl_programs import table_tiles
    from sim.engine_nmu_programs import gemm_tiles

    cfg = EngineConfig.shipped("small")
    texts = [TILED_SMALL, table_tiles(5, 9, 2)[0], gemm_tiles(8, 8, 8, 8, seed=1)[0]]
    run_valid(cfg, [(_bound(t), 64 * (k + 1)) for k, t in enumerate(texts)], 5)


# ---------------------------------------------------------------------------------------------
# corrupt binaries

def patch(binary, at, value, size):
    """``binary`` with the little-endian ``value`` of ``size`` bytes at ``at``."""
    return binary[:at] + value.to_bytes(size, "little") + binary[at + size:]


def patch_header(binary, name, value):
    """``binary`` with program-header field ``name`` set to ``value``."""
    f = HEADER[name]
    raw = value if isinstance(value, bytes) else value.to_bytes(f.size, "little")
    return binary[:f.offset] + raw + binary[f.offset + f.size:]


def task_at(binary, k):
    """Byte offset of task ``k``'s header."""
    h = HEADER.unpack(binary, 0)
    at = h["stream_offset"]
    for _ in range(k):
        at += TASK_HEADER.size + WRITE.size * binary[at + TASK_HEADER["nwrites"].offset]
    return at


def patch_task(binary, k, name, value):
    """``binary`` with field ``name`` of task ``k``'s header set to ``value``."""
    f = TASK_HEADER[name]
    return patch(binary, task_at(binary, k) + f.offset, value, f.size)


def patch_write(binary, k, j, name, value):
    """``binary`` with field ``name`` of task ``k``'s write ``j`` set to ``value``."""
    f = WRITE[name]
    return patch(binary, task_at(binary, k) + TASK_HEADER.size + j * WRITE.size + f.offset,
                 value, f.size)


def run_errors(cfg, cases, seed, **job_args):
    """Run ``cases`` = ``[(name, binary, base, cause, task, prefix)]`` where ``prefix`` is the
    expected issue list of the tasks before the failing one; each must end in ERROR with
    the cause and task that :func:`expected_error` gives, which must be the intended ones."""
    for name, binary, base, cause, task, _ in cases:
        assert expected_error(binary, cfg, base) == (cause, task), name
        mapped = decode_cause(binary, cfg)
        if mapped is not None and mapped[0] != "other":
            assert mapped == (cause, task), (name, mapped)
    job_args = {"pace": (0.9, 0.9)} | job_args   # stalls, but fewer: many cases
    jobs = [Job(binary, base=base, **job_args) for _, binary, base, *_ in cases]
    for (name, _, _, cause, task, prefix), res in zip(cases, run_jobs(cfg, jobs, seed),
                                                     strict=True):
        got = (Status(res.status), Cause(res.cause), res.error_task)
        assert got == (Status.ERROR, cause, task), (name, got)
        assert len(res.issues) <= task, name
        check_issues(cfg, res, prefix, len(res.issues))


def _base_program(rng, cfg=CFG):
    """A valid program: two DMA tasks, an sDMA task, an NMU task, a CSTL task."""
    tasks = (dma(rng, signal=1), dma(rng, inst=1, wait=1, src=8, dst=0),
             Task(Unit.SDMA, 0, 0, 0, 2, copy_writes(rng, src=1 << 20, dst=0, counts=(16, 1, 1, 1),
                                                      levels=(DDR, L2))),
             Task(Unit.NMU, 0, 0, 2, 0, ((5, 1), (COMPUTE.index("REQUANT"), 16))),
             Task(Unit.CSTL, 1, 0, 0, 0, ((CSTL_REGS.index("OPCODE"), TABLE_OPS[0]),
                                          (CSTL_REGS.index("TABLE"), 8))))
    return Program(cfg.device_hash, (BufferEntry("buf", "L1", 0, 4, 0, 16),), tasks,
                   bytes(range(256)) + bytes(64))


def test_header_errors():
    rng = random.Random(11)
    good = encode(_base_program(rng))
    base = 4 * 37
    want = expected_issues(CFG, good, base)
    hash_ = HEADER["device_hash"]
    cases = [
        ("magic", patch_header(good, "magic", b"NEMC"), base, Cause.BAD_MAGIC),
        ("magic0", patch_header(good, "magic", b"XEMB"), base, Cause.BAD_MAGIC),
        ("magic+version", patch_header(patch_header(good, "magic", b"NEBB"), "major", 2),
         base, Cause.BAD_MAGIC),
        ("major2", patch_header(good, "major", 2), base, Cause.BAD_VERSION),
        ("major0", patch_header(good, "major", 0), base, Cause.BAD_VERSION),
        ("minor", patch_header(good, "minor", VERSION[1] + 1), base, Cause.BAD_VERSION),
        ("minor+size", patch_header(patch_header(good, "minor", 9), "header_bytes", 64),
         base, Cause.BAD_VERSION),
        ("header_bytes", patch_header(good, "header_bytes", HEADER.size + 4), base,
         Cause.BAD_HEADER),
        ("table_offset", patch_header(good, "table_offset", HEADER.size - 4), base,
         Cause.BAD_HEADER),
        *((f"hash{p}", patch(good, hash_.offset + 8 * p + 7 - p, good[hash_.offset + 8 * p
                                                                      + 7 - p] ^ 0x10, 1),
           base, Cause.BAD_DEVICE) for p in range(4)),
        ("hash+offset", patch_header(patch(good, hash_.offset, good[hash_.offset] ^ 1, 1),
                                     "stream_offset", 0), base, Cause.BAD_DEVICE),
        ("stream_offset", patch_header(good, "stream_offset", HEADER.size), base,
         Cause.BAD_HEADER),
        ("buffer_count", patch_header(good, "buffer_count", 2), base, Cause.BAD_HEADER),
        ("base", good, base + 2, Cause.BAD_HEADER),
        ("base1", good, base + 1, Cause.BAD_HEADER),
    ]
    run_errors(CFG, [(n, b, at, c, 0, want) for n, b, at, c in cases], 11)


def _task_cases(rng):
    """(name, binary, cause, task) of corrupt tasks in :func:`_base_program`."""
    p = _base_program(rng)
    good = encode(p)
    t = list(p.tasks)

    def with_task(k, task):
        return encode(replace(p, tasks=(*t[:k], task, *t[k + 1:])))

    def copy_task(k, unit=Unit.DMA, **kw):
        return with_task(k, Task(unit, 0, 0, 0, 0, copy_writes(rng, **kw)))

    levels = ((COPY.index("SRC_LEVEL"), L1), (COPY.index("DST_LEVEL"), L2))
    regions = []
    for side, level in (("src", L2), ("dst", L1)):
        size = mem_bytes(CFG, level)
        for d in range(3):
            counts = [4, 1, 1, 1]
            counts[d + 1] = 3
            strides = [0, 0, 0]
            strides[d] = size // 2 - 1   # end: 4 + 2 * stride = size + 2
            kw = {"counts": counts, f"{side}_strides": strides, "src": 0, "dst": 0}
            regions.append((f"region_{side}{d}", copy_task(2, **kw), Cause.BAD_REGION, 2))
        regions.append((f"region_{side}", copy_task(2, counts=(size - 3, 1, 1, 1),
                                                    **{"src": 4, "dst": 4}),
                        Cause.BAD_REGION, 2))
    # DDR strides with their high bits set (the check multiplies a stride in 17-bit
    # halves): end = 4 + 2 * (2**31 + 2) = DDR size + 8, per dimension and side
    for side, lv in (("src", (DDR, L2)), ("dst", (L2, DDR))):
        for d in range(3):
            counts = [4, 1, 1, 1]
            counts[d + 1] = 3
            strides = [0, 0, 0]
            strides[d] = (1 << 31) + 2
            kw = {"counts": counts, f"{side}_strides": strides, "src": 0, "dst": 0,
                  "levels": lv}
            regions.append((f"region_ddr_{side}{d}", copy_task(2, Unit.SDMA, **kw),
                            Cause.BAD_REGION, 2))
    return [
        ("vpu", patch_task(good, 1, "unit", Unit.VPU), Cause.BAD_UNIT, 1),
        ("unit5", patch_task(good, 2, "unit", 5), Cause.BAD_UNIT, 2),
        ("unit255", patch_task(good, 0, "unit", 255), Cause.BAD_UNIT, 0),
        ("dma_inst", patch_task(good, 1, "instance", CFG.n_dma), Cause.BAD_UNIT, 1),
        ("sdma_inst", patch_task(good, 2, "instance", CFG.n_sdma), Cause.BAD_UNIT, 2),
        ("nmu_inst", patch_task(good, 3, "instance", 1), Cause.BAD_UNIT, 3),
        ("cstl_inst", patch_task(good, 4, "instance", CFG.n_cstl), Cause.BAD_UNIT, 4),
        ("engine", patch_task(good, 2, "engine", 1), Cause.BAD_UNIT, 2),
        ("engine_nmu", patch_task(good, 3, "engine", 128), Cause.BAD_UNIT, 3),
        ("unit+token", patch_task(patch_task(good, 1, "instance", 7), 1, "wait", 1 << 9),
         Cause.BAD_UNIT, 1),
        ("wait", patch_task(good, 1, "wait", 1 << CFG.tokens), Cause.BAD_TOKEN, 1),
        ("signal", patch_task(good, 3, "signal", 1 << 31), Cause.BAD_TOKEN, 3),
        ("signal_cstl", patch_task(good, 4, "signal", 3 << (CFG.tokens - 1)), Cause.BAD_TOKEN,
         4),
        ("reg_copy", patch_write(good, 2, 3, "index", len(COPY)), Cause.BAD_REGISTER, 2),
        ("reg_copy255", patch_write(good, 0, 0, "index", 255), Cause.BAD_REGISTER, 0),
        ("reg_nmu", patch_write(good, 3, 0, "index", len(COMPUTE)), Cause.BAD_REGISTER, 3),
        ("reg_nmu_last", patch_write(good, 3, 1, "index", 255), Cause.BAD_REGISTER, 3),
        ("reg_cstl", patch_write(good, 4, 1, "index", len(CSTL_REGS)), Cause.BAD_REGISTER, 4),
        ("reg_cstl_first", patch_write(good, 4, 0, "index", 200), Cause.BAD_REGISTER, 4),
        ("reg_copy_1", patch_write(good, 2, 1, "index", len(COPY)), Cause.BAD_REGISTER, 2),
        ("reg_copy_0", patch_write(good, 1, 0, "index", len(COPY) + 1), Cause.BAD_REGISTER, 1),
        ("reg_copy_last", patch_write(good, 1, len(t[1].writes) - 1, "index", 128),
         Cause.BAD_REGISTER, 1),
        ("dma_ddr_src", copy_task(1, src=0, dst=0, counts=(4, 1, 1, 1), levels=(DDR, L1)),
         Cause.BAD_LEVEL, 1),
        ("dma_ddr_dst", copy_task(1, src=0, dst=0, counts=(4, 1, 1, 1), levels=(L2, DDR)),
         Cause.BAD_LEVEL, 1),
        ("dma_level3", copy_task(1, src=0, dst=0, counts=(4, 1, 1, 1), levels=(L1, 3)),
         Cause.BAD_LEVEL, 1),
        ("sdma_l2l2", copy_task(2, Unit.SDMA, src=0, dst=0, counts=(4, 1, 1, 1),
                                levels=(L2, L2)), Cause.BAD_LEVEL, 2),
        ("sdma_ddr_l1", copy_task(2, Unit.SDMA, src=0, dst=0, counts=(4, 1, 1, 1),
                                  levels=(DDR, L1)), Cause.BAD_LEVEL, 2),
        ("sdma_l1_ddr", copy_task(2, Unit.SDMA, src=0, dst=0, counts=(4, 1, 1, 1),
                                  levels=(L1, DDR)), Cause.BAD_LEVEL, 2),
        ("sdma_ddr_ddr", copy_task(2, Unit.SDMA, src=0, dst=0, counts=(4, 1, 1, 1),
                                   levels=(DDR, DDR)), Cause.BAD_LEVEL, 2),
        ("level+count", copy_task(1, src=0, dst=0, counts=(0, 1, 1, 1), levels=(DDR, L1)),
         Cause.BAD_LEVEL, 1),
        *((f"count{d}_0", copy_task(1, src=0, dst=0, counts=[0 if j == d else 1
                                                             for j in range(4)]),
           Cause.BAD_VALUE, 1) for d in range(4)),
        *((f"count{d}_big", copy_task(2, src=0, dst=0, counts=[1 << 16 if j == d else 1
                                                               for j in range(4)]),
           Cause.BAD_VALUE, 2) for d in range(4)),
        ("count_huge", copy_task(2, src=0, dst=0, counts=(1, 1, 1, 1 << 31)), Cause.BAD_VALUE,
         2),
        # a count written twice: the later write decides (the SEQ keeps the counts' checks
        # as flags set per write); rewritten valid, the task fails on SRC_HI instead
        ("count_rewritten", with_task(2, replace(t[2], writes=(
            *t[2].writes, (COPY.index("COUNT1"), 0), (COPY.index("COUNT1"), 1 << 16),
            (COPY.index("COUNT1"), 1), (COPY.index("SRC_HI"), 1)))), Cause.BAD_REGION, 2),
        ("count_rewritten_0", with_task(1, replace(t[1], writes=(
            *t[1].writes, (COPY.index("COUNT0"), 7), (COPY.index("COUNT0"), 0)))),
         Cause.BAD_VALUE, 1),
        ("count_rewritten_big", with_task(2, replace(t[2], writes=(
            *t[2].writes, (COPY.index("COUNT3"), 1), (COPY.index("COUNT3"), 1 << 20)))),
         Cause.BAD_VALUE, 2),
        ("no_writes", with_task(1, Task(Unit.DMA, 1, 0, 0, 0, ())), Cause.BAD_LEVEL, 1),
        ("levels_only", with_task(1, Task(Unit.DMA, 1, 0, 0, 0, levels)), Cause.BAD_VALUE, 1),
        ("count+hi", with_task(1, Task(Unit.DMA, 1, 0, 0, 0, ((COPY.index("SRC_HI"), 1),
                                                              *levels))),
         Cause.BAD_VALUE, 1),
        ("src_hi", with_task(2, replace(t[2], writes=(*t[2].writes,
                                                      (COPY.index("SRC_HI"), 1)))),
         Cause.BAD_REGION, 2),
        ("dst_hi", with_task(1, replace(t[1], writes=(*t[1].writes,
                                                      (COPY.index("DST_HI"), 1 << 31)))),
         Cause.BAD_REGION, 1),
        *regions,
        ("region_ddr", copy_task(2, Unit.SDMA, src=(1 << 32) - 8, dst=0, counts=(9, 1, 1, 1),
                                 levels=(DDR, L2)), Cause.BAD_REGION, 2),
        ("region_ddr_dst", copy_task(2, Unit.SDMA, src=0, dst=(1 << 32) - 16,
                                     counts=(8, 2, 1, 1), dst_strides=(9, 0, 0),
                                     levels=(L2, DDR)), Cause.BAD_REGION, 2),
        ("region_l2_dst", copy_task(2, Unit.SDMA, src=0, dst=mem_bytes(CFG, L2) - 2,
                                    counts=(3, 1, 1, 1), levels=(DDR, L2)),
         Cause.BAD_REGION, 2),
        ("region_l1_src", copy_task(1, src=mem_bytes(CFG, L1) - 4, dst=0,
                                    counts=(2, 1, 1, 2), src_strides=(0, 0, 3),
                                    levels=(L1, L2)), Cause.BAD_REGION, 1),
        ("requant_align", patch_write(good, 3, 1, "value", 20), Cause.BAD_ENTRY, 3),
        ("requant_end", patch_write(good, 3, 1, "value", 320 - REQUANT_ENTRY.size + 8),
         Cause.BAD_ENTRY, 3),
        ("requant_far", patch_write(good, 3, 1, "value", 0xFFFFFFF8), Cause.BAD_ENTRY, 3),
        ("table_align", patch_write(good, 4, 1, "value", 12), Cause.BAD_ENTRY, 4),
        ("table_end", patch_write(good, 4, 1, "value", 320 - TABLE_BYTES + 8),
         Cause.BAD_ENTRY, 4),
        ("table_far", patch_write(good, 4, 1, "value", 0xFFFFFF00), Cause.BAD_ENTRY, 4),
        ("elt_align", patch_write(patch_write(patch_write(good, 4, 0, "value", ELT_OPS[-1]),
                                              4, 1, "index", CSTL_REGS.index("REQUANT")),
                                  4, 1, "value", 12), Cause.BAD_ENTRY, 4),
        ("elt_end", patch_write(patch_write(patch_write(good, 4, 0, "value", ELT_OPS[0]), 4, 1,
                                            "index", CSTL_REGS.index("REQUANT")),
                                4, 1, "value", 320 - ELTWISE_ENTRY.size + 8),
         Cause.BAD_ENTRY, 4),
        ("elt_far", patch_write(patch_write(patch_write(good, 4, 0, "value", ELT_OPS[1]), 4, 1,
                                            "index", CSTL_REGS.index("REQUANT")),
                                4, 1, "value", 0xFFFFFFF8), Cause.BAD_ENTRY, 4),
    ]


@pytest.mark.parametrize("part", [0, 1, 2, 3])
def test_task_errors(part):
    """Corrupt tasks; half of them on the 16-byte word (same memories, fewer fetch cycles,
    three register writes a cycle)."""
    rng = random.Random(12)
    cases = _task_cases(rng)
    cases = cases[part::4]
    cfg = CFG if part % 2 else CFG16
    base = 4 * 12
    good = encode(_base_program(random.Random(12)))
    want = expected_issues(cfg, good, base)
    run_errors(cfg, [(n, b, base, c, k, want) for n, b, c, k in cases], 12 + part)


def test_stream_length_errors():
    rng = random.Random(14)
    tasks = (dma(rng, signal=1), dma(rng, inst=1, wait=1), dma(rng, src=0, dst=0))
    p = Program(HASH, (), tasks, bytes(16))
    good = encode(p)
    h = HEADER.unpack(good, 0)
    want = expected_issues(CFG, good, 0)
    last = task_at(good, 2)
    sb = h["stream_bytes"]
    cases = [
        ("inside_write", patch_header(good, "stream_bytes", sb - 3), Cause.BAD_HEADER, 2),
        ("inside_header", patch_header(good, "stream_bytes", last - HEADER.size + 5),
         Cause.BAD_HEADER, 2),
        ("at_header", patch_header(good, "stream_bytes", last - HEADER.size),
         Cause.BAD_HEADER, 2),
        ("trailing", patch_header(good, "stream_bytes", sb + 4), Cause.BAD_HEADER, 3),
        ("fewer_tasks", patch_header(good, "task_count", 2), Cause.BAD_HEADER, 2),
        ("more_tasks", patch_header(good, "task_count", 4), Cause.BAD_HEADER, 3),
    ]
    run_errors(CFG, [(n, b, 0, c, k, want) for n, b, c, k in cases], 14)


def _chain(rng, n=5):
    """DMA0 signals token 1, DMA1 waits for it, then sDMA and DMA0 tasks without tokens."""
    tasks = [dma(rng, signal=1), dma(rng, inst=1, wait=1, signal=2),
             Task(Unit.SDMA, 0, 0, 0, 0, copy_writes(rng, src=0, dst=0, counts=(4, 1, 1, 1),
                                                      levels=(L2, DDR)))]
    tasks += [dma(rng) for _ in range(n - 3)]
    return encode(Program(HASH, (), tuple(tasks), bytes(24 * 8)))


def test_runtime_errors():
    """Unit errors, AXI errors, the entry fetcher's error: cause and task, ERROR once the
    units have finished."""
    rng = random.Random(15)
    chain = _chain(rng)
    prog = encode(_base_program(rng))
    want_chain = expected_issues(CFG, chain, 0)
    want_prog = expected_issues(CFG, prog, 8)
    cases = [
        # the unit running task 2 reports an error (the others go on)
        (Job(chain, unit_error=2), Cause.UNIT_ERROR, 2, want_chain),
        (Job(prog, base=8, unit_error=3), Cause.UNIT_ERROR, 3, want_prog),
        (Job(prog, base=8, unit_error=4, hold=1), Cause.UNIT_ERROR, 4, want_prog),
        # an AXI error on the first word: task 0 is being decoded
        (Job(chain, axi_error="first"), Cause.AXI_ERROR, 0, want_chain),
        # task 0 never finishes: task 1 waits in the slot, task 2 is being decoded
        (Job(chain, hold=0, axi_error="stalled"), Cause.AXI_ERROR, 2, want_chain),
        # task 1 never finishes: the others issue, the SEQ waits with 5 tasks decoded
        (Job(chain, hold=1, axi_error="stalled"), Cause.AXI_ERROR, 5, want_chain),
        # the entry fetcher of the NMU's task 3 reports an entry past the data section
        (Job(prog, base=8, hold=3, entry_error=3), Cause.BAD_ENTRY, 3, want_prog),
        # unit error while another unit still runs; a start meanwhile is ignored
        (Job(chain, hold=0, hold_cycles=150, unit_error=2, start_again=100),
         Cause.UNIT_ERROR, 2, want_chain),
        # a free unit does not take task 2's start (a DMA), the NMU's task 3: the run stops
        # at once, the task named, without waiting for the refusing unit; task 1 still runs
        (Job(chain, refuse=2), Cause.START_REFUSED, 2, want_chain),
        (Job(prog, base=8, refuse=3, hold=1, hold_cycles=60), Cause.START_REFUSED, 3,
         want_prog),
    ]
    results = run_jobs(CFG, [c[0] for c in cases], 15)
    for n, ((_, cause, task, want), res) in enumerate(zip(cases, results, strict=True)):
        got = (Status(res.status), Cause(res.cause), res.error_task)
        assert got == (Status.ERROR, cause, task), (n, got)
        check_issues(CFG, res, want, len(res.issues))
    # an AXI error ends the fetch: the SEQ waits for the units, issues nothing more
    assert len(results[4].issues) == 1
    # a refused start: the refused task was the last offered, the cause shows two cycles
    # after it (the refusal registered, then the error)
    for (job, *_), res in zip(cases[-2:], results[-2:], strict=True):
        assert len(res.issues) == job.refuse + 1, (len(res.issues), job.refuse)
        assert res.cause_cycle == res.issue_cycles[-1] + 2, (res.cause_cycle, res.issue_cycles)
    # two units finish in the same cycle, one with an error: the task of the failing one
    three = encode(Program(HASH, (), (dma(rng), dma(rng, inst=1), dma(rng, src=0, dst=64))))
    jobs = [Job(three, hold=(0, 1), hold_until=120, unit_error=e) for e in (0, 1)]
    for e, res in enumerate(run_jobs(CFG, jobs, 25)):
        assert (res.status, res.cause, res.error_task) == (Status.ERROR, Cause.UNIT_ERROR, e)
        assert res.done_cycles[0] == res.done_cycles[1], res.done_cycles


def test_watchdog(limit=20):
    """A stuck unit: WATCHDOG ``limit`` quiet cycles after the last progress, naming the task
    in the issue slot (else the next to decode); ``progress`` holds it off, 0 switches it
    off; ERROR once the stuck unit has finished."""
    rng = random.Random(16)
    chain = _chain(rng)
    want = expected_issues(CFG, chain, 0)
    jobs = [
        Job(chain, watchdog=limit, hold=0),
        Job(chain, watchdog=limit, hold=1),
        Job(chain, watchdog=limit, hold=0, progress_until=200),
        Job(chain, watchdog=0, hold=0, hold_cycles=120),
        Job(chain, watchdog=limit + 100, hold=1, hold_cycles=90),
    ]
    results = run_jobs(CFG, jobs, 16)
    for n, res in enumerate(results[:3]):
        got = (Status(res.status), Cause(res.cause), res.error_task)
        assert got == (Status.ERROR, Cause.WATCHDOG, (1, 5, 1)[n]), (n, got)
        check_issues(CFG, res, want, len(res.issues))
    # the cause shows the cycle after the limit-th cycle without progress
    assert results[2].cause_cycle == results[2].progress_last + limit + 2
    for res in results[3:]:
        assert (res.status, res.cause) == (Status.DONE, Cause.NONE)
        check_issues(CFG, res, want)
        assert res.cycles > 90
    # START counts as progress: with a limit of 1 or 2 the first fetch (a few cycles) is
    # too slow, and the cause shows as long after the start pulse (cycle -1) as above
    for limit, res in zip((1, 2), run_jobs(CFG, [Job(chain, watchdog=w, pace=(1, 1))
                                                  for w in (1, 2)], 16), strict=True):
        got = (res.cause, res.error_task, res.cause_cycle)
        assert got == (Cause.WATCHDOG, 0, -1 + limit + 2), (limit, got)


def test_restart_right_after_errors():
    """A run started right after an ERROR (or DONE) reads its own program: nothing the
    failed run fetched is left over (ERROR means quiescent)."""
    rng = random.Random(17)
    good = encode(random_program(CFG, 17, ntasks=12, nbufs=0))
    long = [dma(rng, signal=1), dma(rng, inst=1, wait=1), dma(rng)]
    long += [dma(rng, inst=1) for _ in range(12)]
    long = encode(Program(HASH, (), tuple(long)))
    # task 0 runs for 100 cycles: the fetch FIFO fills while the decoder waits; task 3 is bad
    bad_unit = patch_task(long, 3, "unit", Unit.VPU)
    bad_magic = patch_header(good, "magic", b"NEMX")
    want = expected_issues(CFG, good, 40)
    # the slot's command of a failed region check, then compute tasks first
    bad_region = encode(Program(HASH, (), (dma(rng, src=200, dst=0, counts=(400, 1, 1, 1)),)))
    compute = encode(Program(HASH, (), (_compute(Unit.CSTL, 1, op=ELT_OPS[0]),
                                        _compute(Unit.NMU, 0), dma(rng)), bytes(64)))
    jobs = [Job(bad_unit, hold=0, hold_cycles=100), Job(good, base=40),
            Job(bad_magic, base=40), Job(good, base=40),
            Job(long, base=4, hold=0, axi_error="stalled"), Job(good, base=40),
            Job(good, base=40), Job(bad_region), Job(compute)]
    results = run_jobs(CFG, jobs, 17)
    assert (results[7].cause, results[7].error_task) == (Cause.BAD_REGION, 0)
    assert (results[8].status, results[8].cause) == (Status.DONE, Cause.NONE)
    check_issues(CFG, results[8], expected_issues(CFG, compute, 0))
    for n, cause in ((0, Cause.BAD_UNIT), (2, Cause.BAD_MAGIC), (4, Cause.AXI_ERROR)):
        assert (results[n].status, results[n].cause) == (Status.ERROR, cause), n
    for n in (1, 3, 5, 6):
        assert (results[n].status, results[n].cause) == (Status.DONE, Cause.NONE), n
        check_issues(CFG, results[n], want)


def test_staging_cleared_after_a_failed_run():
    """A run that fails in HAND leaves its staged registers behind; the next run's first
    task reads 0 from every register it does not write (``registers``), not those."""
    rng = random.Random(23)
    # a DMA from DDR (BAD_LEVEL in HAND) with every stride register written, non-zero
    bad = dma(rng, noise=False, levels=(DDR, L1), src_strides=(8, 16, 32),
              dst_strides=(8, 16, 32), counts=(8, 2, 1, 1))
    # then a run whose DMA writes no stride register (one row of 8 bytes, L2 -> L1)
    values = {"SRC_LO": 16, "DST_LO": 32, "SRC_LEVEL": L2, "DST_LEVEL": L1, "COUNT0": 8,
              "COUNT1": 1, "COUNT2": 1, "COUNT3": 1}
    good = Task(Unit.DMA, 0, 0, 0, 0, tuple((COPY.index(n), v) for n, v in values.items()))
    first = encode(Program(HASH, (), (bad,)))
    second = encode(Program(HASH, (), (good,)))
    results = run_jobs(CFG, [Job(first), Job(second)], 23)
    assert (results[0].status, results[0].cause) == (Status.ERROR, Cause.BAD_LEVEL)
    assert (results[1].status, results[1].cause) == (Status.DONE, Cause.NONE)
    check_issues(CFG, results[1], expected_issues(CFG, second, 0))


def _compute(unit, inst, wait=0, signal=0, *, op=None, table=NO_TABLE, entry=0, extra=()):
    """An NMU task (REQUANT ``entry``) or a CSTL task (``op``, ``TABLE``, ``REQUANT``)."""
    if unit == Unit.NMU:
        writes = (*extra, (COMPUTE.index("REQUANT"), entry))
    else:
        writes = ((CSTL_REGS.index("OPCODE"), op), *extra, (CSTL_REGS.index("TABLE"), table),
                  (CSTL_REGS.index("REQUANT"), entry))
    return Task(unit, inst, 0, wait, signal, writes)


def test_hand_over_while_the_slot_issues():
    """Each kind of task reaches the issue slot in the cycle the task before it leaves (that
    task waited for a token of a long task); a compute unit's next task waits until the
    slot no longer holds one for the same unit (its shadow registers are in use)."""
    rng = random.Random(18)
    sdma = Task(Unit.SDMA, 0, 0, 0, 0, copy_writes(rng, src=4, dst=0, counts=(8, 1, 1, 1),
                                                    levels=(DDR, L2)))
    t = [dma(rng, signal=1),                                         # 0 held
         dma(rng, inst=1, wait=1, signal=2),
         _compute(Unit.CSTL, 0, op=ELT_OPS[0], entry=16),
         replace(sdma, signal=4),                                    # 3 held
         dma(rng, inst=1, wait=4),
         _compute(Unit.NMU, 0, entry=8, extra=((5, 7),)),
         dma(rng, signal=8),                                         # 6 held
         dma(rng, inst=1, wait=8),
         sdma,
         _compute(Unit.CSTL, 1, signal=1, op=TABLE_OPS[1], table=0),  # 9 held
         dma(rng, inst=1, wait=1),
         dma(rng),
         replace(sdma, signal=2),                                    # 12 held
         _compute(Unit.NMU, 0, wait=2, entry=0, extra=((9, 1), (10, 2))),
         _compute(Unit.NMU, 0, entry=24, extra=((9, 3),)),
         replace(sdma, signal=4),                                    # 15 held
         _compute(Unit.CSTL, 1, wait=4, op=OTHER_OPS[0], extra=((7, 1),)),
         _compute(Unit.CSTL, 0, op=TABLE_OPS[2], table=TABLE_ALIGN * 3),
         _compute(Unit.CSTL, 1, op=ELT_OPS[2], entry=32, extra=((7, 2),)),
         dma(rng)]
    binary = encode(Program(HASH, (), tuple(t), bytes(320)))
    want = expected_issues(CFG, binary, 0)
    [res] = run_jobs(CFG, [Job(binary, hold=(0, 3, 6, 9, 12, 15), hold_cycles=40)], 18)
    assert (res.status, res.cause) == (Status.DONE, Cause.NONE)
    check_issues(CFG, res, want)


def _aligned(cfg, tasks, data=b""):
    """The binary of ``tasks``, the last one padded with writes (or none) so that the task
    stream ends on a bus word: no byte after the last record is fetched."""
    tasks = list(tasks)
    last = tasks[-1]
    for pad in range(cfg.wbytes):
        extra = ((COPY.index("SRC_HI"), 0),) * pad if last.unit in (Unit.DMA, Unit.SDMA) \
            else ((5, pad),) * pad
        tasks[-1] = replace(last, writes=last.writes + extra)
        binary = encode(Program(cfg.device_hash, (), tuple(tasks), data))
        if (HEADER.size + HEADER.unpack(binary, 0)["stream_bytes"]) % cfg.wbytes == 0:
            return binary
    raise AssertionError("no padding aligns the stream")


@pytest.mark.parametrize("cfg", [CFG, WIDE], ids=["w4", "w16"])
def test_stream_ends_on_a_word(cfg):
    """The last record ends on the last fetched byte, for every unit type as the last task
    (and compute tasks without writes: the task header is the last record)."""
    rng = random.Random(19)
    first = [dma(rng, signal=1), dma(rng, wait=1)]
    sdma = Task(Unit.SDMA, 0, 0, 1, 0, copy_writes(rng, src=64, dst=8, counts=(4, 2, 1, 1),
                                                    src_strides=(4, 0, 0), levels=(DDR, L2)))
    lasts = [dma(rng, wait=1, inst=cfg.n_dma - 1), sdma]
    if cfg.n_nmu:
        lasts += [_compute(Unit.NMU, 0, entry=8), Task(Unit.NMU, 0, 0, 0, 0, ())]
    if cfg.n_cstl:
        lasts += [_compute(Unit.CSTL, 1, op=TABLE_OPS[0], table=0),
                  Task(Unit.CSTL, 0, 0, 0, 0, ())]
    data = bytes(256) if cfg.n_nmu else b""
    binaries = [(_aligned(cfg, [*first, last], data), 0) for last in lasts]
    run_valid(cfg, binaries, 19)


def test_edges_that_pass():
    """Values on the edge of every check, all accepted: regions ending on a memory's last
    byte (DDR: 2**32), counts of 65535, the highest token, instance and register index,
    entries ending on the data section's last byte."""
    rng = random.Random(20)
    top = 1 << (CFG.tokens - 1)
    l1, l2, ddr = (mem_bytes(CFG, x) for x in (L1, L2, DDR))
    t = [
        Task(Unit.DMA, CFG.n_dma - 1, 0, 0, top, copy_writes(
            rng, src=l2 - 4 - 2 * 16 - 2 * 64 - 2 * 100, dst=l1 - 4 - 1 * 8 - 2 * 20 - 1 * 60,
            counts=(4, 3, 3, 3), src_strides=(16, 64, 100), dst_strides=(4, 20, 30),
            levels=(L2, L1))),
        Task(Unit.SDMA, CFG.n_sdma - 1, 0, top, 0, copy_writes(
            rng, src=ddr - 8, dst=l2 - 8, counts=(8, 65535, 1, 1), levels=(DDR, L2))),
        Task(Unit.SDMA, 0, 0, 0, top, copy_writes(rng, src=0, dst=ddr - 16, counts=(8, 1, 1, 2),
                                                  dst_strides=(0, 0, 8), levels=(L2, DDR))),
        Task(Unit.DMA, 0, 0, top, top, copy_writes(rng, src=l1 - 1, dst=l1 - 1,
                                                   counts=(1, 1, 1, 1), levels=(L1, L1))),
        _compute(Unit.NMU, 0, wait=top, entry=320 - REQUANT_ENTRY.size,
                 extra=((len(COMPUTE) - 1, 5),)),
        _compute(Unit.CSTL, CFG.n_cstl - 1, op=TABLE_OPS[-1], table=320 - TABLE_BYTES),
        _compute(Unit.CSTL, 0, op=ELT_OPS[-1], entry=320 - ELTWISE_ENTRY.size),
        _compute(Unit.CSTL, 0, op=TABLE_OPS[0], table=NO_TABLE),
        _compute(Unit.CSTL, 1, op=OTHER_OPS[-1], table=5, entry=3),
        # TABLE / REQUANT not written: 0, the data section's start
        Task(Unit.CSTL, 1, 0, 0, 0, ((CSTL_REGS.index("OPCODE"), TABLE_OPS[3]),)),
        Task(Unit.CSTL, 0, 0, 0, 0, ((CSTL_REGS.index("OPCODE"), ELT_OPS[1]),)),
        Task(Unit.NMU, 0, 0, 0, 0, ((7, 7),)),
        Task(Unit.CSTL, 2, 0, 0, 0, ()),   # the stream's last 12 bytes: a task header
    ]
    binary = encode(Program(HASH, (), tuple(t), bytes(320)))
    run_valid(CFG, [(binary, 0)], 20)


def test_decode_ahead():
    """While the issue slot holds a task waiting for a token, the next task is decoded: a
    compute task for another unit gets its shadow registers (clear, writes) before the
    waiting task issues; one for the same unit only after."""
    rng = random.Random(21)
    nmu = _compute(Unit.NMU, 0, entry=8, extra=((4, 4),))
    cstl0 = _compute(Unit.CSTL, 0, op=TABLE_OPS[0], table=0, extra=((8, 1),))
    cstl1 = replace(cstl0, instance=1)
    cases = [  # (waiting task, next task, decoded before the waiting one issues)
        (dma(rng, inst=1, wait=1), nmu, True),
        (replace(nmu, wait=1), cstl0, True),
        (replace(cstl0, wait=1), cstl1, True),
        (replace(cstl1, wait=1), nmu, True),
        (replace(nmu, wait=1), nmu, False),
        (replace(cstl1, wait=1), cstl1, False),
    ]
    jobs = []
    for waiting, after, _ in cases:
        tasks = (dma(rng, signal=1), waiting, after)
        jobs.append(Job(encode(Program(HASH, (), tasks, bytes(256))), hold=0, hold_cycles=60))
    for n, (res, (_, after, ahead)) in enumerate(zip(run_jobs(CFG, jobs, 21), cases,
                                                     strict=True)):
        assert (res.status, res.cause) == (Status.DONE, Cause.NONE), n
        name = "nmu" if after.unit == Unit.NMU else f"cstl{after.instance}"
        last_clear = [c for c, who in res.clears if who == name][-1]
        assert (last_clear < res.issue_cycles[1]) == ahead, (n, last_clear, res.issue_cycles)
        # the waiting task is held from its hand-over (before the next one's clear) on
        if ahead:
            held = set(range(last_clear, res.issue_cycles[1]))
            assert held <= set(res.waiting), (n, sorted(held - set(res.waiting)))


def test_ports():
    """The component's ports follow the configuration: a start/done pair per unit, CSTL
    ports only on engines with CSTLs."""
    for cfg, cstl in ((CFG, True), (WIDE, False), (EngineConfig.shipped("small"), True)):
        dut = Sequencer(cfg)
        n = cfg.n_dma + cfg.n_sdma + cfg.n_nmu + cfg.n_cstl
        assert len(dut.unit_start) == len(dut.unit_done) == n
        assert len(dut.tokens) == cfg.tokens
        for name in ("cstl_clear", "cstl_write", "cstl_sel", "cstl_table", "cstl_has_table",
                     "cstl_elt_entry"):
            assert (name in dut.signature.members) == cstl, (cfg.name, name)
        widths = {"start": 1, "base": cfg.addr_width, "watchdog": 32, "progress": 1,
                  "fetch_error": 1, "status": 2, "cause": 8, "error_task": 32, "issued": 32,
                  "completed": 32, "tokens": cfg.tokens, "issue": 1,
                  "issue_unit": max(1, (n - 1).bit_length()), "issue_wait": 32,
                  "issue_signal": 32, "waiting": 1, "nmu_clear": 1, "entry_error": 1}
        if cstl:
            widths |= {"cstl_clear": cfg.n_cstl, "cstl_table": cfg.addr_width,
                       "cstl_sel": max(1, (cfg.n_cstl - 1).bit_length()),
                       "cstl_has_table": 1, "cstl_elt_entry": 1}
        for name, width in widths.items():
            assert len(getattr(dut, name)) == width, (cfg.name, name)


def test_stream_ending_at_the_top_of_the_address_space():
    """A task stream that ends on the last byte of the 32-bit DDR space: nothing past it is
    fetched (the word counter must not wrap to address 0)."""
    rng = random.Random(22)
    binary = _aligned(CFG, [dma(rng, signal=1), dma(rng, wait=1)])
    assert len(binary) % CFG.wbytes == 0
    run_valid(CFG, [(binary, (1 << 32) - len(binary))], 22)


def test_connects_like_the_engine():
    """The SEQ's streams fit the blocks the engine connects them to (``npu.engine.top``):
    the AXI read mux's client, the copy units' start/done, the NMU's register writes and
    the entry fetcher's request."""
    from amaranth import Module
    from amaranth.lib import wiring

    from npu.bus.ports import AxiReadMux
    from npu.engine.copy_units import DmaUnit, SdmaUnit
    from npu.engine.entry_fetch import EntryFetcher
    from npu.nmu.regs import NmuRegisters

    for cfg in (CFG, WIDE):
        m = Module()
        seq = Sequencer(cfg)
        rmux = AxiReadMux(addr_width=cfg.addr_width, data_width=cfg.data_width, clients=2)
        wiring.connect(m, seq.fetch_cmd, rmux.cmd[0])
        wiring.connect(m, rmux.data[0], seq.fetch_data)
        units = [DmaUnit(data_width=cfg.data_width, l1_depth=cfg.l1_depth,
                         l2_depth=cfg.l2_depth, addr_width=cfg.addr_width)] * cfg.n_dma
        units += [SdmaUnit(data_width=cfg.data_width, l2_depth=cfg.l2_depth,
                           addr_width=cfg.addr_width)] * cfg.n_sdma
        for k, u in enumerate(units):
            wiring.connect(m, seq.unit_start[k], u.start)
            wiring.connect(m, u.done, seq.unit_done[k])
        wiring.connect(m, seq.nmu_write, NmuRegisters().write)
        entry = EntryFetcher(addr_width=cfg.addr_width, data_width=cfg.data_width)
        assert seq.nmu_entry.shape() == entry.start.payload.shape()
        if cfg.n_cstl:
            assert seq.cstl_write.payload.shape() == NmuRegisters().write.payload.shape()


def _header_check_steps():
    """The cycle (step) in which each header field is checked, by the docstring's rule: up
    to 8 bytes a cycle, whole fields in order, the device hash in 8-byte pieces."""
    steps, step, used = {}, 0, 0
    for f in HEADER.fields:
        for piece, at in enumerate(range(0, f.size, 8)):
            size = min(8, f.size - at)
            if used and used + size > 8:
                step, used = step + 1, 0
            steps[f.name, piece] = step
            used += size
    return steps


def test_header_check_timing():
    """With the fetch never stalling (16-byte words: the header checks, not the fetch, set
    the pace), a failing header check shows as many cycles after a bad magic as its step
    comes after the first."""
    rng = random.Random(23)
    good = encode(Program(WIDE.device_hash, (), (dma(rng),)))
    steps = _header_check_steps()
    h = HEADER["device_hash"].offset
    cases = [("magic", 0, patch_header(good, "magic", b"MEMB")),
             ("minor", 0, patch_header(good, "minor", 99)),
             ("header_bytes", 0, patch_header(good, "header_bytes", 0)),
             *(("device_hash", p, patch(good, h + 8 * p + 3, good[h + 8 * p + 3] ^ 4, 1))
               for p in range(4)),
             ("table_offset", 0, patch_header(good, "table_offset", 0)),
             ("stream_offset", 0, patch_header(good, "buffer_count", 1))]
    jobs = [Job(b, pace=(1, 1)) for *_, b in cases]
    results = run_jobs(WIDE, jobs, 23)
    first = results[0].cause_cycle
    for (name, piece, _), res in zip(cases, results, strict=True):
        assert res.cause_cycle - first == steps[name, piece], (name, piece, res.cause_cycle)


def test_watchdog_counts_issues_and_completions():
    """Once every task is decoded, only issues, completions and ``progress`` keep the
    watchdog quiet: stretches shorter than the limit between them end in DONE; the
    unit's run after its issue is one cycle shorter than the limit, so the issue must
    count."""
    rng = random.Random(24)
    sdma = Task(Unit.SDMA, 0, 0, 0, 0, copy_writes(rng, src=0, dst=0, counts=(4, 1, 1, 1),
                                                    levels=(DDR, L2)))
    three = encode(Program(HASH, (), (dma(rng), dma(rng, inst=1), sdma)))
    two = encode(Program(HASH, (), (dma(rng), dma(rng))))
    limit_a, limit_b = 30, 16
    jobs = [Job(three, watchdog=limit_a, pace=(1, 1), delays={0: 40, 1: 40, 2: 45},
                progress_tasks=(0,)),
            Job(two, watchdog=limit_b, pace=(1, 1), delays={0: 40, 1: limit_b - 1},
                progress_tasks=(0,))]
    results = run_jobs(CFG, jobs, 24)
    for job, res, limit in zip(jobs, results, (limit_a, limit_b), strict=True):
        moves = sorted({*res.issue_cycles, *res.done_cycles, *res.progress_cycles})
        after = [c for c in moves if c >= res.issue_cycles[-1]]
        gaps = [b - a - 1 for a, b in itertools.pairwise(after)]
        assert max(gaps) < limit <= max(gaps) + 1 or job is jobs[0], (gaps, limit)
        assert (res.status, res.cause) == (Status.DONE, Cause.NONE), res.cause


def test_units_an_engine_without_compute_units_lacks():
    """On the copy-only engine, NMU and CSTL tasks (and instances past its DMAs and sDMAs)
    are BAD_UNIT; with 32 tokens every mask fits."""
    rng = random.Random(26)
    tasks = (dma(rng, signal=1 << 31), dma(rng, wait=1 << 31, signal=0xFFFFFFFF),
             _compute(Unit.NMU, 0), _compute(Unit.CSTL, 0, op=0))
    good = encode(Program(WIDE.device_hash, (), tasks, bytes(64)))
    want = expected_issues(WIDE, encode(Program(WIDE.device_hash, (), tasks[:2])), 16)
    cases = [("nmu", good, 2), ("cstl", patch_task(good, 2, "unit", Unit.CSTL), 2),
             ("dma1", patch_task(good, 1, "instance", WIDE.n_dma), 1),
             ("sdma2", patch_task(patch_task(good, 0, "unit", Unit.SDMA), 0, "instance",
                                  WIDE.n_sdma), 0)]
    run_errors(WIDE, [(n, b, 16, Cause.BAD_UNIT, k, want) for n, b, k in cases], 26)


def test_writes_the_window_holds_go_together():
    """On the 16-byte word three register writes are taken a cycle: after a stall (the
    window full), a bad index in any write of a task with two or three writes shows in the
    same cycle."""
    rng = random.Random(27)
    head = (dma(rng, signal=1), dma(rng, inst=1, wait=1), dma(rng))  # task 0 held: a stall
    jobs = []
    for writes in (((0, 4), (2, 8), (4, 8)), ((0, 4), (4, 8))):
        tasks = (*head, Task(Unit.DMA, 1, 0, 0, 0, writes), dma(rng))
        good = encode(Program(HASH, (), tasks))
        jobs += [Job(patch_write(good, 3, j, "index", 99), hold=0, hold_until=80,
                     pace=(1, 1)) for j in range(len(writes))]
    results = run_jobs(CFG16, jobs, 27)
    assert {(r.cause, r.error_task) for r in results} == {(Cause.BAD_REGISTER, 3)}
    assert len({r.cause_cycle for r in results}) == 1, [r.cause_cycle for r in results]


def _copy_task(unit, values, order):
    """A copy task writing ``values`` (register name -> value) in the order of ``order``."""
    return Task(unit, 0, 0, 0, 0, tuple((COPY.index(n), values[n]) for n in order))


@pytest.mark.parametrize("cfg", [CFG, CFG16], ids=["w4", "w16"])
def test_staging_cleared_between_back_to_back_tasks(cfg):
    """Each task's writes follow right after the task before was handed to the issue slot
    (the window full while HAND waits for the slot, the units quick; on the 16-byte word
    the first writes are taken two cycles after the hand-over, as early as the decode
    allows): the staging registers are cleared in between, so a task reads 0 from every
    register it does not write and the values of those it writes, whatever the task
    before wrote. Every register is written non-zero (the high words 0) by one task and
    left unwritten by the next; the next task's first writes are the ones it needs."""
    rng = random.Random(28)
    names = copy_register_names()
    tasks = []
    for n in range(6):
        # a DMA L2 -> L1 writing every register, its strides and addresses non-zero
        full = {"SRC_LO": 4 + n, "DST_LO": 8 + n, "SRC_HI": 0, "DST_HI": 0,
                "SRC_LEVEL": L2, "DST_LEVEL": L1,
                **{f"COUNT{d}": (4, 2, 2, 2)[d] + n % 2 for d in range(4)},
                **{f"{side}_STRIDE{d}": d + n for side in ("SRC", "DST") for d in (1, 2, 3)}}
        order = list(names)
        rng.shuffle(order)
        tasks.append(_copy_task(Unit.DMA, full, order))
        # then an sDMA DDR -> L2 or a DMA L1 -> L2 writing only its levels and counts: its
        # addresses, strides and (the sDMA's) source level must read 0
        sparse = {"DST_LEVEL": L2, **{f"COUNT{d}": 1 + (d + n) % 3 for d in range(4)}}
        unit = Unit.SDMA if n % 2 else Unit.DMA
        if unit == Unit.DMA:
            sparse["SRC_LEVEL"] = L1
        order = list(sparse)
        rng.shuffle(order)
        tasks.append(_copy_task(unit, sparse, order))
    binary = encode(Program(cfg.device_hash, (), tuple(tasks)))
    want = expected_issues(cfg, binary, 0)
    for (_, task, _), k in zip(want[1::2], range(6), strict=True):
        r = registers(task, COPY)
        assert [r[COPY.index(n)] for n in ("SRC_LO", "DST_LO", "SRC_STRIDE1")] == [0, 0, 0]
        assert r[COPY.index("SRC_LEVEL")] == (DDR if k % 2 else L1)
    [res] = run_jobs(cfg, [Job(binary, pace=(1, 1), delays=dict.fromkeys(range(12), 1))], 28)
    assert (res.status, res.cause) == (Status.DONE, Cause.NONE)
    check_issues(cfg, res, want)
