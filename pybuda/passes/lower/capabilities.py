"""Which registry ops the device can run: the compiler's answer to the frontend's fallback question.

An op can run on the device when lowering handles its type directly (an elementwise op whose registry entry
names its netlist op in ``lower``, or one of the structural ops lowering implements) or a decomposition
rewrites it into such ops (``decompose.py``), and it computes on floating-point data:
the chip's formats are floats and block floats, so integer arithmetic (index math, masks built with
integer ops) belongs on the host. The one integer-to-float step the compiler absorbs is a cast of
integer data to float: its integer producer is either a graph input or an integer op, which runs on
the host, so on the device the cast reads an input, which is then pushed in a float format. The torch frontend
sends everything this module rejects to the CPU fallback devices, with the reason in its report.
"""

from __future__ import annotations

from typing import FrozenSet, Optional

from pybuda.ir.graph import Graph, Node


def device_op_types() -> FrozenSet[str]:
    """Registry op types the compiler can lower (directly or through a decomposition)."""
    from pybuda.passes.graph import decompose
    from pybuda.passes.lower import common as lower_common

    direct = set(lower_common.LOWERINGS) | set(lower_common.GATHER_OPS)
    direct |= {"matmul", "reduce_sum", "reduce_avg", "reduce_max", "conv2d", "max_pool2d", "avg_pool2d", "constant"}
    return frozenset(direct | set(decompose._RULES))


def unsupported_reason(graph: Graph, node: Node) -> Optional[str]:
    """None when ``node`` (an op of ``graph``) can run on the device, else why not."""
    op_type = node.op_type
    if op_type not in device_op_types():
        return f"'{op_type}' has no device implementation"
    if op_type == "cast":
        if node.dtype.is_floating_point:
            return None
        src = graph[node.operands[0]]
        return f"cast from {src.dtype} to {node.dtype} produces integer data on the device"
    if not node.dtype.is_floating_point:
        return f"'{op_type}' computes {str(node.dtype).replace('torch.', '')} data; the device computes in float formats"
    for operand in node.operands:
        if not graph[operand].dtype.is_floating_point and op_type != "constant":
            return f"'{op_type}' reads {str(graph[operand].dtype).replace('torch.', '')} operand '{operand}'"
    return None
