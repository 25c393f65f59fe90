"""The name-taking override APIs, applied to the lowered graph (TT-Buda's pre-placer passes).

Three passes, run by ``pybuda.passes.pipeline`` in this order:

1. :func:`resolve_overrides`, right after lowering: every op name the config holds (epoch and chip breaks,
   balancer and placer overrides, schedule constraints, ``insert_nop`` requests) is checked against the
   graph, and an unknown name is a :class:`ConfigError` naming it with the closest names the graph has. A
   name may be a lowered op, a framework op (the lowered ops it became: those it tags as ``ir_node`` or
   named ``<name>.<part>``), or for breaks and placement a ``pybuda.query`` predicate. Breaks, placement
   overrides and constraints are rewritten, in the compile's config snapshot, to lowered op names: a
   break entry that is a list (or a framework op lowered to several ops) breaks at the first of them in
   schedule order; a predicate breaks at every op it matches. The ops they name are *pinned*
   (``ctx.notes["override_pinned_ops"]``): fusion may keep one as a fused op's output (whose name the fused
   op keeps) but never absorbs it, so a break or override on an op that would be fused still applies.
   ``insert_fracture_group`` is refused here (ConfigError naming its ops: pybuda does not fracture).
2. :func:`insert_nops` (``insert_nop``): ``nop_count`` nops on each edge ``src`` → ``dest``; one chain
   forking to every destination, or with ``daisy_chain`` one chain that passes each destination in turn.
   With ``hoist_tms`` the edge's TMs move onto the ``src`` → nop edge (when every edge has the same TMs),
   else they stay on the nop → destination edges. A nop copies its input exactly (its data format is its
   producer's, ``data_formats``), so the numerics do not change.
3. :func:`apply_schedule_constraints` (``add_schedule_constraint``), after fusion: the op order (the
   schedule the placer follows) is the stable topological order that also honours each partial order; a
   constraint contradicting the data flow is a ConfigError.
"""

from __future__ import annotations

import difflib
import heapq
import logging
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set

from pybuda.errors import ConfigError
from pybuda.ir.lowered import BudaGraph, BudaOp
from pybuda.netlist.tms import as_tms, tms_shape
from pybuda.ir.lowered import TileShape
from pybuda.passes.context import CompileContext
from pybuda.query import NodePredicateBuilder

log = logging.getLogger(__name__)

PINNED_NOTE = "override_pinned_ops"


class _Names:
    """Every name a user may give, and how a name maps onto lowered ops."""

    def __init__(self, bg: BudaGraph, extra: Iterable[str]):
        self.bg = bg
        self.known: Set[str] = set(extra) | set(bg.ops) | set(bg.queues)
        self.by_ir: Dict[str, List[str]] = {}
        for op in bg.ops.values():
            ir = op.tags.get("ir_node")
            if ir:
                self.known.add(ir)
                self.by_ir.setdefault(ir, []).append(op.name)

    def ops_for(self, name: str) -> List[str]:
        """Lowered ops ``name`` stands for, in schedule order (empty when it names no op)."""
        if name in self.bg.ops:
            return [name]
        if name in self.by_ir:
            return list(self.by_ir[name])
        prefix = name + "."
        return [n for n, op in self.bg.ops.items()
                if n.startswith(prefix) or str(op.tags.get("ir_node") or "").startswith(prefix)]

    def check(self, what: str, name: Any, queues: bool = False) -> None:
        if not isinstance(name, str):
            raise ConfigError(f"{what}: expected an op name, got {name!r}")
        if name in self.known or self.ops_for(name) or (queues and name in self.bg.queues):
            return
        raise ConfigError(f"{what}: graph '{self.bg.name}' has no op named '{name}'{_close(name, self.known)}")

    def matching(self, pred: NodePredicateBuilder) -> List[str]:
        return [op.name for op in self.bg.ops.values()
                if pred.matches(op.name, op.type, op.tags.get("ir_node"), op.tags.get("ir_op_type"))]


def _close(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=5, cutoff=0.6)
    return f"; close matches: {close}" if close else "; no op has a similar name"


