"""Ops that fit no other family: embedding, constant, resize2d/3d, cumsum, index_copy."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from pybuda.ops import integer
from pybuda.ops.common import float_dtype, int_list, need_rank, normalize_dim, same_shape
from pybuda.ops.registry import NO_GRADIENT, OpDef, attr, register


def _embedding_shape(shapes, attrs):
    table, indices = shapes
    if len(table) != 2:
        raise ValueError(f"the embedding table must be 2-D [num_embeddings, dim], got shape {list(table)}")
    return tuple(indices) + (table[1],)


def _embedding_bw(ac, operand, inputs, output, grad, attrs):
    if operand == 1:
        return None  # indices
    vocab, dim = ac.shape(inputs[0])
    onehot = ac.one_hot(ac.fwd(inputs[1]), vocab)  # [N, V]
    rows = ac.reshape(grad, (math.prod(ac.shape(inputs[1])), dim))  # [N, D]
    return ac.op("matmul", [ac.transpose(onehot, 0, 1), rows])  # scatter-add as onehot^T @ grad


register(OpDef(name="embedding", family="misc", arity=(2, 2), shape=_embedding_shape, backward=_embedding_bw,
               int_range=integer.moves_first,  # a one-hot matmul: one table row per id
               eval=lambda x, a: x[0][x[1].to(torch.int64)],
               attrs={"negative_ids": attr(bool, default=False)},
               doc="embedding(table [V, D], indices [...]) -> table[indices], of shape [..., D] and the "
                   "table's dtype (indices may be stored as floats). `negative_ids`: an id in [-V, -1] counts "
                   "from the end (ONNX Gather, numpy-style indexing); without it only [0, V - 1] is valid "
                   "(torch.nn.functional.embedding)."))


def _lookup_digits_shape(shapes, attrs):
    shape = tuple(shapes[0])
    at = attrs["dim"]
    if not 0 <= at <= len(shape):
        raise ValueError(f"lookup_digits dim {at} is outside a rank-{len(shape)} tensor")
    if attrs["rows"] < 1 or attrs["chunk"] < 1:
        raise ValueError(f"lookup_digits needs positive rows and chunk, got {attrs['rows']} and {attrs['chunk']}")
    return shape[:at] + (2, math.prod(shape[at:]), 1)


def lookup_digits(ids: torch.Tensor, rows: int, chunk: int, wrap: bool, dim: int) -> torch.Tensor:
    """``ids`` as the two digits the device's chunked one-hot lookup compares (see ``lookup_digits``)."""
    idx = ids.to(torch.int64)
    if wrap:
        idx = torch.where(idx < 0, idx + rows, idx)
    hi = torch.div(idx, chunk, rounding_mode="floor")
    lo = idx - hi * chunk
    digits = torch.stack([hi, lo], dim=dim)
    return digits.reshape(tuple(ids.shape[:dim]) + (2, math.prod(ids.shape[dim:]), 1)).to(ids.dtype)


