"""Sweep of training on the simulated chip: small PyTorch models trained a few steps on a golden ``TTDevice``
(Float32, HiFi4, Wormhole B0) and in torch from the same initial weights on the same batches, with the same
optimizer rule, and compared step by step.

Each case is a model, a torch loss (on a ``CPUDevice`` after the TTDevice, or placed on the TTDevice itself),
an optimizer (``sgd``, ``adam``, ``adamw``: pybuda's on the device, torch's own in the twin), a microbatch size
and a number of accumulated microbatches per optimizer step. The losses of every microbatch must follow
torch's (``LOSS_RTOL`` / ``LOSS_ATOL``); every parameter's final value must be allclose to torch's
(``W_RTOL``, and ``W_ATOL`` times the largest step torch took in that parameter) and its total update must
correlate with torch's (PCC >= ``PCC_MIN``). Frozen parameters (``requires_grad=False``) must not move.
Outcomes, as in the other sweeps:

    DEVICE            every program ran on the device, matches torch
    PARTIAL-FALLBACK  matches torch, with CPU-fallback stages or programs placed on the host (listed)
    CLEAR-ERROR       a ``pybuda.errors.PybudaError`` (the message is printed: judge its clarity)
    WRONG             no error, but a loss or a parameter differs from torch's, also when the golden backend
                      computes in plain float32: the program is wrong
    CRASH             any other exception, or no answer within the timeout (a hang)
    NUMERICS          differs with the chip's arithmetic (TF32-like FPU operands) but matches in plain float32:
                      a run sensitive to rounding (an Adam step of a near-zero gradient), not a wrong program

Every case runs in its own subprocess::

    python tools/training_sweep.py                         # every case
    python tools/training_sweep.py --filter 'mlp|bert'     # a regex over case names
    python tools/training_sweep.py --one mlp_relu-adam -v  # in-process, with the traceback and the reports
    python tools/training_sweep.py --list
    python tools/training_sweep.py --random-graphs 0-199  # random graphs (tools/random_graphs.py) trained instead

The transformers are the tiny configurations of ``tools/hf_model_sweep.py``; a few layers (depthwise and
transposed convolutions, instance norm, bilinear, GRU) are ``tools/torch_idiom_sweep.py``'s modules.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import queue
import re
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _p in (ROOT, os.path.join(ROOT, "tools")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

CLASSES = ("DEVICE", "PARTIAL-FALLBACK", "CLEAR-ERROR", "WRONG", "CRASH", "NUMERICS")
TIMEOUT_S = 300
STEPS = 3

#: Per-microbatch losses against torch's: the chip's Float32 matmuls multiply in TF32.
LOSS_RTOL, LOSS_ATOL = 2e-2, 1e-4
#: Final parameters against torch's: ``rtol`` of the value, plus ``W_ATOL`` of the largest step torch took in the
#: parameter (an Adam step is lr·sign(g) wherever |g| >> eps, so TF32 noise in a near-zero gradient moves an
#: element by up to 2·lr; ``ADAM_OUTLIERS`` of a parameter's elements may do that).
W_RTOL, W_ATOL = 1e-2, 5e-2
#: ... and this absolute floor: a parameter whose gradient is 0 up to rounding (attention's key bias) moves by
#: rounding noise times lr, on the device and in torch alike.
W_ATOL_FLOOR = 1e-6
ADAM_OUTLIERS = 0.01
#: Adam steps an element by lr·g/|g| however small g is: an element whose torch gradient never exceeds this
#: fraction of the model's largest gradient (a conv bias before a batch norm, whose gradient is 0 up to
#: rounding) steps by the sign of rounding noise, on the device and in torch alike, and is not compared.
ADAM_NOISE_GRAD = 1e-5
#: The total update of each parameter against torch's.
PCC_MIN = 0.99
#: A parameter whose torch update is below this (relative to the parameter's magnitude) is only checked by allclose.
TINY_UPDATE = 1e-7
#: A trainable parameter torch leaves exactly where it was (its gradient cancels to 0: a layer norm's weight on
#: constant rows, a bias before a batch norm) may move on the device by rounding: a gradient of up to this
#: fraction of the model's largest one (TF32 operands keep 10 mantissa bits) at every step. A frozen parameter
#: (``requires_grad=False``, or left out of the optimizer) must not move at all.
ZERO_GRAD_NOISE = 2.0 ** -10
#: An update whose spread across a parameter's elements is below this fraction of its largest element is uniform.
UNIFORM_UPDATE = 1e-3
#: A run whose torch loss grows past this multiple of its first (or is not finite) diverges: not compared.
DIVERGED = 1e3

OPTIMIZERS = ("sgd", "adam", "adamw")
LR = {"sgd": 0.05, "adam": 1e-3, "adamw": 1e-3}


# --------------------------------------------------------------------------------------------------- data


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def floats(*shape: int) -> Callable[[torch.Generator, int], torch.Tensor]:
    """Random normal data, ``shape`` per sample (the microbatch dim is prepended)."""
    return lambda g, mb: torch.randn(mb, *shape, generator=g)


def ids(vocab: int, *shape: int, low: int = 0) -> Callable[[torch.Generator, int], torch.Tensor]:
    return lambda g, mb: torch.randint(low, vocab, (mb, *shape), generator=g)


def classes(n: int, *shape: int) -> Callable[[torch.Generator, int], torch.Tensor]:
    return ids(n, *shape)


def labels_with_ignored(n: int, *shape: int, ignored: int = -100) -> Callable[[torch.Generator, int], torch.Tensor]:
    """Class ids with about a quarter of them set to ``ignored`` (a loss's ``ignore_index``: padding tokens)."""
    def make(g: torch.Generator, mb: int) -> torch.Tensor:
        t = torch.randint(0, n, (mb, *shape), generator=g)
        return torch.where(torch.rand(t.shape, generator=g) < 0.25, torch.full_like(t, ignored), t)
    return make


def bits(*shape: int) -> Callable[[torch.Generator, int], torch.Tensor]:
    return lambda g, mb: (torch.rand(mb, *shape, generator=g) > 0.5).float()


# ------------------------------------------------------------------------------------------------- losses


class TokenCrossEntropy(nn.Module):
    """Cross entropy over the last dim of ``[..., classes]`` logits against ``[...]`` class ids."""

    def __init__(self, label_smoothing: float = 0.0, ignore_index: int = -100, reduction: str = "mean"):
        super().__init__()
        self.label_smoothing = label_smoothing
        self.ignore_index = ignore_index
        self.reduction = reduction

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, -2), target.flatten(), label_smoothing=self.label_smoothing,
                               ignore_index=self.ignore_index, reduction=self.reduction)


