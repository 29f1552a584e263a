"""``npu`` subcommands of the ``nac`` package (see :mod:`npu.cli`)."""

from __future__ import annotations

__all__ = ["register"]


def register(subparsers):
    """Add this package's subcommands; return its user-error exception types."""
    return ()
