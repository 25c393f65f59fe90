"""exp and reciprocal in the SFPU's approximate mode (``CompilerConfig.exp_approx``, ``PYBUDA_EXP_APPROX``).

Every ``exp`` and ``reciprocal`` op gets ``approximate_mode: true``, which the cycle model prices with the
ops' ``approx_tile`` coefficients (Wormhole exp: 813 instead of 1771 cycles per tile) and the golden computes
with the SFPU's own approximations (:mod:`pybuda.netlist.sfpu_approx`). A fused op holding an exp or a
reciprocal gets the attribute itself, as in TT-Buda's netlists (a scheduled op cannot carry it), and then it
applies to all of its SFPU sub-ops; so a fused op that also holds an SFPU op whose approximate form is
something else (gelu, gelu_derivative) is left exact rather than changing that op's numerics.
"""

from __future__ import annotations

from pybuda.ir.lowered import BudaGraph, BudaOp
from pybuda.passes.context import CompileContext

#: Op types whose approximate mode ``exp_approx`` selects.
APPROXIMATED = frozenset({"exp", "reciprocal"})
#: SFPU op types whose approximate mode means a different approximation (they keep a fused op exact).
OTHER_APPROXIMATIONS = frozenset({"gelu", "gelu_derivative"})


def approximate_exp_and_reciprocal(bg: BudaGraph, ctx: CompileContext) -> BudaGraph:
    """Set ``approximate_mode`` on exp/reciprocal ops and the fused ops holding them (in place) when
    ``exp_approx``; returns ``bg``."""
    if not ctx.config.exp_approx:
        return bg
    for op in bg.ops.values():
        types = _sub_op_types(bg, op) if op.type == "fused_op" else {op.type}
        if types & APPROXIMATED and not types & OTHER_APPROXIMATIONS:
            op.attrs["approximate_mode"] = True
    return bg


def _sub_op_types(bg: BudaGraph, op: BudaOp) -> set:
    spec = bg.fused_ops.get(op.attrs.get("fused_op_id"), {})
    return {str(sub.get("type")) for schedule in spec.get("schedules", []) for entry in schedule
            for sub in entry.values()}
