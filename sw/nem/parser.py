"""The NEM parser: tokens -> :class:`nem.tree.Document`, with error recovery.

Layout rule (the grammar has no line ends): newlines are whitespace, and a statement ends
where the next token cannot continue it. The places where that needs a decision are:

* after a compute task's operands, ``NAME = value`` is an attribute *unless* the value
  starts a region (``region(``) or a task call (``transfer.async``, ``relu.sync``, ``wait(``),
  in which case it is the next statement;
* a region's type attributes continue while a ``,`` is followed by one of ``elem``,
  ``shape``, ``layout``, ``strides``, ``quant`` and ``=``; otherwise the ``,`` belongs to
  the surrounding operand list;
* decorators (``@...``) attach to what precedes them, with one exception: after a compute
  task's operand, a decorator that applies only to tasks (``@resource``, ``@seq_engine``,
  ``@memmove``, ``@deterministic``, ``@max_in_flight``) ends the operand and belongs to the
  task (``relu.async in X out Y @materialized @resource(CSTL[0])``: Y is materialized, the
  task is bound to CSTL[0]).

Errors are reported to the sink and parsing resumes at the next token that starts a line
and can start a statement, so one run reports every independent syntax error.
"""

from __future__ import annotations

from nem.diagnostics import DiagnosticSink, Span
from nem.elemtypes import ELEM_TYPES
from nem.lexer import Token, tokenize
from nem.tree import (
    BinOp,
    Buffer,
    Compute,
    Const,
    Decorator,
    DeviceConfig,
    DeviceRef,
    Document,
    FamilyAttr,
    Include,
    ListValue,
    Loop,
    Name,
    Neg,
    Num,
    Operand,
    Quant,
    RegionDecl,
    RegionExpr,
    Str,
    Topology,
    Transfer,
    TypeAttrs,
    TypeFamily,
    Variant,
    VariantRef,
    Wait,
)

__all__ = ["TYPE_KEYS", "parse"]

TYPE_KEYS = ("elem", "shape", "layout", "strides", "quant")
_STMT_KEYWORDS = frozenset(
    {
        "const",
        "buffer",
        "let",
        "loop",
        "endloop",
        "wait",
        "include",
        "device",
        "program",
        "type_family",
        "transfer",
        "store",
    }
)
_MAX_DEPTH = 100
#: Toolkit limits (docs/nem-toolkit.md, "Limits"): the height of an expression tree (a chain
#: ``1 + 1 + ...`` is as deep as it has operators; every tree walker recurses on it) and the
#: characters of a number literal (no 64-bit value needs more than 20 digits).
MAX_EXPR_DEPTH = 256
MAX_LITERAL_CHARS = 100
# Decorators that apply to tasks and never to regions: after a compute task's last operand
# they belong to the task ("relu.async in X out Y @resource(CSTL[0])"), not to Y.
_TASK_DECOS = frozenset({"resource", "seq_engine", "memmove", "deterministic", "max_in_flight"})


class _Abort(Exception):
    """Unwinds to the nearest recovery point after an error was reported."""


