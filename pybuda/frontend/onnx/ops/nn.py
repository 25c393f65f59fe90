"""ONNX's neural-network ops: MatMul/Gemm, convolutions, pooling, normalisations, softmax."""

from __future__ import annotations

import math
from typing import Any, List, Sequence, Tuple


import torch

from pybuda.frontend.aten_builder import Unsupported, _reduce_max_or_min
from pybuda.frontend.aten_nn import _conv2d, _matmul, _reduce
from pybuda.frontend.aten_shape import _index_range
from pybuda.frontend.onnx.importer import NodeCtx, converts, inf_standin
from pybuda.frontend.onnx.ops.common import _float_out


@converts("MatMul")
def _matmul_op(ctx: NodeCtx):
    dt = _float_out(ctx)
    x, y = ctx.x(0, dt), ctx.x(1, dt)
    if ctx.rank(0) >= 3 and ctx.rank(1) >= 3 and ctx.shape(0)[:-2] != ctx.shape(1)[:-2]:
        # batch dims that broadcast against each other ([3, 1] x [1, 2]): both to the common batch shape
        batch = ctx.out_shape()[:-2]
        x = ctx.b.broadcast_to(x, batch + ctx.shape(0)[-2:])
        y = ctx.b.broadcast_to(y, batch + ctx.shape(1)[-2:])
    return _matmul(ctx.b, x, y, None, ctx.out_shape(), dt)


@converts("Gemm")
def _gemm(ctx: NodeCtx):
    b = ctx.b
    dt = _float_out(ctx)
    alpha = float(ctx.attr("alpha", 1.0, (float, int)))
    beta = float(ctx.attr("beta", 1.0, (float, int)))
    a = ctx.x(0, dt)
    w = ctx.x(1, dt)
    if ctx.attr("transA", 0, (int,)):
        a = b.transpose(a, 0, 1)
    if ctx.attr("transB", 0, (int,)):
        w = b.transpose(w, 0, 1)
    if alpha != 1.0:
        a = b.binary("multiply", a, alpha, dt)
    bias = None
    if ctx.has(2) and beta != 0.0:
        bias = ctx.x(2, dt)
        if beta != 1.0:
            bias = b.binary("multiply", bias, beta, dt)
    n = ctx.out_shape()[-1]
    if bias is not None and tuple(b.shape(bias)) not in ((n,), (1, n)):
        # The matmul op's bias is one row added to every output row; a scalar, column or full-matrix
        # bias (Gemm's unidirectional broadcast) is an add after the matmul.
        return b.binary("add", _matmul(b, a, w, None, ctx.out_shape(), dt), bias, dt)
    return _matmul(b, a, w, bias, ctx.out_shape(), dt)


