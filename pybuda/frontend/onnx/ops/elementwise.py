"""Elementwise ONNX ops: arithmetic, comparisons, logic, activations, casts."""

from __future__ import annotations

import math

import numpy as np
import torch

from pybuda.frontend.aten_builder import Const, Unsupported, _as_bool
from pybuda.frontend.aten_eltwise import (_elu_of, _hardsigmoid_of, _hold_nonfinite, _inverse_trig_of, _sign_exact,
                                          _softplus_of, isnan_of)
from pybuda.frontend.onnx.converter import NodeCtx, converts, inf_standin
from pybuda.frontend.onnx import model as onnx_model
from pybuda.frontend.onnx.ops.common import _float_out


_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide"}


@converts(*_BINARY)
def _binary(ctx: NodeCtx):
    dt = ctx.out_dtype()
    if ctx.op_type == "Div" and not dt.is_floating_point:  # ONNX truncates: by a constant, of a proven range
        from pybuda.frontend.aten_eltwise import integer_quotient

        return integer_quotient(ctx.b, ctx.value(0), ctx.value(1), "trunc", dt)
    return ctx.b.binary(_BINARY[ctx.op_type], ctx.x(0), ctx.x(1), dt)


@converts("Mod")
def _mod(ctx: NodeCtx):
    """Integer ``Mod`` by a positive constant (``fmod`` 0: the divisor's sign, Python's ``%``; 1: the dividend's), of a
    proven range (the torch frontend's remainder); float ``Mod`` runs on the CPU."""
    from pybuda.frontend.aten_eltwise import integer_remainder

    return integer_remainder(ctx.b, ctx.value(0), ctx.value(1), bool(ctx.attr("fmod", 0)))


@converts("Pow")
def _pow(ctx: NodeCtx):
    e = ctx.value(1)
    dt = ctx.out_dtype()
    if not dt.is_floating_point:
        # An integer base: ONNX truncates the power to an integer. With a constant non-negative integer
        # exponent the power of integers is an integer (exact on the device, the cast to the integer dtype
        # vanishes); a float exponent needs exp/log, which cannot be truncated exactly (2 ** 5 might come out
        # as 31.99999), so that stays on the host.
        if not (isinstance(e, Const) and e.value.numel() == 1 and float(e.value.reshape(-1)[0]).is_integer()
                and float(e.value.reshape(-1)[0]) >= 0):
            raise Unsupported(f"Pow on {str(dt).replace('torch.', '')} data with a non-constant exponent "
                              f"(the integer result truncates a float power the device cannot compute exactly)")
        v = float(e.value.reshape(-1)[0])
        return ctx.b.cast(ctx.b.op("pow", [ctx.x(0, torch.float32)], exponent=v), dt)
    x = ctx.x(0, dt)
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


@converts("IsNaN")
def _isnan(ctx: NodeCtx):
    """Exact on the device (:func:`pybuda.frontend.aten_eltwise.isnan_of`). Of a softmax in a graph whose infinite
    constants are finite stand-ins (an additive ``-inf`` attention mask, see ``inf_standin``), also 1 on every
    row ONNX Runtime's softmax makes NaN: a row whose scores are all "infinite" (|row max| at or beyond the
    stand-in: a fully masked row, whose exp(-inf - -inf) is NaN there, but on the device exp(0)). That is the
    Softmax -> IsNaN -> Where(isnan, 0, softmax) of torch's exported scaled_dot_product_attention: such rows
    become 0 as in ONNX Runtime."""
    _float_in(ctx)
    b = ctx.b
    x = ctx.x(0)
    dt = b.dtype(x)
    out = isnan_of(b, x)
    src = b.graph[x]
    if getattr(b.graph, "inf_standins", False) and src.kind == "op" and src.op_type == "softmax":
        scores = src.operands[0]
        big = _sign_exact(b, b.op("abs", [b.op("reduce_max", [scores], dim=src.attrs["dim"])]))
        masked = b.binary("greater_equal", big, inf_standin(dt), dt)
        out = b.op("maximum", [out, masked])
    return b.cast(out, torch.bool)


