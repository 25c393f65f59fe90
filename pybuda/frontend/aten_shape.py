"""Converters for ATen shape manipulation ops: views and reshapes, slices, concatenation, pads and crops.
Indexing (gathers, one-hot selection, bounds on pushed indices) is :mod:`pybuda.frontend.aten_index`.

Registered into :data:`pybuda.frontend.aten_builder.CONVERTERS` by the ``@converts`` decorator when
:mod:`pybuda.frontend.aten_map` imports this module.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from pybuda.frontend.aten_builder import (Builder, converts, Missing, RealView, out_dtype, out_shape, Unsupported, _dims, _norm_dim)
from pybuda.frontend.fx_program import meta_val, op_name

# --- shape manipulation ---------------------------------------------------------------------------
@converts("view", "_unsafe_view", "reshape", "flatten", "unflatten", "view_as", "reshape_as", "squeeze_copy",
          "view_copy", "_reshape_alias")
def _reshape(b: Builder, n, p):
    return b.reshape(p["self"], out_shape(n))


@converts("squeeze")
def _squeeze(b: Builder, n, p):
    x = b.tensor(p["self"])
    shape = b.shape(x)
    dims = [d for d in _dims(p.get("dim"), len(shape)) if shape[d] == 1] if len(shape) else []
    if len(dims) == 1:
        return b.op("squeeze", [x], dim=dims[0])
    return b.reshape(x, out_shape(n))


@converts("unsqueeze")
def _unsqueeze(b: Builder, n, p):
    x = b.tensor(p["self"])
    return b.op("unsqueeze", [x], dim=_norm_dim(p["dim"], b.rank(x) + 1))


@converts("transpose", "swapaxes", "swapdims")
def _transpose(b: Builder, n, p):
    return b.transpose(p["self"], p.get("dim0", p.get("axis0")), p.get("dim1", p.get("axis1")))


@converts("t", "numpy_T", "mT", "adjoint")
def _t(b: Builder, n, p):
    x = p["self"]
    if b.rank(x) < 2:
        return b.tensor(x)
    if op_name(n.target) == "numpy_T":
        return _permute_by(b, x, list(range(b.rank(x)))[::-1])
    return b.transpose(x, -2, -1)


def _permute_by(b: Builder, x: Any, dims: Sequence[int]) -> str:
    """A permutation as a chain of transposes (at most rank-1 of them)."""
    rank = b.rank(x)
    dims = [d % rank for d in dims]
    v = b.tensor(x)
    cur = list(range(rank))  # cur[i] = source dim now at position i
    for i in range(rank):
        if cur[i] != dims[i]:
            j = cur.index(dims[i])
            v = b.transpose(v, i, j)
            cur[i], cur[j] = cur[j], cur[i]
    return v


@converts("permute", "permute_copy")
def _permute(b: Builder, n, p):
    return _permute_by(b, p["self"], p["dims"])


@converts("expand", "expand_as", "broadcast_to", "expand_copy")
def _expand(b: Builder, n, p):
    return b.broadcast_to(p["self"], out_shape(n))


@converts("repeat")
def _repeat(b: Builder, n, p):
    x = b.tensor(p["self"])
    factors = tuple(int(f) for f in p["repeats"])
    shape = b.shape(x)
    if len(factors) > len(shape):
        x = b.reshape(x, (1,) * (len(factors) - len(shape)) + shape)
    if all(f == 1 for f in factors):
        return x
    return b.op("repeat", [x], factors=factors)


def _index_range(b: Builder, x: Any, dim: int, start: int, stop: int, step: int = 1) -> str:
    size = b.shape(x)[dim]
    if start == 0 and stop == size and step == 1:
        return b.tensor(x)
    if stop <= start:
        raise Unsupported("empty slice (zero-size tensors are not supported on the device)")
    return b.op("index", [x], dim=dim, start=start, stop=stop, stride=step)


@converts("slice", "slice_copy")
def _slice(b: Builder, n, p):
    x = p["self"]
    rank = b.rank(x)
    dim = _norm_dim(p["dim"], rank)
    size = b.shape(x)[dim]
    start = p["start"] if p["start"] is not None else 0
    end = p["end"] if p["end"] is not None else size
    step = p["step"] or 1
    r = range(size)[slice(start, end, step)]
    if len(r) == 0:
        raise Unsupported("empty slice (zero-size tensors are not supported on the device)")
    return _index_range(b, x, dim, r.start, r.start + (len(r) - 1) * step + 1, step)


@converts("select", "select_copy")
def _select(b: Builder, n, p):
    x = p["self"]
    if isinstance(x, RealView) and _norm_dim(p["dim"], b.rank(x.value.re) + 1) == b.rank(x.value.re):
        # view_as_real(z)[..., 0] / [..., 1]: the real or the imaginary part, read directly.
        return b.tensor(x.value.re) if p["index"] % 2 == 0 else b.imaginary(x.value)
    rank = b.rank(x)
    dim = _norm_dim(p["dim"], rank)
    idx = p["index"] % b.shape(x)[dim]
    v = _index_range(b, x, dim, idx, idx + 1)
    return b.op("squeeze", [v], dim=dim) if b.shape(v)[dim] == 1 and rank > 0 else v


@converts("narrow", "narrow_copy")
def _narrow(b: Builder, n, p):
    x = p["self"]
    dim = _norm_dim(p["dim"], b.rank(x))
    start = p["start"] % b.shape(x)[dim]
    return _index_range(b, x, dim, start, start + p["length"])


@converts("split", "split_with_sizes", "chunk", "tensor_split", "unsafe_split", "unsafe_split_with_sizes",
          "split_copy", "split_with_sizes_copy")
def _split(b: Builder, n, p):
    x = p["self"]
    rank = b.rank(x)
    dim = _norm_dim(p.get("dim", 0), rank)
    outs = []
    offset = 0
    for val in meta_val(n):
        size = int(val.shape[dim])
        if size == 0:
            outs.append(Missing("empty split piece"))
            continue
        outs.append(_index_range(b, x, dim, offset, offset + size))
        offset += size
    return outs


@converts("unbind", "unbind_copy")
def _unbind(b: Builder, n, p):
    x = p["self"]
    dim = _norm_dim(p.get("dim", 0), b.rank(x))
    return [b.op("squeeze", [_index_range(b, x, dim, i, i + 1)], dim=dim) for i in range(b.shape(x)[dim])]


@converts("cat", "concat", "concatenate")
def _cat(b: Builder, n, p):
    dt = out_dtype(n)
    parts = [t for t in p["tensors"] if not (b.is_tensor(t) and math.prod(b.shape(t)) == 0)]
    if not parts:
        raise Unsupported("concatenation of empty tensors")
    names = [b.tensor(t, dt) for t in parts]
    if len(names) == 1:
        return names[0]
    return b.op("concatenate", names, axis=_norm_dim(p["dim"], len(out_shape(n))))


@converts("slice_scatter", "select_scatter")
def _slice_scatter(b: Builder, n, p):
    """``input`` with ``src`` written over a contiguous range of ``dim`` (``x[:, a:b] = src`` in a functional
    graph; ``select_scatter`` writes one index): the kept parts of ``input`` and ``src`` concatenated."""
    x = p["self"]
    shape = b.shape(x)
    dim = _norm_dim(p["dim"], len(shape))
    size = shape[dim]
    if op_name(n.target) == "select_scatter":
        start = p["index"] % size
        stop, step = start + 1, 1
        src = b.reshape(p["src"], shape[:dim] + (1,) + shape[dim + 1:])
    else:
        r = range(size)[slice(p.get("start"), p.get("end"), p.get("step") or 1)]
        start, stop, step = r.start, r.stop, r.step
        src = p["src"]
        if len(r) == 0:
            return b.tensor(x)
    if step != 1:
        raise Unsupported("slice_scatter with a step (a strided write)")
    dt = out_dtype(n)
    parts = ([_index_range(b, x, dim, 0, start)] if start > 0 else []) + [src] + \
        ([_index_range(b, x, dim, stop, size)] if stop < size else [])
    names = [b.tensor(v, dt) for v in parts]
    return names[0] if len(names) == 1 else b.op("concatenate", names, axis=dim)


@converts("roll")
def _roll(b: Builder, n, p):
    """``torch.roll`` as two slices and a concatenate per rolled dim (Swin's cyclic window shift)."""
    x = p["self"]
    shifts = list(p["shifts"]) if isinstance(p["shifts"], (list, tuple)) else [p["shifts"]]
    dims = list(p["dims"] or [])
    shape = b.shape(x)
    if not dims:  # roll of the flattened tensor
        flat = b.reshape(x, (math.prod(shape),))
        return b.reshape(_roll_dim(b, flat, int(shifts[0]), 0), shape)
    if len(shifts) != len(dims):
        raise Unsupported("roll with a different number of shifts and dims")
    v = b.tensor(x)
    for shift, dim in zip(shifts, dims):
        v = _roll_dim(b, v, int(shift), _norm_dim(dim, len(shape)))
    return v


def _roll_dim(b: Builder, x: str, shift: int, dim: int) -> str:
    size = b.shape(x)[dim]
    cut = size - shift % size  # the last shift % size elements move to the front
    if cut == size:
        return x
    return b.op("concatenate", [_index_range(b, x, dim, cut, size), _index_range(b, x, dim, 0, cut)], axis=dim)


@converts("stack")
def _stack(b: Builder, n, p):
    dt = out_dtype(n)
    names = [b.tensor(t, dt) for t in p["tensors"]]
    axis = _norm_dim(p["dim"], len(out_shape(n)))
    if len(names) == 1:
        return b.op("unsqueeze", names, dim=axis)
    return b.op("stack", names, axis=axis)


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "replicate"}