def _spatial_attrs(ctx: NodeCtx, spatial: int, kernel: Sequence[int]):
    strides = list(ctx.attr("strides", [1] * spatial, (list,)))
    dil = list(ctx.attr("dilations", [1] * spatial, (list,)))
    pads = list(ctx.attr("pads", [0] * (2 * spatial), (list,)))
    auto = ctx.attr("auto_pad", "NOTSET", (str,), ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"))
    if len(strides) != spatial or len(dil) != spatial or len(pads) != 2 * spatial:
        raise ctx.bad(f"strides/dilations need {spatial} values and pads {2 * spatial}")
    if any(s < 1 for s in strides) or any(d < 1 for d in dil) or any(p < 0 for p in pads):
        raise ctx.bad("strides and dilations must be positive and pads non-negative")
    if auto == "VALID":
        pads = [0] * (2 * spatial)
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        in_sizes = ctx.shape(0)[2:]
        pads = [0] * (2 * spatial)
        for i in range(spatial):
            out = -(-in_sizes[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - in_sizes[i])
            small, big = total // 2, total - total // 2
            pads[i], pads[i + spatial] = (small, big) if auto == "SAME_UPPER" else (big, small)
    return strides, dil, pads


def _sym_pads(pads: Sequence[int], spatial: int) -> List[int]:
    if any(pads[i] != pads[i + spatial] for i in range(spatial)):
        raise Unsupported(f"asymmetric padding {list(pads)}")
    return list(pads[:spatial])


@converts("Conv")
def _conv(ctx: NodeCtx):
    b = ctx.b
    dt = _float_out(ctx)
    spatial = ctx.rank(0) - 2
    if spatial not in (1, 2):
        raise Unsupported(f"{spatial}-d convolution")
    kernel = list(ctx.attr("kernel_shape", list(ctx.shape(1)[2:]), (list,)))
    strides, dil, pads = _spatial_attrs(ctx, spatial, kernel)
    groups = ctx.attr("group", 1, (int,))
    if groups < 1 or ctx.shape(0)[1] % groups:
        raise ctx.bad(f"group {groups} does not divide the {ctx.shape(0)[1]} input channels")
    x, w = ctx.x(0, dt), ctx.x(1, dt)
    bias = ctx.x(2, dt) if ctx.has(2) else None
    if spatial == 1:
        xs, ws = ctx.shape(0), ctx.shape(1)
        x = b.reshape(x, (xs[0], xs[1], 1, xs[2]))
        w = b.reshape(w, (ws[0], ws[1], 1, ws[2]))
        strides, dil, pads = [1] + strides, [1] + dil, [0, pads[0], 0, pads[1]]
        spatial = 2
    x, pads = _pad_unevenly(b, x, pads)
    return b.reshape(_per_sample(b, x, lambda xi: _conv2d(b, xi, w, bias, strides, pads, dil, groups)),
                     ctx.out_shape())


def _per_sample(b: Any, x: str, fn) -> str:
    """``fn`` (a convolution) applied to each sample of ``x`` and the results concatenated on dim 0: the chip
    convolves one sample per device (the batch of an ONNX model is not a microbatch the runtime splits)."""
    n = b.shape(x)[0]
    if n == 1:
        return fn(x)
    return b.op("concatenate", [fn(_index_range(b, x, 0, k, k + 1)) for k in range(n)], axis=0)


def _pad_unevenly(b: Any, x: str, pads: Sequence[int]) -> Tuple[str, List[int]]:
    """Split 2-d ONNX pads ``[top, left, bottom, right]`` into the convolution's symmetric padding and an
    explicit zero ``pad`` of the NCHW input for the rest (e.g. TF's 'SAME' with stride 2 pads one more row
    at the bottom): both run on the device, and zero padding is exactly what the convolution would add."""
    top, left, bottom, right = pads
    sym = [min(top, bottom), min(left, right)]
    extra = (left - sym[1], right - sym[1], top - sym[0], bottom - sym[0])
    if any(extra):
        x = b.op("pad", [x], pad=extra, mode="constant", value=0.0, channel_last=False)
    return x, sym


@converts("ConvTranspose")
def _conv_transpose(ctx: NodeCtx):
    b = ctx.b
    dt = _float_out(ctx)
    spatial = ctx.rank(0) - 2
    if spatial not in (1, 2):
        raise Unsupported(f"{spatial}-d transposed convolution")
    if "output_shape" in ctx.attrs or ctx.attr("auto_pad", "NOTSET", (str,)) != "NOTSET":
        raise Unsupported("ConvTranspose with output_shape / auto_pad")
    kernel = list(ctx.attr("kernel_shape", list(ctx.shape(1)[2:]), (list,)))
    strides, dil, pads = _spatial_attrs(ctx, spatial, kernel)
    out_pad = list(ctx.attr("output_padding", [0] * spatial, (list,)))
    groups = ctx.attr("group", 1, (int,))
    bias = ctx.x(2, dt) if ctx.has(2) else None
    w = ctx.x(1, dt)
    x = ctx.x(0, dt)
    if spatial == 1:  # as 2-d over a height-1 view, like Conv
        xs, ws = ctx.shape(0), ctx.shape(1)
        x, w = b.reshape(x, (xs[0], xs[1], 1, xs[2])), b.reshape(w, (ws[0], ws[1], 1, ws[2]))
        kernel, strides, dil = [1] + kernel, [1] + strides, [1] + dil
        pads, out_pad = [0, pads[0], 0, pads[1]], [0] + out_pad
    out = _per_sample(b, x,
                      lambda xi: _conv2d(b, xi, w, bias, strides, _sym_pads(pads, 2), dil, groups, True, out_pad))
    return b.reshape(out, ctx.out_shape())


def _pool_common(ctx: NodeCtx, fill: Any):
    """(NCHW input, kernel, strides, dilations, (left, right, top, bottom) padding, ceil_mode, explicit padding)
    of a pooling node. 1-d pooling runs as 2-d pooling over a height-1 view; padding the pooling cannot take
    (uneven) is an explicit pad with ``fill`` first, returned as (left, right, top, bottom) too (None: not
    expressible)."""
    b = ctx.b
    rank = ctx.rank(0)
    if rank not in (3, 4):
        raise Unsupported(f"{rank - 2}-d pooling")
    spatial = rank - 2
    kernel = list(ctx.attr("kernel_shape", types=(list,)))
    if len(kernel) != spatial or min(kernel) < 1:
        raise ctx.bad(f"kernel_shape must be {spatial} positive ints, got {kernel}")
    strides, dil, pads = _spatial_attrs(ctx, spatial, kernel)
    ceil = bool(ctx.attr("ceil_mode", 0, (int,)))
    x = ctx.x(0)
    if spatial == 1:
        n, c, length = ctx.shape(0)
        x = b.reshape(x, (n, c, 1, length))
        kernel, strides, dil, pads = [1] + kernel, [1] + strides, [1] + dil, [0, pads[0], 0, pads[1]]
    top, left, bottom, right = pads
    extra = (0, 0, 0, 0)
    if (top, left) != (bottom, right):
        if fill is None or ceil:
            raise Unsupported(f"asymmetric padding {list(pads)}")
        ph, pw = min(top, bottom), min(left, right)
        extra = (left - pw, right - pw, top - ph, bottom - ph)
        x = b.op("pad", [x], pad=extra, mode="constant", value=fill, channel_last=False)
        top = bottom = ph
        left = right = pw
    return x, kernel, strides, dil, (left, right, top, bottom), ceil, extra


@converts("MaxPool")
def _max_pool(ctx: NodeCtx):
    _float_out(ctx)
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        raise Unsupported("MaxPool with the Indices output")
    if ctx.attr("storage_order", 0, (int,)):
        raise Unsupported("MaxPool with storage_order=1")
    x, kernel, strides, dil, pad, ceil, _ = _pool_common(ctx, -inf_standin(ctx.dtype(0)))
    out = ctx.b.op("max_pool2d", [x], kernel_size=tuple(kernel), stride=tuple(strides), padding=pad,
                   dilation=tuple(dil), ceil_mode=ceil, channel_last=False)
    return ctx.b.reshape(out, ctx.out_shape())


@converts("AveragePool")
def _avg_pool(ctx: NodeCtx):
    _float_out(ctx)
    include = bool(ctx.attr("count_include_pad", 0, (int,)))
    # Uneven padding that the average must not count: average over zero padding, then rescale each window by
    # kernel size / its count of real elements (a constant: the windows are known at import).
    x, kernel, strides, dil, pad, ceil, extra = _pool_common(ctx, 0.0)
    explicit = any(extra)
    if any(d != 1 for d in dil):
        raise Unsupported("AveragePool with dilations")
    if ceil and any(pad):
        raise Unsupported("AveragePool with ceil_mode and padding")
    attrs = dict(kernel_size=tuple(kernel), stride=tuple(strides), padding=pad, ceil_mode=ceil,
                 divisor_override=None, channel_last=False)
    out = ctx.b.op("avg_pool2d", [x], count_include_pad=include or explicit, **attrs)
    if explicit and not include:
        h, w = ctx.shape(0)[-2:] if ctx.rank(0) == 4 else (1, ctx.shape(0)[-1])
        left, right, top, bottom = pad
        real = torch.nn.functional.pad(torch.ones(1, 1, h, w), extra)
        share = torch.nn.functional.avg_pool2d(real, tuple(kernel), tuple(strides), (top, left), False, True)
        scale = torch.where(share > 0, 1.0 / share, torch.zeros_like(share))  # K / real elements per window
        out = ctx.b.op("multiply", [out, ctx.b.const(scale.to(ctx.out_dtype()), f"{ctx.label}.rescale")])
    return ctx.b.reshape(out, ctx.out_shape())


@converts("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx: NodeCtx):
    _float_out(ctx)
    x = ctx.x(0)
    rank = ctx.rank(0)
    if ctx.op_type == "GlobalMaxPool":
        return _reduce_max_or_min(ctx.b, x, list(range(2, rank)), True, False, ctx.out_shape())
    return _reduce(ctx.b, "reduce_avg", x, list(range(2, rank)), ctx.out_shape())


@converts("BatchNormalization")
def _batch_norm(ctx: NodeCtx):
    dt = _float_out(ctx)
    if ctx.attr("training_mode", 0, (int,)) or len([o for o in ctx.node.output if o]) > 1:
        raise Unsupported("BatchNormalization in training mode")
    eps = float(ctx.attr("epsilon", 1e-5, (float, int)))
    ops = [ctx.x(i, dt) for i in range(5)]
    if ctx.rank(0) < 2:
        raise ctx.bad("input must have a channel dim")
    if ctx.rank(0) != 4:
        shape = ctx.shape(0)
        x4 = ctx.b.reshape(ops[0], (shape[0], shape[1], math.prod(shape[2:]) if len(shape) > 2 else 1, 1))
        return ctx.b.reshape(ctx.b.op("batchnorm", [x4] + ops[1:], epsilon=eps), shape)
    return ctx.b.op("batchnorm", ops, epsilon=eps)


def _normalize(ctx: NodeCtx, x: str, axes: List[int], eps: float, dt) -> str:
    return _moments(ctx, x, axes, eps, dt)[0]


def _moments(ctx: NodeCtx, x: str, axes: List[int], eps: float, dt) -> Tuple[str, str, str]:
    """(normalised x, mean, 1/sqrt(var + eps)) over ``axes`` (kept as size-1 dims)."""
    b = ctx.b
    mean = x
    for d in axes:
        mean = b.op("reduce_avg", [mean], dim=d)
    centered = b.op("subtract", [x, mean])
    var = b.op("square", [centered])
    for d in axes:
        var = b.op("reduce_avg", [var], dim=d)
    rstd = b.op("reciprocal", [b.op("sqrt", [b.binary("add", var, eps, dt)])])
    return b.op("multiply", [centered, rstd]), mean, rstd


@converts("LayerNormalization")
def _layer_norm(ctx: NodeCtx):
    b = ctx.b
    dt = _float_out(ctx)
    rank = ctx.rank(0)
    axis = ctx.axis(ctx.attr("axis", -1, (int,)), rank)
    eps = float(ctx.attr("epsilon", 1e-5, (float, int)))
    x = ctx.x(0, dt)
    shape = ctx.shape(0)
    size = math.prod(shape[axis:])
    w = ctx.x(1, dt)
    bias = ctx.x(2, dt) if ctx.has(2) else b.const(torch.zeros(ctx.shape(1), dtype=dt), f"{ctx.label}.bias")
    stats = len([o for o in ctx.node.output if o]) > 1  # Mean / InvStdDev asked for too
    if not stats and axis == rank - 1 and ctx.shape(1) == (size,) and (not ctx.has(2) or ctx.shape(2) == (size,)):
        return b.op("layernorm", [x, w, bias], dim=-1, epsilon=eps)
    out, mean, rstd = _moments(ctx, x, list(range(axis, rank)), eps, dt)
    return [b.op("add", [b.op("multiply", [out, w]), bias]), mean, rstd]


@converts("InstanceNormalization")
def _instance_norm(ctx: NodeCtx):
    b = ctx.b
    dt = _float_out(ctx)
    rank = ctx.rank(0)
    eps = float(ctx.attr("epsilon", 1e-5, (float, int)))
    out = _normalize(ctx, ctx.x(0, dt), list(range(2, rank)), eps, dt)
    bshape = (ctx.shape(0)[1],) + (1,) * (rank - 2)
    return b.op("add", [b.op("multiply", [out, b.reshape(ctx.x(1, dt), bshape)]), b.reshape(ctx.x(2, dt), bshape)])


@converts("Softmax", "LogSoftmax")
def _softmax(ctx: NodeCtx):
    _float_out(ctx)
    dim = ctx.axis(ctx.attr("axis", -1, (int,)), ctx.rank(0))
    op = "softmax" if ctx.op_type == "Softmax" else "log_softmax"
    return ctx.b.op(op, [ctx.x(0)], dim=dim, stable=True)


