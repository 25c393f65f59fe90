"""Quantisation op functions (TT-Buda signatures). Scales are tensors; a python float becomes a constant."""

from __future__ import annotations

from typing import Union

import torch

from pybuda.op.record import op_function, record
from pybuda.ops.common import dtype_name
from pybuda.tensor import Parameter, Tensor

__all__ = ["Quantize", "Dequantize", "Requantize", "BudaRequantize"]

Scale = Union[Tensor, Parameter, float]
DType = Union[torch.dtype, str]


def _name(dtype: DType) -> str:
    try:
        return dtype_name(dtype)
    except ValueError:
        return str(dtype)  # the registry reports it, naming the op and the shapes


@op_function
def Quantize(name: str, operandA: Tensor, operandB: Scale, zero_point: float, axis: int, out_dtype: DType) -> Tensor:
    """Quantize input tensor to INT using provided zero point and scale (operandB)."""
    return record("quantize", name, [operandA, operandB], zero_point=zero_point, axis=axis,
                  out_dtype=_name(out_dtype))


@op_function
def Dequantize(name: str, operandA: Tensor, operandB: Scale, zero_point: float, axis: int = -1,
               out_dtype: DType = torch.float32) -> Tensor:
    """Dequantize input tensor to float using provided zero point and scale (operandB)."""
    return record("dequantize", name, [operandA, operandB], zero_point=zero_point, axis=axis,
                  out_dtype=_name(out_dtype))


@op_function
def Requantize(name: str, operandA: Tensor, operand_inp_scale: Scale, operand_out_scale: Scale,
               input_zero_point: float, output_zero_point: float, out_dtype: DType, axis: int = -1,
               rounding: str = "None") -> Tensor:
    """Requantize input tensor from (input scale, zero point) to (output scale, zero point)."""
    return record("requantize", name, [operandA, operand_inp_scale, operand_out_scale],
                  input_zero_point=input_zero_point, output_zero_point=output_zero_point, out_dtype=_name(out_dtype),
                  axis=axis, rounding=rounding)


@op_function
def BudaRequantize(name: str, operandA: Tensor, scale: Scale, zero_point: float = 0.0, axis: int = -1,
                   out_dtype: DType = torch.int8, rounding: str = "Even") -> Tensor:
    """Requantize an int32 accumulator to out_dtype: saturate(round(A * scale) + zero_point).

    TT-Buda's device form of Requantize (one combined scale). It is integer math: compiling it for the
    device raises UnsupportedOpError (TT-Buda ran it on Wormhole B0's int8 path only); CPU devices and
    the reference evaluate it.
    """
    return record("buda_requantize", name, [operandA, scale], zero_point=zero_point, axis=axis,
                  out_dtype=_name(out_dtype), rounding=rounding)
