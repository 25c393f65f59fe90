"""Converters from ``jax.lax`` primitives to registry ops: ``CONVERTERS[primitive name](builder, eqn, args)``.

``args`` are the equation's operands: graph node names, :class:`~pybuda.frontend.aten_builder.Const`
values, or Python scalars (rank-0 literals). A converter returns one value per output variable; the
capture driver reshapes/casts it to the output's aval and raises ``Unsupported`` into the
UnsupportedOpError report. Call-like primitives (jit, custom_jvp_call, ...) are inlined by the driver and
have no entry here. The registry and the operand helpers are :mod:`pybuda.frontend.jax.converting`; converters of
complex values are :mod:`pybuda.frontend.jax.complex_values`, scans :mod:`pybuda.frontend.jax.scan`.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Sequence, Tuple

import torch

from pybuda.frontend.aten_builder import Builder, Complex, Const, Unsupported, _reduce_max_or_min
from pybuda.frontend.aten_scatter import index_put_of
from pybuda.frontend.aten_products import product_along, running_product
from pybuda.frontend.aten_index import const_gather
from pybuda.frontend.jax.converting import (  # noqa: F401  (the registry and helpers, re-exported)
    CONVERTERS, Converter, _is_number, constant_value, converts, in_dtype, in_shape, out_dtype, out_shape, permute,
    tensor_of,
)


# --- elementwise --------------------------------------------------------------------------------------
def _binary(op_type: str) -> Converter:
    def convert(b: Builder, eqn, args):
        x, y = args
        if _is_number(x) and _is_number(y):
            return b.const(torch.full(out_shape(eqn), _eval_scalar(op_type, x, y), dtype=out_dtype(eqn)), "const")
        return b.binary(op_type, x, y, out_dtype(eqn))
    return convert


def _eval_scalar(op_type: str, x: Any, y: Any) -> Any:
    fns = {"add": lambda: x + y, "subtract": lambda: x - y, "multiply": lambda: x * y,
           "divide": lambda: x / y, "maximum": lambda: max(x, y), "minimum": lambda: min(x, y)}
    if op_type not in fns:
        raise Unsupported(f"scalar-only {op_type}")
    return fns[op_type]()


for _prim, _op in (("add", "add"), ("sub", "subtract"), ("mul", "multiply")):
    converts(_prim)(_binary(_op))


@converts("add_any")
def _add_any(b: Builder, eqn, args):
    return _binary("add")(b, eqn, args)


@converts("div")
def _div(b: Builder, eqn, args):
    x, y = args
    dt = out_dtype(eqn)
    if not dt.is_floating_point:
        raise Unsupported("integer division (rounds toward zero)")
    if _is_number(y) and y != 0 and b.is_tensor(x):
        # A constant divisor becomes a multiply by its reciprocal (cheaper on the device).
        return b.binary("multiply", x, 1.0 / float(y), dt)
    return _binary("divide")(b, eqn, args)


@converts("max", "min")
def _max_min(b: Builder, eqn, args):
    x, y = args
    is_max = eqn.primitive.name == "max"
    dt = out_dtype(eqn)
    neutral = -math.inf if is_max else math.inf
    # max(-inf, x) (softmax's guard) is x; max(x, 0) is relu.
    for a, other in ((x, y), (y, x)):
        if _is_number(a) and float(a) == neutral and b.is_tensor(other):
            return b.tensor(other, dt)
    if is_max and dt.is_floating_point:
        for a, other in ((x, y), (y, x)):
            if _is_number(a) and float(a) == 0.0 and b.is_tensor(other):
                return b.op("relu", [b.tensor(other, dt)])
    return _binary("maximum" if is_max else "minimum")(b, eqn, args)


@converts("pow")
def _pow(b: Builder, eqn, args):
    x, y = args
    dt = out_dtype(eqn)
    if _is_number(y):
        return _integer_pow_value(b, b.tensor(x, dt), float(y)) if float(y).is_integer() and abs(y) <= 4 \
            else b.op("pow", [b.tensor(x, dt)], exponent=float(y))
    return b.binary("power", x, y, dt)


def _integer_pow_value(b: Builder, x: str, y: float) -> str:
    n = int(y)
    if n == 0:
        return b.op("add", [b.binary("multiply", x, 0.0, b.dtype(x)), b.scalar(1.0, b.dtype(x), b.rank(x))])
    if n == 2 or n == -2:
        r = b.op("square", [x])
    elif abs(n) == 1:
        r = x
    elif abs(n) == 0.5:
        r = b.op("sqrt", [x])
    else:
        # Repeated multiplication keeps negative bases right (exp/log would not).
        r = x
        for _ in range(abs(n) - 1):
            r = b.op("multiply", [r, x])
    return b.op("reciprocal", [r]) if n < 0 else r


@converts("integer_pow")
def _int_pow(b: Builder, eqn, args):
    y = int(eqn.params["y"])
    x = b.tensor(args[0], out_dtype(eqn))
    if abs(y) <= 8:
        return _integer_pow_value(b, x, y)
    return b.op("pow", [x], exponent=float(y))


@converts("square")
def _square(b: Builder, eqn, args):
    return b.op("square", [b.tensor(args[0], out_dtype(eqn))])


_UNARY = {"exp": "exp", "log": "log", "tanh": "tanh", "logistic": "sigmoid", "sqrt": "sqrt", "abs": "abs",
          "sin": "sine", "cos": "cosine"}


@converts(*_UNARY)
def _unary(b: Builder, eqn, args):
    return b.op(_UNARY[eqn.primitive.name], [b.tensor(args[0], out_dtype(eqn))])


@converts("neg")
def _neg(b: Builder, eqn, args):
    return b.negative(args[0], out_dtype(eqn))


@converts("rsqrt")
def _rsqrt(b: Builder, eqn, args):
    return b.op("reciprocal", [b.op("sqrt", [b.tensor(args[0], out_dtype(eqn))])])


@converts("log1p")
def _log1p(b: Builder, eqn, args):
    return b.op("log", [b.binary("add", args[0], 1.0, out_dtype(eqn))])


@converts("expm1")
def _expm1(b: Builder, eqn, args):
    dt = out_dtype(eqn)
    return b.binary("subtract", b.op("exp", [b.tensor(args[0], dt)]), 1.0, dt)


@converts("exp2")
def _exp2(b: Builder, eqn, args):
    dt = out_dtype(eqn)
    return b.op("exp", [b.binary("multiply", args[0], math.log(2.0), dt)])


@converts("tan")
def _tan(b: Builder, eqn, args):
    x = b.tensor(args[0], out_dtype(eqn))
    return b.op("divide", [b.op("sine", [x]), b.op("cosine", [x])])


def _sign_of(b: Builder, x: str) -> str:
    dt = b.dtype(x)
    pos = b.cast(b.binary("greater", x, 0, dt), dt)
    neg = b.cast(b.binary("less", x, 0, dt), dt)
    return b.op("subtract", [pos, neg])


@converts("sign")
def _sign(b: Builder, eqn, args):
    dt = out_dtype(eqn)
    if not dt.is_floating_point:
        raise Unsupported("sign of integers")
    return _sign_of(b, b.tensor(args[0], dt))


def _device_form(b: Builder, form, x: str) -> str:
    """A registry device form (pybuda.ops.eltwise: erf has no chip kernel) on the builder, in x's dtype."""
    dt = b.dtype(x)
    rank = b.rank(x)
    return form(lambda t, ops: b.op(t, ops), lambda v: b.scalar(v, dt, rank), x)


