"""Quantisation ops with TT-Buda's signatures: scales are tensor operands, laid out along `axis`.

A scale operand is either broadcastable to the input, or 1-D with one value per element of ``axis``
(or a single value). Integer results saturate to the device range; Int8 is sign-magnitude on the chip,
so its range is [-127, 127] (as in TT-Buda), not torch's [-128, 127].

None of them is differentiable here (``NO_GRADIENT``): quantised values are integers, and the scales
are compile-time operands (TT-Buda trained no quantised graphs).
"""

from __future__ import annotations

import torch

from pybuda.ops.common import broadcast_shapes, dtype_name, normalize_dim, torch_dtype
from pybuda.ops.registry import NO_GRADIENT, OpDef, attr, register

_LIMITS = {
    "int8": (-127, 127),
    "uint8": (0, 255),
    "int32": (-2147483648, 2147483647),
    "float32": (-3.4028234663852886e38, 3.4028234663852886e38),
}


def _out_dtype_canonical(shapes, attrs):
    name = dtype_name(attrs["out_dtype"])
    if name not in _LIMITS:
        raise ValueError(f"out_dtype must be one of {sorted(_LIMITS)}, got {attrs['out_dtype']!r}")
    normalize_dim(attrs["axis"], len(shapes[0]))
    for i, scale in enumerate(shapes[1:], start=1):
        _check_scale(shapes[0], scale, attrs["axis"], i)
    return {**attrs, "out_dtype": name}


def _check_scale(shape, scale, axis: int, index: int) -> None:
    if len(scale) == 1 and scale[0] in (1, shape[normalize_dim(axis, len(shape))]):
        return
    try:
        if broadcast_shapes(shape, scale) != tuple(shape):
            raise ValueError
    except ValueError:
        raise ValueError(f"scale operand {index} of shape {list(scale)} must be 1-D along axis {axis} or "
                         f"broadcastable to the input {list(shape)}") from None


def _along_axis(scale: torch.Tensor, rank: int, axis: int) -> torch.Tensor:
    scale = scale.to(torch.float32)
    if scale.dim() == 1 and rank > 1:
        d = axis % rank
        return scale.reshape((-1,) + (1,) * (rank - 1 - d))
    return scale


def _saturate(values: torch.Tensor, out_dtype: str) -> torch.Tensor:
    lo, hi = _LIMITS[out_dtype]
    return torch.clamp(values, lo, hi).to(torch_dtype(out_dtype))


def _quantize_eval(x, a):
    t = x[0].to(torch.float32)
    scale = _along_axis(x[1], t.dim(), a["axis"])
    return _saturate(torch.round(t / scale) + a["zero_point"], a["out_dtype"])


def _dequantize_eval(x, a):
    t = x[0].to(torch.float32)
    scale = _along_axis(x[1], t.dim(), a["axis"])
    return ((t - a["zero_point"]) * scale).to(torch_dtype(a["out_dtype"]))


def _requantize_eval(x, a):
    t = x[0].to(torch.float32)
    rank = t.dim()
    scale = _along_axis(x[1], rank, a["axis"]) / _along_axis(x[2], rank, a["axis"])
    return _saturate(torch.round((t - a["input_zero_point"]) * scale + a["output_zero_point"]), a["out_dtype"])


def _out_dtype(dtypes, attrs):
    return torch_dtype(attrs["out_dtype"])


def _same(shapes, attrs):
    return tuple(shapes[0])


register(OpDef(name="quantize", family="quant", arity=(2, 2), shape=_same, eval=_quantize_eval, dtype=_out_dtype,
               backward=NO_GRADIENT,
               attrs={"zero_point": attr(float, default=0.0), "axis": attr(int, default=-1),
                      "out_dtype": attr(str, default="int8")},
               canonicalize=_out_dtype_canonical,
               doc="quantize(x, scale): saturate(round(x / scale) + zero_point) in out_dtype."))

register(OpDef(name="dequantize", family="quant", arity=(2, 2), shape=_same, eval=_dequantize_eval, dtype=_out_dtype,
               backward=NO_GRADIENT,
               attrs={"zero_point": attr(float, default=0.0), "axis": attr(int, default=-1),
                      "out_dtype": attr(str, default="float32")},
               canonicalize=_out_dtype_canonical,
               doc="dequantize(q, scale): (q - zero_point) * scale in out_dtype."))

register(OpDef(name="requantize", family="quant", arity=(3, 3), shape=_same, eval=_requantize_eval, dtype=_out_dtype,
               backward=NO_GRADIENT,
               attrs={"input_zero_point": attr(float, default=0.0), "output_zero_point": attr(float, default=0.0),
                      "axis": attr(int, default=-1), "rounding": attr(str, default="None"),
                      "out_dtype": attr(str, default="int8")},
               canonicalize=_out_dtype_canonical,
               doc="requantize(q, in_scale, out_scale): saturate(round((q - input_zero_point) * in_scale / "
                   "out_scale + output_zero_point)) in out_dtype. `rounding` is recorded for the device; "
                   "the reference rounds half to even."))


def _buda_requantize_eval(x, a):
    t = x[0].to(torch.float32)
    scale = _along_axis(x[1], t.dim(), a["axis"])
    return _saturate(torch.round(t * scale) + a["zero_point"], a["out_dtype"])


register(OpDef(name="buda_requantize", family="quant", arity=(2, 2), shape=_same, eval=_buda_requantize_eval,
               dtype=_out_dtype,
               backward=NO_GRADIENT,
               attrs={"zero_point": attr(float, default=0.0), "axis": attr(int, default=-1),
                      "rounding": attr(str, default="Even"), "out_dtype": attr(str, default="int8")},
               canonicalize=_out_dtype_canonical,
               doc="buda_requantize(acc, scale): saturate(round(acc * scale) + zero_point) in out_dtype - the "
                   "device form of requantize, on an int32 accumulator with the combined scale."))
