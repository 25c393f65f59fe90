"""The Ribbon balancer policy (TT-Buda's Ribbon2): choose every op's model one epoch at a time.

Epoch by epoch: for each ribbon size R (the grid row count the epoch's ops share), and
for "no ribbon", build the epoch from the current op on (each op: its smallest model on the ribbon
meeting the global target, placed until the next one does not fit), then repeatedly bump the slowest op to its next faster model
while the epoch still fits and its utilisation improves (at most 10 times). Utilisation is the
epoch's useful work — matmul theoretical cycles × cores (spec §4.4), plus the minimum core-cycles of
non-matmul ops so epochs without matmuls compare — divided by its slowest op (plus the amortised
epoch overhead). Ribbons are compared by the epoch's time plus an estimate of the rest (the
remaining ops' cores at the target, packed as densely as NLP's estimate), so a ribbon that leaves
more work behind does not win on a locally good ratio. The best ribbon's epoch is committed; the op
after it becomes an epoch break. As in TT-Buda's Ribbon, a sparse matmul and the dense matmul (or reduce)
of the same framework op that alone reads it go into one epoch together
(:func:`pybuda.balancer.policies.sparse_dense_partner`): when the pair does not fit after the ops already
placed, the epoch ends before the sparse matmul, so a convolution's im2col output never goes through a
DRAM queue.

The shared context, the global target and the target-ranked model lists come from
:mod:`pybuda.balancer.policies`, which dispatches here for ``balancer_policy="Ribbon"`` (and "CNN").
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from pybuda.perf import cost
from pybuda.balancer.edges import stream_compatible
from pybuda.balancer.packing import GridPacker
from pybuda.balancer.policies import _MATMUL, _Context, _score, _Targets, global_target
from pybuda.balancer.types import OpModel

RIBBON_MAX_BUMPS = 10  # PYBUDA_RIBBON2_CONSERVATIVE_OPTIMIZATION_ITERATIONS default (spec §4.4)


def run_ribbon(ctx: _Context) -> Tuple[int, List[str]]:
    """Choose every op's model (into ``ctx.chosen``) one epoch at a time; ``(global target, epoch breaks)``."""
    targets = _Targets(ctx)
    target, _ = global_target(ctx, targets)
    n = len(ctx.ops)
    work = []
    mm_work: Dict[int, float] = {}
    for i, op in enumerate(ctx.ops):
        if op.type in _MATMUL:
            key = id(ctx.cands[i])
            if key not in mm_work:
                mm_work[key] = float(min(cost.matmul_ideal_cycles(op, m, ctx.device) * m.cores for m in ctx.cands[i]))
            work.append(mm_work[key])
        else:
            work.append(targets.min_work(i))
    # Cost of the ops not yet placed, from NLP's picks at the target: their cores, packed as densely as
    # NLP's own estimate packs them, each epoch taking that estimate's average slowest op.
    picks = [targets.pick(i, target) for i in range(n)]
    est_time, est_epochs = _score(ctx, picks)
    chip_cores = ctx.rows * ctx.cols
    density = sum(m.cores for m in picks) / max(1, est_epochs * chip_cores)
    per_epoch = est_time / max(1, est_epochs)
    suffix = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + picks[i].cores

    def rest(end: int) -> float:
        return per_epoch * suffix[end] / max(1e-9, density * chip_cores)

    breaks: List[str] = []
    start = 0
    ribbons: List[Optional[int]] = [None]  # "no ribbon": NLP's choice for every op
    ribbons += sorted({m.grid_shape[0] for c in ctx.cands for m in c if m.grid_shape[0] <= ctx.rows})
    while start < n:
        best: Optional[Tuple[float, int, List[OpModel]]] = None
        for ribbon in ribbons:
            end, models = _ribbon_epoch(ctx, targets, start, ribbon, target)
            models = _ribbon_bump(ctx, targets, start, models, ribbon, work,
                                  lambda ms: ctx.epoch_cycles(ms) + ctx.epoch_overhead(sum(m.cores for m in ms))
                                  + rest(start + len(ms)))
            end = start + len(models)  # the bump may have left trailing ops to the next epoch
            total = ctx.epoch_cycles(models) + ctx.epoch_overhead(sum(m.cores for m in models)) + rest(end)
            if best is None or total < best[0] * (1 - 1e-9):
                best = (total, end, models)
        assert best is not None
        _, end, models = best
        for k, m in enumerate(models):
            ctx.chosen[start + k] = m
        if end < n and not ctx.breaks[end]:
            breaks.append(ctx.ops[end].name)
        start = end
    return target, breaks


def _epoch_value(ctx: _Context, start: int, models: List[OpModel], work: List[float]) -> float:
    used = sum(m.cores for m in models)
    return sum(work[start:start + len(models)]) / (ctx.epoch_cycles(models) + ctx.epoch_overhead(used))


