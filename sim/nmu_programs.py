"""Small NEM programs for the NMU: written as text, checked, bound, and run in the executor.

Each :class:`NmuCase` is one gemm / matmul / conv2d task whose operands all live in L1:
the register values the binder wrote for it, its requantisation entry, the L1 image before
the run and the L1 image ``nem.executor.execute`` leaves. The NMU tests and the benchmark
feed the unit the registers and the entry, preload L1 and compare L1 afterwards, byte for
byte.
"""

from __future__ import annotations

import math
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from amaranth.sim import Simulator

from nem.binder import bind
from nem.checker import check_text
from nem.elemtypes import BITS, elem_type
from nem.executor import execute
from nem.memory import allocate
from nem.taskformat import REGISTER_MAPS, Unit, decode_requant, encode_requant
from npu.nmu.agu import task_fields
from npu.nmu.unit import COUNTERS

__all__ = ["NmuCase", "conv_case", "device_dir", "gemm_case", "run_nmu"]

_DEVICE = """include "npm_baseline_1.0.nem"


device nmu_test extends npm_baseline_1_0 {{
    topology {{
        num_engines = 1
        l2_size_bytes = 65536
        device_units {{
            sDMA = 1
        }}
        per_engine {{
            NMU = 1
            DMA = 2
            l1_size_bytes = {l1}
        }}
    }}
    unit_characteristics {{
        NMU {{
            int8_macs = {macs}
        }}
        DMA {{
            bytes_per_cycle = {word}
        }}
        SEQ {{
            max_active_tokens = 8
        }}
    }}
    opcode.extended {{
        gemm.int8<i16>.with_bias
        conv2d.int8<i16>.with_bias
    }}
}}
"""

_DIRS: dict = {}


def device_dir(macs=64, l1=65536, word=8) -> Path:
    """A directory holding ``nmu_device.nem`` (a one-NMU device) with these sizes."""
    key = (macs, l1, word)
    if key not in _DIRS:
        d = Path(tempfile.mkdtemp(prefix="nmu-device-"))
        (d / "nmu_device.nem").write_text(_DEVICE.format(macs=macs, l1=l1, word=word))
        _DIRS[key] = d
    return _DIRS[key]


@dataclass
class NmuCase:
    """One bound NMU task and what the executor makes of it."""

    text: str
    regs: dict  # register index -> value
    entry: object  # nem.taskformat.RequantEntry
    l1_before: np.ndarray  # uint8, the whole L1
    l1_after: np.ndarray  # uint8, after nem.executor.execute
    out_addr: int
    out_bytes: int
    macs: int  # MACs of the task (the executor's count)
    word: int


def _num(v):
    return np.format_float_positional(float(v), trim="0")


def _scale(rng, lo, hi):
    return float(f"{rng.uniform(lo, hi):.4g}")


def _run(text, inputs, macs, l1, word, offsets):
    base = device_dir(macs, l1, word)
    result = check_text(text, file="nmu_case.nem", base_dir=str(base))
    errors = [str(d) for d in result.diagnostics if d.severity == "error"]
    if errors:
        raise ValueError("\n".join(errors) + "\n" + text)
    program = bind(result)
    (task,) = [t for t in program.tasks if t.unit is Unit.NMU]
    regs = dict(task.writes)
    entry = decode_requant(program.data, regs[REGISTER_MAPS[Unit.NMU].index("REQUANT")])
    places, _ = allocate(result.plan.buffers, result.device)
    initial = {}
    mem = np.zeros(l1, np.uint8)
    rng = np.random.default_rng(len(text))
    for name, buf in result.plan.buffers.items():
        size = places[name].size if hasattr(places[name], "size") else buf.size
        raw = inputs.get(name)
        if raw is None:  # outputs start as noise: a byte the unit forgets to write shows
            raw = rng.integers(0, 256, size, dtype=np.uint8)
        raw = np.asarray(raw, np.uint8)
        initial[name] = raw
        at = places[name].address
        mem[at:at + len(raw)] = raw
    run = execute(result.plan, result.device, initial)
    after = mem.copy()
    for name in result.plan.buffers:
        data = run.memory.buffer(name)
        at = places[name].address
        after[at:at + len(data)] = data
    y_at = places["Y"].address + offsets["Y"]
    return regs, entry, mem, after, y_at, run


