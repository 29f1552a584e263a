"""Configuration documents: device configurations, topologies, unit blocks, type
families and variants."""

from __future__ import annotations

from nem.lexer import Token
from nem.parser.expressions import Expressions
from nem.tree import (
    DeviceConfig,
    FamilyAttr,
    Topology,
    TypeFamily,
    Variant,
    VariantRef,
)


class ConfigDocs(Expressions):
    """Device configurations and type families."""

    # --- config documents ------------------------------------------------------------------

    def device_config(self, tok: Token, name: Token) -> DeviceConfig:
        parent = None
        if self.at_kw("extends"):
            self.advance()
            parent = self.ident("a parent device name").text
        self.expect("{", "'{'")
        spec = topo = chars = mandatory = extended = None
        while not self.at("}"):
            key = self.ident(
                "spec_version, topology, unit_characteristics, opcode.mandatory or opcode.extended"
            )
            if key.text == "spec_version":
                self.expect("=", "'='")
                spec = self.expect("STRING", "a quoted spec version").text
            elif key.text == "topology":
                topo = self.topology(key)
            elif key.text == "unit_characteristics":
                chars = self.unit_chars()
            elif (
                key.text == "opcode"
                and self.at(".")
                and self.peek(1).text in ("mandatory", "extended")
            ):
                self.advance()
                which = self.advance().text
                refs = self.variant_refs()
                if which == "mandatory":
                    mandatory = (mandatory or ()) + refs
                else:
                    extended = (extended or ()) + refs
            else:
                raise self.fail(
                    "expected spec_version, topology, unit_characteristics, "
                    "opcode.mandatory or opcode.extended",
                    key,
                )
        self.advance()
        return DeviceConfig(
            name.text, parent, spec, topo, chars, mandatory, extended, self.span(tok)
        )

    def topology(self, tok: Token) -> Topology:
        self.expect("{", "'{'")
        fields: dict[str, object] = {}
        spans = []
        while not self.at("}"):
            key = self.ident("num_engines, l2_size_bytes, device_units or per_engine")
            if key.text in ("num_engines", "l2_size_bytes"):
                self.expect("=", "'='")
                fields[key.text] = self.expr()
            elif key.text == "device_units":
                fields["device_units"], sp = self.unit_block(False)
                spans += sp
            elif key.text == "per_engine":
                fields["per_engine"], sp = self.unit_block(True, fields)
                spans += sp
            else:
                raise self.fail(
                    "expected num_engines, l2_size_bytes, device_units or per_engine", key
                )
        self.advance()
        return Topology(
            fields.get("num_engines"),
            fields.get("l2_size_bytes"),
            fields.get("device_units"),
            fields.get("per_engine", ()),
            fields.get("l1_size_bytes"),
            self.span(tok),
            tuple(spans),
        )

    def unit_block(self, per_engine: bool, fields=None):
        self.expect("{", "'{'")
        units, spans = [], []
        while not self.at("}"):
            key = self.ident("a unit type")
            self.expect("=", "'='")
            if per_engine and key.text == "l1_size_bytes":
                fields["l1_size_bytes"] = self.expr()
                continue
            units.append((key.text, self.expr()))
            spans.append(self.span(key))
        self.advance()
        return tuple(units), spans

    def unit_chars(self):
        self.expect("{", "'{'")
        groups = []
        while not self.at("}"):
            unit = self.ident("a unit type")
            self.expect("{", "'{'")
            entries = []
            while not self.at("}"):
                key = self.ident("a characteristic name")
                self.expect("=", "'='")
                entries.append((key.text, self.expr()))
            self.advance()
            groups.append((unit.text, tuple(entries)))
        self.advance()
        return tuple(groups)

    def variant_refs(self) -> tuple[VariantRef, ...]:
        self.expect("{", "'{'")
        refs = []
        while not self.at("}"):
            refs.append(self.variant_ref())
        self.advance()
        return tuple(refs)

    def variant_ref(self) -> VariantRef:
        tok = self.peek()
        parts = [self.ident("a family variant reference").text]
        inst: tuple[str, ...] = ()
        inst_at = None
        while True:
            if self.at("<") and inst_at is None:
                inst = self.instantiation()
                inst_at = len(parts)
            elif self.at(".") and self.at("ID", 1):
                self.advance()
                parts.append(self.advance().text)
            else:
                break
        if len(parts) < 2 or (inst_at is not None and inst_at != len(parts) - 1):
            raise self.fail("expected FAMILY[<T,...>].VARIANT, e.g. gemm.int8<i8>.no_bias", tok)
        return VariantRef(".".join(parts[:-1]), inst, parts[-1], self.span(tok))

    def instantiation(self) -> tuple[str, ...]:
        self.expect("<", "'<'")
        items = [self.ident("an element type").text]
        while self.at(","):
            self.advance()
            items.append(self.ident("an element type").text)
        self.expect(">", "'>'")
        return tuple(items)

    def type_family(self) -> TypeFamily:
        tok = self.advance()
        name = self.ident("a family name").text
        if self.at(".") and self.at("ID", 1):
            self.advance()
            name += "." + self.advance().text
        params = []
        if self.at("<"):
            self.advance()
            while True:
                pname = self.ident("a type parameter")
                self.expect(":", "':'")
                self.expect("{", "'{'")
                types = [self.ident("an element type").text]
                while self.at(","):
                    self.advance()
                    types.append(self.ident("an element type").text)
                self.expect("}", "'}'")
                params.append((pname.text, tuple(types)))
                if not self.at(","):
                    break
                self.advance()
            self.expect(">", "'>'")
        self.expect("{", "'{'")
        operands, attrs, variants = [], [], []
        while not self.at("}"):
            key = self.ident("an operand binding, an attribute or 'variants'")
            if key.text == "variants" and self.at(":"):
                self.advance()
                while not self.at("}"):
                    variants.append(self.variant_decl())
                break
            if self.at(":"):
                self.advance()
                operands.append((key.text, self.ident("a type").text))
            elif self.at("="):
                self.advance()
                value = self.ident("a type, 'required' or 'absent'").text
                on = None
                if self.at_kw("on"):
                    self.advance()
                    on = self.ident("an operand name").text
                attrs.append(FamilyAttr(key.text, value, on))
            else:
                raise self.fail("expected ':' or '='")
        self.expect("}", "'}'")
        return TypeFamily(
            name, tuple(params), tuple(operands), tuple(attrs), tuple(variants), self.span(tok)
        )

    def variant_decl(self) -> Variant:
        name = self.ident("a variant name")
        self.expect(":", "':'")
        self.expect("{", "'{'")
        ops = []
        while not self.at("}"):
            op = self.ident("an operand name")
            self.expect(":", "':'")
            ops.append((op.text, self.ident("a type").text))
        self.advance()
        self.expect_kw("conformance")
        self.expect(":", "':'")
        self.expect("{", "'{'")
        entries = []
        while not self.at("}"):
            cls = self.ident("MUST or MAY")
            if cls.text not in ("MUST", "MAY"):
                raise self.fail("expected MUST or MAY", cls)
            inst = self.instantiation() if self.at("<") else ()
            entries.append((cls.text, inst))
        self.advance()
        return Variant(name.text, tuple(ops), tuple(entries), self.span(name))
