"""Device configurations: inheritance resolution and the schema rules.

:func:`resolve_device` applies Inheritance Rules 1-8 and Schema Rules 1-7 of ``nem.md`` to a
device declared in a config document and returns a :class:`Device`, the one object the
checker, executor and binder take their sizes and counts from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nem.consteval import EvalError, evaluate
from nem.diagnostics import DiagnosticSink, Span
from nem.families import Catalog, baseline_catalog
from nem.tree import DeviceConfig, Expr, VariantRef
from nem.units import DEVICE_UNITS, PER_ENGINE_UNITS

__all__ = [
    "BASELINE_NAMES",
    "SPEC_VERSIONS",
    "Device",
    "resolve_device",
]

#: Spec revisions this toolkit knows the MUST set of.
SPEC_VERSIONS = ("NEM-1.0",)
#: The spec's and the shipped file's spelling of the standard baseline device; both accepted.
BASELINE_NAMES = ("nem_baseline_1_0", "npm_baseline_1_0")


@dataclass(frozen=True)
class Device:
    """A resolved device: every field inherited, merged and checked."""

    name: str
    spec_version: str | None
    num_engines: int | None
    l2_size_bytes: int | None
    l1_size_bytes: int | None
    per_engine: dict[str, int] = field(default_factory=dict)
    device_units: dict[str, int] = field(default_factory=dict)
    unit_characteristics: dict[str, dict[str, int]] = field(default_factory=dict)
    mandatory: frozenset[str] = frozenset()
    extended: frozenset[str] = frozenset()
    chain: tuple[str, ...] = ()

    @property
    def concrete(self) -> bool:
        """True when the device has a topology (it is not abstract)."""
        return self.num_engines is not None

    @property
    def effective(self) -> frozenset[str]:
        """The effective type family set: ``mandatory | extended``."""
        return self.mandatory | self.extended

    def units(self, unit_type: str) -> int:
        """Instances of ``unit_type`` per engine (or on the device for sDMA/WDM)."""
        if unit_type in DEVICE_UNITS:
            return self.device_units.get(unit_type, 0)
        return self.per_engine.get(unit_type, 0)

    def characteristic(self, unit_type: str, key: str) -> int | None:
        """``unit_characteristics[unit_type][key]`` or ``None``."""
        return self.unit_characteristics.get(unit_type, {}).get(key)


def _int(expr: Expr | None, sink: DiagnosticSink, span: Span) -> int | None:
    if expr is None:
        return None
    try:
        value = evaluate(expr, {})
    except EvalError as exc:
        code = "E507" if exc.code == "E307" else exc.code
        sink.add(code, f"{exc.message} (device fields take integer literals)", exc.span)
        return None
    return value


def resolve_device(
    name: str,
    configs: dict[str, tuple[DeviceConfig, int]],
    catalog: Catalog,
    sink: DiagnosticSink,
    *,
    need_topology: bool,
) -> Device | None:
    """Resolve ``name`` through its ``extends`` chain and check the result.

    Parameters
    ----------
    name : str
        The device to resolve.
    configs : dict
        Every visible device: name -> (declaration, visibility order). A parent must have a
        smaller order than its child (Inheritance Rule 7).
    catalog : Catalog
        The visible type families (variant references are checked against it, falling back
        to the spec's own families for families it does not declare).
    sink : DiagnosticSink
        Receives the findings.
    need_topology : bool
        True for a program's target (Schema Rule 5: a topology after resolution); abstract
        devices such as the baseline are valid only as parents.

    Returns
    -------
    Device or None
        ``None`` when the device or one of its parents does not exist.
    """
    chain: list[DeviceConfig] = []
    current, order = name, None
    seen = set()
    while True:
        if current not in configs:
            alias = next(
                (b for b in BASELINE_NAMES if current in BASELINE_NAMES and b in configs), None
            )
            if alias is None:
                where = chain[-1].span if chain else Span("<device>", 0, 0)
                sink.add(
                    "E305" if not chain else "E410",
                    f"device {current!r} is not defined"
                    + (f" (parent of {chain[-1].name!r})" if chain else ""),
                    where,
                )
                return None
            current = alias
        cfg, cfg_order = configs[current]
        if current in seen:
            sink.add("E410", f"device {name!r} extends itself through {current!r}", cfg.span)
            return None
        seen.add(current)
        if order is not None and cfg_order > order:
            sink.add(
                "E410",
                f"parent device {current!r} is defined after its child {chain[-1].name!r}",
                chain[-1].span,
            )
        chain.append(cfg)
        order = cfg_order
        if cfg.extends is None:
            break
        current = cfg.extends
    root = chain[-1]
    for cfg in chain[:-1]:
        if cfg.spec_version is not None:
            sink.add(
                "E401",
                f"derived device {cfg.name!r} must not set spec_version (it is inherited)",
                cfg.span,
            )
    if root.spec_version is None:
        sink.add("E401", f"base device {root.name!r} has no spec_version", root.span)
    elif root.spec_version not in SPEC_VERSIONS:
        sink.add(
            "E401",
            f"spec_version {root.spec_version!r} of {root.name!r} is not a known "
            f"revision ({', '.join(SPEC_VERSIONS)})",
            root.span,
        )

    topology = None
    chars: dict[str, dict[str, int]] = {}
    mandatory: dict[str, VariantRef] = {}
    extended: dict[str, VariantRef] = {}
    for cfg in reversed(chain):  # root first; children replace / merge / extend
        if cfg.topology is not None:
            topology = cfg.topology
        for unit, entries in cfg.unit_characteristics or ():
            if unit not in PER_ENGINE_UNITS + DEVICE_UNITS:
                sink.add("E409", f"unit_characteristics names unknown unit type {unit!r}", cfg.span)
            group = chars.setdefault(unit, {})
            for key, expr in entries:
                value = _int(expr, sink, cfg.span)
                if value is not None:
                    group[key] = value
        for ref in cfg.mandatory or ():
            mandatory.setdefault(str(ref), ref)
        for ref in cfg.extended or ():
            extended.setdefault(str(ref), ref)

    dev_span = chain[0].span
    for text, ref in [*mandatory.items(), *extended.items()]:
        if text not in catalog.instances and text not in baseline_catalog().instances:
            near = _nearest(text, [*catalog.instances, *baseline_catalog().instances])
            sink.add(
                "E406",
                f"{text} is not a family variant instantiation"
                + (f"; did you mean {near}?" if near else ""),
                ref.span,
            )
    for text in sorted(set(mandatory) & set(extended)):
        sink.add(
            "W401",
            f"{text} is in both opcode.mandatory and opcode.extended of "
            f"{name!r}; the opcode.extended entry is ignored",
            extended[text].span,
        )
        del extended[text]
    if not mandatory:
        sink.add(
            "E408", f"device {name!r} has an empty opcode.mandatory after resolution", dev_span
        )
    elif root.spec_version in SPEC_VERSIONS:
        missing = sorted(baseline_catalog().must_refs() - set(mandatory))
        if missing:
            sink.add(
                "E405",
                f"device {name!r} lacks MUST variant(s) in opcode.mandatory: "
                f"{', '.join(missing)} (extend nem_baseline_1_0 to inherit them)",
                dev_span,
            )

    num_engines = l2 = l1 = None
    per_engine: dict[str, int] = {}
    device_units: dict[str, int] = {}
    if topology is None:
        if need_topology:
            sink.add(
                "E403",
                f"device {name!r} has no topology (it is abstract; a target "
                "device must provide one)",
                dev_span,
            )
    else:
        tspan = topology.span
        num_engines = _int(topology.num_engines, sink, tspan)
        if topology.num_engines is None:
            sink.add("E407", f"topology of {name!r} has no num_engines", tspan)
        elif num_engines is not None and num_engines < 1:
            sink.add("E402", f"num_engines must be >= 1, not {num_engines}", tspan)
        for field_name, expr in (
            ("l2_size_bytes", topology.l2_size_bytes),
            ("l1_size_bytes", topology.l1_size_bytes),
        ):
            value = _int(expr, sink, tspan)
            if expr is None:
                sink.add("E407", f"topology of {name!r} has no {field_name}", tspan)
            elif value is not None and value <= 0:
                sink.add("E402", f"{field_name} must be > 0, not {value}", tspan)
                value = None
            if field_name == "l2_size_bytes":
                l2 = value
            else:
                l1 = value
        spans = list(topology.unit_spans)
        for block, allowed, floor, out in (
            (topology.device_units or (), DEVICE_UNITS, 0, device_units),
            (topology.per_engine, PER_ENGINE_UNITS, 1, per_engine),
        ):
            for unit, expr in block:
                span = spans.pop(0) if spans else tspan
                where = "device_units" if allowed is DEVICE_UNITS else "per_engine"
                if unit not in allowed:
                    other = "per_engine" if where == "device_units" else "device_units"
                    hint = (
                        f" ({unit} belongs in {other})"
                        if unit in PER_ENGINE_UNITS + DEVICE_UNITS
                        else ""
                    )
                    sink.add("E409", f"{unit!r} is not a {where} unit type{hint}", span)
                    continue
                if unit in out:
                    sink.add("E409", f"{unit} declared twice in {where}", span)
                    continue
                value = _int(expr, sink, span)
                if value is not None and value < floor:
                    sink.add(
                        "E402", f"{where} count of {unit} must be >= {floor}, not {value}", span
                    )
                    value = None
                if value is not None:
                    out[unit] = value
    return Device(
        name,
        root.spec_version,
        num_engines,
        l2,
        l1,
        per_engine,
        device_units,
        chars,
        frozenset(mandatory),
        frozenset(extended),
        tuple(c.name for c in chain),
    )


def _nearest(text: str, candidates: list[str]) -> str | None:
    import difflib

    best = difflib.get_close_matches(text, candidates, n=1, cutoff=0.6)
    return best[0] if best else None
