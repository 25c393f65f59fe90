"""Elementwise ops: binary (with broadcasting) and unary."""

from __future__ import annotations

import torch

from pybuda.ops.common import broadcast_shapes, same_shape
from pybuda.ops.registry import OpDef, attr, register


def _binary_shape(shapes, attrs):
    return broadcast_shapes(shapes[0], shapes[1])


def _binary(name: str, fn, doc: str) -> OpDef:
    return register(OpDef(name=name, family="eltwise_binary", arity=(2, 2), shape=_binary_shape,
                          eval=lambda x, a: fn(x[0], x[1]), doc=doc))


_binary("add", torch.add, "Elementwise a + b, with broadcasting.")
_binary("subtract", torch.sub, "Elementwise a - b, with broadcasting.")
_binary("multiply", torch.mul, "Elementwise a * b, with broadcasting.")


def _unary(name: str, fn, doc: str, **attrs) -> OpDef:
    return register(OpDef(name=name, family="eltwise_unary", arity=(1, 1), shape=same_shape,
                          eval=lambda x, a: fn(x[0], a), attrs=attrs, doc=doc))


_unary("exp", lambda x, a: torch.exp(x), "Elementwise e^x.")
_unary("relu", lambda x, a: _relu(x, a["threshold"], a["mode"]),
       "ReLU with a threshold: mode 'min' keeps x >= threshold, 'max' keeps x <= threshold.",
       threshold=attr(float, default=0.0), mode=attr(str, default="min", choices=("min", "max")))


def _relu(x: torch.Tensor, threshold: float, mode: str) -> torch.Tensor:
    if mode == "min":
        return torch.where(x >= threshold, x, torch.zeros_like(x))
    return torch.where(x <= threshold, x, torch.zeros_like(x))
