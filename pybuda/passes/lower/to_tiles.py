"""Lowering: the per-sample ``ir.Graph`` becomes a :class:`BudaGraph` of backend ops on 32x32 tiles.

Every value is a device tensor in canonical form (:mod:`pybuda.netlist.host_io`: leading dims
folded into ``z`` = the op's ``t``, rows/cols padded to tiles). How each kind of op is expressed in the
netlist - the golden backend executes exactly this:

**Elementwise.** An op whose registry entry has a ``lower`` slot becomes the netlist op it names, with the
attributes it computes (``add``/``subtract``/``multiply``/``maximum`` and the SFPU unaries keep their names;
``leaky_relu`` -> ``lrelu {slope}``, integer ``pow`` -> ``power {exp}``, ``gelu`` ``approximate='tanh'``
-> ``approximate_mode: true``, ``relu`` -> ``nop`` with ``relu_en/relu_threshold/relu_mode`` using the
registry's relu semantics, ``buffer`` -> ``nop``); the device op's row in :mod:`pybuda.netlist.device_ops`
says whether it is unary or binary, keeps zero padding, or may swap its inputs. Broadcasting becomes input
TMs on the smaller operand: ``broadcast: {z: f}`` when its z is 1, ``broadcast: {r|c: tiles}`` for a size-1
row/column dim.
Tile broadcasts repeat whole tiles, so a size-1 dim must first fill its whole tile ("replicated"): a
parameter/constant is replicated at compile time (a derived queue ``<name>.rep_r`` / ``.rep_c``); an
activation gets a matmul with the constant ``E`` (``E[i,0]=1``: ``E @ x``; or ``E[0,j]=1``: ``x @ E``).
Results of sum/avg reductions are replicated already (below), so a softmax/layernorm needs no ``E``.

**Matmul.** ``matmul`` with ``in0 (t, M, K)``, ``in1 (t, K, N)``; a side with z == 1 gets
``broadcast: {z: t}``; a bias becomes input 2 with ``broadcast: {r: M}`` (the backend broadcasts row 0
within each tile) - bias/gelu/relu fusion is done afterwards by :mod:`pybuda.passes.lowered.fuse_matmul_epilogue`.
When K is not a multiple of 32 and neither operand's padding is known to be zero, one operand is
multiplied by a 0/1 mask first.

**Reductions.** ``reduce_sum``/``reduce_avg`` over columns: ``x @ ones[C, 32]`` (scale 1 or 1/C, zero on
padding rows), which replicates the result over the 32 columns of its tile; over rows:
``ones[32, R] @ x``; over a leading (z) dim: a sparse row picker on ``vstack``-ed slices that sums them.
``reduce_max`` -> ``reduce {type: max, dim: r|c}`` (padding first pushed to -1e30 by an ``add`` when the
dim is not tile-aligned), or ``reduce {dim: z, z: n}`` over the innermost leading dim.

**TMs.** A chain of IR TMs becomes the shortest sequence of netlist TMs (``transpose``, ``hslice``,
``hstack``, ``vslice``, ``vstack``) that moves every element where the IR says, verified on index
tensors; the TMs travel to the consuming op's ``input_N_tms`` (a ``nop`` carries them where a TM is not
allowed, e.g. a transpose on matmul input 0 or on a binary input on Grayskull). Other data movement
(general reshapes, ``index``/``select``/``narrow``, ``pad``, ``concatenate``, ``broadcast``/``repeat`` of
activations) is done with pickers: a sparse row picker (``matmul`` with ``identity: true``, encoding in
:mod:`pybuda.passes.lower.pickers`) on ``vstack``-ed rows and/or a dense column picker ``x @ P``, followed by
``vslice`` on the consumer; a concatenation of tile-aligned column bands is one ``splice``
(``movement._splice_columns``), other joins sum one placed picker output per operand with ``add``.

**Convolutions** (channel-last, see :mod:`pybuda.passes.graph.channel_last`) use TT-Buda's sparse-matmul
im2col: activations are pixels x channels; a sparse picker gathers, for each of the ``kh*kw`` kernel
positions, the input pixel under every output pixel (zero outside the image = zero padding), stacked
along rows; the weight matmul reads it with ``[vslice: kk, hstack: kk]`` so one row holds all kernel
positions' channels, against weights reshaped at compile time to ``[kk*Cin_pad, Cout]`` (block-diagonal
for grouped convs). Depthwise convs multiply the picked pixels by per-position weights
(``[kk, 32, C]``, ``broadcast r``) and sum positions with a second sparse picker. ``max_pool2d``: picker,
``add`` of a -1e30 mask on positions outside the image, ``reduce {dim: z, type: max, z: kk}`` after
``vslice: kk``; ``avg_pool2d``: one weighted picker. Conv outputs stay "flat" (one row per pixel,
``H*W`` rows, no per-row padding) until an op needs the canonical ``[H, W, C]`` form, when a picker
(or a ``vslice`` when W is a multiple of 32) converts it.

Embedding and ops without a device form (comparisons, ``argmax``, ``cumsum``, ``resize`` ...) raise a
CompileError naming the op.

This module is the pass itself (the walk over the graph, device values, queues and constants, layouts and
pickers, outputs); each family of ops lowers in a mixin: :mod:`~pybuda.passes.lower.arithmetic` (elementwise
and matmul), :mod:`~pybuda.passes.lower.conv`, :mod:`~pybuda.passes.lower.reduce` and
:mod:`~pybuda.passes.lower.movement` (TMs).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from pybuda.errors import CompileError
from pybuda.ir.graph import (CARRIES_NONFINITE, CONSTANT, HOLDS_MASK_FILL, INPUT, JUNK_PADDED_INPUT, OP, PARAMETER,
                             RUNTIME_UPDATED, NONFINITE_SAFE, SIGN_EXACT, WRITTEN_IN_PLACE, Graph, Node)
from pybuda.ops import registry
from pybuda.passes.lower import pickers
from pybuda.perf import sparse as sparse_work
from pybuda.ir.lowered import BudaGraph, BudaOp, BudaQueue, TileShape
from pybuda.passes.context import CompileContext
from pybuda.passes.lowered.exact_pickers import COPIES_INPUT, ONE_HOT_COPY
from pybuda.netlist.host_io import canonical_zrc, compact_shape, tiles
from pybuda.netlist.tms import TM, Broadcast, Transpose, VSlice, VStack, tms_shape
from pybuda.dtypes import DataFormat
from pybuda.passes.lower.common import (
    BINARY, BINARY_OPS, GATHER_OPS, JUNK, JUNK_PADDING, TILE, TRANSPOSE_OK_INPUT0, UNARY,
    ZERO, DVal, Lazy, _hashable, _tile3,
)
from pybuda.passes.graph.per_sample_ops import split_per_sample_ops
from pybuda.passes.lower.arithmetic import ArithmeticLowering
from pybuda.passes.lower.conv import ConvPoolLowering
from pybuda.passes.lower.movement import DataMovementLowering
from pybuda.passes.lower.reduce import ReductionLowering
from pybuda.passes.lower.specials import NonfiniteMoveLowering

def lower_to_buda(graph: Graph, ctx: CompileContext) -> BudaGraph:
    """Lower the per-sample IR graph to backend ops (see the module docstring for every decision)."""
    # Convolutions and pools lower one image at a time: several images on dim 0 (the batch inside the
    # graph, or images a model stacks itself) are split into per-image ops first.
    return _Lowering(split_per_sample_ops(graph, ctx), ctx).run()


class _Lowering(ArithmeticLowering, ConvPoolLowering, ReductionLowering, DataMovementLowering, NonfiniteMoveLowering):
    def __init__(self, graph: Graph, ctx: CompileContext):
        self.g = graph
        self.ctx = ctx
        self.bg = BudaGraph(name=graph.name, microbatch=ctx.microbatch)
        self.vals: Dict[str, DVal] = {}
        self.pending: Dict[str, Tuple[str, torch.Tensor, Dict[str, Any], bool]] = {}
        self.values: Dict[str, torch.Tensor] = {}  # framework values of queue-backed DVals
        self.compact_leaves: Dict[str, Tuple[int, int]] = {}  # parameters whose queue holds compact_shape
        self.cache: Dict[Any, Any] = {}
        self._unshared = itertools.count()  # numbers the constants of pickers that share with none
        self.node: Optional[Node] = None

    # ------------------------------------------------------------------------------------------------
    def err(self, message: str) -> CompileError:
        """A CompileError naming the stage and the IR op being lowered."""
        return self.ctx.error(message, op=self.node.name if self.node is not None else None)

    def run(self) -> BudaGraph:
        """Lower every node in order, then create the output queues."""
        for node in self.g:
            self.node = node
            if node.kind == INPUT:
                self.vals[node.name] = self._input(node)
            elif node.kind in (PARAMETER, CONSTANT):
                self.vals[node.name] = self._leaf(node)
            elif node.kind == OP:
                self.vals[node.name] = self._op(node)
        self.node = None
        self._output_vals: Dict[str, DVal] = {}
        for node in self.g.outputs:
            self.node = node
            self._output(node)
        self.node = None
        self._unshare_output_producers()
        self.drop_unread_nonfinite_parts()
        self.mark_finite_only_inputs()
        return self.bg

    def _unshare_output_producers(self) -> None:
        """An op that writes an output queue cannot also feed ops (it may untilize its output): where an output
        chosen first got its producer directly and a later output then read that op, the first output gets a
        nop of its own too."""
        readers = {name for op in self.bg.ops.values() for name in op.inputs}
        for qname in list(self.bg.output_order):
            q = self.bg.queues[qname]
            producer = self.bg.ops.get(q.producer)
            if producer is None or producer.name not in readers:
                continue
            v = self._output_vals[qname]
            carried = {CARRIES_NONFINITE: True} if producer.tags.get(CARRIES_NONFINITE) else {}
            nop = self.emit(f"{qname}.out_nop", "nop", [(v, ())], (v.z, v.r, v.c), pad=(v.pad_r, v.pad_c),
                            tags={"output_nop": True, **carried})
            q.producer = nop.src
            if producer.untilize_output:
                producer.untilize_output = False
                self.bg.ops[nop.src].untilize_output = True

    # --- names, queues, emitting -------------------------------------------------------------------------
    def _name(self, base: str) -> str:
        name, i = base, 1
        while name in self.bg.ops or name in self.bg.queues or name in self.pending:
            name = f"{base}_{i}"
            i += 1
        return name

    def _input(self, node: Node) -> DVal:
        z, r, c = canonical_zrc(node.shape)
        tags = {"device_shape": tuple(node.shape), "batched": bool(node.tags.get("batched")),
                "host_tms": list(node.tags.get("host_tms", [])),
                "dtype": node.tags.get("device_dtype") or str(node.dtype).replace("torch.", ""),
                "framework_shape": tuple(node.tags.get("framework_shape", node.shape)),
                # Integer data pushed in a float format (ids, masks): the format must hold it exactly.
                "integer_values": not node.dtype.is_floating_point and node.dtype != torch.bool,
                "exact_df": node.tags.get("exact_df"),  # an input only outputs read: kept as pushed
                "value_range": node.tags.get("value_range"), "value_regions": node.tags.get("value_regions"),
                "value_also": node.tags.get("value_also")}
        for key in (CARRIES_NONFINITE, HOLDS_MASK_FILL):
            if node.tags.get(key):
                tags[key] = True
        q = BudaQueue(node.name, "input", TileShape(1, z, tiles(r), tiles(c)),
                      original_shape=tags["framework_shape"], requires_grad=node.requires_grad, tags=tags)
        self.bg.add_queue(q)
        self.bg.input_order.append(node.name)
        v = DVal(node.name, (), z, r, c)
        if node.tags.get(JUNK_PADDED_INPUT):  # written by another program on the device, padding and all
            v = self._zero_rows(v) if r % TILE else v
            v = self._zero_cols(v) if c % TILE else v
        return v

    def _leaf(self, node: Node) -> DVal:
        value = self.g.tensors[node.name]
        kind = "parameter" if node.kind == PARAMETER else "constant"
        tags = {"device_shape": tuple(value.shape), "dtype": str(value.dtype).replace("torch.", "")}
        # exact_df: values that must keep a format; HOLDS_MASK_FILL: for the ops copying them (copy_tags)
        for key in ("consteval", "exact_df", CARRIES_NONFINITE, HOLDS_MASK_FILL):
            if key in node.tags:
                tags[key] = node.tags[key]
        # A value the runtime rewrites (trained weights, optimizer state) cannot have derived copies made at
        # compile time: it is read like an activation (replicated on the device when broadcast).
        fixed = not node.tags.get(RUNTIME_UPDATED)
        if not fixed:
            tags[RUNTIME_UPDATED] = True
        compact = None if fixed or node.kind != PARAMETER else compact_shape(value.shape)
        if compact is not None:
            tags["device_shape"] = compact
        self.pending[node.name] = (kind, value, tags, node.requires_grad)
        self.values[node.name] = value
        z, r, c = canonical_zrc(compact or value.shape)
        held = DVal(node.name, (), z, r, c, is_queue_value=fixed)
        if compact is None:
            return held
        # Held compact (a trained conv weight): consumers read it through a reshape, which a convolution takes
        # as it is (:meth:`held_weight`) and any other op resolves as a move.
        self.compact_leaves[node.name] = compact
        return Lazy(held, compact, (("reshape", _hashable({"shape": tuple(value.shape)})),), tuple(value.shape),
                    node.name)

    def held_weight(self, name: str) -> DVal:
        """The value of IR node ``name`` as a convolution takes its weight: a trained parameter held compact
        (:func:`compact_shape`) as its queue, in that shape (the same element order as the node's; see
        :meth:`held_shape`), and anything else as :meth:`_get` lowers it."""
        v = self.vals[name]
        if isinstance(v, Lazy) and v.base.src in self.compact_leaves and not v.base.tms \
                and all(op_type == "reshape" for op_type, _ in v.ops):
            return v.base
        return self._get(name)

    def held_shape(self, v: DVal, shape: Tuple[int, ...]) -> Tuple[int, ...]:
        """The logical shape ``v`` holds: its compact shape when it is a parameter's compact queue as
        :meth:`held_weight` gives it, else ``shape`` (the IR node's)."""
        compact = self.compact_leaves.get(v.src)
        if compact is not None and not v.tms and (v.z, v.r, v.c) == canonical_zrc(compact):
            return compact
        return shape

    def _queue_value(self, base: DVal, purpose: str, value: torch.Tensor, extra_tags: Optional[dict] = None) -> DVal:
        """A queue derived at compile time from a parameter/constant (replicated, reshaped, ...)."""
        key = ("derived", base.src, purpose)
        if key in self.cache:
            return self.cache[key]
        kind, _, tags, requires_grad = self._leaf_info(base.src)
        name = self._name(f"{base.src}.{purpose}")
        tags = {"device_shape": tuple(value.shape), "derived_from": base.src, "transform": purpose,
                **{k: v for k, v in tags.items() if k in ("consteval", "exact_df")}, **(extra_tags or {})}
        self.pending[name] = (kind, value, tags, requires_grad)
        self.values[name] = value
        z, r, c = canonical_zrc(value.shape)
        dv = DVal(name, (), z, r, c, is_queue_value=True)
        self.cache[key] = dv
        return dv

    def _leaf_info(self, name: str):
        if name in self.pending:
            return self.pending[name]
        q = self.bg.queues[name]
        return (q.kind, self.bg.tensors[name], q.tags, q.requires_grad)

    def _const(self, key: Any, name: str, value: torch.Tensor, tags: Optional[dict] = None) -> DVal:
        """A compiler-made constant queue, shared by every op that needs the same value."""
        key = ("const", key)
        if key in self.cache:
            return self.cache[key]
        qname = self._name(name)
        t = {"device_shape": tuple(value.shape), "compiler_constant": True, **(tags or {})}
        self.pending[qname] = ("constant", value, t, False)
        self.values[qname] = value
        z, r, c = canonical_zrc(value.shape)
        dv = DVal(qname, (), z, r, c, is_queue_value=True)
        self.cache[key] = dv
        return dv

    def _ensure_queue(self, v: DVal) -> None:
        if v.src in self.pending:
            kind, value, tags, requires_grad = self.pending.pop(v.src)
            q = BudaQueue(v.src, kind, TileShape(1, *_tile3(canonical_zrc(tags.get("device_shape", value.shape)))),
                          original_shape=tuple(value.shape), requires_grad=requires_grad, tags=dict(tags))
            if tags.get("df") == "RawUInt32":
                q.df = DataFormat.RawUInt32
            self.bg.add_queue(q)
            self.bg.tensors[v.src] = value

    def emit(self, name: str, op_type: str, inputs: Sequence[Tuple[DVal, Sequence[TM]]], out: Tuple[int, int, int],
             attrs: Optional[dict] = None, pad: Tuple[str, str] = (JUNK, JUNK), layout: str = "canonical",
             spatial: Optional[Tuple[int, int]] = None, tags: Optional[dict] = None) -> DVal:
        """Add one BudaOp reading ``inputs`` (value, extra TMs), with output logical shape ``out`` (z, r, c).

        Pending TMs a consumer input may not carry (a transpose outside matmul input 1 / unary input 0 /
        non-GS binary input 0) are applied by a nop first. Shapes are checked (a mismatch is a compiler bug).
        """
        srcs: List[str] = []
        in_tms: Dict[int, List[TM]] = {}
        for i, (v, extra) in enumerate(inputs):
            tms = tuple(v.tms) + tuple(extra)
            if not self._tms_legal(op_type, i, tms, attrs or {}):
                v = self._materialize(v)
                tms = tuple(extra)
            self._ensure_queue(v)
            srcs.append(v.src)
            if tms:
                in_tms[i] = [tm.to_obj() for tm in tms]
        z, r, c = out
        op_tags = {"ir_node": self.node.name if self.node is not None else None,
                   "ir_op_type": self.node.op_type if self.node is not None and self.node.kind == OP else None}
        if self.node is not None and self.node.tags.get("exact_df"):
            op_tags["exact_df"] = self.node.tags["exact_df"]
        for tag in (SIGN_EXACT, NONFINITE_SAFE, CARRIES_NONFINITE, HOLDS_MASK_FILL):
            if self.node is not None and self.node.tags.get(tag):
                op_tags[tag] = True
        if self.node is not None and op_type == "matmul" and self.node.tags.get(ONE_HOT_COPY) is not None:
            # A lookup's one-hot matmul (decompose): it copies table rows, at a fidelity that reads them whole.
            op_tags[ONE_HOT_COPY] = self.node.tags[ONE_HOT_COPY]
            op_tags["min_fidelity"] = self.node.tags.get("min_fidelity", "HiFi2")
        op_tags.update(tags or {})
        op = BudaOp(self._name(name), op_type, srcs, TileShape(1, z, tiles(r), tiles(c)), attrs=dict(attrs or {}),
                    input_tms=in_tms, tags=op_tags)
        self._check_shapes(op)
        self.bg.add_op(op)
        return DVal(op.name, (), z, r, c, pad[0], pad[1], layout, spatial)

    def _tms_legal(self, op_type: str, index: int, tms: Sequence[TM], attrs: dict) -> bool:
        if not any(isinstance(t, Transpose) for t in tms):
            return True
        if op_type == "matmul":
            return index == 1
        if op_type in TRANSPOSE_OK_INPUT0:
            return index == 0
        if op_type in BINARY_OPS:
            return index == 0 and not self.ctx.is_grayskull
        return False

    def _materialize(self, v: DVal) -> DVal:
        """Apply a value's pending TMs with a nop, so it can feed any input."""
        if not v.tms:
            return v
        key = ("nop", v.src, v.tms)
        if key not in self.cache:
            self.cache[key] = self.emit(f"{v.src}.tm_nop", "nop", [(v, ())], (v.z, v.r, v.c),
                                        pad=(v.pad_r, v.pad_c), layout=v.layout, spatial=v.spatial,
                                        tags=self.copy_tags(v))
        return self.cache[key]

    def _check_shapes(self, op: BudaOp) -> None:
        shapes = []
        for i, name in enumerate(op.inputs):
            s = self.bg.shape_of(name)
            try:
                shapes.append(tms_shape((s.z, s.rt, s.ct), op.input_tms.get(i, [])))
            except Exception as e:  # pragma: no cover - compiler bug
                raise self.err(f"internal: TMs {op.input_tms.get(i)} do not apply to {name}: {e}")
        out = (op.shape.z, op.shape.rt, op.shape.ct)
        ok = True
        if op.type == "matmul" and op.attrs.get("identity"):
            ok = shapes[1][0] in (1, out[0]) and shapes[1][2] == out[2]
        elif op.type == "matmul":
            a, b = shapes[0], shapes[1]
            ok = a[0] == b[0] == out[0] and a[1] == out[1] and b[2] == out[2] and a[2] == b[1]
            if len(shapes) > 2:
                ok = ok and shapes[2] == out
        elif op.type == "reduce":
            d = op.attrs["dim"]
            a = shapes[0]
            ok = {"r": a[0] == out[0] and out[1] == 1 and a[2] == out[2],
                  "c": a[0] == out[0] and out[2] == 1 and a[1] == out[1],
                  "z": a[0] == out[0] * op.attrs.get("z", 1) and a[1:] == out[1:]}[d]
        elif op.type == "splice":  # inputs add up along t
            ok = sum(s[0] for s in shapes) == out[0] and all(s[1:] == out[1:] for s in shapes)
        else:
            ok = all(s == out for s in shapes)
        if not ok:
            raise self.err(f"internal: lowered {op.type} '{op.name}' has inconsistent shapes: inputs (after TMs) "
                           f"{shapes}, output {out}")

    # --- dispatch ------------------------------------------------------------------------------------------
    def _get(self, name: str) -> DVal:
        """The lowered value of IR node ``name`` (resolving a pending TM chain)."""
        v = self.vals[name]
        if isinstance(v, Lazy):
            saved, self.node = self.node, self.g[v.name]
            try:
                v = self._resolve(v)
            finally:
                self.node = saved
            self.vals[name] = v
        return v

    def _op(self, node: Node):
        t = node.op_type
        if t in GATHER_OPS and len(node.operands) == 1:
            src = self.vals[node.operands[0]]
            attrs = _hashable(node.attrs)
            if isinstance(src, Lazy):
                return Lazy(src.base, src.base_shape, src.ops + ((t, attrs),), tuple(node.shape), node.name)
            return Lazy(src, tuple(self.g[node.operands[0]].shape), ((t, attrs),), tuple(node.shape), node.name)
        ops = [self.held_weight(o) if t == "conv2d" and i == 1 else self._get(o) for i, o in enumerate(node.operands)]
        if t in ("conv2d", "max_pool2d", "avg_pool2d"):
            return self._conv_or_pool(node, ops)
        if t in UNARY:
            return self._unary(node, ops[0])
        if t in BINARY:
            return self._binary(node, ops[0], ops[1])
        if t == "matmul":
            return self._matmul(node, [self._canonical(v) for v in ops])
        if t in ("reduce_sum", "reduce_avg", "reduce_max"):
            return self._reduce(node, ops[0])
        if t in GATHER_OPS:
            in_shapes = [tuple(self.g[o].shape) for o in node.operands]
            spliced = self.concat_splice(node, ops, in_shapes, tuple(node.shape))
            if spliced is not None:
                return spliced
            return self._gather_pickers(node, [self._canonical(v) for v in ops], in_shapes, tuple(node.shape))
        if t == "constant":
            return self._leaf_constant_op(node)
        raise self.err(f"'{t}' has no device implementation; run it on the CPU (cpu_fallback_ops) or "
                       f"rewrite the model without it")

    def _leaf_constant_op(self, node: Node) -> DVal:
        value = registry.evaluate("constant", [], node.attrs)
        dv = self._const(("constant_op", node.name), node.name, value)
        return dv

    # --- layouts --------------------------------------------------------------------------------------------
    def _canonical(self, v: DVal) -> DVal:
        """A flat NHWC value in canonical [H, W, C] form."""
        if v.layout != "flat":
            return v
        key = ("canon", v.src, v.tms)
        if key in self.cache:
            return self.cache[key]
        h, w = v.spatial
        if h == 1:
            out = replace(v, layout="canonical", spatial=None, z=1, r=w)
        elif w % TILE == 0:
            out = replace(v, tms=tuple(v.tms) + (VSlice(factor=h),), layout="canonical", spatial=None, z=h, r=w)
        else:
            wp = tiles(w) * TILE
            hw = np.arange(h * w)
            picked = self._row_pick(v, f"{v.src}.unflatten", out_rows=(hw // w) * wp + hw % w, in_rows=hw,
                                    values=np.ones(h * w, np.float32), out_r=h * wp, k_r=h * w)
            out = replace(picked, tms=(VSlice(factor=h),), z=h, r=w, layout="canonical", spatial=None, pad_r=ZERO)
        self.cache[key] = out
        return out

    def _flat(self, v: DVal, h: int, w: int) -> DVal:
        """A canonical NHWC [1, H, W, C] value (z=H) in flat form [1, H*W, C]."""
        if v.layout == "flat":
            return v
        key = ("flat", v.src, v.tms)
        if key in self.cache:
            return self.cache[key]
        if h == 1:
            out = replace(v, layout="flat", spatial=(1, w))
        elif w % TILE == 0:
            out = replace(v, tms=tuple(v.tms) + (VStack(factor=h),), z=1, r=h * w, layout="flat", spatial=(h, w))
        else:
            wp = tiles(w) * TILE
            hw = np.arange(h * w)
            src = replace(v, tms=tuple(v.tms) + (VStack(factor=h),), z=1, r=h * wp)
            out = self._row_pick(src, f"{v.src}.flatten", out_rows=hw, in_rows=(hw // w) * wp + hw % w,
                                 values=np.ones(h * w, np.float32), out_r=h * w, k_r=h * wp)
            out = replace(out, layout="flat", spatial=(h, w), pad_r=ZERO)
        self.cache[key] = out
        return out

    # --- pickers ---------------------------------------------------------------------------------------------
    def _row_pick(self, v: DVal, name: str, out_rows, in_rows, values, out_r: int, k_r: int,
                  key: Any = None, out_t=None, num_t: int = 1) -> DVal:
        """Sparse row picker: row i of output slice t = sum of values * in rows (see pickers for the encoding).

        ``v`` presents ``k_r`` rows in one slice (z == 1, e.g. after ``vstack``), or in ``num_t`` slices (entry i
        of output slice ``out_t[i]`` then reads input slice ``out_t[i]``); ``out_t`` gives each entry's
        output slice (``num_t`` slices of ``out_r`` rows). A copying picker of data that carries NaN or infinity
        copies them (:mod:`pybuda.passes.lower.specials`)."""
        if v.z not in (1, num_t):
            raise self.err(f"internal: row picker on a value with z={v.z} for {num_t} output slices")
        out_rt, k_rt = tiles(out_r), tiles(k_r)
        if tiles(v.r) != k_rt:
            raise self.err(f"internal: row picker expects {k_rt} row tiles, value has {tiles(v.r)}")
        pkey = ("picker", key) if key is not None else None
        if pkey is not None and pkey in self.cache:
            sp = self.cache[pkey]
        else:
            sp = pickers.build_sparse_picker(out_rows, in_rows, values, out_rt, k_rt, out_t, num_t)
            if pkey is not None:
                self.cache[pkey] = sp
        # An unkeyed picker gets constants of its own. (It used to be keyed by ``id(sp)``: once a picker was
        # freed, a later one of the same name could reuse its address and be handed the earlier one's index.)
        ckey = key if key is not None else ("unshared", next(self._unshared), name)
        tiles_q = self._const(("sparse_tiles", ckey), f"{name}.sparse", sp.tiles, {"sparse_tiles": True})
        index_q = self._const(("sparse_index", ckey), f"{name}.index", sp.index, {"df": "RawUInt32", "sparse_index": True})
        attrs = {"identity": True, "num_sparse_tiles": sp.num_sparse_tiles, "num_index_tiles": sp.num_index_tiles,
                 "indices_len": sp.indices_len, "act_t": v.z}
        # the index entries price each layout's non-zero strips (pybuda.perf.sparse, num_nz_strips)
        tags = {"picker": "sparse", "min_fidelity": "HiFi2", sparse_work.ENTRIES_TAG: sp.tile_pairs,
                sparse_work.DIGEST_TAG: sp.digest}

        def pick(data: DVal, op_name: str, op_tags: dict) -> DVal:
            return self.emit(op_name, "matmul", [(tiles_q, ()), (data, ()), (index_q, ())], (num_t, out_r, v.c),
                             attrs, pad=(ZERO, v.pad_c), tags=op_tags)

        if _copies(out_rows, values, out_t, out_r):
            tags[COPIES_INPUT] = 1
            if self.carries_nonfinite(v):
                return self.copy_nonfinite(v, name, pick, tags)
        return pick(v, name, tags)

    def _col_pick(self, v: DVal, name: str, sources: np.ndarray, key: Any = None) -> DVal:
        """Dense column picker: out col j = in col sources[j] (or zero when -1)."""
        p = pickers.column_picker(v.c, sources)
        q = self._const(("colpick", key if key is not None else (name, v.c, sources.tobytes())), f"{name}.colpick", p)
        extra = (Broadcast(dim="z", factor=v.z),) if v.z > 1 else ()

        def pick(data: DVal, op_name: str, op_tags: dict) -> DVal:
            return self.emit(op_name, "matmul", [(data, ()), (q, extra)], (v.z, v.r, len(sources)),
                             pad=(v.pad_r, ZERO), tags=op_tags)

        tags = {"picker": "column", "min_fidelity": "HiFi3", COPIES_INPUT: 0}
        if self.carries_nonfinite(v):
            return self.copy_nonfinite(v, name, pick, tags)
        return pick(v, name, tags)

    # --- outputs --------------------------------------------------------------------------------------------
    def _output(self, node: Node) -> None:
        v = self._canonical(self._get(node.operands[0]))
        consumers = sum(1 for op in self.bg.ops.values() if v.src in op.inputs)
        feeds_queue = any(q.producer == v.src for q in self.bg.queues.values())
        producer = self.bg.ops.get(v.src)
        # An untilizing op feeds only its output queue. The balancer keeps an untilizing matmul at
        # m_k == 1 (netlist rule untilize_output), but with the whole K block in L1 that does not always
        # fit (MobileNetV2's 1280x1000 classifier on Grayskull needs 512 KiB per core), and a z-reduce
        # cannot untilize at all, so those hand the job to a nop.
        awkward = producer is not None and (producer.type == "matmul" or producer.attrs.get("dim") == "z")
        if v.src in self.bg.queues or v.src in self.pending or v.tms or consumers or feeds_queue or awkward:
            v = self.emit(f"{node.name}.out_nop", "nop", [(v, ())], (v.z, v.r, v.c), pad=(v.pad_r, v.pad_c),
                          tags={"output_nop": True})
        src_shape = tuple(self.g[node.operands[0]].shape)
        tags = {"device_shape": src_shape, "batched": bool(node.tags.get("batched")),
                "host_tms": list(node.tags.get("host_tms", [])),
                "framework_shape": tuple(node.tags.get("framework_shape", node.shape)),
                WRITTEN_IN_PLACE: bool(node.tags.get(WRITTEN_IN_PLACE))}
        # What the queue's tile padding holds matters to a program that reads the queue on the device.
        tags[JUNK_PADDING] = bool((v.r % TILE and v.pad_r != ZERO) or (v.c % TILE and v.pad_c != ZERO))
        q = BudaQueue(node.name, "output", TileShape(1, v.z, tiles(v.r), tiles(v.c)), producer=v.src,
                      original_shape=tags["framework_shape"], tags=tags)
        self._output_vals[node.name] = v
        self.bg.add_queue(q)
        self.bg.output_order.append(node.name)
        if self.ctx.config.output_queues_on_host:
            self.bg.ops[v.src].untilize_output = True


def _copies(out_rows, values, out_t, out_r: int) -> bool:
    """Whether a row picker's entries copy: every value 1 and no output row written twice."""
    rows = np.asarray(out_rows, dtype=np.int64)
    if out_t is not None:
        rows = rows + np.asarray(out_t, dtype=np.int64) * out_r
    return bool(np.all(np.asarray(values) == 1)) and len(np.unique(rows)) == len(rows)
