"""NEM programs that run the engine's CSTLs (returned as ``(text, inputs)`` like
:mod:`sim.engine_nmu_programs`; the golden is the executor's run of the bound binary).

``cast_tiles``: an i8 tensor DDR -> L2 -> L1, then per tile a ``cast`` i8 -> i16 or i32
(tiles alternate between the output types and, without ``@resource``, the binder spreads
them over the CSTL instances in turn, so on a device with two CSTLs neighbouring tiles run
at the same time), each result L1 -> L2 and at the end L2 -> DDR. Tile rows are not a
multiple of the L1 word and the output tiles start at odd addresses, so the CSTL's reads
and writes are unaligned.
"""

from __future__ import annotations

__all__ = ["cast_tiles"]


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
