"""Convolution op functions.

Padding may be an int, 'same', 'valid', one value per spatial dim ((pD,) pH, pW) or the full
(left, right, top, bottom[, front, back]) tuple; it is normalised here to the full tuple.
"""

from __future__ import annotations

from typing import List, Optional, Tuple, Union

from pybuda.op.record import op_function, record
from pybuda.ops.conv import canonical_padding
from pybuda.tensor import Parameter, Tensor

__all__ = ["Conv2d", "Conv2dTranspose", "Conv3d"]

Padding = Union[int, str, List[int], Tuple[int, ...]]
Operand = Union[Tensor, Parameter]


def _operands(activations, weights, bias):
    return [activations, weights] + ([bias] if bias is not None else [])


def _kernel(weights: Operand, nd: int) -> Tuple[int, ...]:
    return tuple(weights.shape.dims[-nd:]) if isinstance(weights, Tensor) else (1,) * nd


def _seq(value):
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _padding(padding: Padding, weights: Operand, nd: int, dilation, rule: str):
    dil = tuple(dilation) if isinstance(dilation, (list, tuple)) else (dilation,) * nd
    try:
        return canonical_padding(_seq(padding), _kernel(weights, nd), dil, rule)
    except ValueError:
        return _seq(padding)  # let the registry report the bad value, with the operand shapes


@op_function
def Conv2d(name: str, activations: Tensor, weights: Operand, bias: Optional[Operand] = None, stride: int = 1,
           padding: Padding = "same", dilation: int = 1, groups: int = 1, channel_last: bool = False) -> Tensor:
    """Conv2d transformation on input activations (N, Cin, iH, iW), with optional bias (Cout).

    Weights have shape (Cout, Cin / groups, kH, kW).
    """
    return record("conv2d", name, _operands(activations, weights, bias), stride=_seq(stride),
                  padding=_padding(padding, weights, 2, dilation, "conv"), dilation=_seq(dilation),
                  groups=groups, channel_last=channel_last)


@op_function
def Conv2dTranspose(name: str, activations: Tensor, weights: Operand, bias: Optional[Operand] = None,
                    stride: int = 1, padding: Padding = "same", dilation: int = 1, groups: int = 1,
                    channel_last: bool = False, output_padding: Union[int, Tuple[int, int]] = 0) -> Tensor:
    """Conv2dTranspose transformation on input activations (N, Cin, iH, iW), with optional bias.

    Weights have shape (Cin, Cout / groups, kH, kW), as torch.nn.ConvTranspose2d.
    """
    return record("conv2d_transpose", name, _operands(activations, weights, bias), stride=_seq(stride),
                  padding=_padding(padding, weights, 2, dilation, "half"), dilation=_seq(dilation),
                  groups=groups, channel_last=channel_last, output_padding=_seq(output_padding))


@op_function
def Conv3d(name: str, activations: Tensor, weights: Operand, bias: Optional[Operand] = None, stride: int = 1,
           padding: Padding = "same", dilation: int = 1, groups: int = 1, channel_last: bool = False) -> Tensor:
    """Conv3d on input activations (N, Cin, D, H, W), weights (Cout, Cin / groups, kD, kH, kW), optional bias."""
    return record("conv3d", name, _operands(activations, weights, bias), stride=_seq(stride),
                  padding=_padding(padding, weights, 3, dilation, "conv"), dilation=_seq(dilation),
                  groups=groups, channel_last=channel_last)
