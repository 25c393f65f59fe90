"""Converters for elementwise ATen ops: binary, unary, type conversions and copies.

Registered into :data:`pybuda.frontend.aten_builder.CONVERTERS` by the ``@converts`` decorator when
:mod:`pybuda.frontend.aten_map` imports this module.
"""

from __future__ import annotations

import math
import operator

import torch

from pybuda.frontend.aten_builder import (_as_bool, _reduce_max_or_min, negated, out_shape_of, Builder, Const, converts, Missing, out_dtype, out_shape, Unsupported, _is_number, _norm_dim, _promote)
from pybuda.frontend.fx_program import meta_val, op_name

# --- elementwise binary ---------------------------------------------------------------------------
@converts("add", "sub", "rsub")
def _add_sub(b: Builder, n, p):
    name = op_name(n.target)
    x, y = p["self"], p["other"]
    if name == "rsub":
        x, y = y, x
    alpha = p.get("alpha", 1)
    dt = out_dtype(n)
    if alpha is not None and alpha != 1:
        y = b.binary("multiply", y, alpha, dt) if b.is_tensor(y) else y * alpha
    if _is_number(x) and _is_number(y):
        raise Unsupported("scalar-only arithmetic")
    return b.binary("subtract" if name in ("sub", "rsub") else "add", x, y, dt)


@converts("mul")
def _mul(b: Builder, n, p):
    return b.binary("multiply", p["self"], p["other"], out_dtype(n))


@converts("div", "true_divide")
def _div(b: Builder, n, p):
    if p.get("rounding_mode") is not None:
        raise Unsupported(f"division with rounding_mode={p['rounding_mode']!r}")
    x, y = p["self"], p["other"]
    dt = out_dtype(n)
    if _is_number(y) and dt.is_floating_point and y != 0:
        # A constant divisor becomes a multiply by its reciprocal (cheaper on the device).
        return b.binary("multiply", x, 1.0 / float(y), dt)
    return b.binary("divide", x, y, dt)


@converts("maximum", "minimum", "fmax", "fmin")
def _maxmin(b: Builder, n, p):
    op = "maximum" if op_name(n.target) in ("maximum", "fmax") else "minimum"
    return b.binary(op, p["self"], p["other"], out_dtype(n))


@converts("max", "min")
def _max_min(b: Builder, n, p):
    name = op_name(n.target)
    overload = n.target._overloadname
    if overload == "other":
        return b.binary("maximum" if name == "max" else "minimum", p["self"], p["other"], out_dtype(n))
    x = p["self"]
    if overload == "dim":
        dims = [p["dim"]]
        keep = p["keepdim"]
        vals = _reduce_max_or_min(b, x, dims, keep, name == "min", out_shape_of(n, 0))
        return vals, _argmax_value(b, x, p["dim"], keep, name == "min", n)
    if overload == "default":
        return _reduce_max_or_min(b, x, None, False, name == "min", out_shape(n))
    raise Unsupported(f"{name}.{overload}")






def _argmax_value(b: Builder, x, dim, keepdim, is_min, n):
    if len(n.users) and not any(u.target is operator.getitem and u.args[1] == 1 for u in n.users):
        return Missing("argmax of max.dim is unused")
    v = b.tensor(x)
    if is_min:  # the max of -x; 0 - x is exact, a multiply would round x in the multiplier's registers
        v = negated(b, v)
    shape = out_shape_of(n, 1)
    r = b.op("argmax", [v], dim=_norm_dim(dim, b.rank(x)))
    return b.cast(b.reshape(r, shape), meta_val(n)[1].dtype)


@converts("pow")
def _pow(b: Builder, n, p):
    overload = n.target._overloadname
    dt = out_dtype(n)
    if overload == "Tensor_Scalar":
        x, e = b.tensor(p["self"], dt), p["exponent"]
        if e == 1:
            return x
        if e == 2:
            return b.op("square", [x])
        if e == 0.5:
            return b.op("sqrt", [x])
        if e == -1:
            return b.op("reciprocal", [x])
        if e == -0.5:
            return b.op("reciprocal", [b.op("sqrt", [x])])
        return b.op("pow", [x], exponent=float(e))
    if overload == "Scalar":
        return b.binary("power", p["self"], p["exponent"], dt)
    return b.binary("power", p["self"], p["exponent"], dt)


_COMPARE = {"eq": "equal", "ne": "not_equal", "gt": "greater", "lt": "less", "ge": "greater_equal",
            "le": "less_equal"}


