"""Lowering of data movement (a mixin of the lowering pass): chains of TMs matched as netlist TM
sequences, else column/row pickers. See :mod:`pybuda.passes.lower.to_tiles`."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import List, Optional

import numpy as np
import torch

from pybuda.ir.graph import Node
from pybuda.netlist.tms import HSlice, HStack, Transpose, VSlice, VStack
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
        if kind == "rotate":
            return self._rotated_move(self.g[lz.name], v, cols, tms, lz.shape)
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
        return self._plan_general((zi, ri, ci), expected)

    def _plan_general(self, src, expected: torch.Tensor):
        """Plan for a map the column picker + TMs cannot do: pickers when every output column reads one
        source column; else a z <-> c rotation of the source first (``("rotate", kind, map)``), the move
        that turns NCHW into NHWC and back (a transpose, ``hstack``, one dense column picker, ``hslice``),
        followed by TMs or pickers on the rotated value."""
        if _pickers_feasible(src, expected):
            return ("pickers", None, None)
        zi = src[0]
        for group in [d for d in range(zi, 0, -1) if zi % d == 0]:
            for kind in ("fwd", "inv"):
                rshape, rmap = _rotated_map(src, expected, kind, group)
                if _match_mapping(rshape, rmap) is not None or _pickers_feasible(rshape, rmap):
                    return ("rotate", (kind, group), rmap)
        return ("pickers", None, None)  # reports why the device cannot do it

    def _rotate(self, v: DVal, kind: str, group: int) -> DVal:
        """Canonical ``v`` (B*Z, R, C), Z = ``group``, rotated within each group of Z slices: ``fwd`` ->
        (B*R, C, Z) (out[b, r][c][z] = in[b, z][r][c]: NCHW -> NHWC for z = C), ``inv`` -> (B*C, Z, R)
        (NHWC -> NCHW for z = H). Each group's tile-aligned slices are stacked along columns (``hstack``), one
        dense column picker reorders the columns, and ``hslice`` cuts the new z back out."""
        key = ("rotate", v.src, v.tms, kind, group, v.z, v.r, v.c)
        if key in self.cache:
            return self.cache[key]
        z, r, c = group, v.r, v.c
        b = v.z // group
        stack = (HStack(factor=z),) if z > 1 else ()
        if kind == "fwd":
            # transpose: (Z, C, R); hstack Z: col z*Rp + r  ->  col r*Zp + z; hslice R: (R, C, Z)
            rp, zp = tiles(r) * TILE, tiles(z) * TILE
            src = replace(v, tms=tuple(v.tms) + (Transpose(),) + stack, z=b, r=c, c=z * rp, pad_r=v.pad_c, pad_c=JUNK)
            zz, rr = np.meshgrid(np.arange(z), np.arange(r), indexing="ij")
            sources = np.full(r * zp, -1, dtype=np.int64)
            sources[(rr * zp + zz).reshape(-1)] = (zz * rp + rr).reshape(-1)
            out_z, out_r, out_c, slices = b * r, c, z, r
        else:
            # hstack Z: col z*Cp + c  ->  col c*Zp + z; hslice C: (C, R, Z); transpose: (C, Z, R)
            cp, zp = tiles(c) * TILE, tiles(z) * TILE
            src = replace(v, tms=tuple(v.tms) + stack, z=b, c=z * cp, pad_c=JUNK)
            zz, cc = np.meshgrid(np.arange(z), np.arange(c), indexing="ij")
            sources = np.full(c * zp, -1, dtype=np.int64)
            sources[(cc * zp + zz).reshape(-1)] = (zz * cp + cc).reshape(-1)
            out_z, out_r, out_c, slices = b * c, z, r, c
        name = f"{self.node.name if self.node is not None else v.src}.rotate_{kind}"
        picked = self._col_pick(src, name, sources, key=("rotate", kind, z, r, c))
        tms = (HSlice(factor=slices),) if slices > 1 else ()
        if kind == "fwd":
            out = replace(picked, tms=tms, z=out_z, r=out_r, c=out_c, pad_c=ZERO)
        else:
            out = replace(picked, tms=tms + (Transpose(),), z=out_z, r=out_r, c=out_c, pad_r=ZERO, pad_c=v.pad_r)
        out = replace(out, is_queue_value=False, layout="canonical", spatial=None)
        self.cache[key] = out
        return out

    def _rotated_move(self, node: Node, v: DVal, rotation, rmap: torch.Tensor, out_shape) -> DVal:
        """``v`` rotated (see :meth:`_rotate`), then moved by ``rmap`` (source indices into the rotated value)."""
        rv = self._rotate(v, *rotation)
        zo, ro, co = canonical_zrc(out_shape)
        tms = _match_mapping((rv.z, rv.r, rv.c), rmap)
        if tms is not None:
            if not tms and (rv.z, rv.r, rv.c) == (zo, ro, co):
                return rv
            return replace(rv, tms=tuple(rv.tms) + tuple(tms), z=zo, r=ro, c=co, pad_r=JUNK, pad_c=JUNK)
        return self._gather_pickers(node, [rv], [(rv.z, rv.r, rv.c)], out_shape, emap=rmap.reshape(-1))

    def move(self, v: DVal, in_shape, out_shape, emap: torch.Tensor, name: str) -> DVal:
        """Move the elements of ``v`` (logical shape ``in_shape``) into ``out_shape``: output element i takes
        input element ``emap[i]`` (flat, -1 = zero), by TMs, pickers or a rotation and pickers."""
        v = self._canonical(v)
        zi, ri, ci = canonical_zrc(in_shape)
        zo, ro, co = canonical_zrc(out_shape)
        expected = emap.reshape(zo, ro, co).to(torch.int64)
        tms = _match_mapping((zi, ri, ci), expected)
        if tms is not None:
            if not tms:
                return v
            return replace(v, tms=tuple(v.tms) + tuple(tms), z=zo, r=ro, c=co, pad_r=JUNK, pad_c=JUNK,
                           is_queue_value=False)
        kind, rot, rmap = self._plan_general((zi, ri, ci), expected)
        node = self.node if self.node is not None else _Named(name)
        if kind == "rotate":
            return self._rotated_move(node, v, rot, rmap, out_shape)
        return self._gather_pickers(node, [v], [tuple(in_shape)], out_shape, emap=expected.reshape(-1))

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

    def _gather_pickers(self, node: Node, ops: List[DVal], in_shapes, out_shape, chain: Optional[Lazy] = None,
                        emap: Optional[torch.Tensor] = None, max_parts: int = 32) -> DVal:
        """Data movement as row pickers (sparse, on vstack-ed rows) and/or column pickers, summed per input.
        ``emap``: the source of every output element when it is not the node's (or chain's) own map."""
        if emap is None:
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
            if len(groups) > max_parts:
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


class _Named:
    """Stands in for an IR node where a move has no node of its own (only its name is read)."""

    op_type = "move"

    def __init__(self, name: str):
        self.name = name


def _pickers_feasible(src, expected: torch.Tensor, max_parts: int = 32) -> bool:
    """Whether :meth:`DataMovementLowering._gather_pickers` can realise ``expected`` from one canonical
    source ``src`` (z, r, c): every output column reads one source column, in at most ``max_parts`` parts."""
    zi, ri, ci = src
    zo, ro, co = expected.shape
    e = expected.reshape(zo * ro, co)
    valid = e >= 0
    if not valid.any():
        return False
    col = torch.where(valid, e % ci, torch.full_like(e, -1))
    hi = torch.where(valid, col, torch.full_like(col, -1)).max(dim=0).values
    lo = torch.where(valid, col, torch.full_like(col, ci + 1)).min(dim=0).values
    used = valid.any(dim=0)
    if bool((hi[used] != lo[used]).any()):
        return False
    rows = torch.where(valid, e // ci, torch.full_like(e, -1)).T.numpy()
    vectors = np.unique(rows, axis=0)
    return sum(1 for vec in vectors if (vec >= 0).any()) <= max_parts


def _rotated_map(src, expected: torch.Tensor, kind: str, group: int):
    """(rotated shape, ``expected`` re-expressed as indices into ``src`` rotated within groups of ``group``
    slices, see :meth:`DataMovementLowering._rotate`)."""
    zi, ri, ci = src
    base = torch.arange(zi * ri * ci).reshape(zi // group, group, ri, ci)
    rot = base.permute(0, 2, 3, 1) if kind == "fwd" else base.permute(0, 3, 1, 2)
    rot = rot.reshape((-1,) + tuple(rot.shape[2:]))
    position = torch.empty(zi * ri * ci, dtype=torch.int64)
    position[rot.reshape(-1)] = torch.arange(rot.numel())
    rmap = torch.where(expected >= 0, position[expected.clamp(min=0)], torch.full_like(expected, -1))
    return tuple(rot.shape), rmap
