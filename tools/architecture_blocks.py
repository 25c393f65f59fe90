"""Building blocks of published architectures that no model in ``pybuda.models`` or the Hugging Face sweep
contains, written from their papers (random weights, tiny sizes): ConvNeXt, EfficientNet's MBConv with
squeeze-excitation, Swin's shifted-window attention with its relative position bias, MLP-Mixer, ShuffleNet's
channel shuffle, DenseNet, WaveNet's gated dilated causal convolutions, an LSTM language model, a graph
convolution, PointNet, ResNeXt, a causal decoder, ViT, a U-Net skip with bilinear upsampling, SqueezeNet's
fire module, BiT's weight standardisation, a LLaMA block (RMSNorm, rotary embeddings, SwiGLU), separable 1-D
convolutions, ``F.unfold`` patches and a GLU.

``BLOCKS`` maps a name to ``(factory, *inputs)``, each input a shape (float randn) or a function of a
``torch.Generator``; ``tools/torch_idiom_sweep.py`` registers them as idioms named ``arch_<name>`` and
``tests/models/test_architecture_blocks.py`` runs them on the golden device.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvNeXtBlock(nn.Module):
    """Depthwise 7x7, channels-last LayerNorm, inverted MLP with GELU, layer scale, residual."""

    def __init__(self, c: int = 32):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class MBConv(nn.Module):
    """EfficientNet's inverted bottleneck: expand, strided depthwise, squeeze-excitation, project."""

    def __init__(self, c: int = 16, expand: int = 4):
        super().__init__()
        h = c * expand
        self.expand = nn.Sequential(nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.SiLU())
        self.dw = nn.Sequential(nn.Conv2d(h, h, 3, 2, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.SiLU())
        self.se_reduce, self.se_expand = nn.Conv2d(h, c // 4, 1), nn.Conv2d(c // 4, h, 1)
        self.project = nn.Sequential(nn.Conv2d(h, 24, 1, bias=False), nn.BatchNorm2d(24))

    def forward(self, x):
        y = self.dw(self.expand(x))
        scale = torch.sigmoid(self.se_expand(F.silu(self.se_reduce(F.adaptive_avg_pool2d(y, 1)))))
        return self.project(y * scale)


class ShiftedWindowAttention(nn.Module):
    """Swin: roll, window partition, attention with a relative position bias gathered from a table, reverse."""

    def __init__(self, c: int = 32, window: int = 4, heads: int = 2, shift: int = 2):
        super().__init__()
        self.window, self.heads, self.shift = window, heads, shift
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads) * 0.1)
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + window - 1
        self.register_buffer("index", rel[..., 0] * (2 * window - 1) + rel[..., 1])

    def forward(self, x):  # [B, H, W, C]
        b, h, w, c = x.shape
        ws, n = self.window, self.window * self.window
        x = torch.roll(x, (-self.shift, -self.shift), (1, 2))
        win = x.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, n, c)
        q, k, v = self.qkv(win).reshape(win.shape[0], n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q * (c // self.heads) ** -0.5) @ k.transpose(-2, -1)
        scores = scores + self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1).unsqueeze(0)
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(-1, n, c)
        out = self.proj(out).view(b, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        return torch.roll(out, (self.shift, self.shift), (1, 2))


class MixerBlock(nn.Module):
    """MLP-Mixer: token mixing across patches (transposed), then channel mixing."""

    def __init__(self, patches: int = 16, c: int = 32):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.tokens = nn.Sequential(nn.Linear(patches, 64), nn.GELU(), nn.Linear(64, patches))
        self.channels = nn.Sequential(nn.Linear(c, 64), nn.GELU(), nn.Linear(64, c))

    def forward(self, x):
        x = x + self.tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channels(self.norm2(x))


class ShuffleUnit(nn.Module):
    """ShuffleNet: grouped 1x1, channel shuffle (view, transpose, view), depthwise 3x3, residual."""

    def __init__(self, c: int = 16, groups: int = 4):
        super().__init__()
        self.groups = groups
        self.pw = nn.Conv2d(c, c, 1, groups=groups)
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)

    def forward(self, x):
        y = self.pw(x)
        n, c, h, w = y.shape
        y = y.view(n, self.groups, c // self.groups, h, w).transpose(1, 2).contiguous().view(n, c, h, w)
        return F.relu(self.dw(y) + x)


class DenseBlock(nn.Module):
    """DenseNet: each layer's BN-ReLU-conv output concatenated to all before it; an average-pool transition."""

    def __init__(self, c: int = 8, growth: int = 4, layers: int = 3):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.BatchNorm2d(c + i * growth), nn.ReLU(), nn.Conv2d(c + i * growth, growth, 3, padding=1))
            for i in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.cat([x, layer(x)], 1)
        return F.avg_pool2d(x, 2)


class WaveNet(nn.Module):
    """Gated (tanh * sigmoid) dilated causal convolutions with residual and skip paths, log-softmax head."""

    DILATIONS = (1, 2, 4)

    def __init__(self, c: int = 16):
        super().__init__()
        self.inp = nn.Conv1d(1, c, 1)
        self.filters = nn.ModuleList(nn.Conv1d(c, c, 2, dilation=d) for d in self.DILATIONS)
        self.gates = nn.ModuleList(nn.Conv1d(c, c, 2, dilation=d) for d in self.DILATIONS)
        self.res = nn.ModuleList(nn.Conv1d(c, c, 1) for _ in self.DILATIONS)
        self.out = nn.Conv1d(c, 8, 1)

    def forward(self, x):
        x, skip = self.inp(x), 0
        for f, g, r, d in zip(self.filters, self.gates, self.res, self.DILATIONS):
            padded = F.pad(x, (d, 0))
            z = torch.tanh(f(padded)) * torch.sigmoid(g(padded))
            skip, x = skip + z, x + r(z)
        return self.out(F.relu(skip)).log_softmax(1)


class LSTMLanguageModel(nn.Module):
    def __init__(self, vocab: int = 50):
        super().__init__()
        self.embed = nn.Embedding(vocab, 16)
        self.lstm = nn.LSTM(16, 24, num_layers=2, batch_first=True)
        self.head = nn.Linear(24, vocab)

    def forward(self, ids):
        return self.head(self.lstm(self.embed(ids))[0])


class GraphConvolution(nn.Module):
    """Kipf & Welling: the symmetric normalisation D^-1/2 (A + I) D^-1/2 of the pushed adjacency, two layers."""

    def __init__(self):
        super().__init__()
        self.w1, self.w2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x, adj):
        a = adj + torch.eye(adj.shape[-1])
        d = a.sum(-1).rsqrt()
        a = d.unsqueeze(-1) * a * d.unsqueeze(-2)
        return a @ self.w2(F.relu(a @ self.w1(x)))


