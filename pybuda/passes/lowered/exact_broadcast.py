"""Tile broadcasts of activations stay exact: a picker matmul that would round its data becomes a fused copy.

Lowering repeats an activation's row 0 (column 0) through its tile with a picker matmul ``E @ x`` (``x @ E``,
tagged ``picker: tile_broadcast``). The matrix unit reads its operands through source registers that keep
9 (SrcA) or 10 (SrcB) mantissa bits after the leading one at the picker's fidelity
(:func:`pybuda.golden.kernels.copied_fraction_bits`), so a Float32 value comes out truncated (1.57958984 is
broadcast as 1.57910156), and a Float16 one repeated down rows loses its last bit. Where the broadcast only
feeds arithmetic that is a small error; where the decomposition compares a value with its broadcast for
equality (argmax and argmin against the row maximum, ``x == x.max(-1, keepdim=True)``) no element matches
any more and the result is wrong (argmax returned the index one past the end).

Op fusion (:mod:`pybuda.passes.lowered.fuse_ops`) already takes a tile-broadcast matmul read by one fusible
op into that op as the netlist's ``tile_broadcast`` TM, a copy. This pass handles every tile-broadcast matmul
left, whether or not ``enable_auto_fusing`` is on: when its data operand's format has more mantissa bits than
the matmul keeps (:func:`pybuda.golden.kernels.fraction_bits`), it becomes a fused op of one ``nop`` that reads
the operand with ``tile_broadcast: r|c`` (the TM is allowed only inside fused ops), which copies every bit.
Matmuls that are exact already (Float16_b or block-float data, the default formats) stay, so netlists of
models that never needed it do not change. It runs after data formats (the formats and fidelity decide) and
after fusion (which removes the broadcasts it can).
"""

from __future__ import annotations

from typing import Any, Dict

from pybuda.golden.kernels import copied_fraction_bits, fraction_bits
from pybuda.ir.lowered import BudaGraph, BudaOp, TileShape
from pybuda.netlist.tms import Transpose, as_tms, tms_shape
from pybuda.passes.context import CompileContext

#: Tag on the fused copy that replaced a tile-broadcast matmul: the broadcast dim, ``r`` or ``c``.
EXACT_TILE_BROADCAST = "exact_tile_broadcast"
#: Tags that describe the picker matmul, not the copy that replaces it.
_PICKER_TAGS = ("picker", "tile_broadcast_dim", "data_input", "min_fidelity")


def exact_tile_broadcasts(bg: BudaGraph, ctx: CompileContext) -> BudaGraph:
    """Replace each tile-broadcast matmul that would round its data operand by an exact fused copy
    (in place); returns ``bg``. ``ctx.notes["exact_tile_broadcasts"]`` counts them."""
    replaced = 0
    for name, op in list(bg.ops.items()):
        if op.type != "matmul" or op.tags.get("picker") != "tile_broadcast" or _exact(op):
            continue
        bg.ops[name] = _fused_copy(bg, op)  # same name and position: readers and overrides still find it
        replaced += 1
    if replaced:
        # The picker constants no other op reads are gone with the matmuls.
        read = {i for op in bg.ops.values() for i in op.inputs}
        for q in [q for q in bg.queues.values() if q.kind == "constant" and q.name not in read]:
            del bg.queues[q.name]
            bg.tensors.pop(q.name, None)
    ctx.notes["exact_tile_broadcasts"] = replaced
    return bg


def _exact(op: BudaOp) -> bool:
    """Whether the matmul passes every bit of its data operand: the picker's ones are exact in any piece,
    so the product is the operand truncated to what its source register keeps at the op's fidelity."""
    d = int(op.tags["data_input"])
    role = "b" if d == 0 else "a"  # the matrix unit reads input 0 through SrcB, input 1 through SrcA
    return fraction_bits(op.in_df[d]) <= copied_fraction_bits(role, op.math_fidelity)


def _transpose_by_nop(bg: BudaGraph, op: BudaOp, d: int) -> None:
    """When input ``d`` of ``op`` carries a transpose (allowed on matmul input 1, not on a fused op's input),
    a ``nop`` placed just before ``op`` applies that input's TMs and ``op`` reads the nop instead."""
    tms = list(op.input_tms.get(d, []))
    if not any(isinstance(tm, Transpose) for tm in as_tms(tms)):
        return
    src = op.inputs[d]
    s = bg.shape_of(src)
    z, rt, ct = tms_shape((s.z, s.rt, s.ct), tms)
    nop = BudaOp(f"{op.name}.tm_nop", "nop", [src], TileShape(s.w, z, rt, ct), input_tms={0: tms},
                 in_df=[op.in_df[d]], out_df=op.in_df[d], intermed_df=op.intermed_df, acc_df=op.acc_df,
                 math_fidelity=op.math_fidelity, epoch_type=op.epoch_type,
                 tags={k: v for k, v in op.tags.items() if k not in _PICKER_TAGS})
    bg.insert_before(nop, op.name)
    op.inputs = [nop.name if k == d else i for k, i in enumerate(op.inputs)]
    op.input_tms = {k: v for k, v in op.input_tms.items() if k != d}


def _fused_copy(bg: BudaGraph, op: BudaOp) -> BudaOp:
    """A fused op of one ``nop`` reading the matmul's data operand through ``tile_broadcast``."""
    d = int(op.tags["data_input"])
    _transpose_by_nop(bg, op, d)
    dim = op.tags["tile_broadcast_dim"]
    sub = {"type": "nop", "inputs": ["input0"], "output": "output", "input_tms": {0: [{"tile_broadcast": dim}]}}
    fid = _fused_op_id(bg, {"inputs": 1, "intermediates": 0, "schedules": [[{"op0_nop": sub}]]})
    input_tms = {0: list(op.input_tms[d])} if op.input_tms.get(d) else {}
    tags = {k: v for k, v in op.tags.items() if k not in _PICKER_TAGS}
    tags.update({EXACT_TILE_BROADCAST: dim, "fused_ops": [op.name], "sub_op_names": {"op0_nop": op.name}})
    return BudaOp(op.name, "fused_op", [op.inputs[d]], op.shape, attrs={"fused_op_id": fid}, input_tms=input_tms,
                  in_df=[op.in_df[d]], out_df=op.out_df, intermed_df=op.intermed_df, acc_df=op.acc_df,
                  math_fidelity=op.math_fidelity, gradient_op=op.gradient_op, untilize_output=op.untilize_output,
                  epoch_type=op.epoch_type, tags=tags)


def _fused_op_id(bg: BudaGraph, definition: Dict[str, Any]) -> int:
    """The id of the fused op ``definition`` in ``bg.fused_ops``, added under a free id if new."""
    for fid, existing in bg.fused_ops.items():
        if existing == definition:
            return fid
    fid = len(bg.fused_ops)
    while fid in bg.fused_ops:
        fid += 1
    bg.fused_ops[fid] = definition
    return fid
