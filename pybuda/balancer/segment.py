"""NLP's per-epoch targets: dynamic programming cuts the schedule into epochs, each with its own cycle
target, by the whole cost of every epoch it could make (:func:`segment`).

The policy context and target views come from :mod:`pybuda.balancer.policies` (``ctx``: its
``_Context``; ``targets``: its ``_Targets``); the epochs' costs from :mod:`pybuda.balancer.wholecost`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from pybuda.balancer import wholecost
from pybuda.balancer.packing import GridPacker
from pybuda.balancer.types import OpModel

__all__ = ["segment", "SEGMENT_LADDER_RATIO", "SEGMENT_EPOCH_WEIGHTS", "SEGMENT_LADDER_SPAN"]


#: Per-epoch targets: the geometric ladder's ratio and the Lagrange weights (× the host's binary
#: re-write time) that trade epochs against the binary cache.
SEGMENT_LADDER_RATIO = 1.15
SEGMENT_EPOCH_WEIGHTS = (0.0, 0.5, 1.0, 2.0, 4.0)
#: Per-epoch targets are searched from the best global target divided by the first number to it times
#: the second.
SEGMENT_LADDER_SPAN = (8.0, 4.0)


class _WindowMemo:
    """:func:`_epoch_options` answers by the ops they read. The walks from op ``i`` read a prefix of the
    window ``[i, stop)``: up to the op that no longer fits, or the whole window when some walk reaches its
    end. An answer is kept under the signature of the ops it read (``reads`` holds the distinct
    ``(ops read, reached the end)`` kinds), so windows that differ only beyond that prefix share it (the
    last layers of a transformer, whose windows are cut short by the end of the graph).

    A signature is a tuple of small ints, one per op: ``ids`` numbers each distinct op description of
    :func:`_window_ops` the first time it is seen, and ``described`` remembers the number of op ``k`` seen
    ``offset`` ops into a window (offsets past the op's farthest producer all describe it alike), so the
    descriptions are built once per op rather than once per window and the keys hash fast."""

    def __init__(self) -> None:
        self.reads: set = set()
        self.options: Dict[Any, Dict[int, Tuple[float, int, int]]] = {}
        self.ids: Dict[Any, int] = {}
        self.described: Dict[Tuple[int, int], int] = {}


def _describe(ctx: Any, k: int, offset: int) -> Any:
    """What decides op ``k``'s part in an epoch that starts ``offset`` ops before it: its candidate list,
    placement overrides, which of its inputs come from inside the epoch (as offsets, with the input index:
    an input from before the epoch is an epoch-to-epoch queue read) and how far on its last consumer is
    (whether the op writes a queue for a later epoch)."""
    return (id(ctx.cands[k]), ctx.place_args[k],
            tuple([(k - p if k - p <= offset else -1, e) for p, e in ctx.input_edges[k]]),
            ctx.last_consumer[k] - k if ctx.last_consumer[k] >= 0 else -1)


def _window_ops(ctx: Any, i: int, length: int, memo: _WindowMemo) -> Tuple[int, ...]:
    """The signature of the epochs starting at op ``i`` over ``length`` ops: each op's description
    (:func:`_describe`) as its number in ``memo``. Two windows get the same signature exactly when their
    ops' descriptions are equal, as when the descriptions themselves were compared."""
    described = memo.described
    out = []
    for k in range(i, i + length):
        # only whether each producer lies inside the window depends on the offset: past the farthest one,
        # every offset describes the op alike, so the offset is capped there (fewer distinct keys)
        offset = k - i
        reach = ctx.producer_reach[k]
        key = (k, offset if offset < reach else reach)
        num = described.get(key)
        if num is None:
            desc = _describe(ctx, k, offset)
            num = described[key] = memo.ids.setdefault(desc, len(memo.ids))
        out.append(num)
    return tuple(out)


def _queue_bytes(ctx: Any, i: int, stop: int) -> List[float]:
    """``[s]``: bytes per input the epoch-to-epoch queues of an epoch holding ops ``[i, i + s)`` write
    (the outputs of its ops whose last consumer lies past it). It depends on the ops only, not on their
    models, so every walk of :func:`_epoch_options` reads it; the sums run in the order the walks once
    ran them, so the numbers are the same to the last bit."""
    pending = 0.0
    expiring: Dict[int, float] = {}
    out = [0.0]
    for j in range(i, stop):
        last = ctx.last_consumer[j]
        if last > j:
            pending += ctx.queue_write[j]
            expiring[last + 1] = expiring.get(last + 1, 0.0) + ctx.queue_write[j]
        pending -= expiring.pop(j + 1, 0.0)
        out.append(pending)
    return out


def _epoch_options(ctx: Any, targets: Any, i: int, ladder: Sequence[int],
                   memo: _WindowMemo) -> Dict[int, Tuple[float, int, int]]:
    """For epochs starting at op ``i``: end → (device cycles per microbatch, cores, target) of the
    cheapest target on ``ladder`` that packs ops ``[i, end)`` into one epoch.

    The answer depends only on the ops the walks read (their candidate lists, breaks, placement overrides
    and which of their producers are inside the epoch), so repeated blocks (a transformer's layers) are
    computed once (see :class:`_WindowMemo`).

    Each target walks the ops from ``i`` until one no longer fits. Consecutive targets often pick the same
    models for the first ops, and a walk's state after ``s`` ops depends only on the models of those ``s``
    ops: a walk resumes from the state the latest walk had where their picks first differ (and a target
    picking the same models as the latest walk up to the op that ended it is skipped: its epochs are the
    same). The skipped epochs are the same numbers the latest walk priced, and a later target never
    replaces an equal option (the smaller target keeps a tie), so the answer is exactly the full walks'."""
    n = len(ctx.ops)
    stop = min(n, i + ctx.rows * ctx.cols)
    for k in range(i + 1, stop):
        if ctx.breaks[k]:
            stop = k
            break
    # An answer that reached its window's end needs a window of that length; one that stopped at an op
    # that did not fit needs that op inside the window.
    kinds = [(length, end) for length, end in memo.reads if ((stop - i == length) if end else (stop - i >= length))]
    if kinds:
        ops = _window_ops(ctx, i, max(length for length, _ in kinds), memo)
        for length, reached_end in kinds:
            hit = memo.options.get((length, reached_end, ops[:length]))
            if hit is not None:
                return {i + n_ops: v for n_ops, v in hit.items()}
    hit = {}
    mb = ctx.microbatch
    # epoch-to-epoch queues: the writes of ops with consumers past the end (here), reads of producers
    # before i (below)
    pending = _queue_bytes(ctx, i, stop)
    # The latest walk, per step s (op i + s): the model it picked (including the op that ended it), the
    # packer's occupancy and the accumulator's totals after the op joined, and the op's slice times.
    picked: List[OpModel] = []
    after: List[Tuple[int, int, Any]] = []
    times: List[Any] = []
    read = 0  # ops the walks read, from i
    j = i
    for target in ladder:
        s = 0
        while s < len(picked) and targets.pick(i + s, target) is picked[s]:
            s += 1
        if picked and s == len(picked):
            continue  # the latest walk's models up to the op that ended it: the same epochs
        del picked[s:], after[s:], times[s:]
        packer = GridPacker(ctx.rows, ctx.cols, ctx.placements)
        acc = wholecost.EpochAccumulator(ctx.switch)
        if s:
            packer.occupied, packer.free, totals = after[s - 1]
            acc.restore(totals, dict(zip(range(i, i + s), times)))
        j = i + s
        while j < stop:
            model = targets.pick(j, target)
            picked.append(model)
            read = max(read, j - i + 1)
            start_pos, transpose = ctx.place_args[j]
            if packer.place(model.grid_shape[0], model.grid_shape[1], start=start_pos,
                            transpose=transpose) is None and j > i:
                break
            acc.add(j, model, ctx.first_slice_edges[j], ctx.prologue(j, model))
            times.append(acc.slice_times(j))
            for p, k in ctx.input_edges[j]:
                if p < i:
                    acc.dram += ctx.read_bytes(j, k, model)
            j += 1
            queued = pending[j - i]
            acc.dram += queued
            total = acc.device_cycles(mb)
            acc.dram -= queued
            after.append((packer.occupied, packer.free, acc.totals()))
            prev = hit.get(j - i)
            if prev is None or total < prev[0]:
                hit[j - i] = (total, acc.cores, target)
        if j >= stop:
            break  # the epoch reaches a hard break or the end: larger targets only slow it down
    reached_end = j >= stop
    memo.reads.add((read, reached_end))
    memo.options[(read, reached_end, _window_ops(ctx, i, read, memo))] = hit
    return {i + n_ops: v for n_ops, v in hit.items()}


def segment(ctx: Any, targets: Any, around: int) -> List[Tuple[List[OpModel], List[int], int]]:
    """Per-epoch targets: cut the schedule into epochs by dynamic programming over the whole cost.

    An epoch ``[i, j)`` with target ``T`` gives every op its preferred model meeting ``T`` and holds the
    ops the placer's packer fits from ``i`` on; its cost is :class:`wholecost.EpochAccumulator`'s (run,
    fill and switch), with the epoch-to-epoch queues the cut makes on its DRAM channels: reads of the
    producers before ``i`` and writes of the ops read after ``j``. The cheapest cut is found for each
    weight of :data:`SEGMENT_EPOCH_WEIGHTS` on every epoch's binary re-write time (the binary cache makes the cost of an extra epoch depend on
    how many there are, which a sum cannot say), and the final models are chosen in schedule order
    with producer compatibility. The targets tried lie within :data:`SEGMENT_LADDER_SPAN` of ``around``
    (the best global target): an epoch much slower than that costs more than it saves in switches, and
    a much faster one has no room left. Returns (models, epoch start indices, largest target) per
    distinct cut."""
    n = len(ctx.ops)
    if n == 0:
        return []
    lo = max(1.0, around / SEGMENT_LADDER_SPAN[0])
    hi = max(around * SEGMENT_LADDER_SPAN[1], lo)
    ladder: List[int] = []
    t = lo
    while t < hi * SEGMENT_LADDER_RATIO:
        ladder.append(int(t))
        t *= SEGMENT_LADDER_RATIO
    memo = _WindowMemo()
    # Per start: (end, device cycles, binary re-write cycles, target) of each epoch option. The re-write
    # time does not depend on the weight, so it is priced once for all the weights below.
    options = [[(end, total, ctx.switch.host_binary_cycles(cores), target)
                for end, (total, cores, target) in _epoch_options(ctx, targets, i, ladder, memo).items()]
               for i in range(n)]
    results: List[Tuple[List[OpModel], List[int], int]] = []
    seen: set = set()
    for weight in SEGMENT_EPOCH_WEIGHTS:
        best: List[float] = [0.0] + [float("inf")] * n
        back: List[Tuple[int, int]] = [(0, 0)] * (n + 1)
        for i in range(n):
            here = best[i]
            if here == float("inf"):
                continue
            for end, total, binary, target in options[i]:
                value = here + total + weight * binary
                if value < best[end]:
                    best[end], back[end] = value, (i, target)
        cut: List[Tuple[int, int, int]] = []
        end = n
        while end > 0:
            i, target = back[end]
            cut.append((i, end, target))
            end = i
        cut.reverse()
        key = tuple(cut)
        if key in seen:
            continue
        seen.add(key)
        chosen: List[Optional[OpModel]] = [None] * n
        for i, end, target in cut:
            for j in range(i, end):
                chosen[j] = ctx.select(j, targets.ranked(j, target, None), chosen)
        results.append((chosen, [i for i, _, _ in cut], max(t for _, _, t in cut)))  # type: ignore[arg-type]
    return results
