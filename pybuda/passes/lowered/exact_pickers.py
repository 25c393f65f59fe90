"""Data movement stays exact at Float32: a picker matmul that would truncate its data copies it in pieces.

Lowering moves rows and columns that no tile-level TM can (a slice of rows inside a tile, a concatenation at an
unaligned offset, a gather, a flatten of an unaligned width) with picker matmuls: sparse row pickers and dense
column pickers whose constant holds one 1 per output row (column). The frontends and decompositions make plain
matmuls with constant one-hot matrices of the same kind (a nearest resize, a gather by a constant permutation);
:func:`copied_input` finds both. The matrix unit reads the data through a source register that keeps 9 (SrcA) or
10 (SrcB) mantissa bits after the leading one (:func:`pybuda.golden.kernels.copied_fraction_bits`), so a Float32
value comes out with a relative error of up to 2^-9: ``torch.cat([x[:, 3:9], x[:, :3]], 1)`` at Float32 differed
from torch by 1.7e-3.

A picker is linear and copies a value with few enough bits exactly, so this pass splits the data ``x`` into
pieces that each pass whole and copies every piece with the same picker constants::

    r0 = x,  p(i) = r(i-1)·1,  r(i) = r(i-1) - p(i)      (the multiply truncates; the difference is exact)
    out = P(p1) + P(p2) + P(r2)                           (each piece passes whole; their bits do not overlap)

The multiply by a one tile (HiFi4, the data through SrcA) keeps no more bits than a picker does (one that would
keep fewer, a one-hot matmul at LoFi, copies at HiFi4), so each truncated piece passes whole, and three pieces
leave a last residual of at most 4 significant bits. (An infinity is not copied by any picker: the matrix unit
multiplies it by the picker's zeros, which makes NaN. Data that may hold NaN or infinity is split before this pass
into a finite part, which this pass then copies in pieces, and a code of its specials: pybuda.passes.lower.specials.)

Pickers whose every reader truncates the value as much again (a conv's im2col picker read by the conv's
matmul) are left alone, as are pickers of data that is exact already (Float16_b and block-float data, the
default formats) or held in a Dest that cannot keep more bits (Grayskull's): netlists of models that never
needed it do not change. ``exact_data_movement=False`` (``PYBUDA_DISABLE_EXACT_DATA_MOVEMENT=1``) keeps
TT-Buda's truncating pickers. It runs after data formats (the formats and fidelities decide) and after fusion.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

import torch

from pybuda.dtypes import DataFormat, MathFidelity
from pybuda.golden.kernels import copied_fraction_bits, fraction_bits
from pybuda.ir.lowered import BudaGraph, BudaOp, BudaQueue, TileShape
from pybuda.netlist.tms import Broadcast, HSlice, Transpose, VSlice, as_tms
from pybuda.passes.context import CompileContext
from pybuda.perf import sparse as sparse_work

#: Tag the lowering puts on a picker matmul whose constant copies (one 1 per output row or column): the index of
#: its data input. Pickers that sum or scale (a row reduction, a pool) have no such tag.
COPIES_INPUT = "copies_input"
#: Tag on a matmul whose other operand is a 0/1 matrix with at most one 1 per output row (column): one computed at
#: run time (a lookup by pushed ids, ``lookups._lookup_onehot``) or a constant one-hot selection the lowering
#: recognised (a flip, a gather by a constant permutation: ``specials.NonfiniteMoveLowering.one_hot_copy``). Its
#: value is the index of the input it copies.
ONE_HOT_COPY = "one_hot_copy"
#: Tag on the ops this pass adds: the picker they make exact.
EXACT_PICKER_PART = "exact_picker_part"
#: Tag the lowering puts on a multiply that zeroes a value's tile padding (input 0, the data) with a constant 0/1
#: mask (input 1): ``"r"`` for padding rows, ``"c"`` for padding columns (see :func:`exact_zero_padding`).
ZERO_PADDING = "zero_padding"
#: Float32's significant bits (the leading one and 23 fraction bits).
_FLOAT32_SIGNIFICANT = 24
#: The fidelity of the piece-splitting multiply: ELWMUL reads in0 (the data) through SrcA.
_SPLIT_FIDELITY = MathFidelity.HiFi4
#: Tags that describe a picker matmul, not the sum that replaces it.
_PICKER_TAGS = (COPIES_INPUT, ONE_HOT_COPY, "picker", "min_fidelity", sparse_work.ENTRIES_TAG, sparse_work.DIGEST_TAG)


def exact_pickers(bg: BudaGraph, ctx: CompileContext) -> BudaGraph:
    """Make each copying picker matmul that would truncate its data exact (in place); returns ``bg``.
    ``ctx.notes["exact_pickers"]`` counts them."""
    ctx.notes["exact_pickers"] = 0
    if not ctx.config.exact_data_movement:
        return bg
    readers = bg.reader_map()
    targets = {}
    for op in bg.ops.values():
        d = copied_input(bg, op)
        if d is not None and _needs_pieces(bg, op, d, readers):
            targets[op.name] = d
    if not targets:
        return bg
    one = _one_tile(bg)
    added: Dict[str, List[BudaOp]] = {name: _pieces(bg, bg.ops[name], d, one) for name, d in targets.items()}
    order = list(bg.ops.values())
    bg.ops.clear()
    for op in order:
        for new in added.get(op.name, ()):
            bg.ops[new.name] = new
        if op.name not in added:
            bg.ops[op.name] = op
    ctx.notes["exact_pickers"] = len(targets)
    return bg


def _kept_bits(op: BudaOp, index: int) -> int:
    """Fraction bits the matrix unit keeps of ``op``'s input ``index`` (input 0 goes through SrcB)."""
    return copied_fraction_bits("b" if index == 0 else "a", op.math_fidelity)


