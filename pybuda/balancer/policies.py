"""Balancer policies: pick one legal op model per op (TT-Buda's PolicyType values).

* **MinimizeGrid** — the fewest cores, unstreamed first, then the fastest.
* **MaximizeTMinimizeGrid** — the largest t (most t-streaming), then the fewest cores.
* **Random** — uniformly among the legal models, seeded by ``random_policy_seed`` (reproducible).
* **SingleOpPerEpoch** — the fastest model of every op, one op per epoch.
* **NLP** (default) — one global ``target_cycles``: each op takes the smallest grid whose estimated
  cycles are ≤ target (its fastest model if none is), keeping matmul parameters in prologue (L1) when
  a model allows it and, among equally small models, preferring the grid rows of the previous op (so
  ops line up in rows). The target is searched over a geometric ladder from a quarter of the slowest
  op's best time to "every op on its smallest grid", plus the matmul-workload anchor (the matmuls'
  least core-cycles spread over one chip); each candidate's assignment is scored by packing its grids
  into epochs with the placer's own packer and summing the slowest op of every epoch plus the
  epoch-switch overhead amortised over the microbatch (cycles per input). The ladder's best is refined
  with and without the row preference (kept unless it costs throughput); the best wins. Candidates
  are judged by the whole cost (:mod:`pybuda.balancer.wholecost`: epoch switches with binaries and
  prologue, pipeline fill, DRAM sharing, the binary cache and the host's input/output conversion, as
  the performance model counts them).
  Then per-epoch targets (:func:`segment`): dynamic programming cuts the schedule into epochs, each
  with its own target (an epoch holding attention's softmax and one holding only the feed-forward
  matmuls need not run at the same cycle count), for several weights on the binary cache's re-write
  cost; the cut becomes epoch breaks when its whole cost beats the global target's. Last, the fill
  pass (:mod:`pybuda.balancer.fill_streaming`) t-streams each epoch's chains on their grids, so the
  first input pipelines through a layer norm's nine small ops instead of waiting on each in turn.
* **Ribbon** — epoch by epoch, grid rows shared within an epoch: :mod:`pybuda.balancer.ribbon`.
* **CNN** (deprecated in TT-Buda) runs Ribbon; an unknown name falls back to MinimizeGrid, as
  ``policy_from_string`` does.

Every policy checks producer/consumer t-stream compatibility (:func:`stream_compatible`) while it
walks the ops in schedule order, and every cycle number comes from :mod:`pybuda.perf.cost`.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from pybuda.perf import cost
from pybuda.perf.fill import slices_needed
from pybuda.balancer.edges import stream_compatible, stream_edge_tms
from pybuda.balancer.legalizer import Legalizer
from pybuda.balancer.types import BalancerSolution, OpModel
from pybuda.balancer.packing import PlacementMemo, count_epochs
from pybuda.balancer import wholecost
from pybuda.balancer.fill_streaming import stream_for_fill
from pybuda.balancer.segment import segment

log = logging.getLogger(__name__)

_MATMUL = frozenset({"matmul", "depthwise"})


def normalize_policy(name: Optional[str]) -> str:
    """Canonical policy name: "default"/None → NLP, CNN → Ribbon, unknown → MinimizeGrid (logged)."""
    if name in (None, "", "default"):
        return "NLP"
    known = {p.lower(): p for p in ("NLP", "Ribbon", "MinimizeGrid", "MaximizeTMinimizeGrid", "Random",
                                    "SingleOpPerEpoch")}
    key = str(name).lower()
    if key in ("cnn", "ribbon2"):
        return "Ribbon"
    if key in known:
        return known[key]
    log.error("unknown balancer policy %r; falling back to MinimizeGrid", name)
    return "MinimizeGrid"


def epoch_break_flags(graph: Any, config: Any) -> List[bool]:
    """For each op in schedule order: must it start a new epoch? (user epoch/chip breaks, placer
    overrides that break or pin a chip, and changes of epoch type.)"""
    from pybuda.placer.placer import break_names

    breaks = break_names(graph, config.op_names_to_epoch_break) | break_names(graph, config.op_names_to_chip_break)
    for name, ov in config.placer_op_overrides.items():
        if ov.temporal_epoch_break or ov.spatial_epoch_break or ov.chip_id is not None:
            breaks.add(name)
    flags: List[bool] = []
    prev_type: Optional[str] = None
    for op in graph.ops.values():
        flags.append(op.name in breaks or (prev_type is not None and op.epoch_type != prev_type))
        prev_type = op.epoch_type
    return flags


def _root_name(name: str) -> str:
    """The framework op an op was lowered from: its name up to the first dot (``conv2d_7`` for
    ``conv2d_7.folded.im2col`` and ``conv2d_7.folded``), the lowering's naming convention."""
    return name.split(".", 1)[0]


