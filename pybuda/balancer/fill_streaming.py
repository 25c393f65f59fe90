"""Shorter pipeline fill: t-stream the chains of an epoch whose first input takes long to get through.

An op with ``t == 1`` hands its whole output to its consumer at once, so a chain of such ops (a
layer norm's nine ops on single cores, say) adds every op's full time to the epoch's fill
(:mod:`pybuda.perf.fill`). Streamed in ``t`` slices, the same chain pipelines: each op adds a
``1/t`` of its time, and the fill of the chain shrinks to about its slowest op.

After a policy has chosen every op's model, :func:`stream_for_fill` tries, epoch by epoch, each
t-stream factor its ops can take: every op of the epoch that has a legal model with that factor on
the *same grid* takes the fastest one compatible with its (possibly new) producers and its consumers.
The epoch keeps the trial that costs the least by the whole cost
(:class:`~pybuda.balancer.wholecost.EpochAccumulator`: steady state, fill with the exact rule, switch,
and the epoch's reads of earlier epochs' queues). Grids do not change, so the placement, the epochs and
the binary cache stay as they were; an epoch never gets slower by this measure, since its current
models are one of the trials. NLP keeps the result only if the whole placement's cost agrees.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from pybuda.balancer import wholecost
from pybuda.balancer.edges import stream_compatible
from pybuda.balancer.types import OpModel

__all__ = ["stream_for_fill", "FILL_STREAM_ROUNDS"]

#: Trials per epoch: the first may re-stream every op, later ones only the ops still unstreamed (so
#: chains that cannot share one factor each get theirs).
FILL_STREAM_ROUNDS = 2


def stream_for_fill(ctx: Any, models: List[OpModel], epoch_of: Sequence[int]) -> List[OpModel]:
    """``models`` (one per op of ``ctx``, a policy context) with each epoch's ops re-streamed where that
    shortens the epoch (see the module docstring); ``epoch_of`` is each op's epoch. Epochs alike in
    what the choice reads (a transformer's layers) are worked out once."""
    members: Dict[int, List[int]] = {}
    for i, e in enumerate(epoch_of):
        members.setdefault(e, []).append(i)
    out = list(models)
    grids: Dict[Tuple[int, Tuple[int, int]], List[OpModel]] = {}
    memo: Dict[Tuple[Any, ...], List[OpModel]] = {}
    for ops in members.values():
        key = _epoch_key(ctx, ops, out)
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = _stream_epoch(ctx, ops, out, grids)
        for i, model in zip(ops, hit):
            out[i] = model
    return out


class _Overlay:
    """``base`` with the epoch's trial models in ``local`` on top (indexable like the model list)."""

    __slots__ = ("base", "local")

    def __init__(self, base: Sequence[OpModel], local: Dict[int, OpModel]):
        self.base, self.local = base, local

    def __getitem__(self, i: int) -> OpModel:
        return self.local.get(i) or self.base[i]


def _epoch_key(ctx: Any, ops: Sequence[int], models: Sequence[OpModel]) -> Tuple[Any, ...]:
    """What the epoch's choice depends on: per op its candidates and model, its producers (as offsets
    inside the epoch, or the model outside it) and its consumers outside the epoch."""
    first = ops[0]
    inside = set(ops)
    key = []
    for i in ops:
        producers = tuple((i - p, k) if p in inside else (-1, k, id(models[p])) for p, k, _ in ctx.producers[i])
        outside = tuple((id(models[c]), k) for c, k in ctx.consumers[i] if c not in inside)
        key.append((id(ctx.cands[i]), id(models[i]), i - first, producers, outside))
    return tuple(key)


def _stream_epoch(ctx: Any, ops: Sequence[int], models: Sequence[OpModel],
                  grids: Dict[Tuple[int, Tuple[int, int]], List[OpModel]]) -> List[OpModel]:
    """The models of ``ops`` after the trials (see the module docstring)."""
    local: Dict[int, OpModel] = {}
    best_cost = _epoch_cost(ctx, ops, _Overlay(models, local))
    for round_ in range(FILL_STREAM_ROUNDS):
        best: Optional[Dict[int, OpModel]] = None
        current = _Overlay(models, local)
        for factor in _factors(ctx, ops, current, grids):
            trial = _streamed(ctx, ops, current, factor, grids, only_unstreamed=round_ > 0)
            if trial is None:
                continue
            cost = _epoch_cost(ctx, ops, _Overlay(models, trial))
            if cost < best_cost * (1 - 1e-9):
                best_cost, best = cost, trial
        if best is None:
            break
        local = best
    return [local.get(i) or models[i] for i in ops]


def _same_grid(ctx: Any, i: int, current: OpModel, grids: Dict[Tuple[int, Tuple[int, int]], List[OpModel]]
               ) -> List[OpModel]:
    """Op ``i``'s legal models on ``current``'s grid (cached per candidate list and grid)."""
    key = (id(ctx.cands[i]), current.grid_shape)
    hit = grids.get(key)
    if hit is None:
        hit = grids[key] = [m for m in ctx.cands[i] if m.grid_shape == current.grid_shape]
    return hit


def _factors(ctx: Any, ops: Sequence[int], models: _Overlay,
             grids: Dict[Tuple[int, Tuple[int, int]], List[OpModel]]) -> List[Tuple[int, int]]:
    """The t-stream factors (other than none) some op of the epoch can take on its grid."""
    found = {m.t_stream_factor for i in ops for m in _same_grid(ctx, i, models[i], grids)}
    found.discard((1, 1))
    return sorted(found)


def _streamed(ctx: Any, ops: Sequence[int], models: _Overlay, factor: Tuple[int, int],
              grids: Dict[Tuple[int, Tuple[int, int]], List[OpModel]],
              only_unstreamed: bool = False) -> Optional[Dict[int, OpModel]]:
    """The epoch's models with every op of ``ops`` that can on its grid, without becoming the epoch's
    slowest op or reading more from DRAM, streamed by ``factor`` (the fastest such model its producers
    connect to), or None when the result does not connect: an op left as it was that cannot read a
    newly streamed producer, or a consumer outside the epoch that cannot read a newly streamed op.
    With ``only_unstreamed`` only ops not streamed yet may change."""
    local = dict(models.local)
    trial = _Overlay(models.base, local)
    slowest = max(models[i].cycles for i in ops)
    for i in ops:
        now = models[i]
        options = []
        if not (only_unstreamed and now.t_stream_factor != (1, 1)):
            options = [m for m in _same_grid(ctx, i, now, grids)
                       if m.t_stream_factor == factor and m.cycles <= slowest
                       and m.dram_bytes <= now.dram_bytes and ctx.compatible(i, m, trial)]
        if options:
            local[i] = min(options, key=lambda m: (m.cycles, ctx.prologue(i, m)))
        elif not ctx.compatible(i, now, trial):
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
    return local


def _epoch_cost(ctx: Any, ops: Sequence[int], models: _Overlay) -> float:
    """Device cycles per microbatch of the epoch holding ``ops`` with ``models``."""
    acc = wholecost.EpochAccumulator(ctx.switch)
    first = ops[0]
    for i in ops:
        m = models[i]
        acc.add(i, m, ctx.fill_edges(i, m, models.__getitem__), ctx.prologue(i, m))
        for p, k in ctx.input_edges[i]:
            if p < first:  # an epoch-to-epoch queue: a streamed reader may fetch it more often
                acc.dram += ctx.read_bytes(i, k, m)
    return acc.device_cycles(ctx.microbatch)
