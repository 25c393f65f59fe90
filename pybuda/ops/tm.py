"""Tensor manipulations (TMs): data movement that does no arithmetic.

The z/r/c vocabulary is TT-Buda's: ``c`` is the last dim, ``r`` the one before, ``z`` the one before
that. ``hslice``/``hstack`` move column blocks to and from z; ``vslice``/``vstack`` do the same for
row blocks (which is a plain reshape in row-major memory).
"""

from __future__ import annotations

import math

import torch

from pybuda.ops.common import int_list, need_rank, normalize_dim, operand_dtypes_to, result_dtype
from pybuda.ops import integer
from pybuda.ops.registry import OpDef, attr, register
from pybuda.dtypes import TILE_DIM


def _tm(op_name: str, shape_fn, eval_fn, doc: str, canonicalize=None, arity=(1, 1), dtype_fn=None,
        backward=None, int_range=integer.moves_data, **attrs) -> OpDef:
    # Attribute specs arrive as **attrs, so the helper's own parameters avoid attr names (shape, dim...).
    kwargs = {"dtype": dtype_fn} if dtype_fn is not None else {}
    return register(OpDef(name=op_name, family="tm", arity=arity, shape=shape_fn, eval=eval_fn,
                          attrs=attrs, canonicalize=canonicalize, doc=doc, backward=backward, int_range=int_range,
                          **kwargs))


def _zrc(shape):
    """Split a shape into (outer dims, z, r, c), treating a missing z as 1."""
    need_rank(shape, 2)
    if len(shape) == 2:
        return (), 1, shape[0], shape[1]
    return tuple(shape[:-3]), shape[-3], shape[-2], shape[-1]


def _positive(value: int, what: str) -> None:
    if value <= 0:
        raise ValueError(f"{what} must be positive, got {value}")


# --- hslice / hstack / vslice / vstack -------------------------------------------------------------------


