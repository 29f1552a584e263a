"""The NEM engine's parameters, taken from a resolved NEM device (one source for all).

The engine generator, its tests and the benchmarks read a NEM device file and derive the
hardware from it, so that the binder, the executor and the RTL agree on sizes and counts:

================  ==================================================================
parameter         from the resolved device
================  ==================================================================
word width        ``DMA.bytes_per_cycle`` (must equal ``sDMA.bytes_per_cycle``): the
                  L1/L2 word and the AXI data bus are one width
L1 / L2 depth     ``l1_size_bytes`` / ``l2_size_bytes`` divided by the word bytes
DMA count         ``per_engine.DMA``
sDMA count        ``device_units.sDMA``
tokens            ``SEQ.max_active_tokens`` (at most ``nem.taskformat.MAX_TOKENS``)
NMU               ``per_engine.NMU`` (0 or 1); its array from ``NMU.int8_macs``
                  (``lanes`` = word bytes, ``cols = int8_macs / lanes``), weight buffer
                  rows ``NMU.weight_rows`` (default 512), channel table
                  ``NMU.max_channels`` output channels (default 256)
CSTL count        ``per_engine.CSTL`` (0 .. :data:`MAX_CSTL`), each of the word width
device hash       ``nem.binder.device_hash`` (baked into the SEQ's header check)
================  ==================================================================

Shipped devices live in ``hw/npu/devices/``: ``small`` (``engine_small.nem``, fits an
ECP5-85F), ``tiny`` (``engine_tiny.nem``, the small one at a 32-bit word: the board's
engine) and ``sim`` (``engine_sim.nem``, a larger simulation device).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nem.binder import device_hash
from nem.device import Device
from nem.diagnostics import Span
from nem.loader import load
from nem.target import SHIPPED
from nem.taskformat import DDR_ADDRESS_BITS, MAX_TOKENS
from npu.cstl.eltalu import LATENCY as ELT_ALU_LATENCY
from npu.nmu.model import NmuGeometry

__all__ = ["DEVICES", "DEVICE_DIR", "MAX_CSTL", "EngineConfig", "load_device"]

#: CSTL instances an engine may have.
MAX_CSTL = 4

DEVICE_DIR = Path(__file__).resolve().parents[1] / "devices"
#: Shipped devices: short name -> (file in DEVICE_DIR, device name inside it); the
#: back-end's table (``nem.target.SHIPPED``), defined once there.
DEVICES = SHIPPED


def load_device(name: str) -> Device:
    """Resolve a device: a shipped one by its key in :data:`DEVICES`, or any device file
    as ``"path/to/file.nem:device_name"``."""
    if name in DEVICES:
        file, device_name = DEVICES[name]
        path = DEVICE_DIR / file
    elif ":" in name:
        file, _, device_name = name.rpartition(":")
        path = Path(file)
    else:
        raise ValueError(f"device must be one of {sorted(DEVICES)} or 'FILE.nem:NAME', "
                         f"not {name!r}")
    if not path.is_file():
        raise ValueError(f"device file {path} does not exist")
    ws = load(path)
    device = ws.resolve(device_name, Span(str(path), 1, 1))
    errors = [d for d in ws.sink.items if d.severity == "error"]
    if device is None or errors:
        raise ValueError(f"device {name!r} does not resolve: {[str(d) for d in errors]}")
    return device


@dataclass(frozen=True)
class EngineConfig:
    """Hardware parameters of one engine, derived from a resolved device."""

    name: str
    data_width: int  # bits, L1/L2 word and AXI data
    l1_depth: int  # words
    l2_depth: int  # words
    n_dma: int
    n_sdma: int
    tokens: int
    device_hash: bytes
    addr_width: int = DDR_ADDRESS_BITS  # AXI (DDR) byte address (nem.taskformat)
    nmu: NmuGeometry | None = None  # the engine's NMU, if the device has one
    n_cstl: int = 0  # CSTL instances
    cstl_elt_lanes: int = 1  # lanes of each CSTL's binary eltwise ALU (CSTL eltwise_lanes)

    @property
    def n_nmu(self) -> int:
        """NMU instances (0 or 1)."""
        return 0 if self.nmu is None else 1

    @property
    def wbytes(self) -> int:
        """Bytes per word."""
        return self.data_width // 8

    @property
    def ddr_bytes(self) -> int:
        """Size of the DDR address space the engine reaches."""
        return 1 << self.addr_width

    @classmethod
    def from_device(cls, device: Device) -> EngineConfig:
        """The engine for ``device``; ``ValueError`` names what the generator cannot build."""
        if not device.concrete:
            raise ValueError(f"device {device.name}: no topology (abstract device)")
        if device.num_engines != 1:
            raise ValueError(f"device {device.name}: {device.num_engines} engines; the engine "
                             "generator builds one")
        dma_bpc = device.characteristic("DMA", "bytes_per_cycle")
        sdma_bpc = device.characteristic("sDMA", "bytes_per_cycle")
        if dma_bpc is None or dma_bpc != sdma_bpc:
            raise ValueError(f"device {device.name}: DMA and sDMA bytes_per_cycle must be "
                             f"given and equal (one word width), not {dma_bpc} and {sdma_bpc}")
        if dma_bpc not in (4, 8, 16, 32, 64):
            raise ValueError(f"device {device.name}: bytes_per_cycle must be 4..64, a power "
                             f"of two, not {dma_bpc}")
        for what, size in (("l1_size_bytes", device.l1_size_bytes),
                           ("l2_size_bytes", device.l2_size_bytes)):
            if not size or size % dma_bpc:
                raise ValueError(f"device {device.name}: {what} {size} is not a multiple of "
                                 f"the word ({dma_bpc} bytes)")
        for unit in ("NMU", "CSTL"):  # the cycle model's datapath mode (nem.cycles)
            lanes = device.characteristic(unit, "lanes")
            if lanes is not None and lanes != dma_bpc:
                raise ValueError(f"device {device.name}: {unit} lanes {lanes} is not the L1 "
                                 f"word the engine builds ({dma_bpc} bytes)")
        n_dma, n_sdma = device.units("DMA"), device.units("sDMA")
        if n_dma < 1 or n_sdma < 1:
            raise ValueError(f"device {device.name}: needs at least one DMA and one sDMA, "
                             f"has {n_dma} and {n_sdma}")
        tokens = device.characteristic("SEQ", "max_active_tokens") or MAX_TOKENS
        if not 1 <= tokens <= MAX_TOKENS:
            raise ValueError(f"device {device.name}: max_active_tokens {tokens} not in "
                             f"1..{MAX_TOKENS}")
        nmu = None
        n_nmu = device.units("NMU")
        if n_nmu > 1:
            raise ValueError(f"device {device.name}: {n_nmu} NMUs per engine; the engine "
                             "generator builds at most one")
        if n_nmu == 1:
            try:
                nmu = NmuGeometry.from_device(
                    device, dma_bpc,
                    wrows=device.characteristic("NMU", "weight_rows") or 512,
                    channels=device.characteristic("NMU", "max_channels") or 256)
            except ValueError as exc:
                raise ValueError(f"device {device.name}: NMU: {exc}") from None
        n_cstl = device.units("CSTL")
        if n_cstl > MAX_CSTL:
            raise ValueError(f"device {device.name}: {n_cstl} CSTLs per engine; the engine "
                             f"generator builds at most {MAX_CSTL}")
        elt_lanes = device.characteristic("CSTL", "eltwise_lanes") or 1
        if elt_lanes not in [1 << k for k in range(dma_bpc.bit_length())]:
            raise ValueError(f"device {device.name}: CSTL eltwise_lanes {elt_lanes} is not a "
                             f"power of two from 1 to the L1 word ({dma_bpc} bytes)")
        depth = device.characteristic("CSTL", "eltwise_depth")
        if n_cstl and depth is not None and depth != ELT_ALU_LATENCY:
            raise ValueError(f"device {device.name}: CSTL eltwise_depth {depth} is not the "
                             f"engine's: its eltwise ALU has {ELT_ALU_LATENCY} stages "
                             "(npu.cstl.eltalu.LATENCY)")
        return cls(
            name=device.name,
            data_width=8 * dma_bpc,
            l1_depth=device.l1_size_bytes // dma_bpc,
            l2_depth=device.l2_size_bytes // dma_bpc,
            n_dma=n_dma,
            n_sdma=n_sdma,
            tokens=tokens,
            device_hash=device_hash(device),
            nmu=nmu,
            n_cstl=n_cstl,
            cstl_elt_lanes=elt_lanes,
        )

    @classmethod
    def shipped(cls, name: str) -> EngineConfig:
        """The engine of device ``name``: ``"small"``, ``"sim"`` or ``"FILE.nem:NAME"``."""
        return cls.from_device(load_device(name))
