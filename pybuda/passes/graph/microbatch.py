"""Make the microbatch explicit: rewrite the graph for one sample (dim 0 of every activation -> 1).

TT-Buda traced with the microbatch as dim 0 of every input and ran the lowered graph once per sample
(``input_count`` = microbatch in the netlist). Here the rule is explicit: every graph input must have
dim 0 equal to the microbatch (or 1, for a graph already traced for one sample, as TTDevices do), every
value computed from an input is "batched" and keeps dim 0 as its batch dim, and the device graph is the
same graph with that dim set to 1. In a graph traced for the whole microbatch, an op that mixes samples
(a reshape that merges the batch dim, a transpose or reduction over dim 0 ...) cannot run one sample at
a time: :func:`batch_mixing_ops` finds every such op statically (from shapes and attributes, without
running anything), so a caller can keep the whole microbatch inside the graph instead
(:mod:`pybuda.runtime.backend_api`); :func:`strip_microbatch` reports them as a CompileError naming the
op. A graph traced for one sample is one sample's computation throughout, so its ops are kept as they
are whatever their dim 0 (the backward of a conv reshapes a sample's weight gradient to the weight's
shape). Parameters and constants are shared by all samples and are unchanged.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

from pybuda.errors import OpError
from pybuda.ir.graph import CONSTANT, INPUT, OP, OUTPUT, PARAMETER, Graph
from pybuda.passes.context import CompileContext

#: Tag on the inputs of a graph derived from a forward traced for one sample (its backward): it is one sample's
#: computation whatever the dim 0 of its inputs.
TRACED_PER_SAMPLE = "traced_per_sample"
#: Attributes that name dims an op works along: on dim 0 of a batched value the op reads across samples
#: (a softmax, cumsum, flip-like transpose or index over the batch) even when shapes stay the same.
DIM_ATTRS = ("dim", "axis", "dim0", "dim1")
#: Ops whose operands past the first are weights (a matmul's right side, a conv's kernel, an embedding's
#: table): a batched one of rank <= 2 puts the batch on a contraction dim.
_WEIGHTED = ("matmul", "sparse_matmul", "conv2d", "conv2d_transpose", "conv3d", "embedding")


def _dims(value: Any) -> List[int]:
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _reads_across_batch(node, graph: Graph, batched: set) -> Optional[str]:
    """Why ``node`` (with batched operands, traced for the whole microbatch) reads across dim 0, or None
    when its attributes and operand roles keep samples apart (its shapes are checked by the caller)."""
    first = next(graph[o] for o in node.operands if o in batched)
    rank = len(first.shape)
    for key in DIM_ATTRS:
        for d in _dims(node.attrs.get(key)):
            if rank and d % max(rank, 1) == 0 and -rank <= d < rank:
                return f"works along dim 0 ({key}={d}), the batch"
    if node.op_type in _WEIGHTED:
        for i, o in enumerate(node.operands):
            if i and o in batched and (node.op_type not in ("matmul", "sparse_matmul")
                                       or len(graph[o].shape) <= 2):
                return f"operand {i} (a weight/contraction operand) is computed from the batch"
        if node.op_type == "matmul" and node.operands[0] in batched and len(first.shape) == 1:
            return "contracts over the batch"
    return None


def traced_for_microbatch(graph: Graph, mb: int) -> bool:
    """Whether ``graph`` was traced for the whole microbatch ``mb``: some input has dim 0 == mb, and it is not a
    backward that says its forward was traced for one sample (TRACED_PER_SAMPLE on its inputs: its saved
    activations are no samples, and one whose dim 0 happens to equal mb, a [heads, ...] value after a bmm's
    reshape, must not make it look batched)."""
    if any(n.tags.get(TRACED_PER_SAMPLE) for n in graph.inputs):
        return False
    return any(n.shape and n.shape[0] == mb for n in graph.inputs)


def _per_sample(graph: Graph, mb: int, on_mixing: Callable[[str, str, str], None]) -> Graph:
    """The per-sample graph of ``graph`` (see the module docstring); ``on_mixing(op, op_type, why)`` is
    called for every op that mixes the samples of a graph traced for the whole microbatch (the op is then
    replaced by a constant placeholder of its per-sample shape, so the walk goes on and finds them all)."""
    new = Graph(graph.name)
    new.microbatch = mb
    batched = set()
    # Traced for the whole microbatch, or already for one sample (see traced_for_microbatch).
    expect = mb if traced_for_microbatch(graph, mb) else 1
    for node in graph:
        if node.kind == INPUT:
            # Traced for one sample, an input is one sample's value whatever its dim 0 (an activation the
            # forward saved, [seq, hidden] after a reshape; a CPU stage's [seq, hidden] position embedding).
            shape = tuple(node.shape) if expect == 1 else (1,) + tuple(node.shape[1:])
            n = new.add_input(node.name, shape, node.dtype, node.requires_grad)
            n.tags.update(node.tags)
            n.tags["batched"] = True
            batched.add(node.name)
        elif node.kind == PARAMETER:
            n = new.add_parameter(node.name, graph.tensors[node.name], node.requires_grad)
            n.tags.update(node.tags)
        elif node.kind == CONSTANT:
            n = new.add_constant(node.name, graph.tensors[node.name])
            n.tags.update(node.tags)
        elif node.kind == OP:
            attrs = dict(node.attrs)
            if expect == 1 and any(o in batched for o in node.operands):
                # Traced for one sample: every op already computes one sample's values, whatever its dim 0
                # (a weight gradient reshaped to the weight's shape is still that sample's).
                new.add_op(node.name, node.op_type, node.operands, attrs, node.tags)
                batched.add(node.name)
            elif any(o in batched for o in node.operands):
                why = None
                if not node.shape or node.shape[0] != expect:
                    why = f"output shape {list(node.shape)} does not keep dim 0 == {expect}"
                else:
                    why = _reads_across_batch(node, graph, batched)
                if why is None:
                    if node.op_type == "reshape":
                        attrs["shape"] = (1,) + tuple(attrs["shape"][1:])
                    why = _per_sample_shape_problem(node, new, attrs)
                if why is None:
                    new.add_op(node.name, node.op_type, node.operands, attrs, node.tags)
                else:
                    on_mixing(node.name, node.op_type, why)
                    # Keep walking: a placeholder of the per-sample shape lets later ops be checked too.
                    new.add_constant(node.name, _placeholder(node))
                batched.add(node.name)
            else:
                new.add_op(node.name, node.op_type, node.operands, attrs, node.tags)
        elif node.kind == OUTPUT:
            n = new.add_output(node.name, node.operands[0])
            n.tags.update(node.tags)
            if node.operands[0] in batched:
                n.tags["batched"] = True
    return new


def _per_sample_shape_problem(node, new: Graph, attrs) -> Optional[str]:
    """Why ``node`` with its operands' per-sample shapes (in ``new``) does not compute one sample."""
    from pybuda.ops.registry import infer

    operands = [new[o] for o in node.operands]
    try:
        shape, _, _ = infer(node.op_type, [o.shape for o in operands], [o.dtype for o in operands], attrs, node.name)
    except OpError as e:
        return f"cannot run one sample at a time: {e}"
    if tuple(shape) != (1,) + tuple(node.shape[1:]):
        return f"per-sample shape {list(shape)} instead of {[1] + list(node.shape[1:])}"
    return None


