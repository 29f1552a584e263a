"""Text form of a ``.nac`` file: :func:`disassemble` and :func:`assemble`, an exact pair.

``assemble(disassemble(x)) == x`` (and so the bytes are equal). The grammar, one item per
line (``;`` starts a comment line; blank lines are ignored):

.. code-block:: text

    nac version=1 quant=NONE storage=internal inputs=1 outputs=1 d_model=0
    sections MMAP OPS CNST PERM DATA ORCH          ; which sections exist
    cmap 201 "custom.op"
    perm 100 "TSc"
    const 50 list_int32 [1, 2]                      ; null | bool true | int64 -5 | ...
    param 0 "fc.weight"
    input 0 "x"
    tensor 0 float32 [4, 3] quant=NONE data=hex:0000803f...
    proc hex:...
    orch hex:...                                    ; then: orch_const <id> <type> <value>
    rsrc "vocab.json" hex:...
    v0 = <INPUT B=0 "x">   # A=2 B=0 D=[]
    v5 = aten.relu.default(v4)   FREE -> 3, SAVE_RESULT -> 5   # A=201 B=7 D=[-1]

An instruction line is ``v<index> = <readable form>   <MMAP commands>   # <encoding>``.
The encoding (``A= B= [C=[...]] D=[...]``) is authoritative; the readable form (the
operation's name, ancestors as ``vK``, constants by value) is re-derived and must match,
so an edit of one without the other is reported rather than silently ignored. MMAP
commands of the instruction's tick are listed in file order. Strings are JSON strings;
floats are Python ``repr`` values (exact); blobs are ``hex:``.
"""

from __future__ import annotations

import json
import re

from nac.container import (
    Constant,
    DataSection,
    Instruction,
    MmapRecord,
    NacFile,
    Orch,
    QuantParams,
    Tensor,
)
from nac.encoding import (
    SECTION_TAGS,
    ConstType,
    DType,
    MmapAction,
    QuantMethod,
    SystemOp,
)
from nac.errors import NacFormatError

__all__ = ["assemble", "disassemble", "to_json"]

_CONST_NAMES = {t: t.name.lower() for t in ConstType}
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.:<>-]+")
_SECTION_NAMES = {tag: tag.strip() for tag in SECTION_TAGS}


def _fmt_value(const):
    t, v = ConstType(const.type), const.value
    if t == ConstType.NULL:
        return "null"
    if t == ConstType.BOOL:
        return "true" if v else "false"
    if t == ConstType.INT64:
        return str(v)
    if t == ConstType.FLOAT64:
        return repr(float(v))
    if t == ConstType.STRING:
        return json.dumps(v)
    if t == ConstType.LIST_INT32:
        return "[" + ", ".join(str(x) for x in v) + "]"
    return "[" + ", ".join(repr(float(x)) for x in v) + "]"


def _fmt_ints(values):
    return "[" + ", ".join(str(v) for v in values) + "]"


def _readable(nac, index, ins, constants, names):
    params, inputs = names
    if ins.a == SystemOp.INPUT:
        if ins.b == 0:
            name = inputs.get(index)
            return "<INPUT B=0" + (f" {json.dumps(name)}" if name is not None else "") + ">"
        ident = ins.const_ids[0]
        if ins.b == 1:
            name = params.get(ident)
            return f"<INPUT B=1 param={ident}" + (
                f" {json.dumps(name)}" if name is not None else "") + ">"
        if ins.b == 2:
            return f"<INPUT B=2 state={ident}>"
        value = constants.get(ident)
        return f"<INPUT B=3 const={ident}" + (
            f" {_fmt_value(value)}" if value is not None else "") + ">"
    if ins.a == SystemOp.OUTPUT:
        return f"<OUTPUT B={ins.b}>(" + ", ".join(f"v{index + d}" for d in ins.d) + ")"
    if ins.a == SystemOp.CONTROL_FLOW:
        return f"<CONTROL_FLOW B={ins.b}>(" + ", ".join(f"v{index + d}" for d in ins.d) + ")"
    name = nac.op_name(ins.a)
    if name is None:
        name = f"op{ins.a}"
    elif not _PLAIN_NAME.fullmatch(name):
        name = json.dumps(name)  # keeps odd names on one line and unambiguous
    args = []
    ids = iter(ins.const_ids)
    for d in ins.d:
        if d:
            args.append(f"v{index + d}")
        else:
            cid = next(ids, None)
            value = constants.get(cid)
            args.append(_fmt_value(value) if value is not None else f"#{cid}")
    return f"{name}(" + ", ".join(args) + ")"