@converts("erf")
def _erf(b: Builder, eqn, args):
    from pybuda.ops.eltwise import erf_device_form

    return _device_form(b, erf_device_form, b.tensor(args[0], out_dtype(eqn)))


@converts("erfc")
def _erfc(b: Builder, eqn, args):
    from pybuda.ops.eltwise import erf_device_form

    dt = out_dtype(eqn)
    return b.binary("subtract", 1.0, _device_form(b, erf_device_form, b.tensor(args[0], dt)), dt)


@converts("stop_gradient", "copy", "copy_p", "optimization_barrier", "reduce_precision")
def _identity(b: Builder, eqn, args):
    if len(args) == 1:
        return args[0]
    return list(args)


@converts("convert_element_type")
def _convert(b: Builder, eqn, args):
    dt = out_dtype(eqn)
    x = args[0]
    if dt.is_complex:  # a real tensor made complex (before an FFT): a pair with no imaginary part
        if _is_number(x) or isinstance(x, complex):
            return complex(x)
        return x if isinstance(x, Complex) else Complex(tensor_of(b, eqn, args, 0, dt.to_real()), None)
    if isinstance(x, Complex):
        raise Unsupported("a complex tensor converted to a real dtype")
    if _is_number(x):
        return b.const(torch.full(out_shape(eqn), x, dtype=dt), "const")
    return b.cast(x, dt)


_COMPARE = {"eq": "equal", "ne": "not_equal", "gt": "greater", "lt": "less", "ge": "greater_equal",
            "le": "less_equal"}


@converts(*_COMPARE)
def _compare(b: Builder, eqn, args):
    x, y = args
    dt = in_dtype(eqn, 0)
    if _is_number(x) and _is_number(y):
        raise Unsupported("scalar-only comparison")
    return b.cast(b.binary(_COMPARE[eqn.primitive.name], x, y, dt), torch.bool)


def _as_bool(b: Builder, v: Any) -> str:
    name = b.tensor(v)
    if b.dtype(name) != torch.bool:
        raise Unsupported("bitwise ops on integers")
    return name


@converts("not")
def _not(b: Builder, eqn, args):
    return b.op("logical_not", [_as_bool(b, args[0])])


@converts("and")
def _and(b: Builder, eqn, args):
    return b.op("logical_and", [_as_bool(b, args[0]), _as_bool(b, args[1])])


@converts("or")
def _or(b: Builder, eqn, args):
    na, nb = (b.op("logical_not", [_as_bool(b, a)]) for a in args)
    return b.op("logical_not", [b.op("logical_and", [na, nb])])


