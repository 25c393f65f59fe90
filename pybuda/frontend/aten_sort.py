"""Converters for the ordering ops: ``topk``, ``sort`` (``argsort``, ``msort``), ``kthvalue``, ``median`` and the
running ``cummax``/``cummin`` and ``logcumsumexp``.

The chip has no sort, but it compares and finds maxima exactly, so the order of a short dim is computed from them:

* ``topk`` with a small k takes k rounds of (max, first index of the max, that position masked with -inf) — a
  MoE router's top 2 experts, a point cloud's k nearest neighbours;
* ``sort`` of a dim of n values ranks each value by counting the values that come before it (smaller, or equal
  at a lower index: a stable sort), turns the ranks into an n x n permutation matrix, and reads the sorted values
  through it (a one-hot matmul, which the lowering keeps exact) and their indices as the permutation's argmax
  (MAE's random masking sorts its noise; a median is the middle of a sort).

Ties come out in ascending index order, as torch's stable sort has them (``torch.topk`` leaves their order open).
A NaN has no place in this order: data holding NaN sorts in no defined way on the device.
"""

from __future__ import annotations

import math
from typing import Any, Callable, List, Tuple

import torch

from pybuda.frontend.aten_builder import Builder, Unsupported, _norm_dim, converts, negated
from pybuda.frontend.aten_index import MAX_ONE_HOT_ELEMENTS, RUNTIME_INDEX_MAX, one_hot_matmul
from pybuda.frontend.aten_shape import _permute_by
from pybuda.frontend.fx_program import meta_val, op_name

#: Largest k a ``topk`` finds on the device: one round per value; beyond it the rounds cost more than a sort.
TOPK_MAX = 16
#: Longest dim ``sort`` orders on the device: it compares every pair (n^2 per row), and the ranks it counts must
#: be exact in every format (bfloat16 holds the integers up to 256).
SORT_MAX = 256


#: Integer data is ordered as float data when its proven range fits in every format's mantissa (bfloat16's).
EXACT_INTEGER_MAX = 256


def _float_data(b: Builder, x: Any, what: str) -> str:
    """``x`` as float data to order: integers (an argsort of an argsort) when their range is proven small."""
    from pybuda.ops.integer import integer_range

    if b.dtype(x).is_floating_point:
        return b.tensor(x)
    r = integer_range(b.graph, b.tensor(x)) if b.dtype(x) != torch.bool else (0, 1)
    if r is None or max(abs(r[0]), abs(r[1])) > EXACT_INTEGER_MAX:
        raise Unsupported(f"{what} of integer data not proven within +-{EXACT_INTEGER_MAX} (the device orders "
                          f"float data)")
    return b.cast(x, torch.float32)


def top_k(b: Builder, x: Any, k: int, dim: int, largest: bool = True) -> Tuple[str, str]:
    """``(values, indices)`` of the ``k`` largest (smallest) values along ``dim``, both in the data's float dtype:
    k rounds of max, argmax and a -inf mask; the smallest are the largest of the negation, negated back."""
    v = _float_data(b, x, "topk")
    shape = b.shape(v)
    if k > TOPK_MAX:
        raise Unsupported(f"topk with k = {k} (the device takes one round per value, up to {TOPK_MAX})")
    if not 0 < k <= shape[dim]:
        raise Unsupported(f"topk with k = {k} of {shape[dim]} values")
    if shape[dim] > RUNTIME_INDEX_MAX:
        raise Unsupported(f"topk over {shape[dim]} values (the device compares indices up to {RUNTIME_INDEX_MAX})")
    if not largest:
        v = negated(b, v)
    dt = b.dtype(v)
    positions = b.const(torch.arange(shape[dim], dtype=dt).reshape([-1 if d == dim else 1 for d in range(len(shape))]),
                        "positions")
    values, indices = [], []
    for i in range(k):
        values.append(b.op("reduce_max", [v], dim=dim))
        indices.append(b.op("argmax", [v], dim=dim))
        if i + 1 < k:
            taken = b.cast(b.op("equal", [positions, indices[-1]]), torch.bool)
            v = b.op("where", [taken, b.scalar(float("-inf"), dt, len(shape)), v])
    value = values[0] if k == 1 else b.op("concatenate", values, axis=dim)
    index = indices[0] if k == 1 else b.op("concatenate", indices, axis=dim)
    return (value if largest else negated(b, value)), index


