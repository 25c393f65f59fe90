"""Op functions for embedding, constants, resizing and running sums."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

from pybuda.op.record import op_function, record
from pybuda.tensor import Parameter, Tensor

__all__ = ["Embedding", "DRAMQueue", "Constant", "Resize2d", "Resize3d", "CumSum", "IndexCopy"]


@op_function
def Embedding(name: str, embedding_table: Union[Tensor, Parameter], indices: Tensor) -> Tensor:
    """Embedding lookup: the rows of embedding_table [V, D] at indices, shape indices.shape + (D,).

    The reference lists ``(name, table, indices)``; TT-Buda's later releases take ``(name, indices,
    table)``. Both orders work: integer ids (or, with float ids, a Parameter table) identify the operands.
    On the device the lookup is a one-hot of the ids times the table; integer ids are pushed as they are.
    """
    a, b = embedding_table, indices
    swapped = (isinstance(a, Tensor) and isinstance(b, Tensor) and not a.dtype.is_floating_point
               and b.dtype.is_floating_point) or (isinstance(a, Tensor) and not isinstance(a, Parameter)
                                                 and isinstance(b, Parameter))
    if swapped:
        a, b = b, a
    return record("embedding", name, [a, b])


@op_function
def DRAMQueue(name: str, operandA: Tensor, *, num_entries: int) -> Tensor:
    """Pass operandA through a DRAM queue of ``num_entries`` entries (values unchanged).

    TT-Buda used it to force buffering between two ops; here the compiler places queues itself, so the
    op leaves the values and the placement as they are.
    """
    return record("dram_queue", name, [operandA], num_entries=num_entries)


@op_function
def Constant(name: str, *, constant: float, shape: Optional[Sequence[int]] = None) -> Tensor:
    """Op representing user-defined constant (a float32 tensor of `shape`, default (1,))."""
    return record("constant", name, [], constant=constant, shape=tuple(shape) if shape is not None else (1,))


def _resize(op_type: str, name: str, operandA: Tensor, sizes, method: str, align_corners: bool,
            channel_last: bool) -> Tensor:
    return record(op_type, name, [operandA], sizes=tuple(sizes), method=method, align_corners=align_corners,
                  channel_last=channel_last)


@op_function
def Resize2d(name: str, operandA: Tensor, sizes: Tuple[int, int], method: str = "nearest_neighbor",
             align_corners: bool = False, extrapolation_value: int = 0, channel_last: bool = False) -> Tensor:
    """Resize the two spatial dims to `sizes`; method 'nearest_neighbor', 'linear'/'bilinear' or 'cubic'.

    ``extrapolation_value`` is accepted for compatibility; no method here samples outside the input.
    """
    return _resize("resize2d", name, operandA, sizes, method, align_corners, channel_last)


@op_function
def Resize3d(name: str, operandA: Tensor, sizes: Tuple[int, int, int], method: str = "nearest_neighbor",
             align_corners: bool = False, extrapolation_value: int = 0, channel_last: bool = False) -> Tensor:
    """Resize the three spatial dims to `sizes`; method 'nearest_neighbor' or 'linear'/'bilinear' (trilinear)."""
    return _resize("resize3d", name, operandA, sizes, method, align_corners, channel_last)


@op_function
def CumSum(name: str, operandA: Tensor, axis: int, exclusive: bool = False) -> Tensor:
    """Cumulative sum along axis (exclusive: without the element itself)."""
    return record("cumsum", name, [operandA], axis=axis, exclusive=exclusive)


@op_function
def IndexCopy(name: str, operandA: Tensor, index: Tensor, value: Tensor, dim: int) -> Tensor:
    """A copy of operandA whose slices at `index` along dim are replaced by those of `value`."""
    return record("index_copy", name, [operandA, index, value], dim=dim)
