"""The NMU's loop-nest AGU with addresses stepped by strides instead of multiplied.

:class:`SteppedAgu` walks the same loop nests as :class:`npu.nmu.agu.NmuAgu` (same ports,
same runs, cycle for cycle: ``tests/hw/test_nmu_agu_step.py`` runs the two in lock-step
and both against the model) without a multiplier between its counters and its run
command. ``NmuAgu`` computes every run's address from its counters,
``x + b*xs0 + ih*xs1 + iw*xs2`` with ``ih = oy*stride_h - pad_top + ky*dil_h``: two
products in series and four carry chains in one cycle, the NMU's critical path on the
ECP5 (42 ns, ``docs/fpga.md``). Here each loop level keeps its partial sum in a register
(the address of the first run of the current iteration of that level) and a step adds a
per-level increment; the increments (``stride_h*xs1``, ``dil_h*xs1``, ``stride_w*xs2``,
``dil_w*xs2``; the output strides times the element size, which are shifts) are products
of the task's fields, registered every cycle from the inputs, which the caller holds from
the ``start`` cycle on (as for ``NmuAgu``), so they are ready when the first run is out.
The tile's bias offset ``4*n0*b_stride`` is stepped by ``4*cols*b_stride`` as ``n0``
moves to the next tile. The activations' base address (``x - pad_top*xs1 -
pad_left*xs2``) takes two stages: ``task`` must be held from the cycle before a ``start``
in ``MODE_A`` (``n0`` from the ``start`` cycle, as before).

All address arithmetic is modulo 2**32, as in ``NmuAgu`` (a negative ``ih`` of a pad tap
gives the same address bits; the reader does not read pad runs).
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from npu.nmu.agu import ADDR, NmuAgu, run_layout, task_fields_layout, times_out_bytes

__all__ = ["SteppedAgu"]


class SteppedAgu(wiring.Component):
    """Loop nests of one NMU tile, one run per cycle, addresses stepped by strides.

    The interface, loop orders and run tags are those of :class:`npu.nmu.agu.NmuAgu`.

    Parameters
    ----------
    lanes : int
        Reduction lanes (L1 word bytes).
    cols : int
        Output channels per tile.

    Attributes
    ----------
    task : Signal(task_fields_layout()), in
        Held by the caller from the ``start`` cycle (from the cycle before, in ``MODE_A``)
        until ``busy`` falls.
    n0, tile, bank, mode, start : in
        As for ``NmuAgu`` (``n0`` held like ``task``). ``n0`` moves only to 0 or by
        ``cols`` (the next tile): the bias offset is stepped from its previous value.
    cmd : stream of :func:`npu.nmu.agu.run_layout`, out
    busy : Signal, out
    """

    MODE_W, MODE_B, MODE_A = NmuAgu.MODE_W, NmuAgu.MODE_B, NmuAgu.MODE_A

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
        b, oy, ox, ky, kx, ci = (Signal(16, name=n) for n in ("b", "oy", "ox", "ky", "kx", "ci"))
        q = Signal(16)  # chunks per tap: ceil(cin / lanes)
        m.d.comb += q.eq((t.cin + (W - 1)) >> lw)
        # channels of the tile, registered every cycle from the held inputs (ready from the
        # cycle after ``start``, when the first run is out)
        ncols = Signal(16)
        left = Signal(16)
        m.d.comb += left.eq(t.cout - self.n0)
        ncols_now = Signal(16)   # the tile's channels from the inputs as they are
        m.d.comb += ncols_now.eq(Mux(left > self.cols, self.cols, left))
        m.d.sync += ncols.eq(ncols_now)

        def product(name, value):
            """A product of held inputs, registered every cycle (mod 2**32)."""
            reg = Signal(ADDR, name=name)
            m.d.sync += reg.eq(value)
            return reg

        inc_oy = product("inc_oy", t.stride_h * t.xs[1])
        inc_ky = product("inc_ky", t.dil_h * t.xs[1])
        inc_ox = product("inc_ox", t.stride_w * t.xs[2])
        inc_kx = product("inc_kx", t.dil_w * t.xs[2])
        # the activations' base, x - pad_top*xs1 - pad_left*xs2, in two stages (the two
        # products, then their sum): it is ready two cycles after the task is
        x_base = product("x_base", t.x_addr - product("x_pad_top", t.pad_top * t.xs[1])
                         - product("x_pad_left", t.pad_left * t.xs[2]))
        # the output's element size is 1, 2 or 4 bytes: shifts, not products
        y_inc_b = product("y_inc_b", times_out_bytes(t.ys[0], t.out_bytes))
        y_inc_oy = product("y_inc_oy", times_out_bytes(t.ys[1], t.out_bytes))
        y_inc_ox = product("y_inc_ox", times_out_bytes(t.ys[2], t.out_bytes))
        y_n0 = product("y_n0", times_out_bytes(self.n0, t.out_bytes))
        # the tile's bias offset 4*n0*b_stride, stepped like the loop levels: ``n0`` is 0
        # or the previous ``n0`` plus ``cols``, so the offset is 0 or the previous one
        # plus 4*cols*b_stride (a shift for a power-of-two ``cols``); no multiplier lies
        # between ``n0`` and the offset's register, which follows ``n0`` a cycle later
        n0_was = Signal(16)
        b_n0 = Signal(ADDR)
        m.d.sync += n0_was.eq(self.n0)
        with m.If(self.n0 == 0):
            m.d.sync += b_n0.eq(0)
        with m.Elif(self.n0 != n0_was):
            m.d.sync += b_n0.eq(b_n0 + ((t.b_stride * (4 * self.cols))[:ADDR]))
        b_inc = Signal(ADDR)
        pb_inc = Signal(ADDR)
        m.d.comb += [b_inc.eq(t.b_stride << 2), pb_inc.eq(t.b_mstride << 2)]

        # Partial sums per loop level: the offset of the current iteration's first run.
        # activations (offsets from x - pad_top*xs1 - pad_left*xs2)
        a_b, a_oy, a_ox, a_ky, a_off = (Signal(ADDR, name=f"a_{n}")
                                        for n in ("b", "oy", "ox", "ky", "off"))
        ih_base, ih = Signal(signed(34)), Signal(signed(34))   # oy*sh - pt (+ ky*dh)
        iw_base, iw = Signal(signed(34)), Signal(signed(34))   # ox*sw - pl (+ kx*dw)
        y_b, y_oy, y_off = (Signal(ADDR, name=f"y_{n}") for n in ("b", "oy", "off"))
        tap = Signal(16)    # ky*kw + kx
        trow = Signal(16)   # tap*q
        # weights (offsets from w + n0), bias (from b + 4*n0*b_stride), per-pixel bias
        w_ky, w_kx, w_off = (Signal(ADDR, name=f"w_{n}") for n in ("ky", "kx", "off"))
        b_off = Signal(ADDR)
        pb_oy = Signal(ADDR)   # oy * 4*b_mstride
        pb_c = Signal(ADDR)    # bc * 4*b_stride

        pb = Signal()
        # ``pb``'s inverted copy (as the end flags' below), read only by the position
        # registers' steps: the board's worst path on seed 4 at 89a7d28 ran from ``pb``
        # through the step's enables, 6 ns of wire, to ``iw``
        pb_n = Signal(init=1)

        def set_pb(value):
            """Both copies of ``pb`` take ``value``."""
            return [pb.eq(value), pb_n.eq(~value)]
        bc = Signal(16)
        bank = Signal()
        # the tile's column counter (``ci`` of the bias nest, ``bc`` of a pixel's bias
        # words) at its last column, in a register kept with the counter like the loop
        # levels' ends: a step's wrap does not wait on ``c + 1 == ncols``. At ``start``
        # from the tile's columns as they are (``ncols``'s register follows a cycle later)
        col_end = Signal()
        # Each loop counter's end flag (``c + 1 == bound``) in a register, kept with the
        # counter: a step decides from flip-flops which levels wrap.
        bounds = ((b, t.batch), (oy, t.oh), (ox, t.ow), (ky, t.kh), (kx, t.kw), (ci, t.cin))
        ends = {c.name: Signal(name=f"{c.name}_end") for c, _ in bounds}
        # The carries the position registers' steps read (which levels wrap: the 32-bit
        # partial sums, ``ih``, ``iw``) are flip-flops of their own, ``pos_carry_*``: each
        # cycle they take the carries of the end flags' next values (``ends_next``, what
        # the flags load at this clock edge), so they always equal the carries of the end
        # flags, and a step's choice of position register needs no AND of flags. The
        # board's worst paths ran from the end flags through those ANDs to ``a_oy`` /
        # ``a_off`` (0ecd3af, seeds 2 and 3; then from the inverted copies that replaced
        # them, 2e6d1f8, seed 2: ``kx_end_n`` -> ``a_ky``, 16.76 ns).
        ends_next = {c.name: Signal(name=f"{c.name}_end_next") for c, _ in bounds}
        m.d.comb += [ends_next[c.name].eq(ends[c.name]) for c, _ in bounds]

        def set_end(c, value):
            """Counter ``c``'s end flag takes ``value`` (a statement for ``m.d.sync``; the
            flag's next value follows in ``ends_next``, under the same conditions)."""
            m.d.comb += ends_next[c.name].eq(value)
            return [ends[c.name].eq(value)]

        # The activation run's "last tap of the pixel" (``ky`` and ``kx`` both at their
        # end) in a register of its own, set from the same counts as the end flags: the
        # run's tag goes to the reader's registers across the unit, and ``ky_end``, which
        # every step's carries read, no longer has to sit near them (the board's worst
        # path on seed 3 at 8ebe584 started at ``ky_end``, 60 columns from its loads)
        last_tap = Signal()
        one_tap = (t.kh == 1) & (t.kw == 1)    # the window is one tap: every tap is last

        def at_end(c):
            return ends[c.name]
        with m.If(self.start):
            m.d.sync += [self.busy.eq(1), mode.eq(self.mode), bc.eq(0), bank.eq(self.bank),
                         *set_pb(t.pix_bias & (self.mode == self.MODE_A)),
                         col_end.eq(ncols_now == 1), last_tap.eq(one_tap)]
            m.d.sync += [c.eq(0) for c in (b, oy, ox, ky, kx, ci)]
            m.d.sync += [a for c, bound in bounds for a in set_end(c, bound == 1)]
            m.d.sync += [s.eq(0) for s in (a_b, a_oy, a_ox, a_ky, a_off, y_b, y_oy, y_off,
                                           tap, trow, w_ky, w_kx, w_off, b_off, pb_oy, pb_c)]
            m.d.sync += [ih_base.eq(-t.pad_top), ih.eq(-t.pad_top),
                         iw_base.eq(-t.pad_left), iw.eq(-t.pad_left)]

        p = self.cmd.payload
        m.d.comb += [p.tag.kind.eq(mode), p.tag.bank.eq(bank)]
        step = Signal()
        m.d.comb += [self.cmd.valid.eq(self.busy), step.eq(self.cmd.valid & self.cmd.ready)]

        def carries(counters_bounds, flags=None):
            """End-of-level flags of a nest of (counter, bound), innermost last: element k
            is true when levels k.. all wrap (the step carries out of level k). From the
            end flags, or from ``flags`` (counter name -> flag)."""
            out = []
            carry = None
            for c, _bound in reversed(counters_bounds):
                wraps = at_end(c) if flags is None else flags[c.name]
                carry = wraps if carry is None else carry & wraps
                out.append(carry)
            return out[::-1]

        def position_carries(counters_bounds, name):
            """:func:`carries` of the end flags as registers (``pos_carry_<name>``, see
            ``ends_next`` above), for the position registers' steps."""
            nxt = carries(counters_bounds, ends_next)
            regs = [Signal(name=f"pos_carry_{name}{k}") for k in range(len(nxt))]
            m.d.sync += [r.eq(v) for r, v in zip(regs, nxt, strict=True)]
            return regs

        def count(counters_bounds, wraps):
            for (c, bound), w in zip(counters_bounds, wraps, strict=True):
                with m.If(w):
                    m.d.sync += [c.eq(0), *set_end(c, bound == 1)]
            # the innermost level that does not wrap counts up
            levels = list(zip(counters_bounds, wraps, strict=True))
            for k in range(len(levels)):
                (c, _), _w = levels[k]
                inner_wrap = levels[k + 1][1] if k + 1 < len(levels) else None
                cond = ~levels[k][1]
                if inner_wrap is not None:
                    cond = cond & inner_wrap
                with m.If(cond):
                    m.d.sync += [c.eq(c + 1), *set_end(c, c + 2 == levels[k][0][1])]

        # both modes' position carries, in every cycle (outside the mode's switch)
        w_nest = [(ky, t.kh), (kx, t.kw), (ci, t.cin)]
        a_nest = [(b, t.batch), (oy, t.oh), (ox, t.ow), (ky, t.kh), (kx, t.kw)]
        w_pos = position_carries(w_nest, "w")
        # The activation step's choice of position registers, from the carries of the end
        # flags' next values (as ``pos_carry_w*``) (the board's long paths at 72aa8dc
        # ran from the reader's ready ``nxt_ok`` through the step, ``pb_n`` and a chain
        # of five carries into the position registers' enables, 400-500 a seed):
        # ``lv_*``, one-hot, the level the step moves (none on the task's last run), pick
        # each register's next value by AND-OR; ``wr_*``, which registers it writes (a
        # level's registers and those of every level inside it), make each register's
        # enable the step, ``pb_n`` and one flip-flop.
        n_b, n_oy, n_ox, n_ky, n_kx = carries(a_nest, ends_next)
        lv = {name: Signal(name=f"lv_{name}") for name in ("img", "row", "col", "krow", "kcol")}
        wr = {name: Signal(name=f"wr_{name}") for name in ("b", "oy", "ox", "ky", "off")}
        m.d.sync += [lv["img"].eq(n_oy & ~n_b), lv["row"].eq(n_ox & ~n_oy),
                     lv["col"].eq(n_ky & ~n_ox), lv["krow"].eq(n_kx & ~n_ky),
                     lv["kcol"].eq(~n_kx),
                     wr["b"].eq(n_oy & ~n_b), wr["oy"].eq(n_ox & ~n_b),
                     wr["ox"].eq(n_ky & ~n_b), wr["ky"].eq(n_kx & ~n_b), wr["off"].eq(~n_b)]

        def pick(cases):
            """The value of the one level of ``cases`` (``lv`` name -> value) whose flag
            is set (AND-OR: the flags are one-hot)."""
            terms = [Mux(lv[name], value, 0) for name, value in cases.items()]
            out = terms[0]
            for term in terms[1:]:
                out = out | term
            return out

        with m.Switch(mode):
            with m.Case(self.MODE_W):
                m.d.comb += [
                    p.addr.eq(t.w_addr + self.n0 + w_off),
                    p.length.eq(ncols), p.pad.eq(0),
                    p.tag.row.eq(trow + (ci >> lw)), p.tag.lane.eq(ci[:lw] if lw else 0),
                ]
                nest = w_nest
                c_ky, c_kx, c_ci = carries(nest)
                p_ky, p_kx, p_ci = w_pos
                with m.If(step):
                    count(nest, [c_ky, c_kx, c_ci])
                    with m.If(c_ky):
                        m.d.sync += self.busy.eq(0)
                    with m.If(p_ky):
                        pass         # the task's last run: no position moves
                    with m.Elif(p_kx):   # next ky
                        m.d.sync += [w_ky.eq(w_ky + t.ws[0]), w_kx.eq(w_ky + t.ws[0]),
                                     w_off.eq(w_ky + t.ws[0])]
                    with m.Elif(p_ci):   # next kx
                        m.d.sync += [w_kx.eq(w_kx + t.ws[1]), w_off.eq(w_kx + t.ws[1])]
                    with m.Else():       # next ci
                        m.d.sync += w_off.eq(w_off + t.ws[2])
                    with m.If(c_ci):
                        m.d.sync += [tap.eq(tap + 1), trow.eq(trow + q)]
            with m.Case(self.MODE_B):
                m.d.comb += [p.addr.eq(t.b_addr + b_n0 + b_off),
                             p.length.eq(4), p.pad.eq(0), p.tag.lane.eq(ci)]
                with m.If(step):
                    m.d.sync += b_off.eq(b_off + b_inc)
                    with m.If(col_end):
                        m.d.sync += [ci.eq(0), self.busy.eq(0)]
                    with m.Else():
                        m.d.sync += [ci.eq(ci + 1), col_end.eq(ci + 2 == ncols)]
            with m.Default():
                pad = (ih < 0) | (ih >= t.h) | (iw < 0) | (iw >= t.w)
                m.d.comb += [
                    p.addr.eq(x_base + a_off),
                    p.length.eq(t.cin), p.pad.eq(pad),
                    p.tag.row.eq(trow),
                    p.tag.first.eq(tap == 0),
                    p.tag.last.eq(last_tap),
                    p.tag.yaddr.eq(t.y_addr + y_n0 + y_off),
                    p.tag.lane.eq(ncols), p.tag.tile.eq(self.tile),
                ]
                nest = a_nest
                c_b, c_oy, c_ox, c_ky, c_kx = carries(nest)
                with m.If(pb):
                    m.d.comb += [
                        p.addr.eq((t.b_addr + b_n0) + (pb_oy + pb_c)),
                        p.length.eq(4), p.pad.eq(0), p.tag.kind.eq(self.MODE_B),
                        p.tag.lane.eq(bc),
                    ]
                    with m.If(step):
                        m.d.sync += [bc.eq(bc + 1), pb_c.eq(pb_c + b_inc),
                                     col_end.eq(bc + 2 == ncols)]
                        with m.If(col_end):
                            m.d.sync += [bc.eq(0), *set_pb(0), pb_c.eq(0),
                                         col_end.eq(ncols == 1)]
                with m.Elif(step):
                    count(nest, [c_b, c_oy, c_ox, c_ky, c_kx])
                    with m.If(c_b):
                        m.d.sync += self.busy.eq(0)
                    with m.If(c_ky):     # the pixel's last tap: the next pixel from tap 0
                        m.d.sync += [tap.eq(0), trow.eq(0), last_tap.eq(one_tap)]
                        with m.If(~c_b):  # (its bias words first)
                            m.d.sync += set_pb(t.pix_bias)
                    with m.Else():
                        m.d.sync += [tap.eq(tap + 1), trow.eq(trow + q)]
                        # the ends ``count`` sets: kx wraps and ky counts, or kx counts
                        with m.If(c_kx):
                            m.d.sync += last_tap.eq((ky + 2 == t.kh) & (t.kw == 1))
                        with m.Else():
                            m.d.sync += last_tap.eq(at_end(ky) & (kx + 2 == t.kw))
                # the position registers move on an activation run's step (``pb_n``: no
                # bias word is being read); each register takes the value of the level
                # the step moves (``lv``), when that level writes it (``wr``)
                nxt_b, ynxt_b = a_b + t.xs[0], y_b + y_inc_b
                nxt_oy, ynxt_oy = a_oy + inc_oy, y_oy + y_inc_oy
                nxt_ox = a_ox + inc_ox
                nxt_ky = a_ky + inc_ky
                moves = [
                    (a_b, "b", {"img": nxt_b}),
                    (a_oy, "oy", {"img": nxt_b, "row": nxt_oy}),
                    (a_ox, "ox", {"img": nxt_b, "row": nxt_oy, "col": nxt_ox}),
                    (a_ky, "ky", {"img": nxt_b, "row": nxt_oy, "col": nxt_ox,
                                  "krow": nxt_ky}),
                    (a_off, "off", {"img": nxt_b, "row": nxt_oy, "col": nxt_ox,
                                    "krow": nxt_ky, "kcol": a_off + inc_kx}),
                    (y_b, "b", {"img": ynxt_b}),
                    (y_oy, "oy", {"img": ynxt_b, "row": ynxt_oy}),
                    (y_off, "ox", {"img": ynxt_b, "row": ynxt_oy,
                                   "col": y_off + y_inc_ox}),
                    (ih_base, "oy", {"img": -t.pad_top, "row": ih_base + t.stride_h}),
                    (ih, "ky", {"img": -t.pad_top, "row": ih_base + t.stride_h,
                                "col": ih_base, "krow": ih + t.dil_h}),
                    (iw_base, "ox", {"img": -t.pad_left, "row": -t.pad_left,
                                     "col": iw_base + t.stride_w}),
                    (iw, "off", {"img": -t.pad_left, "row": -t.pad_left,
                                 "col": iw_base + t.stride_w, "krow": iw_base,
                                 "kcol": iw + t.dil_w}),
                    (pb_oy, "oy", {"img": 0, "row": pb_oy + pb_inc}),
                ]
                for reg, writes, cases in moves:
                    with m.If(step & pb_n & wr[writes]):
                        m.d.sync += reg.eq(pick(cases))
        return m