LOSSES: Dict[str, Callable[[], nn.Module]] = {
    "mse": nn.MSELoss,
    "mse_sum": lambda: nn.MSELoss(reduction="sum"),
    "l1": nn.L1Loss,
    "smooth_l1": nn.SmoothL1Loss,
    "ce": nn.CrossEntropyLoss,
    "ce_smooth": lambda: nn.CrossEntropyLoss(label_smoothing=0.1),
    "token_ce": TokenCrossEntropy,
    "token_ce_smooth": lambda: TokenCrossEntropy(label_smoothing=0.1),
    "token_ce_sum": lambda: TokenCrossEntropy(reduction="sum"),
    "bce_logits": nn.BCEWithLogitsLoss,
    "nll": nn.NLLLoss,
}


# ------------------------------------------------------------------------------------------------- models


def _seeded(make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def build():
        torch.manual_seed(0)
        return make()
    return build


ACTIVATIONS: Dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU, "gelu": nn.GELU, "gelu_tanh": lambda: nn.GELU(approximate="tanh"), "silu": nn.SiLU,
    "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "leaky_relu": lambda: nn.LeakyReLU(0.1), "elu": nn.ELU,
    "softplus": nn.Softplus, "mish": nn.Mish, "hardswish": nn.Hardswish, "relu6": nn.ReLU6,
}


def mlp(act: str) -> nn.Module:
    return nn.Sequential(nn.Linear(20, 48), ACTIVATIONS[act](), nn.Linear(48, 40), ACTIVATIONS[act](),
                         nn.Linear(40, 10))


