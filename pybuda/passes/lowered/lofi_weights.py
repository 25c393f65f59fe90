"""Weights that only LoFi matmuls read are rounded by the host to what those matmuls read (``lofi_rounding``).

A matmul's right operand (input 1, the weights) is its SrcA operand, of which LoFi reads the leading one and
4 mantissa bits: the rest is truncated, so every weight loses 1.5 % of its magnitude on average, always
towards zero. Truncation biases every layer's gain the same way, and a deep network compounds it (a random
MobileViT's logits fell to cosine 0.35). The chip cannot round, but the host writes the weights: rounded
there to 4 bits, to nearest with ties to even, they are read exactly, and what error is left has no sign.

A queue is marked (``tags["mantissa_bits"]``, the host I/O record's ``QueueIO.mantissa_bits``) when it is a
parameter or constant that the runtime never rewrites and every reader is a dense matmul at LoFi that takes
it as input 1. Anything else reading it (a bias add, a multiply, a higher fidelity, a sparse matmul's
tiles) would see the rounding as an error of its own, so such a queue is left alone. Integer and index
queues are never marked.
"""

from __future__ import annotations

from pybuda.dtypes import MathFidelity
from pybuda.golden.formats import LOFI_SRCA_FRACTION_BITS
from pybuda.ir.graph import RUNTIME_UPDATED
from pybuda.ir.lowered import BudaGraph, BudaOp
from pybuda.passes.context import CompileContext

#: Queue tag: round the queue's values to this many mantissa bits before writing them.
MANTISSA_BITS = "mantissa_bits"


def round_lofi_weights(bg: BudaGraph, ctx: CompileContext) -> BudaGraph:
    """Mark the queues whose values the host rounds for LoFi matmuls (in place); returns ``bg``."""
    if not ctx.config.lofi_rounding:
        return bg
    readers = bg.reader_map()
    for name, q in bg.queues.items():
        if q.kind not in ("parameter", "constant") or q.tags.get(RUNTIME_UPDATED) or q.tags.get("exact_df"):
            continue
        if q.df.is_integer or q.tags.get("df") == "RawUInt32":
            continue
        ops = [bg.ops[r] for r in readers.get(name, ())]
        if ops and all(_reads_only_as_lofi_srca(op, name) for op in ops):
            q.tags[MANTISSA_BITS] = LOFI_SRCA_FRACTION_BITS
    return bg


def _reads_only_as_lofi_srca(op: BudaOp, name: str) -> bool:
    """Whether ``op`` is a dense LoFi matmul that reads ``name`` as its input 1 and nowhere else."""
    return (op.type == "matmul" and not op.attrs.get("identity") and op.math_fidelity == MathFidelity.LoFi
            and [i for i, n in enumerate(op.inputs) if n == name] == [1])