def _hslice_shape(shapes, attrs):
    outer, z, r, c = _zrc(shapes[0])
    s = attrs["slices"]
    _positive(s, "slices")
    if c % s:
        raise ValueError(f"hslice: columns ({c}) are not divisible by slices ({s})")
    return outer + (z * s, r, c // s)


def _hslice_eval(x, attrs):
    t = x[0]
    outer, z, r, c = _zrc(tuple(t.shape))
    s = attrs["slices"]
    t = t.reshape(outer + (z, r, s, c // s)).transpose(-3, -2)
    return t.reshape(outer + (z * s, r, c // s))


def _stack_canonical(shapes, attrs):
    need_rank(shapes[0], 3)
    if attrs["slices"] == -1:
        return {**attrs, "slices": shapes[0][-3]}
    return attrs


def _hstack_shape(shapes, attrs):
    outer, z, r, c = _zrc(shapes[0])
    s = attrs["slices"]
    _positive(s, "slices")
    if z % s:
        raise ValueError(f"hstack: z ({z}) is not divisible by slices ({s})")
    return outer + (z // s, r, c * s)


def _hstack_eval(x, attrs):
    t = x[0]
    outer, z, r, c = _zrc(tuple(t.shape))
    s = attrs["slices"]
    t = t.reshape(outer + (z // s, s, r, c)).transpose(-3, -2)
    return t.reshape(outer + (z // s, r, s * c))


def _vslice_shape(shapes, attrs):
    outer, z, r, c = _zrc(shapes[0])
    s = attrs["slices"]
    _positive(s, "slices")
    if r % s:
        raise ValueError(f"vslice: rows ({r}) are not divisible by slices ({s})")
    return outer + (z * s, r // s, c)


def _vstack_shape(shapes, attrs):
    outer, z, r, c = _zrc(shapes[0])
    s = attrs["slices"]
    _positive(s, "slices")
    if z % s:
        raise ValueError(f"vstack: z ({z}) is not divisible by slices ({s})")
    return outer + (z // s, r * s, c)


def _inverse_bw(op_type: str):
    """Backward of a TM whose inverse is ``op_type`` with the same ``slices`` (then reshaped: a rank-2
    operand comes back from a rank-3 gradient)."""
    def backward(ac, operand, inputs, output, grad, attrs):
        return ac.reshape(ac.op(op_type, [grad], {"slices": attrs["slices"]}), ac.shape(inputs[0]))

    return backward


def _reshape_bw(ac, operand, inputs, output, grad, attrs):
    return ac.reshape(grad, ac.shape(inputs[0]))


_tm("hslice", _hslice_shape, _hslice_eval,
    "Cut the columns into `slices` equal blocks and move them into z: [.., z, r, c] -> [.., z*s, r, c/s].",
    slices=attr(int),
    backward=_inverse_bw("hstack"))
_tm("hstack", _hstack_shape, _hstack_eval,
    "Inverse of hslice: [.., z, r, c] -> [.., z/s, r, c*s]; slices=-1 stacks all of z.",
    canonicalize=_stack_canonical, slices=attr(int, default=-1),
    backward=_inverse_bw("hslice"))
_tm("vslice", _vslice_shape, lambda x, a: x[0].reshape(_vslice_shape([tuple(x[0].shape)], a)),
    "Cut the rows into `slices` equal blocks and move them into z: [.., z, r, c] -> [.., z*s, r/s, c].",
    slices=attr(int),
    backward=_inverse_bw("vstack"))
_tm("vstack", _vstack_shape, lambda x, a: x[0].reshape(_vstack_shape([tuple(x[0].shape)], a)),
    "Inverse of vslice: [.., z, r, c] -> [.., z/s, r*s, c]; slices=-1 stacks all of z.",
    canonicalize=_stack_canonical, slices=attr(int, default=-1),
    backward=_inverse_bw("vslice"))


# --- transpose / reshape ---------------------------------------------------------------------------------


def _transpose_shape(shapes, attrs):
    shape = list(shapes[0])
    d0, d1 = normalize_dim(attrs["dim0"], len(shape)), normalize_dim(attrs["dim1"], len(shape))
    shape[d0], shape[d1] = shape[d1], shape[d0]
    return tuple(shape)


_tm("transpose", _transpose_shape, lambda x, a: torch.transpose(x[0], a["dim0"], a["dim1"]),
    "Swap two dims.", dim0=attr(int), dim1=attr(int),
    backward=lambda ac, operand, inputs, output, grad, attrs: ac.transpose(grad, attrs["dim0"], attrs["dim1"]))


def _reshape_canonical(shapes, attrs):
    target = list(int_list(attrs["shape"], "shape"))
    volume = math.prod(shapes[0])
    unknown = [i for i, d in enumerate(target) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in target):
        raise ValueError(f"reshape target {tuple(target)} may hold at most one -1 and no other negative dims")
    known = math.prod(d for d in target if d != -1)
    if unknown:
        if known == 0 or volume % known:
            raise ValueError(f"cannot infer the -1 dim of {tuple(target)} for {volume} elements")
        target[unknown[0]] = volume // known
    if math.prod(target) != volume:
        raise ValueError(f"cannot reshape {volume} elements into {tuple(target)}")
    return {**attrs, "shape": tuple(target)}


_tm("reshape", lambda s, a: a["shape"], lambda x, a: x[0].reshape(a["shape"]),
    "Reshape to `shape` (same number of elements; one -1 is inferred and stored resolved).",
    canonicalize=_reshape_canonical, shape=attr(tuple),
    backward=_reshape_bw)


# --- index / adv_index / select / narrow -----------------------------------------------------------------


def _index_canonical(shapes, attrs):
    shape = shapes[0]
    d = normalize_dim(attrs["dim"], len(shape))
    size = shape[d]
    start, stop, stride = attrs["start"], attrs["stop"], attrs["stride"]
    if start < 0:
        start += size
    if stop is None:
        stop = start + 1
    elif stop < 0:
        stop += size
    stop = min(stop, size)  # python slicing clamps an end past the dim
    if stride <= 0:
        raise ValueError(f"index stride must be positive, got {stride}")
    if not 0 <= start < stop <= size:
        raise ValueError(f"index range [{attrs['start']}:{attrs['stop']}] is empty or out of range for size {size}")
    return {**attrs, "start": start, "stop": stop}


def _index_shape(shapes, attrs):
    shape = list(shapes[0])
    d = normalize_dim(attrs["dim"], len(shape))
    shape[d] = len(range(attrs["start"], attrs["stop"], attrs["stride"]))
    return tuple(shape)


def _index_eval(x, attrs):
    t = x[0]
    d = attrs["dim"] % t.dim()
    key = (slice(None),) * d + (slice(attrs["start"], attrs["stop"], attrs["stride"]),)
    return t[key]


def _index_bw(ac, operand, inputs, output, grad, attrs):
    shape = ac.shape(inputs[0])
    d = attrs["dim"] % len(shape)
    start, stop, stride = attrs["start"], attrs["stop"], attrs["stride"]
    if stride == 1:  # a contiguous slice: zeros around it
        return ac.fit_dim(grad, d, start, shape[d])
    return ac.gather_backward(grad, d, list(range(start, stop, stride)), shape[d])


_tm("index", _index_shape, _index_eval,
    "Python slice start:stop:stride along dim (the dim is kept). stop=None takes the single element at "
    "start; negative start/stop count from the end; stop is stored normalised (0 <= start < stop <= size).",
    canonicalize=_index_canonical, dim=attr(int), start=attr(int), stop=attr(int, default=None),
    stride=attr(int, default=1),
    backward=_index_bw)


def _adv_index_shape(shapes, attrs):
    table, idx = shapes
    d = normalize_dim(attrs["dim"], len(table))
    if len(idx) == 0 or any(n != 1 for n in idx[:-1]):
        raise ValueError(f"adv_index indices must be 1-D (or [1, .., 1, N]), got shape {list(idx)}")
    shape = list(table)
    shape[d] = idx[-1]
    return tuple(shape)


def _adv_index_eval(x, attrs):
    t, idx = x
    d = attrs["dim"] % t.dim()
    idx = idx.reshape(-1).to(torch.int64)
    idx = torch.where(idx < 0, idx + t.shape[d], idx)
    return torch.index_select(t, d, idx)


def _adv_index_bw(ac, operand, inputs, output, grad, attrs):
    if operand == 1:
        return None  # indices
    shape = ac.shape(inputs[0])
    d = attrs["dim"] % len(shape)
    onehot = ac.one_hot(ac.fwd(inputs[1]), shape[d])  # [N, size]: scatter-add as grad @ onehot along d
    if len(shape) == 1:  # a 1-D table (nll_loss picking one log-probability): a [1, N] row, matmul needs rank 2
        row = ac.reshape(grad, (1, ac.shape(grad)[0]))
        return ac.reshape(ac.op("matmul", [row, onehot]), shape)
    g = ac.movedim(grad, d, -1)
    return ac.movedim(ac.op("matmul", [g, onehot]), -1, d)


_tm("adv_index", _adv_index_shape, _adv_index_eval,
    "Gather the slices at `indices` (operand 1, 1-D) along dim of operand 0. An index in [-size, -1] counts from "
    "the end (numpy-style indexing, ONNX and JAX gathers); `negative_ids` False says the framework refuses one "
    "(torch.index_select), so a device run refuses such a push instead of wrapping it.", arity=(2, 2),
    dim=attr(int, default=0), negative_ids=attr(bool, default=True),
    backward=_adv_index_bw, int_range=integer.moves_first)


def _select_canonical(shapes, attrs):
    shape = shapes[0]
    d = normalize_dim(attrs["dim"], len(shape))
    size = shape[d]
    index = attrs["index"]
    if isinstance(index, int):
        index = (index, 1)
    index = int_list(index, "select index")
    if len(index) != 2:
        raise ValueError(f"select index must be an int or (start, length), got {attrs['index']!r}")
    start, length = index
    stride = attrs["stride"] or size
    if not (0 <= start < size and length > 0 and start + length <= min(size, stride) and 0 < stride <= size):
        raise ValueError(f"select (start={start}, length={length}, stride={stride}) needs 0 <= start < {size}, "
                         f"length > 0, start + length <= stride <= {size}")
    return {**attrs, "index": (start, length), "stride": stride}


def _select_positions(size: int, start: int, length: int, stride: int):
    # TT-Buda's select: every `stride` elements, take `length` starting at `start`; past the end: zeros (-1).
    return [off + i if off + i < size else -1
            for off in range(0, size - start, stride) for i in range(start, start + length)]


def _select_shape(shapes, attrs):
    shape = list(shapes[0])
    d = normalize_dim(attrs["dim"], len(shape))
    start, length = attrs["index"]
    shape[d] = length * -(-(shape[d] - start) // attrs["stride"])
    return tuple(shape)


def _select_eval(x, attrs):
    t = x[0]
    d = attrs["dim"] % t.dim()
    size = t.shape[d]
    pos = _select_positions(size, attrs["index"][0], attrs["index"][1], attrs["stride"])
    if -1 in pos:
        zero_shape = list(t.shape)
        zero_shape[d] = 1
        t = torch.cat([t, torch.zeros(zero_shape, dtype=t.dtype)], d)
        pos = [size if p == -1 else p for p in pos]
    return torch.index_select(t, d, torch.tensor(pos, dtype=torch.int64))


def _select_bw(ac, operand, inputs, output, grad, attrs):
    shape = ac.shape(inputs[0])
    d = attrs["dim"] % len(shape)
    positions = _select_positions(shape[d], attrs["index"][0], attrs["index"][1], attrs["stride"])
    return ac.gather_backward(grad, d, positions, shape[d])


_tm("select", _select_shape, _select_eval,
    "TT-Buda's strided select: in every window of `stride` elements along dim, keep `length` elements "
    "from `start` (index=(start, length); an int index means length 1; stride=0 means the whole dim). "
    "Positions past the end read as zeros.",
    canonicalize=_select_canonical, dim=attr(int), index=attr(int, tuple), stride=attr(int, default=0),
    backward=_select_bw)


def _narrow_shape(shapes, attrs):
    shape = list(shapes[0])
    d = normalize_dim(attrs["dim"], len(shape))
    start, length = attrs["start"], attrs["length"]
    if start < 0 or length <= 0 or start + length > shape[d]:
        raise ValueError(f"narrow [{start}, {start + length}) is out of range for size {shape[d]}")
    shape[d] = length
    return tuple(shape)


def _narrow_bw(ac, operand, inputs, output, grad, attrs):
    shape = ac.shape(inputs[0])
    d = attrs["dim"] % len(shape)
    return ac.fit_dim(grad, d, attrs["start"], shape[d])


_tm("narrow", _narrow_shape, lambda x, a: x[0].narrow(a["dim"], a["start"], a["length"]),
    "Keep `length` elements from `start` along dim (original_length records the size before padding).",
    dim=attr(int), start=attr(int), length=attr(int), original_length=attr(int, default=None),
    backward=_narrow_bw)


# --- padding ---------------------------------------------------------------------------------------------


def _pad_plan(rank: int, attrs):
    """[(dim, before, after)] for a pad attr: pairs apply to c then r (or, channel-last, to w then h)."""
    pad = int_list(attrs["pad"], "pad")
    if len(pad) not in (2, 4) or any(p < 0 for p in pad):
        raise ValueError(f"pad must be (left, right) or (left, right, top, bottom) of non-negative ints, got {pad}")
    first = -2 if attrs["channel_last"] else -1
    pairs = len(pad) // 2
    if rank < pairs - first - 1:
        raise ValueError(f"a {len(pad)}-value pad{' (channel_last)' if attrs['channel_last'] else ''} "
                         f"needs rank >= {pairs - first - 1}, got rank {rank}")
    return [(first - i, pad[2 * i], pad[2 * i + 1]) for i in range(pairs)]


def _pad_shape(shapes, attrs):
    shape = list(shapes[0])
    for d, before, after in _pad_plan(len(shape), attrs):
        size = shape[d]
        if attrs["mode"] == "reflect" and max(before, after) >= size:
            raise ValueError(f"reflect padding ({before}, {after}) must be smaller than the padded dim ({size})")
        if attrs["mode"] == "replicate" and size == 0:
            raise ValueError("replicate padding of an empty dim")
        shape[d] = size + before + after
    return tuple(shape)


def pad_dim(t: torch.Tensor, dim: int, before: int, after: int, mode: str = "constant",
            value: float = 0.0) -> torch.Tensor:
    """Pad one dim of ``t`` by ``before``/``after`` elements (constant, replicate or reflect), any rank."""
    if before == 0 and after == 0:
        return t
    size = t.shape[dim]
    if mode == "constant":
        parts = []
        for n in (before, None, after):
            if n is None:
                parts.append(t)
            elif n:
                fill_shape = list(t.shape)
                fill_shape[dim] = n
                parts.append(torch.full(fill_shape, value, dtype=t.dtype))
        return torch.cat(parts, dim)
    pos = torch.arange(-before, size + after)
    if mode == "replicate":
        pos = pos.clamp(0, size - 1)
    else:  # reflect about the edge elements (the edges are not repeated)
        pos = pos.abs()
        pos = torch.where(pos > size - 1, 2 * (size - 1) - pos, pos)
    return torch.index_select(t, dim, pos)


def _pad_eval(x, attrs):
    t = x[0]
    for d, before, after in _pad_plan(t.dim(), attrs):
        t = pad_dim(t, d, before, after, attrs["mode"], attrs["value"])
    return t


def _pad_bw(ac, operand, inputs, output, grad, attrs):
    # Undo the pads last dim first: constant padding is cropped; replicate/reflect add every copy back
    # into its source element.
    shape = list(ac.shape(inputs[0]))
    plan = _pad_plan(len(shape), attrs)
    sizes = {}
    for d, before, after in plan:
        sizes[d] = shape[d]
    g = grad
    for d, before, after in reversed(plan):
        size = sizes[d]
        if attrs["mode"] == "constant":
            g = ac.crop(g, d, before, size)
            continue
        pos = torch.arange(-before, size + after)
        if attrs["mode"] == "replicate":
            pos = pos.clamp(0, size - 1)
        else:
            pos = pos.abs()
            pos = torch.where(pos > size - 1, 2 * (size - 1) - pos, pos)
        g = ac.gather_backward(g, d, pos.tolist(), size)
    return g


_tm("pad", _pad_shape, _pad_eval,
    "Pad the last dim by (left, right) and, with 4 values, the one before by (top, bottom); with "
    "channel_last the pads apply to dims -2 and -3 instead. Modes: constant (value), replicate, reflect.",
    pad=attr(tuple), mode=attr(str, default="constant", choices=("constant", "replicate", "reflect")),
    value=attr(float, default=0.0), channel_last=attr(bool, default=False),
    backward=_pad_bw, int_range=integer.moves_or_fill)


def _align_up(n: int) -> int:
    return -(-n // TILE_DIM) * TILE_DIM


def _pad_tile_shape(shapes, attrs):
    shape = list(shapes[0])
    d = normalize_dim(attrs["dim"], len(shape))
    shape[d] = _align_up(shape[d])
    return tuple(shape)


def _crop_to_input_bw(ac, operand, inputs, output, grad, attrs):
    """Backward of a zero/constant pad at the end of dims: the leading input-sized block of grad."""
    shape = ac.shape(inputs[0])
    g = grad
    for d in range(len(shape)):
        g = ac.crop(g, d, 0, shape[d])
    return g


_tm("pad_tile", _pad_tile_shape,
    lambda x, a: pad_dim(x[0], a["dim"], 0, _align_up(x[0].shape[a["dim"]]) - x[0].shape[a["dim"]]),
    "Zero-pad dim up to a multiple of the tile size (32).", dim=attr(int), original_length=attr(int),
    backward=_crop_to_input_bw)


def _buda_pad_plan(shape, attrs):
    paddings = int_list(attrs["paddings"], "paddings")
    if len(paddings) != 2 or min(paddings) < 0:
        raise ValueError(f"paddings must be (row_tiles, col_tiles) >= 0, got {paddings}")
    need_rank(shape, 2)
    # Per dim: zeros up to the tile boundary, then `tiles` whole tiles of `value` (only if tiles > 0).
    return [(d, _align_up(shape[d]) - shape[d] if tiles else 0, tiles * TILE_DIM)
            for d, tiles in ((-2, paddings[0]), (-1, paddings[1]))]


def _buda_pad_shape(shapes, attrs):
    shape = list(shapes[0])
    for d, align, extra in _buda_pad_plan(shape, attrs):
        shape[d] += align + extra
    return tuple(shape)


def _buda_pad_eval(x, attrs):
    t = x[0]
    for d, align, extra in _buda_pad_plan(tuple(t.shape), attrs):
        t = pad_dim(pad_dim(t, d, 0, align), d, 0, extra, value=attrs["value"])
    return t


_tm("buda_pad", _buda_pad_shape, _buda_pad_eval,
    "Pad rows/cols by whole tiles: paddings=(row_tiles, col_tiles); each padded dim is first zero-aligned "
    "to the tile size, then grown by tiles*32 elements of `value`.", paddings=attr(tuple), value=attr(float),
    backward=_crop_to_input_bw)


def _buda_unpad_shape(shapes, attrs):
    shape = list(shapes[0])
    orig = int_list(attrs["original_length"], "original_length")
    paddings = int_list(attrs["paddings"], "paddings")
    if len(orig) != 2 or len(paddings) != 2:
        raise ValueError("original_length and paddings must both be (rows, cols)")
    need_rank(shape, 2)
    for d, length, tiles in ((-2, orig[0], paddings[0]), (-1, orig[1], paddings[1])):
        expected = _align_up(length) + tiles * TILE_DIM if tiles else None
        if not 0 < length <= shape[d] or (expected is not None and shape[d] != expected):
            raise ValueError(f"dim {d} of size {shape[d]} does not hold original length {length} + {tiles} tile(s)")
        shape[d] = length
    return tuple(shape)


def _buda_unpad_bw(ac, operand, inputs, output, grad, attrs):
    shape = ac.shape(inputs[0])
    g = grad
    for d in (-2, -1):
        g = ac.fit_dim(g, d, 0, shape[d])
    return g


_tm("buda_unpad", _buda_unpad_shape,
    lambda x, a: x[0][..., :a["original_length"][0], :a["original_length"][1]],
    "Undo buda_pad: keep the first original_length=(rows, cols).",
    original_length=attr(tuple), paddings=attr(tuple),
    backward=_buda_unpad_bw)


# --- broadcast / repeat / squeeze / unsqueeze ------------------------------------------------------------


def _broadcast_shape(shapes, attrs):
    shape = list(shapes[0])
    dim = attrs["dim"]
    while dim < -len(shape):  # TT-Buda prepends size-1 dims to reach a negative dim
        shape.insert(0, 1)
    d = normalize_dim(dim, len(shape))
    size = attrs["shape"]
    _positive(size, "broadcast size")
    if shape[d] not in (1, size):
        raise ValueError(f"cannot broadcast dim {dim} of size {shape[d]} to {size}")
    shape[d] = size
    return tuple(shape)


def _broadcast_eval(x, attrs):
    out_shape = _broadcast_shape([tuple(x[0].shape)], attrs)
    t = x[0].reshape((1,) * (len(out_shape) - x[0].dim()) + tuple(x[0].shape))
    return t.expand(out_shape).contiguous()


def _broadcast_bw(ac, operand, inputs, output, grad, attrs):
    return ac.unbroadcast(grad, ac.shape(inputs[0]))


_tm("broadcast", _broadcast_shape, _broadcast_eval,
    "Grow a size-1 dim to `shape` elements by copying.", dim=attr(int), shape=attr(int),
    backward=_broadcast_bw)


def _repeat_shape(shapes, attrs):
    factors = int_list(attrs["factors"], "factors")
    shape = shapes[0]
    if len(factors) < len(shape) or any(f < 1 for f in factors):
        raise ValueError(f"repeat needs one factor >= 1 per dim (at least {len(shape)}), got {factors}")
    shape = (1,) * (len(factors) - len(shape)) + tuple(shape)
    return tuple(s * f for s, f in zip(shape, factors))


def _repeat_bw(ac, operand, inputs, output, grad, attrs):
    # Split every dim into (factor, size) and sum over the factors.
    factors = attrs["factors"]
    shape = ac.shape(inputs[0])
    full = (1,) * (len(factors) - len(shape)) + tuple(shape)
    split = tuple(v for f, s in zip(factors, full) for v in (f, s))
    g = ac.reshape(grad, split)
    for i, f in enumerate(factors):
        if f != 1:
            g = ac.op("reduce_sum", [g], {"dim": 2 * i})
    return ac.reshape(g, shape)


_tm("repeat", _repeat_shape, lambda x, a: x[0].repeat(*a["factors"]),
    "Tile the tensor `factors[i]` times along dim i (torch.Tensor.repeat).", factors=attr(tuple),
    backward=_repeat_bw)


def _squeeze_shape(shapes, attrs):
    shape = list(shapes[0])
    d = normalize_dim(attrs["dim"], len(shape))
    if shape[d] != 1:
        raise ValueError(f"cannot squeeze dim {attrs['dim']} of size {shape[d]}")
    del shape[d]
    return tuple(shape)


def _unsqueeze_shape(shapes, attrs):
    shape = list(shapes[0])
    shape.insert(normalize_dim(attrs["dim"], len(shape) + 1), 1)
    return tuple(shape)


_tm("squeeze", _squeeze_shape, lambda x, a: x[0].squeeze(a["dim"]), "Remove a size-1 dim.", dim=attr(int),
    backward=_reshape_bw)
_tm("unsqueeze", _unsqueeze_shape, lambda x, a: x[0].unsqueeze(a["dim"]), "Insert a size-1 dim.", dim=attr(int),
    backward=_reshape_bw)


def _pixel_shuffle_shape(shapes, attrs):
    shape = list(shapes[0])
    need_rank(shape, 3)
    r = attrs["upscale_factor"]
    _positive(r, "upscale_factor")
    if shape[-3] % (r * r):
        raise ValueError(f"channels ({shape[-3]}) are not divisible by upscale_factor^2 ({r * r})")
    return tuple(shape[:-3]) + (shape[-3] // (r * r), shape[-2] * r, shape[-1] * r)


def _pixel_shuffle_bw(ac, operand, inputs, output, grad, attrs):
    # Forward: [.., C, r, r, H, W] -> [.., C, H, r, W, r]; backward permutes back.
    shape = ac.shape(inputs[0])
    r = attrs["upscale_factor"]
    lead = tuple(shape[:-3])
    c, h, w = shape[-3] // (r * r), shape[-2], shape[-1]
    n = len(lead)
    g = ac.reshape(grad, lead + (c, h, r, w, r))
    perm = list(range(n)) + [n, n + 2, n + 4, n + 1, n + 3]
    return ac.reshape(ac.permute(g, perm), shape)


_tm("pixel_shuffle", _pixel_shuffle_shape, lambda x, a: torch.nn.functional.pixel_shuffle(x[0], a["upscale_factor"]),
    "[.., C*r*r, H, W] -> [.., C, H*r, W*r].", upscale_factor=attr(int),
    backward=_pixel_shuffle_bw)


# --- n-ary: concatenate / stack / interleave / binary_stack ----------------------------------------------


def _nary_dtype(dtypes, attrs):
    return result_dtype(*dtypes)


def _concat_shape(shapes, attrs):
    rank = len(shapes[0])
    d = normalize_dim(attrs["axis"], rank)
    for s in shapes[1:]:
        if len(s) != rank or any(a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != d):
            raise ValueError(f"concatenate along axis {attrs['axis']} needs equal shapes apart from that axis")
    out = list(shapes[0])
    out[d] = sum(s[d] for s in shapes)
    return tuple(out)


def _concat_eval(x, attrs):
    return torch.cat(operand_dtypes_to(x, result_dtype(*[t.dtype for t in x])), attrs["axis"])


def _float_operand(ac, name) -> bool:
    return ac.dtype(name).is_floating_point


def _concat_bw(ac, operand, inputs, output, grad, attrs):
    if not _float_operand(ac, inputs[operand]):
        return None
    d = attrs["axis"] % len(ac.shape(output))
    start = sum(ac.shape(i)[d] for i in inputs[:operand])
    return ac.crop(grad, d, start, ac.shape(inputs[operand])[d])


_tm("concatenate", _concat_shape, _concat_eval, "Join the operands along axis.", arity=(1, None),
    dtype_fn=_nary_dtype, axis=attr(int),
    backward=_concat_bw)


def _equal_shapes(shapes, op: str) -> None:
    if any(tuple(s) != tuple(shapes[0]) for s in shapes[1:]):
        raise ValueError(f"{op} needs operands of one shape")


def _stack_shape(shapes, attrs):
    _equal_shapes(shapes, "stack")
    out = list(shapes[0])
    out.insert(normalize_dim(attrs["axis"], len(out) + 1), len(shapes))
    return tuple(out)


def _stack_eval(x, attrs):
    return torch.stack(operand_dtypes_to(x, result_dtype(*[t.dtype for t in x])), attrs["axis"])


def _stack_bw(ac, operand, inputs, output, grad, attrs):
    if not _float_operand(ac, inputs[operand]):
        return None
    d = attrs["axis"] % len(ac.shape(output))
    return ac.reshape(ac.crop(grad, d, operand, 1), ac.shape(inputs[operand]))


_tm("stack", _stack_shape, _stack_eval, "Stack the operands along a new axis.", arity=(1, None),
    dtype_fn=_nary_dtype, axis=attr(int),
    backward=_stack_bw)


def _interleave_shape(shapes, attrs):
    _equal_shapes(shapes, "interleave")
    out = list(shapes[0])
    d = normalize_dim(attrs["axis"], len(out))
    _positive(attrs["stride"], "interleave stride")
    if out[d] % attrs["stride"]:
        raise ValueError(f"interleave stride {attrs['stride']} does not divide the axis ({out[d]})")
    out[d] *= len(shapes)
    return tuple(out)


def _interleave_eval(x, attrs):
    x = operand_dtypes_to(x, result_dtype(*[t.dtype for t in x]))
    d = attrs["axis"] % x[0].dim()
    stride = attrs["stride"]
    shape = tuple(x[0].shape)
    chunks = [t.reshape(shape[:d] + (shape[d] // stride, stride) + shape[d + 1:]) for t in x]
    out = torch.stack(chunks, d + 1)
    return out.reshape(shape[:d] + (shape[d] * len(x),) + shape[d + 1:])


def _interleave_bw(ac, operand, inputs, output, grad, attrs):
    if not _float_operand(ac, inputs[operand]):
        return None
    shape = ac.shape(inputs[operand])
    d, stride = attrs["axis"] % len(shape), attrs["stride"]
    g = ac.reshape(grad, shape[:d] + (shape[d] // stride, len(inputs), stride) + shape[d + 1:])
    return ac.reshape(ac.crop(g, d + 1, operand, 1), shape)


_tm("interleave", _interleave_shape, _interleave_eval,
    "Take `stride` elements along axis from each operand in turn (TT-Buda uses axis=-3, stride=1).",
    arity=(1, None), dtype_fn=_nary_dtype, axis=attr(int), stride=attr(int, default=1),
    backward=_interleave_bw)


def _binary_stack_shape(shapes, attrs):
    _equal_shapes(shapes, "binary_stack")
    out = list(shapes[0])
    out[normalize_dim(attrs["dim"], len(out))] *= 2
    return tuple(out)


def _binary_stack_eval(x, attrs):
    a, b = operand_dtypes_to(x, result_dtype(x[0].dtype, x[1].dtype))
    d = attrs["dim"] % a.dim()
    return torch.stack((a, b), d + 1).flatten(d, d + 1)


def _binary_stack_bw(ac, operand, inputs, output, grad, attrs):
    if not _float_operand(ac, inputs[operand]):
        return None
    shape = ac.shape(inputs[operand])
    d = attrs["dim"] % len(shape)
    g = ac.reshape(grad, shape[:d] + (shape[d], 2) + shape[d + 1:])
    return ac.reshape(ac.crop(g, d + 1, operand, 1), shape)


_tm("binary_stack", _binary_stack_shape, _binary_stack_eval,
    "Interleave A and B element by element along dim: a0 b0 a1 b1 ... (the dim doubles).", arity=(2, 2),
    dtype_fn=_nary_dtype, dim=attr(int),
    backward=_binary_stack_bw)