@converts("select_n")
def _select_n(b: Builder, eqn, args):
    pred, cases = args[0], args[1:]
    dt = out_dtype(eqn)
    shape = out_shape(eqn)
    vals = [tensor_of(b, eqn, args, i + 1, dt) for i in range(len(cases))]
    if in_dtype(eqn, 0) == torch.bool:
        if len(vals) != 2:
            raise Unsupported("boolean select_n needs two cases")
        return b.broadcast_to(b.op("where", [b.tensor(pred), vals[1], vals[0]]), shape)
    # Integer predicate: case i where pred == i.
    out = vals[0]
    for i in range(1, len(vals)):
        cond = b.cast(b.binary("equal", pred, i, in_dtype(eqn, 0)), torch.bool)
        out = b.op("where", [cond, vals[i], out])
    return b.broadcast_to(out, shape)


@converts("clamp")
def _clamp(b: Builder, eqn, args):
    lo, x, hi = args
    dt = out_dtype(eqn)
    if _is_number(lo) and _is_number(hi):
        return b.op("clip", [b.tensor(x, dt)], min=float(lo), max=float(hi))
    return b.binary("minimum", b.binary("maximum", x, lo, dt), hi, dt)


# --- reductions ---------------------------------------------------------------------------------------
@converts("reduce_sum")
def _reduce_sum(b: Builder, eqn, args):
    v = b.tensor(args[0], out_dtype(eqn))
    shape = b.shape(v)
    for d in sorted(eqn.params["axes"]):
        if shape[d] != 1:
            v = b.op("reduce_sum", [v], dim=d)
    return b.reshape(v, out_shape(eqn))


@converts("reduce_prod")
def _reduce_prod(b: Builder, eqn, args):
    if not out_dtype(eqn).is_floating_point:
        raise Unsupported("reduce_prod of integers (its products are not proven to stay exact on the device)")
    v = b.tensor(args[0], out_dtype(eqn))
    for d in sorted(eqn.params["axes"]):
        v = product_along(b, v, d)
    return b.reshape(v, out_shape(eqn))


@converts("reduce_max", "reduce_min")
def _reduce_max(b: Builder, eqn, args):
    return _reduce_max_or_min(b, args[0], list(eqn.params["axes"]), False, eqn.primitive.name == "reduce_min",
                              out_shape(eqn))


@converts("reduce_and", "reduce_or")
def _reduce_bool(b: Builder, eqn, args):
    x = _as_bool(b, args[0])
    is_and = eqn.primitive.name == "reduce_and"
    if is_and:
        x = b.op("logical_not", [x])
    v = _reduce_max_or_min(b, b.cast(x, torch.float32), list(eqn.params["axes"]), False, False, out_shape(eqn))
    v = b.cast(v, torch.bool)
    return b.op("logical_not", [v]) if is_and else v


@converts("argmax", "argmin")
def _argmax(b: Builder, eqn, args):
    axes = eqn.params["axes"]
    if len(axes) != 1:
        raise Unsupported("argmax over several axes")
    x = b.tensor(args[0])
    if not b.dtype(x).is_floating_point:
        x = b.cast(x, torch.float32)
    if eqn.primitive.name == "argmin":
        x = b.binary("multiply", x, -1, b.dtype(x))
    r = b.op("argmax", [x], dim=int(axes[0]))
    return b.cast(b.reshape(r, out_shape(eqn)), out_dtype(eqn))


@converts("cumsum")
def _cumsum(b: Builder, eqn, args):
    if eqn.params.get("reverse"):
        raise Unsupported("reverse cumsum")
    return b.op("cumsum", [b.tensor(args[0], out_dtype(eqn))], axis=int(eqn.params["axis"]), exclusive=False)


@converts("cumprod")
def _cumprod(b: Builder, eqn, args):
    if not out_dtype(eqn).is_floating_point:
        raise Unsupported("cumprod of integers (its products are not proven to stay exact on the device)")
    return running_product(b, b.tensor(args[0], out_dtype(eqn)), int(eqn.params["axis"]),
                           reverse=bool(eqn.params.get("reverse")))


# --- shapes ---------------------------------------------------------------------------------------------
@converts("broadcast_in_dim")
def _broadcast_in_dim(b: Builder, eqn, args):
    shape = tuple(int(d) for d in eqn.params["shape"])
    dims = tuple(eqn.params["broadcast_dimensions"])
    x = args[0]
    dt = out_dtype(eqn)
    if _is_number(x):
        return b.const(torch.full(shape, x, dtype=dt), "full")
    x = b.tensor(x)
    src = in_shape(eqn, 0)
    mid = [1] * len(shape)
    for i, d in enumerate(dims):
        mid[d] = src[i]
    x = b.reshape(x, tuple(mid))
    return b.broadcast_to(x, shape)


@converts("reshape")
def _reshape(b: Builder, eqn, args):
    x = tensor_of(b, eqn, args, 0)
    if eqn.params.get("dimensions") is not None:
        x = permute(b, x, eqn.params["dimensions"])
    return b.reshape(x, out_shape(eqn))


@converts("squeeze", "expand_dims")
def _squeeze(b: Builder, eqn, args):
    return b.reshape(tensor_of(b, eqn, args, 0), out_shape(eqn))


