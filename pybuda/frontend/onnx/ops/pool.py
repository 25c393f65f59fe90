"""ONNX pooling: MaxPool (with its Indices), AveragePool and LpPool of any rank (1-d, 2-d, 3-d).

1-d and 2-d pools run as the registry's 2-d pools where their attributes allow. Every other pool (3-d, an
average with dilations, ceil mode with padding, uneven padding under ceil mode) is the exact decomposition
of a pool into one window reduction per spatial axis (a window is a product of per-axis ranges, so a max or
a sum over it is a max or a sum along each axis in turn): the axis padded with the pool's fill value, one
strided slice per kernel tap, combined by ``maximum`` or ``add``. An average is then the window sum times a
constant, 1 / (the window's element count), known at import since the windows are.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import torch

from pybuda.frontend.aten_builder import Unsupported
from pybuda.frontend.aten_shape import _index_range
from pybuda.frontend.onnx.converter import NodeCtx, converts, inf_standin
from pybuda.frontend.onnx.ops.common import _float_out
from pybuda.frontend.onnx.ops.nn import _spatial_attrs
from pybuda.frontend.onnx.ops.tensor import _pad_by_concat


class _Window:
    """One pool's geometry: per spatial axis the kernel, stride, dilation, (begin, end) pads and output size."""

    def __init__(self, ctx: NodeCtx):
        spatial = ctx.rank(0) - 2
        if spatial < 1:
            raise ctx.bad("pooling needs an N, C, spatial... input")
        self.kernel = list(ctx.attr("kernel_shape", types=(list,)))
        if len(self.kernel) != spatial or min(self.kernel) < 1:
            raise ctx.bad(f"kernel_shape must be {spatial} positive ints, got {self.kernel}")
        self.strides, self.dil, pads = _spatial_attrs(ctx, spatial, self.kernel)
        self.pads = [(pads[i], pads[i + spatial]) for i in range(spatial)]
        self.ceil = bool(ctx.attr("ceil_mode", 0, (int,)))
        self.sizes = list(ctx.shape(0)[2:])
        self.out = list(ctx.out_shape()[2:])

    def taps(self, i: int) -> np.ndarray:
        """``[out, kernel]`` input positions of every window tap along spatial axis ``i``."""
        j = np.arange(self.out[i])[:, None]
        t = np.arange(self.kernel[i])[None, :]
        return j * self.strides[i] - self.pads[i][0] + t * self.dil[i]


def _window_reduce(ctx: NodeCtx, x: str, win: _Window, fill: float, combine: str) -> str:
    """``combine`` (``maximum`` / ``add``) over every pooling window of ``x``, one spatial axis at a time."""
    b = ctx.b
    dt = b.dtype(x)
    for i in range(len(win.kernel)):
        axis = 2 + i
        k, s, d, n_out = win.kernel[i], win.strides[i], win.dil[i], win.out[i]
        begin = win.pads[i][0]
        span = (n_out - 1) * s + (k - 1) * d + 1  # the padded extent the windows read
        end = span - begin - win.sizes[i]
        if k == 1 and s == 1 and begin == 0 and n_out == win.sizes[i]:
            continue
        if begin or end > 0:
            x = _pad_by_concat(ctx, {axis: (begin, max(end, 0))}, fill, dt, x)
        parts = [_index_range(b, x, axis, t * d, t * d + (n_out - 1) * s + 1, s) for t in range(k)]
        x = parts[0]
        for p in parts[1:]:
            x = b.op(combine, [x, p])
    return x if x != ctx.x(0) else b.op("nop", [x])


def _window_counts(win: _Window, include_pad: bool) -> torch.Tensor:
    """Elements per window (the average's divisor), as a ``[1, 1, out...]`` tensor: the taps inside the
    input, or with ``include_pad`` inside the input and its explicit padding (never ceil mode's overhang)."""
    counts = None
    for i, n in enumerate(win.sizes):
        lo, hi = (-win.pads[i][0], n + win.pads[i][1]) if include_pad else (0, n)
        taps = win.taps(i)
        c = ((taps >= lo) & (taps < hi)).sum(axis=1).astype(np.float64)
        counts = c if counts is None else np.multiply.outer(counts, c)
    return torch.from_numpy(np.asarray(counts)).reshape((1, 1) + tuple(win.out))


def _pool_common(ctx: NodeCtx, fill: Any):
    """(NCHW input, kernel, strides, dilations, (left, right, top, bottom) padding, ceil_mode, explicit padding)
    of a 1-d or 2-d pooling node for the registry's 2-d pools. 1-d pooling runs as 2-d pooling over a height-1
    view; padding the pooling cannot take (uneven) is an explicit pad with ``fill`` first, returned as (left,
    right, top, bottom) too. Unsupported where the 2-d pool cannot express the node."""
    b = ctx.b
    rank = ctx.rank(0)
    if rank not in (3, 4):
        raise Unsupported(f"{rank - 2}-d pooling")
    spatial = rank - 2
    kernel = list(ctx.attr("kernel_shape", types=(list,)))
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
        if ceil:
            raise Unsupported(f"asymmetric padding {list(pads)} in ceil mode")
        ph, pw = min(top, bottom), min(left, right)
        extra = (left - pw, right - pw, top - ph, bottom - ph)
        x = b.op("pad", [x], pad=extra, mode="constant", value=fill, channel_last=False)
        top = bottom = ph
        left = right = pw
    return x, kernel, strides, dil, (left, right, top, bottom), ceil, extra


