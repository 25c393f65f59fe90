"""Shape helpers shared by the op families."""

from __future__ import annotations

from typing import Sequence, Tuple

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
