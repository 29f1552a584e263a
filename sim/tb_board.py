"""cocotb testbench of the board core (:class:`npu.board.top.BoardCore`, the PLL bypassed),
driven only through its UART pins, with the host code of ``npu board run``
(:mod:`npu.board.host`).

The UART driver moves bits with ``Timer`` waits of one bit time (``divisor`` clock
periods), so the simulator runs freely between bit edges; a background receiver samples
``uart_tx`` in the middle of each bit. (cocotbext-uart 0.1.4 would move bytes the same
way, but it cannot send a byte with a low stop bit, which the LINE error case needs, so
the few lines of driver are here.) Every request frame goes through
:func:`transact` and every reply through :class:`npu.board.protocol.ReplyDecoder`.

* ``gemm_program``: a bound, tiled int8 gemm (with bias) is loaded into the board's block
  RAM over the UART, started, polled and read back by :func:`npu.board.host.session`
  (the code ``npu board run`` drives over pyserial); the DDR result equals the executor's.
* ``malformed_frames``: a bad CRC, an unknown command, wrong lengths, out-of-range memory
  and CSR addresses, an unmapped register, a framing error on the line and a frame cut
  short (the bridge's inter-byte timeout) each get their error reply; a good request after
  each still works.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.queue import Queue
from cocotb.triggers import FallingEdge, RisingEdge, SimTimeoutError, Timer, with_timeout

from npu.board import protocol as p
from npu.board.host import board_image, drive_async, session
from npu.engine.config import EngineConfig
from npu.engine.top import engine_register_map

PARAMS = json.loads(os.environ["NPU_DESIGN_PARAMS"])
PERIOD_NS = 10
BIT_NS = PERIOD_NS * PARAMS["divisor"]
REGMAP = engine_register_map(EngineConfig.shipped(PARAMS["device"]))


class Uart:
    """Timer-paced UART on the core's pins."""

    def __init__(self, dut):
        self.dut = dut
        self.received = Queue()
        self.decoder = p.ReplyDecoder()
        dut.uart_rx.value = 1
        cocotb.start_soon(self._receive())

    async def _receive(self):
        while True:
            await FallingEdge(self.dut.uart_tx)
            await Timer(BIT_NS + BIT_NS // 2, unit="ns")
            value = 0
            for k in range(8):
                value |= int(self.dut.uart_tx.value) << k
                await Timer(BIT_NS, unit="ns")
            assert int(self.dut.uart_tx.value) == 1, "stop bit low on uart_tx"
            self.received.put_nowait(value)

    async def send(self, data, *, bad_stop=()):
        for k, byte in enumerate(data):
            bits = [0] + [byte >> j & 1 for j in range(8)] + [0 if k in bad_stop else 1]
            for bit in bits:
                self.dut.uart_rx.value = bit
                await Timer(BIT_NS, unit="ns")
            if k in bad_stop:
                self.dut.uart_rx.value = 1
                await Timer(BIT_NS, unit="ns")
        self.dut.uart_rx.value = 1

    async def reply(self, timeout_ns):
        """The next reply frame (fails after *timeout_ns* without one)."""
        while True:
            try:
                got = await with_timeout(self.received.get(), timeout_ns, "ns")
            except SimTimeoutError:
                raise AssertionError(f"no reply within {timeout_ns} ns") from None
            replies = self.decoder.feed(bytes([got]))
            if replies:
                return replies[0]

    async def transact(self, frame, *, bad_stop=()):
        await self.send(frame, bad_stop=bad_stop)
        # a reply of up to 255 bytes, the bridge's work and the timeout, with margin
        return await self.reply(BIT_NS * 12 * 300 + PERIOD_NS * PARAMS["timeout"] * 2)


async def _setup(dut):
    cocotb.start_soon(Clock(dut.clk, PERIOD_NS, unit="ns").start())
    uart = Uart(dut)
    dut.rst.value = 1
    for _ in range(4):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    return uart


@cocotb.test()
async def gemm_program(dut):
    import sim.program_run as run
    from sim.engine_nmu_programs import gemm_tiles
    from sim.engine_programs import _header

    uart = await _setup(dut)
    text, inputs = gemm_tiles(12, 16, 8, 8, seed=4)
    work = Path(tempfile.mkdtemp(prefix="tb_board_"))
    source = work / "gemm.nem"
    source.write_text(_header(PARAMS["device"]) + text)
    rng = np.random.default_rng(cocotb.RANDOM_SEED)
    arrays = {"A": rng.integers(0, 256, 12 * 16, dtype=np.uint8),
              "B": rng.integers(0, 256, 16 * 8, dtype=np.uint8), **inputs}
    np.savez(work / "in.npz", **arrays)
    prep = run.prepare(str(source), PARAMS["device"], memory=str(work / "in.npz"))
    want = run.expected(prep)
    assert want is not None, prep.refusal
    image = board_image(prep.program, prep.initial, prep.base, prep.binary,
                        PARAMS["memory_bytes"])
    # the block RAM is zero after reset: the zero gap before the binary is not sent
    result = await drive_async(session(prep.program, image, prep.base, REGMAP,
                                       memory_is_zero=True), uart.transact)
    dut._log.info("board: %s after %d cycles, %d polls", result.status,
                  result.counters["CYCLES"], result.polls)
    assert result.status == "DONE", (result.cause, result.task)
    assert result.counters["TASKS_DONE"] == len(prep.program.tasks)
    expected = want.buffers()
    for name, got in result.buffers.items():
        assert np.array_equal(got, expected[name]), f"buffer {name} differs"
    # the result is not trivially zero: the gemm wrote Y
    assert expected["Y"].any()
    assert set(result.buffers) == {b.name for b in prep.program.buffers if b.level == "DDR"}


@cocotb.test()
async def malformed_frames(dut):
    uart = await _setup(dut)
    mem = PARAMS["memory_bytes"]
    good = p.mem_write(0x100, b"\x11\x22\x33\x44")
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    cases = [
        (bytes(bad_crc), {}, p.Status.CHECKSUM),
        (p.request(0x55), {}, p.Status.COMMAND),
        (p.request(p.Command.STATUS, b"\x00"), {}, p.Status.LENGTH),
        (p.mem_read(mem - 4, 2), {}, p.Status.ADDRESS),
        (p.mem_write(mem, b"\x00" * 4), {}, p.Status.ADDRESS),
        (p.mem_read(1, 1), {}, p.Status.ADDRESS),
        (p.csr_read(1 << REGMAP.addr_width), {}, p.Status.ADDRESS),
        (p.csr_read(0x3C), {}, p.Status.BUS),
        (good, {"bad_stop": {4}}, p.Status.LINE),
    ]
    for frame, how, want in cases:
        await uart.send(b"\x00\x13")  # noise before the frame: skipped
        reply = await uart.transact(frame, **how)
        assert reply.status == want, (frame.hex(), reply)
        ok = await uart.transact(p.info())
        info = p.Info.decode(ok.ok("INFO after an error"))
        assert info.memory_bytes == mem and info.engine
    # a frame cut short: the timeout drops it with a reply, and the bridge goes on
    await uart.send(good[:5])
    reply = await uart.reply(PERIOD_NS * PARAMS["timeout"] * 3)
    assert reply.status == p.Status.TIMEOUT
    assert (await uart.transact(good)).status == p.Status.OK
    reply = await uart.transact(p.mem_read(0x100, 1))
    assert reply.ok("MEM_READ") == b"\x11\x22\x33\x44"
    value = await uart.transact(p.csr_read(REGMAP.offset("ID")))
    assert value.ok("ID") == b"NEM1"
