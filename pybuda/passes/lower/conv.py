"""Lowering of convolutions and pools (a mixin of the lowering pass): im2col sparse pickers feeding
weight matmuls, depthwise products, max-pool masks and z-reduces, weighted avg-pool pickers.
See :mod:`pybuda.passes.lower.to_tiles` for the conventions."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List

import numpy as np
import torch

from pybuda.dtypes import DataFormat
from pybuda.ir.graph import Node
from pybuda.netlist.tms import TM, Broadcast, HStack, VSlice, VStack
from pybuda.passes.lower import pickers
from pybuda.netlist.host_io import tiles
from pybuda.perf.cost import tile_size_bytes
from pybuda.passes.lower.common import JUNK, REP, TILE, ZERO, DVal, _window, non_negative


class ConvPoolLowering:
    """Methods of the lowering pass for ``conv2d``, ``max_pool2d`` and ``avg_pool2d``."""

    def _conv_or_pool(self, node: Node, ops: List[DVal]) -> DVal:
        attrs = node.attrs
        if not attrs.get("channel_last", False):
            raise self.err(f"{node.op_type} must be channel-last by lowering (the channel_last pass converts NCHW)")
        x = ops[0]
        in_shape = tuple(self.g[node.operands[0]].shape)
        out_shape = tuple(node.shape)
        if len(in_shape) != 4 or in_shape[0] != 1:
            raise self.err(f"{node.op_type} needs one sample [1, H, W, C] per device run, got {list(in_shape)}")
        _, h, w, cin = in_shape
        _, ho, wo, cout = out_shape
        if node.op_type == "conv2d":
            kh, kw = self.g[node.operands[1]].shape[2:]
            dil = attrs["dilation"]
        else:
            kh, kw = attrs["kernel_size"]
            dil = attrs.get("dilation", (1, 1))
        stride, pads = attrs["stride"], attrs["padding"]
        pad_l, pad_t = pads[0], pads[2]
        kk = kh * kw
        trivial = kk == 1 and stride == (1, 1) and pad_l == 0 and pad_t == 0 and (h, w) == (ho, wo)
        # Input rows: flat (h*W + w) or canonical via vstack H (h*Wp + w).
        if x.layout == "flat" or h == 1:
            src = x if x.layout == "flat" else replace(x, layout="flat", spatial=(1, w))
            in_pitch, k_r = w, h * w
        else:
            wp = tiles(w) * TILE
            src = replace(x, tms=tuple(x.tms) + (VStack(factor=h),), z=1, r=h * wp)
            in_pitch, k_r = wp, h * wp
        out_hw = ho * wo
        out_rp = tiles(out_hw) * TILE
        if node.op_type == "avg_pool2d":
            return self._avg_pool(node, src, in_pitch, k_r, (h, w), (ho, wo), (kh, kw), stride, (pad_t, pad_l), cin)
        if trivial and node.op_type == "conv2d":
            picked, kk_eff = x, 1
        else:
            pos, oh, ow, ih, iw, valid = _window(h, w, ho, wo, kh, kw, stride, dil, (pad_t, pad_l))
            out_rows = oh * wo + ow
            in_rows = ih * in_pitch + iw
            key = ("window", h, w, ho, wo, kh, kw, stride, dil, pad_t, pad_l, in_pitch)
            bands = self._conv_row_bands(node, ops, out_hw, cin, cout, kk) if node.op_type == "conv2d" else None
            if bands is not None:
                return self._banded_conv(node, ops, src, bands, (pos[valid], out_rows[valid], in_rows[valid]), k_r,
                                         key, (kh, kw), cin, cout, x)
            picked = self._tap_pick(src, f"{node.name}.im2col", (pos[valid], out_rows[valid], in_rows[valid]),
                                    out_hw, k_r, key, kk)
            kk_eff = kk
        if node.op_type == "max_pool2d":
            # Positions outside the image pick zeros, which a max of values >= 0 (after a relu) ignores.
            if not valid.all() and not non_negative(self.g, node.operands[0]):
                # Positions outside the image picked zeros; push them to -1e30 so the max ignores them.
                mask_rows = np.zeros((kk, out_rp), np.float32)
                mask_rows[pos[~valid], (oh * wo + ow)[~valid]] = pickers.NEG_LARGE
                m = torch.from_numpy(mask_rows[:, :, None]).expand(kk, out_rp, TILE).contiguous()
                mq = self._const(("pool_mask",) + key, f"{node.name}.pad_mask", m)
                extra = (Broadcast(dim="c", factor=tiles(cin)),) if tiles(cin) > 1 else ()
                picked = self.emit(f"{node.name}.mask", "add", [(picked, ()), (replace(mq, r=out_hw), extra)],
                                   (kk, out_hw, cin), pad=(JUNK, picked.pad_c))
            if kk == 1:
                out = picked
            else:
                out = self.emit(node.name, "reduce", [(picked, ())], (1, out_hw, cin),
                                {"dim": "z", "type": "max", "z": kk}, pad=(JUNK, x.pad_c))
            return replace(out, r=out_hw, layout="flat", spatial=(ho, wo))
        return self._conv_weights(node, ops, picked, kk_eff, (kh, kw), cin, cout, out_hw, out_rp, x)

    def _conv_row_bands(self, node: Node, ops: List[DVal], out_hw: int, cin: int, cout: int, kk: int):
        """Output pixel row bands ``[(r0, r1)]`` for a convolution too large for one sparse matmul, else None.

        A sparse matmul cannot t-stream (its picker is encoded for one t-slicing), so only the grid rows split
        its output rows: when no grid row count leaves each core a block of at most :func:`band_limit_tiles`
        row tiles (the output block is double-buffered and K-blocked partial sums need as much again), the
        convolution is sliced into bands, each its own picker and weight matmul (TT-Buda slices the
        activation the same way). Only for convolutions with compile-time weights (not depthwise).

        A convolution that can stack few of its kernel positions in one t slice (so its picker walks the
        activation's strips ``kk / per`` times, see :meth:`_tap_pick`) is banded, or banded more finely than it has
        to be, when smaller bands stack more (:func:`stacking_bands`), if its input comes from an op (bands
        of a queue input would each read the queue) and the policy is not reproducing TT-Buda's."""
        wv = ops[1]
        if not wv.is_queue_value or (len(ops) == 3 and not ops[2].is_queue_value):
            return None
        if node.attrs["groups"] > 1 and node.attrs["groups"] == cin and cout == cin:
            return None
        dev = self.ctx.device
        limit = band_limit_tiles(dev.l1_pybuda_budget_bytes)
        needed = row_bands(tiles(out_hw), dev.grid_rows, limit, out_hw)
        if self.g[node.operands[0]].kind != "op" or self.ctx.reproduces_tt_buda:
            return needed
        stacked = stacking_bands(tiles(out_hw), kk, dev.grid_rows, limit, out_hw)
        if needed is None or stacked is None:
            return needed if stacked is None else stacked
        # Banded anyway: more, smaller bands are worth it when they stack more kernel positions per slice
        # (each band's picker then walks its activation's strips for fewer t slices).
        return stacked if _band_stacking(stacked, kk, dev.grid_rows, limit) > \
            _band_stacking(needed, kk, dev.grid_rows, limit) else needed

    def _banded_conv(self, node: Node, ops: List[DVal], src: DVal, bands, taps, k_r: int, key, kernel, cin: int,
                     cout: int, x: DVal) -> DVal:
        """A convolution as one im2col picker and weight matmul per band of output pixel rows (see
        :meth:`_conv_row_bands`), the bands joined along rows by a splice. ``taps``: (kernel position, output
        row, input row) of every valid tap."""
        pos, out_rows, in_rows = taps
        kk = kernel[0] * kernel[1]
        parts = []
        for b, (r0, r1) in enumerate(bands):
            sel = (out_rows >= r0) & (out_rows < r1)
            picked = self._tap_pick(src, f"{node.name}.im2col_band{b}", (pos[sel], out_rows[sel] - r0, in_rows[sel]),
                                    r1 - r0, k_r, key + ("band", r0, r1), kk)
            parts.append(self._conv_weights(node, ops, picked, kk, kernel, cin, cout, r1 - r0,
                                            tiles(r1 - r0) * TILE, x))
        ho, wo = self.g[node.name].shape[1:3]
        return replace(self.join_rows(f"{node.name}.bands", parts), layout="flat", spatial=(ho, wo))

    def _tap_pick(self, src: DVal, name: str, taps, out_r: int, k_r: int, key, kk: int) -> DVal:
        """The im2col gather of a convolution or pool: ``[kk, out_r, C]``, slice ``pos`` holding the input
        pixel under every output pixel for kernel position ``pos``. ``taps``: (kernel position, output row,
        input row) of every valid tap.

        The sparse matmul's kernel walks the activation's strips once per output t slice (BBE's sparse formula
        decodes per strip and slice), so one slice per position walks them ``kk`` times. Instead, positions
        are stacked along rows, ``per`` of them in each of ``kk / per`` t slices (position ``pos`` at rows ``(pos % per) * out_rp`` of slice
        ``pos // per``, ``out_rp`` = ``out_r`` rounded up to a tile), and consumers read them back as kk
        slices with ``vslice``. TT-Buda kept one slice per position (Ribbon, which reproduces its compile for
        calibration, still does: ``CompileContext.reproduces_tt_buda``). The grid rows then split the ``per`` times
        taller slices; ``per`` is the most positions whose stacked
        rows still fit one sparse matmul's L1 (see :func:`taps_per_slice`)."""
        pos, out_rows, in_rows = taps
        dev = self.ctx.device
        per = 1 if self.ctx.reproduces_tt_buda else \
            taps_per_slice(kk, tiles(out_r), dev.grid_rows, band_limit_tiles(dev.l1_pybuda_budget_bytes))
        out_rp = tiles(out_r) * TILE
        num_t = kk // per
        picked = self._row_pick(src, name, (pos % per) * out_rp + out_rows, in_rows, np.ones(len(pos), np.float32),
                                out_r=per * out_rp, k_r=k_r, key=key + ("stacked", per),
                                out_t=pos // per if num_t > 1 else None, num_t=num_t)
        if per == 1:
            return replace(picked, r=out_r)
        return replace(picked, tms=tuple(picked.tms) + (VSlice(factor=per),), z=kk, r=out_r)

    def _depthwise_apply(self, node, picked: DVal, wrows: DVal, kk: int, out_hw: int, out_rp: int, cin: int) -> DVal:
        """Depthwise conv on picked pixels: multiply by each kernel position's weight row (``wrows``, one row
        per position, broadcast over the pixels), then sum the ``kk`` positions with a row picker."""
        extra = (Broadcast(dim="r", factor=tiles(out_rp)),) if tiles(out_rp) > 1 else ()
        prod = self.emit(f"{node.name}.dw_mul", "multiply", [(picked, ()), (wrows, extra)], (kk, out_hw, cin),
                         pad=(ZERO, JUNK))
        if kk == 1:
            return replace(prod, r=out_hw)
        src = replace(prod, tms=(VStack(factor=kk),), z=1, r=kk * out_rp)
        pos = np.repeat(np.arange(kk), out_hw)
        pix = np.tile(np.arange(out_hw), kk)
        return self._row_pick(src, f"{node.name}.dw_sum", pix, pos * out_rp + pix, np.ones(len(pix), np.float32),
                              out_r=out_hw, k_r=kk * out_rp, key=("dwsum", kk, out_hw, out_rp))

    def _conv_weights(self, node, ops, picked: DVal, kk: int, kernel, cin, cout, out_hw, out_rp, x) -> DVal:
        """The matmul (or depthwise multiply + sum) that applies the weights to picked pixels."""
        groups = node.attrs["groups"]
        wv = ops[1]
        bias = ops[2] if len(ops) == 3 else None
        if not wv.is_queue_value or (bias is not None and not bias.is_queue_value):
            return self._conv_device_weights(node, ops, picked, kk, kernel, cin, cout, out_hw, out_rp, x)
        weight = self.values[wv.src]
        ho, wo = self.g[node.name].shape[1:3]
        direct = picked is x  # 1x1, stride 1, no padding: the weights apply to the pixels as they are
        if direct:
            z, rows, layout, spatial = x.z, x.r, x.layout, x.spatial
        else:
            z, rows, layout, spatial = 1, out_hw, "flat", (ho, wo)
        depthwise = groups > 1 and groups == cin and cout == cin
        if depthwise and not direct:
            wrows = self._queue_value(wv, "depthwise_rows", pickers.depthwise_weight_rows(weight),
                                      {"consteval_transform": "depthwise_weight_rows"})
            out = self._depthwise_apply(node, picked, replace(wrows, r=1, pad_r=REP), kk, out_hw, out_rp, cin)
            if bias is not None:
                bq = self._queue_value(bias, "rep_r", self.values[bias.src].reshape(1, cout).expand(TILE, cout).contiguous())
                bq = replace(bq, r=1, pad_r=REP)
                extra = (Broadcast(dim="r", factor=tiles(out_hw)),) if tiles(out_hw) > 1 else ()
                out = self.emit(f"{node.name}.bias", "add", [(out, ()), (bq, extra)], (1, out_hw, cout), pad=(JUNK, JUNK))
            return replace(out, r=out_hw, layout="flat", spatial=(ho, wo))
        cin_pad = tiles(cin) * TILE
        wmat = self._queue_value(wv, f"im2col_weights_g{groups}", pickers.block_diag_weights(weight, groups, cin_pad),
                                 {"consteval_transform": "block_diag_weights", "groups": groups, "cin_pad": cin_pad})
        if direct:
            a = x
            wextra = (Broadcast(dim="z", factor=z),) if z > 1 else ()
        else:
            tms = (HStack(factor=kk),) if kk > 1 else ()
            a = replace(picked, tms=tuple(picked.tms) + tms, z=1, r=out_hw, c=kk * cin_pad)
            wextra = ()
        inputs = [(a, ()), (wmat, wextra)]
        attrs: Dict[str, Any] = {}
        if bias is not None:
            bq = self._queue_value(bias, "row", self.values[bias.src].reshape(1, cout))
            extra: List[TM] = [Broadcast(dim="z", factor=z)] if z > 1 else []
            if tiles(rows) > 1:
                extra.append(Broadcast(dim="r", factor=tiles(rows)))
            inputs.append((bq, tuple(extra)))
            attrs["bias"] = True
        out = self.emit(node.name, "matmul", inputs, (z, rows, cout), attrs, pad=(a.pad_r, ZERO), layout=layout,
                        spatial=spatial)
        return out

    def _conv_device_weights(self, node, ops, picked: DVal, kk: int, kernel, cin, cout, out_hw, out_rp, x) -> DVal:
        """:meth:`_conv_weights` for weights (or a bias) whose value is not known at compile time: trained
        parameters the runtime rewrites after every optimizer step (``RUNTIME_UPDATED``), or values the graph
        computes (the flipped weights of a transposed convolution's gradient). The layout transform the
        compile-time path does on the host (im2col matrix, depthwise rows) runs on the device instead, as a
        data movement of the weight tensor (pickers, see :meth:`move`); it is a few small ops per weight,
        read by every sample of the microbatch."""
        groups = node.attrs["groups"]
        wv, bias = ops[1], (ops[2] if len(ops) == 3 else None)
        wshape = tuple(self.g[node.operands[1]].shape)
        cout_w, cin_g, kh, kw = wshape
        held = self.held_shape(wv, wshape)  # a trained weight's queue may hold it compact: [Cout, Cin/g·kk]
        ho, wo = self.g[node.name].shape[1:3]
        direct = picked is x
        if direct:
            z, rows, layout, spatial = x.z, x.r, x.layout, x.spatial
        else:
            z, rows, layout, spatial = 1, out_hw, "flat", (ho, wo)
        idx = torch.arange(cout_w * cin_g * kh * kw).reshape(cout_w, cin_g, kh * kw)
        bq = None
        if bias is not None:
            bshape = tuple(self.g[node.operands[2]].shape)
            bq = bias if (bias.z, bias.r, bias.c) == (1, 1, cout) and not bias.tms else \
                self.move(bias, bshape, (1, cout), torch.arange(cout), f"{node.name}.bias_row")
        depthwise = groups > 1 and groups == cin and cout == cin
        if depthwise and not direct:
            # [kk, 32, C]: slice ``pos`` holds w[c, 0, pos] in every row (replicated for a broadcast over r).
            emap = idx[:, 0, :].t()[:, None, :].expand(kk, TILE, cout).contiguous()
            wrows = self.move(wv, held, (kk, TILE, cout), emap.reshape(-1), f"{node.name}.dw_rows")
            wrows = replace(wrows, r=TILE, pad_r=REP)
            out = self._depthwise_apply(node, picked, replace(wrows, r=1), kk, out_hw, out_rp, cin)
            if bq is not None:
                brep = self._rep(bq, "r")
                extra = (Broadcast(dim="r", factor=tiles(out_hw)),) if tiles(out_hw) > 1 else ()
                out = self.emit(f"{node.name}.bias", "add", [(out, ()), (replace(brep, r=1), extra)],
                                (1, out_hw, cout), pad=(JUNK, JUNK))
            return replace(out, r=out_hw, layout="flat", spatial=(ho, wo))
        # The im2col matrix [kk*cin_pad, Cout] (block-diagonal for groups): first [Cout, Cin/g, kk] (kh parts),
        # then a z <-> c rotation to [Cin/g, kk, Cout] and one row picker. Other groups' rows and the channel
        # padding stay zero.
        cin_pad = tiles(cin) * TILE
        cout_g = cout // groups
        w3, w3_shape = wv, held  # [Cout, Cin/g, kh, kw] has the element order of [Cout, Cin/g, kk]
        # A [Cout, Cin/g, 1, 1] queue holds one element per slice: moving it straight to [Cin_pad, Cout] needs
        # more picker parts than a gather may have once Cout and Cin/g both pass a tile; via [Cout, Cin/g, 1]
        # (as for kernels with more taps) it takes two small moves. A compact queue moves in one.
        if len(held) == 4 and (kh * kw > 1 or (cin_g > TILE and cout > TILE)):
            w3_shape = (cout, cin_g, kk)
            w3 = self.move(wv, wshape, w3_shape, torch.arange(cout * cin_g * kk), f"{node.name}.w_taps")
        idx3 = torch.arange(cout * cin_g * kk).reshape(cout, cin_g, kk)
        emap = torch.full((kk, cin_pad, cout), -1, dtype=torch.int64)
        for g in range(groups):
            co = slice(g * cout_g, (g + 1) * cout_g)
            emap[:, g * cin_g:(g + 1) * cin_g, co] = idx3[co].permute(2, 1, 0)
        wt = self.move(w3, w3_shape, (kk * cin_pad, cout), emap.reshape(-1), f"{node.name}.im2col_weights")
        if direct:
            a = x
            wextra: tuple = (Broadcast(dim="z", factor=z),) if z > 1 else ()
        else:
            tms = (HStack(factor=kk),) if kk > 1 else ()
            a = replace(picked, tms=tuple(picked.tms) + tms, z=1, r=out_hw, c=kk * cin_pad)
            wextra = ()
        inputs = [(a, ()), (wt, wextra)]
        attrs: Dict[str, Any] = {}
        if bq is not None:
            extra: List[TM] = [Broadcast(dim="z", factor=z)] if z > 1 else []
            if tiles(rows) > 1:
                extra.append(Broadcast(dim="r", factor=tiles(rows)))
            inputs.append((bq, tuple(extra)))
            attrs["bias"] = True
        return self.emit(node.name, "matmul", inputs, (z, rows, cout), attrs, pad=(a.pad_r, ZERO), layout=layout,
                         spatial=spatial)

    def _avg_pool(self, node, src, in_pitch, k_r, hw, out_hw2, kernel, stride, pads, cin) -> DVal:
        h, w = hw
        ho, wo = out_hw2
        kh, kw = kernel
        a = node.attrs
        pos, oh, ow, ih, iw, valid = _window(h, w, ho, wo, kh, kw, stride, (1, 1), pads)
        if a.get("divisor_override"):
            div = np.full(len(pos), float(a["divisor_override"]))
        elif a.get("count_include_pad", True):
            # torch's rule: a window counts the declared padding but not the positions ceil_mode adds past
            # it, so an edge window is clipped at the input plus the bottom/right padding.
            pad_r, pad_b = a["padding"][1], a["padding"][3]
            hs = oh * stride[0] - pads[0]
            ws = ow * stride[1] - pads[1]
            he = np.minimum(hs + kh, h + pad_b)
            we = np.minimum(ws + kw, w + pad_r)
            div = ((he - hs) * (we - ws)).astype(np.float64)
        else:
            counts = np.zeros(ho * wo)
            np.add.at(counts, (oh * wo + ow)[valid], 1)
            div = counts[oh * wo + ow]
        values = (1.0 / div)[valid].astype(np.float32)
        out = self._row_pick(src, node.name, (oh * wo + ow)[valid], (ih * in_pitch + iw)[valid], values,
                             out_r=ho * wo, k_r=k_r)
        return replace(out, r=ho * wo, layout="flat", spatial=(ho, wo))


#: Row bands one convolution is sliced into at most (a splice joins at most 8 inputs).
MAX_BANDS = 8


def band_limit_tiles(l1_budget_bytes: int) -> int:
    """Output row tiles one core of a sparse im2col matmul may hold: a quarter of the L1 budget in Float16_b
    tiles (a double-buffered output block and as much again for partial sums and input streams)."""
    return max(1, l1_budget_bytes // (4 * tile_size_bytes(DataFormat.Float16_b)))


def row_bands(rt: int, grid_rows: int, limit: int, rows: int):
    """Bands ``[(r0, r1)]`` of ``rows`` output rows (``rt`` tiles) such that each band's tiles split over at
    most ``grid_rows`` grid rows into blocks of at most ``limit`` tiles; None when one band already does (or
    no split into at most :data:`MAX_BANDS` bands does). Every band but the last is a multiple of
    ``grid_rows`` tiles; the fewest bands win."""
    def fits(n: int) -> bool:
        return _fits_one_matmul(n, grid_rows, limit)

    if fits(rt):
        return None
    for nb in range(2, MAX_BANDS + 1):
        size = -(-(-(-rt // nb)) // grid_rows) * grid_rows
        last = rt - (nb - 1) * size
        if last <= 0 or not fits(size) or not fits(last):
            continue
        edges = [min(i * size * TILE, rows) for i in range(nb)] + [rows]
        return list(zip(edges[:-1], edges[1:]))
    return None


def taps_per_slice(kk: int, rt: int, grid_rows: int, limit: int) -> int:
    """How many of a convolution's ``kk`` kernel positions one t slice of its im2col picker stacks along rows
    (``ConvPoolLowering._tap_pick``): the largest divisor of ``kk`` whose stacked ``rt``-tile outputs still
    split over at most ``grid_rows`` grid rows into blocks of at most ``limit`` tiles, else 1."""
    for per in range(kk, 1, -1):
        if kk % per == 0 and _fits_one_matmul(per * rt, grid_rows, limit):
            return per
    return 1


def stacking_bands(rt: int, kk: int, grid_rows: int, limit: int, rows: int):
    """Bands ``[(r0, r1)]`` of ``rows`` output rows (``rt`` tiles) in which more of ``kk`` kernel positions stack
    in one t slice (:func:`taps_per_slice`) than in one band, each band stacking as many as the smallest;
    the most stacking wins, then the fewest bands (at most :data:`MAX_BANDS`). None when banding stacks no
    more."""
    best_per, best = taps_per_slice(kk, rt, grid_rows, limit), None
    for nb in range(2, MAX_BANDS + 1):
        size = -(-rt // nb)
        last = rt - (nb - 1) * size
        if last <= 0:
            continue
        per = min(taps_per_slice(kk, size, grid_rows, limit), taps_per_slice(kk, last, grid_rows, limit))
        if per > best_per:
            best_per, best = per, (nb, size)
        if best_per == kk:
            break
    if best is None:
        return None
    nb, size = best
    edges = [min(i * size * TILE, rows) for i in range(nb)] + [rows]
    return list(zip(edges[:-1], edges[1:]))


def _band_stacking(bands, kk: int, grid_rows: int, limit: int) -> int:
    """Kernel positions per t slice that every one of ``bands`` (pixel row ranges) stacks."""
    return min(taps_per_slice(kk, tiles(r1 - r0), grid_rows, limit) for r0, r1 in bands)


def _fits_one_matmul(rt: int, grid_rows: int, limit: int) -> bool:
    """``rt`` output row tiles split over at most ``grid_rows`` grid rows into blocks of at most ``limit``."""
    return any(rt % d == 0 and rt // d <= limit for d in range(1, min(grid_rows, rt) + 1))