def _encoding(ins):
    out = f"A={ins.a} B={ins.b}"
    if ins.c is not None:
        out += f" C={_fmt_ints(ins.c)}"
    return out + f" D={_fmt_ints(ins.d)}"


def _fmt_tensor(pid, t):
    out = f"tensor {pid} {DType(t.dtype).name.lower()} {_fmt_ints(t.shape)} " \
          f"quant={QuantMethod(t.quant).name}"
    p = t.quant_params
    if p is not None:
        q = QuantMethod(t.quant)
        if q == QuantMethod.INT8_CHANNEL:
            out += f" axis={p.axis}"
        if q == QuantMethod.BLOCK_FP8:
            out += f" block={p.block_size} orig={_fmt_ints(p.orig_shape)}"
        out += " scales=[" + ", ".join(repr(float(s)) for s in p.scales) + "]"
    return out + f" data=hex:{bytes(t.data).hex()}"


def disassemble(nac):
    """The text form of *nac* (see the module docstring for the grammar)."""
    lines = [
        f"nac version={nac.version} quant={QuantMethod(nac.quant_method).name} "
        f"storage={'internal' if nac.internal_weights else 'external'} "
        f"inputs={nac.num_inputs} outputs={nac.num_outputs} d_model={nac.d_model}",
        "sections " + " ".join(_SECTION_NAMES[tag] for tag in SECTION_TAGS
                               if getattr(nac, _ATTR[tag]) is not None),
    ]
    for ident, name in nac.cmap or ():
        lines.append(f"cmap {ident} {json.dumps(name)}")
    for ident, sig in nac.perm or ():
        lines.append(f"perm {ident} {json.dumps(sig)}")
    for ident, const in nac.cnst or ():
        lines.append(f"const {ident} {_CONST_NAMES[ConstType(const.type)]} {_fmt_value(const)}")
    if nac.data is not None:
        for ident, name in nac.data.params:
            lines.append(f"param {ident} {json.dumps(name)}")
        for ident, name in nac.data.inputs:
            lines.append(f"input {ident} {json.dumps(name)}")
        for pid, tensor in nac.data.tensors or ():
            lines.append(_fmt_tensor(pid, tensor))
    if nac.proc is not None:
        lines.append(f"proc hex:{nac.proc.hex()}")
    if nac.orch is not None:
        lines.append(f"orch hex:{nac.orch.bytecode.hex()}")
        for ident, const in nac.orch.constants:
            lines.append(f"orch_const {ident} {_CONST_NAMES[ConstType(const.type)]} "
                         f"{_fmt_value(const)}")
    for name, data in nac.rsrc or ():
        lines.append(f"rsrc {json.dumps(name)} hex:{data.hex()}")
    constants = dict(nac.cnst or ())
    names = (dict(nac.data.params) if nac.data else {}, dict(nac.data.inputs) if nac.data else {})
    by_tick = {rec.tick: rec.commands for rec in nac.mmap or ()}
    for index, ins in enumerate(nac.ops or ()):
        line = f"v{index} = {_readable(nac, index, ins, constants, names)}"
        if index in by_tick:
            line += "   " + ", ".join(f"{MmapAction(a).name} -> {t}" for a, t in by_tick[index])
        lines.append(f"{line}   # {_encoding(ins)}")
    return "\n".join(lines) + "\n"


_ATTR = {"MMAP": "mmap", "OPS ": "ops", "CMAP": "cmap", "CNST": "cnst", "PERM": "perm",
         "DATA": "data", "PROC": "proc", "ORCH": "orch", "RSRC": "rsrc"}


