"""The float runtime's kernels (``nac.runtime``) against torch's own functional ops.

Issue 25's mutation run of ``nac.runtime`` left most kernel mutants alive: the model-level
tests run each kernel with one set of arguments (square kernels, equal strides, no
dilation), so a swapped ``[0]``/``[1]``, a dropped bias or a wrong default went unseen.
Here every kernel is called directly over parameter grids chosen to tell such changes
apart (non-square inputs, different values per axis, with and without the optional
operands) and compared with ``torch.nn.functional`` (an independent implementation of the
same ATen semantics). NHWC convolution is compared with ``F.conv2d`` with the layout
transposes and the asymmetric padding done here; ``mind.slice`` and ``mind.gather`` with
numpy's slicing and ``take`` semantics, as the runtime documents them, written out by hand.

The error paths are checked by their full message (a ``NacRuntimeError`` naming the op
and the argument), and the size cap (:data:`nac.runtime.MAX_ELEMENTS`) at its boundary:
with the cap patched down to the exact size of a tensor, that tensor is accepted and one
element less refuses it, naming the shape.

``_pool1d`` builds its kernels when the module is imported; the tests call the factory
themselves, so what they check is the factory's current code.
"""

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nac import runtime  # noqa: E402
from nac.runtime import KERNELS, NacRuntimeError  # noqa: E402

RNG = np.random.default_rng(25)


def _rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _t(a):
    return None if a is None else torch.from_numpy(np.ascontiguousarray(a))


def _close(actual, expected, rtol=1e-5, atol=1e-5):
    """*actual* (numpy) equals *expected* (torch) in shape and float32 values."""
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == np.float32, actual.dtype
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def _refuses(fn, message):
    """*fn* raises NacRuntimeError whose message is exactly *message*."""
    with pytest.raises(NacRuntimeError) as info:
        fn()
    assert str(info.value) == message


def _cap_boundary(monkeypatch, fn, elements, what, shape):
    """*fn* passes with the cap at *elements* and is refused (naming *what*) one below."""
    monkeypatch.setattr(runtime, "MAX_ELEMENTS", elements)
    fn()
    monkeypatch.setattr(runtime, "MAX_ELEMENTS", elements - 1)
    _refuses(fn, f"{what} of shape {list(shape)} has {elements} elements, over the runtime's "
                 f"cap of {elements - 1}")


# --- conv2d (NCHW, OIHW) ------------------------------------------------------------------

CONV2D = [  # x shape, weight shape, stride, padding, dilation, groups, bias
    ((1, 3, 7, 6), (4, 3, 3, 2), (1, 1), (0, 0), (1, 1), 1, True),
    ((2, 3, 9, 8), (5, 3, 2, 3), (2, 1), (1, 0), (1, 2), 1, False),
    ((1, 4, 8, 9), (6, 2, 3, 3), (1, 2), (0, 2), (2, 1), 2, True),
    ((2, 6, 7, 7), (3, 2, 2, 2), (3, 2), (2, 1), (1, 1), 3, True),  # one filter per group
    ((1, 4, 6, 5), (4, 1, 3, 2), (1, 1), (1, 1), (2, 2), 4, False),  # depthwise
    ((1, 2, 5, 5), (2, 2, 5, 5), (1, 1), (0, 0), (1, 1), 1, True),  # window = input
]


@pytest.mark.parametrize("xs, ws, stride, padding, dilation, groups, bias", CONV2D)
def test_conv2d_matches_torch(xs, ws, stride, padding, dilation, groups, bias):
    x, w = _rand(*xs), _rand(*ws)
    b = _rand(ws[0]) if bias else None
    out = KERNELS["aten.conv2d.default"](x, w, b, list(stride), list(padding), list(dilation),
                                         groups)
    ref = F.conv2d(_t(x), _t(w), _t(b), stride, padding, dilation, groups)
    _close(out, ref, atol=1e-4)


def test_conv2d_defaults_and_scalar_arguments():
    x, w = _rand(2, 2, 6, 5), _rand(3, 2, 2, 3)
    _close(runtime._conv2d(x, w), F.conv2d(_t(x), _t(w)), atol=1e-4)
    # One integer stands for both axes (ATen's int[2] of length 1).
    _close(runtime._conv2d(x, w, None, 2, [1], (2,)),
           F.conv2d(_t(x), _t(w), None, 2, 1, 2), atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 2), cg=st.integers(1, 3), fg=st.integers(1, 3), groups=st.integers(1, 3),
       h=st.integers(3, 9), w=st.integers(3, 9), kh=st.integers(1, 3), kw=st.integers(1, 3),
       sh=st.integers(1, 3), sw=st.integers(1, 3), ph=st.integers(0, 2), pw=st.integers(0, 2),
       dh=st.integers(1, 2), dw=st.integers(1, 2), bias=st.booleans())
def test_conv2d_property(n, cg, fg, groups, h, w, kh, kw, sh, sw, ph, pw, dh, dw, bias):
    if h + 2 * ph < dh * (kh - 1) + 1 or w + 2 * pw < dw * (kw - 1) + 1:
        return  # the window does not fit: refused, checked in test_conv2d_errors
    x, wt = _rand(n, cg * groups, h, w), _rand(fg * groups, cg, kh, kw)
    b = _rand(fg * groups) if bias else None
    out = runtime._conv2d(x, wt, b, (sh, sw), (ph, pw), (dh, dw), groups)
    _close(out, F.conv2d(_t(x), _t(wt), _t(b), (sh, sw), (ph, pw), (dh, dw), groups), atol=1e-4)


def test_conv2d_errors():
    x, w = _rand(1, 4, 5, 5), _rand(4, 2, 3, 3)
    conv = runtime._conv2d
    _refuses(lambda: conv(x, w, groups=0),
             "conv2d groups must be a positive divisor of the 4 filters, got 0")
    _refuses(lambda: conv(x, w, groups=3),
             "conv2d groups must be a positive divisor of the 4 filters, got 3")
    _refuses(lambda: conv(x, w, groups=2.0),
             "conv2d groups must be a positive divisor of the 4 filters, got 2.0")
    _refuses(lambda: conv(x, w, groups=1), "conv2d: input has 4 channels, weights expect 2 x 1")
    _refuses(lambda: conv(x[0], w, groups=2), "conv2d input must have rank 4, got shape [4, 5, 5]")
    _refuses(lambda: conv(x, w[0], groups=2),
             "conv2d weight must have rank 4, got shape [2, 3, 3]")
    _refuses(lambda: conv(x, w, None, (1, 0), groups=2),
             "conv2d stride must be at least 1, got [1, 0]")
    _refuses(lambda: conv(x, w, None, 1, (0, -1), groups=2),
             "conv2d padding must be at least 0, got [0, -1]")
    _refuses(lambda: conv(x, w, None, 1, 0, (1, 0), groups=2),
             "conv2d dilation must be at least 1, got [1, 0]")
    _refuses(lambda: conv(x, w, None, (1, 1, 1), groups=2),
             "conv2d stride must be one or two integers, got [1, 1, 1]")
    _refuses(lambda: conv(x, w, None, (True, 1), groups=2),
             "conv2d stride must be one or two integers, got [True, 1]")
    _refuses(lambda: conv(x, w, None, (1.0,), groups=2),
             "conv2d stride must be one or two integers, got [1.0]")
    _refuses(lambda: conv(x, w, None, 1, 0, (3, 1), groups=2),
             "conv2d: window 3 (dilation 3) does not fit input size 5 with padding 0")
    _refuses(lambda: conv(x, w, None, 1, 0, (1, 3), groups=2),
             "conv2d: window 3 (dilation 3) does not fit input size 5 with padding 0")