class _Parser:
    def __init__(self, tokens: list[Token], file: str, sink: DiagnosticSink):
        self.toks = tokens
        self.pos = 0
        self.file = file
        self.sink = sink
        self.depth = 0
        self.height = 0  # height of the expression tree returned last by expr() and below

    # --- token helpers ---------------------------------------------------------------------

    def peek(self, k: int = 0) -> Token:
        j = self.pos + k
        toks = self.toks
        return toks[j] if j < len(toks) else toks[-1]

    def span(self, tok: Token | None = None) -> Span:
        return (tok or self.peek()).span(self.file)

    def advance(self) -> Token:
        tok = self.peek()
        if tok.kind != "EOF":
            self.pos += 1
        return tok

    def at(self, kind: str, k: int = 0) -> bool:
        return self.peek(k).kind == kind

    def at_kw(self, word: str, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok.kind == "ID" and tok.text == word

    def fail(self, message: str, tok: Token | None = None) -> _Abort:
        tok = tok or self.peek()
        found = "end of file" if tok.kind == "EOF" else repr(tok.text)
        self.sink.add("E201", f"{message}, found {found}", self.span(tok))
        return _Abort()

    def expect(self, kind: str, what: str | None = None) -> Token:
        if self.peek().kind != kind:
            raise self.fail(f"expected {what or repr(kind)}")
        return self.advance()

    def expect_kw(self, word: str) -> Token:
        if not self.at_kw(word):
            raise self.fail(f"expected '{word}'")
        return self.advance()

    def ident(self, what: str = "a name") -> Token:
        return self.expect("ID", what)

    def recover(self) -> None:
        """Skip to the next token that begins a line and can begin a statement."""
        self.advance()
        while not self.at("EOF"):
            tok = self.peek()
            if tok.bol and self.starts_statement():
                return
            self.advance()

    def starts_statement(self, k: int = 0) -> bool:
        tok = self.peek(k)
        if tok.kind == ";":
            return True
        if tok.kind != "ID":
            return False
        if tok.text in _STMT_KEYWORDS:
            return True
        return self.at("=", k + 1) or self.is_call(k)

    def is_call(self, k: int) -> bool:
        """A task call starts at ``k``: ``wait(``, ``transfer.async``, ``OPCODE.sync`` ..."""
        tok = self.peek(k)
        if tok.kind != "ID":
            return False
        if tok.text == "wait":
            return self.at("(", k + 1)
        nxt = self.peek(k + 2)
        if not (self.at(".", k + 1) and not self.peek(k + 1).gap and nxt.kind == "ID"):
            return False
        # OPCODE.async / OPCODE.sync, or another form name followed by what a task call
        # continues with (so that "relu.later in X out Y" is reported as a bad form).
        return nxt.text in ("async", "sync") or self.at_kw("in", k + 3) or self.at("(", k + 3)

    # --- document --------------------------------------------------------------------------

    def document(self, comments, blanks: tuple[int, ...] = ()) -> Document:
        includes: list[Include] = []
        families: list[TypeFamily] = []
        devices: list[DeviceConfig] = []
        device_ref: DeviceRef | None = None
        name: str | None = None
        body: list = []
        program_started = False
        while not self.at("EOF"):
            start = self.pos
            try:
                if self.at_kw("include"):
                    tok = self.advance()
                    path = self.expect("STRING", "a quoted include path")
                    if families or devices or device_ref or program_started:
                        self.sink.add(
                            "E203",
                            "include must come before everything else in a document",
                            self.span(tok),
                        )
                    if not path.bad:  # an unclosed string is reported once, not looked up
                        includes.append(Include(path.text, self.span(tok)))
                elif self.at_kw("type_family"):
                    fam = self.type_family()
                    if program_started:
                        self.sink.add(
                            "E203",
                            f"type family {fam.name!r} declared inside a "
                            "program; type families belong in config documents",
                            fam.span,
                        )
                    families.append(fam)
                elif self.at_kw("device"):
                    tok = self.advance()
                    if self.at("STRING"):
                        if self.peek().bad:  # reported by the lexer; do not look it up
                            self.advance()
                            continue
                        ref = DeviceRef(self.advance().text, True, self.span(tok))
                    else:
                        dev_name = self.ident("a device name or a quoted file path")
                        if self.at("{") or self.at_kw("extends"):
                            dev = self.device_config(tok, dev_name)
                            if program_started:
                                self.sink.add(
                                    "E203",
                                    "a device configuration must come "
                                    "before the program header and statements",
                                    dev.span,
                                )
                            devices.append(dev)
                            continue
                        ref = DeviceRef(dev_name.text, False, self.span(tok))
                    if device_ref is not None or program_started:
                        self.sink.add(
                            "E203",
                            "the device directive must come once, before "
                            "the program header and statements",
                            ref.span,
                        )
                    device_ref = device_ref or ref
                elif self.at_kw("program") and self.at("ID", 1) and self.at(":", 2):
                    tok = self.advance()
                    label = self.advance()
                    self.advance()
                    if name is not None or body:
                        self.sink.add(
                            "E203",
                            "the program header must come once, before the statements",
                            self.span(tok),
                        )
                    name = name or label.text
                    program_started = True
                else:
                    stmt = self.statement(in_loop=False)
                    program_started = True
                    if stmt is not None:
                        body.append(stmt)
            except _Abort:
                if self.pos == start:
                    self.advance()
                self.pos -= 1
                self.recover()
        is_program = program_started or device_ref is not None or not (families or devices)
        device = device_ref
        if is_program:
            if families:
                self.sink.add(
                    "E203", "a program file cannot declare type families", families[0].span
                )
            if devices:
                if device_ref is not None or len(devices) > 1:
                    self.sink.add(
                        "E203",
                        "a program has one device: a directive or one inline device configuration",
                        devices[-1].span,
                    )
                device = device or devices[0]
            families, devices = [], []
        return Document(
            tuple(includes),
            device,
            name,
            tuple(body),
            tuple(families),
            tuple(devices),
            is_program,
            self.file,
            tuple(comments),
            blanks,
        )

    # --- statements ------------------------------------------------------------------------

    def statement(self, in_loop: bool):
        tok = self.peek()
        if tok.kind == ";":
            self.advance()
            return None
        if tok.kind != "ID":
            raise self.fail("expected a statement")
        word = tok.text
        if word == "const" and self.at("ID", 1):
            self.advance()
            name = self.ident()
            self.expect("=", "'='")
            return Const(name.text, self.expr(), self.span(tok))
        if word == "buffer" and self.at("ID", 1):
            return self.buffer()
        if word == "let" and self.at("ID", 1):
            self.advance()
            name = self.ident()
            self.expect("=", "'='")
            value = self.value()
            return RegionDecl(name.text, value, True, self.decos(), self.span(tok))
        if word == "loop" and self.at("ID", 1):
            return self.loop()
        if word == "endloop":
            raise self.fail("'endloop' without a matching 'loop'")
        if self.is_call(0):
            return self.task(None, tok)
        if self.at("=", 1):
            if self.at_kw("region", 2) and self.at("(", 3):
                self.advance()
                self.advance()
                self.advance()
                region = self.region_expr()
                return RegionDecl(tok.text, region, False, self.decos(), self.span(tok))
            if self.is_call(2):
                self.advance()
                self.advance()
                return self.task(tok.text, tok)
            self.advance()
            self.advance()
            raise self.fail("expected region(...) or a task after '='")
        raise self.fail("expected a statement")

    def buffer(self) -> Buffer:
        tok = self.advance()
        name = self.ident()
        self.expect(":", "':'")
        level_tok = self.ident("a memory level (DDR, L2 or L1)")
        level, engine = level_tok.text, None
        if level not in ("DDR", "L2", "L1"):
            raise self.fail("expected a memory level (DDR, L2 or L1)", level_tok)
        if level == "L1" and self.at("["):
            self.advance()
            engine = self.expr()
            self.expect("]", "']'")
        self.expect("(", "'('")
        props: dict[str, object] = {}
        while True:
            key = self.ident("'size' or 'align'")
            if key.text not in ("size", "align"):
                raise self.fail("expected 'size' or 'align'", key)
            if key.text in props:
                raise self.fail(f"buffer property '{key.text}' given twice", key)
            self.expect("=", "'='")
            props[key.text] = self.expr()
            if not self.at(","):
                break
            self.advance()
        self.expect(")", "')'")
        return Buffer(
            name.text,
            level,
            engine,
            props.get("size"),
            props.get("align"),
            self.decos(),
            self.span(tok),
        )

    def loop(self) -> Loop:
        tok = self.advance()
        var = self.ident("a loop variable")
        self.expect_kw("in")
        self.expect("[", "'['")
        start = self.expr()
        self.expect("..", "'..'")
        end = self.expr()
        self.expect("]", "']'")
        decos = self.decos()
        self.expect(":", "':'")
        body = []
        while not self.at_kw("endloop"):
            if self.at("EOF"):
                raise self.fail(f"loop opened at line {tok.line} is not closed by 'endloop'")
            begin = self.pos
            try:
                stmt = self.statement(in_loop=True)
                if stmt is not None:
                    body.append(stmt)
            except _Abort:
                if self.pos == begin:
                    self.advance()
                self.pos -= 1
                self.recover()
        self.advance()
        return Loop(var.text, start, end, tuple(body), decos, self.span(tok))

    def task(self, token: str | None, first: Token):
        head = self.advance()
        span = self.span(first)
        if head.text == "wait":
            self.expect("(", "'('")
            ids = self.id_list()
            self.expect(")", "')'")
            return Wait(ids, token, self.decos(), span)
        self.advance()  # "."
        form = self.advance().text
        if head.text in ("transfer", "store"):
            self.expect("(", "'('")
            args: dict[str, object] = {}
            while True:
                key = self.ident("'dst', 'src' or 'deps'")
                if key.text not in ("dst", "src", "deps"):
                    raise self.fail("expected 'dst', 'src' or 'deps'", key)
                if key.text in args:
                    raise self.fail(f"'{key.text}' given twice", key)
                self.expect("=", "'='")
                if key.text == "deps":
                    self.expect("[", "'['")
                    args["deps"] = self.id_list() if not self.at("]") else ()
                    self.expect("]", "']'")
                else:
                    args[key.text] = self.operand()
                if not self.at(","):
                    break
                self.advance()
            self.expect(")", "')'")
            for key in ("dst", "src"):
                if key not in args:
                    raise self.fail(f"{head.text}.{form} needs '{key}='")
            return Transfer(
                token,
                head.text,
                form,
                args["dst"],
                args["src"],
                args.get("deps"),
                self.decos(),
                span,
            )
        # compute
        self.expect_kw("in")
        ins = self.operand_list()
        self.expect_kw("out")
        outs = self.operand_list()
        attrs: list = []
        attr_spans: list[Span] = []
        deps = None
        decos: list[Decorator] = []
        while True:
            if self.at("@"):
                decos.append(self.decorator())
            elif (
                self.at("ID")
                and self.at("=", 1)
                and not self.at_kw("region", 2)
                and not self.is_call(2)
            ):
                key = self.advance()
                self.advance()
                if key.text == "deps":
                    self.expect("[", "'['")
                    ids = self.id_list() if not self.at("]") else ()
                    self.expect("]", "']'")
                    if deps is not None:
                        self.sink.add("E705", "'deps' given twice", self.span(key))
                    deps = ids
                else:
                    attrs.append((key.text, self.value()))
                    attr_spans.append(self.span(key))
            else:
                break
        return Compute(
            token,
            head.text,
            form,
            ins,
            outs,
            tuple(attrs),
            deps,
            tuple(decos),
            span,
            tuple(attr_spans),
        )

    def id_list(self) -> tuple[str, ...]:
        ids = [self.ident("a token name").text]
        while self.at(","):
            self.advance()
            ids.append(self.ident("a token name").text)
        return tuple(ids)

    def operand_list(self) -> tuple[Operand, ...]:
        """A compute task's operands; task-only decorators end an operand (layout rule)."""
        ops = [self.operand(_TASK_DECOS)]
        while self.at(","):
            self.advance()
            ops.append(self.operand(_TASK_DECOS))
        return tuple(ops)

    def operand(self, stop: frozenset[str] = frozenset()) -> Operand:
        tok = self.peek()
        if self.at_kw("region") and self.at("(", 1):
            self.advance()
            ref = self.region_expr()
        else:
            ref = self.ident("a region name or region(...)").text
        return Operand(ref, self.decos(stop), self.span(tok))

    def region_expr(self) -> RegionExpr:
        """After ``region``: ``(buffer, offset, extent)`` and optional type attributes."""
        tok = self.toks[self.pos - 1]
        self.expect("(", "'('")
        buf = self.ident("a buffer name")
        self.expect(",", "','")
        offset = self.expr()
        self.expect(",", "','")
        extent = self.expr()
        self.expect(")", "')'")
        typ = None
        if self.peek().kind == "ID" and self.peek().text in TYPE_KEYS and self.at("=", 1):
            typ = self.type_attrs()
        return RegionExpr(buf.text, offset, extent, typ, self.span(tok))

    def type_attrs(self) -> TypeAttrs:
        start = self.peek()
        seen: dict[str, object] = {}
        while True:
            key = self.advance()
            self.advance()  # "="
            if key.text in seen:
                raise self.fail(f"type attribute '{key.text}' given twice", key)
            if key.text == "elem":
                elem = self.ident("an element type")
                if elem.text not in ELEM_TYPES:
                    self.sink.add(
                        "E610",
                        f"unknown element type {elem.text!r} (known: {', '.join(ELEM_TYPES)})",
                        self.span(elem),
                    )
                seen["elem"] = elem.text
            elif key.text in ("shape", "strides"):
                self.expect("[", "'['")
                dims = [self.expr()]
                while self.at(","):
                    self.advance()
                    dims.append(self.expr())
                self.expect("]", "']'")
                seen[key.text] = tuple(dims)
            elif key.text == "layout":
                seen["layout"] = self.ident("a layout name").text
            else:
                seen["quant"] = self.quant()
            if (
                self.at(",")
                and self.peek(1).kind == "ID"
                and self.peek(1).text in TYPE_KEYS
                and self.at("=", 2)
            ):
                self.advance()
                continue
            break
        span = self.span(start)
        if "elem" not in seen or "shape" not in seen:
            missing = " and ".join(k for k in ("elem", "shape") if k not in seen)
            self.sink.add("E605", f"region type attributes need {missing}", span)
        if "layout" in seen and "strides" in seen:
            self.sink.add("E605", "give either layout= or strides=, not both", span)
        elif "layout" not in seen and "strides" not in seen:
            self.sink.add("E605", "region type attributes need layout= or strides=", span)
        return TypeAttrs(
            seen.get("elem", "?"),
            seen.get("shape", ()),
            seen.get("layout"),
            seen.get("strides"),
            seen.get("quant"),
            span,
        )

    def quant(self) -> Quant:
        kind = self.ident("per_tensor, per_channel or per_group")
        if kind.text not in ("per_tensor", "per_channel", "per_group"):
            raise self.fail("expected per_tensor, per_channel or per_group", kind)
        keys = {
            "per_tensor": ("scale", "zero_point"),
            "per_channel": ("axis", "scales", "zero_points"),
            "per_group": ("axis", "group_size", "scales", "zero_points"),
        }[kind.text]
        self.expect("(", "'('")
        fields: dict[str, object] = {}
        for i, key in enumerate(keys):
            if i:
                self.expect(",", "','")
            name = self.ident(f"'{key}'")
            if name.text != key:
                raise self.fail(f"expected '{key}' ({kind.text} takes {', '.join(keys)})", name)
            self.expect("=", "'='")
            if key in ("scales", "zero_points"):
                value = self.value()
                if not isinstance(value, ListValue):
                    raise self.fail(f"'{key}' must be a list [...]")
                fields[key] = value.items
            elif key in ("axis", "group_size"):
                fields[key] = self.expr()
            else:
                fields[key] = self.value()
        self.expect(")", "')'")
        return Quant(
            kind.text,
            fields.get("scale"),
            fields.get("zero_point"),
            fields.get("axis"),
            fields.get("group_size"),
            fields.get("scales", ()),
            fields.get("zero_points", ()),
            self.span(kind),
        )

    def decos(self, stop: frozenset[str] = frozenset()) -> tuple[Decorator, ...]:
        """Decorators here; stops before one whose name is in ``stop``."""
        out = []
        while self.at("@") and not (self.at("ID", 1) and self.peek(1).text in stop):
            out.append(self.decorator())
        return tuple(out)

    def decorator(self) -> Decorator:
        at = self.advance()
        name = self.ident("a decorator name")
        if name.gap:
            raise self.fail("no space allowed between '@' and the decorator name", name)
        if not self.at("("):
            return Decorator(name.text, span=self.span(at))
        self.advance()
        if self.at("ID") and self.at("[", 1):
            unit = self.advance().text
            self.advance()
            index = self.expr()
            self.expect("]", "']'")
            self.expect(")", "')'")
            return Decorator(name.text, (), unit, index, self.span(at))
        args = [] if self.at(")") else [self.value()]
        while self.at(","):
            self.advance()
            args.append(self.value())
        self.expect(")", "')'")
        return Decorator(name.text, tuple(args), span=self.span(at))

    # --- values and expressions ------------------------------------------------------------

    def value(self):
        tok = self.peek()
        if tok.kind == "STRING":
            self.advance()
            return Str(tok.text, self.span(tok))
        if tok.kind == "[":
            self.advance()
            items = []
            self.nest()
            if not self.at("]"):
                items.append(self.value())
                while self.at(","):
                    self.advance()
                    items.append(self.value())
            self.expect("]", "']'")
            self.depth -= 1
            return ListValue(tuple(items), self.span(tok))
        if self.at_kw("region") and self.at("(", 1):
            self.advance()
            return self.region_expr()
        return self.expr()

    def nest(self) -> None:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.fail(f"nesting deeper than {_MAX_DEPTH} levels")

    def grown(self, left_height: int, right_height: int, op: Token) -> int:
        """Height of a node over two subtrees; E204 past :data:`MAX_EXPR_DEPTH`."""
        height = max(left_height, right_height) + 1
        if height > MAX_EXPR_DEPTH:
            self.sink.add(
                "E204",
                f"expression nested deeper than {MAX_EXPR_DEPTH} levels (a chain of n "
                "operators is n levels deep); split it into consts",
                self.span(op),
            )
            raise _Abort()
        return height

    def expr(self):
        self.nest()
        left = self.term()
        height = self.height
        while self.at("+") or self.at("-"):
            op = self.advance()
            right = self.term()
            height = self.grown(height, self.height, op)
            left = BinOp(op.text, left, right, self.span(op))
        self.depth -= 1
        self.height = height
        return left

    def term(self):
        left = self.unary()
        height = self.height
        while self.at("*") or self.at("/") or self.at_kw("mod"):
            op = self.advance()
            right = self.unary()
            height = self.grown(height, self.height, op)
            left = BinOp(op.text, left, right, self.span(op))
        self.height = height
        return left

    def unary(self):
        if self.at("-"):
            tok = self.advance()
            self.nest()
            operand = self.unary()
            self.depth -= 1
            self.height = self.grown(self.height, 0, tok)
            return Neg(operand, self.span(tok))
        return self.primary()

    def primary(self):
        tok = self.peek()
        self.height = 0
        if tok.kind in ("INT", "FLOAT") and len(tok.text) > MAX_LITERAL_CHARS:
            self.sink.add(
                "E104",
                f"number literal of {len(tok.text)} characters (at most {MAX_LITERAL_CHARS}; "
                "no 64-bit value needs more)",
                self.span(tok),
            )
            raise _Abort()
        if tok.kind == "INT":
            self.advance()
            return Num(int(tok.text), tok.text, self.span(tok))
        if tok.kind == "FLOAT":
            self.advance()
            return Num(float(tok.text), tok.text, self.span(tok))
        if tok.kind == "ID" and tok.text != "mod":
            self.advance()
            return Name(tok.text, self.span(tok))
        if tok.kind == "(":
            self.advance()
            inner = self.expr()
            self.expect(")", "')'")
            return inner
        raise self.fail("expected a number, a name or '('")

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


def parse(text: str, file: str = "<string>", sink: DiagnosticSink | None = None) -> Document:
    """Parse NEM source text into a :class:`Document`.

    Parameters
    ----------
    text : str
        The source.
    file : str
        Name used in spans and diagnostics.
    sink : DiagnosticSink, optional
        Receives lexical and syntax diagnostics. Without one, the first error raises
        :class:`nem.diagnostics.NemError`.

    Returns
    -------
    Document
        The tree; parts that did not parse are left out (and reported).
    """
    from nem.diagnostics import NemError

    own = sink is None
    sink = sink if sink is not None else DiagnosticSink()
    tokens, comments = tokenize(text, file, sink)
    blanks = tuple(k + 1 for k, line in enumerate(text.split("\n")) if not line.strip())
    doc = _Parser(tokens, file, sink).document(comments, blanks)
    if own and sink.errors:
        raise NemError(sink.sorted())
    return doc
