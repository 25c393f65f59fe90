"""The ONNX op table: one small converter per ONNX op type, emitting registry ops.

Converters reuse the torch frontend's builder helpers (matmul, convolution, permutations, reductions,
index ranges ...) so a decomposition lives in one place. A converter raises
:class:`~pybuda.frontend.aten_builder.Unsupported` for a call it cannot express (the node then falls back
to the CPU) and :class:`~pybuda.frontend.onnx.importer.OnnxAttributeError` (via ``ctx.bad``) for an
attribute value the ONNX op itself does not accept.
"""

from __future__ import annotations

import math
from typing import Any, List, Sequence, Tuple

import numpy as np

import torch

from pybuda.frontend.aten_builder import Const, Unsupported, _as_bool, _reduce_max_or_min
from pybuda.frontend.aten_eltwise import _hardsigmoid_of, _softplus_of
from pybuda.frontend.aten_nn import _conv2d, _matmul, _reduce
from pybuda.frontend.aten_shape import _adv_index, _index_range, _permute_by
from pybuda.frontend.onnx.importer import NodeCtx, converts, inf_standin, onnx_model

_F32 = torch.float32


def _float_out(ctx: NodeCtx, k: int = 0) -> torch.dtype:
    dt = ctx.out_dtype(k)
    if not dt.is_floating_point:
        raise Unsupported(f"{ctx.op_type} on {str(dt).replace('torch.', '')} data")
    return dt


# --- elementwise ----------------------------------------------------------------------------------
_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide"}


@converts(*_BINARY)
def _binary(ctx: NodeCtx):
    dt = ctx.out_dtype()
    if ctx.op_type == "Div" and not dt.is_floating_point:
        raise Unsupported("integer division (ONNX truncates)")
    return ctx.b.binary(_BINARY[ctx.op_type], ctx.x(0), ctx.x(1), dt)


@converts("Pow")
def _pow(ctx: NodeCtx):
    dt = _float_out(ctx)
    x = ctx.x(0, dt)
    e = ctx.value(1)
    if isinstance(e, Const) and e.value.numel() == 1:
        v = float(e.value.reshape(-1)[0])
        if v == 1:
            return ctx.b.op("nop", [x])
        if v == 2:
            return ctx.b.op("square", [x])
        if v == 0.5:
            return ctx.b.op("sqrt", [x])
        if v == -1:
            return ctx.b.op("reciprocal", [x])
        return ctx.b.op("pow", [x], exponent=v)
    return ctx.b.binary("power", x, ctx.x(1), dt)


def _variadic(ctx: NodeCtx, op: str):
    dt = ctx.out_dtype()
    acc = ctx.x(0, dt)
    for i in range(1, len(ctx.inputs)):
        acc = ctx.b.binary(op, acc, ctx.x(i, dt), dt)
    if len(ctx.inputs) == 1:
        acc = ctx.b.op("nop", [acc])
    return acc


@converts("Max")
def _max(ctx: NodeCtx):
    return _variadic(ctx, "maximum")


@converts("Min")
def _min(ctx: NodeCtx):
    return _variadic(ctx, "minimum")


@converts("Sum")
def _sum(ctx: NodeCtx):
    return _variadic(ctx, "add")


@converts("Mean")
def _mean(ctx: NodeCtx):
    dt = _float_out(ctx)
    return ctx.b.binary("multiply", _variadic(ctx, "add"), 1.0 / len(ctx.inputs), dt)


_COMPARE = {"Equal": "equal", "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal",
            "GreaterOrEqual": "greater_equal"}


@converts(*_COMPARE)
def _compare(ctx: NodeCtx):
    dt = torch.promote_types(ctx.dtype(0), ctx.dtype(1))
    op = _COMPARE[ctx.op_type]
    for k in (0, 1):
        inf = _infinite_constant(ctx, k)
        if inf and op == "equal":  # x == +-inf: x at or beyond the device's stand-in for infinity
            op = "greater_equal" if (inf > 0) == (k == 1) else "less_equal"
    return ctx.b.cast(ctx.b.binary(op, ctx.x(0), ctx.x(1), dt), torch.bool)


def _infinite_constant(ctx: NodeCtx, k: int) -> float:
    """+-1.0 when input ``k`` is a constant whose every element is +-inf (0.0 otherwise)."""
    v = ctx.value(k)
    if not isinstance(v, Const) or not v.value.dtype.is_floating_point or not v.value.numel():
        return 0.0
    t = v.value
    if bool(torch.all(t == math.inf)):
        return 1.0
    return -1.0 if bool(torch.all(t == -math.inf)) else 0.0