def _placeholder(node):
    import torch

    shape = (1,) + tuple(node.shape[1:]) if node.shape else (1,)
    return torch.zeros(shape, dtype=node.dtype if node.dtype is not None else torch.float32)


def batch_mixing_ops(graph: Graph, microbatch: int) -> List[Tuple[str, str, str]]:
    """Every op of ``graph`` (traced for the whole microbatch: its inputs have dim 0 == ``microbatch``)
    that reads across the samples of the microbatch, as ``(op name, op type, why)`` in graph order.

    Static: from the ops' shapes and attributes only (an op's output must keep dim 0 as the batch, its
    per-sample shape must be its traced shape with dim 0 set to 1, it must not work along dim 0, and no
    weight operand may be computed from the batch). A mixing op is then taken as computing one sample
    (a placeholder of its traced shape with dim 0 = 1), so the walk goes on; ops after it whose traced
    dim 0 is not the batch are listed too. Empty for ``microbatch`` 1 and for graphs traced for one
    sample."""
    if microbatch < 2 or not any(n.shape and n.shape[0] == microbatch for n in graph.inputs):
        return []
    found: List[Tuple[str, str, str]] = []
    _per_sample(graph, microbatch, lambda name, op_type, why: found.append((name, op_type, why)))
    return found


def strip_microbatch(graph: Graph, ctx: CompileContext) -> Graph:
    """Return the per-sample graph (dim 0 of batched values set to 1); unchanged when microbatch == 1."""
    mb = ctx.microbatch
    if mb == 1:
        graph.microbatch = 1
        return graph
    # dim 0 is the microbatch (traced for the whole microbatch); a graph traced for one sample takes any.
    whole = traced_for_microbatch(graph, mb)
    for node in graph.inputs:
        if whole and (not node.shape or node.shape[0] not in (mb, 1)):
            raise ctx.error(f"input '{node.name}' has shape {list(node.shape)}; with microbatch {mb} every "
                            f"input needs dim 0 == {mb} (one slice per sample), or 1 when traced per sample")

    def fail(name: str, op_type: str, why: str) -> None:
        raise ctx.error(f"{op_type} mixes the samples of a microbatch ({why}); it cannot run one sample at a "
                        f"time", op=name)

    return _per_sample(graph, mb, fail)


def describe_mixing(ops: Sequence[Tuple[str, str, str]]) -> str:
    """One line per batch-mixing op, for logs and reports."""
    return "; ".join(f"{name} ({op_type}): {why}" for name, op_type, why in ops)
