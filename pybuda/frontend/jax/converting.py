"""The registry of JAX converters (``CONVERTERS[primitive name](builder, eqn, args)``, filled by ``@converts``) and
the helpers every converter module reads operands with: static shapes and dtypes of an equation's variables,
operands as graph nodes or constants. :mod:`pybuda.frontend.jax.primitives` and
:mod:`pybuda.frontend.jax.complex_values` register into it.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch

from pybuda.frontend.aten_builder import Builder, Const, Unsupported
from pybuda.frontend.converters import registrar
from pybuda.frontend.jax.capture import torch_dtype
from pybuda.ops.common import transpositions

Converter = Callable[[Builder, Any, List[Any]], Any]
CONVERTERS: Dict[str, Converter] = {}
#: ``@converts("add", ...)`` registers a converter for lax primitives.
converts = registrar(CONVERTERS, "lax primitive")


# --- helpers ------------------------------------------------------------------------------------------
def out_shape(eqn: Any, i: int = 0) -> Tuple[int, ...]:
    """Static shape of output ``i``."""
    return tuple(int(d) for d in eqn.outvars[i].aval.shape)


def out_dtype(eqn: Any, i: int = 0) -> torch.dtype:
    """torch dtype of output ``i``."""
    return torch_dtype(eqn.outvars[i].aval.dtype)


def in_shape(eqn: Any, i: int) -> Tuple[int, ...]:
    return tuple(int(d) for d in eqn.invars[i].aval.shape)


def in_dtype(eqn: Any, i: int) -> torch.dtype:
    return torch_dtype(eqn.invars[i].aval.dtype)


def _is_number(v: Any) -> bool:
    return isinstance(v, (bool, int, float))


def tensor_of(b: Builder, eqn: Any, args: Sequence[Any], i: int, dtype: torch.dtype = None) -> str:
    """Operand ``i`` as a graph node with its aval's shape (scalar literals become full constants)."""
    v = args[i]
    shape = in_shape(eqn, i)
    dt = dtype or in_dtype(eqn, i)
    if _is_number(v):
        return b.const(torch.full(shape, v, dtype=dt), "literal")
    name = b.tensor(v, dt)
    if b.shape(name) != shape:
        name = b.reshape(name, shape)
    return name


def constant_value(b: Builder, v: Any) -> torch.Tensor:
    """The value of an operand known at capture time, else Unsupported."""
    if _is_number(v):
        return torch.tensor(v)
    if isinstance(v, Const):
        return v.value
    if isinstance(v, str) and b.graph[v].kind == "constant":
        return b.graph.tensors[v]
    raise Unsupported("needs an operand known at capture time (a constant)")


def permute(b: Builder, v: Any, perm: Sequence[int]) -> str:
    """``v`` with its dims permuted (``out[i] = in[perm[i]]``) as a chain of two-dim transposes."""
    name = b.tensor(v)
    for i, j in transpositions(perm):
        name = b.transpose(name, i, j)
    return name
