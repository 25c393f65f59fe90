"""Elementwise op functions: binary (broadcasting), unary, and Where.

Python numbers are accepted as operands and become constants, as in TT-Buda.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from pybuda.op.record import op_function, record
from pybuda.ops.common import dtype_name
from pybuda.tensor import Parameter, Tensor

__all__ = [
    "Add", "Subtract", "Multiply", "Divide", "Max", "Min", "Heaviside", "Power", "Equal", "NotEqual", "Greater",
    "Less", "GreaterEqual", "LessEqual", "LogicalAnd", "Where",
    "Abs", "Exp", "Log", "Reciprocal", "Sqrt", "Sigmoid", "Sine", "Cosine", "Tanh", "Erf", "Square", "LogicalNot",
    "Nop", "Buffer", "Tilize", "Identity", "Cast", "Pow", "Relu", "LeakyRelu", "Gelu", "Clip", "Dropout",
]

Operand = Union[Tensor, Parameter, float, int]


# --- binary --------------------------------------------------------------------------------------------


@op_function
def Add(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """Elementwise add of two tensors."""
    return record("add", name, [operandA, operandB])


@op_function
def Subtract(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """Elementwise subtraction of two tensors."""
    return record("subtract", name, [operandA, operandB])


@op_function
def Multiply(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """Elementwise multiply of two tensors."""
    return record("multiply", name, [operandA, operandB])


@op_function
def Divide(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """Elementwise division of two tensors."""
    return record("divide", name, [operandA, operandB])


@op_function
def Max(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """Elementwise max of two tensors."""
    return record("maximum", name, [operandA, operandB])


@op_function
def Min(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """Elementwise min of two tensors."""
    return record("minimum", name, [operandA, operandB])


@op_function
def Heaviside(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """Elementwise Heaviside step of A, taking B where A == 0."""
    return record("heaviside", name, [operandA, operandB])


@op_function
def Power(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """Elementwise A ** B."""
    return record("power", name, [operandA, operandB])


@op_function
def Equal(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """1.0 where A == B, else 0.0 (in the operands' dtype)."""
    return record("equal", name, [operandA, operandB])


@op_function
def NotEqual(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """1.0 where A != B, else 0.0."""
    return record("not_equal", name, [operandA, operandB])


@op_function
def Greater(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """1.0 where A > B, else 0.0."""
    return record("greater", name, [operandA, operandB])


@op_function
def Less(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """1.0 where A < B, else 0.0."""
    return record("less", name, [operandA, operandB])


@op_function
def GreaterEqual(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """1.0 where A >= B, else 0.0."""
    return record("greater_equal", name, [operandA, operandB])


@op_function
def LessEqual(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """1.0 where A <= B, else 0.0."""
    return record("less_equal", name, [operandA, operandB])


@op_function
def LogicalAnd(name: str, operandA: Tensor, operandB: Operand) -> Tensor:
    """1.0 where A and B are both non-zero, else 0.0."""
    return record("logical_and", name, [operandA, operandB])


@op_function
def Where(name: str, condition: Tensor, x: Operand, y: Operand) -> Tensor:
    """x where condition is non-zero, else y (all three broadcast)."""
    return record("where", name, [condition, x, y])


# --- unary ---------------------------------------------------------------------------------------------


@op_function
def Abs(name: str, operandA: Tensor) -> Tensor:
    """Elementwise absolute value."""
    return record("abs", name, [operandA])


@op_function
def Exp(name: str, operandA: Tensor) -> Tensor:
    """Exponent operation."""
    return record("exp", name, [operandA])


@op_function
def Log(name: str, operandA: Tensor) -> Tensor:
    """Log operation: natural logarithm of the elements of operandA."""
    return record("log", name, [operandA])


@op_function
def Reciprocal(name: str, operandA: Tensor) -> Tensor:
    """Reciprocal operation."""
    return record("reciprocal", name, [operandA])


@op_function
def Sqrt(name: str, operandA: Tensor) -> Tensor:
    """Square root."""
    return record("sqrt", name, [operandA])


@op_function
def Sigmoid(name: str, operandA: Tensor) -> Tensor:
    """Sigmoid."""
    return record("sigmoid", name, [operandA])


@op_function
def Sine(name: str, operandA: Tensor) -> Tensor:
    """Elementwise sine."""
    return record("sine", name, [operandA])


@op_function
def Cosine(name: str, operandA: Tensor) -> Tensor:
    """Elementwise cosine."""
    return record("cosine", name, [operandA])


@op_function
def Tanh(name: str, operandA: Tensor) -> Tensor:
    """Elementwise hyperbolic tangent."""
    return record("tanh", name, [operandA])


@op_function
def Erf(name: str, operandA: Tensor) -> Tensor:
    """Elementwise Gauss error function."""
    return record("erf", name, [operandA])


@op_function
def Square(name: str, operandA: Tensor) -> Tensor:
    """Elementwise square."""
    return record("square", name, [operandA])


@op_function
def LogicalNot(name: str, operandA: Tensor) -> Tensor:
    """1.0 where A == 0, else 0.0."""
    return record("logical_not", name, [operandA])


@op_function
def Nop(name: str, operandA: Tensor) -> Tensor:
    """Identity that the compiler may remove."""
    return record("nop", name, [operandA])


@op_function
def Buffer(name: str, operandA: Tensor) -> Tensor:
    """Identity operation that is kept (not lowered into a removable NOP)."""
    return record("buffer", name, [operandA])


@op_function
def Tilize(name: str, operandA: Tensor) -> Tensor:
    """Convert row-major data to tile layout (identity in value)."""
    return record("tilize", name, [operandA])


@op_function
def Identity(name: str, operandA: Tensor, unsqueeze: Optional[str] = None,
             unsqueeze_dim: Optional[int] = None) -> Tensor:
    """Identity operation; with unsqueeze='unsqueeze' a size-1 dim is inserted at unsqueeze_dim."""
    return record("identity", name, [operandA], unsqueeze=unsqueeze, unsqueeze_dim=unsqueeze_dim)


@op_function
def Cast(name: str, operandA: Tensor, dtype: Union[str, torch.dtype]) -> Tensor:
    """Convert to another dtype (a torch.dtype or its name)."""
    return record("cast", name, [operandA], dtype=dtype_name(dtype) if isinstance(dtype, torch.dtype) else dtype)


@op_function
def Pow(name: str, operandA: Tensor, exponent: float) -> Tensor:
    """Elementwise A ** exponent."""
    return record("pow", name, [operandA], exponent=exponent)


@op_function
def Relu(name: str, operandA: Tensor, threshold: float = 0.0, mode: str = "min") -> Tensor:
    """ReLU: mode 'min' keeps values >= threshold, 'max' keeps values <= threshold; the rest become 0."""
    return record("relu", name, [operandA], threshold=threshold, mode=mode)


@op_function
def LeakyRelu(name: str, operandA: Tensor, alpha: float) -> Tensor:
    """Leaky ReLU: x for x >= 0, alpha * x otherwise."""
    return record("leaky_relu", name, [operandA], alpha=alpha)


@op_function
def Gelu(name: str, operandA: Tensor, approximate: str = "none") -> Tensor:
    """GeLU; approximate is 'none' or 'tanh'."""
    return record("gelu", name, [operandA], approximate=approximate)


@op_function
def Clip(name: str, operandA: Tensor, min: float, max: float) -> Tensor:  # noqa: A002 (reference names)
    """Clips tensor values between min and max."""
    return record("clip", name, [operandA], min=min, max=max)


@op_function
def Dropout(name: str, operandA: Tensor, p: float = 0.5, training: bool = True, seed: int = 0) -> Tensor:
    """Dropout with a mask determined by seed; identity when training is False."""
    return record("dropout", name, [operandA], p=p, training=training, seed=seed)
