"""Lowering of data movement (a mixin of the lowering pass): chains of TMs matched as netlist TM
sequences, else column/row pickers. See :mod:`pybuda.passes.lower.to_tiles`."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import List, Optional

import numpy as np
import torch

from pybuda.ir.graph import Node
from pybuda.netlist.tms import Transpose, VSlice, VStack
from pybuda.ops import registry
from pybuda.netlist.host_io import canonical_zrc, tiles
from pybuda.passes.lower.common import (
    JUNK, TILE, ZERO, DVal, Lazy, _combine_pad, _hashable, _match_mapping, _unhashable,
)


class DataMovementLowering:
    """Methods of the lowering pass for reshape/transpose/index/concat-like ops."""

    def _resolve(self, lz: Lazy) -> DVal:
        """Lower a chain of data-movement ops: tile TMs when they realise it; else a column picker that
        selects/reorders the columns the chain keeps followed by TMs (e.g. splitting fused QKV columns
        into heads); else general pickers."""
        v = self._canonical(lz.base)
        key = ("resolve", lz.base_shape, lz.ops)
        plan = self.cache.get(key)
        if plan is None:
            plan = self._plan_chain(lz)
            self.cache[key] = plan
        kind, cols, tms = plan
        if kind == "pickers":
            return self._gather_pickers(self.g[lz.name], [v], [lz.base_shape], lz.shape, chain=lz)
        if cols is not None:
            v = self._col_pick(v, f"{lz.name}.select_cols", cols, key=("select_cols", lz.base_shape, lz.ops))
        zo, ro, co = canonical_zrc(lz.shape)
        if not tms and (v.z, v.r, v.c) == (zo, ro, co):
            return v
        pad_r, pad_c = (v.pad_c, v.pad_r) if sum(isinstance(t, Transpose) for t in tms) % 2 else (v.pad_r, v.pad_c)
        if any(not isinstance(t, Transpose) for t in tms):
            pad_r, pad_c = JUNK, JUNK
        return replace(v, tms=tuple(v.tms) + tuple(tms), z=zo, r=ro, c=co, pad_r=pad_r, pad_c=pad_c,
                       is_queue_value=v.is_queue_value and not tms)

    def _plan_chain(self, lz: Lazy):
        """("tms", None, tms) | ("tms", column_sources, tms) | ("pickers", None, None)."""
        zi, ri, ci = canonical_zrc(lz.base_shape)
        zo, ro, co = canonical_zrc(lz.shape)
        expected = self._index_map([lz.base_shape], lz.ops).reshape(zo, ro, co)
        tms = _match_mapping((zi, ri, ci), expected)
        if tms is not None:
            return ("tms", None, tms)
        valid = expected[expected >= 0]
        if valid.numel() == 0:
            return ("pickers", None, None)
        used = torch.unique(valid % ci)
        if used.numel() < ci:
            # Keep only the columns the chain reads, in order, then try the TMs again.
            position = torch.full((ci,), -1, dtype=torch.int64)
            position[used] = torch.arange(used.numel())
            cu = used.numel()
            remapped = torch.where(expected >= 0, (expected // ci) * cu + position[expected.clamp(min=0) % ci],
                                   torch.full_like(expected, -1))
            tms = _match_mapping((zi, ri, cu), remapped)
            if tms is not None:
                return ("tms", used.numpy(), tms)
        return ("pickers", None, None)

    def _index_map(self, in_shapes, ops, node: Optional[Node] = None) -> torch.Tensor:
        """Source of every output element as a flat index over the inputs (in order), -1 = zero."""
        offsets = np.cumsum([0] + [math.prod(s) for s in in_shapes])
        idx = [torch.arange(int(offsets[i]) + 1, int(offsets[i + 1]) + 1, dtype=torch.int64).reshape(s)
               for i, s in enumerate(in_shapes)]
        for op_type, attrs in ops:
            attrs = _unhashable(attrs)
            if op_type in ("pad", "buda_pad") and attrs.get("value", 0.0) != 0.0:
                raise self.err(f"{op_type} with a non-zero value has no device form yet")
            # replicate/reflect pads only repeat input elements: index_select on the index map is exact
            idx = [registry.evaluate(op_type, idx, attrs)]
        return idx[0].to(torch.int64) - 1

    def _gather_pickers(self, node: Node, ops: List[DVal], in_shapes, out_shape, chain: Optional[Lazy] = None) -> DVal:
        """Data movement as row pickers (sparse, on vstack-ed rows) and/or column pickers, summed per input."""
        op_list = chain.ops if chain is not None else ((node.op_type, _hashable(node.attrs)),)
        emap = self._index_map(in_shapes, op_list)
        zo, ro, co = canonical_zrc(out_shape)
        emap = emap.reshape(zo, ro, co).numpy()
        sizes = [math.prod(s) for s in in_shapes]
        offsets = np.cumsum([0] + sizes)
        parts: List[DVal] = []
        for k, (v, s) in enumerate(zip(ops, in_shapes)):
            zi, ri, ci = canonical_zrc(s)
            mine = (emap >= offsets[k]) & (emap < offsets[k + 1])
            if not mine.any():
                continue
            local = np.where(mine, emap - offsets[k], -1)
            src_row = np.where(local >= 0, local // ci, -1).reshape(zo * ro, co)  # source row index zi*ri + i
            src_col = np.where(local >= 0, local % ci, -1).reshape(zo * ro, co)
            # Output columns that take their rows from the same source rows form one part: a column picker
            # (placing those columns) followed by a row picker; the parts are summed. A plain gather is one
            # part; a reshape that merges f rows into one is f parts.
            vectors, group_of = np.unique(src_row.T, axis=0, return_inverse=True)
            group_of = np.asarray(group_of).reshape(-1)
            groups = [g for g in range(len(vectors)) if (vectors[g] >= 0).any()]
            if len(groups) > 32:
                raise self.err(f"{node.op_type} from {list(s)} to {list(out_shape)} moves data in a way the device "
                               f"cannot express cheaply ({len(groups)} picker parts); run it on the CPU or change "
                               f"the model's layout")
            for g in groups:
                cols = np.nonzero(group_of == g)[0]
                col_map = np.full(co, -1, dtype=np.int64)
                for j in cols:
                    vals = src_col[:, j][src_col[:, j] >= 0]
                    if vals.size and vals.min() != vals.max():
                        raise self.err(f"{node.op_type} from {list(s)} to {list(out_shape)}: output column {j} reads "
                                       f"several source columns; the device cannot express it")
                    if vals.size:
                        col_map[j] = vals[0]
                parts.append(self._place(node, v, k, g, col_map, vectors[g], (zi, ri, ci), (zo, ro, co)))
        if not parts:
            raise self.err(f"{node.op_type} produces only padding; it has no device form")
        out = parts[0]
        for i, p in enumerate(parts[1:], start=1):
            # The sum's padding is zero only where every part's is: a part whose rows needed no picker keeps
            # its input's row padding, which may be junk (a matmul over those rows must then mask them).
            pad = (_combine_pad("add", [out.pad_r, p.pad_r], ro), _combine_pad("add", [out.pad_c, p.pad_c], co))
            out = self.emit(f"{node.name}.join{i}", "add", [(out, ()), (p, ())], (zo, ro, co), pad=pad)
        return out

    def _place(self, node: Node, v: DVal, k: int, g: int, col_map: np.ndarray, row_map: np.ndarray, src, dst) -> DVal:
        """One picker part: output column j = input column col_map[j]; output row r = input row row_map[r]."""
        zi, ri, ci = src
        zo, ro, co = dst
        cur = v
        if not (co == ci and np.array_equal(col_map, np.arange(ci))):
            cur = self._col_pick(cur, f"{node.name}.cols{k}_{g}", col_map)
        rp_in, rp_out = tiles(ri) * TILE, tiles(ro) * TILE
        if not (zo == zi and ro == ri and np.array_equal(row_map, np.arange(zi * ri))):
            out_idx = np.nonzero(row_map >= 0)[0]
            srcs = row_map[out_idx]
            out_rows = (out_idx // ro) * rp_out + out_idx % ro
            in_rows = (srcs // ri) * rp_in + srcs % ri
            stacked = replace(cur, tms=tuple(cur.tms) + ((VStack(factor=zi),) if zi > 1 else ()), z=1, r=zi * rp_in)
            cur = self._row_pick(stacked, f"{node.name}.rows{k}_{g}", out_rows, in_rows,
                                 np.ones(len(out_rows), np.float32), out_r=zo * rp_out, k_r=zi * rp_in)
            cur = replace(cur, tms=(VSlice(factor=zo),) if zo > 1 else (), z=zo, r=ro, pad_r=ZERO)
        return replace(cur, z=zo, r=ro, c=co)
