"""Op functions for embedding, constants, resizing and running sums."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

from pybuda.op.record import op_function, record
from pybuda.tensor import Parameter, Tensor

__all__ = ["Embedding", "Constant", "Resize2d", "Resize3d", "CumSum", "IndexCopy"]


@op_function
def Embedding(name: str, embedding_table: Union[Tensor, Parameter], indices: Tensor) -> Tensor:
    """Embedding lookup: the rows of embedding_table [V, D] at indices, shape indices.shape + (D,)."""
    return record("embedding", name, [embedding_table, indices])


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
