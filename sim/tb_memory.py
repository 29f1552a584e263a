"""cocotb testbench: :class:`npu.bus.memory.SRAM` against :class:`npu.bus.memory.SRAMModel`.

Random traffic on both ports every cycle, with a bias toward a few hot addresses so that
read-during-write collisions and partial byte writes happen often.
"""

from __future__ import annotations

import json
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from npu.bus.memory import SRAMModel


def _params():
    return json.loads(os.environ["NPU_DESIGN_PARAMS"])


async def _reset(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.rd_en.value = 0
    dut.wr_en.value = 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


@cocotb.test()
async def random_traffic_matches_model(dut):
    """Every cycle: random read and write; rd_data equals the model's after each edge."""
    params = _params()
    width, depth = params["data_width"], params["depth"]
    model = SRAMModel(data_width=width, depth=depth)
    rng = random.Random(cocotb.RANDOM_SEED)
    hot = [rng.randrange(depth) for _ in range(3)]
    await _reset(dut)
    lanes = width // 8

    def address():
        return rng.choice(hot) if rng.random() < 0.5 else rng.randrange(depth)

    for cycle in range(3000):
        # Drive this cycle's inputs after the falling edge; the model takes the same edge.
        await FallingEdge(dut.clk)
        ports = {
            "rd_en": int(rng.random() < 0.7),
            "rd_addr": address(),
            "wr_en": rng.randrange(1 << lanes) if rng.random() < 0.6 else 0,
            "wr_addr": address(),
            "wr_data": rng.getrandbits(width),
        }
        for port_name, value in ports.items():
            getattr(dut, port_name).value = value
        model.clock(**ports)
        await RisingEdge(dut.clk)
        await ReadOnly()
        got = int(dut.rd_data.value)
        assert got == model.rd_data, (
            f"cycle {cycle}: rd_data {got:#x} != model {model.rd_data:#x} after {ports}")


@cocotb.test()
async def write_then_read_every_word(dut):
    """Fill with distinct words, read all back in order (streaming read, one per cycle)."""
    params = _params()
    width, depth = params["data_width"], params["depth"]
    rng = random.Random(cocotb.RANDOM_SEED + 1)
    words = [rng.getrandbits(width) for _ in range(depth)]
    await _reset(dut)
    full = (1 << (width // 8)) - 1
    for address, word in enumerate(words):
        await FallingEdge(dut.clk)
        dut.wr_en.value = full
        dut.wr_addr.value = address
        dut.wr_data.value = word
    await FallingEdge(dut.clk)
    dut.wr_en.value = 0
    for address in range(depth + 1):
        if address < depth:
            dut.rd_en.value = 1
            dut.rd_addr.value = address
        else:
            dut.rd_en.value = 0
        await RisingEdge(dut.clk)
        await ReadOnly()
        if address < depth:
            got = int(dut.rd_data.value)
            assert got == words[address], (
                f"word {address}: read {got:#x}, wrote {words[address]:#x}")
        await FallingEdge(dut.clk)
