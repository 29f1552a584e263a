"""The NEM static checker: every rule of ``nem.md`` that can be decided before execution.

:func:`check_file` / :func:`check_text` load a document (with includes and its device), then
walk the program with loops unrolled -- loop bounds are constants -- so that offsets, extents
and shapes are checked with the values each iteration really has. One diagnostic is kept per
(code, source position), so a mistake inside a loop is reported once, with the values of the
first iteration that shows it.

The walk also builds what later stages need: the evaluated regions of every task instance
and a happens-before graph (:mod:`nem.hazards`) for the race check.

The package's modules, by stage: :mod:`~nem.checker.plan` (what the checker hands on),
:mod:`~nem.checker.base` (state, diagnostics, scopes, expressions, decorators),
:mod:`~nem.checker.program` (the statement walk and the whole-program checks),
:mod:`~nem.checker.declarations` (consts, buffers), :mod:`~nem.checker.regions` (regions and
their types), :mod:`~nem.checker.loops`, :mod:`~nem.checker.tasks` (tokens, operands,
transfers), :mod:`~nem.checker.resources` (placement and ``@resource``),
:mod:`~nem.checker.compute` (registry operands, attributes, type families) and
:mod:`~nem.checker.check` (the entry points).
"""

from __future__ import annotations

from nem.checker.base import DECORATORS as DECORATORS
from nem.checker.check import check_file, check_text, check_workspace
from nem.checker.loops import MAX_TASK_INSTANCES as MAX_TASK_INSTANCES
from nem.checker.plan import BufferInfo, CheckResult, Plan, Region, TaskInstance
from nem.checker.resources import eligible_units as eligible_units
from nem.elemtypes import BITS as BITS

__all__ = [
    "BufferInfo",
    "CheckResult",
    "Plan",
    "Region",
    "TaskInstance",
    "check_file",
    "check_text",
    "check_workspace",
]
