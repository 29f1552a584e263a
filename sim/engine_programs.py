"""NEM test programs for the engine and their golden results (binder + executor).

For each program: ``nem.checker`` checks the text against a shipped device
(``hw/npu/devices``), ``nem.binder.bind`` gives the task binary, ``plan_from_binary`` +
``nem.executor.execute`` the expected memories and the executor's cycle count. Initial
contents: random bytes in every DDR buffer; L1 and L2 start at zero (as the SRAMs do).
The binary goes into DDR after the highest DDR buffer, aligned to 64 bytes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from nem.binder import BindError, bind, plan_from_binary
from nem.checker import check_text
from nem.executor import execute
from nem.taskformat import decode, encode
from npu.engine.config import DEVICE_DIR, DEVICES, EngineConfig, load_device
from sim.engine_cstl_programs import (
    cast_tiles,
    eltwise_tiles,
    pool_tiles,
    reduction_tiles,
    table_tiles,
)
from sim.engine_nmu_programs import conv_tiles, gemm_packed, gemm_tiles

__all__ = ["Golden", "bench_programs", "contiguous", "cstl_programs", "golden", "nmu_programs",
           "program_texts", "programs", "random_copies"]

ALIGN = 64


def _header(device):
    return f'device "{DEVICES[device][0]}"\n'


TILED = """program tiles:
const T = 6
const TB = 256
buffer IN : DDR (size=T * TB)
buffer OUT : DDR (size=T * TB)
buffer S : L2 (size=T * TB)
buffer R : L2 (size=T * TB)
buffer X : L1 (size=2 * TB)
t0 = transfer.sync(dst=region(S, 0, T * TB), src=region(IN, 0, T * TB))
loop i in [0..T - 1] @max_in_flight(2):
    a = transfer.async(dst=region(X, (i mod 2) * TB, TB), src=region(S, i * TB, TB))
    let back = region(R, (T - 1 - i) * TB, TB)
    b = store.async(dst=back, src=region(X, (i mod 2) * TB, TB), deps=[a])
    wait(b)
endloop
t9 = transfer.async(dst=region(OUT, 0, T * TB), src=region(R, 0, T * TB))
wait(t9)
"""

STRIDED = """program strided:
buffer IN : DDR (size=256)
buffer OUT : DDR (size=192)
buffer G : DDR (size=240)
buffer G2 : DDR (size=240)
buffer A : L2 (size=96)
buffer B : L1 (size=96)
buffer C : L2 (size=192)
buffer D : L2 (size=240)
t0 = transfer.async(dst=region(A, 0, 96), src=region(IN, 0, 96))
let src = region(A, 0, 96) elem=i16, shape=[4, 12], layout=MN
let dstT = region(B, 0, 96) elem=i16, shape=[4, 12], strides=[1, 4]
t1 = transfer.async(dst=dstT, src=src, deps=[t0])
let back = region(C, 0, 192) elem=i16, shape=[4, 12], strides=[24, 2]
t2 = transfer.async(dst=back, src=region(B, 0, 96) elem=i16, shape=[4, 12], layout=MN, deps=[t1])
t3 = transfer.async(dst=region(OUT, 0, 192), src=region(C, 0, 192), deps=[t2])
let dense = region(IN, 0, 64) elem=i16, shape=[8, 4], layout=MN
t4 = transfer.async(dst=region(D, 0, 240) elem=i16, shape=[8, 4], strides=[15, 1], src=dense)
let spread = region(G, 0, 240) elem=i16, shape=[8, 4], strides=[15, 1]
t5 = transfer.async(dst=spread, src=region(A, 0, 64) elem=i16, shape=[8, 4], layout=MN, deps=[t0])
t6 = transfer.async(dst=region(G2, 0, 240), src=region(D, 0, 240), deps=[t4])
wait(t3)
wait(t5)
wait(t6)
"""

PARALLEL = """program parallel:
const N = 1000
buffer P : DDR (size=N)
buffer Q : DDR (size=N)
buffer P2 : DDR (size=N)
buffer Q2 : DDR (size=N)
buffer SP : L2 (size=N)
buffer SQ : L2 (size=N)
buffer XP : L1 (size=N)
buffer XQ : L1 (size=N)
a = transfer.async(dst=region(SP, 0, N), src=region(P, 0, N))
b = transfer.async(dst=region(SQ, 0, N), src=region(Q, 0, N))
c = transfer.async(dst=region(XP, 0, N), src=region(SP, 0, N), deps=[a])
d = transfer.async(dst=region(XQ, 0, N), src=region(SQ, 0, N), deps=[b])
e = transfer.async(dst=region(SQ, 0, N), src=region(XP, 0, N), deps=[c, d])
f = transfer.async(dst=region(SP, 0, N), src=region(XQ, 0, N), deps=[c, d])
g = transfer.async(dst=region(P2, 0, N), src=region(SQ, 0, N), deps=[e])
h = transfer.async(dst=region(Q2, 0, N), src=region(SP, 0, N), deps=[f])
wait(g)
wait(h)
"""


def contiguous(nbytes):
    """One contiguous copy per path, each after the previous: DDR -> L2 -> L1 -> L2 -> DDR."""
    return f"""program contiguous:
buffer IN : DDR (size={nbytes})
buffer OUT : DDR (size={nbytes})
buffer S : L2 (size={nbytes})
buffer R : L2 (size={nbytes})
buffer X : L1 (size={nbytes})
t0 = transfer.sync(dst=region(S, 0, {nbytes}), src=region(IN, 0, {nbytes}))
t1 = transfer.sync(dst=region(X, 0, {nbytes}), src=region(S, 0, {nbytes}))
t2 = transfer.sync(dst=region(R, 0, {nbytes}), src=region(X, 0, {nbytes}))
t3 = transfer.sync(dst=region(OUT, 0, {nbytes}), src=region(R, 0, {nbytes}))
"""


def random_copies(seed):
    """A random copy program: a DDR load into L2, then random L2/L1 copies with the
    dependencies they need (as in tests/nem_binder), then a copy back to DDR."""
    rng = random.Random(seed)
    slot, slots = 48, 5
    lines = [
        "program random:",
        f"buffer IN : DDR (size={slot * slots})",
        f"buffer OUT : DDR (size={slot * slots})",
        f"buffer S : L2 (size={slot * slots})",
        f"buffer X : L1 (size={slot * slots})",
        f"t_in = transfer.sync(dst=region(S, 0, {slot * slots}), "
        f"src=region(IN, 0, {slot * slots}))",
    ]
    tasks = []
    for k in range(rng.randint(4, 14)):
        src = (rng.choice("SX"), rng.randrange(slots))
        dst = (("X" if src[0] == "S" else rng.choice("SX")), rng.randrange(slots))
        if dst == src:
            dst = (dst[0], (dst[1] + 1) % slots)
        deps = [j for j in range(k) if tasks[j][1] in (src, dst) or tasks[j][0] == dst]
        tasks.append((src, dst))
        dl = f", deps=[{', '.join(f't{j}' for j in deps)}]" if deps else ""
        lines.append(
            f"t{k} = transfer.async(dst=region({dst[0]}, {dst[1] * slot}, {slot}), "
            f"src=region({src[0]}, {src[1] * slot}, {slot}){dl})"
        )
    for k in range(len(tasks)):
        lines.append(f"wait(t{k})")
    lines.append(f"t_out = transfer.sync(dst=region(OUT, 0, {slot * slots}), "
                 f"src=region(S, 0, {slot * slots}))")
    return "\n".join(lines) + "\n"


def program_texts(device):
    """``{name: NEM text}`` of the regression programs for ``device`` (texts that bind)."""
    texts = {"tiled": TILED, "strided": STRIDED, "parallel": PARALLEL}
    seed, found, refused = 0, 0, None
    while found < 3:
        if seed >= 200:
            # a device none of the draws fits (its tokens, its memories): say so, not spin
            raise ValueError(f"device {device}: none of random_copies(0..199) checks and "
                             f"binds (the last: {refused})")
        text = random_copies(seed)
        try:
            golden(device, text)
        except (BindError, ValueError) as exc:
            seed, refused = seed + 1, exc
            continue
        texts[f"random{seed}"] = text
        found += 1
        seed += 1
    return texts


def nmu_programs(device):
    """``{name: (NEM text, DDR inputs)}`` of the NMU regression programs (empty when the
    device has no NMU): tiled gemm with and without bias (edge tiles, odd reductions) and
    tiled conv2d (pads, strides, dilations; a 3 x 3 "same" layer)."""
    if EngineConfig.shipped(device).nmu is None:
        return {}
    return {
        "gemm": gemm_tiles(40, 24, 20, 16, seed=1),
        "gemm_odd": gemm_tiles(23, 37, 9, 10, bias=False, seed=3),
        "conv": conv_tiles(3, 9, 7, 12, 3, 3, 10, pads=(1, 1, 1, 1), strides=(2, 1),
                           dils=(1, 2), seed=2),
        "conv_same": conv_tiles(2, 6, 6, 20, 3, 3, 18, pads=(1, 1, 1, 1), seed=4),
    }


def cstl_programs(device):
    """``{name: (NEM text, DDR inputs)}`` of the CSTL regression programs (empty when the
    device has no CSTL): tiled casts i8 -> i16 / i32, tiled activations through lookup
    tables (relu, sigmoid), tiled max pools (2 x 2 stride 2 as the digits CNN's; 3 x 3
    stride 2 with pads, more channels than a word), a global average pool per image and
    binary eltwise tiles (add, mul, max; a broadcast row) and last-axis reductions (argmax,
    reduce_max; rows longer than a word, ties), at unaligned addresses, spread over the
    CSTL instances."""
    if not EngineConfig.shipped(device).n_cstl:
        return {}
    return {"cast": cast_tiles(9, 13, 2), "activation": table_tiles(11, 21, 3),
            "maxpool": pool_tiles("maxpool", 1, 8, 8, 8, (2, 2), (2, 2), (0, 0, 0, 0), 2,
                                  (False, True)),
            "maxpool_pads": pool_tiles("maxpool", 1, 7, 6, 11, (3, 3), (2, 2), (1, 1, 1, 1),
                                       2, (True, False)),
            "global_avgpool": pool_tiles("avgpool", 2, 4, 5, 12, (4, 5), (4, 5), (0, 0, 0, 0),
                                         1, (False, True)),
            "eltwise": eltwise_tiles(6, 13, 2, ("add", "mul", "max")),
            "reduction": reduction_tiles(7, 21, 4)}


def bench_programs(device):
    """``{name: (NEM text, DDR inputs)}`` of the benchmark's larger programs (not in the
    regression), on the sim device (its L1 holds the tiles): ``gemm256``, a 256 x 256 x 256
    int8 gemm in 128 x 64 tiles with double-buffered weights, and ``conv3x3``, a 3 x 3
    layer 16 x 16 x 64 -> 64 with pads 1 over two images (ping-pong)."""
    if EngineConfig.shipped(device).nmu is None or device != "sim":
        return {}
    return {"gemm256": gemm_packed(256, 256, 256, 128, 64, seed=5),
            "conv3x3": conv_tiles(2, 16, 16, 64, 3, 3, 64, pads=(1, 1, 1, 1), seed=6)}


def programs(device):
    """``{name: (NEM text, DDR inputs or None)}``: :func:`program_texts`,
    :func:`nmu_programs` and :func:`cstl_programs`."""
    out = {name: (text, None) for name, text in program_texts(device).items()}
    out.update(nmu_programs(device))
    out.update(cstl_programs(device))
    return out


@dataclass
class Golden:
    """A bound program and what the executor says it leaves."""

    binary: bytes
    base: int  # DDR byte address of the binary
    ddr_init: np.ndarray  # DDR image before the run (buffers, then the binary)
    ddr: np.ndarray  # expected DDR (the executor's DDR memory)
    l2: np.ndarray
    l1: np.ndarray
    cycles: int  # the executor's cycle count
    tasks: int
    busy: dict[str, int]  # the executor's modelled busy cycles per unit instance


def golden(device, text, seed=0, inputs=None):
    """Check, bind and run ``text`` on the shipped ``device``; see :class:`Golden`.

    DDR buffers start as random bytes (``seed``) unless ``inputs`` gives their bytes.
    """
    dev = load_device(device)
    result = check_text(_header(device) + text, file="p.nem", base_dir=str(DEVICE_DIR))
    if not result.ok:
        raise ValueError([str(d) for d in result.diagnostics])
    program = bind(result)
    binary = encode(program)
    plan = plan_from_binary(decode(binary), dev)
    rng = np.random.default_rng(seed)
    initial = {b.name: rng.integers(0, 256, size=b.size, dtype=np.uint8)
               for b in program.buffers if b.level == "DDR"}
    for name, raw in (inputs or {}).items():
        initial[name][: len(raw)] = raw
    want = execute(plan, dev, initial, in_order=True)  # the SEQ issues in stream order
    mems = want.memory.mems
    ddr_end = max([b.address + b.size for b in program.buffers if b.level == "DDR"],
                  default=0)
    base = -(-ddr_end // ALIGN) * ALIGN
    before = np.zeros(base + len(binary), dtype=np.uint8)
    for b in program.buffers:
        if b.level == "DDR":
            before[b.address:b.address + b.size] = initial[b.name]
    before[base:] = np.frombuffer(binary, dtype=np.uint8)
    ddr = np.zeros(max(len(mems[("DDR", None)]), len(before)), dtype=np.uint8)
    ddr[: len(mems[("DDR", None)])] = mems[("DDR", None)]
    ddr[base: base + len(binary)] = before[base:]  # the binary stays where it was
    return Golden(binary, base, before, ddr, mems[("L2", None)].copy(),
                  mems[("L1", 0)].copy(), want.total_cycles, len(program.tasks), want.busy())
