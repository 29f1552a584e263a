"""The NMU: int8 gemm / matmul / conv2d on L1 operands (AGU, MAC array, output stage).

Blocks (``docs/nmu.md``): :class:`npu.nmu.agu_step.SteppedAgu` walks the loop nests (the
runs of :class:`npu.nmu.agu.NmuAgu`, addresses stepped by strides instead of multiplied) and
:class:`npu.nmu.agu.RunReader` reads their runs from L1 as realigned vectors;
:class:`npu.nmu.array.NmuArray` (``lanes x cols`` MACs, weight-stationary) accumulates;
:class:`npu.nmu.output.NmuOutput` requantises (per-channel multiplier and shift, zero
point, clamp) or passes i32 through and stores the results into L1.

Interface
---------
* ``start`` (stream of :func:`npu.nmu.agu.task_fields_layout`): the task in the NMU's
  convolution view, decoded from the compute registers (``nem.taskformat.REGISTER_MAPS``,
  model: :func:`npu.nmu.model.decode_task`; the register decode is the engine's side).
* ``rq`` (stream of 32-bit words): the task's requantisation entry from the data section,
  word by word as ``nem.taskformat.encode_requant`` lays it out (input zero point, output
  zero point, clamp low, clamp high, channels n, reserved, then n (multiplier, shift)
  pairs). Read right after ``start``.
* ``done`` (stream of ``{error, cause}``, :class:`npu.nmu.model.Cause`): one per task.
* ``l1_rd`` / ``l1_wr``: client ports of the engine's arbitrated L1
  (:func:`npu.bus.ports.read_client_signature` / ``write_client_signature``).
* ``l1_wrd`` (only with ``weight_port=True``): a second L1 read client port, for the
  weight rows and the per-tile bias words; ``l1_rd`` then reads the activations (and a
  per-pixel gemm bias) only. Serve it from a second physical read port
  (:class:`npu.bus.ports.ArbitratedSRAM` with ``extra_read_clients``), else the two
  streams share one word per cycle and nothing is gained.
* counters, cleared while idle: ``cnt_busy`` (start to done), ``cnt_macs`` (valid lanes x
  valid columns of every vector the array took), ``cnt_load`` (the array idle for weights:
  a weight or bias vector goes by on the shared port, or, with the weight port, no
  activation vector while the activations wait for their tile's weights), ``cnt_starve``
  (no activation-side vector otherwise: entry head, reader latency, unaligned runs, the
  drain), ``cnt_stall_out`` (an activation vector waits: the array held by the output
  stage), ``cnt_stall_read`` (an L1 read not granted, on either read port),
  ``cnt_stall_write`` (L1 write not granted).

Sequence of a task: read the requantisation entry's head; check sizes; then per tile of
``cols`` output channels: the AGU issues the weight rows, the bias words and the
activation taps, one run per cycle, each phase right behind the previous one (the
reader's vectors carry their kind; a bias word waits until the previous tile's pixels
have left the array). The entry's channel pairs go into the table meanwhile; a tile's
activations start once its table row is written. ``done`` once every result is written
and the whole entry read.

With the weight port the weights are double-buffered: a second AGU and run reader load
tile ``t+1``'s weight rows and bias into the other bank of the weight buffer and bias
registers over ``l1_wrd`` while tile ``t``'s activations stream over ``l1_rd``; the
activations of a tile start once its bank is loaded (the first tile's before any), and a
bank is reloaded once every activation run of its previous tile has been taken by the
array (its bias once that tile's last vector has left stage 2).
"""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from nem.taskformat import REQUANT_CHANNEL, REQUANT_ENTRY
from npu.bus.ports import read_client_signature, write_client_signature
from npu.bus.stream import SkidBuffer, start_after_decode
from npu.cstl.requant import param_layout
from npu.nmu.agu import NmuAgu, RunReader, task_fields_layout, times_out_bytes
from npu.nmu.agu_step import SteppedAgu
from npu.nmu.array import NmuArray
from npu.nmu.model import Cause, NmuGeometry
from npu.nmu.output import NmuOutput
from npu.nmu.regs import NmuRegisters, write_layout

__all__ = ["COUNTERS", "DECODE_REGISTERS", "START_WAIT", "Nmu", "NmuUnit", "done_layout"]

