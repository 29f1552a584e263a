"""The NEM formatter: a :class:`nem.tree.Document` back to text in one canonical layout.

Canonical layout: four-space indents; one statement per line except compute tasks, whose
``in``, ``out``, ``deps`` and each attribute go on their own continuation lines; region
type attributes follow ``region(...)`` on the same line; decorators follow what they
decorate; expressions carry only the parentheses precedence needs. Comments are kept: each
printed line remembers the source line it came from, own-line comments are placed before
the first later line, trailing comments at the end of the line they followed.

``parse(format_document(doc)) == doc`` holds for every document (spans and comments are
not part of equality); the test corpus checks it.
"""

from __future__ import annotations

from nem.tree import (
    BinOp,
    Buffer,
    Comment,
    Compute,
    Const,
    Decorator,
    DeviceConfig,
    DeviceRef,
    Document,
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
    Transfer,
    TypeAttrs,
    TypeFamily,
    Wait,
)

__all__ = ["format_document", "format_expr"]

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "mod": 2}
IND = "    "


def format_expr(expr) -> str:
    """An expression with the minimal parentheses."""
    return _expr(expr, 0)


def _expr(expr, ctx: int) -> str:
    if isinstance(expr, Num):
        return expr.text
    if isinstance(expr, Name):
        return expr.id
    if isinstance(expr, Neg):
        inner = _expr(expr.operand, 3)
        return f"-{inner}"
    if isinstance(expr, BinOp):
        p = _PREC[expr.op]
        text = f"{_expr(expr.left, p)} {expr.op} {_expr(expr.right, p + 1)}"
        # "(i mod 2) * n" reads better than "i mod 2 * n": bracket mod inside * and /.
        mixed = p == 2 and ctx >= 2 and expr.op == "mod"
        return f"({text})" if p < ctx or mixed else text
    raise TypeError(f"not an expression: {expr!r}")


def _str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _value(value) -> str:
    if isinstance(value, Str):
        return _str(value.value)
    if isinstance(value, ListValue):
        return "[" + ", ".join(_value(v) for v in value.items) + "]"
    if isinstance(value, RegionExpr):
        return _region(value)
    return format_expr(value)


def _quant(q: Quant) -> str:
    if q.kind == "per_tensor":
        return f"per_tensor(scale={_value(q.scale)}, zero_point={_value(q.zero_point)})"
    parts = [f"axis={format_expr(q.axis)}"]
    if q.kind == "per_group":
        parts.append(f"group_size={format_expr(q.group_size)}")
    parts.append("scales=[" + ", ".join(_value(v) for v in q.scales) + "]")
    parts.append("zero_points=[" + ", ".join(_value(v) for v in q.zero_points) + "]")
    return f"{q.kind}({', '.join(parts)})"


def _type(t: TypeAttrs) -> str:
    parts = [f"elem={t.elem}", "shape=[" + ", ".join(format_expr(d) for d in t.shape) + "]"]
    if t.layout is not None:
        parts.append(f"layout={t.layout}")
    if t.strides is not None:
        parts.append("strides=[" + ", ".join(format_expr(s) for s in t.strides) + "]")
    if t.quant is not None:
        parts.append(f"quant={_quant(t.quant)}")
    return ", ".join(parts)


def _region(r: RegionExpr) -> str:
    text = f"region({r.buffer}, {format_expr(r.offset)}, {format_expr(r.extent)})"
    return f"{text} {_type(r.type)}" if r.type is not None else text


def _decos(decos: tuple[Decorator, ...]) -> str:
    out = []
    for d in decos:
        if d.unit is not None:
            out.append(f"@{d.name}({d.unit}[{format_expr(d.index)}])")
        elif d.args:
            out.append(f"@{d.name}(" + ", ".join(_value(a) for a in d.args) + ")")
        else:
            out.append(f"@{d.name}")
    return "".join(" " + t for t in out)


def _operand(op: Operand) -> str:
    ref = op.ref if isinstance(op.ref, str) else _region(op.ref)
    return ref + _decos(op.decos)


def _line_of(node) -> int | None:
    span = getattr(node, "span", None)
    if span is not None and span.line > 0:
        return span.line
    for attr in ("left", "operand"):
        if hasattr(node, attr):
            return _line_of(getattr(node, attr))
    return None


class _Out:
    def __init__(self) -> None:
        self.lines: list[tuple[str, int | None]] = []

    def add(self, text: str, src: int | None) -> None:
        self.lines.append((text, src))


