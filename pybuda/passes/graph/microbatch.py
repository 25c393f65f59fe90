"""Make the microbatch explicit: rewrite the graph for one sample (dim 0 of every activation -> 1).

TT-Buda traced with the microbatch as dim 0 of every input and ran the lowered graph once per sample
(``input_count`` = microbatch in the netlist). Here the rule is explicit: every graph input must have
dim 0 equal to the microbatch (or 1, for a graph already traced for one sample, as TTDevices do), every
value computed from an input is "batched" and keeps dim 0 as its batch dim, and the device graph is the
same graph with that dim set to 1. In a graph traced for the whole microbatch, an op that mixes samples
(a reshape that merges the batch dim, a transpose or reduction over dim 0 ...) cannot run one sample at
a time and is reported as a CompileError naming the op. A graph traced for one sample is one sample's
computation throughout, so its ops are kept as they are whatever their dim 0 (the backward of a conv
reshapes a sample's weight gradient to the weight's shape). Parameters and constants are shared by all
samples and are unchanged.
"""

from __future__ import annotations

from pybuda.errors import OpError
from pybuda.ir.graph import CONSTANT, INPUT, OP, OUTPUT, PARAMETER, Graph
from pybuda.passes.context import CompileContext


def strip_microbatch(graph: Graph, ctx: CompileContext) -> Graph:
    """Return the per-sample graph (dim 0 of batched values set to 1); unchanged when microbatch == 1."""
    mb = ctx.microbatch
    if mb == 1:
        graph.microbatch = 1
        return graph
    new = Graph(graph.name)
    new.microbatch = mb
    batched = set()
    # Traced for the whole microbatch (some input has dim 0 == mb), or already for one sample.
    expect = mb if any(n.shape and n.shape[0] == mb for n in graph.inputs) else 1
    for node in graph:
        if node.kind == INPUT:
            # dim 0 is the microbatch (traced for the whole microbatch) or 1 (traced for one sample).
            if not node.shape or node.shape[0] not in (mb, 1):
                raise ctx.error(f"input '{node.name}' has shape {list(node.shape)}; with microbatch {mb} every "
                                f"input needs dim 0 == {mb} (one slice per sample), or 1 when traced per sample")
            n = new.add_input(node.name, (1,) + tuple(node.shape[1:]), node.dtype, node.requires_grad)
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
                if not node.shape or node.shape[0] != expect:
                    raise ctx.error(f"{node.op_type} mixes the samples of a microbatch (output shape "
                                    f"{list(node.shape)} does not keep dim 0 == {expect}); it cannot run one sample "
                                    f"at a time", op=node.name)
                if node.op_type == "reshape":
                    attrs["shape"] = (1,) + tuple(attrs["shape"][1:])
                try:
                    n = new.add_op(node.name, node.op_type, node.operands, attrs, node.tags)
                except OpError as e:
                    raise ctx.error(f"cannot run one sample at a time: {e}", op=node.name) from None
                if tuple(n.shape) != (1,) + tuple(node.shape[1:]):
                    raise ctx.error(f"{node.op_type} mixes the samples of a microbatch (per-sample shape "
                                    f"{list(n.shape)} instead of {[1] + list(node.shape[1:])})", op=node.name)
                batched.add(node.name)
            else:
                new.add_op(node.name, node.op_type, node.operands, attrs, node.tags)
        elif node.kind == OUTPUT:
            n = new.add_output(node.name, node.operands[0])
            n.tags.update(node.tags)
            if node.operands[0] in batched:
                n.tags["batched"] = True
    return new
