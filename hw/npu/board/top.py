"""Board top levels for the ULX3S-85F.

* :class:`BoardCore`: everything in the ``sync`` domain: UART receiver and transmitter on
  the FTDI pins, the bridge (:mod:`npu.board.bridge`), the engine's memory
  (:class:`~npu.board.axiram.AxiRam`) and either the NEM engine (``device="small"``)
  or, without an engine (``device=None``, the quick bitstream of CI), a bare CSR bank of the
  small engine's register map (read-only registers read 0). This is what simulation runs
  (the PLL bypassed: ``clk`` and ``rst`` are ports).
* :class:`BoardTop`: the pin shell: the 25 MHz oscillator through an ``EHXPLLL``
  (:mod:`npu.board.pll`) to the engine clock, a reset held until the PLL locks (and
  released in step with the clock) and the core. The reset reaches every flip-flop with
  an initial value, so it goes out on a global network through a ``DCCA``, as the clock
  does: routed through the fabric it is a net of some 27,000 sinks across the die (19.8 ns
  on one placement, the engine's slowest path). Its ports are the pins of
  ``constraints/ulx3s-85f.lpf``.

LEDs (``led[0]`` .. ``led[7]``): 0 heartbeat (the clock runs), 1 a byte received, 2 a byte
sent, 3 the bridge is in a frame, 4 an error reply was sent, 5 the engine issued a task,
6 the engine's AXI port is active (events are stretched to be seen), 7 the PLL is locked
(always on in the core alone).
"""

from __future__ import annotations

from amaranth import ClockDomain, Const, Instance, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.wiring import In, Out

from npu.board.axiram import AxiRam
from npu.board.bridge import Bridge
from npu.board.pll import EcpPll
from npu.board.protocol import BAUD
from npu.board.uart import UartRx, UartTx, check_divisor
from npu.bus.csr import AxiLiteCsr, AxiLiteSlice
from npu.engine.config import EngineConfig
from npu.engine.top import NemEngine, engine_register_map

__all__ = ["OSC_MHZ", "PLL_MHZ", "BoardCore", "BoardTop"]

#: The ULX3S oscillator (pin G2).
OSC_MHZ = 25.0

#: The engine clock the board top is built for by default (``make bitstream``): the tiny
#: engine's board top met it on placer seeds 2, 3 and 4 at 09d33ac (``docs/board.md``).
PLL_MHZ = 50.0