def sparse_dense_partner(ops: Sequence[Any], consumers: Sequence[Sequence[Tuple[int, int]]], i: int) -> Optional[int]:
    """The op TT-Buda's Ribbon placed atomically with op ``i``, or None.

    TT-Buda's Ribbon (policy_ribbon2 / policy_utils ``place_sparse_dense_pair``) pairs a sparse matmul with the
    next op in the schedule when that op is a dense matmul or a reduce lowered from the same framework op
    (``should_pair_with_sparse``: the same ``original_op_name``) and is the sparse matmul's only consumer, and
    places the two in one epoch whenever both fit on an empty chip: when they do not fit in the current
    epoch, the epoch ends *before* the sparse matmul. So a convolution's im2col output — its kernel taps,
    ``kh·kw`` times the activation — never crosses an epoch boundary through a DRAM queue."""
    op = ops[i]
    if op.type not in _MATMUL or not op.attrs.get("identity") or i + 1 >= len(ops):
        return None
    nxt = ops[i + 1]
    dense = (nxt.type in _MATMUL and not nxt.attrs.get("identity")) or nxt.type == "reduce"
    if not dense or _root_name(nxt.name) != _root_name(op.name):
        return None
    users = {ci for ci, _k in consumers[i]}
    return i + 1 if users == {i + 1} else None


