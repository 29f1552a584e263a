"""The upstream examples and the shipped baseline: they parse, check, and format back.

The copies in ``examples/`` (see its README) contain mistakes; each expected diagnostic is
listed below with the reason, so that a change in the checker that loses (or adds) one of
them fails here. Everything not listed must check clean.

Upstream mistakes (nem-notes.md and our own findings):

* ``conv2d_relu.nem`` declares ``ToH = ToW = 14`` for a 16x16 input, 3x3 kernel, pads 1,
  stride 1, which gives 16x16 (E710 on the conv2d task).
* ``conv2d_relu.nem``'s conv2d is int8 (``conv2d.int8`` has ``quant = required``) but X and W
  carry no quant descriptor; the nearest variant is ``conv2d.int8<i8>.with_bias`` (E708).
* Both programs reload the shared weights (``W_l1`` / ``B_l1``) in every iteration while
  ``@max_in_flight(2)`` lets two iterations overlap: iteration i+1's weight transfer is not
  ordered against iteration i's transfer nor its conv/gemm reading them (E901, twice).
* ``npm_lite.cfg``'s topology has no ``l2_size_bytes`` / ``l1_size_bytes``, which the
  Memory Capacity Fields section requires (E407 for each, per device that uses it).
* ``npm_lite.cfg``'s ``npm_lite_fp16`` lists in ``opcode.extended`` three MUST variants that
  it already inherits in ``opcode.mandatory`` (W401 each, Schema Rule 4).
* The programs name ``npm_lite.cfg``, which defines two devices; the first, ``npm_lite``,
  is the target (W402, a project rule).
"""

from __future__ import annotations

from collections import Counter
from importlib import resources
from pathlib import Path

import pytest

from nem.checker import check_file, check_text
from nem.formatter import format_document
from nem.parser import parse
from nem.tree import Compute, Loop, RegionDecl, Transfer, Wait

EXAMPLES = Path(__file__).parent / "examples"
BASELINE = resources.files("nem").joinpath("data", "npm_baseline_1.0.nem")

#: file -> Counter of (file the diagnostic is in, line, code)
EXPECTED = {
    "conv2d_relu.nem": Counter(
        {
            ("conv2d_relu.nem", 13, "W402"): 1,  # npm_lite.cfg defines two devices
            ("npm_lite.cfg", 7, "E407"): 2,  # no l2_size_bytes, no l1_size_bytes
            ("conv2d_relu.nem", 66, "E901"): 1,  # tW (i) vs tW (i+1)
            ("conv2d_relu.nem", 73, "E901"): 1,  # tW (i) vs tC (i+1) reading W_l1
            ("conv2d_relu.nem", 73, "E708"): 1,  # int8 conv2d without quant descriptors
            ("conv2d_relu.nem", 73, "E710"): 1,  # 14x14 declared, 16x16 derived
        }
    ),
    "gemm_bias_relu.nem": Counter(
        {
            ("gemm_bias_relu.nem", 13, "W402"): 1,
            ("npm_lite.cfg", 7, "E407"): 2,
            ("gemm_bias_relu.nem", 68, "E901"): 1,  # tB (i) vs tB (i+1)
            ("gemm_bias_relu.nem", 76, "E901"): 1,  # tB (i) vs tG (i+1) reading B_l1
        }
    ),
    "npm_lite.cfg": Counter(
        {
            ("npm_lite.cfg", 7, "E407"): 4,  # l1/l2 sizes, for npm_lite and npm_lite_fp16
            ("npm_lite.cfg", 26, "W401"): 1,  # gemm.float<f16>.no_bias (a MUST variant)
            ("npm_lite.cfg", 27, "W401"): 1,  # conv2d.float<f16>.with_bias
            ("npm_lite.cfg", 28, "W401"): 1,  # eltwise<f16>.default
        }
    ),
    "npm_lite_.nem": Counter(),
    "spec_device_npm_mid.nem": Counter(),
    "spec_device_npm_pro.nem": Counter(),
}


def _found(result) -> Counter:
    return Counter((Path(d.span.file).name, d.span.line, d.code) for d in result.diagnostics)


