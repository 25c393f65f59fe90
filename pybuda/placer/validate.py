"""Consistency checks of a balancer + placer result (used by tests; cheap enough for compile too).

:func:`validate_solution` returns a list of human-readable problems (empty when the result is sound):
op models that break the blocking rules (divisibility, Dest, L1, buffer/t, matmul K), placements that
overlap, leave the harvested grid, or put a consumer before its producer, epochs out of schedule
order, crossing edges without an epoch-to-epoch queue, and DRAM buffers that are misaligned, outside
their channel or overlapping while live at the same time.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from pybuda.balancer.edges import divisible_either_direction, stacks_ok, stream_compatible
from pybuda.balancer.legalizer import Legalizer
from pybuda.placer.dram import QUEUE_HEADER_BYTES

_MATMUL = frozenset({"matmul", "depthwise"})


def validate_op_model(op: Any, model: Any, legalizer: Legalizer) -> List[str]:
    """Blocking rules for one op model (spec §1.3, §2.2, §5.3)."""
    problems: List[str] = []
    f = legalizer.facts(op)
    device = legalizer.device
    fr, fc = model.t_stream_factor
    gr, gc = model.grid_shape
    name = op.name
    if f.rt % fr or f.ct % fc:
        problems.append(f"{name}: t-stream factors {model.t_stream_factor} do not divide {f.rt}x{f.ct}")
    if model.t != f.z * fr * fc:
        problems.append(f"{name}: t={model.t} but z·fr·fc = {f.z * fr * fc}")
    pr, pc = model.padding  # a padded op model covers its tensor plus the padding (OpModel.padding)
    if gr * model.mblock[0] * model.ublock[0] * fr != f.rt + pr:
        problems.append(f"{name}: rows {gr}·{model.mblock[0]}·{model.ublock[0]}·{fr} != rt {f.rt} + padding {pr}")
    if gc * model.mblock[1] * model.ublock[1] * fc != f.ct + pc:
        problems.append(f"{name}: cols {gc}·{model.mblock[1]}·{model.ublock[1]}·{fc} != ct {f.ct} + padding {pc}")
    if (pr or pc) and model.stream_factor > 1:
        problems.append(f"{name}: a padded op model cannot t-stream")
    if model.ublock[0] * model.ublock[1] > device.max_ublock_tiles(op.acc_df):
        problems.append(f"{name}: ublock {model.ublock} exceeds the Dest limit")
    if model.l1_bytes > device.l1_pybuda_budget_bytes:
        problems.append(f"{name}: L1 {model.l1_bytes} > budget {device.l1_pybuda_budget_bytes}")
    if not divisible_either_direction(model.buf_size_mb, model.t):
        problems.append(f"{name}: buf_size_mb {model.buf_size_mb} vs t {model.t} not divisible either way")
    if op.type in _MATMUL and model.ublock_order != "r":
        problems.append(f"{name}: matmul needs ublock_order r")
    if (op.type in _MATMUL or (op.type == "reduce" and f.reduce_dim in ("r", "c"))) and model.u_kt * model.m_k != f.k:
        problems.append(f"{name}: u_kt·m_k = {model.u_kt * model.m_k} != K {f.k}")
    rows, cols = device.grid_rows, device.grid_cols
    if not ((gr <= rows and gc <= cols) or (gc <= rows and gr <= cols)):
        problems.append(f"{name}: grid {model.grid_shape} larger than the {rows}x{cols} worker grid")
    return problems


def validate_solution(graph: Any, balancer_solution: Any, placer_solution: Any, device: Any, config: Any,
                      legalizer: Optional[Legalizer] = None) -> List[str]:
    """Every check of this module over a whole compile result; returns the problems found."""
    problems: List[str] = []
    legalizer = legalizer or Legalizer(graph, device, config)
    ops = list(graph.ops.values())
    placements = placer_solution.op_placements
    rows, cols = device.grid_rows, device.grid_cols
    # Op models.
    for op in ops:
        model = balancer_solution.op_models.get(op.name)
        if model is None:
            problems.append(f"{op.name}: no op model")
            continue
        problems += validate_op_model(op, model, legalizer)
        f = legalizer.facts(op)
        for i, shape, tms in f.stacked_inputs:
            if not stacks_ok(shape, tms, op.type, i, model, f.bias_attr):
                problems.append(f"{op.name}: input {i} stacks do not line up with the op's blocks")
    # Each op placed once, epochs list the ops in schedule order.
    listed = [name for e in placer_solution.epochs for name in e.ops]
    if listed != [op.name for op in ops]:
        problems.append("epochs do not list every op exactly once in schedule order")
    for i, e in enumerate(placer_solution.epochs):
        if e.global_epoch != i:
            problems.append(f"epoch {i} has global_epoch {e.global_epoch}")
        if i and (e.temporal_epoch, e.spatial_epoch) <= (placer_solution.epochs[i - 1].temporal_epoch,
                                                         placer_solution.epochs[i - 1].spatial_epoch):
            problems.append(f"epoch {i} is not after epoch {i - 1} in (temporal, chip) order")
        if len({graph.ops[n].epoch_type for n in e.ops}) > 1:
            problems.append(f"epoch {i} mixes epoch types")
    # Rectangles.
    occupied: Dict[int, Dict[Tuple[int, int], str]] = {}
    for op in ops:
        p = placements.get(op.name)
        if p is None:
            problems.append(f"{op.name}: not placed")
            continue
        model = balancer_solution.op_models.get(op.name)
        if model is not None and tuple(p.grid_size) != tuple(model.grid_shape):
            problems.append(f"{op.name}: placed grid {p.grid_size} != op model grid {model.grid_shape}")
        if op.name not in placer_solution.epochs[p.global_epoch].ops:
            problems.append(f"{op.name}: not listed in its epoch {p.global_epoch}")
        if placer_solution.epochs[p.global_epoch].chip_id != p.chip_id:
            problems.append(f"{op.name}: chip {p.chip_id} differs from its epoch's chip")
        cells = occupied.setdefault(p.global_epoch, {})
        for r, c in p.cores():
            if not (0 <= r < rows and 0 <= c < cols):
                problems.append(f"{op.name}: core ({r}, {c}) outside the {rows}x{cols} grid")
            elif (r, c) in cells:
                problems.append(f"{op.name}: core ({r}, {c}) of epoch {p.global_epoch} already used by {cells[(r, c)]}")
            else:
                cells[(r, c)] = op.name
    # Edges: order, e2e queues, t-stream compatibility.
    for op in ops:
        cp = placements.get(op.name)
        for k, name in enumerate(op.inputs):
            pp = placements.get(name)
            if pp is None or cp is None:
                continue
            if cp.global_epoch < pp.global_epoch:
                problems.append(f"{op.name}: consumer in epoch {cp.global_epoch} before producer {name} "
                                f"({pp.global_epoch})")
            src = placer_solution.input_source(op.name, name)
            if cp.global_epoch != pp.global_epoch:
                q = placer_solution.e2e_queues.get(src)
                if q is None or q.producer != name or op.name not in q.consumers:
                    problems.append(f"{op.name}: input {name} crosses epochs without an e2e queue")
            elif src != name:
                problems.append(f"{op.name}: same-epoch input {name} routed through queue {src}")
            pm, cm = balancer_solution.op_models.get(name), balancer_solution.op_models.get(op.name)
            if pm is not None and cm is not None and not stream_compatible(
                    pm, cm, op.type, k, op.input_tms.get(k, ()), bool(op.attrs.get("bias"))):
                problems.append(f"{op.name}: input {k} from {name} is not t-stream compatible")
    problems += validate_queues(graph, placer_solution, device)
    return problems


def validate_queues(graph: Any, placer_solution: Any, device: Any) -> List[str]:
    """Queue placement checks: every queue placed, r·c buffers, sizes, alignment, channel bounds and no
    overlap between buffers that are live at the same time."""
    problems: List[str] = []
    arch = str(getattr(getattr(device, "arch", None), "value", "")).lower()
    align = 64 if arch.startswith("blackhole") else 32
    sizes = {ch.index: ch.size_bytes for ch in device.dram_channels}
    for name in list(graph.queues) + list(placer_solution.epoch_to_epoch_queues):
        if name not in placer_solution.queue_placements:
            problems.append(f"queue {name}: not placed")
    spans: Dict[Tuple[int, int], List[Tuple[int, int, Optional[Tuple[int, int]], str]]] = {}
    for q in placer_solution.queue_placements.values():
        n = q.grid_size[0] * q.grid_size[1]
        locs = q.dram if q.loc == "dram" else q.host
        if len(locs) != n:
            problems.append(f"queue {q.queue_name}: {len(locs)} locations for {n} buffers")
        if q.buffer_size_bytes != QUEUE_HEADER_BYTES + q.entries * q.entry_size_bytes:
            problems.append(f"queue {q.queue_name}: buffer size is not 32 + entries·entry_size")
        if q.loc != "dram":
            continue
        for ch, addr in q.dram:
            if ch not in sizes:
                problems.append(f"queue {q.queue_name}: unknown channel {ch}")
                continue
            if addr % align:
                problems.append(f"queue {q.queue_name}: address {addr:#x} not {align}-byte aligned")
            if addr + q.buffer_size_bytes > sizes[ch]:
                problems.append(f"queue {q.queue_name}: buffer ends beyond channel {ch}")
            spans.setdefault((q.chip_id, ch), []).append((addr, addr + q.buffer_size_bytes, q.lifetime, q.queue_name))
    for (chip, ch), items in spans.items():
        problems += _overlaps(chip, ch, items)
    return problems


def _overlaps(chip: int, ch: int, items: List[Tuple[int, int, Optional[Tuple[int, int]], str]]) -> List[str]:
    """Buffers of one channel that overlap in address while both live: statics (live throughout) by an
    address sweep, dynamic buffers against statics by bisection and against each other by a sweep over
    time (only a few dynamic buffers are live at once)."""
    from bisect import bisect_left

    problems: List[str] = []
    where = f"chip {chip} channel {ch}"
    statics = sorted((a0, a1, name) for a0, a1, life, name in items if life is None)
    max_end, max_name = -1, ""
    for a0, a1, name in statics:
        if a0 < max_end:
            problems.append(f"{where}: {max_name} and {name} overlap while both live")
        if a1 > max_end:
            max_end, max_name = a1, name
    starts = [a0 for a0, _, _ in statics]
    dynamic = sorted(((life, a0, a1, name) for a0, a1, life, name in items if life is not None))
    live: List[Tuple[Tuple[int, int], int, int, str]] = []
    for life, a0, a1, name in dynamic:
        k = bisect_left(starts, a1) - 1
        if k >= 0 and statics[k][1] > a0:
            problems.append(f"{where}: {statics[k][2]} and {name} overlap while both live")
        live = [x for x in live if x[0][1] >= life[0]]
        for _, b0, b1, other in live:
            if a0 < b1 and b0 < a1:
                problems.append(f"{where}: {other} and {name} overlap while both live")
        live.append((life, a0, a1, name))
    return problems
