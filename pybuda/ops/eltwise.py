"""Elementwise ops: binary (with broadcasting), unary, and the ternary ``where``.

Dtypes follow :func:`pybuda.ops.common.result_dtype`: operands are cast to the common dtype before
the torch reference runs, and comparison / logical ops return 0/1 *in that dtype* (TT-Buda has no
boolean tensors on device).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from pybuda.ops.common import (broadcast_shapes, dtype_name, float_dtype, float_in, normalize_dim,
                               operand_dtypes_to, result_dtype, same_shape, torch_dtype)
from pybuda.ops import integer
from pybuda.ops.registry import NO_GRADIENT, DeviceLowering, OpDef, attr, register

_ZERO_ONE = integer.always(integer.ZERO_ONE)  # comparisons and logical ops: 0/1 whatever they compare

# --- binary --------------------------------------------------------------------------------------------


def _binary_shape(shapes, attrs):
    return broadcast_shapes(shapes[0], shapes[1])


def _common_dtype(dtypes, attrs):
    return result_dtype(dtypes[0], dtypes[1])


def _float_common_dtype(dtypes, attrs):
    return float_dtype(result_dtype(dtypes[0], dtypes[1]))


def _lowering(lower) -> "DeviceLowering | None":
    """A ``lower`` given as a device op name or a :class:`DeviceLowering`."""
    return DeviceLowering(lower) if isinstance(lower, str) else lower


def _binary(name: str, fn, doc: str, dtype=_common_dtype, lower=None, backward=None, int_range=None) -> OpDef:
    def _eval(x, a):
        out_dtype = dtype([x[0].dtype, x[1].dtype], a)
        out = fn(*operand_dtypes_to([x[0], x[1]], result_dtype(x[0].dtype, x[1].dtype)))
        # Comparisons give bool in torch; TT-Buda gives 0/1 in the operands' dtype.
        return out if out.dtype == out_dtype else out.to(out_dtype)

    return register(OpDef(name=name, family="eltwise_binary", arity=(2, 2), shape=_binary_shape,
                          eval=_eval, dtype=dtype, doc=doc, lower=_lowering(lower),
                          backward=backward, int_range=int_range))


# --- backward (autograd) of the binary ops: each gradient is summed back to its operand's shape ----------


def _add_bw(ac, operand, inputs, output, grad, attrs):
    return ac.unbroadcast(grad, ac.shape(inputs[operand]))


def _subtract_bw(ac, operand, inputs, output, grad, attrs):
    return ac.unbroadcast(grad if operand == 0 else ac.neg(grad), ac.shape(inputs[operand]))


def _multiply_bw(ac, operand, inputs, output, grad, attrs):
    return ac.unbroadcast(ac.mul(grad, ac.fwd(inputs[1 - operand])), ac.shape(inputs[operand]))


def _divide_bw(ac, operand, inputs, output, grad, attrs):
    b = ac.fwd(inputs[1])
    if operand == 0:
        return ac.unbroadcast(ac.div(grad, b), ac.shape(inputs[0]))
    # d(a/b)/db = -(a/b)/b
    return ac.unbroadcast(ac.neg(ac.div(ac.mul(grad, ac.fwd(output)), b)), ac.shape(inputs[1]))


def _extremum_bw(win: str):
    # torch's rule: the larger (smaller) operand takes the gradient; on ties each gets half.
    def backward(ac, operand, inputs, output, grad, attrs):
        a, b = ac.fwd(inputs[operand]), ac.fwd(inputs[1 - operand])
        mask = ac.add(ac.op(win, [a, b]), ac.mul(ac.op("equal", [a, b]), 0.5))
        return ac.unbroadcast(ac.mul(grad, mask), ac.shape(inputs[operand]))

    return backward


def _power_bw(ac, operand, inputs, output, grad, attrs):
    a, b = ac.fwd(inputs[0]), ac.fwd(inputs[1])
    if operand == 0:  # b * a^(b-1)
        local = ac.mul(ac.op("power", [a, ac.op("subtract", [b, ac.constant(1.0)])]), b)
    else:  # a^b * log(a)
        local = ac.mul(ac.fwd(output), ac.op("log", [a]))
    return ac.unbroadcast(ac.mul(grad, local), ac.shape(inputs[operand]))


_binary("add", torch.add, "Elementwise a + b, with broadcasting.", lower="add", backward=_add_bw,
        int_range=integer.add)
_binary("subtract", torch.sub, "Elementwise a - b, with broadcasting.", lower="subtract", backward=_subtract_bw,
        int_range=integer.subtract)
_binary("multiply", torch.mul, "Elementwise a * b, with broadcasting.", lower="multiply", backward=_multiply_bw,
        int_range=integer.multiply)
_binary("divide", lambda a, b: torch.div(a.to(float_dtype(a.dtype)), b.to(float_dtype(b.dtype))),
        "Elementwise a / b (true division; integer operands give float32).", dtype=_float_common_dtype,
        backward=_divide_bw)
_binary("maximum", torch.maximum, "Elementwise max(a, b).", lower="maximum", backward=_extremum_bw("greater"),
        int_range=integer.maximum)
_binary("minimum", torch.minimum, "Elementwise min(a, b).", backward=_extremum_bw("less"),
        int_range=integer.minimum)
_binary("heaviside", torch.heaviside, "Heaviside step of a: 0 where a < 0, 1 where a > 0, b where a == 0.",
        lower="heaviside", backward=NO_GRADIENT, int_range=integer.heaviside)  # a step: zero gradient almost everywhere
_binary("power", torch.pow, "Elementwise a ** b.", backward=_power_bw)
for _name, _fn, _sym in (("equal", torch.eq, "=="), ("not_equal", torch.ne, "!="), ("greater", torch.gt, ">"),
                         ("less", torch.lt, "<"), ("greater_equal", torch.ge, ">="), ("less_equal", torch.le, "<=")):
    _binary(_name, _fn, f"1 where a {_sym} b else 0, in the operands' dtype.", backward=NO_GRADIENT,
            int_range=integer.comparison(_name))
_binary("logical_and", torch.logical_and, "1 where a != 0 and b != 0 else 0, in the operands' dtype.",
        backward=NO_GRADIENT, int_range=integer.logical_and)


# --- where (ternary) -----------------------------------------------------------------------------------


def _where_eval(x, a):
    out_dtype = result_dtype(x[1].dtype, x[2].dtype)
    return torch.where(x[0] != 0, x[1].to(out_dtype), x[2].to(out_dtype))


def _where_bw(ac, operand, inputs, output, grad, attrs):
    if operand == 0:
        return None  # the condition selects; it has no gradient
    cond = ac.fwd(inputs[0])
    zero = ac.constant(0.0)
    picked = ac.op("where", [cond, grad, zero] if operand == 1 else [cond, zero, grad])
    return ac.unbroadcast(picked, ac.shape(inputs[operand]))


register(OpDef(name="where", family="eltwise_nary", arity=(3, 3), backward=_where_bw, int_range=integer.where,
               shape=lambda s, a: broadcast_shapes(s[0], s[1], s[2]), eval=_where_eval,
               dtype=lambda d, a: result_dtype(d[1], d[2]),
               doc="where(cond, x, y): x where cond != 0, else y; all three broadcast."))


# --- unary ---------------------------------------------------------------------------------------------


def _same_dtype(dtypes, attrs):
    return dtypes[0]


def _float_dtype(dtypes, attrs):
    return float_dtype(dtypes[0])


def _unary(op_name: str, fn, doc: str, dtype_fn=_same_dtype, shape_fn=same_shape, canonicalize=None,
           lower=None, backward=None, int_range=None, **attrs) -> OpDef:
    # Attribute specs arrive as **attrs, so the helper's own parameters avoid attr names.
    return register(OpDef(name=op_name, family="eltwise_unary", arity=(1, 1), shape=shape_fn,
                          eval=lambda x, a: fn(x[0], a), attrs=attrs, dtype=dtype_fn, doc=doc,
                          canonicalize=canonicalize, lower=_lowering(lower),
                          backward=backward, int_range=int_range))


# --- backward (autograd) of the unary ops: d(loss)/dx = grad * f'(x) ----------------------------------


def _local_bw(local):
    """A unary backward from ``local(ac, x, y) -> f'(x)`` (x, y backward-graph nodes, y made on demand)."""
    def backward(ac, operand, inputs, output, grad, attrs):
        return ac.mul(grad, local(ac, inputs[0], output, attrs))

    return backward


