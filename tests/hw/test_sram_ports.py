"""``ArbitratedSRAM`` in the Amaranth simulator, against ``SRAMModel`` (both read ports,
read-first), ``ReadGrantModel`` (the rotating grant rule, registered: a cycle's grant
from the previous cycle's requests, kept through a cycle without any) and a model of the
write queues.

Random requests from the clients of both read ports and of the write port, granted
clients that ask go ahead three times in four (else they stall elsewhere), every
client's grant and held read data checked each cycle. Writes: each port's queue of two,
modelled here as a list (``gnt`` is "fewer than two queued" at the cycle's start,
``wr_idle`` "none queued"; the non-empty queues' heads are arbitrated by the same rule
and the granted head is written). With ``extra_read_clients = 0`` the component's ports
are those of the one-read-port SRAM.
"""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from npu.bus.memory import SRAM, SRAMModel
from npu.bus.ports import ArbitratedSRAM, ReadGrantModel, WriteQueuesModel


@pytest.mark.parametrize(("clients", "extra", "first"), [(3, 1, None), (2, 3, None),
                                                      (4, 3, 2), (3, 2, None),
                                                      (4, 3, None)])
def test_second_read_port_against_model(clients, extra, first):
    """``first``: the ``xrd_first`` client, ahead of the others whenever it asks."""
    width, depth = 32, 8  # few words: both ports often read the word being written
    dut = ArbitratedSRAM(data_width=width, depth=depth, clients=clients,
                         extra_read_clients=extra, xrd_first=first)
    model = SRAMModel(data_width=width, depth=depth)
    rng = random.Random(clients * 10 + extra)
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def bench(ctx):
        held = [0] * clients
        xheld = [0] * extra
        queues = WriteQueuesModel(clients)
        rgrant, xgrant = ReadGrantModel(clients), ReadGrantModel(extra, first)
        both = 0  # cycles in which both read ports read
        full = 0  # cycles in which a write client found its queue full
        for cycle in range(500):
            prio = cycle % clients
            rd = [(rng.random() < 0.5, rng.randrange(depth)) for _ in range(clients)]
            xrd = [(rng.random() < 0.6, rng.randrange(depth)) for _ in range(extra)]
            wr = [(rng.random() < 0.4, rng.randrange(depth), rng.getrandbits(width),
                   rng.getrandbits(width // 8) or 1) for _ in range(clients)]
            ctx.set(dut.prio, prio)
            for k in range(clients):
                ctx.set(dut.rd[k].req, rd[k][0])
                ctx.set(dut.rd[k].addr, rd[k][1])
                ctx.set(dut.wr[k].req, wr[k][0])
                ctx.set(dut.wr[k].addr, wr[k][1])
                ctx.set(dut.wr[k].data, wr[k][2])
                ctx.set(dut.wr[k].en, wr[k][3])
            for j in range(extra):
                ctx.set(dut.xrd[j].req, xrd[j][0])
                ctx.set(dut.xrd[j].addr, xrd[j][1])
            rg = rgrant.gnt([r[0] for r in rd])
            xg = xgrant.gnt([r[0] for r in xrd])
            for k in range(clients):
                assert ctx.get(dut.rd[k].gnt) == (k == rg), (cycle, k)
                assert ctx.get(dut.wr[k].gnt) == queues.gnt(k), (cycle, k)
                assert ctx.get(dut.wr_idle) >> k & 1 == queues.idle(k), (cycle, k)
                full += wr[k][0] and not queues.gnt(k)
                assert ctx.get(dut.rd[k].data) == held[k], (cycle, k)
            for j in range(extra):
                assert ctx.get(dut.xrd[j].gnt) == (j == xg), (cycle, j)
                assert ctx.get(dut.xrd[j].data) == xheld[j], (cycle, j)
            # a granted client that asks goes ahead three times in four (a grant kept
            # for a client that no longer asks is not used)
            rgo = rg is not None and rd[rg][0] and rng.random() < 0.75
            # a client with room puts its write into its queue three times in four
            wgo = [wr[k][0] and queues.gnt(k) and rng.random() < 0.75
                   for k in range(clients)]
            xgo = xg is not None and xrd[xg][0] and rng.random() < 0.75
            both += rgo and xgo
            for k in range(clients):
                ctx.set(dut.rd[k].go, rgo and k == rg)
                ctx.set(dut.wr[k].go, wgo[k])
            for j in range(extra):
                ctx.set(dut.xrd[j].go, xgo and j == xg)
            model.clock(rd_en=int(rgo), rd_addr=rd[rg][1] if rgo else 0,
                        xrd_en=int(xgo), xrd_addr=xrd[xg][1] if xgo else 0,
                        **queues.clock(prio, {k: wr[k][1:] for k in range(clients) if wgo[k]}))
            rgrant.clock([r[0] for r in rd], prio)
            xgrant.clock([r[0] for r in xrd], prio % extra)
            await ctx.tick()
            if rgo:
                held[rg] = model.rd_data
            if xgo:
                xheld[xg] = model.xrd_data
            for k in range(clients):
                ctx.set(dut.rd[k].go, 0)
                ctx.set(dut.wr[k].go, 0)
            for j in range(extra):
                ctx.set(dut.xrd[j].go, 0)
        assert both > 50   # (the requests are random every cycle: a grant is used when
        #                  its client asks again)
        assert full > 5

    sim.add_testbench(bench)
    sim.run()


def test_no_extra_port_by_default():
    one = ArbitratedSRAM(data_width=64, depth=16, clients=2)
    zero = ArbitratedSRAM(data_width=64, depth=16, clients=2, extra_read_clients=0)
    assert one.signature == zero.signature
    assert set(one.signature.members) == {"prio", "rd", "wr", "wr_idle"}
    assert set(SRAM(data_width=64, depth=16).signature.members) == {
        "rd_addr", "rd_en", "rd_data", "wr_addr", "wr_en", "wr_data"}
    with pytest.raises(ValueError, match=r"xrd_first must be an xrd client index \(0...1\)"):
        ArbitratedSRAM(data_width=64, depth=16, clients=2, extra_read_clients=2, xrd_first=2)
    with pytest.raises(ValueError, match="extra_read_clients must be a non-negative"):
        ArbitratedSRAM(data_width=64, depth=16, clients=2, extra_read_clients=-1)
    with pytest.raises(ValueError, match="read_ports must be 1 or 2"):
        SRAM(data_width=64, depth=16, read_ports=3)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_constructor_checks():
    """The client counts and the first extra read client are checked, with the value in
    the message; one client (no arbitration) is allowed."""
    assert ArbitratedSRAM(data_width=32, depth=8, clients=1).clients == 1
    for bad in (0, -1, 1.0, "2"):
        with pytest.raises(ValueError,
                           match=rf"^clients must be a positive integer, not {bad!r}$"):
            ArbitratedSRAM(data_width=32, depth=8, clients=bad)
    for bad in (-1, 0.5):
        with pytest.raises(ValueError, match=r"^extra_read_clients must be a non-negative "
                                             rf"integer, not {bad!r}$"):
            ArbitratedSRAM(data_width=32, depth=8, clients=2, extra_read_clients=bad)
    with pytest.raises(ValueError, match=r"^xrd_first must be an xrd client index "
                                         r"\(0\.\.\.1\), not 2$"):
        ArbitratedSRAM(data_width=32, depth=8, clients=2, extra_read_clients=2, xrd_first=2)



def test_write_queues_model_refuses_a_go_without_room():
    """The model the RTL is checked against refuses a ``go`` on a port whose ``gnt`` was
    low at the cycle's start (two writes queued), even when that port's head is written
    in the same cycle: the RTL's ``gnt`` is a register of the previous cycle's count."""
    model = WriteQueuesModel(2)
    model.clock(1, {0: (1, 1, 1), 1: (9, 9, 9)})   # one write queued on each port
    assert model.clock(1, {0: (2, 2, 2)}) == {"wr_addr": 9, "wr_data": 9, "wr_en": 9}
    assert model.queues[0] == [(1, 1, 1), (2, 2, 2)] and not model.gnt(0)
    with pytest.raises(AssertionError, match="port 0: go without room"):
        model.clock(1, {0: (3, 3, 3)})   # port 1 is empty: port 0's head is written