def _ribbon_epoch(ctx: _Context, targets: _Targets, start: int, ribbon: Optional[int], target: int
                  ) -> Tuple[int, List[OpModel]]:
    """Fill one epoch from op ``start``: each op's smallest model on the ribbon meeting the target
    (``ribbon=None``: the smallest meeting it, any rows), placed with the placer's packer until one
    does not fit or an epoch break comes."""
    packer = GridPacker(ctx.rows, ctx.cols, ctx.placements)
    chosen = ctx.chosen  # committed epochs' models stay visible for compatibility checks
    i = start
    n = len(ctx.ops)
    dram = 0.0

    def pick(k: int) -> OpModel:
        ranked = targets.ranked(k, target, None) if ribbon is None else targets.ribbon_ranked(k, target, ribbon)
        return ctx.select(k, ranked, chosen)

    while i < n:
        if i > start and ctx.breaks[i]:
            break
        model = pick(i)
        # The DRAM channels are shared like the cores: an op whose streaming would push the epoch's
        # channels past the target starts the next epoch instead.
        dram += model.dram_bytes
        if i > start and dram / ctx.bandwidth.dram_total > max(target, model.cycles):
            break
        start_pos, transpose = ctx.place_args[i]
        before = (packer.occupied, packer.free)
        if packer.place(model.grid_shape[0], model.grid_shape[1], start=start_pos, transpose=transpose) is None:
            if i == start:
                chosen[i] = model  # does not fit an empty grid with this start; the placer reports it
                i += 1
            break
        chosen[i] = model
        j = ctx.partner[i]
        if j is not None and not ctx.breaks[j]:
            # A sparse matmul and its dense partner go into one epoch together (sparse_dense_partner): if
            # the partner does not fit after it, the epoch ends before the sparse matmul — unless the pair
            # does not fit even an empty chip, in which case the sparse matmul stays here alone.
            dense = pick(j)
            jpos, jtr = ctx.place_args[j]
            if packer.place(dense.grid_shape[0], dense.grid_shape[1], start=jpos, transpose=jtr) is not None:
                dram += dense.dram_bytes
                chosen[j] = dense
                i = j + 1
                continue
            if i > start and _pair_fits_empty(ctx, i, model, j, dense):
                packer.occupied, packer.free = before
                chosen[i] = None
                break
        i += 1
    # Read the models back: a compatibility repair may have replaced a producer in this epoch.
    models = [m for m in chosen[start:i] if m is not None]
    for k in range(start, i):
        chosen[k] = None
    return i, models


def _pair_fits_empty(ctx: _Context, i: int, model: OpModel, j: int, dense: OpModel) -> bool:
    """Whether op ``i`` with ``model`` and its partner ``j`` with ``dense`` fit one empty chip together."""
    packer = GridPacker(ctx.rows, ctx.cols, ctx.placements)
    for k, m in ((i, model), (j, dense)):
        start_pos, transpose = ctx.place_args[k]
        if packer.place(m.grid_shape[0], m.grid_shape[1], start=start_pos, transpose=transpose) is None:
            return False
    return True


def _repack(ctx: _Context, start: int, models: List[OpModel]) -> bool:
    packer = GridPacker(ctx.rows, ctx.cols, ctx.placements)
    for k, m in enumerate(models):
        start_pos, transpose = ctx.place_args[start + k]
        if packer.place(m.grid_shape[0], m.grid_shape[1], start=start_pos, transpose=transpose) is None:
            return False
    return True


def _trim_to_fit(ctx: _Context, start: int, models: List[OpModel], keep: int) -> Optional[List[OpModel]]:
    """The longest prefix of ``models`` that still holds op ``keep`` and packs on one chip, or None.
    Stream compatibility is unaffected: dropping consumers only turns edges into epoch-to-epoch queues."""
    for length in range(len(models) - 1, keep, -1):
        if ctx.partner[start + length - 1] == start + length:
            continue  # never between a sparse matmul and its dense partner (sparse_dense_partner)
        if any(m.stream_factor > 1 and any(ci >= start + length for ci, _kk in ctx.consumers[start + j])
               for j, m in enumerate(models[:length])):
            continue  # a t-streamed producer cannot feed a queue
        if _repack(ctx, start, models[:length]):
            return models[:length]
    return None


def _ribbon_bump(ctx: _Context, targets: _Targets, start: int, models: List[OpModel], ribbon: Optional[int],
                 work: List[float], score: Optional[Any] = None) -> List[OpModel]:
    """Give the slowest op its next faster model while the epoch still fits and gets better.

    When the faster model does not fit a full epoch, the epoch may instead end earlier: the trailing
    ops (after the slowest) move to the next epoch to make room, accepted only if ``score`` (the
    epoch's time plus the estimated time of everything after it; lower is better) improves. Without
    this, a large op packed early with a small grid (a convolution's im2col picker on 4 of 72 cores)
    stayed the bottleneck of a full epoch of small ops that could have run in the next one."""
    models = list(models)
    value = _epoch_value(ctx, start, models, work)
    for _ in range(RIBBON_MAX_BUMPS):
        k = max(range(len(models)), key=lambda j: models[j].cycles)
        i = start + k
        current = models[k]
        faster = [m for m in targets.by_pref(i) if m.cycles < current.cycles]
        if not faster:
            break
        min_cores = min(m.cores for m in faster)
        pool = [m for m in faster if m.cores == min_cores]
        pool.sort(key=lambda m: (m.grid_shape[0] != ribbon, m.stream_factor, m.cycles))
        trial_chosen = list(ctx.chosen)
        for j, m in enumerate(models):
            trial_chosen[start + j] = m
        accepted = False
        for cand in pool:
            trial_chosen[i] = cand
            if not ctx.compatible(i, cand, trial_chosen):
                continue
            if any(ci < start + len(models) and not stream_compatible(
                    cand, trial_chosen[ci], ctx.ops[ci].type, kk, ctx.ops[ci].input_tms.get(kk, ()),
                    bool(ctx.ops[ci].attrs.get("bias")))
                   for ci, kk in ctx.consumers[i] if trial_chosen[ci] is not None):
                continue
            trial = models[:k] + [cand] + models[k + 1:]
            if not _repack(ctx, start, trial):
                trimmed = _trim_to_fit(ctx, start, trial, k) if score is not None else None
                if trimmed is not None and score(trimmed) < score(models) * (1 - 1e-9):
                    models, value, accepted = trimmed, _epoch_value(ctx, start, trimmed, work), True
                    break
                continue
            new_value = _epoch_value(ctx, start, trial, work)
            if new_value > value:
                models, value, accepted = trial, new_value, True
            break
        if not accepted:
            break
    return models