def _pass_bw(ac, operand, inputs, output, grad, attrs):
    return ac.reshape(grad, ac.shape(inputs[0]))


def _sign(ac, x):
    zero = ac.constant(0.0)
    return ac.sub(ac.op("greater", [x, zero]), ac.op("less", [x, zero]))


_abs_bw = _local_bw(lambda ac, x, y, a: _sign(ac, ac.fwd(x)))
_exp_bw = _local_bw(lambda ac, x, y, a: ac.fwd(y))
_sigmoid_bw = _local_bw(lambda ac, x, y, a: ac.mul(ac.fwd(y), ac.sub(ac.constant(1.0), ac.fwd(y))))
_sine_bw = _local_bw(lambda ac, x, y, a: ac.op("cosine", [ac.fwd(x)]))
_cosine_bw = _local_bw(lambda ac, x, y, a: ac.neg(ac.op("sine", [ac.fwd(x)])))
_tanh_bw = _local_bw(lambda ac, x, y, a: ac.sub(ac.constant(1.0), ac.op("square", [ac.fwd(y)])))
_square_bw = _local_bw(lambda ac, x, y, a: ac.mul(ac.fwd(x), 2.0))
_erf_bw = _local_bw(lambda ac, x, y, a: ac.mul(ac.op("exp", [ac.neg(ac.op("square", [ac.fwd(x)]))]),
                                               2.0 / math.sqrt(math.pi)))


