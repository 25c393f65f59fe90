"""TM cancelling and commuting, and hoisting TMs next to inputs and outputs onto the host.

Rules (applied until nothing changes):

- a ``reshape`` to the shape it already has, and a chain of ``transpose`` ops whose composition is the
  identity, disappear (``transpose(transpose(x))`` erased);
- a transpose chain that keeps the order of the non-size-1 dims moves no data: it becomes a ``reshape``;
- ``reshape(reshape(x))`` becomes one ``reshape``.

Then, as TT-Buda's "hoist transforms to inputs" and "output host TMs": a ``reshape``/``transpose``
chain that is the only use of a graph input (a zero ``pad`` too, and a lookup's ``lookup_digits``) is applied by the host before the push (the input queue
takes the transformed shape), and a chain that only feeds a graph output is applied by the host after
the read. The hoisted chains are recorded in ``ctx.input_host_tms`` / ``ctx.output_host_tms`` and on
the input/output node's ``tags["host_tms"]`` as ``[(op_type, attrs), ...]`` in application order.
An input tagged :data:`DEVICE_RESIDENT` keeps its TMs on the device: another program of a training
netlist writes its queue on the device (a saved activation, a gradient accumulator), so no host is there
to apply them.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

from pybuda.ir.graph import INPUT, OP, OUTPUT, Graph, Node
from pybuda.ops.common import normalize_dim
from pybuda.passes.context import CompileContext
from pybuda.passes.graph.rewrite import Rewriter

#: ``lookup_digits`` has no device form: it is the host's half of a chunked lookup (``lookups._lookup_onehot``).
HOISTABLE = frozenset({"reshape", "transpose", "pad", "lookup_digits"})
#: Input tag: the queue is written on the device by another program, so its TMs are never hoisted to the host.
DEVICE_RESIDENT = "device_resident"


def optimize_tms(graph: Graph, ctx: CompileContext) -> Graph:
    """Cancel/merge TMs, then hoist input and output TM chains to the host; returns a new graph."""
    for _ in range(8):
        before = _signature(graph)
        graph = _simplify(graph)
        if _signature(graph) == before:
            break
    graph = _hoist_inputs(graph, ctx)
    graph = _hoist_outputs(graph, ctx)
    return graph


def _signature(graph: Graph) -> Tuple:
    return tuple((n.name, n.op_type, tuple(n.operands), tuple(n.shape)) for n in graph)


# --- simplification -------------------------------------------------------------------------------------


def _perm_chain(rw: Rewriter, name: str) -> Tuple[str, List[int]]:
    """Walk back through transposes in the new graph: (source, perm) with out dim i = source dim perm[i]."""
    chain: List[Node] = []
    node = rw.node(name)
    while node.kind == OP and node.op_type == "transpose":
        chain.append(node)
        node = rw.node(node.operands[0])
    perm = list(range(len(node.shape)))
    for t in reversed(chain):
        rank = len(perm)
        d0, d1 = normalize_dim(t.attrs["dim0"], rank), normalize_dim(t.attrs["dim1"], rank)
        perm[d0], perm[d1] = perm[d1], perm[d0]
    return node.name, perm


def _order_preserving(shape: Sequence[int], perm: Sequence[int]) -> bool:
    order = [p for p in perm if shape[p] != 1]
    return order == sorted(order)


def _device_can_reshape(in_shape, out_shape) -> bool:
    """Whether lowering has a plan for ``reshape(in_shape -> out_shape)`` in one move. The capability check
    passed each reshape of a chain; their merge can need a move no plan covers, and then the chain stays
    as it is (lowering moves it op by op)."""
    from pybuda.passes.lower.gather_plan import unsupported_movement

    return unsupported_movement([tuple(in_shape)], "reshape", {"shape": tuple(out_shape)}) is None


def _simplify(graph: Graph) -> Graph:
    def rule(rw: Rewriter, node: Node, ops: Sequence[str]) -> Optional[str]:
        if node.op_type == "reshape":
            src = ops[0]
            while rw.node(src).kind == OP and rw.node(src).op_type == "reshape":
                src = rw.node(src).operands[0]
            if tuple(rw.shape(src)) == tuple(node.shape):
                return src
            if src != ops[0] and _device_can_reshape(rw.shape(src), node.shape):
                return rw.op(node.name, "reshape", [src], {"shape": tuple(node.shape)}, node.tags)
            return None
        if node.op_type == "transpose":
            new = rw.copy_op(node, ops)
            src, perm = _perm_chain(rw, new)
            if perm == sorted(perm):
                return src
            src_shape = rw.shape(src)
            if _order_preserving(src_shape, perm):
                base = src
                while rw.node(base).kind == OP and rw.node(base).op_type == "reshape":
                    base = rw.node(base).operands[0]
                if tuple(rw.shape(base)) == tuple(node.shape):
                    return base
                return rw.op(f"{node.name}.as_reshape", "reshape", [base], {"shape": tuple(node.shape)}, node.tags)
            return new
        return None

    return Rewriter(graph).run(rule)


# --- hoisting ---------------------------------------------------------------------------------------------


def _hoist_inputs(graph: Graph, ctx: CompileContext) -> Graph:
    users = graph.user_map()
    absorbed: Dict[str, str] = {}  # TM node -> input it collapses into
    chains: Dict[str, List[Node]] = {}
    # One push holds the whole microbatch in dim 0: beyond one sample, a TM touching dim 0 stays on the device.
    per_sample_only = int(getattr(ctx, "microbatch", 1) or 1) > 1
    for inp in graph.inputs:
        if inp.tags.get(DEVICE_RESIDENT):
            continue
        chain: List[Node] = []
        cur = inp.name
        while len(users[cur]) == 1:
            u = graph[users[cur][0]]
            if u.kind != OP or u.op_type not in HOISTABLE or u.operands != [cur] or \
                    (per_sample_only and _moves_dim0(graph, u)):
                break
            chain.append(u)
            cur = u.name
        if chain:
            chains[inp.name] = chain
            for n in chain:
                absorbed[n.name] = inp.name
    if not chains:
        return graph
    new = Graph(graph.name)
    new.microbatch = graph.microbatch
    for node in graph:
        if node.name in absorbed:
            continue
        if node.kind == INPUT and node.name in chains:
            chain = chains[node.name]
            n = new.add_input(node.name, chain[-1].shape, node.dtype, node.requires_grad)
            n.tags.update(node.tags)
            tms = list(node.tags.get("host_tms", [])) + [_host_tm(graph, c) for c in chain]
            n.tags["host_tms"] = tms
            n.tags.setdefault("original_shape", tuple(node.tags.get("original_shape", node.shape)))
            ctx.input_host_tms[node.name] = tms
            continue
        _copy(new, graph, node, {n: absorbed[n] for n in absorbed if chains[absorbed[n]][-1].name == n})
    return new


def _moves_dim0(graph: Graph, node: Node) -> bool:
    """True when a TM touches dim 0. The host applies hoisted TMs to the whole push, whose dim 0 holds the
    samples of the microbatch: such a TM would mix them, so it stays on the device (which runs it per sample)."""
    shape = graph[node.operands[0]].shape
    rank = len(shape)
    if node.op_type == "transpose" and rank:
        return 0 in (normalize_dim(node.attrs["dim0"], rank), normalize_dim(node.attrs["dim1"], rank))
    if node.op_type == "reshape":
        target = tuple(node.attrs["shape"])
        return not (shape and target and shape[0] == target[0])
    if node.op_type == "pad":
        # Pads count from the last dim: a pad reaching dim 0 would pad the samples themselves.
        from pybuda.ops.tm import _pad_plan

        try:
            return any(normalize_dim(d, rank) == 0 for d, _, _ in _pad_plan(rank, node.attrs))
        except (ValueError, KeyError):
            return True
    return False


def _host_tm(graph: Graph, node: Node) -> Tuple[str, dict]:
    """``(op_type, attrs)`` of a hoisted input TM. The host applies it to the whole push, whose dim 0 is
    the microbatch while the graph may be traced for one sample: a reshape that keeps dim 0 records it as
    -1 so it reshapes any number of samples."""
    attrs = dict(node.attrs)
    if node.op_type == "reshape":
        src = graph[node.operands[0]].shape
        target = tuple(attrs["shape"])
        if src and target and src[0] == target[0] and math.prod(src[1:]) == math.prod(target[1:]):
            attrs["shape"] = (-1,) + target[1:]
    return node.op_type, attrs


def _hoist_outputs(graph: Graph, ctx: CompileContext) -> Graph:
    users = graph.user_map()
    redirect: Dict[str, Tuple[str, List[Tuple[str, dict]]]] = {}
    for out in graph.outputs:
        tms: List[Tuple[str, dict]] = []
        src = out.operands[0]
        while True:
            p = graph[src]
            if p.kind != OP or p.op_type not in HOISTABLE or len(users[src]) != 1:
                break
            if graph[p.operands[0]].kind != OP:
                break  # keep one TM on device between an input/parameter and an output
            tms.insert(0, _host_tm(graph, p))
            src = p.operands[0]
        if tms:
            redirect[out.name] = (src, tms)
    if not redirect:
        return graph
    new = Graph(graph.name)
    new.microbatch = graph.microbatch
    for node in graph:
        if node.kind == OUTPUT and node.name in redirect:
            src, tms = redirect[node.name]
            o = new.add_output(node.name, src)
            o.tags.update(node.tags)
            o.tags["host_tms"] = tms + list(node.tags.get("host_tms", []))
            o.tags.setdefault("original_shape", tuple(node.shape))
            ctx.output_host_tms[node.name] = o.tags["host_tms"]
            continue
        _copy(new, graph, node, {})
    pruned = Rewriter(new)
    pruned.new = new
    return pruned.prune()


def _copy(new: Graph, old: Graph, node: Node, rename: Dict[str, str]) -> None:
    if node.kind == INPUT:
        n = new.add_input(node.name, node.shape, node.dtype, node.requires_grad)
    elif node.kind == "parameter":
        n = new.add_parameter(node.name, old.tensors[node.name], node.requires_grad)
    elif node.kind == "constant":
        n = new.add_constant(node.name, old.tensors[node.name])
    elif node.kind == OP:
        n = new.add_op(node.name, node.op_type, [rename.get(o, o) for o in node.operands], node.attrs, node.tags)
    else:
        n = new.add_output(node.name, rename.get(node.operands[0], node.operands[0]))
    n.tags.update(node.tags)