class CnnBN(nn.Module):
    """conv → batch norm → relu → max pool → conv → batch norm → relu → global average pool → linear."""

    def __init__(self, norm: str = "bn"):
        super().__init__()
        def nrm(c):
            return nn.BatchNorm2d(c) if norm == "bn" else nn.GroupNorm(2, c)
        self.c1, self.n1 = nn.Conv2d(3, 8, 3, padding=1), nrm(8)
        self.c2, self.n2 = nn.Conv2d(8, 16, 3, padding=1), nrm(16)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.n1(self.c1(x))), 2)
        x = torch.relu(self.n2(self.c2(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class ResBlockNet(nn.Module):
    """A stem conv and two residual basic blocks (the second downsamples with a 1x1 projection)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.b1 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8))
        self.b2 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16))
        self.proj = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2, bias=False), nn.BatchNorm2d(16))
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.b1(x))
        x = torch.relu(self.proj(x) + self.b2(x))
        return self.fc(x.mean((2, 3)))


class DepthwiseNet(nn.Module):
    """MobileNet-style: depthwise 3x3 (stride 2), pointwise 1x1, ReLU6, average pool, linear."""

    def __init__(self):
        super().__init__()
        self.c0 = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.pw = nn.Conv2d(8, 16, 1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        x = F.relu6(self.c0(x))
        x = F.relu6(self.pw(F.relu6(self.dw(x))))
        return self.fc(F.avg_pool2d(x, 4).flatten(1))


class Conv1dNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 8, 3, padding=1)
        self.c2 = nn.Conv1d(8, 8, 3, stride=2)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        x = F.gelu(self.c2(torch.tanh(self.c1(x))))
        return self.fc(F.avg_pool1d(x, x.shape[-1]).flatten(1))


class EmbedLN(nn.Module):
    """Token embedding + learned positions, layer norm, dropout (p=0), a GELU MLP and a classification head
    over the mean token."""

    def __init__(self, vocab=40, d=32, seq=8, classes=6):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.1)
        self.ln = nn.LayerNorm(d)
        self.drop = nn.Dropout(0.0)
        self.ff = nn.Sequential(nn.Linear(d, 64), nn.GELU(), nn.Linear(64, d))
        self.head = nn.Linear(d, classes)

    def forward(self, ids):
        h = self.drop(self.ln(self.tok(ids) + self.pos))
        h = h + self.ff(h)
        return self.head(h.mean(1))


class TiedLM(nn.Module):
    """A language model whose output head is its input embedding (weight tying)."""

    def __init__(self, vocab=50, d=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.mid = nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(self.ln(torch.tanh(self.mid(self.emb(ids)))))


class FrozenTrunk(nn.Module):
    """A frozen first layer and frozen layer norm (requires_grad False), trainable head."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(20, 32)
        self.ln = nn.LayerNorm(32)
        self.head = nn.Linear(32, 10)
        for p in (*self.trunk.parameters(), *self.ln.parameters()):
            p.requires_grad_(False)

    def forward(self, x):
        return self.head(F.silu(self.ln(self.trunk(x))))


class SortMiddle(nn.Module):
    """Linears around a sort (on the device: gradients routed through its permutation matrix)."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(20, 16), nn.Linear(16, 16), nn.Linear(16, 10)

    def forward(self, x):
        h = torch.relu(self.b(torch.sort(self.a(x), dim=-1).values))
        return self.c(h)


class PerSampleGCN(nn.Module):
    """Message passing over each sample's own pushed edges: gather by source, ``scatter_add`` into targets."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 6)

    def forward(self, x, src, dst):  # x [mb, 7, 8], src/dst [mb, 12] in [0, 7)
        h = self.lin(x)
        msg = torch.gather(h, 1, src.unsqueeze(-1).expand(-1, -1, h.shape[-1]))
        agg = torch.zeros_like(h).scatter_add(1, dst.unsqueeze(-1).expand(-1, -1, h.shape[-1]), msg)
        return torch.tanh(agg + h)


class StickBreakingHead(nn.Module):
    """Stick-breaking mixture weights (a cumprod of 1 - v) and their product with the experts' outputs."""

    def __init__(self):
        super().__init__()
        self.gate, self.experts = nn.Linear(20, 6), nn.Linear(20, 60)

    def forward(self, x):
        v = torch.sigmoid(self.gate(x))
        rest = torch.cumprod(1 - v, -1)
        w = v * torch.cat([torch.ones_like(rest[..., :1]), rest[..., :-1]], -1)
        outs = self.experts(x).unflatten(-1, (6, 10))
        return (w.unsqueeze(-1) * outs).sum(-2) + outs.prod(-2)


class MoETop2(nn.Module):
    """A mixture of experts routed by top-2 gating (topk, then a gather of the chosen experts' outputs)."""

    def __init__(self, d: int = 16, experts: int = 4):
        super().__init__()
        self.gate = nn.Linear(d, experts)
        self.experts = nn.ModuleList([nn.Linear(d, d) for _ in range(experts)])

    def forward(self, x):
        weights, chosen = self.gate(x).softmax(-1).topk(2, dim=-1)
        outs = torch.stack([e(x) for e in self.experts], dim=-2)
        picked = torch.gather(outs, -2, chosen[..., None].expand(*chosen.shape, x.shape[-1]))
        return (picked * (weights / weights.sum(-1, keepdim=True))[..., None]).sum(-2)


class ComplexRotary(nn.Module):
    """A projection rotated by complex rotary embeddings (Meta Llama's view_as_complex form)."""

    def __init__(self, d: int = 32, length: int = 8):
        super().__init__()
        self.proj = nn.Linear(d, d)
        angles = torch.outer(torch.arange(length, dtype=torch.float32), 1.0 / 100 ** (torch.arange(0, d, 2) / d))
        self.register_buffer("cis", torch.polar(torch.ones_like(angles), angles))

    def forward(self, x):
        z = torch.view_as_complex(self.proj(x).reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(z * self.cis).flatten(-2)


class BesselMiddle(SortMiddle):
    """Linears around a Bessel function (no device form): the model trains partly on the CPU."""

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.special.i0(self.a(x)))))


class TinyAttention(nn.Module):
    """One pre-norm transformer block from torch primitives: multi-head attention and a GELU MLP."""

    def __init__(self, d=32, heads=4, classes=5):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True, dropout=0.0)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.ff(self.ln2(x))
        return self.head(x[:, 0])


class MultiLabel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.0), nn.Linear(32, 8))

    def forward(self, x):
        return self.net(x)


class LogSoftmaxHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 7))

    def forward(self, x):
        return F.log_softmax(self.net(x), -1)


