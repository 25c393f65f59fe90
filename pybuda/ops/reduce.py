"""Reductions. As in TT-Buda the reduced dim is kept with size 1 (a device tensor never loses rank)."""

from __future__ import annotations

import torch

from pybuda.ops import integer
from pybuda.ops.common import float_dtype, normalize_dim
from pybuda.ops.registry import NO_GRADIENT, OpDef, attr, register


def _keepdim_shape(shapes, attrs):
    shape = list(shapes[0])
    shape[normalize_dim(attrs["dim"], len(shape))] = 1
    return tuple(shape)


def _dim_canonical(shapes, attrs):
    normalize_dim(attrs["dim"], len(shapes[0]))  # range check only; the dim is stored as given
    return attrs


def _reduce_sum_bw(ac, operand, inputs, output, grad, attrs):
    shape = ac.shape(inputs[0])
    d = attrs["dim"] % len(shape)
    return ac.op("broadcast", [grad], {"dim": d, "shape": shape[d]}) if shape[d] != 1 else grad


def _reduce_avg_bw(ac, operand, inputs, output, grad, attrs):
    shape = ac.shape(inputs[0])
    d = attrs["dim"] % len(shape)
    return ac.mul(_reduce_sum_bw(ac, operand, inputs, output, grad, attrs), 1.0 / shape[d])


register(OpDef(name="reduce_sum", family="reduce", arity=(1, 1), shape=_keepdim_shape, backward=_reduce_sum_bw,
               int_range=integer.reduce_sum,
               eval=lambda x, a: torch.sum(x[0], a["dim"], keepdim=True, dtype=x[0].dtype),
               attrs={"dim": attr(int)}, canonicalize=_dim_canonical,
               doc="Sum along dim; the dim is kept with size 1."))

register(OpDef(name="reduce_avg", family="reduce", arity=(1, 1), shape=_keepdim_shape, backward=_reduce_avg_bw,
               eval=lambda x, a: torch.mean(x[0].to(float_dtype(x[0].dtype)), a["dim"], keepdim=True),
               attrs={"dim": attr(int)}, canonicalize=_dim_canonical, dtype=lambda d, a: float_dtype(d[0]),
               doc="Mean along dim; the dim is kept with size 1."))


def _max_canonical(shapes, attrs):
    attrs = _dim_canonical(shapes, attrs)
    size = shapes[0][attrs["dim"]]
    stride = attrs["stride"]
    if stride == -1 or stride == size:
        return {**attrs, "stride": -1}
    if stride <= 0 or size % stride:
        raise ValueError(f"reduce_max stride {stride} must be -1 or divide the reduced dim ({size})")
    return attrs


def _max_shape(shapes, attrs):
    shape = list(shapes[0])
    d = attrs["dim"]
    shape[d] = 1 if attrs["stride"] == -1 else shape[d] // attrs["stride"]
    return tuple(shape)


