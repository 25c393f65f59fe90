"""Elementwise op functions."""

from __future__ import annotations

from pybuda.op.record import op_function, record
from pybuda.tensor import Tensor

__all__ = ["Add", "Subtract", "Multiply", "Exp", "Relu"]


@op_function
def Add(name: str, operandA: Tensor, operandB: Tensor) -> Tensor:
    """Elementwise add of two tensors."""
    return record("add", name, [operandA, operandB])


@op_function
def Subtract(name: str, operandA: Tensor, operandB: Tensor) -> Tensor:
    """Elementwise subtraction of two tensors."""
    return record("subtract", name, [operandA, operandB])


@op_function
def Multiply(name: str, operandA: Tensor, operandB: Tensor) -> Tensor:
    """Elementwise multiply of two tensors."""
    return record("multiply", name, [operandA, operandB])


@op_function
def Exp(name: str, operandA: Tensor) -> Tensor:
    """Exponent operation."""
    return record("exp", name, [operandA])


@op_function
def Relu(name: str, operandA: Tensor, threshold: float = 0.0, mode: str = "min") -> Tensor:
    """ReLU."""
    return record("relu", name, [operandA], threshold=threshold, mode=mode)
