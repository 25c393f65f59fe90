"""Converters for ATen indexing ops: gathers by constant or run-time indices, one-hot selection, and the
bounds a pushed index must keep for a gather to run on the device.

Registered into :data:`pybuda.frontend.aten_builder.CONVERTERS` by the ``@converts`` decorator when
:mod:`pybuda.frontend.aten_map` imports this module. Shape manipulation is :mod:`pybuda.frontend.aten_shape`.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Tuple

import torch

from pybuda.frontend.aten_builder import (Builder, Const, converts, out_shape, Unsupported, _norm_dim)
from pybuda.frontend.aten_shape import _index_range, _permute_by
from pybuda.ir.graph import CONSTANT

# --- indexing -------------------------------------------------------------------------------------
#: A gather with constant indices becomes slices + one concatenate when the indices form at most this many
#: strided runs (a roll is two, a window shift four); beyond it a one-hot matmul is cheaper than a long concat.
MAX_SLICE_RUNS = 8
#: Largest one-hot selection matrix (elements) a constant gather may use; bigger gathers stay ``adv_index``.
MAX_ONE_HOT_ELEMENTS = 1 << 22


def _strided_runs(index: Sequence[int]) -> List[Tuple[int, int, int]]:
    """``index`` as maximal ``(start, stop, stride)`` runs with a positive stride (a lone index is a run)."""
    runs: List[Tuple[int, int, int]] = []
    i, n = 0, len(index)
    while i < n:
        start = index[i]
        step = index[i + 1] - start if i + 1 < n else 0
        if step <= 0:
            runs.append((start, start + 1, 1))
            i += 1
            continue
        j = i + 1
        while j + 1 < n and index[j + 1] - index[j] == step:
            j += 1
        runs.append((start, index[j] + 1, step))
        i = j + 1
    return runs


def const_gather(b: Builder, x: Any, index: torch.Tensor, dim: int, name: str) -> str:
    """``index_select(x, dim, index)`` for an index known at capture time, in ops the device runs.

    The chip has no gather, but a constant gather is data movement it can do: a few strided runs (rolls,
    window shifts, reversed halves) become slices joined by one concatenate; any other pattern (relative
    position tables, permutations) becomes a matmul with a constant one-hot selection matrix: each output
    reads one input times 1.0, exact in every data format (at Float32 by ``passes/lowered/exact_pickers``). Integer data and one-hot matrices
    above :data:`MAX_ONE_HOT_ELEMENTS` keep the ``adv_index`` op (the host runs it).
    """
    shape = b.shape(x)
    size = shape[dim]
    flat = index.reshape(-1).to(torch.int64)
    flat = torch.where(flat < 0, flat + size, flat)
    if flat.numel() == 0:
        raise Unsupported("gather of no elements (zero-size tensors are not supported on the device)")
    if int(flat.min()) < 0 or int(flat.max()) >= size:
        raise Unsupported(f"index out of range for dim {dim} of size {size}")
    values = [int(v) for v in flat]
    if values == list(range(size)):
        return b.tensor(x)
    runs = _strided_runs(values)
    if len(runs) <= MAX_SLICE_RUNS:
        parts = [_index_range(b, x, dim, start, stop, step) for start, stop, step in runs]
        return parts[0] if len(parts) == 1 else b.op("concatenate", parts, axis=dim)
    dtype = b.dtype(x)
    if not (dtype.is_floating_point or dtype == torch.bool) or len(values) * size > MAX_ONE_HOT_ELEMENTS:
        return b.op("adv_index", [x, b.const(flat.contiguous(), f"{name}.index")], dim=dim)
    work = torch.float32 if dtype == torch.bool else dtype
    one_hot = torch.nn.functional.one_hot(flat, size).to(work)  # [len(index), size]
    v = b.cast(x, work)
    outer, inner = math.prod(shape[:dim]), math.prod(shape[dim + 1:])
    if inner == 1:  # gather along the last (effective) dim: x @ one_hot^T
        v = b.reshape(v, (outer, size))
        out = b.op("matmul", [v, b.const(one_hot.t().contiguous(), f"{name}.select")])
    else:
        v = b.reshape(v, (outer, size, inner) if outer > 1 else (size, inner))
        out = b.op("matmul", [b.const(one_hot, f"{name}.select"), v])
    out = b.reshape(out, shape[:dim] + (len(values),) + shape[dim + 1:])
    return b.cast(out, dtype) if dtype == torch.bool else out


#: Largest dim a run-time index selects along by comparing it whole with ``arange``: the chip reads an elementwise
#: op's operands through 19-bit source registers, which hold integers exactly up to 2**11 (as
#: ``lookups.EMBEDDING_MAX_VOCAB``); a larger index could match its neighbour.
RUNTIME_INDEX_MAX = 2 ** 11


def _proven_in_range(b: Builder, idx: Any, size: int, negative_ids: bool = False) -> Optional[Tuple[int, int]]:
    """The integer range (:mod:`pybuda.ops.integer`) of the run-time index ``idx`` when it proves every index
    within ``[0, size)`` (torch raises otherwise), or within ``[-size, size)`` with ``negative_ids`` (a negative
    index counts from the end), and a one-hot of it is small enough to build; else None."""
    from pybuda.ops.integer import integer_range

    if not isinstance(idx, str) or b.dtype(idx).is_floating_point or b.dtype(idx) == torch.bool:
        return None
    r = (0.0, size - 1.0) if _masked_label(b, idx, size) else integer_range(b.graph, idx)
    low = -size if negative_ids else 0
    if r is None or r[0] < low or r[1] > size - 1 or math.prod(b.shape(idx)) * size > MAX_ONE_HOT_ELEMENTS or \
            size > RUNTIME_INDEX_MAX:
        return None
    return r


def _one_hot_rows(b: Builder, idx: Any, size: int, negative_ids: bool = False) -> Optional[str]:
    """``[n, size]`` float one-hot rows of the run-time integer index ``idx`` (flattened to n), when
    :func:`_proven_in_range`; else None. A comparison with ``arange(size)``, and for a range reaching below 0 also
    with ``arange(size) - size`` (at most one of the two matches: their sum is 0/1): exact in every format."""
    r = _proven_in_range(b, idx, size, negative_ids)
    if r is None:
        return None
    column = b.reshape(b.cast(idx, torch.float32), (math.prod(b.shape(idx)), 1))
    positions = torch.arange(size, dtype=torch.float32).reshape(1, size)
    hits = [b.cast(b.op("equal", [column, b.const(p, "positions")]), torch.float32)
            for p in ((positions,) if r[0] >= 0 else (positions, positions - size))]
    return hits[0] if len(hits) == 1 else b.op("add", hits)


#: Ops whose result holds every value of their operand (and no other): a bound on the result is one on the operand.
_WHOLE_VALUE_MOVES = ("reshape", "transpose", "squeeze", "unsqueeze", "broadcast")


def _masked_label(b: Builder, idx: str, size: int) -> bool:
    """Whether the run-time index ``idx`` is a pushed integer label with its ignored value masked out,
    ``where(label != V, label, c)`` (or ``where(label == V, c, label)``) through whole-value moves, with constants
    ``V`` (one value) and ``c`` (a scalar or ``zeros_like(label)``: values in ``[0, size)``): what a loss's ``ignore_index`` makes of the target before gathering
    the log-probabilities (``cross_entropy``, ``nll_loss``). The host then refuses a push whose label is neither
    in ``[0, size)`` nor ``V`` (as torch raises on such a target), so ``idx`` is within ``[0, size)``."""
    from pybuda.ir.graph import OP

    node = b.graph[idx]
    while node.kind == OP and node.op_type in _WHOLE_VALUE_MOVES and len(node.operands) == 1:
        node = b.graph[node.operands[0]]
    if node.kind != OP or node.op_type != "where" or len(node.operands) != 3:
        return False
    cond, yes, no = node.operands
    test = b.graph[cond]
    if test.kind == OP and test.op_type == "cast" and len(test.operands) == 1:
        test = b.graph[test.operands[0]]
    if test.kind != OP or test.op_type not in ("not_equal", "equal") or len(test.operands) != 2:
        return False
    label, fill = (yes, no) if test.op_type == "not_equal" else (no, yes)
    if label not in test.operands:
        return False
    ignored = _known_value(b, test.operands[1] if test.operands[0] == label else test.operands[0])
    fill_value = _known_value(b, fill)
    if ignored is None or fill_value is None or not ignored.numel() or not fill_value.numel():
        return False
    ignored, fill_value = ignored.to(torch.float64), fill_value.to(torch.float64)
    v = float(ignored.flatten()[0])
    if not bool((ignored == v).all()) or v != round(v) or not bool((fill_value == fill_value.round()).all()) \
            or float(fill_value.min()) < 0 or float(fill_value.max()) > size - 1:
        return False  # one ignored value; fills (a scalar, or zeros_like(label)) that are all valid indices
    return bound_pushed_index(b, label, 0, size - 1, also=(v,))


def bound_pushed_index(b: Builder, index: str, low: int, high: int, whole: bool = True,
                       also: Sequence[float] = ()) -> bool:
    """When ``index`` is a pushed graph input (reshaped, transposed, broadcast, squeezed), or one slice of one
    (``edges[1]`` of an edge list), let the host refuse a push holding an index outside ``[low, high]`` (an
    ``InputError``, as torch raises on such an index); the index's integer range is then proven
    (:func:`pybuda.ops.integer.integer_range`). A whole input gets a ``value_range`` tag, which another reader's
    bound narrows (``whole``: False leaves a whole input to its other readers, e.g. the lookups pass); a slice
    adds a ``value_regions`` entry to the input and tags the slice itself, so that other parts of the input (the
    sources of the edge list, indexing another node set) keep their own bounds. ``also``: single values allowed
    besides. Returns whether the host now checks the bound."""
    from pybuda.ir.graph import INPUT, OP
    from pybuda.ops.integer import narrow_value_range

    node, part, k = b.graph[index], None, 0  # k: the sliced dim, in the coordinates of the current node
    while node.kind == OP and len(node.operands) == 1:
        operand = b.graph[node.operands[0]]
        if part is None and node.op_type in _WHOLE_VALUE_MOVES:
            pass
        elif part is None and node.op_type == "index" and node.attrs.get("stride", 1) == 1:
            part, k = node, node.attrs["dim"] % len(operand.shape)
        elif part is not None and node.op_type == "squeeze":  # between the slice and the input: size-1 dims only
            k = k if k < node.attrs["dim"] % len(operand.shape) else k + 1
        elif part is not None and node.op_type == "unsqueeze" and k != node.attrs["dim"] % len(node.shape):
            k = k if k < node.attrs["dim"] % len(node.shape) else k - 1
        else:
            return False
        node = operand
    if node.kind != INPUT or node.dtype.is_floating_point or node.dtype == torch.bool:
        return False
    if part is None:
        if whole:
            narrow_value_range(node.tags, low, high, also)
        return whole
    if k == 0:
        return False  # dim 0 holds the samples of a push: a bound there would depend on the push's position
    region = (k, part.attrs["start"], part.attrs["stop"], low, high)
    node.tags.setdefault("value_regions", []).append(region + ((tuple(also),) if also else ()))
    narrow_value_range(part.tags, low, high, also)
    return True


def one_hot_matmul(b: Builder, one_hot: str, data: str, data_input: int = 1) -> str:
    """``one_hot @ data`` where each row of the run-time 0/1 matrix ``one_hot`` picks (or, with several ones, sums)
    rows of ``data`` (``data_input`` 0: ``data @ one_hot``, each column picking columns): tagged as the lookups'
    one-hot matmuls are, so that the lowering passes the data whole (its Float32 pieces,
    ``exact_pickers.ONE_HOT_COPY``, at HiFi2 or above) rather than as LoFi's 4 fraction bits."""
    from pybuda.passes.graph.lookups import ONE_HOT_FIDELITY
    from pybuda.passes.lowered.exact_pickers import ONE_HOT_COPY

    operands = [one_hot, data] if data_input == 1 else [data, one_hot]
    out = b.op("matmul", operands)
    b.graph[out].tags.update({ONE_HOT_COPY: data_input, "min_fidelity": ONE_HOT_FIDELITY})
    return out