@converts("And", "Or", "Xor")
def _logical(ctx: NodeCtx):
    b = ctx.b
    a, c = _as_bool(b, ctx.x(0)), _as_bool(b, ctx.x(1))
    if ctx.op_type == "And":
        return b.op("logical_and", [a, c])
    if ctx.op_type == "Or":
        return b.op("logical_not", [b.op("logical_and", [b.op("logical_not", [a]), b.op("logical_not", [c])])])
    # a xor c = (a or c) and not (a and c): logical ops keep the masks on the device (0/1 floats there)
    either = b.op("logical_not", [b.op("logical_and", [b.op("logical_not", [a]), b.op("logical_not", [c])])])
    return b.op("logical_and", [either, b.op("logical_not", [b.op("logical_and", [a, c])])])


@converts("Not")
def _not(ctx: NodeCtx):
    return ctx.b.op("logical_not", [_as_bool(ctx.b, ctx.x(0))])


@converts("Where")
def _where(ctx: NodeCtx):
    dt = ctx.out_dtype()
    return ctx.b.op("where", [_as_bool(ctx.b, ctx.x(0)), ctx.x(1, dt), ctx.x(2, dt)])


_UNARY = {"Abs": "abs", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Sigmoid": "sigmoid",
          "Tanh": "tanh", "Sin": "sine", "Cos": "cosine", "Relu": "relu"}


@converts(*_UNARY)
def _unary(ctx: NodeCtx):
    if ctx.op_type not in ("Abs", "Relu"):
        _float_out(ctx)
    return ctx.b.op(_UNARY[ctx.op_type], [ctx.x(0)])


@converts("Erf")
def _erf(ctx: NodeCtx):
    # The chip has no erf kernel: the registry's device form (an erfc fit from exp, reciprocal, abs ...).
    from pybuda.ops.eltwise import erf_device_form

    dt = _float_out(ctx)
    b = ctx.b
    x = ctx.x(0, dt)
    rank = b.rank(x)
    return erf_device_form(lambda t, ops: b.op(t, ops), lambda v: b.scalar(v, dt, rank), x)


@converts("Neg")
def _neg(ctx: NodeCtx):
    return ctx.b.binary("multiply", ctx.x(0), -1, ctx.out_dtype())


@converts("Sign")
def _sign(ctx: NodeCtx):
    dt = _float_out(ctx)
    x = ctx.x(0)
    pos = ctx.b.cast(ctx.b.binary("greater", x, 0.0, dt), dt)
    neg = ctx.b.cast(ctx.b.binary("less", x, 0.0, dt), dt)
    return ctx.b.op("subtract", [pos, neg])


@converts("LeakyRelu")
def _leaky_relu(ctx: NodeCtx):
    return ctx.b.op("leaky_relu", [ctx.x(0)], alpha=float(ctx.attr("alpha", 0.01, (float, int))))


@converts("PRelu")
def _prelu(ctx: NodeCtx):
    dt = _float_out(ctx)
    x = ctx.x(0)
    return ctx.b.op("where", [ctx.b.binary("greater", x, 0.0, dt), x, ctx.b.binary("multiply", x, ctx.x(1), dt)])


@converts("ThresholdedRelu")
def _thresholded_relu(ctx: NodeCtx):
    dt = _float_out(ctx)
    x = ctx.x(0)
    alpha = float(ctx.attr("alpha", 1.0, (float, int)))
    return ctx.b.op("where", [ctx.b.binary("greater", x, alpha, dt), x, ctx.b.scalar(0.0, dt, ctx.rank(0))])


@converts("Elu", "Selu", "Celu")
def _elu(ctx: NodeCtx):
    b = ctx.b
    dt = _float_out(ctx)
    x = ctx.x(0)
    default_alpha = {"Elu": 1.0, "Selu": 1.67326319217681884765625, "Celu": 1.0}[ctx.op_type]
    alpha = float(ctx.attr("alpha", default_alpha, (float, int)))
    gamma = float(ctx.attr("gamma", 1.05070102214813232421875, (float, int))) if ctx.op_type == "Selu" else 1.0
    inner = b.binary("multiply", x, 1.0 / alpha, dt) if ctx.op_type == "Celu" else x
    neg = b.binary("multiply", b.binary("subtract", b.op("exp", [inner]), 1.0, dt), alpha, dt)
    out = b.op("where", [b.binary("greater", x, 0.0, dt), x, neg])
    return b.binary("multiply", out, gamma, dt) if gamma != 1.0 else out


