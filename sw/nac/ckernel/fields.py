"""Checked reads of IR v2 JSON fields and the importer's error type."""

from __future__ import annotations

import json
import math

from nac.ir import IRError

_MISSING = object()
_SCOPES = ("global", "layer")
_ALIGNED = {"aligned_embed": "embed", "aligned_head": "head_dim",
            "aligned_intermediate": "intermediate"}


class CKernelError(IRError):
    """A C-Kernel-Engine IR v2 file is malformed or uses something not supported."""


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _field(obj, name, kind, where, default=_MISSING):
    """``obj[name]`` checked against *kind* (``int``, ``str``, ``list``, ``dict``,
    ``float`` for any real number, or a tuple of those / ``None``)."""
    if not isinstance(obj, dict):
        raise CKernelError(f"{where}: must be a JSON object, not {type(obj).__name__}")
    if name not in obj:
        if default is not _MISSING:
            return default
        raise CKernelError(f"{where}: missing field {name!r}")
    value = obj[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if k is None and value is None:
            return value
        if k is int and _is_int(value):
            return value
        if k is float and (_is_int(value) or isinstance(value, float)):
            return value
        if k in (str, list, dict) and isinstance(value, k):
            return value
    names = " or ".join({int: "an integer", float: "a number", str: "a string",
                         list: "a list", dict: "an object", None: "null"}[k] for k in kinds)
    raise CKernelError(f"{where}: field {name!r} must be {names}, not {_short(value)}")


def _real(value):
    """A JSON number as a float (integers too large for a float become +-inf)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _short(value):
    text = json.dumps(value) if isinstance(value, (dict, list, str, int, float, bool)) or \
        value is None else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _need(cond, where, message):
    if not cond:
        raise CKernelError(f"{where}: {message}")