def _lookup_digits_range(ranges, shapes, attrs):
    chunk, rows = attrs["chunk"], attrs["rows"]
    return (0.0, float(max((rows - 1) // chunk, min(chunk, rows) - 1)))


_lookup_digits_range.ignores_operands = True

register(OpDef(name="lookup_digits", family="misc", arity=(1, 1), shape=_lookup_digits_shape,
               eval=lambda x, a: lookup_digits(x[0], a["rows"], a["chunk"], a["wrap"], a["dim"]),
               attrs={"rows": attr(int), "chunk": attr(int), "wrap": attr(bool, default=False),
                      "dim": attr(int, default=0)},
               backward=NO_GRADIENT, int_range=_lookup_digits_range,
               doc="The host's form of the ids of a lookup in a table of `rows` rows (the compiler hoists it onto "
                   "the host, before the push): ids in [-rows, -1] wrapped to id + rows when `wrap`, then each id "
                   "as the digits id // chunk and id % chunk, each digit a column of the ids from "
                   "`dim` on: [..dim, rest..] -> [..dim, 2, prod(rest), 1]. The device compares each digit exactly "
                   "(both stay within the 11 significant bits its source registers hold) where a whole id beyond "
                   "2**11 would not be, and reads the columns as they are, with no data movement."))


register(OpDef(name="dram_queue", family="misc", arity=(1, 1), shape=same_shape, eval=lambda x, a: x[0],
               int_range=integer.moves,
               backward=lambda ac, operand, inputs, output, grad, attrs: grad,
               attrs={"num_entries": attr(int)}, dtype=lambda d, a: d[0],
               doc="Identity on values: TT-Buda's hint to buffer the operand in a DRAM queue of `num_entries`."))


def _constant_shape(shapes, attrs):
    shape = int_list(attrs["shape"], "constant shape")
    if any(d < 1 for d in shape):
        raise ValueError(f"constant shape must have positive dims, got {shape}")
    return shape


register(OpDef(name="constant", family="misc", arity=(0, 0), shape=_constant_shape,
               eval=lambda x, a: torch.full(a["shape"], a["constant"], dtype=torch.float32),
               attrs={"constant": attr(float), "shape": attr(tuple, default=(1,))},
               dtype=lambda d, a: torch.float32, backward=NO_GRADIENT, int_range=integer.constant,
               doc="A float32 tensor of `shape` filled with `constant`."))


_RESIZE_MODES = {
    2: {"nearest_neighbor": "nearest", "linear": "bilinear", "bilinear": "bilinear", "cubic": "bicubic"},
    3: {"nearest_neighbor": "nearest", "linear": "trilinear", "bilinear": "trilinear"},
}


def _resize_shape(nd: int):
    def shape(shapes, attrs):
        out = list(shapes[0])
        need_rank(out, nd + 1)
        sizes = int_list(attrs["sizes"], "sizes")
        if len(sizes) != nd or min(sizes) < 1:
            raise ValueError(f"resize{nd}d sizes must be {nd} positive ints, got {sizes}")
        if attrs["method"] not in _RESIZE_MODES[nd]:
            raise ValueError(f"resize{nd}d does not support method '{attrs['method']}'; "
                             f"use one of {sorted(_RESIZE_MODES[nd])}")
        first = len(out) - nd - (1 if attrs["channel_last"] else 0)
        out[first:first + nd] = sizes
        return tuple(out)

    return shape


def _resize_eval(nd: int):
    def evaluate(x, attrs):
        t = x[0]
        dtype = float_dtype(t.dtype)
        if attrs["channel_last"]:
            t = t.movedim(-1, -nd - 1)
        spatial = tuple(t.shape[-nd:])
        # interpolate wants [N, C, spatial]; every leading dim folds into C.
        flat = t.to(dtype).reshape((1, -1) + spatial)
        mode = _RESIZE_MODES[nd][attrs["method"]]
        kwargs = {} if mode == "nearest" else {"align_corners": attrs["align_corners"]}
        out = F.interpolate(flat, size=tuple(attrs["sizes"]), mode=mode, **kwargs)
        out = out.reshape(tuple(t.shape[:-nd]) + tuple(attrs["sizes"]))
        return out.movedim(-nd - 1, -1) if attrs["channel_last"] else out

    return evaluate


def _resize_matrix(nd: int, attrs, axis: int, size_in: int, size_out: int) -> torch.Tensor:
    """[size_out, size_in]: how the resize mixes one spatial dim. Every mode here is separable, so the
    matrix is the resize of unit impulses along that dim (the other dims keep size 1)."""
    mode = _RESIZE_MODES[nd][attrs["method"]]
    kwargs = {} if mode == "nearest" else {"align_corners": attrs["align_corners"]}
    spatial = [1] * nd
    spatial[axis] = size_in
    eye = torch.eye(size_in, dtype=torch.float64).reshape([size_in, 1] + spatial)
    sizes = [1] * nd
    sizes[axis] = size_out
    out = F.interpolate(eye, size=tuple(sizes), mode=mode, **kwargs)
    return out.reshape(size_in, size_out).t().to(torch.float32)


def _resize_bw(nd: int):
    # A resize is linear and separable: out = M_1 x M_2 ... along each spatial dim; the gradient applies
    # the transposed matrices, one matmul per dim (the dim moved last and back).
    def backward(ac, operand, inputs, output, grad, attrs):
        in_shape = ac.shape(inputs[0])
        g = grad
        rank = len(in_shape)
        if attrs["channel_last"]:
            g = ac.movedim(g, -1, -nd - 1)
        spatial_in = in_shape[-nd - 1:-1] if attrs["channel_last"] else in_shape[-nd:]
        for i in range(nd):
            dim = rank - nd + i
            size_out, size_in = ac.shape(g)[dim], spatial_in[i]
            mat = _resize_matrix(nd, attrs, i, size_in, size_out)  # [out, in]
            g = ac.movedim(g, dim, -1)
            g = ac.op("matmul", [g, ac.constant(mat)])
            g = ac.movedim(g, -1, dim)
        if attrs["channel_last"]:
            g = ac.movedim(g, -nd - 1, -1)
        return g

    return backward


for _nd in (2, 3):
    register(OpDef(name=f"resize{_nd}d", family="misc", arity=(1, 1), shape=_resize_shape(_nd), eval=_resize_eval(_nd),
                   backward=_resize_bw(_nd),
                   attrs={"sizes": attr(tuple),
                          "method": attr(str, default="nearest_neighbor",
                                         choices=("nearest_neighbor", "linear", "bilinear", "cubic")),
                          "align_corners": attr(bool, default=False), "channel_last": attr(bool, default=False)},
                   dtype=lambda d, a: float_dtype(d[0]),
                   doc=f"Resize the last {_nd} spatial dims (or, channel_last, the {_nd} before the channels) to "
                       f"`sizes`; methods nearest_neighbor, linear/bilinear{', cubic' if _nd == 2 else ''}."))


def _cumsum_eval(x, attrs):
    t, axis = x[0], attrs["axis"]
    out = torch.cumsum(t, axis, dtype=t.dtype)
    return out - t if attrs["exclusive"] else out


def _cumsum_shape(shapes, attrs):
    normalize_dim(attrs["axis"], len(shapes[0]))
    return same_shape(shapes, attrs)


def _cumsum_bw(ac, operand, inputs, output, grad, attrs):
    # Each x[i] feeds every later output: dx = reverse cumsum of grad = total - cumsum(grad) (+ grad when
    # the sum is inclusive).
    axis = attrs["axis"]
    total = ac.op("reduce_sum", [grad], {"dim": axis})
    out = ac.sub(total, ac.op("cumsum", [grad], {"axis": axis}))
    return out if attrs["exclusive"] else ac.add(out, grad)


register(OpDef(name="cumsum", family="misc", arity=(1, 1), shape=_cumsum_shape, eval=_cumsum_eval, backward=_cumsum_bw,
               int_range=integer.cumsum,
               attrs={"axis": attr(int), "exclusive": attr(bool, default=False)},
               doc="Running sum along axis; `exclusive` leaves each element out of its own sum."))


def _index_copy_shape(shapes, attrs):
    target, index, value = shapes
    d = normalize_dim(attrs["dim"], len(target))
    if len(index) != 1:
        raise ValueError(f"index_copy indices must be 1-D, got shape {list(index)}")
    expected = list(target)
    expected[d] = index[0]
    if list(value) != expected:
        raise ValueError(f"index_copy value must have shape {expected}, got {list(value)}")
    return tuple(target)


def _index_copy_bw(ac, operand, inputs, output, grad, attrs):
    if operand == 1:
        return None  # indices
    index = ac.fwd(inputs[1])
    if operand == 2:  # value: the gradient at the copied slices
        return ac.op("adv_index", [grad, index], {"dim": attrs["dim"]})
    shape = ac.shape(inputs[0])
    d = attrs["dim"] % len(shape)
    hit = ac.op("reduce_sum", [ac.one_hot(index, shape[d])], {"dim": 0})  # [1, size]: 1 where overwritten
    keep = ac.sub(ac.constant(1.0), ac.reshape(hit, (shape[d],) + (1,) * (len(shape) - 1 - d)))
    return ac.mul(grad, keep)


register(OpDef(name="index_copy", family="misc", arity=(3, 3), shape=_index_copy_shape, backward=_index_copy_bw,
               eval=lambda x, a: x[0].index_copy(a["dim"], x[1].to(torch.int64), x[2].to(x[0].dtype)),
               attrs={"dim": attr(int)}, dtype=lambda d, a: d[0],
               doc="index_copy(target, index [K], value): target with the slices at `index` along dim replaced "
                   "by the K slices of value."))
