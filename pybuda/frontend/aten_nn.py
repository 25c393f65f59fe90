"""Converters for ATen reductions, normalisation, matmul, convolution/pooling and misc ops.

Registered into :data:`pybuda.frontend.aten_builder.CONVERTERS` by the ``@converts`` decorator when
:mod:`pybuda.frontend.aten_map` imports this module.
"""

from __future__ import annotations

import math
import operator
from typing import Any, List, Sequence, Tuple

import torch

from pybuda.frontend.aten_builder import (_as_bool, _reduce_max_or_min, out_shape_of, Builder, Const, converts, Missing, out_dtype, out_shape, Unsupported, _dims, _is_number, _norm_dim)
from pybuda.frontend.aten_index import const_gather
from pybuda.frontend.aten_shape import _index_range, _permute_by
from pybuda.frontend.fx_program import meta_val, op_name

# --- reductions -----------------------------------------------------------------------------------
def _reduce(b: Builder, op_type: str, x: Any, dims: Any, final_shape: Sequence[int], dt=None) -> str:
    v = b.tensor(x, dt)
    shape = b.shape(v)
    for d in _dims(dims, len(shape)):
        if shape[d] != 1 or op_type == "reduce_avg":
            v = b.op(op_type, [v], dim=d)
    return b.reshape(v, final_shape)


@converts("sum")
def _sum(b: Builder, n, p):
    x = p["self"]
    if b.rank(x) == 0:
        return b.cast(x, out_dtype(n))
    return _reduce(b, "reduce_sum", x, p.get("dim"), out_shape(n), out_dtype(n))


@converts("mean")
def _mean(b: Builder, n, p):
    x = p["self"]
    if b.rank(x) == 0:
        return b.cast(x, out_dtype(n))
    return _reduce(b, "reduce_avg", x, p.get("dim"), out_shape(n), out_dtype(n))


@converts("amax", "amin")
def _amax(b: Builder, n, p):
    return _reduce_max_or_min(b, p["self"], p["dim"], p["keepdim"], op_name(n.target) == "amin", out_shape(n))


@converts("argmax", "argmin")
def _argmax(b: Builder, n, p):
    x = b.tensor(p["self"])
    if op_name(n.target) == "argmin":
        x = b.binary("multiply", x, -1, b.dtype(x))
    if p["dim"] is None:
        x = b.reshape(x, (math.prod(b.shape(x)),))
        dim = 0
    else:
        dim = _norm_dim(p["dim"], b.rank(x))
    return b.cast(b.reshape(b.op("argmax", [x], dim=dim), out_shape(n)), out_dtype(n))


def _var_parts(b: Builder, n, p, final_var_shape, with_mean_shape=None):
    x = b.tensor(p["self"], out_dtype(n) if not isinstance(meta_val(n), (list, tuple)) else meta_val(n)[0].dtype)
    shape = b.shape(x)
    dims = _dims(p.get("dim"), len(shape))
    count = math.prod(shape[d] for d in dims)
    correction = p.get("correction")
    if correction is None:
        unbiased = p.get("unbiased")
        correction = 1 if unbiased is None or unbiased else 0
    dt = b.dtype(x)
    mean = x
    for d in dims:
        mean = b.op("reduce_avg", [mean], dim=d)
    centered = b.op("subtract", [x, mean])
    var = b.op("square", [centered])
    for d in dims:
        var = b.op("reduce_avg", [var], dim=d)
    if correction != 0:
        if count - correction <= 0:
            raise Unsupported("variance with correction >= number of elements")
        var = b.binary("multiply", var, count / (count - correction), dt)
    var = b.reshape(var, final_var_shape)
    if with_mean_shape is not None:
        return var, b.reshape(mean, with_mean_shape)
    return var


@converts("var")
def _var(b: Builder, n, p):
    return _var_parts(b, n, p, out_shape(n))


@converts("std")
def _std(b: Builder, n, p):
    return b.op("sqrt", [_var_parts(b, n, p, out_shape(n))])


@converts("var_mean")
def _var_mean(b: Builder, n, p):
    return _var_parts(b, n, p, out_shape_of(n, 0), out_shape_of(n, 1))


@converts("linalg_vector_norm")
def _vector_norm(b: Builder, n, p):
    dt = out_dtype(n)
    x = b.tensor(p["self"], dt)
    order = float(p["ord"])
    final = out_shape(n)
    if order == 2:
        return b.op("sqrt", [_reduce(b, "reduce_sum", b.op("square", [x]), p.get("dim"), final)])
    if order == 1:
        return _reduce(b, "reduce_sum", b.op("abs", [x]), p.get("dim"), final)
    if order == math.inf:
        return _reduce_max_or_min(b, b.op("abs", [x]), p.get("dim"), p.get("keepdim"), False, final)
    raise Unsupported(f"vector norm of order {order}")


@converts("any", "all")
def _any_all(b: Builder, n, p):
    x = _as_bool(b, p["self"])
    is_all = op_name(n.target) == "all"
    if is_all:
        x = b.op("logical_not", [x])
    dims = p.get("dim")
    v = b.cast(x, torch.float32)
    v = _reduce_max_or_min(b, v, dims, p.get("keepdim"), False, out_shape(n))
    v = b.cast(v, torch.bool)
    return b.op("logical_not", [v]) if is_all else v


@converts("sign")
def _sign(b: Builder, n, p):
    dt = out_dtype(n)
    x = b.tensor(p["self"], dt)
    pos = b.cast(b.binary("greater", x, 0, dt), dt)
    neg = b.cast(b.binary("less", x, 0, dt), dt)
    return b.op("subtract", [pos, neg])


