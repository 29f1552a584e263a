"""A small model zoo for tests and benchmarks, and the digits CNN.

Every model is built by a factory ``name -> (module, example_inputs)``; torch is imported
only when a factory runs. ``digits_cnn`` trains a tiny CNN on scikit-learn's bundled 8x8
digits (no download).
"""

from __future__ import annotations

__all__ = ["ZOO", "build", "digits_cnn"]


def _mlp():
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 8),
                          nn.GELU(), nn.Linear(8, 4))
    return model, (torch.randn(3, 16),)


def _cnn():
    import torch
    from torch import nn

    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    return model, (torch.randn(2, 3, 16, 16),)


def _residual():
    import torch
    from torch import nn

    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(8, 8, 3, padding=1, bias=False)
            self.bn_a = nn.BatchNorm2d(8)
            self.b = nn.Conv2d(8, 8, 3, padding=1, bias=False)
            self.bn_b = nn.BatchNorm2d(8)

        def forward(self, x):
            y = torch.relu(self.bn_a(self.a(x)))
            return torch.relu(self.bn_b(self.b(y)) + x)

    return Residual(), (torch.randn(2, 8, 8, 8),)


def _attention():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d=16, heads=2):
            super().__init__()
            self.heads = heads
            self.norm1 = nn.LayerNorm(d)
            self.q = nn.Linear(d, d)
            self.k = nn.Linear(d, d)
            self.v = nn.Linear(d, d)
            self.o = nn.Linear(d, d)
            self.norm2 = nn.LayerNorm(d)
            self.up = nn.Linear(d, 4 * d)
            self.down = nn.Linear(4 * d, d)

        def split(self, t):
            b, n, d = t.shape
            return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)

        def forward(self, x):
            b, n, d = x.shape
            h = self.norm1(x)
            att = nn.functional.scaled_dot_product_attention(
                self.split(self.q(h)), self.split(self.k(h)), self.split(self.v(h)),
                is_causal=True)
            x = x + self.o(att.transpose(1, 2).reshape(b, n, d))
            return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))

    return Block(), (torch.randn(2, 5, 16),)


ZOO = {"mlp": _mlp, "cnn": _cnn, "residual": _residual, "attention": _attention}


def build(name, seed=0):
    """Build zoo model *name* (deterministic weights); return ``(module, example_inputs)``."""
    import torch

    if name not in ZOO:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(sorted(ZOO))}")
    torch.manual_seed(seed)
    module, inputs = ZOO[name]()
    module.eval()
    # Non-trivial batch-norm statistics, so that the eval-mode arithmetic is exercised.
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return module, inputs


def digits_cnn(epochs=8, seed=0):
    """Train a tiny CNN on scikit-learn's digits; return ``(model, x_test, y_test)``.

    1797 8x8 images: the first 1400 (shuffled with *seed*) train, the rest are held out.
    """
    import numpy as np
    import torch
    from sklearn.datasets import load_digits
    from torch import nn

    torch.manual_seed(seed)
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    x_train, y_train, x_test, y_test = x[:1400], y[:1400], x[1400:], y[1400:]
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    for _ in range(epochs):
        for start in range(0, len(xt), 100):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xt[start:start + 100]),
                                               yt[start:start + 100])
            loss.backward()
            opt.step()
    model.eval()
    return model, x_test, y_test
