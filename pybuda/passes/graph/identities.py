"""Drop elementwise ops that give back their operand: ``x * 1``, ``x / 1``, ``x + 0``, ``x - 0``.

Models write them (BART's ``inputs_embeds * embed_scale`` with ``embed_scale = 1.0``, a residual scaled by a
configured 1.0, a bias of zeros added as a constant). In the framework they are exact; on the chip each is an
op that costs a core and, worse, changes the value: a multiply reads its operands through the matrix unit's
source registers, which keep 19 bits of a Float32 datum (every fidelity) and fewer at LoFi, so ``x * 1``
truncates ``x``. The op is dropped when its other operand is a constant whose every element is the identity,
and the result has the operand's shape and dtype (a broadcast that widens ``x`` is kept).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from pybuda.ir.graph import CONSTANT, Graph, Node
from pybuda.passes.context import CompileContext
from pybuda.passes.graph.rewrite import Rewriter

#: op type -> (identity element, whether it may stand on either side: x * 1 = 1 * x, but only x - 0 = x)
IDENTITIES = {"multiply": (1.0, True), "add": (0.0, True), "divide": (1.0, False), "subtract": (0.0, False)}


def drop_identity_ops(graph: Graph, ctx: Optional[CompileContext] = None) -> Graph:
    """A new graph without the identity ops of the module docstring, or ``graph`` itself when it has none."""
    if not any(_kept_operand(graph, node, node.operands) is not None for node in graph.ops):
        return graph
    return Rewriter(graph).run(lambda rw, node, operands: _kept_operand(rw.new, node, operands))


def _kept_operand(graph: Graph, node: Node, operands: Sequence[str]) -> Optional[str]:
    """The operand that op ``node`` passes through unchanged, or None; ``operands`` name its operands in
    ``graph`` (the node's own graph, or the one a rewrite is building)."""
    identity = IDENTITIES.get(node.op_type)
    if identity is None or len(operands) != 2:
        return None
    value, commutes = identity
    sides = ((0, 1), (1, 0)) if commutes else ((0, 1),)
    for keep, other in sides:
        kept, const = graph[operands[keep]], graph[operands[other]]
        if const.kind == CONSTANT and tuple(kept.shape) == tuple(node.shape) and kept.dtype == node.dtype \
                and _all_equal(graph.tensors[const.name], value):
            return kept.name
    return None


def _all_equal(t: torch.Tensor, value: float) -> bool:
    return t.numel() > 0 and bool((t == value).all())
