"""``SteppedAgu`` (addresses stepped by strides) against ``NmuAgu`` and the model.

The two AGUs run in lock-step in one simulation on the same inputs and the same random
back-pressure: every cycle ``valid``, ``busy`` and, while valid, the whole run command
must be equal. The stepped AGU's runs are also checked against the model's loop nests
(``weight_runs`` / ``bias_runs`` / ``act_runs``), independently of ``NmuAgu``. Tasks:
random convolutions (pads, strides, dilations, batch, i8/i16 outputs) and gemms with a
per-tensor or per-pixel bias, every tile of each, every mode.
"""

from __future__ import annotations

import random

from amaranth import Module
from amaranth.sim import Simulator

from npu.nmu.agu import NmuAgu, task_fields
from npu.nmu.agu_step import SteppedAgu
from npu.nmu.model import NmuGeometry, NmuTask, act_runs, bias_runs, weight_runs

LANES = 8


def _conv(rng):
    while True:
        b, h, w, cin = rng.randint(1, 3), rng.randint(1, 7), rng.randint(1, 7), rng.randint(1, 19)
        kh, kw, cout = rng.randint(1, 3), rng.randint(1, 3), rng.randint(1, 20)
        pads = [rng.randint(0, 2) for _ in range(4)]
        st = (rng.randint(1, 3), rng.randint(1, 3))
        dl = (rng.randint(1, 2), rng.randint(1, 2))
        oh = (h + pads[0] + pads[2] - dl[0] * (kh - 1) - 1) // st[0] + 1
        ow = (w + pads[1] + pads[3] - dl[1] * (kw - 1) - 1) // st[1] + 1
        if oh >= 1 and ow >= 1:
            break
    return NmuTask(batch=b, h=h, w=w, cin=cin, kh=kh, kw=kw, cout=cout, oh=oh, ow=ow,
                   x_addr=rng.randint(0, 999), xs=(h * w * cin, w * cin, cin),
                   w_addr=rng.randint(0, 999), ws=(kw * cin * cout, cin * cout, cout),
                   has_bias=True, b_addr=rng.randint(0, 99), b_stride=rng.randint(1, 3),
                   y_addr=rng.randint(0, 999), ys=(oh * ow * cout, ow * cout, cout),
                   out_elem=rng.choice(["i8", "i16", "i32"]), pads=(pads[0], pads[1]),
                   strides=st, dils=dl)


def _gemm(rng):
    m, k, n = rng.randint(1, 6), rng.randint(1, 20), rng.randint(1, 20)
    return NmuTask(batch=1, h=m, w=1, cin=k, kh=1, kw=1, cout=n, oh=m, ow=1,
                   x_addr=rng.randint(0, 50), xs=(0, k + rng.randint(0, 3), 0),
                   w_addr=rng.randint(0, 50), ws=(0, 0, n + rng.randint(0, 3)),
                   has_bias=True, b_addr=rng.randint(0, 50), b_stride=rng.randint(1, 2),
                   pix_bias=rng.random() < 0.6, b_mstride=n + rng.randint(0, 2),
                   y_addr=rng.randint(0, 50), ys=(0, n, 0), out_elem="i8", pads=(0, 0),
                   strides=(1, 1), dils=(1, 1))


def _fields(run):
    return (int(run.addr), int(run.length), int(run.pad), int(run.tag.kind),
            int(run.tag.row), int(run.tag.lane), int(run.tag.first), int(run.tag.last),
            int(run.tag.tile), int(run.tag.yaddr), int(run.tag.bank))


def _check_against_model(got, task, geom, n0, mode):
    if mode == NmuAgu.MODE_W:
        want = list(weight_runs(task, geom, n0))
    elif mode == NmuAgu.MODE_B:
        want = list(bias_runs(task, geom, n0))
    else:
        want = list(act_runs(task, geom, n0))
    assert len(got) == len(want), (mode, len(got), len(want), task)
    ncols = min(geom.cols, task.cout - n0)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        addr, length, pad, kind, row, lane, first, last, tile, yaddr, _bank = g
        if w.tag[0] == "bias":  # a per-pixel bias word in the activation nest
            assert (addr, length, kind, lane) == (w.addr, 4, NmuAgu.MODE_B, w.tag[1]), (i, task)
            continue
        if mode == NmuAgu.MODE_A:
            tag, wtag = (row, first, last, yaddr, lane, tile), (
                w.tag[0], int(w.tag[1]), int(w.tag[2]), w.tag[3], ncols, n0 // geom.cols)
        elif mode == NmuAgu.MODE_W:
            tag, wtag = (row, lane), w.tag
        else:
            tag, wtag = (lane,), w.tag
        assert (0 if w.pad else addr, length, bool(pad), tag, kind) == \
            (w.addr, w.length, w.pad, wtag, mode), (mode, i, task)


def test_stepped_agu_equals_nmu_agu_and_the_model():
    rng = random.Random(11)
    geom = NmuGeometry(lanes=LANES, cols=LANES)
    old = NmuAgu(lanes=LANES, cols=LANES)
    new = SteppedAgu(lanes=LANES, cols=LANES)
    top = Module()
    top.submodules.old = old
    top.submodules.new = new
    sim = Simulator(top)
    sim.add_clock(1e-6)
    phases = {"n": 0}

    async def bench(ctx):
        for k in range(24):
            task = _gemm(rng) if k % 3 == 0 else _conv(rng)
            for dut in (old, new):
                ctx.set(dut.task, task_fields(task))
            await ctx.tick()     # SteppedAgu: the task is held from the cycle before start
            for n0 in range(0, task.cout, geom.cols):
                for mode in (NmuAgu.MODE_W, NmuAgu.MODE_B, NmuAgu.MODE_A):
                    bank = rng.randrange(2)
                    for dut in (old, new):
                        ctx.set(dut.n0, n0)
                        ctx.set(dut.tile, n0 // geom.cols)
                        ctx.set(dut.mode, mode)
                        ctx.set(dut.bank, bank)
                        ctx.set(dut.start, 1)
                    await ctx.tick()
                    for dut in (old, new):
                        ctx.set(dut.start, 0)
                    got = []
                    for _cycle in range(10000):
                        ready = rng.random() < 0.7
                        for dut in (old, new):
                            ctx.set(dut.cmd.ready, ready)
                        valid = ctx.get(new.cmd.valid)
                        assert valid == ctx.get(old.cmd.valid)
                        assert ctx.get(new.busy) == ctx.get(old.busy)
                        if valid:
                            run = _fields(ctx.get(new.cmd.payload))
                            assert run == _fields(ctx.get(old.cmd.payload)), (mode, task)
                            if ready:
                                got.append(run)
                        if not ctx.get(new.busy):
                            break
                        await ctx.tick()
                    assert not ctx.get(new.busy)
                    assert all(r[10] == bank for r in got)
                    _check_against_model(got, task, geom, n0, mode)
                    phases["n"] += 1

    sim.add_testbench(bench)
    sim.run()
    assert phases["n"] > 100
