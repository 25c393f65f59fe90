"""``pybuda.op.nn``: normalisation/softmax op functions and ready-made layer modules.

The modules initialise their weights the way torch.nn does (Kaiming-uniform with a = sqrt(5) and a
uniform bias in +-1/sqrt(fan_in)), so they work out of the box and match torch's statistics.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch

from pybuda.errors import ModuleError
from pybuda.module import PyBudaModule
from pybuda.op.conv import Conv2d, Conv2dTranspose
from pybuda.op.matmul import Matmul, SparseMatmul
from pybuda.op.pool import AvgPool2d, MaxPool1d, MaxPool2d
from pybuda.op.record import op_function, record
from pybuda.tensor import Parameter, Tensor

__all__ = ["Softmax", "LogSoftmax", "Layernorm", "Batchnorm", "Linear", "Conv2dModule", "ConvTranspose2dModule",
           "MaxPool1dModule", "MaxPool2dModule", "AvgPool2dModule", "SparseMatmulModule"]

Operand = Union[Tensor, Parameter]


# --- op functions --------------------------------------------------------------------------------------


@op_function
def Softmax(name: str, operandA: Tensor, *, dim: int, stable: bool = True) -> Tensor:
    """Softmax operation along dim (every slice along dim sums to 1)."""
    return record("softmax", name, [operandA], dim=dim, stable=stable)


@op_function
def LogSoftmax(name: str, operandA: Tensor, *, dim: int, stable: bool = True) -> Tensor:
    """LogSoftmax operation along dim."""
    return record("log_softmax", name, [operandA], dim=dim, stable=stable)


@op_function
def Layernorm(name: str, operandA: Tensor, weights: Operand, bias: Operand, dim: int = -1,
              epsilon: float = 1e-5) -> Tensor:
    """Layer normalization along dim, then * weights + bias."""
    return record("layernorm", name, [operandA, weights, bias], dim=dim, epsilon=epsilon)


@op_function
def Batchnorm(name: str, operandA: Tensor, weights: Operand, bias: Operand, running_mean: Operand,
              running_var: Operand, epsilon: float = 1e-5) -> Tensor:
    """Batch normalization with running statistics (inference form); channels are dim 1."""
    return record("batchnorm", name, [operandA, weights, bias, running_mean, running_var], epsilon=epsilon)


# --- modules -------------------------------------------------------------------------------------------


def _uniform(shape: Tuple[int, ...], bound: float) -> torch.Tensor:
    return torch.empty(shape).uniform_(-bound, bound)


def _kaiming_bound(fan_in: int) -> float:
    # kaiming_uniform_(a=sqrt(5)) gives gain sqrt(2 / (1 + 5)) and bound gain * sqrt(3 / fan_in) = 1/sqrt(fan_in).
    return 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0


def _pair(value: Union[int, Tuple[int, int]], what: str) -> Tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return tuple(value)
    raise ModuleError(f"{what} must be an int or a pair of ints, got {value!r}")


def _positive(name: str, **values: int) -> None:
    for key, v in values.items():
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ModuleError(f"{name}: {key} must be a positive int, got {v!r}")


class Linear(PyBudaModule):
    """y = x @ weights + bias, with weights of shape (in_features, out_features) (TT-Buda's layout)."""

    def __init__(self, name: str, in_features: int, out_features: int, bias: bool = True):
        super().__init__(name)
        _positive(name, in_features=in_features, out_features=out_features)
        self.in_features = in_features
        self.out_features = out_features
        self.bias_ = bias
        bound = _kaiming_bound(in_features)
        self.weights = Parameter(_uniform((in_features, out_features), bound))
        self.bias = Parameter(_uniform((out_features,), bound)) if bias else None

    def forward(self, activations: Tensor) -> Tensor:
        """Apply the layer."""
        return Matmul(self.name, activations, self.weights, bias=self.bias)


class Conv2dModule(PyBudaModule):
    """A Conv2d layer: weights (out_channels, in_channels / groups, kH, kW) and an optional bias."""

    def __init__(self, name: str, in_channels: int, out_channels: int, kernel_size: Union[int, Tuple[int, int]],
                 stride: Union[int, Tuple[int, int]] = 1, padding: Union[int, str, Tuple[int, ...]] = "same",
                 dilation: int = 1, groups: int = 1, bias: bool = True, t_stream_workaround: bool = False):
        super().__init__(name)
        _positive(name, in_channels=in_channels, out_channels=out_channels, groups=groups)
        if in_channels % groups or out_channels % groups:
            raise ModuleError(f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                              f"divisible by groups ({groups})")
        kh, kw = _pair(kernel_size, "kernel_size")
        self.kwargs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
        bound = _kaiming_bound(in_channels // groups * kh * kw)
        self.weights = Parameter(_uniform((out_channels, in_channels // groups, kh, kw), bound))
        self.bias = Parameter(_uniform((out_channels,), bound)) if bias else None

    def forward(self, activations: Tensor) -> Tensor:
        """Apply the convolution."""
        return Conv2d(self.name, activations, self.weights, bias=self.bias, **self.kwargs)


class ConvTranspose2dModule(PyBudaModule):
    """A transposed Conv2d layer: weights (in_channels, out_channels / groups, kH, kW), optional bias."""

    def __init__(self, name: str, in_channels: int, out_channels: int, kernel_size: Union[int, Tuple[int, int]],
                 stride: Union[int, Tuple[int, int]] = 1, padding: Union[int, str, Tuple[int, ...]] = "same",
                 output_padding: Union[int, Tuple[int, int]] = 0, groups: int = 1, bias: bool = True,
                 dilation: int = 1, padding_mode: str = "zeros"):
        super().__init__(name)
        _positive(name, in_channels=in_channels, out_channels=out_channels, groups=groups)
        if in_channels % groups or out_channels % groups:
            raise ModuleError(f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                              f"divisible by groups ({groups})")
        if padding_mode != "zeros":
            raise ModuleError(f"{name}: only padding_mode='zeros' is supported, got {padding_mode!r}")
        kh, kw = _pair(kernel_size, "kernel_size")
        self.kwargs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups,
                       "output_padding": output_padding}
        # torch computes fan_in from dim 1 of the weight, i.e. (out_channels / groups) * kH * kW.
        bound = _kaiming_bound(out_channels // groups * kh * kw)
        self.weights = Parameter(_uniform((in_channels, out_channels // groups, kh, kw), bound))
        self.bias = Parameter(_uniform((out_channels,), bound)) if bias else None

    def forward(self, activations: Tensor) -> Tensor:
        """Apply the transposed convolution."""
        return Conv2dTranspose(self.name, activations, self.weights, bias=self.bias, **self.kwargs)


class MaxPool1dModule(PyBudaModule):
    """MaxPool1d as a module (TT-Buda defaults: stride 1, padding 0)."""

    def __init__(self, name: str, kernel_size: int, stride: int = 1, padding: Union[int, str] = 0,
                 dilation: int = 1, ceil_mode: bool = False, return_indices: bool = False):
        super().__init__(name)
        self.kwargs = {"kernel_size": kernel_size, "stride": stride, "padding": padding, "dilation": dilation,
                       "ceil_mode": ceil_mode, "return_indices": return_indices}

    def forward(self, activations: Tensor) -> Tensor:
        """Apply the pooling."""
        return MaxPool1d(self.name, activations, **self.kwargs)


class MaxPool2dModule(PyBudaModule):
    """MaxPool2d as a module (TT-Buda defaults: stride 1, padding 'same')."""

    def __init__(self, name: str, kernel_size: Union[int, Tuple[int, int]], stride: Union[int, Tuple[int, int]] = 1,
                 padding: Union[int, str] = "same", dilation: int = 1, ceil_mode: bool = False,
                 return_indices: bool = False, channel_last: bool = False):
        super().__init__(name)
        self.kwargs = {"kernel_size": kernel_size, "stride": stride, "padding": padding, "dilation": dilation,
                       "ceil_mode": ceil_mode, "return_indices": return_indices, "channel_last": channel_last}

    def forward(self, activations: Tensor) -> Tensor:
        """Apply the pooling."""
        return MaxPool2d(self.name, activations, **self.kwargs)


class AvgPool2dModule(PyBudaModule):
    """AvgPool2d as a module (TT-Buda defaults: stride 1, padding 'same')."""

    def __init__(self, name: str, kernel_size: Union[int, Tuple[int, int]], stride: Union[int, Tuple[int, int]] = 1,
                 padding: Union[int, str] = "same", ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: Optional[float] = None, channel_last: bool = False):
        super().__init__(name)
        self.kwargs = {"kernel_size": kernel_size, "stride": stride, "padding": padding, "ceil_mode": ceil_mode,
                       "count_include_pad": count_include_pad, "divisor_override": divisor_override,
                       "channel_last": channel_last}

    def forward(self, activations: Tensor) -> Tensor:
        """Apply the pooling."""
        return AvgPool2d(self.name, activations, **self.kwargs)


class SparseMatmulModule(PyBudaModule):
    """y = sparseA @ x for a fixed sparse (COO) matrix ``sparseA`` given at construction."""

    def __init__(self, name: str, sparseA: torch.Tensor):
        super().__init__(name)
        if not isinstance(sparseA, torch.Tensor) or sparseA.dim() != 2:
            raise ModuleError(f"{name}: sparseA must be a 2-D torch tensor (sparse COO or dense)")
        self.sparseA = sparseA

    def forward(self, dense: Tensor) -> Tensor:
        """Multiply the sparse constant by ``dense``."""
        return SparseMatmul(self.name, self.sparseA, dense)