def _region(name, offset, elem, shape, layout, quant, nbytes):
    q = f", quant={quant}" if quant else ""
    return (f"let {name.lower()} = region({name}, {offset}, {nbytes}) elem={elem}, "
            f"shape=[{', '.join(map(str, shape))}], layout={layout}{q}")


def _build(opcode, ops, attrs, rng, macs, l1, word, aligned=False):
    """ops: list of (name, elem, shape, layout, quant text, values or None)."""
    lines = ['device "nmu_device.nem"']
    offsets, inputs = {}, {}
    regions = []
    for name, elem, shape, layout, quant, values in ops:
        off = 0 if aligned else int(rng.integers(0, 8))  # unaligned regions
        nbytes = math.prod(shape) * BITS[elem] // 8
        align = ", align=64" if aligned else ""
        lines.append(f"buffer {name} : L1 (size={off + nbytes + 8}{align})")
        offsets[name] = off
        regions.append(_region(name, off, elem, shape, layout, quant, nbytes))
        if values is not None:
            raw = rng.integers(0, 256, off + nbytes + 8, dtype=np.uint8)
            data = np.asarray(values).astype(elem_type(elem).dtype)
            raw[off:off + nbytes] = np.frombuffer(data.tobytes(), np.uint8)
            inputs[name] = raw
    lines += regions
    ins = ", ".join(n.lower() for n, *_ in ops[:-1])
    lines.append(f"t = {opcode}.async in {ins} out y {attrs}")
    lines.append("wait(t)")
    text = "\n".join(lines) + "\n"
    return text, inputs, offsets


def _quant(rng, k, n, out_elem, per_channel):
    xs, zx = _scale(rng, 0.005, 0.05), int(rng.integers(-40, 41))
    w_scales = [_scale(rng, 0.002, 0.02) for _ in range(n if per_channel else 1)]
    spread = 40 if out_elem == "i8" else 6000
    typical = xs * float(np.mean(w_scales)) * math.sqrt(k) * 74 * 74
    ys = float(f"{typical / spread * rng.uniform(0.5, 2.0):.4g}")
    zy = int(rng.integers(-30, 31))
    xq = f"per_tensor(scale={_num(xs)}, zero_point={zx})"
    if per_channel:
        wq = (f"per_channel(axis=AXIS, scales=[{', '.join(_num(s) for s in w_scales)}], "
              f"zero_points=[{', '.join('0' for _ in w_scales)}])")
    else:
        wq = f"per_tensor(scale={_num(w_scales[0])}, zero_point=0)"
    yq = f"per_tensor(scale={_num(ys)}, zero_point={zy})"
    return xq, wq, yq


def _case(opcode, x_shape, w_shape, y_shape, layouts, attrs, *, bias, out_elem, per_channel,
          rng, macs, l1, word, waxis, aligned=False):
    n = w_shape[-1]
    k = math.prod(w_shape[:-1]) if opcode == "conv2d" else w_shape[-2]
    xq, wq, yq = _quant(rng, k, n, out_elem, per_channel)
    wq = wq.replace("AXIS", str(waxis))
    if out_elem == "i32":
        xq_used, wq_used, yq_used = xq, wq, None
    else:
        xq_used, wq_used, yq_used = xq, wq, yq
    x = rng.integers(-128, 128, x_shape)
    w = rng.integers(-127, 128, w_shape)
    ops = [("X", "i8", x_shape, layouts[0], xq_used, x),
           ("W", "i8", w_shape, layouts[1], wq_used, w)]
    if bias:
        bmax = int(math.sqrt(k) * 74 * 74)
        shape, layout = ((n,), "C") if bias != "mn" else (y_shape[-2:], "MN")
        ops.append(("B", "i32", shape, layout, None, rng.integers(-bmax, bmax + 1, shape)))
    ops.append(("Y", out_elem, y_shape, layouts[2], yq_used, None))
    text, inputs, offsets = _build(opcode, ops, attrs, rng, macs, l1, word, aligned)
    regs, entry, before, after, y_at, _ = _run(text, inputs, macs, l1, word, offsets)
    size = BITS[out_elem] // 8
    return NmuCase(text, regs, entry, before, after, y_at, math.prod(y_shape) * size,
                   math.prod(y_shape) * k, word)  # MACs: every output element, k products