@converts("transpose")
def _transpose(b: Builder, eqn, args):
    return permute(b, tensor_of(b, eqn, args, 0), eqn.params["permutation"])


@converts("concatenate")
def _concatenate(b: Builder, eqn, args):
    dt = out_dtype(eqn)
    parts = [tensor_of(b, eqn, args, i, dt) for i in range(len(args))]
    if len(parts) == 1:
        return parts[0]
    return b.op("concatenate", parts, axis=int(eqn.params["dimension"]))


def _slice(b: Builder, x: str, starts: Sequence[int], limits: Sequence[int], strides: Sequence[int]) -> str:
    shape = b.shape(x)
    for d, (s, e, st) in enumerate(zip(starts, limits, strides)):
        if s == 0 and e == shape[d] and st == 1:
            continue
        x = b.op("index", [x], dim=d, start=int(s), stop=int(e), stride=int(st))
    return x


@converts("slice")
def _slice_prim(b: Builder, eqn, args):
    x = tensor_of(b, eqn, args, 0)
    rank = b.rank(x)
    strides = eqn.params.get("strides") or (1,) * rank
    return _slice(b, x, eqn.params["start_indices"], eqn.params["limit_indices"], strides)


@converts("dynamic_slice")
def _dynamic_slice(b: Builder, eqn, args):
    x = tensor_of(b, eqn, args, 0)
    shape = b.shape(x)
    sizes = eqn.params["slice_sizes"]
    starts = []
    for d, v in enumerate(args[1:]):
        start = int(constant_value(b, v).reshape(-1)[0].item())
        # JAX clamps the start so the slice stays in bounds.
        starts.append(min(max(start, 0), shape[d] - int(sizes[d])))
    return _slice(b, x, starts, [s + int(n) for s, n in zip(starts, sizes)], [1] * len(shape))


@converts("split")
def _split(b: Builder, eqn, args):
    x = tensor_of(b, eqn, args, 0)
    axis = int(eqn.params["axis"])
    outs, start = [], 0
    for size in eqn.params["sizes"]:
        outs.append(b.op("index", [x], dim=axis, start=start, stop=start + int(size), stride=1))
        start += int(size)
    return outs


@converts("rev")
def _rev(b: Builder, eqn, args):
    v = tensor_of(b, eqn, args, 0)
    for d in eqn.params["dimensions"]:
        v = _reversed(b, v, int(d))
    return v


def _reversed(b: Builder, v: str, dim: int) -> str:
    """``v`` reversed along ``dim``, as data movement the device runs (``const_gather``: slices or a one-hot
    matmul; an ``adv_index`` has no device form)."""
    size = b.shape(v)[dim]
    return const_gather(b, v, torch.arange(size - 1, -1, -1), dim, "reversed") if size > 1 else v


@converts("pad")
def _pad(b: Builder, eqn, args):
    dt = out_dtype(eqn)
    x = tensor_of(b, eqn, args, 0, dt)
    value = float(constant_value(b, args[1]).reshape(-1)[0].item())
    config = [tuple(int(c) for c in cfg) for cfg in eqn.params["padding_config"]]
    if any(interior for _, _, interior in config):
        raise Unsupported("pad with interior padding")
    rank = len(config)
    # Negative padding crops.
    if any(lo < 0 or hi < 0 for lo, hi, _ in config):
        shape = b.shape(x)
        starts = [max(-lo, 0) for lo, _, _ in config]
        limits = [shape[d] - max(-hi, 0) for d, (_, hi, _) in enumerate(config)]
        x = _slice(b, x, starts, limits, [1] * rank)
        config = [(max(lo, 0), max(hi, 0), 0) for lo, hi, _ in config]
    for d, (lo, hi, _) in enumerate(config):
        if lo == 0 and hi == 0:
            continue
        if d == rank - 1:
            x = b.op("pad", [x], pad=(lo, hi), mode="constant", value=value)
        elif d == rank - 2:
            x = b.op("pad", [x], pad=(0, 0, lo, hi), mode="constant", value=value)
        else:
            shape = list(b.shape(x))
            parts = []
            for n in (lo, None, hi):
                if n is None:
                    parts.append(x)
                elif n:
                    shape[d] = n
                    parts.append(b.const(torch.full(tuple(shape), value, dtype=dt), "pad_fill"))
            x = b.op("concatenate", parts, axis=d)
    return x


@converts("iota")
def _iota(b: Builder, eqn, args):
    shape = tuple(int(d) for d in eqn.params["shape"])
    dim = int(eqn.params["dimension"])
    dt = out_dtype(eqn)
    ar = torch.arange(shape[dim], dtype=dt)
    view = [1] * len(shape)
    view[dim] = shape[dim]
    return b.const(ar.reshape(view).expand(shape).contiguous(), "iota")


