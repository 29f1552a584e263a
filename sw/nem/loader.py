"""Loading a NEM document with its includes, and finding the target device.

Include Semantics (nem.md): paths are relative to the including file; circular chains are
errors; programs in included files are ignored; duplicate device or type family names are
errors (the same file reached twice is not a duplicate). One project rule on top: when an
include names the standard baseline (``nem_baseline_1.0.nem`` or ``npm_baseline_1.0.nem``)
and no such file sits next to the includer, the copy shipped in ``nem/data`` is used -- the
spec's examples include it by bare name from anywhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from nem.device import BASELINE_NAMES, Device, resolve_device
from nem.diagnostics import DiagnosticSink, Span
from nem.families import Catalog
from nem.parser import parse
from nem.tree import DeviceConfig, DeviceRef, Document, TypeFamily

__all__ = ["BASELINE_FILES", "Workspace", "load", "load_text"]

BASELINE_FILES = ("nem_baseline_1.0.nem", "npm_baseline_1.0.nem")
_PACKAGED = "<nem>/npm_baseline_1.0.nem"
MAX_FILE_BYTES = 64 << 20


@dataclass
class Workspace:
    """A parsed document plus everything its includes make visible."""

    doc: Document
    sink: DiagnosticSink
    families: dict[str, TypeFamily] = field(default_factory=dict)
    devices: dict[str, tuple[DeviceConfig, int]] = field(default_factory=dict)
    catalog: Catalog | None = None
    _parsed: dict[str, Document] = field(default_factory=dict)

    def resolve(self, name: str, span: Span, *, need_topology: bool = True) -> Device | None:
        """Resolve a visible device by name (either baseline spelling is accepted)."""
        if name not in self.devices and not (
            name in BASELINE_NAMES and any(b in self.devices for b in BASELINE_NAMES)
        ):
            known = ", ".join(sorted(self.devices)) or "none"
            self.sink.add(
                "E305",
                f"device {name!r} is not defined in this file or its includes (visible: {known})",
                span,
            )
            return None
        return resolve_device(
            name, self.devices, self.catalog, self.sink, need_topology=need_topology
        )


def _read(path: str) -> str:
    if path == _PACKAGED:
        return resources.files("nem").joinpath("data", "npm_baseline_1.0.nem").read_text("utf-8")
    size = os.path.getsize(path)
    if size > MAX_FILE_BYTES:
        raise OSError(
            f"{path}: {size} bytes is larger than the {MAX_FILE_BYTES >> 20} MiB "
            "limit for NEM sources"
        )
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def _locate(include: str, base_dir: str) -> str | None:
    if base_dir == "<nem>":
        return _PACKAGED if Path(include).name in BASELINE_FILES else None
    path = os.path.normpath(os.path.join(base_dir, include))
    if os.path.isfile(path):
        return os.path.realpath(path)
    if Path(include).name in BASELINE_FILES:
        return _PACKAGED
    return None


def _add_decls(ws: Workspace, doc: Document) -> None:
    for fam in doc.families:
        if fam.name in ws.families:
            prev = ws.families[fam.name]
            ws.sink.add(
                "E304",
                f"type family {fam.name!r} is defined twice (first at {prev.span})",
                fam.span,
            )
            continue
        ws.families[fam.name] = fam
    devices = list(doc.devices)
    if isinstance(doc.device, DeviceConfig):
        devices.append(doc.device)
    for dev in devices:
        if dev.name in ws.devices:
            prev = ws.devices[dev.name][0]
            ws.sink.add(
                "E303", f"device {dev.name!r} is defined twice (first at {prev.span})", dev.span
            )
            continue
        ws.devices[dev.name] = (dev, len(ws.devices))


def _shown(path: str) -> str:
    """How a file is named in diagnostics: relative to the working directory when possible."""
    if path == _PACKAGED or not os.path.isabs(path):
        return path
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path


def _visit(ws: Workspace, path: str, stack: list[str], span: Span | None) -> Document | None:
    if path in stack:
        chain = " -> ".join(_shown(p) for p in [*stack[stack.index(path) :], path])
        ws.sink.add("E302", f"circular include: {chain}", span or Span(path, 1, 1))
        return None
    if path in ws._parsed:
        return ws._parsed[path]
    doc = parse(_read(path), _shown(path), ws.sink)
    ws._parsed[path] = doc
    base_dir = "<nem>" if path == _PACKAGED else os.path.dirname(path)
    stack.append(path)
    for inc in doc.includes:
        target = _locate(inc.path, base_dir)
        if target is None:
            ws.sink.add(
                "E301", f"include {inc.path!r} not found (looked in {base_dir or '.'})", inc.span
            )
            continue
        _visit(ws, target, stack, inc.span)
    stack.pop()
    if stack:  # an included file: only its declarations count (Include Semantics 5)
        _add_decls(ws, Document(families=doc.families, devices=doc.devices))
    return doc


def _finish(ws: Workspace) -> Workspace:
    _add_decls(ws, ws.doc)
    ws.catalog = Catalog(list(ws.families.values()), ws.sink)
    return ws


def load(path: str | os.PathLike, sink: DiagnosticSink | None = None) -> Workspace:
    """Parse ``path`` and every file it includes.

    Parameters
    ----------
    path : path-like
        The document to load.
    sink : DiagnosticSink, optional
        Receives diagnostics from every file (a new one by default).

    Returns
    -------
    Workspace
        The root document, the visible families and devices, and the sink.
    """
    sink = sink if sink is not None else DiagnosticSink()
    real = os.path.realpath(os.fspath(path))
    ws = Workspace(Document(), sink)
    doc = _visit(ws, real, [], None)
    ws.doc = doc if doc is not None else Document()
    return _finish(ws)


def load_text(
    text: str, file: str = "<string>", base_dir: str = ".", sink: DiagnosticSink | None = None
) -> Workspace:
    """Like :func:`load` for text in memory; includes are relative to ``base_dir``."""
    sink = sink if sink is not None else DiagnosticSink()
    ws = Workspace(Document(), sink)
    doc = parse(text, file, sink)
    ws.doc = doc
    for inc in doc.includes:
        target = _locate(inc.path, base_dir)
        if target is None:
            sink.add("E301", f"include {inc.path!r} not found (looked in {base_dir})", inc.span)
            continue
        _visit(ws, target, [file], inc.span)
    return _finish(ws)


def load_device_file(ws: Workspace, ref: DeviceRef | str, base_dir: str, span: Span) -> str | None:
    """Load a device file named by a ``device "file"`` directive or ``--device``.

    The file's devices become visible in ``ws``; returns the name of the target: the only
    device of the file, or the first one with warning W402 when it defines several.
    """
    target = ref.target if isinstance(ref, DeviceRef) else ref
    path = os.path.normpath(os.path.join(base_dir, target))
    if not os.path.isfile(path):
        ws.sink.add("E305", f"device file {target!r} not found (looked in {base_dir or '.'})", span)
        return None
    before = set(ws.devices)
    doc = _visit(ws, os.path.realpath(path), ["<program>"], span)
    if doc is None:
        return None
    if doc.is_program and not isinstance(doc.device, DeviceConfig):
        ws.sink.add(
            "E308", f"device file {target!r} is a program, not a device configuration", span
        )
        return None
    ws.catalog = Catalog(list(ws.families.values()))
    names = [d.name for d in doc.devices] or (
        [doc.device.name] if isinstance(doc.device, DeviceConfig) else []
    )
    if not names:
        ws.sink.add("E305", f"device file {target!r} declares no device", span)
        return None
    if len(names) > 1:
        ws.sink.add(
            "W402",
            f"device file {target!r} defines {', '.join(names)}; the target "
            f"is the first, {names[0]!r}",
            span,
        )
    del before
    return names[0]
