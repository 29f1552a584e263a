"""``npu`` subcommands for the hardware: ``sim``, ``verilog``, ``lint-verilog``."""

from __future__ import annotations

__all__ = ["register"]


def register(subparsers):
    """Add the hardware subcommands; return their user-error exception types."""
    return ()
