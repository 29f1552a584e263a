"""cocotb testbench: AXI4-Lite CSR bank against :class:`npu.bus.csr.CsrModel`.

cocotbext-axi's ``AxiLiteMaster`` issues random reads and writes (partial strobes,
unmapped addresses, writes to read-only registers) with random pauses on all five
channels, the B and R channels included (back-pressure from the host).
"""

from __future__ import annotations

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from npu.bus.csr import CsrModel
from sim.cocotb_streams import random_pauses
from sim.csr_demo import DEMO_ID, DEMO_MAP


async def _setup(dut, stalls, seed):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "bus_"), dut.clk, dut.rst)
    if stalls:
        for k, channel in enumerate([master.write_if.aw_channel, master.write_if.w_channel,
                                     master.write_if.b_channel, master.read_if.ar_channel,
                                     master.read_if.r_channel]):
            channel.set_pause_generator(random_pauses(seed + k, 0.4))
    dut.rst.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    return master


async def _random_traffic(dut, stalls):
    seed = cocotb.RANDOM_SEED + int(stalls)
    rng = random.Random(seed)
    master = await _setup(dut, stalls, seed)
    model = CsrModel(DEMO_MAP)
    addresses = [reg.offset for reg in DEMO_MAP.regs] + [0x14, 0x100, 0xFFC]
    for _ in range(300):
        addr = rng.choice(addresses)
        if rng.random() < 0.5:
            width = rng.choice([4, 4, 1, 2])
            offset = rng.randrange(0, 4 - width + 1) if width < 4 else 0
            value = rng.getrandbits(8 * width)
            if DEMO_MAP.regs[3].offset == addr and rng.random() < 0.5:
                offset, width, value = 0, 4, 1  # a real start pulse
            strb = ((1 << width) - 1) << offset
            resp = await master.write(addr + offset, value.to_bytes(width, "little"))
            want = model.write(addr, value << (8 * offset), strb)
            assert int(resp.resp) == want, f"write {addr:#x}: resp {resp.resp}, model {want}"
        else:
            result = await master.read(addr, 4)
            ro = {"id": DEMO_ID, "starts": len(model.pulses),
                  "scratch_plus1": (model.values["scratch"] + 1) & 0xFFFFFFFF}
            want_data, want_resp = model.read(addr, ro)
            got = int.from_bytes(result.data, "little")
            assert int(result.resp) == want_resp, f"read {addr:#x}: resp {result.resp}"
            assert got == want_data, f"read {addr:#x}: {got:#x}, model {want_data:#x}"


@cocotb.test()
async def random_traffic_no_stalls(dut):
    await _random_traffic(dut, stalls=False)


@cocotb.test()
async def random_traffic_with_stalls(dut):
    await _random_traffic(dut, stalls=True)


@cocotb.test()
async def reset_values(dut):
    master = await _setup(dut, False, 0)
    for reg in DEMO_MAP.regs:
        if reg.access == "rw":
            data = (await master.read(reg.offset, 4)).data
            assert int.from_bytes(data, "little") == reg.init, reg.name