def copied_input(bg: BudaGraph, op: BudaOp) -> Optional[int]:
    """The input a copying matmul copies, or None: a picker the lowering tagged :data:`COPIES_INPUT`, or a plain
    two-operand matmul with a constant one-hot selection matrix (a nearest resize, a gather by a constant
    permutation: each output reads one datum times 1.0), ``x @ S`` with at most one 1 per column of ``S`` or
    ``S @ x`` with at most one per row."""
    if COPIES_INPUT in op.tags:
        return int(op.tags[COPIES_INPUT])
    if op.tags.get(ONE_HOT_COPY) is not None:  # a one-hot of run-time ids; a fused epilogue would be summed thrice
        plain = op.type == "matmul" and len(op.inputs) == 2 and \
            not any(op.attrs.get(k) for k in ("bias", "accumulate", "sfpu_op", "relu_en"))
        return int(op.tags[ONE_HOT_COPY]) if plain else None
    if op.type != "matmul" or len(op.inputs) != 2 or op.tags.get("picker") or \
            any(op.attrs.get(k) for k in ("identity", "bias", "accumulate", "sfpu_op", "relu_en")):
        return None
    for const, data in ((1, 0), (0, 1)):
        q = bg.queues.get(op.inputs[const])
        if q is None or q.kind != "constant" or op.inputs[const] not in bg.tensors or op.inputs[data] in bg.tensors:
            continue
        if not _truncates(op, data):
            continue  # nothing to make exact: no need to look at the matrix (a model's every weight at Float32)
        if not all(_keeps_selection(tm) for tm in as_tms(op.input_tms.get(const, ()))):
            continue
        matrix = bg.tensors[op.inputs[const]]
        if matrix.dim() < 2 or matrix.numel() != matrix.shape[-2] * matrix.shape[-1]:
            continue
        if is_selection(matrix, const):
            return data
    return None


def _keeps_selection(tm) -> bool:
    """Whether a TM on a selection matrix leaves one: a z broadcast repeats it whole, and a slice (the column
    pickers of a rotated move are sliced into z) cuts each row and each column into parts, none with a second 1."""
    return (isinstance(tm, Broadcast) and tm.dim == "z") or isinstance(tm, (HSlice, VSlice))


def is_selection(matrix: torch.Tensor, const: int) -> bool:
    """Whether the constant ``matrix`` (operand ``const`` of a matmul, at least 2-d) selects: all 0/1, with at most
    one 1 per column (``x @ S``, ``const`` 1) or per row (``S @ x``, ``const`` 0), so each output reads one datum
    times 1.0. A weight fails on its first values, without a pass over the whole matrix."""
    head = matrix.reshape(-1)[:64]
    if not bool(((head == 0) | (head == 1)).all()):
        return False
    return bool(((matrix == 0) | (matrix == 1)).all()) and \
        int((matrix != 0).sum(dim=-2 if const == 1 else -1).max()) <= 1


def _truncates(op: BudaOp, d: int) -> bool:
    """Whether the matmul drops bits of its data input ``d`` that its Dest could hold (:func:`_drops_held_bits`)."""
    return _drops_held_bits(op, d, _kept_bits(op, d))


