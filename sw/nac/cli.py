"""``npu`` subcommands of the ``nac`` package: ``dis`` and ``asm`` (see :mod:`npu.tools.cli`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nac.container import dumps, loads
from nac.errors import NacFormatError
from nac.text import assemble, disassemble, to_json

__all__ = ["register"]


def _cmd_dis(args):
    path = Path(args.file)
    try:
        nac = loads(path.read_bytes())
    except NacFormatError as exc:
        raise NacFormatError(str(exc), path=path) from None
    if args.json:
        json.dump(to_json(nac), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(disassemble(nac))
    return 0


def _cmd_asm(args):
    path = Path(args.file)
    nac = assemble(path.read_text(encoding="utf-8"), path=path)
    raw = dumps(nac)
    loads(raw)  # the assembled file must itself be valid
    Path(args.output).write_bytes(raw)
    return 0


def register(subparsers):
    """Add ``dis`` and ``asm``; return the user-error types."""
    p = subparsers.add_parser("dis", help="disassemble a .nac file (text or --json)")
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="machine-readable JSON")
    p.set_defaults(func=_cmd_dis)
    p = subparsers.add_parser("asm", help="assemble the text form back into a .nac file")
    p.add_argument("file")
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=_cmd_asm)
    return (NacFormatError, UnicodeDecodeError)
