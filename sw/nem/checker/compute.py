"""Checks of compute tasks: operands against the registry, attributes and type families."""

from __future__ import annotations

from dataclasses import dataclass

from nem.checker.base import _Scope
from nem.consteval import EvalError, evaluate
from nem.elemtypes import ELEM_TYPES
from nem.families import OperandFacts
from nem.registry import Opcode
from nem.tree import Compute, ListValue, Name, Num, RegionExpr, Str


class _ComputeChecks:
    """Compute operands, attributes and type families."""

    def compute(self, stmt: Compute, opcode: Opcode, ins, outs, scope: _Scope) -> dict:
        specs = []
        for direction, given, spec_list, variadic in (
            ("in", ins, opcode.inputs, opcode.variadic_inputs),
            ("out", outs, opcode.outputs, opcode.variadic_outputs),
        ):
            required = [s for s in spec_list if s.required]
            names = ", ".join(s.name + ("" if s.required else "?") for s in spec_list)
            too_many = len(given) > len(spec_list) and not variadic
            if len(given) < len(required) or too_many:
                self.err(
                    "E703",
                    f"{opcode.name} takes {direction} {names}"
                    f"{' (variadic)' if variadic else ''}; {len(given)} given",
                    stmt.span,
                )
                return {}
            for k, region in enumerate(given):
                spec = spec_list[min(k, len(spec_list) - 1)]
                specs.append((spec, region))
        for spec, region in specs:
            if region is not None and not region.typed:
                self.err(
                    "E704",
                    f"{opcode.name} operand {spec.name} ({region.label}) needs "
                    "elem=, shape= and layout=/strides=",
                    stmt.span,
                )
        before = len(self.sink.items)
        attrs = self.attributes(stmt, opcode, scope)
        attrs_ok = len(self.sink.items) == before
        if any(r is None or not r.typed for _, r in specs):
            return attrs
        facts = [
            OperandFacts(s.name, r.elem, r.quant is not None, s.required, s.direction)
            for s, r in specs
        ]
        self.families(stmt, opcode, facts, attrs.get("accum_type"))
        from nem.shapes import check_shapes

        if not attrs_ok:
            return attrs
        for message in check_shapes(opcode, specs, attrs):
            self.err("E710", f"{opcode.name}: {message}", stmt.span)
        return attrs

    def attributes(self, stmt: Compute, opcode: Opcode, scope: _Scope) -> dict[str, object]:
        out: dict[str, object] = {}
        spans = list(stmt.attr_spans) or [stmt.span] * len(stmt.attrs)
        for (key, value), span in zip(stmt.attrs, spans, strict=False):
            spec = opcode.attribute(key)
            if spec is None:
                known = [a.name for a in opcode.attributes]
                near = self._near(key, known)
                self.err(
                    "E705",
                    f"{opcode.name} has no attribute {key!r} (attributes: "
                    f"{', '.join(known) or 'none'})"
                    + (f"; did you mean {near!r}?" if near else ""),
                    span,
                )
                continue
            if key in out:
                self.err("E705", f"attribute {key!r} given twice", span)
                continue
            converted = self.attr_value(value, spec.type, scope)
            if isinstance(converted, _Bad):
                self.err(
                    "E707",
                    f"{opcode.name} attribute {key}: expected "
                    f"{_TYPE_WORDS[spec.type]}, {converted.why}",
                    span,
                )
                continue
            out[key] = converted
        for spec in opcode.attributes:
            if spec.name not in out:
                if spec.required and not any(k == spec.name for k, _ in stmt.attrs):
                    self.err(
                        "E706",
                        f"{opcode.name} needs attribute {spec.name} ({_TYPE_WORDS[spec.type]})",
                        stmt.span,
                    )
                elif spec.has_default:
                    out[spec.name] = spec.default
        return out

    def attr_value(self, value, typ: str, scope: _Scope):
        if typ == "string":
            return value.value if isinstance(value, Str) else _Bad("got something else")
        if typ in ("elem_type", "id", "bool"):
            if isinstance(value, Name):
                if typ == "elem_type" and value.id not in ELEM_TYPES:
                    return _Bad(f"{value.id!r} is not an element type")
                if typ == "bool":
                    if value.id in ("true", "false"):
                        return value.id == "true"
                    return _Bad(f"{value.id!r} (use true or false)")
                return value.id
            if typ == "bool" and isinstance(value, Num) and value.value in (0, 1):
                return bool(value.value)
            return _Bad("got a value of another kind")
        if typ == "int_list":
            if not isinstance(value, ListValue):
                return _Bad("got a single value (write [a, b, ...])")
            items = []
            for item in value.items:
                if isinstance(item, (Str, ListValue, RegionExpr)):
                    return _Bad("a list item is not an integer")
                try:
                    items.append(evaluate(item, self.env(scope)))
                except EvalError as exc:
                    return _Bad(exc.message)
            return tuple(items)
        if isinstance(value, (Str, ListValue, RegionExpr)):
            return _Bad("got a value of another kind")
        try:
            return evaluate(value, self.env(scope), floats=(typ == "float"))
        except EvalError as exc:
            return _Bad(exc.message)

    def families(self, stmt: Compute, opcode: Opcode, facts, accum) -> None:
        # The verdict depends only on the opcode, the operand facts and accum_type, so it
        # is computed once per combination (a loop body repeats the same one many times).
        key = (opcode.name, tuple(facts), accum)
        verdict = self._family_verdicts.get(key)
        if verdict is None:
            verdict = self._family_verdict(opcode, facts, accum)
            self._family_verdicts[key] = verdict
        for code, message in verdict:
            self.err(code, message, stmt.span)

    def _family_verdict(self, opcode: Opcode, facts, accum) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        catalog = self.ws.catalog
        if not opcode.type_families:
            return out
        from nem.families import baseline_catalog

        candidates = []
        for fam in opcode.type_families:
            source = catalog if fam in catalog.families else baseline_catalog()
            for inst in source.by_family(fam):
                candidates.append((inst, source.mismatches(inst, opcode, facts, accum)))
        if not candidates:
            return out
        matching = [inst for inst, why in candidates if not why]
        shown = ", ".join(f"{f.name}:{f.elem}{'+q' if f.has_quant else ''}" for f in facts)
        if not matching:
            inst, why = min(candidates, key=lambda c: len(c[1]))
            out.append((
                "E708",
                f"{opcode.name} with ({shown}) matches no variant of "
                f"{', '.join(opcode.type_families)}; nearest: {inst.ref} ({'; '.join(why)})",
            ))
            return out
        dev = self.device
        if dev is None:
            return out
        legal = [inst for inst in matching if inst.ref in dev.effective]
        if not legal:
            on_device = [(i, w) for i, w in candidates if i.ref in dev.effective]
            near = ""
            if on_device:
                inst, why = min(on_device, key=lambda c: len(c[1]))
                near = f"; nearest legal on this device: {inst.ref} ({'; '.join(why)})"
            out.append((
                "E709",
                f"{opcode.name} matches {', '.join(i.ref for i in matching)}, "
                f"which device {dev.name!r} does not list in opcode.mandatory or "
                f"opcode.extended{near}",
            ))
        return out


@dataclass(frozen=True)
class _Bad:
    why: str


_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "elem_type": "an element type",
    "int_list": "a list of integers",
    "string": "a quoted string",
    "id": "a name",
}