@converts(*_COMPARE)
def _compare(b: Builder, n, p):
    x, y = p["self"], p["other"]
    dt = _promote(b, x, y)
    r = b.binary(_COMPARE[op_name(n.target)], x, y, dt)
    return b.cast(r, torch.bool)




@converts("logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "__and__",
          "__or__", "__xor__")
def _logical(b: Builder, n, p):
    name = op_name(n.target)
    x, y = p["self"], p["other"]
    if name.startswith("bitwise") or name.startswith("__"):
        if out_dtype(n) != torch.bool:
            raise Unsupported("bitwise ops on integers")
    if _is_number(y):
        y = b.scalar(bool(y), torch.bool, b.rank(x))
    a, c = _as_bool(b, x), _as_bool(b, y)
    kind = name.replace("logical_", "").replace("bitwise_", "").strip("_")
    if kind == "and":
        return b.op("logical_and", [a, c])
    if kind == "or":
        return b.op("logical_not", [b.op("logical_and", [b.op("logical_not", [a]), b.op("logical_not", [c])])])
    return b.op("not_equal", [a, c])


@converts("logical_not", "bitwise_not")
def _logical_not(b: Builder, n, p):
    if op_name(n.target) == "bitwise_not" and out_dtype(n) != torch.bool:
        raise Unsupported("bitwise_not on integers")
    return b.op("logical_not", [_as_bool(b, p["self"])])


@converts("where")
def _where(b: Builder, n, p):
    if n.target._overloadname == "default":
        raise Unsupported("single-argument where (nonzero) has a data-dependent shape")
    dt = out_dtype(n)
    cond, x, y = p["condition"], p["self"], p["other"]
    rank = max(b.rank(v) for v in (cond, x, y) if b.is_tensor(v))
    xs = b.scalar(x, dt, rank) if _is_number(x) else b.tensor(x, dt)
    ys = b.scalar(y, dt, rank) if _is_number(y) else b.tensor(y, dt)
    return b.op("where", [b.tensor(cond), xs, ys])


@converts("masked_fill")
def _masked_fill(b: Builder, n, p):
    dt = out_dtype(n)
    x, mask, value = p["self"], p["mask"], p["value"]
    vs = b.scalar(value, dt, b.rank(x)) if _is_number(value) else b.tensor(value, dt)
    return b.op("where", [b.tensor(mask), vs, b.tensor(x, dt)])


# --- elementwise unary ----------------------------------------------------------------------------
_UNARY = {"abs": "abs", "exp": "exp", "log": "log", "reciprocal": "reciprocal", "sqrt": "sqrt",
          "sigmoid": "sigmoid", "sin": "sine", "cos": "cosine", "tanh": "tanh", "erf": "erf", "square": "square"}


@converts(*_UNARY)
def _unary(b: Builder, n, p):
    return b.op(_UNARY[op_name(n.target)], [b.tensor(p["self"], out_dtype(n))])


@converts("neg")
def _neg(b: Builder, n, p):
    return b.negative(p["self"], out_dtype(n))


@converts("rsqrt")
def _rsqrt(b: Builder, n, p):
    return b.op("reciprocal", [b.op("sqrt", [b.tensor(p["self"], out_dtype(n))])])


@converts("log1p")
def _log1p(b: Builder, n, p):
    return b.op("log", [b.binary("add", p["self"], 1.0, out_dtype(n))])


@converts("expm1")
def _expm1(b: Builder, n, p):
    dt = out_dtype(n)
    return b.binary("subtract", b.op("exp", [b.tensor(p["self"], dt)]), 1.0, dt)


@converts("relu")
def _relu(b: Builder, n, p):
    return b.op("relu", [p["self"]])


@converts("gelu")
def _gelu(b: Builder, n, p):
    return b.op("gelu", [b.tensor(p["self"], out_dtype(n))], approximate=p.get("approximate") or "none")


@converts("leaky_relu")
def _leaky_relu(b: Builder, n, p):
    return b.op("leaky_relu", [p["self"]], alpha=float(p["negative_slope"]))


@converts("hardtanh", "relu6")
def _hardtanh(b: Builder, n, p):
    if op_name(n.target) == "relu6":
        lo, hi = 0.0, 6.0
    else:
        lo, hi = float(p["min_val"]), float(p["max_val"])
    return b.op("clip", [p["self"]], min=lo, max=hi)


