"""Lowering of data movement (a mixin of the lowering pass): chains of TMs matched as netlist TM
sequences, else column/row pickers, emitted by the plans of :mod:`pybuda.passes.lower.gather_plan`.
See :mod:`pybuda.passes.lower.to_tiles`."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import List, Optional

import numpy as np
import torch

from pybuda.ir.graph import Node
from pybuda.netlist.tms import HSlice, HStack, Transpose, VSlice, VStack
from pybuda.netlist.host_io import canonical_zrc, tiles
from pybuda.passes.lower.conv import band_limit_tiles, row_bands
from pybuda.passes.lower.common import (
    JUNK, TILE, ZERO, DVal, Lazy, _combine_pad, _hashable, _match_mapping,
)
from pybuda.passes.lower.gather_plan import (
    GatherPlan, _block_parts, _column_parts, _no_plan, _variant, index_map, leading_repeat_tms, plan_gather,
    plan_move, splice_order,
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
        pads, pad = [], (parts[0].pad_r, parts[0].pad_c)
        for p in parts[1:]:
            # The sum's padding is zero only where every part's is: a part whose rows needed no picker keeps
            # its input's row padding, which may be junk (a matmul over those rows must then mask them).
            pad = (_combine_pad("add", [pad[0], p.pad_r], ro), _combine_pad("add", [pad[1], p.pad_c], co))
            pads.append(pad)
        coded = self.sum_nonfinite(f"{node.name}.{tag}", parts, pads)  # parts carrying NaN and infinity
        if coded is not None:
            return coded
        out = parts[0]
        for i, p in enumerate(parts[1:], start=1):
            out = self.emit(f"{node.name}.{tag}{i}", "add", [(out, ()), (p, ())], (zo, ro, co), pad=pads[i - 1])
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


def _common_divisors(a: int, b: int) -> List[int]:
    g = math.gcd(a, b)
    return [d for d in range(1, g + 1) if g % d == 0]


class _Named:
    """Stands in for an IR node where a move has no node of its own (only its name is read)."""

    op_type = "move"

    def __init__(self, name: str):
        self.name = name