@converts("HardSigmoid")
def _hard_sigmoid(ctx: NodeCtx):
    b = ctx.b
    dt = _float_out(ctx)
    alpha = float(ctx.attr("alpha", 0.2, (float, int)))
    beta = float(ctx.attr("beta", 0.5, (float, int)))
    return b.op("clip", [b.binary("add", b.binary("multiply", ctx.x(0), alpha, dt), beta, dt)], min=0.0, max=1.0)


@converts("HardSwish")
def _hard_swish(ctx: NodeCtx):
    dt = _float_out(ctx)
    x = ctx.x(0)
    return ctx.b.op("multiply", [x, _hardsigmoid_of(ctx.b, x, dt)])


@converts("Softplus")
def _softplus(ctx: NodeCtx):
    dt = _float_out(ctx)
    return _softplus_of(ctx.b, ctx.x(0), 1.0, 20.0, dt)


@converts("Softsign")
def _softsign(ctx: NodeCtx):
    b = ctx.b
    dt = _float_out(ctx)
    x = ctx.x(0)
    return b.op("divide", [x, b.binary("add", b.op("abs", [x]), 1.0, dt)])


@converts("Mish")
def _mish(ctx: NodeCtx):
    dt = _float_out(ctx)
    x = ctx.x(0)
    return ctx.b.op("multiply", [x, ctx.b.op("tanh", [_softplus_of(ctx.b, x, 1.0, 20.0, dt)])])


@converts("Gelu")
def _gelu(ctx: NodeCtx):
    _float_out(ctx)
    approx = ctx.attr("approximate", "none", (str,), ("none", "tanh"))
    return ctx.b.op("gelu", [ctx.x(0)], approximate=approx)


@converts("Clip")
def _clip(ctx: NodeCtx):
    dt = ctx.out_dtype()
    if not dt.is_floating_point:
        raise Unsupported("Clip on integer data")
    if any(ctx.has(k) and not isinstance(ctx.value(k), Const) for k in (1, 2)):
        # bounds computed at run time: max(x, min) then min(., max), broadcasting the one-element bounds
        out = ctx.x(0, dt)
        for k, op in ((1, "maximum"), (2, "minimum")):
            if ctx.has(k):
                out = ctx.b.op(op, [out, ctx.b.reshape(ctx.x(k, dt), (1,) * max(ctx.rank(0), 1))])
        return out
    lo = float(ctx.const(1, "min").reshape(-1)[0]) if ctx.has(1) else -math.inf
    hi = float(ctx.const(2, "max").reshape(-1)[0]) if ctx.has(2) else math.inf
    return ctx.b.op("clip", [ctx.x(0)], min=lo, max=hi)


@converts("Identity")
def _identity(ctx: NodeCtx):
    return ctx.b.op("nop", [ctx.x(0)])


@converts("Dropout")
def _dropout(ctx: NodeCtx):
    training = ctx.has(2) and bool(ctx.const(2, "training_mode").reshape(-1)[0])
    if training and (not ctx.has(1) or float(ctx.const(1, "ratio").reshape(-1)[0]) != 0.0):
        # Random masks run on the host (see stages.py: a seeded node draws ONNX's own reference masks).
        raise Unsupported("Dropout in training mode")
    x = ctx.b.op("nop", [ctx.x(0)])
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        return [x, Const(torch.ones(ctx.shape(0), dtype=torch.bool), f"{ctx.label}.mask")]
    return x


@converts("Cast")
def _cast(ctx: NodeCtx):
    to = ctx.attr("to", types=(int,))
    dt = onnx_model.torch_dtype(to)
    if dt is None or dt not in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.bool, torch.int64,
                                torch.int32, torch.int8, torch.uint8, torch.int16):
        raise Unsupported(f"Cast to element type {to}")
    src = ctx.dtype(0)
    if src.is_floating_point and not dt.is_floating_point and dt != torch.bool:
        raise Unsupported("Cast from float to integer (rounding differs)")
    return ctx.b.cast(ctx.x(0), dt)


@converts("CastLike")
def _cast_like(ctx: NodeCtx):
    dt = ctx.out_dtype()
    if ctx.dtype(0).is_floating_point and not dt.is_floating_point and dt != torch.bool:
        raise Unsupported("Cast from float to integer")
    v = ctx.value(0)
    if isinstance(v, Const):  # only the type of input 1 matters: the result is known now (e.g. a -inf fill)
        return Const(v.value.to(dt), f"{ctx.label}.const")
    return ctx.b.cast(ctx.x(0), dt)