def gemm_case(rng, m, k, n, *, bias=False, out_elem="i8", per_channel=True, opcode="gemm",
              macs=64, l1=65536, word=8, aligned=False, batch=None):
    """An int8 gemm (or matmul) ``[m, k] x [k, n]`` with random operands.

    ``aligned``: every operand at a 64-byte aligned address (else at a random byte offset).
    ``batch``: ``(a_batch, b_batch)`` leading dimensions of A and B (broadcast, as numpy).
    ``bias``: False, True (``[n]``) or ``"mn"`` (``[m, n]``).
    """
    if batch is None:
        return _case(opcode, (m, k), (k, n), (m, n), ("MK", "KN", "MN"), "accum_type=i32",
                     bias=bias, out_elem=out_elem, per_channel=per_channel, rng=rng,
                     macs=macs, l1=l1, word=word, waxis=1, aligned=aligned)
    a_b, b_b = (tuple(v) for v in batch)
    y_b = tuple(np.broadcast_shapes(a_b, b_b))
    names = {2: "MN", 3: "BMN"}
    a, b, y = (*a_b, m, k), (*b_b, k, n), (*y_b, m, n)
    return _case(opcode, a, b, y, (names[len(a)], names[len(b)], names[len(y)]),
                 "accum_type=i32", bias=bias, out_elem=out_elem, per_channel=per_channel,
                 rng=rng, macs=macs, l1=l1, word=word, waxis=len(b) - 1, aligned=aligned)


