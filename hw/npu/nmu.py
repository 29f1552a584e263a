"""The NMU: int8 gemm / matmul / conv2d on L1 operands (AGU, MAC array, output stage).

Blocks (``docs/nmu.md``): :class:`npu.nmu_agu.NmuAgu` walks the loop nests and
:class:`npu.nmu_agu.RunReader` reads their runs from L1 as realigned vectors;
:class:`npu.nmu_array.NmuArray` (``lanes x cols`` MACs, weight-stationary) accumulates;
:class:`npu.nmu_output.NmuOutput` requantises (per-channel multiplier and shift, zero
point, clamp) or passes i32 through and stores the results into L1.

Interface
---------
* ``start`` (stream of :func:`npu.nmu_agu.task_fields_layout`): the task in the NMU's
  convolution view, decoded from the compute registers (``nem.taskformat.REGISTER_MAPS``,
  model: :func:`npu.nmu_model.decode_task`; the register decode is the engine's side).
* ``rq`` (stream of 32-bit words): the task's requantisation entry from the data section,
  word by word as ``nem.taskformat.encode_requant`` lays it out (input zero point, output
  zero point, clamp low, clamp high, channels n, reserved, then n (multiplier, shift)
  pairs). Read right after ``start``.
* ``done`` (stream of ``{error, cause}``, :class:`npu.nmu_model.Cause`): one per task.
* ``l1_rd`` / ``l1_wr``: client ports of the engine's arbitrated L1
  (:func:`npu.engine_ports.read_client_signature` / ``write_client_signature``).
* counters, cleared at ``start``: ``cnt_busy`` (start to done), ``cnt_macs`` (valid lanes x
  valid columns of every vector the array took), ``cnt_load`` (a weight or bias vector
  goes by: the array idle), ``cnt_starve`` (no vector from the reader: entry head, reader
  latency, unaligned runs, the drain), ``cnt_stall_out`` (an activation vector waits: the
  array held by the output stage), ``cnt_stall_read`` (L1 read not granted),
  ``cnt_stall_write`` (L1 write not granted).

Sequence of a task: read the requantisation entry's head; check sizes; then per tile of
``cols`` output channels: the AGU issues the weight rows, the bias words and the
activation taps, one run per cycle, each phase right behind the previous one (the
reader's vectors carry their kind; a bias word waits until the previous tile's pixels
have left the array). The entry's channel pairs go into the table meanwhile; a tile's
activations start once its table row is written. ``done`` once every result is written
and the whole entry read.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from npu.engine_ports import read_client_signature, write_client_signature
from npu.nmu_agu import NmuAgu, RunReader, task_fields_layout
from npu.nmu_array import NmuArray
from npu.nmu_model import Cause, NmuGeometry
from npu.nmu_output import NmuOutput
from npu.nmu_regs import NmuRegisters, write_layout
from npu.requant import param_layout

__all__ = ["COUNTERS", "Nmu", "NmuUnit", "done_layout"]

COUNTERS = ("busy", "macs", "load", "stall_read", "stall_write", "stall_out", "starve")


def done_layout():
    return data.StructLayout({"error": 1, "cause": 4})


class Nmu(wiring.Component):
    """The NMU of one engine.

    Parameters
    ----------
    geometry : npu.nmu_model.NmuGeometry
        ``lanes`` must equal the L1 word in bytes.
    depth : int
        L1 words.
    """

    def __init__(self, *, geometry=None, depth=1024, lanes=None, cols=None, wrows=None,
                 channels=None):
        if geometry is None:
            geometry = NmuGeometry(lanes=lanes or 8, cols=cols or 8, wrows=wrows or 256,
                                   channels=channels or 256)
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be a positive integer, not {depth!r}")
        if geometry.channels // geometry.cols > 256:
            raise ValueError(f"channels / cols must be at most 256 (tile index), not "
                             f"{geometry.channels // geometry.cols}")
        self.geometry, self.depth = geometry, depth
        width = 8 * geometry.lanes
        super().__init__({
            "start": In(stream.Signature(task_fields_layout())),
            "rq": In(stream.Signature(32)),
            "done": Out(stream.Signature(done_layout())),
            "l1_rd": Out(read_client_signature(depth, width)),
            "l1_wr": Out(write_client_signature(depth, width)),
            "busy": Out(1),
            **{f"cnt_{name}": Out(32) for name in COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        g = self.geometry
        L, C = g.lanes, g.cols
        lw = L.bit_length() - 1
        rows = g.channels // C

        m.submodules.agu = agu = NmuAgu(lanes=L, cols=C)
        m.submodules.reader = reader = RunReader(lanes=L, depth=self.depth)
        # the array's tag: the pixel's output address, the tile's valid columns and index
        otag = data.StructLayout({"yaddr": 32, "ncols": 8, "tile": 8})
        m.submodules.array = array = NmuArray(lanes=L, cols=C, wrows=g.wrows,
                                              tag_width=otag.size)
        m.submodules.output = out = NmuOutput(cols=C, rows=rows, lanes=L, depth=self.depth)
        wiring.connect(m, agu.cmd, reader.cmd)
        wiring.connect(m, reader.rd, wiring.flipped(self.l1_rd))
        wiring.connect(m, out.wr, wiring.flipped(self.l1_wr))

        task = Signal(task_fields_layout())
        m.d.comb += agu.task.eq(task)
        zx = Signal(signed(32))
        zy, lo, hi = Signal(signed(32)), Signal(signed(32)), Signal(signed(32))
        nch = Signal(32)
        m.d.comb += [reader.pad_byte.eq(zx[:8]), array.zx.eq(zx[:9]),
                     out.zero_point.eq(zy[:17]), out.lo.eq(lo[:17]), out.hi.eq(hi[:17]),
                     out.raw.eq(task.raw), out.out_bytes.eq(task.out_bytes)]

        n0 = Signal(16)
        mat = Signal(16)
        tile = Signal(range(rows + 1))
        m.d.comb += [agu.n0.eq(n0), agu.tile.eq(tile)]
        bias = Signal(data.ArrayLayout(signed(32), C))
        m.d.comb += array.bias.eq(bias)
        cause = Signal(4)

        # requantisation entry words -> channel table rows
        widx = Signal(32)
        mult = Signal(31)
        row = Signal(param_layout(C))
        row_write = Signal()
        row_at = Signal(range(rows + 1))
        m.d.comb += [out.params.valid.eq(row_write), out.params.payload.row.eq(row_at),
                     out.params.payload.data.eq(row)]
        m.d.sync += row_write.eq(0)

        # reader vectors by the kind of their run: the phases follow each other through the
        # reader without a drain (a tile's weights load behind the previous tile's last
        # activations: the array read those rows when it took the vectors)
        vec = reader.o.payload
        phase = Signal(2)  # NmuAgu.MODE_* of the FSM (for the counters)
        m.d.comb += [array.w_row.eq(vec.tag.row), array.w_lane.eq(vec.tag.lane),
                     array.w_count.eq(vec.count)]
        m.d.comb += [array.w_data[c].eq(vec.data[c]) for c in range(C)]
        m.d.comb += [array.i.payload.data.eq(vec.data), array.i.payload.count.eq(vec.count),
                     array.i.payload.row.eq(vec.tag.row + vec.index),
                     array.i.payload.first.eq(vec.tag.first & (vec.index == 0)),
                     array.i.payload.last.eq(vec.tag.last & vec.last),
                     array.i.payload.tag.eq(Cat(vec.tag.yaddr, vec.tag.lane, vec.tag.tile))]
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

        # accumulators -> output stage
        res = Signal(otag)
        m.d.comb += [res.eq(array.o.payload.tag),
                     out.i.valid.eq(array.o.valid), array.o.ready.eq(out.i.ready),
                     out.i.payload.acc.eq(array.o.payload.acc), out.i.payload.row.eq(res.tile),
                     out.i.payload.yaddr.eq(res.yaddr), out.i.payload.ncols.eq(res.ncols)]

        quiet = ~agu.busy & ~reader.busy
        q = Signal(16)
        m.d.comb += q.eq((task.cin + (L - 1)) >> lw)
        counting = Signal()
        counters = {name: getattr(self, f"cnt_{name}") for name in COUNTERS}

        # requantisation entry reader: runs from start until the last word is in
        reading = Signal()
        rows_done = Signal(range(rows + 2))
        head_done = Signal()
        m.d.comb += [head_done.eq(widx >= 6), self.rq.ready.eq(reading)]
        with m.If(row_write):
            m.d.sync += rows_done.eq(rows_done + 1)
        with m.If(self.rq.valid & reading):
            w = self.rq.payload
            m.d.sync += widx.eq(widx + 1)
            with m.Switch(widx):
                with m.Case(0):
                    m.d.sync += zx.eq(w)
                with m.Case(1):
                    m.d.sync += zy.eq(w)
                with m.Case(2):
                    m.d.sync += lo.eq(w)
                with m.Case(3):
                    m.d.sync += hi.eq(w)
                with m.Case(4):
                    m.d.sync += nch.eq(w)
                with m.Case(5):
                    with m.If(nch == 0):
                        m.d.sync += reading.eq(0)
                with m.Default():
                    ch = Signal(32)
                    m.d.comb += ch.eq((widx - 6) >> 1)
                    with m.If(~widx[0]):  # even index from 6: multiplier
                        m.d.sync += mult.eq(w)
                    with m.Else():
                        lane = Signal(range(C))
                        m.d.comb += lane.eq(ch % C)
                        with m.Switch(lane):
                            for c in range(C):
                                with m.Case(c):
                                    m.d.sync += [row[c].multiplier.eq(mult),
                                                 row[c].shift.eq(w)]
                        with m.If((lane == C - 1) | (ch + 1 == nch)):
                            m.d.sync += [row_write.eq(ch < g.channels), row_at.eq(ch // C)]
                        with m.If(ch + 1 == nch):
                            m.d.sync += reading.eq(0)

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.start.ready.eq(1)
                with m.If(self.start.valid):
                    m.d.sync += [task.eq(self.start.payload), widx.eq(0), cause.eq(0),
                                 reading.eq(1), rows_done.eq(0),
                                 n0.eq(0), tile.eq(0), mat.eq(0), phase.eq(NmuAgu.MODE_W)]
                    m.d.sync += [c.eq(0) for c in counters.values()]
                    m.next = "PARAMS"
            with m.State("PARAMS"):
                # the entry's head (zero points, clamp, channel count); the pairs are read
                # by the entry reader below while the first tiles load
                m.d.comb += counting.eq(1)
                with m.If(head_done):
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += counting.eq(1)
                with m.If(task.cause != 0):
                    m.d.sync += cause.eq(task.cause)
                    m.next = "DONE"
                with m.Elif((task.kh * task.kw * q > g.wrows) | (task.cout > g.channels)):
                    m.d.sync += cause.eq(Cause.SIZE)
                    m.next = "DONE"
                with m.Elif(Mux(task.raw, nch != 0, nch != task.cout)):
                    m.d.sync += cause.eq(Cause.REQUANT)
                    m.next = "DONE"
                with m.Else():
                    m.next = "W_START"
            for mode, name, nxt in ((NmuAgu.MODE_W, "W", "B_START"),
                                    (NmuAgu.MODE_B, "B", "A_START"),
                                    (NmuAgu.MODE_A, "A", None)):
                with m.State(f"{name}_START"):
                    m.d.comb += [counting.eq(1), agu.mode.eq(mode), agu.start.eq(1)]
                    m.d.sync += phase.eq(mode)
                    if mode == NmuAgu.MODE_A:
                        # results of this tile need its row of the channel table
                        with m.If(~task.raw & (rows_done <= tile)):
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
                            m.d.sync += [n0.eq(n0 + C), tile.eq(tile + 1)]
                            with m.If(n0 + C < task.cout):
                                m.next = "W_START"
                            with m.Elif(mat + 1 < task.mats):
                                # next product of a batched matmul: the operands move on
                                m.d.sync += [
                                    mat.eq(mat + 1), n0.eq(0), tile.eq(0),
                                    task.x_addr.eq(task.x_addr + task.x_mat),
                                    task.w_addr.eq(task.w_addr + task.w_mat),
                                    task.y_addr.eq(task.y_addr + task.out_bytes * task.y_mat),
                                ]
                                m.next = "W_START"
                            with m.Else():
                                m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.comb += counting.eq(1)
                with m.If(quiet & ~out.busy & ~array.busy):
                    m.next = "DONE"
            with m.State("DONE"):
                # after the whole requantisation entry has been read
                m.d.comb += [self.done.valid.eq(~reading),
                             self.done.payload.error.eq(cause != 0),
                             self.done.payload.cause.eq(cause)]
                with m.If(self.done.ready & ~reading):
                    m.next = "IDLE"

        offered = reader.o.valid
        is_act = vec.tag.kind == NmuAgu.MODE_A
        with m.If(counting):
            m.d.sync += counters["busy"].eq(counters["busy"] + 1)
            with m.If(array.i.valid & array.i.ready):
                m.d.sync += counters["macs"].eq(counters["macs"] + vec.count * vec.tag.lane)
            with m.If(offered & ~is_act):
                m.d.sync += counters["load"].eq(counters["load"] + 1)
            with m.If(reader.stall):
                m.d.sync += counters["stall_read"].eq(counters["stall_read"] + 1)
            with m.If(out.stall):
                m.d.sync += counters["stall_write"].eq(counters["stall_write"] + 1)
            with m.If(offered & is_act & ~array.i.ready):
                m.d.sync += counters["stall_out"].eq(counters["stall_out"] + 1)
            with m.If(~offered):
                m.d.sync += counters["starve"].eq(counters["starve"] + 1)
        m.d.comb += self.busy.eq(counting)
        return m


class NmuUnit(wiring.Component):
    """The NMU as the engine sees it: shadow registers (:class:`npu.nmu_regs.NmuRegisters`)
    in front of :class:`Nmu`.

    The sequencer pulses ``clear``, sends the task's register writes on ``write`` (always
    ready), then a transfer on ``start``; the requantisation entry follows on ``rq`` and
    the result comes on ``done`` (a refused task: ``error`` with the decode's cause, after
    the entry has been read). Ports and counters as for :class:`Nmu`.
    """

    def __init__(self, *, geometry, depth):
        self.core = Nmu(geometry=geometry, depth=depth)
        self.regs = NmuRegisters()
        self.geometry, self.depth = geometry, depth
        width = 8 * geometry.lanes
        super().__init__({
            "clear": In(1),
            "write": In(stream.Signature(write_layout())),
            "start": In(stream.Signature(1)),
            "rq": In(stream.Signature(32)),
            "done": Out(stream.Signature(done_layout())),
            "l1_rd": Out(read_client_signature(depth, width)),
            "l1_wr": Out(write_client_signature(depth, width)),
            "busy": Out(1),
            **{f"cnt_{name}": Out(32) for name in COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = regs = self.regs
        m.submodules.core = core = self.core
        m.d.comb += regs.clear.eq(self.clear)
        wiring.connect(m, wiring.flipped(self.write), regs.write)
        m.d.comb += [core.start.valid.eq(self.start.valid), self.start.ready.eq(core.start.ready),
                     core.start.payload.eq(regs.task)]
        wiring.connect(m, wiring.flipped(self.rq), core.rq)
        wiring.connect(m, core.done, wiring.flipped(self.done))
        wiring.connect(m, core.l1_rd, wiring.flipped(self.l1_rd))
        wiring.connect(m, core.l1_wr, wiring.flipped(self.l1_wr))
        m.d.comb += self.busy.eq(core.busy)
        m.d.comb += [getattr(self, f"cnt_{n}").eq(getattr(core, f"cnt_{n}")) for n in COUNTERS]
        return m
