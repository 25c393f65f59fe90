"""Tensor-manipulation op functions (slicing, stacking, reshaping, padding, joining)."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch

from pybuda.op.record import op_function, record
from pybuda.tensor import Parameter, Tensor

__all__ = [
    "HSlice", "HStack", "VSlice", "VStack", "Transpose", "Reshape", "Index", "AdvIndex", "Select", "Pad",
    "PadTile", "Broadcast", "Repeat", "Unsqueeze", "Squeeze", "Narrow", "PixelShuffle", "BudaPad", "BudaUnpad",
    "Concatenate", "Stack", "Interleave", "BinaryStack",
]


@op_function
def HSlice(name: str, operandA: Tensor, slices: int) -> Tensor:
    """Slice along horizontal axis into given number of pieces."""
    return record("hslice", name, [operandA], slices=slices)


@op_function
def HStack(name: str, operandA: Tensor, slices: int = -1) -> Tensor:
    """Stack Z dimension along horizontal dimension (slices=-1: all of Z)."""
    return record("hstack", name, [operandA], slices=slices)


@op_function
def VSlice(name: str, operandA: Tensor, slices: int) -> Tensor:
    """Slice along vertical axis into given number of pieces."""
    return record("vslice", name, [operandA], slices=slices)


@op_function
def VStack(name: str, operandA: Tensor, slices: int = -1) -> Tensor:
    """Stack Z dimension along vertical dimension (slices=-1: all of Z)."""
    return record("vstack", name, [operandA], slices=slices)


@op_function
def Transpose(name: str, operandA: Tensor, dim0: int, dim1: int, z_dim_slice: int = -1,
              out_dtype: torch.dtype = torch.float32) -> Tensor:
    """Swap two dims. ``z_dim_slice`` and ``out_dtype`` are accepted for compatibility and not used."""
    return record("transpose", name, [operandA], dim0=dim0, dim1=dim1)


@op_function
def Reshape(name: str, operandA: Tensor, shape: Sequence[int]) -> Tensor:
    """Reshape to ``shape`` (one -1 is inferred)."""
    return record("reshape", name, [operandA], shape=tuple(shape))


@op_function
def Index(name: str, operandA: Tensor, dim: int, start: int, stop: Optional[int] = None, stride: int = 1) -> Tensor:
    """Slice start:stop:stride along dim, keeping the dim (stop=None: the single element at start)."""
    return record("index", name, [operandA], dim=dim, start=start, stop=stop, stride=stride)


@op_function
def AdvIndex(name: str, operandA: Tensor, operandB: Tensor, dim: int = 0) -> Tensor:
    """Gather the slices of A at the indices in B (1-D) along dim."""
    return record("adv_index", name, [operandA, operandB], dim=dim)


@op_function
def Select(name: str, operandA: Tensor, dim: int, index: Union[int, Tuple[int, int]], stride: int = 0) -> Tensor:
    """Select index (an int, or (start, length)) in every window of `stride` along dim (0: the whole dim)."""
    return record("select", name, [operandA], dim=dim, index=tuple(index) if isinstance(index, list) else index,
                  stride=stride)


@op_function
def Pad(name: str, operandA: Tensor, pad: Union[Tuple[int, int, int, int], Tuple[int, int]], mode: str = "constant",
        channel_last: bool = False, value: float = 0.0) -> Tensor:
    """Pad by (left, right) or (left, right, top, bottom); mode 'constant' (with value), 'replicate' or 'reflect'."""
    return record("pad", name, [operandA], pad=tuple(pad), mode=mode, channel_last=channel_last, value=value)


@op_function
def PadTile(name: str, operandA: Tensor, dim: int, original_length: int) -> Tensor:
    """Zero-pad dim up to a multiple of the tile size."""
    return record("pad_tile", name, [operandA], dim=dim, original_length=original_length)


@op_function
def Broadcast(name: str, operandA: Tensor, dim: int, shape: int) -> Tensor:
    """Grow the size-1 dim `dim` to `shape` elements."""
    return record("broadcast", name, [operandA], dim=dim, shape=shape)


@op_function
def Repeat(name: str, operandA: Tensor, factors: Sequence[int]) -> Tensor:
    """Repeat the tensor factors[i] times along each dim i."""
    return record("repeat", name, [operandA], factors=tuple(factors))


@op_function
def Unsqueeze(name: str, operandA: Tensor, dim: int) -> Tensor:
    """Insert a size-1 dim at dim."""
    return record("unsqueeze", name, [operandA], dim=dim)


@op_function
def Squeeze(name: str, operandA: Tensor, dim: int) -> Tensor:
    """Remove the size-1 dim at dim."""
    return record("squeeze", name, [operandA], dim=dim)


@op_function
def Narrow(name: str, operandA: Tensor, dim: int, start: int, length: int, original_length: int) -> Tensor:
    """Keep `length` elements from `start` along dim."""
    return record("narrow", name, [operandA], dim=dim, start=start, length=length, original_length=original_length)


@op_function
def PixelShuffle(name: str, operandA: Tensor, upscale_factor: int) -> Tensor:
    """Pixel shuffle operation: [.., C*r*r, H, W] -> [.., C, H*r, W*r]."""
    return record("pixel_shuffle", name, [operandA], upscale_factor=upscale_factor)


@op_function
def BudaPad(name: str, operandA: Tensor, paddings: Tuple[int, int], value: float) -> Tensor:
    """Pad rows and columns by whole tiles: paddings = (row_tiles, col_tiles), filled with value."""
    return record("buda_pad", name, [operandA], paddings=tuple(paddings), value=value)


@op_function
def BudaUnpad(name: str, operandA: Tensor, original_length: Tuple[int, ...], paddings: Tuple[int, int]) -> Tensor:
    """Remove the tiles BudaPad added, keeping original_length = (rows, cols)."""
    return record("buda_unpad", name, [operandA], original_length=tuple(original_length), paddings=tuple(paddings))


@op_function
def Concatenate(name: str, *operands: Union[Tensor, Parameter], axis: int) -> Tensor:
    """Concatenate tensors along axis."""
    return record("concatenate", name, list(operands), axis=axis)


@op_function
def Stack(name: str, *operands: Union[Tensor, Parameter], axis: int) -> Tensor:
    """Stack tensors along a new axis."""
    return record("stack", name, list(operands), axis=axis)


@op_function
def Interleave(name: str, *operands: Union[Tensor, Parameter], axis: int, stride: int) -> Tensor:
    """Interleave tensors along axis, `stride` elements from each in turn."""
    return record("interleave", name, list(operands), axis=axis, stride=stride)


@op_function
def BinaryStack(name: str, operandA: Tensor, operandB: Union[Tensor, Parameter], dim: int) -> Tensor:
    """Interleave A and B element by element along dim (the dim doubles)."""
    return record("binary_stack", name, [operandA, operandB], dim=dim)