@converts("clamp", "clip", "clamp_min", "clamp_max")
def _clamp(b: Builder, n, p):
    name = op_name(n.target)
    x = p["self"]
    dt = out_dtype(n)
    lo = p.get("min") if name != "clamp_max" else None
    hi = p.get("max") if name != "clamp_min" else None
    if name == "clamp_max":
        hi = p["max"]
    if (lo is None or _is_number(lo)) and (hi is None or _is_number(hi)):
        lo_f = float(lo) if lo is not None else -math.inf
        hi_f = float(hi) if hi is not None else math.inf
        return b.op("clip", [b.tensor(x, dt)], min=lo_f, max=hi_f)
    v = b.tensor(x, dt)
    if lo is not None:
        v = b.binary("maximum", v, lo, dt)
    if hi is not None:
        v = b.binary("minimum", v, hi, dt)
    return v


@converts("silu")
def _silu(b: Builder, n, p):
    x = b.tensor(p["self"], out_dtype(n))
    return b.op("multiply", [x, b.op("sigmoid", [x])])


def _hardsigmoid_of(b: Builder, x: str, dt) -> str:
    return b.op("clip", [b.binary("add", b.binary("multiply", x, 1.0 / 6.0, dt), 0.5, dt)], min=0.0, max=1.0)


@converts("hardsigmoid")
def _hardsigmoid(b: Builder, n, p):
    dt = out_dtype(n)
    return _hardsigmoid_of(b, b.tensor(p["self"], dt), dt)


@converts("hardswish")
def _hardswish(b: Builder, n, p):
    dt = out_dtype(n)
    x = b.tensor(p["self"], dt)
    return b.op("multiply", [x, _hardsigmoid_of(b, x, dt)])


@converts("elu")
def _elu(b: Builder, n, p):
    if p.get("scale", 1) != 1 or p.get("input_scale", 1) != 1:
        raise Unsupported("elu with scale/input_scale")
    dt = out_dtype(n)
    x = b.tensor(p["self"], dt)
    neg = b.binary("multiply", b.binary("subtract", b.op("exp", [x]), 1.0, dt), float(p["alpha"]), dt)
    return b.op("where", [b.binary("greater", x, 0.0, dt), x, neg])


def _softplus_of(b: Builder, x: str, beta: float, threshold: float, dt) -> str:
    bx = b.binary("multiply", x, beta, dt) if beta != 1 else x
    soft = b.op("log", [b.binary("add", b.op("exp", [bx]), 1.0, dt)])
    if beta != 1:
        soft = b.binary("multiply", soft, 1.0 / beta, dt)
    return b.op("where", [b.binary("greater", bx, threshold, dt), x, soft])


@converts("softplus")
def _softplus(b: Builder, n, p):
    dt = out_dtype(n)
    return _softplus_of(b, b.tensor(p["self"], dt), float(p["beta"]), float(p["threshold"]), dt)


@converts("mish")
def _mish(b: Builder, n, p):
    dt = out_dtype(n)
    x = b.tensor(p["self"], dt)
    return b.op("multiply", [x, b.op("tanh", [_softplus_of(b, x, 1.0, 20.0, dt)])])


@converts("dropout", "feature_dropout", "alpha_dropout", "native_dropout")
def _dropout(b: Builder, n, p):
    x = p["input"]
    train = p.get("train")
    prob = float(p["p"])
    if not train or prob == 0.0:
        out = b.tensor(x)
    elif op_name(n.target) in ("dropout", "native_dropout"):
        out = b.op("dropout", [x], p=prob, training=True, seed=0)
    else:
        raise Unsupported(f"{op_name(n.target)} in training mode")
    if op_name(n.target) == "native_dropout":
        return out, Missing("dropout mask")
    return out


# --- type conversion and copies -------------------------------------------------------------------
@converts("clone", "contiguous", "alias", "detach", "lift_fresh_copy", "lift_fresh", "_to_copy", "to", "type_as")
def _copy_or_cast(b: Builder, n, p):
    x = p.get("self", p.get("input"))
    dt = out_dtype(n)
    if dt == torch.bool and b.is_tensor(x) and not isinstance(x, Const):
        src = b.dtype(x)
        if not (src.is_floating_point or src == torch.bool):
            # An integer mask (e.g. a tokenizer's attention_mask) turned into bools: float it first and
            # compare with 0, so the mask is a float 0/1 on the device instead of integer data.
            return _as_bool(b, b.cast(x, torch.float32))
    return b.cast(x, dt)


@converts("copy")
def _copy(b: Builder, n, p):
    src = b.tensor(p["src"], out_dtype(n))
    return b.broadcast_to(src, out_shape(n))
