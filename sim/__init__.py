"""Simulation side of the kit: the Verilator build cache and cocotb runner, cocotb
testbenches (``tb_*.py``), bus models and stream drivers shared by all block tests."""