def test_conv2d_cap(monkeypatch):
    x, w = _rand(1, 2, 4, 3), _rand(3, 2, 2, 2)
    # Padding (1, 2): padded input [1, 2, 6, 7] = 84 elements, result [1, 3, 5, 6] = 90;
    # with one 3 x 3 filter the result is [1, 1, 4, 5] = 20 and the padded input the larger.
    _cap_boundary(monkeypatch, lambda: runtime._conv2d(x, w, None, 1, (1, 2)), 90,
                  "conv2d result", (1, 3, 5, 6))
    w1 = _rand(1, 2, 3, 3)
    _cap_boundary(monkeypatch, lambda: runtime._conv2d(x, w1, None, 1, (1, 2)), 84,
                  "conv2d padded input", (1, 2, 6, 7))


# --- mind.conv2d_nhwc (NHWC input, HWIO filter, pads top/bottom/left/right) ---------------

def _nhwc_reference(x, w, stride, pads):
    top, bottom, left, right = pads
    xt = F.pad(_t(x).permute(0, 3, 1, 2), (left, right, top, bottom))
    return F.conv2d(xt, _t(w).permute(3, 2, 0, 1), None, stride).permute(0, 2, 3, 1)


@pytest.mark.parametrize("xs, ws, stride, pads", [
    ((1, 6, 5, 3), (3, 2, 3, 4), (1, 1), (0, 0, 0, 0)),
    ((2, 7, 8, 2), (2, 3, 2, 3), (2, 1), (1, 0, 2, 1)),
    ((1, 5, 9, 4), (3, 3, 4, 2), (1, 3), (0, 2, 1, 0)),
    ((1, 4, 4, 1), (4, 4, 1, 1), (2, 2), (0, 0, 0, 0)),
    ((2, 3, 3, 2), (1, 1, 2, 5), [2], (1, 1, 1, 1)),
])
def test_conv2d_nhwc_matches_torch(xs, ws, stride, pads):
    x, w = _rand(*xs), _rand(*ws)
    out = KERNELS["mind.conv2d_nhwc"](x, w, stride, pads)
    pair = tuple(stride) * 2 if len(stride) == 1 else tuple(stride)
    _close(out, _nhwc_reference(x, w, pair, pads), atol=1e-4)


@settings(max_examples=30, deadline=None)
@given(h=st.integers(2, 8), w=st.integers(2, 8), c=st.integers(1, 3), f=st.integers(1, 3),
       kh=st.integers(1, 3), kw=st.integers(1, 3), sh=st.integers(1, 3), sw=st.integers(1, 3),
       pads=st.tuples(*[st.integers(0, 2)] * 4))
def test_conv2d_nhwc_property(h, w, c, f, kh, kw, sh, sw, pads):
    if h + pads[0] + pads[1] < kh or w + pads[2] + pads[3] < kw:
        return
    x, wt = _rand(2, h, w, c), _rand(kh, kw, c, f)
    _close(runtime._conv2d_nhwc(x, wt, (sh, sw), pads), _nhwc_reference(x, wt, (sh, sw), pads),
           atol=1e-4)


def test_conv2d_nhwc_errors(monkeypatch):
    x, w = _rand(1, 4, 4, 2), _rand(2, 2, 2, 3)
    conv = runtime._conv2d_nhwc
    _refuses(lambda: conv(x, w, (1, 1), (0, 0, 0)),
             "conv2d_nhwc pads must be four integers >= 0, got [0, 0, 0]")
    _refuses(lambda: conv(x, w, (1, 1), (0, 0, 0, 0, 0)),
             "conv2d_nhwc pads must be four integers >= 0, got [0, 0, 0, 0, 0]")
    _refuses(lambda: conv(x, w, (1, 1), (0, -1, 0, 0)),
             "conv2d_nhwc pads must be four integers >= 0, got [0, -1, 0, 0]")
    _refuses(lambda: conv(x, w, (1, 1), (0, 0, 1.0, 0)),
             "conv2d_nhwc pads must be four integers >= 0, got [0, 0, 1.0, 0]")
    _refuses(lambda: conv(x, w, (0, 1), (0, 0, 0, 0)),
             "conv2d_nhwc strides must be at least 1, got [0, 1]")
    _refuses(lambda: conv(x[0], w, (1, 1), (0, 0, 0, 0)),
             "conv2d_nhwc input must have rank 4, got shape [4, 4, 2]")
    _refuses(lambda: conv(x, w[0], (1, 1), (0, 0, 0, 0)),
             "conv2d_nhwc filter must have rank 4, got shape [2, 2, 3]")
    _refuses(lambda: conv(x, _rand(2, 2, 3, 3), (1, 1), (0, 0, 0, 0)),
             "conv2d_nhwc: input has 2 channels, the filter 3")
    # Height 4 + 1 + 0 padded, a 6-row filter; then width 4 + 0 + 1, a 6-column filter.
    _refuses(lambda: conv(x, _rand(6, 1, 2, 1), (1, 1), (1, 0, 0, 1)),
             "conv2d_nhwc: window 6 (dilation 1) does not fit input size 5 with padding 0")
    _refuses(lambda: conv(x, _rand(1, 6, 2, 1), (1, 1), (1, 0, 0, 1)),
             "conv2d_nhwc: window 6 (dilation 1) does not fit input size 5 with padding 0")
    # Padded input [1, 7, 5, 2] = 70 elements; result [1, 6, 4, 1] = 24.
    small = _rand(2, 2, 2, 1)
    _cap_boundary(monkeypatch, lambda: conv(x, small, (1, 1), (2, 1, 0, 1)), 70,
                  "conv2d_nhwc padded input", (1, 7, 5, 2))
    # Result [1, 7, 5, 8] = 280 elements; padded input [1, 7, 5, 2] = 70.
    wide = _rand(1, 1, 2, 8)
    _cap_boundary(monkeypatch, lambda: conv(x, wide, (1, 1), (2, 1, 0, 1)), 280,
                  "conv2d_nhwc result", (1, 7, 5, 8))


def test_conv2d_nhwc_keeps_the_operand_type():
    x, w = _rand(1, 3, 3, 2), _rand(2, 2, 2, 1)
    assert runtime._conv2d_nhwc(x, w, 1, (0, 0, 0, 0)).dtype == np.float32
    # The result has the promoted type of both operands, whichever of them is wider.
    for xt, wt in [(np.float64, np.float64), (np.float32, np.float64), (np.float64, np.float32)]:
        out = runtime._conv2d_nhwc(x.astype(xt), w.astype(wt), 1, (0, 0, 0, 0))
        assert out.dtype == np.float64


# --- 2-D and 1-D pooling ------------------------------------------------------------------

MAX_POOL2D = [  # input shape, kernel, stride, padding, dilation
    ((1, 2, 7, 6), (2, 2), (), (0, 0), (1, 1)),
    ((2, 3, 9, 8), (3, 2), (2, 1), (1, 0), (1, 2)),
    ((1, 2, 8, 9), (2, 3), (1, 2), (0, 1), (2, 1)),
    ((1, 1, 6, 7), (3, 3), (3, 2), (1, 1), (2, 2)),
    ((1, 2, 5, 5), (2, 2), (1, 1), (1, 1), (1, 1)),
]


@pytest.mark.parametrize("xs, kernel, stride, padding, dilation", MAX_POOL2D)
def test_max_pool2d_matches_torch(xs, kernel, stride, padding, dilation):
    x = _rand(*xs)
    out = KERNELS["aten.max_pool2d.default"](x, list(kernel), list(stride), list(padding),
                                             list(dilation), False)
    ref = F.max_pool2d(_t(x), kernel, stride or None, padding, dilation)
    _close(out, ref, rtol=0, atol=0)


AVG_POOL2D = [  # input shape, kernel, stride, padding, count_include_pad, divisor_override
    ((1, 2, 7, 6), (2, 2), (), (0, 0), True, None),
    ((2, 3, 9, 8), (3, 2), (2, 1), (1, 0), True, None),
    ((1, 2, 8, 9), (2, 3), (1, 2), (0, 1), True, None),
    ((1, 1, 6, 7), (3, 3), (3, 2), (1, 1), True, None),
    ((1, 2, 7, 6), (2, 3), (1, 2), (0, 0), False, None),
    ((1, 2, 7, 6), (3, 2), (2, 1), (1, 1), True, 5),
    ((1, 2, 6, 6), (2, 2), (), (0, 0), True, -3),
    ((1, 2, 6, 6), (2, 2), (), (0, 0), True, 1),
]


