"""The CSTL: int8 elementwise unit of the engine (``docs/cstl.md``).

Blocks: :class:`npu.cstl.regs.CstlRegisters` decodes the shadow registers;
:class:`npu.cstl.walk.RegionWalk` walks the operand and result regions (rank <= 4,
element strides) as runs, :class:`npu.cstl.poolwalk.PoolWalk` the taps of a pool's
windows (a run per tap and channel chunk, pad runs outside the input; per lane a running
max, or a running sum divided at the window's last tap by the count of its taps inside
the input, rounded half to even); for a last-axis reduction ``RegionWalk`` walks the
rows and a comparison tree per vector feeds the row's running max and first index (one
result per row: the max, through the table when reduce_max requantises, or the saturated
index); :class:`npu.nmu.agu.RunReader` reads the runs from L1 as
vectors of one L1 word, realigned to each run's start; every lane looks its byte up in its
own copy of the task's 256-entry table; :class:`npu.cstl.store.VectorStore` writes the
results into L1 with byte enables, merging unaligned vectors into whole words.

Interface (:class:`Cstl`)
-------------------------
* ``start`` (stream of :func:`npu.cstl.regs.task_layout`): the decoded task.
* ``table`` (stream of 32-bit words): the task's table from the data section, word ``k``
  holding entries ``4k .. 4k+3``, lowest byte first (:data:`TABLE_WORDS` words), read
  right after ``start`` when ``task.table`` (also for a refused task, as the NMU reads its
  requantisation entry) and ``keep`` is low. ``keep`` (sampled with ``start``): the lane
  tables already hold this task's table (the engine starts a task with it when the table's
  DDR address is the last one this CSTL read in the run); no table words follow. An
  eltwise entry on ``table`` goes to the entry registers only, never into the lane tables.
* the model of the whole unit is :func:`npu.cstl.model.cstl_model`.
* ``done`` (stream of ``{error, cause}``, :class:`npu.nmu.model.Cause`): one per task.
* ``l1_rd`` / ``l1_wr``: client ports of the engine's arbitrated L1.
* ``busy`` and the counters ``cnt_<name>`` of :data:`COUNTERS`, cleared while idle.

Sequence of a task: the table words into the lane tables (one word per cycle); then the
walk, one run per cycle, the reader one L1 word per cycle, the lookups combinational
between the reader (or the held pool or reduction result) and the output stage's
register, the parts from there to the store; ``done`` once the last result byte is
written.
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from nem.taskformat import TABLE_BYTES
from npu.bus.ports import read_client_signature, write_client_signature
from npu.bus.stream import PingPongBuffer, RegisterFIFO, SkidBuffer, start_after_decode
from npu.cstl.eltalu import ENTRY_WORDS, EltAlu
from npu.cstl.eltwalk import EltWalk
from npu.cstl.model import ENTRY_RANGES, MUL_UNUSED
from npu.cstl.poolwalk import PoolWalk
from npu.cstl.regs import (
    DIM_BITS,
    ELT_OPS,
    POOL_OPS,
    RED_OPS,
    CstlRegisters,
    task_layout,
    write_layout,
)
from npu.cstl.store import VectorStore, vector_layout
from npu.cstl.walk import RegionWalk
from npu.nmu.agu import RunReader, run_layout
from npu.nmu.model import Cause

__all__ = ["COUNTERS", "DECODE_REGISTERS", "START_WAIT", "TABLE_BYTES", "TABLE_WORDS", "Cstl",
           "CstlUnit", "done_layout"]

#: Bits of a pool's running sum per lane (fewer than 2**16 taps of at most 128 in size).
SUM_BITS = 24
#: 32-bit words of the table on the ``table`` stream.
TABLE_WORDS = TABLE_BYTES // 4

#: Registers between :class:`CstlUnit`'s decode of its shadow registers and the core's task.
DECODE_REGISTERS = 2
#: ``CstlUnit.start`` is taken once this many cycles have passed without a shadow-register
#: write or clear; it is then ready whenever the core is idle. The sequencer counts the
#: same cycles itself and issues no earlier, so its issue does not wait on ``start.ready``.
#: Runs the FIFO between the walks and the reader holds, and the credits a walk steps
#: against: a run is on the FIFO's output the cycle after it is written and its credit
#: comes back two cycles after it leaves, so three keep a walk at a run per cycle.
CMD_DEPTH = 3
START_WAIT = CstlRegisters.LATENCY + DECODE_REGISTERS

#: The counters (``cnt_<name>``) and what they count, cleared while the unit is idle
#: (a task's counts hold until the cycle after its ``done``).
COUNTERS = {
    "busy": "cycles busy (start to done)",
    "elems": "result elements written",
    "table": "cycles loading the table",
    "stall_read": "cycles an L1 read was requested and not granted",
    "stall_write": "cycles an L1 write was requested and not granted",
}


def done_layout():
    """What ``done`` carries: the task was refused, and the :class:`npu.nmu.model.Cause`."""
    return data.StructLayout({"error": 1, "cause": 4})


def _signature(depth, width):
    return {
        "table": In(stream.Signature(32)),
        "done": Out(stream.Signature(done_layout())),
        "l1_rd": Out(read_client_signature(depth, width)),
        "l1_wr": Out(write_client_signature(depth, width)),
        "busy": Out(1),
        **{f"cnt_{name}": Out(32) for name in COUNTERS},
    }


class Cstl(wiring.Component):
    """The CSTL of one engine (see the module).

    Parameters
    ----------
    lanes : int
        Bytes per L1 word (a power of two).
    depth : int
        L1 words.
    elt_lanes : int
        Lanes the binary eltwise ALU computes a cycle (a power of two up to ``lanes``): one
        copy of its multipliers per lane (``docs/cstl.md``).
    """

    def __init__(self, *, lanes, depth, elt_lanes=1):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be a positive integer, not {depth!r}")
        if not isinstance(lanes, int) or lanes < 4 or lanes & (lanes - 1):
            raise ValueError(f"lanes must be a power of two of at least 4, not {lanes!r}")
        if not isinstance(elt_lanes, int) or not 1 <= elt_lanes <= lanes or \
                elt_lanes & (elt_lanes - 1):
            raise ValueError(f"elt_lanes must be a power of two from 1 to lanes ({lanes}), "
                             f"not {elt_lanes!r}")
        self.lanes, self.depth, self.elt_lanes = lanes, depth, elt_lanes
        #: the walks (attributes so that a bench can watch them): copies and casts,
        #: pools, eltwise; only the task's own walk is ever busy (see ``elaborate``)
        self.walk, self.pool_walk = RegionWalk(), PoolWalk(lanes=lanes)
        self.elt_walk = EltWalk(lanes=lanes)
        super().__init__({"start": In(stream.Signature(task_layout())),
                          "keep": In(1),
                          **_signature(depth, 8 * lanes)})

    def elaborate(self, platform):
        m = Module()
        L = self.lanes
        m.submodules.walk = walk = self.walk
        m.submodules.pool_walk = pwalk = self.pool_walk
        m.submodules.elt_walk = ewalk = self.elt_walk
        # commands through a skid register: the walks do not see the reader's ready (which
        # follows the datapath's and the L1 grant's) in the cycle
        m.submodules.reader = reader = RunReader(lanes=L, depth=self.depth, skid=True)
        m.submodules.store = store = VectorStore(lanes=L, depth=self.depth)
        # a register slice before the store: the store's ready (through the L1 write
        # grant) stops there instead of reaching the datapath, the reader and the ALU
        m.submodules.store_slice = store_slice = SkidBuffer(vector_layout(L))
        wiring.connect(m, store_slice.o, store.i)
        st_in = store_slice.i
        wiring.connect(m, reader.rd, wiring.flipped(self.l1_rd))
        wiring.connect(m, store.wr, wiring.flipped(self.l1_wr))

        task = Signal(task_layout())
        # every walk sees the task at all times; the CHECK state only raises one's valid
        m.d.comb += [w.start.payload.eq(task) for w in (walk, pwalk, ewalk)]
        cause = Signal(4)
        widx = Signal(range(TABLE_WORDS))
        # the task's mode, decoded from the start's payload into registers beside the task
        # (they fan out to every lane's datapath and to the per-mode handshakes)
        is_pool, is_elt, is_red, is_avg = (Signal(name=n) for n in
                                           ("is_pool", "is_elt", "is_red", "is_avg"))
        # a pool or a reduction: the lookup reads the held result, not the reader's vector;
        # use_table: the output stage takes the looked-up bytes (a task with a table and
        # bytes in: a narrowing cast saturates the bytes as read)
        is_held, use_table = Signal(name="is_held"), Signal(name="use_table")
        # the reader takes the runs of the task's walk; a max pool pads with -128. The
        # walks' ready goes to every walk as it is, not through the mode: only the
        # task's own walk is ever busy (a walk starts from CHECK for its mode, and the mode
        # registers change only in IDLE, after the walk's last run came back through the
        # reader), so the mode flags stay off each walk's step (the board's worst path on
        # seed 2 at 8b1ffd2 ran from ``is_pool`` through the pool walk's step)
        #
        # The runs reach the reader through a FIFO, and the walks step against credits:
        # a walk's ready is ``can_issue``, a flip-flop set from the credits left after
        # this cycle's run and the run the FIFO handed out two cycles before, so no
        # ready from the reader reaches the walks' steps. (The reader's own ready, a
        # flip-flop too, drove the eltwise walk's step and from it the enables of its
        # twelve address registers, spread over 30 columns: the board's worst path on
        # seed 2 at 64e4b2d.) The credits never let the FIFO overflow.
        m.submodules.cmd_fifo = cmd_fifo = RegisterFIFO(run_layout(), CMD_DEPTH)
        credits = Signal(range(CMD_DEPTH + 1), init=CMD_DEPTH)
        can_issue = Signal(init=1)
        handed = Signal()                     # the FIFO handed a run to the reader

        def offer(w):
            m.d.comb += [cmd_fifo.i.valid.eq(w.cmd.valid & can_issue),
                         cmd_fifo.i.payload.eq(w.cmd.payload)]
        with m.If(is_pool):
            offer(pwalk)
        with m.Elif(is_elt):
            offer(ewalk)
        with m.Else():
            offer(walk)
        # the walks step on an inverted copy of ``can_issue`` (which yosys does not merge
        # with it): their address registers' enables do not hang on the net that offers
        # the run to the FIFO (``can_issue`` started 649 paths above 10 ns in the
        # estimate of 89ad567, 300 of them into the FIFO's entries, ``docs/fpga.md``)
        cannot_issue = Signal(name="cannot_issue")
        m.d.comb += [w.cmd.ready.eq(~cannot_issue) for w in (walk, pwalk, ewalk)]
        left = credits - cmd_fifo.i.valid + handed
        m.d.sync += [handed.eq(cmd_fifo.o.valid & cmd_fifo.o.ready), credits.eq(left),
                     can_issue.eq(left != 0), cannot_issue.eq(left == 0)]
        m.d.comb += [reader.cmd.valid.eq(cmd_fifo.o.valid),
                     reader.cmd.payload.eq(cmd_fifo.o.payload),
                     cmd_fifo.o.ready.eq(reader.cmd.ready)]
        m.d.comb += reader.pad_byte.eq(Mux(is_avg, 0, 0x80))

        # pooling: per lane the running max, or the running sum, of the window's taps so
        # far (and the taps inside the input); a vector of a window's last tap leaves its
        # result (the max, or the sum divided by the count, below) in a register for the
        # store
        # a register slice after the reader: the datapath's ready (per mode, through the
        # ALU's lane count, the reduction's stages, the store slice) stops there instead
        # of reaching the reader's window and the L1 read request; two entries by pointer,
        # so that ready reaches a pointer, not the enables of the whole vector
        m.submodules.vec_slice = vec_slice = PingPongBuffer(reader.o.payload.shape())
        wiring.connect(m, reader.o, vec_slice.i)
        vin = vec_slice.o
        vec = vin.payload
        tag = vec.tag
        first_tap, last_tap, inside = tag.first, tag.kind[0], tag.row[0]
        acc = [Signal(signed(SUM_BITS), name=f"acc{k}") for k in range(L)]
        cnt = Signal(DIM_BITS + 1)
        n_cnt = Signal(DIM_BITS + 1)
        m.d.comb += n_cnt.eq(Mux(first_tap, 0, cnt) + inside)
        maxed, summed = [], []
        for k in range(L):
            x = vec.data[k].as_signed()
            v = Signal(signed(8), name=f"max{k}")
            m.d.comb += v.eq(Mux(first_tap | (x > acc[k]), x, acc[k][:8]))
            maxed.append(v)
            t = Signal(signed(SUM_BITS), name=f"sum{k}")
            m.d.comb += t.eq(Mux(first_tap, 0, acc[k]) + x)
            summed.append(t)
        with m.If(vin.valid & vin.ready & ~last_tap):
            m.d.sync += [acc[k].eq(Mux(is_avg, summed[k], maxed[k])) for k in range(L)]
            m.d.sync += cnt.eq(n_cnt)
        # the average: floor((sum + 128 n) / n) in 0..255 by 8 steps of restoring division
        # (all lanes at once, the reader held), then rounded half to even; 0 for a window
        # of pads alone
        dstep = Signal(range(10))
        rem = [Signal(SUM_BITS + 2, name=f"rem{k}") for k in range(L)]
        quo = [Signal(8, name=f"quo{k}") for k in range(L)]
        dcnt = Signal(DIM_BITS + 1)
        # the divisor at the step's quotient bit (n << 7 first, halved each step): one
        # comparison and one subtraction per lane, the quotient shifted in MSB first
        trial = Signal(DIM_BITS + 8)
        div_ready = Signal()
        m.d.comb += div_ready.eq(~is_avg | (dstep == 9))
        with m.If(is_avg & vin.valid & last_tap & (dstep == 0)):
            m.d.sync += [dstep.eq(1), dcnt.eq(n_cnt), trial.eq(n_cnt << 7)]
            m.d.sync += [rem[k].eq(summed[k] + (n_cnt << 7)) for k in range(L)]
        with m.If((dstep != 0) & (dstep != 9)):
            m.d.sync += [dstep.eq(dstep + 1), trial.eq(trial >> 1)]
            for k in range(L):
                fits = rem[k] >= trial
                m.d.sync += quo[k].eq(Cat(fits, quo[k][:7]))
                with m.If(fits):
                    m.d.sync += rem[k].eq(rem[k] - trial)
        averaged = []
        for k in range(L):
            up = (rem[k] << 1 > dcnt) | ((rem[k] << 1 == dcnt) & quo[k][0])
            a = Signal(8, name=f"avg{k}")
            m.d.comb += a.eq(Mux(dcnt == 0, 0, (quo[k] + up - 128)[:8]))
            averaged.append(a)
        pooled = [Mux(is_avg, a, v) for a, v in zip(averaged, maxed, strict=True)]
        # a window's result (every lane) or a row's max (lane 0) waits in ``held`` for the
        # table lookup in the cycle after (the comparison with the running max, or the
        # average's rounding, is not in the cycle of the lookup), with its output address
        # in ``held_addr``; one result a cycle
        held = [Signal(8, name=f"held{k}") for k in range(L)]
        held_addr = Signal.like(tag.yaddr)
        pool_valid = Signal()
        pool_count = Signal.like(vec.count)
        pool_free = Signal()
        pool_take = Signal()
        # the output stage (below) takes what the datapath hands it this cycle
        f_free = Signal()
        m.d.comb += [pool_free.eq(~pool_valid | f_free),
                     pool_take.eq(is_pool & vin.valid & last_tap & div_ready & pool_free)]
        with m.If(pool_valid & f_free):
            m.d.sync += pool_valid.eq(0)
        with m.If(pool_take):
            m.d.sync += [pool_valid.eq(1), pool_count.eq(vec.count), held_addr.eq(tag.yaddr),
                         dstep.eq(0)]
            m.d.sync += [r.eq(p) for r, p in zip(held, pooled, strict=True)]
        # the reduction in two stages: the vector's comparison tree into a register, then
        # the merge with the row's running max; the row's result waits in a register for
        # the output stage (its table lookup and saturation in the cycle after)
        red_valid = Signal()
        red_max = held[0].as_signed()
        red_idx = Signal(DIM_BITS)
        red_free = Signal()
        m.d.comb += red_free.eq(~red_valid | f_free)
        red = self._reduce(m, vec, red_free)
        m.d.comb += red.take.eq(is_red & vin.valid & red.ready)
        with m.If(red_valid & f_free):
            m.d.sync += red_valid.eq(0)
        with m.If(red.done):
            m.d.sync += [red_valid.eq(1), held[0].eq(red.max), red_idx.eq(red.idx),
                         held_addr.eq(red.addr)]

        # one table copy per lane: 64 words of 4 entries, written together, read
        # combinationally by the lane's byte (the vector's, or the held result's)
        looked = []
        for k in range(L):
            mem = Memory(shape=32, depth=TABLE_WORDS, init=[])
            m.submodules[f"lut{k}"] = mem
            wp = mem.write_port()
            rp = mem.read_port(domain="comb")
            code = Signal(8, name=f"code{k}")
            m.d.comb += code.eq(Mux(is_held, held[k], vec.data[k]))
            m.d.comb += [wp.addr.eq(widx), wp.data.eq(self.table.payload),
                         wp.en.eq(self.table.valid & self.table.ready & ~task.entry),
                         rp.addr.eq(code[2:])]
            byte = Signal(8, name=f"y{k}")
            m.d.comb += byte.eq(rp.data.word_select(code[:2], 8))
            looked.append((code, byte))

        # a reduction's result: the row's max (through the table of lane 0 when the task
        # has one) or the index of its first max, saturated to the output type
        red_out = Signal(32)
        idx_hi = Array([Const(127, 32), Const(32767, 32), Const(2**31 - 1, 32),
                        Const(2**31 - 1, 32)])[task.out_shift]
        with m.If(task.red == RED_OPS["argmax"]):
            m.d.comb += red_out.eq(Mux(red_idx > idx_hi, idx_hi, red_idx))
        with m.Else():
            m.d.comb += red_out.eq(Mux(task.table, looked[0][1], red_max))

        # the output stage: a register between the lookup and the store. It takes a vector
        # of codes (the looked-up bytes, or without a table the bytes as read, or a row's
        # result in its first four), its elements and its output address, from the reader
        # (a table or cast task), the held window result (a pool) or the held row result
        # (a reduction), and hands it to the store in parts; it is free when empty or when
        # its last part leaves this cycle
        f_valid = Signal()
        f_data = [Signal(8, name=f"f_data{k}") for k in range(L)]
        f_yaddr = Signal.like(tag.yaddr)
        f_eidx = Signal(32)                     # element offset of the vector's first
        s_valid = Signal()
        s_data = [Signal(8, name=f"s_data{k}") for k in range(L)]
        for k, (c, y) in enumerate(looked):
            m.d.comb += s_data[k].eq(Mux(use_table, y, c))
            if k < 4:
                with m.If(is_red):
                    m.d.comb += s_data[k].eq(red_out[8 * k:8 * k + 8])
        s_n = Mux(is_red, 1, Mux(is_pool, pool_count, vec.count >> task.in_shift))
        s_yaddr = Mux(is_held, held_addr, tag.yaddr)
        s_eidx = Mux(is_held, 0, (vec.index * L) >> task.in_shift)

        # output vectors, one L1 word each: the codes as they are or sign-extended to 2 or
        # 4 bytes (a vector leaves in 1, 2 or 4 parts); or elements of 2 or 4 bytes
        # saturated to one (one part); or a reduction's result
        part = Signal(2)
        per = Signal(range(L + 1))              # elements per part
        m.d.comb += per.eq(L >> task.out_shift)
        # the part's first element (part * per), kept beside ``part`` rather than
        # multiplied in the cycle
        first = Signal(range(L + 1))
        # the vector's elements from ``first`` on, and whether they fit in this part, in
        # registers kept with ``first`` (set as the vector loads, stepped with the part):
        # no subtraction and comparison between ``first`` and the output stage's ready,
        # which reaches back through the reader, the reduction and the eltwise ALU
        # (``first`` started 524 paths above 10 ns in the estimate of the copy and NMU
        # cuts, ``docs/fpga.md``)
        left = Signal(range(L + 1))
        last_part = Signal()
        n_part = Signal(range(L + 1))
        m.d.comb += n_part.eq(Mux(last_part, left, per))
        out = Signal(8 * L)
        with m.Switch(Cat(part, task.out_shift, task.in_shift)):
            for so in range(3):                 # widening (or i8 -> i8)
                ob, n = 1 << so, L >> so
                for pt in range(ob):
                    with m.Case(pt | so << 2):
                        lanes = [f_data[pt * n + i] for i in range(n)]
                        m.d.comb += out.eq(Cat(*[Cat(c, c[7].replicate(8 * ob - 8))
                                                 for c in lanes]))
            for si in (1, 2):                   # narrowing: saturate to i8
                ib = 1 << si
                with m.Case(si << 4):
                    sat = []
                    for e in range(L // ib):
                        v = Cat(*[f_data[e * ib + b] for b in range(ib)]).as_signed()
                        q = Signal(8, name=f"sat{si}_{e}")
                        m.d.comb += q.eq(Mux(v > 127, 127, Mux(v < -128, -128, v)))
                        sat.append(q)
                    m.d.comb += out.eq(Cat(*sat))
        f_leave = Signal()
        m.d.comb += [f_leave.eq(f_valid & st_in.ready & last_part),
                     f_free.eq(~f_valid | f_leave)]
        with m.If(f_leave):
            m.d.sync += f_valid.eq(0)
        with m.If(f_valid & st_in.ready):
            m.d.sync += [part.eq(Mux(last_part, 0, part + 1)),
                         first.eq(Mux(last_part, 0, first + per)),
                         left.eq(left - per), last_part.eq(left - per <= per)]
        with m.If(s_valid & f_free):       # (a vector loads once the last part leaves)
            m.d.sync += [f_valid.eq(1), left.eq(s_n), last_part.eq(s_n <= per),
                         f_yaddr.eq(s_yaddr), f_eidx.eq(s_eidx)]
            m.d.sync += [f.eq(d) for f, d in zip(f_data, s_data, strict=True)]

        entry = [Signal(32, name=f"entry_{f}") for f in ENTRY_WORDS]
        elt = self._eltwise(m, task, is_elt, vec, vin.valid, st_in.ready, entry)
        # what CHECK decides on, in registers (no comparison in front of the walks' start):
        # a dimension is 0 (set with the task), an entry word is outside ENTRY_RANGES (set
        # as the word is loaded)
        empty = Signal()
        entry_bad = Signal()
        st_elems = Signal(range(L + 1))
        m.d.comb += st_elems.eq(Mux(is_elt, elt.count, n_part))
        m.d.comb += [st_in.payload.data.eq(Mux(is_elt, elt.data,
                                               Mux(is_red, Cat(*f_data)[:32], out))),
                     st_in.payload.count.eq(Mux(is_elt, elt.count,
                                                  n_part << task.out_shift))]
        with m.If(is_elt):
            # a vector of x waits in the datapath; a vector of b leaves once its last lanes
            # are computed, its results go to the store from the output register
            m.d.comb += [st_in.valid.eq(elt.valid), st_in.payload.addr.eq(elt.addr),
                         vin.ready.eq(~tag.kind[0] | elt.take)]
        with m.Else():
            m.d.comb += [st_in.valid.eq(f_valid),
                         st_in.payload.addr.eq(f_yaddr + ((f_eidx + first) << task.out_shift))]
            with m.If(is_red):
                # one result per row, at the row's output address, three cycles after its
                # last vector
                m.d.comb += [s_valid.eq(red_valid), vin.ready.eq(red.ready)]
            with m.Elif(is_pool):
                # one part of i8 results at the chunk's output address, once per window
                m.d.comb += [s_valid.eq(pool_valid),
                             vin.ready.eq(~last_tap | (pool_free & div_ready))]
            with m.Else():
                m.d.comb += [s_valid.eq(vin.valid), vin.ready.eq(f_free)]
        last_in = vin.valid & vin.ready & vec.tag.last & vec.last

        counters = {name: getattr(self, f"cnt_{name}") for name in COUNTERS}
        m.d.comb += self.busy.eq(0)
        # the store's flush comes from a register: high in the cycles of DRAIN after one
        # with nothing left in the pipeline (nothing enters it in DRAIN, so it stays
        # empty); in DONE the store holds no word. The wide OR of the stages' valid bits
        # is then not in front of the store's write request and the L1 arbitration.
        drained = Signal()
        m.d.sync += drained.eq(0)
        m.d.comb += store.flush.eq(drained)
        # The task's registers load in every idle cycle, not on ``start.valid`` (which
        # comes from the SEQ's issue across the die): only the state register waits on
        # it. Nothing looks at them while idle, and the start's payload is steady then
        # (the decode settled before a start is offered). The counters clear likewise: a
        # task's counts hold in its done cycle and the one after it. Their enable is
        # ``idle``, a flip-flop equal to the FSM being in IDLE, not a decode of the
        # state's bits (``fsm_state`` started 460-785 of the board's paths above 10 ns,
        # into these ~700 enables, ``docs/fpga.md``).
        idle = Signal(init=1)
        with m.If(idle):
            m.d.sync += [c.eq(0) for c in counters.values()]
            p = self.start.payload
            m.d.sync += [task.eq(p), cause.eq(p.cause), widx.eq(0), part.eq(0),
                         first.eq(0),
                         is_pool.eq(p.pool != 0), is_elt.eq(p.elt != 0),
                         is_red.eq(p.red != 0),
                         is_avg.eq(p.pool == POOL_OPS["avgpool"]),
                         is_held.eq((p.pool != 0) | (p.red != 0)),
                         use_table.eq(p.table & (p.in_shift == 0)),
                         empty.eq(Cat(*[d == 0 for d in p.dims]).any()),
                         entry_bad.eq(0)]
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.start.ready.eq(1)
                with m.If(self.start.valid):
                    m.d.sync += idle.eq(0)
                    with m.If((p.table & ~self.keep) | p.entry):
                        m.next = "TABLE"
                    with m.Else():
                        m.next = "CHECK"
            with m.State("TABLE"):
                m.d.comb += [self.busy.eq(1), self.table.ready.eq(1)]
                m.d.sync += counters["table"].eq(counters["table"] + 1)
                with m.If(self.table.valid):
                    m.d.sync += widx.eq(widx + 1)
                    with m.If(task.entry):
                        for j, reg in enumerate(entry):
                            with m.If(widx == j):
                                m.d.sync += reg.eq(self.table.payload)
                                if ENTRY_WORDS[j] in ENTRY_RANGES:
                                    with m.If(self._entry_out_of_range(
                                            ENTRY_WORDS[j], self.table.payload, task)):
                                        m.d.sync += entry_bad.eq(1)
                        with m.If(widx == len(entry) - 1):
                            m.next = "CHECK"
                    with m.Elif(widx == TABLE_WORDS - 1):
                        m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += self.busy.eq(1)
                with m.If((cause != 0) | empty):
                    m.next = "DONE"
                with m.Elif(is_elt & entry_bad):
                    m.d.sync += cause.eq(Cause.REQUANT)
                    m.next = "DONE"
                with m.Elif(is_elt):
                    m.d.comb += ewalk.start.valid.eq(1)
                    m.next = "WALK"
                with m.Elif(is_pool):
                    m.d.comb += pwalk.start.valid.eq(1)
                    m.next = "WALK"
                with m.Else():
                    m.d.comb += walk.start.valid.eq(1)
                    m.next = "WALK"
            with m.State("WALK"):
                m.d.comb += self.busy.eq(1)
                with m.If(last_in):
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                # an eltwise's last results may still be in its ALU or output register
                pending = (elt.busy | red.busy | red_valid | pool_valid | f_valid |
                           store_slice.o.valid)
                m.d.comb += self.busy.eq(1)
                m.d.sync += drained.eq(~pending)
                with m.If(~store.busy & ~pending):
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += [self.done.valid.eq(1), self.done.payload.error.eq(cause != 0),
                             self.done.payload.cause.eq(cause)]
                with m.If(self.done.ready):
                    m.d.sync += idle.eq(1)
                    m.next = "IDLE"

        with m.If(self.busy):
            m.d.sync += counters["busy"].eq(counters["busy"] + 1)
        with m.If(st_in.valid & st_in.ready):
            m.d.sync += counters["elems"].eq(counters["elems"] + st_elems)
        # the stall counters count a cycle late, from registers beside the reader and the
        # store (their stall follows the L1 grant: not a path across the unit to the
        # counters); a task's last stall is counted before its done
        stalled = {}
        for name, unit in (("stall_read", reader), ("stall_write", store)):
            stalled[name] = Signal(name=f"{name}_q")
            m.d.sync += stalled[name].eq(unit.stall)
            with m.If(stalled[name]):
                m.d.sync += counters[name].eq(counters[name] + 1)
        return m


    def _reduce(self, m, vec, free):
        """The last-axis reduction, a pipeline of three stages that move together.

        The vector's largest of its ``count`` bytes and the lowest lane holding it come
        from a tree of comparisons (lanes past ``count`` read -128 and, being above every
        valid lane, never win a tie): its first level into the first stage's register
        with the vector's element index of lane 0 (``tag.row + index * lanes``: a strided
        row is one element a run at index ``tag.row``, a contiguous row one run), whether it
        ends its row and the row's output address; the rest of the tree into the second
        stage's register; then the merge, the lane added to the index, into the row's
        running max and the index of its first occurrence (a later vector wins only when
        strictly larger).

        ``free``: the row result register takes a result this cycle. Returns a namespace:
        ``ready`` (the reader's vector may enter), ``take`` (to drive: it enters), ``done``
        (a row's result leaves the merge this cycle: ``max``, ``idx``, ``addr``) and
        ``busy`` (a stage holds a vector)."""
        L = self.lanes
        lw = L.bit_length() - 1
        tag = vec.tag

        def tree(nodes, levels, name):
            for level in range(levels):
                merged = []
                for i in range(0, len(nodes), 2):
                    (va, ia), (vb, ib) = nodes[i], nodes[i + 1]
                    v = Signal(signed(8), name=f"red_{name}{level}_{i // 2}")
                    j = Signal(range(L), name=f"red_{name}j{level}_{i // 2}")
                    m.d.comb += [v.eq(Mux(vb > va, vb, va)), j.eq(Mux(vb > va, ib, ia))]
                    merged.append((v, j))
                nodes = merged
            return nodes

        def select_max(nodes):
            """The tree's result over ``nodes`` in one level: every pair compared at once,
            the first node not below any other and above every earlier one wins (as in
            the tree, the lowest lane among equal maxima), its value and lane selected
            by the one-hot winner."""
            n = len(nodes)
            # later[i, o], o < i: node i is above node o (one comparison per pair)
            later = {(i, o): nodes[i][0] > nodes[o][0] for i in range(n) for o in range(i)}
            v = Signal(signed(8), name="red_sel_max")
            lane = Signal(range(L), name="red_sel_lane")
            vs, lanes = 0, 0
            for i in range(n):
                win = Signal(name=f"red_win{i}")
                cond = 1
                for o in range(i):
                    cond = cond & later[i, o]
                for o in range(i + 1, n):
                    cond = cond & ~later[o, i]
                m.d.comb += win.eq(cond)
                vs = vs | Mux(win, nodes[i][0].as_unsigned(), 0)
                lanes = lanes | Mux(win, nodes[i][1], 0)
            m.d.comb += [v.eq(vs), lane.eq(lanes)]
            return v, lane

        lanes = []
        for k in range(L):
            v = Signal(signed(8), name=f"red_v{k}")
            m.d.comb += v.eq(Mux(k < vec.count, vec.data[k], 0x80))
            lanes.append((v, Const(k, range(L))))
        first_levels = min(1, lw)     # the mask by ``count`` and one comparison
        part = tree(lanes, first_levels, "a")

        # the stages' registers: valid, row start, row end, output address, and the data
        meta = data.StructLayout({"valid": 1, "first": 1, "last": 1, "addr": len(tag.yaddr)})
        s1, s2 = Signal(meta, name="red_s1"), Signal(meta, name="red_s2")
        s1_part = [(Signal(signed(8), name=f"red_s1v{i}"), Signal(range(L), name=f"red_s1j{i}"))
                   for i in range(len(part))]
        s1_base = Signal(DIM_BITS, name="red_s1base")
        s2_max = Signal(signed(8), name="red_s2max")
        s2_base = Signal(DIM_BITS, name="red_s2base")
        s2_lane = Signal(range(L), name="red_s2lane")
        # the pipeline moves unless a row's result waits for the result register
        move = Signal(name="red_move")
        m.d.comb += move.eq(~(s2.valid & s2.last & ~free))
        out = SimpleNamespace(ready=move, take=Signal(name="red_take"),
                              done=Signal(name="red_done"),
                              max=Signal(signed(8), name="red_new_max"),
                              idx=Signal(DIM_BITS, name="red_new_idx"), addr=s2.addr,
                              busy=s1.valid | s2.valid)
        vmax, vlane = select_max(s1_part) if len(s1_part) <= 8 else \
            tree(s1_part, lw - first_levels, "b")[0]
        with m.If(move):
            m.d.sync += [s1.valid.eq(out.take), s1.first.eq(tag.first & (vec.index == 0)),
                         s1.last.eq(tag.kind[0] & vec.last), s1.addr.eq(tag.yaddr),
                         s1_base.eq(tag.row + (vec.index << lw))]
            m.d.sync += [r.eq(x) for pair, got in zip(s1_part, part, strict=True)
                         for r, x in zip(pair, got, strict=True)]
            m.d.sync += [s2.eq(s1), s2_max.eq(vmax), s2_base.eq(s1_base),
                         s2_lane.eq(vlane)]
        # the merge
        run_max = Signal(signed(8))
        run_idx = Signal(DIM_BITS)
        better = s2.first | (s2_max > run_max)
        m.d.comb += [out.max.eq(Mux(better, s2_max, run_max)),
                     out.idx.eq(Mux(better, (s2_base + s2_lane)[:DIM_BITS], run_idx)),
                     out.done.eq(s2.valid & s2.last & free)]
        with m.If(s2.valid & move):
            m.d.sync += [run_max.eq(out.max), run_idx.eq(out.idx)]
        return out

    def _eltwise(self, m, task, is_elt, vec, vec_valid, store_ready, entry):
        """The binary eltwise datapath: the vector of ``x`` kept, then per vector of ``b``
        ``elt_lanes`` lanes a cycle into the pipelined ALU (:class:`npu.cstl.eltalu.EltAlu`,
        the entry's words in ``entry``), its results gathered into a vector and that into an
        output register (``is_elt``: the task is an eltwise). Returns its ``data``,
        ``valid``, ``addr`` and ``count`` (the store's payload), ``take`` (the vector of
        ``b`` leaves: its last lanes enter the ALU this cycle) and ``busy`` (results still
        in the ALU or the output register)."""
        L, P = self.lanes, self.elt_lanes
        e = dict(zip(ENTRY_WORDS, entry, strict=True))
        tag = vec.tag
        is_b, spread, n = tag.kind[0], tag.first, tag.lane
        bits = max(1, (L - 1).bit_length())
        a_reg = [Signal(8, name=f"elt_a{k}") for k in range(L)]
        lane = Signal(range(L + 1))
        take_a = Signal()
        m.d.comb += take_a.eq(is_elt & ~is_b)

        def byte(k):   # a one-byte run spread over the lanes
            return Mux(spread, vec.data[0], vec.data[k])

        # what travels with a group of lanes through the ALU: its first lane, whether it
        # ends its vector, and the vector's output address and element count
        meta = data.StructLayout({"base": bits, "last": 1, "addr": len(tag.yaddr),
                                  "count": len(n)})
        m.submodules.elt_alu = alu = EltAlu(lanes=P, tag_width=meta.size)
        a_lanes, b_lanes = Array(a_reg), Array([byte(k) for k in range(L)])
        for j in range(P):   # lanes past the vector's last wrap around: nothing keeps them
            sel = (lane + j)[:bits]
            m.d.comb += [alu.i.a[j].eq(a_lanes[sel]), alu.i.b[j].eq(b_lanes[sel])]
        m.d.comb += [alu.op.eq(task.elt)] + [getattr(alu.entry, f).eq(e[f]) for f in e]
        i_meta, o_meta = data.View(meta, alu.i.tag), data.View(meta, alu.o_tag)
        last = Signal()
        m.d.comb += [last.eq(lane + P >= n), i_meta.base.eq(lane), i_meta.last.eq(last),
                     i_meta.addr.eq(tag.yaddr), i_meta.count.eq(n)]

        # the results of a vector's groups gather in y_reg; with its last group the whole
        # vector goes to the output register until the store takes it. The ALU stalls
        # only when a vector's last group leaves it and the output register is still full.
        y_reg = [Signal(8, name=f"elt_y{k}") for k in range(L)]
        o_data = Signal(8 * L, name="elt_o_data")
        o_valid = Signal(name="elt_o_valid")
        o_addr = Signal.like(tag.yaddr, name="elt_o_addr")
        o_count = Signal.like(n, name="elt_o_count")
        free, adv, step, take = Signal(), Signal(), Signal(), Signal()
        m.d.comb += [free.eq(~o_valid | store_ready),
                     adv.eq(~(alu.o_valid & o_meta.last) | free),
                     step.eq(is_elt & is_b & vec_valid & adv),
                     take.eq(step & last),
                     alu.en.eq(adv), alu.i_valid.eq(step)]
        with m.If(o_valid & store_ready):
            m.d.sync += o_valid.eq(0)
        with m.If(step):
            m.d.sync += lane.eq(Mux(last, 0, lane + P))
        merged = [Mux(o_meta.base == k - k % P, alu.o[k % P], y_reg[k]) for k in range(L)]
        with m.If(alu.o_valid & adv):
            m.d.sync += [y_reg[k].eq(merged[k]) for k in range(L)]
            with m.If(o_meta.last):
                m.d.sync += [o_valid.eq(1), o_data.eq(Cat(*merged)), o_addr.eq(o_meta.addr),
                             o_count.eq(o_meta.count)]
        with m.If(take_a & vec_valid):
            m.d.sync += [a_reg[k].eq(byte(k)) for k in range(L)]

        return SimpleNamespace(data=o_data, valid=o_valid, addr=o_addr, count=o_count,
                               take=take, busy=alu.busy | o_valid)

    @staticmethod
    def _entry_out_of_range(field, word, task):
        """The eltwise entry's ``field``, the 32-bit ``word``, is outside
        ``npu.cstl.model.ENTRY_RANGES`` for the task's operation (mul does not read the
        fields of ``MUL_UNUSED``): the task is refused with ``REQUANT``."""
        low_v, high_v = ENTRY_RANGES[field]
        value = word.as_signed()
        out_of = (value < low_v) | (value > high_v)
        if field in MUL_UNUSED:
            out_of = out_of & (task.elt != ELT_OPS["mul"])
        return out_of


class CstlUnit(wiring.Component):
    """The CSTL as the engine sees it: shadow registers
    (:class:`npu.cstl.regs.CstlRegisters`) in front of :class:`Cstl`.

    The sequencer pulses ``clear``, sends the task's register writes on ``write`` (always
    ready; they reach the shadow registers a cycle later, through registers beside them,
    :data:`npu.shadow.WRITE_REGISTERS`), then a transfer on ``start`` (its payload:
    :class:`Cstl`'s ``keep``; taken :data:`START_WAIT` + 1 = ``CstlRegisters.LATENCY + 3``
    cycles after the last write at the earliest: the writes' register and the decode's
    stages, the decode registered twice; ready from then on whenever the core is idle);
    the table follows on ``table`` (when the decode says ``task.table`` and ``keep`` is
    low) and the result comes on ``done``. Ports and counters as for :class:`Cstl`.
    """

    def __init__(self, *, lanes, depth, elt_lanes=1):
        self.core = Cstl(lanes=lanes, depth=depth, elt_lanes=elt_lanes)
        self.regs = CstlRegisters()
        self.lanes, self.depth, self.elt_lanes = lanes, depth, elt_lanes
        super().__init__({
            "clear": In(1),
            "write": In(stream.Signature(write_layout())),
            "start": In(stream.Signature(1)),
            **_signature(depth, 8 * lanes),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = regs = self.regs
        m.submodules.core = core = self.core
        # the sequencer's strobes, registered in the shadow registers (WRITE_REGISTERS)
        m.d.comb += regs.clear.eq(self.clear)
        wiring.connect(m, wiring.flipped(self.write), regs.write)
        # two registers between the decode and the core's start payload: the decode sits
        # beside the shadow registers, the core's task register beside its datapath, and
        # the wire between them (across the unit) gets a cycle of its own
        start_after_decode(m, self.start, core.start, regs.task,
                           self.clear | self.write.valid,
                           latency=regs.LATENCY,
                           registers=DECODE_REGISTERS)
        m.d.comb += core.keep.eq(self.start.payload)
        wiring.connect(m, wiring.flipped(self.table), core.table)
        wiring.connect(m, core.done, wiring.flipped(self.done))
        wiring.connect(m, core.l1_rd, wiring.flipped(self.l1_rd))
        wiring.connect(m, core.l1_wr, wiring.flipped(self.l1_wr))
        m.d.comb += self.busy.eq(core.busy)
        m.d.comb += [getattr(self, f"cnt_{n}").eq(getattr(core, f"cnt_{n}")) for n in COUNTERS]
        return m