#: The requantisation entry as the entry fetcher streams it, one 32-bit word per cycle:
#: the head's fields by word, then 2 ** CHANNEL_SHIFT words per channel.
HEAD = REQUANT_ENTRY.word_fields(4)
HEAD_WORDS = REQUANT_ENTRY.size // 4
CHANNEL = REQUANT_CHANNEL.word_fields(4)
CHANNEL_SHIFT = (REQUANT_CHANNEL.size // 4 - 1).bit_length()
assert 1 << CHANNEL_SHIFT == REQUANT_CHANNEL.size // 4

#: Registers between :class:`NmuUnit`'s decode of its shadow registers and the core's task
#: (the decode's logic is shallow, but the shadow registers and the core lie far apart).
DECODE_REGISTERS = 2
#: ``NmuUnit.start`` is taken once this many cycles have passed without a shadow-register
#: write or clear; it is then ready whenever the core is idle. The sequencer counts the
#: same cycles itself and issues no earlier, so its issue does not wait on ``start.ready``.
START_WAIT = NmuRegisters.LATENCY + DECODE_REGISTERS

#: The counters (``cnt_<name>``) and what they count, cleared while the unit is idle (a
#: task's counts hold until the cycle after its ``done``).
COUNTERS = {
    "busy": "cycles busy (start to done)",
    "macs": "MACs issued (valid lanes x valid columns of every vector the array took)",
    "load": "cycles the array is idle for weights (a weight or bias vector on the shared "
            "port, or activations waiting for their tile's weights)",
    "stall_read": "cycles an L1 read was requested and not granted (either read port)",
    "stall_write": "cycles an L1 write was requested and not granted",
    "stall_out": "cycles an activation vector waited for the output stage",
    "starve": "cycles without an activation-side vector otherwise (entry head, latency, "
              "unaligned runs, drain)",
}


def done_layout():
    return data.StructLayout({"error": 1, "cause": 4})


def _ports(depth, width, weight_port):
    """The L1 client ports of the NMU (``l1_wrd`` only with the weight port)."""
    ports = {"l1_rd": Out(read_client_signature(depth, width))}
    if weight_port:
        ports["l1_wrd"] = Out(read_client_signature(depth, width))
    ports["l1_wr"] = Out(write_client_signature(depth, width))
    return ports


class Nmu(wiring.Component):
    """The NMU of one engine.

    Parameters
    ----------
    geometry : npu.nmu.model.NmuGeometry
        ``lanes`` must equal the L1 word in bytes.
    depth : int
        L1 words.
    weight_port : bool
        Add the weight read port ``l1_wrd`` and double-buffer the weights (two banks of
        ``geometry.wrows`` rows): the next tile's weights load while the activations
        stream. Default False (one read port, one bank).
    """

    def __init__(self, *, geometry=None, depth=1024, lanes=None, cols=None, wrows=None,
                 channels=None, weight_port=False):
        if geometry is None:
            geometry = NmuGeometry(lanes=lanes or 8, cols=cols or 8, wrows=wrows or 256,
                                   channels=channels or 256)
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be a positive integer, not {depth!r}")
        if geometry.channels // geometry.cols > 256:
            raise ValueError(f"channels / cols must be at most 256 (tile index), not "
                             f"{geometry.channels // geometry.cols}")
        self.geometry, self.depth, self.weight_port = geometry, depth, bool(weight_port)
        width = 8 * geometry.lanes
        super().__init__({
            "start": In(stream.Signature(task_fields_layout())),
            "rq": In(stream.Signature(32)),
            "done": Out(stream.Signature(done_layout())),
            **_ports(depth, width, self.weight_port),
            "busy": Out(1),
            **{f"cnt_{name}": Out(32) for name in COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        g = self.geometry
        L, C = g.lanes, g.cols
        lw = L.bit_length() - 1
        rows = g.channels // C
        s = SimpleNamespace(L=L, C=C, rows=rows)

        m.submodules.agu = s.agu = agu = SteppedAgu(lanes=L, cols=C)
        m.submodules.reader = s.reader = reader = RunReader(lanes=L, depth=self.depth, skid=True)
        # the array's tag: the pixel's output address, the tile's valid columns and index
        otag = data.StructLayout({"yaddr": 32, "ncols": 8, "tile": 8})
        m.submodules.array = s.array = array = NmuArray(
            lanes=L, cols=C, wrows=g.wrows, tag_width=otag.size,
            banks=2 if self.weight_port else 1)
        m.submodules.output = s.out = out = NmuOutput(cols=C, rows=rows, lanes=L,
                                                      depth=self.depth)
        wiring.connect(m, agu.cmd, reader.cmd)
        wiring.connect(m, reader.rd, wiring.flipped(self.l1_rd))
        wiring.connect(m, out.wr, wiring.flipped(self.l1_wr))

        s.task = task = Signal(task_fields_layout())
        zx = Signal(signed(32))
        zy, lo, hi = Signal(signed(32)), Signal(signed(32)), Signal(signed(32))
        s.nch = nch = Signal(32)
        m.d.comb += [reader.pad_byte.eq(zx[:8]), array.zx.eq(zx[:9])]
        # the output stage's per-task inputs from copies of their own, which the placer
        # can put beside the output stage (a task's first result comes many cycles after
        # the task and its entry's head are registered, so the copies' cycle of lag is
        # never seen)
        o_zy, o_lo, o_hi = (Signal(signed(17), name=f"out_{n}") for n in ("zy", "lo", "hi"))
        o_raw, o_bytes = Signal(name="out_raw"), Signal(3, name="out_bytes")
        m.d.sync += [o_zy.eq(zy[:17]), o_lo.eq(lo[:17]), o_hi.eq(hi[:17]),
                     o_raw.eq(task.raw), o_bytes.eq(task.out_bytes)]
        m.d.comb += [out.zero_point.eq(o_zy), out.lo.eq(o_lo), out.hi.eq(o_hi),
                     out.raw.eq(o_raw), out.out_bytes.eq(o_bytes)]
        s.cause = Signal(4)

        # requantisation entry words -> channel table rows
        mult = Signal(31)
        row = Signal(param_layout(C))
        row_write = Signal()
        row_at = Signal(range(rows + 1))
        m.d.comb += [out.params.valid.eq(row_write), out.params.payload.row.eq(row_at),
                     out.params.payload.data.eq(row)]
        m.d.sync += row_write.eq(0)
        s.row_write = row_write

        # activation vectors -> the array (weights and bias: by the variant below)
        s.vec = vec = reader.o.payload
        m.d.comb += [array.i.payload.data.eq(vec.data), array.i.payload.count.eq(vec.count),
                     array.i.payload.row.eq(vec.tag.row + vec.index),
                     array.i.payload.first.eq(vec.tag.first & (vec.index == 0)),
                     array.i.payload.last.eq(vec.tag.last & vec.last),
                     array.i.payload.tag.eq(Cat(vec.tag.yaddr, vec.tag.lane, vec.tag.tile))]

        # accumulators -> output stage
        res = Signal(otag)
        m.d.comb += [res.eq(array.o.payload.tag),
                     out.i.valid.eq(array.o.valid), array.o.ready.eq(out.i.ready),
                     out.i.payload.acc.eq(array.o.payload.acc), out.i.payload.row.eq(res.tile),
                     out.i.payload.yaddr.eq(res.yaddr), out.i.payload.ncols.eq(res.ncols)]

        s.q = q = Signal(16)
        m.d.comb += q.eq((task.cin + (L - 1)) >> lw)
        # the size check in registers, three stages (a multiplier and a comparison each
        # are too long a path into the state machine): taps and q; whether either alone
        # is more than the weight rows (then so is their product, unless the other is 0),
        # else their product on the rows' width; the comparison. All follow the task
        # register, which is loaded with start, and ``settled`` says when they do
        g = self.geometry
        wb = g.wrows.bit_length()
        taps, q_held = Signal(32), Signal(16)
        cout_big, big, prod = Signal(), Signal(), Signal(2 * wb)
        s.too_big = Signal()
        s.settled = Signal(3)
        m.d.sync += [taps.eq(task.kh * task.kw), q_held.eq(q),
                     cout_big.eq(task.cout > g.channels),
                     big.eq(((taps > g.wrows) & (q_held != 0))
                            | ((q_held > g.wrows) & (taps != 0)) | cout_big),
                     prod.eq(taps[:wb] * q_held[:wb]),
                     s.too_big.eq(big | (prod > g.wrows)),
                     s.settled.eq(Cat(1, s.settled[:-1]))]
        s.counting = Signal()
        s.counters = counters = {name: getattr(self, f"cnt_{name}") for name in COUNTERS}

        self._entry_reader(m, s, {"x_zero_point": zx, "y_zero_point": zy, "lo": lo, "hi": hi,
                                  "channels": nch}, mult, row, row_write, row_at)

        def on_start():
            """Statements of every idle cycle (so of the cycle that takes ``start``)."""
            m.d.sync += [task.eq(self.start.payload), s.cause.eq(0), s.settled.eq(0),
                         *s.entry_start]
            m.d.sync += [c.eq(0) for c in counters.values()]

        s.on_start = on_start
        s.idle_q = Signal(init=1, name="idle_q")   # (see ``_task_fsm``)
        if self.weight_port:
            waiting_w, read_stall = self._double_buffered(m, s)
        else:
            waiting_w, read_stall = self._single_port(m, s)

        self._counters(m, s, waiting_w, read_stall)
        return m

    def _entry_reader(self, m, s, head, mult, row, row_write, row_at):
        """The requantisation entry from ``rq``, one word a cycle: the head's fields into
        ``head`` (field name -> register), the channel records into channel table rows
        (``row`` written at ``row_at`` when ``row_write``). Runs from ``start`` until the
        last word is in (``s.reading``); ``s.entry_start`` are statements of every idle cycle
        (so of the one that takes ``start``; ``reading`` is set by the start itself).

        Where a word goes is kept in narrow counters of their own (the head word, the
        record's word, the channel's lane, the table row) and the ends of the head, of a
        row and of the entry as one-bit registers, set in the cycle before the word they
        name arrives: no comparison of a 32-bit word index lies between ``rq.valid`` and
        the row's write. ``left`` counts the channel records still to come after this one
        (loaded from the head's channel count at the head's last word).
        """
        C, rows = s.C, s.rows
        s.reading = reading = Signal()
        s.rows_done = rows_done = Signal(range(rows + 2))
        s.head_done = head_done = Signal()
        nch = head["channels"]
        hidx = Signal(range(HEAD_WORDS))           # the head word (while ~head_done)
        part = Signal(CHANNEL_SHIFT)               # the word of a channel record
        lane = Signal(range(C))                    # the channel's column in its row
        row_idx = Signal(range(rows + 1))          # its row, rows once past the table
        left = Signal(32)                          # channel records after this one
        ch_last = Signal()                         # this record is the entry's last
        s.entry_start = [hidx.eq(0), head_done.eq(0), part.eq(0), lane.eq(0),
                         row_idx.eq(0), rows_done.eq(0)]
        m.d.comb += self.rq.ready.eq(reading)
        with m.If(row_write):
            m.d.sync += rows_done.eq(rows_done + 1)
        with m.If(self.rq.valid & reading):
            w = self.rq.payload
            with m.If(~head_done):
                m.d.sync += hidx.eq(hidx + 1)
                with m.Switch(hidx):
                    for name, reg in head.items():
                        with m.Case(HEAD[name]):
                            m.d.sync += reg.eq(w)
                    with m.Case(HEAD_WORDS - 1):  # the head's last word: no channels, done
                        m.d.sync += [head_done.eq(1), left.eq(nch - 1), ch_last.eq(nch == 1)]
                        with m.If(nch == 0):
                            m.d.sync += reading.eq(0)
            with m.Else():
                # channel records follow the head, CHANNEL_WORDS words each
                m.d.sync += part.eq(part + 1)
                with m.If(part == CHANNEL["multiplier"]):
                    m.d.sync += mult.eq(w)
                with m.If(part == (1 << CHANNEL_SHIFT) - 1):  # the record's last word
                    with m.Switch(lane):
                        for c in range(C):
                            with m.Case(c):
                                m.d.sync += [row[c].multiplier.eq(mult), row[c].shift.eq(w)]
                    m.d.sync += [lane.eq(lane + 1), left.eq(left - 1), ch_last.eq(left == 1)]
                    with m.If((lane == C - 1) | ch_last):
                        in_table = row_idx != rows
                        m.d.sync += [row_write.eq(in_table), row_at.eq(row_idx), lane.eq(0)]
                        with m.If(in_table):
                            m.d.sync += row_idx.eq(row_idx + 1)
                    with m.If(ch_last):
                        m.d.sync += reading.eq(0)

    def _counters(self, m, s, waiting_w, read_stall):
        """The ``cnt_*`` counters (:data:`COUNTERS`), counting while ``s.counting``."""
        reader, array, out, vec = s.reader, s.array, s.out, s.vec
        counting, counters = s.counting, s.counters
        offered = reader.o.valid
        is_act = vec.tag.kind == NmuAgu.MODE_A
        # The MACs of the vector the array took, added two cycles later: the handshake,
        # the vector's byte count (the reader's fill level) and its columns into registers
        # of their own, their product the cycle after, so neither the handshake nor the
        # fill level reaches a multiplier. The array is busy for more cycles than that
        # after it takes a vector, so the task is still counting when the last product
        # lands.
        took = Signal()
        took_count, took_lane = Signal.like(vec.count), Signal.like(vec.tag.lane)
        macs_took = Signal(len(vec.count) + len(vec.tag.lane))
        m.d.sync += [took.eq(array.i.valid & array.i.ready), took_count.eq(vec.count),
                     took_lane.eq(vec.tag.lane),
                     macs_took.eq(Mux(took, took_count * took_lane, 0))]
        # the stall counters count a cycle late, from registers beside the readers and the
        # output stage (their stall follows the L1 grants: not a path across the die to
        # the counters; the board's worst path on seed 3 at 8b1ffd2 ran from a DMA's write
        # request through the L1 write grant into ``cnt_stall_write``). A task's last
        # stall is counted while it still counts: after its last read the array and the
        # output stage still work, and DRAIN ends in a cycle with no write stall
        stalled_read, stalled_write = Signal(name="stall_read_q"), Signal(name="stall_write_q")
        m.d.sync += [stalled_read.eq(read_stall), stalled_write.eq(out.stall)]
        with m.If(counting):
            m.d.sync += [counters["busy"].eq(counters["busy"] + 1),
                         counters["macs"].eq(counters["macs"] + macs_took)]
            with m.If((offered & ~is_act) | (~offered & waiting_w)):
                m.d.sync += counters["load"].eq(counters["load"] + 1)
            with m.If(stalled_read):
                m.d.sync += counters["stall_read"].eq(counters["stall_read"] + 1)
            with m.If(stalled_write):
                m.d.sync += counters["stall_write"].eq(counters["stall_write"] + 1)
            with m.If(offered & is_act & ~array.i.ready):
                m.d.sync += counters["stall_out"].eq(counters["stall_out"] + 1)
            with m.If(~offered & ~waiting_w):
                m.d.sync += counters["starve"].eq(counters["starve"] + 1)
        m.d.comb += self.busy.eq(counting)

    def _task_fsm(self, m, s, *, start, ok, first, tiles, quiet):
        """The task FSM of both variants.

        IDLE takes ``start`` (its statements ``start``: the variant's registers), PARAMS
        waits for the entry's head, CHECK refuses the task or goes to state ``first`` (with
        the comb statements ``ok``), then the variant's tile states (``tiles()`` adds them),
        DRAIN until ``quiet`` and the array and output stage are empty, DONE.
        """
        # the task's registers load (and the counters clear) in every idle cycle, not on
        # ``start.valid`` (from the SEQ's issue across the die): only the state and
        # ``reading`` wait on it. Nothing looks at them while idle, and the start's payload
        # is steady then (the decode settled before a start is offered); a task's counts
        # hold in its done cycle and the one after it. "Idle" is a flip-flop of its own,
        # high exactly while the FSM is in IDLE, so that the enables of these registers
        # (spread over the unit) come from one register rather than a decode of the FSM's
        # state (the board's worst path on seed 4 at d7a581d: the state -> the enable of a
        # task register, 16 ns of it one net)
        with m.If(s.idle_q):
            s.on_start()
            m.d.sync += start
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.start.ready.eq(1)
                with m.If(self.start.valid):
                    m.d.sync += [s.reading.eq(1), s.idle_q.eq(0)]
                    m.next = "PARAMS"
            with m.State("PARAMS"):
                # the entry's head (zero points, clamp, channel count); the pairs are read
                # by the entry reader while the first tiles load
                m.d.comb += s.counting.eq(1)
                with m.If(s.head_done):
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += s.counting.eq(1)
                with m.If(s.settled[-1]):  # the size check has seen this task
                    self._check(m, s, ok, first)
            tiles()
            with m.State("DRAIN"):
                m.d.comb += s.counting.eq(1)
                with m.If(quiet & ~s.out.busy & ~s.array.busy):
                    m.next = "DONE"
            with m.State("DONE"):
                self._done(m, s)

    def _next_tile(self, m, s, n0, tile, mat, first, advance, move):
        """After a tile's last run: the next tile (state ``first``), else the next product
        of a batched matmul (``move``: its operands' addresses), else DRAIN. ``advance``:
        the variant's own statements at every tile."""
        C, task = s.C, s.task
        m.d.sync += [*advance, n0.eq(n0 + C), tile.eq(tile + 1)]
        with m.If(n0 + C < task.cout):
            m.next = first
        with m.Elif(mat + 1 < task.mats):
            m.d.sync += [mat.eq(mat + 1), n0.eq(0), tile.eq(0), *move]
            m.next = first
        with m.Else():
            m.next = "DRAIN"

    def _check(self, m, s, ok, first):
        """CHECK state body: refusals go to DONE, else the comb statements ``ok`` and
        state ``first``."""
        task = s.task
        with m.If(task.cause != 0):
            m.d.sync += s.cause.eq(task.cause)
            m.next = "DONE"
        with m.Elif(s.too_big):
            m.d.sync += s.cause.eq(Cause.SIZE)
            m.next = "DONE"
        with m.Elif(Mux(task.raw, s.nch != 0, s.nch != task.cout)):
            m.d.sync += s.cause.eq(Cause.REQUANT)
            m.next = "DONE"
        with m.Else():
            m.d.comb += ok
            m.next = first

    def _done(self, m, s):
        """DONE state body: after the whole requantisation entry has been read."""
        m.d.comb += [self.done.valid.eq(~s.reading),
                     self.done.payload.error.eq(s.cause != 0),
                     self.done.payload.cause.eq(s.cause)]
        with m.If(self.done.ready & ~s.reading):
            m.d.sync += s.idle_q.eq(1)
            m.next = "IDLE"

    def _single_port(self, m, s):
        """One read port, one weight bank: W, B, A phases of every tile through one reader.

        Returns (array waiting for weights with no vector offered, read stall)."""
        C, task, agu, reader, array = s.C, s.task, s.agu, s.reader, s.array
        vec = s.vec
        n0 = Signal(16)
        mat = Signal(16)
        tile = Signal(range(s.rows + 1))
        m.d.comb += [agu.task.eq(task), agu.n0.eq(n0), agu.tile.eq(tile)]
        bias = Signal(data.ArrayLayout(signed(32), C))
        m.d.comb += array.bias.eq(bias)

        # reader vectors by the kind of their run: the phases follow each other through the
        # reader without a drain (a tile's weights load behind the previous tile's last
        # activations: the array read those rows when it took the vectors)
        m.d.comb += [array.w_row.eq(vec.tag.row), array.w_lane.eq(vec.tag.lane),
                     array.w_count.eq(vec.count)]
        m.d.comb += [array.w_data[c].eq(vec.data[c]) for c in range(C)]
        with m.Switch(vec.tag.kind):
            with m.Case(NmuAgu.MODE_W):
                m.d.comb += [reader.o.ready.eq(1), array.w_en.eq(reader.o.valid)]
            with m.Case(NmuAgu.MODE_B):
                # the bias changes only once the previous tile's pixels have left the array
                m.d.comb += reader.o.ready.eq(~array.busy)
                with m.If(reader.o.valid & ~array.busy):
                    word = Signal(32)
                    m.d.comb += word.eq(vec.data.as_value()[:32])
                    with m.Switch(vec.tag.lane):
                        for c in range(C):
                            with m.Case(c):
                                m.d.sync += bias[c].eq(word.as_signed())
            with m.Default():
                m.d.comb += [array.i.valid.eq(reader.o.valid), reader.o.ready.eq(array.i.ready)]

        quiet = ~agu.busy & ~reader.busy
        self._task_fsm(m, s, start=[n0.eq(0), tile.eq(0), mat.eq(0)], ok=[], first="W_START",
                       tiles=partial(self._phases, m, s, n0, tile, mat, bias), quiet=quiet)
        return Const(0, 1), reader.stall

    def _phases(self, m, s, n0, tile, mat, bias):
        """Tile states of the single-port unit: W, B and A phases of every tile, each
        phase's runs queued in the reader right behind the previous phase's."""
        C, task, agu, counting = s.C, s.task, s.agu, s.counting
        for mode, name, nxt in ((NmuAgu.MODE_W, "W", "B_START"),
                                (NmuAgu.MODE_B, "B", "A_START"),
                                (NmuAgu.MODE_A, "A", None)):
            with m.State(f"{name}_START"):
                m.d.comb += [counting.eq(1), agu.mode.eq(mode), agu.start.eq(1)]
                if mode == NmuAgu.MODE_A:
                    # results of this tile need its row of the channel table
                    with m.If(~task.raw & (s.rows_done <= tile)):
                        m.d.comb += agu.start.eq(0)
                    with m.Else():
                        m.next = "A_WAIT"
                elif mode == NmuAgu.MODE_B:
                    with m.If(~task.has_bias):
                        m.d.comb += agu.start.eq(0)
                        with m.If(~task.pix_bias):  # (a per-pixel bias loads itself)
                            m.d.sync += [bias[c].eq(0) for c in range(C)]
                        m.next = "A_START"
                    with m.Else():
                        m.next = "B_WAIT"
                else:
                    m.next = f"{name}_WAIT"
            with m.State(f"{name}_WAIT"):
                # the next phase's runs queue behind this one's in the reader
                m.d.comb += counting.eq(1)
                if nxt is not None:
                    with m.If(~agu.busy):
                        m.next = nxt
                else:
                    with m.If(~agu.busy):
                        # a batched matmul's next product: the operands move on
                        self._next_tile(m, s, n0, tile, mat, "W_START", [], [
                            task.x_addr.eq(task.x_addr + task.x_mat),
                            task.w_addr.eq(task.w_addr + task.w_mat),
                            task.y_addr.eq(task.y_addr
                                           + times_out_bytes(task.y_mat, task.out_bytes)),
                        ])

    def _double_buffered(self, m, s):
        """Weight port: weight/bias nests on their own AGU, reader and port, two banks.

        Returns (array waiting for weights with no vector offered, read stall)."""
        C, task, agu, reader, array = s.C, s.task, s.agu, s.reader, s.array
        vec = s.vec
        m.submodules.wagu = wagu = SteppedAgu(lanes=s.L, cols=C)
        m.submodules.wreader = wreader = RunReader(lanes=s.L, depth=self.depth, skid=True)
        wiring.connect(m, wagu.cmd, wreader.cmd)
        wiring.connect(m, wreader.rd, wiring.flipped(self.l1_wrd))
        m.d.comb += wreader.pad_byte.eq(0)  # (weight and bias runs are never pads)
        # the weight reader's vectors through a register slice: the array's bank state
        # (whether a bias may be written) is its ready, and no longer reaches the reader's
        # window, its next read and the L1 arbitration in the same cycle
        m.submodules.wslice = wslice = SkidBuffer(wreader.o.payload.shape())
        wiring.connect(m, wreader.o, wslice.i)
        wbusy = Signal()  # a weight or bias vector is in the reader or the slice
        m.d.comb += wbusy.eq(wreader.busy | wslice.o.valid)

        # activation side: tile (n0, tile) of product mat in bank ab; X and Y move per product
        n0, mat, ab = Signal(16), Signal(16), Signal()
        tile = Signal(range(s.rows + 1))
        x_addr, y_addr = Signal(32), Signal(32)
        m.d.comb += [agu.task.eq(task), agu.task.x_addr.eq(x_addr),
                     agu.task.y_addr.eq(y_addr), agu.n0.eq(n0), agu.tile.eq(tile),
                     agu.bank.eq(ab), agu.mode.eq(NmuAgu.MODE_A)]
        # weight side: tile wn0 of product wmat into bank wb; W moves per product
        wn0, wmat, wb = Signal(16), Signal(16), Signal()
        w_addr = Signal(32)
        m.d.comb += [wagu.task.eq(task), wagu.task.w_addr.eq(w_addr), wagu.n0.eq(wn0),
                     wagu.bank.eq(wb)]

        # bank state: full (loaded, not yet released), issued (every activation run of the
        # bank's tile handed to the reader), runs of the bank in the reader (at most 5:
        # the one in the command skid register, the run being read, the two pending
        # words', the window's)
        full, issued = Signal(2), Signal(2)
        inflight = [Signal(range(8), name=f"inflight{b}") for b in range(2)]
        took_cmd = agu.cmd.valid & agu.cmd.ready
        took_last = reader.o.valid & reader.o.ready & vec.last
        for b in range(2):
            inc = took_cmd & (agu.cmd.payload.tag.bank == b)
            dec = took_last & (vec.tag.bank == b)
            m.d.sync += inflight[b].eq(inflight[b] + inc - dec)
            with m.If(issued[b] & (inflight[b] == 0)):  # the tile's last vector is taken
                m.d.sync += [full[b].eq(0), issued[b].eq(0)]

        # bias registers of the two banks; the array adds the one of its stage-2 vector
        bias = Signal(data.ArrayLayout(data.ArrayLayout(signed(32), C), 2))
        m.d.comb += [array.bias[c].eq(Mux(array.bias_bank, bias[1][c], bias[0][c]))
                     for c in range(C)]

        def write_bias(bank, lane, word):
            for b in range(2):
                for c in range(C):
                    with m.If((bank == b) & (lane == c)):
                        m.d.sync += bias[b][c].eq(word.as_signed())

        # weight reader -> weight bank / bias of its tag's bank
        wv = wslice.o.payload
        m.d.comb += [array.w_row.eq(wv.tag.row), array.w_lane.eq(wv.tag.lane),
                     array.w_count.eq(wv.count), array.w_bank.eq(wv.tag.bank)]
        m.d.comb += [array.w_data[c].eq(wv.data[c]) for c in range(C)]
        bias_free = Signal()  # the bank's bias no longer read by the array
        m.d.comb += bias_free.eq(~array.bank_busy.bit_select(wv.tag.bank, 1))
        with m.If(wv.tag.kind == NmuAgu.MODE_B):
            m.d.comb += wslice.o.ready.eq(bias_free)
            with m.If(wslice.o.valid & bias_free):
                write_bias(wv.tag.bank, wv.tag.lane, wv.data.as_value()[:32])
        with m.Else():
            m.d.comb += [wslice.o.ready.eq(1), array.w_en.eq(wslice.o.valid)]

        # activation reader -> array; per-pixel bias words (gemm [M, N]) into the bias of
        # the tile's bank once the previous pixel has left the array
        with m.If(vec.tag.kind == NmuAgu.MODE_B):
            m.d.comb += reader.o.ready.eq(~array.busy)
            with m.If(reader.o.valid & ~array.busy):
                write_bias(vec.tag.bank, vec.tag.lane, vec.data.as_value()[:32])
        with m.Else():
            m.d.comb += [array.i.valid.eq(reader.o.valid), reader.o.ready.eq(array.i.ready),
                         array.i.payload.bank.eq(vec.tag.bank)]

        wgo, widle = self._weight_fsm(m, s, wagu, wbusy, full, wb, wn0, wmat, w_addr, bias)
        quiet = ~agu.busy & ~reader.busy & ~wagu.busy & ~wbusy & widle
        ready = Signal()  # the activation side's bank is loaded (and not a stale load)
        m.d.comb += ready.eq(full.bit_select(ab, 1) & ~issued.bit_select(ab, 1))
        waiting_w = Signal()
        # ``rows_done > tile`` (the tile's row of the channel table is written) in a
        # register of its own, ``row_ok``, set from the next cycle's ``rows_done`` and
        # ``tile``: A_START's start of the AGU (whose loads spread over the unit) waits on
        # a flip-flop, not on a compare (the board's worst path on seed 2 at 89a7d28 ran
        # from ``tile`` through the compare and ``agu.start`` to the AGU's ``a_oy``).
        # ``rows_done`` clears while idle and counts the row writes; ``tile`` clears while
        # idle and, from A_WAIT, counts up or (the next product) clears, as set below
        s.row_ok = row_ok = Signal()
        rows_next = Mux(s.idle_q, 0, s.rows_done + s.row_write)
        m.d.sync += row_ok.eq(rows_next > tile)
        p = self.start.payload
        self._task_fsm(
            m, s, start=[n0.eq(0), tile.eq(0), mat.eq(0), ab.eq(0),
                         x_addr.eq(p.x_addr), y_addr.eq(p.y_addr),
                         wn0.eq(0), wmat.eq(0), wb.eq(0), w_addr.eq(p.w_addr),
                         full.eq(0), issued.eq(0), row_ok.eq(0)],
            ok=[wgo.eq(1)], first="A_START",
            tiles=partial(self._activations, m, s, n0, tile, mat, ab, issued, x_addr, y_addr,
                          ready, waiting_w, rows_next),
            quiet=quiet)
        # (for the tests: the flag and what it stands for)
        self.row_ok_probe = (row_ok, s.rows_done, tile)
        return waiting_w, reader.stall | wreader.stall

    def _weight_fsm(self, m, s, wagu, wbusy, full, wb, wn0, wmat, w_addr, bias):
        """Weight side of the weight-port unit: per tile, wait for bank ``wb`` to be free,
        load its weight rows and bias, then mark it full. Started by ``wgo`` (returned with
        ``widle``, high while it has nothing to load)."""
        C, task, array = s.C, s.task, s.array
        wgo = Signal()
        widle = Signal()
        with m.FSM(name="wfsm"):
            with m.State("IDLE"):
                m.d.comb += widle.eq(1)
                with m.If(wgo):
                    m.next = "BANK"
            with m.State("BANK"):
                with m.If(~full.bit_select(wb, 1)):
                    m.d.comb += [wagu.mode.eq(NmuAgu.MODE_W), wagu.start.eq(1)]
                    m.next = "W"
            with m.State("W"):
                with m.If(~wagu.busy):  # the bias runs queue behind the weights
                    m.next = "B"
            with m.State("B"):
                with m.If(task.has_bias):
                    m.d.comb += [wagu.mode.eq(NmuAgu.MODE_B), wagu.start.eq(1)]
                    m.next = "B_WAIT"
                with m.Elif(task.pix_bias):  # (loaded by the activation nest)
                    m.next = "FILL"
                with m.Elif(~array.bank_busy.bit_select(wb, 1)):
                    m.d.sync += [bias[wb][c].eq(0) for c in range(C)]
                    m.next = "FILL"
            with m.State("B_WAIT"):
                with m.If(~wagu.busy):
                    m.next = "FILL"
            with m.State("FILL"):
                with m.If(~wbusy):  # every weight row and bias word written
                    m.d.sync += [full.bit_select(wb, 1).eq(1), wb.eq(~wb), wn0.eq(wn0 + C)]
                    m.next = "BANK"
                    with m.If(wn0 + C >= task.cout):
                        m.d.sync += wn0.eq(0)
                        with m.If(wmat + 1 < task.mats):
                            m.d.sync += [wmat.eq(wmat + 1), w_addr.eq(w_addr + task.w_mat)]
                        with m.Else():
                            m.next = "IDLE"

        return wgo, widle

    def _activations(self, m, s, n0, tile, mat, ab, issued, x_addr, y_addr, ready, waiting_w,
                     rows_next):
        """Tile states of the weight-port unit: the activations of a tile once its bank is
        loaded (the weight FSM loads the banks). ``rows_next``: the next cycle's
        ``rows_done``, for ``s.row_ok``."""
        task, agu, counting = s.task, s.agu, s.counting
        with m.State("A_START"):
            m.d.comb += [counting.eq(1), waiting_w.eq(~ready)]
            # the tile's weights in its bank, its row of the channel table written
            with m.If(ready & (task.raw | s.row_ok)):
                m.d.comb += agu.start.eq(1)
                m.next = "A_WAIT"
        with m.State("A_WAIT"):
            m.d.comb += counting.eq(1)
            with m.If(~agu.busy):
                # the bank's activation runs are all issued; the next tile uses the other
                self._next_tile(m, s, n0, tile, mat, "A_START",
                                [issued.bit_select(ab, 1).eq(1), ab.eq(~ab),
                                 s.row_ok.eq(rows_next > tile + 1)],
                                [x_addr.eq(x_addr + task.x_mat),
                                 y_addr.eq(y_addr
                                           + times_out_bytes(task.y_mat, task.out_bytes)),
                                 s.row_ok.eq(rows_next > 0)])


class NmuUnit(wiring.Component):
    """The NMU as the engine sees it: shadow registers (:class:`npu.nmu.regs.NmuRegisters`)
    in front of :class:`Nmu`.

    The sequencer pulses ``clear``, sends the task's register writes on ``write`` (always
    ready; they reach the shadow registers a cycle later, through registers beside them,
    :data:`npu.shadow.WRITE_REGISTERS`), then a transfer on ``start`` (taken
    :data:`START_WAIT` + 1 = five cycles after the last write at the earliest: the
    writes' register, the decode's two stages and two registers more; ready from then on
    whenever the core is idle); the requantisation
    entry follows on ``rq`` and the result comes on ``done`` (a refused task: ``error``
    with the decode's cause, after the entry has been read). Ports and counters as for
    :class:`Nmu`.

    Parameters
    ----------
    geometry : npu.nmu.model.NmuGeometry
        ``lanes`` must equal the L1 word in bytes.
    depth : int
        L1 words.
    weight_port : bool
        As for :class:`Nmu`: the extra read client port ``l1_wrd`` for weights and bias,
        double-buffered weights. Default False.
    """

    def __init__(self, *, geometry, depth, weight_port=False):
        self.core = Nmu(geometry=geometry, depth=depth, weight_port=weight_port)
        self.regs = NmuRegisters()
        self.geometry, self.depth, self.weight_port = geometry, depth, bool(weight_port)
        width = 8 * geometry.lanes
        super().__init__({
            "clear": In(1),
            "write": In(stream.Signature(write_layout())),
            "start": In(stream.Signature(1)),
            "rq": In(stream.Signature(32)),
            "done": Out(stream.Signature(done_layout())),
            **_ports(depth, width, self.weight_port),
            "busy": Out(1),
            **{f"cnt_{name}": Out(32) for name in COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = regs = self.regs
        m.submodules.core = core = self.core
        # the sequencer's strobes, registered in the shadow registers (WRITE_REGISTERS)
        m.d.comb += regs.clear.eq(self.clear)
        wiring.connect(m, wiring.flipped(self.write), regs.write)
        # the decode registered twice: its logic is shallow, but the shadow registers and
        # the core lie far apart on the die
        start_after_decode(m, self.start, core.start, regs.task,
                           self.clear | self.write.valid,
                           latency=regs.LATENCY,
                           registers=DECODE_REGISTERS)
        wiring.connect(m, wiring.flipped(self.rq), core.rq)
        wiring.connect(m, core.done, wiring.flipped(self.done))
        wiring.connect(m, core.l1_rd, wiring.flipped(self.l1_rd))
        wiring.connect(m, core.l1_wr, wiring.flipped(self.l1_wr))
        if self.weight_port:
            wiring.connect(m, core.l1_wrd, wiring.flipped(self.l1_wrd))
        m.d.comb += self.busy.eq(core.busy)
        m.d.comb += [getattr(self, f"cnt_{n}").eq(getattr(core, f"cnt_{n}")) for n in COUNTERS]
        return m