# --- matmul -------------------------------------------------------------------------------------------
@converts("dot_general")
def _dot_general(b: Builder, eqn, args):
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lc, rc, lb, rb = (tuple(int(d) for d in t) for t in (lc, rc, lb, rb))
    dt = out_dtype(eqn)
    compute = dt if dt.is_floating_point else torch.float32
    if not dt.is_floating_point:
        raise Unsupported("integer dot_general")
    x, y = tensor_of(b, eqn, args, 0, compute), tensor_of(b, eqn, args, 1, compute)
    xs, ys = b.shape(x), b.shape(y)
    # Dense on any rank: [..., K] @ [K, N] is a plain matmul.
    if not lb and len(xs) >= 2 and len(ys) == 2 and lc == (len(xs) - 1,) and rc == (0,):
        return b.op("matmul", [x, y])
    if not lb and len(xs) == 2 and len(ys) == 2 and lc == (1,) and rc == (1,):
        return b.op("matmul", [x, b.transpose(y, 0, 1)])
    lfree = [d for d in range(len(xs)) if d not in lc and d not in lb]
    rfree = [d for d in range(len(ys)) if d not in rc and d not in rb]
    batch = tuple(xs[d] for d in lb)
    M = math.prod(xs[d] for d in lfree)
    N = math.prod(ys[d] for d in rfree)
    K = math.prod(xs[d] for d in lc)
    xp = permute(b, x, list(lb) + lfree + list(lc))
    yp = permute(b, y, list(rb) + list(rc) + rfree)
    # Batch dims stay separate (not merged into one): the microbatch dim must survive for the device.
    out = b.op("matmul", [b.reshape(xp, batch + (M, K)), b.reshape(yp, batch + (K, N))])
    return b.reshape(out, out_shape(eqn))


# --- convolution and pooling --------------------------------------------------------------------------
_NCHW = (0, 1, 2, 3)
_NHWC = (0, 3, 1, 2)