def _log_bw(ac, operand, inputs, output, grad, attrs):
    return ac.div(grad, ac.fwd(inputs[0]))


def _reciprocal_bw(ac, operand, inputs, output, grad, attrs):
    return ac.neg(ac.mul(grad, ac.op("square", [ac.fwd(output)])))


def _sqrt_bw(ac, operand, inputs, output, grad, attrs):
    return ac.div(ac.mul(grad, 0.5), ac.fwd(output))


_unary("abs", lambda x, a: torch.abs(x), "Elementwise |x|.", lower="abs", backward=_abs_bw,
       int_range=integer.absolute)
_unary("exp", lambda x, a: torch.exp(float_in(x)), "Elementwise e^x.", dtype_fn=_float_dtype, lower="exp",
       backward=_exp_bw)
_unary("log", lambda x, a: torch.log(float_in(x)), "Elementwise natural logarithm.", dtype_fn=_float_dtype, lower="log",
       backward=_log_bw)
_unary("reciprocal", lambda x, a: torch.reciprocal(float_in(x)), "Elementwise 1 / x.", dtype_fn=_float_dtype,
       lower="reciprocal", backward=_reciprocal_bw)
_unary("sqrt", lambda x, a: torch.sqrt(float_in(x)), "Elementwise square root.", dtype_fn=_float_dtype, lower="sqrt",
       backward=_sqrt_bw)
_unary("sigmoid", lambda x, a: torch.sigmoid(float_in(x)), "Elementwise 1 / (1 + e^-x).", dtype_fn=_float_dtype,
       lower="sigmoid", backward=_sigmoid_bw)
_unary("sine", lambda x, a: torch.sin(float_in(x)), "Elementwise sin(x).", dtype_fn=_float_dtype, lower="sine",
       backward=_sine_bw)
_unary("cosine", lambda x, a: torch.cos(float_in(x)), "Elementwise cos(x).", dtype_fn=_float_dtype, lower="cosine",
       backward=_cosine_bw)
_unary("tanh", lambda x, a: torch.tanh(float_in(x)), "Elementwise tanh(x).", dtype_fn=_float_dtype, lower="tanh",
       backward=_tanh_bw)
_unary("erf", lambda x, a: torch.erf(float_in(x)),
       "Elementwise Gauss error function (no chip kernel: the device runs :func:`erf_device_form`).",
       dtype_fn=_float_dtype, backward=_erf_bw)

#: erfc(z) = t exp(-z^2 + P(t)) with t = 1 / (1 + z/2) for z >= 0 (the Chebyshev-fitted form of Press et al.,
#: Numerical Recipes, section 6.2): |relative error| < 1.2e-7 everywhere. P's coefficients, constant first.
ERFC_COEFFS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
               1.48851587, -0.82215223, 0.17087277)


