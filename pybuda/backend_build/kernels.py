"""Each op's kernel configuration, as the backend compiled its unpack/math/pack kernels (spec §1.3, §1.4):
unpack formats (``in_df``), math formats (``intermed_df``/``acc_df``), pack format (``out_df``), math
fidelity, blocking (grid, t, mblock, ublock, m_k, u_kt), op type and attributes, and a fused op's
sub-ops."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Dict, List, Tuple

from pybuda.netlist.model import Netlist, NetlistOp

__all__ = ["KernelConfig", "FusedSubOpConfig", "op_kernel", "graph_kernels", "plain"]


def plain(value: Any) -> Any:
    """``value`` as YAML-safe plain data (tuples → lists, enums → names, mapping keys → str), so that a
    kernel configuration written and read back compares equal."""
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return str(value)


@dataclass(frozen=True)
class FusedSubOpConfig:
    """One sub-op of a fused op's schedule."""

    schedule: int
    name: str
    type: str
    inputs: Tuple[str, ...]
    output: str
    mblock: Tuple[int, int]
    ublock: Tuple[int, int]
    attributes: Dict[str, Any]


@dataclass(frozen=True)
class KernelConfig:
    """The kernel configuration of one op (what its TRISC unpack/math/pack binaries were built for)."""

    op: str
    type: str
    graph: str
    unpack_df: Tuple[str, ...]
    math_df: str
    acc_df: str
    pack_df: str
    math_fidelity: str
    grid_loc: Tuple[int, int]
    grid_size: Tuple[int, int]
    grid_transpose: bool
    t: int
    mblock: Tuple[int, int]
    ublock: Tuple[int, int]
    m_k: int
    u_kt: int
    buf_size_mb: int
    untilize_output: bool
    gradient_op: bool
    attributes: Dict[str, Any]
    fused: Tuple[FusedSubOpConfig, ...] = ()


def op_kernel(netlist: Netlist, graph_name: str, op: NetlistOp) -> KernelConfig:
    """The :class:`KernelConfig` of one op; a ``fused_op`` lists the sub-ops of its ``fused_op_id``."""
    fused: List[FusedSubOpConfig] = []
    if op.type == "fused_op":
        fdef = netlist.fused_ops.get(op.attr("fused_op_id"))
        if fdef is not None:
            for k, sched in enumerate(fdef.schedules):
                for sub in sched:
                    fused.append(FusedSubOpConfig(k, sub.name, sub.type, tuple(sub.inputs), sub.output,
                                                  tuple(sub.mblock), tuple(sub.ublock), plain(sub.attributes)))
    return KernelConfig(
        op=op.name, type=op.type, graph=graph_name, unpack_df=tuple(d.name for d in op.in_df),
        # math runs in the intermediate format; the accumulator (Dest) in acc_df
        math_df=op.intermed_df.name, acc_df=op.acc_df.name, pack_df=op.out_df.name,
        math_fidelity=op.math_fidelity.name, grid_loc=tuple(op.grid_loc or (0, 0)), grid_size=tuple(op.grid_size),
        grid_transpose=bool(op.grid_transpose), t=int(op.t), mblock=tuple(op.mblock), ublock=tuple(op.ublock),
        m_k=op.m_k, u_kt=op.u_kt, buf_size_mb=int(op.buf_size_mb), untilize_output=bool(op.untilize_output),
        gradient_op=bool(op.gradient_op), attributes=plain(op.attributes), fused=tuple(fused))


def graph_kernels(netlist: Netlist, graph_name: str) -> List[KernelConfig]:
    """The kernel configuration of every op of a graph, in op order."""
    return [op_kernel(netlist, graph_name, op) for op in netlist.graphs[graph_name].ops.values()]
