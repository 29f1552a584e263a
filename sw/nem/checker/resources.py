"""Device validity of a task: engine placement and the ``@resource`` binding (Target
Resource Validity Rule)."""

from __future__ import annotations

from nem.checker.base import _Scope
from nem.checker.plan import Region
from nem.registry import Opcode
from nem.tree import Decorator
from nem.units import RESOURCE_INVALID, RESOURCE_TARGETS


class _ResourceChecks:
    """Engine placement and ``@resource``."""

    def placement(self, stmt, regions: list[Region], decos, scope: _Scope) -> int | None:
        engines = sorted({r.engine for r in regions if r.level == "L1" and r.engine is not None})
        engine = engines[0] if engines else None
        if len(engines) > 1:
            self.err(
                "E807",
                "task references "
                f"{' and '.join(f'L1[{e}]' for e in engines)}; a task runs on one engine",
                stmt.span,
            )
        if "seq_engine" in decos:
            k = self.int_of(decos["seq_engine"].args[0], scope, "@seq_engine")
            n = self.device.num_engines if self.device else None
            if k is not None and n is not None and k >= n:
                self.err(
                    "E808",
                    f"@seq_engine({k}) but the device has {n} engine(s)",
                    decos["seq_engine"].span,
                )
            elif k is not None and engines and engines != [k]:
                self.err(
                    "E808",
                    f"@seq_engine({k}) but the task references L1[{engines[0]}]",
                    decos["seq_engine"].span,
                )
            elif k is not None:
                engine = k
        return engine

    def resource(
        self, stmt, deco: Decorator, opcode: Opcode, scope: _Scope
    ) -> tuple[str, int] | None:
        """Check ``@resource``; return the binding after Target Resource Validity rules 2-3."""
        unit = deco.unit
        if unit in RESOURCE_INVALID:
            self.err(
                "E804",
                f"@resource({unit}[...]): {unit} is not a valid target (valid: "
                f"{', '.join(RESOURCE_TARGETS)})",
                deco.span,
            )
            return
        if unit not in RESOURCE_TARGETS:
            self.err(
                "E804",
                f"@resource({unit}[...]): unknown unit type (valid: {', '.join(RESOURCE_TARGETS)})",
                deco.span,
            )
            return
        index = self.int_of(deco.index, scope, "@resource index")
        if index is not None and index < 0:
            self.err("E803", f"@resource index must be >= 0, not {index}", deco.span)
            return
        eligible = eligible_units(opcode)
        if unit not in eligible:
            self.err(
                "E805",
                f"{unit} cannot execute {opcode.name} (eligible unit types: {', '.join(eligible)})",
                deco.span,
            )
            return
        if self.device is None or not self.device.concrete or index is None:
            return None if index is None else (unit, index)
        count = self.device.units(unit)
        if count == 0:
            present = [u for u in eligible if self.device.units(u) > 0]
            if present:
                self.err(
                    "W802",
                    f"device {self.device.name!r} has no {unit}; the binder "
                    f"translates {opcode.name} to {present[0]}",
                    deco.span,
                )
                return present[0], index % self.device.units(present[0])
            else:
                self.err(
                    "E806",
                    f"device {self.device.name!r} has no {unit} and no other unit "
                    f"that runs {opcode.name}",
                    deco.span,
                )
        elif index >= count:
            self.err(
                "W801",
                f"{unit}[{index}] does not exist on {self.device.name!r} "
                f"({count} per engine); the binder remaps it to {unit}[{index % count}]",
                deco.span,
            )
            return unit, index % count
        return unit, index


def eligible_units(opcode: Opcode) -> tuple[str, ...]:
    """Unit types that may run ``opcode`` (Resource Classes and Task Mapping).

    transfer -> DMA; store -> CSTL or DMA (the spec's table says CSTL, the registry DMA;
    both are accepted); linear algebra and convolution -> NMU; the rest -> CSTL; VPU is
    the fallback for every compute opcode.
    """
    if opcode.name == "transfer":
        return ("DMA",)
    if opcode.name == "store":
        return ("CSTL", "DMA")
    primary = opcode.execution_unit if opcode.execution_unit in RESOURCE_TARGETS else "VPU"
    return (primary,) if primary == "VPU" else (primary, "VPU")
