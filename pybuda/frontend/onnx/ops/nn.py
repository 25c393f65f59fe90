"""ONNX's neural-network ops: MatMul/Gemm, convolutions, pooling, normalisations, softmax."""

from __future__ import annotations

import math
from typing import Any, List, Sequence, Tuple


import torch

from pybuda.frontend.aten_builder import Missing, Unsupported, _reduce_max_or_min
from pybuda.frontend.aten_nn import _conv2d, _matmul, _reduce, conv3d_as_2d
from pybuda.frontend.aten_shape import _index_range
from pybuda.frontend.onnx.converter import NodeCtx, converts
from pybuda.frontend.onnx.ops.common import _float_out
from pybuda.frontend.onnx.ops.tensor import _pad_by_concat


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


@converts("Conv")
def _conv(ctx: NodeCtx):
    b = ctx.b
    dt = _float_out(ctx)
    spatial = ctx.rank(0) - 2
    if spatial not in (1, 2, 3):
        raise Unsupported(f"{spatial}-d convolution")
    kernel = list(ctx.attr("kernel_shape", list(ctx.shape(1)[2:]), (list,)))
    strides, dil, pads = _spatial_attrs(ctx, spatial, kernel)
    groups = ctx.attr("group", 1, (int,))
    if groups < 1 or ctx.shape(0)[1] % groups:
        raise ctx.bad(f"group {groups} does not divide the {ctx.shape(0)[1]} input channels")
    x, w = ctx.x(0, dt), ctx.x(1, dt)
    bias = ctx.x(2, dt) if ctx.has(2) else None
    if spatial == 3:  # pads [front, top, left, back, bottom, right]
        return b.reshape(_per_sample(b, x, lambda xi: conv3d_as_2d(
            b, xi, w, bias, strides, (pads[0], pads[3]), (pads[2], pads[5], pads[1], pads[4]), dil, groups)),
            ctx.out_shape())
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
    if spatial not in (1, 2, 3):
        raise Unsupported(f"{spatial}-d transposed convolution")
    kernel = list(ctx.attr("kernel_shape", list(ctx.shape(1)[2:]), (list,)))
    strides, dil, pads = _spatial_attrs(ctx, spatial, kernel)
    out_pad = list(ctx.attr("output_padding", [0] * spatial, (list,)))
    groups = ctx.attr("group", 1, (int,))
    if len(out_pad) != spatial or kernel != list(ctx.shape(1)[2:]):
        raise ctx.bad(f"output_padding needs {spatial} values and kernel_shape must match the weight")
    bias = ctx.x(2, dt) if ctx.has(2) else None
    w = ctx.x(1, dt)
    x = ctx.x(0, dt)
    if spatial == 1:  # as 2-d over a height-1 view, like Conv
        xs, ws = ctx.shape(0), ctx.shape(1)
        x, w = b.reshape(x, (xs[0], xs[1], 1, xs[2])), b.reshape(w, (ws[0], ws[1], 1, ws[2]))
        kernel, strides, dil = [1] + kernel, [1] + strides, [1] + dil
        pads, out_pad = [0, pads[0], 0, pads[1]], [0] + out_pad
    auto = ctx.attr("auto_pad", "NOTSET", (str,))
    plain = "output_shape" not in ctx.attrs and auto == "NOTSET"
    if spatial < 3 and plain and pads[:2] == pads[2:]:
        out = _per_sample(b, x, lambda xi: _conv2d(b, xi, w, bias, strides, pads[:2], dil, groups, True, out_pad))
        return b.reshape(out, ctx.out_shape())
    # Otherwise: the full transposed convolution (no padding), then per spatial axis the output's window of it,
    # cropped or zero-extended (ONNX's pads, output_padding, output_shape and auto_pad all only choose where
    # that window starts and how long it is), then the bias.
    full = _full_conv_transpose(ctx, x, w, strides, dil, groups)
    begins = _conv_transpose_begins(ctx, [n for n in b.shape(x)[2:]], kernel, strides, dil, pads, out_pad)
    out_spatial = ctx.out_shape()[2:] if spatial != 1 else (1,) + tuple(ctx.out_shape()[2:])
    for i, (begin, n_out) in enumerate(zip(begins, out_spatial)):
        axis = 2 + i
        size = b.shape(full)[axis]
        lo, hi = max(begin, 0), min(begin + n_out, size)
        if hi <= lo:
            raise Unsupported("ConvTranspose whose output window misses every computed value")
        full = _index_range(b, full, axis, lo, hi)
        if lo - begin or begin + n_out - hi:
            full = _pad_by_concat(ctx, {axis: (lo - begin, begin + n_out - hi)}, 0.0, dt, full)
    if bias is not None:
        full = b.op("add", [full, b.reshape(bias, (1, ctx.shape(2)[0]) + (1,) * (b.rank(full) - 2))])
    return b.reshape(full, ctx.out_shape())


