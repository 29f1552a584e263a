"""Shared ports of the NEM engine: arbitrated L1/L2 SRAM ports and the AXI client muxes.

Arbitrated SRAM (:class:`ArbitratedSRAM`)
-----------------------------------------
An :class:`npu.bus.memory.SRAM` (one read and one write port) shared by ``n`` clients, each
with a read and a write *client port*.

Reads, per cycle:

* the client raises ``req`` with ``addr``;
* ``gnt`` goes to one client, from a register: the grant of a cycle is worked out in the
  cycle before, from that cycle's requests, for the first requester at or after the
  rotating priority ``prio`` (an input, the same for every memory of the engine, so the
  highest-priority requester of a cycle is granted on every port it asks for in the next
  cycle and always makes progress). A cycle without a request keeps the grant where it
  is (it stays with the client that asked last), so a client alone on the port is
  granted whenever it asks once it has asked (its first request after reset waits a
  cycle), and a client that keeps asking keeps its turns; a client that starts asking
  while another holds the grant waits a cycle;
* the client raises ``go`` when it really takes the word this cycle (granted on all the
  ports it needs; never without ``gnt``).

The grant alone picks the address that goes to the SRAM. Since it is a register, no
client's request reaches another client's ``gnt`` in the same cycle: the round trip
"one unit's request -> the arbitration beside the SRAM -> another unit's grant -> what
that unit's ``go`` enables", which ran across the die twice in one cycle, is cut at the
grant register (:class:`ReadGrantModel` is the rule in Python). A port with one client
(``clients = 1``, or a single ``xrd`` client) needs no arbitration: its ``gnt`` is its
``req``. The SRAM reads
the granted address in every cycle (its read enable is tied high), so no client's ``go``
(which comes back from across the die, after the client has seen its grants on every
port it needs) reaches the block RAM; a client takes the word only after its ``go``.

Writes are queued: each write client port has a queue of two writes beside the SRAM.
``gnt`` is "the queue has room", a flip-flop that depends on no other client; the client
raises ``go`` (with ``req``, ``addr``, ``data``, ``en``; never without ``gnt``) to put a
write into the queue. The queues' heads are arbitrated with the same rule and the granted
head is written, in order per port, one cycle after its ``go`` at the earliest. So a
write client's enables depend on its own queue's room, never on another client's request
(the round trip client -> grants -> another client's enables is gone), and the SRAM's
write enables come from the queues' registers and the grants beside it. An entry that
holds no write loads the client's payload in every cycle, so ``go`` only moves the queue's
pointers and counts and reaches no entry's enable. One write per
cycle per port keeps flowing: a queue written and emptied in the same cycle keeps its room.
``wr_idle[k]`` is high when port ``k``'s queue is empty; a unit's completion waits for it
(a unit reports done at least a cycle after its last ``go``, so ``wr_idle`` then already
counts that write). A read of a word whose write is still queued returns the old word:
units that share data are ordered by the SEQ's tokens, which wait for the completion.

Read data of a ``go`` read appear on the client's ``data`` in the next cycle and are held
there until the client's next read, whatever other clients do with the port (a client
that stalls after its read still sees its word).

Second read port (``extra_read_clients = x > 0``): the SRAM gets a second physical read
port (:class:`npu.bus.memory.SRAM` with ``read_ports=2``) shared by ``x`` more read client
ports ``xrd[0..x-1]``, arbitrated among themselves with the same rule, the priority
start being ``prio mod x``, the grant registered the same way (with ``x = 1`` the one
client owns the port: ``gnt = req``).
Both read ports may read in the same cycle, also the same word, and both read before
the cycle's write (read-first). It serves a unit that streams two operands at once (the
NMU's weight port ``l1_wrd``, next to its ``l1_rd`` on ``rd[k]``); a unit whose accesses
on ``xrd`` never need a grant on another port in the same cycle cannot be starved by the
priority rule. With ``x = 0`` (default) there is no ``xrd`` and nothing changes.

AXI client muxes
----------------
:class:`AxiReadMux` shares one :class:`npu.bus.axi.AxiBurstReader` between clients (the SEQ's
fetcher and the sDMAs): round-robin over the command streams, and the data of a command go
to the client whose command it is (the reader takes a new command only when every word of
the previous one is delivered). :class:`AxiWriteMux` does the same for the writer: the
command's owner sends its data and receives its ``done``.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from npu.bus.axi import command_layout
from npu.bus.memory import SRAM

__all__ = [
    "ArbitratedSRAM",
    "AxiReadMux",
    "AxiWriteMux",
    "ReadGrantModel",
    "WriteQueuesModel",
    "fetch_into",
    "priority_grant",
    "read_client_signature",
    "write_client_signature",
]


def read_client_signature(depth, width):
    """A client's read port on an arbitrated SRAM (client's view)."""
    return wiring.Signature({"req": Out(1), "addr": Out(range(depth)), "go": Out(1),
                             "gnt": In(1), "data": In(width)})


def write_client_signature(depth, width):
    """A client's write port on an arbitrated SRAM (client's view; ``en``: byte enables)."""
    return wiring.Signature({"req": Out(1), "addr": Out(range(depth)), "data": Out(width),
                             "en": Out(width // 8), "go": Out(1), "gnt": In(1)})


def priority_grant(m, requests, start):
    """One-hot grants: the first request at or after index ``start``, cyclically.

    ``requests`` is a list of 1-bit values, ``start`` a signal in ``range(len(requests))``.
    Returns a list of 1-bit signals (combinational).
    """
    n = len(requests)
    grants = [Signal(name=f"gnt{k}") for k in range(n)]
    if n == 1:
        m.d.comb += grants[0].eq(requests[0])
        return grants
    with m.Switch(start):
        for p in range(n):
            with m.Case(p):
                blocked = Const(0)
                for k in [(p + j) % n for j in range(n)]:
                    m.d.comb += grants[k].eq(requests[k] & ~blocked)
                    blocked = blocked | requests[k]
    return grants


class ArbitratedSRAM(wiring.Component):
    """An SRAM with ``clients`` read and write client ports and one priority grant.

    Parameters
    ----------
    data_width, depth : int
        As for :class:`npu.bus.memory.SRAM`.
    clients : int
        Number of client ports of each kind (clients that never access a port leave
        ``req`` low).
    extra_read_clients : int
        Read client ports on a second physical read port (``xrd``); 0 (default): none,
        one read port.
    xrd_first : int or None
        An ``xrd`` client that goes first whenever it asks (granted from the cycle after
        its first request on while it keeps asking; the others rotate in the cycles it
        does not): for a client on the critical path whose requests are bounded (the
        NMU's weight prefetch), next to elastic ones (DMA copies).

    Attributes
    ----------
    prio : Signal, in
        Rotating priority (the client index that goes first this cycle; on ``xrd``,
        ``prio mod extra_read_clients``).
    rd, wr : arrays of client ports (flipped :func:`read_client_signature` /
        :func:`write_client_signature`; ``wr`` ports are queued, see the module)
    wr_idle : Signal(clients), out
        Bit ``k``: write port ``k``'s queue is empty (from a register).
    xrd : array of read client ports on the second read port (``extra_read_clients > 0``
        only)
    """

    def __init__(self, *, data_width, depth, clients, extra_read_clients=0, xrd_first=None):
        if not isinstance(clients, int) or clients < 1:
            raise ValueError(f"clients must be a positive integer, not {clients!r}")
        if not isinstance(extra_read_clients, int) or extra_read_clients < 0:
            raise ValueError(f"extra_read_clients must be a non-negative integer, not "
                             f"{extra_read_clients!r}")
        self.data_width, self.depth, self.clients = data_width, depth, clients
        self.extra_read_clients = extra_read_clients
        if xrd_first is not None and xrd_first not in range(extra_read_clients):
            raise ValueError(f"xrd_first must be an xrd client index (0..."
                             f"{extra_read_clients - 1}), not {xrd_first!r}")
        self.xrd_first = xrd_first
        self.sram = SRAM(data_width=data_width, depth=depth,
                         read_ports=2 if extra_read_clients else 1)
        extra = {}
        if extra_read_clients:
            extra["xrd"] = In(read_client_signature(depth, data_width)).array(
                extra_read_clients)
        super().__init__({
            "prio": In(range(max(clients, 2))),
            "rd": In(read_client_signature(depth, data_width)).array(clients),
            "wr": In(write_client_signature(depth, data_width)).array(clients),
            "wr_idle": Out(clients),
            **extra,
        })

    def _serve_reads(self, m, ports, grants, en, addr, rd_data, prefix):
        """Grants, the SRAM read of every cycle, and each client's held read data.

        ``grants``: this cycle's arbitration of the requests; with more than one client
        the ports' ``gnt`` are registers that take it in a cycle with a request (and keep
        their value in one without). The SRAM reads the granted address in every cycle
        (its read enable is tied high): only a ``go`` read's word is taken into the
        client's ``data`` (``took``), so a read nobody takes is harmless, and no client's
        ``go`` (which comes back from across the die after the grants) reaches the block
        RAM's clock enable.
        """
        m.d.comb += en.eq(1)
        if len(ports) > 1:
            gnt = [Signal(name=f"{prefix}gnt{k}_q") for k in range(len(ports))]
            with m.If(Cat(*(p.req for p in ports)).any()):
                m.d.sync += [g.eq(c) for g, c in zip(gnt, grants, strict=True)]
        else:
            gnt = grants
        for k, port in enumerate(ports):
            took = Signal(name=f"{prefix}took{k}")
            held = Signal(self.data_width, name=f"{prefix}held{k}")
            m.d.comb += port.gnt.eq(gnt[k])
            with m.If(gnt[k]):
                m.d.comb += addr.eq(port.addr)
            m.d.sync += took.eq(port.go)
            m.d.comb += port.data.eq(held)
            with m.If(took):
                m.d.comb += port.data.eq(rd_data)
            m.d.sync += held.eq(port.data)

    def elaborate(self, platform):
        m = Module()
        m.submodules.sram = sram = self.sram
        rgnt = priority_grant(m, [p.req for p in self.rd], self.prio)
        self._serve_reads(m, self.rd, rgnt, sram.rd_en, sram.rd_addr, sram.rd_data, "")
        x = self.extra_read_clients
        if x:
            xstart = Signal(range(max(x, 2)))
            if x > 1:
                with m.Switch(self.prio):
                    for p in range(max(self.clients, 2)):
                        with m.Case(p):
                            m.d.comb += xstart.eq(p % x)
            reqs = [p.req for p in self.xrd]
            if self.xrd_first is not None:
                first = reqs[self.xrd_first]
                reqs = [r if k == self.xrd_first else r & ~first for k, r in enumerate(reqs)]
            xgnt = priority_grant(m, reqs, xstart)
            self._serve_reads(m, self.xrd, xgnt, sram.xrd_en, sram.xrd_addr, sram.xrd_data,
                              "x")
        heads = [self._write_queue(m, k, port) for k, port in enumerate(self.wr)]
        wgnt = priority_grant(m, [h["valid"] for h in heads], self.prio)
        for k, head in enumerate(heads):
            m.d.comb += head["pop"].eq(wgnt[k])
            with m.If(wgnt[k]):
                m.d.comb += [sram.wr_addr.eq(head["addr"]), sram.wr_data.eq(head["data"]),
                             sram.wr_en.eq(head["en"])]
        return m

    def _write_queue(self, m, k, port):
        """Write client port ``k``'s two-entry queue (see the module).

        Returns its head: ``valid``, ``addr``, ``data``, ``en`` (all from registers) and
        ``pop`` (to drive: the head is written this cycle).
        """
        W = self.data_width
        pre = f"wq{k}_"
        addr = [Signal(range(self.depth), name=f"{pre}addr{e}") for e in range(2)]
        wdata = [Signal(W, name=f"{pre}data{e}") for e in range(2)]
        en = [Signal(W // 8, name=f"{pre}en{e}") for e in range(2)]
        wp, rp = Signal(name=f"{pre}wp"), Signal(name=f"{pre}rp")
        count = Signal(range(3), name=f"{pre}count")
        room = Signal(init=1, name=f"{pre}room")
        valid = Signal(name=f"{pre}valid")
        pop = Signal(name=f"{pre}pop")
        # an entry that holds no write loads the port's payload in every cycle, so the
        # client's ``go`` reaches only the pointers and counts, not the entries' enables
        full = [Signal(name=f"{pre}full{e}") for e in range(2)]
        push = port.go
        m.d.comb += [port.gnt.eq(room), self.wr_idle[k].eq(~valid)]
        for e in range(2):
            with m.If(~full[e]):
                m.d.sync += [addr[e].eq(port.addr), wdata[e].eq(port.data), en[e].eq(port.en)]
            m.d.sync += full[e].eq((full[e] & ~(pop & (rp == e))) | (push & (wp == e)))
        nxt = Signal(range(4), name=f"{pre}next")
        m.d.comb += nxt.eq(count + push - pop)
        m.d.sync += [wp.eq(wp ^ push), rp.eq(rp ^ pop), count.eq(nxt), room.eq(nxt != 2),
                     valid.eq(nxt != 0)]
        return {"valid": valid, "addr": Mux(rp, addr[1], addr[0]),
                "data": Mux(rp, wdata[1], wdata[0]), "en": Mux(rp, en[1], en[0]), "pop": pop}


class ReadGrantModel:
    """The read grants of one :class:`ArbitratedSRAM` read port, in Python.

    ``clients`` ports; ``first``: the client that goes first whenever it asks (the port's
    ``xrd_first``), or None. ``gnt(requests)`` is the client granted this cycle (or None);
    ``clock(requests, start)`` advances a rising edge with this cycle's requests and
    priority start.
    """

    def __init__(self, clients, first=None):
        self.clients, self.first = clients, first
        self.granted = None

    def gnt(self, requests):
        """The client granted this cycle: from the register, or (one client) its request."""
        if self.clients == 1:
            return 0 if requests[0] else None
        return self.granted

    def clock(self, requests, start):
        """A rising edge: a cycle with a request moves the grant to the first requester at
        or after ``start`` (``first`` ahead of all when it asks); one without keeps it."""
        if not any(requests):
            return
        if self.first is not None and requests[self.first]:
            self.granted = self.first
            return
        n = self.clients
        self.granted = next((start + j) % n for j in range(n) if requests[(start + j) % n])


class WriteQueuesModel:
    """Cycle-level Python model of :class:`ArbitratedSRAM`'s write queues.

    Parameters
    ----------
    clients : int
        Write client ports.

    Attributes
    ----------
    queues : list of list
        Per port, the queued writes ``(addr, data, en)``, oldest first.
    """

    DEPTH = 2

    def __init__(self, clients):
        self.queues = [[] for _ in range(clients)]

    def gnt(self, k):
        """Port ``k``'s ``gnt`` this cycle: its queue has room."""
        return len(self.queues[k]) < self.DEPTH

    def idle(self, k):
        """Bit ``k`` of ``wr_idle`` this cycle: nothing queued on port ``k``."""
        return not self.queues[k]

    def clock(self, prio, pushes):
        """Advance one rising edge: the first non-empty queue at or after ``prio``
        (cyclically) writes its head, then ``pushes`` (``{port: (addr, data, en)}``, the
        ports whose ``go`` is high, each with room) join their queues.

        Returns the write of this edge as ``SRAMModel.clock`` keywords (``wr_addr``,
        ``wr_data``, ``wr_en``), or an empty dict when no queue holds a write.
        """
        n = len(self.queues)
        # a go needs the port's gnt of this cycle, from the queue as the cycle starts
        for k in pushes:
            assert self.gnt(k), f"port {k}: go without room"
        head = {}
        for j in range(n):
            k = (prio + j) % n
            if self.queues[k]:
                head = dict(zip(("wr_addr", "wr_data", "wr_en"), self.queues[k].pop(0),
                                strict=True))
                break
        for k, write in pushes.items():
            self.queues[k].append(tuple(write))
        return head