def _max_eval(x, attrs):
    t, d, stride = x[0], attrs["dim"], attrs["stride"]
    if stride == -1:
        return torch.amax(t, d, keepdim=True)
    # Groups of `stride` consecutive elements along dim, each reduced to its max (TT-Buda's z-stride max).
    d = d % t.dim()
    grouped = t.reshape(t.shape[:d] + (t.shape[d] // stride, stride) + t.shape[d + 1:])
    return torch.amax(grouped, d + 1)


def _reduce_max_bw(ac, operand, inputs, output, grad, attrs):
    # torch's amax rule: the gradient is shared evenly among the elements equal to the max.
    x = ac.fwd(inputs[0])
    shape = ac.shape(inputs[0])
    d, stride = attrs["dim"] % len(shape), attrs["stride"]
    y = ac.fwd(output)
    if stride != -1:  # groups of `stride` along d: work on [.., size/stride, stride, ..]
        grouped = shape[:d] + (shape[d] // stride, stride) + shape[d + 1:]
        x = ac.reshape(x, grouped)
        keep = grouped[:d + 1] + (1,) + grouped[d + 2:]
        y, grad, d = ac.reshape(y, keep), ac.reshape(grad, keep), d + 1
    mask = ac.op("equal", [x, y])
    share = ac.div(mask, ac.op("reduce_sum", [mask], {"dim": d}))
    return ac.reshape(ac.mul(share, grad), shape)


register(OpDef(name="reduce_max", family="reduce", arity=(1, 1), shape=_max_shape, eval=_max_eval,
               backward=_reduce_max_bw, int_range=integer.moves,
               attrs={"dim": attr(int), "stride": attr(int, default=-1)}, canonicalize=_max_canonical,
               doc="Max along dim (kept with size 1). With stride > 0, the max of each group of `stride` "
                   "consecutive elements, so the dim shrinks to size/stride."))


def _grouped_canonical(shapes, attrs):
    attrs = _dim_canonical(shapes, attrs)
    size, groups = shapes[0][attrs["dim"]], attrs["groups"]
    if groups <= 0 or size % groups:
        raise ValueError(f"groups ({groups}) must divide the reduced dim ({size})")
    return attrs


def _grouped_shape(shapes, attrs):
    shape = list(shapes[0])
    if not attrs["keep_dims"]:
        shape[attrs["dim"]] = attrs["groups"]
    return tuple(shape)


def _grouped_eval(x, attrs):
    t = x[0].to(float_dtype(x[0].dtype))
    d, groups = attrs["dim"] % t.dim(), attrs["groups"]
    size = t.shape[d]
    grouped = t.reshape(t.shape[:d] + (groups, size // groups) + t.shape[d + 1:])
    means = torch.mean(grouped, d + 1, keepdim=True)
    if attrs["keep_dims"]:
        return means.expand(grouped.shape).reshape(t.shape)
    return means.reshape(t.shape[:d] + (groups,) + t.shape[d + 1:])


def _grouped_bw(ac, operand, inputs, output, grad, attrs):
    shape = ac.shape(inputs[0])
    d, groups = attrs["dim"] % len(shape), attrs["groups"]
    if attrs["keep_dims"]:  # every element is its group's mean: the gradient is the group mean of grad
        return ac.op("grouped_reduce_avg", [grad], {"dim": d, "groups": groups, "keep_dims": True})
    size = shape[d] // groups
    g = ac.reshape(grad, shape[:d] + (groups, 1) + shape[d + 1:])
    if size != 1:
        g = ac.op("broadcast", [g], {"dim": d + 1, "shape": size})
    return ac.reshape(ac.mul(g, 1.0 / size), shape)


register(OpDef(name="grouped_reduce_avg", family="reduce", arity=(1, 1), shape=_grouped_shape, eval=_grouped_eval,
               backward=_grouped_bw,
               attrs={"dim": attr(int), "groups": attr(int), "keep_dims": attr(bool, default=False)},
               canonicalize=_grouped_canonical, dtype=lambda d, a: float_dtype(d[0]),
               doc="Split dim into `groups` equal groups and average each: the dim becomes `groups`, or with "
                   "keep_dims every element is replaced by its group's mean."))


def _argmax_shape(shapes, attrs):
    shape = list(shapes[0])
    if attrs["dim"] is None:
        return tuple([1] * len(shape)) if attrs["keep_dim"] else (1,)
    d = normalize_dim(attrs["dim"], len(shape))
    if attrs["keep_dim"]:
        shape[d] = 1
    else:
        del shape[d]
    return tuple(shape) if shape else (1,)  # the device has no 0-d tensors: one element stays 1-D


def _argmax_eval(x, attrs):
    t, dim = x[0], attrs["dim"]
    shape = _argmax_shape([tuple(t.shape)], attrs)
    if dim is None:
        t, dim = t.reshape(-1), 0
    if attrs["last"]:  # the last maximum: the first one of the reversed dim, counted from the end
        idx = t.size(dim) - 1 - torch.argmax(t.flip(dim), dim, keepdim=True)
    else:
        idx = torch.argmax(t, dim, keepdim=True)
    return idx.reshape(shape).to(t.dtype)


register(OpDef(name="argmax", family="reduce", arity=(1, 1), shape=_argmax_shape, eval=_argmax_eval,
               backward=NO_GRADIENT, int_range=integer.index_of,
               attrs={"dim": attr(int, default=None), "keep_dim": attr(bool, default=True),
                      "last": attr(bool, default=False)},
               doc="Index of the first (with last, the last) max along dim, or over all elements when dim is "
                   "None. keep_dim keeps "
                   "the reduced dim with size 1 (dim None: every dim becomes 1), else it is dropped (a single "
                   "index has shape (1,)). The index is returned in the operand's dtype, as in TT-Buda."))
