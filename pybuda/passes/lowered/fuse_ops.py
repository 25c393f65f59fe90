"""Automatic op fusion (``enable_auto_fusing``): trees of small elementwise ops become one ``fused_op``.

A group grows backwards from an op through producers that (a) are elementwise/SFPU ops of the same
output shape and data formats, (b) are read only by that group, (c) carry no transpose on their inputs
and no attribute a scheduled op may not have, and (d) are not named in ``op_names_dont_fuse``. Groups
of one op are left alone. The fused op keeps the name of the group's output op, takes every input from
outside the group as one fused-op input (with that edge's TMs on the parent's ``input_N_tms``), and
gets a schedule (netlist spec §1.4): the sub-ops in order, reading ``inputK``/``intermedK``, each
intermediate written once, read once and popped by its reader, the last op writing ``output``.
An input produced by a tile-broadcast matmul (``E @ x`` / ``x @ E``, which copies row/column 0 through
each tile) that only this group reads is taken from that matmul's own input instead, with the netlist's
``tile_broadcast: r|c`` TM on the scheduled op (a TM allowed only inside fused ops) - the matmul goes away;
for this a single op also becomes a fused op. Identical schedules share one ``fused_ops`` id. Sub-op ``mblock``/``ublock`` are the parent's, filled in
by the netlist generator from the balancer's choice.
"""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Set

from pybuda.netlist.device_ops import ops_where
from pybuda.netlist.tms import Transpose, as_tms
from pybuda.ir.lowered import BudaGraph, BudaOp
from pybuda.passes.context import CompileContext
from pybuda.passes.lowered.overrides import pinned_ops

#: Netlist op types a group may contain (the ``fusible`` flag of their device-op rows).
FUSIBLE = ops_where("fusible")
#: Attributes a scheduled op may carry (netlist parser), restricted to what these types use.
SUB_OP_ATTRS = frozenset({"relu_en", "relu_threshold", "relu_mode", "slope", "exp"})
MAX_SUB_OPS = 12
MAX_INPUTS = 8


def fuse_elementwise_ops(bg: BudaGraph, ctx: CompileContext) -> BudaGraph:
    """Fuse elementwise trees into fused ops (in place) when ``enable_auto_fusing``; returns ``bg``."""
    if not ctx.config.enable_auto_fusing:
        return bg
    dont = set(ctx.config.op_names_dont_fuse)
    # ops named by a break or an override may be a fused op's output (it keeps their name), never absorbed
    pinned = pinned_ops(ctx)
    readers = bg.reader_map()
    order = list(bg.ops)
    position = {n: i for i, n in enumerate(order)}
    taken: Set[str] = set()
    groups: List[List[str]] = []
    for name in reversed(order):
        if name in taken or not _fusible(bg.ops[name], dont):
            continue
        root = bg.ops[name]
        group = [name]
        frontier = [name]
        while frontier:
            cur = bg.ops[frontier.pop()]
            for inp in cur.inputs:
                p = bg.ops.get(inp)
                if p is None or inp in taken or inp in group or inp in pinned or not _fusible(p, dont):
                    continue
                if readers.get(inp, []) != [cur.name] or p.untilize_output:
                    continue
                if not _same_kind(p, root) or len(group) >= MAX_SUB_OPS:
                    continue
                if _external_inputs(bg, group + [inp]) > MAX_INPUTS:
                    continue
                group.append(inp)
                frontier.append(inp)
        if len(group) > 1 or _tile_broadcast_inputs(bg, group, readers):
            group.sort(key=lambda n: position[n])
            groups.append(group)
            taken.update(group)
    ids: Dict[str, int] = {}
    for group in groups:
        _fuse(bg, group, ids, readers)
    # Constants only the absorbed tile-broadcast matmuls read are gone with them.
    read = {i for op in bg.ops.values() for i in op.inputs}
    for name in [q.name for q in bg.queues.values() if q.kind in ("parameter", "constant") and q.name not in read]:
        del bg.queues[name]
        bg.tensors.pop(name, None)
    ctx.notes["fused_ops"] = len(groups)
    ctx.notes["fused_sub_ops"] = sum(len(g) for g in groups)
    return bg



def _tile_broadcast_source(bg: BudaGraph, name: str, reader: str, readers) -> Optional[BudaOp]:
    """The tile-broadcast matmul producing ``name`` if only ``reader`` reads it, else None."""
    op = bg.ops.get(name)
    if op is None or op.tags.get("picker") != "tile_broadcast" or readers.get(name, []) != [reader]:
        return None
    # Its data input's TMs move onto the fused op's input, where a transpose is not allowed (tm_allowed: a
    # transpose on matmul input 1, the channels-last turn of a per-channel vector, stays with the matmul).
    if any(isinstance(tm, Transpose) for tm in as_tms(op.input_tms.get(int(op.tags["data_input"]), []))):
        return None
    return op


