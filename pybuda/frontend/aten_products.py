"""Converters for products along a dim: ``prod`` and ``cumprod``.

The chip multiplies elementwise but has no product reduction, so both are built from multiplies of slices in
``log2(n)`` rounds:

* ``cumprod`` is a doubling scan: round ``s`` (1, 2, 4, ...) multiplies every value by the one ``s`` places before
  it (ones before the start), so after the rounds position j holds the product of positions 0..j — a
  stick-breaking weight ``v_k * prod_{j<k} (1 - v_j)``, a survival probability;
* ``prod`` halves the dim each round (the first half times the second, a one padding an odd length).

Zeros, signs, infinities and NaN come out as torch's products have them. The values differ from torch's by the order
the factors are multiplied in and by the chip's multiplier, which reads each operand through its 19-bit source
registers (10 fraction bits): a product of n Float32 factors is within about n * 2**-9 of torch's. Integer data stays
on the host: its products are not proven to stay within the integers the device keeps exact.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from pybuda.frontend.aten_builder import Builder, Unsupported, _norm_dim, converts
from pybuda.frontend.aten_index import const_gather
from pybuda.frontend.aten_shape import _index_range, padded
from pybuda.frontend.fx_program import meta_val


def _float_factors(b: Builder, x: Any, dtype: Any, what: str) -> str:
    """``x`` as the float data to multiply (in the requested ``dtype`` when one is given)."""
    target = dtype if isinstance(dtype, torch.dtype) else b.dtype(x)
    if not target.is_floating_point:
        raise Unsupported(f"{what} of integer data (its products are not proven to stay exact on the device)")
    return b.cast(x, target) if b.dtype(x) != target else b.tensor(x)


def _with_ones(b: Builder, x: str, dim: int, before: int, after: int) -> str:
    """``x`` with ``before`` ones in front and ``after`` behind along ``dim`` (a constant pad)."""
    pad = [0] * (2 * (b.rank(x) - dim))
    pad[-2:] = [before, after]
    return padded(b, x, pad, "constant", 1.0)


def running_product(b: Builder, x: str, dim: int, exclusive: bool = False, reverse: bool = False) -> str:
    """The running product of ``x`` along ``dim`` (a doubling scan, see the module docstring): position j holds the
    product of positions 0..j, of 0..j-1 when ``exclusive`` (ONNX CumProd), counted from the end when ``reverse``."""
    size = b.shape(x)[dim]
    if reverse:
        x = const_gather(b, x, torch.arange(size - 1, -1, -1), dim, "reversed")
    if exclusive:  # the product before each position: the values shifted one place, a one in front
        x = _index_range(b, _with_ones(b, x, dim, 1, 0), dim, 0, size)
    shift = 1
    while shift < size:
        x = b.op("multiply", [x, _with_ones(b, _index_range(b, x, dim, 0, size - shift), dim, shift, 0)])
        shift *= 2
    return const_gather(b, x, torch.arange(size - 1, -1, -1), dim, "reversed") if reverse else x


def product_along(b: Builder, x: str, dim: int) -> str:
    """The product of ``x`` along ``dim``, kept as a dim of size 1 (halved each round, see the module docstring)."""
    size = b.shape(x)[dim]
    while size > 1:
        if size % 2:
            x = _with_ones(b, x, dim, 0, 1)
            size += 1
        half = size // 2
        x = b.op("multiply", [_index_range(b, x, dim, 0, half), _index_range(b, x, dim, half, size)])
        size = half
    return x


def _shape_or_unsupported(b: Builder, x: str, what: str) -> Sequence[int]:
    shape = b.shape(x)
    if math.prod(shape) == 0:
        raise Unsupported(f"{what} of an empty tensor")
    return shape


@converts("cumprod")
def _cumprod(b: Builder, n, p):
    x = _float_factors(b, p["self"], p.get("dtype"), "cumprod")
    if not _shape_or_unsupported(b, x, "cumprod"):
        return x  # a 0-d tensor is its own running product
    return running_product(b, x, _norm_dim(p["dim"], b.rank(x)))


@converts("prod")
def _prod(b: Builder, n, p):
    x = _float_factors(b, p["self"], p.get("dtype"), "prod")
    shape = _shape_or_unsupported(b, x, "prod")
    want = tuple(meta_val(n).shape)
    if "dim" not in p:  # every element
        return b.reshape(product_along(b, b.reshape(x, (max(1, math.prod(shape)),)), 0), want)
    if not shape:
        return x
    return b.reshape(product_along(b, x, _norm_dim(p["dim"], len(shape))), want)
