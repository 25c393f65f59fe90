"""Pooling op functions with TT-Buda's arguments (note: stride defaults to 1, not to the kernel size)."""

from __future__ import annotations

from typing import Optional, Tuple, Union

from pybuda.errors import OpError
from pybuda.op.record import op_function, record
from pybuda.tensor import Tensor

__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d"]

Size = Union[int, Tuple[int, ...]]


def _seq(value):
    return tuple(value) if isinstance(value, list) else value


def _no_indices(op_type: str, return_indices: bool) -> None:
    if return_indices:
        raise OpError(op_type, "return_indices=True is not supported; only the pooled values are produced")


@op_function
def MaxPool1d(name: str, activations: Tensor, kernel_size: Size, stride: int = 1, padding: Union[int, str] = 0,
              dilation: int = 1, ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
    """MaxPool1d transformation on input activations (N, Cin, iW)."""
    _no_indices("max_pool1d", return_indices)
    return record("max_pool1d", name, [activations], kernel_size=_seq(kernel_size), stride=_seq(stride),
                  padding=_seq(padding), dilation=_seq(dilation), ceil_mode=ceil_mode)


@op_function
def MaxPool2d(name: str, activations: Tensor, kernel_size: Size, stride: Size = 1, padding: Union[int, str] = "same",
              dilation: int = 1, ceil_mode: bool = False, return_indices: bool = False,
              max_pool_add_sub_surround: bool = False, max_pool_add_sub_surround_value: float = 1.0,
              channel_last: bool = False) -> Tensor:
    """Maxpool2d transformation on input activations (N, Cin, iH, iW).

    ``max_pool_add_sub_surround*`` tune TT-Buda's device decomposition and do not change the result.
    """
    _no_indices("max_pool2d", return_indices)
    return record("max_pool2d", name, [activations], kernel_size=_seq(kernel_size), stride=_seq(stride),
                  padding=_seq(padding), dilation=_seq(dilation), ceil_mode=ceil_mode, channel_last=channel_last)


@op_function
def MaxPool3d(name: str, activations: Tensor, kernel_size: Size, stride: Size = 1, padding: Union[int, str] = "same",
              dilation: int = 1, ceil_mode: bool = False, return_indices: bool = False,
              max_pool_add_sub_surround: bool = False, max_pool_add_sub_surround_value: float = 1.0,
              channel_last: bool = False) -> Tensor:
    """Maxpool3d transformation on input activations (N, Cin, iD, iH, iW)."""
    _no_indices("max_pool3d", return_indices)
    return record("max_pool3d", name, [activations], kernel_size=_seq(kernel_size), stride=_seq(stride),
                  padding=_seq(padding), dilation=_seq(dilation), ceil_mode=ceil_mode, channel_last=channel_last)


@op_function
def AvgPool1d(name: str, activations: Tensor, kernel_size: Size, stride: int = 1, padding: Union[int, str] = "same",
              ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """Avgpool1d transformation on input activations (N, Cin, iW)."""
    return record("avg_pool1d", name, [activations], kernel_size=_seq(kernel_size), stride=_seq(stride),
                  padding=_seq(padding), ceil_mode=ceil_mode, count_include_pad=count_include_pad)


@op_function
def AvgPool2d(name: str, activations: Tensor, kernel_size: Size, stride: Size = 1, padding: Union[int, str] = "same",
              ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Optional[float] = None,
              channel_last: bool = False) -> Tensor:
    """Avgpool2d transformation on input activations (N, Cin, iH, iW)."""
    return record("avg_pool2d", name, [activations], kernel_size=_seq(kernel_size), stride=_seq(stride),
                  padding=_seq(padding), ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                  divisor_override=divisor_override, channel_last=channel_last)


@op_function
def AvgPool3d(name: str, activations: Tensor, kernel_size: Size, stride: Size = 1, padding: Union[int, str] = "same",
              ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Optional[float] = None,
              channel_last: bool = False) -> Tensor:
    """Avgpool3d transformation on input activations (N, Cin, iD, iH, iW)."""
    return record("avg_pool3d", name, [activations], kernel_size=_seq(kernel_size), stride=_seq(stride),
                  padding=_seq(padding), ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                  divisor_override=divisor_override, channel_last=channel_last)