# --- matmul / conv / pooling / normalisation --------------------------------------------------------
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


# --- reductions -----------------------------------------------------------------------------------
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
    if ctx.attr("select_last_index", 0, (int,)):
        raise Unsupported("ArgMax/ArgMin with select_last_index")
    x = ctx.x(0)
    if not ctx.dtype(0).is_floating_point:
        raise Unsupported("ArgMax on integers")
    dim = ctx.axis(ctx.attr("axis", 0, (int,)), ctx.rank(0))
    if ctx.op_type == "ArgMin":
        x = b.binary("multiply", x, -1, ctx.dtype(0))
    return b.cast(b.reshape(b.op("argmax", [x], dim=dim), ctx.out_shape()), ctx.out_dtype())


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


# --- shapes ---------------------------------------------------------------------------------------
@converts("Shape")
def _shape(ctx: NodeCtx):
    shape = list(ctx.shape(0))
    rank = len(shape)
    start = ctx.attr("start", 0, (int,))
    end = ctx.attr("end", rank, (int,))
    return Const(torch.tensor(shape[slice(start, end)], dtype=torch.int64), f"{ctx.label}.shape")


@converts("Size")
def _size(ctx: NodeCtx):
    return Const(torch.tensor(math.prod(ctx.shape(0)), dtype=torch.int64), f"{ctx.label}.size")


