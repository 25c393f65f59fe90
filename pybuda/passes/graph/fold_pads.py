"""Fold an explicit constant ``pad`` into the padding of the 2-D convolution or pool that reads it.

Frameworks without asymmetric or "same" padding per op write it as a separate pad: Keras'
``ZeroPadding2D`` in front of ResNet-50's stem max pool, tf2onnx's ``Pad`` before a pool, ONNX models
exported with explicit ``Pad`` nodes. On the chip a pad on the device is a data-movement op of its own
(a picker over the whole activation) and makes the window op read a larger, re-laid-out tensor; as the
window op's own padding it costs nothing, because the im2col picker simply never picks the padded
positions. TVM, which TT-Buda's frontends went through, has the same rewrite (``FoldExplicitPadding``).

A fold is made only where it keeps every value exact:

- ``conv2d`` (not transposed): a zero pad is the convolution's own zero padding, added to it;
- ``avg_pool2d`` counting padded positions (``count_include_pad``): a zero pad is its own padding;
- ``max_pool2d``: a ``-inf`` pad never wins, like its own padding; a zero pad does neither only when the
  input can never be negative (:func:`~pybuda.passes.lower.common.non_negative`, the same check the pool's
  lowering makes: a ReLU clamping at 0, a sigmoid, ...) and every window still holds a real element
  (padding at most half the kernel), so the maximum is the same.

Pools fold only when they have no padding of their own and no ``ceil_mode`` (whose last-window rule
depends on where the input ends), and the pad must be read by that op alone.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

from pybuda.ir.graph import OP, Graph, Node
from pybuda.passes.context import CompileContext
from pybuda.passes.lower.common import non_negative
from pybuda.passes.graph.rewrite import Rewriter

def fold_pads(graph: Graph, ctx: CompileContext) -> Graph:
    """Return a new graph in which every foldable pad is merged into its convolution or pool (see the
    module docstring), or ``graph`` itself when there is none."""
    users = graph.user_map()
    folds = {}
    for node in graph.ops:
        pads = _foldable(graph, users, node)
        if pads is not None:
            folds[node.name] = pads
    if not folds:
        return graph

    def rule(rw: Rewriter, node: Node, ops: Sequence[str]) -> Optional[str]:
        if node.name not in folds:
            return None
        pad_node = graph[node.operands[0]]
        merged = tuple(a + b for a, b in zip(node.attrs["padding"], folds[node.name]))
        return rw.op(node.name, node.op_type, [rw.map[pad_node.operands[0]]] + list(ops[1:]),
                     dict(node.attrs, padding=merged), node.tags)

    folded = Rewriter(graph).run(rule)
    ctx.notes["folded_pads"] = len(folds)
    return folded


def _foldable(graph: Graph, users, node: Node) -> Optional[Tuple[int, int, int, int]]:
    """The (left, right, top, bottom) pad ``node`` absorbs from the pad it reads, or None."""
    if node.kind != OP or node.op_type not in ("conv2d", "max_pool2d", "avg_pool2d") or not node.operands:
        return None
    pad = graph[node.operands[0]]
    if pad.kind != OP or pad.op_type != "pad" or users.get(pad.name) != [node.name]:
        return None
    if pad.attrs.get("mode") != "constant" or pad.attrs.get("channel_last") or node.attrs.get("channel_last"):
        return None
    if len(pad.shape) != 4 or len(pad.attrs["pad"]) not in (2, 4):
        return None
    pads = tuple(int(p) for p in pad.attrs["pad"]) + (0, 0)[:4 - len(pad.attrs["pad"])]
    value = float(pad.attrs.get("value", 0.0))
    if node.op_type == "conv2d":
        return pads if value == 0.0 else None
    if any(node.attrs["padding"]) or node.attrs.get("ceil_mode"):
        return None
    if node.op_type == "avg_pool2d":
        return pads if value == 0.0 and node.attrs.get("count_include_pad") else None
    if value == -math.inf:
        return pads
    kh, kw = node.attrs["kernel_size"]
    if tuple(node.attrs.get("dilation", (1, 1))) != (1, 1):
        return None
    within_half = max(pads[:2]) <= kw // 2 and max(pads[2:]) <= kh // 2
    return pads if value == 0.0 and within_half and non_negative(graph, pad.operands[0]) else None