def _conv_transpose_begins(ctx: NodeCtx, sizes: Sequence[int], kernel, strides, dil, pads, out_pad) -> List[int]:
    """Per spatial axis, where the output starts in the full (unpadded) transposed convolution. ONNX: the begin
    pads; with ``output_shape`` or auto_pad SAME_* the pads are the total padding that makes the output
    ``output_shape`` long (default: input size times stride), its smaller half first for SAME_UPPER and its
    larger half first otherwise (as ONNX Runtime does; a negative total extends the output with zeros)."""
    auto = ctx.attr("auto_pad", "NOTSET", (str,))
    spatial = len(sizes)
    if "output_shape" not in ctx.attrs and auto not in ("SAME_UPPER", "SAME_LOWER"):
        return list(pads[:spatial]) if auto != "VALID" else [0] * spatial
    shape = list(ctx.attr("output_shape", [n * s for n, s in zip(sizes, strides)], (list,)))
    shape = [1] * (spatial - len(shape)) + shape  # a 1-d node runs over a height-1 view
    begins = []
    for i in range(spatial):
        total = strides[i] * (sizes[i] - 1) + out_pad[i] + (kernel[i] - 1) * dil[i] + 1 - shape[i]
        begins.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
    return begins


def _full_conv_transpose(ctx: NodeCtx, x: str, w: str, strides, dil, groups) -> str:
    """The transposed convolution with no padding and no output padding, ``[N, M, full spatial...]``. A 3-d
    one sums, for each output depth, the 2-d transposed convolutions of the input depth slices with the
    kernel depth slices that land there (depth d_in with tap t lands at d_in * stride + t * dilation)."""
    b = ctx.b
    if b.rank(x) == 4:
        return _per_sample(b, x, lambda xi: _conv2d(b, xi, w, None, strides, (0, 0), dil, groups, True))
    depth, taps = b.shape(x)[2], b.shape(w)[2]
    full_depth = (depth - 1) * strides[0] + (taps - 1) * dil[0] + 1
    planes: List[List[str]] = [[] for _ in range(full_depth)]
    w_taps = [b.reshape(_index_range(b, w, 2, t, t + 1), tuple(n for k, n in enumerate(b.shape(w)) if k != 2))
              for t in range(taps)]
    for d_in in range(depth):
        xd = _index_range(b, x, 2, d_in, d_in + 1)
        xd = b.reshape(xd, tuple(n for k, n in enumerate(b.shape(xd)) if k != 2))
        for t in range(taps):
            y = _per_sample(b, xd, lambda xi, wt=w_taps[t]: _conv2d(b, xi, wt, None, strides[1:], (0, 0), dil[1:],
                                                                    groups, True))
            planes[d_in * strides[0] + t * dil[0]].append(y)
    shape = None
    for p in planes:
        if p:
            shape = b.shape(p[0])
            break
    out = []
    for p in planes:
        if not p:
            out.append(b.const(torch.zeros((shape[0], shape[1], 1) + tuple(shape[2:]), dtype=b.dtype(x)),
                               f"{ctx.label}.gap"))
            continue
        plane = p[0]
        for y in p[1:]:
            plane = b.op("add", [plane, y])
        out.append(b.reshape(plane, (shape[0], shape[1], 1) + tuple(shape[2:])))
    return out[0] if len(out) == 1 else b.op("concatenate", out, axis=2)


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
    if ctx.attr("training_mode", 0, (int,)):
        return _batch_norm_training(ctx, dt)
    if len([o for o in ctx.node.output if o]) > 1:
        raise Unsupported("BatchNormalization with statistics outputs outside training mode (opset < 14)")
    eps = float(ctx.attr("epsilon", 1e-5, (float, int)))
    ops = [ctx.x(i, dt) for i in range(5)]
    if ctx.rank(0) < 2:
        raise ctx.bad("input must have a channel dim")
    if ctx.rank(0) != 4:
        shape = ctx.shape(0)
        x4 = ctx.b.reshape(ops[0], (shape[0], shape[1], math.prod(shape[2:]) if len(shape) > 2 else 1, 1))
        return ctx.b.reshape(ctx.b.op("batchnorm", [x4] + ops[1:], epsilon=eps), shape)
    return ctx.b.op("batchnorm", ops, epsilon=eps)


