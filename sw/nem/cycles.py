"""The executor's cycle model: how long a task keeps its unit busy.

Rates come from the device's ``unit_characteristics`` (keys below; a device may set any of
them, unknown keys are kept on the device untouched). Every task costs a fixed latency plus
its work divided by the unit's rate, rounded up:

==========  ======================  =======  =============================================
unit        key                     default  meaning
==========  ======================  =======  =============================================
NMU         ``int8_macs``           256      int8 x int8 (and int8 x int4) MACs per cycle
NMU         ``int4_macs``           = int8   int8 x int4 MACs per cycle
NMU         ``fp16_macs``           64       f16 / bf16 MACs per cycle
NMU         ``fp32_macs``           16       f32 MACs per cycle
NMU         ``latency_cycles``      8        pipeline fill and drain per task
CSTL        ``elems_per_cycle``     16       elements per cycle (largest operand); on the
                                             int8 path bytes per cycle, the L1 word
                                             (``nem.ops``: a cast to i32 moves 4 bytes per
                                             element, a pool every window tap)
CSTL        ``latency_cycles``      4
VPU         ``elems_per_cycle``     4
VPU         ``latency_cycles``      8
DMA         ``bytes_per_cycle``     32       L2 <-> L1 copy rate (a 256-bit path)
DMA         ``latency_cycles``      8
DMA         ``row_cycles``          0        extra cycles per contiguous run of a copy
sDMA        ``bytes_per_cycle``     16       DDR <-> L2 copy rate (a 128-bit AXI port)
sDMA        ``latency_cycles``      32       DDR access latency
sDMA        ``row_cycles``          0        extra cycles per contiguous run of a copy
==========  ======================  =======  =============================================

A copy walks ``rows`` contiguous runs (``nem.memory.copy_walk``: one for a dense copy) and
costs ``latency_cycles + ceil(bytes / bytes_per_cycle) + row_cycles * rows``.

Overlap is not modelled here: the executor's event schedule decides which tasks run at
the same time on different units.
"""

from __future__ import annotations

import math

from nem.device import Device
from nem.elemtypes import FLOAT_TYPES
from nem.ops import Work
from nem.units import unit_type

__all__ = ["DEFAULTS", "CycleModel"]

DEFAULTS: dict[str, dict[str, int]] = {
    "NMU": {"int8_macs": 256, "fp16_macs": 64, "fp32_macs": 16, "latency_cycles": 8},
    "CSTL": {"elems_per_cycle": 16, "latency_cycles": 4},
    "VPU": {"elems_per_cycle": 4, "latency_cycles": 8},
    "DMA": {"bytes_per_cycle": 32, "latency_cycles": 8, "row_cycles": 0},
    "sDMA": {"bytes_per_cycle": 16, "latency_cycles": 32, "row_cycles": 0},
}


class CycleModel:
    """Per-task durations from a resolved device's unit characteristics."""

    def __init__(self, device: Device | None):
        self.device = device

    def value(self, unit: str, key: str) -> int:
        """``unit_characteristics[unit][key]`` of the device, or the documented default."""
        given = self.device.characteristic(unit, key) if self.device else None
        if given is not None and given > 0:
            return int(given)
        if unit == "NMU" and key == "int4_macs":
            return self.value("NMU", "int8_macs")
        return DEFAULTS[unit][key]

    def macs_per_cycle(self, elems: tuple[str, ...]) -> int:
        """NMU MACs per cycle for operands of these element types."""
        if "f32" in elems:
            return self.value("NMU", "fp32_macs")
        if any(e in FLOAT_TYPES for e in elems):
            return self.value("NMU", "fp16_macs")
        if "i4" in elems:
            return self.value("NMU", "int4_macs")
        return self.value("NMU", "int8_macs")

    def cycles(self, unit: str, work: Work, nbytes: int = 0, elems: tuple[str, ...] = ()) -> int:
        """Cycles a task with ``work`` (or ``nbytes`` moved) keeps a ``unit`` busy."""
        latency = self.value(unit, "latency_cycles")
        if unit == "NMU":
            return latency + math.ceil(work.macs / self.macs_per_cycle(elems))
        if unit_type(unit).role == "copy":
            rows = self.value(unit, "row_cycles") * work.rows
            return latency + math.ceil(nbytes / self.value(unit, "bytes_per_cycle")) + rows
        return latency + math.ceil(max(work.elems, nbytes) / self.value(unit, "elems_per_cycle"))
