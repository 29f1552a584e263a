"""The NEM opcode registry, loaded from the shipped ``opcodes.yaml``.

The spec calls the registry "the single source of truth for opcode signatures" and says
tools MUST validate their tables against it. This module therefore types nothing in: it
reads ``nem/data/opcodes.yaml`` (a copy of the upstream file), validates it against the
upstream ``schema.json`` with :mod:`jsonschema`, and exposes it as frozen objects.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

__all__ = ["Attribute", "Opcode", "OperandSpec", "Registry", "RegistryError", "load_registry"]


class RegistryError(ValueError):
    """The registry file is unreadable or does not follow ``schema.json``."""


@dataclass(frozen=True)
class OperandSpec:
    """One operand of an opcode signature."""

    name: str
    direction: str
    required: bool
    role: str
    constraints: str = ""


@dataclass(frozen=True)
class Attribute:
    """One attribute of an opcode signature (``type`` is a registry attribute type)."""

    name: str
    type: str
    required: bool
    default: object = None
    has_default: bool = False


@dataclass(frozen=True)
class Opcode:
    """An opcode as the registry defines it."""

    name: str
    category: str
    status: str
    forms: tuple[str, ...]
    operands: tuple[OperandSpec, ...]
    attributes: tuple[Attribute, ...]
    type_families: tuple[str, ...]
    execution_unit: str | None
    hardware_status: str | None
    variadic_inputs: bool
    variadic_outputs: bool

    @property
    def inputs(self) -> tuple[OperandSpec, ...]:
        """The ``in`` operands, in registry order."""
        return tuple(o for o in self.operands if o.direction == "in")

    @property
    def outputs(self) -> tuple[OperandSpec, ...]:
        """The ``out`` operands, in registry order."""
        return tuple(o for o in self.operands if o.direction == "out")

    def attribute(self, name: str) -> Attribute | None:
        """The attribute called ``name``, or ``None``."""
        for attr in self.attributes:
            if attr.name == name:
                return attr
        return None


@dataclass(frozen=True)
class Registry:
    """All opcodes of one registry file."""

    version: str
    opcodes: dict[str, Opcode]

    def __getitem__(self, name: str) -> Opcode:
        return self.opcodes[name]

    def __contains__(self, name: object) -> bool:
        return name in self.opcodes


def _data(name: str) -> str:
    return resources.files("nem").joinpath("data", name).read_text(encoding="utf-8")


def _build(doc: dict) -> Registry:
    opcodes = {}
    for name, spec in doc["opcodes"].items():
        operands = tuple(
            OperandSpec(
                o["name"], o["direction"], o["required"], o["role"], o.get("constraints", "")
            )
            for o in spec["operands"]
        )
        attrs = tuple(
            Attribute(a["name"], a["type"], a["required"], a.get("default"), "default" in a)
            for a in spec.get("attributes", ())
        )
        opcodes[name] = Opcode(
            name,
            spec["category"],
            spec["status"],
            tuple(spec["forms"]),
            operands,
            attrs,
            tuple(spec.get("type_families", ())),
            spec.get("execution_unit"),
            spec.get("hardware_status"),
            bool(spec.get("variadic_inputs", False)),
            bool(spec.get("variadic_outputs", False)),
        )
    return Registry(doc["version"], opcodes)


def load_registry(path: str | Path | None = None) -> Registry:
    """Load and validate an opcode registry.

    Parameters
    ----------
    path : str or Path, optional
        A registry YAML file; default the copy shipped in ``nem/data/opcodes.yaml``.

    Raises
    ------
    RegistryError
        If the file is not YAML or breaks ``schema.json`` (the message names the path
        inside the document and the rule).
    """
    if path is None:
        return _default_registry()
    text = Path(path).read_text(encoding="utf-8")
    return _load_text(text, str(path))


@functools.cache
def _default_registry() -> Registry:
    return _load_text(_data("opcodes.yaml"), "nem/data/opcodes.yaml")


def _load_text(text: str, where: str) -> Registry:
    try:
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise RegistryError(f"{where}: not valid YAML: {exc}") from None
    schema = json.loads(_data("schema.json"))
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        at = "/".join(str(p) for p in err.absolute_path) or "<document>"
        raise RegistryError(
            f"{where}: {at}: {err.message} (schema.json rule "
            f"{'/'.join(str(p) for p in err.schema_path)})"
        )
    return _build(doc)