@converts("conv_general_dilated")
def _conv(b: Builder, eqn, args):
    p = eqn.params
    lhs_dil = [int(d) for d in p["lhs_dilation"]]
    if any(d != 1 for d in lhs_dil) and any(int(s) != 1 for s in p["window_strides"]):
        raise Unsupported("a convolution with both lhs_dilation and window strides")
    if p.get("batch_group_count", 1) != 1:
        raise Unsupported("batch_group_count != 1")
    dn = p["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = (tuple(int(d) for d in s) for s in (dn.lhs_spec, dn.rhs_spec, dn.out_spec))
    dt = out_dtype(eqn)
    x, w = tensor_of(b, eqn, args, 0, dt), tensor_of(b, eqn, args, 1, dt)
    spatial = len(lhs_spec) - 2
    if spatial not in (1, 2, 3):
        raise Unsupported(f"{spatial}-d convolution")
    pads = [tuple(int(v) for v in pr) for pr in p["padding"]]
    if any(v < 0 for pr in pads for v in pr):
        raise Unsupported("negative convolution padding")
    strides = [int(s) for s in p["window_strides"]]
    dil = [int(d) for d in p["rhs_dilation"]]
    # Weights to [Cout, Cin/groups, kh, kw].
    w = permute(b, w, rhs_spec)
    if spatial == 3:  # kD 2-d convolutions over the frames (the torch frontend's conv3d_as_2d)
        from pybuda.frontend.aten_nn import conv3d_as_2d

        if any(d != 1 for d in lhs_dil):
            raise Unsupported("a transposed 3-d convolution")
        (front, back), (top, bottom), (left, right) = pads
        out = conv3d_as_2d(b, permute(b, x, lhs_spec), w, None, strides, (front, back), (left, right, top, bottom),
                           dil, int(p["feature_group_count"]))
        return _from_nc_layout(b, out, out_spec)
    if spatial == 1:
        # Run a 1-d convolution as a 2-d one over a height-1 image (NCHW).
        x = permute(b, x, lhs_spec)
        n, c, length = b.shape(x)
        x = b.reshape(x, (n, c, 1, length))
        ws = b.shape(w)
        w = b.reshape(w, (ws[0], ws[1], 1, ws[2]))
        pads, strides, dil, lhs_dil = [(0, 0)] + pads, [1] + strides, [1] + dil, [1] + lhs_dil
        layout = _NCHW
        out_spec_2d = out_spec
    else:
        layout = lhs_spec if lhs_spec in (_NCHW, _NHWC) and out_spec == lhs_spec else _NCHW
        if layout == _NCHW:
            x = permute(b, x, lhs_spec)
        out_spec_2d = out_spec
    groups = int(p["feature_group_count"])
    if any(d != 1 for d in lhs_dil):
        out = _transposed_conv(b, x, w, lhs_dil, pads, dil, groups, layout == _NHWC)
    else:
        (pt, pb), (pl, pr) = pads
        out = b.op("conv2d", [x, w], stride=tuple(strides), padding=(pl, pr, pt, pb), dilation=tuple(dil),
                   groups=groups, channel_last=layout == _NHWC)
    if spatial == 1:
        s = b.shape(out)
        out = b.reshape(out, (s[0], s[1], s[3]))
        return _from_nc_layout(b, out, out_spec_2d)
    if layout == _NHWC:
        return out
    return _from_nc_layout(b, out, out_spec_2d)


def _transposed_conv(b: Builder, x: str, w: str, lhs_dil: Sequence[int], pads: Sequence[Tuple[int, int]],
                     dil: Sequence[int], groups: int, channel_last: bool) -> str:
    """A 2-d ``conv_general_dilated`` with ``lhs_dilation`` (``lax.conv_transpose``, Flax's ConvTranspose) as the
    registry's ``conv2d_transpose``. lax inserts ``s - 1`` zeros between input pixels, pads by ``(lo, hi)`` and
    correlates with ``w`` [Cout, Cin/g, kh, kw]; a transposed convolution of stride ``s`` correlates the same
    zero-inserted input, padded by ``D = dil·(k - 1)`` (plus its output padding after), with its weights'
    in/out channels swapped and flipped. So the weights are ``w`` swapped and flipped, the output padding
    ``max(0, hi - D)``, and the result is cropped by ``D - lo`` before and ``D + output_padding - hi`` after."""
    cout, cin_g, *kernel = b.shape(w)
    crops, extra = [], []
    for s, (lo, hi), d, k in zip(lhs_dil, pads, dil, kernel):
        full = d * (k - 1)
        op = max(0, hi - full)
        if lo > full or op >= max(s, d):
            raise Unsupported(f"transposed convolution padding ({lo}, {hi}) beyond the kernel's reach {full}")
        crops.append((full - lo, full + op - hi))
        extra.append(op)
    wt = b.reshape(w, (groups, cout // groups, cin_g, *kernel))
    wt = b.reshape(b.transpose(wt, 1, 2), (groups * cin_g, cout // groups, *kernel))
    wt = _reversed(b, _reversed(b, wt, 2), 3)
    (ct, cb), (cl, cr) = crops
    attrs = dict(stride=tuple(lhs_dil), padding=(cl, cr, ct, cb), dilation=tuple(dil), groups=groups,
                 channel_last=channel_last)
    if any(extra):
        attrs["output_padding"] = tuple(extra)
    return b.op("conv2d_transpose", [x, wt], **attrs)


def _from_nc_layout(b: Builder, out: str, out_spec: Sequence[int]) -> str:
    """An (N, C, spatial...) result in the layout ``out_spec`` names (out_spec[i] = array dim of NC dim i)."""
    perm = [0] * len(out_spec)
    for i, a in enumerate(out_spec):
        perm[a] = i
    return permute(b, out, perm)


def _pool_layout(window: Sequence[int], strides: Sequence[int], pads: Sequence[Tuple[int, int]], rank: int):
    """(spatial dims, channel_last) of a 4-d reduce_window, or Unsupported."""
    active = [d for d in range(rank) if window[d] != 1 or strides[d] != 1 or pads[d] != (0, 0)]
    if rank != 4 or any(d == 0 for d in active):
        raise Unsupported(f"reduce_window over dims {active} of a rank-{rank} array (pooling needs NCHW or NHWC)")
    if all(d in (1, 2) for d in active):
        return (1, 2), True
    if all(d in (2, 3) for d in active):
        return (2, 3), False
    raise Unsupported(f"reduce_window over dims {active}")


def _reduce_window(kind: str) -> Converter:
    def convert(b: Builder, eqn, args):
        p = eqn.params
        dt = out_dtype(eqn)
        x = tensor_of(b, eqn, args, 0, dt)
        rank = b.rank(x)
        window = [int(v) for v in p["window_dimensions"]]
        strides = [int(v) for v in p["window_strides"]]
        pads = [tuple(int(v) for v in pr) for pr in p["padding"]]
        if any(d != 1 for d in p.get("base_dilation", (1,) * rank)):
            raise Unsupported("reduce_window with base dilation")
        wdil = [int(v) for v in p.get("window_dilation", (1,) * rank)]
        squeeze = False
        if rank == 3:  # 1-d pooling over (N, L, C) or (N, C, L): add a unit spatial dim
            x = b.reshape(x, b.shape(x)[:2] + (1,) + b.shape(x)[2:])
            window.insert(2, 1)
            strides.insert(2, 1)
            pads.insert(2, (0, 0))
            wdil.insert(2, 1)
            rank, squeeze = 4, True
        (h, w), channel_last = _pool_layout(window, strides, pads, rank)
        kernel, stride = (window[h], window[w]), (strides[h], strides[w])
        padding = (pads[w][0], pads[w][1], pads[h][0], pads[h][1])
        if kind == "max":
            out = b.op("max_pool2d", [x], kernel_size=kernel, stride=stride, padding=padding,
                       dilation=(wdil[h], wdil[w]), ceil_mode=False, channel_last=channel_last)
        else:
            if wdil[h] != 1 or wdil[w] != 1:
                raise Unsupported("sum pooling with window dilation")
            # A window sum is an average pool with divisor 1 (padding counts as zeros).
            out = b.op("avg_pool2d", [x], kernel_size=kernel, stride=stride, padding=padding, ceil_mode=False,
                       count_include_pad=True, divisor_override=1, channel_last=channel_last)
        if squeeze:
            out = b.reshape(out, out_shape(eqn))
        return out
    return convert


converts("reduce_window_max")(_reduce_window("max"))
converts("reduce_window_sum")(_reduce_window("sum"))


# --- gather (take) --------------------------------------------------------------------------------------
def _take_axis(eqn: Any, operand_shape: Sequence[int], batch_rank: int) -> int:
    """The axis of a gather that is ``jnp.take(x, idx, axis)`` (one collapsed dim, whole slices elsewhere)."""
    dn = eqn.params["dimension_numbers"]
    collapsed, index_map = tuple(dn.collapsed_slice_dims), tuple(dn.start_index_map)
    if getattr(dn, "operand_batching_dims", ()) or len(collapsed) != 1 or index_map != collapsed:
        raise Unsupported("gather other than jnp.take along one axis")
    axis = collapsed[0]
    sizes = tuple(int(s) for s in eqn.params["slice_sizes"])
    want = tuple(1 if d == axis else int(n) for d, n in enumerate(operand_shape))
    offsets = tuple(dn.offset_dims)
    if sizes != want or offsets != tuple(range(axis)) + tuple(range(axis + batch_rank, len(operand_shape) - 1 + batch_rank)):
        raise Unsupported("gather other than jnp.take along one axis")
    return axis


def take(b: Builder, x: Any, idx: Any, axis: int, final_shape: Sequence[int]) -> str:
    """``jnp.take(x, idx, axis)`` for in-range indices: ``embedding`` on a 2-D table along axis 0, else
    ``adv_index`` with flattened indices."""
    x = b.tensor(x)
    idx = b.tensor(idx)
    if axis == 0 and b.rank(x) == 2 and b.dtype(x).is_floating_point:
        return b.reshape(b.op("embedding", [x, idx]), final_shape)
    flat = b.reshape(idx, (math.prod(b.shape(idx)),))
    return b.reshape(b.op("adv_index", [x, flat], dim=axis), final_shape)


@converts("gather")
def _gather(b: Builder, eqn, args):
    x, idx = args
    ishape = in_shape(eqn, 1)
    if not ishape or ishape[-1] != 1:
        raise Unsupported("gather with multi-dimensional start indices")
    along = _take_along_axis(eqn)
    if along is not None:
        return _gather_along(b, eqn, args, along)
    axis = _take_axis(eqn, in_shape(eqn, 0), len(ishape) - 1)
    return take(b, x, b.reshape(b.tensor(idx), ishape[:-1] or (1,)), axis, out_shape(eqn))


def _take_along_axis(eqn) -> "int | None":
    """The axis of a ``jnp.take_along_axis`` gather, else None: one element taken per index along the axis, every
    other operand dim a batching dim matched by the index's leading dims, or of size 1 (JAX writes a size-1 batch
    dim as a whole-slice offset dim instead), the result laid out as the operand."""
    dn = eqn.params["dimension_numbers"]
    shape = in_shape(eqn, 0)
    batching = tuple(getattr(dn, "operand_batching_dims", ()) or ())
    collapsed, mapped = tuple(dn.collapsed_slice_dims), tuple(dn.start_index_map)
    if len(collapsed) != 1 or mapped != collapsed or len(out_shape(eqn)) != len(shape):
        return None
    axis = collapsed[0]
    sizes = [int(v) for v in eqn.params["slice_sizes"]]
    others = [d for d in range(len(shape)) if d != axis]
    if sizes[axis] != 1 or any(d not in batching and not (shape[d] == 1 and sizes[d] == 1) for d in others) or \
            tuple(getattr(dn, "start_indices_batching_dims", ()) or ()) != tuple(range(len(batching))) or \
            any(sizes[d] != 1 for d in batching) or math.prod(in_shape(eqn, 1)) != math.prod(out_shape(eqn)):
        return None
    return axis


def _gather_along(b: Builder, eqn, args, axis: int) -> str:
    """``jnp.take_along_axis(x, idx, axis)``: the torch frontend's ``gather`` (indices known at capture time, or
    proven in range at run time: a top-k's or argsort's, or pushed ones the host checks). JAX fills the result at an
    index out of range (NaN, after wrapping negative ones) where torch raises: only indices known or proven within
    the axis run on the device; the others stay on the host, which computes JAX's fill."""
    from pybuda.frontend.aten_index import _const_index_gather, _known_value, _runtime_index_gather

    x = tensor_of(b, eqn, args, 0)
    index = b.reshape(b.tensor(args[1]), out_shape(eqn))
    known = _known_value(b, index)
    out = None
    if known is not None:
        known = known.to(torch.int64)
        if known.numel() and (int(known.min()) < 0 or int(known.max()) >= in_shape(eqn, 0)[axis]):
            raise Unsupported("take_along_axis at indices outside the axis (JAX fills those)")
        out = _const_index_gather(b, x, known, axis, "take_along")
    elif not b.dtype(index).is_floating_point:
        out = _runtime_index_gather(b, x, index, axis)
    if out is None:
        raise Unsupported("take_along_axis at indices not proven within the axis")
    return b.cast(out, out_dtype(eqn))


@converts("is_finite")
def _is_finite(b: Builder, eqn, args):
    """``jnp.isfinite`` (``jax.nn.logsumexp`` reads it): the torch frontend's test, a step of ``x - x``."""
    from pybuda.frontend.aten_eltwise import isfinite_of

    return b.cast(isfinite_of(b, tensor_of(b, eqn, args, 0)), torch.bool)


@converts("scatter", "scatter-add")
def _scatter(b: Builder, eqn, args):
    """``x.at[idx].set(v)`` / ``.add(v)`` along one axis, with whole slices elsewhere and ``idx`` known at capture
    time: the torch frontend's ``index_put`` (constant gathers, ``where``s, and a 0/1 matmul where repeated indices
    add up). Other scatters run on the CPU."""
    dn = eqn.params["dimension_numbers"]
    inserted, to_operand = tuple(dn.inserted_window_dims), tuple(dn.scatter_dims_to_operand_dims)
    if getattr(dn, "operand_batching_dims", ()) or len(inserted) != 1 or to_operand != inserted:
        raise Unsupported("scatter other than x.at[idx] along one axis")
    axis = inserted[0]
    shape, ishape, ushape = in_shape(eqn, 0), in_shape(eqn, 1), in_shape(eqn, 2)
    if not ishape or ishape[-1] != 1:
        raise Unsupported("scatter with multi-dimensional start indices")
    window = tuple(dn.update_window_dims)
    others = [d for d in range(len(shape)) if d != axis]
    if len(window) != len(others) or any(ushape[w] != shape[d] for w, d in zip(window, others)):
        raise Unsupported("scatter of partial slices")
    index = constant_value(b, args[1]).to(torch.int64).reshape(ishape[:-1])
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= shape[axis]):
        raise Unsupported("scatter at indices out of range (JAX drops those updates)")
    # The updates' dims in index_put's order: the slice dims before the axis, the index dims, the ones after.
    batch = [d for d in range(len(ushape)) if d not in window]
    order = [w for w, d in zip(window, others) if d < axis] + batch + [w for w, d in zip(window, others) if d > axis]
    values = permute(b, tensor_of(b, eqn, args, 2), order)
    return index_put_of(b, tensor_of(b, eqn, args, 0), [None] * axis + [Const(index, "scatter_indices")], values,
                        eqn.primitive.name == "scatter-add", out_dtype(eqn), "scatter")


@converts("top_k")
def _top_k(b: Builder, eqn, args):
    """``jax.lax.top_k`` along its axis (the last before ``axis`` was a parameter): the torch frontend's top_k."""
    from pybuda.frontend.aten_sort import top_k

    x = b.tensor(args[0])
    axis = int(eqn.params.get("axis", -1)) % b.rank(x)
    values, indices = top_k(b, x, int(eqn.params["k"]), axis)
    return [b.cast(values, out_dtype(eqn, 0)), b.cast(indices, out_dtype(eqn, 1))]


@converts("sort")
def _sort(b: Builder, eqn, args):
    """A stable sort by one key (``jnp.sort``, and ``jnp.argsort``: the key with an ``iota`` carried along): the
    torch frontend's sort; a carried iota along the dim is the sort's indices, other carried float operands are
    gathered at them."""
    from pybuda.frontend.aten_index import _known_value, _runtime_index_gather
    from pybuda.frontend.aten_sort import sorted_along

    if int(eqn.params.get("num_keys", 1)) != 1:
        raise Unsupported("sort by several keys")
    key = b.tensor(args[0])
    dim = int(eqn.params["dimension"]) % b.rank(key)
    values, indices = sorted_along(b, key, dim, False)
    index = b.cast(indices, torch.int32)
    outs = [b.cast(values, out_dtype(eqn, 0))]
    shape = b.shape(key)
    iota = torch.arange(shape[dim]).reshape([-1 if d == dim else 1 for d in range(len(shape))]).expand(shape)
    for k, carried in enumerate(args[1:], start=1):
        known = _known_value(b, carried) if b.is_tensor(carried) else None
        if known is not None and torch.equal(known.to(torch.int64), iota):
            outs.append(b.cast(indices, out_dtype(eqn, k)))
            continue
        moved = _runtime_index_gather(b, carried, index, dim) if b.is_tensor(carried) else None
        if moved is None:
            raise Unsupported("sort carrying an operand other than an iota or float data")
        outs.append(b.cast(moved, out_dtype(eqn, k)))
    return outs


def _take_call(b: Builder, eqn, args):
    """A ``jit`` named ``_take`` (``jnp.take``, Flax ``Embed``): the gather on the raw indices, without
    the index wrapping JAX adds (integer math the chip cannot run); indices must be in range."""
    inner = eqn.params["jaxpr"].jaxpr
    gathers = [e for e in inner.eqns if e.primitive.name == "gather"]
    if len(gathers) != 1 or len(args) != 2:
        raise Unsupported("take with an unexpected body")
    ishape = in_shape(eqn, 1)
    axis = _take_axis(gathers[0], in_shape(eqn, 0), len(ishape))
    return take(b, args[0], args[1], axis, out_shape(eqn))


#: Named calls (``jit(name=...)``) converted as a whole instead of inlined.
CALLS: Dict[str, Converter] = {"_take": _take_call}

# Converters of complex values (their own module, registered into CONVERTERS on import).
from pybuda.frontend.jax import complex_values  # noqa: E402,F401
