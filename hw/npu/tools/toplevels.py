"""The top-level components of the design, with the parameters ``npu verilog`` uses.

Each entry maps a Verilog top-module name to ``("module:Class", constructor kwargs)``.
The simulation regressions (``sim/regression.py``) build these and other parameter sets.
"""

from __future__ import annotations

import importlib

__all__ = ["TOPLEVELS", "instantiate"]

TOPLEVELS: dict[str, tuple[str, dict]] = {
    # 64-bit x 512-word L1 bank of the small device (4 KiB).
    "sram": ("npu.bus.memory:SRAM", {"data_width": 64, "depth": 512}),
    "stream_fifo": ("npu.bus.stream:StreamFIFO", {"width": 32, "depth": 8}),
    "nac_decoder": ("npu.nac.decoder:InstructionDecoder", {"max_args": 8, "max_consts": 8}),
    "nac_mmap": ("npu.nac.mmap:MmapCoprocessor",
                 {"n_slots": 16, "max_params": 64, "max_instructions": 1024}),
    "nac_frontend": ("npu.nac.frontend:NacFrontEnd",
                     {"max_args": 8, "max_consts": 8, "n_slots": 16, "max_params": 64,
                      "max_instructions": 1024}),
    "axi_port": ("npu.bus.axi:AxiBurstPort",
                 {"addr_width": 32, "data_width": 64, "max_outstanding": 4}),
    "dma_region_copy": ("npu.bus.dma:RegionCopy",
                        {"data_width": 64, "src_depth": 4096, "dst_depth": 512}),
    "requant": ("npu.cstl.requant:RequantStage", {"lanes": 8, "rows": 16, "out_type": "i8"}),
    # The CSTL of the small device (64-bit L1 word, 8 KiB L1).
    "cstl": ("npu.cstl.unit:CstlUnit", {"lanes": 8, "depth": 1024}),
    # The NEM engine of the small shipped device (hw/npu/devices/engine_small.nem).
    "nem_engine": ("npu.engine.top:NemEngine", {"device": "small"}),
}


def instantiate(factory: str, params: dict):
    """Construct the component named by ``"module:Class"`` with *params*."""
    module_name, _, class_name = factory.partition(":")
    return getattr(importlib.import_module(module_name), class_name)(**params)
