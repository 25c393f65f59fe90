"""exp in the SFPU's approximate mode (``CompilerConfig.exp_approx``, ``PYBUDA_EXP_APPROX``).

Every ``exp`` op gets ``approximate_mode: true``, which the cycle model prices with the op's ``approx_tile``
coefficient (Wormhole: 813 instead of 1771 cycles per tile) and the golden computes with the SFPU's own
approximation (:mod:`pybuda.netlist.sfpu_approx`: Schraudolph's exp, at most 6.1 % high). A fused op holding
an exp gets the attribute itself, as in TT-Buda's netlists (a scheduled op cannot carry it), and then it
applies to all of its SFPU sub-ops; so a fused op that also holds an SFPU op with an approximate form of its
own is left exact rather than changing that op's numerics.

Reciprocal is left exact. TT-Buda's later op definitions read the variable for reciprocal but no longer
passed it on, and an approximate reciprocal (one Newton step short, up to 3.8 % off) would scale every
layer norm's output by that error, where an approximate exp mostly cancels in softmax's normalisation.
"""

from __future__ import annotations

from pybuda.ir.lowered import BudaGraph
from pybuda.netlist.model import fused_spec, fused_sub_ops
from pybuda.passes.context import CompileContext

#: Op types whose approximate mode ``exp_approx`` selects.
APPROXIMATED = frozenset({"exp"})
#: SFPU op types with an approximate mode of their own (they keep a fused op exact).
OTHER_APPROXIMATIONS = frozenset({"gelu", "gelu_derivative", "reciprocal"})


def mark_approximate_exp(bg: BudaGraph, ctx: CompileContext) -> BudaGraph:
    """Set ``approximate_mode`` on exp ops and the fused ops holding them (in place) when ``exp_approx``;
    returns ``bg``."""
    if not ctx.config.exp_approx:
        return bg
    for op in bg.ops.values():
        types = ({str(sub.get("type")) for sub in fused_sub_ops(fused_spec(op, bg.fused_ops))}
                 if op.type == "fused_op" else {op.type})
        if types & APPROXIMATED and not types & OTHER_APPROXIMATIONS:
            op.attrs["approximate_mode"] = True
    return bg

