"""Converters for ATen's scatter family: writes at indexed positions (``x[idx] = v``, ``x[idx] += v``,
``index_put``, ``index_add``, ``scatter``, ``scatter_add``, ``scatter_reduce`` with ``sum``, and
``F.fold``, which torch decomposes into an accumulating ``index_put``).

The chip has no scatter, but a scatter whose indices are known at capture time is data movement it can
do: each output position reads a known set of source positions. All of them reduce to one primitive,
:func:`scatter_columns`, on a ``[rows, columns]`` matrix: the dims the indices do not vary along become
the rows, the scattered dims the columns.

- each output column reading at most one source column is a constant gather of the source
  (:func:`pybuda.frontend.aten_index.const_gather`: slices, or a one-hot matmul), and a ``where`` with the
  constant mask of written columns keeps the rest of ``self``;
- columns written more than once and summed (``accumulate``) are a matmul with a constant 0/1 matrix:
  every sum is of the written values times 1.0.

A run-time index (``zeros.scatter_(-1, x.argmax(-1, keepdim=True), 1.0)``, a one-hot of a prediction)
is compared with ``arange`` along the scattered dim, as run-time gathers are, when its integer range
proves every index in bounds, or when it is a whole pushed input, which the host then checks at each
push (a graph's edge targets; summed writes along one dim are one matmul with the index's one-hot rows);
a boolean mask with one value (``x[x < 0] = 0``) is a ``where``. Anything else raises
:class:`Unsupported`, and the op runs on the CPU (with a fallback report).

Registered into :data:`pybuda.frontend.aten_builder.CONVERTERS` by ``@converts`` when
:mod:`pybuda.frontend.aten_map` imports this module.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence

import torch

from pybuda.frontend.aten_builder import Builder, converts, out_dtype, Unsupported, _is_number, _norm_dim
from pybuda.frontend.aten_index import MAX_ONE_HOT_ELEMENTS, RUNTIME_INDEX_MAX, _known_value, _one_hot_rows, \
    bound_pushed_index, const_gather, one_hot_matmul
from pybuda.frontend.aten_shape import _index_range, _permute_by

#: Largest extent (along the scattered dim) of a run-time index: each index position is one comparison and
#: one ``where`` over the whole output.
MAX_RUNTIME_WRITES = 8


# --- the primitive -------------------------------------------------------------------------------------------
def scatter_columns(b: Builder, src: Any, dest: torch.Tensor, size: int, base: Optional[Any], accumulate: bool,
                    name: str) -> str:
    """``[rows, size]``: ``base`` (``[rows, size]``; None for zeros) with column ``dest[j]`` of the result
    written from column ``j`` of ``src`` (``[rows, len(dest)]``, or a Python number written to every
    destination). ``accumulate``: the written values are added to ``base`` (a column written several times
    gets their sum); otherwise they replace it, and of several writes to one column the last one wins (what
    torch's CPU kernels do).

    ``dest`` is known at capture time, each entry in ``[0, size)``."""
    dest = dest.reshape(-1).to(torch.int64)
    writes = torch.bincount(dest, minlength=size)
    dt = b.dtype(base) if base is not None else (b.dtype(src) if b.is_tensor(src) else torch.float32)
    rows = b.shape(base)[0] if base is not None else (b.shape(src)[0] if b.is_tensor(src) else 1)
    if accumulate and int(writes.max()) > 1:
        if _is_number(src):
            src = b.broadcast_to(b.scalar(src, dt, 2), (rows, dest.numel()))
        if not dt.is_floating_point:
            raise Unsupported("an accumulating scatter of integers with repeated indices (the device sums in "
                              "floating point)")
        if dest.numel() * size > MAX_ONE_HOT_ELEMENTS:
            raise Unsupported(f"an accumulating scatter of {dest.numel()} values onto {size} positions needs a "
                              f"{dest.numel()}x{size} selection matrix, more than {MAX_ONE_HOT_ELEMENTS} elements")
        sums = torch.zeros(dest.numel(), size, dtype=dt)
        sums[torch.arange(dest.numel()), dest] = 1
        out = b.op("matmul", [b.tensor(src, dt), b.const(sums, f"{name}.sum_select")])
        return out if base is None else b.op("add", [base, out])
    # Every column is written at most once (when accumulating), or only the last write counts.
    source = torch.full((size,), -1, dtype=torch.int64)
    source[dest] = torch.arange(dest.numel())  # a repeated destination keeps its last write
    written = source >= 0
    if _is_number(src):
        out = b.scalar(src, dt, 2)
    else:
        out = const_gather(b, b.tensor(src, dt), source.clamp(min=0), 1, name)
    if not bool(written.all()):  # the columns nobody writes: zeros to add, or what base holds there
        keep = base if base is not None and not accumulate else b.scalar(0, dt, 2)
        out = b.op("where", [b.const(written.reshape(1, size), f"{name}.written"), out, keep])
    if accumulate and base is not None:
        return b.op("add", [base, out])
    return b.broadcast_to(out, (rows, size))


def _base_or_none(b: Builder, x: Any) -> Optional[Any]:
    """``x``, or None when it is known to be all zeros (``torch.zeros(...).scatter_add(...)``, F.fold's
    canvas): the scatter then needs no operand for it."""
    known = _known_value(b, x)
    if known is not None and known.numel() and not bool(known.any()):
        return None
    return x


# --- index_put, index_add ------------------------------------------------------------------------------------
@converts("index_put", "_unsafe_index_put")
def _index_put(b: Builder, n, p):
    """``out = x.clone(); out[indices] = values`` (``+=`` with ``accumulate``)."""
    return index_put_of(b, p["self"], list(p["indices"]), p["values"], bool(p.get("accumulate", False)),
                         out_dtype(n), n.name)


@converts("index_add")
def _index_add(b: Builder, n, p):
    """``x.index_add(dim, index, source, alpha=a)``: ``x[..., index, ...] += a * source`` along ``dim``."""
    x = p["self"]
    dim = _norm_dim(p["dim"], max(b.rank(x), 1))
    source, alpha = p["source"], p.get("alpha", 1)
    if alpha != 1:
        source = b.binary("multiply", source, alpha, out_dtype(n))
    return index_put_of(b, x, [None] * dim + [p["index"]], source, True, out_dtype(n), n.name, negative_ids=False)


def index_put_of(b: Builder, x: Any, indices: List[Any], values: Any, accumulate: bool, dt: torch.dtype,
                 name: str, negative_ids: bool = True) -> str:
    """``x[indices] = values`` (``+=`` with ``accumulate``) in ``dt``: ``indices`` per dim (None for a whole dim),
    index tensors on adjacent dims and known at capture time, one run-time index tensor when accumulating, or one
    boolean mask with one value. ``negative_ids``: a negative index counts from the end (``index_put``), rather
    than being refused (``index_add``)."""
    shape = b.shape(x)
    rank = len(shape)
    indices = indices + [None] * (rank - len(indices))
    used = [d for d, i in enumerate(indices) if i is not None]
    if not used:
        raise Unsupported("index_put without an index tensor")
    masks = [d for d in used if b.dtype(indices[d]) == torch.bool]
    if masks:
        return _masked_put(b, x, indices, used, values, accumulate, dt)
    if used != list(range(used[0], used[0] + len(used))):
        raise Unsupported("index_put with index tensors on dims that are not adjacent")
    known = [_known_value(b, indices[d]) for d in used]
    if any(k is None for k in known):
        if accumulate and len(used) == 1:
            out = _runtime_index_add(b, x, used[0], indices[used[0]], values, dt, negative_ids)
            if out is not None:
                return out
        raise Unsupported("index_put at indices computed at run time (on the device: one index tensor, accumulating, "
                          "pushed or proven in range)")
    first, last = used[0], used[-1] + 1
    sizes = shape[first:last]
    flat = torch.zeros((), dtype=torch.int64)
    for idx, size in zip(known, sizes):
        idx = idx.to(torch.int64)
        if idx.numel() and (int(idx.min()) < -size or int(idx.max()) >= size):
            raise Unsupported(f"index out of range for a dim of size {size}")
        flat = flat * size + idx % size
    count_shape = torch.broadcast_shapes(*(k.shape for k in known))
    dest = torch.broadcast_to(flat, count_shape).reshape(-1)
    if dest.numel() == 0:
        return b.tensor(x, dt)
    lead, width, trail = math.prod(shape[:first]), math.prod(sizes), math.prod(shape[last:])
    count = dest.numel()
    result = tuple(shape[:first]) + tuple(count_shape) + tuple(shape[last:])
    src = _number_or(b, values, dt, result)
    # [lead, positions, trail] -> rows (lead x trail) by columns (positions)
    src2 = src if _is_number(src) else _rows_by_columns(b, b.reshape(src, (lead, count, trail)))
    base = _base_or_none(b, x)
    base2 = None if base is None else _rows_by_columns(b, b.reshape(b.tensor(base, dt), (lead, width, trail)))
    rows = lead * trail
    if base2 is None and _is_number(src2):  # a number into zeros: the result is a constant
        moved = _constant_columns(rows, width, dest, src2, accumulate, dt)
        return b.const(moved.reshape(lead, trail, width).transpose(1, 2).reshape(shape).contiguous(), "scattered")
    out = scatter_columns(b, src2, dest, width, base2, accumulate, name)
    if trail > 1:
        out = b.transpose(b.reshape(out, (lead, trail, width)), 1, 2)
    return b.reshape(out, shape)


def _runtime_index_add(b: Builder, x: Any, dim: int, index: Any, values: Any, dt: torch.dtype,
                       negative_ids: bool) -> Optional[str]:
    """``x.index_add(dim, index, values)`` for a run-time ``index`` (a graph neural network's edge targets, pushed
    with the input): the one-hot rows of the index (:func:`pybuda.frontend.aten_index._one_hot_rows`),
    transposed, times the values, summed onto ``x``. ``index`` is one vector ``[e]`` shared by every position of
    the dims before ``dim``, or ``[*x.shape[:dim], e]``, one vector per such position (each sample's own edges,
    ``scatter_add(1, dst[..., None].expand(...), msgs)``): then a batched matmul, one one-hot per position. A
    pushed index is checked by the host at each push (see :func:`pybuda.frontend.aten_index.bound_pushed_index`);
    one computed on the device must be proven in range. None when neither holds."""
    shape = b.shape(x)
    size = shape[dim]
    if not dt.is_floating_point or not isinstance(index, str):
        return None
    ish = tuple(b.shape(index))
    per_position = len(ish) > 1
    if per_position and ish[:-1] != tuple(shape[:dim]):
        return None
    bound_pushed_index(b, index, -size if negative_ids else 0, size - 1)
    one_hot = _one_hot_rows(b, index, size, negative_ids)  # [lead·e or e, size]
    if one_hot is None:
        return None
    n = ish[-1]
    lead, trail = math.prod(shape[:dim]), math.prod(shape[dim + 1:])
    v = b.broadcast_to(b.tensor(values, dt), tuple(shape[:dim]) + (n,) + tuple(shape[dim + 1:]))
    if per_position:  # [lead, size, e] @ [lead, e, trail]
        one_hot = b.transpose(b.reshape(b.cast(one_hot, dt), (lead, n, size)), 1, 2)
        summed = b.reshape(one_hot_matmul(b, one_hot, b.reshape(v, (lead, n, trail))), shape)
    else:  # [size, e] @ [e, lead·trail]
        v = b.reshape(b.transpose(b.reshape(v, (lead, n, trail)), 0, 1), (n, lead * trail))
        summed = one_hot_matmul(b, b.transpose(b.cast(one_hot, dt), 0, 1), v)  # [size, lead * trail]
        summed = b.reshape(b.transpose(b.reshape(summed, (size, lead, trail)), 0, 1), shape)
    return summed if _base_or_none(b, x) is None else b.op("add", [b.tensor(x, dt), summed])


def _masked_put(b: Builder, x: Any, indices: List[Any], used: List[int], values: Any, accumulate: bool,
                dt: torch.dtype) -> str:
    """``x[mask] = v`` (``+= v``) with one boolean mask and one value (``x[x < 0] = 0``): a ``where``. Values
    that differ per position land where the mask is true, which only the mask's values say."""
    if len(used) != 1:
        raise Unsupported("index_put with a boolean mask beside other index tensors")
    d = used[0]
    mask = indices[d]
    shape = b.shape(x)
    mshape = b.shape(mask)
    if tuple(shape[d:d + len(mshape)]) != tuple(mshape):
        raise Unsupported(f"boolean mask of shape {list(mshape)} for dims {d}.. of a {list(shape)} tensor")
    value = values if _is_number(values) else None
    if value is None and math.prod(b.shape(values)) != 1:
        raise Unsupported("index_put of several values at a boolean mask (where each lands depends on the mask's "
                          "values)")
    v = b.scalar(value, dt, len(shape)) if value is not None else b.reshape(b.tensor(values, dt), (1,) * len(shape))
    full = b.broadcast_to(b.reshape(mask, (1,) * d + tuple(mshape) + (1,) * (len(shape) - d - len(mshape))), shape)
    if accumulate:
        return b.op("add", [b.tensor(x, dt), b.op("where", [full, v, b.scalar(0, dt, len(shape))])])
    return b.op("where", [full, v, b.tensor(x, dt)])


def _rows_by_columns(b: Builder, v: str) -> str:
    """``[lead, columns, trail]`` as ``[lead * trail, columns]``."""
    lead, columns, trail = b.shape(v)
    if trail > 1:
        v = b.transpose(v, 1, 2)
    return b.reshape(v, (lead * trail, columns))


def _number_or(b: Builder, values: Any, dt: torch.dtype, shape: Sequence[int]) -> Any:
    """A Python number as is (written to every position); a one-element constant as its number; any other
    tensor broadcast to ``shape`` in ``dt``."""
    if _is_number(values):
        return values
    known = _known_value(b, values)
    if known is not None and known.numel() == 1:
        return known.reshape(()).item()
    return b.broadcast_to(b.tensor(values, dt), shape)


def _constant_columns(rows: int, width: int, dest: torch.Tensor, value: Any, accumulate: bool,
                      dt: torch.dtype) -> torch.Tensor:
    """``[rows, width]`` zeros with ``value`` written (added, with ``accumulate``) at columns ``dest``: a scatter
    of a number into zeros, whose result is a constant."""
    out = torch.zeros(rows, width, dtype=dt)
    if accumulate:
        out.index_add_(1, dest, torch.full((rows, dest.numel()), value, dtype=dt))
    else:
        out[:, dest] = torch.tensor(value, dtype=dt)
    return out


# --- scatter, scatter_add, scatter_reduce --------------------------------------------------------------------
@converts("scatter")
def _scatter(b: Builder, n, p):
    """``x.scatter(dim, index, src)`` / ``x.scatter(dim, index, value)``, optionally with ``reduce='add'``."""
    reduce = p.get("reduce")
    if reduce not in (None, "add"):
        raise Unsupported(f"scatter with reduce='{reduce}'")
    src = p["src"] if "src" in p else p["value"]
    return scatter_of(b, p["self"], p["dim"], p["index"], src, reduce == "add", out_dtype(n), n.name)


@converts("scatter_add")
def _scatter_add(b: Builder, n, p):
    """``x.scatter_add(dim, index, src)``: sums at repeated indices (message passing over a fixed graph)."""
    return scatter_of(b, p["self"], p["dim"], p["index"], p["src"], True, out_dtype(n), n.name)


@converts("scatter_reduce")
def _scatter_reduce(b: Builder, n, p):
    """``x.scatter_reduce(dim, index, src, 'sum', include_self=...)``; other reductions run on the CPU."""
    if p["reduce"] != "sum":
        raise Unsupported(f"scatter_reduce with reduce='{p['reduce']}'")
    x, dt = p["self"], out_dtype(n)
    if not p.get("include_self", True):
        # Written positions start from zero: x with those positions cleared, then the sums added.
        x = scatter_of(b, x, p["dim"], p["index"], 0.0 if dt.is_floating_point else 0, False, dt, f"{n.name}.clear")
    return scatter_of(b, x, p["dim"], p["index"], p["src"], True, dt, n.name)


def scatter_of(b: Builder, x: Any, dim: int, index: Any, src: Any, accumulate: bool, dt: torch.dtype,
               name: str) -> str:
    """``x.scatter(dim, index, src)`` (``scatter_add`` with ``accumulate``); ``src`` a tensor or a number.
    ``index`` known at capture time (a Const or a folded constant node) is a constant scatter over the dims
    it varies along; else :func:`_runtime_scatter`."""
    shape = b.shape(x)
    rank = len(shape)
    if rank == 0:
        raise Unsupported("scatter into a scalar")
    dim = _norm_dim(dim, rank)
    ish = b.shape(index)
    if len(ish) != rank or any(ish[k] > shape[k] for k in range(rank) if k != dim):
        raise Unsupported(f"scatter index of shape {list(ish)} into a {list(shape)} tensor")
    if math.prod(ish) == 0:
        return b.tensor(x, dt)
    if not _is_number(src):
        known_src = _known_value(b, src)
        if known_src is not None and known_src.numel() == 1 and len(b.shape(src)) == 0:
            src = known_src.item()
        elif any(b.shape(src)[k] < ish[k] for k in range(rank)):
            raise Unsupported(f"scatter source of shape {list(b.shape(src))} is smaller than its index {list(ish)}")
        else:
            src = b.tensor(src, dt)
            for k in range(rank):  # only the leading ish[k] positions of the source are read
                if b.shape(src)[k] > ish[k]:
                    src = _index_range(b, src, k, 0, ish[k])
    known = _known_value(b, index)
    if known is None:
        return _runtime_scatter(b, x, dim, index, src, accumulate, dt)
    known = known.to(torch.int64)
    if int(known.min()) < 0 or int(known.max()) >= shape[dim]:
        raise Unsupported(f"scatter index out of range for dim {dim} of size {shape[dim]}")
    # Dims the index does not vary along, and covers whole, are rows; the others and ``dim`` are columns.
    steady = [k for k in range(rank) if k != dim and ish[k] == shape[k] and ish[k] > 0
              and bool((known == known.narrow(k, 0, 1)).all())]
    varying = [k for k in range(rank) if k != dim and k not in steady]
    order = steady + varying + [dim]
    reduced = known.permute(order)[(0,) * len(steady)] if steady else known.permute(order)
    col_sizes = [shape[k] for k in varying] + [shape[dim]]
    # Flat column of every written value: its position along the varying dims, then its index.
    dest, stride = reduced, shape[dim]
    for axis in range(len(varying) - 1, -1, -1):
        coord = torch.arange(reduced.shape[axis]).reshape([-1 if a == axis else 1 for a in range(reduced.dim())])
        dest, stride = dest + coord * stride, stride * col_sizes[axis]
    rows, width = math.prod(shape[k] for k in steady), math.prod(col_sizes)
    base = _base_or_none(b, x)
    moved_shape = tuple(shape[k] for k in order)
    inverse = [order.index(k) for k in range(rank)]
    dest = dest.reshape(-1)
    if _is_number(src):
        if base is None:  # a number into zeros: the result is a constant
            moved = _constant_columns(rows, width, dest, src, accumulate, dt).reshape(moved_shape)
            return b.const(moved.permute(inverse).contiguous(), "scattered")
        src2 = src
    else:
        src2 = b.reshape(_permute_by(b, src, order), (rows, dest.numel()))
    base2 = None if base is None else b.reshape(_permute_by(b, b.tensor(base, dt), order), (rows, width))
    out = scatter_columns(b, src2, dest, width, base2, accumulate, name)
    return _permute_by(b, b.reshape(out, moved_shape), inverse)


def _runtime_scatter(b: Builder, x: Any, dim: int, index: Any, src: Any, accumulate: bool,
                     dt: torch.dtype) -> str:
    """A scatter at an index computed at run time: each of its (few) positions along ``dim`` compared with
    ``arange`` there, and a ``where`` writing the source (added with ``accumulate``). Only when the index's
    integer range proves it in bounds, the index covers ``x`` off ``dim`` (each write then lands in its own
    row), and repeated indices cannot make the order of writes matter."""
    from pybuda.ops.integer import integer_range

    shape, ish = b.shape(x), b.shape(index)
    rank, extent = len(shape), ish[dim]
    if not dt.is_floating_point:
        raise Unsupported("scatter of integers at run-time indices")
    if any(ish[k] != shape[k] for k in range(rank) if k != dim):
        raise Unsupported("scatter at run-time indices that do not cover the tensor off the scattered dim")
    column = _broadcast_column(b, index, dim) if accumulate and not _is_number(src) else None
    if column is not None:  # one index per position along dim (an expanded edge list): an index_add
        out = _runtime_index_add(b, x, dim, column, src, dt, negative_ids=False)
        if out is not None:
            return out
    if extent > MAX_RUNTIME_WRITES or shape[dim] > RUNTIME_INDEX_MAX:
        raise Unsupported(f"scatter of {extent} run-time indices along a dim of size {shape[dim]}")
    if extent > 1 and not accumulate and not _is_number(src):
        raise Unsupported("scatter of several values per row at run-time indices (with repeats, which write wins "
                          "depends on the indices' values)")
    bound_pushed_index(b, index, 0, shape[dim] - 1)
    r = integer_range(b.graph, index)
    if r is None or r[0] < 0 or r[1] > shape[dim] - 1:
        raise Unsupported("scatter at run-time indices that are neither pushed nor proven within bounds")
    positions = torch.arange(shape[dim], dtype=torch.float32).reshape([-1 if k == dim else 1 for k in range(rank)])
    places = b.const(positions, "positions")
    idx = b.cast(index, torch.float32)
    out = b.tensor(x, dt)
    zero = b.scalar(0, dt, rank)
    for j in range(extent):
        hit = b.op("equal", [_along(b, idx, dim, j), places])
        value = b.scalar(src, dt, rank) if _is_number(src) else _along(b, b.tensor(src, dt), dim, j)
        hit = b.broadcast_to(b.cast(hit, torch.bool), shape)
        if accumulate:
            out = b.op("add", [out, b.op("where", [hit, value, zero])])
        else:
            out = b.op("where", [hit, value, out])
    return out


def _broadcast_column(b: Builder, index: str, dim: int) -> Optional[str]:
    """``index`` as one vector along ``dim`` when it is that vector broadcast over every other dim
    (``edge_index[1][:, None].expand(-1, features)``), or as ``[*lead, e]`` when it also varies along the dims
    before ``dim`` but is broadcast over those after it (each sample's edge targets,
    ``dst[..., None].expand(-1, -1, features)``); else None."""
    from pybuda.ir.graph import OP

    node = b.graph[index]
    while node.kind == OP and node.op_type == "broadcast" and node.attrs.get("dim") != dim:
        node = b.graph[node.operands[0]]
    if len(node.shape) != len(b.shape(index)) or any(size != 1 for size in node.shape[dim + 1:]):
        return None
    if all(size == 1 for size in node.shape[:dim]):
        return b.reshape(node.name, (node.shape[dim],))
    return b.reshape(node.name, tuple(node.shape[:dim + 1]))


def _along(b: Builder, v: str, dim: int, j: int) -> str:
    """Position ``j`` of ``v`` along ``dim`` (kept as a dim of size 1)."""
    if b.shape(v)[dim] == 1 and j == 0:
        return v
    return _index_range(b, v, dim, j, j + 1)