def conv_case(rng, batch, h, w, cin, kh, kw, cout, *, pads=(0, 0, 0, 0), strides=(1, 1),
              dils=(1, 1), bias=False, out_elem="i8", per_channel=True, macs=64, l1=65536,
              word=8, aligned=False):
    """An int8 conv2d NHWC x HWIO with the given geometry and random operands."""
    oh = (h + pads[0] + pads[2] - dils[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - dils[1] * (kw - 1) - 1) // strides[1] + 1
    if oh < 1 or ow < 1:
        raise ValueError("empty output")
    attrs = (f"pads=[{', '.join(map(str, pads))}] strides=[{', '.join(map(str, strides))}] "
             f"dilations=[{', '.join(map(str, dils))}] groups=1 accum_type=i32")
    return _case("conv2d", (batch, h, w, cin), (kh, kw, cin, cout), (batch, oh, ow, cout),
                 ("NHWC", "HWIO", "NHWC"), attrs, bias=bias, out_elem=out_elem,
                 per_channel=per_channel, rng=rng, macs=macs, l1=l1, word=word, waxis=3,
                 aligned=aligned)


def run_nmu(dut, task, entry, mem, rng, deny=0.3, max_cycles=200000, denials=None,
            rq_rate=0.8, watch=None):
    """Run one task on ``dut`` in the Amaranth simulator with L1 = ``mem`` (a bytearray,
    changed in place), served the way ``npu.bus.ports.ArbitratedSRAM`` serves its client
    ports: each grant denied with probability ``deny`` (``rng``: ``random.Random``), read
    data one cycle after ``go`` and held, writes after the reads of the cycle (read-first;
    a write is taken at its ``go``, as the port's queue takes it, and lands at once).
    A unit with the weight port (``l1_wrd``) has it served the same way, as a second
    physical read port (both ports may read in the same cycle), grants denied
    independently.
    The requantisation entry goes in word by word with random idle cycles (a word offered
    in a cycle with probability ``rq_rate``).

    ``task``: for an :class:`Nmu`, the decoded task; for an :class:`NmuUnit`, the register
    values ``{index: value}``, written through its register port first.
    ``denials``: a dict, if given, is filled with the cycles a request was denied from the
    start to ``done``: ``"read"`` (on either read port) and ``"write"``, what the unit's
    ``cnt_stall_read`` and ``cnt_stall_write`` count. ``watch``: if given, called with the
    simulator's context in every cycle from the start on, after the inputs are set.
    Returns (done payload as (error, cause), counters dict)."""
    lanes = dut.geometry.lanes
    words = struct.unpack(f"<{len(encode_requant(entry)) // 4}i", encode_requant(entry))
    result = {}

    async def bench(ctx):
        rports = [dut.l1_rd] + ([dut.l1_wrd] if getattr(dut, "weight_port", False) else [])
        held = [0] * len(rports)
        if isinstance(task, dict):
            ctx.set(dut.clear, 1)
            await ctx.tick()
            ctx.set(dut.clear, 0)
            ctx.set(dut.write.valid, 1)
            for index, value in task.items():
                ctx.set(dut.write.payload, {"index": index, "value": value})
                await ctx.tick()
            ctx.set(dut.write.valid, 0)
        else:
            ctx.set(dut.start.payload, task_fields(task))
        ctx.set(dut.start.valid, 1)
        ctx.set(dut.done.ready, 1)
        k = 0
        started = False
        denied_read = denied_write = 0
        for _cycle in range(max_cycles):
            if started:
                ctx.set(dut.start.valid, 0)
            # the entry's idle cycles are drawn from the start on, so that they do not
            # depend on how long the unit takes to become ready (its START_WAIT)
            ctx.set(dut.rq.valid, started and k < len(words) and rng.random() < rq_rate)
            if k < len(words):
                ctx.set(dut.rq.payload, words[k] & 0xFFFFFFFF)
            wr = dut.l1_wr
            for rd in rports:
                ctx.set(rd.gnt, ctx.get(rd.req) and rng.random() >= deny)
            ctx.set(wr.gnt, ctx.get(wr.req) and rng.random() >= deny)
            if denials is not None:
                denied_read += any(ctx.get(rd.req) and not ctx.get(rd.gnt) for rd in rports)
                denied_write += ctx.get(wr.req) and not ctx.get(wr.gnt)
            reads = [None] * len(rports)
            write = None
            for j, rd in enumerate(rports):
                if ctx.get(rd.go):
                    assert ctx.get(rd.gnt)
                    a = ctx.get(rd.addr) * lanes
                    reads[j] = int.from_bytes(bytes(mem[a:a + lanes]), "little")
            if ctx.get(wr.go):
                assert ctx.get(wr.gnt)
                write = (ctx.get(wr.addr), ctx.get(wr.data), ctx.get(wr.en))
            if watch is not None:
                watch(ctx)
            took_rq = ctx.get(dut.rq.valid) and ctx.get(dut.rq.ready)
            started = started or ctx.get(dut.start.ready)
            if started and ctx.get(dut.done.valid):
                p = ctx.get(dut.done.payload)
                result["done"] = (int(p.error), int(p.cause))
                # done waits for the whole requantisation entry, refused task or not
                assert k == len(words), f"done after {k} of the entry's {len(words)} words"
                result["counters"] = {n: ctx.get(getattr(dut, f"cnt_{n}")) for n in COUNTERS}
                if denials is not None:
                    denials.update(read=denied_read, write=denied_write)
                await ctx.tick()
                return
            await ctx.tick()
            k += took_rq
            if write is not None:
                addr, data, en = write
                for b in range(lanes):
                    if en >> b & 1:
                        mem[addr * lanes + b] = data >> (8 * b) & 0xFF
            for j, rd in enumerate(rports):
                if reads[j] is not None:
                    held[j] = reads[j]
                ctx.set(rd.data, held[j])
        raise AssertionError("the NMU did not finish")

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return result["done"], result["counters"]