class PointNet(nn.Module):
    """Shared per-point MLP (1x1 convolutions), max over the points, classifier."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Conv1d(3, 32, 1), nn.BatchNorm1d(32), nn.ReLU(), nn.Conv1d(32, 64, 1))
        self.head = nn.Linear(64, 5)

    def forward(self, x):
        return self.head(self.mlp(x).max(dim=2)[0])


class ResNeXtBlock(nn.Module):
    """Bottleneck with a grouped 3x3 convolution (cardinality 8)."""

    def __init__(self, c: int = 32):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, c, 1), nn.BatchNorm2d(c), nn.ReLU(),
                                  nn.Conv2d(c, c, 3, 1, 1, groups=8), nn.BatchNorm2d(c), nn.ReLU(),
                                  nn.Conv2d(c, c, 1), nn.BatchNorm2d(c))

    def forward(self, x):
        return F.relu(x + self.body(x))


class CausalDecoder(nn.Module):
    """Token and learned position embeddings, a pre-norm transformer layer under a causal mask built in
    forward, a vocabulary head."""

    def __init__(self, vocab: int = 40, c: int = 32):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, c), nn.Embedding(16, c)
        self.block = nn.TransformerEncoderLayer(c, 4, 64, dropout=0.0, batch_first=True, norm_first=True)
        self.head = nn.Linear(c, vocab)

    def forward(self, ids):
        t = ids.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf")), 1)
        return self.head(self.block(self.tok(ids) + self.pos(torch.arange(t)), src_mask=mask, is_causal=True))


class VisionTransformer(nn.Module):
    """Patch embedding, a class token concatenated in front, position embeddings, two encoder layers."""

    def __init__(self, c: int = 32):
        super().__init__()
        self.patch = nn.Conv2d(3, c, 4, 4)
        self.cls = nn.Parameter(torch.randn(1, 1, c))
        self.pos = nn.Parameter(torch.randn(1, 17, c) * 0.02)
        layer = nn.TransformerEncoderLayer(c, 4, 64, dropout=0.0, batch_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(c, 10)

    def forward(self, x):
        patches = self.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(x.shape[0], -1, -1), patches], 1) + self.pos
        return self.head(self.encoder(h)[:, 0])


class UpsampleSkip(nn.Module):
    """U-Net: a strided convolution, bilinear upsampling back (align_corners), concatenation with the skip."""

    def __init__(self):
        super().__init__()
        self.down, self.up = nn.Conv2d(4, 8, 3, 2, 1), nn.Conv2d(12, 4, 3, padding=1)

    def forward(self, x):
        y = F.interpolate(F.relu(self.down(x)), size=x.shape[-2:], mode="bilinear", align_corners=True)
        return self.up(torch.cat([x, y], 1))


class FireModule(nn.Module):
    """SqueezeNet: a ceil-mode max pool, a 1x1 squeeze, 1x1 and 3x3 expands concatenated."""

    def __init__(self):
        super().__init__()
        self.squeeze = nn.Conv2d(8, 4, 1)
        self.expand1, self.expand3 = nn.Conv2d(4, 8, 1), nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, x):
        q = F.relu(self.squeeze(F.max_pool2d(x, 3, 2, ceil_mode=True)))
        return torch.cat([F.relu(self.expand1(q)), F.relu(self.expand3(q))], 1)


class StandardizedConv2d(nn.Conv2d):
    """BiT: the weight standardised (mean 0, variance 1 per output channel) on every call."""

    def forward(self, x):
        w = self.weight
        mean = w.mean((1, 2, 3), keepdim=True)
        var = w.var((1, 2, 3), keepdim=True, unbiased=False)
        return F.conv2d(x, (w - mean) / torch.sqrt(var + 1e-5), self.bias, self.stride, self.padding)


class BiTBlock(nn.Module):
    def __init__(self, c: int = 16):
        super().__init__()
        self.norm, self.conv = nn.GroupNorm(4, c), StandardizedConv2d(c, c, 3, padding=1)

    def forward(self, x):
        return x + self.conv(F.relu(self.norm(x)))


class LlamaBlock(nn.Module):
    """RMSNorm, rotary position embeddings computed in forward, causal SDPA, SwiGLU feed-forward."""

    def __init__(self, c: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(c, c, bias=False) for _ in range(4))
        self.gate, self.up, self.down = nn.Linear(c, 64, bias=False), nn.Linear(c, 64, bias=False), nn.Linear(64, c, bias=False)
        self.norm1, self.norm2 = nn.Parameter(torch.ones(c)), nn.Parameter(torch.ones(c))

    @staticmethod
    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    @staticmethod
    def rope(x):
        t, d = x.shape[-2], x.shape[-1]
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        freqs = torch.outer(torch.arange(t).float(), inv)
        emb = torch.cat([freqs, freqs], -1)
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return x * emb.cos() + torch.cat([-x2, x1], -1) * emb.sin()

    def forward(self, x):
        b, t, c = x.shape
        y = self.rms(x, self.norm1)
        q, k, v = (w(y).view(b, t, self.heads, -1).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        o = F.scaled_dot_product_attention(self.rope(q), self.rope(k), v, is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, t, c))
        y = self.rms(x, self.norm2)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class SeparableConv1d(nn.Module):
    """Depthwise then pointwise 1-D convolution, BatchNorm1d, hard-swish, adaptive average pool."""

    def __init__(self):
        super().__init__()
        self.dw, self.pw = nn.Conv1d(8, 8, 5, padding=2, groups=8), nn.Conv1d(8, 16, 1)
        self.norm = nn.BatchNorm1d(16)

    def forward(self, x):
        return F.adaptive_avg_pool1d(F.hardswish(self.norm(self.pw(self.dw(x)))), 4).flatten(1)


class UnfoldPatches(nn.Module):
    """``F.unfold`` 3x3 patches (im2col by hand) into a linear layer."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4 * 9, 6)

    def forward(self, x):
        return self.linear(F.unfold(x, 3, padding=1).transpose(1, 2))


