"""Matrix multiplication (with optional bias)."""

from __future__ import annotations

import torch

from pybuda.ops import integer
from pybuda.ops.common import broadcast_shapes, operand_dtypes_to, result_dtype
from pybuda.ops.registry import OpDef, register


def _matmul_shape(shapes, attrs):
    a, b = shapes[0], shapes[1]
    if len(a) < 2 or len(b) < 2:
        raise ValueError("matmul operands need rank >= 2")
    if a[-1] != b[-2]:
        raise ValueError(f"inner dimensions differ: {a[-1]} vs {b[-2]}")
    batch = broadcast_shapes(a[:-2], b[:-2]) if (a[:-2] or b[:-2]) else ()
    out = tuple(batch) + (a[-2], b[-1])
    if len(shapes) == 3 and broadcast_shapes(out, shapes[2]) != out:
        raise ValueError(f"bias of shape {list(shapes[2])} does not broadcast onto the output {list(out)}")
    return out


def _matmul_dtype(dtypes, attrs):
    return result_dtype(dtypes[0], dtypes[1])


def _matmul_eval(x, attrs):
    # Mixed operands (a bf16 activation times a float32 parameter) compute in the common dtype.
    x = operand_dtypes_to(list(x), result_dtype(x[0].dtype, x[1].dtype))
    out = torch.matmul(x[0], x[1])
    return out + x[2] if len(x) == 3 else out


def _matmul_bw(ac, operand, inputs, output, grad, attrs):
    if operand == 2:  # bias
        return ac.unbroadcast(grad, ac.shape(inputs[2]))
    other = ac.fwd(inputs[1 - operand])
    other_t = ac.transpose(other, -2, -1)
    local = ac.op("matmul", [grad, other_t] if operand == 0 else [other_t, grad])
    return ac.unbroadcast(local, ac.shape(inputs[operand]))


def _sparse_matmul_bw(ac, operand, inputs, output, grad, attrs):
    if operand == 1:  # the dense operand: a^T @ grad keeps the sparse constant on the left
        a_t = ac.transpose(ac.fwd(inputs[0]), -2, -1)
        return ac.unbroadcast(ac.op("sparse_matmul", [a_t, grad]), ac.shape(inputs[1]))
    # The sparse operand is normally a constant; should it be trainable, its gradient is grad @ b^T.
    return _matmul_bw(ac, operand, inputs, output, grad, attrs)


register(OpDef(name="matmul", family="matmul", arity=(2, 3), shape=_matmul_shape, eval=_matmul_eval,
               dtype=_matmul_dtype, backward=_matmul_bw, int_range=integer.matmul,
               doc="y = a @ b (+ bias). Batch dims broadcast; the bias broadcasts onto the output."))

register(OpDef(name="sparse_matmul", family="matmul", arity=(2, 2), shape=_matmul_shape, eval=_matmul_eval,
               dtype=_matmul_dtype, backward=_sparse_matmul_bw, int_range=integer.matmul,
               doc="y = a @ b with `a` a constant that the user gave as a sparse (COO) matrix, stored dense; "
                   "TT-Buda's sparse matmul computes the ordinary product."))