class _Context:
    """State shared by the policies: ops in order, candidates, producer edges, chosen models."""

    def __init__(self, graph: Any, device: Any, config: Any, legalizer: Legalizer):
        self.graph = graph
        self.device = device
        self.config = config
        self.ops = list(graph.ops.values())
        self.index = {op.name: i for i, op in enumerate(self.ops)}
        self.cands: List[List[OpModel]] = [legalizer.models(op) for op in self.ops]
        # Producer edges (producer op index, input index, edge TMs) per op; consumers per op.
        self.producers: List[List[Tuple[int, int, Sequence[Any]]]] = []
        self.consumers: List[List[Tuple[int, int]]] = [[] for _ in self.ops]
        for ci, op in enumerate(self.ops):
            edges = []
            for k, name in enumerate(op.inputs):
                pi = self.index.get(name)
                if pi is not None:
                    edges.append((pi, k, op.input_tms.get(k, ())))
                    self.consumers[pi].append((ci, k))
            self.producers.append(edges)
        self.chosen: List[Optional[OpModel]] = [None] * len(self.ops)
        self.producer_ops: List[List[int]] = [sorted({pi for pi, _, _ in edges}) for edges in self.producers]
        #: every producer read from its first slice: the fill bound the searches for targets and epoch cuts
        #: score with (~10^5 epochs). The exact count (fill_edges) chose the same BERT-Large placements on
        #: n150 and e150 at a third more balancer time; the fill pass, which keeps grids, uses it.
        self.first_slice_edges: List[List[Tuple[int, int]]] = [[(pi, 1) for pi in ops] for ops in self.producer_ops]
        self.breaks = epoch_break_flags(graph, config)
        self.rows, self.cols = device.grid_rows, device.grid_cols
        self.allow_transpose = bool(config.enable_auto_transposing_placement)
        self.microbatch = max(1, int(getattr(graph, "microbatch", 1) or 1))
        self.bandwidth = cost.device_bandwidth(device)
        self.switch = wholecost.switch_costs(device, self.bandwidth)
        self.host_io = wholecost.host_io_cycles(graph, device, config, self.microbatch)
        self._prologue: Dict[int, float] = {}
        self._reads: Dict[Tuple[int, int], Tuple[OpModel, float]] = {}
        #: per op: the last consumer's index (-1: none) and the bytes per input of its output in an
        #: epoch-to-epoch queue, for the per-epoch search (segment), which knows no final models
        self.last_consumer: List[int] = [max((c for c, _ in cs), default=-1) for cs in self.consumers]
        self.queue_write: List[float] = [float(op.shape.tiles * cost.tile_size_bytes(op.out_df)) for op in self.ops]
        #: each op's (producer op, input index) edges
        self.input_edges: List[List[Tuple[int, int]]] = [[(pi, k) for pi, k, _ in edges] for edges in self.producers]
        #: per op: how many ops back its farthest producer is (0: none), for segment's window signatures
        self.producer_reach: List[int] = [max([i - pi for pi, _ in edges] + [0]) for i, edges in enumerate(self.input_edges)]
        #: per op: the index of the op Ribbon places atomically with it (a sparse matmul's dense partner,
        #: see :func:`sparse_dense_partner`), or None
        self.partner: List[Optional[int]] = [sparse_dense_partner(self.ops, self.consumers, i)
                                             for i in range(len(self.ops))]
        # stream_compatible answers per (op, edge, producer model, model): the target searches ask the
        # same pairs tens of thousands of times. The models are kept in the value, so an id reused by a
        # new model after an old one was freed is never served the old answer.
        self._compatible: Dict[Tuple[int, int, int, int], Tuple[OpModel, OpModel, bool]] = {}
        self._slices: Dict[Tuple[int, int, int, int], Tuple[OpModel, OpModel, int]] = {}  # the same for the fill
        #: every packer of the candidate epochs shares one placement memo (see GridPacker)
        self.placements: PlacementMemo = {}
        #: _whole_score's answers by (the models' ids, breaks, exact_fill): its value is a function of those
        #: alone (every cache it reads is one too), and NLP scores the same solution more than once (targets
        #: that assign the same models, the chosen target again). The models are kept in the value, so their
        #: ids cannot be reused by other models while the key is held.
        self.whole_scores: Dict[Tuple[Any, ...], Tuple[Sequence[OpModel], Tuple[float, int]]] = {}
        overrides = config.placer_op_overrides
        self.place_args: List[Tuple[Optional[Tuple[int, int]], Optional[bool]]] = []
        for op in self.ops:
            ov = overrides.get(op.name)
            start = tuple(ov.start) if ov is not None and ov.start else None
            transpose: Optional[bool] = True if ov is not None and ov.transpose_op else (
                None if self.allow_transpose else False)
            self.place_args.append((start, transpose))

    def compatible(self, i: int, model: OpModel, chosen: Optional[List[Optional[OpModel]]] = None) -> bool:
        """Can ``model`` for op ``i`` connect to its already-chosen producers?"""
        chosen = self.chosen if chosen is None else chosen
        op = self.ops[i]
        for e, (pi, k, tms) in enumerate(self.producers[i]):
            producer = chosen[pi]
            if producer is None or producer.stream_factor == 1:
                continue  # an unstreamed producer (or a queue) always connects
            key = (i, e, id(producer), id(model))
            hit = self._compatible.get(key)
            if hit is None or hit[0] is not producer or hit[1] is not model:
                ok = stream_compatible(producer, model, op.type, k, tms, bool(op.attrs.get("bias")))
                hit = self._compatible[key] = (producer, model, ok)
            if not hit[2]:
                return False
        return True

    def select(self, i: int, ranked: Iterable[OpModel], chosen: Optional[List[Optional[OpModel]]] = None) -> OpModel:
        """The first model of ``ranked`` compatible with op ``i``'s producers; if none of them is,
        any compatible legal model; if none at all, the t-streamed producers are switched to
        unstreamed models (which every consumer accepts) and the ranking is tried again."""
        chosen = self.chosen if chosen is None else chosen
        if not isinstance(ranked, list):
            ranked = list(ranked)
        for m in ranked:
            if self.compatible(i, m, chosen):
                return m
        for m in self.cands[i]:
            if self.compatible(i, m, chosen):
                return m
        if self._unstream_producers(i, chosen):
            for m in ranked:
                if self.compatible(i, m, chosen):
                    return m
        log.warning("op '%s': no op model is t-stream compatible with its producers", self.ops[i].name)
        return ranked[0] if ranked else self.cands[i][0]

    def _unstream_producers(self, i: int, chosen: List[Optional[OpModel]]) -> bool:
        """Replace op ``i``'s t-streamed producers by unstreamed models (same grid preferred) that
        their own producers accept. Their other consumers stay compatible: an unstreamed producer
        connects to anything. Returns True if every streamed producer was replaced."""
        ok = True
        for pi, _, _ in self.producers[i]:
            current = chosen[pi]
            if current is None or current.stream_factor == 1:
                continue
            plain = sorted((m for m in self.cands[pi] if m.stream_factor == 1),
                           key=lambda m: (m.grid_shape != current.grid_shape, m.cores, m.cycles))
            repl = next((m for m in plain if self.compatible(pi, m, chosen)), None)
            if repl is None:
                ok = False
                continue
            chosen[pi] = repl
        return ok

    def fill_edges(self, i: int, model: OpModel, model_of: Callable[[int], Optional[OpModel]]
                   ) -> List[Tuple[int, int]]:
        """Op ``i``'s producers as the fill counts them (:meth:`wholecost.EpochAccumulator.add`): each
        producer index with how many of its slices ``model``'s first slice reads, following the edge's
        TMs as the performance model does (:func:`~pybuda.perf.fill.slices_needed`). The producers'
        models come from ``model_of``; an unknown one (None) counts as read whole, and a producer
        feeding several inputs counts with its most-read edge."""
        edges: Dict[int, int] = {}
        for e, (pi, k, tms) in enumerate(self.producers[i]):
            producer = model_of(pi)
            if producer is None:
                needed = 1 << 30
            elif producer.t == 1:
                needed = 1
            else:
                key = (i, e, id(producer), id(model))
                hit = self._slices.get(key)
                if hit is None or hit[0] is not producer or hit[1] is not model:
                    netlist_tms = stream_edge_tms(producer, model, self.ops[i].type, k, tms)
                    shape = (producer.t, producer.out_rt, producer.out_ct)
                    hit = self._slices[key] = (producer, model, slices_needed(shape, netlist_tms))
                needed = hit[2]
            edges[pi] = max(edges.get(pi, 1), needed)
        return list(edges.items())

    def read_bytes(self, i: int, k: int, model: OpModel) -> float:
        """Bytes one input makes op ``i`` with ``model`` fetch of its operand ``k``: its cores' slices,
        once per distinct fetch (:func:`~pybuda.perf.cost.operand_fetches`; cached per model object)."""
        key = (id(model), k)
        hit = self._reads.get(key)
        if hit is None or hit[0] is not model:
            fetches = cost.operand_fetches(self.ops[i], model)
            nbytes, fetchers = fetches[k] if k < len(fetches) else (0.0, 0)
            hit = self._reads[key] = (model, float(nbytes * fetchers))
        return hit[1]

    def prologue(self, i: int, model: OpModel) -> float:
        """Prologue bytes of op ``i`` with ``model`` (cached per model object)."""
        hit = self._prologue.get(id(model))
        if hit is None:
            hit = self._prologue[id(model)] = wholecost.prologue_bytes(self.ops[i], model)
        return hit

    def epoch_cycles(self, models: Sequence[OpModel]) -> float:
        """Cycles per input of one epoch holding ``models``: its slowest op, or the chip's DRAM channels
        when the epoch's ops together stream more than they move in that time (spec §5.4: every op of
        an epoch shares the channels, which no single op's estimate sees)."""
        slowest = max((m.cycles for m in models), default=0)
        return max(float(slowest), sum(m.dram_bytes for m in models) / self.bandwidth.dram_total)

    def epoch_overhead(self, cores_used: int) -> float:
        """Epoch-switch cycles amortised over one microbatch (perf/cost.py)."""
        return cost.epoch_overhead_cycles(0, cores_used, self.device, self.bandwidth) / self.microbatch