def to_json(nac):
    """A JSON-serialisable dict of *nac* (for ``npu dis --json``)."""
    def const(c):
        return {"type": _CONST_NAMES[ConstType(c.type)],
                "value": list(c.value) if isinstance(c.value, tuple) else c.value}

    def tensor(t):
        out = {"dtype": DType(t.dtype).name.lower(), "shape": list(t.shape),
               "quant": QuantMethod(t.quant).name, "bytes": len(t.data)}
        if t.quant_params is not None:
            out["quant_params"] = {"scales": list(t.quant_params.scales),
                                   "axis": t.quant_params.axis,
                                   "block_size": t.quant_params.block_size,
                                   "orig_shape": list(t.quant_params.orig_shape)}
        return out

    return {
        "header": {"version": nac.version, "quant": QuantMethod(nac.quant_method).name,
                   "storage": "internal" if nac.internal_weights else "external",
                   "inputs": nac.num_inputs, "outputs": nac.num_outputs,
                   "d_model": nac.d_model},
        "sections": [_SECTION_NAMES[t] for t in SECTION_TAGS if getattr(nac, _ATTR[t]) is not None],
        "cmap": [{"id": i, "name": n} for i, n in nac.cmap or ()],
        "perm": [{"id": i, "signature": s} for i, s in nac.perm or ()],
        "constants": [{"id": i, **const(c)} for i, c in nac.cnst or ()],
        "params": [{"id": i, "name": n} for i, n in (nac.data.params if nac.data else ())],
        "inputs": [{"index": i, "name": n} for i, n in (nac.data.inputs if nac.data else ())],
        "tensors": [{"param": p, **tensor(t)} for p, t in
                    ((nac.data.tensors or ()) if nac.data else ())],
        "ops": [{"index": k, "A": ins.a, "B": ins.b, "C": list(ins.c) if ins.c else None,
                 "D": list(ins.d), "name": nac.op_name(ins.a)} for k, ins in
                enumerate(nac.ops or ())],
        "mmap": [{"tick": r.tick, "commands": [{"action": MmapAction(a).name, "target": t}
                                               for a, t in r.commands]} for r in nac.mmap or ()],
        "proc_bytes": None if nac.proc is None else len(nac.proc),
        "orch": None if nac.orch is None else {"bytecode_bytes": len(nac.orch.bytecode),
                                               "constants": len(nac.orch.constants)},
        "rsrc": [{"name": n, "bytes": len(d)} for n, d in nac.rsrc or ()],
    }


# --- assembler ------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<hex>hex:[0-9a-fA-F]*)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>[-+]?(?:inf|nan|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))
  | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[\[\],=])
