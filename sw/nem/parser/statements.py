"""Documents and program statements: buffers, regions, loops, tasks, waits."""

from __future__ import annotations

from nem.diagnostics import Span
from nem.lexer import Token
from nem.parser.cursor import _Abort
from nem.parser.operands import Operands
from nem.tree import (
    Buffer,
    Compute,
    Const,
    Decorator,
    DeviceConfig,
    DeviceRef,
    Document,
    Include,
    Loop,
    RegionDecl,
    Transfer,
    TypeFamily,
    Wait,
)


class Statements(Operands):
    """A whole document and its program statements (device configurations come from
    :class:`nem.parser.config.ConfigDocs`)."""

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
