"""NEM spec points the checker got wrong (issue 24), one regression test each.

* layernorm / rmsnorm: ``scale`` and ``bias`` have shape ``[dim[axis]]`` (the registry's
  constraint), not a shape that broadcasts to X.
* A statement that does not parse gives one diagnostic: the names it would have declared
  are not reported again as undefined where they are used.
"""

import pytest
from nem_corpus import CORPUS

from nem.checker import check_text

PRELUDE = (
    'device "test_device.nem"\nprogram t:\n'
    "buffer A1 : L1 (size=4096)\nbuffer B1 : L1 (size=4096)\nbuffer Y1 : L1 (size=4096)\n"
)  # lines 1-5; the task below is on line 10


def _check(x_shape, axis, scale_shape, bias_shape=None, opcode="layernorm"):
    def layout(shape):
        return "C" if len(shape) == 1 else "MN"

    s = (f"let S = region(B1, 0, 1024) elem=f16, shape={list(scale_shape)}, "
         f"layout={layout(scale_shape)}\n")
    b = (f"let Bb = region(B1, 1024, 1024) elem=f16, shape={list(bias_shape)}, "
         f"layout={layout(bias_shape)}\n" if bias_shape else "\n")
    source = (
        PRELUDE
        + f"let X = region(A1, 0, 2048) elem=f16, shape={list(x_shape)}, layout=MN\n"
        + s + b
        + f"let Y = region(Y1, 0, 2048) elem=f16, shape={list(x_shape)}, layout=MN\n"
        + f"t = {opcode}.async in X, S{', Bb' if bias_shape else ''} out Y "
        f"axis={axis} epsilon=0.00001\n"
    )
    return check_text(source, file="t.nem", base_dir=str(CORPUS)).diagnostics


@pytest.mark.parametrize("opcode", ["layernorm", "rmsnorm"])
def test_norm_scale_has_shape_dim_axis(opcode):
    bias = (4,) if opcode == "layernorm" else None
    # axis 0 of [4, 64]: scale [4]; it does not broadcast to X (the old rule refused it).
    assert _check((4, 64), 0, (4,), bias, opcode) == []
    assert _check((4, 64), -2, (4,), bias, opcode) == []
    bias = (64,) if opcode == "layernorm" else None
    assert _check((4, 64), 1, (64,), bias, opcode) == []


def test_norm_scale_of_another_shape_is_refused_at_the_task():
    # [4, 64] broadcasts to X but is not [dim[axis]].
    (d,) = _check((4, 64), 1, (4, 64))
    assert d.code == "E710"
    assert str(d).startswith(
        "t.nem:10:1: error[E710]: layernorm: scale has shape [4, 64], it must be "
        "[dim[axis]] = [64] (axis 1 of X [4, 64])"
    )
    (d,) = _check((4, 64), 0, (4,), (64,))
    assert (d.span.line, d.span.col) == (10, 1)
    assert "bias has shape [64], it must be [dim[axis]] = [4] (axis 0 of X [4, 64])" in d.message


@pytest.mark.parametrize("source,code,line", [
    ("const A = (1\nconst B = A + 1\nconst C = B * 2\n", "E201", 2),
    ("const A 3\nconst B = A\n", "E201", 1),
    ("const A = 1 ++ 2\nconst B = A\nbuffer X : L2 (size=B)\n", "E201", 1),
    ("const A = 1 +\nconst B = A + 1\n", "E201", 2),
])
def test_a_const_that_does_not_parse_is_reported_once(source, code, line):
    result = check_text(source, file="t.nem", base_dir=str(CORPUS))
    assert [(d.code, d.span.line) for d in result.diagnostics] == [(code, line)]


def test_undefined_names_before_a_parse_error_are_still_reported():
    # The suppression covers uses before the failed statement only (the parser reports
    # the unclosed parenthesis at the end of the file, line 3).
    source = "const B = A + 1\nconst A = (1\n"
    result = check_text(source, file="t.nem", base_dir=str(CORPUS))
    assert [(d.code, d.span.line) for d in result.diagnostics] == [("E502", 1), ("E201", 3)]