@converts("MaxPool")
def _max_pool(ctx: NodeCtx):
    _float_out(ctx)
    fill = -inf_standin(ctx.dtype(0))
    win = _Window(ctx)
    try:
        x, kernel, strides, dil, pad, ceil, _ = _pool_common(ctx, fill)
    except Unsupported:
        out = ctx.b.reshape(_window_reduce(ctx, ctx.x(0), win, fill, "maximum"), ctx.out_shape())
    else:
        out = ctx.b.op("max_pool2d", [x], kernel_size=tuple(kernel), stride=tuple(strides), padding=pad,
                       dilation=tuple(dil), ceil_mode=ceil, channel_last=False)
        out = ctx.b.reshape(out, ctx.out_shape())
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        return [out, _max_indices(ctx, win, out, fill)]
    return out


def _max_indices(ctx: NodeCtx, win: _Window, best: str, fill: float) -> str:
    """MaxPool's Indices: per window the flat position (over the whole input, row-major, or column-major over
    H, W with storage_order=1) of its first tap, in window order, that holds the maximum; padding never counts.
    A position is a constant per window (its start) plus a constant per tap, so the taps are compared with
    the maximum from the last to the first, each match selecting its tap's offset: exact on the device."""
    b = ctx.b
    dt = b.dtype(best)
    sizes = win.sizes
    if ctx.attr("storage_order", 0, (int,)):
        if len(sizes) != 2:
            raise Unsupported("MaxPool storage_order=1 on other than 2-d input")
        steps = [1, sizes[0]]
    else:
        steps = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
    n, c = ctx.shape(0)[:2]
    base = np.arange(n * c, dtype=np.float64).reshape(n, c, *([1] * len(sizes))) * math.prod(sizes)
    for i, step in enumerate(steps):
        starts = np.arange(win.out[i]) * win.strides[i] - win.pads[i][0]
        base = base + (starts * step).reshape([-1 if d == i else 1 for d in range(len(sizes))])
    if base.max() + sum((k - 1) * d * st for k, d, st in zip(win.kernel, win.dil, steps)) >= 2 ** 24:
        raise Unsupported("MaxPool Indices beyond Float32's exact integers")
    x = ctx.x(0)
    for i in range(len(sizes)):  # pad with the fill so that every tap is a strided slice
        axis = 2 + i
        span = (win.out[i] - 1) * win.strides[i] + (win.kernel[i] - 1) * win.dil[i] + 1
        end = max(span - win.pads[i][0] - sizes[i], 0)
        if win.pads[i][0] or end:
            x = _pad_by_concat(ctx, {axis: (win.pads[i][0], end)}, fill, dt, x)
    picked = None
    for tap in reversed(list(itertools.product(*[range(k) for k in win.kernel]))):
        offset = b.const(torch.tensor([sum(t * d * st for t, d, st in zip(tap, win.dil, steps))], dtype=dt),
                         f"{ctx.label}.offset")
        if picked is None:
            picked = offset
            continue
        v = x
        for i, t in enumerate(tap):
            start = t * win.dil[i]
            v = _index_range(b, v, 2 + i, start, start + (win.out[i] - 1) * win.strides[i] + 1, win.strides[i])
        picked = b.op("where", [b.op("equal", [v, best]), offset, picked])
    index = b.op("add", [picked, b.const(torch.from_numpy(base).to(dt), f"{ctx.label}.window_starts")])
    return b.cast(index, ctx.out_dtype(1))


@converts("AveragePool")
def _avg_pool(ctx: NodeCtx):
    dt = _float_out(ctx)
    include = bool(ctx.attr("count_include_pad", 0, (int,)))
    win = _Window(ctx)
    native = ctx.rank(0) in (3, 4) and all(d == 1 for d in win.dil) and not (win.ceil and any(map(any, win.pads)))
    if not native:
        counts = _window_counts(win, include)
        if (counts == 0).any():
            raise Unsupported("AveragePool with a window holding no element")
        sums = _window_reduce(ctx, ctx.x(0, dt), win, 0.0, "add")
        scale = ctx.b.const((1.0 / counts).to(dt), f"{ctx.label}.divisor")
        return ctx.b.reshape(ctx.b.op("multiply", [sums, scale]), ctx.out_shape())
    # Uneven padding that the average must not count: average over zero padding, then rescale each window by
    # kernel size / its count of real elements (a constant: the windows are known at import).
    x, kernel, strides, dil, pad, ceil, extra = _pool_common(ctx, 0.0)
    explicit = any(extra)
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


@converts("LpPool")
def _lp_pool(ctx: NodeCtx):
    """(sum over the window of |x|**p) ** (1/p): the window sum of the per-element powers (padding adds 0)."""
    dt = _float_out(ctx)
    p = ctx.attr("p", 2, (int,))
    if p < 1:
        raise ctx.bad(f"p must be a positive integer, got {p}")
    b = ctx.b
    x = ctx.x(0, dt)
    powers = {1: lambda v: b.op("abs", [v]), 2: lambda v: b.op("square", [v])}
    xp = powers[p](x) if p in powers else b.op("pow", [b.op("abs", [x])], exponent=float(p))
    sums = _window_reduce(ctx, xp, _Window(ctx), 0.0, "add")
    if p == 1:
        out = sums
    elif p == 2:
        out = b.op("sqrt", [sums])
    else:
        out = b.op("pow", [sums], exponent=1.0 / p)
    return b.reshape(out, ctx.out_shape())