def _runtime_gather(b: Builder, x: Any, idx: Any, dim: int, final_shape: Sequence[int],
                    negative_ids: bool = False) -> Optional[str]:
    """``index_select(x, dim, idx)`` for a run-time index proven in range: the one-hot rows times ``x`` (a
    matmul), which the device runs (CLIP's pooled token, a decoder classifier's last token). None otherwise."""
    shape = b.shape(x)
    if not b.dtype(x).is_floating_point or not isinstance(idx, str):
        return None
    # a slice of a pushed input (an edge list's sources): the host checks that part
    bound_pushed_index(b, idx, -shape[dim] if negative_ids else 0, shape[dim] - 1, whole=False)
    one_hot = _one_hot_rows(b, idx, shape[dim], negative_ids)
    if one_hot is None:
        return None
    order = [dim] + [k for k in range(len(shape)) if k != dim]
    moved = b.reshape(_permute_by(b, x, order), (shape[dim], max(1, math.prod(shape) // shape[dim])))
    out = one_hot_matmul(b, b.cast(one_hot, b.dtype(x)), moved)
    n = math.prod(b.shape(idx))
    out = b.reshape(out, (n,) + tuple(shape[k] for k in order[1:]))
    return b.reshape(_permute_by(b, out, [order.index(k) if k != dim else 0 for k in range(len(shape))]),
                     final_shape)


def _adv_index(b: Builder, x: Any, idx: Any, dim: int, final_shape: Sequence[int], negative_ids: bool = True) -> str:
    """``x`` indexed by ``idx`` along ``dim``; ``negative_ids``: whether the framework counts a negative index from
    the end (``x[idx]``) rather than refusing it (``index_select``)."""
    if b.dtype(idx) == torch.bool:
        raise Unsupported("boolean-mask indexing has a data-dependent shape")
    if isinstance(idx, Const) and not isinstance(x, Const):
        name = b.node.name if b.node is not None else "gather"
        return b.reshape(const_gather(b, x, idx.value, dim, name), final_shape)
    if not isinstance(idx, Const) and not isinstance(x, Const):
        out = _runtime_gather(b, x, idx, dim, final_shape, negative_ids)
        if out is not None:
            return out
    if not isinstance(idx, Const) and isinstance(x, Const) and x.value.is_floating_point():
        # a constant table (built in the forward) at a run-time index is gathered like a computed one
        table = b.const(x.value, "table")
        out = _runtime_gather(b, table, idx, dim, final_shape, negative_ids)
        if out is not None:
            return out
        b.graph.remove(table)
    idx_shape = b.shape(idx)
    flat = b.reshape(idx, (max(1, math.prod(idx_shape)),)) if len(idx_shape) != 1 else b.tensor(idx)
    r = b.op("adv_index", [x, flat], dim=dim, negative_ids=negative_ids)
    return b.reshape(r, final_shape)


@converts("index")
def _index(b: Builder, n, p):
    x = p["self"]
    indices = list(p["indices"])
    used = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(used) == 1:
        dim, idx = used[0]
        return _adv_index(b, x, idx, dim, out_shape(n))
    return _multi_index(b, n, x, used)


def _multi_index(b: Builder, n, x: Any, used: List[Tuple[int, Any]]) -> str:
    """``x[i, j]`` with constant index tensors on adjacent dims: one gather on the flattened dims.

    (Mask builders index a bool mask by broadcast batch/position index tensors like this.)
    """
    dims = [d for d, _ in used]
    if dims != list(range(dims[0], dims[0] + len(dims))):
        raise Unsupported("advanced indexing on non-adjacent dims")
    if not all(isinstance(i, Const) for _, i in used):
        out = _row_wise_index(b, n, x, used)
        if out is not None:
            return out
        raise Unsupported("advanced indexing with more than one index tensor computed at run time")
    if any(i.value.dtype == torch.bool for _, i in used):
        raise Unsupported("boolean-mask indexing has a data-dependent shape")
    shape = b.shape(x)
    start, stop = dims[0], dims[-1] + 1
    sizes = shape[start:stop]
    flat = torch.zeros((), dtype=torch.int64)
    for (d, idx), size in zip(used, sizes):
        flat = flat * size + idx.value.to(torch.int64) % size
    flat = torch.broadcast_to(flat, torch.broadcast_shapes(*(i.value.shape for _, i in used))).reshape(-1)
    merged = b.reshape(x, shape[:start] + (math.prod(sizes),) + shape[stop:])
    if isinstance(x, Const):
        out = b.op("adv_index", [merged, b.const(flat.contiguous(), f"{n.name}.flat_index")], dim=start)
    else:
        out = const_gather(b, merged, flat, start, n.name)
    return b.reshape(out, out_shape(n))


def _row_wise_index(b: Builder, n, x: Any, used: List[Tuple[int, Any]]) -> Optional[str]:
    """``x[arange(rows), idx]``: one run-time index per row, proven in range (a classifier reading each row's
    last token, CLIP's end-of-text token). Each row's one-hot times that row of ``x`` (a batched matmul)."""
    if len(used) != 2 or not isinstance(used[0][1], Const) or isinstance(used[1][1], Const):
        return None
    (d, rows_index), (_, idx) = used
    shape = b.shape(x)
    rows, size = shape[d], shape[d + 1]
    if d != 0 or b.shape(idx) != (rows,) or not b.dtype(x).is_floating_point:
        return None
    picked = rows_index.value.reshape(-1)
    if picked.numel() != rows or not torch.equal(picked.to(torch.int64), torch.arange(rows)):
        return None
    one_hot = _one_hot_rows(b, idx, size)
    if one_hot is None:
        return None
    rest = math.prod(shape[2:])
    data = b.reshape(x, (rows, size, rest))
    out = b.op("matmul", [b.reshape(b.cast(one_hot, b.dtype(x)), (rows, 1, size)), data])
    return b.reshape(out, out_shape(n))


@converts("index_select")
def _index_select(b: Builder, n, p):
    x = p["self"]
    # torch refuses a negative index here (x[idx] wraps it): a device run refuses such a push too.
    return _adv_index(b, x, p["index"], _norm_dim(p["dim"], b.rank(x)), out_shape(n), negative_ids=False)


@converts("gather")
def _gather(b: Builder, n, p):
    """``gather(x, dim, index)``: an index known at capture time (DeBERTa's relative-position tables) is a
    constant gather the device runs (:func:`_const_index_gather`); a run-time index proven in range is a batched
    one-hot matmul (:func:`_runtime_index_gather`); any other is one adv_index over the flattened ``x``."""
    x, idx = p["self"], p["index"]
    xs, ish = b.shape(x), b.shape(idx)
    rank = len(xs)
    if rank == 0 or len(ish) != rank:
        raise Unsupported("gather on a scalar")
    dim = _norm_dim(p["dim"], rank)
    if any(ish[k] > xs[k] for k in range(rank) if k != dim):
        raise Unsupported(f"gather index of shape {list(ish)} is larger than the input {list(xs)} off dim {dim}")
    table = _known_value(b, x)
    if table is not None and _known_value(b, idx) is None:
        out = _gather_of_uniform_table(b, x, table, idx, dim, ish)
        if out is not None:
            return out
    known = _known_value(b, idx)
    if known is not None and not isinstance(x, Const):
        out = _const_index_gather(b, x, known, dim, n.name)
        if out is not None:
            return out
    out = _runtime_index_gather(b, x, idx, dim) if known is None else None
    return out if out is not None else _flat_index_gather(b, n, x, idx, dim)


def _flat_index_gather(b: Builder, n, x: Any, idx: Any, dim: int) -> str:
    """``gather`` as one adv_index over the flattened ``x`` at computed flat indices (the host's form)."""
    xs, ish = b.shape(x), b.shape(idx)
    rank = len(xs)
    strides = [math.prod(xs[k + 1:]) for k in range(rank)]
    # Offset of every index position in the flattened x, ignoring the gathered dim.
    base = torch.zeros(ish, dtype=torch.int64)
    for k in range(rank):
        if k != dim:
            pos = torch.arange(ish[k], dtype=torch.int64).reshape([-1 if j == k else 1 for j in range(rank)])
            base = base + pos * strides[k]
    index = b.tensor(idx, torch.int64)
    flat = b.op("add", [b.binary("multiply", index, strides[dim], torch.int64), b.const(base, f"{n.name}.offsets")])
    flat = b.reshape(flat, (max(1, math.prod(ish)),))
    out = b.op("adv_index", [b.reshape(x, (math.prod(xs),)), flat], dim=0)
    return b.reshape(out, ish)


def _gathered_region(b: Builder, x: Any, ish: Sequence[int], dim: int) -> str:
    """The part of ``x`` a ``gather`` along ``dim`` with an index of shape ``ish`` reads: the leading ``ish[k]``
    positions of every other dim."""
    v = b.tensor(x)
    for k, size in enumerate(b.shape(x)):
        if k != dim and ish[k] < size:
            v = _index_range(b, v, k, 0, ish[k])
    return v


def _runtime_index_gather(b: Builder, x: Any, idx: Any, dim: int) -> Optional[str]:
    """``gather(x, dim, idx)`` at a run-time index proven in range (a pushed label read from the log-probabilities,
    the k nearest neighbours' features at ``topk``'s indices): for each position off ``dim``, that slice of ``x``
    (a row) times the one-hot columns of its indices, one small matmul per position (batched). The data stays in
    rows, so nothing moves it through a transpose. A pushed index is bound to ``[0, size)`` (the host refuses
    others, as torch raises). None when the range is not proven."""
    if not isinstance(idx, str) or not b.dtype(x).is_floating_point:
        return None
    xs, ish = b.shape(x), b.shape(idx)
    rank, size = len(xs), xs[dim]
    bound_pushed_index(b, idx, 0, size - 1)
    if _proven_in_range(b, idx, size) is None:
        return None
    v = _gathered_region(b, x, ish, dim)
    order = [k for k in range(rank) if k != dim] + [dim]
    rest, taken = math.prod(ish[k] for k in order[:-1]), ish[dim]
    ids = b.reshape(b.cast(_permute_by(b, idx, order), torch.float32), (rest, 1, taken))
    positions = b.const(torch.arange(size, dtype=torch.float32).reshape(1, size, 1), "positions")
    one_hot = b.cast(b.op("equal", [ids, positions]), b.dtype(x))  # [rest, size, taken]
    data = b.reshape(_permute_by(b, v, order), (rest, 1, size))
    out = b.reshape(one_hot_matmul(b, one_hot, data, data_input=0), tuple(ish[k] for k in order))
    return _permute_by(b, out, [order.index(k) for k in range(rank)])


def _gather_of_uniform_table(b: Builder, x: Any, table: torch.Tensor, idx: Any, dim: int,
                             ish: Sequence[int]) -> Optional[str]:
    """``gather(x, dim, idx)`` of a constant ``x`` that holds one value along ``dim`` (RoBERTa's all-zero
    ``token_type_ids`` buffer gathered at the position ids): every index in range reads that value, so the result
    is the constant itself, broadcast to the index's shape. Only when ``idx`` is provably in range (its integer
    range, :mod:`pybuda.ops.integer`); torch raises on an index out of range. None when it does not apply."""
    from pybuda.ops.integer import integer_range

    if table.numel() == 0 or not bool((table == table.narrow(dim, 0, 1)).all()):
        return None
    r = integer_range(b.graph, b.tensor(idx)) if isinstance(idx, str) else None
    if r is None or r[0] < -table.shape[dim] or r[1] > table.shape[dim] - 1:
        return None
    value = table.narrow(dim, 0, 1)
    value = value[tuple(slice(0, ish[k]) if k != dim else slice(None) for k in range(table.dim()))]
    return b.broadcast_to(b.const(value.contiguous(), "uniform_gather"), ish)


def _known_value(b: Builder, v: Any) -> Optional[torch.Tensor]:
    """The value of tensor ``v`` when it is known at capture time (a Const, or a constant node the builder
    folded), else None."""
    if isinstance(v, Const):
        return v.value
    if isinstance(v, str) and b.graph[v].kind == CONSTANT:
        return b.graph.tensors[v]
    return None


def _const_index_gather(b: Builder, x: Any, index: torch.Tensor, dim: int, name: str) -> Optional[str]:
    """``gather(x, dim, index)`` for an ``index`` known at capture time, in ops the device runs; None when the
    selection would be too large (the caller keeps the run-time adv_index).

    The dims other than ``dim`` split in two: those along which the index does not change (batch, heads) and
    those along which it does (the query position of a relative-position table). The first become the rows of
    one matrix, the second and ``dim`` its columns, and the gather is one :func:`const_gather` along the
    columns: slices for a few runs, else a matmul with a one-hot matrix of (varying positions x size of
    ``dim``) rows and (varying positions x gathered) columns.
    """
    rank = b.rank(x)
    xs, ish = b.shape(x), tuple(index.shape)
    index = index.to(torch.int64)
    index = torch.where(index < 0, index + xs[dim], index)
    if index.numel() == 0 or int(index.min()) < 0 or int(index.max()) >= xs[dim]:
        return None
    v = _gathered_region(b, x, ish, dim)
    varying = [k for k in range(rank) if k != dim and ish[k] > 1
               and not bool((index == index.narrow(k, 0, 1)).all())]
    steady = [k for k in range(rank) if k != dim and k not in varying]
    order = steady + varying + [dim]
    # The index with its steady dims dropped: [varying..., gathered].
    reduced = index.permute(order)[(0,) * len(steady)] if steady else index.permute(order)
    vary_count = math.prod(ish[k] for k in varying)
    size, taken = xs[dim], ish[dim]
    if vary_count * size * vary_count * taken > MAX_ONE_HOT_ELEMENTS:
        return None
    offsets = torch.arange(vary_count, dtype=torch.int64).reshape(-1, 1) * size
    flat = (reduced.reshape(vary_count, taken) + offsets).reshape(-1)
    rows = math.prod(ish[k] for k in steady)
    moved = _permute_by(b, v, order)
    out = const_gather(b, b.reshape(moved, (rows, vary_count * size)), flat, 1, name)
    out = b.reshape(out, tuple(ish[k] for k in order))
    inverse = [order.index(k) for k in range(rank)]
    return _permute_by(b, out, inverse)


@converts("unfold")
def _tensor_unfold(b: Builder, n, p):
    """``Tensor.unfold(dim, size, step)``: the windows' elements as one constant gather along ``dim``
    (slices, or a one-hot matmul when they overlap), split into (windows, size) and the size moved last."""
    x = b.tensor(p["self"])
    shape = b.shape(x)
    rank = len(shape)
    dim, size, step = _norm_dim(p["dimension"], max(rank, 1)), int(p["size"]), int(p["step"])
    count = (shape[dim] - size) // step + 1
    index = (torch.arange(count)[:, None] * step + torch.arange(size)[None, :]).reshape(-1)
    v = const_gather(b, x, index, dim, n.name)
    v = b.reshape(v, tuple(shape[:dim]) + (count, size) + tuple(shape[dim + 1:]))
    order = [d for d in range(rank + 1) if d != dim + 1] + [dim + 1]
    return b.reshape(_permute_by(b, v, order), out_shape(n))


@converts("diagonal")
def _diagonal(b: Builder, n, p):
    """``torch.diagonal``: the two dims moved last and flattened, then a constant gather of the diagonal's
    elements (a strided slice: every ``cols + 1``-th element), which the device runs as data movement."""
    x = b.tensor(p["self"])
    shape = b.shape(x)
    rank = len(shape)
    d1, d2, offset = _norm_dim(p.get("dim1", 0), rank), _norm_dim(p.get("dim2", 1), rank), int(p.get("offset", 0))
    if d1 == d2:
        raise Unsupported("diagonal of a dim with itself")
    rest = [d for d in range(rank) if d not in (d1, d2)]
    order = rest + [d1, d2]
    v = _permute_by(b, x, order) if order != list(range(rank)) else x
    rows, cols = shape[d1], shape[d2]
    first_row, first_col = max(-offset, 0), max(offset, 0)
    count = max(min(rows - first_row, cols - first_col), 0)
    if count == 0:
        raise Unsupported("empty diagonal (zero-size tensors are not supported on the device)")
    lead = tuple(shape[d] for d in rest)
    flat = b.reshape(v, lead + (rows * cols,))
    index = torch.arange(count) * (cols + 1) + first_row * cols + first_col
    return b.reshape(const_gather(b, flat, index, len(lead), n.name), out_shape(n))


@converts("embedding")
def _embedding(b: Builder, n, p):
    """A table lookup. Ids known at capture time (``embed_positions(torch.arange(seq))``) are a constant
    gather of the table's rows, which the device runs (:func:`const_gather`: a slice for a run of ids);
    ids computed at run time use the ``embedding`` op."""
    weight, indices = p["weight"], p["indices"]
    if isinstance(indices, Const) and not isinstance(weight, Const):
        return b.reshape(const_gather(b, weight, indices.value, 0, n.name), out_shape(n))
    return b.op("embedding", [weight, indices])