@converts("pad", "constant_pad_nd", "reflection_pad2d", "reflection_pad1d", "replication_pad2d",
          "replication_pad1d")
def _pad(b: Builder, n, p):
    name = op_name(n.target)
    x = b.tensor(p["self"])
    pad = [int(v) for v in (p["pad"] if "pad" in p else p["padding"])]
    if name.startswith("reflection"):
        mode = "reflect"
    elif name.startswith("replication"):
        mode = "replicate"
    else:
        mode = p.get("mode") or "constant"
    if mode == "circular":
        return _pad_circular(b, x, pad)
    if mode not in _PAD_MODES:
        raise Unsupported(f"padding mode {mode!r}")
    value = p.get("value")
    return padded(b, x, pad, mode, float(value) if value is not None else 0.0)


def padded(b: Builder, x: str, pad: Sequence[int], mode: str = "constant", value: float = 0.0) -> str:
    """``x`` padded as ``F.pad(x, pad, mode, value)`` pads it (pairs from the last dim out; negative amounts crop)."""
    pad = list(pad)
    if any(v < 0 for v in pad) and mode == "constant":
        # A negative pad crops: slice those sides off, then pad the rest.
        x = _crop(b, x, pad)
        pad = [max(v, 0) for v in pad]
    if any(v < 0 for v in pad):
        if mode != "constant":
            raise Unsupported(f"negative {mode} padding (cropping)")
        # A negative pad crops (RWKV's time shift, ZeroPad2d((0, 0, 1, -1))): slice first, pad the rest.
        rank = b.rank(x)
        if len(pad) // 2 > rank:
            raise Unsupported(f"padding of {len(pad) // 2} dims of a rank-{rank} tensor ({pad})")
        for i in range(len(pad) // 2):
            before, after = pad[2 * i], pad[2 * i + 1]
            if before >= 0 and after >= 0:
                continue
            dim = rank - 1 - i
            size = b.shape(x)[dim]
            x = _index_range(b, x, dim, max(0, -before), size + min(0, after))
            pad[2 * i], pad[2 * i + 1] = max(0, before), max(0, after)
    if all(v == 0 for v in pad):
        return x
    # pybuda's pad covers the last two dims only; trailing zero pairs are dropped (MobileBERT pads the
    # sequence dim of a [batch, seq, hidden] tensor as [0, 0, 0, 1, 0, 0]).
    while len(pad) > 2 and pad[-1] == 0 and pad[-2] == 0:
        pad = pad[:-2]
    rank = b.rank(x)
    if len(pad) // 2 > rank:
        raise Unsupported(f"padding of {len(pad) // 2} dims of a rank-{rank} tensor ({pad})")
    v = x
    if any(pad[:4]):
        v = b.op("pad", [x], pad=tuple(pad[:4]), mode=mode, value=value, channel_last=False)
    outer = pad[4:]
    # Dims further out: move each to the last position, pad it there, move it back (any mode).
    for i in range(len(outer) // 2):
        before, after = outer[2 * i], outer[2 * i + 1]
        if before == 0 and after == 0:
            continue
        dim = rank - 3 - i
        v = b.transpose(v, dim, rank - 1)
        v = b.op("pad", [v], pad=(before, after), mode=mode, value=value, channel_last=False)
        v = b.transpose(v, dim, rank - 1)
    return v


def _crop(b: Builder, x: str, pad: Sequence[int]) -> str:
    """``x`` with the sides ``pad`` gives negative amounts for (last dim first, as torch orders pads) sliced off."""
    rank = b.rank(x)
    for i in range(len(pad) // 2):
        dim = rank - 1 - i
        lo, hi = -min(pad[2 * i], 0), -min(pad[2 * i + 1], 0)
        if lo or hi:
            x = _index_range(b, x, dim, lo, b.shape(x)[dim] - hi)
    return x


def _pad_circular(b: Builder, x: str, pad: Sequence[int]) -> str:
    """Circular padding: each padded dim gets its last ``left`` elements before it and its first ``right``
    after it (slices and one concatenate, data movement the device runs)."""
    rank = b.rank(x)
    for i in range(len(pad) // 2):
        dim = rank - 1 - i
        left, right = int(pad[2 * i]), int(pad[2 * i + 1])
        size = b.shape(x)[dim]
        if left > size or right > size or left < 0 or right < 0:
            raise Unsupported(f"circular padding by a negative amount or more than the dim's size ({pad} of "
                              f"{list(b.shape(x))})")
        parts = ([_index_range(b, x, dim, size - left, size)] if left else []) + [x] + \
                ([_index_range(b, x, dim, 0, right)] if right else [])
        if len(parts) > 1:
            x = b.op("concatenate", parts, axis=dim)
    return b.tensor(x)


@converts("tril", "triu")
def _tril_triu(b: Builder, n, p):
    x = b.tensor(p["self"])
    shape = b.shape(x)
    rows, cols = shape[-2], shape[-1]
    ones = torch.ones(rows, cols, dtype=torch.bool)
    mask = torch.tril(ones, p["diagonal"]) if op_name(n.target) == "tril" else torch.triu(ones, p["diagonal"])
    dt = b.dtype(x)
    return b.op("where", [b.const(mask, f"{n.name}.mask"), x, b.scalar(0, dt, 1)])