@converts("IsInf")
def _isinf(ctx: NodeCtx):
    """A value at or beyond the finite stand-in for infinity counts as infinite (as ``Equal`` against infinity and
    the host's restoring of outputs have it): the ONNX backend pushes an input's infinities as that stand-in
    (``finite_standins``), and a graph's infinite constants are stand-ins too, so the exact test
    (:func:`pybuda.frontend.aten_eltwise.isinf_of`) would call them finite."""
    _float_in(ctx)
    b = ctx.b
    pos = bool(ctx.attr("detect_positive", 1, (int,)))
    neg = bool(ctx.attr("detect_negative", 1, (int,)))
    x = ctx.x(0)
    dt = b.dtype(x)
    big = inf_standin(dt)
    _hold_nonfinite(b, x)
    if pos and neg:
        out = b.binary("greater_equal", _sign_exact(b, b.op("abs", [x])), big, dt)
    elif pos:
        out = b.binary("greater_equal", x, big, dt)
    elif neg:
        out = b.binary("less_equal", x, -big, dt)
    else:
        out = b.binary("multiply", b.binary("greater", x, 0.0, dt), 0.0, dt)
    return b.cast(out, torch.bool)


def _float_in(ctx: NodeCtx) -> None:
    if not ctx.dtype(0).is_floating_point:
        raise Unsupported(f"{ctx.op_type} on {str(ctx.dtype(0)).replace('torch.', '')} data")


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


@converts("Acos", "Asin", "Atan")
def _inverse_trig(ctx: NodeCtx):
    """Polynomials of ops the chip runs, as the torch frontend maps acos/asin/atan."""
    dt = _float_out(ctx)
    return _inverse_trig_of(ctx.b, ctx.op_type.lower(), ctx.x(0, dt), dt)


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
    return ctx.b.negative(ctx.x(0), ctx.out_dtype())


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
    return _elu_of(b, x, alpha, gamma, 1.0 / alpha if ctx.op_type == "Celu" else 1.0, dt)


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
    ratio = float(ctx.const(1, "ratio").reshape(-1)[0]) if ctx.has(1) else float(ctx.attr("ratio", 0.5, (float, int)))
    want_mask = len(ctx.node.output) > 1 and bool(ctx.node.output[1])
    if not training or ratio == 0.0:
        x = ctx.b.op("nop", [ctx.x(0)])
        if want_mask:
            return [x, Const(torch.ones(ctx.shape(0), dtype=torch.bool), f"{ctx.label}.mask")]
        return x
    if "seed" not in ctx.attrs:
        # Unseeded: a new mask every run, so no fixed result is right (coverage.py: not registry-mappable).
        raise Unsupported("Dropout in training mode without a seed (a new random mask every run)")
    if not 0.0 < ratio < 1.0:
        raise ctx.bad(f"ratio must be in [0, 1), got {ratio}")
    dt = _float_out(ctx)
    # With a seed, ONNX's reference runtime (which also runs seeded random nodes on the host, see stages.py)
    # draws the same mask on every run: the mask is a constant of the node, taken from that runtime.
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"], seed=int(ctx.attr("seed", types=(int,))))
    feeds = {"x": np.ones(ctx.shape(0), np.float32), "r": np.array(ratio, np.float32), "t": np.array(True)}
    keep = ReferenceEvaluator(node, opsets={"": max(ctx.opset, 13)}).run(None, feeds)[1].astype(bool)
    scale = torch.from_numpy(keep.astype(np.float32) / np.float32(1.0 - ratio)).to(dt)
    y = ctx.b.op("multiply", [ctx.x(0, dt), ctx.b.const(scale, f"{ctx.label}.keep_scaled")])
    return [y, Const(torch.from_numpy(keep), f"{ctx.label}.mask")] if want_mask else y


@converts("Cast")
def _cast(ctx: NodeCtx):
    to = ctx.attr("to", types=(int,))
    dt = onnx_model.torch_dtype(to)
    if dt is None or dt not in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.bool, torch.int64,
                                torch.int32, torch.int8, torch.uint8, torch.int16):
        raise Unsupported(f"Cast to element type {to}")
    # Float to integer truncates toward zero in ONNX and in the registry's cast alike; the capability check
    # keeps it on the device only when the values already are integers (then it is the identity).
    return ctx.b.cast(ctx.x(0), dt)


@converts("CastLike")
def _cast_like(ctx: NodeCtx):
    dt = ctx.out_dtype()
    v = ctx.value(0)
    if isinstance(v, Const):  # only the type of input 1 matters: the result is known now (e.g. a -inf fill)
        return Const(v.value.to(dt), f"{ctx.label}.const")
    return ctx.b.cast(ctx.x(0), dt)


