"""Each mapped ATen op family: capture a tiny module (fallback off), run the graph on CPU, compare with torch."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn


class Fn(nn.Module):
    """A module whose forward is ``fn(*inputs)``."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def r(*shape, seed=0, low=None):
    g = torch.Generator().manual_seed(seed + sum(shape))
    t = torch.randn(*shape, generator=g)
    return t.abs() + low if low is not None else t


def ints(high, *shape, seed=0):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


X = (2, 3, 8)

CASES = {
    # elementwise binary, with scalars, alpha and broadcasting
    "add_alpha": (lambda x, y: torch.add(x, y, alpha=2.5), (r(*X), r(8))),
    "sub_rsub": (lambda x, y: (x - y) + (1.5 - x) - torch.sub(x, y, alpha=0.5), (r(*X), r(3, 1))),
    "mul_div": (lambda x, y: x * y / (y.abs() + 1) / 4 * 3, (r(*X), r(*X, seed=1))),
    "div_tensor_scalar_num": (lambda x: 2.0 / (x.abs() + 1), (r(*X),)),
    "max_min": (lambda x, y: torch.maximum(x, y) + torch.minimum(x, y) * 2, (r(*X), r(*X, seed=1))),
    "pow": (lambda x, y: x.pow(2) + x.abs().pow(0.5) + x.pow(3) + (x.abs() + 1).pow(-1) + torch.pow(x.abs() + 1, y),
            (r(*X), r(*X, seed=1))),
    "pow_scalar_base": (lambda x: torch.pow(2.0, x), (r(*X),)),
    # elementwise unary
    "unary_math": (lambda x: torch.exp(x) + torch.log(x.abs() + 1) + torch.sqrt(x.abs()) + torch.rsqrt(x.abs() + 1)
                   + torch.reciprocal(x.abs() + 1) + torch.abs(x) - x.neg() + torch.square(x), (r(*X),)),
    "unary_trig": (lambda x: torch.sin(x) + torch.cos(x) + torch.tanh(x) + torch.sigmoid(x) + torch.erf(x), (r(*X),)),
    "inverse_trig": (lambda x: (torch.acos(x.clamp(-1, 1)), torch.asin(torch.tanh(x)), torch.atan(x * 3),
                                torch.acos(torch.tensor([-1.0, -0.5, 0.0, 0.5, 1.0]))), (r(*X),)),
    "log1p_expm1": (lambda x: torch.log1p(x.abs()) + torch.expm1(x), (r(*X),)),
    "activations": (lambda x: F.relu(x) + F.gelu(x) + F.gelu(x, approximate="tanh") + F.leaky_relu(x, 0.2)
                    + F.silu(x) + F.hardsigmoid(x) + F.hardswish(x) + F.elu(x) + F.softplus(x) + F.mish(x),
                    (r(*X) * 3,)),
    "clamps": (lambda x: F.hardtanh(x, -0.5, 0.7) + F.relu6(x * 4) + x.clamp(-1, 1) + x.clamp(min=0.1)
               + x.clamp(max=0.2) + torch.clamp(x, x * 0.5, x.abs()), (r(*X) * 3,)),
    # comparisons, logical ops, where, masked_fill
    "compare": (lambda x, y: torch.stack([x == y, x != y, x > y, x < 0.1, x >= y, x <= 0.0]), (r(*X), r(*X, seed=1).round())),
    "logical": (lambda x, y: ((x > 0) & (y > 0)) | ~(x < y) ^ (y > 0.5), (r(*X), r(*X, seed=1))),
    "where_masked_fill": (lambda x, y: torch.where(x > 0, x, y) + torch.where(y > 0, x, 0.5)
                          + x.masked_fill(y > 0, -3.0), (r(*X), r(*X, seed=1))),
    # type conversion
    "casts": (lambda x: (x * 4).to(torch.int32).float() + (x > 0).float() + x.to(torch.float64).float(), (r(*X),)),
    "int_arith": (lambda i: i * 2 + 1, (ints(10, 2, 5),)),
    # reductions
    "sum_mean": (lambda x: x.sum(-1) + x.mean(1).sum(-1, keepdim=True) + x.sum() + x.mean((0, 2)).sum(), (r(*X),)),
    "amax_max_min": (lambda x: x.amax(-1) + x.max(dim=1).values.sum(-1, keepdim=True) + x.min(-1).values + x.amin(0).sum(),
                     (r(*X),)),
    "argmax": (lambda x: (x.argmax(-1), x.argmin(1), x.max(-1).indices, x.argmax()), (r(*X),)),
    "var_std": (lambda x: x.var(-1) + x.std(1).mean(-1, keepdim=True) + x.var(-1, unbiased=False)
                + torch.var_mean(x, dim=-1)[0] + torch.var_mean(x, dim=-1)[1], (r(*X),)),
    "softmax": (lambda x: torch.softmax(x, -1) + F.log_softmax(x, dim=1).sum(1, keepdim=True), (r(*X),)),
    "cumsum": (lambda x: torch.cumsum(x, 1), (r(*X),)),
    "norm_any_all_sign": (lambda x: (torch.linalg.vector_norm(x, dim=-1), x.norm(p=1, dim=1), x.abs().amax(),
                                     (x > 0).any(-1), (x > -2).all(), torch.sign(x)), (r(*X),)),
    "flip_pixel_shuffle": (lambda x: (x.flip(-1, 0), F.pixel_shuffle(x[None].repeat(1, 4, 1, 1), 2)), (r(2, 3, 4),)),
    # shape manipulation
    "reshape_family": (lambda x: x.view(6, 8).reshape(2, 24).flatten() + x.reshape(-1).unflatten(0, (6, 8)).flatten(),
                       (r(*X),)),
    "permute_transpose": (lambda x: x.permute(2, 0, 1).permute(1, 2, 0).contiguous() + x.transpose(1, 2).mT.clone()
                          + x.permute(1, 0, 2).transpose(0, 1),
                          (r(*X),)),
    "t_2d": (lambda x: x.t() @ x, (r(3, 5),)),
    "squeeze_unsqueeze": (lambda x: x.unsqueeze(1).unsqueeze(-1).squeeze(-1).squeeze(1) + x[:, :1].squeeze()[:, None],
                          (r(*X),)),
    "expand_repeat": (lambda x: x[:, :1].expand(2, 3, 8) + x.sum(0).expand(2, 3, 8) + x[0, 0].repeat(2, 3, 1)
                      + x[:, :, :4].repeat(1, 1, 2), (r(*X),)),
    "slice_select_narrow": (lambda x: x[:, 1:, ::2].sum(1) + x[:, -1, 1:8:2] + x.narrow(2, 2, 4)[:, 0]
                            + x.select(1, 2)[:, -4:], (r(*X),)),
    "split_chunk_unbind": (lambda x: sum(x.split(3, -1)[0:2]) + x.chunk(4, -1)[1].repeat(1, 1, 2)[..., :3]
                           + torch.unbind(x, 1)[2][:, None, :3], (r(*X),)),
    "cat_stack": (lambda x, y: torch.cat([x, y, x * 2], -1).sum(-1) + torch.stack([x, y], 1).sum((1, 3)), (r(*X), r(*X, seed=2))),
    "pad": (lambda x: F.pad(x, (1, 2)) [..., :8] + F.pad(x, (0, 0, 1, 0))[:, :3] + F.pad(x, (1, 1), value=2.0)[..., 1:-1],
            (r(*X),)),
    # pads of the dims before the last two (MobileBERT's [0, 0, 0, 1, 0, 0]: a trailing zero pair)
    "pad_outer_dims": (lambda x: (F.pad(x, (0, 0, 0, 1, 0, 0)), F.pad(x, (1, 0, 0, 2, 2, 1), value=0.5),
                                  F.pad(x, (0, 0, 0, 0, 1, 1)), F.pad(x[None], (0, 0, 1, 0, 0, 0, 1, 2))),
                       (r(*X),)),
    # negative pads crop (RWKV's time shift: ZeroPad2d((0, 0, 1, -1)))
    "pad_negative": (lambda x: (F.pad(x, (0, 0, 1, -1)), F.pad(x, (-2, 1)), F.pad(x, (1, -3, 0, 0, -1, 1), value=0.5)),
                     (r(*X),)),
    "pad_reflect_replicate": (lambda x: F.pad(x, (2, 1, 1, 1), mode="reflect").sum() + F.pad(x, (1, 2, 0, 1), mode="replicate").sum(),
                              (r(1, 2, 5, 6),)),
    "tril_triu": (lambda x: torch.tril(x) + torch.triu(x, 1) * 2, (r(2, 5, 5),)),
    "index_gather_rows": (lambda x, i: x[:, i] + x.index_select(2, i).transpose(1, 2), (r(2, 6, 6), torch.tensor([0, 5, 2]))),
    "index_multi_const": (lambda x: x[torch.arange(2)[:, None], torch.tensor([0, 2, -1])[None, :]] + x[:, [1, 0, 1], [0, 0, 2]][..., None],
                          (r(2, 3, 4),)),
    "index_2d_idx": (lambda x, i: x[i], (r(6, 4), torch.tensor([[0, 1], [5, 2]]))),
    "gather": (lambda x, i: torch.gather(x, 1, i) + torch.gather(x, 2, i.transpose(1, 2)[:, :, :2]).sum(),
               (r(2, 5, 4), ints(4, 2, 3, 4))),
    "embedding": (lambda w, i: F.embedding(i, w), (r(10, 4), ints(10, 2, 5))),
    "bilinear": (lambda a, c, w, bias: F.bilinear(a, c, w, bias) + F.bilinear(a[0], c[0], w),
                 (r(2, 3, 4), r(2, 3, 6, seed=2), r(5, 4, 6, seed=3), r(5, seed=4))),
    "arange_full_consts": (lambda x: x + torch.arange(8) * 0.5 + torch.ones(8) + torch.full((3, 8), 2.0)
                           + torch.zeros_like(x) + x.new_ones(x.shape), (r(*X),)),
    # normalisation
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (8,), w, b, 1e-6) + F.layer_norm(x, (3, 8)) + F.layer_norm(x, (8,)),
                   (r(*X), r(8), r(8, seed=3))),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), (r(2, 4, 3, 3), r(4), r(4, seed=3))),
    "instance_norm": (lambda x, w, b, m, v: F.instance_norm(x, weight=w, bias=b, eps=1e-3) + F.instance_norm(x)
                      + F.instance_norm(x, m, v.abs() + 0.5, w, b, use_input_stats=False)
                      + F.instance_norm(x[:, :, 0], weight=w, bias=b)[:, :, None],
                      (r(2, 4, 3, 5), r(4), r(4, seed=3), r(4, seed=4), r(4, seed=5))),
    # matmul family
    "matmul_batched": (lambda a, b: a @ b + torch.matmul(a, b[0]), (r(2, 3, 4, 5), r(2, 1, 5, 6))),
    "matmul_1d": (lambda a, v: (a @ v, v @ a.transpose(-1, -2), v @ v), (r(3, 5), r(5))),
    "mm_bmm": (lambda a, b: torch.bmm(a, b).sum(0) + torch.mm(a[0], b[0]), (r(2, 3, 4), r(2, 4, 5))),
    "addmm_baddbmm": (lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0) + torch.baddbmm(c, a[None], b[None])[0]
                      + torch.addmm(c, a, b), (r(3, 5), r(3, 4), r(4, 5))),
    "linear_no_bias_1d": (lambda x, w: F.linear(x, w) + F.linear(x[0, 0], w), (r(*X), r(5, 8))),
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v) + F.scaled_dot_product_attention(q, k, v, is_causal=True)
             + F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(4, 4, dtype=torch.bool).tril())
             + F.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(4, 4), scale=0.3),
             (r(1, 2, 4, 8), r(1, 2, 4, 8, seed=1), r(1, 2, 4, 8, seed=2))),
    # convolution, pooling, resizing
    "conv2d": (lambda x, w, b, dw: F.conv2d(x, w, b, stride=2, padding=1) .sum()
               + F.conv2d(x, w, None, padding="same", dilation=2).sum()
               + F.conv2d(x, dw, None, padding=(1, 0), groups=4).sum(), (r(1, 4, 9, 9), r(6, 4, 3, 3), r(6), r(4, 1, 3, 3))),
    "conv1d": (lambda x, w, b, wt: (F.conv1d(x, w, b, stride=2, padding=1),
                                    F.conv_transpose1d(x, wt, None, stride=2, padding=1, output_padding=1)),
               (r(1, 4, 16), r(6, 4, 3), r(6), r(4, 2, 3))),
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
                         (r(1, 4, 5, 5), r(4, 3, 3, 3), r(3))),
    "pools": (lambda x: F.max_pool2d(x, 3, 2, 1).sum((2, 3)) + F.avg_pool2d(x, 2).sum((2, 3))
              + F.avg_pool2d(x, 3, 2, 1, count_include_pad=False, ceil_mode=True).sum((2, 3))
              + F.adaptive_avg_pool2d(x, 1).flatten(1) + F.adaptive_avg_pool2d(x, (4, 2)).sum((2, 3))
              + x.mean((-1, -2)), (r(2, 3, 8, 8),)),
    # functional writes into a range (Funnel's slice_scatter, x[:, a:b] = src, one index)
    "slice_select_scatter": (lambda x, y: torch.slice_scatter(x, y * 2, 2, 2, 5) + torch.slice_scatter(x, x[:, :1], 1, 2)
                             + torch.select_scatter(x, y[..., 0], 2, 7) + torch.slice_scatter(x, x[:, :0], 1, 3, 3),
                             (r(*X), r(2, 3, 3, seed=1))),
    "upsample": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest").sum() + F.interpolate(x, size=(7, 9), mode="bilinear"
                                                                                                  ).sum(),
                 (r(1, 2, 4, 5),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_aten_op_family(name, fe):
    fn, inputs = CASES[name]
    fe.check(Fn(fn), *inputs)


def test_modules_with_state(fe):
    """nn layers with parameters and buffers (batch norm running stats become constants)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6(), nn.Conv2d(8, 8, 3, groups=8),
                          nn.BatchNorm2d(8), nn.Hardswish(), nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Dropout(0.2), nn.Linear(8, 4), nn.LayerNorm(4), nn.GELU())
    for m in model:
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    result = fe.check(model, r(2, 3, 12, 12))
    kinds = {n.op_type for n in result.graph.ops}
    assert {"conv2d", "batchnorm", "clip", "max_pool2d", "matmul", "layernorm", "gelu"} <= kinds
    consts = {n.name for n in result.graph.constants}
    assert {"1.running_mean", "1.running_var", "4.running_mean", "4.running_var"} <= consts


def test_inplace_ops_are_functionalized(fe):
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.drop = nn.Dropout(0.1, inplace=True)

        def forward(self, x):
            h = self.lin(x)
            h += x
            h.relu_()
            return self.drop(h.flatten())

    result = fe.check(Residual(), r(*X))
    assert result.timings["decompose"] < 0.05  # handled without torch's full functionalization


def test_custom_decomposition_path(fe):
    """Ops without a direct mapping but with a Core-ATen decomposition still compile (einsum -> bmm ...)."""
    result = fe.check(Fn(lambda a, b: torch.einsum("bij,bjk->bik", a, b) + torch.logsumexp(a, -1, keepdim=True)
                         + F.normalize(a, dim=-1).sum() + torch.lerp(a, a * 2, 0.3).sum(-1, keepdim=True)),
                      r(2, 3, 4), r(2, 4, 5))
    assert result.timings["decompose"] > 0


def test_math_constants_fold_into_one_constant(fe):
    class WithBuffer(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("pos", torch.arange(16).reshape(2, 8).float())

        def forward(self, x):
            table = torch.sin(self.pos[:, None, :] / 10000 ** (torch.arange(8) / 8)) * math.sqrt(2)
            return x + table

    result = fe.check(WithBuffer(), r(*X))
    assert [n.op_type for n in result.graph.ops] == ["add"]
    assert len(result.graph.constants) == 1


def test_no_grad_regions_are_inlined(fe):
    """torch.export wraps ``with torch.no_grad():`` code in a higher-order op; it maps like plain code."""
    class Rotary(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8))

        def forward(self, x, positions):
            with torch.no_grad():
                freqs = positions[:, :, None].float() * self.inv_freq
                emb = torch.cat([freqs, freqs], -1)
            return x * emb.cos() + torch.cat([-x[..., 4:], x[..., :4]], -1) * emb.sin()

    result = fe.check(Rotary(), r(2, 3, 8), torch.arange(3).repeat(2, 1))
    assert not any("wrap" in str(n.tags.get("aten")) for n in result.graph.ops)
