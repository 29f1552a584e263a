"""NEM engine blocks in the Amaranth simulator, and the engine's definitions.

* ``ArbitratedSRAM`` against a Python model (``SRAMModel`` + the rotating grant rule) with
  random requests from three clients, some of which stall after being granted;
* the SEQ's struct field table against ``nem.taskformat.encode`` (offsets derived, not typed);
* ``EngineConfig`` from the shipped devices and its refusals;
* the engine's register map: every unit has its counters, docs/engine.md lists the map.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from amaranth.sim import Simulator

from nem.binder import device_hash
from nem.taskformat import (
    HEADER,
    TASK_HEADER,
    WRITE,
    Program,
    Task,
    Unit,
    encode,
)
from npu.bus.memory import SRAMModel
from npu.bus.ports import ArbitratedSRAM, ReadGrantModel, WriteQueuesModel
from npu.cstl.eltalu import LATENCY as ELT_ALU_LATENCY
from npu.engine.config import DEVICE_DIR, EngineConfig, load_device
from npu.engine.top import engine_register_map, unit_names

DOCS = Path(__file__).resolve().parents[2] / "docs" / "engine.md"


def test_arbitrated_sram_against_model():
    """One read port: the rotating grant rule (registered, ``ReadGrantModel``), each
    client's held word, and the write
    queues (two per port: ``gnt`` is "fewer than two queued" at the cycle's start,
    ``wr_idle`` "none queued"; the non-empty queues' heads are arbitrated by the same
    rule and the granted head is written), against ``SRAMModel``."""
    width, depth, n = 32, 16, 3
    dut = ArbitratedSRAM(data_width=width, depth=depth, clients=n)
    model = SRAMModel(data_width=width, depth=depth)
    rng = random.Random(5)
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def bench(ctx):
        held = [0] * n        # what each client's data port must show
        queues = WriteQueuesModel(n)
        grants = ReadGrantModel(n)
        for cycle in range(400):
            prio = cycle % n
            rd = [(rng.random() < 0.5, rng.randrange(depth)) for _ in range(n)]
            wr = [(rng.random() < 0.4, rng.randrange(depth), rng.getrandbits(width),
                   rng.getrandbits(width // 8) or 1) for _ in range(n)]
            ctx.set(dut.prio, prio)
            for k in range(n):
                ctx.set(dut.rd[k].req, rd[k][0])
                ctx.set(dut.rd[k].addr, rd[k][1])
                ctx.set(dut.wr[k].req, wr[k][0])
                ctx.set(dut.wr[k].addr, wr[k][1])
                ctx.set(dut.wr[k].data, wr[k][2])
                ctx.set(dut.wr[k].en, wr[k][3])
            rg = grants.gnt([r[0] for r in rd])
            for k in range(n):
                assert ctx.get(dut.rd[k].gnt) == (k == rg), (cycle, k)
                assert ctx.get(dut.wr[k].gnt) == queues.gnt(k), (cycle, k)
                assert ctx.get(dut.wr_idle) >> k & 1 == queues.idle(k), (cycle, k)
                assert ctx.get(dut.rd[k].data) == held[k], (cycle, k)
            # a granted reader goes ahead three times in four (else it stalls elsewhere);
            # so does a writer with room in its queue
            # (a grant kept for a client that no longer asks is not used)
            rgo = rg is not None and rd[rg][0] and rng.random() < 0.75
            wgo = [wr[k][0] and queues.gnt(k) and rng.random() < 0.75 for k in range(n)]
            for k in range(n):
                ctx.set(dut.rd[k].go, rgo and k == rg)
                ctx.set(dut.wr[k].go, wgo[k])
            model.clock(rd_en=int(rgo), rd_addr=rd[rg][1] if rgo else 0,
                        **queues.clock(prio, {k: wr[k][1:] for k in range(n) if wgo[k]}))
            grants.clock([r[0] for r in rd], prio)
            await ctx.tick()
            if rgo:
                held[rg] = model.rd_data
            for k in range(n):
                ctx.set(dut.rd[k].go, 0)
                ctx.set(dut.wr[k].go, 0)

    sim.add_testbench(bench)
    sim.run()


def test_record_fields_match_encode():
    # The SEQ slices fields at the records' declared offsets: read the encoder's bytes there.
    program = Program(bytes(range(32)), (), (Task(Unit.SDMA, 3, 0, 5, 0x80000001, ((4, 0xCAFE),)),))
    data = encode(program)

    def at(record, name, base=0):
        f = record[name]
        return int.from_bytes(data[base + f.offset: base + f.offset + f.size], "little")

    f = HEADER["device_hash"]
    assert data[f.offset:f.offset + f.size] == bytes(range(32))
    assert at(HEADER, "task_count") == 1
    task = HEADER.size
    assert at(TASK_HEADER, "unit", task) == Unit.SDMA
    assert at(TASK_HEADER, "instance", task) == 3
    assert at(TASK_HEADER, "signal", task) == 0x80000001
    write = task + TASK_HEADER.size
    assert at(WRITE, "index", write) == 4
    assert at(WRITE, "value", write) == 0xCAFE


def test_engine_config_from_shipped_devices():
    small = EngineConfig.shipped("small")
    assert (small.data_width, small.n_dma, small.n_sdma, small.tokens) == (64, 2, 1, 8)
    assert small.l2_depth * small.wbytes == 32768
    assert small.device_hash == device_hash(load_device("small"))
    sim = EngineConfig.shipped("sim")
    assert (sim.data_width, sim.n_dma, sim.n_sdma, sim.tokens) == (128, 3, 2, 16)
    # the NMU: lanes = word bytes, cols = NMU.int8_macs / lanes (64 and 256 in the files)
    assert (small.nmu.lanes, small.nmu.cols, small.n_nmu) == (8, 8, 1)
    assert (sim.nmu.lanes, sim.nmu.cols) == (16, 16)
    assert small.nmu.wrows == load_device("small").characteristic("NMU", "weight_rows")
    with pytest.raises(ValueError, match="device must be one of"):
        EngineConfig.shipped("huge")
    by_path = EngineConfig.shipped(f"{DEVICE_DIR / 'engine_small.nem'}:nem_engine_small")
    assert by_path == small
    with pytest.raises(ValueError, match="does not exist"):
        EngineConfig.shipped("/nonexistent.nem:x")


def test_engine_config_refuses_what_it_cannot_build():
    dev = load_device("small")
    chars = {**dev.unit_characteristics, "sDMA": {"bytes_per_cycle": 16}}
    other = dev.__class__(**{**dev.__dict__, "unit_characteristics": chars})
    with pytest.raises(ValueError, match="must be given and equal"):
        EngineConfig.from_device(other)
    two = dev.__class__(**{**dev.__dict__, "num_engines": 2})
    with pytest.raises(ValueError, match="2 engines; the engine generator builds one"):
        EngineConfig.from_device(two)
    nmus = dev.__class__(**{**dev.__dict__, "per_engine": {**dev.per_engine, "NMU": 2}})
    with pytest.raises(ValueError, match="2 NMUs per engine"):
        EngineConfig.from_device(nmus)
    odd = {**dev.unit_characteristics, "NMU": {"int8_macs": 60}}
    with pytest.raises(ValueError, match=r"NMU: NMU.int8_macs \(60\) must be a positive "
                                         r"multiple of the L1 word \(8 bytes\)"):
        EngineConfig.from_device(dev.__class__(**{**dev.__dict__,
                                                  "unit_characteristics": odd}))
    none = dev.__class__(**{**dev.__dict__, "per_engine": {"DMA": 2}})
    assert EngineConfig.from_device(none).nmu is None
    # the cycle model's lanes must be the word the engine builds (8 bytes here)
    for unit in ("NMU", "CSTL"):
        wide = {**dev.unit_characteristics,
                unit: {**dev.unit_characteristics[unit], "lanes": 16}}
        with pytest.raises(ValueError, match=f"{unit} lanes 16 is not the L1 word the "
                                             r"engine builds \(8 bytes\)"):
            EngineConfig.from_device(dev.__class__(**{**dev.__dict__,
                                                      "unit_characteristics": wide}))
    # the binary eltwise ALU: 1, 2, 4 or 8 lanes on an 8-byte word
    for lanes, ok in ((1, True), (8, True), (3, False), (16, False), (-2, False)):
        alu = {**dev.unit_characteristics,
               "CSTL": {**dev.unit_characteristics["CSTL"], "eltwise_lanes": lanes}}
        odd = dev.__class__(**{**dev.__dict__, "unit_characteristics": alu})
        if ok:
            assert EngineConfig.from_device(odd).cstl_elt_lanes == lanes
        else:
            with pytest.raises(ValueError, match=f"CSTL eltwise_lanes {lanes} is not a power "
                                                 r"of two from 1 to the L1 word \(8 bytes\)"):
                EngineConfig.from_device(odd)
    # the eltwise ALU's pipeline: the device's eltwise_depth must be the RTL's
    for depth, ok in ((ELT_ALU_LATENCY, True), (ELT_ALU_LATENCY - 1, False), (1, False)):
        alu = {**dev.unit_characteristics,
               "CSTL": {**dev.unit_characteristics["CSTL"], "eltwise_depth": depth}}
        odd = dev.__class__(**{**dev.__dict__, "unit_characteristics": alu})
        if ok:
            EngineConfig.from_device(odd)
        else:
            with pytest.raises(ValueError, match=f"CSTL eltwise_depth {depth} is not the "
                                                 f"engine's: its eltwise ALU has "
                                                 f"{ELT_ALU_LATENCY} stages"):
                EngineConfig.from_device(odd)


def _doc_table():
    text = DOCS.read_text()
    block = text[text.index("<!-- csr-map:small -->"):text.index("<!-- /csr-map -->")]
    return [(int(off, 16), name, access) for off, name, access in
            re.findall(r"^\| `0x([0-9a-f]{3})` \| `(\w+)` \| (\w+) \|", block, re.M)]


def test_register_map_has_every_unit_and_matches_the_docs():
    cfg = EngineConfig.shipped("small")
    regmap = engine_register_map(cfg)
    names = {r.name for r in regmap.regs}
    for unit in unit_names(cfg):
        assert {f"BUSY_{unit}", f"STALL_{unit}"} <= names
    assert _doc_table() == [(r.offset, r.name, r.access) for r in regmap.regs]