def _hf(kind: str) -> Callable[[], nn.Module]:
    """A tiny transformers model from ``tools/hf_model_sweep.py``'s builders, in training mode (its configs
    set every dropout to 0); the first input is taken by the case's data."""
    import hf_model_sweep as hf

    builders = {
        "bert": hf._encoder("BertConfig", "BertForSequenceClassification", field="logits", mask=False,
                            num_labels=3),
        "gpt2": hf._causal("GPT2Config", "GPT2LMHeadModel", n_embd=64, n_layer=2, n_head=4, n_positions=64),
        "t5": hf._seq2seq("T5Config", "T5ForConditionalGeneration", **hf.T5),
        "vit": hf._vision("ViTConfig", "ViTForImageClassification", hidden_size=64, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=128, image_size=hf.IMG, patch_size=8,
                          num_labels=10),
    }

    def build():
        module, _ = builders[kind]()
        return module.train()
    return build


def _idiom(name: str):
    """``(model factory, per-sample input makers, per-sample target maker)`` for the float-input idiom ``name`` of
    ``tools/torch_idiom_sweep.py`` (its module, trained against random targets of its output's shape)."""
    import torch_idiom_sweep as tis

    factory, make_inputs = tis.CASES[name]
    sample = make_inputs()
    with torch.no_grad():
        out = factory()(*sample)
    out = out[0] if isinstance(out, (tuple, list)) else out
    return factory, [floats(*t.shape[1:]) for t in sample], floats(*out.shape[1:])


def add_idiom(name: str, optimizers=("sgd",), **kw) -> None:
    try:
        factory, inputs, target = _idiom(name)
    except Exception:  # noqa: BLE001 -- an idiom missing from this checkout's sweep: no case
        return
    add(f"idiom_{name}", factory, inputs, target, "mse", optimizers=optimizers, **kw)


@dataclass
class Case:
    """One training case: ``model()`` (seeded before the call), ``inputs`` (per-sample data makers), ``target``,
    the loss (a :data:`LOSSES` key), the optimizer, samples per microbatch, microbatches per optimizer step
    (``accumulation`` optimizer-step accumulations of ``count`` microbatches each: run_training's
    ``accumulation_steps`` and ``microbatch_count``), where the loss runs (``loss_on_device``: placed on the TTDevice), and ``only``: the
    names of the parameters the optimizer is given (default: all of them)."""

    name: str
    model: Callable[[], nn.Module]
    inputs: Tuple[Callable[[torch.Generator, int], torch.Tensor], ...]
    target: Callable[[torch.Generator, int], torch.Tensor]
    loss: str
    optimizer: str = "sgd"
    mb: int = 2
    accumulation: int = 1
    count: int = 1
    loss_on_device: bool = False
    train_mode: bool = True
    lr: Optional[float] = None
    only: Optional[Tuple[str, ...]] = None
    note: str = ""


CASES: Dict[str, Case] = {}


def add(name: str, model, inputs, target, loss, optimizers=("sgd", "adam"), **kw) -> None:
    for opt in optimizers:
        CASES[f"{name}-{opt}"] = Case(f"{name}-{opt}", _seeded(model), tuple(inputs), target, loss, opt, **kw)


# MLPs with every common activation (MSE regression, CE classification)
for _act in ACTIVATIONS:
    add(f"mlp_{_act}", lambda a=_act: mlp(a), [floats(20)], floats(10), "mse",
        optimizers=("sgd", "adam") if _act in ("relu", "gelu") else ("sgd",))
add("mlp_ce", lambda: mlp("relu"), [floats(20)], classes(10), "ce", optimizers=("sgd", "adamw"))
add("mlp_ce_smooth", lambda: mlp("tanh"), [floats(20)], classes(10), "ce_smooth", optimizers=("adam",))
add("mlp_l1", lambda: mlp("silu"), [floats(20)], floats(10), "l1", optimizers=("sgd",))
add("mlp_smooth_l1", lambda: mlp("gelu"), [floats(20)], floats(10), "smooth_l1", optimizers=("sgd",))
add("mlp_bce", MultiLabel, [floats(16)], bits(8), "bce_logits", optimizers=("sgd", "adamw"))
add("mlp_nll", LogSoftmaxHead, [floats(16)], classes(7), "nll", optimizers=("sgd",))
add("mlp_seq_mse", lambda: mlp("relu"), [floats(5, 20)], floats(5, 10), "mse_sum", optimizers=("sgd",))
# gradient accumulation and several microbatches
add("mlp_accum3", lambda: mlp("gelu"), [floats(20)], floats(10), "mse", optimizers=("sgd", "adam"),
    accumulation=3)
add("mlp_count2_accum2", lambda: mlp("tanh"), [floats(20)], floats(10), "mse", optimizers=("sgd",), count=2,
    accumulation=2)
add("mlp_mb4_accum2", lambda: mlp("relu"), [floats(20)], classes(10), "ce", optimizers=("adamw",), mb=4,
    accumulation=2)
# losses on the device (a torch loss module compiled beside the model)
add("mlp_devloss_mse", lambda: mlp("relu"), [floats(20)], floats(10), "mse", optimizers=("sgd",),
    loss_on_device=True)
add("mlp_devloss_ce", lambda: mlp("relu"), [floats(20)], classes(10), "ce", optimizers=("sgd",),
    loss_on_device=True)