def _stmt(out: _Out, stmt, depth: int) -> None:
    ind = IND * depth
    line = _line_of(stmt)
    if isinstance(stmt, Const):
        out.add(f"{ind}const {stmt.name} = {format_expr(stmt.expr)}", line)
    elif isinstance(stmt, Buffer):
        level = stmt.level
        if stmt.engine is not None:
            level += f"[{format_expr(stmt.engine)}]"
        props = []
        if stmt.size is not None:
            props.append(f"size={format_expr(stmt.size)}")
        if stmt.align is not None:
            props.append(f"align={format_expr(stmt.align)}")
        out.add(f"{ind}buffer {stmt.name} : {level} ({', '.join(props)}){_decos(stmt.decos)}", line)
    elif isinstance(stmt, RegionDecl):
        head = f"{ind}{'let ' if stmt.let else ''}{stmt.name} = "
        value = stmt.value
        if isinstance(value, RegionExpr) and value.type is not None:
            pad = " " * len(head)
            bare = RegionExpr(value.buffer, value.offset, value.extent)
            out.add(head + _region(bare), line)
            out.add(pad + _type(value.type), None)
            if stmt.decos:
                out.add(pad + _decos(stmt.decos).strip(), None)
        else:
            out.add(head + _value(value) + _decos(stmt.decos), line)
    elif isinstance(stmt, Loop):
        out.add(
            f"{ind}loop {stmt.var} in [{format_expr(stmt.start)}..{format_expr(stmt.end)}]"
            f"{_decos(stmt.decos)}:",
            line,
        )
        for s in stmt.body:
            _stmt(out, s, depth + 1)
        out.add(f"{ind}endloop", None)
    elif isinstance(stmt, Wait):
        assign = f"{stmt.token} = " if stmt.token else ""
        out.add(f"{ind}{assign}wait({', '.join(stmt.tokens)}){_decos(stmt.decos)}", line)
    elif isinstance(stmt, Transfer):
        assign = f"{stmt.token} = " if stmt.token else ""
        args = [f"dst={_operand(stmt.dst)}", f"src={_operand(stmt.src)}"]
        if stmt.deps is not None:
            args.append(f"deps=[{', '.join(stmt.deps)}]")
        out.add(f"{ind}{assign}{stmt.op}.{stmt.form}({', '.join(args)}){_decos(stmt.decos)}", line)
    elif isinstance(stmt, Compute):
        assign = f"{stmt.token} = " if stmt.token else ""
        more = ind + IND
        out.add(f"{ind}{assign}{stmt.opcode}.{stmt.form}", line)
        out.add(f"{more}in {', '.join(_operand(o) for o in stmt.ins)}", None)
        out.add(f"{more}out {', '.join(_operand(o) for o in stmt.outs)}", None)
        if stmt.deps is not None:
            out.add(f"{more}deps=[{', '.join(stmt.deps)}]", None)
        for key, value in stmt.attrs:
            out.add(f"{more}{key}={_value(value)}", None)
        if stmt.decos:
            out.add(f"{more}{_decos(stmt.decos).strip()}", None)
    else:  # pragma: no cover - the parser makes no other statements
        raise TypeError(f"unknown statement {stmt!r}")


def _units(units) -> list[tuple[str, int | None]]:
    return [(f"{u} = {format_expr(e)}", _line_of(e)) for u, e in units]


def _device(out: _Out, dev: DeviceConfig) -> None:
    ext = f" extends {dev.extends}" if dev.extends else ""
    out.add(f"device {dev.name}{ext} {{", _line_of(dev))
    if dev.spec_version is not None:
        out.add(f"{IND}spec_version = {_str(dev.spec_version)}", None)
    t = dev.topology
    if t is not None:
        out.add(f"{IND}topology {{", _line_of(t))
        if t.num_engines is not None:
            out.add(f"{IND * 2}num_engines = {format_expr(t.num_engines)}", _line_of(t.num_engines))
        if t.l2_size_bytes is not None:
            out.add(
                f"{IND * 2}l2_size_bytes = {format_expr(t.l2_size_bytes)}",
                _line_of(t.l2_size_bytes),
            )
        if t.device_units is not None:
            out.add(f"{IND * 2}device_units {{", None)
            for text, src in _units(t.device_units):
                out.add(IND * 3 + text, src)
            out.add(f"{IND * 2}}}", None)
        out.add(f"{IND * 2}per_engine {{", None)
        for text, src in _units(t.per_engine):
            out.add(IND * 3 + text, src)
        if t.l1_size_bytes is not None:
            out.add(
                f"{IND * 3}l1_size_bytes = {format_expr(t.l1_size_bytes)}",
                _line_of(t.l1_size_bytes),
            )
        out.add(f"{IND * 2}}}", None)
        out.add(f"{IND}}}", None)
    if dev.unit_characteristics is not None:
        out.add(f"{IND}unit_characteristics {{", None)
        for unit, entries in dev.unit_characteristics:
            out.add(f"{IND * 2}{unit} {{", None)
            for text, src in _units(entries):
                out.add(IND * 3 + text, src)
            out.add(f"{IND * 2}}}", None)
        out.add(f"{IND}}}", None)
    for block, refs in (("mandatory", dev.mandatory), ("extended", dev.extended)):
        if refs is not None:
            out.add(f"{IND}opcode.{block} {{", None)
            for ref in refs:
                out.add(f"{IND * 2}{ref}", _line_of(ref))
            out.add(f"{IND}}}", None)
    out.add("}", None)


