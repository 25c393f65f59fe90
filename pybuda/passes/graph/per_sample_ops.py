"""Split ops the chip runs one sample at a time when several samples reach them inside one graph.

The device lowers convolutions and pools for one image ``[1, H, W, C]`` per run (an im2col picker over
one sample's pixels). A graph can still hold several images on dim 0 of such an op:

- a model whose ops mix the samples of a microbatch is compiled with the whole microbatch inside the
  graph (:func:`pybuda.passes.graph.microbatch.batch_mixing_ops`), so its convolutions see the batch;
- a model may itself put images on dim 0 within one sample (frames of a clip, patches, a batch built
  by a reshape or a concat).

Each such op becomes one op per image on a slice of dim 0, joined again by a concat on dim 0: the same
values (the op never reads across dim 0: the batch-mixing analysis sends an op whose kernel comes from
the batch elsewhere), and every piece is an op the device already runs. Slices and the concat are
ordinary data movement, which lowering splices or picks.
"""

from __future__ import annotations

from typing import List, Optional

from pybuda.ir.graph import Graph, Node
from pybuda.passes.context import CompileContext
from pybuda.passes.graph.rewrite import Rewriter

#: Ops whose device lowering takes one sample on dim 0 of operand 0 (operands past it are shared weights).
PER_SAMPLE_OPS = ("conv2d", "max_pool2d", "avg_pool2d")


def _images(graph: Graph, node: Node) -> int:
    """How many images dim 0 of ``node``'s activation holds (1 when it needs no split)."""
    if node.op_type not in PER_SAMPLE_OPS:
        return 1
    shape = tuple(graph[node.operands[0]].shape)
    return shape[0] if len(shape) == 4 and shape[0] > 1 else 1


def split_per_sample_ops(graph: Graph, ctx: CompileContext) -> Graph:
    """Rewrite every op of :data:`PER_SAMPLE_OPS` whose activation holds ``n > 1`` images on dim 0 into
    ``n`` ops on the slices ``[k:k+1]`` and a concat on dim 0 (named as the op, so its users and the
    reports still find it). Returns ``graph`` itself when there is none."""
    if not any(_images(graph, node) > 1 for node in graph.ops):
        return graph

    def rule(rw: Rewriter, node: Node, operands: List[str]) -> Optional[str]:
        n = _images(graph, node)
        if n == 1:
            return None
        pieces = []
        for k in range(n):
            piece = rw.op(f"{node.name}.sample{k}.in", "index", [operands[0]],
                          {"dim": 0, "start": k, "stop": k + 1, "stride": 1}, {"per_sample_split": node.name})
            pieces.append(rw.op(f"{node.name}.sample{k}", node.op_type, [piece] + operands[1:], node.attrs,
                                dict(node.tags, per_sample_split=node.name)))
        return rw.op(node.name, "concatenate", pieces, {"axis": 0}, {"per_sample_split": node.name})

    return Rewriter(graph).run(rule)
