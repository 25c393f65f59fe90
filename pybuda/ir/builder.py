"""Build a Graph from traced tensors by walking back from the outputs to the leaves."""

from __future__ import annotations

import logging
from typing import Dict, List, Sequence, Tuple

import torch

from pybuda.errors import ModuleError
from pybuda.ir.graph import Graph
from pybuda.tensor import Parameter, Tensor

log = logging.getLogger(__name__)


def _post_order(outputs: Sequence[Tensor]) -> List[Tensor]:
    """Tensors reachable from ``outputs``, operands before users (iterative: graphs can be deep)."""
    order: List[Tensor] = []
    seen: Dict[int, bool] = {}
    stack: List[Tuple[Tensor, bool]] = [(t, False) for t in reversed(list(outputs))]
    while stack:
        tensor, expanded = stack.pop()
        key = id(tensor)
        if expanded:
            order.append(tensor)
            continue
        if key in seen:
            continue
        seen[key] = True
        stack.append((tensor, True))
        if tensor.src_op is not None:
            for operand in reversed(tensor.src_op.operands):
                if id(operand) not in seen:
                    stack.append((operand, False))
    return order


def build_graph(name: str, inputs: Sequence[Tuple[str, Tensor]], outputs: Sequence[Tensor],
                output_prefix: str = "") -> Graph:
    """Turn a trace into a Graph.

    ``inputs`` are (name, tensor) pairs of the activations passed to forward; every other leaf must be a
    Parameter or a constant. Op nodes keep their traced names; outputs are named
    ``<output_prefix>output_<source>`` as in TT-Buda.
    """
    graph = Graph(name)
    input_names = {id(t): n for n, t in inputs}
    # Inputs first, in forward-signature order, even when an input is unused.
    for input_name, tensor in inputs:
        graph.add_input(input_name, tensor.shape.dims, tensor.dtype, tensor.requires_grad)
    node_of: Dict[int, str] = {id(t): n for n, t in inputs}
    n_const = 0
    for tensor in _post_order(outputs):
        key = id(tensor)
        if key in node_of:
            continue
        if tensor.src_op is not None:
            op = tensor.src_op
            if op.name in graph:
                raise ModuleError(f"two different ops are named '{op.name}' in graph '{name}'")
            graph.add_op(op.name, op.op_type, [node_of[id(o)] for o in op.operands], op.attrs,
                         tags={"layer": op.layer} if op.layer else None)
            node_of[key] = op.name
        elif isinstance(tensor, Parameter):
            pname = tensor.get_name()
            if pname not in graph:
                if tensor.has_value():
                    value = tensor.value()
                else:
                    log.warning("parameter '%s' has no value; using zeros", pname)
                    value = torch.zeros(tensor.shape.dims, dtype=tensor.dtype)
                graph.add_parameter(pname, value, tensor.requires_grad)
            node_of[key] = pname
        elif tensor.is_constant():
            cname = graph.unique_name(f"constant_{n_const}")
            n_const += 1
            graph.add_constant(cname, tensor.value())
            node_of[key] = cname
        elif key not in input_names:
            raise ModuleError(f"graph '{name}': forward used a tensor {tensor!r} that is neither a module input, "
                              f"a parameter nor a constant (create constants with add_constant / pybuda.op.Constant)")
    for tensor in outputs:
        if not isinstance(tensor, Tensor):
            raise ModuleError(f"graph '{name}': forward must return pybuda Tensors, got {type(tensor).__name__}")
        src = node_of[id(tensor)]
        graph.add_output(graph.unique_name(f"{output_prefix}output_{src}"), src)
    return graph
