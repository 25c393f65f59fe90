"""Kernel-cycle cases the shared cost model (:mod:`pybuda.backend.cost`) does not cover yet, expressed
*through* it so that its parameters stay the single source of truth.

Sparse ("identity") matmul. :func:`pybuda.backend.cost.kernel_cycles` charges a sparse matmul the dense
per-ublock overhead for every one of its ``m_k`` inner blocks and the math of ``num_sparse_tiles``
products. For a convolution's im2col picker ``m_k`` is the whole activation height (e.g. 1568 tiles
for ResNet-50's stem) while almost every block is zero, and the ``num_sparse_tiles`` unique picker
tiles are reused ``indices_len`` times. The work a core really does is one tile product per index
entry of its rows times its output columns: ``P = ceil(indices_len / grid_r)`` (the index is sorted
by output row, so grid rows split it evenly) times ``mblock_n·ublock_ct``. That is exactly the work of
a dense matmul producing one row of tiles with ``u_kt = P`` (one K step per product), which cost.py
knows how to cost; :func:`sparse_dense_equivalent` builds that op model.

Needed in cost.py (reported): ``_sparse_matmul_cycles`` and ``matmul_ideal_cycles`` should read
``indices_len`` as here; once they do, :func:`sparse_dense_equivalent` can go.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Tuple

__all__ = ["DenseEquivalent", "sparse_dense_equivalent"]


@dataclass(frozen=True)
class DenseEquivalent:
    """An OpModel-like blocking (the fields cost.py reads) for a dense matmul doing the same work."""

    grid_shape: Tuple[int, int]
    t: int
    mblock: Tuple[int, int]
    ublock: Tuple[int, int]
    m_k: int
    u_kt: int


def sparse_dense_equivalent(op: Any) -> Optional[DenseEquivalent]:
    """For a netlist sparse matmul (``identity: true`` with ``indices_len``), the dense blocking whose
    cost equals its real per-core work; None for any other op (cost.py's own formula applies)."""
    attrs = getattr(op, "attributes", None) or getattr(op, "attrs", {}) or {}
    if op.type != "matmul" or not attrs.get("identity"):
        return None
    indices = int(attrs.get("indices_len", 0) or 0)
    if indices <= 0:
        return None
    grid_r = max(1, int(op.grid_size[0]))
    products = max(1, math.ceil(indices / grid_r))
    return DenseEquivalent(grid_shape=tuple(op.grid_size), t=1, mblock=(1, int(op.mblock[1])),
                           ublock=(1, int(op.ublock[1])), m_k=1, u_kt=products)
