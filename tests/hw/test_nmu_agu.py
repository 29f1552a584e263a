"""The NMU's run reader and loop-nest AGU in the Amaranth simulator against their models.

``RunReader``: random runs (any alignment and length, pad runs) out of an L1 model that
serves the read client port as ``ArbitratedSRAM`` does (grant denied at random, data one
cycle after ``go`` and held), with random back-pressure on the vector stream; the vectors
equal ``npu.nmu.model.read_runs``.

``NmuAgu``: the run commands of every mode equal ``weight_runs`` / ``bias_runs`` /
``act_runs`` of the model for random convolution and gemm geometries (pads, strides,
dilations), under random back-pressure.
"""

from __future__ import annotations

import random

import numpy as np
from amaranth.sim import Simulator

from npu.nmu.agu import NmuAgu, RunReader, run_layout, task_fields
from npu.nmu.model import NmuGeometry, NmuTask, Run, act_runs, bias_runs, read_runs, weight_runs

LANES, DEPTH = 8, 64


class L1Port:
    """Serves a read client port from ``mem`` (bytes), denying grants at random."""

    def __init__(self, port, mem, lanes, rng, deny=0.3):
        self.port, self.mem, self.lanes, self.rng, self.deny = port, mem, lanes, rng, deny
        self.held = 0
        self.read = None

    def before(self, ctx):
        ctx.set(self.port.gnt, ctx.get(self.port.req) and self.rng.random() >= self.deny)
        self.read = None
        if ctx.get(self.port.go):
            assert ctx.get(self.port.gnt), "go without a grant"
            a = ctx.get(self.port.addr) * self.lanes
            self.read = int.from_bytes(bytes(self.mem[a:a + self.lanes]), "little")

    def after(self, ctx):
        if self.read is not None:
            self.held = self.read
        ctx.set(self.port.data, self.held)


def _run_const(run):
    row, lane, first, last, yaddr = (list(run.tag) + [0] * 5)[:5]
    return run_layout().const({"addr": run.addr, "length": run.length, "pad": int(run.pad),
                               "tag": {"row": row, "lane": lane, "first": int(first),
                                       "last": int(last), "yaddr": yaddr}})