# --------------------------------------------------------------------------------------------------
# Simple policies
# --------------------------------------------------------------------------------------------------

def _sorted_cached(ctx: _Context, key: Callable[[OpModel], Any]) -> Callable[[int], List[OpModel]]:
    cache: Dict[int, List[OpModel]] = {}

    def get(i: int) -> List[OpModel]:
        cands = ctx.cands[i]
        hit = cache.get(id(cands))
        if hit is None:
            hit = cache[id(cands)] = sorted(cands, key=key)
        return hit
    return get


def _run_ranked(ctx: _Context, ranked: Callable[[int], Iterable[OpModel]]) -> None:
    for i in range(len(ctx.ops)):
        ctx.chosen[i] = ctx.select(i, ranked(i))


def _minimize_grid(ctx: _Context) -> None:
    _run_ranked(ctx, lambda i: ctx.cands[i])  # legalizer order: cores, stream factor, cycles


def _maximize_t(ctx: _Context) -> None:
    _run_ranked(ctx, _sorted_cached(ctx, lambda m: (-m.t, m.cores, m.cycles, m.grid_shape)))


def _single_op_per_epoch(ctx: _Context) -> List[str]:
    _run_ranked(ctx, _sorted_cached(ctx, lambda m: (m.cycles, m.cores, m.stream_factor, m.grid_shape)))
    return [op.name for op in ctx.ops[1:]]