class BoardCore(wiring.Component):
    """UART bridge, block RAM and engine (or a bare CSR bank), in the ``sync`` domain.

    Parameters
    ----------
    device : str or None
        The engine's device (``"small"``, ``"sim"``, ...), or None for no engine.
    memory_bytes : int
        Block RAM behind the engine's AXI port (a multiple of the bus word).
    divisor : int
        Clock cycles per UART bit (clock / baud rate).
    timeout : int
        The bridge's inter-byte timeout in cycles.
    stretch_bits : int
        An LED event lights its LED for ``2**stretch_bits - 1`` cycles from the second
        cycle after it (longer when events follow); the heartbeat toggles every
        ``2**(stretch_bits + 1)`` cycles.

    Attributes
    ----------
    uart_rx : In(1)
        From the FTDI (its TXD).
    uart_tx : Out(1)
        To the FTDI (its RXD).
    led : Out(8)
    """

    def __init__(self, *, device="small", memory_bytes=1 << 16, divisor=25,
                 timeout=1 << 20, stretch_bits=22):
        self.device = device
        self.config = cfg = EngineConfig.shipped(device if device else "small")
        self.regmap = engine_register_map(cfg)
        self.memory_bytes = memory_bytes
        self.divisor = check_divisor(divisor)
        self.timeout = timeout
        if not isinstance(stretch_bits, int) or not 1 <= stretch_bits <= 30:
            raise ValueError(f"stretch_bits must be an integer in 1..30, not {stretch_bits!r}")
        self.stretch_bits = stretch_bits
        super().__init__({"uart_rx": In(1, init=1), "uart_tx": Out(1, init=1),
                          "led": Out(8)})

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.rx = rx = UartRx(self.divisor)
        m.submodules.tx = tx = UartTx(self.divisor)
        m.submodules.bridge = bridge = Bridge(self.regmap, memory_bytes=self.memory_bytes,
                                              engine=self.device is not None,
                                              timeout=self.timeout)
        m.submodules.ram = ram = AxiRam(size=self.memory_bytes, addr_width=cfg.addr_width,
                                        data_width=cfg.data_width)
        m.d.comb += [rx.rx.eq(self.uart_rx), self.uart_tx.eq(tx.tx)]
        wiring.connect(m, rx.data, bridge.rx)
        wiring.connect(m, bridge.tx, tx.data)
        wiring.connect(m, bridge.mem, ram.host)
        # the bridge's CSR bus through a register slice: the bridge's state machine and the
        # register bank's read multiplexer sit apart on the die (18 ns of routing on one
        # placement, the board's slowest path, without it)
        m.submodules.csr_slice = csr_slice = AxiLiteSlice(self.regmap.addr_width)
        wiring.connect(m, bridge.csr, csr_slice.sub)
        issue = Signal()
        axi_active = Signal()
        if self.device is not None:
            m.submodules.engine = engine = NemEngine(device=self.device)
            wiring.connect(m, engine.axi, ram.axi)
            wiring.connect(m, csr_slice.man, engine.csr)
            m.d.comb += [issue.eq(engine.dbg_issue),
                         axi_active.eq(engine.axi.arvalid | engine.axi.awvalid
                                       | engine.axi.rvalid | engine.axi.wvalid)]
        else:
            m.submodules.csr = csr = AxiLiteCsr(self.regmap)
            wiring.connect(m, csr_slice.man, csr.bus)

        beat = Signal(self.stretch_bits + 2)
        m.d.sync += beat.eq(beat + 1)
        events = [rx.data.valid & rx.data.ready, tx.data.valid & tx.data.ready,
                  bridge.busy, bridge.frame_error, issue, axi_active]
        leds = [beat[-1]]
        for k, event in enumerate(events):
            # the event registered first: the engine's issue and AXI handshakes come from
            # across the die and would otherwise reach every stretch counter's enable
            seen = Signal(name=f"led{k + 1}_event")
            m.d.sync += seen.eq(event)
            left = Signal(self.stretch_bits, name=f"led{k + 1}_left")
            with m.If(seen):
                m.d.sync += left.eq(-1)
            with m.Elif(left != 0):
                m.d.sync += left.eq(left - 1)
            leds.append(left != 0)
        for k, lit in enumerate(leds):
            m.d.comb += self.led[k].eq(lit)
        m.d.comb += self.led[7].eq(1)
        return m


class BoardTop(wiring.Component):
    """The ULX3S-85F pin shell: oscillator -> PLL -> ``sync``, reset until locked, core.

    Parameters
    ----------
    pll_mhz : float
        Engine clock from the 25 MHz oscillator (default :data:`PLL_MHZ`).
    **core
        :class:`BoardCore` parameters; ``divisor`` defaults to the PLL frequency over
        ``baud``.
    baud : int
        UART bit rate (default 1,000,000, which the board's FT231X supports).

    Attributes
    ----------
    clk25 : In(1)
    uart_rx : In(1)
    uart_tx : Out(1)
    led : Out(8)
    """

    def __init__(self, *, pll_mhz=PLL_MHZ, baud=BAUD, **core):
        self.pll = EcpPll(OSC_MHZ, pll_mhz)
        self.f_mhz = self.pll.params.f_out
        divisor = core.pop("divisor", None)
        if divisor is None:
            divisor = round(self.f_mhz * 1e6 / baud)
        self.baud = baud
        self.core = BoardCore(divisor=divisor, **core)
        super().__init__({"clk25": In(1), "uart_rx": In(1, init=1), "uart_tx": Out(1),
                          "led": Out(8)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.pll = pll = self.pll
        m.domains.sync = sync = ClockDomain("sync")
        # the synchroniser in a domain of its own on the same clock, its output through a
        # global buffer to the reset of ``sync``
        m.domains.reset = reset = ClockDomain("reset", local=True)
        m.d.comb += [pll.clk_in.eq(self.clk25), sync.clk.eq(pll.clk_out),
                     reset.clk.eq(pll.clk_out)]
        m.submodules.reset = ResetSynchronizer(~pll.locked, domain="reset")
        m.submodules.reset_buffer = Instance("DCCA", i_CLKI=reset.rst, i_CE=Const(1, 1),
                                             o_CLKO=sync.rst)
        m.submodules.core = core = self.core
        m.d.comb += [core.uart_rx.eq(self.uart_rx), self.uart_tx.eq(core.uart_tx),
                     self.led.eq(core.led), self.led[7].eq(pll.locked)]
        return m