""", re.VERBOSE)


class _Line:
    def __init__(self, text, lineno, path):
        self.text, self.lineno, self.path = text, lineno, path
        self.tokens = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                self.fail(f"unexpected character {text[pos]!r}", pos)
            if m.lastgroup != "ws":
                self.tokens.append((m.lastgroup, m.group(), pos))
            pos = m.end()
        self.i = 0

    def fail(self, message, col=None):
        if col is None:
            col = self.tokens[self.i][2] if self.i < len(self.tokens) else len(self.text)
        raise NacFormatError(f"{self.path}:{self.lineno}:{col + 1}: {message}")

    def next(self, kind=None, what=None):
        if self.i >= len(self.tokens):
            self.fail(f"expected {what or kind}, found end of line")
        tok = self.tokens[self.i]
        if kind and tok[0] != kind:
            self.fail(f"expected {what or kind}, found {tok[1]!r}")
        self.i += 1
        return tok[1]

    def word(self, expected=None):
        w = self.next("word", expected or "a word")
        if expected and w != expected:
            self.i -= 1
            self.fail(f"expected {expected!r}, found {w!r}")
        return w

    def int(self, what="an integer", bounds=None):
        """The next integer; *bounds* ``(low, high, field)`` refuses one the field cannot
        hold, at its column (the writer would refuse it later without a place)."""
        tok = self.next("number", what)
        try:
            value = int(tok)
        except ValueError:
            self.i -= 1
            self.fail(f"expected {what}, found {tok!r}")
            raise
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            self.i -= 1
            self.fail(f"{bounds[2]} {value} is out of range [{bounds[0]}, {bounds[1]}]")
        return value

    def ints(self, bounds):
        """A list of integers, each within *bounds*."""
        return self.list(lambda: self.int(bounds=bounds))

    def float(self):
        return float(self.next("number", "a number"))

    def string(self):
        raw = self.next("string", "a string")
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            self.i -= 1
            self.fail(f"bad string: {exc.msg}")
            raise

    def hex(self):
        raw = self.next("hex", "hex:<digits>")[4:]
        if len(raw) % 2:
            self.i -= 1
            self.fail("hex data has an odd number of digits")
        return bytes.fromhex(raw)

    def punct(self, ch):
        tok = self.next("punct", repr(ch))
        if tok != ch:
            self.i -= 1
            self.fail(f"expected {ch!r}, found {tok!r}")

    def peek(self):
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def list(self, item):
        self.punct("[")
        out = []
        while self.peek() != "]":
            out.append(item())
            if self.peek() == ",":
                self.punct(",")
        self.punct("]")
        return tuple(out)

    def key(self, name):
        self.word(name)
        self.punct("=")

    def end(self):
        if self.i != len(self.tokens):
            self.fail(f"unexpected {self.tokens[self.i][1]!r} at the end of the line")

    def enum(self, cls, what):
        name = self.word()
        try:
            return cls[name.upper()]
        except KeyError:
            self.i -= 1
            self.fail(f"unknown {what} {name!r}")
            raise


def _parse_constant(line):
    ctype = line.enum(ConstType, "constant type")
    if ctype == ConstType.NULL:
        line.word("null")
        return Constant(ctype)
    if ctype == ConstType.BOOL:
        w = line.word()
        if w not in ("true", "false"):
            line.i -= 1
            line.fail(f"expected true or false, found {w!r}")
        return Constant(ctype, w == "true")
    if ctype == ConstType.INT64:
        return Constant(ctype, line.int(bounds=_bounds("int64 constant", "q")))
    if ctype == ConstType.FLOAT64:
        return Constant(ctype, line.float())
    if ctype == ConstType.STRING:
        return Constant(ctype, line.string())
    if ctype == ConstType.LIST_INT32:
        return Constant(ctype, line.ints(_bounds("list_int32 element", "i")))
    return Constant(ctype, line.list(line.float))


def _bounds(field, fmt):
    """``(low, high, field)`` of a struct format letter (the widths of the binary form)."""
    bits = {"B": 8, "H": 16, "I": 32, "h": 16, "i": 32, "q": 64}[fmt]
    if fmt.islower():
        return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1, field)
    return (0, (1 << bits) - 1, field)


_INSTRUCTION = re.compile(r"^v(\d+) = (.*?)   # (A=.*)$")
_MMAP_TAIL = re.compile(r"^(.*?)   ((?:(?:SAVE_RESULT|FREE|FORWARD|PRELOAD) -> \d+(?:, )?)+)$")


def assemble(text, path="<text>"):
    """Parse the text form back into a :class:`NacFile`.

    Raises
    ------
    NacFormatError
        With ``path:line:column`` of the first problem.
    """
    header = None
    sections = None
    cmap, perm, cnst, params, inputs, tensors = [], [], [], [], [], []
    proc = orch_code = None
    orch_consts, rsrc, ops, readable, mmap = [], [], [], [], []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith(";"):
            continue
        m = _INSTRUCTION.match(raw)
        if m:
            index, left, enc = int(m.group(1)), m.group(2), m.group(3)
            if index != len(ops):
                raise NacFormatError(f"{path}:{lineno}:2: instruction v{index} out of order "
                                     f"(expected v{len(ops)})")
            line = _Line(enc, lineno, path)
            col0 = raw.index("# A=") + 2
            line.tokens = [(k, v, p + col0) for k, v, p in line.tokens]
            line.text = raw
            line.key("A")
            a = line.int(bounds=_bounds("A", "B"))
            line.key("B")
            b = line.int(bounds=_bounds("B", "B"))
            c = None
            if line.peek() == "C":
                line.key("C")
                c = line.ints(_bounds("C value", "h"))
            line.key("D")
            d = line.ints(_bounds("D offset", "h"))
            line.end()
            tail = _MMAP_TAIL.match(left)
            commands = ()
            if tail:
                left = tail.group(1)
                commands = tuple(
                    (MmapAction[act], int(t)) for act, t in
                    re.findall(r"(SAVE_RESULT|FREE|FORWARD|PRELOAD) -> (\d+)", tail.group(2)))
                mmap.append(MmapRecord(index, commands))
            ops.append(Instruction(a, b, c, d))
            readable.append((lineno, left, raw.index(" = ") + 3))
            continue
        line = _Line(raw, lineno, path)
        keyword = line.word()
        if keyword == "nac":
            line.key("version")
            version = line.int(bounds=_bounds("version", "B"))
            line.key("quant")
            quant = line.enum(QuantMethod, "quantisation method")
            line.key("storage")
            storage = line.word()
            if storage not in ("internal", "external"):
                line.i -= 1
                line.fail(f"storage must be internal or external, not {storage!r}")
            values = []
            for key in ("inputs", "outputs", "d_model"):
                line.key(key)
                values.append(line.int(bounds=_bounds(key, "H")))
            line.end()
            header = dict(version=version, quant_method=quant,
                          internal_weights=storage == "internal", num_inputs=values[0],
                          num_outputs=values[1], d_model=values[2])
        elif keyword == "sections":
            sections = set()
            while line.peek() is not None:
                name = line.word()
                if name not in _SECTION_NAMES.values():
                    line.i -= 1
                    line.fail(f"unknown section {name!r}")
                sections.add(name)
        elif keyword in ("cmap", "perm", "param", "input"):
            ident = line.int(bounds=_bounds(f"{keyword} id", "H"))
            value = line.string()
            line.end()
            {"cmap": cmap, "perm": perm, "param": params, "input": inputs}[keyword].append(
                (ident, value))
        elif keyword in ("const", "orch_const"):
            ident = line.int(bounds=_bounds(f"{keyword} id", "H"))
            const = _parse_constant(line)
            line.end()
            (cnst if keyword == "const" else orch_consts).append((ident, const))
        elif keyword == "tensor":
            pid = line.int(bounds=_bounds("tensor id", "H"))
            dtype = line.enum(DType, "dtype")
            shape = line.ints(_bounds("dimension", "I"))
            line.key("quant")
            quant = line.enum(QuantMethod, "quantisation method")
            qp = None
            if quant not in (QuantMethod.NONE, QuantMethod.FP16):
                axis = block = 0
                orig = ()
                if quant == QuantMethod.INT8_CHANNEL:
                    line.key("axis")
                    axis = line.int(bounds=_bounds("axis", "B"))
                if quant == QuantMethod.BLOCK_FP8:
                    line.key("block")
                    block = line.int(bounds=_bounds("block", "H"))
                    line.key("orig")
                    orig = line.ints(_bounds("dimension", "I"))
                line.key("scales")
                qp = QuantParams(line.list(line.float), axis, block, orig)
            line.key("data")
            data = line.hex()
            line.end()
            tensors.append((pid, Tensor(dtype, shape, quant, qp, data)))
        elif keyword == "proc":
            proc = line.hex()
            line.end()
        elif keyword == "orch":
            orch_code = line.hex()
            line.end()
        elif keyword == "rsrc":
            name = line.string()
            rsrc.append((name, line.hex()))
            line.end()
        else:
            line.i -= 1
            line.fail(f"unknown line kind {keyword!r}")
    if header is None:
        raise NacFormatError(f"{path}: missing the 'nac version=...' header line")
    if sections is None:
        raise NacFormatError(f"{path}: missing the 'sections ...' line")

    def present(name, value):
        return value if name in sections else None

    data = None
    if "DATA" in sections:
        data = DataSection(tuple(params), tuple(inputs),
                           tuple(tensors) if header["internal_weights"] else None)
    nac = NacFile(
        **header,
        mmap=present("MMAP", tuple(mmap)), ops=present("OPS", tuple(ops)),
        cmap=present("CMAP", tuple(cmap)), cnst=present("CNST", tuple(cnst)),
        perm=present("PERM", tuple(perm)), data=data,
        proc=present("PROC", proc if proc is not None else b""),
        orch=present("ORCH", Orch(orch_code or b"", tuple(orch_consts))),
        rsrc=present("RSRC", tuple(rsrc)))
    # The readable forms must be what the encoding says.
    constants = dict(nac.cnst or ())
    names = (dict(params), dict(inputs))
    for (lineno, written, col), index in zip(readable, range(len(ops)), strict=True):
        ins = nac.ops[index] if nac.ops else ops[index]
        try:
            expected = _readable(nac, index, ins, constants, names)
        except (IndexError, TypeError):
            expected = None
        if written != expected:
            raise NacFormatError(f"{path}:{lineno}:{col + 1}: readable form {written!r} does "
                                 f"not match the encoding (expected {expected!r})")
    return nac
