"""The entry points: load a document, pick its device and run the checker's walk."""

from __future__ import annotations

import os

from nem.checker.base import _CheckerBase
from nem.checker.compute import _ComputeChecks
from nem.checker.declarations import _DeclarationChecks
from nem.checker.loops import _LoopChecks
from nem.checker.plan import CheckResult, Plan
from nem.checker.program import _ProgramChecks
from nem.checker.regions import _RegionChecks
from nem.checker.resources import _ResourceChecks
from nem.checker.tasks import _TaskChecks
from nem.device import Device
from nem.diagnostics import Span
from nem.loader import Workspace, load, load_device_file, load_text
from nem.registry import Registry, load_registry
from nem.tree import DeviceConfig, DeviceRef


class _Checker(
    _CheckerBase,
    _ProgramChecks,
    _DeclarationChecks,
    _RegionChecks,
    _LoopChecks,
    _TaskChecks,
    _ResourceChecks,
    _ComputeChecks,
):
    """The whole checker: one instance walks one program (see :func:`check_workspace`)."""


def _target_device(ws: Workspace, device: str | None, base_dir: str) -> Device | None:
    doc = ws.doc
    span = doc.device.span if doc.device is not None else Span(doc.file, 1, 1)
    name = None
    if device is not None:
        if os.path.isfile(device):
            name = load_device_file(ws, device, ".", span)
        else:
            name = device
    elif isinstance(doc.device, DeviceRef):
        if doc.device.is_path:
            name = load_device_file(ws, doc.device, base_dir, span)
        else:
            name = doc.device.target
    elif isinstance(doc.device, DeviceConfig):
        name = doc.device.name
    if name is None:
        return None
    return ws.resolve(name, span)


def check_workspace(
    ws: Workspace,
    *,
    device: str | None = None,
    base_dir: str = ".",
    registry: Registry | None = None,
) -> CheckResult:
    """Check a loaded workspace (see :func:`check_file`)."""
    registry = registry or load_registry()
    doc = ws.doc
    if not doc.is_program:
        for dev, _ in [ws.devices[d.name] for d in doc.devices if d.name in ws.devices]:
            ws.resolve(dev.name, dev.span, need_topology=False)
        return CheckResult(ws.sink.sorted(), None, ws)
    target = _target_device(ws, device, base_dir)
    checker = _Checker(ws, target, registry)
    checker.run()
    plan = Plan(checker.buffers, checker.instances, checker.order, checker.consts)
    return CheckResult(ws.sink.sorted(), target, ws, checker.tasks, plan)


def check_file(path: str | os.PathLike, *, device: str | None = None) -> CheckResult:
    """Parse and check a NEM file.

    Parameters
    ----------
    path : path-like
        A program or a config document.
    device : str, optional
        Target device: a device file, or the name of a device visible from ``path``. It
        replaces the program's own ``device`` directive.

    Returns
    -------
    CheckResult
        Diagnostics in source order, the resolved device (if any) and the workspace.
    """
    ws = load(path)
    return check_workspace(ws, device=device, base_dir=os.path.dirname(os.fspath(path)) or ".")


def check_text(
    text: str, *, file: str = "<string>", base_dir: str = ".", device: str | None = None
) -> CheckResult:
    """Check NEM source held in memory; includes and device files are relative to ``base_dir``."""
    ws = load_text(text, file, base_dir)
    return check_workspace(ws, device=device, base_dir=base_dir)