add("mlp_devloss_token_ce_ignored", lambda: mlp("gelu"), [floats(4, 20)], labels_with_ignored(10, 4), "token_ce_sum",
    optimizers=("sgd", "adam"), loss_on_device=True, note="padding tokens (-100) ignored by a summed loss on the device")
# conv nets
add("cnn_bn_mb1", lambda: CnnBN("bn"), [floats(3, 8, 8)], classes(5), "ce", mb=1)
add("cnn_bn_frozen", lambda: CnnBN("bn"), [floats(3, 8, 8)], classes(5), "ce", train_mode=False, optimizers=("sgd",),
    note="batch norm in eval mode (running statistics)")
add("cnn_bn_mb2", lambda: CnnBN("bn"), [floats(3, 8, 8)], classes(5), "ce", optimizers=("sgd",),
    note="batch statistics over a microbatch of 2: refused by design (the device runs samples one by one)")
add("cnn_groupnorm", lambda: CnnBN("gn"), [floats(3, 8, 8)], classes(5), "ce", optimizers=("adam",))
add("resnet_blocks", ResBlockNet, [floats(3, 8, 8)], floats(4), "mse", optimizers=("sgd",), mb=1)
add("depthwise", DepthwiseNet, [floats(3, 8, 8)], classes(5), "ce")
add("conv1d", Conv1dNet, [floats(4, 12)], classes(3), "ce_smooth", optimizers=("sgd",))
# embeddings, layer norm, weight tying, frozen parameters, CPU fallback
add("embed_ln", EmbedLN, [ids(40, 8)], classes(6), "ce")
add("tied_lm", TiedLM, [ids(50, 6)], ids(50, 6), "token_ce", optimizers=("sgd", "adamw"))
add("frozen_trunk", FrozenTrunk, [floats(20)], floats(10), "mse", optimizers=("sgd", "adam"))
add("optimize_subset", lambda: mlp("relu"), [floats(20)], floats(10), "mse", optimizers=("sgd", "adam"),
    only=("2.weight", "2.bias", "4.weight"), note="the optimizer is given some parameters: the others stay")
add("optimize_subset_fallback", BesselMiddle, [floats(20)], floats(10), "mse", optimizers=("sgd",),
    only=("b.weight", "c.weight"), note="parameters of CPU-fallback stages left out of the optimizer stay")
add("cpu_fallback", BesselMiddle, [floats(20)], floats(10), "mse", optimizers=("sgd",))
add("moe_top2", MoETop2, [floats(6, 16)], floats(6, 16), "mse", optimizers=("sgd", "adam"))
add("rope_complex", ComplexRotary, [floats(8, 32)], floats(8, 32), "mse", optimizers=("sgd",))
add("sort_middle", SortMiddle, [floats(20)], floats(10), "l1", optimizers=("sgd",))
add("stick_breaking", StickBreakingHead, [floats(20)], floats(10), "mse", optimizers=("sgd", "adam"))
add("gcn_per_sample", PerSampleGCN, [floats(7, 8), ids(7, 12), ids(7, 12)], floats(7, 6), "mse",
    optimizers=("sgd", "adam"))
add("mha_block", TinyAttention, [floats(6, 32)], classes(5), "ce", optimizers=("sgd", "adam"))
# layers from tools/torch_idiom_sweep.py
for _name in ("conv2d_depthwise", "convT2d", "instance_norm", "bilinear", "gru_bidir1_bf", "conv3d"):
    add_idiom(_name)
# small transformers (tools/hf_model_sweep.py)
add("hf_bert", _hf("bert"), [ids(256, 16, low=3)], classes(3), "ce", optimizers=("sgd", "adamw"), mb=1)
add("hf_gpt2", _hf("gpt2"), [ids(256, 16, low=3)], ids(256, 16), "token_ce_smooth", optimizers=("adam",), mb=1)
add("hf_t5", _hf("t5"), [ids(256, 16, low=3), ids(256, 16, low=0), ids(256, 8, low=3)], ids(256, 8),
    "token_ce", optimizers=("sgd",), mb=1)
add("hf_vit", _hf("vit"), [floats(3, 32, 32)], classes(10), "ce", optimizers=("adamw",), mb=1)


# random graphs (tools/random_graphs.py), trained: ``--random-graphs SEEDS``
RANDOM_GRAPH_CASE = re.compile(r"random_graph_(\d+)-sgd$")
#: The random graphs' weights and op mixes are arbitrary: a smaller step than the cases' keeps most from diverging,
#: where float32 rounding alone sends torch's own run elsewhere.
RANDOM_GRAPH_LR = 0.01