def erfc_abs_device_form(op, const, x):
    """``erfc(|x|)`` from ops the chip runs (abs, multiply, add, reciprocal, square, subtract, exp): the
    :data:`ERFC_COEFFS` form, accurate to 1.2e-7 relative (so erfc keeps its precision in the tail, where
    ``1 - erf`` would not).

    ``op(op_type, operands) -> value`` emits a registry op and ``const(float) -> value`` a scalar constant,
    so the frontends' builders and the compiler's rewriter can all use it."""
    z = op("abs", [x])
    t = op("reciprocal", [op("add", [op("multiply", [z, const(0.5)]), const(1.0)])])
    poly = op("multiply", [t, const(ERFC_COEFFS[-1])])
    for c in reversed(ERFC_COEFFS[1:-1]):
        poly = op("multiply", [op("add", [poly, const(c)]), t])
    poly = op("add", [poly, const(ERFC_COEFFS[0])])
    return op("multiply", [t, op("exp", [op("subtract", [poly, op("square", [z])])])])


def sign_device_form(op, const, x):
    """``sign(x)`` (0 at 0) from the chip's heaviside: ``2 heaviside(x, 1/2) - 1``."""
    return op("add", [op("multiply", [op("heaviside", [x, const(0.5)]), const(2.0)]), const(-1.0)])


def erf_device_form(op, const, x):
    """``erf(x) = sign(x) (1 - erfc(|x|))`` from ops the chip runs (:func:`erfc_abs_device_form`,
    :func:`sign_device_form`): absolute error within about 2e-7 of float32 erf, odd, 0 at 0. The chip has
    no erf kernel; this is the erf op's device form. Arguments as for :func:`erfc_abs_device_form`."""
    magnitude = op("subtract", [const(1.0), erfc_abs_device_form(op, const, x)])
    return op("multiply", [magnitude, sign_device_form(op, const, x)])

_unary("square", lambda x, a: x * x, "Elementwise x * x.", lower="square", backward=_square_bw,
       int_range=integer.square)
_unary("logical_not", lambda x, a: (x == 0).to(x.dtype), "1 where x == 0 else 0, in x's dtype.",
       backward=NO_GRADIENT, int_range=integer.logical_not)
_unary("nop", lambda x, a: x, "Identity; may be removed by the compiler.", backward=_pass_bw,
       int_range=integer.moves)
_unary("buffer", lambda x, a: x,
       "Identity that the compiler keeps (it is not lowered into a removable nop).", lower="nop",
       backward=_pass_bw, int_range=integer.moves)
_unary("tilize", lambda x, a: x, "Converts row-major data to tile layout on device; identity on CPU.",
       backward=_pass_bw, int_range=integer.moves)


def _identity_shape(shapes, attrs):
    shape = list(shapes[0])
    mode, dim = attrs["unsqueeze"], attrs["unsqueeze_dim"]
    if mode is None:
        return tuple(shape)
    if dim is None:
        raise ValueError(f"unsqueeze='{mode}' needs unsqueeze_dim")
    if mode == "unsqueeze":
        shape.insert(normalize_dim(dim, len(shape) + 1), 1)
        return tuple(shape)
    d = normalize_dim(dim, len(shape))
    if shape[d] != 1:
        raise ValueError(f"cannot squeeze dim {dim} of size {shape[d]}")
    del shape[d]
    return tuple(shape)


def _identity_eval(x, attrs):
    return x.reshape(_identity_shape([tuple(x.shape)], attrs))


_unary("identity", _identity_eval,
       "Identity; with unsqueeze='unsqueeze' (or 'squeeze') it also inserts (removes) a size-1 dim at "
       "unsqueeze_dim.", shape_fn=_identity_shape, backward=_pass_bw, int_range=integer.moves,
       unsqueeze=attr(str, default=None, choices=("unsqueeze", "squeeze")), unsqueeze_dim=attr(int, default=None))


def _cast_canonical(shapes, attrs):
    return {**attrs, "dtype": dtype_name(attrs["dtype"])}


def _cast_bw(ac, operand, inputs, output, grad, attrs):
    dtype = ac.dtype(inputs[0])
    if not dtype.is_floating_point:
        return None  # integer and bool values carry no gradient
    return grad if ac.dtype(grad) == dtype else ac.op("cast", [grad], {"dtype": dtype_name(dtype)})


