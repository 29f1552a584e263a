"""The UART bridge at its edges, in the Amaranth simulator: what ``test_bridge.py``'s
reply-by-reply comparison with the model does not see.

* the inter-byte timeout to the cycle (``timeout - 1`` idle cycles pass, ``timeout`` do
  not) in every state of a frame;
* the CSR side effects: START writes PROG_LO, PROG_HI = 0 and one START pulse; a CSR_WRITE
  of 1 to START is one pulse; the ``frame_error`` pulse (one cycle per error reply) and
  ``busy`` (from the sync byte to the reply's last byte);
* the AXI4-Lite manager against a subordinate that stalls AW, W, B, AR and R independently
  (the engine's CSR bank answers at once);
* lengths and offsets at their limits, against the model;
* the constructor's checks and the memory port's width.
"""

from __future__ import annotations

import random

import pytest
from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.sim import Simulator

from npu.board import protocol as p
from npu.board.axiram import AxiRam
from npu.board.bridge import Bridge
from npu.board.model import BridgeModel
from npu.board.uart import RX_LAYOUT
from npu.bus.csr import AxiLiteCsr
from npu.engine.config import EngineConfig
from npu.engine.top import engine_register_map

MEM = 2048
TIMEOUT = 32
REGMAP = engine_register_map(EngineConfig.shipped("small"))
RO = {"ID": 0x314D454E, "STATUS": 2, "ERROR_CAUSE": 5, "ERROR_TASK": 7, "CYCLES": 12345}


class Harness(wiring.Component):
    """The bridge and its block RAM; the CSR port to the engine's bank (``bank``) or out
    to the testbench."""

    def __init__(self, bank=True, timeout=TIMEOUT):
        self.bridge = Bridge(REGMAP, memory_bytes=MEM, timeout=timeout)
        self.bank = AxiLiteCsr(REGMAP) if bank else None
        ports = {"rx": wiring.In(stream.Signature(RX_LAYOUT)),
                 "tx": wiring.Out(stream.Signature(8))}
        if not bank:
            ports["csr"] = wiring.Out(self.bridge.csr.signature)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        m.submodules.bridge = b = self.bridge
        m.submodules.ram = ram = AxiRam(size=MEM, addr_width=32, data_width=64)
        wiring.connect(m, b.mem, ram.host)
        if self.bank is not None:
            m.submodules.bank = bank = self.bank
            wiring.connect(m, b.csr, bank.bus)
            for name, value in RO.items():
                m.d.comb += getattr(bank.regs, name).eq(value)
        else:
            wiring.connect(m, b.csr, wiring.flipped(self.csr))
        wiring.connect(m, wiring.flipped(self.rx), b.rx)
        wiring.connect(m, b.tx, wiring.flipped(self.tx))
        return m


def _simulate(dut, schedule, *, watch=None, extra=(), cycles=6000):
    """Drive ``schedule`` (a list of ``(idle cycles before, byte, error)``) into rx, one
    byte per cycle otherwise, with tx always ready; return ``(tx bytes with the cycle each
    was taken, per-cycle samples of watch)``."""
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    got, samples = [], []

    async def bench(ctx):
        ctx.set(dut.tx.ready, 1)
        plan = list(schedule)
        wait = plan[0][0] if plan else 0
        for cycle in range(cycles):
            if plan and wait == 0:
                _, byte, error = plan[0]
                ctx.set(dut.rx.valid, 1)
                ctx.set(dut.rx.payload, {"data": byte, "error": error})
            else:
                ctx.set(dut.rx.valid, 0)
            rx_taken = plan and wait == 0 and ctx.get(dut.rx.ready)
            if ctx.get(dut.tx.valid):
                got.append((cycle, ctx.get(dut.tx.payload)))
            if watch is not None:
                samples.append({k: ctx.get(v) for k, v in watch.items()})
            await ctx.tick()
            if rx_taken:
                plan.pop(0)
                wait = plan[0][0] if plan else 0
            elif plan and wait:
                wait -= 1
        assert not plan, f"{len(plan)} bytes never taken"

    sim.add_testbench(bench)
    for proc in extra:
        sim.add_testbench(proc)
    sim.run()
    return got, samples


def _schedule(data, gaps=None, errors=()):
    gaps = gaps or {}
    return [(gaps.get(k, 0), b, int(k in errors)) for k, b in enumerate(data)]


def _frames(frames, lead):
    """Frames one after another, each sync byte ``lead`` idle cycles after the last byte
    before it (enough for the reply to go out)."""
    out = []
    for f in frames:
        out += [(lead, f[0], 0), *_schedule(f[1:])]
    return out


def _replies(got):
    return p.ReplyDecoder().feed(bytes(b for _, b in got))


