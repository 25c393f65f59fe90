"""Shorter pipeline fill: t-stream the chains of an epoch whose first input takes long to get through.

An op with ``t == 1`` hands its whole output to its consumer at once, so a chain of such ops (a
layer norm's nine ops on single cores, say) adds every op's full time to the epoch's fill
(:mod:`pybuda.perf.fill`). Streamed in ``t`` slices, the same chain pipelines: each op adds a
``1/t`` of its time, and the fill of the chain shrinks to about its slowest op.

After a policy has chosen every op's model, :func:`stream_for_fill` tries, epoch by epoch, each
t-stream factor its ops can take: every op of the epoch that has a legal model with that factor on
the *same grid* takes the fastest one compatible with its (possibly new) producers and its consumers.
The epoch keeps the trial that costs the least by the whole cost
(:class:`~pybuda.balancer.wholecost.EpochAccumulator`: steady state, fill and switch). Grids do not
change, so the placement, the epochs and the binary cache stay as they were; an epoch gets slower
never, since its current models are one of the trials.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from pybuda.balancer import wholecost
from pybuda.balancer.legalizer import stream_compatible
from pybuda.balancer.types import OpModel

__all__ = ["stream_for_fill", "FILL_STREAM_ROUNDS"]

#: Trials per epoch: the first may re-stream every op, later ones only the ops still unstreamed (so
#: chains that cannot share one factor each get theirs).
FILL_STREAM_ROUNDS = 3


def stream_for_fill(ctx: Any, models: List[OpModel], epoch_of: Sequence[int]) -> List[OpModel]:
    """``models`` (one per op of ``ctx``, a policy context) with each epoch's ops re-streamed where that
    shortens the epoch (see the module docstring); ``epoch_of`` is each op's epoch."""
    members: Dict[int, List[int]] = {}
    for i, e in enumerate(epoch_of):
        members.setdefault(e, []).append(i)
    out = list(models)
    for ops in members.values():
        best_cost = _epoch_cost(ctx, ops, out)
        for round_ in range(FILL_STREAM_ROUNDS):
            best: Optional[List[OpModel]] = None
            for factor in _factors(ctx, ops, out):
                trial = _streamed(ctx, ops, out, factor, only_unstreamed=round_ > 0)
                if trial is None:
                    continue
                cost = _epoch_cost(ctx, ops, trial)
                if cost < best_cost * (1 - 1e-9):
                    best_cost, best = cost, trial
            if best is None:
                break
            out = best
    return out


def _same_grid(ctx: Any, i: int, current: OpModel) -> List[OpModel]:
    """Op ``i``'s legal models on ``current``'s grid."""
    return [m for m in ctx.cands[i] if m.grid_shape == current.grid_shape]


def _factors(ctx: Any, ops: Sequence[int], models: Sequence[OpModel]) -> List[Tuple[int, int]]:
    """The t-stream factors (other than none) some op of the epoch can take on its grid."""
    found = {m.t_stream_factor for i in ops for m in _same_grid(ctx, i, models[i])}
    found.discard((1, 1))
    return sorted(found)


def _streamed(ctx: Any, ops: Sequence[int], models: Sequence[OpModel], factor: Tuple[int, int],
              only_unstreamed: bool = False) -> Optional[List[OpModel]]:
    """``models`` with every op of ``ops`` that can on its grid, without becoming the epoch's slowest op
    or reading more from DRAM, streamed by ``factor`` (the fastest such model its producers connect
    to), or None when the result does not connect: an op left as it was
    that cannot read a newly streamed producer, or a consumer outside the epoch that cannot read a
    newly streamed op."""
    trial = list(models)
    slowest = max(models[i].cycles for i in ops)
    for i in ops:
        if only_unstreamed and models[i].t_stream_factor != (1, 1):
            options = []
        else:
            options = [m for m in _same_grid(ctx, i, models[i])
                       if m.t_stream_factor == factor and m.cycles <= slowest
                       and m.dram_bytes <= models[i].dram_bytes and ctx.compatible(i, m, trial)]
        if options:
            trial[i] = min(options, key=lambda m: (m.cycles, ctx.prologue(i, m)))
        elif not ctx.compatible(i, trial[i], trial):
            return None
    inside = set(ops)
    for i in ops:
        if trial[i] is models[i]:
            continue
        for c, k in ctx.consumers[i]:
            if c in inside:
                continue  # checked above, as a consumer joined
            op = ctx.ops[c]
            if not stream_compatible(trial[i], trial[c], op.type, k, op.input_tms.get(k, ()), bool(op.attrs.get("bias"))):
                return None
    return trial


def _epoch_cost(ctx: Any, ops: Sequence[int], models: Sequence[OpModel]) -> float:
    """Device cycles per microbatch of the epoch holding ``ops`` with ``models``."""
    acc = wholecost.EpochAccumulator(ctx.switch)
    for i in ops:
        acc.add(i, models[i], ctx.fill_edges(i, models[i], models.__getitem__, restream=True), ctx.prologue(i, models[i]))
    return acc.device_cycles(ctx.microbatch)