class FlatOutputs(nn.Module):
    """A module whose outputs, each ``[B, ...]``, are flattened per sample and concatenated into one ``[B, N]``:
    one tensor a loss can compare with a target."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        out = self.inner(*xs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return torch.cat([o.reshape(o.shape[0], -1) for o in outs], 1)


def add_random_graph(seed: int) -> bool:
    """Register ``random_graph_<seed>-sgd``: the random graph of ``seed`` (its module with its seeded weights, in
    eval mode: a batch norm keeps its running statistics) trained with SGD and an MSE loss on its outputs,
    flattened per sample (:class:`FlatOutputs`). Only graphs with parameters whose float inputs and outputs all
    share one leading (batch) dim qualify: the device trains a microbatch sample by sample. Returns whether
    it was registered."""
    import random_graphs

    model = random_graphs.generate(seed, classic=False, batch_mix=False)
    module, inputs = random_graphs.instantiate(model)
    if not any(p.requires_grad for p in module.parameters()):
        return False
    if not inputs or any(not t.is_floating_point() or t.dim() < 1 for t in inputs):
        return False
    mb = inputs[0].shape[0]
    with torch.no_grad():
        out = module(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if any(t.shape[0] != mb for t in inputs) or \
            any(not isinstance(o, torch.Tensor) or not o.is_floating_point() or o.dim() < 1 or o.shape[0] != mb
                for o in outs):
        return False
    width = sum(o[0].numel() for o in outs)

    def make() -> nn.Module:
        return FlatOutputs(random_graphs.instantiate(model)[0])

    add(f"random_graph_{seed}", make, [floats(*t.shape[1:]) for t in inputs], floats(width), "mse",
        optimizers=("sgd",), mb=mb, train_mode=False, lr=RANDOM_GRAPH_LR, note="random graph, eval mode")
    return True


# ------------------------------------------------------------------------------------------------ running


def _batches(case: Case) -> List[Tuple[Tuple[torch.Tensor, ...], torch.Tensor]]:
    g = _g(1234)
    out = []
    for _ in range(STEPS * case.accumulation * case.count):
        xs = tuple(make(g, case.mb) for make in case.inputs)
        if case.name.startswith("hf_t5"):  # an attention mask: ones, the last 3 positions padded
            xs = (xs[0], torch.ones_like(xs[1]).index_fill_(1, torch.arange(13, 16), 0), xs[2])
        out.append((xs, case.target(g, case.mb)))
    return out


def _torch_optimizer(kind: str, params, lr: float) -> torch.optim.Optimizer:
    """torch's own optimizer with the rule of pybuda's ``kind`` at its defaults."""
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8)
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


def _pybuda_optimizer(kind: str, lr: float, only: Optional[Tuple[str, ...]] = None):
    import pybuda

    params = list(only) if only is not None else None
    if kind == "sgd":
        return pybuda.optimizers.SGD(learning_rate=lr, parameters=params)
    if kind == "adam":
        return pybuda.optimizers.Adam(learning_rate=lr, parameters=params)
    return pybuda.optimizers.AdamW(learning_rate=lr, parameters=params)


def train_in_torch(case: Case, model: nn.Module, data):
    """``(losses, final parameters, each element's largest gradient)`` of ``case`` trained in torch."""
    loss_fn = LOSSES[case.loss]()
    lr = case.lr or LR[case.optimizer]
    opt = _torch_optimizer(case.optimizer, [p for n, p in model.named_parameters()
                                            if p.requires_grad and (case.only is None or n in case.only)], lr)
    losses = []
    grad_max = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    per_step = case.accumulation * case.count
    for step in range(STEPS):
        opt.zero_grad()
        for x, y in data[step * per_step:(step + 1) * per_step]:
            loss = loss_fn(model(*x), y)
            loss.backward()
            losses.append(float(loss.detach()))
        for n, p in model.named_parameters():
            if p.grad is not None:
                grad_max[n] = torch.maximum(grad_max[n], p.grad.abs())
        opt.step()
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}, grad_max


def train_on_device(case: Case, model: nn.Module, data, exact: bool = False):
    """``(losses, final parameters by torch name, placement notes)`` of ``case`` trained on a golden TTDevice."""
    import pybuda
    from pybuda.runtime import training

    pybuda.pybuda_reset()
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                     accumulate_df=pybuda.DataFormat.Float32,
                                     math_fidelity=pybuda.MathFidelity.HiFi4)
    if exact:
        pybuda.set_configuration_options(golden_ignore_df_precision=True)
    lr = case.lr or LR[case.optimizer]
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule(case.name.replace("-", "_"), model),
                          optimizer=_pybuda_optimizer(case.optimizer, lr, case.only), fp32_fallback=pybuda.DataFormat.Float32,
                          arch=pybuda.BackendDevice.Wormhole_B0)
    loss_module = pybuda.PyTorchModule("loss", LOSSES[case.loss]())
    if case.loss_on_device:
        tt0.place_loss_module(loss_module)
        last = tt0
    else:
        last = pybuda.CPUDevice("cpu_loss")
        last.place_loss_module(loss_module)
    for x, y in data:
        tt0.push_to_inputs(x)
        last.push_to_target_inputs(y)
    loss_q: queue.Queue = queue.Queue()
    import pybuda.frontend.torch as frontend

    reports: List[Any] = []
    real_capture = frontend.capture

    def capture(*args: Any, **kwargs: Any):  # keep the fallback report of the split (as hf_model_sweep does)
        got = real_capture(*args, **kwargs)
        reports.append(got.report)
        return got

    frontend.capture = capture
    try:
        ckpt = pybuda.run_training(steps=STEPS, accumulation_steps=case.accumulation,
                                   microbatch_count=case.count, loss_queue=loss_q).get()[0]
        losses = [float(loss_q.get_nowait()[0].value().sum()) for _ in data]
        session = training.current()
        notes = []
        if tt0.cpu_fallback_device_pre is not None or tt0.cpu_fallback_device_post is not None:
            ops = sorted({op for r in reports if r.has_fallback for op in r.op_names()})
            notes.append("host ops: " + (", ".join(ops) if ops else "?"))
        report = session.trainer_of(tt0).report if session is not None else []
        notes += [line for line in report if not line.startswith("training netlist") and not line.endswith(": device")]
        return losses, {k: v.value() for k, v in ckpt.items()}, notes
    finally:
        frontend.capture = real_capture
        try:
            pybuda.shutdown()
        except Exception:  # noqa: BLE001 -- the result is what matters
            pass