def _cast_range(ranges, shapes, attrs):
    # An integer stays itself; a cast to an integer dtype truncates anything else to an integer, which the
    # runtime refuses at a device boundary beyond Float32's exact range. (Whether the *device* may run the
    # cast is the capability check's question: only when the operand already is integer-valued.)
    if torch_dtype(attrs["dtype"]) == torch.bool:  # x != 0: decided where the operand's range is
        r = ranges[0]
        return (0.0, 0.0) if r == (0.0, 0.0) else (1.0, 1.0) if r is not None and (r[0] > 0 or r[1] < 0) \
            else integer.ZERO_ONE
    if ranges[0] is not None or torch_dtype(attrs["dtype"]).is_floating_point:
        return ranges[0]
    return (-float(integer.FLOAT32_EXACT_INT), float(integer.FLOAT32_EXACT_INT))


_cast_range.decides_booleans = True  # a cast to bool of a decided comparison stays decided


register(OpDef(name="cast", family="eltwise_unary", arity=(1, 1), shape=same_shape, backward=_cast_bw,
               int_range=_cast_range,
               eval=lambda x, a: x[0].to(torch_dtype(a["dtype"])), attrs={"dtype": attr(str)},
               dtype=lambda d, a: torch_dtype(a["dtype"]), canonicalize=_cast_canonical,
               doc="Convert to another dtype (a torch dtype name such as 'float32', 'int32', 'bool')."))


def _relu(x: torch.Tensor, threshold: float, mode: str) -> torch.Tensor:
    zero = torch.zeros((), dtype=x.dtype)
    if mode == "min":
        return torch.where(x >= threshold, x, zero)
    return torch.where(x <= threshold, x, zero)


def _pow_device_attrs(attrs):
    e = attrs["exponent"]
    if not float(e).is_integer() or e < 0:  # the device's power takes an integer exponent
        raise ValueError(f"pow with exponent {e} should have been decomposed")
    return {"exp": int(e)}


def _relu_bw(ac, operand, inputs, output, grad, attrs):
    keep = "greater_equal" if attrs["mode"] == "min" else "less_equal"
    return ac.mul(grad, ac.op(keep, [ac.fwd(inputs[0]), ac.constant(attrs["threshold"])]))


def _leaky_relu_bw(ac, operand, inputs, output, grad, attrs):
    alpha = attrs["alpha"]
    positive = ac.op("greater", [ac.fwd(inputs[0]), ac.constant(0.0)])
    return ac.mul(grad, ac.add(ac.mul(positive, 1.0 - alpha), ac.constant(alpha)))


_GELU_K = math.sqrt(2.0 / math.pi)


def _gelu_bw(ac, operand, inputs, output, grad, attrs):
    x = ac.fwd(inputs[0])
    if attrs["approximate"] == "tanh":
        # y = 0.5 x (1 + t), t = tanh(k (x + c x^3)): y' = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
        x2 = ac.op("square", [x])
        inner = ac.mul(ac.add(x, ac.mul(ac.mul(x2, x), 0.044715)), _GELU_K)
        t = ac.op("tanh", [inner])
        left = ac.mul(ac.add(t, ac.constant(1.0)), 0.5)
        dinner = ac.mul(ac.add(ac.mul(x2, 3 * 0.044715), ac.constant(1.0)), _GELU_K)
        right = ac.mul(ac.mul(ac.mul(x, 0.5), ac.sub(ac.constant(1.0), ac.op("square", [t]))), dinner)
        return ac.mul(grad, ac.add(left, right))
    # y = x Phi(x): y' = Phi(x) + x phi(x), the chip's gelu_derivative kernel (erf has none)
    return ac.mul(grad, ac.op("gelu_derivative", [x]))


def _gelu_derivative(x: torch.Tensor) -> torch.Tensor:
    x = float_in(x)
    return 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0))) + x * torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _gelu_derivative_bw(ac, operand, inputs, output, grad, attrs):
    # d/dx [Phi(x) + x phi(x)] = phi(x) (2 - x^2)
    x = ac.fwd(inputs[0])
    x2 = ac.op("square", [x])
    pdf = ac.mul(ac.op("exp", [ac.mul(x2, -0.5)]), 1.0 / math.sqrt(2.0 * math.pi))
    return ac.mul(grad, ac.mul(pdf, ac.sub(ac.constant(2.0), x2)))


def _pow_bw(ac, operand, inputs, output, grad, attrs):
    e = attrs["exponent"]
    if e == 0.0:
        return ac.mul(grad, 0.0)
    if e == 1.0:
        return grad
    return ac.mul(grad, ac.mul(ac.op("pow", [ac.fwd(inputs[0])], {"exponent": e - 1.0}), e))


