"""Matrix multiplication op functions."""

from __future__ import annotations

from typing import Optional, Union

import torch

from pybuda.op.record import op_function, record
from pybuda.tensor import Tensor

__all__ = ["Matmul", "SparseMatmul"]


@op_function
def Matmul(name: str, operandA: Tensor, operandB: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """Matrix multiplication transformation on input activations, with optional bias. y = ab + bias"""
    operands = [operandA, operandB] + ([bias] if bias is not None else [])
    return record("matmul", name, operands)


@op_function
def SparseMatmul(name: str, sparse_tensor_a: Union[torch.Tensor, Tensor], dense_tensor_b: Tensor) -> Tensor:
    """Matrix multiplication of a sparse constant and a dense tensor: y = a @ b.

    ``sparse_tensor_a`` is a torch sparse COO tensor (or a dense torch tensor / constant pybuda Tensor),
    known at compile time, as TT-Buda required; it is stored as a dense constant and lowered as a matmul.
    """
    a = sparse_tensor_a
    if isinstance(a, torch.Tensor):
        dense = a.to_dense() if a.is_sparse else a
        a = Tensor.create_from_torch(dense.to(torch.float32) if not dense.is_floating_point() else dense,
                                     constant=True)
    return record("sparse_matmul", name, [a, dense_tensor_b])
