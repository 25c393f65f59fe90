"""Constant evaluation (consteval): compute, at compile time, every op fed only by parameters and
constants, as TT-Buda did for weight transposes, reshapes and batchnorm folding.

The folded value becomes a new leaf: a ``constant`` when only constants fed it, else a ``parameter``
(named after the op it replaces) whose trace - the source parameters and the ops replayed on them - is
kept in ``ctx.consteval_trace`` and on the node's tags, so a runtime that updates parameters can replay
it (TT-Buda's "consteval trace").

Values grow only where that is cheap: an op whose result is much larger than its inputs (a broadcast of
a bias to a whole activation) is left in the graph, because the lowering expresses broadcasts as tile
TMs that cost no memory.
"""

from __future__ import annotations

from typing import Any, Dict, List

import torch

from pybuda.ir.graph import CONSTANT, OP, PARAMETER, RUNTIME_UPDATED, Graph
from pybuda.ops import registry
from pybuda.passes.context import CompileContext

#: Fold an op only if its result has at most this many times the elements of its largest input (or is small).
GROWTH_LIMIT = 4
SMALL_ELEMENTS = 1 << 16


def compile_time_value(graph: Graph, name: str) -> bool:
    """True when ``name`` is known at compile time, so :func:`evaluate_constants` will compute it: a parameter no
    runtime updates, a constant, or an op computed only from such values (a shared initializer behind an ONNX
    Identity, weights with a batch norm folded in)."""
    for node in graph.ancestry(name):
        if node.kind == PARAMETER:
            if node.tags.get(RUNTIME_UPDATED):
                return False
        elif node.kind != CONSTANT and (node.kind != OP or not node.operands):
            return False
    return True


def evaluate_constants(graph: Graph, ctx: CompileContext) -> Graph:
    """Fold parameter/constant-only ops into new leaves; returns a new graph."""
    known: Dict[str, torch.Tensor] = {}
    traces: Dict[str, Dict[str, Any]] = {}
    for node in graph:
        if node.kind == PARAMETER and node.tags.get(RUNTIME_UPDATED):
            continue  # trained weights and optimizer state change after compile: never fold them
        if node.kind in (PARAMETER, CONSTANT):
            known[node.name] = graph.tensors[node.name]
            traces[node.name] = {"sources": [node.name] if node.kind == PARAMETER else [], "ops": []}
    foldable: Dict[str, bool] = {}
    for node in graph:
        if node.kind != OP or not all(o in known for o in node.operands) or not node.operands:
            continue
        biggest = max(known[o].numel() for o in node.operands)
        out_numel = 1
        for d in node.shape:
            out_numel *= d
        if out_numel > SMALL_ELEMENTS and out_numel > GROWTH_LIMIT * biggest:
            continue
        with torch.no_grad():
            value = registry.evaluate(node.op_type, [known[o] for o in node.operands], node.attrs)
        known[node.name] = value
        sources: List[str] = []
        for o in node.operands:
            for s in traces[o]["sources"]:
                if s not in sources:
                    sources.append(s)
        ops = [op for o in node.operands for op in traces[o]["ops"]]
        ops.append({"name": node.name, "op_type": node.op_type, "attrs": dict(node.attrs),
                    "operands": list(node.operands)})
        traces[node.name] = {"sources": sources, "ops": ops}
        foldable[node.name] = True
    if not foldable:
        return graph

    users = graph.user_map()
    new = Graph(graph.name)
    new.microbatch = graph.microbatch
    for node in graph:
        if node.name in foldable:
            if any(u not in foldable for u in users[node.name]):
                _add_leaf(new, graph, node, known[node.name], traces[node.name], ctx)
            continue
        if node.kind in (PARAMETER, CONSTANT):
            if users[node.name] and all(u in foldable for u in users[node.name]):
                continue  # only feeds folded ops
            leaf = (new.add_parameter(node.name, graph.tensors[node.name], node.requires_grad)
                    if node.kind == PARAMETER else new.add_constant(node.name, graph.tensors[node.name]))
            leaf.tags.update(node.tags)
        elif node.kind == OP:
            new.add_op(node.name, node.op_type, node.operands, node.attrs, node.tags)
        elif node.kind == "input":
            n = new.add_input(node.name, node.shape, node.dtype, node.requires_grad)
            n.tags.update(node.tags)
        else:
            out = new.add_output(node.name, node.operands[0])
            out.tags.update(node.tags)
    ctx.notes["consteval_folded_ops"] = ctx.notes.get("consteval_folded_ops", 0) + len(foldable)
    return new


def _add_leaf(new: Graph, old: Graph, node, value: torch.Tensor, trace: Dict[str, Any], ctx: CompileContext) -> None:
    value = value.detach()
    if trace["sources"]:
        requires_grad = any(old.nodes[s].requires_grad for s in trace["sources"])
        leaf = new.add_parameter(node.name, value, requires_grad)
        leaf.tags["consteval"] = trace
        ctx.consteval_trace[node.name] = trace
    else:
        leaf = new.add_constant(node.name, value)
    leaf.tags.update({k: v for k, v in node.tags.items() if k != "consteval"})
