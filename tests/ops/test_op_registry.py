"""The op registry, op by op: every op's torch reference against an independent expression (numpy or a
different torch formulation), its shape and dtype rules against what eval actually returns, and bad
input. The tables are keyed by registry name; an op registered without a row here fails the suite.

Shapes are deliberately small and mostly not multiples of 32 (tile size), across ranks 1 to 5.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pybuda.errors import OpError
from pybuda.ops import registry

_GEN = torch.Generator().manual_seed(1234)


def rn(*shape, dtype=torch.float32):
    return torch.randn(shape, generator=_GEN).to(dtype)


def pos(*shape, dtype=torch.float32):
    return (torch.rand(shape, generator=_GEN) + 0.5).to(dtype)


def ints(lo, hi, *shape, dtype=torch.int32):
    return torch.randint(lo, hi, shape, generator=_GEN).to(dtype)


def npy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).numpy() if t.dtype in (torch.bfloat16, torch.float16) else t.numpy()


def T(a, dtype=None) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t.to(dtype) if dtype is not None else t


@dataclass
class Case:
    """One evaluation of an op: inputs, attrs, and an independent reference (or a property check)."""

    inputs: List[torch.Tensor]
    attrs: Dict[str, Any] = field(default_factory=dict)
    ref: Optional[Callable[..., Any]] = None
    check: Optional[Callable[..., None]] = None
    atol: float = 1e-5
    rtol: float = 1e-5


def C(inputs, attrs=None, ref=None, **kw) -> Case:
    return Case(list(inputs), dict(attrs or {}), ref, **kw)


# --- independent references ------------------------------------------------------------------------------

def _np_unary(fn):
    return lambda x: T(fn(npy(x)))


def _sel_ref(x, dim, start, length, stride):
    size = x.shape[dim]
    pieces = []
    for window in range(0, size - start, stride):
        first = window + start
        avail = max(0, min(length, size - first))
        piece = x.narrow(dim, first, avail)
        if avail < length:
            zshape = list(x.shape)
            zshape[dim] = length - avail
            piece = torch.cat([piece, torch.zeros(zshape, dtype=x.dtype)], dim)
        pieces.append(piece)
    return torch.cat(pieces, dim)


def _hslice_ref(x, s):
    z, w = x.shape[-3], x.shape[-1] // s
    return torch.stack([x[..., zi, :, j * w:(j + 1) * w] for zi in range(z) for j in range(s)], -3)


def _hstack_ref(x, s):
    z = x.shape[-3]
    return torch.stack([torch.cat([x[..., g * s + j, :, :] for j in range(s)], -1) for g in range(z // s)], -3)


def _vslice_ref(x, s):
    z, h = x.shape[-3], x.shape[-2] // s
    return torch.stack([x[..., zi, j * h:(j + 1) * h, :] for zi in range(z) for j in range(s)], -3)


def _vstack_ref(x, s):
    z = x.shape[-3]
    return torch.stack([torch.cat([x[..., g * s + j, :, :] for j in range(s)], -2) for g in range(z // s)], -3)


def _pad_ref(x, pad, mode, value=0.0, channel_last=False):
    mode_np = {"constant": "constant", "replicate": "edge", "reflect": "reflect"}[mode]
    widths = [(0, 0)] * x.dim()
    first = x.dim() - (2 if channel_last else 1)
    widths[first] = (pad[0], pad[1])
    if len(pad) == 4:
        widths[first - 1] = (pad[2], pad[3])
    kwargs = {"constant_values": value} if mode == "constant" else {}
    return T(np.pad(npy(x), widths, mode=mode_np, **kwargs))


def _conv2d_ref(x, w, b=None, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    # im2col: unfold the explicitly padded input and multiply group by group.
    xp = T(np.pad(npy(x), [(0, 0), (0, 0), (pads[2], pads[3]), (pads[0], pads[1])]))
    n, cin = x.shape[:2]
    cout, _, kh, kw = w.shape
    cols = F.unfold(xp, (kh, kw), dilation=dilation, stride=stride)  # [N, Cin*kh*kw, L]
    ho = (xp.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (xp.shape[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    cg, og = cin // groups, cout // groups
    outs = []
    for g in range(groups):
        c = cols[:, g * cg * kh * kw:(g + 1) * cg * kh * kw]
        wg = w[g * og:(g + 1) * og].reshape(og, -1)
        outs.append(torch.einsum("ok,nkl->nol", wg, c))
    out = torch.cat(outs, 1).reshape(n, cout, ho, wo)
    return out + b.reshape(1, -1, 1, 1) if b is not None else out


def _conv_t_ref(x, w, b=None, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), output_padding=(0, 0)):
    # Scatter definition (groups=1): every input pixel adds w * x at (i*s + k*d) of the full output.
    n, cin, h, wd = x.shape
    _, cout, kh, kw = w.shape
    hf = (h - 1) * stride[0] + dilation[0] * (kh - 1) + 1 + output_padding[0]
    wf = (wd - 1) * stride[1] + dilation[1] * (kw - 1) + 1 + output_padding[1]
    full = torch.zeros(n, cout, hf, wf)
    for i in range(kh):
        for j in range(kw):
            contrib = torch.einsum("nchw,co->nohw", x, w[:, :, i, j])
            r0, c0 = i * dilation[0], j * dilation[1]
            full[:, :, r0:r0 + (h - 1) * stride[0] + 1:stride[0], c0:c0 + (wd - 1) * stride[1] + 1:stride[1]] += contrib
    out = full[:, :, pads[2]:hf - pads[3], pads[0]:wf - pads[1]]
    return out + b.reshape(1, -1, 1, 1) if b is not None else out


def _pool2d_unfold_ref(x, k, s, pads, kind, dilation=(1, 1), count_include_pad=True):
    fill = -np.inf if kind == "max" else 0.0
    widths = [(0, 0)] * (x.dim() - 2) + [(pads[2], pads[3]), (pads[0], pads[1])]
    xp = T(np.pad(npy(x), widths, constant_values=fill)).float()
    lead = x.shape[:-2]
    flat = xp.reshape(-1, 1, xp.shape[-2], xp.shape[-1])
    cols = F.unfold(flat, k, dilation=dilation, stride=s)
    ho = (xp.shape[-2] - dilation[0] * (k[0] - 1) - 1) // s[0] + 1
    wo = (xp.shape[-1] - dilation[1] * (k[1] - 1) - 1) // s[1] + 1
    if kind == "max":
        out = cols.max(1).values
    else:
        out = cols.sum(1)
        if count_include_pad:
            out = out / (k[0] * k[1])
        else:
            mask = T(np.pad(np.ones(x.shape[-2:]), widths[-2:])).float().reshape(1, 1, *xp.shape[-2:])
            out = out / F.unfold(mask, k, stride=s).sum(1)
    return out.reshape(*lead, ho, wo)


def _nearest_ref(x, sizes):
    out = x
    for i, size in enumerate(sizes):
        d = x.dim() - len(sizes) + i
        src = torch.floor(torch.arange(size) * (x.shape[d] / size)).long()
        out = out.index_select(d, src)
    return out


def _quant_ref(x, scale, zp, lo, hi, dtype, axis=-1):
    s = npy(scale)
    if s.ndim == 1 and x.dim() > 1:
        d = axis % x.dim()
        s = s.reshape((-1,) + (1,) * (x.dim() - 1 - d))
    return T(np.clip(np.round(npy(x).astype(np.float64) / s) + zp, lo, hi)).to(dtype)


def _dropout_check(p, seed):
    def check(out, x):
        scaled = x / (1 - p)
        kept = out != 0
        assert torch.allclose(out[kept], scaled[kept], atol=1e-6)
        frac = 1 - kept.float().mean().item()
        assert abs(frac - p) < 0.1, f"dropped {frac:.2f}, expected about {p}"
        again = registry.evaluate("dropout", [x], {"p": p, "seed": seed})
        assert torch.equal(out, again), "same seed must give the same mask"
        other = registry.evaluate("dropout", [x], {"p": p, "seed": seed + 1})
        assert not torch.equal(out, other), "another seed should give another mask"
    return check


# --- the table: registry name -> cases ----------------------------------------------------------------------

_a, _b = rn(3, 5), rn(3, 5)
_x4 = rn(2, 3, 7, 9)
_ints_a, _ints_b = ints(-4, 5, 3, 7), ints(1, 5, 3, 7)
_eq_a, _eq_b = ints(0, 3, 4, 33).float(), ints(0, 3, 4, 33).float()
_bf = rn(2, 33, dtype=torch.bfloat16)
_cond = ints(0, 2, 3, 1, 5).float()
_zeros_some = torch.tensor([[-1.5, 0.0, 2.0], [0.0, 3.0, -0.5]])

CASES: Dict[str, List[Case]] = {
    # binary
    "add": [C([_a, _b], ref=lambda a, b: T(npy(a) + npy(b))),
            C([rn(2, 1, 5), rn(4, 1)], ref=lambda a, b: T(npy(a) + npy(b))),
            C([_bf, torch.tensor([2.0])], ref=lambda a, b: (a.float() + 2.0).bfloat16(), atol=1e-2),
            C([_ints_a, torch.tensor([1.5])], ref=lambda a, b: a.float() + 1.5),
            C([rn(1, 2, 3, 4, 5), rn(5)], ref=lambda a, b: T(npy(a) + npy(b)))],
    "subtract": [C([_a, _b], ref=lambda a, b: T(npy(a) - npy(b))),
                 C([_ints_a, _ints_b], ref=lambda a, b: T(npy(a) - npy(b)))],
    "multiply": [C([_x4, rn(3, 1, 1)], ref=lambda a, b: T(npy(a) * npy(b))),
                 C([rn(33), rn(1, 33)], ref=lambda a, b: T(npy(a) * npy(b)))],
    "divide": [C([_a, pos(3, 5)], ref=lambda a, b: T(npy(a) / npy(b))),
               C([_ints_a, _ints_b], ref=lambda a, b: T(npy(a).astype(np.float32) / npy(b)))],
    "maximum": [C([_a, _b], ref=lambda a, b: torch.where(a > b, a, b))],
    "minimum": [C([_a, rn(1, 5)], ref=lambda a, b: torch.where(a < b, a, b.expand(3, 5)))],
    "heaviside": [C([_zeros_some, torch.tensor([0.25])],
                    ref=lambda a, b: (a > 0).float() + (a == 0).float() * 0.25)],
    "power": [C([pos(3, 5), rn(3, 5)], ref=lambda a, b: torch.exp(b * torch.log(a)), atol=1e-5, rtol=1e-4),
              C([ints(0, 4, 2, 3), torch.tensor([2], dtype=torch.int32)], ref=lambda a, b: a * a)],
    "equal": [C([_eq_a, _eq_b], ref=lambda a, b: T((npy(a) == npy(b)).astype(np.float32))),
              C([ints(0, 2, 3, 4), ints(0, 2, 3, 4)], ref=lambda a, b: T((npy(a) == npy(b)).astype(np.int32)))],
    "not_equal": [C([_eq_a, _eq_b], ref=lambda a, b: T((npy(a) != npy(b)).astype(np.float32)))],
    "greater": [C([_eq_a, _eq_b], ref=lambda a, b: T((npy(a) > npy(b)).astype(np.float32))),
                C([_bf, torch.tensor([0.0])], ref=lambda a, b: (a.float() > 0).bfloat16())],
    "less": [C([_eq_a, _eq_b], ref=lambda a, b: T((npy(a) < npy(b)).astype(np.float32)))],
    "greater_equal": [C([_eq_a, _eq_b], ref=lambda a, b: T((npy(a) >= npy(b)).astype(np.float32)))],
    "less_equal": [C([_eq_a, _eq_b], ref=lambda a, b: T((npy(a) <= npy(b)).astype(np.float32)))],
    "logical_and": [C([_eq_a, _eq_b], ref=lambda a, b: T(np.logical_and(npy(a), npy(b)).astype(np.float32)))],
    "where": [C([_cond, rn(3, 4, 5), rn(5)], ref=lambda c, x, y: c * x + (1 - c) * y),
              C([_cond, rn(3, 4, 5, dtype=torch.bfloat16), torch.tensor([0.0], dtype=torch.bfloat16)],
                ref=lambda c, x, y: (c * x.float()).bfloat16(), atol=1e-2)],
    # unary
    "abs": [C([_a], ref=lambda x: torch.where(x < 0, -x, x)), C([_ints_a], ref=_np_unary(np.abs))],
    "exp": [C([_x4], ref=_np_unary(np.exp), rtol=1e-5), C([_ints_a], ref=lambda x: T(np.exp(npy(x).astype(np.float32))))],
    "log": [C([pos(4, 33)], ref=_np_unary(np.log))],
    "reciprocal": [C([pos(5, 3)], ref=_np_unary(lambda v: 1.0 / v))],
    "sqrt": [C([pos(2, 3, 5)], ref=_np_unary(np.sqrt))],
    "sigmoid": [C([_x4], ref=_np_unary(lambda v: 1.0 / (1.0 + np.exp(-v))))],
    "sine": [C([_a], ref=_np_unary(np.sin))],
    "cosine": [C([_a], ref=_np_unary(np.cos))],
    "tanh": [C([_x4], ref=_np_unary(np.tanh))],
    "erf": [C([_a], ref=lambda x: T(np.vectorize(math.erf)(npy(x).astype(np.float64))).float(), atol=1e-6)],
    "square": [C([_a], ref=_np_unary(np.square)), C([_ints_a], ref=_np_unary(np.square))],
    "logical_not": [C([_eq_a], ref=lambda x: T((npy(x) == 0).astype(np.float32)))],
    "nop": [C([_x4], ref=lambda x: x.clone())],
    "buffer": [C([_a], ref=lambda x: x.clone())],
    "tilize": [C([_a], ref=lambda x: x.clone())],
    "identity": [C([_a], ref=lambda x: x.clone()),
                 C([_a], {"unsqueeze": "unsqueeze", "unsqueeze_dim": 0}, ref=lambda x: T(np.expand_dims(npy(x), 0))),
                 C([rn(3, 1, 5)], {"unsqueeze": "squeeze", "unsqueeze_dim": -2}, ref=lambda x: T(npy(x)[:, 0, :]))],
    "cast": [C([_a * 3], {"dtype": "int32"}, ref=lambda x: T(np.trunc(npy(x)).astype(np.int32))),
             C([_eq_a], {"dtype": "bool"}, ref=lambda x: T(npy(x) != 0)),
             C([_ints_a], {"dtype": "torch.float32"}, ref=lambda x: T(npy(x).astype(np.float32)))],
    "relu": [C([_x4], ref=_np_unary(lambda v: np.maximum(v, 0))),
             C([_a], {"threshold": 0.5}, ref=_np_unary(lambda v: np.where(v >= 0.5, v, 0))),
             C([_a], {"threshold": 0.5, "mode": "max"}, ref=_np_unary(lambda v: np.where(v <= 0.5, v, 0)))],
    "leaky_relu": [C([_a], {"alpha": 0.1}, ref=_np_unary(lambda v: np.where(v >= 0, v, 0.1 * v)))],
    "gelu": [C([_x4], ref=lambda x: 0.5 * x * (1 + T(np.vectorize(math.erf)(npy(x) / math.sqrt(2))).float()),
               atol=1e-6),
             C([_a], {"approximate": "tanh"},
               ref=lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))))],
    "gelu_derivative": [C([_x4], ref=lambda x: 0.5 * (1 + T(np.vectorize(math.erf)(npy(x) / math.sqrt(2))).float())
                          + x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi), atol=1e-6)],
    "pow": [C([pos(3, 5)], {"exponent": 2.5}, ref=_np_unary(lambda v: np.power(v, 2.5)), rtol=1e-5)],
    "clip": [C([_x4], {"min": -0.5, "max": 0.25}, ref=_np_unary(lambda v: np.clip(v, -0.5, 0.25)))],
    "dropout": [C([rn(64, 40)], {"p": 0.3, "seed": 7}, check=_dropout_check(0.3, 7)),
                C([_a], {"p": 0.5, "training": False}, ref=lambda x: x.clone())],
    # reduce
    "reduce_sum": [C([_x4], {"dim": -1}, ref=lambda x: T(npy(x).sum(-1, keepdims=True)), atol=1e-5),
                   C([rn(2, 3, 4, 5, 6)], {"dim": 1}, ref=lambda x: T(npy(x).sum(1, keepdims=True)), atol=1e-5),
                   C([_ints_a], {"dim": 0}, ref=lambda x: T(npy(x).sum(0, keepdims=True).astype(np.int32)))],
    "reduce_avg": [C([_x4], {"dim": -2}, ref=lambda x: T(npy(x).mean(-2, keepdims=True))),
                   C([_ints_a], {"dim": -1}, ref=lambda x: T(npy(x).mean(-1, keepdims=True).astype(np.float32)))],
    "reduce_max": [C([_x4], {"dim": -3}, ref=lambda x: T(npy(x).max(-3, keepdims=True))),
                   C([rn(1, 6, 3, 5)], {"dim": -3, "stride": 2},
                     ref=lambda x: torch.stack([x[:, 2 * g:2 * g + 2].max(1).values for g in range(3)], 1)),
                   C([rn(4, 9)], {"dim": -1, "stride": 9}, ref=lambda x: T(npy(x).max(-1, keepdims=True)))],
    "grouped_reduce_avg": [
        C([rn(2, 12, 5)], {"dim": 1, "groups": 3},
          ref=lambda x: torch.stack([x[:, 4 * g:4 * g + 4].mean(1) for g in range(3)], 1), atol=1e-6),
        C([rn(3, 10)], {"dim": -1, "groups": 2, "keep_dims": True},
          ref=lambda x: torch.cat([x[:, :5].mean(1, keepdim=True).expand(3, 5),
                                   x[:, 5:].mean(1, keepdim=True).expand(3, 5)], 1), atol=1e-6)],
    "argmax": [C([_x4], {"dim": -1}, ref=lambda x: T(npy(x).argmax(-1)[..., None].astype(np.float32))),
               C([_a], ref=lambda x: torch.full((1, 1), float(npy(x).argmax()))),
               C([_ints_a], {"dim": 0}, ref=lambda x: T(npy(x).argmax(0)[None].astype(np.int32))),
               C([_x4], {"dim": 1, "keep_dim": False}, ref=lambda x: T(npy(x).argmax(1).astype(np.float32))),
               C([_a], {"keep_dim": False}, ref=lambda x: torch.full((1,), float(npy(x).argmax())))],
    # tm
    "hslice": [C([rn(2, 3, 5, 12)], {"slices": 3}, ref=lambda x: _hslice_ref(x, 3)),
               C([rn(5, 8)], {"slices": 2}, ref=lambda x: _hslice_ref(x.unsqueeze(0), 2))],
    "hstack": [C([rn(2, 6, 5, 3)], {"slices": 3}, ref=lambda x: _hstack_ref(x, 3)),
               C([rn(4, 5, 3)], ref=lambda x: _hstack_ref(x, 4))],
    "vslice": [C([rn(2, 3, 10, 7)], {"slices": 5}, ref=lambda x: _vslice_ref(x, 5))],
    "vstack": [C([rn(1, 6, 5, 7)], {"slices": 2}, ref=lambda x: _vstack_ref(x, 2)),
               C([rn(3, 5, 7)], ref=lambda x: _vstack_ref(x, 3))],
    "transpose": [C([_x4], {"dim0": -2, "dim1": -1}, ref=lambda x: T(np.swapaxes(npy(x), -2, -1))),
                  C([rn(2, 3, 4, 5, 6)], {"dim0": 0, "dim1": 3}, ref=lambda x: T(np.swapaxes(npy(x), 0, 3)))],
    "reshape": [C([_x4], {"shape": (6, 63)}, ref=lambda x: T(npy(x).reshape(6, 63))),
                C([_x4], {"shape": [1, -1, 9]}, ref=lambda x: T(npy(x).reshape(1, 42, 9)))],
    "index": [C([_x4], {"dim": -1, "start": 1, "stop": 8, "stride": 3}, ref=lambda x: T(npy(x)[..., 1:8:3])),
              C([_x4], {"dim": 1, "start": -1}, ref=lambda x: T(npy(x)[:, 2:3])),
              C([rn(33)], {"dim": 0, "start": 0, "stop": -1, "stride": 2}, ref=lambda x: T(npy(x)[0:32:2])),
              C([rn(3, 5)], {"dim": 1, "start": 2, "stop": 100}, ref=lambda x: T(npy(x)[:, 2:100]))],
    "adv_index": [C([rn(7, 5), torch.tensor([3, 0, 6, 3])], ref=lambda x, i: T(np.take(npy(x), npy(i), 0))),
                  C([rn(2, 9, 4), torch.tensor([[8.0, -1.0]])], {"dim": 1},
                    ref=lambda x, i: T(np.take(npy(x), [8, 8], 1)))],
    "select": [C([rn(2, 10)], {"dim": -1, "index": (1, 2), "stride": 4}, ref=lambda x: _sel_ref(x, 1, 1, 2, 4)),
               C([_x4], {"dim": 2, "index": 3}, ref=lambda x: _sel_ref(x, 2, 3, 1, 7)),
               C([rn(12, 3)], {"dim": 0, "index": [0, 3], "stride": 6}, ref=lambda x: _sel_ref(x, 0, 0, 3, 6))],
    "pad": [C([_x4], {"pad": (1, 2)}, ref=lambda x: _pad_ref(x, (1, 2), "constant")),
            C([_x4], {"pad": (1, 2, 3, 0), "value": -1.5}, ref=lambda x: _pad_ref(x, (1, 2, 3, 0), "constant", -1.5)),
            C([_x4], {"pad": (2, 1, 0, 3), "mode": "replicate"},
              ref=lambda x: _pad_ref(x, (2, 1, 0, 3), "replicate")),
            C([_x4], {"pad": (3, 1, 2, 2), "mode": "reflect"}, ref=lambda x: _pad_ref(x, (3, 1, 2, 2), "reflect")),
            C([rn(1, 5, 6, 3)], {"pad": (1, 1, 2, 0), "mode": "reflect", "channel_last": True},
              ref=lambda x: _pad_ref(x, (1, 1, 2, 0), "reflect", channel_last=True))],
    "pad_tile": [C([rn(3, 33)], {"dim": -1, "original_length": 33}, ref=lambda x: T(np.pad(npy(x), [(0, 0), (0, 31)]))),
                 C([rn(2, 5, 7)], {"dim": -2, "original_length": 5},
                   ref=lambda x: T(np.pad(npy(x), [(0, 0), (0, 27), (0, 0)])))],
    "buda_pad": [C([rn(1, 5, 40)], {"paddings": (1, 0), "value": 2.0},
                   ref=lambda x: T(np.pad(np.pad(npy(x), [(0, 0), (0, 27), (0, 0)]), [(0, 0), (0, 32), (0, 0)],
                                          constant_values=2.0)))],
    "buda_unpad": [C([rn(2, 64, 64)], {"original_length": (5, 30), "paddings": (1, 1)},
                     ref=lambda x: T(npy(x)[:, :5, :30]))],
    "broadcast": [C([rn(3, 1, 5)], {"dim": 1, "shape": 4}, ref=lambda x: T(np.broadcast_to(npy(x), (3, 4, 5)))),
                  C([rn(1, 5)], {"dim": -3, "shape": 2}, ref=lambda x: T(np.broadcast_to(npy(x), (2, 1, 5))))],
    "repeat": [C([rn(2, 3)], {"factors": (2, 3)}, ref=lambda x: T(np.tile(npy(x), (2, 3)))),
               C([rn(2, 3)], {"factors": [2, 1, 2]}, ref=lambda x: T(np.tile(npy(x), (2, 1, 2))))],
    "squeeze": [C([rn(3, 1, 5)], {"dim": 1}, ref=lambda x: T(np.squeeze(npy(x), 1)))],
    "unsqueeze": [C([_a], {"dim": -1}, ref=lambda x: T(np.expand_dims(npy(x), -1))),
                  C([rn(4)], {"dim": 0}, ref=lambda x: T(np.expand_dims(npy(x), 0)))],
    "narrow": [C([_x4], {"dim": -2, "start": 2, "length": 4, "original_length": 7}, ref=lambda x: T(npy(x)[..., 2:6, :]))],
    "pixel_shuffle": [C([rn(2, 8, 3, 5)], {"upscale_factor": 2},
                        ref=lambda x: x.reshape(2, 2, 2, 2, 3, 5).permute(0, 1, 4, 2, 5, 3).reshape(2, 2, 6, 10))],
    "concatenate": [C([rn(2, 3), rn(2, 5), rn(2, 1)], {"axis": -1}, ref=lambda *xs: T(np.concatenate([npy(t) for t in xs], -1))),
                    C([rn(1, 2, 3)], {"axis": 0}, ref=lambda x: x.clone())],
    "stack": [C([rn(2, 3), rn(2, 3), rn(2, 3)], {"axis": 1}, ref=lambda *xs: T(np.stack([npy(t) for t in xs], 1)))],
    "interleave": [
        C([rn(1, 3, 5, 7), rn(1, 3, 5, 7)], {"axis": -3, "stride": 1},
          ref=lambda a, b: torch.stack([t for z in range(3) for t in (a[:, z], b[:, z])], 1)),
        C([rn(2, 6), rn(2, 6), rn(2, 6)], {"axis": -1, "stride": 2},
          ref=lambda a, b, c: torch.cat([t[:, 2 * j:2 * j + 2] for j in range(3) for t in (a, b, c)], 1))],
    "binary_stack": [C([rn(3, 5), rn(3, 5)], {"dim": -1},
                       ref=lambda a, b: T(np.stack([npy(a), npy(b)], -1).reshape(3, 10))),
                     C([rn(2, 3, 4), rn(2, 3, 4)], {"dim": -2},
                       ref=lambda a, b: torch.stack([t for i in range(3) for t in (a[:, i], b[:, i])], 1))],
    # nn
    "softmax": [C([_x4], {"dim": -1}, ref=lambda x: T(np.exp(npy(x)) / np.exp(npy(x)).sum(-1, keepdims=True)), atol=1e-6),
                C([rn(5, 6)], {"dim": 0, "stable": False},
                  ref=lambda x: T(np.exp(npy(x)) / np.exp(npy(x)).sum(0, keepdims=True)), atol=1e-6)],
    "log_softmax": [C([_x4], {"dim": -1}, ref=lambda x: T(npy(x) - np.log(np.exp(npy(x)).sum(-1, keepdims=True))))],
    "layernorm": [C([rn(2, 5, 33), rn(33), rn(33)], ref=lambda x, w, b: F.layer_norm(x, (33,), w, b, 1e-5), atol=1e-5),
                  C([rn(4, 6, 3), rn(1, 6, 1), rn(6)], {"dim": 1, "epsilon": 1e-3},
                    ref=lambda x, w, b: F.layer_norm(x.transpose(1, 2), (6,), w.flatten(), b, 1e-3).transpose(1, 2),
                    atol=1e-5)],
    "batchnorm": [C([rn(2, 3, 5, 7), rn(3), rn(3), rn(3), pos(3)], {"epsilon": 1e-3},
                    ref=lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, False, 0.0, 1e-3), atol=1e-5),
                  C([rn(4, 3), rn(3), rn(3), rn(3), pos(3)],
                    ref=lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, False, 0.0, 1e-5), atol=1e-5)],
    # conv
    "conv2d": [
        C([rn(2, 3, 7, 9), rn(4, 3, 3, 3)], {"padding": (1, 1, 1, 1)},
          ref=lambda x, w: _conv2d_ref(x, w, pads=(1, 1, 1, 1)), atol=1e-4),
        C([rn(1, 4, 9, 10), rn(6, 2, 3, 2), rn(6)], {"stride": (2, 1), "padding": (0, 1, 2, 1), "groups": 2, "dilation": 2},
          ref=lambda x, w, b: _conv2d_ref(x, w, b, (2, 1), (0, 1, 2, 1), (2, 2), 2), atol=1e-4),
        C([rn(1, 6, 5, 3), rn(4, 3, 2, 2)], {"padding": "same", "channel_last": True},
          ref=lambda x, w: _conv2d_ref(x.permute(0, 3, 1, 2), w, pads=(1, 0, 1, 0)).permute(0, 2, 3, 1), atol=1e-4)],
    "conv2d_transpose": [
        C([rn(1, 3, 4, 5), rn(3, 2, 3, 3), rn(2)], {"stride": 2, "padding": (1, 0, 1, 2), "output_padding": 1},
          ref=lambda x, w, b: _conv_t_ref(x, w, b, (2, 2), (1, 0, 1, 2), output_padding=(1, 1)), atol=1e-4),
        C([rn(2, 4, 5, 5), rn(4, 3, 3, 3)], {"stride": 1, "padding": 1, "groups": 2, "dilation": 1},
          ref=lambda x, w: F.conv_transpose2d(x, w, None, 1, 1, 0, 2), atol=1e-4)],
    "conv3d": [C([rn(1, 2, 5, 6, 7), rn(3, 2, 3, 3, 3), rn(3)], {"padding": (1, 1, 0, 2, 1, 0), "stride": (1, 2, 2)},
                 ref=lambda x, w, b: torch.nn.functional.conv3d(
                     T(np.pad(npy(x), [(0, 0), (0, 0), (1, 0), (0, 2), (1, 1)])), w, b, (1, 2, 2)), atol=1e-4)],
    # pool
    "max_pool1d": [C([rn(2, 3, 11)], {"kernel_size": 3, "stride": 2, "padding": 1},
                     ref=lambda x: torch.nn.MaxPool1d(3, 2, 1)(x)),
                   C([rn(2, 3, 10)], {"kernel_size": 2, "stride": 3, "ceil_mode": True},
                     ref=lambda x: torch.nn.MaxPool1d(2, 3, 0, ceil_mode=True)(x)),
                   C([rn(2, 10, 3)], {"kernel_size": 3, "padding": (0, 2), "dilation": 2, "channel_last": True},
                     ref=lambda x: F.max_pool1d(F.pad(x.transpose(1, 2), (0, 2), value=-math.inf), 3, 1, 0, 2)
                     .transpose(1, 2))],
    "max_pool2d": [C([_x4], {"kernel_size": 3, "stride": 2, "padding": (1, 0, 0, 2)},
                     ref=lambda x: _pool2d_unfold_ref(x, (3, 3), (2, 2), (1, 0, 0, 2), "max")),
                   C([_x4], {"kernel_size": (2, 3), "stride": (2, 2), "padding": 1, "dilation": 1, "ceil_mode": True},
                     ref=lambda x: torch.nn.MaxPool2d((2, 3), 2, 1, ceil_mode=True)(x)),
                   C([rn(1, 6, 7, 3)], {"kernel_size": 3, "padding": "same", "channel_last": True},
                     ref=lambda x: _pool2d_unfold_ref(x.permute(0, 3, 1, 2), (3, 3), (1, 1), (1, 1, 1, 1),
                                                      "max").permute(0, 2, 3, 1))],
    "max_pool3d": [C([rn(1, 2, 5, 6, 7)], {"kernel_size": 2, "stride": 2, "ceil_mode": True},
                     ref=lambda x: torch.nn.MaxPool3d(2, 2, ceil_mode=True)(x))],
    "avg_pool1d": [C([rn(2, 3, 11)], {"kernel_size": 4, "stride": 3, "padding": 2, "count_include_pad": False},
                     ref=lambda x: torch.nn.AvgPool1d(4, 3, 2, count_include_pad=False)(x))],
    "avg_pool2d": [C([_x4], {"kernel_size": 3, "stride": 2, "padding": (0, 1, 2, 1)},
                     ref=lambda x: _pool2d_unfold_ref(x, (3, 3), (2, 2), (0, 1, 2, 1), "avg")),
                   C([_x4], {"kernel_size": 3, "padding": (1, 0, 1, 1), "count_include_pad": False},
                     ref=lambda x: _pool2d_unfold_ref(x, (3, 3), (1, 1), (1, 0, 1, 1), "avg", count_include_pad=False)),
                   C([_x4], {"kernel_size": 2, "stride": 2, "padding": 1, "ceil_mode": True, "divisor_override": 3},
                     ref=lambda x: torch.nn.AvgPool2d(2, 2, 1, ceil_mode=True, divisor_override=3)(x))],
    "avg_pool3d": [C([rn(1, 2, 5, 6, 7)], {"kernel_size": (2, 3, 3), "stride": 2, "padding": (1, 1, 1, 1, 0, 0)},
                     ref=lambda x: torch.nn.AvgPool3d((2, 3, 3), 2, (0, 1, 1))(x))],
    # misc
    "embedding": [C([rn(10, 6), torch.tensor([[1, 9, 0], [4, 4, 2]])], ref=lambda t, i: T(npy(t)[npy(i)])),
                  C([rn(5, 3, dtype=torch.bfloat16), torch.tensor([4.0, 0.0])], ref=lambda t, i: t[[4, 0]])],
    "lookup_digits": [C([torch.tensor([[5, 3000, -1]])], {"rows": 4000, "chunk": 2048, "wrap": True, "dim": 1},
                        ref=lambda i: torch.tensor([[[[0], [1], [1]], [[5], [952], [1951]]]])),
                      C([torch.tensor([7, 2])], {"rows": 8, "chunk": 4}, ref=lambda i: torch.tensor([[[1], [0]], [[3], [2]]]))],
    "dram_queue": [C([rn(3, 5)], {"num_entries": 2}, ref=lambda x: x)],
    "constant": [C([], {"constant": 2.5}, ref=lambda: torch.tensor([2.5])),
                 C([], {"constant": -1.0, "shape": (2, 3)}, ref=lambda: T(np.full((2, 3), -1.0, np.float32)))],
    "resize2d": [C([rn(2, 3, 4, 5)], {"sizes": (8, 10)}, ref=lambda x: _nearest_ref(x, (8, 10))),
                 C([rn(1, 2, 4, 4)], {"sizes": (7, 9), "method": "bilinear", "align_corners": True},
                   ref=lambda x: torch.nn.Upsample(size=(7, 9), mode="bilinear", align_corners=True)(x), atol=1e-5),
                 C([rn(1, 4, 5, 2)], {"sizes": (2, 3), "channel_last": True},
                   ref=lambda x: _nearest_ref(x.permute(0, 3, 1, 2), (2, 3)).permute(0, 2, 3, 1)),
                 C([rn(1, 2, 4, 4)], {"sizes": (8, 8), "method": "cubic"},
                   ref=lambda x: torch.nn.Upsample(size=(8, 8), mode="bicubic")(x), atol=1e-5)],
    "resize3d": [C([rn(1, 2, 2, 3, 4)], {"sizes": (4, 6, 8)}, ref=lambda x: _nearest_ref(x, (4, 6, 8)))],
    "cumsum": [C([_x4], {"axis": -1}, ref=lambda x: T(np.cumsum(npy(x), -1)), atol=1e-5),
               C([_ints_a], {"axis": 0, "exclusive": True},
                 ref=lambda x: T(np.concatenate([np.zeros((1, 7), np.int32), np.cumsum(npy(x), 0)[:-1]]).astype(np.int32)))],
    "index_copy": [C([rn(5, 3), torch.tensor([4, 1]), rn(2, 3)], {"dim": 0},
                     ref=lambda t, i, v: T(np.concatenate([npy(t)[:1], npy(v)[1:2], npy(t)[2:4], npy(v)[:1]])))],
    "matmul": [C([rn(2, 7, 5), rn(5, 3)], ref=lambda a, b: T(npy(a) @ npy(b)), atol=1e-5),
               C([rn(3, 33), rn(33, 9), rn(9)], ref=lambda a, b, c: T(npy(a) @ npy(b) + npy(c)), atol=1e-5),
               C([rn(4, 6, dtype=torch.bfloat16), rn(6, 5)], ref=lambda a, b: (a.float() @ b.bfloat16().float()),
                 atol=5e-2, rtol=2e-2)],
    "sparse_matmul": [C([torch.eye(4, 6), rn(6, 3)], ref=lambda a, b: T(npy(a) @ npy(b)), atol=1e-6)],
    # quant
    "buda_requantize": [C([ints(-3000, 3000, 4, 6).float(), torch.tensor([0.02])], {"zero_point": 1.0},
                          ref=lambda q, s: T(np.clip(np.round(npy(q) * np.float32(0.02)) + 1.0, -127, 127)).to(torch.int8))],
    "quantize": [C([rn(3, 5) * 4, torch.tensor([0.05])], {"zero_point": 3.0, "out_dtype": "int8"},
                   ref=lambda x, s: _quant_ref(x, s, 3.0, -127, 127, torch.int8)),
                 C([rn(2, 4), pos(2)], {"axis": 0, "out_dtype": "uint8", "zero_point": 128},
                   ref=lambda x, s: _quant_ref(x, s, 128, 0, 255, torch.uint8, axis=0))],
    "dequantize": [C([ints(-127, 128, 3, 5, dtype=torch.int8), pos(5)], {"zero_point": 2.0},
                     ref=lambda q, s: T((npy(q).astype(np.float32) - 2.0) * npy(s)))],
    "requantize": [C([ints(-3000, 3000, 4, 6), torch.tensor([0.02]), torch.tensor([0.5])],
                     {"output_zero_point": 1.0, "out_dtype": "int8"},
                     ref=lambda q, a, b: T(np.clip(np.round(npy(q) * (0.02 / 0.5)) + 1.0, -127, 127)).to(torch.int8))],
}

ALL_OPS = [op.name for op in registry.all_ops()]


def _cases(name: str) -> List[Case]:
    if name not in CASES:
        pytest.fail(f"op '{name}' is registered but has no row in tests/ops/test_op_registry.py CASES")
    return CASES[name]


def _kind(dtype: torch.dtype) -> str:
    return "bool" if dtype == torch.bool else ("float" if dtype.is_floating_point else "int")


def _compare(out: torch.Tensor, expected: torch.Tensor, case: Case, name: str) -> None:
    # The exact dtype is checked against the dtype rule; references (often numpy, float64) only fix the kind.
    assert _kind(out.dtype) == _kind(expected.dtype), f"{name}: dtype {out.dtype} vs reference {expected.dtype}"
    assert tuple(out.shape) == tuple(expected.shape), f"{name}: shape {list(out.shape)} vs {list(expected.shape)}"
    if out.dtype == torch.bool or not out.dtype.is_floating_point:
        assert torch.equal(out.to(torch.int64), expected.to(torch.int64)), f"{name}: integer results differ"
    else:
        torch.testing.assert_close(out.float(), expected.float(), atol=case.atol, rtol=case.rtol)


@pytest.mark.parametrize("name", ALL_OPS)
def test_eval_matches_independent_reference_and_shape_rule(name):
    for i, case in enumerate(_cases(name)):
        shape, dtype, full_attrs = registry.infer(name, [tuple(t.shape) for t in case.inputs],
                                                  [t.dtype for t in case.inputs], case.attrs)
        out = registry.evaluate(name, case.inputs, case.attrs)
        assert tuple(out.shape) == shape, f"{name} case {i}: eval shape {list(out.shape)} vs shape rule {list(shape)}"
        assert out.dtype == dtype, f"{name} case {i}: eval dtype {out.dtype} vs dtype rule {dtype}"
        if case.check is not None:
            case.check(out, *case.inputs)
        else:
            _compare(out, case.ref(*case.inputs), case, f"{name} case {i}")


@pytest.mark.parametrize("name", ALL_OPS)
def test_canonical_attrs_are_stable_and_survive_json(name):
    """infer(canonical attrs) returns them unchanged, and attrs read back from JSON evaluate the same."""
    for case in _cases(name):
        shapes, dtypes = [tuple(t.shape) for t in case.inputs], [t.dtype for t in case.inputs]
        shape, dtype, full = registry.infer(name, shapes, dtypes, case.attrs)
        assert registry.infer(name, shapes, dtypes, full) == (shape, dtype, full)
        from_json = json.loads(json.dumps(full))
        if case.check is None:
            a = registry.evaluate(name, case.inputs, full)
            b = registry.evaluate(name, case.inputs, from_json)
            assert torch.equal(a, b)


@pytest.mark.parametrize("name", ALL_OPS)
def test_float64_inputs_compute_in_float64(name):
    """Floating inputs are computed in their own dtype (no silent down-cast), matching the float32 result."""
    explicit_dtype = {"dtype", "out_dtype"} & set(registry.get(name).attrs)
    for case in _cases(name):
        floats = [t for t in case.inputs if t.dtype.is_floating_point]
        if not floats or any(t.dtype != torch.float32 for t in floats) or case.check is not None:
            continue
        inputs64 = [t.double() if t.dtype == torch.float32 else t for t in case.inputs]
        _, dtype, _ = registry.infer(name, [tuple(t.shape) for t in inputs64], [t.dtype for t in inputs64], case.attrs)
        out = registry.evaluate(name, inputs64, case.attrs)
        out32 = registry.evaluate(name, case.inputs, case.attrs)
        assert out.dtype == dtype
        if out32.dtype == torch.float32 and not explicit_dtype:
            assert dtype == torch.float64, f"{name}: float64 inputs gave {dtype}"
        if out.dtype.is_floating_point:
            torch.testing.assert_close(out.float(), out32.float(), atol=1e-4, rtol=1e-4)
        else:
            assert torch.equal(out.long(), out32.long())


@pytest.mark.parametrize("name", ALL_OPS)
def test_bfloat16_inputs_stay_bfloat16(name):
    """A bfloat16 input gives a bfloat16 result wherever the float32 result is float32."""
    for case in _cases(name):
        if not case.inputs or case.inputs[0].dtype != torch.float32 or case.check is not None:
            continue
        inputs = [t.bfloat16() if t.dtype == torch.float32 else t for t in case.inputs]
        _, dtype, _ = registry.infer(name, [tuple(t.shape) for t in inputs], [t.dtype for t in inputs], case.attrs)
        out = registry.evaluate(name, inputs, case.attrs)
        assert out.dtype == dtype
        if registry.evaluate(name, case.inputs, case.attrs).dtype == torch.float32:
            assert out.dtype == torch.bfloat16, f"{name}: bfloat16 inputs gave {out.dtype}"
        return  # one case per op is enough


# --- bad input -------------------------------------------------------------------------------------------


def _assert_names_op_and_shapes(err: OpError, name: str, shapes) -> None:
    msg = str(err)
    assert msg.startswith(name) or f"{name} '" in msg, msg
    assert "operand shapes" in msg and str([list(s) for s in shapes]) in msg, msg


@pytest.mark.parametrize("name", ALL_OPS)
def test_wrong_operand_count_names_op_and_shapes(name):
    lo, hi = registry.get(name).arity
    case = _cases(name)[0]
    shapes = [tuple(t.shape) for t in case.inputs]
    extra = shapes + [shapes[-1] if shapes else (2, 3)]
    bad = [extra] if hi is not None else []
    if lo > 0:
        bad.append(shapes[:lo - 1])
    for wrong in bad:
        with pytest.raises(OpError) as info:
            registry.infer(name, wrong, [torch.float32] * len(wrong), case.attrs)
        _assert_names_op_and_shapes(info.value, name, wrong)
        assert "operand" in str(info.value)


@pytest.mark.parametrize("name", ALL_OPS)
def test_unknown_and_mistyped_attributes_name_op_and_shapes(name):
    opdef = registry.get(name)
    case = _cases(name)[0]
    shapes = [tuple(t.shape) for t in case.inputs]
    dtypes = [t.dtype for t in case.inputs]
    with pytest.raises(OpError) as info:
        registry.infer(name, shapes, dtypes, {**case.attrs, "no_such_attr": 1})
    _assert_names_op_and_shapes(info.value, name, shapes)
    assert "no_such_attr" in str(info.value)
    for key in opdef.attrs:
        with pytest.raises(OpError) as info:
            registry.infer(name, shapes, dtypes, {**case.attrs, key: object()})
        _assert_names_op_and_shapes(info.value, name, shapes)
        assert key in str(info.value)


BAD_SHAPES = [
    ("add", [(2, 3), (4, 3)], {}),
    ("where", [(2, 3), (2, 3), (5, 3)], {}),
    ("matmul", [(2, 3), (4, 5)], {}),
    ("matmul", [(3,), (3, 2)], {}),
    ("matmul", [(2, 3), (3, 4), (5, 1, 4)], {}),
    ("hslice", [(2, 3, 5, 7)], {"slices": 2}),
    ("hstack", [(2, 5, 4, 3)], {"slices": 2}),
    ("hstack", [(4, 3)], {}),
    ("vslice", [(3, 5, 7)], {"slices": 2}),
    ("transpose", [(2, 3)], {"dim0": 0, "dim1": 2}),
    ("reshape", [(2, 3)], {"shape": (4, 2)}),
    ("reshape", [(2, 3)], {"shape": (-1, -1)}),
    ("index", [(2, 3)], {"dim": 1, "start": 3}),
    ("index", [(2, 3)], {"dim": 1, "start": 0, "stop": 2, "stride": 0}),
    ("adv_index", [(5, 3), (2, 2)], {}),
    ("select", [(2, 10)], {"dim": -1, "index": (3, 2), "stride": 4}),
    ("select", [(2, 10)], {"dim": -1, "index": (1, 2, 3)}),
    ("pad", [(3,)], {"pad": (1, 1, 1, 1)}),
    ("pad", [(3, 4)], {"pad": (4, 0), "mode": "reflect"}),
    ("pad", [(3, 4)], {"pad": (1, 2, 3)}),
    ("broadcast", [(3, 2)], {"dim": 1, "shape": 4}),
    ("repeat", [(2, 3)], {"factors": (2,)}),
    ("squeeze", [(2, 3)], {"dim": 0}),
    ("unsqueeze", [(2, 3)], {"dim": 4}),
    ("narrow", [(2, 3)], {"dim": 1, "start": 2, "length": 2, "original_length": 3}),
    ("pixel_shuffle", [(1, 6, 2, 2)], {"upscale_factor": 2}),
    ("concatenate", [(2, 3), (3, 3)], {"axis": -1}),
    ("stack", [(2, 3), (2, 4)], {"axis": 0}),
    ("interleave", [(2, 6), (2, 6)], {"axis": -1, "stride": 4}),
    ("binary_stack", [(2, 3), (2, 4)], {"dim": -1}),
    ("reduce_sum", [(2, 3)], {"dim": 2}),
    ("reduce_max", [(2, 9)], {"dim": -1, "stride": 2}),
    ("grouped_reduce_avg", [(2, 10)], {"dim": -1, "groups": 3}),
    ("softmax", [(2, 3)], {"dim": -3}),
    ("layernorm", [(2, 5), (4,), (5,)], {}),
    ("batchnorm", [(2, 3, 4), (3,), (3,), (2,), (3,)], {}),
    ("conv2d", [(1, 3, 5, 5), (4, 2, 3, 3)], {}),
    ("conv2d", [(1, 3, 2, 2), (4, 3, 3, 3)], {}),
    ("conv2d", [(1, 3, 5, 5), (4, 3, 3, 3), (3,)], {}),
    ("conv2d", [(1, 3, 5, 5), (4, 3, 3, 3)], {"padding": (1, 2, 3)}),
    ("conv2d", [(1, 3, 5, 5), (4, 3, 3, 3)], {"padding": "full"}),
    ("conv2d_transpose", [(1, 3, 5, 5), (4, 2, 3, 3)], {}),
    ("conv2d_transpose", [(1, 3, 5, 5), (3, 2, 3, 3)], {"output_padding": 1}),
    ("conv3d", [(1, 3, 5, 5), (4, 3, 3, 3, 3)], {}),
    ("max_pool2d", [(1, 3, 2, 2)], {"kernel_size": 5}),
    ("max_pool2d", [(5,)], {"kernel_size": 2}),
    ("avg_pool2d", [(1, 3, 8, 8)], {"kernel_size": 2, "divisor_override": 0}),
    ("embedding", [(10,), (3,)], {}),
    ("constant", [], {"constant": 1.0, "shape": (2, 0)}),
    ("resize3d", [(1, 2, 3, 4, 5)], {"sizes": (2, 2, 2), "method": "cubic"}),
    ("resize2d", [(1, 2, 3, 4)], {"sizes": (2,)}),
    ("cast", [(2, 3)], {"dtype": "complex_thing"}),
    ("clip", [(2, 3)], {"min": 1.0, "max": 0.0}),
    ("dropout", [(2, 3)], {"p": 1.5}),
    ("identity", [(2, 3)], {"unsqueeze": "squeeze", "unsqueeze_dim": 0}),
    ("quantize", [(2, 3), (2,)], {"axis": -1}),
    ("quantize", [(2, 3), (1,)], {"out_dtype": "float16"}),
    ("index_copy", [(5, 3), (2,), (3, 3)], {"dim": 0}),
    ("buda_unpad", [(1, 40, 64)], {"original_length": (5, 30), "paddings": (1, 1)}),
]


@pytest.mark.parametrize("name,shapes,attrs", BAD_SHAPES, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD_SHAPES)])
def test_incompatible_shapes_or_values_raise_op_error_naming_op_and_shapes(name, shapes, attrs):
    with pytest.raises(OpError) as info:
        registry.infer(name, shapes, [torch.float32] * len(shapes), attrs)
    _assert_names_op_and_shapes(info.value, name, shapes)


def test_errors_name_the_op_instance_when_given():
    with pytest.raises(OpError) as info:
        registry.infer("add", [(2, 3), (4, 3)], [torch.float32] * 2, {}, op_name="my_add")
    assert "add 'my_add'" in str(info.value)
    assert info.value.op_type == "add" and info.value.op_name == "my_add"


def test_unknown_op_is_an_op_error():
    with pytest.raises(OpError, match="unknown op"):
        registry.get("no_such_op")
    assert not registry.has("no_such_op") and registry.has("add")


def test_every_op_has_a_family_and_a_docstring():
    families = {"eltwise_unary", "eltwise_binary", "eltwise_nary", "matmul", "reduce", "tm", "nn", "conv", "pool",
                "misc", "quant"}
    for op in registry.all_ops():
        assert op.family in families, op.name
        assert op.doc, f"op '{op.name}' has no doc"


def test_required_registry_names_exist():
    """The names other stages (and the PyTorch frontend) are written against."""
    required = """add subtract multiply divide maximum minimum heaviside power equal not_equal greater less
        greater_equal less_equal logical_and binary_stack where abs exp log reciprocal sqrt sigmoid sine cosine tanh
        logical_not nop buffer identity tilize erf square cast relu leaky_relu gelu pow clip cumsum dropout argmax
        reduce_sum reduce_avg reduce_max grouped_reduce_avg hslice vslice hstack vstack transpose reshape index
        adv_index select pad broadcast repeat squeeze unsqueeze narrow pixel_shuffle concatenate stack interleave
        pad_tile buda_pad buda_unpad softmax log_softmax layernorm batchnorm conv2d conv2d_transpose conv3d
        max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d embedding constant resize2d resize3d
        matmul quantize dequantize requantize""".split()
    missing = [n for n in required if not registry.has(n)]
    assert not missing, missing


def test_numpy_and_torch_scalars_are_accepted_as_attrs():
    """Frontends hand over numpy ints, torch.Size and lists; they validate as python ints and tuples."""
    shape, _, attrs = registry.infer("reshape", [(2, 3)], [torch.float32], {"shape": torch.Size([3, 2])})
    assert shape == (3, 2) and attrs["shape"] == (3, 2)
    _, _, attrs = registry.infer("pad", [(2, 3)], [torch.float32], {"pad": [np.int64(1), 2]})
    assert attrs["pad"] == (1, 2) and type(attrs["pad"][0]) is int
    _, _, attrs = registry.infer("clip", [(2, 3)], [torch.float32], {"min": np.float32(0.5), "max": 2})
    assert attrs == {"min": 0.5, "max": 2.0} and type(attrs["max"]) is float


def test_binary_dtype_rule():
    """Same category: operand 0's dtype (TT-Buda); across categories the float (or int) operand wins."""
    def dtype(a, b):
        return registry.infer("add", [(2,), (2,)], [a, b], {})[1]

    assert dtype(torch.bfloat16, torch.float32) == torch.bfloat16
    assert dtype(torch.float32, torch.bfloat16) == torch.float32
    assert dtype(torch.int32, torch.float32) == torch.float32
    assert dtype(torch.bool, torch.int32) == torch.int32
    assert registry.infer("greater", [(2,), (2,)], [torch.int32, torch.int32], {})[1] == torch.int32
    assert registry.infer("divide", [(2,), (2,)], [torch.int32, torch.int32], {})[1] == torch.float32