@converts("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(ctx: NodeCtx):
    if ctx.op_type == "Reshape":
        ctx.const(1, "shape")
    if ctx.op_type == "Flatten":
        ctx.axis(ctx.attr("axis", 1, (int,)), ctx.rank(0) + 1)
    if ctx.op_type in ("Squeeze", "Unsqueeze") and ctx.has(1):
        ctx.const(1, "axes")
    if 0 in ctx.out_shape():
        raise Unsupported("zero-size tensors")
    return ctx.b.reshape(ctx.x(0), ctx.out_shape())


@converts("Transpose")
def _transpose(ctx: NodeCtx):
    rank = ctx.rank(0)
    perm = list(ctx.attr("perm", list(range(rank))[::-1], (list,)))
    if sorted(perm) != list(range(rank)):
        raise ctx.bad(f"perm {perm} is not a permutation of {rank} dims")
    out = _permute_by(ctx.b, ctx.x(0), perm)
    return out if out != ctx.x(0) else ctx.b.op("nop", [out])


@converts("Concat")
def _concat(ctx: NodeCtx):
    dt = ctx.out_dtype()
    rank = ctx.rank(0)
    axis = ctx.axis(ctx.attr("axis", types=(int,)), rank)
    parts = [ctx.x(i, dt) for i in range(len(ctx.inputs)) if ctx.has(i) and math.prod(ctx.shape(i)) > 0]
    if not parts:
        raise Unsupported("concatenation of empty tensors")
    if len(parts) == 1:
        return ctx.b.op("nop", parts)
    return ctx.b.op("concatenate", parts, axis=axis)


@converts("Split")
def _split(ctx: NodeCtx):
    rank = ctx.rank(0)
    axis = ctx.axis(ctx.attr("axis", 0, (int,)), rank)
    if ctx.has(1):
        ctx.const(1, "split")
    outs, offset = [], 0
    for k in range(len(ctx.node.output)):
        size = ctx.out_shape(k)[axis]
        if size == 0:
            raise Unsupported("empty split piece")
        outs.append(_index_range(ctx.b, ctx.x(0), axis, offset, offset + size))
        offset += size
    return [o if o != ctx.x(0) else ctx.b.op("nop", [o]) for o in outs]


@converts("Slice")
def _slice(ctx: NodeCtx):
    rank = ctx.rank(0)
    shape = ctx.shape(0)
    starts = ctx.ints(1, "starts")
    ends = ctx.ints(2, "ends")
    axes = ctx.ints(3, "axes") if ctx.has(3) else list(range(len(starts)))
    steps = ctx.ints(4, "steps") if ctx.has(4) else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.bad("starts, ends, axes and steps must have the same length")
    v = ctx.x(0)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = ctx.axis(a, rank, "axes entry")
        if st == 0:
            raise ctx.bad("steps must be non-zero")
        if st < 0:
            raise Unsupported("Slice with a negative step")
        r = range(shape[a])[slice(s, e, st)]
        if len(r) == 0:
            raise Unsupported("empty slice (zero-size tensors)")
        v = _index_range(ctx.b, v, a, r.start, r.start + (len(r) - 1) * st + 1, st)
    return v if v != ctx.x(0) else ctx.b.op("nop", [v])


@converts("Gather")
def _gather(ctx: NodeCtx):
    rank = ctx.rank(0)
    axis = ctx.axis(ctx.attr("axis", 0, (int,)), rank)
    size = ctx.shape(0)[axis]
    idx = ctx.value(1)
    if isinstance(idx, Const):
        iv = idx.value.to(torch.int64)
        if ((iv < -size) | (iv >= size)).any():
            raise Unsupported(f"Gather indices out of range for a dim of size {size}")
        idx = Const(torch.where(iv < 0, iv + size, iv), idx.name)
        if idx.value.numel() == 0:
            raise Unsupported("Gather with no indices")
    return _adv_index(ctx.b, ctx.x(0), idx, axis, ctx.out_shape())


@converts("GatherElements")
def _gather_elements(ctx: NodeCtx):
    """Indices known at import (e.g. a loss's integer targets): per index along the axis, the input times a
    one-hot mask summed over the axis (a loss picks one class per sample); for many indices along the axis, a
    Gather of the flattened input at the flat positions they name (computed now)."""
    shape = ctx.shape(0)
    axis = ctx.axis(ctx.attr("axis", 0, (int,)), len(shape))
    idx = ctx.const(1, "indices").to(torch.int64)
    size = shape[axis]
    if ((idx < -size) | (idx >= size)).any():
        raise ctx.bad(f"indices out of range for a dim of size {size}")
    if idx.numel() == 0:
        raise Unsupported("GatherElements with no indices")
    idx = torch.where(idx < 0, idx + size, idx)
    if idx.shape[axis] <= ONE_HOT_GATHER_MAX:
        return _gather_one_hot(ctx, idx, axis)
    coords = list(torch.meshgrid(*[torch.arange(n) for n in idx.shape], indexing="ij"))
    coords[axis] = idx
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    flat = sum(c * st for c, st in zip(coords, strides))
    x = ctx.b.reshape(ctx.x(0), (math.prod(shape),))
    return _adv_index(ctx.b, x, Const(flat, f"{ctx.label}.positions"), 0, ctx.out_shape())


#: GatherElements with at most this many indices along its axis uses one-hot masks (cost: that many
#: products of the input's size) rather than a flat Gather (cost: the input's size squared).
ONE_HOT_GATHER_MAX = 16


def _gather_one_hot(ctx: NodeCtx, idx: torch.Tensor, axis: int) -> str:
    b = ctx.b
    dt = ctx.out_dtype()
    if not dt.is_floating_point:
        raise Unsupported(f"GatherElements on {str(dt).replace('torch.', '')} data")
    x = ctx.x(0)
    for d, n in enumerate(idx.shape):  # the input restricted to the indices' extent on the other dims
        if d != axis:
            x = _index_range(b, x, d, 0, n)
    size = b.shape(x)[axis]
    classes = torch.arange(size).reshape([size if d == axis else 1 for d in range(idx.dim())])
    parts = []
    for k in range(idx.shape[axis]):
        pick = (torch.narrow(idx, axis, k, 1) == classes).to(dt)  # one-hot along the axis
        picked = b.op("multiply", [x, b.const(pick, f"{ctx.label}.one_hot")])
        parts.append(b.op("reduce_sum", [picked], dim=axis))
    return parts[0] if len(parts) == 1 else b.op("concatenate", parts, axis=axis)


@converts("Expand")
def _expand(ctx: NodeCtx):
    ctx.const(1, "shape")
    out = ctx.b.broadcast_to(ctx.x(0), ctx.out_shape())
    return out if out != ctx.x(0) else ctx.b.op("nop", [out])


@converts("Tile")
def _tile(ctx: NodeCtx):
    reps = ctx.ints(1, "repeats")
    if len(reps) != ctx.rank(0):
        raise ctx.bad(f"repeats has {len(reps)} entries for a rank-{ctx.rank(0)} input")
    if all(r == 1 for r in reps):
        return ctx.b.op("nop", [ctx.x(0)])
    return ctx.b.op("repeat", [ctx.x(0)], factors=tuple(reps))


@converts("Pad")
def _pad(ctx: NodeCtx):
    mode = ctx.attr("mode", "constant", (str,), ("constant", "reflect", "edge", "wrap"))
    rank = ctx.rank(0)
    pads = ctx.ints(1, "pads")
    axes = ctx.ints(3, "axes") if ctx.has(3) else list(range(rank))
    if len(pads) != 2 * len(axes):
        raise ctx.bad(f"pads has {len(pads)} entries for {len(axes)} axes")
    if mode == "wrap":
        raise Unsupported("Pad mode 'wrap'")
    per_dim = {ctx.axis(a, rank, "axes entry"): (pads[k], pads[k + len(axes)]) for k, a in enumerate(axes)}
    if all(p == (0, 0) for p in per_dim.values()):
        return ctx.b.op("nop", [ctx.x(0)])
    dt = _float_out(ctx)
    static_value = not ctx.has(2) or isinstance(ctx.value(2), Const)
    value = float(ctx.const(2, "constant_value").reshape(-1)[0]) if ctx.has(2) and static_value else 0.0
    if math.isinf(value):  # a -inf fill (attention masks) is the device's stand-in for infinity
        value = math.copysign(inf_standin(dt), value)
    if mode == "constant" and (not static_value or any(p < 0 for pr in per_dim.values() for p in pr)
                               or any(per_dim.get(d, (0, 0)) != (0, 0) for d in range(rank - 2))):
        return _pad_by_concat(ctx, per_dim, value if static_value else ctx.x(2, dt), dt)
    if any(p < 0 for pr in per_dim.values() for p in pr):
        raise Unsupported("negative padding (cropping)")
    if any(per_dim.get(d, (0, 0)) != (0, 0) for d in range(rank - 2)):
        raise Unsupported("padding of other than the last two dims")
    last = per_dim.get(rank - 1, (0, 0))
    pad = list(last)
    if rank >= 2 and per_dim.get(rank - 2, (0, 0)) != (0, 0):
        pad += list(per_dim[rank - 2])
    mode = {"edge": "replicate"}.get(mode, mode)
    return ctx.b.op("pad", [ctx.x(0)], pad=tuple(pad), mode=mode, value=value, channel_last=False)


def _pad_by_concat(ctx: NodeCtx, per_dim, value: Any, dt) -> str:
    """Constant padding of any dims as slices (negative pads crop) and concatenations with blocks of ``value``
    (a float, or a graph value computed at run time: the blocks are then ones times it)."""
    b = ctx.b
    x = ctx.x(0, dt)
    for d in sorted(per_dim):
        lo, hi = per_dim[d]
        size = b.shape(x)[d]
        if lo < 0 or hi < 0:
            x = _index_range(b, x, d, max(-lo, 0), size - max(-hi, 0))
        parts = []
        for width in (lo, None, hi):
            if width is None:
                parts.append(x)
            elif width > 0:
                shape = tuple(width if k == d else n for k, n in enumerate(b.shape(x)))
                if isinstance(value, float):
                    parts.append(b.const(torch.full(shape, value, dtype=dt), f"{ctx.label}.fill"))
                else:
                    ones = b.const(torch.ones(shape, dtype=dt), f"{ctx.label}.ones")
                    parts.append(b.op("multiply", [ones, b.reshape(value, (1,) * len(shape))]))
        if len(parts) > 1:
            x = b.op("concatenate", parts, axis=d)
    return x


@converts("ConstantOfShape")
def _constant_of_shape(ctx: NodeCtx):
    shape = ctx.ints(0, "shape")
    fill = ctx.attrs.get("value")
    value = torch.from_numpy(onnx_model.numpy_helper.to_array(fill).copy()) if fill is not None else \
        torch.zeros(1, dtype=_F32)
    return Const(value.reshape(-1)[:1].reshape(()).expand(shape).contiguous(), f"{ctx.label}.value")


@converts("Resize", "Upsample")
def _resize(ctx: NodeCtx):
    # Every Resize mode (nearest, linear, cubic; each coordinate transformation, antialias) is linear in
    # its input and separable by axis: each resized spatial axis is one matmul with a constant matrix,
    # the node's own ONNX semantics applied to an identity basis (:func:`_resize_matrix`).
    if ctx.rank(0) != 4:
        raise Unsupported(f"Resize of a rank-{ctx.rank(0)} tensor")
    ctm = ctx.attr("coordinate_transformation_mode", "half_pixel", (str,))
    if ctm == "tf_crop_and_resize":
        raise Unsupported("Resize with tf_crop_and_resize (an affine map with its extrapolation value)")
    axes = [ctx.axis(a, 4, "axes entry") for a in ctx.attr("axes", [0, 1, 2, 3], (list,))]
    out, ins = ctx.out_shape(), ctx.shape(0)
    if tuple(out[:2]) != tuple(ins[:2]):
        raise Unsupported("Resize of batch/channel dims")
    scales = None
    k = 1 if ctx.op_type == "Upsample" else 2
    if ctx.has(k) and ctx.shape(k) != (0,):
        if isinstance(ctx.value(k), Const):
            given = [float(v) for v in ctx.const(k).reshape(-1).tolist()]
            if len(given) != len(axes):
                raise ctx.bad(f"scales has {len(given)} values for {len(axes)} axes")
            scales = [1.0] * 4
            for a, v in zip(axes, given):
                scales[a] = v
        else:
            # Scales computed at run time: the static output shape fixes them only where the sample's scales
            # are exactly out/in (then any run with this shape resizes the same way).
            sample = ctx.imp.samples_run.get(ctx.node.input[k])
            ratios = [o / i for o, i in zip(out, ins)]
            if sample is None or [float(v) for v in np.asarray(sample).reshape(-1)] != [ratios[a] for a in axes]:
                raise Unsupported("Resize with scales computed at run time that are not out/in")
            scales = ratios
    elif ctx.attr("keep_aspect_ratio_policy", "stretch", (str,)) != "stretch":
        # One scale for the listed axes (ONNX: the smallest or largest sizes/in), used as given scales.
        sizes = ctx.ints(3, "sizes")
        ratios = [sz / ins[a] for a, sz in zip(axes, sizes)]
        policy = ctx.attr("keep_aspect_ratio_policy", types=(str,), choices=("not_larger", "not_smaller"))
        scale = min(ratios) if policy == "not_larger" else max(ratios)
        scales = [scale if a in axes else 1.0 for a in range(4)]
    dt = _float_out(ctx)
    b = ctx.b
    x = ctx.x(0, dt)
    for axis in (3, 2):
        if out[axis] == ins[axis] and (scales is None or scales[axis] == 1.0):
            continue  # an identity along this axis in every mode
        m = torch.from_numpy(_resize_matrix(ctx, axis, ins[axis], out[axis], scales)).to(dt)
        mt = b.const(m.t().contiguous(), f"{ctx.label}.interp{axis}")
        if axis == 3:
            x = b.op("matmul", [x, mt])
        else:
            x = b.transpose(b.op("matmul", [b.transpose(x, 2, 3), mt]), 2, 3)
    return x


def _resize_matrix(ctx: NodeCtx, axis: int, n_in: int, n_out: int, scales: Any) -> np.ndarray:
    """The ``[n_out, n_in]`` matrix of the node's resize along ``axis``: the ONNX reference implementation
    of a Resize with the node's attributes, run on the identity basis laid out along that axis."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    basis = np.eye(n_in, dtype=np.float32).reshape(n_in, 1, n_in, 1)
    attrs = {k: v for k, v in ctx.attrs.items() if k not in ("axes", "keep_aspect_ratio_policy")}
    if ctx.op_type == "Upsample":
        attrs = {"mode": attrs.get("mode", b"nearest"), "coordinate_transformation_mode": b"asymmetric",
                 "nearest_mode": b"floor"}
    feeds = {"x": basis}
    if scales is not None:
        feeds["scales"] = np.array([1.0, 1.0, scales[axis], 1.0], np.float32)
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)
    else:
        feeds["sizes"] = np.array([n_in, 1, n_out, 1], np.int64)
        node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
    y = ReferenceEvaluator(node, opsets={"": max(ctx.opset, 13)}).run(None, feeds)[0]
    if y.shape != (n_in, 1, n_out, 1):
        raise Unsupported(f"Resize along axis {axis} gives {list(y.shape)}")
    return np.ascontiguousarray(y[:, 0, :, 0].T, dtype=np.float32)


@converts("DepthToSpace")
def _depth_to_space(ctx: NodeCtx):
    if ctx.attr("mode", "DCR", (str,), ("DCR", "CRD")) != "CRD":
        raise Unsupported("DepthToSpace in DCR mode")
    return ctx.b.op("pixel_shuffle", [ctx.x(0)], upscale_factor=ctx.attr("blocksize", types=(int,)))


@converts("Range")
def _range(ctx: NodeCtx):
    if all(isinstance(ctx.value(i), Const) for i in range(3)):
        start, limit, delta = (ctx.const(i).reshape(()) for i in range(3))
        return Const(torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype), f"{ctx.label}.range")
    # Run-time bounds: the length is static (the output shape), the values are start + k * delta.
    dt = _float_out(ctx)
    b = ctx.b
    steps = b.const(torch.arange(ctx.out_shape()[0], dtype=dt), f"{ctx.label}.steps")
    start, delta = (b.reshape(ctx.x(i, dt), (1,)) for i in (0, 2))
    return b.op("add", [b.op("multiply", [steps, delta]), start])


@converts("Einsum")
def _einsum(ctx: NodeCtx):
    eq = ctx.attr("equation", types=(str,)).replace(" ", "")
    dt = _float_out(ctx)
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) == 2 and rhs and len(terms[0]) >= 2 and len(terms[1]) >= 2 and "." not in eq:
        a, c = terms
        batch = a[:-2]
        if c[:-2] == batch and rhs[:-2] == batch and a[-1] == c[-2] and rhs[-2:] == a[-2] + c[-1]:
            return _matmul(ctx.b, ctx.x(0, dt), ctx.x(1, dt), None, ctx.out_shape(), dt)
    if len(terms) in (1, 2) and len(terms) == len(ctx.inputs):
        terms, rhs = _einsum_without_ellipsis(ctx, terms, rhs if arrow else None)
        return _einsum_by_broadcast(ctx, terms, rhs, dt)
    raise Unsupported(f"einsum equation '{eq}'")


def _einsum_without_ellipsis(ctx: NodeCtx, terms: Sequence[str], rhs) -> Tuple[List[str], str]:
    """The terms with '...' spelled out in fresh letters (right-aligned across operands, as it broadcasts),
    and the output term (ONNX's implicit one when ``rhs`` is None: the ellipsis, then the letters used once)."""
    used = set("".join(terms) + (rhs or ""))
    fresh = [ch for ch in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if ch not in used]
    counts = [ctx.rank(k) - (len(t) - 3) if "..." in t else 0 for k, t in enumerate(terms)]
    width = max(counts)
    if width > len(fresh):
        raise Unsupported("einsum with too many ellipsis dims")
    dots = "".join(fresh[:width])
    out_terms = [t.replace("...", dots[width - n:]) for t, n in zip(terms, counts)]
    if rhs is None:
        singles = "".join(sorted(ch for ch in set("".join(terms)) - {"."} if "".join(terms).count(ch) == 1))
        rhs = dots + singles
    return out_terms, rhs.replace("...", dots)


def _einsum_diagonals(b: Any, x: str, term: str, dt) -> Tuple[str, str]:
    """A term with a repeated letter ('ii') reduced to its diagonal: times an identity mask over the two dims,
    summed over the second."""
    while len(set(term)) != len(term):
        ch = next(c for c in term if term.count(c) > 1)
        i, j = term.index(ch), term.index(ch, term.index(ch) + 1)
        shape = b.shape(x)
        n = shape[i]
        eye = torch.eye(n, dtype=dt).reshape([n if d in (i, j) else 1 for d in range(len(shape))])
        x = b.op("reduce_sum", [b.op("multiply", [x, b.const(eye, "einsum.diagonal")])], dim=j)
        x = b.reshape(x, shape[:j] + shape[j + 1:])
        term = term[:j] + term[j + 1:]
    return x, term


def _einsum_by_broadcast(ctx: NodeCtx, terms: Sequence[str], rhs: str, dt) -> str:
    """Einsum of one or two operands (ellipses spelled out): diagonals taken, both laid out over every letter
    (size 1 where absent), multiplied with broadcasting, summed over the letters not in the output, permuted."""
    b = ctx.b
    letters = list(dict.fromkeys("".join(terms)))
    sizes = {}
    aligned = []
    for k, term in enumerate(terms):
        x = ctx.x(k, dt)
        sizes.update(zip(term, ctx.shape(k)))
        x, term = _einsum_diagonals(b, x, term, dt)
        order = sorted(range(len(term)), key=lambda i: letters.index(term[i]))
        if order != list(range(len(term))):
            x = _permute_by(b, x, order)
        full = tuple(sizes[ch] if ch in term else 1 for ch in letters)
        aligned.append(b.reshape(x, full) if full != b.shape(x) else x)
    out = aligned[0] if len(aligned) == 1 else b.op("multiply", aligned)
    for d in reversed(range(len(letters))):
        if letters[d] not in rhs:
            out = b.op("reduce_sum", [out], dim=d)
    kept = [ch for ch in letters if ch in rhs]
    if not kept:
        return b.reshape(out, ctx.out_shape())
    out = b.reshape(out, tuple(sizes[ch] for ch in kept))
    order = [kept.index(ch) for ch in rhs]
    if order != list(range(len(kept))):
        out = _permute_by(b, out, order)
    return b.reshape(out, ctx.out_shape())
