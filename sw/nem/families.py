"""Type families: expansion into variant instances, and matching opcode instances against them.

A family declaration (``type_family gemm.int8<T_out: {i8, i16}> {...}``) expands into one
:class:`VariantInstance` per conformance entry, named by its variant reference ID
(``gemm.int8<i8>.with_bias``). Matching follows the Type Family Matching Rule of the spec.

How family bindings name opcode operands (the spec leaves this implicit, see
``docs/nem-toolkit.md``):

* a binding whose name is an operand of the opcode (``A``, ``W``, ``Y``...) binds that operand;
* ``input`` binds every ``in`` operand except ``indices`` (gather's index tensor), ``output``
  every ``out`` operand;
* ``src`` binds the ``in`` operands, ``dst`` the ``out`` operands (cast, quantize, dequantize);
* ``quant = required`` (no ``on``) requires a quant descriptor on every *required* ``in``
  operand (X and W, A and B; not the optional i32 bias), ``quant = required on NAME`` on the
  operands NAME binds, and ``quant = absent`` forbids descriptors on all operands.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

from nem.diagnostics import DiagnosticSink
from nem.elemtypes import ELEM_TYPES
from nem.parser import parse
from nem.registry import Opcode
from nem.tree import TypeFamily

__all__ = ["Catalog", "OperandFacts", "VariantInstance", "baseline_catalog", "bind_names"]

SPECIAL_TYPES = ("absent", "any_supported")


@dataclass(frozen=True)
class VariantInstance:
    """One family variant at one type instantiation."""

    ref: str
    family: str
    inst: tuple[str, ...]
    variant: str
    conformance: str  # "MUST" or "MAY"
    bindings: tuple[tuple[str, str], ...]  # binding name -> elem type / "absent" / "any_supported"
    accum: str | None
    quant: str | None  # "required" / "absent" / None
    quant_on: str | None


@dataclass(frozen=True)
class OperandFacts:
    """What matching needs to know about one operand of a task."""

    name: str  # registry operand name
    elem: str | None
    has_quant: bool
    required: bool
    direction: str


def bind_names(binding: str, opcode: Opcode) -> tuple[str, ...]:
    """Registry operand names a family binding refers to (see module docstring)."""
    names = {o.name for o in opcode.operands}
    if binding in names:
        return (binding,)
    if binding in ("input", "src"):
        return tuple(o.name for o in opcode.inputs if o.name != "indices")
    if binding in ("output", "dst"):
        return tuple(o.name for o in opcode.outputs)
    return ()


class Catalog:
    """Every visible type family, expanded; built with diagnostics for malformed families."""

    def __init__(self, families: list[TypeFamily], sink: DiagnosticSink | None = None):
        self.families: dict[str, TypeFamily] = {}
        self.instances: dict[str, VariantInstance] = {}
        sink = sink if sink is not None else DiagnosticSink()
        for fam in families:
            self.families[fam.name] = fam
            for inst in self._expand(fam, sink):
                self.instances[inst.ref] = inst

    def by_family(self, family: str) -> list[VariantInstance]:
        """Instances of one family, in declaration order."""
        return [v for v in self.instances.values() if v.family == family]

    def must_refs(self) -> set[str]:
        """Reference IDs of every MUST-class instance."""
        return {r for r, v in self.instances.items() if v.conformance == "MUST"}

    @staticmethod
    def _expand(fam: TypeFamily, sink: DiagnosticSink) -> list[VariantInstance]:
        params = dict(fam.params)
        ok = True
        for pname, domain in fam.params:
            for t in domain:
                if t not in ELEM_TYPES:
                    sink.add(
                        "E411",
                        f"type family {fam.name}: parameter {pname} lists "
                        f"{t!r}, not an element type",
                        fam.span,
                    )
                    ok = False
        known = set(ELEM_TYPES) | set(SPECIAL_TYPES) | set(params)
        bindings = [*fam.operands, *(b for v in fam.variants for b in v.operands)]
        for name, typ in bindings:
            if typ not in known:
                sink.add(
                    "E411",
                    f"type family {fam.name}: operand {name} has type {typ!r}, "
                    "which is neither an element type nor a parameter",
                    fam.span,
                )
                ok = False
        accum = quant = quant_on = None
        for attr in fam.attrs:
            if attr.name == "accum":
                accum = attr.value
            elif attr.name == "quant":
                if attr.value not in ("required", "absent"):
                    sink.add(
                        "E411",
                        f"type family {fam.name}: quant must be 'required' or "
                        f"'absent', not {attr.value!r}",
                        fam.span,
                    )
                quant, quant_on = attr.value, attr.on
        out = []
        for var in fam.variants:
            for cls, inst in var.conformance:
                if len(inst) != len(fam.params):
                    sink.add(
                        "E411",
                        f"type family {fam.name}: variant {var.name} lists "
                        f"<{', '.join(inst)}> but the family has {len(fam.params)} "
                        "type parameter(s)",
                        var.span,
                    )
                    continue
                subst = {}
                for (pname, domain), t in zip(fam.params, inst, strict=True):
                    if t not in domain:
                        sink.add(
                            "E411",
                            f"type family {fam.name}: {t} is not in the domain "
                            f"of {pname} {{{', '.join(domain)}}}",
                            var.span,
                        )
                        ok = False
                    subst[pname] = t
                if not ok:
                    continue
                binds = dict(fam.operands)
                binds.update(dict(var.operands))
                binds = {k: subst.get(v, v) for k, v in binds.items()}
                inst_text = f"<{', '.join(inst)}>" if inst else ""
                ref = f"{fam.name}{inst_text}.{var.name}"
                out.append(
                    VariantInstance(
                        ref,
                        fam.name,
                        inst,
                        var.name,
                        cls,
                        tuple(binds.items()),
                        subst.get(accum, accum) if accum else None,
                        quant,
                        quant_on,
                    )
                )
        return out

    def mismatches(
        self,
        inst: VariantInstance,
        opcode: Opcode,
        facts: list[OperandFacts],
        accum_type: str | None,
    ) -> list[str]:
        """Why ``facts`` (one task's operands) do not match ``inst``; empty when they do."""
        why: list[str] = []
        for binding, typ in inst.bindings:
            names = bind_names(binding, opcode)
            if not names:
                continue
            for name in names:
                got = [f for f in facts if f.name == name]
                if typ == "absent":
                    if got:
                        why.append(f"{name} is given but {inst.ref} has no {name}")
                    continue
                if not got:
                    # A variant binding that names an optional operand (with_bias: { B: i32 })
                    # requires it; a group binding (input, src...) only types what is given.
                    if binding == name and any(
                        o.name == name and not o.required for o in opcode.operands
                    ):
                        why.append(f"{name} is missing but {inst.ref} needs it ({typ})")
                    continue
                for fact in got:
                    if typ != "any_supported" and fact.elem != typ:
                        why.append(f"{name} is {fact.elem}, {inst.ref} needs {typ}")
        if inst.accum is not None and accum_type is not None and accum_type != inst.accum:
            why.append(f"accum_type is {accum_type}, {inst.ref} needs {inst.accum}")
        if inst.quant == "required":
            names = (
                set(bind_names(inst.quant_on, opcode))
                if inst.quant_on
                else {o.name for o in opcode.inputs if o.required and o.name != "indices"}
            )
            for fact in facts:
                if fact.name in names and not fact.has_quant:
                    why.append(
                        f"{fact.name} has no quant descriptor ({inst.ref}: quant = "
                        f"required{' on ' + inst.quant_on if inst.quant_on else ''})"
                    )
        elif inst.quant == "absent":
            for fact in facts:
                if fact.has_quant:
                    why.append(f"{fact.name} has a quant descriptor ({inst.ref}: quant = absent)")
        return why


@functools.cache
def baseline_catalog() -> Catalog:
    """The spec's own type families (the shipped baseline file, Appendix of nem.md)."""
    text = resources.files("nem").joinpath("data", "npm_baseline_1.0.nem").read_text("utf-8")
    doc = parse(text, "nem/data/npm_baseline_1.0.nem")
    return Catalog(list(doc.families))
