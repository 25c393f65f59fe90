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

SEED_OPS = frozenset({"conv2d", "conv2d_transpose", "max_pool2d", "avg_pool2d"})
REDUCE_OPS = frozenset({"reduce_sum", "reduce_avg", "reduce_max"})
#: Layout-agnostic data movement carried in NHWC (their dim attributes are remapped).
AXIS_OPS = {"concatenate": "axis", "interleave": "axis", "index": "dim"}
#: NCHW -> NHWC as the transpose pair this pass (and conv2d_transpose's decomposition) writes, and back.
_TO_NHWC = ((1, 2), (2, 3))
_TO_NCHW = ((2, 3), (1, 2))
#: NCHW dim -> NHWC dim.
_DIM_MAP = {0: 0, 1: 3, 2: 1, 3: 2}


def convert_convs_to_channel_last(graph: Graph, ctx: CompileContext) -> Graph:
    """Rewrite NCHW convolution regions into NHWC; returns a new graph (unchanged if there are none).

    A zero ``pad`` whose only readers are convolutions is folded into their padding first (TT-Buda's
    "fuse pad + conv"), so TF-style asymmetric "same" padding costs nothing.
    """
    graph = _fold_pads_into_convs(graph)
    region, pairs = _region(graph)
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
        if node.kind == OP and node.name in pairs:
            src = pairs[node.name]
            if node.name in region:  # NHWC conv output back to NCHW: the region keeps the NHWC value
                nhwc[node.name] = rw.map[src]
                rw.map[node.name] = nhwc[node.name]
            else:  # NCHW region value to NHWC: the value itself
                rw.map[node.name] = nhwc[src]
        elif node.kind == OP and node.name in region:
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


def _region(graph: Graph):
    """Names of the NCHW op nodes to compute in NHWC, and the layout-conversion transpose pairs to drop:
    ``{name: NHWC source}`` for a pair turning an NHWC value into NCHW (whose result then joins the region:
    the channel-last convolution a ``conv2d_transpose`` decomposes into) or an NCHW region value into NHWC."""
    region: Set[str] = set()
    pairs: Dict[str, str] = {}
    users = graph.user_map()

    def pair_source(node: Node, dims) -> Optional[str]:
        if node.op_type != "transpose" or len(node.shape) != 4 or _dims(node) != dims[1]:
            return None
        first = graph[node.operands[0]]
        if first.kind != OP or first.op_type != "transpose" or _dims(first) != dims[0]:
            return None
        return first.operands[0]

    def passes_through(node: Node) -> bool:
        family = registry.get(node.op_type).family
        if family in ("eltwise_unary", "eltwise_binary"):
            return all(len(graph[o].shape) <= 4 for o in node.operands)
        if node.op_type in AXIS_OPS:
            return True
        if node.op_type == "pad":
            return not node.attrs.get("channel_last") and len(node.attrs["pad"]) in (2, 4)
        return node.op_type in REDUCE_OPS and node.attrs.get("stride", -1) == -1

    changed = True
    while changed:
        changed = False
        for node in graph:
            if node.kind != OP or node.name in region:
                continue
            add = False
            if node.op_type in SEED_OPS:
                add = not node.attrs.get("channel_last", False) and len(graph[node.operands[0]].shape) == 4
            elif len(node.shape) == 4:
                src = pair_source(node, _TO_NCHW)
                if src is not None and graph[src].kind == OP and (
                        graph[src].op_type in SEED_OPS and graph[src].attrs.get("channel_last")):
                    pairs[node.name] = src  # an NHWC convolution's output converted back to NCHW
                    add = True
                elif passes_through(node):
                    if any(o in region for o in node.operands):
                        add = True
                    elif node.op_type not in REDUCE_OPS:
                        # Pulled in from below: every reader computes in NHWC (a convolution's activation or a
                        # region op), so converting the operands instead costs nothing more (graph inputs and
                        # constants convert on the host or at compile time).
                        readers = [graph[u] for u in users[node.name]]
                        on_device = [o for o in node.operands if graph[o].kind == OP and _spatial(graph[o].shape)]
                        add = (len(on_device) <= 1 and bool(readers)
                               and all(_reads_nhwc(r, node.name, region, graph, users) for r in readers))
            if add:
                region.add(node.name)
                changed = True
    # NCHW -> NHWC pairs on region values (in front of the decomposed conv2d_transpose) become the value itself.
    for node in graph:
        if node.kind == OP and node.name not in region:
            src = pair_source(node, _TO_NHWC)
            if src is not None and src in region:
                pairs[node.name] = src
    return region, pairs


def _spatial(shape) -> bool:
    """Whether an NCHW value of ``shape`` needs a real conversion (not just a reshape) to NHWC."""
    s = _as4d(shape)
    return s is not None and s[2] * s[3] > 1


def _dims(node: Node):
    rank = len(node.shape)
    return tuple(sorted((normalize_dim(node.attrs["dim0"], rank), normalize_dim(node.attrs["dim1"], rank))))


def _reads_nhwc(reader: Node, name: str, region: Set[str], graph: Graph, users) -> bool:
    """Whether ``reader`` takes value ``name`` in NHWC once ``name`` is in the region: an NCHW convolution's
    activation, a region op, or the NCHW -> NHWC transpose pair in front of a decomposed conv2d_transpose."""
    if reader.kind != OP:
        return False
    if reader.op_type == "transpose" and len(reader.shape) == 4 and _dims(reader) == _TO_NHWC[0]:
        seconds = [graph[u] for u in users[reader.name]]
        return bool(seconds) and all(u.kind == OP and u.op_type == "transpose" and _dims(u) == _TO_NHWC[1]
                                     for u in seconds)
    if reader.op_type in SEED_OPS and not reader.attrs.get("channel_last", False):
        return reader.operands[0] == name and name not in reader.operands[1:]
    return reader.name in region


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
    if node.op_type in AXIS_OPS:
        attrs = dict(node.attrs)
        key = AXIS_OPS[node.op_type]
        attrs[key] = _DIM_MAP[normalize_dim(attrs[key], 4)]
        return rw.op(node.name, node.op_type, [to_nhwc(o) for o in node.operands], attrs, node.tags)
    if node.op_type == "pad":
        attrs = dict(node.attrs)
        attrs["channel_last"] = True
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