@converts("topk")
def _topk(b: Builder, n, p):
    x = p["self"]
    dim = _norm_dim(p.get("dim", -1), max(1, b.rank(x)))
    values, indices = top_k(b, x, int(p["k"]), dim, p.get("largest", True) is not False)
    return _results(b, n, values, indices)


def _results(b: Builder, n, value: str, index: str) -> List[str]:
    return [b.cast(value, meta_val(n)[0].dtype), b.cast(index, meta_val(n)[1].dtype)]


def sorted_along(b: Builder, x: Any, dim: int, descending: bool, what: str = "sort") -> Tuple[str, str]:
    """``(values, indices)`` of a stable sort of ``x`` along ``dim``, both in ``x``'s float dtype."""
    v = _float_data(b, x, what)
    rows, back = _pairwise_rows(b, v, dim, what)  # [rows, 1, j]
    size, dt = b.shape(rows)[2], b.dtype(v)
    column = b.op("transpose", [rows], dim0=1, dim1=2)  # [rows, i, 1]
    # Value j comes before value i when it is smaller (larger, descending), or equal at a lower index.
    before = b.op("greater" if descending else "less", [rows, column])
    lower = b.const(torch.ones(size, size, dtype=dt).tril(-1).reshape(1, size, size), "lower_index")
    ties = b.op("multiply", [b.op("equal", [rows, column]), lower])
    rank_of = b.op("reduce_sum", [b.op("add", [before, ties])], dim=2)  # [rows, i, 1]: i's place in the order
    places = b.const(torch.arange(size, dtype=dt).reshape(1, 1, size), "places")
    permutation = b.op("equal", [rank_of, places])  # [rows, i, place]: 1 where value i goes to that place
    values = one_hot_matmul(b, permutation, rows, data_input=0)  # [rows, 1, place]
    indices = b.op("argmax", [permutation], dim=1)  # [rows, 1, place]: the i that goes there
    return back(values), back(indices)