def _random(ctx: _Context, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(len(ctx.ops)):
        cands = ctx.cands[i]
        pick = cands[rng.randrange(len(cands))]
        if not ctx.compatible(i, pick):
            order = list(cands)
            rng.shuffle(order)
            pick = ctx.select(i, order)
        ctx.chosen[i] = pick


# --------------------------------------------------------------------------------------------------
# Target-cycle machinery shared by NLP and Ribbon
# --------------------------------------------------------------------------------------------------

class _Targets:
    """Per-signature views of the candidates: the model an op takes for a target, cached."""

    def __init__(self, ctx: _Context):
        self.ctx = ctx
        self._by_pref: Dict[int, List[OpModel]] = {}
        self._fastest: Dict[int, List[OpModel]] = {}
        self._pick: Dict[Tuple[int, int], OpModel] = {}
        self._ranked: Dict[Tuple[int, int, Optional[int]], List[OpModel]] = {}
        self._min_work: Dict[int, float] = {}

    def _pref_key(self, i: int) -> Callable[[OpModel], Any]:
        is_mm = self.ctx.ops[i].type in _MATMUL
        return lambda m: (bool(m.dram_inputs) if is_mm else False, m.cores, m.stream_factor, m.cycles, m.grid_shape)

    def by_pref(self, i: int) -> List[OpModel]:
        """Candidates ordered by (matmul params in DRAM, cores, t-stream factor, cycles)."""
        cands = self.ctx.cands[i]
        hit = self._by_pref.get(id(cands))
        if hit is None:
            hit = self._by_pref[id(cands)] = sorted(cands, key=self._pref_key(i))
        return hit

    def fastest(self, i: int) -> List[OpModel]:
        """Candidates ordered by (cycles, cores)."""
        cands = self.ctx.cands[i]
        hit = self._fastest.get(id(cands))
        if hit is None:
            hit = self._fastest[id(cands)] = sorted(cands, key=lambda m: (m.cycles, m.cores, m.stream_factor,
                                                                          m.grid_shape))
        return hit

    def pick(self, i: int, target: int) -> OpModel:
        """The preferred model meeting ``target`` (ignoring rows and compatibility), else the fastest."""
        key = (id(self.ctx.cands[i]), target)
        hit = self._pick.get(key)
        if hit is None:
            hit = next((m for m in self.by_pref(i) if m.cycles <= target), None) or self.fastest(i)[0]
            self._pick[key] = hit
        return hit

    def ranked(self, i: int, target: int, row: Optional[int]) -> List[OpModel]:
        """Models in the order op ``i`` should try them for ``target``, preferring grid rows ``row``
        among equally good ones: the meeting models by preference, then the rest by speed (cached per
        signature, target and row)."""
        key = (id(self.ctx.cands[i]), target, row)
        hit = self._ranked.get(key)
        if hit is not None:
            return hit
        is_mm = self.ctx.ops[i].type in _MATMUL
        meeting = [m for m in self.by_pref(i) if m.cycles <= target]
        if not meeting:
            hit = self.fastest(i)
        else:
            best = meeting[0]
            head_key = (bool(best.dram_inputs) if is_mm else False, best.cores)
            same = []
            if row is not None:
                same = [m for m in meeting if m.grid_shape[0] == row and
                        (bool(m.dram_inputs) if is_mm else False, m.cores) == head_key]
            hit = same + meeting + self.fastest(i)
        self._ranked[key] = hit
        return hit

    def ribbon_ranked(self, i: int, target: int, ribbon: int) -> List[OpModel]:
        """Ribbon's order: models on the ribbon (grid rows == ``ribbon``) meeting the target, smallest
        first; then the other models meeting it; then the rest by speed (cached)."""
        key = (id(self.ctx.cands[i]), target, -ribbon - 1)
        hit = self._ranked.get(key)
        if hit is None:
            meeting = [m for m in self.by_pref(i) if m.cycles <= target]
            on = [m for m in meeting if m.grid_shape[0] == ribbon]
            hit = self._ranked[key] = on + meeting + self.fastest(i)
        return hit

    def min_work(self, i: int) -> float:
        """The op's least core-cycles over its models (work that no layout avoids)."""
        cands = self.ctx.cands[i]
        hit = self._min_work.get(id(cands))
        if hit is None:
            hit = self._min_work[id(cands)] = float(min(m.cycles * m.cores for m in cands))
        return hit


def _score(ctx: _Context, models: Sequence[OpModel]) -> Tuple[float, int]:
    """Estimated cycles per input of a whole solution: Σ over epochs of the slowest op plus the
    amortised epoch overhead, epochs from the placer's packer. Returns (score, epochs)."""
    shapes = [m.grid_shape for m in models]
    epochs = count_epochs(shapes, ctx.breaks, ctx.rows, ctx.cols, ctx.allow_transpose, ctx.placements)
    n_epochs = (epochs[-1] + 1) if epochs else 0
    members: List[List[OpModel]] = [[] for _ in range(n_epochs)]
    for e, m in zip(epochs, models):
        members[e].append(m)
    return (sum(ctx.epoch_cycles(ms) for ms in members)
            + sum(ctx.epoch_overhead(sum(m.cores for m in ms)) for ms in members)), n_epochs


def _whole_score(ctx: _Context, models: Sequence[OpModel], breaks: Optional[List[bool]] = None,
                 exact_fill: bool = False) -> Tuple[float, int]:
    """The whole cost of a solution (:mod:`pybuda.balancer.wholecost`: switches with binaries and
    prologue, fill, DRAM sharing, epoch-to-epoch queues, binary-cache overflow), epochs from the placer's
    packer and ``breaks`` (default: the user's and epoch-type breaks). The fill reads every producer
    from its first slice (``first_slice_edges``) unless ``exact_fill`` follows the edges' TMs
    (:meth:`_Context.fill_edges`). Returns (cycles per input, epochs); answered once per solution
    (:attr:`_Context.whole_scores`)."""
    key = (tuple(map(id, models)), None if breaks is None else tuple(breaks), exact_fill)
    hit = ctx.whole_scores.get(key)
    if hit is None:
        hit = ctx.whole_scores[key] = (tuple(models), _whole_score_of(ctx, models, breaks, exact_fill))
    return hit[1]


def _whole_score_of(ctx: _Context, models: Sequence[OpModel], breaks: Optional[List[bool]],
                    exact_fill: bool) -> Tuple[float, int]:
    """:func:`_whole_score` computed."""
    shapes = [m.grid_shape for m in models]
    epochs = count_epochs(shapes, ctx.breaks if breaks is None else breaks, ctx.rows, ctx.cols,
                          ctx.allow_transpose, ctx.placements)
    edges = [ctx.fill_edges(i, m, models.__getitem__) for i, m in enumerate(models)] if exact_fill \
        else ctx.first_slice_edges
    return wholecost.score_solution(ctx.ops, models, epochs, edges, ctx.switch, ctx.microbatch,
                                    [ctx.prologue(i, m) for i, m in enumerate(models)], ctx.host_io,
                                    inputs=ctx.input_edges, read_bytes=lambda i, k: ctx.read_bytes(i, k, models[i]))


def assign_for_target(ctx: _Context, targets: _Targets, target: int, prefer_rows: bool) -> List[OpModel]:
    """NLP's per-op choice for one target, in schedule order with producer compatibility: the
    preferred model meeting ``target`` (smallest grid, matmul parameters in prologue first), with
    ``prefer_rows`` the one sharing the previous op's grid rows among equally small ones."""
    chosen: List[Optional[OpModel]] = [None] * len(ctx.ops)
    row: Optional[int] = None
    for i in range(len(ctx.ops)):
        model = ctx.select(i, targets.ranked(i, target, row if prefer_rows else None), chosen)
        chosen[i] = model
        row = model.grid_shape[0]
    return chosen  # type: ignore[return-value]


def global_target(ctx: _Context, targets: _Targets,
                  score: Callable[[_Context, Sequence[OpModel]], Tuple[float, int]] = _score) -> Tuple[int, bool]:
    """The global target_cycles and whether preferring the previous op's rows helps (see the module
    docstring), each candidate judged by ``score`` (Ribbon: :func:`_score`; NLP: :func:`_whole_score`):
    returns (target, prefer_rows)."""
    n = len(ctx.ops)
    if n == 0:
        return 0, True
    chip_cores = ctx.rows * ctx.cols
    fastest = [targets.fastest(i)[0].cycles for i in range(n)]
    # Below a quarter of the slowest op's best time every other op is already at its fastest.
    lo = max(1.0, max(fastest) / 4.0)
    # Upper end: every op on its preferred smallest model.
    hi = max(float(max(targets.by_pref(i)[0].cycles for i in range(n))), lo)
    steps = 24
    ratio = max(1.05, (hi / lo) ** (1.0 / steps)) if hi > lo else 1.05
    ladder = {int(lo * ratio ** k) for k in range(steps + 1)} | {int(hi)}
    # The matmul workload anchor: the target at which all matmuls, at their least core-cycles, would
    # share one chip.
    mm = [i for i, op in enumerate(ctx.ops) if op.type in _MATMUL]
    if mm:
        ladder.add(max(1, int(sum(targets.min_work(i) for i in mm) / chip_cores)))

    scored: Dict[Tuple[int, bool], float] = {}

    def evaluate(target: int, prefer_rows: bool) -> float:
        key = (target, prefer_rows)
        if key not in scored:
            scored[key] = score(ctx, assign_for_target(ctx, targets, target, prefer_rows))[0]
        return scored[key]

    for t in sorted(ladder):
        evaluate(t, False)
    best = min(scored, key=lambda k: (scored[k], k[0]))[0]
    fine = ratio ** 0.25
    for k in (-3, -2, -1, 0, 1, 2, 3):
        t = int(best * fine ** k)
        if t > 0:
            evaluate(t, False)
            evaluate(t, True)
    # Prefer lining rows up when it costs nothing (ties go to prefer_rows=True, then smaller targets).
    target, prefer_rows = min(scored, key=lambda k: (scored[k], not k[1], k[0]))
    return target, prefer_rows


# --------------------------------------------------------------------------------------------------
# NLP
# --------------------------------------------------------------------------------------------------

def _nlp(ctx: _Context) -> Tuple[int, List[str]]:
    """The better, by the whole cost, of one global target and per-epoch targets (:func:`segment`), its
    epochs' chains then t-streamed for a shorter fill (:func:`stream_for_fill`: grids and epochs stay).
    Returns the target (with per-epoch targets, the largest) and the epoch breaks to honour."""
    targets = _Targets(ctx)
    target, prefer_rows = global_target(ctx, targets, _whole_score)
    models = assign_for_target(ctx, targets, target, prefer_rows)
    best = (_whole_score(ctx, models)[0], models, [], target)
    for cand_models, cand_breaks, cand_target in segment(ctx, targets, target):
        total = _whole_score(ctx, cand_models, _merge_breaks(ctx, cand_breaks))[0]
        if total < best[0] * (1 - 1e-9):
            best = (total, cand_models, cand_breaks, cand_target)
    _, models, starts, target = best
    flags = _merge_breaks(ctx, starts)
    epoch_of = count_epochs([m.grid_shape for m in models], flags, ctx.rows, ctx.cols, ctx.allow_transpose,
                            ctx.placements)
    streamed = stream_for_fill(ctx, models, epoch_of)
    # The pass weighs each epoch alone; keep it only if the whole placement agrees (the queues' channels),
    # both counted with the exact fill (the first-slice bound cannot see what streaming saves).
    if _whole_score(ctx, streamed, flags, exact_fill=True)[0] <= _whole_score(ctx, models, flags, exact_fill=True)[0]:
        models = streamed
    for i, model in enumerate(models):
        ctx.chosen[i] = model
    return target, [ctx.ops[i].name for i in starts if i > 0 and not ctx.breaks[i]]


def _merge_breaks(ctx: _Context, starts: Sequence[int]) -> List[bool]:
    flags = list(ctx.breaks)
    for i in starts:
        flags[i] = True
    return flags


# --------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------

def balance(graph: Any, device: Any, config: Any) -> BalancerSolution:
    """Choose an op model for every op of ``graph`` (a BudaGraph in schedule order) on ``device``
    (a DeviceDescriptor) with the policy ``config.balancer_policy``. Raises CompileError (stage
    BALANCER_PASS) when an op has no legal model or an override cannot be honoured."""
    legalizer = Legalizer(graph, device, config)
    ctx = _Context(graph, device, config, legalizer)
    policy = normalize_policy(config.balancer_policy)
    target: Optional[int] = None
    breaks: List[str] = []
    if not ctx.ops:
        return BalancerSolution(policy=policy)
    if policy == "MinimizeGrid":
        _minimize_grid(ctx)
    elif policy == "MaximizeTMinimizeGrid":
        _maximize_t(ctx)
    elif policy == "Random":
        _random(ctx, int(config.random_policy_seed))
    elif policy == "SingleOpPerEpoch":
        breaks = _single_op_per_epoch(ctx)
    elif policy == "Ribbon":
        # Imported here: Ribbon builds on this module's context and targets, so it imports this module.
        from pybuda.balancer.ribbon import run_ribbon
        target, breaks = run_ribbon(ctx)
    else:
        target, breaks = _nlp(ctx)
    solution = BalancerSolution(policy=policy, target_cycles=target, epoch_breaks=breaks)
    for i, op in enumerate(ctx.ops):
        model = ctx.chosen[i]
        assert model is not None
        solution.op_models[op.name] = model
        solution.legal_counts[op.name] = len(ctx.cands[i])
    return solution


__all__ = ["balance", "normalize_policy", "epoch_break_flags", "global_target"]