def _family(out: _Out, fam: TypeFamily) -> None:
    params = ""
    if fam.params:
        params = "<" + ", ".join(f"{n}: {{{', '.join(ts)}}}" for n, ts in fam.params) + ">"
    out.add(f"type_family {fam.name}{params} {{", _line_of(fam))
    for name, typ in fam.operands:
        out.add(f"{IND}{name}: {typ}", None)
    for attr in fam.attrs:
        on = f" on {attr.on}" if attr.on else ""
        out.add(f"{IND}{attr.name} = {attr.value}{on}", None)
    out.add("", None)
    # "variants:" takes the first variant's source line, so that blank lines and comments
    # before that variant go above "variants:" and formatting twice changes nothing.
    first = _line_of(fam.variants[0]) if fam.variants else None
    out.add(f"{IND}variants:", first)
    for k, var in enumerate(fam.variants):
        binds = " ".join(f"{n}: {t}" for n, t in var.operands)
        out.add(
            f"{IND * 2}{var.name}: {{{' ' + binds + ' ' if binds else ''}}}",
            _line_of(var) if k else None,
        )
        entries = "   ".join(
            f"{cls} <{', '.join(inst)}>" if inst else cls for cls, inst in var.conformance
        )
        out.add(f"{IND * 3}conformance: {{ {entries} }}", None)
    out.add("}", None)


def format_document(doc: Document) -> str:
    """Render ``doc`` in the canonical layout (see the module docstring)."""
    out = _Out()
    for inc in doc.includes:
        out.add(f"include {_str(inc.path)}", _line_of(inc))
    if doc.includes:
        out.add("", None)
    if doc.is_program:
        if isinstance(doc.device, DeviceRef):
            target = _str(doc.device.target) if doc.device.is_path else doc.device.target
            out.add(f"device {target}", _line_of(doc.device))
            out.add("", None)
        elif isinstance(doc.device, DeviceConfig):
            _device(out, doc.device)
            out.add("", None)
        if doc.name is not None:
            out.add(f"program {doc.name}:", None)
            out.add("", None)
        for stmt in doc.body:
            _stmt(out, stmt, 0)
    else:
        for item in sorted([*doc.families, *doc.devices], key=lambda n: n.span.line):
            (_family if isinstance(item, TypeFamily) else _device)(out, item)
            out.add("", None)
    return _with_comments(out.lines, doc.comments, doc.blank_lines)


def _with_comments(lines, comments, blanks=()) -> str:
    # Own-line comments and (collapsed) blank lines, in source order.
    own = sorted(
        [*(c for c in comments if not c.trailing), *(Comment("", b, False) for b in blanks)],
        key=lambda c: c.line,
    )
    trailing: dict[int, list[str]] = {}
    for c in comments:
        if c.trailing:
            trailing.setdefault(c.line, []).append(c.text)
    blank_set = {Comment("", b, False) for b in blanks}
    result: list[str] = []
    last_src = 0
    placed: set[int] = set()
    k = 0
    for text, src in lines:
        if src is not None:
            indent = text[: len(text) - len(text.lstrip())]
            while k < len(own) and own[k].line < src:
                if own[k] in blank_set:
                    if result and result[-1].strip():
                        result.append("")
                else:
                    result.append(f"{indent}#{own[k].text}")
                k += 1
            for line in sorted(t for t in trailing if last_src < t < src and t not in placed):
                # A trailing comment on a line printed without a source line (e.g. the
                # middle of a compute task): keep it, after the previous line.
                if result:
                    result[-1] += "  #" + "  #".join(trailing[line])
                placed.add(line)
            last_src = src
        result.append(text)
        if src is not None and src in trailing and src not in placed:
            result[-1] += "  #" + "  #".join(trailing[src])
            placed.add(src)
    for c in own[k:]:
        if c in blank_set:
            if result and result[-1].strip():
                result.append("")
        else:
            result.append(f"#{c.text}")
    for line in sorted(t for t in trailing if t not in placed):
        result.append("#" + "  #".join(trailing[line]))
    while result and not result[-1].strip():
        result.pop()
    return "\n".join(result) + "\n"
