"""Which registry ops the device can run: the compiler's answer to the frontend's fallback question.

An op can run on the device when lowering handles its type directly (an elementwise op whose registry entry
names its netlist op in ``lower``, or one of the structural ops lowering implements) or a decomposition
rewrites it into such ops (``decompose.py``), and it computes on floating-point data:
the chip's formats are floats and block floats, so integer arithmetic (index math, masks built with
integer ops) belongs on the host. The one integer-to-float step the compiler absorbs is a cast of
integer data to float: its integer producer is either a graph input or an integer op, which runs on
the host, so on the device the cast reads an input, which is then pushed in a float format. The torch frontend
sends everything this module rejects to the CPU fallback devices, with the reason in its report. Data
movement (reshape, permute, slice, pad, concat ...) is checked with lowering's own planner
(:func:`pybuda.passes.lower.movement.unsupported_movement`): a move no plan realises falls back too.

Booleans are the exception to "floats only": a mask is a float 0/1 on the device, exact in every format, so
comparisons, their casts to bool, logical and/not, ``where``/``masked_fill`` and data movement of masks run
there (:data:`BOOL_OPS`); the host turns boolean outputs back into ``torch.bool``.
"""

from __future__ import annotations

from typing import FrozenSet, Optional

import torch

from pybuda.ir.graph import Graph, Node


def device_op_types() -> FrozenSet[str]:
    """Registry op types the compiler can lower (directly or through a decomposition)."""
    from pybuda.passes.graph import decompose
    from pybuda.passes.lower import common as lower_common

    direct = set(lower_common.LOWERINGS) | set(lower_common.GATHER_OPS)
    direct |= {"matmul", "reduce_sum", "reduce_avg", "reduce_max", "conv2d", "max_pool2d", "avg_pool2d", "constant"}
    return frozenset(direct | set(decompose._RULES))


#: Ops that produce or read booleans on the device. A boolean lives there as a float 0/1 (exact in every
#: format): masks from comparisons, their logical combinations, where/masked_fill, and moving them around.
BOOL_OPS: FrozenSet[str] = frozenset({"cast", "logical_and", "logical_not", "where"})


def _is_float_or_bool(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype == torch.bool


def unsupported_reason(graph: Graph, node: Node) -> Optional[str]:
    """None when ``node`` (an op of ``graph``) can run on the device, else why not."""
    from pybuda.ops import registry

    op_type = node.op_type
    if op_type not in device_op_types():
        return f"'{op_type}' has no device implementation"
    moves_data = registry.get(op_type).family == "tm"
    if op_type == "cast":
        src = graph[node.operands[0]]
        if node.dtype.is_floating_point or (node.dtype == torch.bool and _is_float_or_bool(src.dtype)):
            return None
        return f"cast from {src.dtype} to {node.dtype} produces integer data on the device"
    if not node.dtype.is_floating_point and not (node.dtype == torch.bool and (op_type in BOOL_OPS or moves_data)):
        return f"'{op_type}' computes {str(node.dtype).replace('torch.', '')} data; the device computes in float formats"
    for index, operand in enumerate(node.operands):
        dtype = graph[operand].dtype
        if dtype.is_floating_point or op_type == "constant":
            continue
        # A boolean operand is a 0/1 float on the device: where's condition, logical ops, data movement.
        if dtype == torch.bool and (op_type in BOOL_OPS or moves_data):
            continue
        return f"'{op_type}' reads {str(dtype).replace('torch.', '')} operand '{operand}'"
    return _movement_reason(graph, node)


def _movement_reason(graph: Graph, node: Node) -> Optional[str]:
    """Why lowering cannot move the data of a data-movement op (None when it can): the same planner as
    lowering decides, so a move the device cannot express goes to the CPU instead of failing to lower."""
    from pybuda.passes.lower.common import GATHER_OPS
    from pybuda.passes.lower.movement import unsupported_movement

    if node.op_type not in GATHER_OPS:
        return None
    return unsupported_movement([tuple(graph[o].shape) for o in node.operands], node.op_type, node.attrs)
