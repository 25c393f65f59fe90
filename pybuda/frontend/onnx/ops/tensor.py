"""ONNX shape and data-movement ops: Shape, Reshape, Transpose, Concat, Split, Slice, Gather, Pad, Resize, Einsum ..."""

from __future__ import annotations

import math
from typing import Any, List, Sequence, Tuple

import numpy as np

import torch

from pybuda.frontend.aten_builder import Const, Unsupported
from pybuda.frontend.aten_nn import _matmul
from pybuda.frontend.aten_scatter import scatter_columns, scatter_of
from pybuda.frontend.aten_index import _adv_index
from pybuda.frontend.aten_shape import _index_range, _permute_by
from pybuda.frontend.onnx.converter import NodeCtx, Param, converts, inf_standin
from pybuda.frontend.onnx import model as onnx_model
from pybuda.frontend.onnx.ops.common import _F32, _float_out


@converts("Shape")
def _shape(ctx: NodeCtx):
    shape = list(ctx.shape(0))
    rank = len(shape)
    start = ctx.attr("start", 0, (int,))
    end = ctx.attr("end", rank, (int,))
    return Const(torch.tensor(shape[slice(start, end)], dtype=torch.int64), f"{ctx.label}.shape")


@converts("Size")
def _size(ctx: NodeCtx):
    return Const(torch.tensor(math.prod(ctx.shape(0)), dtype=torch.int64), f"{ctx.label}.size")


