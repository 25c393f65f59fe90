"""Constant tensors the lowering creates: reduction vectors, tile broadcasters, masks, pickers.

Pickers are 0/1 (or weighted) matrices that move data with a matmul. Row pickers multiply from the
left and can be huge but very sparse (convolution im2col), so they are stored in TT-Buda's sparse
matmul form; column pickers are small and dense.

**Sparse picker encoding** (the ``identity: true`` matmul; the golden backend decodes exactly this):

- input 0, the *sparse tiles* queue: ``S`` unique 32x32 tiles stacked vertically, a tensor of shape
  ``[32*S, 32]`` (tile shape ``(t=1, rt=S, ct=1)``); tile ``s`` is rows ``[32*s, 32*s+32)``;
- input 1: the dense activation ``[t_in, K, C]`` (after its TMs); ``t_in`` is 1 or the output's t;
- input 2, the *index* queue, format RawUInt32: ``indices_len`` quadruples ``(t, out_rt, in_rt, s)``
  sorted by t, then ``out_rt``, then ``in_rt``, flattened and laid row-major into a ``[32*I, 32]`` int32
  tensor (tile shape ``(1, I, 1)``; tile i holds flat elements ``[1024*i, 1024*(i+1))``), padded with -1;
- output ``[t_out, out_rt*32, C]``: row-tile ``r`` of slice ``t`` = sum over quadruples ``(t, r, k, s)`` of
  ``tile_s @ in1[t if t_in > 1 else 0][k-th row-tile]``; row tiles with no quadruple are zero.
  Attributes: ``identity: true``, ``num_sparse_tiles: S``, ``num_index_tiles: I``, ``indices_len: L``,
  ``act_t: t_in``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Dict, Tuple

import numpy as np
import torch

from pybuda.golden import kernels as golden_kernels
from pybuda.netlist.tms import TileShape3

TILE = 32
#: Added where a max must ignore a position (padding of pools).
NEG_LARGE = -1.0e30
#: Added to the tile padding of an unaligned reduce-max dim: float32's lowest finite value, which every format
#: stores as its own lowest (Float16_b truncates it to bfloat16's, an A format saturates), so no datum lies
#: below it. With -1e30 a row of ``finfo.min`` scores (a fully masked attention row, filled by a constant)
#: took its max from the padding, every exp was 0, and the softmax's sum of zeros made the row NaN.
PAD_LOWEST = float(torch.finfo(torch.float32).min)


def align(n: int) -> int:
    """``n`` rounded up to a multiple of 32."""
    return -(-n // TILE) * TILE


def ones_reduce_c(c: int, scale: float) -> torch.Tensor:
    """``[align(c), 32]``: rows < c hold ``scale`` in every column, so ``x @ it`` sums a row into all 32
    columns of the result tile (the reduced value is replicated across the tile)."""
    t = torch.zeros(align(c), TILE)
    t[:c, :] = scale
    return t


def ones_reduce_r(r: int, scale: float) -> torch.Tensor:
    """``[32, align(r)]``: ``it @ x`` sums a column into all 32 rows of the result tile."""
    t = torch.zeros(TILE, align(r))
    t[:, :r] = scale
    return t


def tile_broadcast_r() -> torch.Tensor:
    """``E [32, 32]`` with ``E[i, 0] = 1``: ``E @ x`` copies row 0 of a tile into all its rows."""
    t = torch.zeros(TILE, TILE)
    t[:, 0] = 1.0
    return t


def tile_broadcast_c() -> torch.Tensor:
    """``E [32, 32]`` with ``E[0, j] = 1``: ``x @ E`` copies column 0 of a tile into all its columns."""
    t = torch.zeros(TILE, TILE)
    t[0, :] = 1.0
    return t


def row_mask(r: int) -> torch.Tensor:
    """``[align(r), 32]``: 1 on rows < r, 0 on padding rows (multiply to zero the row padding)."""
    t = torch.zeros(align(r), TILE)
    t[:r, :] = 1.0
    return t


def col_mask(c: int) -> torch.Tensor:
    """``[32, align(c)]``: 1 on columns < c, 0 on padding columns."""
    t = torch.zeros(TILE, align(c))
    t[:, :c] = 1.0
    return t


def neg_col_mask(c: int) -> torch.Tensor:
    """``[32, align(c)]``: 0 on columns < c, PAD_LOWEST on padding columns (added before a row max)."""
    t = torch.zeros(TILE, align(c))
    t[:, c:] = PAD_LOWEST
    return t


def neg_row_mask(r: int) -> torch.Tensor:
    """``[align(r), 32]``: 0 on rows < r, PAD_LOWEST on padding rows (added before a column max)."""
    t = torch.zeros(align(r), TILE)
    t[r:, :] = PAD_LOWEST
    return t


def column_picker(c_in: int, sources: np.ndarray) -> torch.Tensor:
    """Dense ``[align(c_in), align(len(sources))]`` with ``P[sources[j], j] = 1`` (-1 = zero column)."""
    p = torch.zeros(align(c_in), align(len(sources)))
    j = np.nonzero(sources >= 0)[0]
    p[torch.from_numpy(sources[j]).long(), torch.from_numpy(j).long()] = 1.0
    return p


def block_diag_weights(w: torch.Tensor, groups: int, cin_pad: int) -> torch.Tensor:
    """Convolution weights ``[Cout, Cin/groups, kh, kw]`` as the im2col matrix ``[kh*kw*cin_pad, Cout]``.

    Row ``pos*cin_pad + ci`` (``pos = ki*kw + kj``) holds the weight of input channel ``ci`` at kernel
    position ``pos``; grouped convolutions get zeros outside their group (block-diagonal).
    """
    cout, cin_g, kh, kw = w.shape
    cin = cin_g * groups
    cout_g = cout // groups
    m = torch.zeros(kh * kw, cin_pad, cout, dtype=torch.float32)
    wt = w.detach().to(torch.float32).permute(2, 3, 1, 0).reshape(kh * kw, cin_g, cout)  # [pos, ci_local, co]
    for g in range(groups):
        m[:, g * cin_g:(g + 1) * cin_g, g * cout_g:(g + 1) * cout_g] = wt[:, :, g * cout_g:(g + 1) * cout_g]
    del cin
    return m.reshape(kh * kw * cin_pad, cout)


def depthwise_weight_rows(w: torch.Tensor) -> torch.Tensor:
    """Depthwise weights ``[C, 1, kh, kw]`` as ``[kh*kw, 32, C]``: slice ``pos`` repeats the per-channel
    weights in all 32 rows of a tile row, ready to multiply picked pixels (broadcast r)."""
    c, _, kh, kw = w.shape
    rows = w.detach().to(torch.float32).reshape(c, kh * kw).t()  # [pos, C]
    return rows[:, None, :].expand(kh * kw, TILE, c).contiguous()


@dataclass
class SparsePicker:
    """A row picker in sparse matmul form (see the module docstring for the encoding)."""

    tiles: torch.Tensor  # [32*S, 32]
    index: torch.Tensor  # [32*I, 32] int32
    num_sparse_tiles: int
    num_index_tiles: int
    indices_len: int
    out_rt: int
    k_rt: int
    out_t: int = 1

    def entries(self) -> torch.Tensor:
        """The ``[indices_len, 4]`` quadruples (t, out_rt, in_rt, s)."""
        return self.index.reshape(-1)[: 4 * self.indices_len].reshape(-1, 4)

    @cached_property
    def tile_pairs(self) -> np.ndarray:
        """The index as an int32 ``[indices_len, 3]`` array of (t, out_rt, in_rt): what the performance model
        counts a layout's non-zero strips from (:mod:`pybuda.perf.sparse`). Kept: a picker is shared by every
        convolution of its geometry."""
        return self.entries()[:, :3].numpy().astype(np.int32)

    @cached_property
    def digest(self) -> str:
        """A fingerprint of :attr:`tile_pairs` (two pickers share legal op models only if theirs match)."""
        return hashlib.sha1(self.tile_pairs.tobytes()).hexdigest()

    def dense(self) -> torch.Tensor:
        """The picker as a dense ``[out_t, out_rt*32, k_rt*32]`` tensor (for tests and reference evaluation)."""
        m = torch.zeros(self.out_t, self.out_rt * TILE, self.k_rt * TILE)
        for t, r, k, s in self.entries().tolist():
            m[t, r * TILE:(r + 1) * TILE, k * TILE:(k + 1) * TILE] += self.tiles[s * TILE:(s + 1) * TILE, :]
        return m


def sparse_matmul(picker_tiles: torch.Tensor, index: torch.Tensor, indices_len: int, act: torch.Tensor,
                  out_rt: int, out_t: int = 1) -> torch.Tensor:
    """The identity matmul of a picker on ``act [t_in, K, C]`` -> ``[out_t, out_rt*32, C]``, in lowering's
    layout: the golden's kernel (:func:`pybuda.golden.kernels.sparse_matmul`) in float32, so that the
    encoding is checked against the semantics the chip model executes."""
    out_shape = TileShape3(out_t, out_rt, -(-act.shape[-1] // TILE))
    inputs = [picker_tiles.to(torch.float32)[None, None], act.to(torch.float32)[None],
              index.to(torch.float32)[None, None]]
    return golden_kernels.sparse_matmul(inputs, {"indices_len": int(indices_len)}, out_shape, None)[0]


def build_sparse_picker(out_rows: np.ndarray, in_rows: np.ndarray, values: np.ndarray, out_rt: int,
                        k_rt: int, out_t: np.ndarray = None, num_t: int = 1) -> SparsePicker:
    """Encode ``P[out_t[i], out_rows[i], in_rows[i]] += values[i]`` (datum rows) as sparse tiles."""
    out_rows = np.asarray(out_rows, dtype=np.int64)
    in_rows = np.asarray(in_rows, dtype=np.int64)
    values = np.asarray(values, dtype=np.float32)
    zs = np.zeros_like(out_rows) if out_t is None else np.asarray(out_t, dtype=np.int64)
    if out_rows.size == 0:
        return SparsePicker(torch.zeros(TILE, TILE), torch.full((TILE, TILE), -1, dtype=torch.int32), 1, 1, 0,
                            out_rt, k_rt, num_t)
    ot, lr = out_rows // TILE, out_rows % TILE
    it, lc = in_rows // TILE, in_rows % TILE
    order = np.lexsort((lc, lr, it, ot, zs))
    zs, ot, lr, it, lc, values = zs[order], ot[order], lr[order], it[order], lc[order], values[order]
    pos = (lr * TILE + lc).astype(np.int32)
    group_key = (zs * (out_rt + 1) + ot) * (k_rt + 1) + it
    starts = np.flatnonzero(np.r_[True, group_key[1:] != group_key[:-1]])
    ends = np.r_[starts[1:], len(group_key)]
    unique: Dict[Tuple[bytes, bytes], int] = {}
    quads = np.empty((len(starts), 4), dtype=np.int64)
    contents = []
    for g, (a, b) in enumerate(zip(starts, ends)):
        key = (pos[a:b].tobytes(), values[a:b].tobytes())
        s = unique.get(key)
        if s is None:
            s = len(unique)
            unique[key] = s
            contents.append((pos[a:b], values[a:b]))
        quads[g] = (zs[a], ot[a], it[a], s)
    num_tiles = len(unique)
    tiles = torch.zeros(num_tiles, TILE * TILE)
    for s, (p, v) in enumerate(contents):
        tiles[s].index_put_((torch.from_numpy(p.astype(np.int64)),), torch.from_numpy(v), accumulate=True)
    flat = quads.reshape(-1)
    num_index_tiles = max(1, -(-flat.size // (TILE * TILE)))
    index = np.full(num_index_tiles * TILE * TILE, -1, dtype=np.int32)
    index[: flat.size] = flat
    return SparsePicker(tiles.reshape(num_tiles * TILE, TILE), torch.from_numpy(index.reshape(num_index_tiles * TILE, TILE)),
                        num_tiles, num_index_tiles, len(quads), out_rt, k_rt, num_t)
