"""Amaranth hardware of the NPU: NAC front-end blocks and the NEM engine.

Every block is an :class:`amaranth.lib.wiring.Component` in a module named for it
(``memory``, ``decoder``, ``mmap``, ``seq``, ``dma``, ``nmu``, ``cstl``, ...). Verilog is
generated from these classes (``npu verilog``), never committed.
"""
