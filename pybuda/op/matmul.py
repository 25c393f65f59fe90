"""Matrix multiplication op functions."""

from __future__ import annotations

from typing import Optional

from pybuda.op.record import op_function, record
from pybuda.tensor import Tensor

__all__ = ["Matmul"]


@op_function
def Matmul(name: str, operandA: Tensor, operandB: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """Matrix multiplication transformation on input activations, with optional bias. y = ab + bias"""
    operands = [operandA, operandB] + ([bias] if bias is not None else [])
    return record("matmul", name, operands)
