"""On-chip SRAM used as the NEM engine's L1 and L2 memories.

Protocol and timing
-------------------
One synchronous read port and one write port, both in the ``sync`` domain.

* **Read** (latency 1): when ``rd_en`` is high at a rising edge, ``rd_data`` shows the word
  at ``rd_addr`` from the next cycle on, and holds it while ``rd_en`` stays low.
* **Write**: at a rising edge, every byte lane ``b`` with ``wr_en[b]`` high takes
  ``wr_data[8*b : 8*b+8]`` at ``wr_addr``.
* **Read during write** to the same address in the same cycle returns the *old* word
  (read-first): the read port is not transparent to the write port. This is what
  block RAMs give without a bypass mux, and it is what :class:`SRAMModel` does.
* **Second read port** (``read_ports=2``): ``xrd_addr`` / ``xrd_en`` / ``xrd_data``
  behave exactly as the first read port, independently of it (both may read in the same
  cycle, also the same word; read-first against the write port too). On an FPGA this is
  a block RAM in simple dual-port mode per read port (the synthesiser duplicates the
  memory) or a true dual-port block RAM with one port used for reads only.
"""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["SRAM", "SRAMModel"]


def _check_geometry(data_width, depth):
    if not isinstance(data_width, int) or isinstance(data_width, bool) or data_width <= 0:
        raise TypeError(f"data_width must be a positive integer, not {data_width!r}")
    if data_width % 8:
        raise ValueError(f"data_width must be a multiple of 8, not {data_width}")
    if not isinstance(depth, int) or isinstance(depth, bool) or depth <= 0:
        raise TypeError(f"depth must be a positive integer, not {depth!r}")


class SRAM(wiring.Component):
    """Byte-writable SRAM with one read and one write port.

    Parameters
    ----------
    data_width : int
        Word width in bits; a positive multiple of 8. Each byte has a write enable.
    depth : int
        Number of words.
    init : sequence of int, optional
        Initial contents (word values), padded with zeros to ``depth``.
    read_ports : int
        1 (default) or 2: the second read port adds ``xrd_addr``, ``xrd_en``, ``xrd_data``.

    Attributes
    ----------
    rd_addr, rd_en : Signal, in
        Read address and read enable; the word appears on ``rd_data`` one cycle later.
    rd_data : Signal(data_width), out
        The last word read (held while ``rd_en`` is low).
    wr_addr, wr_data : Signal, in
        Write address and data.
    wr_en : Signal(data_width // 8), in
        Byte write enables; all zero means no write.
    xrd_addr, xrd_en, xrd_data : Signal
        The second read port (``read_ports=2`` only), as ``rd_*``.
    """

    def __init__(self, *, data_width, depth, init=(), read_ports=1):
        _check_geometry(data_width, depth)
        if read_ports not in (1, 2):
            raise ValueError(f"read_ports must be 1 or 2, not {read_ports!r}")
        init = list(init)
        if len(init) > depth:
            raise ValueError(f"init has {len(init)} words, more than depth {depth}")
        for index, word in enumerate(init):
            if not 0 <= word < 1 << data_width:
                raise ValueError(
                    f"init[{index}] = {word:#x} does not fit in {data_width} bits"
                )
        self._data_width = data_width
        self._depth = depth
        self._init = init
        self.read_ports = read_ports
        extra = {}
        if read_ports == 2:
            extra = {"xrd_addr": In(range(depth)), "xrd_en": In(1),
                     "xrd_data": Out(data_width)}
        super().__init__({
            "rd_addr": In(range(depth)),
            "rd_en": In(1),
            "rd_data": Out(data_width),
            "wr_addr": In(range(depth)),
            "wr_en": In(data_width // 8),
            "wr_data": In(data_width),
            **extra,
        })

    @property
    def data_width(self):
        """Word width in bits."""
        return self._data_width

    @property
    def depth(self):
        """Number of words."""
        return self._depth

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=self._data_width, depth=self._depth,
                                        init=self._init)
        wr = mem.write_port(granularity=8)
        # No transparent_for: a read in the same cycle as a write sees the old word.
        rd = mem.read_port(domain="sync")
        m.d.comb += [
            wr.addr.eq(self.wr_addr),
            wr.data.eq(self.wr_data),
            wr.en.eq(self.wr_en),
            rd.addr.eq(self.rd_addr),
            rd.en.eq(self.rd_en),
            self.rd_data.eq(rd.data),
        ]
        if self.read_ports == 2:
            xrd = mem.read_port(domain="sync")
            m.d.comb += [xrd.addr.eq(self.xrd_addr), xrd.en.eq(self.xrd_en),
                         self.xrd_data.eq(xrd.data)]
        return m


class SRAMModel:
    """Cycle-level Python model of :class:`SRAM`.

    Call :meth:`clock` once per rising edge with the port inputs sampled before the
    edge; :attr:`rd_data` is then what the hardware shows after that edge.

    Parameters
    ----------
    data_width, depth, init
        As for :class:`SRAM`. The second read port (``xrd_en``, ``xrd_addr`` of
        :meth:`clock`, :attr:`xrd_data`) is always there; leave it unused for a
        one-read-port SRAM.
    """

    def __init__(self, *, data_width, depth, init=()):
        _check_geometry(data_width, depth)
        self.data_width = data_width
        self.depth = depth
        self.words = list(init) + [0] * (depth - len(init))
        self.rd_data = 0
        self.xrd_data = 0

    def clock(self, *, rd_en=0, rd_addr=0, wr_en=0, wr_addr=0, wr_data=0, xrd_en=0,
              xrd_addr=0):
        """Advance one rising edge; return the new ``rd_data``."""
        if rd_en:
            self.rd_data = self.words[rd_addr]  # read-first: sample before the write
        if xrd_en:
            self.xrd_data = self.words[xrd_addr]
        if wr_en:
            word = self.words[wr_addr]
            for lane in range(self.data_width // 8):
                if wr_en >> lane & 1:
                    mask = 0xFF << (8 * lane)
                    word = (word & ~mask) | (wr_data & mask)
            self.words[wr_addr] = word
        return self.rd_data
