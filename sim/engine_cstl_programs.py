"""NEM programs that run the engine's CSTLs (returned as ``(text, inputs)`` like
:mod:`sim.engine_nmu_programs`; the golden is the executor's run of the bound binary).

``cast_tiles``: an i8 tensor DDR -> L2 -> L1, then per tile a ``cast`` i8 -> i16 or i32
(tiles alternate between the output types and, without ``@resource``, the binder spreads
them over the CSTL instances in turn, so on a device with two CSTLs neighbouring tiles run
at the same time), each result L1 -> L2 and at the end L2 -> DDR. Tile rows are not a
multiple of the L1 word and the output tiles start at odd addresses, so the CSTL's reads
and writes are unaligned.

``table_tiles``: the same flow with quantised i8 activations through lookup tables (the
binder puts each task's 256-byte table from the executor's formula into the data section,
``TABLE``): tiles alternate between the given opcodes, the outputs with their own
quantisation.

``reduction_tiles``: per tile of rows an ``argmax`` (i32 indices, the last axis dropped
or kept in turn) and a ``reduce_max`` over the last axis (keeping the input's
quantisation or requantising through a table in turn), rows longer than an L1 word,
codes with ties.
"""

from __future__ import annotations

import numpy as np

__all__ = ["cast_tiles", "eltwise_tiles", "pool_tiles", "reduction_tiles", "table_tiles"]


def cast_tiles(rows, cols, tile_rows):
    """``rows x cols`` i8 codes cast in tiles of ``tile_rows`` rows; even tiles to i16,
    odd tiles to i32. Returns ``(text, None)`` (random DDR inputs)."""
    n = rows * cols
    tiles = [(r, min(tile_rows, rows - r)) for r in range(0, rows, tile_rows)]
    out_bytes = [2 if i % 2 == 0 else 4 for i in range(len(tiles))]
    y_at, at = [], 0
    for (_, tr), ob in zip(tiles, out_bytes, strict=True):
        y_at.append(at)
        at += tr * cols * ob
    total = at
    lines = [
        "program cast_tiles:",
        f"buffer X : DDR (size={n})",
        f"buffer Y : DDR (size={total})",
        f"buffer X2 : L2 (size={n})",
        f"buffer Y2 : L2 (size={total})",
        f"buffer X1 : L1 (size={n + 3})",
        f"buffer Y1 : L1 (size={total + 5})",
        f"tx = transfer.sync(dst=region(X2, 0, {n}), src=region(X, 0, {n}))",
        f"tl = transfer.sync(dst=region(X1, 3, {n}), src=region(X2, 0, {n}))",
    ]
    stores = []
    for i, ((r, tr), ob) in enumerate(zip(tiles, out_bytes, strict=True)):
        elem = "i16" if ob == 2 else "i32"
        size = tr * cols * ob
        lines += [
            f"let x{i} = region(X1, {3 + r * cols}, {tr * cols}) elem=i8, "
            f"shape=[{tr}, {cols}], layout=MN",
            f"let y{i} = region(Y1, {5 + y_at[i]}, {size}) elem={elem}, shape=[{tr}, {cols}], "
            "layout=MN",
            f"c{i} = cast.async in x{i} out y{i}",
            f"s{i} = transfer.async(dst=region(Y2, {y_at[i]}, {size}), "
            f"src=region(Y1, {5 + y_at[i]}, {size}), deps=[c{i}])",
        ]
        stores.append(f"s{i}")
    lines.append(f"out = transfer.async(dst=region(Y, 0, {total}), src=region(Y2, 0, {total}), "
                 f"deps=[{', '.join(stores)}])")
    lines.append("wait(out)")
    return "\n".join(lines) + "\n", None


#: Quantisation of the activations' input and of each opcode's output.
X_QUANT = "per_tensor(scale=0.05, zero_point=-3)"
Y_QUANT = {"relu": "per_tensor(scale=0.03, zero_point=-128)",
           "sigmoid": "per_tensor(scale=0.00390625, zero_point=-128)",
           "tanh": "per_tensor(scale=0.0078125, zero_point=0)"}


