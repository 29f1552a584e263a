"""Amaranth hardware of the NPU: NAC front-end blocks and the NEM engine.

Subpackages by wing (imports point down: ``engine`` -> ``nmu`` -> ``cstl`` -> ``bus``):
``nac`` (decoder, MMAP coprocessor, front-end), ``engine`` (top, SEQ, copy units, entry
fetcher, configuration), ``nmu``, ``cstl`` (requantisation), ``bus`` (AXI, CSR, SRAM,
streams, DMA datapath, shared ports) and ``tools`` (command line, synthesis, top levels).
Every block is an :class:`amaranth.lib.wiring.Component`. Verilog is generated from these
classes (``npu verilog``), never committed.
"""