def _tile_broadcast_inputs(bg: BudaGraph, group: List[str], readers) -> bool:
    return any(_tile_broadcast_source(bg, i, n, readers) is not None for n in group for i in bg.ops[n].inputs)


def _fusible(op: BudaOp, dont: Set[str]) -> bool:
    if op.type not in FUSIBLE or op.name in dont or op.tags.get("ir_node") in dont or op.tags.get("buffering_nop"):
        return False
    if any(k not in SUB_OP_ATTRS for k in op.attrs):
        return False
    if op.attrs.get("relu_en") and float(op.attrs.get("relu_threshold", 0.0)) < 0:
        return False
    return not any(isinstance(tm, Transpose) for tms in op.input_tms.values() for tm in as_tms(tms))


def _same_kind(a: BudaOp, b: BudaOp) -> bool:
    return (a.shape == b.shape and a.out_df == b.out_df and a.intermed_df == b.intermed_df and a.acc_df == b.acc_df
            and a.math_fidelity == b.math_fidelity and a.epoch_type == b.epoch_type)


def _external_inputs(bg: BudaGraph, group: List[str]) -> int:
    members = set(group)
    return sum(1 for n in group for i in bg.ops[n].inputs if i not in members)


def _fuse(bg: BudaGraph, group: List[str], ids: Dict[str, int], readers) -> None:
    members = set(group)
    absorbed: List[str] = []
    root = bg.ops[group[-1]]
    inputs: List[str] = []
    input_tms: Dict[int, list] = {}
    in_df = []
    sub_ops = []
    buffer_of: Dict[str, str] = {}
    free: List[int] = []
    next_id = 0
    peak = 0
    for name in group:
        op = bg.ops[name]
        refs: List[str] = []
        pops: List[str] = []
        sub_tms: Dict[int, list] = {}
        for k, src in enumerate(op.inputs):
            if src in members:
                buf = buffer_of[src]
                refs.append(buf)
                pops.append(buf)
            else:
                idx = len(inputs)
                edge = list(op.input_tms.get(k, []))
                df = op.in_df[k] if op.in_df else None
                tb = _tile_broadcast_source(bg, src, op.name, readers)
                if tb is not None:
                    d = tb.tags["data_input"]
                    edge = list(tb.input_tms.get(d, [])) + edge
                    df = tb.in_df[d] if tb.in_df else None
                    sub_tms[k] = [{"tile_broadcast": tb.tags["tile_broadcast_dim"]}]
                    absorbed.append(tb.name)
                    src = tb.inputs[d]
                inputs.append(src)
                if edge:
                    input_tms[idx] = edge
                if df is not None:
                    in_df.append(df)
                refs.append(f"input{idx}")
        if name == root.name:
            out = "output"
        else:
            if free:
                slot = min(free)
                free.remove(slot)
            else:
                slot = next_id
                next_id += 1
            out = f"intermed{slot}"
            buffer_of[name] = out
        for buf in pops:  # each intermediate is read once: free after this op (never its own output)
            free.append(int(buf[len("intermed"):]))
        peak = max(peak, next_id)
        sub = {"type": op.type, "inputs": refs, "output": out}
        if sub_tms:
            sub["input_tms"] = sub_tms
        if pops:
            sub["pop"] = sorted(set(pops))
        if op.attrs:
            sub["attributes"] = dict(op.attrs)
        sub_ops.append((name, sub))
    key = json.dumps([[s["type"], s["inputs"], s["output"], s.get("pop"), s.get("attributes"), s.get("input_tms")]
                      for _, s in sub_ops], sort_keys=True, default=str)
    if key not in ids:
        fid = len(bg.fused_ops)
        while fid in bg.fused_ops:
            fid += 1
        ids[key] = fid
        bg.fused_ops[fid] = {"inputs": len(inputs), "intermediates": peak,
                             "schedules": [[{f"op{i}_{s['type']}": s} for i, (_, s) in enumerate(sub_ops)]]}
    fid = ids[key]
    fused = BudaOp(root.name, "fused_op", inputs, root.shape, attrs={"fused_op_id": fid}, input_tms=input_tms,
                   in_df=in_df, out_df=root.out_df, intermed_df=root.intermed_df, acc_df=root.acc_df,
                   math_fidelity=root.math_fidelity, untilize_output=root.untilize_output,
                   epoch_type=root.epoch_type,
                   tags={**root.tags, "fused_ops": list(group),
                         "sub_op_names": {f"op{i}_{s['type']}": n for i, (n, s) in enumerate(sub_ops)}})
    # Rebuild the op table in order: the fused op sits where its root was.
    new_ops: Dict[str, BudaOp] = {}
    for name, op in bg.ops.items():
        if name == root.name:
            new_ops[name] = fused
        elif name not in members and name not in absorbed:
            new_ops[name] = op
    bg.ops = new_ops
