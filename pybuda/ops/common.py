"""Shape, attribute and dtype helpers shared by the op families.

Shape helpers raise ``ValueError`` with a short reason; :func:`pybuda.ops.registry.infer` turns that
into an OpError naming the op and the operand shapes.
"""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

import torch

Shape = Tuple[int, ...]


def normalize_dim(dim: int, rank: int) -> int:
    """Turn a possibly negative dim into an index in [0, rank); ValueError if out of range."""
    if not -rank <= dim < rank:
        raise ValueError(f"dim {dim} is out of range for rank {rank}")
    return dim % rank


def broadcast_shapes(*shapes: Sequence[int]) -> Shape:
    """Numpy/torch broadcasting of several shapes; ValueError naming the shapes if incompatible."""
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ValueError(f"shapes {[list(s) for s in shapes]} cannot be broadcast together")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def same_shape(shapes, attrs) -> Shape:
    """Shape function of unary ops: the output has the operand's shape."""
    return tuple(shapes[0])


def need_rank(shape: Sequence[int], least: int, what: str = "operand") -> None:
    """ValueError unless ``shape`` has at least ``least`` dims."""
    if len(shape) < least:
        raise ValueError(f"{what} needs rank >= {least}, got shape {list(shape)}")


def transpositions(perm: Sequence[int]) -> List[Tuple[int, int]]:
    """The two-dim swaps ``(i, j)`` that, applied in order as transposes, permute dims so that output dim
    ``i`` is input dim ``perm[i]`` (the registry's transpose swaps two dims)."""
    order = list(range(len(perm)))
    swaps = []
    for i, want in enumerate(perm):
        j = order.index(want)
        if j != i:
            swaps.append((i, j))
            order[i], order[j] = order[j], order[i]
    return swaps


def int_tuple(value: Any, n: int, what: str) -> Tuple[int, ...]:
    """An int or a sequence of ``n`` ints as an n-tuple of ints (ValueError otherwise)."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an int or {n} ints, got {value!r}")
    if isinstance(value, int):
        return (value,) * n
    if isinstance(value, (tuple, list)) and len(value) == n and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    raise ValueError(f"{what} must be an int or {n} ints, got {value!r}")


def int_list(value: Any, what: str) -> Tuple[int, ...]:
    """A sequence of ints as a tuple (ValueError naming ``what`` otherwise)."""
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"{what} must be a sequence of ints, got {value!r}")
    return tuple(value)


# --- dtypes -------------------------------------------------------------------------------------------

_DTYPES = {
    "float32": torch.float32, "float": torch.float32, "float16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "float64": torch.float64, "double": torch.float64,
    "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16, "int32": torch.int32, "int": torch.int32,
    "int64": torch.int64, "long": torch.int64, "bool": torch.bool,
    # complex values cross between CPU stages (the device holds its own as pairs of real tensors)
    "complex64": torch.complex64, "cfloat": torch.complex64, "complex128": torch.complex128, "cdouble": torch.complex128,
}


def dtype_name(dtype: Any) -> str:
    """Canonical name of a dtype given as a torch.dtype or a name ('torch.int8' and 'int8' both work)."""
    if isinstance(dtype, torch.dtype):
        return str(dtype).replace("torch.", "")
    if isinstance(dtype, str):
        name = dtype.replace("torch.", "")
        if name in _DTYPES:
            return str(_DTYPES[name]).replace("torch.", "")
    raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(set(_DTYPES))}")


def torch_dtype(name: Any) -> torch.dtype:
    """The torch dtype for a name accepted by :func:`dtype_name`."""
    return getattr(torch, dtype_name(name))


def _category(dtype: torch.dtype) -> int:
    if dtype == torch.bool:
        return 0
    if dtype.is_floating_point:
        return 2
    return 1


def result_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """Output dtype of an elementwise op on several operands.

    TT-Buda gives operand 0's format; that holds here while the operands share a category (bool, int,
    float), so ``bf16_tensor * 2.0`` stays bfloat16. Across categories the higher one wins, as in torch
    (an int tensor times a float constant is float), taking the first operand of that category.
    """
    best = dtypes[0]
    for dt in dtypes[1:]:
        if _category(dt) > _category(best):
            best = dt
    return best


def float_dtype(dtype: torch.dtype) -> torch.dtype:
    """``dtype`` if it is floating point, else float32 (the result of exp, log, mean... on integers)."""
    return dtype if dtype.is_floating_point else torch.float32


def float_in(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself if floating point, else as float32: integer inputs of float math compute in float32."""
    return t if t.dtype.is_floating_point else t.to(torch.float32)


def operand_dtypes_to(tensors: List[torch.Tensor], dtype: torch.dtype) -> List[torch.Tensor]:
    """Cast every tensor to ``dtype`` (no copy where it already has it)."""
    return [t if t.dtype == dtype else t.to(dtype) for t in tensors]
