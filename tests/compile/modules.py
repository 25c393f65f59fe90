"""Small PyBuda modules used by the compile tests and snapshots (deterministic weights)."""

import torch

import pybuda
from pybuda.op import nn as opnn


def _param(shape, scale=0.1, seed=0):
    g = torch.Generator().manual_seed(seed)
    return pybuda.Parameter(torch.randn(*shape, generator=g) * scale, requires_grad=False)


class MLP(pybuda.PyBudaModule):
    """matmul + bias + gelu, matmul + bias, softmax, layernorm."""

    def __init__(self, name="mlp", hidden=64, inner=128):
        super().__init__(name)
        self.w1 = _param((hidden, inner), seed=1)
        self.b1 = _param((inner,), seed=2)
        self.w2 = _param((inner, hidden), seed=3)
        self.b2 = _param((hidden,), seed=4)
        self.ln_w = _param((hidden,), 1.0, seed=5)
        self.ln_b = _param((hidden,), seed=6)

    def forward(self, x):
        h = pybuda.op.Matmul("fc1", x, self.w1, bias=self.b1)
        h = pybuda.op.Gelu("gelu", h)
        h = pybuda.op.Matmul("fc2", h, self.w2, bias=self.b2)
        h = opnn.Softmax("softmax", h, dim=-1)
        return opnn.Layernorm("ln", h, self.ln_w, self.ln_b)


class Attention(pybuda.PyBudaModule):
    """Multi-head self-attention with head split/merge TMs and a scale."""

    def __init__(self, name="attn", heads=2, dim=32, seq=64):
        super().__init__(name)
        self.heads, self.dim, self.seq = heads, dim, seq
        hidden = heads * dim
        self.wq = _param((hidden, hidden), seed=11)
        self.wk = _param((hidden, hidden), seed=12)
        self.wv = _param((hidden, hidden), seed=13)
        self.wo = _param((hidden, hidden), seed=14)

    def _heads(self, name, x):
        x = pybuda.op.Reshape(f"{name}_r", x, (x.shape[0], self.seq, self.heads, self.dim))
        return pybuda.op.Transpose(f"{name}_t", x, 1, 2)

    def forward(self, x):
        q = self._heads("q", pybuda.op.Matmul("q", x, self.wq))
        k = self._heads("k", pybuda.op.Matmul("k", x, self.wk))
        v = self._heads("v", pybuda.op.Matmul("v", x, self.wv))
        s = pybuda.op.Matmul("scores", q, pybuda.op.Transpose("kT", k, -1, -2))
        s = pybuda.op.Multiply("scale", s, 1.0 / self.dim ** 0.5)
        p = opnn.Softmax("probs", s, dim=-1)
        c = pybuda.op.Matmul("ctx", p, v)
        c = pybuda.op.Reshape("merge", pybuda.op.Transpose("ctx_t", c, 1, 2),
                              (x.shape[0], self.seq, self.heads * self.dim))
        return pybuda.op.Matmul("out_proj", c, self.wo)


class ConvBlock(pybuda.PyBudaModule):
    """conv + batchnorm + relu, max pool, a 3x3 conv with residual add, global average pool, linear."""

    def __init__(self, name="convblock", cin=3, c=16, classes=10):
        super().__init__(name)
        self.w1 = _param((c, cin, 3, 3), 0.3, seed=21)
        self.w2 = _param((c, c, 3, 3), 0.1, seed=22)
        self.bn_w = _param((c,), 1.0, seed=23)
        self.bn_b = _param((c,), seed=24)
        self.bn_m = _param((c,), seed=25)
        self.bn_v = pybuda.Parameter(torch.rand(c, generator=torch.Generator().manual_seed(26)) + 0.5,
                                     requires_grad=False)
        self.fc = _param((c, classes), seed=27)

    def forward(self, x):
        h = pybuda.op.Conv2d("conv1", x, self.w1, stride=2, padding=1)
        h = opnn.Batchnorm("bn1", h, self.bn_w, self.bn_b, self.bn_m, self.bn_v)
        h = pybuda.op.Relu("relu1", h)
        h = pybuda.op.MaxPool2d("pool", h, kernel_size=3, stride=2, padding=1)
        r = pybuda.op.Conv2d("conv2", h, self.w2, padding=1)
        h = pybuda.op.Relu("relu2", pybuda.op.Add("res", r, h))
        h = pybuda.op.ReduceAvg("gap_w", h, -1)
        h = pybuda.op.ReduceAvg("gap_h", h, -2)
        h = pybuda.op.Reshape("flatten", h, (h.shape[0], h.shape[1]))
        return pybuda.op.Matmul("fc", h, self.fc)


def inputs_for(module, microbatch=1):
    """Deterministic sample inputs for one of the modules above."""
    g = torch.Generator().manual_seed(100)
    if isinstance(module, ConvBlock):
        return [torch.randn(microbatch, 3, 32, 32, generator=g)]
    if isinstance(module, Attention):
        return [torch.randn(microbatch, module.seq, module.heads * module.dim, generator=g)]
    return [torch.randn(microbatch, 32, 64, generator=g)]
