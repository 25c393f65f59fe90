"""Reduction op functions. The reduced dim is kept with size 1, as in TT-Buda."""

from __future__ import annotations

from typing import Optional

from pybuda.op.record import op_function, record
from pybuda.tensor import Tensor

__all__ = ["ReduceSum", "ReduceAvg", "ReduceMax", "GroupedReduceAvg", "Argmax"]


@op_function
def ReduceSum(name: str, operandA: Tensor, dim: int) -> Tensor:
    """Reduce by summing along the given dimension."""
    return record("reduce_sum", name, [operandA], dim=dim)


@op_function
def ReduceAvg(name: str, operandA: Tensor, dim: int) -> Tensor:
    """Reduce by averaging along the given dimension."""
    return record("reduce_avg", name, [operandA], dim=dim)


@op_function
def ReduceMax(name: str, operandA: Tensor, dim: int, stride: int = -1) -> Tensor:
    """Reduce by taking the max along dim; with stride > 0, the max of each group of `stride` elements."""
    return record("reduce_max", name, [operandA], dim=dim, stride=stride)


@op_function
def GroupedReduceAvg(name: str, operandA: Tensor, dim: int, groups: int, keep_dims: bool = False) -> Tensor:
    """Average each of `groups` equal groups along dim (keep_dims: broadcast each mean over its group)."""
    return record("grouped_reduce_avg", name, [operandA], dim=dim, groups=groups, keep_dims=keep_dims)


@op_function
def Argmax(name: str, operandA: Tensor, dim: Optional[int] = None, keep_dim: bool = False) -> Tensor:
    """Index of the (first) maximum along dim, or over all elements when dim is None, as a float of the
    operand's format (TT-Buda computed it on the device). ``keep_dim`` keeps the reduced dim with size 1;
    without it the dim is dropped (dim None: one index of shape (1,))."""
    return record("argmax", name, [operandA], dim=dim, keep_dim=keep_dim)
