"""Op→op pipes in the performance model: gather-pipe rates (NBS §6.3) and the fork/join loop bound
(NBS §6.4). Both are off by default (``PerfConfig.gather_pipes``, ``PerfConfig.fork_join_stalls``);
:class:`~pybuda.perf.estimator._Estimator` calls them."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pybuda.backend_build.routing import Pipe
from pybuda.perf import cost
from pybuda.perf.config import PerfConfig
from pybuda.perf.program import _CostModel, _CostOp, _input_buffer_tiles
from pybuda.perf.types import OpPerf

__all__ = ["pipe_rate", "gather_sources", "fork_join", "topo"]


def pipe_rate(cfg: PerfConfig, clock: float, sources: int) -> float:
    """Bytes per cycle of an op→op pipe into one consumer core fed by ``sources`` producer cores."""
    c = cfg
    if sources <= 1:
        gbps = c.pipe_direct_bytes_per_s
    else:
        span = max(1.0, math.log2(max(2, c.gather_many_sources)) - 1.0)
        frac = min(1.0, (math.log2(sources) - 1.0) / span)
        gbps = c.pipe_gather_bytes_per_s + frac * (c.pipe_gather_many_bytes_per_s - c.pipe_gather_bytes_per_s)
    return gbps / clock


def gather_sources(pipes: Sequence[Pipe]) -> int:
    """Producer cores one consumer core gathers an input from: the most sources of any of the input's
    pipes (:mod:`pybuda.backend_build.routing` decides which producer cores feed which consumer cores —
    overlapping row/column partitions, whole K strips for matmuls, whole reduced dimensions, one block
    of a broadcast dimension, transposed producer grids), 1 when there is no pipe."""
    return max((p.source_count for p in pipes), default=1)


def fork_join(info: Dict[str, Dict[str, Any]], rows: Dict[str, OpPerf]
              ) -> Tuple[float, Optional[str], Optional[str]]:
    """The per-input interval fork/join loops impose, with the fork and join op of the worst one.

    NBS §6.4: ops pipeline over macro-blocks; an op starts math when its input buffers hold a block
    and pushes when its output buffer has space, and a consumer frees producer space only after math
    on that block. A fork ``P`` whose outputs reconverge at a join ``J`` forms a loop: ``J`` frees the
    short path's buffers only after the long path delivered the same block, so at most the short
    path's buffer capacity ``B`` (P's ``buf_size_mb`` output mblocks, J's input buffer, and the
    output buffers of ops on the short path) is in flight around the loop. A loop with ``B`` blocks
    of tokens and ``L`` cycles of per-block latency (every op on it, each taking its per-mblock time
    ``cycles / t``) completes at most ``B`` blocks per ``L`` (the cycle ratio of a marked graph), so
    the interval per input is at least ``L / B`` (blocks counted in inputs: a buffer of ``b``
    mblocks of a t-sliced op holds ``b / t`` inputs). Unlimited buffering — a DRAM e2e queue on the
    short path, which the netlist expresses by routing it through a queue — puts the join outside
    this loop (queue inputs are not op edges here). Paths are taken inside one epoch and chip.
    """
    succ: Dict[str, List[Tuple[str, int]]] = {n: [] for n in info}
    for name, d in info.items():
        for i, inp in enumerate(d["op"].inputs):
            if inp in info and inp != name:
                succ[inp].append((name, i))
    forks = [n for n, s in succ.items() if len({c for c, _ in s}) >= 2]
    if not forks:
        return 0.0, None, None
    delay = {n: rows[n].cycles / max(1, info[n]["op"].t) for n in info}

    def edge_cap(u: str, v: str, i: int) -> float:
        """Inputs of u's output buffered on edge u→v (u's output buffer + v's input buffer ``i``)."""
        pu, pv = info[u]["op"], info[v]["op"]
        cap = pu.buf_size_mb / max(1, pu.t)
        per_input = cost.input_tiles_per_core(_CostOp(pv), _CostModel(pv))
        if i < len(per_input) and per_input[i] > 0:
            cap += _input_buffer_tiles(pv, i) / per_input[i]
        return cap

    order = topo(info, succ)
    pos = {n: k for k, n in enumerate(order)}
    worst, worst_p, worst_j = 0.0, None, None
    for p in forks:
        outs: Dict[str, float] = {}
        for c, i in succ[p]:  # parallel edges to one consumer (e.g. x*x): the larger buffer
            outs[c] = max(outs.get(c, 0.0), edge_cap(p, c, i))
        for b, cap_pb in outs.items():
            # short path from b: fewest buffered inputs to every reachable node (DAG, topo order)
            tok: Dict[str, float] = {b: cap_pb}
            dly: Dict[str, float] = {b: 0.0}
            via: Dict[str, Optional[str]] = {b: None}
            for n in order[pos[b]:]:
                if n not in tok:
                    continue
                for c, i in succ[n]:
                    t_new, d_new = tok[n] + edge_cap(n, c, i), dly[n] + delay[n]
                    if c not in tok or t_new < tok[c] - 1e-12 or (abs(t_new - tok[c]) < 1e-12 and d_new > dly[c]):
                        tok[c], dly[c], via[c] = t_new, d_new, n
            for a in outs:
                if a == b:
                    continue
                # longest path a ⇝ J avoiding the short path's interior nodes
                for j in tok:
                    if j == b and a == j:
                        continue
                    blocked = set()
                    n = via.get(j)
                    while n is not None:
                        blocked.add(n)
                        n = via.get(n)
                    if a in blocked or a == j:
                        continue
                    longest: Dict[str, float] = {a: delay[a]}
                    for n in order[pos[a]:pos[j]]:
                        if n not in longest:
                            continue
                        for c, _i in succ[n]:
                            if c == j or (c not in blocked and pos[c] < pos[j]):
                                v = longest[n] + (delay[c] if c != j else 0.0)
                                if v > longest.get(c, -1.0):
                                    longest[c] = v
                    if j not in longest:
                        continue
                    loop = delay[p] + longest[j] + dly[j] + delay[j]
                    ratio = loop / max(tok[j], 1e-9)
                    if ratio > worst:
                        worst, worst_p, worst_j = ratio, p, j
    return worst, worst_p, worst_j


def topo(info: Dict[str, Dict[str, Any]], succ: Dict[str, List[Tuple[str, int]]]) -> List[str]:
    """The ops of an epoch with every producer before its consumers (``succ``: op -> [(consumer, input)])."""
    indeg = {n: 0 for n in info}
    for n, s in succ.items():
        for c, _ in s:
            indeg[c] += 1
    ready = [n for n in info if indeg[n] == 0]
    out: List[str] = []
    while ready:
        n = ready.pop()
        out.append(n)
        for c, _ in succ[n]:
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    out.extend(n for n in info if n not in set(out))  # a cycle cannot happen in a valid netlist
    return out