def table_tiles(rows, cols, tile_rows, ops=("relu", "sigmoid")):
    """``rows x cols`` quantised i8 activations through ``ops`` (tile ``i`` runs
    ``ops[i % len(ops)]``) in tiles of ``tile_rows`` rows. Returns ``(text, None)``."""
    n = rows * cols
    tiles = [(r, min(tile_rows, rows - r)) for r in range(0, rows, tile_rows)]
    lines = [
        "program table_tiles:",
        f"buffer X : DDR (size={n})",
        f"buffer Y : DDR (size={n})",
        f"buffer X2 : L2 (size={n})",
        f"buffer Y2 : L2 (size={n})",
        f"buffer X1 : L1 (size={n + 3})",
        f"buffer Y1 : L1 (size={n + 5})",
        f"tx = transfer.sync(dst=region(X2, 0, {n}), src=region(X, 0, {n}))",
        f"tl = transfer.sync(dst=region(X1, 3, {n}), src=region(X2, 0, {n}))",
    ]
    stores = []
    for i, (r, tr) in enumerate(tiles):
        op = ops[i % len(ops)]
        size = tr * cols
        lines += [
            f"let x{i} = region(X1, {3 + r * cols}, {size}) elem=i8, shape=[{tr}, {cols}], "
            f"layout=MN, quant={X_QUANT}",
            f"let y{i} = region(Y1, {5 + r * cols}, {size}) elem=i8, shape=[{tr}, {cols}], "
            f"layout=MN, quant={Y_QUANT[op]}",
            f"a{i} = {op}.async in x{i} out y{i}",
            f"s{i} = transfer.async(dst=region(Y2, {r * cols}, {size}), "
            f"src=region(Y1, {5 + r * cols}, {size}), deps=[a{i}])",
        ]
        stores.append(f"s{i}")
    lines.append(f"out = transfer.async(dst=region(Y, 0, {n}), src=region(Y2, 0, {n}), "
                 f"deps=[{', '.join(stores)}])")
    lines.append("wait(out)")
    return "\n".join(lines) + "\n", None


#: Quantisation of the pools' input, and of the output of the tiles that requantise.
POOL_QUANT = "per_tensor(scale=0.05, zero_point=-3)"
POOL_REQUANT = "per_tensor(scale=0.08, zero_point=10)"


def pool_tiles(op, n, h, w, c, kernel, strides, pads, tile_rows, requant=(False,)):
    """An NHWC ``n x h x w x c`` i8 activation pooled by ``op`` (maxpool / avgpool) with
    ``kernel``, ``strides`` and ``pads`` (top, left, bottom, right), in tiles of
    ``tile_rows`` output rows as the back-end tiles a pool (``nem.emit``: per tile the
    input rows its windows touch, the pads that fall inside the tile); tile ``i`` keeps the
    input's quantisation, or requantises (a lookup table after the pool) when
    ``requant[i % len(requant)]``. The input sits at an odd L1 address, the outputs at
    another. Returns ``(text, None)``."""
    kh, kw = kernel
    sh, sw = strides
    pt, pl, pb, pr = pads
    oh = (h + pt + pb - kh) // sh + 1
    ow = (w + pl + pr - kw) // sw + 1
    size_x, size_y = n * h * w * c, n * oh * ow * c
    lines = [
        f"program {op}_tiles:",
        f"buffer X : DDR (size={size_x})",
        f"buffer Y : DDR (size={size_y})",
        f"buffer X2 : L2 (size={size_x})",
        f"buffer Y2 : L2 (size={size_y})",
        f"buffer X1 : L1 (size={size_x + 3})",
        f"buffer Y1 : L1 (size={size_y + 5})",
        f"tx = transfer.sync(dst=region(X2, 0, {size_x}), src=region(X, 0, {size_x}))",
        f"tl = transfer.sync(dst=region(X1, 3, {size_x}), src=region(X2, 0, {size_x}))",
    ]
    stores = []
    tile = 0
    for img in range(n):
        for o0 in range(0, oh, tile_rows):
            cnt = min(tile_rows, oh - o0)
            first = o0 * sh - pt
            last = (o0 + cnt - 1) * sh - pt + kh - 1
            top, bottom = max(0, -first), max(0, last - (h - 1))
            r0, r1 = max(first, 0), min(last, h - 1)
            rows = r1 - r0 + 1
            x_at = 3 + (img * h + r0) * w * c
            y_off = ((img * oh + o0) * ow) * c
            q = POOL_REQUANT if requant[tile % len(requant)] else POOL_QUANT
            lines += [
                f"let x{tile} = region(X1, {x_at}, {rows * w * c}) elem=i8, "
                f"shape=[1, {rows}, {w}, {c}], layout=NHWC, quant={POOL_QUANT}",
                f"let y{tile} = region(Y1, {5 + y_off}, {cnt * ow * c}) elem=i8, "
                f"shape=[1, {cnt}, {ow}, {c}], layout=NHWC, quant={q}",
                f"p{tile} = {op}.async in x{tile} out y{tile} kernel_shape=[{kh}, {kw}] "
                f"pads=[{top}, {pl}, {bottom}, {pr}] strides=[{sh}, {sw}]",
                f"s{tile} = transfer.async(dst=region(Y2, {y_off}, {cnt * ow * c}), "
                f"src=region(Y1, {5 + y_off}, {cnt * ow * c}), deps=[p{tile}])",
            ]
            stores.append(f"s{tile}")
            tile += 1
    lines.append(f"out = transfer.async(dst=region(Y, 0, {size_y}), src=region(Y2, 0, "
                 f"{size_y}), deps=[{', '.join(stores)}])")
    lines.append("wait(out)")
    return "\n".join(lines) + "\n", None


