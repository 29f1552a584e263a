"""Diagnostics of the NEM toolkit: codes, the spec rule each one enforces, and the sink.

Every problem the lexer, parser, loader or checker finds is a :class:`Diagnostic` with a
stable code. The code table below is the one place that ties a code to its meaning and to
the section of ``nem.md`` (or of this project's documented decisions) that it enforces;
``docs/nem-toolkit.md`` lists the same table, generated from here by a test.

Rendered form (one line, like a compiler)::

    conv2d_relu.nem:73:3: error[E710]: conv2d: output Y_pp_i has shape [1, 14, 14, 128],
    the inputs and attributes give [1, 16, 16, 128] [nem.md: Compute Tasks: typing rules]

(shown on two lines here; it is one line).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CODES", "Diagnostic", "DiagnosticSink", "NemError", "Span"]


@dataclass(frozen=True, order=True)
class Span:
    """Where something is in a source file: 1-based line and column of its first character."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


#: code -> (severity, short title, spec section or project decision it enforces)
CODES: dict[str, tuple[str, str, str]] = {
    # --- lexical and syntax ---------------------------------------------------------------
    "E101": ("error", "unexpected character", "Formal Language Definition: Lexical"),
    "E102": ("error", "unterminated string", "Formal Language Definition: Lexical"),
    "E103": ("error", "malformed number", "Formal Language Definition: Lexical (FLOAT)"),
    "E104": (
        "error",
        "number literal too long",
        "Formal Language Definition: Lexical (toolkit limit: 100 characters)",
    ),
    "E201": ("error", "syntax error", "Formal Language Definition: Grammar"),
    "E202": (
        "error",
        "FLOAT literal outside a compute attribute",
        "Formal Language Definition: FLOAT",
    ),
    "E203": ("error", "document structure", "Formal Language Definition: Document Model"),
    "E204": (
        "error",
        "expression nested too deeply",
        "Formal Language Definition: Grammar (toolkit limit: depth 256)",
    ),
    # --- includes and names ---------------------------------------------------------------
    "E301": ("error", "include file not found", "Include Semantics 2"),
    "E302": ("error", "circular include", "Include Semantics 3"),
    "E303": ("error", "duplicate device identifier", "Include Semantics 6"),
    "E304": ("error", "duplicate type family identifier", "Include Semantics 6"),
    "E305": ("error", "unknown device", "Program Device Directive"),
    "E306": (
        "error",
        "name defined twice",
        "Constant Declarations 7 / project rule: one namespace",
    ),
    "E307": ("error", "undefined name", "Formal Language Definition: Grammar"),
    "E308": ("error", "included file is not a valid document", "Include Semantics 5"),
    # --- devices and type families ----------------------------------------------------------
    "E401": (
        "error",
        "spec_version missing, unknown or given in a derived device",
        "Schema Rule 1, Inheritance Rule 2",
    ),
    "E402": ("error", "unit count or memory size out of range", "Schema Rule 5"),
    "E403": ("error", "no topology after resolution", "Schema Rule 5, Inheritance Rules 3 and 8"),
    "W401": ("warning", "variant in both opcode.mandatory and opcode.extended", "Schema Rule 4"),
    "E405": ("error", "MUST variant missing from opcode.mandatory", "Schema Rule 7"),
    "E406": (
        "error",
        "unknown family variant reference",
        "Type Family Matching, Variant Reference IDs",
    ),
    "E407": ("error", "required topology field missing", "Schema Rule 5, Memory Capacity Fields"),
    "E408": ("error", "opcode.mandatory empty after resolution", "Inheritance Rule 8"),
    "E409": ("error", "unknown or repeated unit type", "Device Configuration Grammar"),
    "E410": ("error", "parent device not defined before the child", "Inheritance Rule 7"),
    "E411": ("error", "malformed type family", "Type Family Grammar"),
    "W402": (
        "warning",
        "device file defines several devices; the first is the target",
        "Program Device Directive (project rule)",
    ),
    # --- constants and expressions --------------------------------------------------------
    "E501": ("error", "const declared twice", "Constant Declarations 1"),
    "E502": (
        "error",
        "const refers to a name not declared before it",
        "Constant Declarations 3, 4",
    ),
    "E503": ("error", "const inside a loop body", "Constant Declarations 6"),
    "E504": (
        "error",
        "division or mod by zero in a constant expression",
        "Constant Declarations 5",
    ),
    "E505": ("error", "const name clashes with another identifier", "Constant Declarations 7"),
    "E506": ("error", "expression is not an integer", "Constant Declarations 2, FLOAT literals"),
    "E507": (
        "error",
        "expression names something that is not an integer constant",
        "Constant Declarations 3",
    ),
    # --- buffers, regions and types ---------------------------------------------------------
    "E601": ("error", "region names an unknown buffer", "Regions"),
    "E602": ("error", "region outside its buffer", "Hazards and Aliasing 4, Extent Consistency"),
    "E603": ("error", "byte extent too small for the region type", "Extent Consistency"),
    "E604": ("error", "strided element outside the region extent", "Extent Consistency"),
    "E605": ("error", "inconsistent type attributes", "Region Type Syntax, Layout and Strides"),
    "E606": ("error", "invalid quantization descriptor", "Quantization Descriptor"),
    "E607": ("error", "invalid buffer size or alignment", "Buffers"),
    "E608": ("error", "L1 engine index out of range", "Memory Levels, Task Placement"),
    "E609": ("error", "memory capacity exceeded", "Schema Rule 6"),
    "E610": ("error", "unknown element type", "Element Types"),
    # --- tasks and opcodes ------------------------------------------------------------------
    "E701": ("error", "unknown opcode", "Opcode Signatures (registry)"),
    "E702": ("error", "form not available for this opcode", "Opcode Signatures (registry forms)"),
    "E703": ("error", "wrong operands for the opcode", "Opcode Signatures: operand rules"),
    "E704": ("error", "compute operand without type attributes", "Type System: Region Type Syntax"),
    "E705": ("error", "unknown or repeated attribute", "Opcode Signatures (registry attributes)"),
    "E706": ("error", "required attribute missing", "Opcode Signatures: operand rules"),
    "E707": (
        "error",
        "attribute value of the wrong type",
        "Opcode Signatures (registry attributes)",
    ),
    "E708": ("error", "no type family variant matches", "Type Family Matching Rule"),
    "E709": ("error", "variant not in the device's effective set", "Device Validity Rule"),
    "E710": ("error", "operand shape inconsistent with the opcode", "Compute Tasks: typing rules"),
    "E711": ("error", "transfer operands incompatible", "Transfer Tasks"),
    "E712": ("error", "overlapping transfer without @memmove", "Hazards and Aliasing 2, @memmove"),
    "E713": ("error", "unknown token", "Tasks and Tokens"),
    "E715": (
        "error",
        "access against @readonly/@writeonly",
        "Semantic Decorators: @readonly, @writeonly",
    ),
    # --- decorators, resources, placement ---------------------------------------------------
    "E801": ("error", "unknown decorator", "Semantic Decorators: unknown decorators are errors"),
    "E802": ("error", "decorator not applicable here", "Design Principle: decorator validation"),
    "E803": ("error", "invalid decorator arguments", "Decorators"),
    "E804": (
        "error",
        "@resource names a unit type that is not a valid target",
        "@resource: resource-invalid unit types",
    ),
    "E805": (
        "error",
        "@resource unit type cannot execute the task",
        "Resource Classes and Task Mapping",
    ),
    "E806": (
        "error",
        "@resource unit type absent and no equivalent unit",
        "Target Resource Validity Rule 3",
    ),
    "W801": (
        "warning",
        "@resource index remapped to an available instance",
        "Target Resource Validity Rule 2",
    ),
    "W802": (
        "warning",
        "@resource translated to another unit type",
        "Target Resource Validity Rule 3",
    ),
    "E807": ("error", "task references L1 of two engines", "Task Placement and Engine Assignment"),
    "E808": (
        "error",
        "@seq_engine out of range or in conflict with L1 placement",
        "Task Placement and Engine Assignment",
    ),
    "E809": ("error", "@readonly together with @writeonly", "Semantic Decorators"),
    # --- hazards, tokens, loops -------------------------------------------------------------
    "E901": (
        "error",
        "overlapping accesses not ordered by dependencies",
        "Hazards and Aliasing 1, 3; Loops",
    ),
    "E902": (
        "error",
        "more live tokens than SEQ.max_active_tokens",
        "Unit Characteristics: SEQ.max_active_tokens",
    ),
    "E903": ("error", "empty or reversed loop range", "Loops and Bounded Pipelining"),
    "E904": (
        "error",
        "loop nest unrolls to too many task instances",
        "Loops and Bounded Pipelining (toolkit limit: 16384 task instances)",
    ),
}