class GatedConv1d(nn.Module):
    """A convolution whose channels are halved by a GLU, then a linear layer over the channels."""

    def __init__(self):
        super().__init__()
        self.conv, self.linear = nn.Conv1d(8, 16, 3, padding=1), nn.Linear(8, 8)

    def forward(self, x):
        return self.linear(F.glu(self.conv(x), dim=1).transpose(1, 2))


def with_running_statistics(module: nn.Module) -> nn.Module:
    """``module`` with non-trivial batch-norm running statistics (fresh ones are 0 and 1: an identity)."""
    g = torch.Generator().manual_seed(0)
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=g) - 0.5)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
    return module


def _token_ids(vocab: int):
    return lambda g: torch.randint(0, vocab, (2, 12), generator=g)


def _adjacency(g: torch.Generator) -> torch.Tensor:
    a = (torch.rand(2, 10, 10, generator=g) > 0.6).float()
    return ((a + a.transpose(1, 2)) > 0).float()


BLOCKS = {
    "convnext": (ConvNeXtBlock, (1, 32, 14, 14)),
    "mbconv": (lambda: with_running_statistics(MBConv()), (1, 16, 16, 16)),
    "swin_window_attention": (ShiftedWindowAttention, (1, 8, 8, 32)),
    "mlp_mixer": (MixerBlock, (2, 16, 32)),
    "shufflenet_unit": (ShuffleUnit, (1, 16, 8, 8)),
    "densenet_block": (lambda: with_running_statistics(DenseBlock()), (1, 8, 8, 8)),
    "wavenet": (WaveNet, (1, 1, 64)),
    "lstm_language_model": (LSTMLanguageModel, _token_ids(50)),
    "graph_convolution": (GraphConvolution, (2, 10, 8), _adjacency),
    "pointnet": (lambda: with_running_statistics(PointNet()), (2, 3, 64)),
    "resnext_block": (lambda: with_running_statistics(ResNeXtBlock()), (1, 32, 8, 8)),
    "causal_decoder": (CausalDecoder, _token_ids(40)),
    "vision_transformer": (VisionTransformer, (2, 3, 16, 16)),
    "unet_upsample_skip": (UpsampleSkip, (1, 4, 12, 12)),
    "squeezenet_fire": (FireModule, (1, 8, 15, 15)),
    "bit_weight_standardization": (BiTBlock, (1, 16, 8, 8)),
    "llama_block": (LlamaBlock, (2, 12, 32)),
    "separable_conv1d": (lambda: with_running_statistics(SeparableConv1d()), (2, 8, 32)),
    "unfold_patches": (UnfoldPatches, (1, 4, 6, 6)),
    "gated_conv1d": (GatedConv1d, (2, 8, 10)),
}
