"""Lowering of elementwise ops and matmul (a mixin of the lowering pass): unary and binary device ops with
their broadcasts (tile broadcasts of replicated operands, ``E`` matmuls for activations) and padding masks,
and ``matmul`` with its bias. See the **Elementwise** and **Matmul** parts of :mod:`pybuda.passes.lower.to_tiles`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List, Sequence, Tuple

from pybuda.ir.graph import HOLDS_MASK_FILL, HOLDS_OPERAND, Node
from pybuda.netlist.device_ops import device_op
from pybuda.netlist.host_io import canonical_zrc, tiles
from pybuda.netlist.tms import TM, Broadcast, Transpose
from pybuda.passes.lower import pickers
from pybuda.passes.lowered.exact_pickers import COPIES_INPUT, ONE_HOT_COPY, ZERO_PADDING
from pybuda.passes.lower.common import (BINARY, JUNK, LOWERINGS, PAD_SENSITIVE, POLE_AT_ZERO, REP, TILE, UNARY, ZERO,
                                        ZERO_PRESERVING, DVal, _combine_pad, _right_align)


class ArithmeticLowering:
    """Methods of the lowering pass for elementwise unary/binary ops and ``matmul``, and the padding masks
    (``_zero_rows``/``_zero_cols``) the rest of the pass uses too."""

    # --- elementwise ----------------------------------------------------------------------------------------
    def _unary(self, node: Node, v: DVal) -> DVal:
        t = node.op_type
        try:
            attrs: Dict[str, Any] = LOWERINGS[t].device_attrs(node.attrs)
        except ValueError as e:  # attributes with no device form (a decomposition should have removed them)
            raise self.err(str(e)) from None
        if t in PAD_SENSITIVE and JUNK in (v.pad_r, v.pad_c):
            v = self._safe_pad(v)
        if t in POLE_AT_ZERO:
            v = self._ones_pad(v)
        if t in ZERO_PRESERVING:
            pad = (v.pad_r, v.pad_c)
        else:
            pad = (REP if v.pad_r == REP else JUNK, REP if v.pad_c == REP else JUNK)
        return self.emit(node.name, UNARY[t], [(v, ())], (v.z, v.r, v.c), attrs, pad=pad, layout=v.layout,
                         spatial=v.spatial)

    def _safe_pad(self, v: DVal) -> DVal:
        """``v`` with its junk tile padding zeroed, while that junk is still finite.

        Junk padding is harmless only while it stays finite: padding is later removed by a 0/1 mask or a
        matmul with zero rows, and ``inf * 0`` is NaN. ``exp`` of the junk ``0 - rowmax`` of a row of
        -1e4 logits is inf and leaked NaN into every real value of a softmax over a fully masked row."""
        if v.pad_r != REP and tiles(v.r) * TILE != v.r:
            v = self._zero_rows(v) if v.pad_r != ZERO else v
        if v.pad_c != REP and tiles(v.c) * TILE != v.c:
            v = self._zero_cols(v) if v.pad_c != ZERO else v
        return v

    def _ones_pad(self, v: DVal) -> DVal:
        """``v`` with ones in its tile padding (see ``POLE_AT_ZERO``): padding zeroed if it is junk, then a
        constant that is 1 on padding rows/columns only is added."""
        if v.pad_r != REP and tiles(v.r) * TILE != v.r:
            v = self._zero_rows(v) if v.pad_r != ZERO else v
            ones = self._const(("row_pad_ones", v.r), f"row_pad_ones_{v.r}", 1.0 - pickers.row_mask(v.r))
            v = self.emit(f"{v.src}.one_pad_r", "add", [(v, ()), (ones, self._mask_tms(v, "c"))], (v.z, v.r, v.c),
                          pad=(JUNK, v.pad_c), layout=v.layout, spatial=v.spatial, tags=self.copy_tags(v))
        if v.pad_c != REP and tiles(v.c) * TILE != v.c:
            v = self._zero_cols(v) if v.pad_c != ZERO else v
            ones = self._const(("col_pad_ones", v.c), f"col_pad_ones_{v.c}", 1.0 - pickers.col_mask(v.c))
            # The ones share a block of a block format with the row's last real values (16 datums of a tile row),
            # where a value 2**7 times smaller flushes to zero and its reciprocal is inf (F.normalize of a zero row:
            # its 1e-12 clamp became 0, and 0 * inf NaN): a fill beside ordinary data, held in a per-datum format.
            v = self.emit(f"{v.src}.one_pad_c", "add", [(v, ()), (ones, self._mask_tms(v, "r"))], (v.z, v.r, v.c),
                          pad=(v.pad_r, JUNK), layout=v.layout, spatial=v.spatial, tags={HOLDS_MASK_FILL: True})
        return v

    @staticmethod
    def _mask_tms(v: DVal, along: str) -> Tuple[TM, ...]:
        """TMs that stretch a one-tile-wide (``along="c"``) or one-tile-high (``"r"``) mask over ``v``."""
        extra: List[TM] = []
        if tiles(v.c if along == "c" else v.r) > 1:
            extra.append(Broadcast(dim=along, factor=tiles(v.c if along == "c" else v.r)))
        if v.z > 1:
            extra.insert(0, Broadcast(dim="z", factor=v.z))
        return tuple(extra)

    def _binary(self, node: Node, a: DVal, b: DVal) -> DVal:
        out_shape = tuple(node.shape)
        shapes = [_right_align(self.g[o].shape, len(out_shape)) for o in node.operands]
        operands = [a, b]
        layout, spatial = "canonical", None
        flat = [v for v in operands if v.layout == "flat"]
        if flat:
            h, w = flat[0].spatial
            ok = len(out_shape) == 4 and out_shape[0] == 1 and tuple(out_shape[1:3]) == (h, w)
            for s in shapes:
                if ok and s[1] * s[2] > 1 and (tuple(s[1:3]) != (h, w) or s[0] != 1):
                    ok = False
            if ok:
                layout, spatial = "flat", (h, w)
                operands = [self._flat(v, h, w) if s[1] * s[2] > 1 else self._canonical(v)
                            for v, s in zip(operands, shapes)]
            else:
                operands = [self._canonical(v) for v in operands]
        if layout == "flat":
            z, r, c = 1, spatial[0] * spatial[1], out_shape[-1]
        else:
            z, r, c = canonical_zrc(out_shape)
        inputs = []
        pads_r, pads_c = [], []
        for i, (v, s) in enumerate(zip(operands, shapes)):
            if layout == "canonical" and len(s) > 2 and v.z not in (1, z):
                v = self._expand_leading(v, s, out_shape, i)
            elif layout == "canonical" and len(s) > 2 and v.z == z and tuple(s[:-2]) != tuple(out_shape[:-2]) and z > 1:
                v = self._expand_leading(v, s, out_shape, i)
            extra: List[TM] = []
            bc_r, bc_c = v.r == 1 and r > 1, v.c == 1 and c > 1
            # A compile-time operand next to a replicated one stays replicated for free.
            if v.is_queue_value and not v.tms:
                others = [o for o in operands if o is not v]
                if c == 1 and v.c == 1 and any(o.pad_c == REP for o in others):
                    v = self._rep(v, "c")
                if r == 1 and v.r == 1 and any(o.pad_r == REP for o in others):
                    v = self._rep(v, "r")
            if bc_c:
                v = self._rep(v, "c")
                if tiles(c) > 1:
                    extra.append(Broadcast(dim="c", factor=tiles(c)))
            if bc_r:
                v = self._rep(v, "r")
                if tiles(r) > 1:
                    extra.append(Broadcast(dim="r", factor=tiles(r)))
            if v.z == 1 and z > 1:
                extra.insert(0, Broadcast(dim="z", factor=z))
            pads_r.append(JUNK if bc_r else v.pad_r)
            pads_c.append(JUNK if bc_c else v.pad_c)
            inputs.append((v, tuple(extra)))
        op_type = BINARY[node.op_type]
        pad = (_combine_pad(op_type, pads_r, r), _combine_pad(op_type, pads_c, c))
        # A transpose cannot ride on input 1 of a binary op; commutative ops can swap their inputs.
        swapped = device_op(op_type).commutative and any(isinstance(t, Transpose) for t in
                                                         tuple(inputs[1][0].tms) + inputs[1][1])
        if swapped:
            inputs = [inputs[1], inputs[0]]
        held = node.tags.get(HOLDS_OPERAND)
        tags = {HOLDS_OPERAND: 1 - held if swapped else held} if held is not None else None
        return self.emit(node.name, op_type, inputs, (z, r, c), pad=pad, layout=layout, spatial=spatial, tags=tags)

    def _expand_leading(self, v: DVal, s: Sequence[int], out_shape: Sequence[int], index: int) -> DVal:
        """An operand that broadcasts over some (not all) leading dims: only compile-time values can."""
        target = tuple(out_shape[:-2]) + tuple(s[-2:])
        if not v.is_queue_value:
            # An activation (a max-pool gradient's per-window max against its windows, a maximum against the
            # slices of an argmax over a leading dim): its slices are repeated by TMs, exactly.
            return self.repeat_leading(v, tuple(s[:-2]), tuple(out_shape[:-2]))
        value = self.values[v.src].reshape(s)
        return self._queue_value(v, f"expand{'x'.join(map(str, target))}", value.expand(target).contiguous())

    def _rep(self, v: DVal, dim: str) -> DVal:
        """Make a size-1 row/col dim fill its whole tile (so tile broadcasts repeat the right value)."""
        if (v.pad_r if dim == "r" else v.pad_c) == REP:
            return v
        if v.is_queue_value and not v.tms:
            value = self.values[v.src]
            z, r, c = canonical_zrc(value.shape)
            v3 = value.reshape(z, r, c)
            if dim == "r":
                value = v3.expand(z, TILE, c).contiguous() if r == 1 else v3
            else:
                value = v3.expand(z, r, TILE).contiguous() if c == 1 else v3
            dv = self._queue_value(v, f"rep_{dim}", value)
            return replace(dv, r=v.r, c=v.c, pad_r=REP if dim == "r" else v.pad_r, pad_c=REP if dim == "c" else v.pad_c)
        key = ("rep", v.src, v.tms, dim)
        if key not in self.cache:
            self.cache[key] = self._rep_activation(v, dim)
        return self.cache[key]

    def _rep_activation(self, v: DVal, dim: str) -> DVal:
        if dim == "r":
            e = self._const("bcast_r", "tile_bcast_r", pickers.tile_broadcast_r())
            extra = (Broadcast(dim="z", factor=v.z),) if v.z > 1 else ()
            return self.emit(f"{v.src}.tile_bcast_r", "matmul", [(e, extra), (v, ())], (v.z, 1, v.c),
                             pad=(REP, v.pad_c), tags={"picker": "tile_broadcast", "tile_broadcast_dim": "r",
                                                        "data_input": 1, "min_fidelity": "HiFi2"})
        e = self._const("bcast_c", "tile_bcast_c", pickers.tile_broadcast_c())
        extra = (Broadcast(dim="z", factor=v.z),) if v.z > 1 else ()
        return self.emit(f"{v.src}.tile_bcast_c", "matmul", [(v, ()), (e, extra)], (v.z, v.r, 1),
                         pad=(v.pad_r, REP), tags={"picker": "tile_broadcast", "tile_broadcast_dim": "c",
                                                        "data_input": 0, "min_fidelity": "HiFi3"})

    # --- matmul ---------------------------------------------------------------------------------------------
    def _matmul(self, node: Node, ops: List[DVal]) -> DVal:
        a, b = ops[0], ops[1]
        sa, sb = self.g[node.operands[0]].shape, self.g[node.operands[1]].shape
        out_shape = tuple(node.shape)
        z, m, n = canonical_zrc(out_shape)
        k = sa[-1]
        for v, s, i in ((a, sa, 0), (b, sb, 1)):
            # An operand that broadcasts over some leading dims but not all ([1, 32, 10] x [2, 32, 1]) is
            # repeated to the output's; one that broadcasts over all of them is a z broadcast below.
            if len(s) > 2 and v.z != 1 and z > 1 and tuple(s[:-2]) != tuple(out_shape[:-2]):
                ops[i] = self._expand_leading(v, s, out_shape, i)
        a, b = ops[0], ops[1]
        if k % TILE and a.pad_c != ZERO and b.pad_r != ZERO:
            b = self._zero_rows(b) if not b.is_queue_value else b
            if b.pad_r != ZERO:
                a = self._zero_cols(a)
        ea = (Broadcast(dim="z", factor=z),) if a.z == 1 and z > 1 else ()
        eb = (Broadcast(dim="z", factor=z),) if b.z == 1 and z > 1 else ()
        inputs = [(a, ea), (b, eb)]
        attrs: Dict[str, Any] = {}
        if len(ops) == 3:
            bias = ops[2]
            sbias = _right_align(self.g[node.operands[2]].shape, len(out_shape))
            if sbias[-1] != out_shape[-1] or (len(sbias) > 2 and any(d != 1 for d in sbias[:-2]) and
                                              tuple(sbias[:-2]) != tuple(out_shape[:-2])):
                raise self.err(f"matmul bias of shape {list(sbias)} does not broadcast onto rows of {list(out_shape)}")
            extra: List[TM] = []
            if bias.z == 1 and z > 1:
                extra.append(Broadcast(dim="z", factor=z))
            if bias.r == 1 and tiles(m) > 1:
                extra.append(Broadcast(dim="r", factor=tiles(m)))
            inputs.append((bias, tuple(extra)))
            attrs["bias"] = True
        pad_r = a.pad_r
        if "bias" in attrs and m % TILE:
            # The bias is broadcast to every row of its tile, padding rows included.
            pad_r = JUNK
        data = self.one_hot_copy(node) if len(ops) == 2 else None
        if data is not None and self.carries_nonfinite(inputs[data][0]):

            def pick(dv: DVal, op_name: str, op_tags: dict) -> DVal:
                picked = list(inputs)
                picked[data] = (dv, inputs[data][1])
                return self.emit(op_name, "matmul", picked, (z, m, n), attrs, pad=(pad_r, b.pad_c), tags=op_tags)

            return self.copy_nonfinite(inputs[data][0], node.name, pick, {COPIES_INPUT: data})
        return self.emit(node.name, "matmul", inputs, (z, m, n), attrs, pad=(pad_r, b.pad_c),
                         tags={ONE_HOT_COPY: data} if data is not None else None)

    def _zero_rows(self, v: DVal) -> DVal:
        if self.carries_nonfinite(v):
            return self._select_real(v, "r")
        mask = self._const(("row_mask", v.r), f"row_mask_{v.r}", pickers.row_mask(v.r))
        return self.emit(f"{v.src}.zero_pad_r", "multiply", [(v, ()), (mask, self._mask_tms(v, "c"))], (v.z, v.r, v.c),
                         pad=(ZERO, v.pad_c), layout=v.layout, spatial=v.spatial,
                         tags={ZERO_PADDING: "r", **self.copy_tags(v)})

    def _zero_cols(self, v: DVal) -> DVal:
        if self.carries_nonfinite(v):
            return self._select_real(v, "c")
        mask = self._const(("col_mask", v.c), f"col_mask_{v.c}", pickers.col_mask(v.c))
        return self.emit(f"{v.src}.zero_pad_c", "multiply", [(v, ()), (mask, self._mask_tms(v, "r"))], (v.z, v.r, v.c),
                         pad=(v.pad_r, ZERO), layout=v.layout, spatial=v.spatial,
                         tags={ZERO_PADDING: "c", **self.copy_tags(v)})

    def _select_real(self, v: DVal, side: str) -> DVal:
        """``v`` with its row (``side="r"``) or column padding zeroed by a select, not a multiply: the padding of a
        value that carries NaN or infinity may hold them too (the junk rows of a softmax over rows of -inf, an
        infinite fill broadcast over a whole tile), and ``inf * 0`` is NaN. ``heaviside(m, v)`` with ``m`` 0 on real
        rows/columns and -1 on padding is ``v`` on the former and an exact 0 on the latter, whatever ``v`` holds;
        same op count as the multiply."""
        from pybuda.ir.graph import NONFINITE_SAFE

        if side == "r":
            step = self._const(("row_step", v.r), f"row_step_{v.r}", pickers.row_mask(v.r) - 1.0)
            tms, pad = self._mask_tms(v, "c"), (ZERO, v.pad_c)
        else:
            step = self._const(("col_step", v.c), f"col_step_{v.c}", pickers.col_mask(v.c) - 1.0)
            tms, pad = self._mask_tms(v, "r"), (v.pad_r, ZERO)
        return self.emit(f"{v.src}.zero_pad_{side}", "heaviside", [(step, tms), (v, ())], (v.z, v.r, v.c),
                         pad=pad, layout=v.layout, spatial=v.spatial, tags={NONFINITE_SAFE: True, **self.copy_tags(v)})