def resolve_overrides(bg: BudaGraph, ctx: CompileContext, framework_names: Iterable[str] = ()) -> BudaGraph:
    """Check and resolve the config's op names against ``bg`` (module docstring, pass 1); returns ``bg``."""
    cfg = ctx.config
    names = _Names(bg, framework_names)
    pinned: List[str] = []
    if cfg.fracture_groups:
        ops = [n for group, _ in cfg.fracture_groups for n, _, _ in group]
        raise ConfigError(f"insert_fracture_group({ops}): pybuda does not fracture ops; TT-Buda sharded the named "
                          f"parameters and every op between them into factor chunks (spread over chip_ids), a graph "
                          f"rewrite pybuda's lowering does not have. Remove the fracture group; to spread the model "
                          f"over chips use set_chip_break, to size an op override_op_size")

    cfg.op_names_to_epoch_break = _resolve_breaks("set_epoch_break", cfg.op_names_to_epoch_break, names, pinned)
    cfg.op_names_to_chip_break = _resolve_breaks("set_chip_break", cfg.op_names_to_chip_break, names, pinned)

    placer: Dict[str, Any] = {}
    for key, override in cfg.placer_op_overrides.items():
        if isinstance(key, NodePredicateBuilder):
            targets = names.matching(key)
            if not targets:
                log.warning("override_op_placement(%r) matches no op of graph '%s'", key, bg.name)
        else:
            names.check("override_op_placement", key)
            targets = names.ops_for(key)[:1]
        for t in targets:
            placer[t] = override
            pinned.append(t)
    cfg.placer_op_overrides = placer

    balancer = {}
    for key, override in cfg.balancer_op_overrides.items():
        names.check("balancer op override", key)
        ops = names.ops_for(key)
        if key not in bg.ops and len(ops) == 1:
            key = ops[0]
        elif key not in bg.ops:
            log.warning("balancer override on '%s', a framework op lowered to %s: it applies to none of them; "
                        "name the lowered op", key, ops)
        balancer[key] = override
        pinned.append(key)
        for index in getattr(override, "input_buffer_multiplier", None) or {}:
            op = bg.ops.get(key)
            if op is not None and not 0 <= int(index) < len(op.inputs):
                raise ConfigError(f"override_input_buffer_multiplier('{key}', {index}): the op has "
                                  f"{len(op.inputs)} operand(s) (indices 0..{len(op.inputs) - 1})")
    cfg.balancer_op_overrides = balancer

    constraints = []
    for order in cfg.scheduler_constraints:
        resolved = []
        for name in order:
            names.check("add_schedule_constraint", name)
            ops = names.ops_for(name)
            if ops:
                resolved.append(ops[0])
        constraints.append(resolved)
        pinned.extend(resolved)
    cfg.scheduler_constraints = constraints

    for req in cfg.buffering_nops_to_insert:
        names.check("insert_nop src_op", req.src_op, queues=True)
        for dest in req.dest_ops:
            names.check("insert_nop dest_ops", dest)
        pinned.append(req.src_op)
        pinned.extend(req.dest_ops)
    ctx.notes[PINNED_NOTE] = sorted(set(pinned))
    return bg


def _resolve_breaks(what: str, entries: Sequence[Any], names: _Names, pinned: List[str]) -> List[str]:
    order = {n: i for i, n in enumerate(names.bg.ops)}
    out: List[str] = []
    for entry in entries:
        if isinstance(entry, NodePredicateBuilder):
            hits = names.matching(entry)
            if not hits:
                log.warning("%s(%r) matches no op of graph '%s'", what, entry, names.bg.name)
            out.extend(hits)
            continue
        group = entry if isinstance(entry, (list, tuple)) else [entry]
        candidates: List[str] = []
        for item in group:
            if isinstance(item, NodePredicateBuilder):
                candidates.extend(names.matching(item))
            else:
                names.check(what, item)
                found = names.ops_for(item)
                if not found:
                    log.warning("%s('%s'): the op was removed before lowering (constant-evaluated or folded); "
                                "no break", what, item)
                candidates.extend(found)
        if candidates:
            out.append(min(candidates, key=lambda n: order[n]))
    pinned.extend(out)
    return list(dict.fromkeys(out))


def pinned_ops(ctx: CompileContext) -> Set[str]:
    """Ops fusion must not absorb (their names carry a break or an override)."""
    return set(ctx.notes.get(PINNED_NOTE, ()))


# --- insert_nop ----------------------------------------------------------------------------------------------