#: Quantisation of the eltwise programs' inputs A and B and of each opcode's output.
ELT_QUANT = ("per_tensor(scale=0.05, zero_point=-3)", "per_tensor(scale=0.02, zero_point=7)")
ELT_OUT = {"add": "per_tensor(scale=0.07, zero_point=2)",
           "sub": "per_tensor(scale=0.07, zero_point=-1)",
           "mul": "per_tensor(scale=0.01, zero_point=0)",
           "min": "per_tensor(scale=0.05, zero_point=-3)",
           "max": "per_tensor(scale=0.05, zero_point=5)"}


def eltwise_tiles(rows, cols, tile_rows, ops=("add", "mul")):
    """Binary eltwise on ``rows x cols`` i8 activations A and B (a residual sum when
    ``add``) in tiles of ``tile_rows`` rows, tile ``i`` running ``ops[i % len(ops)]``
    with the binder's ``ELTWISE_ENTRY``; odd tiles take B's first row broadcast over the
    tile's rows (row stride 0), even tiles B's own rows. A and B
    sit at odd L1 addresses, the output at another. Returns ``(text, None)``."""
    n = rows * cols
    lines = [
        "program eltwise_tiles:",
        f"buffer A : DDR (size={n})",
        f"buffer B : DDR (size={n})",
        f"buffer Y : DDR (size={n})",
        f"buffer A2 : L2 (size={n})",
        f"buffer B2 : L2 (size={n})",
        f"buffer Y2 : L2 (size={n})",
        f"buffer A1 : L1 (size={n + 3})",
        f"buffer B1 : L1 (size={n + 1})",
        f"buffer Y1 : L1 (size={n + 5})",
        f"ta = transfer.sync(dst=region(A2, 0, {n}), src=region(A, 0, {n}))",
        f"tb = transfer.sync(dst=region(B2, 0, {n}), src=region(B, 0, {n}))",
        f"la = transfer.sync(dst=region(A1, 3, {n}), src=region(A2, 0, {n}))",
        f"lb = transfer.sync(dst=region(B1, 1, {n}), src=region(B2, 0, {n}))",
    ]
    stores = []
    for i, r in enumerate(range(0, rows, tile_rows)):
        tr = min(tile_rows, rows - r)
        op = ops[i % len(ops)]
        size = tr * cols
        b = (f"let b{i} = region(B1, 1, {size}) elem=i8, shape=[{tr}, {cols}], "
             f"strides=[0, 1], quant={ELT_QUANT[1]}" if i % 2 else
             f"let b{i} = region(B1, {1 + r * cols}, {size}) elem=i8, shape=[{tr}, {cols}], "
             f"layout=MN, quant={ELT_QUANT[1]}")
        lines += [
            f"let a{i} = region(A1, {3 + r * cols}, {size}) elem=i8, shape=[{tr}, {cols}], "
            f"layout=MN, quant={ELT_QUANT[0]}",
            b,
            f"let y{i} = region(Y1, {5 + r * cols}, {size}) elem=i8, shape=[{tr}, {cols}], "
            f"layout=MN, quant={ELT_OUT[op]}",
            f"e{i} = {op}.async in a{i}, b{i} out y{i}",
            f"s{i} = transfer.async(dst=region(Y2, {r * cols}, {size}), "
            f"src=region(Y1, {5 + r * cols}, {size}), deps=[e{i}])",
        ]
        stores.append(f"s{i}")
    lines.append(f"out = transfer.async(dst=region(Y, 0, {n}), src=region(Y2, 0, {n}), "
                 f"deps=[{', '.join(stores)}])")
    lines.append("wait(out)")
    return "\n".join(lines) + "\n", None