def test_every_example_is_listed():
    assert sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".nem", ".cfg")) == sorted(
        EXPECTED
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_checks_with_the_documented_diagnostics(name):
    result = check_file(EXAMPLES / name)
    shown = "\n".join(str(d) for d in result.diagnostics)
    assert _found(result) == EXPECTED[name], shown
    for diag in result.diagnostics:  # file:line:col: severity[CODE]: message [nem.md: ...]
        text = str(diag).splitlines()[0]
        assert text.startswith(f"{diag.span.file}:{diag.span.line}:{diag.span.col}: ")
        assert f"[{diag.code}]: " in text and text.endswith("]")


def test_conv2d_example_shape_message():
    result = check_file(EXAMPLES / "conv2d_relu.nem")
    (e710,) = [d for d in result.diagnostics if d.code == "E710"]
    assert "[1, 14, 14, 128]" in e710.message and "[1, 16, 16, 128]" in e710.message
    (e708,) = [d for d in result.diagnostics if d.code == "E708"]
    assert "conv2d.int8<i8>.with_bias" in e708.message  # the nearest variant is named


def _fixed(text: str, *edits: tuple[str, str]) -> str:
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def test_conv2d_example_corrections_remove_exactly_their_diagnostics(tmp_path):
    # Each upstream mistake, corrected on its own, removes its diagnostics and nothing else.
    src = (EXAMPLES / "conv2d_relu.nem").read_text()
    (tmp_path / "npm_lite.cfg").write_text((EXAMPLES / "npm_lite.cfg").read_text())
    base = check_text(src, file="conv2d_relu.nem", base_dir=str(tmp_path))
    assert _found(base) == EXPECTED["conv2d_relu.nem"]

    shape = _fixed(src, ("const ToH = 14", "const ToH = 16"), ("const ToW = 14", "const ToW = 16"))
    got = _found(check_text(shape, file="conv2d_relu.nem", base_dir=str(tmp_path)))
    assert got == EXPECTED["conv2d_relu.nem"] - Counter({("conv2d_relu.nem", 73, "E710"): 1})

    q = ", quant=per_tensor(scale=0.5, zero_point=0)"
    quant = _fixed(
        src,
        (
            "  let X_pp_i = region(X_L1, (i mod 2)*tileX_bytes, tileX_bytes)\n"
            "               elem=i8, shape=[1,TiH,TiW,Cin], layout=NHWC",
            "  let X_pp_i = region(X_L1, (i mod 2)*tileX_bytes, tileX_bytes)\n"
            "               elem=i8, shape=[1,TiH,TiW,Cin], layout=NHWC" + q,
        ),
        (
            "  let W_l1 = region(W_L1, 0, tileW_bytes)\n"
            "             elem=i8, shape=[Kh,Kw,Cin,Cout], layout=HWIO",
            "  let W_l1 = region(W_L1, 0, tileW_bytes)\n"
            "             elem=i8, shape=[Kh,Kw,Cin,Cout], layout=HWIO" + q,
        ),
    )
    got = _found(check_text(quant, file="conv2d_relu.nem", base_dir=str(tmp_path)))
    assert got == EXPECTED["conv2d_relu.nem"] - Counter({("conv2d_relu.nem", 73, "E708"): 1})

    (tmp_path / "npm_lite.cfg").write_text(
        _fixed(
            (EXAMPLES / "npm_lite.cfg").read_text(),
            ("num_engines = 1\n", "num_engines = 1\n        l2_size_bytes = 4194304\n"),
            ("DMA  = 2\n", "DMA  = 2\n            l1_size_bytes = 1048576\n"),
        )
    )
    got = _found(check_text(src, file="conv2d_relu.nem", base_dir=str(tmp_path)))
    assert got == EXPECTED["conv2d_relu.nem"] - Counter({("npm_lite.cfg", 7, "E407"): 2})


def test_layout_rule_on_the_examples():
    # Statements span lines (nem-notes.md); the parser must still find each one. The loop
    # body of conv2d_relu.nem holds, in order: six lets, two transfers, a wait, conv2d,
    # relu, store (read off the file).
    doc = parse((EXAMPLES / "conv2d_relu.nem").read_text(), "conv2d_relu.nem")
    (loop,) = [s for s in doc.body if isinstance(s, Loop)]
    kinds = [type(s).__name__ for s in loop.body]
    assert kinds == ["RegionDecl"] * 6 + ["Transfer", "Transfer", "Wait", "Compute", "Compute",
                                          "Transfer"]
    lets = [s for s in loop.body if isinstance(s, RegionDecl)]
    assert all(s.let and s.value.type is not None for s in lets)
    assert [d.name for d in lets[1].decos] == ["materialized"]  # Y_tile_i, a line further down
    conv = loop.body[9]
    assert isinstance(conv, Compute) and conv.opcode == "conv2d"
    assert [o.ref for o in conv.ins] == ["X_pp_i", "W_l1", "B_l2"]
    assert conv.deps == ("tX", "tW")
    assert [k for k, _ in conv.attrs] == ["pads", "strides", "dilations", "groups", "accum_type"]
    relu = loop.body[10]
    assert [d.name for d in relu.outs[0].decos] == ["materialized"] and relu.deps == ("tC",)
    tw = loop.body[7]
    assert isinstance(tw, Transfer) and tw.src.ref.type.elem == "i8"
    assert isinstance(loop.body[8], Wait) and loop.body[8].tokens == ("tX", "tW")


def _sources():
    out = [(p.name, p.read_text()) for p in sorted(EXAMPLES.iterdir()) if p.name in EXPECTED]
    out.append(("npm_baseline_1.0.nem", BASELINE.read_text("utf-8")))
    return out


@pytest.mark.parametrize("name,text", _sources(), ids=[n for n, _ in _sources()])
def test_format_round_trip(name, text):
    doc = parse(text, name)
    out = format_document(doc)
    again = parse(out, name)
    assert again == doc, out
    assert format_document(again) == out
    # Comments survive formatting.
    assert sorted(c.text.strip() for c in again.comments) == sorted(
        c.text.strip() for c in doc.comments
    )


def test_baseline_checks_clean():
    result = check_text(BASELINE.read_text("utf-8"), file="npm_baseline_1.0.nem")
    assert result.diagnostics == []
    doc = result.workspace.doc
    assert not doc.is_program
    assert [d.name for d in doc.devices] == ["npm_baseline_1_0"]
    # The thirteen families of the spec's Appendix.
    assert sorted(f.name for f in doc.families) == sorted(
        [
            "conv2d.float",
            "conv2d.int8",
            "conv2d.int4",
            "gemm.float",
            "gemm.int8",
            "gemm.int4",
            "eltwise",
            "view",
            "norm",
            "softmax",
            "cast",
            "quantize",
            "dequantize",
        ]
    )