@pytest.mark.parametrize("xs, kernel, stride, padding, incl, divisor", AVG_POOL2D)
def test_avg_pool2d_matches_torch(xs, kernel, stride, padding, incl, divisor):
    # The inputs are offset from zero so that padding with zeros (or with anything else)
    # shows in the averages.
    x = _rand(*xs) + np.float32(2)
    out = KERNELS["aten.avg_pool2d.default"](x, list(kernel), list(stride), list(padding),
                                             False, incl, divisor)
    ref = F.avg_pool2d(_t(x), kernel, stride or None, padding, False, incl, divisor)
    _close(out, ref)


def test_avg_pool2d_computes_in_float32():
    # Average pooling sums in float32 and returns float32 whatever the operand's float type.
    x = _rand(1, 1, 4, 4).astype(np.float64)
    ref = F.avg_pool2d(_t(x.astype(np.float32)), 2)
    _close(runtime._pool2d(x, 2, None, 0, "avg"), ref)
    _close(runtime._pool2d(x, 2, None, 0, "avg", divisor=4), ref)


def test_pool2d_defaults():
    x = _rand(1, 2, 6, 4) + np.float32(1)
    _close(KERNELS["aten.max_pool2d.default"](x, [2]), F.max_pool2d(_t(x), 2), rtol=0, atol=0)
    _close(KERNELS["aten.avg_pool2d.default"](x, [3, 2]), F.avg_pool2d(_t(x), (3, 2)))
    _close(runtime._pool2d(x, 2, None, 1, "max"), F.max_pool2d(_t(x), 2, 2, 1), rtol=0, atol=0)
    _close(runtime._pool2d(x, (2, 1), (1, 1), 0, "avg"), F.avg_pool2d(_t(x), (2, 1), 1))


@settings(max_examples=40, deadline=None)
@given(h=st.integers(2, 9), w=st.integers(2, 9), kh=st.integers(1, 3), kw=st.integers(1, 3),
       sh=st.integers(1, 3), sw=st.integers(1, 3), ph=st.integers(0, 1), pw=st.integers(0, 1),
       dh=st.integers(1, 2), dw=st.integers(1, 2), reduce=st.sampled_from(["max", "avg"]))
