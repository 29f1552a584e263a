"""The ``npu`` command line: one tool, a subcommand per job.

Subcommands are contributed by modules that expose ``register(subparsers)``; that function
adds its parsers (each with ``set_defaults(func=handler)``, ``handler(args) -> int``) and
returns the tuple of exception types that are *user errors* (bad input files and the
like). Those are printed as ``npu: error: <message>`` with exit status 1, never as a
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

#: Modules that contribute subcommands, in help order.
COMMAND_MODULES = ("npu.tools.hwcli", "nac.cli", "nac.compile_cli", "nem.cli",
                   "npu.tools.nem_sim", "npu.tools.run_rtl", "npu.board.host")


def build_parser() -> tuple[argparse.ArgumentParser, tuple[type[BaseException], ...]]:
    """Build the top-level parser and collect the user-error types of every module.

    Returns
    -------
    parser : argparse.ArgumentParser
        The parser with every registered subcommand.
    user_errors : tuple of exception types
        Exceptions that are reported as a one-line error message.
    """
    parser = argparse.ArgumentParser(
        prog="npu", description="Open NPU co-design kit: NAC models, NEM plans, RTL, simulation."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    user_errors: list[type[BaseException]] = []
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        user_errors.extend(module.register(sub) or ())
    return parser, tuple(user_errors)


def main(argv: list[str] | None = None) -> int:
    """Run the ``npu`` command line and return its exit status."""
    parser, user_errors = build_parser()
    args = parser.parse_args(argv)
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a reader that went away is seen here, not at interpreter exit
        return status
    except BrokenPipeError:
        # The reader went away (``npu dis x.nac | head``): stop quietly, like a C tool on
        # SIGPIPE; stdout goes to /dev/null so the interpreter's final flush stays silent.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13
    except user_errors as exc:
        print(f"npu: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        # Missing or unreadable files are the user's to fix, not a crash: exit status 1
        # everywhere (npu nem reports its own the same way).
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"npu: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
