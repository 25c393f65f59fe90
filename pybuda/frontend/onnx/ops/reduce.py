"""ONNX reductions: Reduce*, ArgMax/ArgMin, CumSum, CumProd."""

from __future__ import annotations

import torch

from pybuda.frontend.aten_builder import Unsupported, _reduce_max_or_min
from pybuda.frontend.aten_nn import _reduce
from pybuda.frontend.aten_products import product_along, running_product
from pybuda.frontend.onnx.converter import NodeCtx, converts
from pybuda.frontend.onnx.ops.common import _F32, _float_out


def _reduce_axes(ctx: NodeCtx):
    """(axes, keepdims) of a Reduce* node (axes from the attribute or, from opset 18 / ReduceSum 13, input 1)."""
    rank = ctx.rank(0)
    keep = bool(ctx.attr("keepdims", 1, (int,)))
    noop = bool(ctx.attr("noop_with_empty_axes", 0, (int,)))
    if "axes" in ctx.attrs:
        axes = list(ctx.attr("axes", types=(list,)))
    elif ctx.has(1):
        axes = ctx.ints(1, "axes")
    else:
        axes = []
    if not axes:
        if noop:
            return None, keep
        axes = list(range(rank))
    return sorted({ctx.axis(a, rank, "axes entry") for a in axes}), keep


def _reduce_generic(ctx: NodeCtx, fn):
    axes, keep = _reduce_axes(ctx)
    if axes is None:
        return ctx.b.op("nop", [ctx.x(0)])
    return fn(axes, ctx.out_shape())


@converts("ReduceMean", "ReduceSum")
def _reduce_mean_sum(ctx: NodeCtx):
    dt = ctx.out_dtype()
    if ctx.op_type == "ReduceMean" and not dt.is_floating_point:
        raise Unsupported("ReduceMean on integers")
    op = "reduce_avg" if ctx.op_type == "ReduceMean" else "reduce_sum"
    return _reduce_generic(ctx, lambda axes, out: _reduce(ctx.b, op, ctx.x(0), axes, out))


@converts("ReduceMax", "ReduceMin")
def _reduce_max(ctx: NodeCtx):
    if 0 in ctx.shape(0):
        raise Unsupported("reduction of an empty tensor")
    if ctx.dtype(0) == torch.bool:  # any/all of a mask: reduce its 0/1 floats, then back to a mask
        x = ctx.x(0, _F32)
        out = _reduce_generic(ctx, lambda axes, shape: _reduce_max_or_min(ctx.b, x, axes, True,
                                                                          ctx.op_type == "ReduceMin", shape))
        return ctx.b.cast(out, torch.bool)
    return _reduce_generic(ctx, lambda axes, out: _reduce_max_or_min(ctx.b, ctx.x(0), axes, True,
                                                                     ctx.op_type == "ReduceMin", out))


@converts("ReduceProd")
def _reduce_prod(ctx: NodeCtx):
    """The product over the axes: halving rounds of multiplies along each (``aten_products.product_along``)."""
    if not ctx.out_dtype().is_floating_point:
        raise Unsupported("ReduceProd on integers (its products are not proven to stay exact on the device)")
    if 0 in ctx.shape(0):
        raise Unsupported("reduction of an empty tensor")

    def fn(axes, out):
        v = ctx.x(0)
        for a in axes:
            v = product_along(ctx.b, v, a)
        return ctx.b.reshape(v, out)
    return _reduce_generic(ctx, fn)


@converts("ReduceSumSquare", "ReduceL2", "ReduceL1", "ReduceLogSumExp", "ReduceLogSum")
def _reduce_other(ctx: NodeCtx):
    b = ctx.b
    dt = _float_out(ctx)
    x = ctx.x(0, dt)

    def fn(axes, out):
        if ctx.op_type in ("ReduceSumSquare", "ReduceL2"):
            r = _reduce(b, "reduce_sum", b.op("square", [x]), axes, out)
            return b.op("sqrt", [r]) if ctx.op_type == "ReduceL2" else r
        if ctx.op_type == "ReduceL1":
            return _reduce(b, "reduce_sum", b.op("abs", [x]), axes, out)
        if ctx.op_type == "ReduceLogSum":
            return b.op("log", [_reduce(b, "reduce_sum", x, axes, out)])
        return b.op("log", [_reduce(b, "reduce_sum", b.op("exp", [x]), axes, out)])
    return _reduce_generic(ctx, fn)


@converts("ArgMax", "ArgMin")
def _argmax(ctx: NodeCtx):
    b = ctx.b
    x = ctx.x(0)
    dim = ctx.axis(ctx.attr("axis", 0, (int,)), ctx.rank(0))
    if ctx.op_type == "ArgMin":
        # the max of -x; 0 - x is exact (a multiply by -1 would pass the multiplier's 19-bit registers)
        x = b.binary("subtract", 0, x, ctx.dtype(0))
    last = bool(ctx.attr("select_last_index", 0, (int,)))
    return b.cast(b.reshape(b.op("argmax", [x], dim=dim, last=last), ctx.out_shape()), ctx.out_dtype())


@converts("TopK")
def _topk(ctx: NodeCtx):
    """The k largest (``largest=0``: smallest) values along ``axis`` and their indices, sorted, ties in ascending
    index order (:func:`pybuda.frontend.aten_sort.top_k`). k is an input from opset 10 (an attribute before)."""
    from pybuda.frontend.aten_sort import top_k

    rank = ctx.rank(0)
    axis = ctx.axis(ctx.attr("axis", -1, (int,)), rank)
    k = ctx.ints(1, "k")[0] if ctx.has(1) else ctx.attr("k", types=(int,))
    largest = bool(ctx.attr("largest", 1, (int,)))
    values, indices = top_k(ctx.b, ctx.x(0), int(k), axis, largest)
    return [ctx.b.cast(values, ctx.out_dtype(0)), ctx.b.cast(indices, ctx.out_dtype(1))]


@converts("CumSum")
def _cumsum(ctx: NodeCtx):
    _float_out(ctx)
    b = ctx.b
    axis = ctx.axis(ctx.ints(1, "axis")[0], ctx.rank(0))
    exclusive = bool(ctx.attr("exclusive", 0, (int,)))
    x = ctx.x(0)
    if ctx.rank(0) == 1:  # the chip's cumsum is a matmul with a triangle: it needs a 2-d operand
        x, axis = b.reshape(x, (1,) + ctx.shape(0)), 1
    if ctx.attr("reverse", 0, (int,)):
        # the sum from the end: total - (sum from the start) + x, and without x when exclusive
        total = b.op("reduce_sum", [x], dim=axis)
        out = b.op("subtract", [total, b.op("cumsum", [x], axis=axis, exclusive=True)])
        if exclusive:
            out = b.op("subtract", [out, x])
    else:
        out = b.op("cumsum", [x], axis=axis, exclusive=exclusive)
    return b.reshape(out, ctx.out_shape())




@converts("CumProd")
def _cumprod(ctx: NodeCtx):
    """The running product (``aten_products.running_product``), exclusive and reverse as the attributes say."""
    if not ctx.out_dtype().is_floating_point:
        raise Unsupported("CumProd on integers (its products are not proven to stay exact on the device)")
    axis = ctx.axis(ctx.ints(1, "axis")[0], ctx.rank(0))
    out = running_product(ctx.b, ctx.x(0), axis, exclusive=bool(ctx.attr("exclusive", 0, (int,))),
                          reverse=bool(ctx.attr("reverse", 0, (int,))))
    return ctx.b.reshape(out, ctx.out_shape())