def test_pool2d_property(h, w, kh, kw, sh, sw, ph, pw, dh, dw, reduce):
    ph, pw = min(ph, kh // 2), min(pw, kw // 2)  # torch: padding at most half the kernel
    if reduce == "avg":
        dh = dw = 1
    if h + 2 * ph < dh * (kh - 1) + 1 or w + 2 * pw < dw * (kw - 1) + 1:
        return
    x = _rand(2, 2, h, w) + np.float32(1)
    out = runtime._pool2d(x, (kh, kw), (sh, sw), (ph, pw), reduce, (dh, dw))
    if reduce == "max":
        ref = F.max_pool2d(_t(x), (kh, kw), (sh, sw), (ph, pw), (dh, dw))
    else:
        ref = F.avg_pool2d(_t(x), (kh, kw), (sh, sw), (ph, pw))
    _close(out, ref)


def test_pool2d_errors(monkeypatch):
    x = _rand(1, 2, 5, 5)
    mx, avg = KERNELS["aten.max_pool2d.default"], KERNELS["aten.avg_pool2d.default"]
    _refuses(lambda: mx(x, [2], [], [0], [1], True),
             "pooling with ceil_mode=True is not supported")
    _refuses(lambda: avg(x, [2], [], [0], True), "pooling with ceil_mode=True is not supported")
    _refuses(lambda: avg(x, [3], [1], [0, 1], False, False),
             "avg_pool2d with count_include_pad=False and padding is not supported")
    _refuses(lambda: avg(x, [2], [], [0], False, True, 0),
             "avg_pool2d divisor_override must be a non-zero integer, got 0")
    _refuses(lambda: avg(x, [2], [], [0], False, True, 1.5),
             "avg_pool2d divisor_override must be a non-zero integer, got 1.5")
    _refuses(lambda: avg(x, [2], [], [0], False, True, True),
             "avg_pool2d divisor_override must be a non-zero integer, got True")
    _refuses(lambda: mx(x, [0, 2]), "max_pool2d kernel_size must be at least 1, got [0, 2]")
    _refuses(lambda: mx(x, [2], [2, 0]), "max_pool2d stride must be at least 1, got [2, 0]")
    _refuses(lambda: avg(x, [2], [], [-1]), "avg_pool2d padding must be at least 0, got [-1]")
    _refuses(lambda: mx(x, [2], [], [0], [0]), "max_pool2d dilation must be at least 1, got [0]")
    _refuses(lambda: mx(x[0], [2]), "max_pool2d input must have rank 4, got shape [2, 5, 5]")
    _refuses(lambda: avg(x[..., None], [2]),
             "avg_pool2d input must have rank 4, got shape [1, 2, 5, 5, 1]")
    _refuses(lambda: mx(x, [6, 1]),
             "max_pool2d: window 6 (dilation 1) does not fit input size 5 with padding 0")
    _refuses(lambda: mx(x, [1, 3], [1], [0], [1, 3]),
             "max_pool2d: window 3 (dilation 3) does not fit input size 5 with padding 0")
    _refuses(lambda: avg(_rand(1, 1, 2, 9), [5, 1], [1], [1, 0]),
             "avg_pool2d: window 5 (dilation 1) does not fit input size 2 with padding 1")
    # Padded input [1, 2, 7, 9] = 126 elements; windows 1 x 1 x [1, 2, 7, 9] as well, so the
    # padded input is checked first and a 2 x 1 window (a [2, 1, 2, 6, 9] stack, 216)
    # checks the windows.
    y = _rand(1, 2, 5, 7)
    _cap_boundary(monkeypatch, lambda: runtime._pool2d(y, (1, 1), (1, 1), (1, 1), "max"), 126,
                  "pool2d padded input", (1, 2, 7, 9))
    _cap_boundary(monkeypatch, lambda: runtime._pool2d(y, (1, 1), (1, 1), (0, 1), "max"), 90,
                  "pool2d padded input", (1, 2, 5, 9))
    _cap_boundary(monkeypatch, lambda: runtime._pool2d(y, (1, 1), (1, 1), (1, 0), "max"), 98,
                  "pool2d padded input", (1, 2, 7, 7))
    _cap_boundary(monkeypatch, lambda: runtime._pool2d(y, (2, 1), (1, 1), (1, 1), "avg"), 216,
                  "pool2d windows", (2, 1, 2, 6, 9))
    _cap_boundary(monkeypatch, lambda: runtime._pool2d(y, (1, 3), (1, 1), (0, 1), "max"), 210,
                  "pool2d windows", (3, 1, 2, 5, 7))


def test_pool1d_matches_torch():
    mx, avg = runtime._pool1d("max"), runtime._pool1d("avg")
    x = _rand(2, 3, 11) + np.float32(2)
    t = _t(x)
    _close(mx(x, [3]), F.max_pool1d(t, 3), rtol=0, atol=0)
    _close(mx(x, [3], [2]), F.max_pool1d(t, 3, 2), rtol=0, atol=0)
    _close(mx(x, [3], [2], [1]), F.max_pool1d(t, 3, 2, 1), rtol=0, atol=0)
    _close(mx(x, [3], [1], [1], [2]), F.max_pool1d(t, 3, 1, 1, 2), rtol=0, atol=0)
    _close(mx(x, [2], [], [1], [3], False), F.max_pool1d(t, 2, None, 1, 3), rtol=0, atol=0)
    _close(avg(x, [3]), F.avg_pool1d(t, 3))
    _close(avg(x, [2], [3]), F.avg_pool1d(t, 2, 3))
    _close(avg(x, [3], [2], [1]), F.avg_pool1d(t, 3, 2, 1))
    _close(avg(x, [3], [1], [1], False), F.avg_pool1d(t, 3, 1, 1, False))
    _close(avg(x, [4], [3], [0], False, False), F.avg_pool1d(t, 4, 3, 0, False, False))
    _close(avg(x, [3], [2], [1], False, True), F.avg_pool1d(t, 3, 2, 1, False, True))
    # (C, L) input without a batch axis: every option reaches the kernel.
    _close(mx(x[0], [2], [1]), F.max_pool1d(t[0], 2, 1), rtol=0, atol=0)
    _close(mx(x[0], [3], [2], [1], [2]), F.max_pool1d(t[0], 3, 2, 1, 2), rtol=0, atol=0)
    _close(avg(x[0], [3], [2], [1], False, True), F.avg_pool1d(t[0], 3, 2, 1, False, True))
    _refuses(lambda: avg(x[0], [3], [2], [1], False, False),
             "avg_pool2d with count_include_pad=False and padding is not supported")


def test_pool1d_options_reach_the_2d_kernel():
    mx, avg = runtime._pool1d("max"), runtime._pool1d("avg")
    x = _rand(1, 2, 9)
    _refuses(lambda: mx(x, [2], [2], [0], [1], True),
             "pooling with ceil_mode=True is not supported")
    _refuses(lambda: avg(x, [2], [2], [0], True), "pooling with ceil_mode=True is not supported")
    _refuses(lambda: avg(x, [3], [1], [1], False, False),
             "avg_pool2d with count_include_pad=False and padding is not supported")
    _refuses(lambda: mx(x, [4], [1], [0], [3]),
             "max_pool2d: window 4 (dilation 3) does not fit input size 9 with padding 0")
    _refuses(lambda: mx(x[0, 0], [2]), "max_pool2d input must have rank 4, got shape [1, 9]")
    _refuses(lambda: avg(x, [0]), "avg_pool2d kernel_size must be at least 1, got [1, 0]")
    # The 1-D kernels as the KERNELS table holds them.
    _close(KERNELS["aten.max_pool1d.default"](x, [3], [2], [1], [1], False),
           F.max_pool1d(_t(x), 3, 2, 1), rtol=0, atol=0)
    _close(KERNELS["aten.avg_pool1d.default"](x, [3], [2], [1], False, True),
           F.avg_pool1d(_t(x), 3, 2, 1))


@pytest.mark.parametrize("shape, size", [
    ((2, 3, 8, 6), (4, 3)), ((2, 3, 8, 6), (2, 6)), ((3, 6, 4), (3, 2)), ((2, 3, 6, 6), 3),
    ((2, 3, 6, 6), [2]), ((6, 4), (2, 1)),
])
def test_adaptive_avg_pool2d_matches_torch(shape, size):
    x = _rand(*shape)
    t = _t(x)[None] if x.ndim == 2 else _t(x)
    ref = F.adaptive_avg_pool2d(t, size * 2 if isinstance(size, list) else size)
    out = KERNELS["aten.adaptive_avg_pool2d.default"](x, size)
    _close(out, ref[0] if x.ndim == 2 else ref)


def test_adaptive_avg_pool_errors_and_1d():
    pool = runtime._adaptive_avg_pool2d
    x = _rand(1, 2, 6, 4)
    _refuses(lambda: pool(_rand(5), 1),
             "adaptive_avg_pool2d input must have rank >= 2, got shape [5]")
    _refuses(lambda: pool(x, (4, 2)),
             "adaptive_avg_pool2d from 6x4 to 4x2: only exact divisions are supported")
    _refuses(lambda: pool(x, (3, 3)),
             "adaptive_avg_pool2d from 6x4 to 3x3: only exact divisions are supported")
    _refuses(lambda: pool(x, (3, 0)),
             "adaptive_avg_pool2d output_size must be at least 1, got [3, 0]")
    y = _rand(2, 3, 12)
    _close(KERNELS["aten.adaptive_avg_pool1d.default"](y, [4]), F.adaptive_avg_pool1d(_t(y), 4))


# --- matmul and attention -----------------------------------------------------------------

@pytest.mark.parametrize("a_shape, b_shape", [
    ((4,), (4,)), ((4,), (4, 3)), ((2, 4), (4,)), ((3, 2, 4), (4,)), ((4,), (2, 4, 3)),
    ((2, 4), (4, 3)), ((5, 2, 4), (5, 4, 3)), ((2, 1, 3, 4), (5, 4, 2)),
    ((3, 2, 4), (5, 1, 4, 6)), ((1, 3, 4), (2, 1, 4, 2)),
])
def test_matmul_matches_torch(a_shape, b_shape):
    a, b = _rand(*a_shape), _rand(*b_shape)
    out = np.asarray(KERNELS["aten.matmul.default"](a, b), dtype=np.float32)
    _close(out, torch.matmul(_t(a), _t(b)))


def test_matmul_errors_and_cap(monkeypatch):
    mm = runtime._matmul
    _refuses(lambda: mm(np.float32(2), _rand(3)), "matmul of a scalar: shapes [] and [3]")
    _refuses(lambda: mm(_rand(3), np.float32(2)), "matmul of a scalar: shapes [3] and []")
    _refuses(lambda: mm(_rand(2, 3), _rand(4, 2)), "inner dimensions differ: [2, 3] @ [4, 2]")
    _refuses(lambda: mm(_rand(3), _rand(4)), "inner dimensions differ: [3] @ [4]")
    # b batched: its K is the second-to-last axis (3), not the batch (4).
    out = mm(_rand(2, 3), _rand(4, 3, 2))
    assert out.shape == (4, 2, 2)
    # The cap counts the broadcast batch and both matrix dimensions ...
    a, b = _rand(3, 2, 4), _rand(5, 1, 4, 6)
    _cap_boundary(monkeypatch, lambda: mm(a, b), 180, "matmul result", (5, 3, 2, 6))
    # ... and a vector operand as one row or one column.
    _cap_boundary(monkeypatch, lambda: mm(_rand(4), _rand(2, 4, 5)), 10, "matmul result",
                  (2, 1, 5))
    _cap_boundary(monkeypatch, lambda: mm(_rand(2, 3, 4), _rand(4)), 6, "matmul result",
                  (2, 3, 1))
    _cap_boundary(monkeypatch, lambda: mm(_rand(3, 4), _rand(4, 5)), 15, "matmul result",
                  (3, 5))


def test_linear_and_addmm():
    x, w, b = _rand(2, 3, 4), _rand(5, 4), _rand(5)
    _close(KERNELS["aten.linear.default"](x, w, b), F.linear(_t(x), _t(w), _t(b)))
    _close(KERNELS["aten.linear.default"](x, w), F.linear(_t(x), _t(w)))
    c, a, m = _rand(2, 5), _rand(2, 4), _rand(4, 5)
    _close(KERNELS["aten.addmm.default"](c, a, m, 0.5, 2.0),
           torch.addmm(_t(c), _t(a), _t(m), beta=0.5, alpha=2.0))


def test_broadcasting_wrapper(monkeypatch):
    add = runtime._broadcasting(lambda a, b, alpha=1: a + alpha * b)
    a, b = _rand(3, 1), _rand(1, 4)
    np.testing.assert_array_equal(add(a, b, alpha=2), a + 2 * b)
    # The cap applies to the broadcast result of two or more arrays, not to one array alone.
    _cap_boundary(monkeypatch, lambda: add(a, b), 12, "broadcast result", (3, 4))
    monkeypatch.setattr(runtime, "MAX_ELEMENTS", 2)
    np.testing.assert_array_equal(add(a, 1.0), a + 1)
    np.testing.assert_array_equal(runtime._broadcasting(np.negative)(a), -a)


def test_cap_is_inclusive(monkeypatch):
    monkeypatch.setattr(runtime, "MAX_ELEMENTS", 6)
    runtime._cap((2, 3), "x")
    _refuses(lambda: runtime._cap((7,), "thing"),
             "thing of shape [7] has 7 elements, over the runtime's cap of 6")


def _sdpa_ref(q, k, v, mask=None, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(_t(q), _t(k), _t(v), attn_mask=_t(mask),
                                          is_causal=is_causal, scale=scale,
                                          enable_gqa=enable_gqa)


SDPA = [  # q, k, v shapes, mask ("bool"/"float"/None), is_causal, scale, enable_gqa
    ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6), None, False, None, False),
    ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6), "bool", False, None, False),
    ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6), "float", False, 0.3, False),
    ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 6), None, True, None, False),
    ((2, 5, 8), (2, 5, 8), (2, 5, 3), None, True, 1.7, False),
    ((3, 4), (6, 4), (6, 5), "float", False, None, False),
    ((4, 3), (4, 3), (4, 2), None, True, None, False),
    ((2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 6), None, False, None, True),
    ((2, 4, 3, 8), (2, 2, 5, 8), (2, 1, 5, 6), None, False, None, True),  # k, v heads differ
    ((2, 4, 3, 8), (2, 1, 5, 8), (2, 4, 5, 6), "float", False, None, True),
    ((2, 6, 3, 4), (2, 2, 5, 4), (2, 2, 5, 2), "bool", False, 0.5, True),
    ((6, 3, 4), (3, 5, 4), (3, 5, 2), None, True, None, True),
    ((2, 3, 3, 4), (2, 3, 5, 4), (2, 3, 5, 2), None, False, None, True),  # equal heads
    ((2, 3, 1, 1), (2, 3, 5, 1), (2, 3, 5, 2), None, False, None, False),  # head size 1
    ((2, 3, 0, 4), (2, 3, 5, 4), (2, 3, 5, 2), None, False, None, False),  # no queries
]