@pytest.mark.parametrize("at", [1, 2, 3, 4, 5])    # before CMD, LEN, payload, last, CRC
def test_inter_byte_timeout_to_the_cycle(at):
    frame = p.csr_read(REGMAP.offset("ID"))           # sync, CMD, LEN, 2 bytes, CRC
    # TIMEOUT - 1 idle cycles between two bytes of a frame: still one frame
    got, _ = _simulate(Harness(), _schedule(frame, {at: TIMEOUT - 1}))
    assert _replies(got) == [p.Reply(p.Status.OK, RO["ID"].to_bytes(4, "little"))]
    # TIMEOUT idle cycles: dropped with TIMEOUT (the rest of the frame is then noise
    # outside a frame, or a new frame's sync byte; nothing else is sent back)
    got, _ = _simulate(Harness(), [*_schedule(frame[:at]), (TIMEOUT + 8, 0x00, 0)])
    assert _replies(got) == [p.Reply(p.Status.TIMEOUT, b"")]
    # the last byte taken in cycle L, idle cycles L+1 .. L+TIMEOUT (the timer at 0 ..
    # TIMEOUT-1), the frame dropped in cycle L+TIMEOUT, the reply's sync byte offered next
    last_taken = len(frame[:at]) - 1
    assert got[0][0] == last_taken + TIMEOUT + 1


@pytest.mark.parametrize("timeout", [16, 17])
def test_inter_byte_timeout_at_the_timer_width(timeout):
    # 17 needs the timer's fifth bit (it counts to 16), 16 the smallest allowed
    frame = p.csr_read(REGMAP.offset("ID"))
    got, _ = _simulate(Harness(timeout=timeout), _schedule(frame, {3: timeout - 1}))
    assert _replies(got) == [p.Reply(p.Status.OK, RO["ID"].to_bytes(4, "little"))]
    got, _ = _simulate(Harness(timeout=timeout), [*_schedule(frame[:3]), (timeout + 8, 0, 0)])
    assert _replies(got) == [p.Reply(p.Status.TIMEOUT, b"")]
    assert got[0][0] == 2 + timeout + 1


def test_start_and_pulses_frame_error_and_busy():
    dut = Harness()
    bank = dut.bank.regs
    watch = {"start": bank.START, "prog_lo": bank.PROG_LO, "prog_hi": bank.PROG_HI,
             "ferr": dut.bridge.frame_error, "busy": dut.bridge.busy}
    frames = [p.csr_write(REGMAP.offset("PROG_HI"), 5), p.start(0x80001000),
              p.csr_write(REGMAP.offset("START"), 1), p.csr_write(REGMAP.offset("START"), 2),
              p.request(0x7E), p.mem_read(2, 1), p.status(), p.csr_read(0x1000)]
    schedule = _frames(frames, 200)
    got, s = _simulate(dut, schedule, watch=watch, cycles=200 * len(frames) + 2000)
    replies = _replies(got)
    assert [r.status for r in replies] == [p.Status.OK] * 4 + \
        [p.Status.COMMAND, p.Status.ADDRESS, p.Status.OK, p.Status.ADDRESS]
    # START: PROG_LO = the address, PROG_HI = 0, one START pulse; the CSR_WRITE of 1 to
    # START one more, of 2 none
    assert sum(c["start"] for c in s) == 2
    assert s[-1]["prog_lo"] == 0x80001000 and s[-1]["prog_hi"] == 0
    # one single-cycle frame_error pulse per error reply
    pulses = [k for k, c in enumerate(s) if c["ferr"]]
    assert len(pulses) == 3 and all(s[k + 1]["ferr"] == 0 for k in pulses)
    # busy: low outside frames and replies, high at every reply byte
    taken = {cycle for cycle, _ in got}
    assert all(s[c]["busy"] for c in taken)
    assert s[0]["busy"] == 0 and s[-1]["busy"] == 0
    ends = [c for c in sorted(taken) if c + 1 not in taken and s[c + 1]["busy"] == 0]
    assert len(ends) == len(frames)                   # idle again after each reply


