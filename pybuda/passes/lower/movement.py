"""Lowering of data movement (a mixin of the lowering pass): chains of TMs matched as netlist TM
sequences, else column/row pickers. See :mod:`pybuda.passes.lower.to_tiles`."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from pybuda.ir.graph import Node
from pybuda.netlist.tms import TM, Broadcast, HSlice, HStack, Transpose, VSlice, VStack
from pybuda.ops import registry
from pybuda.netlist.host_io import canonical_zrc, tiles
from pybuda.passes.lower.conv import band_limit_tiles, row_bands
from pybuda.passes.lower.common import (
    JUNK, TILE, ZERO, DVal, Lazy, _combine_pad, _hashable, _match_mapping, _unhashable,
)


class DataMovementLowering:
    """Methods of the lowering pass for reshape/transpose/index/concat-like ops."""

    def _resolve(self, lz: Lazy) -> DVal:
        """Lower a chain of data-movement ops: tile TMs when they realise it; else a column picker that
        selects/reorders the columns the chain keeps followed by TMs (e.g. splitting fused QKV columns
        into heads); else general pickers; else (no single move does the whole chain) one op at a time."""
        v = self._canonical(lz.base)
        key = ("resolve", lz.base_shape, lz.ops)
        plan = self.cache.get(key)
        if plan is None:
            plan = self._plan_chain(lz)
            self.cache[key] = plan
        kind, cols, tms = plan
        if kind == "split":
            return self._resolve_stepwise(lz, v)
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

    def _resolve_stepwise(self, lz: Lazy, v: DVal) -> DVal:
        """A chain no single move realises, lowered one op at a time (each op on its own is a move the
        capability check accepted). Consecutive ops that together form a plain TM sequence stay together."""
        shape = tuple(lz.base_shape)
        for i, (op_type, attrs) in enumerate(lz.ops):
            emap = index_map([shape], ((op_type, attrs),))
            out_shape = tuple(emap.shape)
            name = lz.name if i == len(lz.ops) - 1 else f"{lz.name}.step{i}"
            v = self.move(v, shape, out_shape, emap.reshape(-1), name)
            shape = out_shape
        return v

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
        """Plan for a map the column picker + TMs cannot do (see :func:`plan_move`); ``("split", ...)`` when
        no single move does it (a chain is then lowered one op at a time)."""
        plan = plan_move(src, expected)
        return plan if plan is not None else ("split", None, None)

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

    def repeat_leading(self, v: DVal, lead, target) -> DVal:
        """``v``, whose leading dims are ``lead``, broadcast over the leading dims ``target`` (``lead`` right-aligned
        to it, 1 where it broadcasts) by TMs (:func:`leading_repeat_tms`). Whole tiles are copied, so every value
        arrives bit for bit, padding included; a row picker would be a matmul, which reads a Float32 activation
        through the multiplier's 19-bit source registers (a row maximum compared with its rows would then match
        none of them)."""
        v = self._canonical(v)
        tms = leading_repeat_tms(lead, target)
        return replace(v, tms=tuple(v.tms) + tuple(tms), z=math.prod(target), is_queue_value=False)

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
        try:
            return index_map(in_shapes, ops)
        except ValueError as e:
            raise self.err(str(e)) from None

    def _gather_pickers(self, node: Node, ops: List[DVal], in_shapes, out_shape, chain: Optional[Lazy] = None,
                        emap: Optional[torch.Tensor] = None) -> DVal:
        """Data movement as pickers, one plan per input (see :func:`plan_gather`), summed over the inputs.
        ``emap``: the source of every output element when it is not the node's (or chain's) own map."""
        if emap is None:
            op_list = chain.ops if chain is not None else ((node.op_type, _hashable(node.attrs)),)
            emap = self._index_map(in_shapes, op_list)
        zo, ro, co = canonical_zrc(out_shape)
        emap = emap.reshape(zo, ro, co).numpy()
        if len(ops) > 1:
            spliced = self._splice_columns(node, ops, in_shapes, emap)
            if spliced is not None:
                return spliced
        sizes = [math.prod(s) for s in in_shapes]
        offsets = np.cumsum([0] + sizes)
        results: List[DVal] = []
        for k, (v, s) in enumerate(zip(ops, in_shapes)):
            src = canonical_zrc(s)
            mine = (emap >= offsets[k]) & (emap < offsets[k + 1])
            if not mine.any():
                continue
            local = np.where(mine, emap - offsets[k], -1)
            plan = plan_gather(src, local)
            if plan is None:
                raise self.err(f"{node.op_type} from {list(s)} to {list(out_shape)}: {_no_plan()}")
            results += self._run_plan(node, v, k, plan, src, local)
        if not results:
            # Every element is padding (a slice of a pad's border, say): zeros, the value of a zero pad (a
            # non-zero pad value is a zero pad plus a constant), made a constant like any other.
            return self._const(("padding_only", tuple(out_shape)), f"{node.name}.zeros", torch.zeros(tuple(out_shape)))
        return self._sum(node, results, (zo, ro, co))

    def concat_splice(self, node: Node, ops: List[DVal], in_shapes, out_shape) -> Optional[DVal]:
        """``node`` (a multi-input gather such as a channel concatenation) as one splice of its operands as
        they are, flat NHWC values included (see :meth:`_splice_columns`), or None when it is not such a join.
        Called before the operands are made canonical: flat conv outputs then need no unflatten pickers."""
        if len(ops) < 2:
            return None
        zo, ro, co = canonical_zrc(out_shape)
        try:
            emap = index_map(in_shapes, ((node.op_type, _hashable(node.attrs)),))
        except ValueError:
            return None
        return self._splice_columns(node, ops, in_shapes, emap.reshape(zo, ro, co).numpy())

    def _splice_columns(self, node: Node, ops: List[DVal], in_shapes, emap: np.ndarray) -> Optional[DVal]:
        """A gather that joins whole inputs side by side along the columns at tile-aligned offsets (a channel
        concatenation) as one ``splice`` (TT-Buda's lowering of concatenate): no picker matmul and no adds,
        each input's tiles are copied once. Every input is made one row strip (``vstack`` of a canonical
        value's slices; a flat NHWC value is one already) of single-tile columns (``hslice``); the splice
        appends them along t in column order, and its consumers read it back with ``hstack`` (and
        ``vslice``). Flat inputs of one image size give a flat result. None when the map is not such a join
        (pickers then do it)."""
        order = splice_order([canonical_zrc(s) for s in in_shapes], emap)
        # A splice converts no formats (its inputs must share one): joins of ops' outputs only, which the data
        # format pass gives one format, not of queues (an input or constant may be stored in another).
        if order is None or any(v.src not in self.bg.ops for v in ops):
            return None
        zo, ro, co = emap.shape
        spatial = {v.spatial for v in ops if v.layout == "flat"}
        flat = len(spatial) == 1 and all(v.layout == "flat" for v in ops)
        if flat:
            strips, rows = 1, ops[0].r
        else:
            ops = [self._canonical(v) for v in ops]
            strips, rows = zo, ro
        if any((v.z, v.r, v.c) != (strips, rows, canonical_zrc(s)[2]) for v, s in zip(ops, in_shapes)):
            return None
        dev = self.ctx.device
        if row_bands(tiles(strips * tiles(rows) * TILE), dev.grid_rows, band_limit_tiles(dev.l1_pybuda_budget_bytes),
                     strips * tiles(rows) * TILE) is not None:
            return None  # a splice cannot t-stream: too many rows for its cores' L1 (pickers can stream)
        rp = tiles(rows) * TILE
        inputs, attrs, total = [], {"granularity": "t"}, 0
        for i, k in enumerate(order):
            v, ct = ops[k], tiles(ops[k].c)
            tms = ((VStack(factor=strips),) if strips > 1 else ()) + ((HSlice(factor=ct),) if ct > 1 else ())
            if strips > 1 and v.tms and v.tms[-1] == VSlice(factor=strips):
                v, tms = replace(v, tms=v.tms[:-1]), tms[1:]  # the vstack undoes the value's own vslice
            inputs.append((v, tms))
            attrs[f"input{i}"] = [0, ct, ct]
            total += ct
        pad_r = ZERO if all(ops[k].pad_r == ZERO for k in order) or rows % TILE == 0 else JUNK
        out = self.emit(f"{node.name}.splice", "splice", inputs, (total, strips * rp, TILE), attrs, (pad_r, ZERO))
        tms = ((HStack(factor=total),) if total > 1 else ()) + ((VSlice(factor=strips),) if strips > 1 else ())
        pad_c = ops[order[-1]].pad_c if co % TILE else ZERO
        if flat:
            return replace(out, tms=tms, z=1, r=rows, c=co, pad_c=pad_c, layout="flat", spatial=spatial.pop())
        return replace(out, tms=tms, z=zo, r=ro, c=co, pad_c=pad_c)

    def join_rows(self, name: str, parts: List[DVal]) -> DVal:
        """Row bands ``parts`` (z == 1, the same columns; every band but the last a whole number of row tiles)
        stacked along rows by one splice: each band is cut into single-row-tile slices (``vslice``), the
        splice appends them along t, and consumers read the result back with ``vstack``."""
        inputs, attrs, total = [], {"granularity": "t"}, 0
        for i, v in enumerate(parts):
            rt = tiles(v.r)
            inputs.append((v, (VSlice(factor=rt),) if rt > 1 else ()))
            attrs[f"input{i}"] = [0, rt, rt]
            total += rt
        last = parts[-1]
        out = self.emit(name, "splice", inputs, (total, TILE, last.c), attrs, (ZERO, last.pad_c))
        rows = sum(v.r for v in parts)
        return replace(out, tms=(VStack(factor=total),) if total > 1 else (), z=1, r=rows, pad_r=last.pad_r)

    def _sum(self, node: Node, parts: List[DVal], shape, tag: str = "join") -> DVal:
        """The sum of pickers' parts (each is zero wherever another part writes)."""
        zo, ro, co = shape
        out = parts[0]
        for i, p in enumerate(parts[1:], start=1):
            # The sum's padding is zero only where every part's is: a part whose rows needed no picker keeps
            # its input's row padding, which may be junk (a matmul over those rows must then mask them).
            pad = (_combine_pad("add", [out.pad_r, p.pad_r], ro), _combine_pad("add", [out.pad_c, p.pad_c], co))
            name = f"{node.name}.{tag}{i}"
            out = self.emit(name, "add", [(out, ()), (p, ())], (zo, ro, co), pad=pad)
        return out

    def _run_plan(self, node: Node, v: DVal, k: int, plan: "GatherPlan", src, local: np.ndarray) -> List[DVal]:
        """One input's share of a gather, by ``plan``: parts moved in the plan's orientation (source and/or
        result transposed by a tile TM); a transposed result's parts are summed and transposed back."""
        zo, ro, co = local.shape
        s2, e2 = _variant(src, local, plan.src_t, plan.out_t)
        if plan.src_t:
            v = replace(v, tms=tuple(v.tms) + (Transpose(),), r=v.c, c=v.r, pad_r=v.pad_c, pad_c=v.pad_r,
                        is_queue_value=False)
        dst = e2.shape
        tag = f"{k}" + ("t" if plan.src_t else "") + ("T" if plan.out_t else "")
        if plan.kind == "columns":
            parts = [self._place(node, v, tag, g, col_map, row_vec, s2, dst)
                     for g, col_map, row_vec in _column_parts(s2, e2)[0]]
        else:
            parts = [self._place_blocks(node, v, f"{tag}_{p}", rows, blk, vectors, s2, dst)
                     for p, (rows, blk, vectors) in enumerate(_block_parts(s2, e2))]
        if not plan.out_t:
            return parts
        out = self._sum(node, parts, dst, tag=f"join{tag}_")
        return [replace(out, tms=tuple(out.tms) + (Transpose(),), z=zo, r=ro, c=co, pad_r=out.pad_c, pad_c=out.pad_r,
                        is_queue_value=False)]

    def _place(self, node: Node, v: DVal, k, g: int, col_map: np.ndarray, row_map: np.ndarray, src, dst) -> DVal:
        """One picker part: output column j = input column col_map[j]; output row r = input row row_map[r]."""
        zi, ri, ci = src
        zo, ro, co = dst
        cur = v
        if not (co == ci and np.array_equal(col_map, np.arange(ci))):
            cur = self._col_pick(cur, f"{node.name}.cols{k}_{g}", col_map)
        if not (zo == zi and ro == ri and np.array_equal(row_map, np.arange(zi * ri))):
            out_idx = np.nonzero(row_map >= 0)[0]
            srcs = row_map[out_idx]
            cur = self._pick_rows(cur, f"{node.name}.rows{k}_{g}", out_idx, srcs // ri, srcs % ri, (zi, ri), (zo, ro))
        return replace(cur, z=zo, r=ro, c=co)

    def _pick_rows(self, v: DVal, name: str, out_idx: np.ndarray, in_slice: np.ndarray, in_row: np.ndarray,
                   src, dst) -> DVal:
        """Row picker: output row ``out_idx`` (flat over ``dst`` = (slices, rows)) takes row ``in_row`` of slice
        ``in_slice`` of ``v`` (``src`` = (slices, rows)); other rows are zero. The slices are ``vstack``-ed
        into groups: as many groups as the map allows (output group g reads input group g only), so that a
        picker within a batch-like leading dim reads a short strip of rows, not every slice."""
        zi, ri = src
        zo, ro = dst
        out_slice = out_idx // ro
        groups = 1
        for d in sorted(_common_divisors(zi, zo), reverse=True):
            if np.array_equal(in_slice // (zi // d), out_slice // (zo // d)):
                groups = d
                break
        a, b = zi // groups, zo // groups
        rp_in, rp_out = tiles(ri) * TILE, tiles(ro) * TILE
        out_rows = (out_slice % b) * rp_out + out_idx % ro
        in_rows = (in_slice % a) * rp_in + in_row
        stacked = replace(v, tms=tuple(v.tms) + ((VStack(factor=a),) if a > 1 else ()), z=groups, r=a * rp_in)
        out_t = out_slice // b if groups > 1 else None
        ones = np.ones(len(out_rows), np.float32)
        dev = self.ctx.device
        bands = None if groups > 1 else row_bands(tiles(b * rp_out), dev.grid_rows,
                                                  band_limit_tiles(dev.l1_pybuda_budget_bytes), b * rp_out)
        if bands is None:
            picked = self._row_pick(stacked, name, out_rows, in_rows, ones, out_r=b * rp_out, k_r=a * rp_in,
                                    out_t=out_t, num_t=groups)
        else:  # too many output rows for one sparse matmul's L1 (see conv.row_bands): one picker per row band
            parts = []
            for i, (r0, r1) in enumerate(bands):
                sel = (out_rows >= r0) & (out_rows < r1)
                parts.append(self._row_pick(stacked, f"{name}.band{i}", out_rows[sel] - r0, in_rows[sel], ones[sel],
                                            out_r=r1 - r0, k_r=a * rp_in))
            picked = self.join_rows(f"{name}.bands", parts)
        return replace(picked, tms=tuple(picked.tms) + ((VSlice(factor=b),) if b > 1 else ()), z=zo, r=ro,
                       pad_r=ZERO)

    def _place_blocks(self, node: Node, v: DVal, tag: str, row_src: np.ndarray, blk: np.ndarray,
                      vectors: np.ndarray, src, dst) -> DVal:
        """One part of a block gather (see :func:`_block_parts`): a column picker lays the ``B`` column maps
        side by side, each in whole tiles; ``hslice`` turns the blocks into slices; a row picker on the
        ``vstack``-ed slices takes, for output row ``R``, row ``row_src[R]`` of block ``blk[R]``."""
        zi, ri, ci = src
        zo, ro, co = dst
        nb = len(vectors)
        width = tiles(co) * TILE
        cur = v
        if not (nb == 1 and co == ci and np.array_equal(vectors[0], np.arange(ci))):
            sources = np.full((nb, width), -1, dtype=np.int64)
            sources[:, :co] = vectors
            cur = self._col_pick(cur, f"{node.name}.blockcols{tag}", sources.reshape(-1))
        if nb > 1:
            cur = replace(cur, tms=tuple(cur.tms) + (HSlice(factor=nb),), z=zi * nb, c=width)
        out_idx = np.nonzero(row_src >= 0)[0]
        q = row_src[out_idx]
        slices = (q // ri) * nb + blk[out_idx]
        if (zo == zi * nb and ro == ri and len(out_idx) == zo * ro and np.array_equal(slices, out_idx // ro)
                and np.array_equal(q % ri, out_idx % ro)):
            return replace(cur, z=zo, r=ro, c=co)
        cur = self._pick_rows(cur, f"{node.name}.blockrows{tag}", out_idx, slices, q % ri, (zi * nb, ri), (zo, ro))
        return replace(cur, c=co)


#: A splice joins at most this many inputs (netlist_backend_spec §3.1: ``splice`` takes 1..8).
MAX_SPLICE_INPUTS = 8


def splice_order(srcs, emap: np.ndarray) -> Optional[List[int]]:
    """The inputs (canonical (z, r, c) each) in the column order of a join :meth:`_splice_columns` can do,
    or None: every input has the output's z and rows and fills a column band of the output unchanged, the
    bands start at tile boundaries (only the last may end inside a tile) and together cover every column.
    ``emap``: the output's flat source indices over the inputs in order, shape (z, r, c)."""
    zo, ro, co = emap.shape
    if not 1 < len(srcs) <= MAX_SPLICE_INPUTS or any((z, r) != (zo, ro) for z, r, _ in srcs):
        return None
    if sum(c for _, _, c in srcs) != co:
        return None
    offsets = np.cumsum([0] + [z * r * c for z, r, c in srcs])
    first = emap[0, 0, :]
    starts = {}
    for k in range(len(srcs)):
        hit = np.nonzero(first == offsets[k])[0]
        if len(hit) != 1:
            return None
        starts[k] = int(hit[0])
    order = sorted(starts, key=starts.get)
    want = np.empty_like(emap)
    col = 0
    for k in order:
        z, r, c = srcs[k]
        if col % TILE or starts[k] != col:
            return None
        want[:, :, col:col + c] = offsets[k] + np.arange(z * r * c).reshape(z, r, c)
        col += c
    return order if np.array_equal(want, emap) else None


def _common_divisors(a: int, b: int) -> List[int]:
    g = math.gcd(a, b)
    return [d for d in range(1, g + 1) if g % d == 0]


class _Named:
    """Stands in for an IR node where a move has no node of its own (only its name is read)."""

    op_type = "move"

    def __init__(self, name: str):
        self.name = name


# --- planning: pure functions of the shapes and the element map, shared by lowering and the capability check --
#: At most this many parts (pickers whose results are summed) per input of a gather.
MAX_PARTS = 32
#: A block column picker lays at most this many output-width tiles side by side.
MAX_BLOCK_TILES = 512
#: Sub-column tables larger than this (entries) are not built: such a gather would need too many parts anyway.
_MAX_TABLE = 1 << 25


def _no_plan() -> str:
    return (f"the device cannot express this data movement with at most {MAX_PARTS} picker parts in any "
            f"orientation (its output rows and columns each read too many source rows and columns)")


def index_map(in_shapes, ops) -> torch.Tensor:
    """Source of every output element of the op chain ``ops`` ((op_type, hashable attrs) pairs) as a flat
    index over the inputs (in order), -1 = zero. Raises ValueError for a move with no device form."""
    offsets = np.cumsum([0] + [math.prod(s) for s in in_shapes])
    idx = [torch.arange(int(offsets[i]) + 1, int(offsets[i + 1]) + 1, dtype=torch.int64).reshape(s)
           for i, s in enumerate(in_shapes)]
    for op_type, attrs in ops:
        attrs = _unhashable(attrs)
        if op_type in ("pad", "buda_pad") and attrs.get("value", 0.0) != 0.0:
            raise ValueError(f"{op_type} with a non-zero value has no device form yet")
        # replicate/reflect pads only repeat input elements: index_select on the index map is exact
        idx = [registry.evaluate(op_type, idx, attrs)]
    return idx[0].to(torch.int64) - 1


@dataclass(frozen=True)
class GatherPlan:
    """How one input of a gather is moved: ``kind`` "columns" (:func:`_column_parts`) or "blocks"
    (:func:`_block_parts`), on the source transposed (``src_t``) and/or producing the result transposed
    (``out_t``); ``cost``: estimated tile matmuls (the cheapest plan is chosen)."""

    kind: str
    src_t: bool
    out_t: bool
    cost: float
    parts: int


def _variant(src, expected, src_t: bool, out_t: bool):
    """(source shape, map) of a gather done on the transposed source and/or producing the transposed result."""
    zi, ri, ci = src
    e = np.asarray(expected, dtype=np.int64)
    if src_t:
        valid = e >= 0
        f = np.where(valid, e, 0)
        z, rem = f // (ri * ci), f % (ri * ci)
        e = np.where(valid, (z * ci + rem % ci) * ri + rem // ci, -1)
        src = (zi, ci, ri)
    if out_t:
        e = np.ascontiguousarray(e.transpose(0, 2, 1))
    return src, e


def _column_parts(src, expected: np.ndarray, max_parts: Optional[int] = None):
    """Parts that each pick columns (one source column per output column) and then rows, or None.

    A *sub-column* is output column j restricted to the elements that read source column s; its row vector
    says which source row each output row takes (-1 = none). Sub-columns with the same row vector form one
    part (column picker j -> s, then one row picker); two sub-columns of one output column read disjoint rows,
    so they never share a vector and a part's column map is consistent. Parts write disjoint elements and
    zero elsewhere, so their sum is the gather. Returns ``([(group id, column map, row vector)], most
    source columns any output column reads)``."""
    max_parts = MAX_PARTS if max_parts is None else max_parts
    zi, ri, ci = src
    zo, ro, co = expected.shape
    read = _elements_read(expected)
    if read is None:
        return None
    rows_out, cols_out, f = read
    pair = cols_out.astype(np.int64) * ci + f % ci
    upair, sub = np.unique(pair, return_inverse=True)
    per_col = np.bincount(upair // ci, minlength=co)
    if per_col.max() > max_parts or (len(upair) + 1) * zo * ro > _MAX_TABLE:
        return None
    vec = np.full((len(upair) + 1, zo * ro), -1, dtype=np.int64)  # the last row: columns that read nothing
    vec[sub.reshape(-1), rows_out] = f // ci
    if (per_col > 0).all():
        vec = vec[:-1]
    vectors, group = _unique_rows(vec)
    group = group[: len(upair)]
    parts = []
    for g in range(len(vectors)):
        if not (vectors[g] >= 0).any():
            continue
        members = upair[group == g]
        col_map = np.full(co, -1, dtype=np.int64)
        col_map[members // ci] = members % ci
        parts.append((g, col_map, vectors[g]))
    if len(parts) > max_parts:
        return None
    return parts, int(per_col.max())


def _elements_read(expected: np.ndarray):
    """(output rows, output columns, flat source index) of every output element that reads a source
    element, over ``expected`` viewed as ``[z*r, c]``; None when no element reads anything."""
    zo, ro, co = expected.shape
    e = expected.reshape(zo * ro, co)
    rows_out, cols_out = np.nonzero(e >= 0)
    if rows_out.size == 0:
        return None
    return rows_out, cols_out, e[rows_out, cols_out]


def _block_parts(src, expected: np.ndarray, max_parts: Optional[int] = None):
    """Parts that each give every output row one source row, with a column map per row, or None.

    Output row R's elements are split by the source row they read; part k takes each row's k-th source row.
    Within a part the rows' column maps (output column -> source column, -1 = none) form ``B`` distinct
    *blocks*: a column picker lays the blocks side by side in whole tiles, ``hslice`` makes them slices, and
    a row picker takes row ``row_src[R]`` of block ``blk[R]`` (see ``_place_blocks``). This splits columns
    into rows (a reshape ``[.., H*D] -> [.., H, D]`` with D not a multiple of 32), which column parts can
    only do with one part per block. Returns ``[(row_src, blk, vectors)]``."""
    max_parts = MAX_PARTS if max_parts is None else max_parts
    zi, ri, ci = src
    zo, ro, co = expected.shape
    read = _elements_read(expected)
    if read is None:
        return None
    rows_out, cols_out, f = read
    nq = zi * ri
    key = rows_out.astype(np.int64) * nq + f // ci
    ukey, inv = np.unique(key, return_inverse=True)
    inv = np.asarray(inv).reshape(-1)
    urow = ukey // nq
    rank = np.arange(len(ukey)) - np.searchsorted(urow, urow)
    if rank.max() + 1 > max_parts:
        return None
    elem_rank = rank[inv]
    parts = []
    for k in range(int(rank.max()) + 1):
        sel = np.nonzero(rank == k)[0]
        rows = urow[sel]
        row_src = np.full(zo * ro, -1, dtype=np.int64)
        row_src[rows] = ukey[sel] % nq
        m = elem_rank == k
        vecs = np.full((zo * ro, co), -1, dtype=np.int64)
        vecs[rows_out[m], cols_out[m]] = f[m] % ci
        vectors, blk_of = _unique_rows(vecs[rows])
        if len(vectors) * tiles(co) > MAX_BLOCK_TILES:
            return None
        blk = np.full(zo * ro, -1, dtype=np.int64)
        blk[rows] = np.asarray(blk_of).reshape(-1)
        parts.append((row_src, blk, vectors))
    return parts


def _unique_rows(m: np.ndarray):
    """``np.unique(m, axis=0, return_inverse=True)`` (rows in lexicographic order), faster: rows are grouped
    by a hash, the grouping is verified exactly (the slow path runs only on a collision)."""
    weights = np.random.default_rng(12345).integers(1, 1 << 61, size=m.shape[1], dtype=np.int64)
    with np.errstate(over="ignore"):
        h = (m * weights).sum(axis=1)  # wraps around: only equality matters
    _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    inv = np.asarray(inv).reshape(-1)
    reps = m[first]
    if not np.array_equal(m, reps[inv]):
        vectors, inv = np.unique(m, axis=0, return_inverse=True)
        return vectors, np.asarray(inv).reshape(-1)
    order = np.lexsort(reps.T[::-1]) if reps.shape[1] else np.arange(len(reps))
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return reps[order], rank[inv]


def _row_pick_cost(zo, ro, co) -> float:
    # a sparse picker reads about one input tile per output tile (two where rows straddle tiles)
    return 2.0 * zo * tiles(ro) * tiles(co)


def _plan_cost(kind: str, src, dst, parts, src_t: bool, out_t: bool) -> float:
    """Estimated tile matmuls (and nops/adds) of a plan; enough to rank plans against each other."""
    zi, ri, ci = src
    zo, ro, co = dst
    cost = (len(parts) - 1) * zo * tiles(ro) * tiles(co)  # the adds
    for part in parts:
        if kind == "columns":
            _, col_map, _ = part
            if not (co == ci and np.array_equal(col_map, np.arange(ci))):
                cost += zi * tiles(ri) * tiles(ci) * tiles(co)
        else:
            cost += zi * tiles(ri) * tiles(ci) * len(part[2]) * tiles(co)
        cost += _row_pick_cost(zo, ro, co)
    if src_t:
        cost += zi * tiles(ri) * tiles(ci)  # a nop applies the transpose where a picker cannot read it
    if out_t:
        cost += zo * tiles(ro) * tiles(co)
    return float(cost)


#: (on the source transposed, producing the result transposed): the orientations a gather is planned in.
_VARIANTS = ((False, False), (False, True), (True, False), (True, True))


def plan_gather(src, expected) -> Optional[GatherPlan]:
    """The cheapest way :meth:`DataMovementLowering._gather_pickers` moves one input ``src`` (z, r, c) by
    ``expected`` (the source flat index of each output element, -1 = zero), or None when no plan stays
    within :data:`MAX_PARTS` parts. A gather that one column part does (a slice, a pad, a row gather) is
    done so; others try column and block parts on the source and/or result transposed (a transpose swaps
    the roles of rows and columns, e.g. for a permutation that moves the last dim); ties go to the first."""
    e = np.asarray(expected, dtype=np.int64)
    found = _column_parts(src, e)
    if found is not None and len(found[0]) == 1:
        return GatherPlan("columns", False, False, _plan_cost("columns", src, e.shape, found[0], False, False), 1)
    best: Optional[GatherPlan] = None
    for src_t, out_t in _VARIANTS:
        if best is not None and best.parts == 1 and not best.src_t and not best.out_t:
            break  # one part without transposes: a transposed plan saves little and costs nops
        s2, e2 = _variant(src, e, src_t, out_t)
        for kind in ("columns", "blocks"):
            if kind == "columns":
                found = _column_parts(s2, e2)
                parts = found[0] if found is not None else None
            else:
                parts = _block_parts(s2, e2)
            if parts is None:
                continue
            cost = _plan_cost(kind, s2, e2.shape, parts, src_t, out_t)
            if best is None or cost < best.cost:
                best = GatherPlan(kind, src_t, out_t, cost, len(parts))
    return best


def _single_source_columns(src, expected: torch.Tensor) -> bool:
    """Every output column reads one source column, in at most :data:`MAX_PARTS` parts (the plan pickers
    always had; it is preferred to a rotation)."""
    found = _column_parts(src, expected.numpy() if isinstance(expected, torch.Tensor) else expected)
    return found is not None and found[1] <= 1


def plan_move(src, expected: torch.Tensor):
    """How a single-input move the TMs cannot do is lowered: ``("pickers", None, None)`` when every output
    column reads one source column (column parts); else the cheaper of a z <-> c rotation of the source
    (``("rotate", (kind, group), map)``, the move that turns NCHW into NHWC and back, then TMs or column
    parts) and the best :func:`plan_gather` (``("pickers", ...)``); None when nothing does."""
    if _single_source_columns(src, expected):
        return ("pickers", None, None)
    best, best_cost = None, None
    general = plan_gather(src, expected)
    if general is not None:
        best, best_cost = ("pickers", None, None), general.cost
    zi = src[0]
    for group in [d for d in range(zi, 0, -1) if zi % d == 0]:
        for kind in ("fwd", "inv"):
            cost = _rotation_cost(src, kind, group)
            if best_cost is not None and cost >= best_cost:
                continue
            rshape, rmap = _rotated_map(src, expected, kind, group)
            if _match_mapping(rshape, rmap) is None:
                found = _column_parts(rshape, rmap.numpy())
                if found is None or found[1] > 1:
                    continue
                cost += _plan_cost("columns", rshape, tuple(rmap.shape), found[0], False, False)
            if best_cost is None or cost < best_cost:
                best, best_cost = ("rotate", (kind, group), rmap), cost
    return best


def gather_possible(src, expected) -> bool:
    """``plan_gather(src, expected) is not None``, without costing every plan: the capability check only
    asks whether some orientation has column or block parts, so it stops at the first that does. Block
    parts are tried first: they never build the table of sub-columns by output rows, which for a head
    split of a large activation is millions of entries."""
    e = np.asarray(expected, dtype=np.int64)
    for src_t, out_t in _VARIANTS:
        s2, e2 = _variant(src, e, src_t, out_t)
        if _block_parts(s2, e2) is not None or _column_parts(s2, e2) is not None:
            return True
    return False


def leading_repeat_tms(lead, target) -> List[TM]:
    """TMs that take the z slices of a canonical value with leading dims ``lead`` to leading dims ``target``, where
    ``lead`` (right-aligned to ``target``) is 1 in every dim it broadcasts over: for each run of such dims
    (f: their sizes' product), outermost first, the B slices inside it (B: the product of the source dims
    inside) are stacked into one block (``vstack: B``), the block is repeated f times (``broadcast: {r: f}``
    repeats whole tile rows modulo the block) and cut into slices again (``vslice: B*f``)."""
    source = [1] * (len(target) - len(lead)) + [int(d) for d in lead]
    target = [int(d) for d in target]
    if any(s not in (1, t) for s, t in zip(source, target)):
        raise ValueError(f"leading dims {list(lead)} do not broadcast to {target}")
    tms: List[TM] = []
    i = 0
    while i < len(target):
        if source[i] == target[i]:
            i += 1
            continue
        j = i
        while j < len(target) and source[j] != target[j]:
            j += 1
        inner, repeats = math.prod(source[j:]), math.prod(target[i:j])
        if inner > 1:
            tms.append(VStack(factor=inner))
        tms += [Broadcast(dim="r", factor=repeats), VSlice(factor=inner * repeats)]
        i = j
    return tms


def move_possible(src, expected: torch.Tensor) -> bool:
    """``plan_move(src, expected) is not None``, stopping at the first plan found: a gather of the source
    (which includes plan_move's single-source columns) or a rotation realised by TMs or single-source columns."""
    if gather_possible(src, expected.numpy()):
        return True
    zi = src[0]
    for group in [d for d in range(zi, 0, -1) if zi % d == 0]:
        for kind in ("fwd", "inv"):
            rshape, rmap = _rotated_map(src, expected, kind, group)
            if _match_mapping(rshape, rmap) is not None:
                return True
            found = _column_parts(rshape, rmap.numpy())
            if found is not None and found[1] <= 1:
                return True
    return False


def _rotation_cost(src, kind: str, group: int) -> float:
    """Tile matmuls of the dense column picker of a rotation (see ``_rotate``)."""
    zi, ri, ci = src
    b = zi // group
    if kind == "fwd":
        return float(b * tiles(ci) * group * tiles(ri) * ri * tiles(group))
    return float(b * tiles(ri) * group * tiles(ci) * ci * tiles(group))


_MOVE_CACHE: Dict[Any, Optional[str]] = {}


def _plain_tm_move(in_shapes, op_type: str, attrs: dict) -> bool:
    """True for the moves that are a netlist TM, or nothing, on the canonical (z, r, c) form whatever the
    shape: a transpose of the last two dims (the ``transpose`` TM) and a reshape that keeps the canonical
    form (it only regroups the leading dims). The full check builds an element map of the whole tensor to
    find the same answer, which for large activations and weights costs tens of milliseconds each."""
    if len(in_shapes) != 1:
        return False
    shape = tuple(int(d) for d in in_shapes[0])
    if op_type == "transpose" and len(shape) >= 2:
        if not all(-len(shape) <= attrs[d] < len(shape) for d in ("dim0", "dim1")):
            return False
        dims = {attrs["dim0"] % len(shape), attrs["dim1"] % len(shape)}
        return dims == {len(shape) - 2, len(shape) - 1}
    if op_type == "reshape":
        out = tuple(int(d) for d in attrs["shape"])
        return all(d > 0 for d in out) and math.prod(out) == math.prod(shape) \
            and canonical_zrc(out) == canonical_zrc(shape)
    return False


def unsupported_movement(in_shapes, op_type: str, attrs: dict) -> Optional[str]:
    """None when lowering can move the data of one data-movement op (inputs of ``in_shapes``), else why not.
    Agrees with lowering: a single input is moved by TMs or :func:`plan_move`, each input of a multi-input
    op by :func:`plan_gather` (a chain of such ops that no single move realises is lowered op by op)."""
    if _plain_tm_move(in_shapes, op_type, attrs):
        return None
    attrs = dict(attrs)
    if op_type in ("pad", "buda_pad"):
        attrs["value"] = 0.0  # a non-zero value is a zero pad plus a constant (decompose)
    key = (tuple(tuple(s) for s in in_shapes), op_type, _hashable(attrs), MAX_PARTS)
    if key in _MOVE_CACHE:
        return _MOVE_CACHE[key]
    reason = None
    try:
        emap = index_map(in_shapes, ((op_type, _hashable(attrs)),))
    except Exception as e:  # noqa: BLE001 -- any failure to evaluate the map is a move lowering cannot plan
        reason = f"{op_type} has no device data-movement form: {e}"
    else:
        out_shape = tuple(emap.shape)
        zo, ro, co = canonical_zrc(out_shape)
        emap = emap.reshape(zo, ro, co)
        offsets = np.cumsum([0] + [math.prod(s) for s in in_shapes])
        for k, s in enumerate(in_shapes):
            if reason is not None:
                break
            src = canonical_zrc(s)
            if len(in_shapes) == 1:  # the map is the input's own; TMs first: the usual answer, and cheapest
                ok = _match_mapping(src, emap) is not None or move_possible(src, emap)
            else:
                mine = (emap >= int(offsets[k])) & (emap < int(offsets[k + 1]))
                if not bool(mine.any()):
                    continue
                local = torch.where(mine, emap - int(offsets[k]), torch.full_like(emap, -1))
                ok = gather_possible(src, local.numpy())
            if not ok:
                reason = f"{op_type} from {list(s)} to {list(out_shape)}: {_no_plan()}"
    if len(_MOVE_CACHE) > 4096:
        _MOVE_CACHE.clear()
    _MOVE_CACHE[key] = reason
    return reason


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