def test_run_reader_against_the_model():
    rng = random.Random(3)
    mem = bytearray(rng.randbytes(DEPTH * LANES))
    runs = []
    for k in range(120):
        length = rng.choice([1, 2, 3, 7, 8, 9, 15, 16, 17, 30, rng.randint(1, 40)])
        addr = rng.randint(0, DEPTH * LANES - length)
        runs.append(Run(addr, length, pad=rng.random() < 0.15, tag=(k, k % 8, 0, 0, 0)))
    want = list(read_runs(runs, np.frombuffer(bytes(mem), np.uint8), LANES, pad_byte=0x5C))
    dut = RunReader(lanes=LANES, depth=DEPTH)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    got = []

    async def bench(ctx):
        l1 = L1Port(dut.rd, mem, LANES, rng)
        ctx.set(dut.pad_byte, 0x5C)
        k = 0
        stalls = 0
        for _cycle in range(5000):
            if k < len(runs):
                ctx.set(dut.cmd.valid, 1)
                ctx.set(dut.cmd.payload, _run_const(runs[k]))
            else:
                ctx.set(dut.cmd.valid, 0)
            ctx.set(dut.o.ready, rng.random() < 0.75)
            l1.before(ctx)
            stalls += ctx.get(dut.stall)
            took = k < len(runs) and ctx.get(dut.cmd.ready)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                p = ctx.get(dut.o.payload)
                got.append(([int(p.data[i]) for i in range(LANES)], int(p.count), int(p.index),
                            int(p.last), int(p.tag.row)))
            await ctx.tick()
            l1.after(ctx)
            k += took
            if k == len(runs) and len(got) == len(want):
                break
        assert stalls > 20

    sim.add_testbench(bench)
    sim.run()
    exp = []
    for data, n, j, run in want:
        exp.append((data, n, j, int(j == -(-run.length // LANES) - 1), run.tag[0]))
    assert len(got) == len(exp), (len(got), len(exp))
    for i, (g, e) in enumerate(zip(got, exp, strict=True)):
        assert g == e, f"vector {i}: got {g}, expected {e} (run {want[i][3]})"


def _task(rng, gemm=False):
    if gemm:
        m, k, n = rng.randint(1, 6), rng.randint(1, 20), rng.randint(1, 20)
        return NmuTask(batch=1, h=m, w=1, cin=k, kh=1, kw=1, cout=n, oh=m, ow=1,
                       x_addr=rng.randint(0, 50), xs=(0, k + rng.randint(0, 3), 0),
                       w_addr=rng.randint(0, 50), ws=(0, 0, n + rng.randint(0, 3)),
                       has_bias=True, b_addr=rng.randint(0, 50), b_stride=rng.randint(1, 2),
                       pix_bias=rng.random() < 0.5, b_mstride=n + rng.randint(0, 2),
                       y_addr=rng.randint(0, 50), ys=(0, n, 0), out_elem="i8", pads=(0, 0),
                       strides=(1, 1), dils=(1, 1))
    while True:
        b, h, w, cin = rng.randint(1, 2), rng.randint(1, 7), rng.randint(1, 7), rng.randint(1, 12)
        kh, kw, cout = rng.randint(1, 3), rng.randint(1, 3), rng.randint(1, 20)
        pads = [rng.randint(0, 2) for _ in range(4)]
        st = (rng.randint(1, 3), rng.randint(1, 3))
        dl = (rng.randint(1, 2), rng.randint(1, 2))
        oh = (h + pads[0] + pads[2] - dl[0] * (kh - 1) - 1) // st[0] + 1
        ow = (w + pads[1] + pads[3] - dl[1] * (kw - 1) - 1) // st[1] + 1
        if oh >= 1 and ow >= 1:
            break
    xs = (h * w * cin, w * cin, cin)
    ws = (kw * cin * cout, cin * cout, cout)
    return NmuTask(batch=b, h=h, w=w, cin=cin, kh=kh, kw=kw, cout=cout, oh=oh, ow=ow,
                   x_addr=rng.randint(0, 99), xs=xs, w_addr=rng.randint(0, 99), ws=ws,
                   has_bias=False, b_addr=0, b_stride=0, y_addr=rng.randint(0, 99),
                   ys=(oh * ow * cout, ow * cout, cout), out_elem=rng.choice(["i8", "i16"]),
                   pads=(pads[0], pads[1]), strides=st, dils=dl)


def test_agu_loop_nests_against_the_model():
    rng = random.Random(7)
    geom = NmuGeometry(lanes=LANES, cols=LANES)
    dut = NmuAgu(lanes=LANES, cols=LANES)
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def bench(ctx):
        for k in range(12):
            task = _task(rng, gemm=k % 3 == 0)
            ctx.set(dut.task, task_fields(task))
            for n0 in range(0, task.cout, geom.cols):
                for mode, model in ((NmuAgu.MODE_W, weight_runs), (NmuAgu.MODE_B, bias_runs),
                                    (NmuAgu.MODE_A, None)):
                    if model is None:
                        want = list(act_runs(task, geom, n0))
                    else:
                        want = list(model(task, geom, n0))
                    ctx.set(dut.n0, n0)
                    ctx.set(dut.tile, n0 // geom.cols)
                    ctx.set(dut.mode, mode)
                    ctx.set(dut.start, 1)
                    await ctx.tick()
                    ctx.set(dut.start, 0)
                    got = []
                    for _cycle in range(10000):
                        ready = rng.random() < 0.7
                        ctx.set(dut.cmd.ready, ready)
                        if ctx.get(dut.cmd.valid) and ready:
                            got.append(ctx.get(dut.cmd.payload))
                        if not ctx.get(dut.busy):
                            break
                        await ctx.tick()
                    assert not ctx.get(dut.busy)
                    assert len(got) == len(want), (mode, len(got), len(want), task)
                    for i, (g, w) in enumerate(zip(got, want, strict=True)):
                        if w.tag[0] == "bias":  # a per-pixel bias word in the A nest
                            assert (int(g.addr), int(g.length), int(g.tag.kind),
                                    int(g.tag.lane)) == (w.addr, 4, NmuAgu.MODE_B,
                                                         w.tag[1]), (i, task)
                            continue
                        if mode == NmuAgu.MODE_A:
                            gt = (int(g.tag.row), int(g.tag.first), int(g.tag.last),
                                  int(g.tag.yaddr), int(g.tag.lane), int(g.tag.tile))
                            wt = (w.tag[0], int(w.tag[1]), int(w.tag[2]), w.tag[3],
                                  min(geom.cols, task.cout - n0), n0 // geom.cols)
                        elif mode == NmuAgu.MODE_W:
                            gt, wt = (int(g.tag.row), int(g.tag.lane)), w.tag
                        else:
                            gt, wt = (int(g.tag.lane),), w.tag
                        gaddr = 0 if w.pad else int(g.addr)
                        assert (gaddr, int(g.length), bool(g.pad), gt, int(g.tag.kind)) == \
                            (w.addr, w.length, w.pad, wt, mode), (mode, i, task)

    sim.add_testbench(bench)
    sim.run()
