"""The per-core work of a sparse ("identity") matmul, in the counts BBE's sparse cycle formulas read.

A sparse matmul walks its index (:mod:`pybuda.passes.lower.pickers`). Its in1 streams through every core
in *strips* of ``u_kt`` tile rows, ``m_k`` strips per t slice. For each strip that holds an index entry
of its output rows, a core decodes which of its output ublocks the strip reaches and multiplies the
picker tiles of those entries. BBE's formulas (:func:`pybuda.perf.cost.kernel_cycles`) therefore read
three counts per core:

- **nz tiles**: the index entries of the core's output rows, one tile product per output tile column;
- **nz strips**: the (t, strip) pairs that hold at least one of those entries;
- **nz ublocks**: the (t, strip, output ublock) triples that do.

The netlist carries the strips of every core (``num_nz_strips``, as TT-Buda's netlists did). The compiler
counts them from the picker's index for the op's layout (:func:`nz_strips_per_core`; the lowering keeps
the index entries in the op's :data:`ENTRIES_TAG` tag) and the performance model reads them back, so the
balancer and the model see one number. The netlist has no per-core tiles or ublocks: both sides derive
them the same way (:func:`sparse_work`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, Tuple

import numpy as np

#: Tag of a lowered sparse matmul (BudaOp.tags): its index entries as an int array ``[L, 3]`` of
#: (t, output row tile, K row tile).
ENTRIES_TAG = "sparse_entries"
#: Tag with a digest of the entries: two sparse matmuls share legal op models only if their indices match.
DIGEST_TAG = "sparse_digest"


@dataclass(frozen=True)
class SparseWork:
    """What one core of a sparse matmul does per input (see the module docstring)."""

    nz_tiles: int
    nz_ublocks: int
    nz_strips: int


def nz_strips_per_core(entries: np.ndarray, grid_r: int, rows_per_core: int, u_kt: int) -> Tuple[int, ...]:
    """Non-zero strips of each grid row of cores: core row ``g`` computes output row tiles
    ``[g·rows_per_core, (g+1)·rows_per_core)`` of every t slice and reads in1 in strips of ``u_kt`` tiles.
    Every core of a grid row has the same strips (the grid columns split only the output columns)."""
    if len(entries) == 0:
        return (0,) * grid_r
    t = entries[:, 0].astype(np.int64)
    core = np.minimum(entries[:, 1] // max(1, rows_per_core), grid_r - 1).astype(np.int64)
    strip = (entries[:, 2] // max(1, u_kt)).astype(np.int64)
    strips = int(strip.max()) + 1
    present = np.zeros((grid_r, int(t.max()) + 1, strips), dtype=bool)
    present[core, t, strip] = True
    return tuple(int(n) for n in present.sum(axis=(1, 2)))


def strips_for_layout(tags: Mapping[str, Any], grid_r: int, grid_c: int, rows_per_core: int,
                      u_kt: int) -> Tuple[int, ...]:
    """``num_nz_strips`` of a lowered sparse matmul laid out on a ``grid_r x grid_c`` grid: one value per
    core, row-major, counted from the entries its lowering kept (``()`` without them). Memoised in the
    op's tags, since the balancer prices many layouts of one op."""
    entries = tags.get(ENTRIES_TAG)
    if entries is None:
        return ()
    memo = tags.setdefault("_nz_strips", {})
    key = (grid_r, rows_per_core, u_kt)
    if key not in memo:
        memo[key] = nz_strips_per_core(entries, grid_r, rows_per_core, u_kt)
    per_row = memo[key]
    return tuple(per_row[r] for r in range(grid_r) for _ in range(grid_c))


def sparse_work(attrs: Mapping[str, Any], t: int, mblock_m: int, m_k: int, grid_r: int) -> SparseWork:
    """The counts of the busiest core from a sparse matmul's netlist attributes.

    - nz tiles: ``indices_len`` split evenly over the grid rows (the output rows are);
    - nz strips: the most of ``num_nz_strips``; without it (a hand-written netlist) every core is assumed
      to reach its share of in1's strips and one more, ``t·min(m_k, ⌈m_k / grid_r⌉ + 1)`` [D];
    - nz ublocks: a picker's index is banded (each output row reads a few nearby rows), so a strip reaches
      the ublocks its band spans and a band of ublocks crosses one strip boundary per ublock:
      ``min(nz strips + t·mblock_m, nz strips·mblock_m, nz tiles)`` [D].
    """
    indices = int(attrs.get("indices_len", 0) or 0) or int(attrs.get("num_sparse_tiles", 0) or 0)
    nz_tiles = max(1, math.ceil(indices / max(1, grid_r)))
    given: Sequence[int] = attrs.get("num_nz_strips") or ()
    if given:
        strips = max(int(n) for n in given)
    else:
        strips = t * min(m_k, math.ceil(m_k / max(1, grid_r)) + 1)
    strips = max(1, min(strips, nz_tiles))
    ublocks = max(strips, min(strips + t * mblock_m, strips * mblock_m, nz_tiles))
    return SparseWork(nz_tiles=nz_tiles, nz_ublocks=ublocks, nz_strips=strips)