@pytest.mark.parametrize("qs, ks, vs, mask, causal, scale, gqa", SDPA)
def test_sdpa_matches_torch(qs, ks, vs, mask, causal, scale, gqa):
    q, k, v = _rand(*qs), _rand(*ks), _rand(*vs)
    m = None
    if mask == "bool":  # random, but never a row without any key
        m = RNG.random((qs[-2], ks[-2])) < 0.6
        m[:, 0] = True
    elif mask == "float":
        m = _rand(qs[-2], ks[-2], scale=2.0)
    out = KERNELS["aten.scaled_dot_product_attention.default"](q, k, v, m, 0.0, causal, scale,
                                                               gqa)
    _close(out, _sdpa_ref(q, k, v, m, causal, scale, gqa))


def test_sdpa_errors():
    sdpa = runtime._sdpa
    q = _rand(2, 4, 8)
    _refuses(lambda: sdpa(q, q, q, None, 0.1),
             "scaled_dot_product_attention with dropout is not supported")
    head = ("scaled_dot_product_attention needs q, k, v of rank >= 2 and a non-empty head, "
            "got ")
    _refuses(lambda: sdpa(_rand(8), q, q), head + "[8], [2, 4, 8], [2, 4, 8]")
    _refuses(lambda: sdpa(q, _rand(8), q), head + "[2, 4, 8], [8], [2, 4, 8]")
    _refuses(lambda: sdpa(q, q, _rand(8)), head + "[2, 4, 8], [2, 4, 8], [8]")
    _refuses(lambda: sdpa(_rand(2, 4, 0), _rand(2, 4, 0), q),
             head + "[2, 4, 0], [2, 4, 0], [2, 4, 8]")
    gqa = ("scaled_dot_product_attention with enable_gqa: the key and value heads must divide "
           "the query heads, got ")
    _refuses(lambda: sdpa(_rand(1, 3, 2, 4), _rand(1, 2, 2, 4), _rand(1, 2, 2, 4),
                          enable_gqa=True), gqa + "[1, 3, 2, 4], [1, 2, 2, 4], [1, 2, 2, 4]")
    _refuses(lambda: sdpa(_rand(1, 4, 2, 4), _rand(1, 2, 2, 4), _rand(1, 3, 2, 4),
                          enable_gqa=True), gqa + "[1, 4, 2, 4], [1, 2, 2, 4], [1, 3, 2, 4]")
    _refuses(lambda: sdpa(_rand(1, 4, 2, 4), _rand(1, 0, 2, 4), _rand(1, 2, 2, 4),
                          enable_gqa=True), gqa + "[1, 4, 2, 4], [1, 0, 2, 4], [1, 2, 2, 4]")
    _refuses(lambda: sdpa(_rand(1, 4, 2, 4), _rand(1, 2, 2, 4), _rand(1, 0, 2, 4),
                          enable_gqa=True), gqa + "[1, 4, 2, 4], [1, 2, 2, 4], [1, 0, 2, 4]")
    # Grouped-query attention needs a head axis on all three (torch refuses 2-D too).
    _refuses(lambda: sdpa(_rand(2, 4), _rand(2, 2, 4), _rand(2, 2, 4), enable_gqa=True),
             gqa + "[2, 4], [2, 2, 4], [2, 2, 4]")
    _refuses(lambda: sdpa(_rand(2, 2, 4), _rand(2, 4), _rand(2, 2, 4), enable_gqa=True),
             gqa + "[2, 2, 4], [2, 4], [2, 2, 4]")
    _refuses(lambda: sdpa(_rand(2, 2, 4), _rand(2, 2, 4), _rand(2, 4), enable_gqa=True),
             gqa + "[2, 2, 4], [2, 2, 4], [2, 4]")


def test_sdpa_defaults():
    # Defaults: no mask, not causal, scale 1/sqrt(head size), no dropout; 4 queries, 6 keys.
    q, k, v = _rand(2, 4, 8), _rand(2, 6, 8), _rand(2, 6, 3)
    _close(runtime._sdpa(q, k, v), _sdpa_ref(q, k, v))
    # Without enable_gqa, one key/value head broadcasts over the query heads (matmul rules),
    # and a 2-D key/value over a batch of queries.
    q4, k1, v1 = _rand(2, 4, 3, 8), _rand(2, 1, 5, 8), _rand(1, 1, 5, 6)
    _close(runtime._sdpa(q4, k1, v1), _sdpa_ref(q4, k1, v1))
    _close(runtime._sdpa(q, k[0], v[0]), _sdpa_ref(q, k[0], v[0]))


# --- gelu, activations, softmax -----------------------------------------------------------

@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(approximate):
    x = np.linspace(-5, 5, 101, dtype=np.float32).reshape(1, 101)
    out = KERNELS["aten.gelu.default"](x, approximate)
    _close(out, F.gelu(_t(x), approximate=approximate), rtol=1e-6, atol=1e-6)
    empty = np.zeros((0, 3), np.float32)
    _close(runtime._gelu(empty, approximate), F.gelu(_t(empty), approximate=approximate))


def test_gelu_default_is_exact():
    x = np.linspace(-3, 3, 25, dtype=np.float32)
    _close(runtime._gelu(x), F.gelu(_t(x)), rtol=1e-6, atol=1e-6)


def _signed(actual, expected):
    """Values and the sign of every zero equal (torch keeps -0.0 where ATen computes it)."""
    expected = expected.numpy()
    _close(actual, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.signbit(actual), np.signbit(expected))


ACT_X = np.array([[-3.0, -1.0, -0.5, -0.0, 0.0, 0.25, 1.0, 2.5]], np.float32)


@pytest.mark.parametrize("shape, weights", [
    ((8,), 1), ((2, 4), 4), ((2, 2, 4), 2), ((2, 2, 2, 2), 2), ((3, 1, 4), 1),
])
def test_prelu_matches_torch(shape, weights):
    x = np.resize(ACT_X, shape).astype(np.float32)
    w = np.linspace(-0.5, 0.75, weights, dtype=np.float32)
    _signed(KERNELS["aten.prelu.default"](x, w), F.prelu(_t(x), _t(w)))
    neg = np.array([-0.25], np.float32)
    _signed(runtime._prelu(x, neg), F.prelu(_t(x), _t(neg)))