@converts("flip")
def _flip(b: Builder, n, p):
    v = b.tensor(p["self"])
    for d in _dims(p["dims"], b.rank(v)):
        size = b.shape(v)[d]
        if size > 1:
            v = const_gather(b, v, torch.arange(size - 1, -1, -1), d, f"{n.name}.reversed")
    return v


@converts("pixel_shuffle")
def _pixel_shuffle(b: Builder, n, p):
    return b.op("pixel_shuffle", [p["self"]], upscale_factor=int(p["upscale_factor"]))


@converts("softmax", "_softmax", "_safe_softmax")
def _softmax(b: Builder, n, p):
    x = b.tensor(p["self"], out_dtype(n))
    return b.op("softmax", [x], dim=_norm_dim(p["dim"], b.rank(x)), stable=True)


@converts("log_softmax", "_log_softmax")
def _log_softmax(b: Builder, n, p):
    x = b.tensor(p["self"], out_dtype(n))
    return b.op("log_softmax", [x], dim=_norm_dim(p["dim"], b.rank(x)), stable=True)


@converts("cumsum")
def _cumsum(b: Builder, n, p):
    x = b.tensor(p["self"], out_dtype(n))
    return b.op("cumsum", [x], axis=_norm_dim(p["dim"], b.rank(x)), exclusive=False)


# --- normalisation --------------------------------------------------------------------------------
def _param_or(b: Builder, v: Any, fill: float, size: int, dt: torch.dtype, name: str) -> str:
    if v is None:
        return b.const(torch.full((size,), fill, dtype=dt), name)
    return b.tensor(v)


@converts("layer_norm", "native_layer_norm")
def _layer_norm(b: Builder, n, p):
    x = b.tensor(p["input"])
    shape = b.shape(x)
    normalized = [int(d) for d in p["normalized_shape"]]
    size = math.prod(normalized)
    dt = b.dtype(x)
    w = _param_or(b, p["weight"], 1.0, size, dt, f"{n.name}.weight")
    bias = _param_or(b, p["bias"], 0.0, size, dt, f"{n.name}.bias")
    eps = float(p["eps"])
    if len(normalized) == 1:
        out = b.op("layernorm", [x, w, bias], dim=-1, epsilon=eps)
    else:
        flat = b.reshape(x, shape[: len(shape) - len(normalized)] + (size,))
        out = b.reshape(b.op("layernorm", [flat, b.reshape(w, (size,)), b.reshape(bias, (size,))], dim=-1,
                             epsilon=eps), shape)
    if op_name(n.target) == "native_layer_norm":
        return out, Missing("layer_norm mean"), Missing("layer_norm rstd")
    return out


@converts("batch_norm", "_native_batch_norm_legit_no_training", "native_batch_norm", "_native_batch_norm_legit",
          "_native_batch_norm_legit_functional")
def _batch_norm(b: Builder, n, p):
    name = op_name(n.target)
    # The functional form (a model in training mode, whose running statistics the export made pure) also
    # returns the updated running statistics, which inference has no use for.
    extra = (Missing("batch_norm running_mean update"), Missing("batch_norm running_var update")) \
        if name == "_native_batch_norm_legit_functional" else ()
    training = p.get("training", False)
    x = b.tensor(p["input"])
    if training:
        if b.reads_inputs(x):
            if p.get("running_mean") is None:
                # No running statistics to switch to: .eval() would change nothing.
                raise Unsupported("batch norm over the batch's own statistics (training=True without running "
                                  "statistics, as a BatchNorm with track_running_stats=False does in eval mode "
                                  "too): they span the samples of a batch, which the device runs one at a time")
            raise Unsupported("batch norm in training mode (batch statistics); call model.eval() before compiling")
        out = _batch_statistics_norm(b, x, p)  # of weights (BiT's weight standardisation): mixes no samples
        return out if name == "batch_norm" else (out, Missing("batch_norm save_mean"),
                                                 Missing("batch_norm save_invstd")) + extra
    channels = b.shape(x)[1]
    dt = b.dtype(x)
    mean, var = p.get("running_mean"), p.get("running_var")
    if mean is None or var is None:
        raise Unsupported("batch norm without running statistics")
    w = _param_or(b, p["weight"], 1.0, channels, dt, f"{n.name}.weight")
    bias = _param_or(b, p["bias"], 0.0, channels, dt, f"{n.name}.bias")
    out = b.op("batchnorm", [x, w, bias, mean, var], epsilon=float(p["eps"]))
    if name == "batch_norm":
        return out
    return (out, Missing("batch_norm save_mean"), Missing("batch_norm save_invstd")) + extra


def _standardize(b: Builder, rows: str, eps: float, dt: torch.dtype) -> str:
    """``(rows - mean) / sqrt(var + eps)`` over the last dim of ``rows`` (biased variance)."""
    dim = b.rank(rows) - 1
    mean = b.op("reduce_avg", [rows], dim=dim)
    centered = b.op("subtract", [rows, mean])
    var = b.op("reduce_avg", [b.op("square", [centered])], dim=dim)
    rstd = b.op("reciprocal", [b.op("sqrt", [b.binary("add", var, eps, dt)])])
    return b.op("multiply", [centered, rstd])


def _channel_affine(b: Builder, x: str, weight: Any, bias: Any) -> str:
    """``x * weight + bias`` with per-channel (dim 1) ``weight`` and ``bias``, either of which may be None."""
    shape = b.shape(x)
    bshape = (1, shape[1]) + (1,) * (len(shape) - 2)
    if weight is not None:
        x = b.op("multiply", [x, b.reshape(weight, bshape)])
    if bias is not None:
        x = b.op("add", [x, b.reshape(bias, bshape)])
    return x


