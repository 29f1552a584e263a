"""Op coverage of the float runtime (issue 24): every activation, pooling and normalisation
module of ``torch.nn`` (enumerated from the modules' ``__all__``, so a new one fails the
test until it is listed) and the usual tensor ops either compile and match torch eager,
or are refused at ``npu compile`` time by op name -- never compiled into a file that
``npu run`` cannot execute (``aten.cumsum`` used to compile and fail at run time)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn.modules import activation, batchnorm, instancenorm, normalization, pooling  # noqa: E402

from nac.compile import compile_module  # noqa: E402
from nac.ir import IRError  # noqa: E402
from nac.runtime import run  # noqa: E402

S1, S2, S3 = (2, 3, 8), (2, 3, 8, 8), (2, 3, 4, 4, 4)
#: module name -> (constructor, input shape); each must compile and match torch eager.
SUPPORTED = {
    "Threshold": (lambda: nn.Threshold(0.1, -2.0), S1), "ReLU": (nn.ReLU, S1),
    "Hardtanh": (lambda: nn.Hardtanh(-0.5, 0.7), S1), "ReLU6": (nn.ReLU6, S1),
    "Sigmoid": (nn.Sigmoid, S1), "Hardsigmoid": (nn.Hardsigmoid, S1), "Tanh": (nn.Tanh, S1),
    "SiLU": (nn.SiLU, S1), "Mish": (nn.Mish, S1), "Hardswish": (nn.Hardswish, S1),
    "ELU": (lambda: nn.ELU(0.7), S1), "CELU": (lambda: nn.CELU(1.3), S1), "SELU": (nn.SELU, S1),
    "GLU": (lambda: nn.GLU(-1), S1), "GELU": (nn.GELU, S1),
    "Hardshrink": (lambda: nn.Hardshrink(0.3), S1),
    "LeakyReLU": (lambda: nn.LeakyReLU(0.2), S1), "LogSigmoid": (nn.LogSigmoid, S1),
    "Softplus": (lambda: nn.Softplus(2.0, 1.5), S1),
    "Softshrink": (lambda: nn.Softshrink(0.3), S1), "PReLU": (lambda: nn.PReLU(3), S1),
    "Softsign": (nn.Softsign, S1), "Tanhshrink": (nn.Tanhshrink, S1),
    "Softmin": (lambda: nn.Softmin(1), S1), "Softmax": (lambda: nn.Softmax(-1), S1),
    "Softmax2d": (nn.Softmax2d, S2), "LogSoftmax": (lambda: nn.LogSoftmax(1), S1),
    "MaxPool1d": (lambda: nn.MaxPool1d(3, 2, 1), S1), "MaxPool2d": (lambda: nn.MaxPool2d(2), S2),
    "AvgPool1d": (lambda: nn.AvgPool1d(2), S1), "AvgPool2d": (lambda: nn.AvgPool2d(2), S2),
    "LPPool1d": (lambda: nn.LPPool1d(2, 2), S1), "LPPool2d": (lambda: nn.LPPool2d(2, 2), S2),
    "AdaptiveAvgPool1d": (lambda: nn.AdaptiveAvgPool1d(4), S1),
    "AdaptiveAvgPool2d": (lambda: nn.AdaptiveAvgPool2d(2), S2),
    "LayerNorm": (lambda: nn.LayerNorm(8), S1), "GroupNorm": (lambda: nn.GroupNorm(3, 3), S2),
    "RMSNorm": (lambda: nn.RMSNorm(8), S1),
    "BatchNorm1d": (lambda: nn.BatchNorm1d(3), S1), "BatchNorm2d": (lambda: nn.BatchNorm2d(3), S2),
    "InstanceNorm1d": (lambda: nn.InstanceNorm1d(3, affine=True), S1),
    "InstanceNorm2d": (lambda: nn.InstanceNorm2d(3), S2),
    "InstanceNorm3d": (lambda: nn.InstanceNorm3d(3), S3),
    "BatchNorm3d": (lambda: nn.BatchNorm3d(3), S3),
    "SyncBatchNorm": (lambda: nn.SyncBatchNorm(3), S2),  # in eval, a batch norm
    "RReLU": (nn.RReLU, S1),  # in eval, a leaky ReLU with the mean slope
    "MultiheadAttention": (lambda: _SelfAttention(), S1),
}
#: module name -> (constructor, input shape, op the compile error must name). 3-D pooling
#: has no kernel yet; ops with several results (pooling with indices, adaptive and
#: fractional max pooling) have no NAC encoding in this front-end.
REFUSED = {
    "MaxPool3d": (lambda: nn.MaxPool3d(2), S3, r"aten\.max_pool3d"),
    "AvgPool3d": (lambda: nn.AvgPool3d(2), S3, r"aten\.avg_pool3d"),
    "LPPool3d": (lambda: nn.LPPool3d(2, 2), S3, r"aten\.avg_pool3d"),
    "AdaptiveAvgPool3d": (lambda: nn.AdaptiveAvgPool3d(2), S3, r"aten\.adaptive_avg_pool3d"),
    "AdaptiveMaxPool1d": (lambda: nn.AdaptiveMaxPool1d(2), S1, r"aten\.adaptive_max_pool1d"),
    "AdaptiveMaxPool2d": (lambda: nn.AdaptiveMaxPool2d(2), S2, r"aten\.adaptive_max_pool2d"),
    "AdaptiveMaxPool3d": (lambda: nn.AdaptiveMaxPool3d(2), S3, r"aten\.adaptive_max_pool3d"),
    "FractionalMaxPool2d": (lambda: nn.FractionalMaxPool2d(2, output_size=3), S2,
                            r"aten\.fractional_max_pool2d"),
    "FractionalMaxPool3d": (lambda: nn.FractionalMaxPool3d(2, output_size=2), S3,
                            r"aten\.fractional_max_pool3d"),
    "MaxUnpool1d": (lambda: _Unpool(nn.MaxPool1d, nn.MaxUnpool1d), S1, r"aten\.max_pool\w*"),
    "MaxUnpool2d": (lambda: _Unpool(nn.MaxPool2d, nn.MaxUnpool2d), S2, r"aten\.max_pool\w*"),
    "MaxUnpool3d": (lambda: _Unpool(nn.MaxPool3d, nn.MaxUnpool3d), S3, r"aten\.max_pool\w*"),
    "LocalResponseNorm": (lambda: nn.LocalResponseNorm(2), S2, r"aten\.avg_pool3d"),
    "CrossMapLRN2d": (lambda: nn.CrossMapLRN2d(3), S2, r"aten\.\w+"),
}


class _SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class _Unpool(nn.Module):
    """A max pool with indices feeding its unpool (the unpool's only use)."""

    def __init__(self, pool, unpool):
        super().__init__()
        self.pool, self.unpool = pool(2, return_indices=True), unpool(2)

    def forward(self, x):
        return self.unpool(*self.pool(x))


class _Op(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


#: tensor op -> (function, supported?)
TENSOR_OPS = {
    "cumsum": (lambda x: torch.cumsum(x, dim=1), True),
    "clamp": (lambda x: x.clamp(-0.5, 0.5), True),
    "pow": (lambda x: x ** 2, True),
    "abs": (torch.abs, True),
    "erf": (torch.erf, True),
    "flatten": (lambda x: torch.flatten(x, 1), True),
    "cat": (lambda x: torch.cat([x, x * 2], dim=1), False),
    "stack": (lambda x: torch.stack([x, x + 1], dim=0), False),
    "split": (lambda x: torch.split(x, 2, dim=2)[1] * 2, False),
    "chunk": (lambda x: torch.chunk(x, 2, dim=2)[0] + 1, False),
    "max.dim": (lambda x: x.max(dim=1).values, False),
}


def _names():
    out = []
    for module in (activation, pooling, normalization, batchnorm, instancenorm):
        out += [n for n in module.__all__ if not n.startswith("Lazy")]
    return out


def test_every_module_is_classified():
    assert set(_names()) == set(SUPPORTED) | set(REFUSED)


def _compare(module, x):
    module.eval()
    nac, _, _ = compile_module(module, (x,))
    (got,) = run(nac, [x.numpy()])
    with torch.no_grad():
        want = module(x).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_module_matches_torch(name):
    torch.manual_seed(0)
    make, shape = SUPPORTED[name]
    module = make()
    for m in module.modules():  # non-trivial running statistics for the batch norms
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    _compare(module, torch.randn(*shape))


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_module_refused_by_op_name(name):
    make, shape, op = REFUSED[name]
    with pytest.raises(IRError, match=op):
        compile_module(make().eval(), (torch.randn(*shape),))


@pytest.mark.parametrize("name", sorted(TENSOR_OPS))
def test_tensor_op(name):
    fn, supported = TENSOR_OPS[name]
    torch.manual_seed(0)
    x = torch.randn(2, 4, 6)
    if supported:
        _compare(_Op(fn), x)
    else:
        with pytest.raises(IRError, match=r"aten\.\w+"):
            compile_module(_Op(fn).eval(), (x,))