def test_elu_family_matches_torch():
    x = ACT_X
    t = _t(x)
    _close(runtime._elu(x), F.elu(t), rtol=1e-6, atol=1e-6)
    _close(KERNELS["aten.elu.default"](x, 0.7), F.elu(t, 0.7), rtol=1e-6, atol=1e-6)
    _close(KERNELS["aten.elu.default"](x, 0.7, 1.5, 2.0),
           torch.ops.aten.elu.default(t, 0.7, 1.5, 2.0), rtol=1e-6, atol=1e-6)
    _close(KERNELS["aten.selu.default"](x), F.selu(t), rtol=1e-6, atol=1e-6)
    _close(KERNELS["aten.celu.default"](x, 1.3), F.celu(t, 1.3), rtol=1e-6, atol=1e-6)


def test_rrelu_eval_and_training():
    x, t = ACT_X, _t(ACT_X)
    _signed(runtime._rrelu(x), F.rrelu(t, training=False))
    _signed(KERNELS["aten.rrelu.default"](x, 0.1, 0.5), F.rrelu(t, 0.1, 0.5, training=False))
    _refuses(lambda: runtime._rrelu(x, 0.1, 0.3, True),
             "rrelu in training mode (random slopes) is not supported")


@pytest.mark.parametrize("beta, threshold", [(1, 20), (2.0, 1.5), (1, 1), (0.5, 0.25)])
def test_softplus_matches_torch(beta, threshold):
    # 1.0 and 0.5 sit exactly on the threshold for (1, 1) and (0.5, 0.25): torch takes the
    # log1p(exp) branch there (linear only strictly above).
    x = np.array([-30.0, -2.0, 0.0, 0.5, 0.75, 1.0, 1.5, 3.0, 25.0], np.float32)
    _close(runtime._softplus(x, beta, threshold), F.softplus(_t(x), beta, threshold),
           rtol=1e-6, atol=1e-6)
    if (beta, threshold) == (1, 20):
        _close(runtime._softplus(x), F.softplus(_t(x)), rtol=1e-6, atol=1e-6)


def test_clamp_and_hardtanh():
    x = np.linspace(-3, 3, 13, dtype=np.float32)
    t = _t(x)
    _close(runtime._clamp(x), t, rtol=0, atol=0)
    _close(runtime._clamp(x, -1.5), torch.clamp(t, min=-1.5), rtol=0, atol=0)
    _close(runtime._clamp(x, None, 0.75), torch.clamp(t, max=0.75), rtol=0, atol=0)
    _close(runtime._clamp(x, -0.5, 2), torch.clamp(t, -0.5, 2), rtol=0, atol=0)
    _close(KERNELS["aten.hardtanh.default"](x), F.hardtanh(t), rtol=0, atol=0)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_and_log_softmax_match_torch(dim):
    # Rows of very different magnitudes: a shift by anything but each row's own maximum
    # overflows or underflows one of them.
    x = np.array([[80.0, 85.0, 90.0, 89.0], [-200.0, -210.0, -205.0, -201.0],
                  [0.5, -0.25, 0.0, 1.0]], np.float32)
    t = _t(x)
    _close(KERNELS["aten.softmax.int"](x, dim, False), F.softmax(t, dim), atol=1e-6)
    _close(KERNELS["aten.log_softmax.int"](x, dim, False), F.log_softmax(t, dim), atol=1e-4)


# --- normalisation ------------------------------------------------------------------------

@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_layer_norm_matches_torch(affine):
    x = _rand(2, 3, 6, scale=3.0) + np.float32(1)
    w = _rand(6) if affine in ("both", "weight") else None
    b = _rand(6) if affine in ("both", "bias") else None
    _close(KERNELS["aten.layer_norm.default"](x, [6], w, b, 1e-3, False),
           F.layer_norm(_t(x), [6], _t(w), _t(b), 1e-3), atol=1e-4)
    w2 = _rand(3, 6) if w is not None else None
    b2 = _rand(3, 6) if b is not None else None
    _close(runtime._layer_norm(x, [3, 6], w2, b2),
           F.layer_norm(_t(x), [3, 6], _t(w2), _t(b2)), atol=1e-4)


@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_batch_norm_matches_torch(affine):
    x = _rand(2, 3, 4, 5, scale=2.0)
    mean, var = _rand(3), np.abs(_rand(3)) + np.float32(0.5)
    w = _rand(3) if affine in ("both", "weight") else None
    b = _rand(3) if affine in ("both", "bias") else None
    _close(KERNELS["aten.batch_norm.default"](x, w, b, mean, var, False, 0.1, 0.2, True),
           F.batch_norm(_t(x), _t(mean), _t(var), _t(w), _t(b), False, 0.1, 0.2), atol=1e-4)
    y = x[:, :, :, 0]  # (N, C, L)
    _close(runtime._batch_norm(y, w, b, mean, var, False, 0.1, 1e-5),
           F.batch_norm(_t(y), _t(mean), _t(var), _t(w), _t(b), False), atol=1e-4)


def test_batch_norm_training_is_refused():
    x = _rand(2, 3, 4)
    _refuses(lambda: runtime._batch_norm(x, None, None, _rand(3), _rand(3), True, 0.1, 1e-5),
             "batch_norm in training mode is not supported (export in eval)")


@pytest.mark.parametrize("shape, groups, affine", [
    ((2, 6, 4, 3), 3, "both"), ((2, 6, 4, 3), 1, "weight"), ((2, 6, 5), 2, "bias"),
    ((3, 4), 2, "none"), ((2, 6, 4, 3), 6, "both"), ((1, 4, 2, 2, 2), 2, "both"),
])
def test_group_norm_matches_torch(shape, groups, affine):
    x = _rand(*shape, scale=2.0) + np.float32(0.5)
    c = shape[1]
    w = _rand(c) if affine in ("both", "weight") else None
    b = _rand(c) if affine in ("both", "bias") else None
    _close(KERNELS["aten.group_norm.default"](x, groups, w, b, 0.05),
           F.group_norm(_t(x), groups, _t(w), _t(b), 0.05), atol=1e-4)
    _close(runtime._group_norm(x, groups, w, b), F.group_norm(_t(x), groups, _t(w), _t(b)),
           atol=1e-4)


def test_group_norm_errors():
    gn = runtime._group_norm
    _refuses(lambda: gn(_rand(2, 5, 3), 2), "group_norm: 2 groups do not divide the 5 channels")
    _refuses(lambda: gn(_rand(2, 4, 3), 0), "group_norm: 0 groups do not divide the 4 channels")
    _refuses(lambda: gn(_rand(2, 4, 3), 2.0),
             "group_norm: 2.0 groups do not divide the 4 channels")
    _refuses(lambda: gn(_rand(3, 5), 2), "group_norm: 2 groups do not divide the 5 channels")
    _refuses(lambda: gn(_rand(4), 2), "group_norm: 2 groups do not divide the 0 channels")


