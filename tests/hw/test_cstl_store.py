"""The CSTL's ``VectorStore`` against a byte-level model of L1.

The model is the store's contract (``npu.cstl.store``): vector ``k`` writes its ``count``
bytes at L1 bytes ``addr .. addr + count - 1``, in order, and nothing else changes. The
bench drives runs of vectors (contiguous, at any alignment, as the CSTL's walks make them,
and jumps to other words), with idle cycles on the input, the write grant denied at
random, and ``flush`` at the end; every write is applied to a memory of random bytes with
its byte enables. The final memory must equal the model's, every write must carry
enables, the writes must not depend on when vectors come or the grant is given (what
merges into the pending word is decided by addresses alone), and a contiguous run with the
grant always given must stream at one word per cycle (the pending word merges the vectors
of an unaligned run).
"""

from __future__ import annotations

import random

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from npu.bus.ports import ArbitratedSRAM
from npu.cstl.store import VectorStore
from sim.streams import stream_send

LANES = 8
DEPTH = 64


def _runs(rng, n_runs, lanes=LANES):
    """Vectors as (addr, data bytes) in runs: each run contiguous from a random byte."""
    vectors = []
    for _ in range(n_runs):
        addr = rng.randrange(DEPTH * lanes - 6 * lanes)
        for _ in range(rng.randrange(1, 6)):
            count = rng.choice((lanes, lanes, rng.randrange(1, lanes + 1)))
            vectors.append((addr, bytes(rng.getrandbits(8) for _ in range(count))))
            addr += count
    return vectors


def _payload(addr, data):
    return {"data": int.from_bytes(data, "little"), "count": len(data), "addr": addr}


def _run(vectors, *, seed, idle, deny, lanes=LANES, flush=0.0):
    """Simulate the store on ``vectors``; returns (memory, writes, cycles). ``flush``:
    the probability of ``flush`` being high in a cycle before the last vector is sent
    (it is high in every cycle after)."""
    dut = VectorStore(lanes=lanes, depth=DEPTH)
    rng = random.Random(seed)
    memory = bytearray(rng.getrandbits(8) for _ in range(DEPTH * lanes))
    model = bytearray(memory)
    for addr, data in vectors:
        model[addr:addr + len(data)] = data
    state = {"writes": 0, "sent": False, "cycles": 0, "log": []}

    async def producer(ctx):
        await stream_send(ctx, dut.i, [_payload(a, d) for a, d in vectors],
                          rng=random.Random(seed + 1), idle=idle, name="store input")
        ctx.set(dut.i.valid, 0)
        state["sent"] = True

    async def memory_port(ctx):
        grant_rng = random.Random(seed + 2)
        quiet = 0
        while True:
            gnt = grant_rng.random() >= deny
            ctx.set(dut.wr.gnt, gnt)
            ctx.set(dut.flush, state["sent"] or grant_rng.random() < flush)
            req, addr, data, en = (ctx.get(dut.wr.req), ctx.get(dut.wr.addr),
                                   ctx.get(dut.wr.data), ctx.get(dut.wr.en))
            assert ctx.get(dut.wr.go) == (req and gnt)
            assert ctx.get(dut.stall) == (req and not gnt)
            if req and gnt:
                assert en, f"a write without byte enables at word {addr}"
                for k in range(lanes):
                    if en >> k & 1:
                        memory[addr * lanes + k] = data >> (8 * k) & 0xFF
                state["writes"] += 1
                state["log"].append((addr, data, en))
            busy = ctx.get(dut.busy)
            await ctx.tick()
            state["cycles"] += 1
            quiet = quiet + 1 if state["sent"] and not busy else 0
            if quiet > 3:
                return
            assert state["cycles"] < 20 * len(vectors) + 200, "the store did not drain"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(memory_port)
    sim.run()
    return memory, model, state


@pytest.mark.parametrize(("seed", "idle", "deny"),
                         [(1, 0.0, 0.0), (2, 0.3, 0.0), (3, 0.0, 0.5), (4, 0.4, 0.6)])
def test_store_against_byte_model(seed, idle, deny):
    vectors = _runs(random.Random(seed), 60)
    memory, model, _ = _run(vectors, seed=seed, idle=idle, deny=deny)
    bad = [k for k in range(len(model)) if memory[k] != model[k]]
    assert not bad, f"{len(bad)} bytes differ, first at byte {bad[0]}: " \
                    f"{memory[bad[0]]:#04x}, model {model[bad[0]]:#04x}"


