"""Sweep of PyTorch idioms the random-graph fuzzer (tools/random_graphs.py) does not generate: index math,
integer arithmetic, rounding, scans, sorting, gathers and scatters, padding and resampling modes, norms,
activations, attention and recurrent layers, odd dtypes. Each idiom is a small ``torch.nn.Module`` run as a
``pybuda.PyTorchModule`` on a golden ``TTDevice`` and compared with torch eager. Outcomes:

    DEVICE            ran entirely on the device, matches torch
    PARTIAL-FALLBACK  ran with CPU fallback stages, matches torch (the ops on the host are listed)
    CLEAR-ERROR       a ``pybuda.errors.PybudaError``
    WRONG             no error, but numbers, shapes or dtypes differ (integer and bool outputs: exactly)
    CRASH             an exception that is not a PybudaError, or a hang (past --timeout)
    NUMERICS          differs with the chip's arithmetic (TF32-like FPU operands, SFPU approximations) but
                      matches when the golden backend computes in plain float32: a model sensitive to rounding
                      (a comparison or floor near its threshold), not a wrong program

Usage::

    python tools/torch_idiom_sweep.py                         # all idioms, Float32/HiFi4 on Wormhole B0
    python tools/torch_idiom_sweep.py -k pad -v               # idioms whose name contains "pad", with details
    python tools/torch_idiom_sweep.py --defaults --arch grayskull   # default formats on Grayskull
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
import zlib
from typing import Callable, Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

#: The plain-float32 rerun that tells NUMERICS from WRONG allows this much more absolute difference: an output
#: torch cancels to exactly 0 (a layer norm of constant rows) is a few float32 roundings of 0 there.
EXACT_ATOL = 1e-4

CASES: Dict[str, Tuple[Callable[[], nn.Module], Callable[[], tuple]]] = {}


def case(name: str, *inputs):
    """Register ``fn`` (a function of the inputs, or an ``nn.Module`` factory) under ``name``; ``inputs``:
    shapes (float randn) or callables returning a tensor."""
    def deco(fn):
        def make_inputs():
            g = torch.Generator().manual_seed(zlib.crc32(name.encode()) % 1000)
            out = []
            for s in inputs:
                out.append(s(g) if callable(s) else torch.randn(*s, generator=g))
            return tuple(out)

        if isinstance(fn, type) and issubclass(fn, nn.Module):
            factory = fn
        else:
            class Fn(nn.Module):
                def forward(self, *xs):
                    return fn(*xs)
            Fn.__name__ = name.replace("-", "_").replace(".", "_")
            factory = Fn
        CASES[name] = (factory, make_inputs)
        return fn
    return deco


def module_case(name: str, make: Callable[[], nn.Module], *inputs):
    """Register a module built by ``make`` (seeded) under ``name``."""
    def factory():
        torch.manual_seed(0)
        return make()
    case(name, *inputs)(type("M", (nn.Module,), {}))  # placeholder, replaced below
    CASES[name] = (factory, CASES[name][1])


def ints(shape, lo, hi, dtype=torch.int64):
    return lambda g: torch.randint(lo, hi, shape, generator=g, dtype=dtype)


def bools(shape):
    return lambda g: torch.rand(*shape, generator=g) > 0.5


def pos(shape, lo=0.1, hi=2.0):
    return lambda g: torch.rand(*shape, generator=g) * (hi - lo) + lo


def halves(shape, dtype):
    return lambda g: torch.randn(*shape, generator=g).to(dtype)


# --- index math mixed with float math ---------------------------------------------------------------
case("one_hot_argmax_add", (3, 24))(lambda x: x + F.one_hot(x.argmax(-1), 24).float())
case("one_hot_const_idx", (5, 37), ints((5,), 0, 37))(lambda x, i: x * F.one_hot(i, 37).to(x.dtype))
case("arange_mul", (5, 37))(lambda x: x * torch.arange(37, device=x.device).float() / 37)
case("arange_mask_lt", (5, 37))(lambda x: torch.where(torch.arange(37) < 20, x, torch.zeros_like(x)))
case("arange_pos_bias", (2, 6, 6))(lambda x: x + (torch.arange(6)[None, :] - torch.arange(6)[:, None]).abs().float())
case("argmax_int_out", (5, 37))(lambda x: x.argmax(-1))
case("argmin_keepdim", (5, 37))(lambda x: x.argmin(0, keepdim=True))
case("argmax_float_math", (5, 37))(lambda x: x.argmax(-1).float() * 0.5 + x.sum(-1))

# --- integer arithmetic -------------------------------------------------------------------------------
case("int_mod", ints((5, 37), -50, 50))(lambda i: i % 7)
case("int_floordiv", ints((5, 37), -50, 50))(lambda i: i // 7)
case("int_remainder_neg", ints((5, 37), -50, 50))(lambda i: torch.remainder(i, -6))
case("int_fmod", ints((5, 37), -50, 50))(lambda i: torch.fmod(i, 6))
case("float_fmod", (5, 37))(lambda x: torch.fmod(x * 5, 1.5))
case("float_remainder", (5, 37))(lambda x: torch.remainder(x * 5, 1.5))
case("float_floordiv", (5, 37))(lambda x: torch.div(x * 5, 1.5, rounding_mode="floor"))
case("float_truncdiv", (5, 37))(lambda x: torch.div(x * 5, 1.5, rounding_mode="trunc"))
case("int_bitwise_and", ints((5, 37), 0, 255))(lambda i: i & 12)
case("int_bitwise_or_xor", ints((5, 37), 0, 255), ints((5, 37), 0, 255))(lambda a, b: (a | b) ^ (a & 3))
case("bool_logic", bools((5, 37)), bools((5, 37)))(lambda a, b: (a & ~b) | (a ^ b))
case("int_compare", ints((5, 37), -5, 5), ints((5, 37), -5, 5))(lambda a, b: (a > b) & (a != 0))
case("int_add_mul", ints((5, 37), -100, 100), ints((5, 37), -100, 100))(lambda a, b: a * 3 + b - 7)
case("int_shift", ints((5, 37), 0, 100))(lambda a: (a << 2) + (a >> 1))
case("int_to_float_mix", (5, 37), ints((5, 37), 0, 10))(lambda x, i: x * i + i.float().sqrt())
case("int_sum", ints((5, 37), -100, 100))(lambda a: a.sum(-1))
case("int_large", ints((5, 37), 2**24, 2**25))(lambda a: a + 1)
case("int_max", ints((5, 37), -100, 100))(lambda a: a.max(-1).values)
case("int32_input", ints((5, 37), -100, 100, torch.int32))(lambda a: a * 2 + 1)
case("bool_input", (5, 37), bools((5, 37)))(lambda x, m: x.masked_fill(m, -1.0))
case("float64_input", lambda g: torch.randn(5, 37, generator=g, dtype=torch.float64))(lambda x: x * 2 + 1)
case("float16_model", halves((5, 37), torch.float16))(lambda x: torch.relu(x) * 2 + 1)
case("bfloat16_model", halves((5, 37), torch.bfloat16))(lambda x: torch.sigmoid(x) + x)

# --- rounding -----------------------------------------------------------------------------------------
case("round", (5, 37))(lambda x: torch.round(x * 3))
case("round_decimals", (5, 37))(lambda x: torch.round(x, decimals=1))
case("trunc", (5, 37))(lambda x: torch.trunc(x * 3))
case("floor", (5, 37))(lambda x: torch.floor(x * 3))
case("ceil", (5, 37))(lambda x: torch.ceil(x * 3))
case("sign", (5, 37))(lambda x: torch.sign(x))
case("frac", (5, 37))(lambda x: torch.frac(x * 3))
case("round_half", (3, 24))(lambda x: torch.round(torch.floor(x * 4) / 2 + 0.5))
case("sgn_mix", (5, 37))(lambda x: torch.sign(x) * x.abs().sqrt())

# --- clamp ---------------------------------------------------------------------------------------------
case("clamp_tensor_bounds", (5, 37), (5, 37), (5, 37))(lambda x, lo, hi: torch.clamp(x, lo, lo + hi.abs()))
case("clamp_min_tensor", (2, 5, 37), (2, 1, 37))(lambda x, lo: torch.clamp(x, min=lo))
case("clamp_max_only", (5, 37))(lambda x: torch.clamp(x, max=0.3))
case("clamp_int", ints((5, 37), -50, 50))(lambda i: torch.clamp(i, -10, 10))

# --- scans ------------------------------------------------------------------------------------------------
case("cumsum_last", (5, 37))(lambda x: torch.cumsum(x, -1))
case("cumsum_dim0", (5, 37))(lambda x: torch.cumsum(x, 0))
case("cumprod", pos((3, 24), 0.5, 1.5))(lambda x: torch.cumprod(x, -1))
case("logcumsumexp", (3, 24))(lambda x: torch.logcumsumexp(x, -1))
case("cummax", (3, 24))(lambda x: torch.cummax(x, -1).values)
case("cumsum_int", ints((3, 24), 0, 5))(lambda i: torch.cumsum(i, -1))

# --- sorting ------------------------------------------------------------------------------------------------
case("topk_values", (5, 37))(lambda x: torch.topk(x, 4, -1).values)
case("topk_indices", (5, 37))(lambda x: torch.topk(x, 4, -1).indices)
case("sort_values", (5, 37))(lambda x: torch.sort(x, -1, descending=True).values)
case("argsort", (5, 37))(lambda x: torch.argsort(x, -1))
case("kthvalue", (5, 37))(lambda x: torch.kthvalue(x, 3, -1).values)
case("median", (5, 37))(lambda x: torch.median(x, -1).values)

# --- gathers and scatters -------------------------------------------------------------------------------
case("gather_const_idx", (5, 37), ints((5, 4), 0, 37))(lambda x, i: torch.gather(x, 1, i))
case("gather_computed_idx", (5, 37))(lambda x: torch.gather(x, 1, x.topk(3, -1).indices))
case("gather_argmax", (5, 37), (5, 37))(lambda x, y: torch.gather(y, 1, x.argmax(-1, keepdim=True)))
case("index_select_input", (5, 37), ints((5, 3), 0, 37))(lambda x, i: torch.index_select(x, 1, i[0]))
case("index_select_batch_mismatch", (5, 37), ints((3,), 0, 5))(lambda x, i: torch.index_select(x, 0, i))
case("index_tensor_argmax", (5, 37))(lambda x: torch.linspace(0, 1, 37 * 8).reshape(37, 8)[x.argmax(-1)])
case("scatter_const", (5, 37), ints((5, 4), 0, 37))(lambda x, i: torch.zeros_like(x).scatter(1, i, 1.0))
case("scatter_add", (5, 37), ints((5, 4), 0, 37), (5, 4))(lambda x, i, s: x.scatter_add(1, i, s))
case("scatter_computed", (5, 37))(lambda x: x.scatter(1, x.argmax(-1, keepdim=True), 0.0))
case("index_put_const", (5, 37))(lambda x: x.index_put((torch.tensor([0, 2]),), torch.ones(37)))
case("index_put_bool", (5, 37))(lambda x: torch.where(x > 0.5, torch.full_like(x, 0.5), x))
case("setitem_mask", (5, 37))(lambda x: _setitem_mask(x))
case("index_add", (5, 37))(lambda x: x.index_add(0, torch.tensor([0, 2, 2]), x[1:4] * 2))
case("scatter_const_index", (5, 37))(lambda x: x.scatter(1, torch.tensor([[3, 0, 36]] * 5), x[:, 10:13] * 2))
case("scatter_add_per_sample_edges", (5, 7, 8), ints((5, 12), 0, 7))(lambda x, dst: torch.zeros_like(x).scatter_add(
    1, dst[..., None].expand(-1, -1, 8), x.repeat(1, 2, 1)[:, :12].tanh()))
case("scatter_add_const_graph", (6, 37))(lambda x: torch.zeros(4, 37).scatter_add(
    0, torch.tensor([0, 3, 3, 1, 0, 2])[:, None].expand(6, 37), x.tanh()))
case("scatter_reduce_sum_const", (5, 37))(lambda x: x.scatter_reduce(
    1, torch.tensor([[1, 1, 4]] * 5), x[:, :3], "sum", include_self=False))
case("index_put_accumulate", (5, 37))(lambda x: x.index_put((torch.tensor([4, 0, 4]),), x[:3] * 0.5, accumulate=True))
case("setitem_const_columns", (5, 37))(lambda x: _setitem_columns(x))
case("one_hot_of_argmax", (5, 37))(lambda x: torch.zeros_like(x).scatter_(-1, x.argmax(-1, keepdim=True), 1.0) + x)
case("fold_no_overlap", (2, 12, 16))(lambda x: F.fold(x * 2, (8, 8), 2, stride=2))
case("masked_scatter", (5, 37), bools((5, 37)))(lambda x, m: x.masked_scatter(m, torch.arange(185.).reshape(5, 37)))
case("masked_select", (5, 37))(lambda x: torch.masked_select(x, x > 0))
case("nonzero", (5, 37))(lambda x: torch.nonzero(x > 0))
case("take_along_dim", (5, 37))(lambda x: torch.take_along_dim(x, x.argsort(-1)[:, :3], -1))


def _setitem_columns(x):
    y = x * 1.0
    y[:, torch.tensor([30, 2, 7])] = x[:, :3].exp()
    return y


def _setitem_mask(x):
    y = x.clone()
    y[y < 0] = 0.0
    return y


# --- where -------------------------------------------------------------------------------------------------
case("where_scalar_both", (5, 37))(lambda x: torch.where(x > 0, 1.0, -1.0))
case("where_scalar_one", (5, 37))(lambda x: torch.where(x > 0, x, 0.25))
case("where_broadcast", (2, 5, 37), (2, 1, 37), (2, 5, 1))(lambda x, a, b: torch.where(x > 0, a, b))
case("where_int", ints((5, 37), -5, 5))(lambda i: torch.where(i > 0, i, -i * 2))
case("where_cond_only", (5, 37), bools((5, 37)))(lambda x, m: torch.where(m, x, x * 2))

# --- triangles -----------------------------------------------------------------------------------------------
case("triu_act", (2, 6, 6))(lambda x: torch.triu(x.relu()))
case("tril_diag", (5, 37))(lambda x: torch.tril(x, -1))
case("triu_diag2", (3, 24))(lambda x: torch.triu(x, 2) * 2)
case("causal_mask_fill", (2, 7, 7))(lambda x: x.masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), float("-inf")).softmax(-1))

# --- data movement ---------------------------------------------------------------------------------------------
case("repeat_interleave", (3, 24))(lambda x: torch.repeat_interleave(x, 2, dim=1))
case("repeat_interleave_dim0", (3, 24))(lambda x: x.repeat_interleave(3, 0))
case("tile", (3, 24))(lambda x: torch.tile(x, (2, 3)))
case("expand", (1, 24))(lambda x: x.expand(5, 24) * 2)
case("stack_neg", (3, 24), (3, 24))(lambda a, b: torch.stack([a, b], -1))
case("chunk", (6, 24))(lambda x: sum(c * (i + 1) for i, c in enumerate(x.chunk(3, 0))))
case("split_sizes", (5, 37))(lambda x: torch.cat([s.flip(-1) for s in x.split([10, 27], -1)], -1))
case("unbind", (3, 24))(lambda x: torch.stack(x.unbind(0)[::-1], 1))
case("flip", (5, 37))(lambda x: torch.flip(x, (0, 1)))
case("roll", (5, 37))(lambda x: torch.roll(x, 3, 1))
case("roll_2d", (5, 37))(lambda x: torch.roll(x, (1, -4), (0, 1)))
case("narrow", (5, 37))(lambda x: x.narrow(1, 5, 11) * 3)
case("movedim", (2, 3, 5, 7))(lambda x: torch.movedim(x, 1, -1))
case("permute_contig", (2, 3, 5, 7))(lambda x: x.permute(0, 3, 1, 2).contiguous().view(2, 7, 15))
case("strided_slice", (5, 37))(lambda x: x[:, 1::3] + 1)
case("diagonal", (6, 6))(lambda x: torch.diagonal(x) * 2)
case("diagonal_offset", (2, 5, 7))(lambda x: torch.diagonal(x, 2, 1, 2) + torch.diagonal(x, -1, -1, -2).sum())
case("diagonal_dims", (3, 4, 4))(lambda x: torch.diagonal(x, 0, 0, 2))
case("diag_embed", (3, 5))(lambda x: torch.diag_embed(x))

# --- casts, elementwise math, data-dependent shapes -----------------------------------------------------------
case("float_to_long", (5, 37))(lambda x: (x * 3).long())
case("float_to_int_math", (5, 37))(lambda x: (x * 3).to(torch.int32).float() + x)
case("float_to_bool", (5, 37))(lambda x: torch.relu(x).bool())
case("bool_to_float_sum", (5, 37))(lambda x: (x > 0).float().sum(-1))
case("bucketize", (5, 37))(lambda x: torch.bucketize(x, torch.tensor([-1.0, 0.0, 0.5, 1.0])))
case("searchsorted", (5, 37))(lambda x: torch.searchsorted(torch.tensor([-1.0, 0.0, 0.5, 1.0]), x.contiguous()))
case("pow_ops", pos((5, 37)))(lambda x: x ** 2 + x ** 0.5 + torch.pow(2.0, x) + torch.exp2(x))
case("logs", pos((5, 37)))(lambda x: torch.log2(x) + torch.log10(x) + torch.log1p(x) + torch.expm1(x))
case("atan2_hypot", (5, 37), (5, 37))(lambda a, b: torch.atan2(a, b) + torch.hypot(a, b))
case("trig", (5, 37))(lambda x: torch.sin(x) + torch.cos(x) + torch.tan(x * 0.5) + torch.atan(x) + torch.asin(x.tanh()))
case("erf_family", (5, 37))(lambda x: torch.erf(x) + torch.erfc(x) + torch.erfinv(x.tanh() * 0.9))
case("lerp_addcmul", (5, 37), (5, 37), (5, 37))(lambda a, b, c: torch.lerp(a, b, 0.3) + torch.addcmul(a, b, c, value=0.5) + torch.addcdiv(a, b, c.abs() + 1))
case("reciprocal_rsqrt", pos((5, 37)))(lambda x: x.reciprocal() + x.rsqrt())
case("isnan_isinf", (5, 37))(lambda x: torch.stack([torch.isnan(torch.log(x)), torch.isinf(1 / (x * 0)), torch.isfinite(torch.log(x))]))
case("heaviside_copysign", (5, 37), (5, 37))(lambda a, b: torch.heaviside(a, torch.tensor(0.5)) + torch.copysign(a, b))
case("minimum_maximum", (5, 37), (5, 37))(lambda a, b: torch.minimum(a, b) * torch.maximum(a, b))
case("logical_ops", (5, 37), (5, 37))(lambda a, b: torch.logical_xor(a > 0, b > 0) | torch.logical_not(a > 1))
case("unique", (5, 37))(lambda x: torch.unique((x * 2).round()))
case("bincount", ints((8,), 0, 6))(lambda i: torch.bincount(i, minlength=6))
case("histc", (5, 37))(lambda x: torch.histc(x, 4, -2, 2))
case("softmax_dtype", (5, 37))(lambda x: F.softmax(x, -1, dtype=torch.float32))
case("dropout_eval", (5, 37))(lambda x: F.dropout(x, 0.5, training=False) * 2)
case("new_full", (5, 37))(lambda x: x + x.new_full((5, 37), 0.5) + torch.full_like(x, 2.0))
case("zeros_shape", (5, 37))(lambda x: torch.cat([x, torch.zeros(x.shape[0], 3)], -1))
case("addmm_full_bias", (5, 7), (5, 7))(lambda a, b: torch.addmm(a @ b.T, a, b.T, beta=0.5))
case("baddbmm_mask", (2, 5, 4), (2, 5, 4))(lambda q, k: torch.baddbmm(torch.ones(5, 5).triu(1) * -1e4, q, k.transpose(1, 2)).softmax(-1))
case("matmul_vec", (5, 37))(lambda x: x @ torch.linspace(-1, 1, 37))
case("sum_int_dtype", (5, 37))(lambda x: (x > 0).sum(-1))
case("mean_bool_float", (5, 37))(lambda x: (x > 0).float().mean())
case("scalar_out", (5, 37))(lambda x: x.sum())
case("argmax_flat", (5, 37))(lambda x: x.argmax())

# --- multi-output ops, in-place ops, dtype plumbing ------------------------------------------------------------
case("max_dim_both", (5, 37))(lambda x: torch.max(x, 0))
case("min_dim_indices_only", (5, 37))(lambda x: torch.min(x, -1)[1])
case("sort_both", (5, 37))(lambda x: torch.sort(x, -1))
case("aminmax", (5, 37))(lambda x: torch.stack(torch.aminmax(x, dim=-1)))
case("std_mean", (5, 37))(lambda x: torch.std_mean(x, -1))
case("maxpool1d_indices", (2, 3, 12))(lambda x: F.max_pool1d(x, 3, return_indices=True))
case("inplace_ops", (5, 37))(lambda x: _inplace(x))
case("transpose_T_mT", (2, 5, 37))(lambda x: x.mT @ x[0].T.T[None])
case("type_as", (5, 37), ints((5, 37), 0, 4))(lambda x, i: x * i.type_as(x))
case("masked_fill_tensor_value", (5, 37))(lambda x: x.masked_fill(x < 0, x.mean()))
case("functional_embedding_input_weight", ints((2, 5), 0, 10), (2, 10, 8))(lambda i, w: F.embedding(i[0], w[0]) + w[1, :5])
case("scatter_reduce", (5, 37), ints((5, 4), 0, 37))(lambda x, i: x.scatter_reduce(1, i, x[:, :4], "amax"))
case("fp16_layernorm", halves((5, 37), torch.float16))(lambda x: F.layer_norm(x, (37,)) * 2)
case("bf16_softmax_matmul", halves((2, 5, 37), torch.bfloat16))(lambda x: x.softmax(-1) @ x.transpose(1, 2))
case("tensor_const_in_forward", (5, 37))(lambda x: x * torch.tensor([2.0]) + torch.tensor(1, dtype=torch.int64))
case("unsqueeze_none", (5, 37))(lambda x: x[:, None, :] * x[None, :, :1])
case("ellipsis_index", (2, 5, 37))(lambda x: x[..., 3] + x[..., -1])
case("int_index_neg", (2, 5, 37))(lambda x: x[:, -1] - x[:, 0])
case("cat_with_empty", (5, 37))(lambda x: torch.cat([x, x[:, :0]], -1))
case("fp64_model_math", lambda g: torch.randn(5, 37, generator=g, dtype=torch.float64))(lambda x: x.softmax(-1).sum(-1))
case("mixed_int_float_promote", (5, 37), ints((5, 37), 0, 5))(lambda x, i: x + i)
case("int_div_true", ints((5, 37), 1, 50), ints((5, 37), 1, 9))(lambda a, b: a / b)


# --- ties, edge values and special cases -----------------------------------------------------------------------
case("argmax_ties_first_true", (5, 37))(lambda x: (x > 0).float().argmax(-1))
case("max_dim_ties", (5, 37))(lambda x: torch.clamp(x, max=0.0).max(-1)[1])
case("argmin_ties", (5, 37))(lambda x: torch.clamp(x, min=0.0).argmin(0))
case("cumsum_bool", (5, 37))(lambda x: (x > 0).cumsum(-1))
case("cumsum_bool_float", (5, 37))(lambda x: (x > 0).float().cumsum(-1) * x)
case("masked_fill_inf_out", (2, 6))(lambda x: (x.masked_fill(x > 0, float("-inf")), torch.where(x > 0, float("inf"), x)))
case("isinf_of_masked_fill", (2, 6))(lambda x: torch.isinf(x.masked_fill(x > 0, float("-inf"))))
case("softmax_all_masked", (2, 5, 6))(lambda x: x.masked_fill(torch.arange(6) >= 0, float("-inf")).softmax(-1))
case("normalize_zero_rows", (5, 37))(lambda x: F.normalize(x * (torch.arange(5)[:, None] % 2), dim=-1))
case("layer_norm_const_rows", (5, 37))(lambda x: F.layer_norm(x[:, :1].expand(5, 37) * 1.0, (37,)))
case("std_single", (5, 1))(lambda x: x.std(-1))
case("var_correction", (5, 37))(lambda x: torch.var(x, -1, correction=0) + torch.var(x, 0, correction=2).sum())
case("logsumexp_neginf", (5, 37))(lambda x: torch.logsumexp(x.masked_fill(x > 0.5, float("-inf")), -1))
case("clamp_min_gt_max", (5, 37))(lambda x: torch.clamp(x, min=0.5, max=-0.5))
case("div_by_zero", (5, 37))(lambda x: x / (x > 0).float())
case("log_zero", (5, 37))(lambda x: torch.log(torch.relu(x)))
case("sigmoid_extreme", (5, 37))(lambda x: torch.sigmoid(x * 100) + torch.tanh(x * 100))
case("gelu_exact_large", (5, 37))(lambda x: F.gelu(x * 10))
case("log_softmax_large", (5, 37))(lambda x: F.log_softmax(x * 100, -1))
case("interp_scale_1_5", (1, 2, 5, 7))(lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"))
case("interp_nearest_1_5", (1, 2, 5, 7))(lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest"))
case("interp_bilinear_hw", (1, 2, 5, 7))(lambda x: F.interpolate(x, scale_factor=(1.3, 2.2), mode="bilinear"))
case("upsample_module_1_5", (1, 2, 5, 7))(lambda x: nn.Upsample(scale_factor=1.5, mode="bilinear")(x))
case("interp_nearest_2_5", (1, 2, 4, 6))(lambda x: F.interpolate(x, scale_factor=2.5, mode="nearest"))
case("interp_recompute", (1, 2, 5, 7))(lambda x: F.interpolate(x, scale_factor=1.7, mode="nearest", recompute_scale_factor=True))
case("grid_sample", (1, 2, 5, 7), lambda g: torch.rand(1, 4, 6, 2, generator=g) * 2 - 1)(lambda x, gr: F.grid_sample(x, gr, align_corners=False))
case("affine_grid", (1, 2, 3))(lambda t: F.affine_grid(t, (1, 1, 4, 5), align_corners=False))
case("inverse", (1, 4, 4))(lambda x: torch.linalg.inv(x + 4 * torch.eye(4)))
case("det", (1, 4, 4))(lambda x: torch.det(x))
case("avgpool_divisor", (1, 2, 6, 6))(lambda x: F.avg_pool2d(x, 2, divisor_override=3))
case("where_mixed_dtype", (5, 37), ints((5, 37), 0, 5))(lambda x, i: torch.where(x > 0, i, x))
case("sum_dtype_f64", (5, 37))(lambda x: x.sum(-1, dtype=torch.float64))
case("conv_replicate", (1, 3, 6, 7))(lambda x: F.conv2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), torch.ones(2, 3, 3, 3) / 27))


def _inplace(x):
    y = x.clone()
    y.add_(1).mul_(2)
    y[:, 0] = 0.0
    y.clamp_(max=3.0)
    return y


# --- padding and resampling ---------------------------------------------------------------------------------
case("pad_reflect", (1, 2, 5, 7))(lambda x: F.pad(x, (2, 1, 1, 2), mode="reflect"))
case("pad_replicate", (1, 2, 5, 7))(lambda x: F.pad(x, (2, 1, 1, 2), mode="replicate"))
case("pad_circular", (1, 2, 5, 7))(lambda x: F.pad(x, (2, 1, 1, 2), mode="circular"))
case("pad_reflect_1d", (1, 3, 9))(lambda x: F.pad(x, (3, 2), mode="reflect"))
case("pad_const_val", (5, 37))(lambda x: F.pad(x, (1, 2, 3, 0), value=0.5))
case("pad_negative", (5, 37))(lambda x: F.pad(x, (-1, -2)))
case("pad_negative_mixed", (2, 5, 37))(lambda x: F.pad(x, (2, -3, -1, 1), value=0.25))
case("pad_circular_1d", (2, 3, 9))(lambda x: F.pad(x, (3, 1), mode="circular"))
case("pad_circular_3d", (1, 2, 3, 4, 5))(lambda x: F.pad(x, (1, 1, 2, 0, 1, 2), mode="circular"))
case("interp_nearest", (1, 2, 5, 7))(lambda x: F.interpolate(x, scale_factor=2, mode="nearest"))
case("interp_nearest_size", (1, 2, 5, 7))(lambda x: F.interpolate(x, size=(8, 11), mode="nearest"))
case("interp_nearest_exact", (1, 2, 5, 7))(lambda x: F.interpolate(x, size=(8, 11), mode="nearest-exact"))
case("interp_bilinear", (1, 2, 5, 7))(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"))
case("interp_bilinear_ac", (1, 2, 5, 7))(lambda x: F.interpolate(x, size=(9, 13), mode="bilinear", align_corners=True))
case("interp_bicubic", (1, 2, 5, 7))(lambda x: F.interpolate(x, size=(9, 13), mode="bicubic"))
case("interp_bicubic_ac", (1, 2, 5, 7))(lambda x: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=True))
case("interp_linear_1d", (1, 3, 9))(lambda x: F.interpolate(x, scale_factor=1.5, mode="linear"))
case("interp_down", (1, 2, 9, 12))(lambda x: F.interpolate(x, size=(4, 5), mode="bilinear"))
case("interp_area", (1, 2, 9, 12))(lambda x: F.interpolate(x, size=(3, 4), mode="area"))
case("pixel_shuffle", (1, 8, 3, 5))(lambda x: F.pixel_shuffle(x, 2))
case("pixel_unshuffle", (1, 2, 6, 10))(lambda x: F.pixel_unshuffle(x, 2))
case("unfold", (1, 2, 6, 7))(lambda x: F.unfold(x, 3, padding=1, stride=2))
case("fold", (1, 18, 12))(lambda x: F.fold(x, (6, 8), 3, stride=2, padding=1))
case("tensor_unfold", (2, 13))(lambda x: x.unfold(1, 4, 3))
case("tensor_unfold_overlap", (2, 3, 9, 5))(lambda x: x.unfold(2, 3, 1) * 2)
case("tensor_unfold_2d_patches", (1, 2, 6, 8))(lambda x: x.unfold(2, 2, 2).unfold(3, 4, 4).reshape(1, 2, 3, 2, 8))

# --- einsum --------------------------------------------------------------------------------------------------
case("einsum_bmm", (2, 3, 5), (2, 5, 7))(lambda a, b: torch.einsum("bij,bjk->bik", a, b))
case("einsum_outer", (2, 5), (2, 7))(lambda a, b: torch.einsum("bi,bj->bij", a, b))
case("einsum_trace_like", (3, 5, 5))(lambda a: torch.einsum("bii->b", a))
case("einsum_attn", (2, 4, 3, 8), (2, 4, 5, 8))(lambda q, k: torch.einsum("bhqd,bhkd->bhqk", q, k))
case("einsum_reduce", (3, 5, 7))(lambda a: torch.einsum("ijk->j", a))
case("einsum_bilinear", (3, 5), (3, 6))(lambda a, b: torch.einsum("bi,oij,bj->bo", a, torch.linspace(-1, 1, 120).reshape(4, 5, 6), b))

# --- norms and reductions -------------------------------------------------------------------------------------
case("group_norm", (2, 6, 5, 7))(lambda x: F.group_norm(x, 3))
module_case("group_norm_affine", lambda: nn.GroupNorm(2, 6), (2, 6, 5, 7))
case("layer_norm_noaffine", (5, 37))(lambda x: F.layer_norm(x, (37,)))
case("layer_norm_2d", (2, 5, 37))(lambda x: F.layer_norm(x, (5, 37)))
case("rms_norm", (5, 37))(lambda x: F.rms_norm(x, (37,)) if hasattr(F, "rms_norm") else x)
case("normalize", (5, 37))(lambda x: F.normalize(x, dim=-1))
case("normalize_p1", (5, 37))(lambda x: F.normalize(x, p=1, dim=0))
case("norm_p1", (5, 37))(lambda x: torch.norm(x, p=1, dim=-1))
case("norm_p2", (5, 37))(lambda x: torch.norm(x, dim=-1))
case("norm_inf", (5, 37))(lambda x: torch.norm(x, p=float("inf"), dim=-1))
case("linalg_vector_norm_all", (5, 37))(lambda x: torch.linalg.vector_norm(x))
case("var_unbiased", (5, 37))(lambda x: x.var(-1))
case("var_biased", (5, 37))(lambda x: x.var(-1, unbiased=False))
case("std_unbiased", (5, 37))(lambda x: x.std(0))
case("var_mean", (5, 37))(lambda x: torch.stack(torch.var_mean(x, -1), 0))
case("logsumexp", (5, 37))(lambda x: torch.logsumexp(x * 10, -1))
case("amax_multi", (2, 5, 37))(lambda x: torch.amax(x, (0, 2)))
case("amin_multi", (2, 5, 37))(lambda x: torch.amin(x, (1, 2)))
case("max_dim_values", (5, 37))(lambda x: x.max(-1).values + x.max(-1).indices.float())
case("cosine_similarity", (5, 37), (5, 37))(lambda a, b: F.cosine_similarity(a, b, dim=-1))
case("cdist", (1, 5, 7), (1, 6, 7))(lambda a, b: torch.cdist(a, b))
case("cdist_p1", (1, 5, 7), (1, 6, 7))(lambda a, b: torch.cdist(a, b, p=1))
case("cdist_inf_batched", (2, 5, 7), (2, 6, 7))(lambda a, b: torch.cdist(a, b, p=float("inf")))
case("cdist_p3", (1, 5, 7), (1, 6, 7))(lambda a, b: torch.cdist(a, b, p=3))
case("cdist_big_mm", (1, 40, 7), (1, 30, 7))(lambda a, b: torch.cdist(a, b))
case("pairwise_distance", (5, 7), (5, 7))(lambda a, b: F.pairwise_distance(a, b))
case("prod", pos((3, 24), 0.8, 1.2))(lambda x: x.prod(-1))
case("mean_multi", (2, 5, 37))(lambda x: x.mean((0, 2), keepdim=True))
case("any_all", (5, 37))(lambda x: torch.stack([(x > 1).any(-1), (x > -2).all(-1)]))
case("isclose", (5, 37), (5, 37))(lambda a, b: torch.isclose(a, a + b * 1e-3, rtol=1e-3, atol=1e-3))
case("nan_to_num", (5, 37))(lambda x: torch.nan_to_num(torch.log(x), nan=0.0, neginf=-5.0))
case("bool_mask_out", (5, 37))(lambda x: x > 0.3)
case("count_nonzero", (5, 37))(lambda x: torch.count_nonzero(x > 0, -1))

# --- activations -------------------------------------------------------------------------------------------
for _n, _m in [("prelu", lambda: nn.PReLU(37)), ("prelu_scalar", lambda: nn.PReLU()), ("hardswish", nn.Hardswish),
               ("hardsigmoid", nn.Hardsigmoid), ("mish", nn.Mish), ("selu", nn.SELU), ("celu", lambda: nn.CELU(0.7)),
               ("glu", nn.GLU), ("softsign", nn.Softsign), ("tanhshrink", nn.Tanhshrink),
               ("threshold", lambda: nn.Threshold(0.2, -3.0)), ("logsigmoid", nn.LogSigmoid),
               ("softplus_beta", lambda: nn.Softplus(beta=2.0, threshold=1.0)),
               ("hardtanh_bounds", lambda: nn.Hardtanh(-0.4, 0.7)), ("rrelu_eval", nn.RReLU),
               ("softmin", lambda: nn.Softmin(-1)), ("log_softmax", lambda: nn.LogSoftmax(-1)),
               ("elu_alpha", lambda: nn.ELU(0.5)), ("leaky", lambda: nn.LeakyReLU(0.2)), ("relu6", nn.ReLU6),
               ("silu", nn.SiLU), ("gelu_tanh", lambda: nn.GELU("tanh")), ("hardshrink", nn.Hardshrink),
               ("softshrink", nn.Softshrink), ("log_softmax_dim0", lambda: nn.LogSoftmax(0))]:
    module_case("act_" + _n, _m, (4, 3, 37) if _n == "prelu_scalar" else (5, 38) if _n == "glu" else (5, 37))
module_case("act_prelu_conv", lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.PReLU(4)), (1, 3, 7, 9))

# --- attention and transformer layers -------------------------------------------------------------------------


class MHAMask(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.mha = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x, kpm):
        L = x.shape[1]
        if self.kind == "kpm":
            return self.mha(x, x, x, key_padding_mask=kpm, need_weights=False)[0]
        if self.kind == "bool":
            m = torch.ones(L, L, dtype=torch.bool).triu(1)
            return self.mha(x, x, x, attn_mask=m, need_weights=False)[0]
        if self.kind == "float":
            m = torch.zeros(L, L).masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
            return self.mha(x, x, x, attn_mask=m)[0]
        if self.kind == "weights":
            return self.mha(x, x, x, key_padding_mask=kpm)[1]
        return self.mha(x, x, x, attn_mask=torch.ones(L, L, dtype=torch.bool).triu(1), key_padding_mask=kpm)[0]


def _kpm(g):
    m = torch.zeros(2, 5, dtype=torch.bool)
    m[0, 3:] = True
    m[1, 4:] = True
    return m


for _k in ("kpm", "bool", "float", "weights", "both"):
    module_case(f"mha_{_k}", (lambda k=_k: MHAMask(k)), (2, 5, 16), _kpm)
module_case("mha_kdim", lambda: _MHAKdim(), (2, 5, 16), (2, 7, 12))


class _MHAKdim(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 2, kdim=12, vdim=12, batch_first=True)

    def forward(self, q, kv):
        return self.mha(q, kv, kv)[0]


for _nf in (False, True):
    module_case(f"tenc_norm_first_{_nf}", (lambda nf=_nf: nn.TransformerEncoderLayer(16, 2, 32, 0.0, batch_first=True,
                                                                                       norm_first=nf)), (2, 5, 16))
    module_case(f"tdec_norm_first_{_nf}", (lambda nf=_nf: _Dec(nf)), (2, 5, 16), (2, 6, 16))
module_case("tenc_gelu_mask", lambda: _EncMask(), (2, 5, 16), _kpm)


class _Dec(nn.Module):
    def __init__(self, nf):
        super().__init__()
        self.d = nn.TransformerDecoderLayer(16, 2, 32, 0.0, batch_first=True, norm_first=nf)

    def forward(self, t, m):
        L = t.shape[1]
        return self.d(t, m, tgt_mask=nn.Transformer.generate_square_subsequent_mask(L))


class _EncMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.e = nn.TransformerEncoderLayer(16, 2, 32, 0.0, activation="gelu", batch_first=True)

    def forward(self, x, kpm):
        return self.e(x, src_key_padding_mask=kpm)


# --- recurrent layers ------------------------------------------------------------------------------------------
class _RNN(nn.Module):
    def __init__(self, cls, bidir, bf, layers=1):
        super().__init__()
        self.r = cls(6, 5, num_layers=layers, bidirectional=bidir, batch_first=bf)

    def forward(self, x):
        out = self.r(x)
        return out[0]


for _c in (nn.LSTM, nn.GRU, nn.RNN):
    for _b in (False, True):
        module_case(f"{_c.__name__.lower()}_bidir{int(_b)}_bf", (lambda c=_c, b=_b: _RNN(c, b, True)), (2, 4, 6))
    module_case(f"{_c.__name__.lower()}_seqfirst", (lambda c=_c: _RNN(c, False, False)), (4, 2, 6))
module_case("lstm_2layer", lambda: _RNN(nn.LSTM, True, True, 2), (2, 4, 6))
module_case("lstm_hidden_out", lambda: _LSTMH(), (2, 4, 6))


class _LSTMH(nn.Module):
    def __init__(self):
        super().__init__()
        self.r = nn.LSTM(6, 5, batch_first=True)

    def forward(self, x):
        o, (h, c) = self.r(x)
        return h + c


# --- convolutions and pooling ----------------------------------------------------------------------------------
module_case("conv1d", lambda: nn.Conv1d(3, 4, 3, stride=2, padding=1), (2, 3, 11))
module_case("conv1d_dil_groups", lambda: nn.Conv1d(4, 6, 3, dilation=2, groups=2, padding=2), (1, 4, 13))
module_case("conv1d_pad_same", lambda: nn.Conv1d(3, 4, 4, padding="same"), (1, 3, 10))
module_case("conv2d_pad_same_odd", lambda: nn.Conv2d(3, 4, (2, 4), padding="same", dilation=(1, 1)), (1, 3, 6, 7))
module_case("conv2d_pad_same_dil", lambda: nn.Conv2d(3, 4, 3, padding="same", dilation=2), (1, 3, 6, 7))
module_case("convT1d", lambda: nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1, output_padding=1), (1, 3, 7))
module_case("convT2d", lambda: nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1), (1, 3, 5, 6))
module_case("convT2d_groups_dil", lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2, dilation=2), (1, 4, 5, 5))
module_case("conv2d_reflect", lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), (1, 3, 6, 7))
module_case("conv2d_circular", lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="circular"), (1, 3, 6, 7))
module_case("conv2d_depthwise", lambda: nn.Conv2d(4, 8, 3, groups=4, stride=2), (1, 4, 9, 9))
module_case("conv3d", lambda: nn.Conv3d(2, 3, 3, padding=1), (1, 2, 4, 5, 6))
module_case("maxpool1d", lambda: nn.MaxPool1d(3, 2), (2, 3, 11))
module_case("maxpool1d_ceil", lambda: nn.MaxPool1d(3, 2, ceil_mode=True, padding=1), (2, 3, 10))
module_case("maxpool2d_indices", lambda: nn.MaxPool2d(2, return_indices=True), (1, 2, 6, 6))
module_case("maxpool2d_dil", lambda: nn.MaxPool2d(3, 2, dilation=2), (1, 2, 11, 11))
module_case("avgpool1d", lambda: nn.AvgPool1d(3, 2, padding=1), (2, 3, 11))
module_case("avgpool2d_nopadcount", lambda: nn.AvgPool2d(3, 2, 1, count_include_pad=False), (1, 2, 7, 9))
module_case("avgpool2d_ceil", lambda: nn.AvgPool2d(3, 2, ceil_mode=True), (1, 2, 8, 8))
module_case("adaptive_max2d", lambda: nn.AdaptiveMaxPool2d((3, 4)), (1, 2, 7, 9))
module_case("adaptive_avg2d", lambda: nn.AdaptiveAvgPool2d((3, 4)), (1, 2, 7, 9))
module_case("adaptive_avg1d", lambda: nn.AdaptiveAvgPool1d(4), (2, 3, 11))
module_case("adaptive_max1d", lambda: nn.AdaptiveMaxPool1d(4), (2, 3, 11))
module_case("adaptive_avg2d_up", lambda: nn.AdaptiveAvgPool2d((5, 10)), (1, 2, 3, 7))
module_case("adaptive_max2d_none", lambda: nn.AdaptiveMaxPool2d((None, 3)), (1, 2, 5, 7))
module_case("adaptive_max2d_indices", lambda: nn.AdaptiveMaxPool2d(3, return_indices=True), (1, 2, 7, 7))
module_case("lppool2d", lambda: nn.LPPool2d(2, 2), (1, 2, 6, 8))
module_case("lppool1d", lambda: nn.LPPool1d(3, 3), (1, 2, 9))
module_case("maxpool3d", lambda: nn.MaxPool3d(2), (1, 2, 4, 4, 4))
module_case("avgpool3d", lambda: nn.AvgPool3d(2), (1, 2, 4, 4, 4))
module_case("instance_norm", lambda: nn.InstanceNorm2d(3, affine=True), (2, 3, 5, 7))
module_case("instance_norm1d", lambda: nn.InstanceNorm1d(3), (2, 3, 9))
module_case("batchnorm1d", lambda: _bn(nn.BatchNorm1d(37)), (5, 37))
module_case("local_response_norm", lambda: nn.LocalResponseNorm(3), (1, 5, 4, 6))


def _bn(m):
    with torch.no_grad():
        m.running_mean.uniform_(-1, 1)
        m.running_var.uniform_(0.5, 1.5)
    return m


# --- embeddings and bilinear -----------------------------------------------------------------------------------
module_case("embedding_padding_idx", lambda: nn.Embedding(10, 8, padding_idx=0), ints((2, 5), 0, 10))
module_case("embedding_max_norm", lambda: nn.Embedding(10, 8, max_norm=1.0), ints((2, 5), 0, 10))
module_case("embedding_bag_mean", lambda: nn.EmbeddingBag(10, 8, mode="mean"), ints((3, 4), 0, 10))
module_case("embedding_bag_sum", lambda: nn.EmbeddingBag(10, 8, mode="sum"), ints((3, 4), 0, 10))
module_case("embedding_bag_max", lambda: nn.EmbeddingBag(10, 8, mode="max"), ints((3, 4), 0, 10))
module_case("bilinear", lambda: nn.Bilinear(5, 6, 7), (3, 5), (3, 6))
module_case("embedding_int32", lambda: nn.Embedding(10, 8), ints((2, 5), 0, 10, torch.int32))
module_case("linear_no_bias_3d", lambda: nn.Linear(37, 5, bias=False), (2, 3, 37))
module_case("pixel_shuffle_mod", lambda: nn.Sequential(nn.Conv2d(2, 8, 1), nn.PixelShuffle(2)), (1, 2, 3, 5))
module_case("upsample_mod", lambda: nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
                                                  nn.Conv2d(2, 2, 3)), (1, 2, 5, 6))


# --- architecture blocks (tools/architecture_blocks.py) --------------------------------------------------------
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import architecture_blocks  # noqa: E402

for _n, (_make, *_inputs) in architecture_blocks.BLOCKS.items():
    module_case("arch_" + _n, _make, *_inputs)


# --- running ---------------------------------------------------------------------------------------------------
class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def run_case(name: str, arch: str, defaults: bool, timeout: float, exact: bool = False, atol: float = 0.0):
    """``(outcome, detail)`` for the idiom ``name``; ``exact``: the golden backend computes in plain float32
    (``golden_ignore_df_precision``) instead of the chip's arithmetic; ``atol``: an absolute floor added to the
    comparison's (random_graphs' 1e-6)."""
    import pybuda
    from pybuda.errors import PybudaError

    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import random_graphs as rg

    factory, make_inputs = CASES[name]
    model = factory().eval()
    inputs = make_inputs()
    with torch.no_grad():
        want = model(*[t.clone() for t in inputs])
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    pybuda.pybuda_reset()
    if not defaults:
        pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                         default_math_fidelity=pybuda.MathFidelity.HiFi4)
    if exact:
        pybuda.set_configuration_options(golden_ignore_df_precision=True)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(timeout))
    try:
        tt = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", model),
                             arch=pybuda.BackendDevice.from_string(arch))
        got = [t.value() if hasattr(t, "value") else t
               for t in pybuda.run_inference(inputs=[tuple(t.clone() for t in inputs)]).get()]
        fallback = tt.cpu_fallback_device_pre is not None or tt.cpu_fallback_device_post is not None
        report = None
        try:
            from pybuda.frontend.torch import capture
            report = capture(model, tuple(inputs), for_device=True).report
            fallback = fallback or report.has_fallback
        except Exception:  # noqa: BLE001 -- the report is informational
            pass
    except _Timeout:
        return "CRASH", f"hang: no result after {timeout:.0f} s"
    except PybudaError as e:
        return "CLEAR-ERROR", f"{type(e).__name__}: {str(e)[:400]}"
    except Exception as e:  # noqa: BLE001 -- anything else is a crash
        return "CRASH", f"{type(e).__name__}: {str(e)[:300]}\n{traceback.format_exc(limit=-4)}"
    finally:
        signal.alarm(0)
        try:
            pybuda.shutdown()
        except Exception:  # noqa: BLE001
            pass
    saved_atol = rg.ATOL_ABS
    rg.ATOL_ABS = max(rg.ATOL_ABS, atol)
    try:
        diff = _compare(got, want, defaults, rg)
    finally:
        rg.ATOL_ABS = saved_atol
    if diff:
        return "WRONG", diff
    if fallback:
        ops = ", ".join(report.op_names()) if report is not None else "?"
        return "PARTIAL-FALLBACK", f"host ops: {ops}"
    return "DEVICE", ""


def _compare(got, want, defaults, rg):
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if not isinstance(g, torch.Tensor):
            return f"output {i} is a {type(g).__name__}"
        if not w.is_floating_point():  # integer and bool outputs: exact, dtype class too
            if g.dtype != w.dtype and (g.dtype == torch.bool) != (w.dtype == torch.bool):
                return f"output {i}: dtype {g.dtype}, expected {w.dtype}"
            if tuple(g.shape) != tuple(w.shape):
                return f"output {i}: shape {list(g.shape)}, expected {list(w.shape)}"
            if g.is_floating_point():
                return f"output {i}: dtype {g.dtype}, expected {w.dtype}"
            if not torch.equal(g.long(), w.long()):
                bad = int((g.long() != w.long()).sum())
                return f"output {i}: {bad} of {w.numel()} integer elements differ"
            continue
        if g.dtype != w.dtype:
            # the device may return float32 for a float16 model; a dtype class change is wrong
            if not g.is_floating_point():
                return f"output {i}: dtype {g.dtype}, expected {w.dtype}"
    if defaults:
        saved = rg.ATOL_REL, rg.PCC_MIN
        # Default-format runs (Float16_b storage, LoFi) are compared at a looser tolerance and PCC.
        rg.ATOL_REL, rg.PCC_MIN = rg.DEFAULTS_ATOL_REL, rg.DEFAULTS_PCC
    try:
        floats = [(g.float(), w.float()) for g, w in zip(got, want) if w.is_floating_point()]
        return rg.compare([g for g, _ in floats], [w for _, w in floats])
    finally:
        if defaults:
            rg.ATOL_REL, rg.PCC_MIN = saved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", default="", help="only idioms whose name contains one of these (comma separated)")
    ap.add_argument("--arch", default="wormhole_b0")
    ap.add_argument("--defaults", action="store_true", help="default data formats and fidelity, not Float32/HiFi4")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("-v", action="store_true", help="print each idiom's detail")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    import logging
    import warnings
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    keys = [k for k in args.k.split(",") if k]
    names = [n for n in CASES if not keys or any(k in n for k in keys)]
    if args.list:
        print("\n".join(names))
        return 0
    counts: Dict[str, int] = {}
    rows: List[Tuple[str, str, str]] = []
    for name in names:
        t0 = time.perf_counter()
        try:
            outcome, detail = run_case(name, args.arch, args.defaults, args.timeout)
            if outcome == "WRONG":
                again, _ = run_case(name, args.arch, args.defaults, args.timeout, exact=True, atol=EXACT_ATOL)
                if again != "WRONG":  # right in plain float32: the chip's arithmetic, not the program
                    outcome = "NUMERICS"
        except Exception as e:  # noqa: BLE001 -- the idiom itself failed in torch or the harness
            outcome, detail = "CRASH", f"harness: {type(e).__name__}: {e}"
        counts[outcome] = counts.get(outcome, 0) + 1
        rows.append((name, outcome, detail))
        line = f"{name:32s} {outcome:17s} {time.perf_counter() - t0:6.1f}s"
        if args.v or outcome in ("WRONG", "CRASH"):
            line += "  " + detail.replace("\n", "\n    ")
        elif detail:
            line += "  " + detail.splitlines()[0][:150]
        print(line, flush=True)
    print("summary:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if counts.get("WRONG") or counts.get("CRASH") else 0


if __name__ == "__main__":
    sys.exit(main())