@pytest.mark.parametrize("use_input_stats", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_instance_norm_matches_torch(use_input_stats, affine):
    x = _rand(2, 3, 5, 4, scale=2.0) + np.float32(1)
    mean, var = _rand(3), np.abs(_rand(3)) + np.float32(0.5)
    w, b = (_rand(3), _rand(3)) if affine else (None, None)
    out = KERNELS["aten.instance_norm.default"](x, w, b, mean, var, use_input_stats, 0.1, 0.3,
                                                False)
    ref = F.instance_norm(_t(x), _t(mean), _t(var), _t(w), _t(b), use_input_stats, 0.1, 0.3)
    _close(out, ref, atol=1e-4)


@pytest.mark.parametrize("eps", [None, 0.5])
@pytest.mark.parametrize("weight", [True, False])
def test_rms_norm_matches_torch(eps, weight):
    x = _rand(2, 3, 4, scale=0.05)  # small values: the default eps (float32's) shows
    w = _rand(4) if weight else None
    _close(KERNELS["aten.rms_norm.default"](x, [4], w, eps),
           F.rms_norm(_t(x), [4], _t(w), eps), atol=1e-5)
    w2 = _rand(3, 4) if weight else None
    _close(runtime._rms_norm(x, [3, 4], w2, eps), F.rms_norm(_t(x), [3, 4], _t(w2), eps),
           atol=1e-5)


def test_mean_and_sum():
    x = _rand(2, 3, 4)
    t = _t(x)
    _close(runtime._mean(x, [1]), t.mean(1))
    _close(runtime._mean(x, [0, 2], True), t.mean((0, 2), keepdim=True))
    _close(runtime._mean(x, [-1], False, None), t.mean(-1))
    _close(runtime._mean(x, []), t.mean().reshape(()))
    _close(runtime._mean(x, None, True), t.mean().reshape(()).numpy()[()] *
           np.ones((1, 1, 1), np.float32))


# --- reshape, slice, gather ---------------------------------------------------------------

def test_reshape():
    x = np.arange(12, dtype=np.float32)
    assert runtime._reshape(x, [3, -1]).shape == (3, 4)
    assert runtime._reshape(x, (2, 2, 3)).shape == (2, 2, 3)
    assert runtime._reshape(x[:1], 1).shape == (1,)
    _refuses(lambda: runtime._reshape(x, [3, 4.0]),
             "reshape to [3, 4.0]: dimensions must be integers")
    _refuses(lambda: runtime._reshape(x, [True, 12]),
             "reshape to [True, 12]: dimensions must be integers")


@pytest.mark.parametrize("ranges, expected", [
    # Hand-derived on x = arange(24).reshape(2, 3, 4); numpy slicing: ends are clamped, a
    # negative start or end counts from the end, a negative step walks backwards.
    ((0, 1, 1), [[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]]),
    ((0, 2, 1, 1, 3, 1, 0, 4, 2), [[[4, 6], [8, 10]], [[16, 18], [20, 22]]]),
    ((1, 5, 1, -1, 100, 1, -3, -1, 1), [[[21, 22]]]),
    ((0, 1, 1, 2, -100, -1, 3, 0, -2), [[[11, 9], [7, 5], [3, 1]]]),
    ((0, 2, 1, 5, 9, 1), np.zeros((2, 0, 4))),
])
def test_slice(ranges, expected):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = KERNELS["mind.slice"](x, list(ranges))
    np.testing.assert_array_equal(out, np.asarray(expected, np.float32))
    assert out.shape == np.shape(expected)


def test_slice_errors():
    x = np.zeros((2, 3), np.float32)
    _refuses(lambda: runtime._slice(x, [0, 1]),
             "slice ranges must be (start, end, step) per axis of the rank-2 input, got [0, 1]")
    _refuses(lambda: runtime._slice(x, [0, 1, 1] * 3),
             "slice ranges must be (start, end, step) per axis of the rank-2 input, got "
             "[0, 1, 1, 0, 1, 1, 0, 1, 1]")
    _refuses(lambda: runtime._slice(x, [0, 2, 1, 0, 3, 0]), "slice step 0 in [0, 2, 1, 0, 3, 0]")


def test_gather():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(runtime._gather(x, np.array([3, 0, -1, -4])),
                                  [[9, 10, 11], [0, 1, 2], [9, 10, 11], [0, 1, 2]])
    out = KERNELS["mind.gather"](x, np.array([[1], [2]], np.uint8))
    np.testing.assert_array_equal(out, [[[3, 4, 5]], [[6, 7, 8]]])
    assert runtime._gather(x, np.zeros((0,), np.int64)).shape == (0, 3)
    assert runtime._gather(x, [2]).tolist() == [[6, 7, 8]]
    _refuses(lambda: runtime._gather(x, np.array([4])),
             "gather index out of range for axis 0 of size 4")
    _refuses(lambda: runtime._gather(x, np.array([0, -5])),
             "gather index out of range for axis 0 of size 4")
    _refuses(lambda: runtime._gather(x, np.array([0.0])),
             "gather indices must be integers, got float64")
    _refuses(lambda: runtime._gather(np.float32(1), np.array([0])), "gather from a scalar")


def test_gather_cap(monkeypatch):
    x = np.zeros((4, 3, 2), np.float32)
    _cap_boundary(monkeypatch, lambda: runtime._gather(x, np.zeros((5,), np.int64)), 30,
                  "gather result", (5, 3, 2))


def test_pairs():
    assert runtime._pairs("k", 3, 1) == (3, 3)
    assert runtime._pairs("k", [3], 1) == (3, 3)
    assert runtime._pairs("k", (2, 5), 0) == (2, 5)
    assert runtime._pairs("k", [0, 0], 0) == (0, 0)
    _refuses(lambda: runtime._pairs("k", [], 0), "k must be one or two integers, got []")
    _refuses(lambda: runtime._pairs("k", 2.5, 0), "k must be one or two integers, got [2.5]")
    _refuses(lambda: runtime._pairs("k", [1, 2, 3], 0),
             "k must be one or two integers, got [1, 2, 3]")
    _refuses(lambda: runtime._pairs("k", [False], 0), "k must be one or two integers, got [False]")
    _refuses(lambda: runtime._pairs("k", [2, 0], 1), "k must be at least 1, got [2, 0]")


def test_kernel_messages_name_the_op():
    """Every refusal above names the op (the message starts with it)."""
    for fn, op in [(lambda: runtime._conv2d(_rand(1, 1, 2, 2), _rand(1, 1, 1, 1), groups=0),
                    "conv2d"),
                   (lambda: runtime._group_norm(_rand(2, 3), 2), "group_norm"),
                   (lambda: runtime._slice(_rand(2), [0, 1, 0]), "slice")]:
        with pytest.raises(NacRuntimeError, match=rf"^{re.escape(op)}"):
            fn()


# --- regressions: kernels that were wrong before these tests (compiled from torch) --------

class _GroupedQueryAttention(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


@pytest.mark.parametrize("make, shapes", [
    # divisor_override was ignored: the window mean instead of the sum / 3.
    (lambda: torch.nn.AvgPool2d(2, divisor_override=3), [(1, 2, 6, 6)]),
    # A (C, L) input without a batch axis was refused as a max_pool2d rank error.
    (lambda: torch.nn.MaxPool1d(2), [(3, 8)]),
    # enable_gqa was ignored: 4 query heads against 2 key/value heads did not broadcast.
    (_GroupedQueryAttention, [(1, 4, 3, 8), (1, 2, 5, 8), (1, 2, 5, 6)]),
])
def test_compiled_models_match_torch(make, shapes):
    from nac.compile import compile_module
    from nac.runtime import run

    module = make().eval()
    args = tuple(torch.from_numpy(_rand(*s)) for s in shapes)
    nac, _, _ = compile_module(module, args)
    (out,) = run(nac, [a.numpy() for a in args])
    _close(out, module(*args), atol=1e-5)


# --- parameters and the operands named in a kernel's error --------------------------------

def test_load_param_values_and_errors():
    from nac.container import NacFile, QuantParams, Tensor
    from nac.encoding import DType, QuantMethod

    def tensor(quant, params, data, dtype=DType.INT8, shape=(3,)):
        return Tensor(dtype, shape, quant, params, bytes(data))

    # int8 codes 2, -1, 7 times the scale 0.5 (the byte 255 is -1).
    good = tensor(QuantMethod.INT8_TENSOR, QuantParams(scales=(0.5,)), [2, 255, 7])
    np.testing.assert_array_equal(runtime._load_param(NacFile(), 3, "w", {3: good}),
                                  np.array([1.0, -0.5, 3.5], np.float32))
    _refuses(lambda: runtime._load_param(NacFile(), 3, "w", {}),
             "parameter 3 ('w') has no tensor (internal or external)")
    two = tensor(QuantMethod.INT8_TENSOR, QuantParams(scales=(0.5, 1.0)), [0, 0, 0])
    _refuses(lambda: runtime._load_param(NacFile(), 3, "w", {3: two}),
             "parameter 3: tensor w: INT8_TENSOR needs exactly one scale")
    fp8 = tensor(QuantMethod.BLOCK_FP8, QuantParams(scales=(1.0,), block_size=4,
                                                    orig_shape=(3,)), [0, 0], DType.UINT8, (2,))
    _refuses(lambda: runtime._load_param(NacFile(), 3, "w", {3: fp8}),
             "parameter 3 ('w'): BLOCK_FP8 orig_shape [3] has more elements than the 2 stored")
    # float8 e4m3 bytes (bias 7): 0x38 = 1.0, 0x40 = 2.0, 0x30 = 0.5, 0xB8 = -1.0; blocks of
    # two scaled by 2 and 0.5. orig_shape holds exactly the four stored values.
    exact = tensor(QuantMethod.BLOCK_FP8, QuantParams(scales=(2.0, 0.5), block_size=2,
                                                      orig_shape=(2, 2)),
                   [0x38, 0x40, 0x30, 0xB8], DType.UINT8, (4,))
    np.testing.assert_array_equal(runtime._load_param(NacFile(), 3, "w", {3: exact}),
                                  np.array([[2.0, 4.0], [0.25, -0.5]], np.float32))
    # Parameters that pass the checks but that dequantisation cannot apply (two unknown
    # dimensions in orig_shape): numpy's ValueError, named.
    odd = tensor(QuantMethod.BLOCK_FP8, QuantParams(scales=(1.0,), block_size=4,
                                                    orig_shape=(-2, -2)),
                 [0x38] * 4, DType.UINT8, (4,))
    with pytest.raises(NacRuntimeError) as info:
        runtime._load_param(NacFile(), 3, "w", {3: odd})
    assert str(info.value).startswith("parameter 3 ('w'): cannot dequantise: "), info.value


def test_operands_name_their_origin():
    from nac.container import Instruction

    # Instruction 6 with D = (-2, 0, -1): a tensor from instruction 4 (user input 0), a
    # constant, a tensor from instruction 5.
    ins = Instruction(20, 1, (1, 7), (-2, 0, -1))
    args = [np.zeros((2, 3), np.float32), 5, np.zeros(3, np.int64)]
    assert runtime._operands(args, {4: "input 0 ('x')"}, ins, 6) == \
        " (tensor operands: float32 [2, 3] from input 0 ('x'); int64 [3])"
    assert runtime._operands(args, {}, ins, 6) == " (tensor operands: float32 [2, 3]; int64 [3])"
    assert runtime._operands([5, [1, 2]], {}, Instruction(20, 1, (1, 7, 8), (0, 0)), 6) == ""


# --- run(): hand-built models, every refusal by its message -------------------------------

def _model(*ops, data=None, cmap=None, cnst=()):
    from nac.container import NacFile

    return NacFile(ops=tuple(ops), perm=((1, "T"), (2, "TT")), data=data, cmap=cmap,
                   cnst=tuple(cnst))


def _ins(a, b=0, c=None, d=()):
    from nac.container import Instruction

    return Instruction(int(a), b, c, tuple(d))


def test_run_hand_built_models():
    from nac.container import Constant, DataSection
    from nac.encoding import ConstType, SystemOp

    inp, out = SystemOp.INPUT, SystemOp.OUTPUT
    a, b = _rand(2, 3), _rand(3)
    # Instruction 2 is nac.add (id 11) of instructions 0 and 1; no DATA section at all.
    add = _model(_ins(inp), _ins(inp), _ins(11, 2, None, (-2, -1)), _ins(out, 0, None, (-1,)))
    (result,) = runtime.run(add, [a, b])
    np.testing.assert_array_equal(result, a + b)
    # An output may name instruction 0 (the first one) and several results.
    first = _model(_ins(inp), _ins(inp), _ins(out, 0, None, (-2, -1)))
    outs = runtime.run(first, [a, b])
    assert len(outs) == 2 and outs[0] is a and outs[1] is b
    # A subgraph output (B=1) does not stop the run; its value is the list of its results,
    # which a final output may name, but no kernel can take.
    sub = _model(_ins(inp), _ins(out, 1, None, (-1,)), _ins(out, 0, None, (-2, -1)))
    outs = runtime.run(sub, [a])
    assert outs[0] is a and isinstance(outs[1], list) and outs[1][0] is a
    bad = _model(_ins(inp), _ins(out, 1, None, (-1,)), _ins(11, 2, None, (-2, -1)),
                 _ins(out, 0, None, (-1,)))
    _refuses(lambda: runtime.run(bad, [a]), "instruction 2 (nac.add): argument from "
             "instruction 1, which has no tensor value")
    # nac.view (17) with a constant shape: a tuple constant reaches the kernel as a list.
    view = _model(_ins(inp), _ins(17, 2, (2, 7), (-1, 0)), _ins(out, 0, None, (-1,)),
                  cnst=[(7, Constant(ConstType.LIST_INT32, (3, 2)))])
    assert runtime.run(view, [a])[0].shape == (3, 2)
    _refuses(lambda: runtime.run(_model(_ins(inp), _ins(17, 2, (2, 8), (-1, 0)),
                                        _ins(out, 0, None, (-1,))), [a]),
             "instruction 1 (nac.view): constant id 8 is not in CNST")
    # Input labels: named where DATA names them, "none" for a model without inputs.
    named = _model(_ins(inp), _ins(inp), _ins(out, 0, None, (-1,)),
                   data=DataSection(inputs=((1, "y"),)))
    _refuses(lambda: runtime.run(named, [a]),
             "the model takes 2 input(s) (input 0, input 1 ('y')), got 1")
    _refuses(lambda: runtime.run(_model(_ins(out, 0, None, ())), [a]),
             "the model takes 0 input(s) (none), got 1")


def test_run_refusals():
    from nac.encoding import SystemOp

    inp, out = SystemOp.INPUT, SystemOp.OUTPUT
    a = _rand(2, 3)
    cases = [
        ((_ins(inp, 1), _ins(out, 0, None, (-1,))), [],
         "instruction 0: <INPUT B=1> without a parameter id in C"),
        ((_ins(inp, 2), _ins(out, 0, None, (-1,))), [],
         "instruction 0: state inputs (<INPUT B=2>) need a state store, which this runtime "
         "does not keep"),
        ((_ins(inp), _ins(out, 0, None, (0,))), [a],
         "instruction 1: <OUTPUT> offset 0 names no computed value"),
        ((_ins(inp), _ins(out, 0, None, (-2,))), [a],
         "instruction 1: <OUTPUT> offset -2 names no computed value"),
        ((_ins(inp), _ins(out, 0, None, (5,))), [a],
         "instruction 1: <OUTPUT> offset 5 names no computed value"),
        ((_ins(inp), _ins(5), _ins(out, 0, None, (-2,))), [a],
         "instruction 1: system op A=5 not supported"),
        ((_ins(inp), _ins(99, 1, None, (-1,)), _ins(out, 0, None, (-1,))), [a],
         "instruction 1: no kernel for 99"),
        ((_ins(inp),), [a], "the model has no <OUTPUT B=0>"),
    ]
    for ops, inputs, message in cases:
        _refuses(lambda ops=ops, inputs=inputs: runtime.run(_model(*ops), inputs), message)
    custom = _model(_ins(inp), _ins(99, 1, None, (-1,)), _ins(out, 0, None, (-1,)),
                    cmap=((99, "aten.nothing.default"),))
    _refuses(lambda: runtime.run(custom, [a]),
             "instruction 1: no kernel for 'aten.nothing.default'")


def test_run_names_a_failing_kernel_and_its_operands():
    from nac.container import DataSection
    from nac.encoding import SystemOp

    inp, out = SystemOp.INPUT, SystemOp.OUTPUT
    model = _model(_ins(inp), _ins(inp), _ins(11, 2, None, (-2, -1)), _ins(out, 0, None, (-1,)),
                   data=DataSection(inputs=((0, "x"),)))
    # numpy's own broadcast error (a ValueError) with the op, the instruction and where each
    # operand came from.
    with pytest.raises(NacRuntimeError) as info:
        runtime.run(model, [_rand(2, 3), _rand(4)])
    assert re.fullmatch(r"instruction 2 \(nac\.add\): ValueError: .+ \(tensor operands: "
                        r"float32 \[2, 3\] from input 0 \('x'\); float32 \[4\] from input 1\)",
                        str(info.value), re.S), str(info.value)
