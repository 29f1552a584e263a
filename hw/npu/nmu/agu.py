"""The NMU's address generation: loop nests (:class:`NmuAgu`) and the run reader.

A *run* is ``length`` contiguous bytes of L1 (or, for a padded convolution tap, ``length``
bytes that read as the input zero point, with no memory access). The AGU walks a task's
loop nest and issues one run per cycle; the run reader turns runs into *vectors* of
``lanes`` bytes (one L1 word) realigned to the run's start, one per cycle, the last one
of a run partial. No im2col copy: a convolution tap is one run of ``Cin`` bytes read in
place (NHWC), a padded tap no read at all.

Loop orders (the Python models are :func:`npu.nmu.model.weight_runs`, ``bias_runs``,
``act_runs``):

* weights of the tile at output channel ``n0``: ``for kh, kw, ci``: ``min(cols, Cout-n0)``
  bytes at ``w + kh*ws0 + kw*ws1 + ci*ws2 + n0``; tag: weight buffer row
  ``(kh*KW + kw)*Q + ci // lanes``, lane ``ci % lanes``;
* bias of the tile: ``for c``: 4 bytes at ``b + 4*(n0 + c)*bstride``; tag: column ``c``;
* activations: ``for b, oh, ow, kh, kw``: ``Cin`` bytes at
  ``x + b*xs0 + ih*xs1 + iw*xs2`` with ``ih = oh*sh - pad_top + kh*dh`` (``iw`` alike), a
  pad run when outside the input; tag: the tap's first weight row, first / last tap of
  the pixel, the output byte address of the pixel's channel ``n0``, the tile's valid
  columns (``lane``) and its index (``tile``).

Every run's tag also names its ``kind`` (the mode that made it), so that the consumer can
route vectors of consecutive phases without draining the reader in between, and the
weight ``bank`` the tile uses (the AGU's ``bank`` input at ``start``; 0 in an NMU with a
single weight bank).

Run reader protocol and timing
------------------------------
A run command is taken on ``cmd`` when the previous run's last word is being requested
(back-to-back runs, no bubble). Each cycle one word of the current run is requested on
the L1 read client port (``req``; the access happens when ``gnt``, then ``go``); its
data show on the port one cycle later and stay until the next read, so the word waits in
a *pending* queue of two entries (each keeps its word in a register from the cycle its
data show) until the window takes it; a word is requested while the queue has room at
the start of the cycle, so the consumer's ready does not reach the request. The window
holds up to ``2*lanes`` bytes of one run; a vector leaves when it holds ``lanes`` bytes or
the run's last bytes. A word of a new run enters only an empty window, so a vector never
mixes two runs. Aligned runs stream one vector per cycle; an unaligned run costs one
extra word (a cycle). A run that starts in the word the previous run ended in (contiguous
rows, neighbouring taps) takes that word from the port, which still holds it, without a
read: it saves the L1 access (the port is shared with the engine's other units), not the
cycle.
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from npu.bus.ports import read_client_signature

__all__ = ["NmuAgu", "RunReader", "run_layout", "tag_layout", "task_fields",
           "task_fields_layout", "times_out_bytes", "vector_layout"]

ADDR = 32
LEN = 16


def tag_layout():
    """What a run carries to its vectors (meaning depends on the phase, see the module)."""
    return data.StructLayout({"kind": 2, "row": 16, "lane": 8, "first": 1, "last": 1,
                              "tile": 8, "yaddr": ADDR, "bank": 1})


def run_layout():
    return data.StructLayout({"addr": ADDR, "length": LEN, "pad": 1, "tag": tag_layout()})


def vector_layout(lanes):
    """A vector: ``count`` valid bytes (the rest 0), its index in the run, last of the run."""
    return data.StructLayout({"data": data.ArrayLayout(8, lanes), "count": range(lanes + 1),
                              "index": LEN, "last": 1, "tag": tag_layout()})


class RunReader(wiring.Component):
    """Runs of bytes in L1 -> vectors of ``lanes`` bytes, realigned to each run's start.

    Parameters
    ----------
    lanes : int
        Bytes per L1 word (a power of two).
    depth : int
        L1 words.
    skid : bool
        Take commands through a skid register: ``cmd.ready`` is then a flip-flop instead of
        a function of this cycle's grant and window fill (cuts that path out of the run
        source's step; the next command waits in the register while a run of two or more
        words is read, so the source may finish a cycle earlier).

    Attributes
    ----------
    cmd : stream of :func:`run_layout`, in
    o : stream of :func:`vector_layout`, out
    rd : L1 read client port (:func:`npu.bus.ports.read_client_signature`)
    pad_byte : Signal(8), in
        What a pad run reads as (the input zero point).
    busy : Signal, out
        A run is being read or waits in the skid entry, or bytes are still in the window.
    stall : Signal, out
        A read was requested and not granted this cycle.
    """

    def __init__(self, *, lanes, depth, skid=False):
        if lanes < 1 or lanes & (lanes - 1):
            raise ValueError(f"lanes must be a power of two, not {lanes!r}")
        self.lanes, self.depth, self.skid = lanes, depth, skid
        super().__init__({
            "cmd": In(stream.Signature(run_layout())),
            "o": Out(stream.Signature(vector_layout(lanes))),
            "rd": Out(read_client_signature(depth, 8 * lanes)),
            "pad_byte": In(8),
            "busy": Out(1),
            "stall": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.lanes
        lw = W.bit_length() - 1

        # --- issue side: one word of the current run per cycle ---
        act = Signal()
        waddr = Signal(ADDR - lw)
        remaining = Signal(LEN)
        skip = Signal(range(W))
        cur_pad = Signal()
        cur_tag = Signal(tag_layout())
        first_word = Signal()

        take = Signal(range(W + 1))
        room = Signal(range(W + 1))
        m.d.comb += room.eq(W - skip)
        m.d.comb += take.eq(Mux(remaining < room, remaining, room))
        last_word = Signal()
        m.d.comb += last_word.eq(remaining <= room)

        # Pending words (issued, not yet in the window): a queue of three entries, the
        # oldest (``p``, the one the window looks at), the next (``q``) and a spare
        # (``r``). A word may be issued while the queue has room for it at the start of the
        # cycle, whether or not the window takes the oldest this cycle: the consumer's
        # ready (which moves the window) does not reach the L1 request and grant. The port
        # shows a word's data in the cycle after its issue (``fresh``) and holds it only
        # until the next read, so each entry keeps its word in a register of its own from
        # then on; the window takes a word only from that register (never in its fresh
        # cycle), so no path runs from the block RAM's output through the window's shifts.
        # A word thus waits two cycles from its issue; the third entry keeps a word issued
        # per cycle while the two before it wait.
        def entry(name):
            return SimpleNamespace(
                valid=Signal(name=f"{name}_valid"), skip=Signal(range(W), name=f"{name}_skip"),
                take=Signal(range(W + 1), name=f"{name}_take"), last=Signal(name=f"{name}_last"),
                first=Signal(name=f"{name}_first"), pad=Signal(name=f"{name}_pad"),
                tag=Signal(tag_layout(), name=f"{name}_tag"), fresh=Signal(name=f"{name}_fresh"),
                data=Signal(8 * W, name=f"{name}_data"))

        pe, qe, re = entry("p"), entry("q"), entry("r")
        queue = (pe, qe, re)
        pend = pe.valid
        p_skip, p_take, p_last, p_first, p_pad, p_tag = (
            pe.skip, pe.take, pe.last, pe.first, pe.pad, pe.tag)

        consume = Signal()
        can_issue = Signal()
        issue = Signal()
        m.d.comb += can_issue.eq(act & ~re.valid)
        # The port holds the last word read until the next read: a run that starts in the
        # word the previous run ended in takes it from there without a read. Forgotten
        # whenever the reader is idle (L1 may change between tasks). ``hit`` (the word at
        # ``waddr`` is the one the port holds) is a register, worked out as a run is loaded,
        # so that no address comparison lies between ``waddr`` and the request.
        last_addr = Signal(ADDR - lw)
        last_ok = Signal()
        hit = Signal()
        m.d.comb += [
            self.rd.req.eq(can_issue & ~cur_pad & ~hit),
            self.rd.addr.eq(waddr),
            self.rd.go.eq(self.rd.req & self.rd.gnt),
            issue.eq(can_issue & (cur_pad | hit | self.rd.gnt)),
            self.stall.eq(self.rd.req & ~self.rd.gnt),
        ]
        with m.If(self.rd.go):
            m.d.sync += [last_addr.eq(waddr), last_ok.eq(1)]
        with m.Elif(~self.busy):
            m.d.sync += last_ok.eq(0)
        with m.If(issue):
            m.d.sync += [waddr.eq(waddr + 1), remaining.eq(remaining - take), skip.eq(0),
                         first_word.eq(0)]
            with m.If(last_word):
                m.d.sync += act.eq(0)

        # the queue: an entry's word from the port in its fresh cycle (a hit's too: no read
        # lies between the read of the word it names and the cycle after its issue), kept
        # in its register after that; the entries are a prefix of ``queue``, the word issued
        # this cycle enters behind what stays
        def word_of(e):
            return Mux(e.fresh, self.rd.data, e.data)

        def fill_entry(e):
            return [e.valid.eq(1), e.skip.eq(skip), e.take.eq(take), e.last.eq(last_word),
                    e.first.eq(first_word), e.pad.eq(cur_pad), e.tag.eq(cur_tag),
                    e.fresh.eq(1)]

        def move_entry(dst, src):
            return [dst.valid.eq(src.valid), dst.skip.eq(src.skip), dst.take.eq(src.take),
                    dst.last.eq(src.last), dst.first.eq(src.first), dst.pad.eq(src.pad),
                    dst.tag.eq(src.tag), dst.data.eq(word_of(src))]

        for e in queue:
            m.d.sync += [e.data.eq(word_of(e)), e.fresh.eq(0)]
        with m.If(consume):
            m.d.sync += move_entry(pe, qe) + move_entry(qe, re) + [re.valid.eq(0)]
            with m.If(issue):
                # the queue after the shift holds the entries after p: q moved to p
                with m.If(qe.valid):
                    m.d.sync += fill_entry(qe)
                with m.Else():
                    m.d.sync += fill_entry(pe)
        with m.Elif(issue):
            with m.If(qe.valid):
                m.d.sync += fill_entry(re)
            with m.Elif(pe.valid):
                m.d.sync += fill_entry(qe)
            with m.Else():
                m.d.sync += fill_entry(pe)

        # Command skid register (``skid``): ``cmd.ready`` is a flip-flop (no free skid
        # entry), so the run source's step does not wait on this cycle's grant and window
        # fill. A command goes straight into the current run when that is free, into the
        # skid entry otherwise; the current run reloads from the skid entry first. Without
        # it, a command is taken only when the current run ends (``nxt_ok`` stays 0).
        nxt = Signal(run_layout())
        nxt_ok = Signal()
        load = Signal()
        m.d.comb += load.eq(~act | (issue & last_word))
        m.d.comb += self.cmd.ready.eq(~nxt_ok if self.skid else load)
        take_cmd = self.cmd.valid & self.cmd.ready
        src = Signal(run_layout())
        m.d.comb += src.eq(Mux(nxt_ok, nxt, self.cmd.payload))
        with m.If(load & (nxt_ok | take_cmd)):
            m.d.sync += [act.eq(src.length != 0), waddr.eq(src.addr[lw:]),
                         skip.eq(Mux(src.pad, 0, src.addr[:lw])), remaining.eq(src.length),
                         cur_pad.eq(src.pad), cur_tag.eq(src.tag), first_word.eq(1)]
            # the new run's first word is held when it is the word read this cycle, or (no
            # read this cycle) the word the port already holds
            m.d.sync += hit.eq(Mux(self.rd.go, src.addr[lw:] == waddr,
                                   last_ok & self.busy & (src.addr[lw:] == last_addr)))
        with m.Elif(issue):
            # the next word of a run is never the one the port holds: that is this word (or,
            # in a pad run, where ``hit`` is not looked at, any word)
            m.d.sync += hit.eq(0)
        with m.If(load & nxt_ok):
            m.d.sync += nxt_ok.eq(0)
        with m.Elif(take_cmd & ~load):
            m.d.sync += nxt_ok.eq(1)
        with m.If(~nxt_ok):  # (kept only when nxt_ok is set: no wait on ``load`` here)
            m.d.sync += nxt.eq(self.cmd.payload)

        # --- window side ---
        win = Signal(16 * W)
        fill = Signal(range(2 * W + 1))
        wend = Signal()
        wtag = Signal(tag_layout())
        vidx = Signal(LEN)

        # what the consumer and the placement look at, as registers set from the fill level
        # and ``wend`` they are about to take (``fill_next``, ``wend_next`` below): a vector
        # is out, at least a whole word is in the window, at most one is (no comparison of
        # ``fill`` between it and the consumer's ready, which moves the window)
        o_valid = Signal()
        full = Signal()                 # fill >= W
        at_most = Signal(init=1)        # fill <= W
        empty = Signal(init=1)          # fill == 0
        count = Signal(range(W + 1))
        m.d.comb += count.eq(Mux(full, W, fill))
        out_last = Signal()
        m.d.comb += out_last.eq(wend & at_most)
        m.d.comb += [
            self.o.valid.eq(o_valid),
            self.o.payload.count.eq(count),
            self.o.payload.index.eq(vidx),
            self.o.payload.last.eq(out_last),
            self.o.payload.tag.eq(wtag),
        ]
        for k in range(W):
            m.d.comb += self.o.payload.data[k].eq(win[8 * k:8 * k + 8])
        emit = Signal()
        m.d.comb += emit.eq(self.o.valid & self.o.ready)

        # The fill level and window after this cycle's emit, for both cases: what the
        # next word's placement needs is computed before ``emit`` (the consumer's ready)
        # is known, which then only selects.
        f_emit = Signal(range(2 * W + 1))
        m.d.comb += f_emit.eq(Mux(full, fill - W, 0))
        f_after = Signal(range(2 * W + 1))
        win_after = Signal(16 * W)
        m.d.comb += [f_after.eq(Mux(emit, f_emit, fill)),
                     win_after.eq(Mux(emit, win >> (8 * W), win))]

        word = Signal(8 * W)
        pad_word = Signal(8 * W)
        m.d.comb += pad_word.eq(Const(0, 8 * W) | self.pad_byte.replicate(W))
        m.d.comb += word.eq(Mux(p_pad, pad_word, pe.data))
        shifted = Signal(8 * W)
        m.d.comb += shifted.eq(word >> (p_skip * 8))
        # bytes 0 .. p_take-1: one comparison of p_take per byte (a 8*W-bit shift and
        # subtraction would put a carry chain across the word between p_take and the window)
        mask = Signal(8 * W)
        m.d.comb += mask.eq(Cat(*[(p_take > k).replicate(8) for k in range(W)]))
        # the pending word fits the window after this cycle's emit (``fits_e``) or
        # without one (``fits_n``); a run's first word needs the window empty. After an
        # emit at most one word is left (``f_emit`` is 0 unless ``full``, then ``fill - W``,
        # and ``fill <= 2 * W``), so any other word fits, and "empty after the emit" is
        # ``at_most``: from registers, no comparison of ``fill`` in front of ``consume``
        fits_e, fits_n = Signal(), Signal()
        m.d.comb += [fits_e.eq(~p_first | at_most),
                     fits_n.eq(Mux(p_first, empty, fill + p_take <= 2 * W)),
                     consume.eq(pend & ~pe.fresh & Mux(emit, fits_e, fits_n))]

        fill_next = Signal.like(fill)
        wend_next = Signal()
        m.d.comb += [fill_next.eq(Mux(consume, f_after + p_take, f_after)),
                     wend_next.eq(Mux(consume & p_last, 1, wend & ~(emit & out_last)))]
        m.d.sync += [win.eq(win_after), fill.eq(fill_next), wend.eq(wend_next),
                     o_valid.eq((fill_next >= W) | (wend_next & (fill_next != 0))),
                     full.eq(fill_next >= W), at_most.eq(fill_next <= W),
                     empty.eq(fill_next == 0)]
        with m.If(emit):
            m.d.sync += vidx.eq(vidx + 1)
        with m.If(consume):
            placed_e, placed_n = Signal(16 * W), Signal(16 * W)
            m.d.comb += [placed_e.eq((shifted & mask) << (f_emit * 8)),
                         placed_n.eq((shifted & mask) << (fill * 8))]
            m.d.sync += win.eq(Mux(emit, (win >> (8 * W)) | placed_e, win | placed_n))
            with m.If(p_first):
                m.d.sync += [vidx.eq(0), wtag.eq(p_tag)]

        m.d.comb += self.busy.eq(act | nxt_ok | pend | (fill != 0))
        return m


def task_fields_layout():
    """The loop bounds, addresses and strides the AGU walks (from the decoded task)."""
    return data.StructLayout({
        "batch": 16, "h": 16, "w": 16, "cin": 16, "kh": 16, "kw": 16, "cout": 16,
        "oh": 16, "ow": 16,
        "x_addr": ADDR, "xs": data.ArrayLayout(ADDR, 3),
        "w_addr": ADDR, "ws": data.ArrayLayout(ADDR, 3),
        "has_bias": 1, "b_addr": ADDR, "b_stride": ADDR, "pix_bias": 1, "b_mstride": ADDR,
        "y_addr": ADDR, "ys": data.ArrayLayout(ADDR, 3),
        "out_bytes": 3, "raw": 1,
        "pad_top": signed(16), "pad_left": signed(16),
        "stride_h": 16, "stride_w": 16, "dil_h": 16, "dil_w": 16,
        "mats": 16, "x_mat": ADDR, "w_mat": ADDR, "y_mat": ADDR,  # batched matmul
        "cause": 4,  # npu.nmu.model.Cause found by the register decode (0: none)
    })


def times_out_bytes(value, out_bytes):
    """``value * out_bytes`` (mod 2**32) for the element sizes a task has (``out_bytes``
    1, 2 or 4, as the register decode gives it): a selection of shifts by the size's bits,
    no multiplier."""
    return Mux(out_bytes[2], value << 2, Mux(out_bytes[1], value << 1, value))[:ADDR]


def task_fields(task, cause=0):
    """:func:`task_fields_layout` constant of a model task (:class:`npu.nmu.model.NmuTask`)."""
    if task is None:
        return task_fields_layout().const({"cause": cause})
    return task_fields_layout().const({
        "cause": cause,
        "batch": task.batch, "h": task.h, "w": task.w, "cin": task.cin, "kh": task.kh,
        "kw": task.kw, "cout": task.cout, "oh": task.oh, "ow": task.ow,
        "x_addr": task.x_addr, "xs": list(task.xs), "w_addr": task.w_addr, "ws": list(task.ws),
        "has_bias": int(task.has_bias), "b_addr": task.b_addr, "b_stride": task.b_stride,
        "pix_bias": int(task.pix_bias), "b_mstride": task.b_mstride,
        "y_addr": task.y_addr, "ys": list(task.ys), "out_bytes": task.out_bytes,
        "raw": int(task.out_elem == "i32"), "pad_top": task.pads[0], "pad_left": task.pads[1],
        "stride_h": task.strides[0], "stride_w": task.strides[1], "dil_h": task.dils[0],
        "dil_w": task.dils[1], "mats": task.mats, "x_mat": task.x_mat, "w_mat": task.w_mat,
        "y_mat": task.y_mat,
    })


class NmuAgu(wiring.Component):
    """Loop nests of one NMU tile: weight rows, bias words or activation taps, one run per cycle.

    Parameters
    ----------
    lanes : int
        Reduction lanes (L1 word bytes).
    cols : int
        Output channels per tile.

    Attributes
    ----------
    task : Signal(task_fields_layout()), in
        Held by the caller for the whole task.
    n0 : Signal(16), in
        First output channel of the tile.
    tile : Signal(8), in
        Index of the tile (its row of the requantisation table).
    bank : Signal(1), in
        Weight bank of the tile (double-buffered weights), copied into every run's tag;
        sampled on ``start``.
    mode : Signal(2), in
        ``MODE_W`` weights, ``MODE_B`` bias, ``MODE_A`` activations; sampled on ``start``.
    start : Signal, in
        Pulse: walk the loop nest of ``mode``.
    cmd : stream of :func:`run_layout`, out
    busy : Signal, out
        From ``start`` until the last run has been handed over.
    """

    MODE_W, MODE_B, MODE_A = 0, 1, 2

    def __init__(self, *, lanes, cols):
        self.lanes, self.cols = lanes, cols
        super().__init__({
            "task": In(task_fields_layout()),
            "n0": In(16),
            "tile": In(8),
            "bank": In(1),
            "mode": In(2),
            "start": In(1),
            "cmd": Out(stream.Signature(run_layout())),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        t = self.task
        W = self.lanes
        lw = W.bit_length() - 1
        mode = Signal(2)
        # counters, outermost first: (b, oh, ow, kh, kw) for activations, (kh, kw, ci) for
        # weights, (c) for the bias
        b, oy, ox, ky, kx, ci = (Signal(16, name=n) for n in ("b", "oy", "ox", "ky", "kx", "ci"))
        q = Signal(16)  # chunks per tap: ceil(cin / lanes)
        m.d.comb += q.eq((t.cin + (W - 1)) >> lw)
        ncols = Signal(16)
        left = Signal(16)
        m.d.comb += left.eq(t.cout - self.n0)
        m.d.comb += ncols.eq(Mux(left > self.cols, self.cols, left))
        tap = Signal(16)
        m.d.comb += tap.eq(ky * t.kw + kx)

        # gemm bias of shape [M, N]: each pixel's taps follow its ncols bias words
        pb = Signal()
        bc = Signal(16)
        bank = Signal()
        with m.If(self.start):
            m.d.sync += [self.busy.eq(1), mode.eq(self.mode), bc.eq(0), bank.eq(self.bank),
                         pb.eq(t.pix_bias & (self.mode == self.MODE_A))]
            m.d.sync += [c.eq(0) for c in (b, oy, ox, ky, kx, ci)]

        p = self.cmd.payload
        m.d.comb += [p.tag.kind.eq(mode), p.tag.bank.eq(bank)]
        step = Signal()
        m.d.comb += [self.cmd.valid.eq(self.busy), step.eq(self.cmd.valid & self.cmd.ready)]

        def wrap(counters_bounds):
            """Increment a nest of (counter, bound), innermost last; True when it ends."""
            carry = Const(1)
            for c, bound in reversed(counters_bounds):
                with m.If(carry):
                    m.d.sync += c.eq(Mux(c + 1 == bound, 0, c + 1))
                carry = carry & (c + 1 == bound)
            return carry

        with m.Switch(mode):
            with m.Case(self.MODE_W):
                m.d.comb += [
                    p.addr.eq(t.w_addr + ky * t.ws[0] + kx * t.ws[1] + ci * t.ws[2] + self.n0),
                    p.length.eq(ncols), p.pad.eq(0),
                    p.tag.row.eq(tap * q + (ci >> lw)), p.tag.lane.eq(ci[:lw] if lw else 0),
                ]
                with m.If(step):
                    with m.If(wrap([(ky, t.kh), (kx, t.kw), (ci, t.cin)])):
                        m.d.sync += self.busy.eq(0)
            with m.Case(self.MODE_B):
                m.d.comb += [p.addr.eq(t.b_addr + ((self.n0 + ci) * t.b_stride << 2)),
                             p.length.eq(4), p.pad.eq(0), p.tag.lane.eq(ci)]
                with m.If(step):
                    with m.If(wrap([(ci, ncols)])):
                        m.d.sync += self.busy.eq(0)
            with m.Default():
                ih = Signal(signed(34))
                iw = Signal(signed(34))
                m.d.comb += [ih.eq(oy * t.stride_h - t.pad_top + ky * t.dil_h),
                             iw.eq(ox * t.stride_w - t.pad_left + kx * t.dil_w)]
                pad = (ih < 0) | (ih >= t.h) | (iw < 0) | (iw >= t.w)
                m.d.comb += [
                    p.addr.eq(t.x_addr + b * t.xs[0] + ih[:ADDR] * t.xs[1] + iw[:ADDR] * t.xs[2]),
                    p.length.eq(t.cin), p.pad.eq(pad),
                    p.tag.row.eq(tap * q),
                    p.tag.first.eq(tap == 0),
                    p.tag.last.eq((ky + 1 == t.kh) & (kx + 1 == t.kw)),
                    p.tag.yaddr.eq(t.y_addr + t.out_bytes * (b * t.ys[0] + oy * t.ys[1]
                                                             + ox * t.ys[2] + self.n0)),
                    p.tag.lane.eq(ncols), p.tag.tile.eq(self.tile),
                ]
                with m.If(pb):
                    m.d.comb += [
                        p.addr.eq(t.b_addr + ((oy * t.b_mstride + (self.n0 + bc) * t.b_stride)
                                              << 2)),
                        p.length.eq(4), p.pad.eq(0), p.tag.kind.eq(self.MODE_B),
                        p.tag.lane.eq(bc),
                    ]
                    with m.If(step):
                        m.d.sync += bc.eq(bc + 1)
                        with m.If(bc + 1 == ncols):
                            m.d.sync += [bc.eq(0), pb.eq(0)]
                with m.Elif(step):
                    with m.If(wrap([(b, t.batch), (oy, t.oh), (ox, t.ow), (ky, t.kh),
                                    (kx, t.kw)])):
                        m.d.sync += self.busy.eq(0)
                    with m.Elif((ky + 1 == t.kh) & (kx + 1 == t.kw)):
                        m.d.sync += pb.eq(t.pix_bias)  # the next pixel's bias first
        return m