def _drops_held_bits(op: BudaOp, d: int, kept: int) -> bool:
    """Whether ``op``, keeping ``kept`` fraction bits of its input ``d``, drops bits its Dest could hold: not when
    the data is exact already, nor with a Dest (Grayskull's) that cannot hold the bits an exact copy would add."""
    return fraction_bits(op.in_df[d]) > kept and op.acc_df == DataFormat.Float32


def _needs_pieces(bg: BudaGraph, op: BudaOp, d: int, readers: Dict[str, List[str]]) -> bool:
    """Whether the picker truncates its data input ``d`` and some reader would have kept the bits it loses."""
    if not _truncates(op, d):
        return False
    return not all(_multiplies(bg.ops.get(name)) for name in readers.get(op.name, ()))


def _multiplies(reader: Optional[BudaOp]) -> bool:
    """Whether ``reader`` (None: a queue) reads its inputs through the multiplier's source registers itself (a
    matmul or an elementwise multiply), which keep 9 or 10 of the bits: the picker's truncation then costs at
    most one bit of a product that is rounded anyway. Another picker, or a matmul that copies one input (a one-hot
    matmul of run-time ids), does not count: it would be made exact from truncated data."""
    return reader is not None and reader.type in ("matmul", "multiply") and not reader.tags.get("picker") and \
        reader.tags.get(ONE_HOT_COPY) is None and COPIES_INPUT not in reader.tags


def _one_tile(bg: BudaGraph) -> str:
    """A constant queue of one tile of ones (Float32), added once."""
    name = "exact_picker_one"
    while name in bg.ops or (name in bg.queues and bg.queues[name].tags.get(EXACT_PICKER_PART) != "one"):
        name += "_"
    if name not in bg.queues:
        value = torch.ones(32, 32)
        bg.add_queue(BudaQueue(name, "constant", TileShape(1, 1, 1, 1), df=DataFormat.Float32,
                               original_shape=(32, 32),
                               tags={"device_shape": (32, 32), "compiler_constant": True, EXACT_PICKER_PART: "one"}))
        bg.tensors[name] = value
    return name


