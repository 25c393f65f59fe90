"""Channel-last layout for convolutional regions.

Convolutions and pools lower to matmuls over "pixels x channels" (im2col, see
:mod:`pybuda.passes.lower.to_tiles`), so their activations are best kept channel-last: ``[N, H, W, C]`` puts
channels on tile columns. This pass rewrites every NCHW ``conv2d``/``max_pool2d``/``avg_pool2d`` into
its ``channel_last=True`` form and carries the NHWC layout through the ops around them that do not care
about layout (elementwise ops, per-channel scale/shift from batchnorm, spatial reductions), so that
nothing is converted between two convolutions. Where an NHWC value meets an op that needs NCHW (or a
graph output), a transpose pair converts it back; where an NCHW value enters the region, the inverse
pair converts it in. Later, :mod:`pybuda.passes.graph.optimize_tms` removes pairs that cancel and hoists the
ones next to graph inputs and outputs to the host, as TT-Buda did for convolution inputs.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Set

from pybuda.ir.graph import OP, Graph, Node
from pybuda.ops import registry
from pybuda.ops.common import normalize_dim
from pybuda.passes.context import CompileContext
from pybuda.passes.graph.rewrite import Rewriter

SEED_OPS = frozenset({"conv2d", "max_pool2d", "avg_pool2d"})
REDUCE_OPS = frozenset({"reduce_sum", "reduce_avg", "reduce_max"})
#: NCHW dim -> NHWC dim.
_DIM_MAP = {0: 0, 1: 3, 2: 1, 3: 2}


def convert_convs_to_channel_last(graph: Graph, ctx: CompileContext) -> Graph:
    """Rewrite NCHW convolution regions into NHWC; returns a new graph (unchanged if there are none).

    A zero ``pad`` whose only readers are convolutions is folded into their padding first (TT-Buda's
    "fuse pad + conv"), so TF-style asymmetric "same" padding costs nothing.
    """
    graph = _fold_pads_into_convs(graph)
    region = _region(graph)
    if not region:
        return graph
    rw = Rewriter(graph)
    nhwc: Dict[str, str] = {}  # old node name -> new name of its NHWC value
    nchw_cache: Dict[str, str] = {}

    def to_nhwc(old: str) -> str:
        if old in region:
            return nhwc[old]
        if old in nhwc:
            return nhwc[old]
        new = rw.map[old]
        shape = _as4d(rw.shape(new))
        if shape is None:
            raise ctx.error(f"cannot convert '{old}' of shape {list(rw.shape(new))} to channel-last")
        if tuple(rw.shape(new)) != shape:
            new = rw.op(f"{old}.as4d", "reshape", [new], {"shape": shape})
        n, c, h, w = shape
        if h == 1 and w == 1:
            out = rw.op(f"{old}.to_nhwc", "reshape", [new], {"shape": (n, 1, 1, c)})
        else:
            t = rw.op(f"{old}.to_nhwc_0", "transpose", [new], {"dim0": 1, "dim1": 2})
            out = rw.op(f"{old}.to_nhwc", "transpose", [t], {"dim0": 2, "dim1": 3})
        nhwc[old] = out
        return out

    def to_nchw(old: str) -> str:
        if old not in region:
            return rw.map[old]
        if old in nchw_cache:
            return nchw_cache[old]
        src = nhwc[old]
        n, h, w, c = rw.shape(src)
        if h == 1 and w == 1:
            out = rw.op(f"{old}.to_nchw", "reshape", [src], {"shape": (n, c, 1, 1)})
        else:
            t = rw.op(f"{old}.to_nchw_0", "transpose", [src], {"dim0": 2, "dim1": 3})
            out = rw.op(f"{old}.to_nchw", "transpose", [t], {"dim0": 1, "dim1": 2})
        nchw_cache[old] = out
        return out

    for node in graph:
        if node.kind == OP and node.name in region:
            nhwc[node.name] = _rewrite_region_op(rw, node, to_nhwc)
            rw.map[node.name] = nhwc[node.name]
        elif node.kind == OP:
            operands = [to_nchw(o) for o in node.operands]
            rw.map[node.name] = rw.copy_op(node, operands)
        elif node.kind == "output":
            out = rw.new.add_output(node.name, to_nchw(node.operands[0]))
            out.tags.update(node.tags)
            rw.map[node.name] = out.name
        else:
            rw.map[node.name] = rw.copy_leaf(node)
    ctx.notes["channel_last_ops"] = len(region)
    return rw.prune()


def _as4d(shape: Sequence[int]) -> Optional[tuple]:
    if len(shape) > 4:
        return None
    return (1,) * (4 - len(shape)) + tuple(shape)


def _region(graph: Graph) -> Set[str]:
    """Names of the NCHW op nodes to compute in NHWC."""
    region: Set[str] = set()
    for node in graph:
        if node.kind != OP:
            continue
        if node.op_type in SEED_OPS:
            if not node.attrs.get("channel_last", False) and len(graph[node.operands[0]].shape) == 4:
                region.add(node.name)
            continue
        if len(node.shape) != 4:
            continue
        if not any(o in region for o in node.operands):
            continue
        family = registry.get(node.op_type).family
        if family == "eltwise_unary":
            region.add(node.name)
        elif family == "eltwise_binary":
            region.add(node.name)
        elif node.op_type in REDUCE_OPS and node.attrs.get("stride", -1) == -1:
            region.add(node.name)
    return region


def _rewrite_region_op(rw: Rewriter, node: Node, to_nhwc) -> str:
    if node.op_type in SEED_OPS:
        operands = [to_nhwc(node.operands[0])] + [rw.map[o] for o in node.operands[1:]]
        attrs = dict(node.attrs)
        attrs["channel_last"] = True
        return rw.op(node.name, node.op_type, operands, attrs, node.tags)
    if node.op_type in REDUCE_OPS:
        attrs = dict(node.attrs)
        attrs["dim"] = _DIM_MAP[normalize_dim(attrs["dim"], 4)]
        return rw.op(node.name, node.op_type, [to_nhwc(node.operands[0])], attrs, node.tags)
    return rw.op(node.name, node.op_type, [to_nhwc(o) for o in node.operands], node.attrs, node.tags)


def _fold_pads_into_convs(graph: Graph) -> Graph:
    users = graph.user_map()
    folds = {}
    for node in graph.ops:
        if node.op_type != "pad" or node.attrs.get("mode", "constant") != "constant" or node.attrs.get("value", 0.0):
            continue
        if node.attrs.get("channel_last") or len(node.attrs["pad"]) not in (2, 4):
            continue
        readers = [graph[u] for u in users[node.name]]
        if readers and all(r.op_type == "conv2d" and not r.attrs.get("channel_last") and r.operands[0] == node.name
                           and node.name not in r.operands[1:] for r in readers):
            folds[node.name] = tuple(node.attrs["pad"]) + (0, 0) * (2 - len(node.attrs["pad"]) // 2)
    if not folds:
        return graph

    def rule(rw: Rewriter, node: Node, ops):
        if node.name in folds:
            return ops[0]
        if node.op_type == "conv2d" and node.operands[0] in folds:
            extra = folds[node.operands[0]]
            attrs = dict(node.attrs)
            attrs["padding"] = tuple(a + b for a, b in zip(attrs["padding"], extra))
            return rw.op(node.name, node.op_type, ops, attrs, node.tags)
        return None

    return Rewriter(graph).run(rule)
