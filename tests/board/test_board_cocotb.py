"""The board core (PLL bypassed) under cocotb + Verilator, through its UART pins only:
``sim/tb_board.py`` (a bound gemm loaded, run and read back with the host code of ``npu
board run`` equals the executor; malformed frames get error replies and never wedge the
bridge)."""

from __future__ import annotations

import pytest

from sim.runner import Design, build, run_cocotb

pytestmark = [pytest.mark.cocotb, pytest.mark.xdist_group("board_core")]

#: The tiny engine (the bitstream's), 64 KiB of block RAM, 8 clock cycles per UART bit, a
#: short timeout.
DESIGN = Design("board_core", "npu.board.top:BoardCore",
                {"device": "tiny", "memory_bytes": 65536, "divisor": 8, "timeout": 4096,
                 "stretch_bits": 4})


def test_board_core_over_the_uart():
    tests, failed = run_cocotb(build(DESIGN), "sim.tb_board")
    assert (tests, failed) == (2, 0)
