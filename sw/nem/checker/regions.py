"""Checks of regions and their types: ``let`` bindings, region expressions (bounds,
element type, shape, layout, strides) and quantisation parameters."""

from __future__ import annotations

import math

from nem.checker.base import _Scope
from nem.checker.plan import Region
from nem.elemtypes import BITS, INT_TYPES
from nem.tree import ListValue, Quant, RegionDecl, RegionExpr, Str


class _RegionChecks:
    """``let`` declarations, region expressions and quantisation."""

    def region_decl(self, stmt: RegionDecl, scope: _Scope) -> None:
        if isinstance(stmt.value, RegionExpr):
            decos = self.decorators(stmt.decos, "region", scope)
            region = self.region(stmt.value, scope, stmt.name, frozenset(decos))
            self.define(scope, stmt.name, "region", region, stmt.span)
        elif isinstance(stmt.value, (Str, ListValue)):
            self.err(
                "E507", f"let {stmt.name}: a let binds a region or an integer expression", stmt.span
            )
        else:
            value = self.int_of(stmt.value, scope, f"let {stmt.name}")
            self.define(scope, stmt.name, "let_int", value if value is not None else 0, stmt.span)

    def region(
        self, expr: RegionExpr, scope: _Scope, name: str | None, decos: frozenset[str]
    ) -> Region | None:
        buf = self.buffers.get(expr.buffer)
        label = name or f"region({expr.buffer}, ...)"
        if buf is None:
            near = self._near(expr.buffer, self.buffers)
            self.err(
                "E601",
                f"{label}: no buffer named {expr.buffer!r}"
                + (f"; did you mean {near!r}?" if near else ""),
                expr.span,
            )
            return None
        offset = self.int_of(expr.offset, scope, f"{label} offset")
        extent = self.int_of(expr.extent, scope, f"{label} extent")
        if offset is None or extent is None:
            return None
        if offset < 0 or extent <= 0:
            self.err(
                "E602",
                f"{label}: offset must be >= 0 and extent > 0 (offset {offset}, extent {extent})",
                expr.span,
            )
            return None
        if buf.size is not None and offset + extent > buf.size:
            self.err(
                "E602",
                f"{label}: bytes [{offset}, {offset + extent}) lie outside "
                f"buffer {buf.name} of {buf.size} bytes",
                expr.span,
            )
        region = Region(
            name,
            buf.name,
            buf.level,
            buf.engine,
            offset,
            extent,
            decos=decos | buf.decos,
            span=expr.span,
        )
        typ = expr.type
        if typ is None:
            return region
        shape = []
        for d in typ.shape:
            v = self.int_of(d, scope, f"{label} shape")
            if v is None:
                return region
            shape.append(v)
        strides = None
        if typ.strides is not None:
            strides = []
            for s in typ.strides:
                v = self.int_of(s, scope, f"{label} strides")
                if v is None:
                    return region
                strides.append(v)
        span = typ.span
        if any(d <= 0 for d in shape):
            self.err("E605", f"{label}: shape {shape} has a dimension <= 0", span)
            return region
        if typ.layout is not None and len(typ.layout) != len(shape):
            self.err(
                "E605",
                f"{label}: layout {typ.layout} names {len(typ.layout)} "
                f"dimension(s) but the shape {shape} has rank {len(shape)}",
                span,
            )
        if strides is not None:
            if len(strides) != len(shape):
                self.err("E605", f"{label}: strides {strides} do not match rank {len(shape)}", span)
                strides = None
            elif any(s < 0 for s in strides):
                self.err("E605", f"{label}: negative stride in {strides}", span)
                strides = None
        elem = typ.elem if typ.elem in BITS else None
        if elem is not None:
            bits = BITS[elem]
            need = math.ceil(math.prod(shape) * bits / 8)
            if extent < need:
                self.err(
                    "E603",
                    f"{label}: {math.prod(shape)} x {elem} need "
                    f"ceil({math.prod(shape)} * {bits} / 8) = {need} bytes, extent is "
                    f"{extent}",
                    expr.span,
                )
            if strides is not None:
                last = sum((d - 1) * s for d, s in zip(shape, strides, strict=True))
                reach = math.ceil((last + 1) * bits / 8)
                if reach > extent:
                    self.err(
                        "E604",
                        f"{label}: strides {strides} reach element {last}, "
                        f"byte {reach - 1}, beyond the extent of {extent} bytes",
                        expr.span,
                    )
        if typ.quant is not None and elem is not None:
            self.quant(typ.quant, elem, shape, scope, label)
        return Region(
            name,
            buf.name,
            buf.level,
            buf.engine,
            offset,
            extent,
            elem,
            tuple(shape),
            typ.layout,
            tuple(strides) if strides else None,
            typ.quant,
            decos | buf.decos,
            expr.span,
        )

    def quant(self, q: Quant, elem: str, shape: list[int], scope: _Scope, label: str) -> None:
        span = q.span
        if elem not in INT_TYPES:
            self.err(
                "E606",
                f"{label}: quant descriptor on a {elem} region (quantization "
                "describes integer data)",
                span,
            )
            return
        scales = [q.scale] if q.kind == "per_tensor" else list(q.scales)
        zps = [q.zero_point] if q.kind == "per_tensor" else list(q.zero_points)
        for s in scales:
            v = self.value_num(s, scope)
            if v is None or v <= 0:
                self.err("E606", f"{label}: scales must be positive numbers", span)
                break
        for z in zps:
            v = self.value_num(z, scope)
            if not isinstance(v, int):
                self.err("E606", f"{label}: zero points must be integers", span)
                break
        if q.kind == "per_tensor":
            return
        axis = self.int_of(q.axis, scope, f"{label} quant axis")
        if axis is None:
            return
        if not 0 <= axis < len(shape):
            self.err("E606", f"{label}: quant axis {axis} outside rank {len(shape)}", span)
            return
        want = shape[axis]
        if q.kind == "per_group":
            g = self.int_of(q.group_size, scope, f"{label} group_size")
            if g is None:
                return
            if g <= 0:
                self.err("E606", f"{label}: group_size must be a positive integer, not {g}", span)
                return
            want = -(-shape[axis] // g)
        for key, values in (("scales", scales), ("zero_points", zps)):
            if len(values) != want:
                self.err(
                    "E606",
                    f"{label}: {q.kind} {key} has {len(values)} entries, dim[{axis}] needs {want}",
                    span,
                )
