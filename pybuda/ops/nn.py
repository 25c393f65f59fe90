"""Neural-network ops: softmax, log_softmax, layernorm and (inference) batchnorm."""

from __future__ import annotations

import math

import torch

from pybuda.ops.common import float_dtype, float_in, need_rank, normalize_dim, same_shape
from pybuda.ops.registry import OpDef, attr, register


def _softmax_shape(shapes, attrs):
    normalize_dim(attrs["dim"], len(shapes[0]))
    return tuple(shapes[0])


def _softmax_bw(ac, operand, inputs, output, grad, attrs):
    # dx = y * (grad - sum(grad * y))
    y = ac.fwd(output)
    dot = ac.op("reduce_sum", [ac.mul(grad, y)], {"dim": attrs["dim"]})
    return ac.mul(y, ac.sub(grad, dot))


def _log_softmax_bw(ac, operand, inputs, output, grad, attrs):
    # dx = grad - softmax(x) * sum(grad)
    total = ac.op("reduce_sum", [grad], {"dim": attrs["dim"]})
    return ac.sub(grad, ac.mul(ac.op("exp", [ac.fwd(output)]), total))


register(OpDef(name="softmax", family="nn", arity=(1, 1), shape=_softmax_shape, backward=_softmax_bw,
               eval=lambda x, a: torch.softmax(float_in(x[0]), a["dim"]),
               attrs={"dim": attr(int), "stable": attr(bool, default=True)}, dtype=lambda d, a: float_dtype(d[0]),
               doc="exp(x) / sum(exp(x)) along dim. `stable` (subtract the max first) only changes how the "
                   "device computes it; the reference is always the stable form."))

register(OpDef(name="log_softmax", family="nn", arity=(1, 1), shape=_softmax_shape, backward=_log_softmax_bw,
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


def _along_node(ac, param: str, rank: int, dim: int) -> str:
    """Backward-graph twin of :func:`_along`."""
    return ac.reshape(param, (math.prod(ac.shape(param)),) + (1,) * (rank - 1 - dim))


def _layernorm_stats(ac, inputs, attrs):
    """(normalised x, 1/std) of a layernorm, recomputed from x once per op."""
    if "ln" not in ac.memo:
        x = ac.fwd(inputs[0])
        d = attrs["dim"] % len(ac.shape(x))
        centered = ac.sub(x, ac.op("reduce_avg", [x], {"dim": d}))
        var = ac.op("reduce_avg", [ac.op("square", [centered])], {"dim": d})
        rstd = ac.op("reciprocal", [ac.op("sqrt", [ac.add(var, ac.constant(attrs["epsilon"]))])])
        ac.memo["ln"] = (ac.mul(centered, rstd), rstd)
    return ac.memo["ln"]


def _layernorm_bw(ac, operand, inputs, output, grad, attrs):
    rank = len(ac.shape(inputs[0]))
    d = attrs["dim"] % rank
    xhat, rstd = _layernorm_stats(ac, inputs, attrs)
    if operand == 2:
        return ac.sum_to(grad, d, ac.shape(inputs[2]))
    if operand == 1:
        return ac.sum_to(ac.mul(grad, xhat), d, ac.shape(inputs[1]))
    # dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = grad * weight
    gw = ac.mul(grad, _along_node(ac, ac.fwd(inputs[1]), rank, d))
    mean_gw = ac.op("reduce_avg", [gw], {"dim": d})
    mean_gwx = ac.op("reduce_avg", [ac.mul(gw, xhat)], {"dim": d})
    return ac.mul(ac.sub(ac.sub(gw, mean_gw), ac.mul(xhat, mean_gwx)), rstd)


register(OpDef(name="layernorm", family="nn", arity=(3, 3), shape=_layernorm_shape, eval=_layernorm_eval,
               backward=_layernorm_bw,
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


def _batchnorm_bw(ac, operand, inputs, output, grad, attrs):
    # y = (x - mean) * rstd * w + b with running statistics, rstd = (var + eps)^-1/2
    rank = len(ac.shape(inputs[0]))
    shape = ac.shape(inputs[operand])
    if operand == 2:
        return ac.sum_to(grad, 1, shape)
    w, mean, var = (_along_node(ac, ac.fwd(inputs[i]), rank, 1) for i in (1, 3, 4))
    rstd = ac.op("reciprocal", [ac.op("sqrt", [ac.add(var, ac.constant(attrs["epsilon"]))])])
    if operand == 0:
        return ac.mul(grad, ac.mul(rstd, w))
    if operand == 3:
        return ac.sum_to(ac.neg(ac.mul(grad, ac.mul(rstd, w))), 1, shape)
    centered = ac.sub(ac.fwd(inputs[0]), mean)
    if operand == 1:
        return ac.sum_to(ac.mul(ac.mul(grad, centered), rstd), 1, shape)
    # d/dvar: -0.5 * (x - mean) * w * rstd^3
    rstd3 = ac.mul(ac.op("square", [rstd]), rstd)
    return ac.sum_to(ac.mul(ac.mul(ac.mul(grad, centered), ac.mul(w, rstd3)), -0.5), 1, shape)


register(OpDef(name="batchnorm", family="nn", arity=(5, 5), shape=_batchnorm_shape, eval=_batchnorm_eval,
               backward=_batchnorm_bw,
               attrs={"epsilon": attr(float, default=1e-5)}, dtype=lambda d, a: float_dtype(d[0]),
               doc="batchnorm(x, weight, bias, running_mean, running_var) with running statistics "
                   "(inference form); channels are dim 1."))