# relu is a nop with the netlist's relu attributes (applied after any op, spec §3.2).
_unary("relu", lambda x, a: _relu(x, a["threshold"], a["mode"]),
       "ReLU with a threshold: mode 'min' keeps x >= threshold, 'max' keeps x <= threshold (else 0).",
       lower=DeviceLowering("nop", lambda a: {"relu_en": True, "relu_threshold": float(a["threshold"]),
                                              "relu_mode": a["mode"]}),
       backward=_relu_bw, int_range=integer.relu, threshold=attr(float, default=0.0),
       mode=attr(str, default="min", choices=("min", "max")))
_unary("leaky_relu", lambda x, a: F.leaky_relu(float_in(x), a["alpha"]),
       "x where x >= 0, else alpha * x.", dtype_fn=_float_dtype,
       lower=DeviceLowering("lrelu", lambda a: {"slope": float(a["alpha"])}), backward=_leaky_relu_bw,
       alpha=attr(float))
_unary("gelu", lambda x, a: F.gelu(float_in(x), approximate=a["approximate"]),
       "GeLU, exact ('none') or with the tanh approximation.", dtype_fn=_float_dtype,
       lower=DeviceLowering("gelu", lambda a: {"approximate_mode": True} if a.get("approximate") == "tanh" else {}),
       backward=_gelu_bw, approximate=attr(str, default="none", choices=("none", "tanh")))
_unary("gelu_derivative", lambda x, a: _gelu_derivative(x),
       "Derivative of the exact GeLU, Phi(x) + x phi(x) (gelu's backward; TT-Buda's internal op).",
       dtype_fn=_float_dtype, lower="gelu_derivative", backward=_gelu_derivative_bw)
_unary("pow", lambda x, a: torch.pow(float_in(x), a["exponent"]), "Elementwise x ** exponent.",
       dtype_fn=_float_dtype, lower=DeviceLowering("power", _pow_device_attrs), backward=_pow_bw,
       int_range=integer.pow_exponent,
       exponent=attr(float))


def _clip_check(shapes, attrs):
    if attrs["min"] > attrs["max"]:
        raise ValueError(f"clip min {attrs['min']} is greater than max {attrs['max']}")
    return attrs


def _clip_bw(ac, operand, inputs, output, grad, attrs):
    x = ac.fwd(inputs[0])
    inside = ac.mul(ac.op("greater_equal", [x, ac.constant(attrs["min"])]),
                    ac.op("less_equal", [x, ac.constant(attrs["max"])]))
    return ac.mul(grad, inside)


_unary("clip", lambda x, a: torch.clamp(x, a["min"], a["max"]).to(x.dtype),
       "Clamp every element into [min, max].", canonicalize=_clip_check, backward=_clip_bw, int_range=integer.clip,
       min=attr(float), max=attr(float))


def _dropout_check(shapes, attrs):
    if not 0.0 <= attrs["p"] <= 1.0:
        raise ValueError(f"dropout probability p must be in [0, 1], got {attrs['p']}")
    return attrs


def _dropout_eval(x, attrs):
    p = attrs["p"]
    if not attrs["training"] or p == 0.0:
        return x
    if p == 1.0:
        return torch.zeros_like(x)
    # A private generator: the mask depends only on (seed, shape), never on global RNG state.
    gen = torch.Generator().manual_seed(attrs["seed"])
    keep = torch.rand(x.shape, generator=gen) >= p
    return torch.where(keep, x * (1.0 / (1.0 - p)), torch.zeros((), dtype=x.dtype)).to(x.dtype)


def _dropout_bw(ac, operand, inputs, output, grad, attrs):
    # The mask is a function of (seed, shape) only and grad has x's shape: dropout of grad with the same
    # attributes applies exactly the forward's mask and scale.
    if not attrs["training"] or attrs["p"] == 0.0:
        return grad
    return ac.op("dropout", [grad], attrs)


_unary("dropout", _dropout_eval,
       "Zero each element with probability p and scale the rest by 1/(1-p); the mask is a function of "
       "seed and shape only. Identity when training is False.", canonicalize=_dropout_check, backward=_dropout_bw,
       lower=DeviceLowering("dropout", lambda a: {"p": float(a["p"]), "seed": int(a["seed"])}),
       p=attr(float, default=0.5), training=attr(bool, default=True), seed=attr(int, default=0))
