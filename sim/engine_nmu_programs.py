"""NEM programs that run the engine's NMU: tiled int8 gemm and conv2d with their copies.

Each generator returns ``(text, inputs)``: the NEM program (without the ``device`` line,
as :func:`sim.engine_programs.golden` adds it) and the initial bytes of the DDR buffers
that need more than random bytes (i32 biases small enough that no accumulator leaves
i32, which the executor refuses). Shapes are odd on purpose: edge tiles, reductions that
are not a multiple of the L1 word, output channels that are not a multiple of the array.

The data flow of every program: inputs DDR -> L2 (sDMA), then per tile L2 -> L1 (DMA),
the NMU task on L1, the result L1 -> L2 (DMA), and at the end L2 -> DDR (sDMA). Tiles
alternate between two L1 slots (ping-pong), so the next tile's copy overlaps the current
tile's NMU task; the dependencies are written out (``deps=[...]``).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["conv_tiles", "gemm_packed", "gemm_tiles"]


def _num(v):
    return np.format_float_positional(float(v), precision=4, unique=False, trim="0")


def _quants(rng, k, n):
    """Per-tensor input/output and per-channel weight quantisation with outputs that use
    the i8 range (neither all zero nor all saturated)."""
    xs, zx = float(rng.uniform(0.01, 0.05)), int(rng.integers(-20, 21))
    ws = [float(rng.uniform(0.002, 0.02)) for _ in range(n)]
    ys = xs * float(np.mean(ws)) * math.sqrt(k) * 74 * 74 / 40
    zy = int(rng.integers(-10, 11))
    xq = f"per_tensor(scale={_num(xs)}, zero_point={zx})"
    wq = (f"per_channel(axis=AXIS, scales=[{', '.join(_num(s) for s in ws)}], "
          f"zero_points=[{', '.join('0' for _ in ws)}])")
    yq = f"per_tensor(scale={_num(ys)}, zero_point={zy})"
    return xq, wq, yq


def _bias(rng, n, k):
    bmax = int(math.sqrt(k) * 74 * 74)
    return np.frombuffer(rng.integers(-bmax, bmax + 1, n).astype("<i4").tobytes(), np.uint8)


def _bias_text(n):
    """The NEM lines of an i32 bias of ``n`` channels brought DDR -> L2 -> L1 (token
    ``tc``, region ``bias1``): its three buffers and its three statements."""
    return {
        "ddr": f"buffer BIAS : DDR (size={4 * n})",
        "l2": f"buffer BIAS2 : L2 (size={4 * n}, align=64)",
        "l1": f"buffer BIAS1 : L1 (size={4 * n}, align=64)",
        "tasks": [
            f"tc2 = transfer.async(dst=region(BIAS2, 0, {4 * n}), src=region(BIAS, 0, {4 * n}))",
            f"tc = transfer.async(dst=region(BIAS1, 0, {4 * n}), src=region(BIAS2, 0, {4 * n}), "
            "deps=[tc2])",
            f"let bias1 = region(BIAS1, 0, {4 * n}) elem=i32, shape=[{n}], layout=C",
        ],
    }


def _slices(total, tile):
    return [(s, min(tile, total - s)) for s in range(0, total, tile)]


def gemm_tiles(m, k, n, tm, *, seed=0, bias=True):
    """``Y[m, n] = A[m, k] x B[k, n] (+ bias)``, int8 with per-channel weights, in row
    tiles of ``tm`` (the last one shorter when ``tm`` does not divide ``m``)."""
    rng = np.random.default_rng(seed)
    xq, wq, yq = _quants(rng, k, n)
    wq = wq.replace("AXIS", "1")
    tiles = _slices(m, tm)
    lines = [
        "program gemm_tiles:",
        f"buffer A : DDR (size={m * k})",
        f"buffer B : DDR (size={k * n})",
        f"buffer Y : DDR (size={m * n})",
        f"buffer A2 : L2 (size={m * k}, align=64)",
        f"buffer Y2 : L2 (size={m * n}, align=64)",
        f"buffer B2 : L2 (size={k * n}, align=64)",
        f"buffer B1 : L1 (size={k * n}, align=64)",
        f"buffer A1 : L1 (size={2 * tm * k}, align=64)",
        f"buffer Y1 : L1 (size={2 * tm * n}, align=64)",
        f"ta = transfer.async(dst=region(A2, 0, {m * k}), src=region(A, 0, {m * k}))",
        f"tb2 = transfer.async(dst=region(B2, 0, {k * n}), src=region(B, 0, {k * n}))",
        f"tb = transfer.async(dst=region(B1, 0, {k * n}), src=region(B2, 0, {k * n}), "
        "deps=[tb2])",
    ]
    inputs = {}
    operands = "b1"
    lines.append(f"let b1 = region(B1, 0, {k * n}) elem=i8, shape=[{k}, {n}], layout=KN, "
                 f"quant={wq}")
    if bias:
        b = _bias_text(n)
        lines.insert(4, b["ddr"])
        lines[8:8] = [b["l2"], b["l1"]]
        lines += b["tasks"]
        operands += ", bias1"
        inputs["BIAS"] = _bias(rng, n, k)
    first = ["tb", "tc"] if bias else ["tb"]
    for i, (row, rows) in enumerate(tiles):
        slot = i % 2
        a_at, y_at = slot * tm * k, slot * tm * n
        deps = ["ta"] + ([f"s{i - 2}"] if i >= 2 else [])   # the slot's previous store
        lines += [
            f"l{i} = transfer.async(dst=region(A1, {a_at}, {rows * k}), "
            f"src=region(A2, {row * k}, {rows * k}), deps=[{', '.join(deps)}])",
            f"let a{i} = region(A1, {a_at}, {rows * k}) elem=i8, shape=[{rows}, {k}], "
            f"layout=MK, quant={xq}",
            f"let y{i} = region(Y1, {y_at}, {rows * n}) elem=i8, shape=[{rows}, {n}], "
            f"layout=MN, quant={yq}",
            f"g{i} = gemm.async in a{i}, {operands} out y{i} "
            f"deps=[{', '.join([f'l{i}', *first] + ([f's{i - 2}'] if i >= 2 else []))}] "
            "accum_type=i32",
            f"s{i} = transfer.async(dst=region(Y2, {row * n}, {rows * n}), "
            f"src=region(Y1, {y_at}, {rows * n}), deps=[g{i}])",
        ]
    stores = ", ".join(f"s{i}" for i in range(len(tiles)))
    lines.append(f"out = transfer.async(dst=region(Y, 0, {m * n}), src=region(Y2, 0, {m * n}), "
                 f"deps=[{stores}])")
    lines.append("wait(out)")
    return "\n".join(lines) + "\n", inputs


def conv_tiles(batch, h, w, cin, kh, kw, cout, *, pads=(0, 0, 0, 0), strides=(1, 1),
               dils=(1, 1), seed=0, bias=True):
    """An int8 conv2d NHWC x HWIO over ``batch`` images, one NMU task per image."""
    rng = np.random.default_rng(seed)
    oh = (h + pads[0] + pads[2] - dils[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - dils[1] * (kw - 1) - 1) // strides[1] + 1
    if oh < 1 or ow < 1:
        raise ValueError("empty output")
    k = kh * kw * cin
    xq, wq, yq = _quants(rng, k, cout)
    wq = wq.replace("AXIS", "3")
    xb, yb, wb = h * w * cin, oh * ow * cout, k * cout
    attrs = (f"pads=[{', '.join(map(str, pads))}] strides=[{', '.join(map(str, strides))}] "
             f"dilations=[{', '.join(map(str, dils))}] groups=1 accum_type=i32")
    lines = [
        "program conv_tiles:",
        f"buffer X : DDR (size={batch * xb})",
        f"buffer W : DDR (size={wb})",
        f"buffer Y : DDR (size={batch * yb})",
        f"buffer X2 : L2 (size={batch * xb}, align=64)",
        f"buffer Y2 : L2 (size={batch * yb}, align=64)",
        f"buffer W2 : L2 (size={wb}, align=64)",
        f"buffer W1 : L1 (size={wb}, align=64)",
        f"buffer X1 : L1 (size={2 * xb}, align=64)",
        f"buffer Y1 : L1 (size={2 * yb}, align=64)",
        f"tx = transfer.async(dst=region(X2, 0, {batch * xb}), src=region(X, 0, {batch * xb}))",
        f"tw2 = transfer.async(dst=region(W2, 0, {wb}), src=region(W, 0, {wb}))",
        f"tw = transfer.async(dst=region(W1, 0, {wb}), src=region(W2, 0, {wb}), deps=[tw2])",
        f"let w1 = region(W1, 0, {wb}) elem=i8, shape=[{kh}, {kw}, {cin}, {cout}], "
        f"layout=HWIO, quant={wq}",
    ]
    inputs = {}
    operands = "w1"
    first = ["tw"]
    if bias:
        b = _bias_text(cout)
        lines.insert(4, b["ddr"])
        lines[8:8] = [b["l2"], b["l1"]]
        lines += b["tasks"]
        operands += ", bias1"
        first.append("tc")
        inputs["BIAS"] = _bias(rng, cout, k)
    for i in range(batch):
        slot = i % 2
        prev = [f"s{i - 2}"] if i >= 2 else []
        lines += [
            f"l{i} = transfer.async(dst=region(X1, {slot * xb}, {xb}), "
            f"src=region(X2, {i * xb}, {xb}), deps=[{', '.join(['tx', *prev])}])",
            f"let x{i} = region(X1, {slot * xb}, {xb}) elem=i8, shape=[1, {h}, {w}, {cin}], "
            f"layout=NHWC, quant={xq}",
            f"let y{i} = region(Y1, {slot * yb}, {yb}) elem=i8, "
            f"shape=[1, {oh}, {ow}, {cout}], layout=NHWC, quant={yq}",
            f"k{i} = conv2d.async in x{i}, {operands} out y{i} "
            f"deps=[{', '.join([f'l{i}', *first, *prev])}] {attrs}",
            f"s{i} = transfer.async(dst=region(Y2, {i * yb}, {yb}), "
            f"src=region(Y1, {slot * yb}, {yb}), deps=[k{i}])",
        ]
    stores = ", ".join(f"s{i}" for i in range(batch))
    lines.append(f"out = transfer.async(dst=region(Y, 0, {batch * yb}), "
                 f"src=region(Y2, 0, {batch * yb}), deps=[{stores}])")
    lines.append("wait(out)")
    return "\n".join(lines) + "\n", inputs


def gemm_packed(m, k, n, tm, tn, *, seed=0):
    """``Y = A[m, k] x B[k, n] + bias`` tiled ``tm x tn`` for throughput, as a compiler
    would lay it out: B packed tile-major in DDR (``n / tn`` contiguous ``[k, tn]``
    blocks) and Y written tile-major (``[m / tm][n / tn]`` blocks of ``[tm, tn]``), so
    that every copy is contiguous. The A row tiles stay in L1; the B tiles and the Y
    tiles alternate between two L1 slots. One bias and one set of weight scales serve every
    column tile (a benchmark: the numbers, not the model, matter).

    The stream is ordered for the sequencer's in-order issue: each copy comes just before
    the task that needs it, the next B tile's DDR -> L2 copy right after the first gemm of
    the current one, its L2 -> L1 copy after the current tile's last gemm, and a result's
    copies after the next gemm, so that the NMU never waits behind a copy it does not
    need."""
    if m % tm or n % tn:
        raise ValueError("tiles must divide the matrix")
    rng = np.random.default_rng(seed)
    xq, wq, yq = _quants(rng, k, tn)
    wq = wq.replace("AXIS", "1")
    mt, nt = m // tm, n // tn
    bias = _bias_text(tn)
    lines = [
        "program gemm_packed:",
        f"buffer A : DDR (size={m * k})",
        f"buffer B : DDR (size={k * n})",
        bias["ddr"],
        f"buffer Y : DDR (size={m * n})",
        f"buffer A2 : L2 (size={m * k}, align=64)",
        f"buffer B2 : L2 (size={k * n}, align=64)",
        f"buffer Y2 : L2 (size={m * n}, align=64)",
        bias["l2"],
        f"buffer A1 : L1 (size={m * k}, align=64)",
        f"buffer B1 : L1 (size={2 * k * tn}, align=64)",
        f"buffer Y1 : L1 (size={2 * tm * tn}, align=64)",
        bias["l1"],
        *bias["tasks"],
    ]

    # copies are one per tile: the engine's copy counts are 16-bit (COUNT0 <= 65535)
    def load_b(j):     # DDR -> L2
        return [f"tb{j} = transfer.async(dst=region(B2, {j * k * tn}, {k * tn}), "
                f"src=region(B, {j * k * tn}, {k * tn}))"]

    def place_b(j):    # L2 -> L1 slot j % 2, free once the gemms of tile j - 2 are done
        users = [f"g{(j - 2) * mt + q}" for q in range(mt)] if j >= 2 else []
        bslot = (j % 2) * k * tn
        return [
            f"lb{j} = transfer.async(dst=region(B1, {bslot}, {k * tn}), "
            f"src=region(B2, {j * k * tn}, {k * tn}), deps=[{', '.join([f'tb{j}', *users])}])",
            f"let b{j} = region(B1, {bslot}, {k * tn}) elem=i8, shape=[{k}, {tn}], layout=KN, "
            f"quant={wq}",
        ]

    def store(t, i, j):
        at, yslot = (i * nt + j) * tm * tn, (t % 2) * tm * tn
        return [
            f"s{t} = transfer.async(dst=region(Y2, {at}, {tm * tn}), "
            f"src=region(Y1, {yslot}, {tm * tn}), deps=[g{t}])",
            f"o{t} = transfer.async(dst=region(Y, {at}, {tm * tn}), "
            f"src=region(Y2, {at}, {tm * tn}), deps=[s{t}])",
        ]

    lines += load_b(0) + place_b(0)
    t, pending = 0, None
    for j in range(nt):
        for i in range(mt):
            if j == 0:
                lines += [
                    f"ta{i} = transfer.async(dst=region(A2, {i * tm * k}, {tm * k}), "
                    f"src=region(A, {i * tm * k}, {tm * k}))",
                    f"la{i} = transfer.async(dst=region(A1, {i * tm * k}, {tm * k}), "
                    f"src=region(A2, {i * tm * k}, {tm * k}), deps=[ta{i}])",
                    f"let a{i} = region(A1, {i * tm * k}, {tm * k}) elem=i8, "
                    f"shape=[{tm}, {k}], layout=MK, quant={xq}",
                ]
            yslot = (t % 2) * tm * tn
            prev = [f"s{t - 2}"] if t >= 2 else []
            lines += [
                f"let y{t} = region(Y1, {yslot}, {tm * tn}) elem=i8, shape=[{tm}, {tn}], "
                f"layout=MN, quant={yq}",
                f"g{t} = gemm.async in a{i}, b{j}, bias1 out y{t} "
                f"deps=[{', '.join([f'la{i}', f'lb{j}', 'tc', *prev])}] accum_type=i32",
            ]
            if pending is not None:
                lines += store(*pending)
            if i == 0 and j + 1 < nt:
                lines += load_b(j + 1)
            if i == mt - 1 and j + 1 < nt:
                lines += place_b(j + 1)
            pending = (t, i, j)
            t += 1
    lines += store(*pending)
    lines += [f"wait(o{q})" for q in range(t)]
    return "\n".join(lines) + "\n", {"BIAS": _bias(rng, tn, k)}
