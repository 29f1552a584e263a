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
"""

from __future__ import annotations

__all__ = ["cast_tiles", "table_tiles"]


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