@pytest.mark.parametrize(("seed", "deny"), [(5, 0.0), (6, 0.5)])
def test_flush_in_the_middle_of_runs(seed, deny):
    """``flush`` also in random cycles while vectors come (the store's contract allows
    it: it writes the pending word when no vector is staged, and a vector taken in that
    cycle starts a word of its own): the memory still equals the model."""
    vectors = _runs(random.Random(seed), 60)
    memory, model, state = _run(vectors, seed=seed, idle=0.3, deny=deny, flush=0.4)
    bad = [k for k in range(len(model)) if memory[k] != model[k]]
    assert not bad, f"{len(bad)} bytes differ, first at byte {bad[0]}"
    # (the flushes split words: more writes than the end-only flush makes)
    _, _, quiet = _run(vectors, seed=seed, idle=0.3, deny=deny)
    assert state["writes"] > quiet["writes"]


@pytest.mark.parametrize("start", [0, 3, 7])
def test_unaligned_run_streams_a_word_per_cycle(start):
    """A run of whole vectors from byte ``start``: one write per word it touches, and about
    a cycle per vector (two cycles of input stage and flush beyond)."""
    rng = random.Random(start)
    n = 20
    vectors = [(start + LANES * k, bytes(rng.getrandbits(8) for _ in range(LANES)))
               for k in range(n)]
    memory, model, state = _run(vectors, seed=start, idle=0.0, deny=0.0)
    assert memory == model
    words = (start + LANES * n + LANES - 1) // LANES - start // LANES
    assert state["writes"] == words, state
    assert state["cycles"] <= n + 8, state


def test_writes_do_not_depend_on_timing():
    """The same words with the same bytes and enables, in the same order, whatever the
    input's idle cycles and the grant's denials (a vector that merges into the pending word
    after a gap or a stall must still merge)."""
    vectors = _runs(random.Random(9), 80)
    logs = [_run(vectors, seed=9, idle=idle, deny=deny)[2]["log"]
            for idle, deny in ((0.0, 0.0), (0.5, 0.0), (0.0, 0.6), (0.4, 0.5))]
    assert all(log == logs[0] for log in logs[1:]), [len(log) for log in logs]


@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_narrow_words_against_byte_model(lanes):
    """L1 words of 1, 2 and 4 bytes (a one-byte word has no lane offset at all)."""
    vectors = _runs(random.Random(10 + lanes), 40, lanes)
    memory, model, _ = _run(vectors, seed=10 + lanes, idle=0.2, deny=0.3, lanes=lanes)
    bad = [k for k in range(len(model)) if memory[k] != model[k]]
    assert not bad, f"lanes {lanes}: byte {bad[0]}: {memory[bad[0]]:#04x}, " \
                    f"expected {model[bad[0]]:#04x}"


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_lanes_must_be_a_power_of_two():
    for good in (1, 2, 8, 64):
        assert VectorStore(lanes=good, depth=4).lanes == good
    for bad in (0, 3, 6, 12, -2):
        with pytest.raises(ValueError, match=rf"^lanes must be a power of two, not {bad}$"):
            VectorStore(lanes=bad, depth=4)


def test_a_full_word_is_written_without_waiting_for_more():
    """A vector that fills its word (aligned, ``count == lanes``) goes out as soon as the
    store has it, with ``flush`` low and no vector after it: the pending word is held
    only while it may still merge. A partial word waits (for a neighbour or ``flush``)."""
    dut = VectorStore(lanes=LANES, depth=DEPTH)
    seen = {}

    async def bench(ctx):
        ctx.set(dut.wr.gnt, 1)
        ctx.set(dut.flush, 0)
        for name, addr, count in (("full", 3 * LANES, LANES), ("partial", 9 * LANES, 3)):
            data = bytes(range(1, count + 1))
            ctx.set(dut.i.payload, _payload(addr, data))
            ctx.set(dut.i.valid, 1)
            for _ in range(8):     # bounded: a store that never takes it fails below
                *_, ready = await ctx.tick().sample(dut.i.ready)
                if ready:
                    break
            ctx.set(dut.i.valid, 0)
            writes = []
            for _ in range(8):
                if ctx.get(dut.wr.go):
                    writes.append((ctx.get(dut.wr.addr), ctx.get(dut.wr.en)))
                await ctx.tick()
            seen[name] = writes
        ctx.set(dut.flush, 1)        # the partial word goes out on flush
        for _ in range(8):
            if ctx.get(dut.wr.go):
                seen["partial"].append((ctx.get(dut.wr.addr), ctx.get(dut.wr.en)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen["full"] == [(3, (1 << LANES) - 1)]
    assert seen["partial"] == [(9, 0b111)]


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_store_fits_an_l1_write_port(lanes):
    """The store's write port has the signature of an L1 write client port of the same
    word width and depth (the CSTL unit connects the two with ``wiring.connect``)."""
    store = VectorStore(lanes=lanes, depth=DEPTH)
    l1 = ArbitratedSRAM(data_width=8 * lanes, depth=DEPTH, clients=2)
    wiring.connect(Module(), store.wr, l1.wr[1])