def test_csr_port_against_a_stalling_subordinate():
    """The AXI4-Lite manager with AW, W, B, AR and R each stalled at random: every write
    reaches the subordinate once with its address and data, every read returns its data."""
    dut = Harness(bank=False)
    rng = random.Random(11)
    c = dut.csr
    writes = []

    async def subordinate(ctx):
        aw = w = None
        b_pending = r_pending = None
        for _ in range(20000):
            ctx.set(c.awready, aw is None and rng.random() < 0.3)
            ctx.set(c.wready, w is None and rng.random() < 0.3)
            ctx.set(c.arready, r_pending is None and rng.random() < 0.3)
            ctx.set(c.bvalid, b_pending is not None and b_pending[1] == 0)
            ctx.set(c.bresp, 0)
            ctx.set(c.rvalid, r_pending is not None and r_pending[1] == 0)
            ctx.set(c.rdata, r_pending[0] if r_pending else 0)
            ctx.set(c.rresp, 0)
            sample = {n: ctx.get(getattr(c, n)) for n in (
                "awvalid", "awready", "awaddr", "wvalid", "wready", "wdata", "wstrb",
                "bvalid", "bready", "arvalid", "arready", "araddr", "rvalid", "rready")}
            await ctx.tick()
            if sample["awvalid"] and sample["awready"]:
                aw = sample["awaddr"]
            if sample["wvalid"] and sample["wready"]:
                w = (sample["wdata"], sample["wstrb"])
            if aw is not None and w is not None and b_pending is None:
                writes.append((aw, *w))
                aw = w = None
                b_pending = [None, rng.randrange(4)]
            if sample["bvalid"] and sample["bready"]:
                b_pending = None
            elif b_pending is not None and b_pending[1]:
                b_pending[1] -= 1
            if sample["arvalid"] and sample["arready"]:
                r_pending = [0x1000_0000 | sample["araddr"], rng.randrange(4)]
            elif sample["rvalid"] and sample["rready"]:
                r_pending = None
            elif r_pending is not None and r_pending[1]:
                r_pending[1] -= 1

    frames = [p.csr_write(0x28, 0xCAFEF00D), p.csr_read(0x44), p.start(0x400), p.status(),
              p.csr_write(0x1C, 7)]
    schedule = _frames(frames, 100)
    got, _ = _simulate(dut, schedule, extra=[subordinate], cycles=12000)
    offsets = [REGMAP.offset(n) for n in ("PROG_LO", "PROG_HI", "START")]
    assert writes == [(0x28, 0xCAFEF00D, 0xF), (offsets[0], 0x400, 0xF),
                      (offsets[1], 0, 0xF), (offsets[2], 1, 0xF), (0x1C, 7, 0xF)]
    replies = _replies(got)
    status = b"".join((0x1000_0000 | REGMAP.offset(n)).to_bytes(4, "little")
                      for n in p.STATUS_REGS)
    assert replies == [p.Reply(p.Status.OK, b""),
                       p.Reply(p.Status.OK, (0x1000_0044).to_bytes(4, "little")),
                       p.Reply(p.Status.OK, b""), p.Reply(p.Status.OK, status),
                       p.Reply(p.Status.OK, b"")]


def test_lengths_and_offsets_at_their_limits_equal_the_model():
    frames = [p.request(p.Command.MEM_WRITE, bytes(7)),
              p.request(p.Command.MEM_WRITE, bytes(10)),
              p.request(p.Command.MEM_WRITE, bytes(4 + 4 * 61)),
              p.mem_write(0x100, bytes(range(240))), p.mem_read(0x100, 60),
              p.csr_read(0x1000), p.csr_read(0xFFC), p.csr_write(0x1000, 1),
              p.request(p.Command.START, bytes(3)), p.request(p.Command.STATUS, b"\x00"),
              p.request(p.Command.CSR_WRITE, bytes(5))]
    model = BridgeModel(REGMAP, memory_bytes=MEM, ro_values=RO)
    want = [p.ReplyDecoder().feed(model.feed_all(f))[0] for f in frames]
    assert [r.status for r in want] == [p.Status.LENGTH] * 3 + [p.Status.OK] * 2 + \
        [p.Status.ADDRESS, p.Status.BUS, p.Status.ADDRESS] + [p.Status.LENGTH] * 3
    schedule = _frames(frames, 50)
    got, _ = _simulate(Harness(), schedule, cycles=12000)
    assert _replies(got) == want


def test_constructor_checks_and_memory_port_width():
    for n, bits in ((4, 1), (8, 1), (12, 2), (16, 2), (20, 3), (2048, 9), (1 << 32, 30)):
        assert Bridge(REGMAP, memory_bytes=n).mem_bits == bits, n
    with pytest.raises(TypeError, match="regmap must be a RegisterMap, not 'x'"):
        Bridge("x", memory_bytes=64)
    for bad in (0, -4, 6, (1 << 32) + 4, 64.0):
        with pytest.raises(ValueError, match=r"memory_bytes must be a positive multiple of "
                           rf"4 up to 4 GiB, not {bad!r}"):
            Bridge(REGMAP, memory_bytes=bad)
    assert Bridge(REGMAP, memory_bytes=64, timeout=16).timeout == 16
    for bad in (15, 0, 16.0):
        with pytest.raises(ValueError, match=rf"timeout must be an integer >= 16 cycles, "
                           rf"not {bad!r}"):
            Bridge(REGMAP, memory_bytes=64, timeout=bad)