def _batch_norm_training(ctx: NodeCtx, dt) -> List[str]:
    """Training mode (opset 14+): Y normalised by the batch's own statistics (mean and biased variance over
    every dim but the channels), and the running statistics updated with ``momentum``:
    ``running = given * momentum + batch * (1 - momentum)``."""
    b = ctx.b
    eps = float(ctx.attr("epsilon", 1e-5, (float, int)))
    momentum = float(ctx.attr("momentum", 0.9, (float, int)))
    rank = ctx.rank(0)
    if rank < 2:
        raise ctx.bad("input must have a channel dim")
    channels = ctx.shape(0)[1]
    normalised, mean, var, _ = _moments(ctx, ctx.x(0, dt), [d for d in range(rank) if d != 1], eps, dt)
    per_channel = (1, channels) + (1,) * (rank - 2)
    scale, bias = (b.reshape(ctx.x(i, dt), per_channel) for i in (1, 2))
    y = b.op("add", [b.op("multiply", [normalised, scale]), bias])
    outs = [y]
    for k, batch in ((3, mean), (4, var)):
        if len(ctx.node.output) > len(outs) and ctx.node.output[len(outs)]:
            given = b.binary("multiply", ctx.x(k, dt), momentum, dt)
            update = b.binary("multiply", b.reshape(batch, (channels,)), 1.0 - momentum, dt)
            outs.append(b.op("add", [given, update]))
        else:
            outs.append(Missing(f"output {len(outs)} of {ctx.op_type} is not asked for"))
    if len(ctx.node.output) > 3:
        raise Unsupported("BatchNormalization with more than 3 outputs in training mode")
    return outs[:len(ctx.node.output)]


def _normalize(ctx: NodeCtx, x: str, axes: List[int], eps: float, dt) -> str:
    return _moments(ctx, x, axes, eps, dt)[0]


def _moments(ctx: NodeCtx, x: str, axes: List[int], eps: float, dt) -> Tuple[str, str, str, str]:
    """(normalised x, mean, biased variance, 1/sqrt(var + eps)) over ``axes`` (kept as size-1 dims)."""
    b = ctx.b
    mean = x
    for d in axes:
        mean = b.op("reduce_avg", [mean], dim=d)
    centered = b.op("subtract", [x, mean])
    var = b.op("square", [centered])
    for d in axes:
        var = b.op("reduce_avg", [var], dim=d)
    rstd = b.op("reciprocal", [b.op("sqrt", [b.binary("add", var, eps, dt)])])
    return b.op("multiply", [centered, rstd]), mean, var, rstd


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
    out, mean, _, rstd = _moments(ctx, x, list(range(axis, rank)), eps, dt)
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


@converts("GridSample")
def _grid_sample(ctx: NodeCtx):
    """Bilinear sampling (``mode`` linear, opset 20; bilinear before) with zeros or border padding at run-time
    coordinates: the torch frontend's :func:`pybuda.frontend.aten_sampling.bilinear_sample`."""
    from pybuda.frontend.aten_sampling import bilinear_sample

    dt = _float_out(ctx)
    mode = ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear", (str,))
    padding = ctx.attr("padding_mode", "zeros", (str,), ("zeros", "border", "reflection"))
    if mode not in ("linear", "bilinear") or padding == "reflection":
        raise Unsupported(f"GridSample with mode {mode!r} and padding {padding!r}")
    out = bilinear_sample(ctx.b, ctx.x(0, dt), ctx.x(1, dt), padding == "border",
                          bool(ctx.attr("align_corners", 0, (int,))), dt)
    return ctx.b.reshape(out, ctx.out_shape())