#: Quantisation of the reductions' input, and of the reduce_max tiles that requantise.
RED_QUANT = "per_tensor(scale=0.05, zero_point=-3)"
RED_REQUANT = "per_tensor(scale=0.11, zero_point=-20)"


def reduction_tiles(rows, cols, tile_rows, seed=0):
    """Last-axis reductions of ``rows x cols`` quantised i8 codes in tiles of ``tile_rows``
    rows: per tile an ``argmax`` into i32 indices (even tiles drop the last axis, the
    back-end's argmax head; odd tiles keep it as 1) and a ``reduce_max`` (even tiles keep
    the input's quantisation, odd tiles requantise through a table). The input sits at an
    odd L1 address, the indices and maxima at others. The codes come from a small set on
    every other row, so rows hold ties (the first index wins). Returns ``(text, {"X":
    codes})``."""
    n = rows * cols
    rng = np.random.default_rng(seed)
    codes = rng.integers(-128, 128, (rows, cols))
    ties = rng.choice([-128, -7, 5, 5, 100], (rows, cols))
    codes[1::2] = ties[1::2]
    tiles = [(r, min(tile_rows, rows - r)) for r in range(0, rows, tile_rows)]
    lines = [
        "program reduction_tiles:",
        f"buffer X : DDR (size={n})",
        f"buffer I : DDR (size={4 * rows})",
        f"buffer M : DDR (size={rows})",
        f"buffer X2 : L2 (size={n})",
        f"buffer I2 : L2 (size={4 * rows})",
        f"buffer M2 : L2 (size={rows})",
        f"buffer X1 : L1 (size={n + 3})",
        f"buffer I1 : L1 (size={4 * rows + 6})",
        f"buffer M1 : L1 (size={rows + 5})",
        f"tx = transfer.sync(dst=region(X2, 0, {n}), src=region(X, 0, {n}))",
        f"tl = transfer.sync(dst=region(X1, 3, {n}), src=region(X2, 0, {n}))",
    ]
    stores = []
    for i, (r, tr) in enumerate(tiles):
        keep = i % 2 == 1
        ishape = f"[{tr}, 1], layout=MN" if keep else f"[{tr}], layout=N"
        q = RED_REQUANT if i % 2 else RED_QUANT
        lines += [
            f"let x{i} = region(X1, {3 + r * cols}, {tr * cols}) elem=i8, "
            f"shape=[{tr}, {cols}], layout=MN, quant={RED_QUANT}",
            f"let i{i} = region(I1, {6 + 4 * r}, {4 * tr}) elem=i32, shape={ishape}",
            f"let m{i} = region(M1, {5 + r}, {tr}) elem=i8, shape=[{tr}, 1], layout=MN, "
            f"quant={q}",
            f"a{i} = argmax.async in x{i} out i{i} axis=1 keepdims={str(keep).lower()}",
            f"r{i} = reduce_max.async in x{i} out m{i} axes=[-1] keepdims=true",
        ]
        stores += [f"a{i}", f"r{i}"]
    # the results of all tiles leave together (the SEQ holds a few tokens at once)
    deps = ", ".join(stores)
    lines += [
        f"si = transfer.async(dst=region(I2, 0, {4 * rows}), src=region(I1, 6, {4 * rows}), "
        f"deps=[{deps}])",
        f"sm = transfer.async(dst=region(M2, 0, {rows}), src=region(M1, 5, {rows}), "
        f"deps=[{deps}])",
        f"oi = transfer.async(dst=region(I, 0, {4 * rows}), src=region(I2, 0, {4 * rows}), "
        "deps=[si])",
        f"om = transfer.async(dst=region(M, 0, {rows}), src=region(M2, 0, {rows}), "
        "deps=[sm])",
        "wait(oi)",
        "wait(om)",
    ]
    return "\n".join(lines) + "\n", {"X": codes.astype(np.int8).view(np.uint8).ravel()}
