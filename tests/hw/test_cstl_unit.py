"""The CSTL (lookup-table ops and casts) in the Amaranth simulator against its model.

Random tasks (rank 0..4, any alignment, innermost strides 1 or not, stride-0 broadcast
reads, random outer gaps; table opcodes i8 -> i8, casts widening and narrowing) go
through the unit's shadow registers as the sequencer writes them; the table comes word by
word with random gaps; the L1 model denies read and write grants at random and ``done``
is back-pressured. The expected L1 is :func:`npu.cstl.model.cstl_model` (the model
written apart from the RTL, checked against the executor by
``tests/hw/test_cstl_model.py``) on the same registers, L1 and data section. The register
decode is checked against :func:`npu.cstl.regs.decode` (built on the model's
``decode_task``) for random register sets and every refusal.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from nem.elemtypes import elem_type
from nem.numerics import NumericsError, eltwise_params
from nem.opcodes import OPCODES
from nem.registry import load_registry
from nem.taskformat import (
    ELEM_TYPES,
    ELTWISE_ENTRY,
    LEVELS,
    NO_QUANT,
    NO_TABLE,
    REGISTER_MAPS,
    TABLE_BYTES,
    Unit,
    attr_words,
    encode_eltwise,
)
from npu.cstl.eltalu import LATENCY as ALU_LATENCY
from npu.cstl.eltwalk import elt_runs
from npu.cstl.model import CstlUnsupported, cstl_model, decode_task, table_opcodes
from npu.cstl.poolwalk import pool_runs
from npu.cstl.regs import (
    RED_ATTRS,
    RED_OPS,
    CstlRegisters,
    decode,
    kept_registers,
    pool_attr_slots,
    red_attr_slots,
)
from npu.cstl.unit import TABLE_WORDS, CstlUnit
from npu.cstl.walk import runs
from npu.nmu.model import Cause

LANES, DEPTH = 8, 256
HALF = LANES * DEPTH // 2
POOL_FIELDS = ("pool", "kh", "kw", "sh", "sw", "top", "left", "ih", "iw", "elt", "b_addr",
               "red", "entry")
REGS = REGISTER_MAPS[Unit.CSTL]
I8 = ELEM_TYPES.index("i8")
L1 = LEVELS.index("L1")


class L1Model:
    """Serves a read and a write client port from ``mem`` as ``ArbitratedSRAM`` does
    (grants denied at random, read data one cycle after ``go`` and held)."""

    def __init__(self, rd, wr, mem, rng, deny=0.3):
        self.rd, self.wr, self.mem, self.rng, self.deny = rd, wr, mem, rng, deny
        self.held = 0
        self.read = None
        self.write = None

    def before(self, ctx):
        # grants are combinational from the requests, and a read request may depend on
        # the write grant (the store takes a vector, the reader issues): settle twice
        allow = [self.rng.random() >= self.deny for _ in range(2)]
        for _ in range(2):
            for port, ok in zip((self.wr, self.rd), allow, strict=True):
                ctx.set(port.gnt, ctx.get(port.req) and ok)
        self.read = self.write = None
        if ctx.get(self.rd.go):
            assert ctx.get(self.rd.gnt), "read go without a grant"
            a = ctx.get(self.rd.addr) * LANES
            self.read = int.from_bytes(bytes(self.mem[a:a + LANES]), "little")
        if ctx.get(self.wr.go):
            assert ctx.get(self.wr.gnt), "write go without a grant"
            self.write = (ctx.get(self.wr.addr), ctx.get(self.wr.data), ctx.get(self.wr.en))

    def after(self, ctx):
        if self.read is not None:
            self.held = self.read
        ctx.set(self.rd.data, self.held)
        if self.write is not None:
            addr, word, en = self.write
            for k in range(LANES):
                if en >> k & 1:
                    self.mem[addr * LANES + k] = word >> (8 * k) & 0xFF


def _region(rng, dims, run):
    """Element strides of a region of shape ``dims`` (outermost first) and its span."""
    strides = [0] * len(dims)
    extent = 1
    for d in reversed(range(len(dims))):
        if d == len(dims) - 1:
            strides[d] = 1 if run else rng.choice([1, 2, 3, 5])
        else:
            strides[d] = rng.choice([0, extent, extent + rng.randint(1, 9)]) \
                if rng.random() < 0.2 else extent + rng.choice([0, 0, rng.randint(1, 9)])
        extent = max(extent, strides[d] * (dims[d] - 1) + 1) if dims[d] else extent
    return strides, sum(s * (n - 1) for s, n in zip(strides, dims, strict=True)) + 1


def _task(rng, cast=None):
    """Registers of a random table task (``TABLE`` 0: the table at data offset 0), or of a
    cast ``(from, to)`` (x in L1's lower half, y in the upper)."""
    src, dst = cast or ("i8", "i8")
    ib, ob = elem_type(src).bits // 8, elem_type(dst).bits // 8
    while True:
        rank = rng.randint(0, 4)
        dims = [rng.choice([1, 2, 3, rng.randint(1, 9), rng.randint(8, 40)])
                for _ in range(rank)]
        n = 1
        for d in dims:
            n *= d
        if n > 400:
            continue
        run = rng.random() < 0.6
        xs, xspan = _region(rng, dims, run)
        ys, yspan = _region(rng, dims, run)
        xspan, yspan = xspan * ib, yspan * ob
        if rng.random() < 0.3 and rank:
            xs[rng.randrange(rank)] = 0     # a broadcast read
        if xspan > HALF or yspan > HALF:
            continue
        x = rng.randint(0, HALF - xspan)
        y = HALF + rng.randint(0, HALF - yspan)
        opcode = rng.choice(sorted(table_opcodes())) if cast is None else "cast"
        regs = {"OPCODE": OPCODES.index(opcode), "NIN": 1, "NOUT": 1,
                "TABLE": 0 if cast is None else NO_TABLE}
        for k, (addr, strides, elem) in enumerate(((x, xs, src), (y, ys, dst))):
            regs |= {f"OP{k}_ADDR_LO": addr, f"OP{k}_LEVEL": L1,
                     f"OP{k}_ELEM": ELEM_TYPES.index(elem), f"OP{k}_RANK": rank,
                     **{f"OP{k}_DIM{d}": dims[d] for d in range(rank)},
                     **{f"OP{k}_STRIDE{d}": strides[d] for d in range(rank)}}
        return regs, dims


def _pool_task(rng, op="maxpool"):
    """Registers of a random NHWC pool: kernel 1..3 (or a whole 2-D image: a global
    pool), strides 1..3, pads up to the kernel (windows of pads alone too), channels
    contiguous (chunks of up to a word) or strided (one channel a chunk) on either side,
    any alignment; ``TABLE`` 0 or ``NO_TABLE`` at random."""
    while True:
        n, c = rng.randint(1, 2), rng.choice([1, 3, LANES, LANES + 3, 2 * LANES + 1])
        if rng.random() < 0.15:
            h, w = rng.randint(1, 6), rng.randint(1, 6)
            k, s, p = (h, w), (1, 1), (0, 0, 0, 0)
        else:
            k = (rng.randint(1, 3), rng.randint(1, 3))
            s = (rng.randint(1, 3), rng.randint(1, 3))
            p = tuple(rng.randint(0, k[d % 2]) for d in range(4))
            h, w = rng.randint(1, 7), rng.randint(1, 7)
        oh = (h + p[0] + p[2] - k[0]) // s[0] + 1
        ow = (w + p[1] + p[3] - k[1]) // s[1] + 1
        if oh < 1 or ow < 1:
            continue
        regs = {"OPCODE": OPCODES.index(op), "NIN": 1, "NOUT": 1,
                "TABLE": rng.choice([0, NO_TABLE])}
        spans = []
        for slot, dims in ((0, (n, h, w, c)), (1, (n, oh, ow, c))):
            cs = 1 if rng.random() < 0.7 else rng.randint(2, 3)
            strides = [0, 0, 0, cs]
            extent = cs * (c - 1) + 1
            for d in (2, 1, 0):
                strides[d] = extent + rng.choice([0, 0, rng.randint(1, 5)])
                extent = strides[d] * (dims[d] - 1) + extent
            spans.append(extent)
            regs |= {f"OP{slot}_LEVEL": L1, f"OP{slot}_ELEM": I8, f"OP{slot}_RANK": 4,
                     **{f"OP{slot}_DIM{d}": dims[d] for d in range(4)},
                     **{f"OP{slot}_STRIDE{d}": strides[d] for d in range(4)}}
        if max(spans) > HALF:
            continue
        regs["OP0_ADDR_LO"] = rng.randint(0, HALF - spans[0])
        regs["OP1_ADDR_LO"] = HALF + rng.randint(0, HALF - spans[1])
        attrs = {"kernel_shape": list(k)}
        if p != (0, 0, 0, 0) or rng.random() < 0.5:
            attrs["pads"] = list(p)
        if s != (1, 1) or rng.random() < 0.5:
            attrs["strides"] = list(s)
        specs = [(a.name, a.type) for a in load_registry()[op].attributes]
        regs |= {f"ATTR{j}": v for j, v in attr_words(op, specs, attrs)}
        return regs


def _elt_task(rng, op):
    """Registers of a random binary eltwise (rank 0..4, each input broadcast along random
    dimensions: missing, of size 1, or read with stride 0; the output strided or not) and
    its entry (``nem.numerics.eltwise_params`` of random scales and zero points; at data
    offset 0, ``REQUANT`` 0). Returns ``(regs, entry bytes)``."""
    while True:
        rank = rng.randint(0, 4)
        dims = [rng.choice([1, 2, 3, rng.randint(1, 6), rng.randint(8, 20)])
                for _ in range(rank)]
        if math.prod(dims) > 300:
            continue
        run = rng.random() < 0.7
        ys, yspan = _region(rng, dims, run)
        regs = {"OPCODE": OPCODES.index(op), "NIN": 2, "NOUT": 1, "REQUANT": 0,
                "TABLE": NO_TABLE}
        spans, ops = [], []
        for _ in range(2):
            lead = rng.randint(0, rank)
            shape = [1 if rng.random() < 0.3 else n for n in dims[lead:]]
            strides, span = _region(rng, shape, rng.random() < 0.8)
            for d in range(len(shape)):
                if rng.random() < 0.15:
                    strides[d] = 0     # a broadcast read of a full dimension
            spans.append(span)
            ops.append((shape, strides))
        if sum(spans) + 16 > HALF or yspan > HALF:
            continue
        at = rng.randint(0, HALF - sum(spans) - 16)
        addrs = [at, at + spans[0] + rng.randint(0, 8), HALF + rng.randint(0, HALF - yspan)]
        for k, (shape, strides) in enumerate([*ops, (dims, ys)]):
            regs |= {f"OP{k}_ADDR_LO": addrs[k], f"OP{k}_LEVEL": L1, f"OP{k}_ELEM": I8,
                     f"OP{k}_RANK": len(shape),
                     **{f"OP{k}_DIM{d}": shape[d] for d in range(len(shape))},
                     **{f"OP{k}_STRIDE{d}": strides[d] for d in range(len(shape))}}
        scales = [rng.choice([0.003, 0.01, 0.02, 0.05, 0.1, 0.25, 0.7]) for _ in range(3)]
        zeros = [rng.choice([-128, -20, 0, 3, 127, rng.randint(-128, 127)]) for _ in range(3)]
        try:
            params = eltwise_params(op, scales[0], zeros[0], scales[1], zeros[1], scales[2],
                                    zeros[2])
        except NumericsError:
            continue
        return regs, encode_eltwise(params)


def _red_task(rng, op):
    """Registers of a random last-axis reduction (rank 1..4; rows of one element, shorter
    or longer than a word; the input's rows contiguous or strided, gaps between rows; the
    output strided or not, its last axis kept or dropped; ``axis`` / ``axes`` as
    ``rank - 1`` or ``-1``; argmax into i8, i16 or i32; reduce_max with ``TABLE`` 0 or
    ``NO_TABLE``), anywhere in L1's lower (x) and upper (y) half."""
    while True:
        rank = rng.randint(1, 4)
        row = rng.choice([1, 2, LANES - 1, LANES, LANES + 1, 3 * LANES + 5, 40, 70, 140])
        dims = [rng.choice([1, 2, 3, rng.randint(1, 5)]) for _ in range(rank - 1)] + [row]
        if math.prod(dims) > 600:
            continue
        xs, xspan = _region(rng, dims, rng.random() < 0.6)
        keep = (rank == 1 and rng.random() < 0.8) or rng.random() < 0.5
        odims = dims[:-1] + ([1] if keep else [])
        elem = rng.choice(["i8", "i16", "i32"]) if op == "argmax" else "i8"
        ob = elem_type(elem).bits // 8
        ys, yspan = _region(rng, odims, rng.random() < 0.6) if odims else ([], 1)
        if xspan > HALF or yspan * ob > HALF:
            continue
        regs = {"OPCODE": OPCODES.index(op), "NIN": 1, "NOUT": 1,
                "TABLE": rng.choice([0, NO_TABLE]), "OP1_QUANT": NO_QUANT}
        for k, (addr, shape, strides, el) in enumerate((
                (rng.randint(0, HALF - xspan), dims, xs, "i8"),
                (HALF + rng.randint(0, HALF - yspan * ob), odims, ys, elem))):
            regs |= {f"OP{k}_ADDR_LO": addr, f"OP{k}_LEVEL": L1,
                     f"OP{k}_ELEM": ELEM_TYPES.index(el), f"OP{k}_RANK": len(shape),
                     **{f"OP{k}_DIM{d}": shape[d] for d in range(len(shape))},
                     **{f"OP{k}_STRIDE{d}": strides[d] for d in range(len(shape))}}
        axis = rng.choice([rank - 1, -1])
        attrs = {"keepdims": keep} if rng.random() < 0.8 or not keep else {}
        if op == "reduce_max":
            attrs["axes"] = [axis]
        elif rank > 1 or rng.random() < 0.8:     # argmax's absent axis is 0
            attrs["axis"] = axis
        specs = [(a.name, a.type) for a in load_registry()[op].attributes]
        regs |= {f"ATTR{j}": v for j, v in attr_words(op, specs, attrs)}
        return regs


def _codes_mem(rng):
    """L1 bytes for a reduction: random, or from a small set of codes (ties), or all -128."""
    codes = rng.choice([None, [0x80], [0x80, 0x81], [3, 5, 5, 0xFE], [0x7F, 0x80, 0]])
    if codes is None:
        return bytearray(rng.randbytes(LANES * DEPTH))
    return bytearray(rng.choice(codes) for _ in range(LANES * DEPTH))


def _want(regs, mem, table):
    """L1 after the task by the model, and its element count."""
    l1 = np.frombuffer(bytes(mem), np.uint8).copy()
    n = cstl_model(regs, l1, table)["elems"]
    return bytes(l1), l1, n


def _run(tasks, rng, *, table_gap=0.3, done_gap=0.3, keep=(), elt_lanes=1):
    """Runs ``(regs, table, mem)`` tasks one after the other on a fresh unit; returns
    per task (memory after, done payload, table words taken, counters). Tasks whose index
    is in ``keep`` start with ``keep`` set and are offered no table words; ``elt_lanes``:
    the unit's binary eltwise lanes a cycle."""
    dut = CstlUnit(lanes=LANES, depth=DEPTH, elt_lanes=elt_lanes)
    core = dut.core
    walks = (core.walk, core.pool_walk, core.elt_walk)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    results = []

    async def bench(ctx):
        for index, (regs, table, mem) in enumerate(tasks):
            l1 = L1Model(dut.l1_rd, dut.l1_wr, mem, rng)
            ctx.set(dut.clear, 1)
            await ctx.tick()
            ctx.set(dut.clear, 0)
            for name, value in regs.items():
                while rng.random() < 0.2:
                    ctx.set(dut.write.valid, 0)
                    await ctx.tick()
                ctx.set(dut.write.valid, 1)
                ctx.set(dut.write.payload, {"index": REGS.index(name), "value": value})
                await ctx.tick()
            ctx.set(dut.write.valid, 0)
            ctx.set(dut.start.valid, 1)
            ctx.set(dut.start.payload, index in keep)
            while True:
                started = ctx.get(dut.start.ready)
                await ctx.tick()
                if started:
                    break
            ctx.set(dut.start.valid, 0)
            words = [] if index in keep else [int.from_bytes(table[4 * k:4 * k + 4], "little")
                                              for k in range(TABLE_WORDS)]
            k, done = 0, None
            # the reader's ready goes to every walk: only the task's own may be busy
            task = decode(regs)
            own = core.pool_walk if task.pool else core.elt_walk if task.elt else core.walk
            for _cycle in range(20000):
                for w in walks:
                    assert w is own or not ctx.get(w.busy), \
                        f"{type(w).__name__} busy in a task of {type(own).__name__}"
                offer = k < len(words) and rng.random() >= table_gap
                ctx.set(dut.table.valid, offer)
                ctx.set(dut.table.payload, words[k] if k < len(words) else 0)
                ctx.set(dut.done.ready, rng.random() >= done_gap)
                l1.before(ctx)
                took = offer and ctx.get(dut.table.ready)
                if ctx.get(dut.done.valid) and ctx.get(dut.done.ready):
                    p = ctx.get(dut.done.payload)
                    done = (int(p.error), int(p.cause))
                await ctx.tick()
                l1.after(ctx)
                k += took
                if done:
                    break
            assert done is not None, "no done"
            ctx.set(dut.table.valid, 0)
            results.append((bytes(mem), done, k, {
                n: ctx.get(getattr(dut, f"cnt_{n}")) for n in ("busy", "elems", "table",
                                                             "stall_read", "stall_write")}))

    sim.add_testbench(bench)
    sim.run()
    return results


def _check(tasks, rng, elt_lanes=1):
    """Run ``(regs, table, mem)`` tasks; every L1 byte, ``done`` and the element count
    against the model. Returns the stall cycles seen."""
    wants = [_want(regs, mem, table) for regs, table, mem in tasks]
    stalls = 0
    for (got, done, words, cnt), (regs, _, _), (_, want, n) in zip(
            _run(tasks, rng, elt_lanes=elt_lanes), tasks, wants, strict=True):
        assert done == (0, Cause.NONE)
        assert words == (TABLE_WORDS if decode(regs).table else
                         ELTWISE_ENTRY.size // 4 if regs["NIN"] == 2 else 0)
        assert cnt["elems"] == n
        stalls += cnt["stall_read"] + cnt["stall_write"]
        got = np.frombuffer(got, np.uint8)
        bad = np.flatnonzero(got != want)
        assert not bad.size, f"{bad.size} wrong bytes, first at {bad[0]}: {got[bad[0]]} != " \
                             f"{want[bad[0]]} ({regs})"
    return stalls


def test_a_kept_table_is_not_read_again():
    """The engine starts a task with ``keep`` when its table is the one the CSTL read
    last: the unit takes no table word and looks up in the table it holds, also after a
    binary eltwise task in between (its entry must not land in the lane tables)."""
    rng = random.Random(23)
    table = rng.randbytes(TABLE_BYTES)

    def table_task():
        while True:
            regs = _task(rng)[0] | {"TABLE": 0}
            if decode(regs).table and decode(regs).cause == Cause.NONE:
                return regs, table, bytearray(rng.randbytes(LANES * DEPTH))

    regs, entry = _elt_task(rng, "add")
    tasks = [table_task(), (regs, entry + bytes(TABLE_BYTES - len(entry)),
                            bytearray(rng.randbytes(LANES * DEPTH))),
             table_task(), table_task()]
    wants = [_want(regs, mem, tbl) for regs, tbl, mem in tasks]  # before the run
    runs = _run(tasks, rng, keep={2, 3})
    for index, ((got, done, words, cnt), (want, _, n)) in enumerate(zip(runs, wants,
                                                                        strict=True)):
        assert done == (0, Cause.NONE)
        assert words == [TABLE_WORDS, ELTWISE_ENTRY.size // 4, 0, 0][index]
        assert cnt["table"] == (0 if index > 1 else cnt["table"]) and cnt["elems"] == n
        assert got == want, f"task {index}: L1 differs from the model"


def test_table_tasks_equal_the_model():
    rng = random.Random(20)
    tasks = [(_task(rng)[0], rng.randbytes(TABLE_BYTES),
              bytearray(rng.randbytes(LANES * DEPTH))) for _ in range(24)]
    assert _check(tasks, rng) > 50


@pytest.mark.parametrize("cast", [("i8", "i8"), ("i8", "i16"), ("i8", "i32"),
                                  ("i16", "i8"), ("i32", "i8")])
def test_casts_equal_the_model(cast):
    """Widening: each byte sign-extended, one output word per cycle; narrowing: each
    element saturated to i8 (random bytes give values far outside i8 and inside it); no
    table is read."""
    rng = random.Random(35 + len(cast[0]) * 3 + len(cast[1]))
    tasks = []
    for _ in range(8):
        mem = bytearray(rng.randbytes(LANES * DEPTH))
        for a in rng.sample(range(0, LANES * DEPTH, 2), 300):   # small values too
            mem[a + 1] = rng.choice([0, 0xFF])
        tasks.append((_task(rng, cast)[0], b"", mem))
    _check(tasks, rng)


@pytest.mark.parametrize("op", ["maxpool", "avgpool"])
def test_pool_tasks_equal_the_model(op):
    """Random max / average pools (with and without a requantising table; global pools;
    windows of pads alone) against the model, with L1 denials, table gaps and ``done``
    back-pressure; the walk's runs against its model (one run per tap, pads where the
    window leaves the input)."""
    rng = random.Random(23 if op == "maxpool" else 24)
    tasks = []
    for _ in range(16):
        regs = _pool_task(rng, op)
        w = decode(regs)
        assert w.cause == Cause.NONE, regs
        r = pool_runs(w, LANES)
        assert len(r) == math.prod(w.dims[:3]) * w.kh * w.kw * (
            -(-w.dims[3] // LANES) if w.run else w.dims[3])
        tasks.append((regs, rng.randbytes(TABLE_BYTES) if regs["TABLE"] == 0 else b"",
                      bytearray(rng.randbytes(LANES * DEPTH))))
    assert any(any(run[2] for run in pool_runs(decode(t[0]), LANES)) for t in tasks)
    assert _check(tasks, rng) > 20


@pytest.mark.parametrize(("op", "elt_lanes"), [("add", 1), ("sub", 2), ("mul", 4),
                                               ("min", LANES), ("max", 1), ("add", LANES)])
def test_eltwise_tasks_equal_the_model(op, elt_lanes):
    """Random binary eltwise tasks with broadcasts (missing and size-1 dimensions, stride-0
    reads, a one-byte input spread over the lanes) against the model, with L1 denials,
    entry word gaps and ``done`` back-pressure, on ALUs of 1 to ``LANES`` lanes a cycle
    (vectors of fewer elements than lanes leave the wider ones partly idle); the walk's
    runs against its model."""
    rng = random.Random(40 + OPCODES.index(op))
    tasks = []
    for _ in range(10):
        regs, entry = _elt_task(rng, op)
        w = decode(regs)
        assert w.cause == Cause.NONE, regs
        assert len(elt_runs(w, LANES)) % 2 == 0
        tasks.append((regs, entry + bytes(TABLE_BYTES - len(entry)),
                      bytearray(rng.randbytes(LANES * DEPTH))))
    assert any(decode(t[0]).run and 0 in (decode(t[0]).xs[-1], decode(t[0]).bs[-1])
               for t in tasks)
    _check(tasks, rng, elt_lanes)


@pytest.mark.parametrize("op", ["reduce_max", "argmax"])
def test_reduction_tasks_equal_the_model(op):
    """Random last-axis reductions (rows of one element and rows over several words,
    contiguous and strided rows, ties, all -128, requantising tables, argmax saturated into
    i8 / i16) against the model, with L1 denials, table gaps and ``done``
    back-pressure; the walk issues one run per contiguous row, one per element else."""
    rng = random.Random(60 + RED_OPS[op])
    tasks = []
    for _ in range(24):
        regs = _red_task(rng, op)
        w = decode(regs)
        assert w.cause == Cause.NONE, regs
        rows = math.prod(w.dims[:3])
        assert len(runs(w)) == (rows if w.run else rows * w.dims[3])
        tasks.append((regs, rng.randbytes(TABLE_BYTES) if w.table else b"",
                      _codes_mem(rng)))
    assert any(decode(t[0]).run and decode(t[0]).dims[3] > LANES for t in tasks)
    assert any(not decode(t[0]).run and decode(t[0]).dims[3] > 1 for t in tasks)
    assert _check(tasks, rng) > 20


def test_contiguous_run_streams_one_word_per_cycle():
    """A contiguous 1-D table task with no stalls, unaligned on both sides: 1000 elements
    against 496 cost exactly the 63 words more (one word a cycle once the table is in),
    and over the 1000, ``elems / (busy - table)`` is within 15 % of the word width (8
    bytes a cycle; the rest is the task's fixed cycles)."""
    rng = random.Random(5)
    busy = {}
    for n in (1000, 496):
        regs = {"OPCODE": OPCODES.index("relu"), "NIN": 1, "NOUT": 1}
        for k, addr in enumerate((3, HALF + 5)):
            regs |= {f"OP{k}_ADDR_LO": addr, f"OP{k}_LEVEL": L1, f"OP{k}_ELEM": I8,
                     f"OP{k}_RANK": 1, f"OP{k}_DIM0": n, f"OP{k}_STRIDE0": 1}
        table = rng.randbytes(TABLE_BYTES)
        mem = bytearray(rng.randbytes(LANES * DEPTH))
        regs["TABLE"] = 0
        want = _want(regs, mem, table)[0]
        saved = L1Model.__init__.__defaults__
        L1Model.__init__.__defaults__ = (0.0,)
        try:
            [(got, done, _, cnt)] = _run([(regs, table, mem)], rng, table_gap=0,
                                         done_gap=0)
        finally:
            L1Model.__init__.__defaults__ = saved
        assert got == want and done == (0, 0) and cnt["elems"] == n
        assert cnt["table"] == TABLE_WORDS
        busy[n] = cnt["busy"] - cnt["table"]
    assert busy[1000] - busy[496] == (1000 - 496) // LANES, busy
    rate = 1000 / busy[1000]
    assert rate > 0.85 * LANES, (rate, busy)


def test_contiguous_rows_reduce_one_word_per_cycle():
    """argmax over four contiguous, word-aligned rows with no stalls: rows of 200 codes
    (25 words) against rows of 96 (12 words) cost exactly the 52 words more, one word a
    cycle; over the rows of 200, input elements per busy cycle (the task's fixed cycles
    included) are within 15 % of the word width (8 a cycle)."""
    rng = random.Random(6)
    busy = {}
    for row in (200, 96):
        regs = _red_base("argmax") | {"OP0_ADDR_LO": 0, "OP0_DIM0": 4, "OP0_DIM1": row,
                                      "OP0_STRIDE0": row, "OP1_DIM0": 4}
        mem = _codes_mem(rng)
        want = _want(regs, mem, b"")[0]
        saved = L1Model.__init__.__defaults__
        L1Model.__init__.__defaults__ = (0.0,)
        try:
            [(got, done, _, cnt)] = _run([(regs, b"", mem)], rng, table_gap=0, done_gap=0)
        finally:
            L1Model.__init__.__defaults__ = saved
        assert got == want and done == (0, 0) and cnt["elems"] == 4
        busy[row] = cnt["busy"]
    assert busy[200] - busy[96] == 4 * (200 - 96) // LANES, busy
    rate = 4 * 200 / busy[200]
    assert rate > 0.85 * LANES, (rate, busy)


def test_widening_cast_hands_out_its_parts_one_a_cycle():
    """i8 -> i32 over a contiguous, word-aligned vector with no stalls: each input word
    leaves in exactly four output words (``LANES / 4`` elements each), one a cycle, so 200
    elements against 96 cost 4 x 13 cycles more (no empty part after a vector's last)."""
    rng = random.Random(7)
    busy = {}
    for n in (200, 96):
        regs = {"OPCODE": OPCODES.index("cast"), "NIN": 1, "NOUT": 1, "TABLE": NO_TABLE}
        for k, (addr, elem) in enumerate(((0, "i8"), (HALF, "i32"))):
            regs |= {f"OP{k}_ADDR_LO": addr, f"OP{k}_LEVEL": L1,
                     f"OP{k}_ELEM": ELEM_TYPES.index(elem), f"OP{k}_RANK": 1,
                     f"OP{k}_DIM0": n, f"OP{k}_STRIDE0": 1}
        mem = bytearray(rng.randbytes(LANES * DEPTH))
        want = _want(regs, mem, b"")[0]
        saved = L1Model.__init__.__defaults__
        L1Model.__init__.__defaults__ = (0.0,)
        try:
            [(got, done, _, cnt)] = _run([(regs, b"", mem)], rng, table_gap=0, done_gap=0)
        finally:
            L1Model.__init__.__defaults__ = saved
        assert got == want and done == (0, 0) and cnt["elems"] == n
        busy[n] = cnt["busy"]
    assert busy[200] - busy[96] == 4 * (200 - 96) // LANES, busy


@pytest.mark.parametrize("elt_lanes", [1, 2, LANES])
def test_eltwise_rate_follows_its_lanes(elt_lanes):
    """Contiguous, word-aligned 1-D adds of 512 and 256 elements with no stalls: per output
    word one cycle reads the word of ``x``, then the word of ``b`` stays while the ALU takes
    ``LANES / elt_lanes`` cycles (the results go through the ALU's pipeline and wait in the
    output register while the next words are read). The 256 more elements cost exactly 32
    words of ``LANES / elt_lanes + 1`` cycles; elements per busy cycle (the entry's words
    and the pipeline's ``LATENCY`` left out) within 10 % of
    ``LANES / (LANES / elt_lanes + 1)``: 0.89, 1.6 and 4 on 8 lanes (4, half the word, is
    the limit of one L1 read port for two inputs)."""
    rng = random.Random(7)
    busy = {}
    for n in (512, 256):
        regs = {"OPCODE": OPCODES.index("add"), "NIN": 2, "NOUT": 1, "REQUANT": 0,
                "TABLE": NO_TABLE}
        for k, addr in enumerate((0, n, HALF)):
            regs |= {f"OP{k}_ADDR_LO": addr, f"OP{k}_LEVEL": L1, f"OP{k}_ELEM": I8,
                     f"OP{k}_RANK": 1, f"OP{k}_DIM0": n, f"OP{k}_STRIDE0": 1}
        entry = encode_eltwise(eltwise_params("add", 0.05, 3, 0.02, -20, 0.1, 0))
        mem = bytearray(rng.randbytes(LANES * DEPTH))
        table = entry + bytes(TABLE_BYTES - len(entry))
        want = _want(regs, mem, table)[0]
        saved = L1Model.__init__.__defaults__
        L1Model.__init__.__defaults__ = (0.0,)
        try:
            [(got, done, _, cnt)] = _run([(regs, table, mem)], rng, table_gap=0, done_gap=0,
                                         elt_lanes=elt_lanes)
        finally:
            L1Model.__init__.__defaults__ = saved
        assert got == want and done == (0, 0) and cnt["elems"] == n
        busy[n] = cnt["busy"] - cnt["table"]
    per_word = LANES // elt_lanes + 1
    assert busy[512] - busy[256] == 256 // LANES * per_word, busy
    rate = 512 / (busy[512] - ALU_LATENCY)
    ideal = LANES / per_word
    assert 0.9 * ideal < rate < 1.1 * ideal, (rate, ideal, busy)


@pytest.mark.parametrize(("change", "cause"), [
    ({"OPCODE": OPCODES.index("conv2d")}, Cause.OPCODE),
    ({"NIN": 2}, Cause.TYPE),
    ({"OP1_ELEM": ELEM_TYPES.index("i16")}, Cause.TYPE),     # only a cast widens
    ({"OPCODE": OPCODES.index("cast"), "OP1_ELEM": ELEM_TYPES.index("u8")}, Cause.TYPE),
    ({"OP0_ELEM": ELEM_TYPES.index("i16")}, Cause.TYPE),
    ({"OP1_LEVEL": LEVELS.index("L2")}, Cause.TYPE),
    ({"OP0_ADDR_HI": 1}, Cause.TYPE),
    ({"OP0_RANK": 5, "OP1_RANK": 5}, Cause.LAYOUT),
    ({"OP1_RANK": 1}, Cause.LAYOUT),
    ({"OP1_DIM1": 4}, Cause.LAYOUT),
    ({"OP0_DIM0": 1 << 16, "OP1_DIM0": 1 << 16}, Cause.LAYOUT),
    ({"OP0_RANK": 5, "OP1_LEVEL": LEVELS.index("L2")}, Cause.LAYOUT),   # operand 0 first
    ({"OP0_ELEM": ELEM_TYPES.index("i16"), "OP1_RANK": 1}, Cause.TYPE),  # types, then shapes
    ({"TABLE": NO_TABLE}, Cause.REQUANT),                                # no table read
    ({"OPCODE": OPCODES.index("gather")}, Cause.OPCODE),
    ({"OPCODE": OPCODES.index("maxpool")}, Cause.LAYOUT),   # rank 2; its table is read
])
def test_refusals_end_in_error_after_the_table(change, cause):
    rng = random.Random(7)
    regs = _task(rng)[0]
    regs = {**regs, "OP0_RANK": 2, "OP1_RANK": 2, "OP0_DIM0": 3, "OP1_DIM0": 3,
            "OP0_DIM1": 5, "OP1_DIM1": 5, **change}
    assert decode(regs).cause == cause
    table = rng.randbytes(TABLE_BYTES)
    mem = bytearray(rng.randbytes(LANES * DEPTH))
    [(got, done, words, _)] = _run([(regs, table, mem)], rng)
    assert done == (1, cause)
    assert got == mem   # nothing written
    assert words == (TABLE_WORDS if decode(regs).table else 0)


def _attr(name, item=None):
    """The ATTR register of a pooling attribute's tag (``item`` None) or body item."""
    slot = pool_attr_slots()[name]
    return f"ATTR{slot.tag if item is None else slot.body + item}"


@pytest.mark.parametrize("change", [
    {_attr("kernel_shape"): 0},                       # no kernel
    {_attr("kernel_shape"): (1 << 31) + 1},           # a kernel of one size
    {_attr("kernel_shape", 0): 0},                    # a size 0
    {_attr("kernel_shape", 1): 1 << 16},              # a size of 2**16
    {_attr("kernel_shape", 0): 300, _attr("kernel_shape", 1): 300},   # 90,000 taps
    {_attr("pads"): (1 << 31) + 2},                   # two pads
    {_attr("pads", 2): 0xFFFFFFFF},                   # a pad of -1
    {_attr("strides"): 0, _attr("strides", 0): 2},    # a body without its tag
    {_attr("strides", 1): 0},                         # a stride 0
    {"ATTR30": 5},                                    # a word of no attribute
    {"OP1_DIM1": 9},                                  # not the window's output height
    {"OP1_DIM3": 2},                                  # channels differ
    {"OP0_RANK": 3},
])
def test_pool_refusals(change):
    """A max pool the model refuses (attribute words, shapes) ends in LAYOUT, after its
    table, with nothing written."""
    rng = random.Random(8)
    regs = {**_pool_task(rng), "TABLE": 0, _attr("kernel_shape"): (1 << 31) + 2,
            _attr("kernel_shape", 0): 2, _attr("kernel_shape", 1): 2,
            _attr("strides"): (1 << 31) + 2, _attr("strides", 0): 1,
            _attr("strides", 1): 1, _attr("pads"): (1 << 31) + 4,
            **{_attr("pads", i): 0 for i in range(4)}}
    regs |= {"OP1_DIM1": regs["OP0_DIM1"] - 1, "OP1_DIM2": regs["OP0_DIM2"] - 1}
    if regs["OP1_DIM1"] < 1 or regs["OP1_DIM2"] < 1:
        regs |= {"OP0_DIM1": 3, "OP0_DIM2": 3, "OP1_DIM1": 2, "OP1_DIM2": 2}
    regs |= {"OP0_DIM3": 1, "OP1_DIM3": 1}
    assert decode(regs).cause == Cause.NONE
    regs |= change
    assert decode(regs).cause == Cause.LAYOUT
    mem = bytearray(rng.randbytes(LANES * DEPTH))
    [(got, done, words, _)] = _run([(regs, rng.randbytes(TABLE_BYTES), mem)], rng)
    assert done == (1, Cause.LAYOUT)
    assert got == mem and words == TABLE_WORDS


def _red_attr(op, name, item=None):
    """The ATTR register of a reduction attribute's tag (``item`` None) or body item."""
    slot = red_attr_slots()[op][name]
    return f"ATTR{slot.tag if item is None else slot.body + item}"


def _red_base(op):
    """A reduction the model takes: i8 [3, 5] -> [3, 1] (argmax: i32), attributes given."""
    regs = {"OPCODE": OPCODES.index(op), "NIN": 1, "NOUT": 1, "TABLE": 0,
            "OP0_ADDR_LO": 3, "OP1_ADDR_LO": HALF + 1, "OP1_QUANT": NO_QUANT}
    for k, elem in enumerate(("i8", "i32" if op == "argmax" else "i8")):
        regs |= {f"OP{k}_LEVEL": L1, f"OP{k}_ELEM": ELEM_TYPES.index(elem), f"OP{k}_RANK": 2,
                 f"OP{k}_DIM0": 3, f"OP{k}_DIM1": 5 if k == 0 else 1,
                 f"OP{k}_STRIDE0": 5 if k == 0 else 1, f"OP{k}_STRIDE1": 1}
    specs = [(a.name, a.type) for a in load_registry()[op].attributes]
    axis = {"axes": [1]} if op == "reduce_max" else {"axis": 1}
    return regs | {f"ATTR{j}": v for j, v in attr_words(op, specs, {**axis, "keepdims": True})}


def _axis(op, value):
    """ATTR writes that set the reduction's axis to ``value`` (a 32-bit word)."""
    name = "axes" if op == "reduce_max" else "axis"
    return {_red_attr(op, name, 0): value}


@pytest.mark.parametrize("op", ["reduce_max", "argmax"])
@pytest.mark.parametrize(("change", "cause"), [
    (lambda op: _axis(op, 0), Cause.LAYOUT),                    # the first axis
    (lambda op: _axis(op, 2), Cause.LAYOUT),                    # no axis of rank 2
    (lambda op: _axis(op, 0xFFFFFFFE), Cause.LAYOUT),           # -2: the first axis again
    (lambda op: {_red_attr(op, "axes" if op == "reduce_max" else "axis"): 0}, Cause.LAYOUT),
    (lambda op: {_red_attr(op, "keepdims", 0): 0}, Cause.LAYOUT),   # dropped, shape kept
    (lambda op: {_red_attr(op, "keepdims"): 0}, Cause.LAYOUT),      # a body without a tag
    (lambda op: {"ATTR9": 1}, Cause.LAYOUT),                        # a word of no attribute
    (lambda op: {"ATTR30": 7}, Cause.LAYOUT),
    (lambda op: {"OP1_DIM0": 2}, Cause.LAYOUT),
    (lambda op: {"OP1_DIM1": 5}, Cause.LAYOUT),
    (lambda op: {"OP0_DIM1": 0}, Cause.LAYOUT),                     # an empty axis
    (lambda op: {"OP0_RANK": 0, "OP1_RANK": 0}, Cause.LAYOUT),
    (lambda op: {"OP1_RANK": 1}, Cause.LAYOUT),
    (lambda op: {"OP1_ELEM": ELEM_TYPES.index("u8")}, Cause.TYPE),
    (lambda op: {"OP0_ELEM": ELEM_TYPES.index("i16")}, Cause.TYPE),
    (lambda op: {"NIN": 2}, Cause.TYPE),
    (lambda op: {"OP1_QUANT": 0},                                   # a quantised output
     lambda op: Cause.TYPE if op == "argmax" else Cause.NONE),
])
def test_reduction_refusals(op, change, cause):
    """A reduction the model refuses (axis, keepdims and ATTR words, shapes, types) ends in
    the model's cause after its table (reduce_max with ``TABLE``), with nothing written."""
    rng = random.Random(12)
    cause = cause(op) if callable(cause) else cause
    regs = _red_base(op)
    assert decode(regs).cause == Cause.NONE
    regs |= change(op)
    if cause == Cause.NONE:      # reduce_max reads no descriptor: a table requantises
        assert decode(regs).cause == Cause.NONE
        return
    with pytest.raises(CstlUnsupported) as info:
        decode_task(regs)
    assert info.value.cause == cause
    w = decode(regs)
    assert w.cause == cause and w.table == (op == "reduce_max")
    mem = bytearray(rng.randbytes(LANES * DEPTH))
    [(got, done, words, _)] = _run([(regs, rng.randbytes(TABLE_BYTES), mem)], rng)
    assert done == (1, cause)
    assert got == mem and words == (TABLE_WORDS if w.table else 0)


@pytest.mark.parametrize(("change", "cause"), [
    ({"NIN": 1}, Cause.TYPE),
    ({"OP2_LEVEL": LEVELS.index("L2")}, Cause.TYPE),
    ({"OP2_RANK": 5}, Cause.LAYOUT),
    ({"OP1_ELEM": ELEM_TYPES.index("i16")}, Cause.TYPE),
    ({"OP0_RANK": 3, "OP0_DIM0": 2, "OP0_DIM1": 5, "OP0_DIM2": 7}, Cause.LAYOUT),  # rank > out
    ({"OP1_DIM1": 6}, Cause.LAYOUT),                      # neither 1 nor the output's 5
])
def test_eltwise_refusals(change, cause):
    """A binary eltwise the model refuses ends in its cause after reading the entry, with
    nothing written; an entry outside the model's ranges ends in REQUANT."""
    rng = random.Random(9)
    regs, entry = _elt_task(rng, "add")
    regs |= {"OP0_RANK": 2, "OP0_DIM0": 1, "OP0_DIM1": 5, "OP0_STRIDE0": 5, "OP0_STRIDE1": 1,
             "OP1_RANK": 2, "OP1_DIM0": 3, "OP1_DIM1": 5, "OP1_STRIDE0": 5, "OP1_STRIDE1": 1,
             "OP2_RANK": 2, "OP2_DIM0": 3, "OP2_DIM1": 5, "OP2_STRIDE0": 5, "OP2_STRIDE1": 1}
    assert decode(regs).cause == Cause.NONE
    bad_entries = []
    for field, value in (("y_shift", 0), ("a_zero_point", 200)):
        e = bytearray(entry)
        ELTWISE_ENTRY.patch(e, 0, field, value)
        bad_entries.append(bytes(e))
    for regs_k, entry_k, cause_k in ((regs | change, entry, cause),
                                     *((regs, e, Cause.REQUANT) for e in bad_entries)):
        mem = bytearray(rng.randbytes(LANES * DEPTH))
        if cause_k == Cause.REQUANT:
            l1 = np.frombuffer(bytes(mem), np.uint8).copy()
            with pytest.raises(CstlUnsupported) as info:
                cstl_model(regs_k, l1, entry_k)
            assert info.value.cause == Cause.REQUANT
        else:
            assert decode(regs_k).cause == cause_k
        [(got, done, words, _)] = _run([(regs_k, entry_k + bytes(TABLE_BYTES - 48), mem)],
                                       rng)
        assert done == (1, cause_k) and got == mem and words == ELTWISE_ENTRY.size // 4


def test_decode_equals_the_model():
    rng = random.Random(11)
    casts = [None, ("i8", "i8"), ("i8", "i16"), ("i8", "i32"), ("i16", "i8"), ("i32", "i8")]
    cases = [_task(rng, rng.choice(casts))[0] for _ in range(40)]
    cases += [_pool_task(rng, rng.choice(["maxpool", "avgpool"])) for _ in range(30)]
    cases += [_elt_task(rng, rng.choice(["add", "mul", "max"]))[0] for _ in range(30)]
    cases += [_red_task(rng, rng.choice(["reduce_max", "argmax"])) for _ in range(40)]
    for regs in cases[:20] + cases[40:55] + cases[70:85] + cases[100:125]:   # corruptions
        name = rng.choice([*kept_registers(), "ATTR11", "ATTR39", "OP2_DIM0", "OP2_RANK"])
        regs[name] = rng.choice([0, 1, 2, 3, 5, rng.getrandbits(32)])
    # words whose low bits are a value the task could hold and whose high bits are not:
    # the RTL keeps RANK, ELEM, OPCODE and the dimensions narrow, with a flag for the rest
    # of the word, and compares with constants by flags set at the write
    narrowed = [n for n in kept_registers() if n == "OPCODE" or n.endswith(("_RANK", "_ELEM"))
                or "_DIM" in n or n.startswith("ATTR") or n.endswith(("_STRIDE3", "QUANT"))]
    for regs in cases[20:40] + cases[55:70] + cases[85:100] + cases[125:140]:
        name = rng.choice(narrowed)
        high = rng.choice([1 << 3, 1 << 6, 1 << 16, 1 << 31, rng.getrandbits(32) & ~0xFFFF])
        regs[name] = regs.get(name, 0) | high
    # pool output sizes at the edges of (out - 1) * s <= in + pads - k < out * s: one
    # below and one above the size (strides as given and absent), and sizes, kernels and
    # strides up to 2**16 - 1, where the product and the sums are widest
    for j in range(24):
        regs = _pool_task(rng, rng.choice(["maxpool", "avgpool"]))
        d = 1 + j % 2
        if j % 3 == 2:          # strides absent: out = in + pads - k + 1
            regs |= {_attr("strides"): 0, _attr("strides", 0): 0, _attr("strides", 1): 0}
            regs[f"OP1_DIM{d}"] = max(1, regs[f"OP0_DIM{d}"] - 1)
        regs[f"OP1_DIM{d}"] += rng.choice([-1, 1]) if j % 3 else 0
        cases.append(regs)
    for j in range(12):
        regs = _pool_task(rng)
        d = 1 + j % 2
        size, k, st = rng.randrange(1, 1 << 16), rng.randrange(1, 1 << 16), \
            rng.randrange(1, 1 << 16)
        pads = [rng.randrange(1 << 16) for _ in range(2)]
        span = size + sum(pads)
        out = (span - k) // st + 1 if span >= k else 1
        regs |= {f"OP0_DIM{d}": size, f"OP1_DIM{d}": out + rng.choice([-1, 0, 0, 1]),
                 _attr("kernel_shape", d - 1): k, _attr("strides", d - 1): st,
                 _attr("pads", d - 1): pads[0], _attr("pads", d + 1): pads[1]}
        cases.append(regs)
    # an opcode the CSTL runs with a high bit set: refused (OPCODE)
    for regs, high in zip(cases[:140:14], [1 << 6, 1 << 7, 1 << 16, 1 << 31] * 3,
                          strict=False):
        cases.append(regs | {"OPCODE": regs["OPCODE"] | high})
    # a reduction's axis word with a bit above the rank's set (the RTL compares its low
    # three bits with the rank's and flags the rest at the write): refused
    for op in ("reduce_max", "argmax"):
        body = red_attr_slots()[op][RED_ATTRS[op][0]].body
        for high in (1 << 3, 1 << 4, 1 << 16):
            regs = _red_task(rng, op)
            regs[f"ATTR{body}"] = (regs["OP0_RANK"] - 1) | high
            cases.append(regs)
    # casts whose last stride has bit 30 or 31 set: ``run`` asks whether the stride in
    # bytes (shifted by the element size, cut to 32 bits) is one element, so a high bit
    # the shift pushes out does not count and one it keeps does
    for _ in range(24):
        regs, dims = _task(rng, rng.choice(casts[1:]))
        if dims:
            for k in range(2):
                regs[f"OP{k}_STRIDE{len(dims) - 1}"] = 1 | rng.choice(
                    [0, 1 << 30, 1 << 31, 3 << 30])
        cases.append(regs)
    dut = CstlRegisters()
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    got = []

    async def bench(ctx):
        for regs in cases:
            ctx.set(dut.clear, 1)
            await ctx.tick()
            ctx.set(dut.clear, 0)
            for name, value in regs.items():
                ctx.set(dut.write.valid, 1)
                ctx.set(dut.write.payload, {"index": REGS.index(name), "value": value})
                await ctx.tick()
            ctx.set(dut.write.valid, 0)
            await ctx.tick().repeat(CstlRegisters.LATENCY)
            t = ctx.get(dut.task)
            got.append((int(t.cause), int(t.table), tuple(int(t.dims[j]) for j in range(4)),
                        int(t.x_addr), tuple(int(t.xs[j]) for j in range(4)), int(t.y_addr),
                        tuple(int(t.ys[j]) for j in range(4)), int(t.run),
                        int(t.in_shift), int(t.out_shift),
                        tuple(int(getattr(t, f)) for f in POOL_FIELDS),
                        tuple(int(t.bs[j]) for j in range(4))))

    sim.add_testbench(bench)
    sim.run()
    for regs, g in zip(cases, got, strict=True):
        w = decode(regs)
        if w.cause:
            assert g[:2] == (w.cause, int(w.table)), (regs, g, w)
            assert g[-2][-1] == int(w.entry), (regs, g, w)
        else:
            assert g == (0, int(w.table), w.dims, w.x_addr, w.xs, w.y_addr, w.ys,
                         int(w.run), w.in_shift, w.out_shift,
                         tuple(int(getattr(w, f)) for f in POOL_FIELDS), w.bs), (regs, g, w)
            if not w.pool:
                assert len(runs(w)) in (0, *range(1, 401))
    causes = {decode(regs).cause for regs in cases}
    assert {Cause.NONE, Cause.LAYOUT} <= causes