def _pieces(bg: BudaGraph, op: BudaOp, d: int, one: str) -> List[BudaOp]:
    """The ops that replace picker ``op`` copying input ``d``, in order: the residual splits, one picker per piece,
    and their sum, the last add under ``op``'s name (its readers and overrides still find it)."""
    kept = copied_fraction_bits("a", _SPLIT_FIDELITY)  # what each truncated piece keeps
    count = -(-_FLOAT32_SIGNIFICANT // (kept + 1))
    # A matmul at a fidelity that reads fewer bits than a piece holds (a one-hot matmul at LoFi) copies at HiFi4.
    fidelity = op.math_fidelity if _kept_bits(op, d) >= kept else _SPLIT_FIDELITY
    data, first_df = op.inputs[d], op.in_df[d]
    shape = bg.shape_of(data)
    taken = set()

    def name(suffix: str) -> str:
        candidate = f"{op.name}.{suffix}"
        while candidate in bg.ops or candidate in bg.queues or candidate in taken:
            candidate += "_"
        taken.add(candidate)
        return candidate

    def elementwise(kind: str, new_name: str, inputs: List[str], in_df: DataFormat, **fields) -> BudaOp:
        return BudaOp(new_name, kind, inputs, fields.pop("shape", shape), in_df=[in_df, DataFormat.Float32],
                      out_df=fields.pop("out_df", DataFormat.Float32), intermed_df=DataFormat.Float32,
                      acc_df=DataFormat.Float32, math_fidelity=_SPLIT_FIDELITY, epoch_type=op.epoch_type,
                      tags=fields.pop("tags", {EXACT_PICKER_PART: op.name}), **fields)

    ones = [Broadcast(dim="r", factor=shape.rt), Broadcast(dim="c", factor=shape.ct), Broadcast(dim="z", factor=shape.z)]
    ones = [tm for tm in ones if tm.factor > 1]
    ops: List[BudaOp] = []
    pieces, source = [], data
    for i in range(1, count):
        in_df = first_df if i == 1 else DataFormat.Float32
        truncated = elementwise("multiply", name(f"piece{i}"), [source, one], in_df,
                                input_tms={1: list(ones)} if ones else {})
        rest = elementwise("subtract", name(f"rest{i}"), [source, truncated.name], in_df)
        ops += [truncated, rest]
        pieces.append(truncated.name)
        source = rest.name
    pieces.append(source)  # the last residual: few enough bits to pass whole
    picks = []
    for i, piece in enumerate(pieces):
        inputs, in_df = list(op.inputs), list(op.in_df)
        inputs[d], in_df[d] = piece, DataFormat.Float32
        picks.append(dataclasses.replace(
            op, name=name(f"pick{i}"), inputs=inputs, in_df=in_df, out_df=DataFormat.Float32, untilize_output=False,
            math_fidelity=fidelity,
            attrs=dict(op.attrs), input_tms={k: list(v) for k, v in op.input_tms.items()},
            tags={**{k: v for k, v in op.tags.items() if k not in (COPIES_INPUT, ONE_HOT_COPY)},
                  EXACT_PICKER_PART: op.name}))
    ops += picks
    total = picks[0].name
    kept_tags = {k: v for k, v in op.tags.items() if k not in _PICKER_TAGS}
    for i, pick in enumerate(picks[1:], start=1):
        if i < len(picks) - 1:
            add = elementwise("add", name(f"sum{i}"), [total, pick.name], DataFormat.Float32, shape=op.shape)
        else:
            add = elementwise("add", op.name, [total, pick.name], DataFormat.Float32, shape=op.shape,
                              out_df=op.out_df, untilize_output=op.untilize_output, gradient_op=op.gradient_op,
                              tags={**kept_tags, EXACT_PICKER_PART: op.name})
        ops.append(add)
        total = add.name
    return ops


def exact_zero_padding(bg: BudaGraph, ctx: CompileContext) -> BudaGraph:
    """Zero tile padding without truncating Float32 data (in place); returns ``bg``.

    The lowering zeroes a value's padding rows or columns with a multiply by a 0/1 mask (:data:`ZERO_PADDING`).
    ELWMUL reads the data through SrcA, so at Float32 the product keeps 9 or 10 of its mantissa bits: the masked
    copy of a value is no longer equal to the value itself. A max's backward compares the saved maximum, masked,
    with the unmasked activation: no element matched, the tie count was 0 and every gradient NaN (PointNet's max
    over points). Such a multiply becomes ``heaviside(mask - 1, x)``: ``x`` where the mask is 1 and an exact 0
    where it is 0, like every other copy of the default golden numerics (the nonfinite lowering's select,
    ``specials``, is the same op). Same rules as :func:`exact_pickers`: only where the multiply drops bits its
    Dest could hold and a reader would keep them, and not with ``exact_data_movement=False``. Runs after data
    formats and before fusion. ``ctx.notes["exact_zero_padding"]`` counts them."""
    ctx.notes["exact_zero_padding"] = 0
    if not ctx.config.exact_data_movement:
        return bg
    readers = bg.reader_map()
    steps: Dict[str, str] = {}
    # Readers first: a mask multiply read by another (padding rows, then columns) sees its reader already a select.
    for op in reversed(list(bg.ops.values())):
        if op.type != "multiply" or op.tags.get(ZERO_PADDING) is None or len(op.inputs) != 2:
            continue
        mask = op.inputs[1]
        if mask not in bg.tensors or not _masks_truncate(op):
            continue
        if all(_multiplies(bg.ops.get(name)) for name in readers.get(op.name, ())):
            continue
        if any(isinstance(tm, Transpose) for tm in as_tms(op.input_tms.get(0, []))):
            continue  # the data moves to input 1 of the select, where a transpose is not allowed (tm_allowed)
        if mask not in steps:
            steps[mask] = _step_queue(bg, mask)
        op.type = "heaviside"
        op.inputs = [steps[mask], op.inputs[0]]
        op.in_df = [DataFormat.Float32, op.in_df[0]]
        op.input_tms = {i: tms for i, tms in ((0, op.input_tms.get(1)), (1, op.input_tms.get(0))) if tms}
        ctx.notes["exact_zero_padding"] += 1
    return bg


def _masks_truncate(op: BudaOp) -> bool:
    """Whether the mask multiply ``op`` drops bits of its data (input 0, through SrcA) that its Dest could hold."""
    return _drops_held_bits(op, 0, copied_fraction_bits("a", op.math_fidelity))


def _step_queue(bg: BudaGraph, mask: str) -> str:
    """A constant queue holding ``mask - 1`` (0 on real rows or columns, -1 on padding) beside the mask's queue."""
    name = f"{mask}.step"
    while name in bg.ops or name in bg.queues:
        name += "_"
    q = bg.queues[mask]
    bg.add_queue(dataclasses.replace(q, name=name, df=DataFormat.Float32, tags=dict(q.tags)))
    bg.tensors[name] = bg.tensors[mask] - 1.0
    return name