def insert_nops(bg: BudaGraph, ctx: CompileContext) -> BudaGraph:
    """Insert the requested buffering nops (module docstring, pass 2); returns ``bg``."""
    requests = ctx.config.buffering_nops_to_insert
    if not requests:
        return bg
    inserted: List[str] = []
    for req in requests:
        src = req.src_op
        dests = []
        for d in req.dest_ops:
            dest = bg.ops.get(d)
            if dest is None or src not in dest.inputs:
                raise ConfigError(f"insert_nop('{src}', '{d}'): '{d}' does not read '{src}' in the lowered graph "
                                  f"(it reads {list(dest.inputs) if dest is not None else 'nothing: not an op'})")
            dests.append(dest)
        edges = [(d, i) for d in dests for i, name in enumerate(d.inputs) if name == src]
        tm_lists = [list(d.input_tms.get(i, [])) for d, i in edges]
        # TMs move to the src -> nop edge only when every edge has the same ones (else they stay on each
        # nop -> dest edge, which computes the same values).
        hoist = req.hoist_tms and all(t == tm_lists[0] for t in tm_lists)
        hoisted = tm_lists[0] if hoist else []
        chains = [dests] if not req.daisy_chain else [[d] for d in dests]
        feed = src
        for k, chain_dests in enumerate(chains):
            label = chain_dests[0].name if len(chain_dests) == 1 else f"{chain_dests[0].name}_fork"
            prev = feed
            for n in range(req.nop_count):
                name = _unique(bg, f"buffer_{n}_{src}_{label}")
                tms = hoisted if (k == 0 and n == 0) else []
                nop = BudaOp(name=name, type="nop", inputs=[prev], shape=_shape_after(bg.shape_of(prev), tms),
                             input_tms={0: list(tms)} if tms else {}, epoch_type=chain_dests[0].epoch_type,
                             tags={"buffering_nop": True, "ir_node": None, "ir_op_type": "nop"})
                bg.insert_before(nop, chain_dests[0].name)
                inserted.append(name)
                prev = name
            for d, i in edges:
                if any(d is c for c in chain_dests):
                    d.inputs[i] = prev
                    if hoist:
                        d.input_tms.pop(i, None)
            feed = prev  # daisy chain: the next destination's nops continue from this chain
    ctx.notes["inserted_nops"] = inserted
    _stable_topo(bg, [], "insert_nop")  # a daisy chain may pass destinations out of schedule order
    return bg


def _shape_after(shape: TileShape, tms: List[Any]) -> TileShape:
    if not tms:
        return shape
    t3 = tms_shape((shape.z, shape.rt, shape.ct), as_tms(tms))
    return TileShape(shape.w, t3.t, t3.rt, t3.ct)


def _unique(bg: BudaGraph, name: str) -> str:
    base, n = name, 0
    while name in bg.ops or name in bg.queues:
        n += 1
        name = f"{base}_{n}"
    return name


# --- add_schedule_constraint ---------------------------------------------------------------------------------


def apply_schedule_constraints(bg: BudaGraph, ctx: CompileContext) -> BudaGraph:
    """Reorder ``bg.ops`` to honour ``scheduler_constraints`` (module docstring, pass 3); returns ``bg``."""
    constraints = [c for c in ctx.config.scheduler_constraints if len(c) > 1]
    if not constraints:
        return bg
    for order in constraints:
        for name in order:
            if name not in bg.ops:
                raise ConfigError(f"add_schedule_constraint({order}): '{name}' is not an op of the compiled graph")
    _stable_topo(bg, [(a, b) for order in constraints for a, b in zip(order, order[1:])],
                 f"add_schedule_constraint: the constraints {constraints}")
    ctx.notes["schedule_constraints"] = constraints
    return bg


def _stable_topo(bg: BudaGraph, extra: List[Any], what: str) -> None:
    """Reorder ``bg.ops`` into the topological order (data edges plus ``extra`` (before, after) pairs) that
    keeps the current order wherever it can; ConfigError naming ``what`` on a cycle."""
    names = list(bg.ops)
    position = {n: i for i, n in enumerate(names)}
    preds: Dict[str, Set[str]] = {n: {i for i in op.inputs if i in bg.ops} for n, op in bg.ops.items()}
    for a, b in extra:
        preds[b].add(a)
    users: Dict[str, List[str]] = {n: [] for n in names}
    for n, ps in preds.items():
        for p in ps:
            users[p].append(n)
    remaining = {n: len(ps) for n, ps in preds.items()}
    ready = [position[n] for n in names if remaining[n] == 0]
    heapq.heapify(ready)
    out: List[str] = []
    while ready:
        n = names[heapq.heappop(ready)]
        out.append(n)
        for u in users[n]:
            remaining[u] -= 1
            if remaining[u] == 0:
                heapq.heappush(ready, position[u])
    if len(out) != len(names):
        done = set(out)
        stuck = [n for n in names if n not in done]
        raise ConfigError(f"{what} contradict the data flow (an op would have to run before its own input); "
                          f"ops involved: {stuck[:8]}")
    ops = dict(bg.ops)
    bg.ops.clear()
    for n in out:
        bg.ops[n] = ops[n]


def first_in_schedule(bg: BudaGraph, candidates: Iterable[str]) -> Optional[str]:
    order = {n: i for i, n in enumerate(bg.ops)}
    present = [c for c in candidates if c in order]
    return min(present, key=lambda n: order[n]) if present else None
