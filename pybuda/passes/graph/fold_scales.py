"""Fold a constant scale of a matmul's result into the weights of the linear layer that feeds it.

Attention multiplies its scores by ``1/sqrt(head_dim)``: ``softmax((Q @ K^T) * s)``. On the chip that
multiply is an elementwise op over the whole ``[heads, seq, seq]`` score tensor (at BERT-Large's
sequence 384, as many tiles as the softmax itself), placed beside the softmax in the busiest epoch of
every layer. Since ``(Q @ K^T) * s = (Q * s) @ K^T`` and ``Q = x @ W + b`` reaches the matmul only through
reshapes and transposes, the scale is the same as ``Q = x @ (W * s) + b * s``: computed once, at compile
time, by consteval (which keeps the trace to the original parameters), and the multiply disappears.

A scale is folded when it is a constant (every element equal) multiplying, or dividing, a two-operand
matmul that nothing else reads, one of whose operands is a linear layer (``matmul`` with compile-time
weight and bias) reached through data-movement ops each read only by the next. Training compiles are
left alone (there the weights change after every step), and so is the Ribbon policy, which reproduces
TT-Buda's compile for calibration (TT-Buda's published BERT placements kept the multiply). With ``s`` a
power of two (head dims 16, 64, 256) the folded weights are exact; otherwise they differ from the
original by one rounding.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import torch

from pybuda.ir.graph import CONSTANT, OP, Graph, Node
from pybuda.passes.context import CompileContext
from pybuda.passes.graph.consteval import compile_time_value
from pybuda.passes.graph.rewrite import Rewriter, source_through

#: Ops that move data without changing values: a scalar factor commutes with them.
DATA_MOVEMENT = frozenset({"reshape", "transpose", "squeeze", "unsqueeze"})


def fold_scales(graph: Graph, ctx: CompileContext) -> Graph:
    """Return a new graph in which every foldable constant scale of a matmul result is moved into the
    weights of the linear layer feeding it (see the module docstring), or ``graph`` itself."""
    if ctx.config.enable_training or not ctx.config.enable_consteval or ctx.reproduces_tt_buda:
        return graph
    users = graph.user_map()
    scaled_linears = {}  # linear name -> scale
    removed = {}  # scaling op name -> the matmul it scaled
    for node in graph.ops:
        plan = _plan(graph, users, node)
        if plan is not None and plan[0] not in scaled_linears:
            linear, scale, matmul = plan
            scaled_linears[linear] = scale
            removed[node.name] = matmul
    if not removed:
        return graph

    def rule(rw: Rewriter, node: Node, ops: Sequence[str]) -> Optional[str]:
        if node.name in removed:
            return rw.map[removed[node.name]]
        if node.name not in scaled_linears:
            return None
        s = rw.constant(f"{node.name}.scale", torch.tensor([scaled_linears[node.name]], dtype=torch.float32))
        scaled = [ops[0]] + [rw.op(f"{o}.scaled", "multiply", [o, s]) for o in ops[1:]]
        return rw.op(node.name, node.op_type, scaled, node.attrs, node.tags)

    folded = Rewriter(graph).run(rule)
    ctx.notes["folded_scales"] = len(removed)
    return folded


def _plan(graph: Graph, users, node: Node) -> Optional[Tuple[str, float, str]]:
    """(linear to scale, scale, scaled matmul) when ``node`` is a foldable scaling op, else None."""
    if node.kind != OP or node.op_type not in ("multiply", "divide") or len(node.operands) != 2:
        return None
    orders = ((0, 1), (1, 0)) if node.op_type == "multiply" else ((0, 1),)
    for m, c in orders:
        matmul, factor = graph[node.operands[m]], _scalar(graph, node.operands[c])
        if factor is None or factor == 0.0 or not math.isfinite(factor) or matmul.kind != OP or \
                matmul.op_type != "matmul":
            continue
        if len(matmul.operands) != 2 or users.get(matmul.name) != [node.name] or matmul.shape != node.shape:
            continue
        scale = factor if node.op_type == "multiply" else 1.0 / factor
        for operand in matmul.operands:
            linear = _linear_behind(graph, users, operand, matmul.name)
            if linear is not None:
                return linear, scale, matmul.name
    return None


def _scalar(graph: Graph, name: str) -> Optional[float]:
    """The value of a constant whose elements are all equal, else None."""
    node = graph[name]
    if node.kind != CONSTANT or not node.dtype.is_floating_point:
        return None
    value = graph.tensors[name]
    if value.numel() == 0 or not bool((value == value.reshape(-1)[0]).all()):
        return None
    return float(value.reshape(-1)[0])


def _linear_behind(graph: Graph, users, name: str, reader: str) -> Optional[str]:
    """The linear layer (``matmul`` with compile-time weight and bias) that ``name`` is, or reaches through
    data-movement ops each read only by the next, else None."""
    node = source_through(graph, users, name, reader, DATA_MOVEMENT)
    if node is not None and node.kind == OP and node.op_type == "matmul" and len(node.operands) in (2, 3) and \
            all(compile_time_value(graph, o) for o in node.operands[1:]):
        return node.name
    return None