def _owner(m, n):
    """The client owning a shared engine, and where the next round-robin grant starts."""
    owner = Signal(range(max(n, 2)))
    start = Signal(range(max(n, 2)))
    if n == 1:
        return owner, start  # start stays 0
    with m.If(owner == n - 1):
        m.d.comb += start.eq(0)
    with m.Else():
        m.d.comb += start.eq(owner + 1)
    return owner, start


def _read_data_layout(data_width):
    return data.StructLayout({"data": data_width, "last": 1})


class AxiReadMux(wiring.Component):
    """Shares one burst reader between ``clients`` command/data stream pairs.

    Attributes
    ----------
    cmd, data : arrays of the clients' streams (client ``k``: ``cmd[k]`` in, ``data[k]`` out)
    rd_cmd, rd_data : toward :class:`npu.bus.axi.AxiBurstReader` (``cmd`` out, ``data`` in)
    """

    def __init__(self, *, addr_width, data_width, clients):
        self.clients = clients
        cmd = stream.Signature(command_layout(addr_width))
        dat = stream.Signature(_read_data_layout(data_width))
        super().__init__({
            "cmd": In(cmd).array(clients),
            "data": Out(dat).array(clients),
            "rd_cmd": Out(cmd),
            "rd_data": In(dat),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.clients
        owner, start = _owner(m, n)
        grants = priority_grant(m, [c.valid for c in self.cmd], start)
        for k, (c, g) in enumerate(zip(self.cmd, grants, strict=True)):
            with m.If(g):
                m.d.comb += [self.rd_cmd.valid.eq(1), self.rd_cmd.payload.eq(c.payload),
                             c.ready.eq(self.rd_cmd.ready)]
                with m.If(self.rd_cmd.ready):
                    m.d.sync += owner.eq(k)
        for k, d in enumerate(self.data):
            m.d.comb += d.payload.eq(self.rd_data.payload)
            with m.If(owner == k):
                m.d.comb += [d.valid.eq(self.rd_data.valid), self.rd_data.ready.eq(d.ready)]
        return m


def fetch_into(m, fifo, depth, cmd, data, *, enable, word, end, lw, max_beats=16):
    """A read client of :class:`AxiReadMux` that never holds the shared reader.

    Issues commands for the bus words ``[word, end)`` (word indices; the caller advances
    ``word`` by ``beats`` when ``fire``), at most ``max_beats`` words each and only while
    ``enable`` and ``fifo`` (of ``depth`` words) has room for every word in flight; the
    data words go into ``fifo``. Returns ``(fire, beats, inflight)``: the command is taken
    this cycle, its word count, and the words requested but not yet arrived.

    The command is worked out a cycle ahead: its word count and "there is room for it" are
    registers, set from the cycle before (so no subtraction or comparison lies between
    ``word``, ``end`` or the FIFO's level and ``cmd.valid``), and cleared by a fire (the
    next command waits a cycle for the new ``word``: at most one command every two
    cycles). That is exact as long as the caller changes ``word`` and ``end`` only while
    ``enable`` is low, by a fire, by ``end`` growing, or (``word``) when no word is left
    to fetch; the room it saw can only have grown since (the FIFO is read, words in flight
    only move into it).
    """
    if not 1 <= max_beats <= depth:
        raise ValueError(f"fetch_into: max_beats ({max_beats}) must be from 1 to the FIFO "
                         f"depth ({depth}): a longer command would never find room")
    inflight = Signal(range(depth + 1))
    # the words left, end - word, by one subtraction; whether it is above 0 and above
    # max_beats from its bits (a sign, an OR of the high bits, a comparison of the low
    # ones), and whether the FIFO has room from the low bits too: no comparison or
    # selection of the whole difference lies between the subtraction and the registers
    width = max(len(Value.cast(end)), len(Value.cast(word))) + 1
    diff = Signal(signed(width))
    m.d.comb += diff.eq(end - word)
    nb = max_beats.bit_length()
    low, high, neg = diff[:nb], diff[nb:width - 1], diff[width - 1]
    more = Signal()   # end - word > max_beats
    some = Signal()   # end - word > 0
    m.d.comb += [more.eq(~neg & (high.any() | (low > max_beats))),
                 some.eq(~neg & diff[:width - 1].any())]
    want = Signal(range(max_beats + 1))
    m.d.comb += want.eq(Mux(more, max_beats, Mux(some, low, 0)))
    room = depth - fifo.level - inflight
    fits = Mux(more, room >= max_beats, room >= low)
    beats = Signal(range(max_beats + 1))
    ready = Signal()
    m.d.comb += [cmd.valid.eq(enable & ready),
                 cmd.payload.addr.eq(word << lw), cmd.payload.beats.eq(beats)]
    fire = cmd.valid & cmd.ready
    m.d.sync += [beats.eq(want), ready.eq(enable & some & fits & ~fire)]
    arrived = data.valid & data.ready
    m.d.sync += inflight.eq(inflight + Mux(fire, beats, 0) - arrived)
    m.d.comb += [data.ready.eq(fifo.w_rdy), fifo.w_en.eq(data.valid),
                 fifo.w_data.eq(data.payload.data)]
    return fire, beats, inflight


class AxiWriteMux(wiring.Component):
    """Shares one burst writer between ``clients`` (command, data, done) stream triples.

    Attributes
    ----------
    cmd, data, done : arrays of the clients' streams
    wr_cmd, wr_data, wr_done : toward :class:`npu.bus.axi.AxiBurstWriter`
    """

    def __init__(self, *, addr_width, data_width, clients):
        self.clients = clients
        cmd = stream.Signature(command_layout(addr_width))
        dat = stream.Signature(data.StructLayout({"data": data_width,
                                                  "strb": data_width // 8}))
        done = stream.Signature(data.StructLayout({"error": 1}))
        super().__init__({
            "cmd": In(cmd).array(clients),
            "data": In(dat).array(clients),
            "done": Out(done).array(clients),
            "wr_cmd": Out(cmd),
            "wr_data": Out(dat),
            "wr_done": In(done),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.clients
        owner, start = _owner(m, n)
        grants = priority_grant(m, [c.valid for c in self.cmd], start)
        for k, (c, g) in enumerate(zip(self.cmd, grants, strict=True)):
            with m.If(g):
                m.d.comb += [self.wr_cmd.valid.eq(1), self.wr_cmd.payload.eq(c.payload),
                             c.ready.eq(self.wr_cmd.ready)]
                with m.If(self.wr_cmd.ready):
                    m.d.sync += owner.eq(k)
        for k, (d, done) in enumerate(zip(self.data, self.done, strict=True)):
            m.d.comb += done.payload.eq(self.wr_done.payload)
            with m.If(owner == k):
                m.d.comb += [self.wr_data.valid.eq(d.valid), self.wr_data.payload.eq(d.payload),
                             d.ready.eq(self.wr_data.ready),
                             done.valid.eq(self.wr_done.valid),
                             self.wr_done.ready.eq(done.ready)]
        return m