def _batch_statistics_norm(b: Builder, x: str, p) -> str:
    """Batch norm with the statistics of ``x`` itself (per channel, dim 1, over every other dim, biased
    variance), then the affine weight and bias: torch's training-mode batch norm."""
    shape = b.shape(x)
    channels_first = b.transpose(x, 0, 1) if shape[0] > 1 else x
    rows = b.reshape(channels_first, (shape[1], math.prod(shape) // shape[1]))
    normed = _standardize(b, rows, float(p["eps"]), b.dtype(x))
    if shape[0] > 1:
        normed = b.transpose(b.reshape(normed, (shape[1], shape[0]) + tuple(shape[2:])), 0, 1)
    else:
        normed = b.reshape(normed, shape)
    return _channel_affine(b, normed, p.get("weight"), p.get("bias"))


@converts("instance_norm")
def _instance_norm(b: Builder, n, p):
    """Instance norm (``nn.InstanceNorm1d/2d/3d``, ``F.instance_norm``): each sample's channels standardised
    over their own spatial dims, then the per-channel affine. Its statistics never span samples, so it runs
    on the device in eval mode and in training mode alike; only a layer that tracks running statistics, in
    eval mode (``use_input_stats`` False), normalises with those instead, as a batch norm does. (Kept as one
    aten op: torch's decomposition folds the batch into the channels of a training-mode batch norm.)"""
    x = b.tensor(p["input"])
    shape = b.shape(x)
    if len(shape) < 3:
        raise Unsupported(f"instance norm of a rank-{len(shape)} input (it needs batch, channel and spatial dims)")
    dt = b.dtype(x)
    eps = float(p["eps"])
    if not p.get("use_input_stats", True):
        mean, var = p.get("running_mean"), p.get("running_var")
        if mean is None or var is None:
            raise Unsupported("instance norm with use_input_stats=False and no running statistics")
        channels = shape[1]
        w = _param_or(b, p.get("weight"), 1.0, channels, dt, f"{n.name}.weight")
        bias = _param_or(b, p.get("bias"), 0.0, channels, dt, f"{n.name}.bias")
        x4 = b.reshape(x, (shape[0], channels, math.prod(shape[2:]), 1)) if len(shape) != 4 else x
        return b.reshape(b.op("batchnorm", [x4, w, bias, mean, var], epsilon=eps), shape)
    rows = b.reshape(x, (shape[0], shape[1], math.prod(shape[2:])))
    normed = b.reshape(_standardize(b, rows, eps, dt), shape)
    return _channel_affine(b, normed, p.get("weight"), p.get("bias"))


@converts("group_norm")
def _group_norm(b: Builder, n, p):
    x = b.tensor(p["input"])
    shape = b.shape(x)
    groups = int(p["num_groups"])
    grouped = b.reshape(x, (shape[0], groups, math.prod(shape[1:]) // groups))
    normed = b.reshape(_standardize(b, grouped, float(p["eps"]), b.dtype(x)), shape)
    return _channel_affine(b, normed, p["weight"], p["bias"])


# --- matmul ---------------------------------------------------------------------------------------
def _matmul(b: Builder, x: Any, y: Any, bias: Any, final_shape: Sequence[int], dt: torch.dtype) -> str:
    a, c = b.tensor(x, dt), b.tensor(y, dt)
    if b.rank(a) == 1:
        a = b.reshape(a, (1,) + b.shape(a))
    if b.rank(c) == 1:
        c = b.reshape(c, b.shape(c) + (1,))
    operands = [a, c] if bias is None else [a, c, b.tensor(bias, dt)]
    return b.reshape(b.op("matmul", operands), final_shape)


@converts("linear")
def _linear(b: Builder, n, p):
    w = p["weight"]
    wt = b.transpose(w, -2, -1) if b.rank(w) == 2 else b.tensor(w)
    return _matmul(b, p["input"], wt, p.get("bias"), out_shape(n), out_dtype(n))


@converts("bilinear")
def _bilinear(b: Builder, n, p):
    """``nn.Bilinear``: ``y[.., o] = sum_ij x1[.., i] W[o, i, j] x2[.., j] + bias[o]`` as one matmul of ``x1`` with
    ``W`` laid out ``[i, o * j]``, a multiply by ``x2`` and a sum over ``j`` (no ``[.., o, i, j]`` product)."""
    dt = out_dtype(n)
    x1, x2, w = b.tensor(p["input1"], dt), b.tensor(p["input2"], dt), b.tensor(p["weight"], dt)
    (outs, size1, size2), lead = b.shape(w), b.shape(x1)[:-1]
    rows = math.prod(lead)
    flat_w = b.reshape(_permute_by(b, w, [1, 0, 2]), (size1, outs * size2))
    mixed = b.reshape(_matmul(b, b.reshape(x1, (rows, size1)), flat_w, None, (rows, outs * size2), dt),
                      (rows, outs, size2))
    y = b.op("reduce_sum", [b.op("multiply", [mixed, b.reshape(x2, (rows, 1, size2))])], dim=2)
    y = b.reshape(y, (rows, outs))
    if p.get("bias") is not None:
        y = b.binary("add", y, p["bias"], dt)
    return b.reshape(y, out_shape(n))


@converts("mm", "bmm", "matmul")
def _mm(b: Builder, n, p):
    return _matmul(b, p["self"], p.get("mat2", p.get("other")), None, out_shape(n), out_dtype(n))


@converts("addmm", "baddbmm")
def _addmm(b: Builder, n, p):
    dt = out_dtype(n)
    x, y = (p["mat1"], p["mat2"]) if "mat1" in p else (p["batch1"], p["batch2"])
    beta, alpha = p.get("beta", 1), p.get("alpha", 1)
    bias = p["self"]
    if alpha != 1:
        x = b.binary("multiply", x, alpha, dt)
    if beta == 0:
        bias = None
    elif beta != 1:
        bias = b.binary("multiply", bias, beta, dt)
    return _matmul(b, x, y, bias, out_shape(n), dt)


@converts("scaled_dot_product_attention")
def _sdpa(b: Builder, n, p):
    dt = out_dtype(n)
    q, k, v = (b.tensor(p[key], dt) for key in ("query", "key", "value"))
    if p.get("dropout_p", 0.0):
        raise Unsupported("scaled_dot_product_attention with dropout")
    qs, ks = b.shape(q), b.shape(k)
    if p.get("enable_gqa") and len(qs) >= 3 and qs[-3] != ks[-3]:
        k, v = _repeat_heads(b, k, qs[-3]), _repeat_heads(b, v, qs[-3])
        ks = b.shape(k)
    scale = p.get("scale")
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(qs[-1])
    scores = b.op("matmul", [q, b.transpose(k, -2, -1)])
    scores = b.binary("multiply", scores, scale, dt)
    L, S = qs[-2], ks[-2]
    mask = p.get("attn_mask")
    if p.get("is_causal"):
        causal = torch.ones(L, S, dtype=torch.bool).tril()
        scores = b.op("where", [b.const(causal, f"{n.name}.causal"), scores, b.scalar(-math.inf, dt, 1)])
    bool_mask = mask is not None and b.dtype(mask) == torch.bool
    if bool_mask:
        scores = b.op("where", [b.tensor(mask), scores, b.scalar(-math.inf, dt, 1)])
    elif mask is not None:
        mask, attending = _finite_float_mask(b, mask, dt, n.name)
        scores = b.op("add", [scores, mask])
    probs = b.op("softmax", [scores], dim=b.rank(scores) - 1, stable=True)
    if bool_mask:
        probs = _zero_fully_masked_rows(b, probs, mask, dt, n.name)
    elif mask is not None and attending is not None:
        probs = b.op("where", [attending, probs, b.scalar(0.0, dt, b.rank(probs))])
    return b.reshape(b.op("matmul", [probs, v]), out_shape(n))


#: The floor of an additive mask on the device. After softmax's max subtraction exp of it is 0, as that of
#: -inf or of ``finfo.min`` is; and it stays far above the value the lowering adds to a tile's padding
#: columns before a row max (``pickers.PAD_LOWEST``, float32's lowest), so a row's max is one of its own
#: columns even when every column is masked (a max from the padding made every exp 0 and the row's sum too:
#: NaN). Scores differing by less than the floor's spacing (64) are lost on rows
#: masked entirely, as they are in float32 torch at -inf / finfo.min.
_MASK_FLOOR = -1.0e9


def _finite_float_mask(b: Builder, mask: Any, dt: torch.dtype, name: str) -> Tuple[str, Any]:
    """An additive float mask without -inf, and which rows attend to anything (None: all do).

    torch's SDPA gives 0 on a row whose mask is all -inf (its safe softmax); a softmax of such a row is
    -inf - (-inf) = NaN, and NaN spreads through the device's tile math. So the mask is floored at
    :data:`_MASK_FLOOR` and rows that were all -inf are zeroed, as for boolean masks
    (:func:`_zero_fully_masked_rows`). Only -inf marks a row: a finite minimum (``torch.finfo(dtype).min``,
    as Hugging Face writes) leaves torch's uniform average, and so here."""
    if isinstance(mask, Const):
        value = mask.value.to(dt)
        attending = (value > -math.inf).any(dim=-1, keepdim=True)
        floored = b.const(value.clamp(min=_MASK_FLOOR), f"{name}.finite_mask")
        keep = None if bool(attending.all()) else b.const(attending, f"{name}.rows_attending")
        return floored, keep
    m = b.tensor(mask, dt)
    # 1 on columns above -inf (float32's lowest finite value passes), and a row attends when any does. The
    # comparison comes before the row max: a max of the mask itself would see the lowering's padding value
    # (-1e30) above -inf.
    finite = b.op("greater_equal", [m, b.scalar(float(torch.finfo(torch.float32).min), dt, b.rank(m))])
    keep = b.cast(b.op("reduce_max", [b.cast(finite, dt)], dim=b.rank(m) - 1), torch.bool)
    floored = b.op("maximum", [m, b.scalar(_MASK_FLOOR, dt, b.rank(m))])
    return floored, keep


def _repeat_heads(b: Builder, x: str, heads: int) -> str:
    """Key/value heads ``[.., kv, S, D]`` repeated to ``heads`` (GQA/MQA): each kv head serves a group of
    consecutive query heads, as ``repeat_interleave`` on the head dim; a broadcast, so no data is copied
    before the device's data movement."""
    shape = b.shape(x)
    kv = shape[-3]
    if heads % kv:
        raise Unsupported(f"grouped-query attention with {heads} query heads on {kv} key/value heads")
    grouped = b.reshape(x, shape[:-2] + (1,) + shape[-2:])
    grouped = b.broadcast_to(grouped, shape[:-2] + (heads // kv,) + shape[-2:])
    return b.reshape(grouped, shape[:-3] + (heads,) + shape[-2:])


def _zero_fully_masked_rows(b: Builder, probs: str, mask: Any, dt: torch.dtype, name: str) -> str:
    """Rows whose boolean mask is all False attend to nothing: torch's SDPA gives 0 there (its safe
    softmax), where a plain softmax of all -inf gives NaN (the CPU reference) or a uniform average (the
    device, which fills with a finite minimum). Left-padded batches have such rows."""
    if isinstance(mask, Const):
        any_row = mask.value.any(dim=-1, keepdim=True)
        if bool(any_row.all()):
            return probs  # (causal masks and the like: nothing to do)
        keep = b.const(any_row, f"{name}.rows_attending")
    else:
        m = b.cast(mask, dt)
        keep = b.cast(b.op("reduce_max", [m], dim=b.rank(m) - 1), torch.bool)
    return b.op("where", [keep, probs, b.scalar(0.0, dt, b.rank(probs))])


# --- convolution and pooling ----------------------------------------------------------------------
def _pair(v: Any, n: int = 2) -> Tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(x) for x in v)
    return v * n if len(v) == 1 else v


def _conv2d(b: Builder, x: str, w: Any, bias: Any, stride, padding, dilation, groups, transposed=False,
            output_padding=(0, 0)) -> str:
    stride, dilation = _pair(stride), _pair(dilation)
    if isinstance(padding, (list, tuple)) and len(padding) == 4:  # (left, right, top, bottom) already
        sides = tuple(int(v) for v in padding)
    else:
        ph, pw = _pair(padding)
        sides = (pw, pw, ph, ph)
    operands = [x, w] if bias is None else [x, w, bias]
    attrs = dict(stride=stride, padding=sides, dilation=dilation, groups=int(groups), channel_last=False)
    if transposed:
        if any(_pair(output_padding)):
            attrs["output_padding"] = _pair(output_padding)
        return b.op("conv2d_transpose", operands, **attrs)
    return b.op("conv2d", operands, **attrs)


def _same_padding(kernel: Sequence[int], dilation: Sequence[int]) -> Tuple[Tuple[int, int], ...]:
    """padding='same' per spatial dim as (before, after): torch puts the odd one of an odd total after."""
    pads = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        pads.append((total // 2, total - total // 2))
    return tuple(pads)


@converts("conv2d", "conv1d", "convolution", "_convolution", "conv_transpose2d", "conv_transpose1d")
def _conv(b: Builder, n, p):
    name = op_name(n.target)
    x = b.tensor(p["input"])
    w = b.tensor(p["weight"])
    bias = p.get("bias")
    transposed = bool(p.get("transposed", False)) or name.startswith("conv_transpose")
    groups = p.get("groups", 1)
    stride, dilation = p["stride"], p["dilation"]
    padding = p["padding"]
    spatial = b.rank(x) - 2
    if spatial not in (1, 2, 3) or (spatial == 3 and transposed):
        raise Unsupported(f"{spatial}-d {'transposed ' if transposed else ''}convolution")
    if isinstance(padding, str):
        if padding == "valid":
            padding = [0] * spatial
        else:
            dil = tuple(int(d) for d in (dilation if isinstance(dilation, (list, tuple)) else [dilation]))
            same = _same_padding(b.shape(w)[2:], dil * spatial if len(dil) == 1 else dil)
            # (left, right, top, bottom) of the 2-d conv; a 1-d conv is one over a height-1 image; a 3-d conv
            # (front, back, left, right, top, bottom)
            padding = (same[-1] + same[0]) if spatial == 2 else (same[0] + (0, 0)) if spatial == 1 else \
                (same[0] + same[2] + same[1])
    output_padding = p.get("output_padding") or [0] * spatial
    if spatial == 3:
        depth_pad = (padding[0], padding[1]) if isinstance(padding, tuple) and len(padding) == 6 else \
            (_pair(padding, 3)[0],) * 2
        plane_pad = padding[2:] if isinstance(padding, tuple) and len(padding) == 6 else _pair(padding, 3)[1:]
        out = conv3d_as_2d(b, x, w, bias, _pair(stride, 3), depth_pad, plane_pad, _pair(dilation, 3), groups)
    elif spatial == 2:
        out = _conv2d(b, x, w, bias, stride, padding, dilation, groups, transposed, output_padding)
    else:
        # 1-d convolution: run it as a 2-d one over a height-1 image.
        xs, ws = b.shape(x), b.shape(w)
        x2 = b.reshape(x, (xs[0], xs[1], 1, xs[2]))
        w2 = b.reshape(w, (ws[0], ws[1], 1, ws[2]))
        one = lambda v: (1, _pair(v, 1)[0])  # noqa: E731
        pad2 = padding if isinstance(padding, tuple) and len(padding) == 4 else (0, _pair(padding, 1)[0])
        out = _conv2d(b, x2, w2, bias, one(stride), pad2, one(dilation), groups, transposed,
                      (0, _pair(output_padding, 1)[0]))
    return b.reshape(out, out_shape(n))


def conv3d_as_2d(b: Builder, x: str, w: str, bias: Any, stride: Sequence[int], depth_pad: Sequence[int],
                 plane_pad: Any, dilation: Sequence[int], groups: int) -> str:
    """A 3-d convolution (``x [N, C, D, H, W]``, ``w [O, C/groups, kD, kH, kW]``) as ``kD`` 2-d ones, which the
    device runs: the kernel's depth slice ``kd`` meets the input frames ``kd * dilation + t * stride`` of every
    output frame ``t``, so those frames (a strided slice, depth padding as zero frames) go through one conv2d
    with the output frames folded into the batch, and the ``kD`` results add up. ``plane_pad``: ``(pad_h,
    pad_w)`` or ``(left, right, top, bottom)``."""
    ws = b.shape(w)
    (sd, sh, sw), (dd, dh, dw) = stride, dilation
    x = _padded_depth(b, x, int(depth_pad[0]), int(depth_pad[1]), 0.0)
    if len(plane_pad) == 4:
        sides = tuple(int(v) for v in plane_pad)
    else:
        sides = (int(plane_pad[1]),) * 2 + (int(plane_pad[0]),) * 2
    total = None
    for kd, frames in enumerate(_window_frames(b, x, ws[2], sd, dd, "3-d convolution")):
        kernel = b.reshape(_index_range(b, w, 2, kd, kd + 1), (ws[0], ws[1]) + tuple(ws[3:]))
        out = _conv2d(b, _frames_as_batch(b, frames), kernel, bias if kd == 0 else None, (sh, sw), sides, (dh, dw),
                      groups)
        total = out if total is None else b.op("add", [total, out])
    return _batch_as_frames(b, total, b.shape(x)[0])


def _padded_depth(b: Builder, x: str, front: int, back: int, fill: float) -> str:
    """``x [N, C, D, H, W]`` with ``front`` and ``back`` frames of ``fill`` added along the depth."""
    if not (front or back):
        return x
    xs = b.shape(x)

    def edge(frames: int) -> List[str]:
        return [b.const(torch.full((xs[0], xs[1], frames) + tuple(xs[3:]), fill, dtype=b.dtype(x)), "depth_pad")] \
            if frames else []
    return b.op("concatenate", edge(front) + [x] + edge(back), axis=2)


def _window_frames(b: Builder, x: str, k: int, stride: int, dilation: int, what: str) -> List[str]:
    """For each of the ``k`` frames of a depth window, the input frames it meets for every output frame ``t``
    (``kd * dilation + t * stride``): ``k`` strided slices ``[N, C, frames, H, W]``."""
    depth = b.shape(x)[2]
    frames = (depth - dilation * (k - 1) - 1) // stride + 1
    if frames < 1:
        raise Unsupported(f"{what} with no output frames (depth {depth}, window {k})")
    return [_index_range(b, x, 2, kd * dilation, kd * dilation + (frames - 1) * stride + 1, stride) for kd in range(k)]


def _frames_as_batch(b: Builder, x: str) -> str:
    """``[N, C, D, H, W]`` as ``[N * D, C, H, W]``: every frame an image of the batch."""
    xs = b.shape(x)
    return b.reshape(_permute_by(b, x, [0, 2, 1, 3, 4]), (xs[0] * xs[2], xs[1]) + tuple(xs[3:]))


def _batch_as_frames(b: Builder, x: str, samples: int) -> str:
    """``[N * D, C, H, W]`` back to ``[N, C, D, H, W]``."""
    shape = b.shape(x)
    return _permute_by(b, b.reshape(x, (samples, shape[0] // samples) + shape[1:]), [0, 2, 1, 3, 4])


def _reads_output(n, i: int) -> bool:
    """Whether the model reads output ``i`` of the multi-output FX node ``n`` (a live getitem of it)."""
    return any(u.target is operator.getitem and u.args[1] == i and len(u.users) for u in n.users)


def _pool_padding(padding) -> Tuple[int, int, int, int]:
    ph, pw = _pair(padding)
    return (pw, pw, ph, ph)


@converts("max_pool2d", "max_pool2d_with_indices")
def _max_pool2d(b: Builder, n, p):
    if _reads_output(n, 1):
        raise Unsupported("max pooling's indices")
    kernel = _pair(p["kernel_size"])
    stride = _pair(p["stride"]) if p["stride"] else kernel
    out = b.op("max_pool2d", [p["self"]], kernel_size=kernel, stride=stride, padding=_pool_padding(p["padding"]),
               dilation=_pair(p["dilation"]), ceil_mode=bool(p["ceil_mode"]), channel_last=False)
    if op_name(n.target) == "max_pool2d_with_indices":
        return out, Missing("max_pool2d indices")
    return out


@converts("avg_pool2d")
def _avg_pool2d(b: Builder, n, p):
    kernel = _pair(p["kernel_size"])
    stride = _pair(p["stride"]) if p["stride"] else kernel
    return b.op("avg_pool2d", [p["self"]], kernel_size=kernel, stride=stride, padding=_pool_padding(p["padding"]),
                ceil_mode=bool(p["ceil_mode"]), count_include_pad=bool(p["count_include_pad"]),
                divisor_override=p["divisor_override"], channel_last=False)


def _frames_pooled(b: Builder, x: Any, op_type: str, kernel, stride, padding, **attrs) -> str:
    """The 2-d pooling ``op_type`` of every frame of ``x [N, C, D, H, W]`` (frames folded into the batch)."""
    out = b.op(op_type, [_frames_as_batch(b, b.tensor(x))], kernel_size=tuple(kernel[1:]), stride=tuple(stride[1:]),
               padding=(padding[2], padding[2], padding[1], padding[1]), ceil_mode=False, channel_last=False, **attrs)
    return _batch_as_frames(b, out, b.shape(x)[0])


def _over_depth(b: Builder, x: str, op_type: str, k: int, s: int, pad: int, fill: float, dilation: int = 1) -> str:
    """``op_type`` (maximum or add) of the frames ``kd * dilation + t * s`` over ``kd`` for every output frame
    ``t``, with ``pad`` frames of ``fill`` on both sides."""
    total = None
    for picked in _window_frames(b, _padded_depth(b, x, pad, pad, fill), k, s, dilation, "3-d pooling"):
        total = picked if total is None else b.op(op_type, [total, picked])
    return total


def _pool3d_args(b: Builder, p) -> Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]:
    kernel = _pair(p["kernel_size"], 3)
    stride = _pair(p["stride"], 3) if p.get("stride") else kernel
    if p.get("ceil_mode"):
        raise Unsupported("3-d pooling with ceil_mode")
    return kernel, stride, _pair(p.get("padding", 0), 3)


@converts("max_pool3d", "max_pool3d_with_indices")
def _max_pool3d(b: Builder, n, p):
    """The max over each 3-d window: the 2-d max pool of every frame, then the maximum over the window's frames."""
    if op_name(n.target) == "max_pool3d_with_indices" and _reads_output(n, 1):
        raise Unsupported("max pooling's indices")
    kernel, stride, padding = _pool3d_args(b, p)
    dilation = _pair(p.get("dilation", 1), 3)
    planes = _frames_pooled(b, p["self"], "max_pool2d", kernel, stride, padding, dilation=tuple(dilation[1:]))
    out = _over_depth(b, planes, "maximum", kernel[0], stride[0], padding[0], float("-inf"), dilation[0])
    return (out, Missing("max_pool3d indices")) if op_name(n.target) == "max_pool3d_with_indices" else out


@converts("avg_pool3d")
def _avg_pool3d(b: Builder, n, p):
    """The mean of each 3-d window: the 2-d average of every frame (padding counted), summed over the window's
    frames and divided by their count (or by ``divisor_override`` over the window's size)."""
    kernel, stride, padding = _pool3d_args(b, p)
    if any(padding) and not p.get("count_include_pad", True):
        raise Unsupported("3-d average pooling of padding that is not counted")
    planes = _frames_pooled(b, p["self"], "avg_pool2d", kernel, stride, padding, count_include_pad=True,
                            divisor_override=None)
    total = _over_depth(b, planes, "add", kernel[0], stride[0], padding[0], 0.0)
    divisor = p.get("divisor_override") or kernel[0] * kernel[1] * kernel[2]
    return b.binary("multiply", total, kernel[1] * kernel[2] / divisor, b.dtype(total))


#: Largest pairwise-difference tensor (elements) ``torch.cdist`` builds on the device; beyond it, the host.
MAX_CDIST_ELEMENTS = 1 << 20


@converts("_cdist_forward", "cdist")
def _cdist(b: Builder, n, p):
    """``torch.cdist(x1, x2, p)``: every pair's difference (a broadcast subtract to ``[.., P, R, M]``), then
    the p-norm over M: sum of squares and sqrt (p=2), sum of abs (1), max of abs (inf), else
    ``(sum |d|**p) ** (1/p)``."""
    dt = out_dtype(n)
    x1, x2 = b.tensor(p["x1"], dt), b.tensor(p["x2"], dt)
    s1, s2 = b.shape(x1), b.shape(x2)
    order = float(p["p"])
    final = out_shape(n)
    if math.prod(final) * s1[-1] > MAX_CDIST_ELEMENTS or order == 0:
        raise Unsupported(f"cdist with p={order} over {list(final)} pairs of {s1[-1]} features")
    a = b.reshape(x1, tuple(s1[:-1]) + (1, s1[-1]))
    c = b.reshape(x2, tuple(s2[:-2]) + (1,) + tuple(s2[-2:]))
    diff = b.op("subtract", [a, c])
    last = len(final)
    if order == 2.0:
        return b.reshape(b.op("sqrt", [b.op("reduce_sum", [b.op("square", [diff])], dim=last)]), final)
    mag = b.op("abs", [diff])
    if order == 1.0:
        return b.reshape(b.op("reduce_sum", [mag], dim=last), final)
    if math.isinf(order):
        return b.reshape(b.op("reduce_max", [mag], dim=last), final)
    total = b.op("reduce_sum", [b.op("pow", [mag], exponent=order)], dim=last)
    return b.reshape(b.op("pow", [total], exponent=1.0 / order), final)


@converts("adaptive_avg_pool2d", "_adaptive_avg_pool2d", "adaptive_avg_pool1d")
def _adaptive_avg_pool(b: Builder, n, p):
    x = b.tensor(p["self"])
    shape = b.shape(x)
    final = out_shape(n)
    spatial = len(_pair(p["output_size"], 1)) if op_name(n.target) == "adaptive_avg_pool1d" else 2
    out_sizes = final[-spatial:]
    in_sizes = shape[-spatial:]
    if all(o == 1 for o in out_sizes):
        v = x
        for d in range(len(shape) - spatial, len(shape)):
            v = b.op("reduce_avg", [v], dim=d)
        return b.reshape(v, final)
    if spatial == 2 and all(i % o == 0 for i, o in zip(in_sizes, out_sizes)):
        kernel = tuple(i // o for i, o in zip(in_sizes, out_sizes))
        return b.op("avg_pool2d", [x], kernel_size=kernel, stride=kernel, padding=(0, 0, 0, 0), ceil_mode=False,
                    count_include_pad=True, divisor_override=None, channel_last=False)
    # Any other sizes: output i averages input [floor(i * n / o), ceil((i + 1) * n / o)), separable per dim,
    # so one constant averaging matrix per dim (a matmul on the last dim; on the one before from the left).
    v = x
    rank = len(shape)
    for d in range(rank - spatial, rank):
        n_in, n_out = shape[d], final[d]
        if n_in == n_out:
            continue
        avg = torch.zeros(n_in, n_out)
        for i, (lo, hi) in enumerate(_adaptive_windows(n_in, n_out)):
            avg[lo:hi, i] = 1.0 / (hi - lo)
        if d == rank - 1:
            v = b.op("matmul", [v, b.const(avg, f"{n.name}.avg_w")])
        else:
            v = b.op("matmul", [b.const(avg.t().contiguous(), f"{n.name}.avg_h"), v])
    return b.reshape(v, final)


def _adaptive_windows(n_in: int, n_out: int) -> List[Tuple[int, int]]:
    """The input window ``[start, stop)`` of each of ``n_out`` adaptive-pooling outputs (as torch computes it)."""
    return [((i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)) for i in range(n_out)]


#: Most output rows + columns an adaptive max pooling of sizes that do not divide runs on the device with.
MAX_ADAPTIVE_WINDOWS = 64


@converts("adaptive_max_pool2d", "adaptive_max_pool1d")
def _adaptive_max_pool(b: Builder, n, p):
    """Adaptive max pooling, separable per spatial dim: each output is the max of its input window, a slice and
    a max over it, concatenated along the dim. The indices output has no device form."""
    if _reads_output(n, 1):
        raise Unsupported("adaptive max pooling's indices")
    x = b.tensor(p["self"])
    shape = b.shape(x)
    final = out_shape_of(n, 0)
    spatial = len(_pair(p["output_size"], 1)) if op_name(n.target) == "adaptive_max_pool1d" else 2
    rank = len(shape)
    windows = sum(final[d] for d in range(rank - spatial, rank))
    if windows > MAX_ADAPTIVE_WINDOWS:
        # one slice and max per output row and column: beyond this many, the host's pooling is cheaper
        raise Unsupported(f"adaptive max pooling to {list(final[-spatial:])} (over {MAX_ADAPTIVE_WINDOWS} windows)")
    v = x
    for d in range(rank - spatial, rank):
        n_in, n_out = shape[d], final[d]
        if n_in == n_out:
            continue
        parts = []
        for lo, hi in _adaptive_windows(n_in, n_out):
            part = b.op("index", [v], dim=d, start=lo, stop=hi, stride=1) if (lo, hi) != (0, n_in) else v
            parts.append(b.op("reduce_max", [part], dim=d) if hi - lo > 1 else part)
        v = parts[0] if len(parts) == 1 else b.op("concatenate", parts, axis=d)
    return b.reshape(v, final), Missing("adaptive max pooling indices")


@converts("upsample_nearest2d", "upsample_bilinear2d")
def _upsample(b: Builder, n, p):
    name = op_name(n.target)
    method = "nearest_neighbor" if "nearest" in name else "bilinear"
    sizes = tuple(out_shape(n)[-2:])
    attrs = dict(sizes=sizes, method=method, channel_last=False)
    align = bool(p.get("align_corners", False))
    if method == "bilinear":
        attrs["align_corners"] = align
    x = b.tensor(p.get("self", p.get("input")))
    scales = p.get("scale_factors") or (p.get("scales_h"), p.get("scales_w"))
    in_sizes = b.shape(x)[-2:]
    if not align and any(sc is not None and float(sc) * i != o for sc, i, o in zip(scales, in_sizes, sizes)):
        # A scale factor whose output size was rounded (5 * 1.5 -> 7): torch maps output pixels back by
        # 1 / scale, not by in / out as resize2d does. Each dim's interpolation matrix is torch's own op on
        # an identity basis, applied as a matmul.
        return _resize_by_matrices(b, x, method, scales, sizes, n.name)
    return b.op("resize2d", [x], **attrs)


def _resize_by_matrices(b: Builder, x: str, method: str, scales, sizes, name: str) -> str:
    """``x [.., H, W]`` resized to ``sizes`` as torch's upsample with ``scales`` (None: from the sizes) does it,
    as one constant matmul per spatial dim (interpolation is separable)."""
    op = torch.ops.aten.upsample_nearest2d.default if method == "nearest_neighbor" else \
        torch.ops.aten.upsample_bilinear2d.default
    h, w = b.shape(x)[-2:]
    oh, ow = sizes
    sh, sw = (None if v is None else float(v) for v in scales)

    def run(basis, out_size, scale_h, scale_w):
        if method == "nearest_neighbor":
            return op(basis, list(out_size), scale_h, scale_w)
        return op(basis, list(out_size), False, scale_h, scale_w)

    rows = run(torch.eye(h).reshape(h, 1, h, 1), (oh, 1), sh, None).reshape(h, oh)  # [H, OH]
    cols = run(torch.eye(w).reshape(w, 1, 1, w), (1, ow), None, sw).reshape(w, ow)  # [W, OW]
    v = x
    rank = b.rank(x)
    if method == "nearest_neighbor":  # a pick per output pixel: a constant gather, exact
        if not torch.equal(rows.argmax(0), torch.arange(h)) or h != oh:
            v = const_gather(b, v, rows.argmax(0), rank - 2, f"{name}.rows")
        if not torch.equal(cols.argmax(0), torch.arange(w)) or w != ow:
            v = const_gather(b, v, cols.argmax(0), rank - 1, f"{name}.cols")
        return v
    if not (h == oh and torch.equal(rows, torch.eye(h))):
        v = b.op("matmul", [b.const(rows.t().contiguous(), f"{name}.rows"), v])
    if not (w == ow and torch.equal(cols, torch.eye(w))):
        v = b.op("matmul", [v, b.const(cols.contiguous(), f"{name}.cols")])
    return v


# --- misc -----------------------------------------------------------------------------------------
@converts("fill")
def _fill(b: Builder, n, p):
    value = p["value"]
    dt = out_dtype(n)
    if _is_number(value):
        return b.const(torch.full(out_shape(n), value, dtype=dt), n.name)
    return b.broadcast_to(b.tensor(value, dt), out_shape(n))