@dataclass(frozen=True)
class Diagnostic:
    """One finding: code, message and where it is."""

    code: str
    message: str
    span: Span
    notes: tuple[str, ...] = field(default=())

    @property
    def severity(self) -> str:
        """``"error"`` or ``"warning"``, from the code table."""
        return CODES[self.code][0]

    @property
    def section(self) -> str:
        """The spec section (or project rule) the code enforces."""
        return CODES[self.code][2]

    def __str__(self) -> str:
        text = f"{self.span}: {self.severity}[{self.code}]: {self.message} [nem.md: {self.section}]"
        for note in self.notes:
            text += f"\n{self.span}: note: {note}"
        return text


class DiagnosticSink:
    """Collects diagnostics; keeps the first of exact duplicates only."""

    def __init__(self) -> None:
        self.items: list[Diagnostic] = []
        self._seen: set[tuple[str, str, Span]] = set()

    def add(self, code: str, message: str, span: Span, *notes: str) -> None:
        """Record a diagnostic with ``code`` (a key of :data:`CODES`)."""
        if code not in CODES:  # pragma: no cover - programming error
            raise KeyError(f"unknown diagnostic code {code}")
        key = (code, message, span)
        if key not in self._seen:
            self._seen.add(key)
            self.items.append(Diagnostic(code, message, span, tuple(notes)))

    @property
    def errors(self) -> list[Diagnostic]:
        """The diagnostics of severity error."""
        return [d for d in self.items if d.severity == "error"]

    def sorted(self) -> list[Diagnostic]:
        """Diagnostics in file/line/column order (stable for equal positions)."""
        return sorted(self.items, key=lambda d: (d.span.file, d.span.line, d.span.col))


class NemError(Exception):
    """Raised by API entry points when a document has errors; carries the diagnostics."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = list(diagnostics)
        first = self.diagnostics[0] if self.diagnostics else None
        more = len(self.diagnostics) - 1
        text = str(first).splitlines()[0] if first else "invalid NEM document"
        if more > 0:
            text += f" (and {more} more)"
        super().__init__(text)