@converts("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(ctx: NodeCtx):
    if ctx.op_type == "Reshape":
        ctx.const(1, "shape")
    if ctx.op_type == "Flatten":
        ctx.axis(ctx.attr("axis", 1, (int,)), ctx.rank(0) + 1)
    if ctx.op_type in ("Squeeze", "Unsqueeze") and ctx.has(1):
        ctx.const(1, "axes")
    if 0 in ctx.out_shape():
        raise Unsupported("zero-size tensors")
    return ctx.b.reshape(ctx.x(0), ctx.out_shape())


@converts("Transpose")
def _transpose(ctx: NodeCtx):
    rank = ctx.rank(0)
    perm = list(ctx.attr("perm", list(range(rank))[::-1], (list,)))
    if sorted(perm) != list(range(rank)):
        raise ctx.bad(f"perm {perm} is not a permutation of {rank} dims")
    out = _permute_by(ctx.b, ctx.x(0), perm)
    return out if out != ctx.x(0) else ctx.b.op("nop", [out])


@converts("Concat")
def _concat(ctx: NodeCtx):
    dt = ctx.out_dtype()
    rank = ctx.rank(0)
    axis = ctx.axis(ctx.attr("axis", types=(int,)), rank)
    parts = [ctx.x(i, dt) for i in range(len(ctx.inputs)) if ctx.has(i) and math.prod(ctx.shape(i)) > 0]
    if not parts:
        raise Unsupported("concatenation of empty tensors")
    if len(parts) == 1:
        return ctx.b.op("nop", parts)
    return ctx.b.op("concatenate", parts, axis=axis)


@converts("Split")
def _split(ctx: NodeCtx):
    rank = ctx.rank(0)
    axis = ctx.axis(ctx.attr("axis", 0, (int,)), rank)
    if ctx.has(1):
        ctx.const(1, "split")
    outs, offset = [], 0
    for k in range(len(ctx.node.output)):
        size = ctx.out_shape(k)[axis]
        if size == 0:
            raise Unsupported("empty split piece")
        outs.append(_index_range(ctx.b, ctx.x(0), axis, offset, offset + size))
        offset += size
    return [o if o != ctx.x(0) else ctx.b.op("nop", [o]) for o in outs]


@converts("Slice")
def _slice(ctx: NodeCtx):
    rank = ctx.rank(0)
    shape = ctx.shape(0)
    starts = ctx.ints(1, "starts")
    ends = ctx.ints(2, "ends")
    axes = ctx.ints(3, "axes") if ctx.has(3) else list(range(len(starts)))
    steps = ctx.ints(4, "steps") if ctx.has(4) else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.bad("starts, ends, axes and steps must have the same length")
    v = ctx.x(0)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = ctx.axis(a, rank, "axes entry")
        if st == 0:
            raise ctx.bad("steps must be non-zero")
        r = range(shape[a])[slice(s, e, st)]
        if len(r) == 0:
            raise Unsupported("empty slice (zero-size tensors)")
        if st < 0:
            # A reversed walk is a permutation of the rows it keeps: a gather with the indices known now.
            out = tuple(len(r) if d == a else n for d, n in enumerate(ctx.b.shape(v)))
            v = _adv_index(ctx.b, v, Const(torch.tensor(list(r), dtype=torch.int64), f"{ctx.label}.rows"), a, out)
            continue
        v = _index_range(ctx.b, v, a, r.start, r.start + (len(r) - 1) * st + 1, st)
    return v if v != ctx.x(0) else ctx.b.op("nop", [v])


@converts("Gather")
def _gather(ctx: NodeCtx):
    rank = ctx.rank(0)
    axis = ctx.axis(ctx.attr("axis", 0, (int,)), rank)
    size = ctx.shape(0)[axis]
    idx = ctx.value(1)
    if isinstance(idx, Const):
        iv = idx.value.to(torch.int64)
        if ((iv < -size) | (iv >= size)).any():
            raise Unsupported(f"Gather indices out of range for a dim of size {size}")
        idx = Const(torch.where(iv < 0, iv + size, iv), idx.name)
        if idx.value.numel() == 0:
            raise Unsupported("Gather with no indices")
    elif _is_embedding_lookup(ctx, axis):
        # What aten.embedding is in the torch frontend, so the same rules place it (cpu_fallback_ops, the
        # device's one-hot embedding); a run-time adv_index would carry the integer ids through int64 moves.
        # ONNX counts a negative index from the end: the device wraps it (the host pushes wrapped digits).
        return ctx.b.op("embedding", [ctx.x(0), ctx.x(1)], negative_ids=True)
    return _adv_index(ctx.b, ctx.x(0), idx, axis, ctx.out_shape())


def _is_embedding_lookup(ctx: NodeCtx, axis: int) -> bool:
    """A Gather of rows of a float weight table (an initializer, ``[V, D]``) by integer ids computed at run
    time: an embedding lookup (word, token-type embeddings)."""
    table, ids = ctx.value(0), ctx.value(1)
    return (isinstance(table, Param) and axis == 0 and ctx.rank(0) == 2 and table.value.is_floating_point()
            and not isinstance(ids, Const) and ctx.rank(1) >= 1 and not ctx.b.dtype(ids).is_floating_point
            and ctx.b.dtype(ids) != torch.bool)


@converts("GatherElements")
def _gather_elements(ctx: NodeCtx):
    """Indices known at import (e.g. a loss's integer targets): per index along the axis, the input times a
    one-hot mask summed over the axis (a loss picks one class per sample); for many indices along the axis, a
    Gather of the flattened input at the flat positions they name (computed now)."""
    shape = ctx.shape(0)
    axis = ctx.axis(ctx.attr("axis", 0, (int,)), len(shape))
    if not isinstance(ctx.value(1), Const):
        return _gather_elements_pushed(ctx, shape, axis)
    idx = ctx.const(1, "indices").to(torch.int64)
    size = shape[axis]
    if ((idx < -size) | (idx >= size)).any():
        raise ctx.bad(f"indices out of range for a dim of size {size}")
    if idx.numel() == 0:
        raise Unsupported("GatherElements with no indices")
    idx = torch.where(idx < 0, idx + size, idx)
    if idx.shape[axis] <= ONE_HOT_GATHER_MAX:
        return _gather_one_hot(ctx, idx, axis)
    coords = list(torch.meshgrid(*[torch.arange(n) for n in idx.shape], indexing="ij"))
    coords[axis] = idx
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    flat = sum(c * st for c, st in zip(coords, strides))
    x = ctx.b.reshape(ctx.x(0), (math.prod(shape),))
    return _adv_index(ctx.b, x, Const(flat, f"{ctx.label}.positions"), 0, ctx.out_shape())


#: Largest axis a GatherElements by run-time indices picks along on the device (its identity is size² values).
PUSHED_GATHER_ELEMENTS_MAX = 2048


def _gather_elements_pushed(ctx: NodeCtx, shape: Sequence[int], axis: int) -> str:
    """Indices computed at run time: proven within the axis by the graph, torch's gather along any axis; else along
    the input's last axis, each index picks its one-hot row of an identity (a gather by the pushed indices, which
    wraps negative ones as ONNX does and is checked against the axis at push time), the input times those rows,
    summed over the axis."""
    from pybuda.frontend.aten_index import _proven_in_range, _runtime_index_gather

    b = ctx.b
    ish, rank, dt = tuple(ctx.shape(1)), len(shape), ctx.out_dtype()
    size = shape[axis]
    index = ctx.value(1)
    if dt.is_floating_point and _proven_in_range(b, index, size) is not None:
        # Indices the graph proves within [0, size) (a TopK's, an ArgMax's) along any axis: torch's gather, a batched
        # one-hot matmul (no negative index to wrap, nothing for the host to check).
        return _runtime_index_gather(b, ctx.x(0), index, axis)
    if axis != rank - 1 or not dt.is_floating_point or size > PUSHED_GATHER_ELEMENTS_MAX or not math.prod(ish):
        raise Unsupported(f"GatherElements with indices computed at run time (the device takes them along the last "
                          f"axis of float data of at most {PUSHED_GATHER_ELEMENTS_MAX})")
    x = ctx.x(0)
    for d, n in enumerate(ish[:-1]):  # the input restricted to the indices' extent on the other dims
        x = _index_range(b, x, d, 0, n)
    flat = b.reshape(ctx.x(1), (math.prod(ish),))
    onehot = b.op("adv_index", [b.const(torch.eye(size, dtype=dt), f"{ctx.label}.identity"), flat], dim=0)
    onehot = b.reshape(onehot, ish + (size,))
    picked = b.op("multiply", [onehot, b.reshape(x, ish[:-1] + (1, size))])
    return b.reshape(b.op("reduce_sum", [picked], dim=-1), ish)


#: GatherElements with at most this many indices along its axis uses one-hot masks (cost: that many
#: products of the input's size) rather than a flat Gather (cost: the input's size squared).
ONE_HOT_GATHER_MAX = 16


def _gather_one_hot(ctx: NodeCtx, idx: torch.Tensor, axis: int) -> str:
    b = ctx.b
    dt = ctx.out_dtype()
    if not dt.is_floating_point:
        raise Unsupported(f"GatherElements on {str(dt).replace('torch.', '')} data")
    x = ctx.x(0)
    for d, n in enumerate(idx.shape):  # the input restricted to the indices' extent on the other dims
        if d != axis:
            x = _index_range(b, x, d, 0, n)
    size = b.shape(x)[axis]
    classes = torch.arange(size).reshape([size if d == axis else 1 for d in range(idx.dim())])
    parts = []
    for k in range(idx.shape[axis]):
        pick = (torch.narrow(idx, axis, k, 1) == classes).to(dt)  # one-hot along the axis
        picked = b.op("multiply", [x, b.const(pick, f"{ctx.label}.one_hot")])
        parts.append(b.op("reduce_sum", [picked], dim=axis))
    return parts[0] if len(parts) == 1 else b.op("concatenate", parts, axis=axis)


@converts("Expand")
def _expand(ctx: NodeCtx):
    ctx.const(1, "shape")
    out = ctx.b.broadcast_to(ctx.x(0), ctx.out_shape())
    return out if out != ctx.x(0) else ctx.b.op("nop", [out])


@converts("Tile")
def _tile(ctx: NodeCtx):
    reps = ctx.ints(1, "repeats")
    if len(reps) != ctx.rank(0):
        raise ctx.bad(f"repeats has {len(reps)} entries for a rank-{ctx.rank(0)} input")
    if all(r == 1 for r in reps):
        return ctx.b.op("nop", [ctx.x(0)])
    return ctx.b.op("repeat", [ctx.x(0)], factors=tuple(reps))


@converts("Pad")
def _pad(ctx: NodeCtx):
    mode = ctx.attr("mode", "constant", (str,), ("constant", "reflect", "edge", "wrap"))
    rank = ctx.rank(0)
    pads = ctx.ints(1, "pads")
    axes = ctx.ints(3, "axes") if ctx.has(3) else list(range(rank))
    if len(pads) != 2 * len(axes):
        raise ctx.bad(f"pads has {len(pads)} entries for {len(axes)} axes")
    if mode == "wrap":
        raise Unsupported("Pad mode 'wrap'")
    per_dim = {ctx.axis(a, rank, "axes entry"): (pads[k], pads[k + len(axes)]) for k, a in enumerate(axes)}
    if all(p == (0, 0) for p in per_dim.values()):
        return ctx.b.op("nop", [ctx.x(0)])
    dt = _float_out(ctx)
    static_value = not ctx.has(2) or isinstance(ctx.value(2), Const)
    value = float(ctx.const(2, "constant_value").reshape(-1)[0]) if ctx.has(2) and static_value else 0.0
    if math.isinf(value):  # a -inf fill (attention masks) is the device's stand-in for infinity
        value = math.copysign(inf_standin(dt), value)
    if mode == "constant" and (not static_value or any(p < 0 for pr in per_dim.values() for p in pr)
                               or any(per_dim.get(d, (0, 0)) != (0, 0) for d in range(rank - 2))):
        return _pad_by_concat(ctx, per_dim, value if static_value else ctx.x(2, dt), dt)
    if any(p < 0 for pr in per_dim.values() for p in pr):
        raise Unsupported("negative padding (cropping)")
    if any(per_dim.get(d, (0, 0)) != (0, 0) for d in range(rank - 2)):
        raise Unsupported("padding of other than the last two dims")
    last = per_dim.get(rank - 1, (0, 0))
    pad = list(last)
    if rank >= 2 and per_dim.get(rank - 2, (0, 0)) != (0, 0):
        pad += list(per_dim[rank - 2])
    mode = {"edge": "replicate"}.get(mode, mode)
    return ctx.b.op("pad", [ctx.x(0)], pad=tuple(pad), mode=mode, value=value, channel_last=False)


def _pad_by_concat(ctx: NodeCtx, per_dim, value: Any, dt, x: Any = None) -> str:
    """Constant padding of any dims of ``x`` (default: the node's input 0) as slices (negative pads crop) and
    concatenations with blocks of ``value`` (a float, or a graph value computed at run time: the blocks are
    then ones times it)."""
    b = ctx.b
    x = ctx.x(0, dt) if x is None else x
    for d in sorted(per_dim):
        lo, hi = per_dim[d]
        size = b.shape(x)[d]
        if lo < 0 or hi < 0:
            x = _index_range(b, x, d, max(-lo, 0), size - max(-hi, 0))
        parts = []
        for width in (lo, None, hi):
            if width is None:
                parts.append(x)
            elif width > 0:
                shape = tuple(width if k == d else n for k, n in enumerate(b.shape(x)))
                if isinstance(value, float):
                    parts.append(b.const(torch.full(shape, value, dtype=dt), f"{ctx.label}.fill"))
                else:
                    ones = b.const(torch.ones(shape, dtype=dt), f"{ctx.label}.ones")
                    parts.append(b.op("multiply", [ones, b.reshape(value, (1,) * len(shape))]))
        if len(parts) > 1:
            x = b.op("concatenate", parts, axis=d)
    return x


@converts("ConstantOfShape")
def _constant_of_shape(ctx: NodeCtx):
    shape = ctx.ints(0, "shape")
    fill = ctx.attrs.get("value")
    value = torch.from_numpy(onnx_model.numpy_helper.to_array(fill).copy()) if fill is not None else \
        torch.zeros(1, dtype=_F32)
    return Const(value.reshape(-1)[:1].reshape(()).expand(shape).contiguous(), f"{ctx.label}.value")


@converts("Resize", "Upsample")
def _resize(ctx: NodeCtx):
    # Every Resize mode (nearest, linear, cubic; each coordinate transformation, antialias) is linear in
    # its input and separable by axis: each resized spatial axis is one matmul with a constant matrix,
    # the node's own ONNX semantics applied to an identity basis (:func:`_resize_matrix`). tf_crop_and_resize
    # adds one more constant: the extrapolation value wherever a sample falls outside its crop box.
    if ctx.rank(0) != 4:
        raise Unsupported(f"Resize of a rank-{ctx.rank(0)} tensor")
    ctm = ctx.attr("coordinate_transformation_mode", "half_pixel", (str,))
    axes = [ctx.axis(a, 4, "axes entry") for a in ctx.attr("axes", [0, 1, 2, 3], (list,))]
    out, ins = ctx.out_shape(), ctx.shape(0)
    if tuple(out[:2]) != tuple(ins[:2]):
        raise Unsupported("Resize of batch/channel dims")
    geo = {"scales": None, "sizes": None, "roi": {}}
    k = 1 if ctx.op_type == "Upsample" else 2
    if ctm == "tf_crop_and_resize":
        roi = [float(v) for v in ctx.const(1, "roi").reshape(-1).tolist()]
        if len(roi) != 2 * len(axes):
            raise ctx.bad(f"roi has {len(roi)} values for {len(axes)} axes")
        geo["roi"] = {a: (roi[i], roi[i + len(axes)]) for i, a in enumerate(axes)}
    if ctx.has(k) and ctx.shape(k) != (0,):
        if isinstance(ctx.value(k), Const):
            given = [float(v) for v in ctx.const(k).reshape(-1).tolist()]
            if len(given) != len(axes):
                raise ctx.bad(f"scales has {len(given)} values for {len(axes)} axes")
            scales = [1.0] * 4
            for a, v in zip(axes, given):
                scales[a] = v
        else:
            # Scales computed at run time: the static output shape fixes them only where the sample's scales
            # are exactly out/in (then any run with this shape resizes the same way).
            sample = ctx.imp.samples_run.get(ctx.node.input[k])
            ratios = [o / i for o, i in zip(out, ins)]
            if sample is None or [float(v) for v in np.asarray(sample).reshape(-1)] != [ratios[a] for a in axes]:
                raise Unsupported("Resize with scales computed at run time that are not out/in")
            scales = ratios
        geo["scales"] = scales
    elif ctx.attr("keep_aspect_ratio_policy", "stretch", (str,)) != "stretch":
        # One scale for the listed axes (ONNX: the smallest or largest sizes/in) and output sizes rounded from
        # it: the reference computes both from the spatial sizes it is given with the policy.
        sizes = dict(zip(axes, ctx.ints(3, "sizes")))
        if any(sizes[a] != ins[a] for a in (0, 1) if a in sizes):
            raise Unsupported("Resize of batch/channel dims")
        geo["sizes"] = {a: n for a, n in sizes.items() if a >= 2}
    dt = _float_out(ctx)
    b = ctx.b
    x = ctx.x(0, dt)
    outside = {}
    for axis in (3, 2):
        crop = geo["roi"].get(axis, (0.0, 1.0))
        same_scale = geo["scales"][axis] == 1.0 if geo["scales"] is not None else not geo["sizes"]
        if out[axis] == ins[axis] and same_scale and crop == (0.0, 1.0):
            continue  # an identity along this axis in every mode
        m, outside[axis] = _resize_matrix(ctx, axis, ins, out[axis], geo)
        mt = b.const(torch.from_numpy(m).to(dt).t().contiguous(), f"{ctx.label}.interp{axis}")
        if axis == 3:
            x = b.op("matmul", [x, mt])
        else:
            x = b.transpose(b.op("matmul", [b.transpose(x, 2, 3), mt]), 2, 3)
    fill = float(ctx.attr("extrapolation_value", 0.0, (float, int)))
    if fill != 0.0 and any(o.any() for o in outside.values()):
        # The matrices give 0 at extrapolated samples (their rows are zero): add the value there.
        rows = outside.get(2, np.zeros(out[2], bool))[:, None]
        cols = outside.get(3, np.zeros(out[3], bool))[None, :]
        extra = torch.from_numpy((rows | cols).astype(np.float32) * fill).to(dt).reshape(1, 1, out[2], out[3])
        x = b.op("add", [x, b.const(extra, f"{ctx.label}.extrapolated")])
    return x if x != ctx.x(0, dt) else b.op("nop", [x])


def _resize_matrix(ctx: NodeCtx, axis: int, ins: Sequence[int], n_out: int, geo: dict) -> Tuple[np.ndarray, np.ndarray]:
    """The ``[n_out, n_in]`` matrix of the node's resize along ``axis`` and which output samples are
    extrapolated (tf_crop_and_resize outside its box): the ONNX reference implementation of a Resize with the
    node's attributes, run on the identity basis laid out along that axis (with the extrapolation value 0), and
    on zeros with the extrapolation value 1."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    n_in = ins[axis]
    attrs = {k: v for k, v in ctx.attrs.items() if k not in ("axes", "keep_aspect_ratio_policy", "extrapolation_value")}
    if ctx.op_type == "Upsample":
        attrs = {"mode": attrs.get("mode", b"nearest"), "coordinate_transformation_mode": b"asymmetric",
                 "nearest_mode": b"floor"}
    # The basis: sample k of the batch is the unit vector k along ``axis``; the other spatial axis is length 1,
    # but with a keep-aspect-ratio policy it keeps its size (the policy's scale reads every listed axis).
    spatial = list(ins[2:]) if geo["sizes"] else [1, 1]
    spatial[axis - 2] = n_in
    basis = np.zeros([n_in, 1] + spatial, np.float32)
    for k in range(n_in):
        basis[(k, 0) + tuple(k if d == axis - 2 else slice(None) for d in range(2))] = 1.0
    lo, hi = geo["roi"].get(axis, (0.0, 1.0))
    roi = np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32)
    roi[axis], roi[axis + 4] = lo, hi
    feeds = {"x": basis, "roi": roi}
    if geo["sizes"]:
        listed = sorted(geo["sizes"])
        attrs.update(axes=listed, keep_aspect_ratio_policy=ctx.attrs["keep_aspect_ratio_policy"])
        feeds["sizes"] = np.array([geo["sizes"][a] for a in listed], np.int64)
        inputs = ["x", "", "", "sizes"]
    elif geo["scales"] is not None:
        feeds["scales"] = np.array([1.0, 1.0] + [geo["scales"][axis] if d == axis else 1.0 for d in (2, 3)], np.float32)
        inputs = ["x", "roi", "scales"]
    else:
        feeds["sizes"] = np.array([n_in, 1] + [n_out if d == axis else 1 for d in (2, 3)], np.int64)
        inputs = ["x", "roi", "", "sizes"]
    if "roi" not in inputs:
        feeds.pop("roi")

    def run(x, fill):
        resize = helper.make_node("Resize", inputs, ["y"], **attrs, extrapolation_value=fill)
        y = ReferenceEvaluator(resize, opsets={"": max(ctx.opset, 18)}).run(None, dict(feeds, x=x))[0]
        return y[:, 0, :, 0] if axis == 2 else y[:, 0, 0, :]

    y = run(basis, 0.0)
    if y.shape != (n_in, n_out):
        raise Unsupported(f"Resize along axis {axis} gives {list(y.shape)}")
    outside = run(np.zeros_like(basis), 1.0)[0] != 0 if geo["roi"] else np.zeros(n_out, bool)
    return np.ascontiguousarray(y.T, dtype=np.float32), outside


@converts("DepthToSpace")
def _depth_to_space(ctx: NodeCtx):
    block = ctx.attr("blocksize", types=(int,))
    if ctx.attr("mode", "DCR", (str,), ("DCR", "CRD")) == "CRD":
        return ctx.b.op("pixel_shuffle", [ctx.x(0)], upscale_factor=block)
    # DCR: the channels are (row offset, column offset, channel), ONNX's definition as a reshape, a
    # permutation and a reshape (pixel_shuffle reads them as (channel, row offset, column offset)).
    if ctx.rank(0) != 4 or block < 1 or ctx.shape(0)[1] % (block * block):
        raise ctx.bad(f"needs an NCHW input whose channels divide by blocksize**2 = {block * block}")
    n, c, h, w = ctx.shape(0)
    x = ctx.b.reshape(ctx.x(0), (n, block, block, c // (block * block), h, w))
    return ctx.b.reshape(_permute_by(ctx.b, x, [0, 3, 4, 1, 5, 2]), ctx.out_shape())


@converts("Range")
def _range(ctx: NodeCtx):
    if all(isinstance(ctx.value(i), Const) for i in range(3)):
        start, limit, delta = (ctx.const(i).reshape(()) for i in range(3))
        return Const(torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype), f"{ctx.label}.range")
    # Run-time bounds: the length is static (the output shape), the values are start + k * delta.
    dt = _float_out(ctx)
    b = ctx.b
    steps = b.const(torch.arange(ctx.out_shape()[0], dtype=dt), f"{ctx.label}.steps")
    start, delta = (b.reshape(ctx.x(i, dt), (1,)) for i in (0, 2))
    return b.op("add", [b.op("multiply", [steps, delta]), start])


@converts("Einsum")
def _einsum(ctx: NodeCtx):
    eq = ctx.attr("equation", types=(str,)).replace(" ", "")
    dt = _float_out(ctx)
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) == 2 and rhs and len(terms[0]) >= 2 and len(terms[1]) >= 2 and "." not in eq:
        a, c = terms
        batch = a[:-2]
        if c[:-2] == batch and rhs[:-2] == batch and a[-1] == c[-2] and rhs[-2:] == a[-2] + c[-1]:
            return _matmul(ctx.b, ctx.x(0, dt), ctx.x(1, dt), None, ctx.out_shape(), dt)
    if len(terms) in (1, 2) and len(terms) == len(ctx.inputs):
        terms, rhs = _einsum_without_ellipsis(ctx, terms, rhs if arrow else None)
        return _einsum_by_broadcast(ctx, terms, rhs, dt)
    raise Unsupported(f"einsum equation '{eq}'")


def _einsum_without_ellipsis(ctx: NodeCtx, terms: Sequence[str], rhs) -> Tuple[List[str], str]:
    """The terms with '...' spelled out in fresh letters (right-aligned across operands, as it broadcasts),
    and the output term (ONNX's implicit one when ``rhs`` is None: the ellipsis, then the letters used once)."""
    used = set("".join(terms) + (rhs or ""))
    fresh = [ch for ch in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if ch not in used]
    counts = [ctx.rank(k) - (len(t) - 3) if "..." in t else 0 for k, t in enumerate(terms)]
    width = max(counts)
    if width > len(fresh):
        raise Unsupported("einsum with too many ellipsis dims")
    dots = "".join(fresh[:width])
    out_terms = [t.replace("...", dots[width - n:]) for t, n in zip(terms, counts)]
    if rhs is None:
        singles = "".join(sorted(ch for ch in set("".join(terms)) - {"."} if "".join(terms).count(ch) == 1))
        rhs = dots + singles
    return out_terms, rhs.replace("...", dots)


def _einsum_diagonals(b: Any, x: str, term: str, dt) -> Tuple[str, str]:
    """A term with a repeated letter ('ii') reduced to its diagonal: times an identity mask over the two dims,
    summed over the second."""
    while len(set(term)) != len(term):
        ch = next(c for c in term if term.count(c) > 1)
        i, j = term.index(ch), term.index(ch, term.index(ch) + 1)
        shape = b.shape(x)
        n = shape[i]
        eye = torch.eye(n, dtype=dt).reshape([n if d in (i, j) else 1 for d in range(len(shape))])
        x = b.op("reduce_sum", [b.op("multiply", [x, b.const(eye, "einsum.diagonal")])], dim=j)
        x = b.reshape(x, shape[:j] + shape[j + 1:])
        term = term[:j] + term[j + 1:]
    return x, term


def _einsum_by_broadcast(ctx: NodeCtx, terms: Sequence[str], rhs: str, dt) -> str:
    """Einsum of one or two operands (ellipses spelled out): diagonals taken, both laid out over every letter
    (size 1 where absent), multiplied with broadcasting, summed over the letters not in the output, permuted."""
    b = ctx.b
    letters = list(dict.fromkeys("".join(terms)))
    sizes = {}
    aligned = []
    for k, term in enumerate(terms):
        x = ctx.x(k, dt)
        sizes.update(zip(term, ctx.shape(k)))
        x, term = _einsum_diagonals(b, x, term, dt)
        order = sorted(range(len(term)), key=lambda i: letters.index(term[i]))
        if order != list(range(len(term))):
            x = _permute_by(b, x, order)
        full = tuple(sizes[ch] if ch in term else 1 for ch in letters)
        aligned.append(b.reshape(x, full) if full != b.shape(x) else x)
    out = aligned[0] if len(aligned) == 1 else b.op("multiply", aligned)
    for d in reversed(range(len(letters))):
        if letters[d] not in rhs:
            out = b.op("reduce_sum", [out], dim=d)
    kept = [ch for ch in letters if ch in rhs]
    if not kept:
        return b.reshape(out, ctx.out_shape())
    out = b.reshape(out, tuple(sizes[ch] for ch in kept))
    order = [kept.index(ch) for ch in rhs]
    if order != list(range(len(kept))):
        out = _permute_by(b, out, order)
    return b.reshape(out, ctx.out_shape())


@converts("Trilu")
def _trilu(ctx: NodeCtx):
    """The upper (``upper=1``) or lower triangle of the last two dims from diagonal ``k``: a ``where`` with a
    constant mask, as the torch frontend maps ``triu``/``tril`` (a multiply by 0/1 would turn inf into NaN)."""
    upper = ctx.attr("upper", 1, (int,), choices=(0, 1))
    if ctx.rank(0) < 2:
        raise ctx.bad(f"needs an input of rank 2 or more, got rank {ctx.rank(0)}")
    k = ctx.ints(1, "diagonal k")[0] if ctx.has(1) else 0
    rows, cols = ctx.shape(0)[-2:]
    ones = torch.ones(rows, cols, dtype=torch.bool)
    mask = torch.triu(ones, k) if upper else torch.tril(ones, k)
    dt = ctx.dtype(0)
    return ctx.b.op("where", [ctx.b.const(mask, f"{ctx.label}.mask"), ctx.x(0), ctx.b.scalar(0, dt, 1)])


@converts("OneHot")
def _one_hot(ctx: NodeCtx):
    """``values[1]`` where an index equals its position along the new ``axis``, ``values[0]`` elsewhere: two exact
    comparisons with a constant ramp (an index may also count from the end, ``-depth <= i < 0``; one outside
    ``[-depth, depth)`` gives a row of ``values[0]``, as ONNX says)."""
    shape = list(ctx.shape(0))
    axis = ctx.axis(ctx.attr("axis", -1, (int,)), len(shape) + 1)
    depth_n = ctx.out_shape()[axis]  # the depth, also when it is computed at run time (the sample run's)
    b, dt, it = ctx.b, ctx.out_dtype(), ctx.dtype(0)
    if it.is_floating_point:  # ONNX truncates float indices; equality with the ramp would not
        raise Unsupported("OneHot with float indices (ONNX truncates them to integers)")
    idx = b.reshape(ctx.x(0), shape[:axis] + [1] + shape[axis:])
    ramp_shape = [1] * (len(shape) + 1)
    ramp_shape[axis] = depth_n
    ramp = torch.arange(depth_n).reshape(ramp_shape)
    hits = []
    for offset, tag in ((0, "ramp"), (-depth_n, "ramp_neg")):
        const = b.const((ramp + offset).to(it), f"{ctx.label}.{tag}")
        hits.append(b.cast(b.binary("equal", idx, const, it), dt))
    mask = b.op("add", hits)  # at most one of the two holds
    if isinstance(ctx.value(2), Const):
        values = ctx.const(2).reshape(-1)
        if values.numel() != 2:
            raise ctx.bad(f"values must be a pair (off, on), got {values.numel()} values")
        off, on = float(values[0]), float(values[1])
        if (off, on) == (0.0, 1.0):
            return mask
        return b.binary("add", b.binary("multiply", mask, on - off, dt), off, dt)
    values = b.reshape(ctx.x(2, dt), (2,))
    off, on = (b.reshape(_index_range(b, values, 0, k, k + 1), [1] * len(ramp_shape)) for k in (0, 1))
    return b.op("add", [b.op("multiply", [mask, b.op("subtract", [on, off])]), off])


def _nd_indices(ctx: NodeCtx) -> Tuple[torch.Tensor, List[int], int]:
    """GatherND/ScatterND's constant indices (input 1, ``[..., K]``), the data's shape and K, checked."""
    idx = ctx.const(1, "indices").to(torch.int64)
    shape = list(ctx.shape(0))
    k = idx.shape[-1] if idx.dim() else 0
    if idx.dim() < 1 or not 1 <= k <= len(shape):
        raise ctx.bad(f"indices of shape {list(idx.shape)} do not index a rank-{len(shape)} input")
    return idx, shape, k


def _nd_flat_positions(ctx: NodeCtx, idx: torch.Tensor, shape: List[int]) -> torch.Tensor:
    """GatherND/ScatterND's constant K-tuples ``idx`` (``[..., K]``) as flat positions in ``shape``'s first K dims
    flattened into one; negative entries count from the end, entries out of range are a bad model."""
    k = idx.shape[-1]
    sizes = torch.tensor(shape[:k])
    if ((idx < -sizes) | (idx >= sizes)).any():
        raise ctx.bad(f"indices out of range for the input's leading dims {shape[:k]}")
    idx = torch.where(idx < 0, idx + sizes, idx)
    strides = torch.tensor([math.prod(shape[d + 1:k]) for d in range(k)])
    return (idx * strides).sum(-1)


@converts("GatherND")
def _gather_nd(ctx: NodeCtx):
    """Indices known at import (the TorchScript exporter's diagonal): the first K dims of the input flattened
    into one, the K-tuples turned into flat positions there, and a Gather at them (the torch frontend's constant
    gather). The output shape comes from the inputs' shapes: inside an inlined If branch there is no probe."""
    if ctx.attr("batch_dims", 0, (int,)) != 0:
        raise Unsupported("GatherND with batch_dims")
    idx, shape, k = _nd_indices(ctx)
    if idx.numel() == 0:
        raise Unsupported("GatherND with no indices")
    flat = _nd_flat_positions(ctx, idx, shape)
    x = ctx.b.reshape(ctx.x(0), [math.prod(shape[:k])] + shape[k:])
    return _adv_index(ctx.b, x, Const(flat, f"{ctx.label}.positions"), 0, list(idx.shape[:-1]) + shape[k:])


@converts("ScatterND")
def _scatter_nd(ctx: NodeCtx):
    """Indices known at import (the TorchScript exporter's ``x[..., 1:] = y``, T5's shift right): which row of the
    updates lands on each of the input's rows (its first K dims flattened) is computed now; the output is a
    ``where`` between the input and those rows of the updates, gathered at constant positions (the torch
    frontend's constant gather). ONNX leaves duplicate indices undefined: the last one wins here, as in ONNX
    Runtime. ``reduction="add"`` sums the updates into the rows they index (the torch frontend's constant
    scatter: a matmul with a 0/1 matrix when rows repeat)."""
    reduction = ctx.attr("reduction", "none", (str,))
    if reduction not in ("none", "add"):
        raise Unsupported(f"ScatterND with reduction '{reduction}'")
    idx, shape, k = _nd_indices(ctx)
    if idx.numel() == 0:
        return ctx.b.op("nop", [ctx.x(0)])
    flat = _nd_flat_positions(ctx, idx, shape).reshape(-1)
    rows, width, count = math.prod(shape[:k]), math.prod(shape[k:]), flat.numel()
    if reduction == "add":  # rows of the data as the columns of the scatter
        b, dt = ctx.b, ctx.out_dtype()
        data = b.transpose(b.reshape(ctx.x(0, dt), (rows, width)), 0, 1)
        updates = b.transpose(b.reshape(ctx.x(2, dt), (count, width)), 0, 1)
        out = scatter_columns(b, updates, flat, rows, data, True, ctx.label)
        return b.reshape(b.transpose(out, 0, 1), shape)
    src = torch.full((rows,), -1, dtype=torch.int64)
    src[flat] = torch.arange(count)
    b, dt = ctx.b, ctx.out_dtype()
    data = b.reshape(ctx.x(0, dt), (rows, width))
    updates = b.reshape(ctx.x(2, dt), (count, width))
    picked = _adv_index(b, updates, Const(src.clamp(min=0), f"{ctx.label}.sources"), 0, (rows, width))
    written = b.const((src >= 0).reshape(rows, 1), f"{ctx.label}.written")
    return b.reshape(b.op("where", [written, picked, data]), shape)


@converts("ScatterElements", "Scatter")
def _scatter_elements(ctx: NodeCtx):
    """``ScatterElements`` (and opset 9's ``Scatter``): torch's ``scatter`` (``reduction="add"``: ``scatter_add``).
    Indices known at import may count from the end; a run-time index runs on the device only when its values
    are proven in bounds (see :mod:`pybuda.frontend.aten_scatter`)."""
    reduction = ctx.attr("reduction", "none", (str,))
    if reduction not in ("none", "add"):
        raise Unsupported(f"{ctx.op_type} with reduction '{reduction}'")
    rank = ctx.rank(0)
    axis = ctx.axis(ctx.attr("axis", 0, (int,)), rank)
    index = ctx.value(1)
    if isinstance(index, Const):
        size = ctx.shape(0)[axis]
        value = index.value.to(torch.int64)
        if value.numel() and (int(value.min()) < -size or int(value.max()) >= size):
            raise ctx.bad(f"indices out of range for axis {axis} of size {size}")
        index = Const(value % size if size else value, index.name)
    if tuple(ctx.shape(1)) != tuple(ctx.shape(2)):
        raise ctx.bad(f"indices of shape {list(ctx.shape(1))} and updates of shape {list(ctx.shape(2))} differ")
    dt = ctx.out_dtype()
    return scatter_of(ctx.b, ctx.x(0, dt), axis, index, ctx.x(2, dt), reduction == "add", dt, ctx.label)