def _pairwise_rows(b: Builder, v: str, dim: int, what: str) -> Tuple[str, Callable[[str], str]]:
    """``v`` with ``dim`` moved last, as ``[rows, 1, n]``, for an op that compares every pair of values of a row
    (an n x n matrix per row), and ``back``, which turns a result of one value per position (``[rows, 1, n]`` or
    ``[rows, n, 1]``) into ``v``'s layout."""
    shape = b.shape(v)
    if not shape:
        raise Unsupported(f"{what} of a scalar")
    rank, size = len(shape), shape[dim]
    if size > SORT_MAX:
        raise Unsupported(f"{what} of {size} values (the device compares every pair, up to {SORT_MAX} values)")
    if math.prod(shape) * size > MAX_ONE_HOT_ELEMENTS:
        raise Unsupported(f"{what} of {math.prod(shape)} values in rows of {size} (a matrix of pairs per row "
                          f"over {MAX_ONE_HOT_ELEMENTS} elements)")
    order = [d for d in range(rank) if d != dim] + [dim]
    rows = b.reshape(_permute_by(b, v, order), (math.prod(shape) // size, 1, size))

    def back(t: str) -> str:
        t = b.reshape(t, tuple(shape[d] for d in order))
        return _permute_by(b, t, [order.index(d) for d in range(rank)])
    return rows, back


def _running_window(b: Builder, v: str, dim: int, what: str) -> Tuple[str, Callable[[str], str]]:
    """``(window, back)`` for a running reduction of ``v`` along ``dim``: ``window [rows, j, i]`` holds value i
    where i <= j and -inf elsewhere (row j is what position j has seen), and ``back`` turns a ``[rows, j, 1]``
    result into ``v``'s layout (:func:`_pairwise_rows`)."""
    rows, back = _pairwise_rows(b, v, dim, what)  # [rows, 1, i]
    count, _, size = b.shape(rows)
    seen = b.const(torch.ones(size, size, dtype=torch.bool).tril().reshape(1, size, size), "seen")  # [1, j, i]
    window = b.op("where", [seen, b.broadcast_to(rows, (count, size, size)), b.scalar(float("-inf"), b.dtype(v), 3)])
    return window, back


@converts("cummax", "cummin")
def _cummax(b: Builder, n, p):
    """The running max (min) along ``dim``: value j is the max over positions 0..j, and its index the last
    position holding it, as torch's."""
    name = op_name(n.target)
    v = _float_data(b, p["self"], name)
    if name == "cummin":
        v = negated(b, v)
    window, back = _running_window(b, v, _norm_dim(p["dim"], max(1, b.rank(v))), name)
    values = b.op("reduce_max", [window], dim=2)
    indices = b.op("argmax", [window], dim=2, last=True)
    if name == "cummin":
        values = negated(b, values)
    return _results(b, n, back(values), back(indices))


@converts("logcumsumexp")
def _logcumsumexp(b: Builder, n, p):
    """``log(sum(exp(x_i)))`` over positions 0..j, stably: each running window less its own max."""
    v = _float_data(b, p["self"], "logcumsumexp")
    window, back = _running_window(b, v, _norm_dim(p["dim"], max(1, b.rank(v))), "logcumsumexp")
    top = b.op("reduce_max", [window], dim=2)
    total = b.op("reduce_sum", [b.op("exp", [b.op("subtract", [window, top])])], dim=2)
    return b.cast(back(b.op("add", [b.op("log", [total]), top])), meta_val(n).dtype)


@converts("sort")
def _sort(b: Builder, n, p):
    x = p["self"]
    dim = _norm_dim(p.get("dim", -1), max(1, b.rank(x)))
    values, indices = sorted_along(b, x, dim, bool(p.get("descending", False)))
    return _results(b, n, values, indices)


@converts("kthvalue")
def _kthvalue(b: Builder, n, p):
    """The k-th smallest value (1-based) and its index: place k - 1 of the sort."""
    x, k = p["self"], int(p["k"])
    dim = _norm_dim(p.get("dim", -1), max(1, b.rank(x)))
    return _place(b, n, x, dim, k - 1, bool(p.get("keepdim", False)), "kthvalue")


@converts("median")
def _median(b: Builder, n, p):
    """The lower median (place (n - 1) // 2 of the sort), as torch returns it; over every element without a dim."""
    x = p["self"]
    if op_name(n.target) == "median" and "dim" not in p:  # median of the whole tensor: a value only
        flat = b.reshape(x, (math.prod(b.shape(x)),))
        values, _ = sorted_along(b, flat, 0, False, "median")
        size = b.shape(flat)[0]
        return b.cast(b.reshape(_at(b, values, 0, (size - 1) // 2), ()), meta_val(n).dtype)
    dim = _norm_dim(p["dim"], max(1, b.rank(x)))
    return _place(b, n, x, dim, (b.shape(x)[dim] - 1) // 2, bool(p.get("keepdim", False)), "median")


def _at(b: Builder, v: str, dim: int, place: int) -> str:
    return b.op("index", [v], dim=dim, start=place, stop=place + 1, stride=1)


def _place(b: Builder, n, x: Any, dim: int, place: int, keepdim: bool, what: str) -> List[str]:
    size = b.shape(x)[dim]
    if not 0 <= place < size:
        raise Unsupported(f"{what} at place {place + 1} of {size} values")
    values, indices = sorted_along(b, x, dim, False, what)
    value, index = _at(b, values, dim, place), _at(b, indices, dim, place)
    if not keepdim:
        value, index = b.op("squeeze", [value], dim=dim), b.op("squeeze", [index], dim=dim)
    return _results(b, n, value, index)


__all__ = ["SORT_MAX", "TOPK_MAX", "sorted_along", "top_k"]