def _pcc(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.flatten().double(), b.flatten().double()
    if a.numel() < 2 or float(a.std()) == 0 or float(b.std()) == 0:
        return 1.0 if torch.allclose(a, b, rtol=1e-6, atol=1e-12) else 0.0
    return float(torch.corrcoef(torch.stack([a, b]))[0, 1])


def compare(case: Case, got_losses, got_params, want_losses, want_params, initial, grad_max,
            frozen=frozenset()) -> List[str]:
    """What differs between the device's run and torch's (empty: they agree). ``frozen``: names of the parameters
    the optimizer does not train."""
    problems = []
    top = max((float(g.max()) for g in grad_max.values() if g.numel()), default=0.0)
    lr = case.lr or LR[case.optimizer]
    adam_like = case.optimizer in ("adam", "adamw")
    # How far rounding moves a parameter whose torch gradient is exactly 0: SGD steps by lr times the gradient (a
    # sum over the step's microbatches); Adam steps by up to lr whatever the gradient's size (its sign is noise).
    if adam_like:
        rounding_move = W_ATOL_FLOOR + 2 * lr * STEPS
    else:
        rounding_move = W_ATOL_FLOOR + lr * STEPS * case.accumulation * case.count * ZERO_GRAD_NOISE * top
    if len(got_losses) != len(want_losses):
        problems.append(f"{len(got_losses)} losses, torch has {len(want_losses)}")
    for i, (g, w) in enumerate(zip(got_losses, want_losses)):
        if not abs(g - w) <= LOSS_RTOL * abs(w) + LOSS_ATOL:
            problems.append(f"loss {i}: {g:.6g} vs torch {w:.6g}")
            break
    trainable = {n for n, p in want_params.items() if not torch.equal(p, initial[n])}
    missing = sorted(trainable - set(got_params))
    if missing:
        problems.append(f"checkpoint lacks {missing[:4]}")
    for name, want in want_params.items():
        if name not in got_params:
            continue
        got = got_params[name].reshape(want.shape).float()
        step_t, step_d = want - initial[name], got - initial[name]
        scale = float(step_t.abs().max())
        if name not in trainable:
            moved = float(step_d.abs().max())
            if moved > (0.0 if name in frozen else rounding_move):
                problems.append(f"{name}: not trained in torch, moved by {moved:.3g} on the device")
            continue
        bad = ~torch.isclose(got, want, rtol=W_RTOL, atol=W_ATOL * scale + W_ATOL_FLOOR)
        allowed = 0
        if adam_like:
            noise = grad_max[name] <= ADAM_NOISE_GRAD * top
            bad &= ~noise
            step_t, step_d = step_t[~noise], step_d[~noise]
            # a flipped step is at most 2·lr per step away; more than that is not the sign of a small gradient
            flips = (got - want).abs() <= 2 * (case.lr or LR[case.optimizer]) * STEPS + W_ATOL * scale
            allowed = max(1, int(ADAM_OUTLIERS * bad.numel())) if bool(flips[bad].all()) else 0
        if int(bad.sum()) > allowed:
            err = float((got - want).abs().max())
            problems.append(f"{name}: {int(bad.sum())}/{bad.numel()} elements not allclose (max err {err:.3g}, "
                            f"torch's largest step {scale:.3g})")
            continue
        # An update within rounding noise (a key bias, whose gradient softmax cancels) has no direction to compare,
        # nor has one alike in every element (a bias whose channels are summed right after): allclose checked them.
        # (Adam's near-zero gradients were left out above; its every step is up to lr, so no floor applies.)
        floor = 0.0 if adam_like else rounding_move
        uniform = step_t.numel() < 2 or float(step_t.std()) <= max(floor, UNIFORM_UPDATE * scale)
        if scale > max(TINY_UPDATE * max(1.0, float(want.abs().max())), floor) and not uniform:
            pcc = _pcc(step_d, step_t)
            if pcc < PCC_MIN:
                problems.append(f"{name}: update PCC {pcc:.4f}")
    return problems


def run_one(name: str, verbose: bool = False) -> Dict[str, Any]:
    """Run case ``name``; a result dict (``cls``, ``detail``, ``seconds``)."""
    from pybuda.errors import PybudaError

    case = CASES[name]
    result: Dict[str, Any] = dict(name=name, cls=None, detail="")
    t0 = time.time()
    try:
        model = case.model()
        model.train(case.train_mode)
        initial = {n: p.detach().clone() for n, p in model.named_parameters()}
        frozen = {n for n, p in model.named_parameters() if not p.requires_grad or (case.only is not None and
                                                                                   n not in case.only)}
        twin = copy.deepcopy(model)
        data = _batches(case)
        want_losses, want_params, grad_max = train_in_torch(case, twin, data)
    except Exception as exc:  # the case itself does not train in torch: not pybuda's problem
        result.update(cls="SKIP", detail=f"does not train in torch: {type(exc).__name__}: {exc}"[:300])
        return result
    if not all(abs(v) < float("inf") for v in want_losses) or max(want_losses) > DIVERGED * abs(want_losses[0]):
        # torch's own run is chaotic there: float32 rounding alone sends any other evaluation elsewhere
        result.update(cls="SKIP", detail=f"diverges in torch: losses {[f'{v:.3g}' for v in want_losses]}")
        return result
    try:
        got_losses, got_params, notes = train_on_device(case, copy.deepcopy(model), data)
    except PybudaError as exc:
        result.update(cls="CLEAR-ERROR", detail=f"{type(exc).__name__}: {exc}"[:600])
        if verbose:
            traceback.print_exc()
        return result
    except Exception as exc:  # noqa: BLE001 -- anything else is a crash
        result.update(cls="CRASH", detail=f"{type(exc).__name__}: {exc}\n" + traceback.format_exc()[-1500:])
        if verbose:
            traceback.print_exc()
        return result
    result["seconds"] = round(time.time() - t0, 1)
    problems = compare(case, got_losses, got_params, want_losses, want_params, initial, grad_max, frozen)
    if verbose:
        print("losses device:", [round(v, 6) for v in got_losses])
        print("losses torch: ", [round(v, 6) for v in want_losses])
        print("notes:", notes)
    if problems:
        try:  # the same run in plain float32: is the difference the chip's rounding or the program?
            ex_losses, ex_params, _ = train_on_device(case, copy.deepcopy(model), data, exact=True)
            exact = compare(case, ex_losses, ex_params, want_losses, want_params, initial, grad_max, frozen)
            cls = "WRONG" if exact else "NUMERICS"
        except Exception as exc:  # noqa: BLE001
            cls, problems = "WRONG", problems + [f"plain float32 rerun failed: {type(exc).__name__}"]
        result.update(cls=cls, detail="; ".join(problems))
    elif notes:
        result.update(cls="PARTIAL-FALLBACK", detail="; ".join(notes)[:300])
    else:
        result["cls"] = "DEVICE"
    return result


def _subprocess(name: str, timeout: int) -> Dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", name, "--json"]
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(name=name, cls="CRASH", detail=f"hang: no answer in {timeout}s", seconds=timeout)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            out = json.loads(line)
            out["seconds"] = round(time.time() - t0, 1)
            return out
    tail = (proc.stderr or proc.stdout)[-800:]
    return dict(name=name, cls="CRASH", detail=f"process exited {proc.returncode}: {tail}",
                seconds=round(time.time() - t0, 1))


def _line(r: Dict[str, Any]) -> str:
    detail = r.get("detail", "").splitlines()[0][:200] if r.get("detail") else ""
    return f"{r['name']:<26} {r['cls']:<17} {r.get('seconds', 0):6.1f}s  {detail}"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--filter", help="regex over case names")
    ap.add_argument("--one", help="run one case in this process")
    ap.add_argument("--json", action="store_true", help="with --one: print the result as one JSON line")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timeout", type=int, default=TIMEOUT_S)
    ap.add_argument("--random-graphs", metavar="SEEDS",
                    help="train these random graphs (tools/random_graphs.py seeds, e.g. 0-99) instead of the cases")
    args = ap.parse_args(argv)
    import logging
    import warnings
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    if args.one:
        match = RANDOM_GRAPH_CASE.match(args.one)
        if match and args.one not in CASES:
            add_random_graph(int(match.group(1)))
        r = run_one(args.one, verbose=args.verbose)
        print(json.dumps(r) if args.json else _line(r) + ("\n" + r["detail"] if args.verbose else ""))
        return 0
    if args.random_graphs:
        import random_graphs

        CASES.clear()
        for seed in random_graphs.parse_seeds(args.random_graphs):
            add_random_graph(seed)
    names = [n for n in CASES if not args.filter or re.search(args.filter, n)]
    if args.list:
        print("\n".join(names))
        return 0
    counts: Dict[str, int] = {}
    for name in names:
        r = _subprocess(name, args.timeout)
        counts[r["cls"]] = counts.get(r["cls"], 0) + 1
        print(_line(r), flush=True)
    print("totals: " + ", ".join(f"{c} {counts[c]}" for c in (*CLASSES, "SKIP") if c in counts))
    return 1 if counts.get("WRONG") or counts.get("CRASH") else 0


if __name__ == "__main__":
    sys.exit(main())
