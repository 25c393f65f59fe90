"""Neural-network ops: softmax, log_softmax, layernorm and (inference) batchnorm."""

from __future__ import annotations

import math

import torch

from pybuda.ops.common import float_dtype, float_in, need_rank, normalize_dim, same_shape
from pybuda.ops.registry import OpDef, attr, register


def _softmax_shape(shapes, attrs):
    normalize_dim(attrs["dim"], len(shapes[0]))
    return tuple(shapes[0])


register(OpDef(name="softmax", family="nn", arity=(1, 1), shape=_softmax_shape,
               eval=lambda x, a: torch.softmax(float_in(x[0]), a["dim"]),
               attrs={"dim": attr(int), "stable": attr(bool, default=True)}, dtype=lambda d, a: float_dtype(d[0]),
               doc="exp(x) / sum(exp(x)) along dim. `stable` (subtract the max first) only changes how the "
                   "device computes it; the reference is always the stable form."))

register(OpDef(name="log_softmax", family="nn", arity=(1, 1), shape=_softmax_shape,
               eval=lambda x, a: torch.log_softmax(float_in(x[0]), a["dim"]),
               attrs={"dim": attr(int), "stable": attr(bool, default=True)}, dtype=lambda d, a: float_dtype(d[0]),
               doc="log(softmax(x)) along dim."))


def _along(param: torch.Tensor, rank: int, dim: int) -> torch.Tensor:
    """A per-channel parameter (any shape holding `size` values) laid out to broadcast along `dim`."""
    return param.reshape((-1,) + (1,) * (rank - 1 - dim))


def _check_params(shapes, dim: int, first: int, what: str) -> None:
    size = shapes[0][dim]
    for i, s in enumerate(shapes[first:], start=first):
        if math.prod(s) != size:
            raise ValueError(f"{what} operand {i} has shape {list(s)}; it must hold {size} values "
                             f"(the size of dim {dim})")


def _layernorm_shape(shapes, attrs):
    d = normalize_dim(attrs["dim"], len(shapes[0]))
    _check_params(shapes, d, 1, "layernorm")
    return tuple(shapes[0])


def _layernorm_eval(x, attrs):
    t, w, b = x
    t = float_in(t)
    d = attrs["dim"] % t.dim()
    mean = t.mean(d, keepdim=True)
    centered = t - mean
    var = (centered * centered).mean(d, keepdim=True)
    out = centered * torch.rsqrt(var + attrs["epsilon"])
    return out * _along(w.to(t.dtype), t.dim(), d) + _along(b.to(t.dtype), t.dim(), d)


register(OpDef(name="layernorm", family="nn", arity=(3, 3), shape=_layernorm_shape, eval=_layernorm_eval,
               attrs={"dim": attr(int, default=-1), "epsilon": attr(float, default=1e-5)},
               dtype=lambda d, a: float_dtype(d[0]),
               doc="layernorm(x, weight, bias): normalise along dim (biased variance), then scale and shift; "
                   "weight and bias hold one value per element of dim."))


def _batchnorm_shape(shapes, attrs):
    need_rank(shapes[0], 2)
    _check_params(shapes, 1, 1, "batchnorm")
    return same_shape(shapes, attrs)


def _batchnorm_eval(x, attrs):
    t, w, b, mean, var = x
    t = float_in(t)
    rank = t.dim()
    w, b, mean, var = (_along(p.to(t.dtype), rank, 1) for p in (w, b, mean, var))
    return (t - mean) * torch.rsqrt(var + attrs["epsilon"]) * w + b


register(OpDef(name="batchnorm", family="nn", arity=(5, 5), shape=_batchnorm_shape, eval=_batchnorm_eval,
               attrs={"epsilon": attr(float, default=1e-5)}, dtype=lambda d, a: float_dtype(d[0]),
               doc="batchnorm(x, weight, bias, running_mean, running_var) with running statistics "
                   "(inference form); channels are dim 1."))
