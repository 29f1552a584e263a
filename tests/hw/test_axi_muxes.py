"""``AxiReadMux`` and ``AxiWriteMux`` against a cycle model, every output every cycle.

The model (written from the classes' docstrings and ``priority_grant``'s rule): an
``owner`` register (reset 0); the command grant goes to the first client with a valid
command at or after ``owner + 1`` (cyclically; with one client, to it); the granted
command passes to the shared engine with the engine's ``ready`` back to that client
only, and a taken command (``ready`` high) makes its client the owner. The data (and, for
the writer, the write responses) flow between the engine and the owner only: the other
clients see no ``valid`` and get no ``ready``; the read data's and the responses'
payloads go to every client. Inputs are random every cycle (valid, ready, payloads), so
both arbitration orders, back-pressure on every stream and owner changes in the middle
of a client's data are all exercised.
"""

from __future__ import annotations

import random

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from npu.bus.axi import AxiBurstPort
from npu.bus.ports import AxiReadMux, AxiWriteMux

ADDR, WIDTH = 32, 32


def _grant(valids, owner):
    n = len(valids)
    start = 0 if n == 1 else (owner + 1) % n
    for j in range(n):
        k = (start + j) % n
        if valids[k]:
            return k
    return None


def _command(rng):
    return {"addr": rng.getrandbits(ADDR) & ~3, "beats": rng.randint(1, 0xFFFF)}


@pytest.mark.parametrize("clients", [1, 2, 3])
def test_read_mux_against_model(clients):
    dut = AxiReadMux(addr_width=ADDR, data_width=WIDTH, clients=clients)
    rng = random.Random(30 + clients)
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def bench(ctx):
        owner = 0
        taken = [0] * clients
        for _cycle in range(1500):
            valids = [rng.random() < 0.5 for _ in range(clients)]
            cmds = [_command(rng) for _ in range(clients)]
            for k in range(clients):
                ctx.set(dut.cmd[k].valid, valids[k])
                ctx.set(dut.cmd[k].payload, cmds[k])
            engine_ready = rng.random() < 0.6
            ctx.set(dut.rd_cmd.ready, engine_ready)
            rd_valid = rng.random() < 0.6
            rd_payload = {"data": rng.getrandbits(WIDTH), "last": rng.getrandbits(1)}
            ctx.set(dut.rd_data.valid, rd_valid)
            ctx.set(dut.rd_data.payload, rd_payload)
            readies = [rng.random() < 0.6 for _ in range(clients)]
            for k in range(clients):
                ctx.set(dut.data[k].ready, readies[k])

            g = _grant(valids, owner)
            assert ctx.get(dut.rd_cmd.valid) == (g is not None)
            if g is not None:
                got = ctx.get(dut.rd_cmd.payload)
                assert (got.addr, got.beats) == (cmds[g]["addr"], cmds[g]["beats"]), \
                    f"command of client {g} expected"
            for k in range(clients):
                assert ctx.get(dut.cmd[k].ready) == (k == g and engine_ready), \
                    f"cmd[{k}].ready (grant {g}, owner {owner})"
                assert ctx.get(dut.data[k].valid) == (k == owner and rd_valid), \
                    f"data[{k}].valid (owner {owner})"
                got = ctx.get(dut.data[k].payload)
                assert (got.data, got.last) == (rd_payload["data"], rd_payload["last"])
            assert ctx.get(dut.rd_data.ready) == readies[owner]
            await ctx.tick()
            if g is not None and engine_ready:
                owner = g
                taken[g] += 1
        assert all(t > 50 for t in taken), taken

    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("clients", [1, 2, 3])
def test_write_mux_against_model(clients):
    dut = AxiWriteMux(addr_width=ADDR, data_width=WIDTH, clients=clients)
    rng = random.Random(40 + clients)
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def bench(ctx):
        owner = 0
        taken = [0] * clients
        for _cycle in range(1500):
            valids = [rng.random() < 0.5 for _ in range(clients)]
            cmds = [_command(rng) for _ in range(clients)]
            dvalids = [rng.random() < 0.6 for _ in range(clients)]
            dpays = [{"data": rng.getrandbits(WIDTH), "strb": rng.getrandbits(WIDTH // 8)}
                     for _ in range(clients)]
            done_readies = [rng.random() < 0.6 for _ in range(clients)]
            for k in range(clients):
                ctx.set(dut.cmd[k].valid, valids[k])
                ctx.set(dut.cmd[k].payload, cmds[k])
                ctx.set(dut.data[k].valid, dvalids[k])
                ctx.set(dut.data[k].payload, dpays[k])
                ctx.set(dut.done[k].ready, done_readies[k])
            engine_ready = rng.random() < 0.6
            ctx.set(dut.wr_cmd.ready, engine_ready)
            wdata_ready = rng.random() < 0.6
            ctx.set(dut.wr_data.ready, wdata_ready)
            resp_valid = rng.random() < 0.5
            resp_error = rng.getrandbits(1)
            ctx.set(dut.wr_done.valid, resp_valid)
            ctx.set(dut.wr_done.payload.error, resp_error)

            g = _grant(valids, owner)
            assert ctx.get(dut.wr_cmd.valid) == (g is not None)
            if g is not None:
                got = ctx.get(dut.wr_cmd.payload)
                assert (got.addr, got.beats) == (cmds[g]["addr"], cmds[g]["beats"])
            assert ctx.get(dut.wr_data.valid) == dvalids[owner]
            got = ctx.get(dut.wr_data.payload)
            assert (got.data, got.strb) == (dpays[owner]["data"], dpays[owner]["strb"]), \
                f"write data of owner {owner} expected"
            assert ctx.get(dut.wr_done.ready) == done_readies[owner]
            for k in range(clients):
                assert ctx.get(dut.cmd[k].ready) == (k == g and engine_ready)
                assert ctx.get(dut.data[k].ready) == (k == owner and wdata_ready), \
                    f"data[{k}].ready (owner {owner})"
                assert ctx.get(dut.done[k].valid) == (k == owner and resp_valid)
                assert ctx.get(dut.done[k].payload.error) == resp_error
            await ctx.tick()
            if g is not None and engine_ready:
                owner = g
                taken[g] += 1
        assert all(t > 50 for t in taken), taken

    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("width", [32, 64])
def test_muxes_fit_the_burst_engines(width):
    """The muxes' engine-side streams have the burst engines' signatures (the engine
    connects them with ``wiring.connect``, which refuses a payload of another layout):
    the read data's ``{"data", "last"}``, the write data's ``{"data", "strb"}``, the
    command's layout and the write responses'."""
    rmux = AxiReadMux(addr_width=ADDR, data_width=width, clients=2)
    wmux = AxiWriteMux(addr_width=ADDR, data_width=width, clients=2)
    port = AxiBurstPort(addr_width=ADDR, data_width=width)
    m = Module()
    wiring.connect(m, rmux.rd_cmd, port.rd_cmd)
    wiring.connect(m, rmux.rd_data, port.rd_data)
    wiring.connect(m, wmux.wr_cmd, port.wr_cmd)
    wiring.connect(m, wmux.wr_data, port.wr_data)
    wiring.connect(m, wmux.wr_done, port.wr_done)
    # and every client stream has the shape of the engine-side one
    for k in range(2):
        assert rmux.data[k].payload.shape() == port.rd_data.payload.shape()
        assert rmux.cmd[k].payload.shape() == port.rd_cmd.payload.shape()
        assert wmux.data[k].payload.shape() == port.wr_data.payload.shape()
