"""NAC v1.6 container: object model, binary reader and writer (an exact pair).

:func:`loads` / :func:`dumps` work on bytes, :func:`read_nac` / :func:`write_nac` on files
(with external weights in ``<stem>.safetensors``, see :mod:`nac.weights`).

Canonical layout written by :func:`dumps`: the 88-byte header, then the present sections
contiguously in the order of the header's offset table; absent sections have offset 0.
The reader accepts sections in any order as long as they do not overlap, and checks that
each parses to exactly its extent (up to the next section or the end of the file).
``dumps(loads(b)) == b`` holds for every file in canonical layout; ``loads(dumps(x)) == x``
for every valid object. Encodings the spec leaves loose follow ``nac-notes.md``; the
choices are listed in ``docs/nac-format.md``.

The package's modules: :mod:`~nac.container.model` (the dataclasses),
:mod:`~nac.container.arguments` (§8.3 argument gathering), :mod:`~nac.container.cursor`
(bounded little-endian reads), :mod:`~nac.container.read_tables`,
:mod:`~nac.container.read_data` and :mod:`~nac.container.read_ops` (one reader per section),
:mod:`~nac.container.validate` (cross-section checks), :mod:`~nac.container.reader`
(:func:`loads`, :func:`section_body`) and :mod:`~nac.container.writer` (:func:`dumps`).
"""

from __future__ import annotations

from nac.container.arguments import Argument, gather_arguments
from nac.container.model import (
    Constant,
    DataSection,
    Instruction,
    MmapRecord,
    NacFile,
    Orch,
    QuantParams,
    Tensor,
)
from nac.container.reader import loads, section_body
from nac.container.writer import dumps, tensor_metadata

__all__ = [
    "Argument",
    "Constant",
    "DataSection",
    "Instruction",
    "MmapRecord",
    "NacFile",
    "Orch",
    "QuantParams",
    "Tensor",
    "dumps",
    "gather_arguments",
    "loads",
    "section_body",
    "tensor_metadata",
]
