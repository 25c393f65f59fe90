"""Lowering of reductions (a mixin of the lowering pass): sum/avg as matmuls with constant
tiles or sparse pickers, max as ``reduce`` with padding masks. See :mod:`pybuda.passes.lower.to_tiles`."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch

from pybuda.golden import formats
from pybuda.ir.graph import HOLDS_OPERAND, Node
from pybuda.netlist.tms import Broadcast, VSlice, VStack
from pybuda.ops.common import normalize_dim
from pybuda.passes.lower import pickers
from pybuda.netlist.host_io import tiles
from pybuda.passes.lower.common import JUNK, REP, TILE, DVal, _reduced_spatial


def _lofi_exact(value: float) -> bool:
    """Whether a LoFi multiply reads ``value`` exactly as the SrcA operand (its mantissa fits in the bits it keeps)."""
    x = torch.tensor([value], dtype=torch.float32)
    return bool(torch.equal(formats.round_mantissa(x, formats.LOFI_SRCA_FRACTION_BITS), x))


class ReductionLowering:
    """Methods of the lowering pass for ``reduce_sum``, ``reduce_avg`` and ``reduce_max``."""

    def _reduce(self, node: Node, v: DVal) -> DVal:
        shape = tuple(self.g[node.operands[0]].shape)
        n = len(shape)
        d = normalize_dim(node.attrs["dim"], n)
        kind = node.op_type
        if kind == "reduce_max" and node.attrs.get("stride", -1) != -1:
            raise self.err("reduce_max with a stride has no device form")
        if v.layout == "flat":
            if kind != "reduce_max" and d in (1, 2) and n == 4:
                return self._reduce_flat_spatial(node, v, d)
            if d != n - 1:
                v = self._canonical(v)
        size = shape[d]
        scale = 1.0 / size if kind == "reduce_avg" else 1.0
        if v.layout == "flat":  # reduce over channels of a flat value
            d_kind = "c"
        elif d == n - 1:
            d_kind = "c"
        elif d == n - 2:
            d_kind = "r"
        else:
            d_kind = "z"
        out_z, out_r, out_c = (v.z, v.r, 1) if d_kind == "c" else ((v.z, 1, v.c) if d_kind == "r" else (None, v.r, v.c))
        if kind == "reduce_max":
            return self._reduce_max(node, v, d_kind, shape, d)
        if d_kind == "c":
            ones = self._const(("ones_c", size, scale), f"reduce_c_{size}_{'avg' if scale != 1 else 'sum'}",
                               pickers.ones_reduce_c(size, scale))
            extra = (Broadcast(dim="z", factor=v.z),) if v.z > 1 else ()
            tags = {"reduce": kind}
            if not _lofi_exact(scale):
                # The constant is the SrcA operand, of which LoFi reads 4 mantissa bits: 1/48 would be read as
                # 1.3125/64, a mean 1.6 % too small in every layer norm. HiFi2 reads the stored value whole.
                tags["min_fidelity"] = "HiFi2"
            return self.emit(node.name, "matmul", [(v, ()), (ones, extra)], (out_z, out_r, out_c),
                             pad=(v.pad_r, REP), layout=v.layout, spatial=_reduced_spatial(v, "c"), tags=tags)
        if d_kind == "r":
            ones = self._const(("ones_r", size, scale), f"reduce_r_{size}_{'avg' if scale != 1 else 'sum'}",
                               pickers.ones_reduce_r(size, scale))
            extra = (Broadcast(dim="z", factor=v.z),) if v.z > 1 else ()
            return self.emit(node.name, "matmul", [(ones, extra), (v, ())], (out_z, out_r, out_c),
                             pad=(REP, v.pad_c), tags={"reduce": kind})
        # A leading dim: sum slices with a sparse picker over the vstack-ed slices.
        lead = shape[:n - 2] if n > 2 else ()
        rp = tiles(v.r) * TILE
        src_z = np.arange(v.z).reshape(lead)
        out_lead = list(lead)
        out_lead[d] = 1
        dst_z = np.broadcast_to(np.arange(math.prod(out_lead)).reshape(out_lead), lead).reshape(-1)
        rows = np.arange(rp)
        out_rows = (dst_z[:, None] * rp + rows[None, :]).reshape(-1)
        in_rows = (src_z.reshape(-1)[:, None] * rp + rows[None, :]).reshape(-1)
        src = replace(v, tms=tuple(v.tms) + ((VStack(factor=v.z),) if v.z > 1 else ()), z=1, r=v.z * rp)
        zo = math.prod(out_lead)
        picked = self._row_pick(src, node.name, out_rows, in_rows, np.full(len(out_rows), scale, np.float32),
                                out_r=zo * rp, k_r=v.z * rp, key=("zreduce", tuple(lead), d, rp, scale))
        return replace(picked, tms=(VSlice(factor=zo),) if zo > 1 else (), z=zo, r=v.r, pad_r=v.pad_r)

    def _reduce_max(self, node: Node, v: DVal, d_kind: str, shape, d: int) -> DVal:
        n = len(shape)
        if d_kind == "c":
            if v.c % TILE:
                mask = self._const(("neg_c", v.c), f"neg_mask_c_{v.c}", pickers.neg_col_mask(v.c))
                extra = [Broadcast(dim="r", factor=tiles(v.r))] if tiles(v.r) > 1 else []
                if v.z > 1:
                    extra.insert(0, Broadcast(dim="z", factor=v.z))
                v = self.emit(f"{node.name}.mask", "add", [(v, ()), (mask, tuple(extra))], (v.z, v.r, v.c),
                              pad=(v.pad_r, JUNK), layout=v.layout, spatial=v.spatial, tags={HOLDS_OPERAND: 0})
            return self.emit(node.name, "reduce", [(v, ())], (v.z, v.r, 1), {"dim": "c", "type": "max"},
                             pad=(v.pad_r, JUNK), layout=v.layout, spatial=_reduced_spatial(v, "c"))
        if d_kind == "r":
            if v.r % TILE:
                mask = self._const(("neg_r", v.r), f"neg_mask_r_{v.r}", pickers.neg_row_mask(v.r))
                extra = [Broadcast(dim="c", factor=tiles(v.c))] if tiles(v.c) > 1 else []
                if v.z > 1:
                    extra.insert(0, Broadcast(dim="z", factor=v.z))
                v = self.emit(f"{node.name}.mask", "add", [(v, ()), (mask, tuple(extra))], (v.z, v.r, v.c),
                              pad=(JUNK, v.pad_c), tags={HOLDS_OPERAND: 0})
            return self.emit(node.name, "reduce", [(v, ())], (v.z, 1, v.c), {"dim": "r", "type": "max"},
                             pad=(JUNK, v.pad_c))
        f = shape[d]
        inner = math.prod(shape[d + 1:n - 2])
        if inner == 1:
            return self.emit(node.name, "reduce", [(v, ())], (v.z // f, v.r, v.c), {"dim": "z", "type": "max", "z": f},
                             pad=(v.pad_r, v.pad_c))
        # The device reduces groups of consecutive slices, and dim d has ``inner`` slices inside each of its
        # steps: those are stacked into one block (vstack), the f blocks of a group reduced, and the result cut
        # into slices again (vslice). TMs move whole tiles, so the maximum is one of the elements bit for bit
        # (a row picker, a matmul, would read Float32 data through 19-bit source registers, and a comparison
        # with the maximum, argmax's, would then match no element).
        rows = tiles(v.r) * TILE
        stacked = replace(v, tms=tuple(v.tms) + (VStack(factor=inner),), z=v.z // inner, r=inner * rows)
        out = self.emit(node.name, "reduce", [(stacked, ())], (stacked.z // f, stacked.r, v.c),
                        {"dim": "z", "type": "max", "z": f}, pad=(v.pad_r, v.pad_c))
        return replace(out, tms=(VSlice(factor=inner),), z=out.z * inner, r=v.r)

    def _reduce_flat_spatial(self, node: Node, v: DVal, d: int) -> DVal:
        h, w = v.spatial
        scale = 1.0 / (h if d == 1 else w) if node.op_type == "reduce_avg" else 1.0
        hh, ww = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        in_rows = (hh * w + ww).reshape(-1)
        if d == 2:  # over W: out (H, 1)
            out_rows, oh, ow = hh.reshape(-1), h, 1
        else:  # over H: out (1, W)
            out_rows, oh, ow = ww.reshape(-1), 1, w
        picked = self._row_pick(v, node.name, out_rows, in_rows, np.full(len(in_rows), scale, np.float32),
                                out_r=oh * ow, k_r=h * w, key=("spatial_reduce", h, w, d, scale))
        return replace(picked, layout="flat", spatial=(oh, ow)) if oh > 1 else replace(
            picked, layout="canonical", spatial=None, z=1, r=ow)
