"""The UART bridge (frame parser, executor, reply sender) with its block RAM and the
engine's CSR bank, in the Amaranth simulator, against :class:`npu.board.model.BridgeModel`.

The same request bytes go to the gateware (with random idle cycles on its input and random
back-pressure on its output) and to the model; every reply must be byte-equal, and so must
the memory at the end. Malformed frames (bad CRC, unknown command, wrong lengths,
misaligned and out-of-range addresses, unmapped registers, line errors, frames cut short)
get their error replies, and a good request after each of them still works.
"""

from __future__ import annotations

import random
import struct

import pytest
from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.sim import Simulator

from npu.board import protocol as p
from npu.board.axiram import AxiRam
from npu.board.bridge import Bridge
from npu.board.model import BridgeModel
from npu.board.uart import RX_LAYOUT
from npu.bus.csr import AxiLiteCsr, AxiLiteSlice
from npu.engine.config import EngineConfig
from npu.engine.top import engine_register_map
from sim.streams import stream_recv

MEM = 2048
TIMEOUT = 64
REGMAP = engine_register_map(EngineConfig.shipped("small"))
RO = {"ID": 0x314D454E, "STATUS": 2, "ERROR_CAUSE": 5, "ERROR_TASK": 7, "CYCLES": 12345}


class Harness(wiring.Component):
    """Bridge + AxiRam (64-bit words) + the engine's CSR bank with fixed read-only values,
    the bank behind the board's register slice when *sliced*."""

    def __init__(self, sliced=False):
        self.bridge = Bridge(REGMAP, memory_bytes=MEM, timeout=TIMEOUT)
        self.sliced = sliced
        super().__init__({"rx": wiring.In(stream.Signature(RX_LAYOUT)),
                          "tx": wiring.Out(stream.Signature(8))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.bridge = b = self.bridge
        m.submodules.ram = ram = AxiRam(size=MEM, addr_width=32, data_width=64)
        m.submodules.csr = csr = AxiLiteCsr(REGMAP)
        wiring.connect(m, b.mem, ram.host)
        if self.sliced:
            m.submodules.csr_slice = csr_slice = AxiLiteSlice(REGMAP.addr_width)
            wiring.connect(m, b.csr, csr_slice.sub)
            wiring.connect(m, csr_slice.man, csr.bus)
        else:
            wiring.connect(m, b.csr, csr.bus)
        for name, value in RO.items():
            m.d.comb += getattr(csr.regs, name).eq(value)
        wiring.connect(m, wiring.flipped(self.rx), b.rx)
        wiring.connect(m, b.tx, wiring.flipped(self.tx))
        return m


def _run(steps, *, seed=0, idle=0.3, backpressure=0.3, sliced=False):
    """Run *steps* on the gateware; each step is ``(bytes, line_errors, wait_timeout)``.

    Returns the reply bytes after each step and the memory's final bytes (read back with
    MEM_READ through the bridge itself is not used: the RAM is read from the simulator).
    """
    dut = Harness(sliced)
    rng = random.Random(seed)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    replies = []

    async def send(ctx, data, errors):
        for k, byte in enumerate(data):
            while idle and rng.random() < idle:
                ctx.set(dut.rx.valid, 0)
                await ctx.tick()
            ctx.set(dut.rx.payload, {"data": byte, "error": int(k in errors)})
            ctx.set(dut.rx.valid, 1)
            for _ in range(TIMEOUT * 4):
                *_, ready = await ctx.tick().sample(dut.rx.ready)
                if ready:
                    break
            else:
                raise AssertionError(f"byte {k} of {data.hex()} not taken")
            ctx.set(dut.rx.valid, 0)

    async def bench(ctx):
        for data, errors, expect_reply in steps:
            await send(ctx, data, errors)
            if not expect_reply:
                for _ in range(TIMEOUT // 2):
                    assert not ctx.get(dut.tx.valid), f"a reply to {data.hex()}"
                    await ctx.tick()
                replies.append(b"")
                continue
            head = bytes(await stream_recv(ctx, dut.tx, 3, rng=rng, backpressure=backpressure,
                                           timeout=4000, name="reply"))
            rest = bytes(await stream_recv(ctx, dut.tx, head[2] + 1, rng=rng,
                                           backpressure=backpressure, timeout=4000,
                                           name="reply"))
            replies.append(head + rest)

    sim.add_testbench(bench)
    sim.run()
    return replies


def _model_replies(steps):
    model = BridgeModel(REGMAP, memory_bytes=MEM, ro_values=RO)
    out = []
    for data, errors, _ in steps:
        reply = b"".join(model.feed(b, line_error=k in errors) for k, b in enumerate(data))
        if not reply and model.in_frame:
            reply = model.timeout()
        out.append(reply)
    return out, model


def _step(frame, errors=(), reply=True):
    return (frame, set(errors), reply)


def test_crc8_check_value():
    # CRC-8/SMBUS catalogue check value (polynomial 0x07, init 0): 0xF4 for "123456789"
    assert p.crc8(b"123456789") == 0xF4


@pytest.mark.parametrize("sliced", [False, True], ids=["direct", "sliced"])
def test_good_commands_equal_the_model(sliced):
    rng = random.Random(5)
    data = bytes(rng.randrange(256) for _ in range(4 * 13))
    steps = [
        _step(p.info()),
        _step(p.mem_write(0x40, data)),
        _step(p.mem_read(0x40, 13)),
        _step(p.mem_read(0x44, 1)),             # an odd 32-bit word of a 64-bit RAM word
        _step(p.mem_write(0x7FC, b"\x01\x02\x03\x04")),  # the last word
        _step(p.mem_read(0x7F8, 2)),
        _step(p.csr_write(REGMAP.offset("WATCHDOG"), 0xABCDEF01)),
        _step(p.csr_read(REGMAP.offset("WATCHDOG"))),
        _step(p.csr_read(REGMAP.offset("ID"))),
        _step(p.start(0x1000)),
        _step(p.csr_read(REGMAP.offset("PROG_LO"))),
        _step(p.status()),
    ]
    want, _ = _model_replies(steps)
    got = _run(steps, sliced=sliced)
    assert got == want
    # independent of the model: the replies decode to what was written
    assert p.ReplyDecoder().feed(got[2])[0].ok("read") == data
    assert p.Info.decode(p.ReplyDecoder().feed(got[0])[0].payload).memory_bytes == MEM
    assert struct.unpack("<4I", p.ReplyDecoder().feed(got[-1])[0].payload) == \
        (2, 5, 7, 12345)
    assert struct.unpack("<I", p.ReplyDecoder().feed(got[10])[0].payload) == (0x1000,)


@pytest.mark.parametrize("sliced", [False, True], ids=["direct", "sliced"])
def test_malformed_frames_get_error_replies_and_do_not_wedge(sliced):
    good = p.mem_write(0x10, b"\xAA\xBB\xCC\xDD")
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0x55
    flipped = bytearray(good)
    flipped[5] ^= 1  # payload damaged: CRC fails, nothing is written
    steps = [
        _step(b"\x00\x11\xA5\xFF", reply=False),            # noise outside a frame
        _step(bytes(bad_crc)),
        _step(bytes(flipped)),
        _step(p.request(0x7E)),                              # unknown command
        _step(p.request(p.Command.INFO, b"\x00")),           # INFO with a payload
        _step(p.request(p.Command.CSR_READ, b"\x00")),       # short CSR_READ
        _step(p.mem_read(0, 0)),                             # zero words
        _step(p.mem_read(0, p.MAX_WORDS + 1)),               # too many words
        _step(p.request(p.Command.MEM_WRITE, b"\x00" * 6)),  # not whole words
        _step(p.mem_read(2, 1)),                             # misaligned
        _step(p.mem_read(MEM - 4, 2)),                       # past the end
        _step(p.mem_write(MEM, b"\x00" * 4)),                # past the end
        _step(p.mem_read(0xFFFFFFFC, 2)),                    # would wrap 32 bits
        _step(p.csr_read(0x1002)),                           # beyond the CSR map's range
        _step(p.csr_read(0x002)),                            # misaligned
        _step(p.csr_read(0x03C)),                            # unmapped register: BUS
        _step(p.csr_write(0x03C, 1)),
        _step(good, errors={3}),                             # a UART framing error
        _step(good[:4]),                                     # cut short: TIMEOUT
        _step(p.request(p.Command.MEM_WRITE, b"\x00" * 8)[:-3]),  # LEN beyond the data
        _step(good),
        _step(p.mem_read(0x10, 1)),
    ]
    want, model = _model_replies(steps)
    codes = [p.ReplyDecoder().feed(r)[0].status if r else None for r in want]
    assert codes == [None, p.Status.CHECKSUM, p.Status.CHECKSUM, p.Status.COMMAND,
                     p.Status.LENGTH, p.Status.LENGTH, p.Status.LENGTH, p.Status.LENGTH,
                     p.Status.LENGTH, p.Status.ADDRESS, p.Status.ADDRESS, p.Status.ADDRESS,
                     p.Status.ADDRESS, p.Status.ADDRESS, p.Status.ADDRESS, p.Status.BUS,
                     p.Status.BUS, p.Status.LINE, p.Status.TIMEOUT, p.Status.TIMEOUT,
                     p.Status.OK, p.Status.OK]
    assert model.memory[0x10:0x14] == b"\xAA\xBB\xCC\xDD"
    got = _run(steps, seed=3, sliced=sliced)
    assert got == want


def test_no_stalls():
    steps = [_step(p.mem_write(0, bytes(range(240)))), _step(p.mem_read(0, 60)),
             _step(p.status())]
    want, _ = _model_replies(steps)
    assert _run(steps, idle=0.0, backpressure=0.0) == want
