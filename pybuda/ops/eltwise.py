"""Elementwise ops: binary (with broadcasting), unary, and the ternary ``where``.

Dtypes follow :func:`pybuda.ops.common.result_dtype`: operands are cast to the common dtype before
the torch reference runs, and comparison / logical ops return 0/1 *in that dtype* (TT-Buda has no
boolean tensors on device).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pybuda.ops.common import (broadcast_shapes, dtype_name, float_dtype, float_in, normalize_dim,
                               operand_dtypes_to, result_dtype, same_shape, torch_dtype)
from pybuda.ops.registry import DeviceLowering, OpDef, attr, register

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


def _binary(name: str, fn, doc: str, dtype=_common_dtype, lower=None) -> OpDef:
    def _eval(x, a):
        out_dtype = dtype([x[0].dtype, x[1].dtype], a)
        out = fn(*operand_dtypes_to([x[0], x[1]], result_dtype(x[0].dtype, x[1].dtype)))
        # Comparisons give bool in torch; TT-Buda gives 0/1 in the operands' dtype.
        return out if out.dtype == out_dtype else out.to(out_dtype)

    return register(OpDef(name=name, family="eltwise_binary", arity=(2, 2), shape=_binary_shape,
                          eval=_eval, dtype=dtype, doc=doc, lower=_lowering(lower)))


_binary("add", torch.add, "Elementwise a + b, with broadcasting.", lower="add")
_binary("subtract", torch.sub, "Elementwise a - b, with broadcasting.", lower="subtract")
_binary("multiply", torch.mul, "Elementwise a * b, with broadcasting.", lower="multiply")
_binary("divide", lambda a, b: torch.div(a.to(float_dtype(a.dtype)), b.to(float_dtype(b.dtype))),
        "Elementwise a / b (true division; integer operands give float32).", dtype=_float_common_dtype)
_binary("maximum", torch.maximum, "Elementwise max(a, b).", lower="maximum")
_binary("minimum", torch.minimum, "Elementwise min(a, b).")
_binary("heaviside", torch.heaviside, "Heaviside step of a: 0 where a < 0, 1 where a > 0, b where a == 0.",
        lower="heaviside")
_binary("power", torch.pow, "Elementwise a ** b.")
_binary("equal", torch.eq, "1 where a == b else 0, in the operands' dtype.")
_binary("not_equal", torch.ne, "1 where a != b else 0, in the operands' dtype.")
_binary("greater", torch.gt, "1 where a > b else 0, in the operands' dtype.")
_binary("less", torch.lt, "1 where a < b else 0, in the operands' dtype.")
_binary("greater_equal", torch.ge, "1 where a >= b else 0, in the operands' dtype.")
_binary("less_equal", torch.le, "1 where a <= b else 0, in the operands' dtype.")
_binary("logical_and", torch.logical_and, "1 where a != 0 and b != 0 else 0, in the operands' dtype.")


# --- where (ternary) -----------------------------------------------------------------------------------


def _where_eval(x, a):
    out_dtype = result_dtype(x[1].dtype, x[2].dtype)
    return torch.where(x[0] != 0, x[1].to(out_dtype), x[2].to(out_dtype))


register(OpDef(name="where", family="eltwise_nary", arity=(3, 3),
               shape=lambda s, a: broadcast_shapes(s[0], s[1], s[2]), eval=_where_eval,
               dtype=lambda d, a: result_dtype(d[1], d[2]),
               doc="where(cond, x, y): x where cond != 0, else y; all three broadcast."))


# --- unary ---------------------------------------------------------------------------------------------


def _same_dtype(dtypes, attrs):
    return dtypes[0]


def _float_dtype(dtypes, attrs):
    return float_dtype(dtypes[0])


def _unary(op_name: str, fn, doc: str, dtype_fn=_same_dtype, shape_fn=same_shape, canonicalize=None,
           lower=None, **attrs) -> OpDef:
    # Attribute specs arrive as **attrs, so the helper's own parameters avoid attr names.
    return register(OpDef(name=op_name, family="eltwise_unary", arity=(1, 1), shape=shape_fn,
                          eval=lambda x, a: fn(x[0], a), attrs=attrs, dtype=dtype_fn, doc=doc,
                          canonicalize=canonicalize, lower=_lowering(lower)))


_unary("abs", lambda x, a: torch.abs(x), "Elementwise |x|.", lower="abs")
_unary("exp", lambda x, a: torch.exp(float_in(x)), "Elementwise e^x.", dtype_fn=_float_dtype, lower="exp")
_unary("log", lambda x, a: torch.log(float_in(x)), "Elementwise natural logarithm.", dtype_fn=_float_dtype, lower="log")
_unary("reciprocal", lambda x, a: torch.reciprocal(float_in(x)), "Elementwise 1 / x.", dtype_fn=_float_dtype,
       lower="reciprocal")
_unary("sqrt", lambda x, a: torch.sqrt(float_in(x)), "Elementwise square root.", dtype_fn=_float_dtype, lower="sqrt")
_unary("sigmoid", lambda x, a: torch.sigmoid(float_in(x)), "Elementwise 1 / (1 + e^-x).", dtype_fn=_float_dtype,
       lower="sigmoid")
_unary("sine", lambda x, a: torch.sin(float_in(x)), "Elementwise sin(x).", dtype_fn=_float_dtype, lower="sine")
_unary("cosine", lambda x, a: torch.cos(float_in(x)), "Elementwise cos(x).", dtype_fn=_float_dtype, lower="cosine")
_unary("tanh", lambda x, a: torch.tanh(float_in(x)), "Elementwise tanh(x).", dtype_fn=_float_dtype, lower="tanh")
_unary("erf", lambda x, a: torch.erf(float_in(x)), "Elementwise Gauss error function.", dtype_fn=_float_dtype)
_unary("square", lambda x, a: x * x, "Elementwise x * x.", lower="square")
_unary("logical_not", lambda x, a: (x == 0).to(x.dtype), "1 where x == 0 else 0, in x's dtype.")
_unary("nop", lambda x, a: x, "Identity; may be removed by the compiler.")
_unary("buffer", lambda x, a: x,
       "Identity that the compiler keeps (it is not lowered into a removable nop).", lower="nop")
_unary("tilize", lambda x, a: x, "Converts row-major data to tile layout on device; identity on CPU.")


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
       "unsqueeze_dim.", shape_fn=_identity_shape,
       unsqueeze=attr(str, default=None, choices=("unsqueeze", "squeeze")), unsqueeze_dim=attr(int, default=None))


def _cast_canonical(shapes, attrs):
    return {**attrs, "dtype": dtype_name(attrs["dtype"])}


register(OpDef(name="cast", family="eltwise_unary", arity=(1, 1), shape=same_shape,
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


# relu is a nop with the netlist's relu attributes (applied after any op, spec §3.2).
_unary("relu", lambda x, a: _relu(x, a["threshold"], a["mode"]),
       "ReLU with a threshold: mode 'min' keeps x >= threshold, 'max' keeps x <= threshold (else 0).",
       lower=DeviceLowering("nop", lambda a: {"relu_en": True, "relu_threshold": float(a["threshold"]),
                                              "relu_mode": a["mode"]}),
       threshold=attr(float, default=0.0), mode=attr(str, default="min", choices=("min", "max")))
_unary("leaky_relu", lambda x, a: F.leaky_relu(float_in(x), a["alpha"]),
       "x where x >= 0, else alpha * x.", dtype_fn=_float_dtype,
       lower=DeviceLowering("lrelu", lambda a: {"slope": float(a["alpha"])}), alpha=attr(float))
_unary("gelu", lambda x, a: F.gelu(float_in(x), approximate=a["approximate"]),
       "GeLU, exact ('none') or with the tanh approximation.", dtype_fn=_float_dtype,
       lower=DeviceLowering("gelu", lambda a: {"approximate_mode": True} if a.get("approximate") == "tanh" else {}),
       approximate=attr(str, default="none", choices=("none", "tanh")))
_unary("pow", lambda x, a: torch.pow(float_in(x), a["exponent"]), "Elementwise x ** exponent.",
       dtype_fn=_float_dtype, lower=DeviceLowering("power", _pow_device_attrs), exponent=attr(float))


def _clip_check(shapes, attrs):
    if attrs["min"] > attrs["max"]:
        raise ValueError(f"clip min {attrs['min']} is greater than max {attrs['max']}")
    return attrs


_unary("clip", lambda x, a: torch.clamp(x, a["min"], a["max"]).to(x.dtype),
       "Clamp every element into [min, max].", canonicalize=_clip_check, min=attr(float), max=attr(float))


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


_unary("dropout", _dropout_eval,
       "Zero each element with probability p and scale the rest by 1/(1-p); the mask is a function of "
       "seed and shape only. Identity when training is False.", canonicalize=_dropout_check,
       lower=DeviceLowering("dropout", lambda a: {"p": float(a["p"]), "seed": int(a["seed"])}),
       p=attr(float, default=0.5), training=attr(bool, default=True), seed=attr(int, default=0))
