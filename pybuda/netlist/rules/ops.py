"""Netlist rules: ops (formats, blocking, Dest, TMs and operand shapes, grids, L1, fused ops).

Each ``@rule`` function yields ``(key path, message)`` pairs; :mod:`pybuda.netlist.validate` runs them in
registration order (this module is imported in its place in that order).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

from pybuda.netlist.attributes import FUSED_SUB_OP_ATTRIBUTES, check_attribute
from pybuda.netlist.model import (
    BINARY_OPS, COPY_OPS, FUSED_OPS, MATMUL_OPS, NON_TENSIX_OPS, NetlistOp, OP_TYPES, SFPU_OPS,
)
from pybuda.netlist.tms import Broadcast, HStack, Pad, TMError, TileBroadcast, Transpose, VStack, tms_shape
from pybuda.netlist.operands import expected_input_shape, input_shape_after_tms, op_l1_usage, prologue_inputs
from pybuda.netlist.rules.framework import (
    ACC_FORMATS, Ctx, EXP_A, EXP_B, INT_FORMATS, INT_INPUT_FORMATS, LOW_BFP, RAW_FORMATS, rule, _a, _o,
    _positive_pair, _q, _tms_path,
)
from pybuda.netlist.rules.queues import _tile_dim_problem
from pybuda.dtypes import DataFormat as DF
from pybuda.dtypes import MathFidelity


@rule
def op_in_df_match(ctx: Ctx):
    """in_df[i] equals the producer queue's df or producer op's out_df (§1.3)."""
    for g, op in ctx.ops():
        for i, (name, df) in enumerate(zip(op.inputs, op.in_df)):
            producer = ctx.netlist.queues[name].df if name in ctx.netlist.queues else (
                g.ops[name].out_df if name in g.ops else None)
            if producer is not None and producer != df:
                yield f"{_o(g, op, 'in_df')}[{i}]", f"{df.name} differs from {name!r}'s format {producer.name}"


@rule
def op_cores_overlap(ctx: Ctx):
    """Ops of one graph use disjoint cores, counting grid_transpose (§1.3)."""
    for g in ctx.netlist.graphs.values():
        used: Dict[Tuple[int, int], str] = {}
        for op in g.ops.values():
            if op.type in NON_TENSIX_OPS or op.grid_loc is None or not _positive_pair(op.grid_size):
                continue
            for core in op.cores():
                if core in used:
                    yield _o(g, op, "grid_loc"), f"core {list(core)} is also used by op {used[core]!r}"
                    break
                used[core] = op.name


@rule
def op_grid_fits_device(ctx: Ctx):
    """With a device, every op's cores lie inside the harvested worker grid."""
    if ctx.device is None:
        return
    rows, cols = ctx.device.grid_size
    for g, op in ctx.ops():
        if op.grid_loc is None or op.type in NON_TENSIX_OPS or not _positive_pair(op.grid_size):
            continue
        (r0, c0), (fr, fc) = op.grid_loc, op.footprint
        if r0 + fr > rows or c0 + fc > cols:
            yield _o(g, op, "grid_loc"), (f"cores rows {r0}..{r0 + fr - 1}, cols {c0}..{c0 + fc - 1} fall outside "
                                          f"the {rows}x{cols} grid of {ctx.device.name}")


@rule
def op_acc_df(ctx: Ctx):
    """acc_df is Float16, Float16_b, Float32 or Int32 (§1.3)."""
    for g, op in ctx.ops():
        if op.acc_df not in ACC_FORMATS:
            yield _o(g, op, "acc_df"), f"acc_df must be Float16, Float16_b, Float32 or Int32, got {op.acc_df.name}"


def _max_ublock(ctx: Ctx, acc_df: DF) -> int:
    if ctx.device is not None:
        return ctx.device.max_ublock_tiles(acc_df)
    limit = 4 if acc_df in (DF.Float32, DF.Int32) else 8
    return limit * 4 if ctx.is_wh_a0 else limit  # WH A0 had a 4x larger Dest


@rule
def ublock_fits_dest(ctx: Ctx):
    """ublock rt·ct fits half of Dest: <= 8 tiles, <= 4 with Float32/Int32 acc_df (§1.3); fused sub-ops too."""
    for g, op in ctx.ops():
        limit = _max_ublock(ctx, op.acc_df)
        if op.ublock_tiles > limit:
            yield _o(g, op, "ublock"), (f"ublock {list(op.ublock)} = {op.ublock_tiles} tiles does not fit half of Dest "
                                        f"({limit} tiles with acc_df {op.acc_df.name})")
        if op.type == "fused_op":
            fused = ctx.netlist.fused_ops.get(op.attr("fused_op_id"))
            for si, sched in enumerate(fused.schedules if fused else ()):
                for sub in sched:
                    if sub.ublock[0] * sub.ublock[1] > limit:
                        yield (f"fused_ops.{fused.id}.schedules[{si}].{sub.name}.ublock",
                               f"ublock {list(sub.ublock)} does not fit half of Dest ({limit} tiles) for op {op.name!r}")


@rule
def matmul_ublock_order(ctx: Ctx):
    """Matmul output must use ublock_order r (§1.3)."""
    for g, op in ctx.ops():
        if op.type in MATMUL_OPS and op.ublock_order != "r":
            yield _o(g, op, "ublock_order"), "matmul must use ublock_order r"


@rule
def untilize_output(ctx: Ctx):
    """untilize_output: ublock_order r; out_df Float16/Float16_b/Float32 (Int8/Int32 off GS); feeds exactly
    one [1,1] queue; nothing reads the op or that queue (§1.3)."""
    for g, op in ctx.ops():
        if not op.untilize_output:
            continue
        if op.ublock_order != "r":
            yield _o(g, op, "ublock_order"), "untilize_output requires ublock_order r"
        allowed = {DF.Float16, DF.Float16_b, DF.Float32} | (set() if ctx.is_gs else {DF.Int8, DF.Int32})
        if op.out_df not in allowed:
            yield _o(g, op, "out_df"), f"untilize_output cannot write {op.out_df.name}"
        fed = ctx.netlist.queues_fed_by(op.name)
        if len(fed) != 1:
            yield _o(g, op, "untilize_output"), f"an untilizing op must feed exactly one queue, feeds {len(fed)}"
        for q in fed:
            if q.grid_size != (1, 1):
                yield _q(q.name, "grid_size"), f"queue fed by untilizing op {op.name!r} must have grid [1, 1]"
            for rg, reader, i in ctx.netlist.readers_of(q.name):
                yield f"{_o(rg, reader, 'inputs')}[{i}]", f"queue {q.name!r} holds untilized data; ops cannot read it"
        for rg, reader, i in ctx.netlist.readers_of(op.name):
            yield f"{_o(rg, reader, 'inputs')}[{i}]", f"op {op.name!r} untilizes its output; ops cannot read it"
        if op.type in MATMUL_OPS and op.m_k != 1:
            yield _a(g, op, "m_k"), "an untilizing matmul must have m_k == 1"
        if op.type == "reduce" and op.attr("dim") == "z":
            yield _o(g, op, "untilize_output"), "a reduce over z cannot untilize its output"


@rule
def gradient_op(ctx: Ctx):
    """gradient_op: intermed_df == out_df; on GS only matmul, multiply, nop, datacopy; never maximum or
    Int32 acc; a transposed input only on matmul and datacopy (§1.3)."""
    for g, op in ctx.ops():
        if not op.gradient_op:
            continue
        if op.intermed_df != op.out_df:
            yield _o(g, op, "intermed_df"), f"a gradient op needs intermed_df == out_df ({op.out_df.name})"
        if ctx.is_gs and op.type not in ("matmul", "multiply", "nop", "datacopy"):
            yield _o(g, op, "gradient_op"), f"Grayskull gradient ops may only be matmul, multiply or nop, not {op.type}"
        if op.type == "maximum":
            yield _o(g, op, "gradient_op"), "maximum cannot be a gradient op"
        if op.acc_df == DF.Int32:
            yield _o(g, op, "acc_df"), "gradient accumulation with Int32 acc_df is not supported"
        if op.type not in ("matmul", "nop", "datacopy"):
            for i in range(len(op.inputs)):
                if any(isinstance(tm, Transpose) for tm in op.tms_of(i)):
                    yield _tms_path(g, op, i), "a gradient op may transpose an input only if it is a matmul or nop"
        if op.attr("identity"):
            yield _o(g, op, "gradient_op"), "a sparse (identity) matmul cannot be a gradient op"
        if (ctx.is_gs or ctx.is_wh_a0) and op.acc_df == DF.Float32 and op.intermed_df != DF.Float32:
            yield _o(g, op, "intermed_df"), "on GS/WH A0 a Float32-accumulating gradient op needs Float32 intermed_df"


@rule
def accumulate_intermed_df(ctx: Ctx):
    """Accumulating ops (gradient_op, matmul with m_k > 1 or bias) may not spill to Bfp4/Bfp2 (§1.3)."""
    for g, op in ctx.ops():
        if op.is_accumulating and op.intermed_df in LOW_BFP:
            yield _o(g, op, "intermed_df"), f"accumulating op cannot use {op.intermed_df.name} intermediates (saturates)"


@rule
def fp32_acc_intermed(ctx: Ctx):
    """A matmul accumulating (l1_acc on WH B0/BH, m_k > 1 elsewhere) with Float32/Int32 acc_df spills in acc_df."""
    for g, op in ctx.ops():
        if op.type not in MATMUL_OPS or op.acc_df not in (DF.Float32, DF.Int32):
            continue
        accumulates = bool(op.attr("l1_acc")) if ctx.arch in ("wormhole_b0", "blackhole") else op.m_k > 1
        if accumulates and op.intermed_df != op.acc_df:
            yield _o(g, op, "intermed_df"), f"matmul accumulating in {op.acc_df.name} needs intermed_df {op.acc_df.name}"


@rule
def gs_acc_df(ctx: Ctx):
    """Grayskull has no Float32 or Int32 Dest (§1.3)."""
    if not ctx.is_gs:
        return
    for g, op in ctx.ops():
        if op.acc_df in (DF.Float32, DF.Int32):
            yield _o(g, op, "acc_df"), f"Grayskull does not support acc_df {op.acc_df.name}"


@rule
def gs_features(ctx: Ctx):
    """No stochastic rounding before WH B0; no l1_acc or pack-thread SFPU on Grayskull (§1.3)."""
    for g, op in ctx.ops():
        stoch = op.attr("stoch_rnd_mode", "none") != "none" or op.attr("srnd_fpu_en") is True
        if stoch and ctx.arch not in ("wormhole_b0", "blackhole"):
            key = "stoch_rnd_mode" if "stoch_rnd_mode" in op.attributes else "srnd_fpu_en"
            yield _a(g, op, key), f"stochastic rounding is not available on {ctx.arch}"
        if op.attr("l1_acc") and ctx.arch not in ("wormhole_b0", "blackhole"):
            yield _a(g, op, "l1_acc"), f"l1_acc is not available on {ctx.arch}"
        if ctx.is_gs and op.attr("sfpu_execution_thread") == "pack":
            yield _a(g, op, "sfpu_execution_thread"), "Grayskull runs SFPU on the math thread only"


@rule
def gs_exponent_width(ctx: Ctx):
    """Grayskull: an accumulating op with out_df != intermed_df keeps the exponent width (§1.3)."""
    if not ctx.is_gs:
        return
    for g, op in ctx.ops():
        if op.out_df == op.intermed_df or not (op.gradient_op or op.m_k > 1):
            continue
        out, mid = op.out_df, op.intermed_df
        if not ((out in EXP_A and mid in EXP_A) or (out in EXP_B and mid in EXP_B) or (out == DF.Float32 and mid in EXP_B)):
            yield _o(g, op, "intermed_df"), (f"Grayskull: out_df {out.name} and intermed_df {mid.name} must have the "
                                             "same exponent width")


@rule
def stoch_rnd(ctx: Ctx):
    """Stochastic FPU rounding cannot combine with Float32 Dest; Bfp8 outputs allow only none/fpu."""
    for g, op in ctx.ops():
        mode = op.attr("stoch_rnd_mode", "none")
        if op.acc_df == DF.Float32 and mode in ("fpu", "all"):
            yield _a(g, op, "stoch_rnd_mode"), "stochastic FPU rounding cannot be used with Float32 acc_df"
        if op.out_df in (DF.Bfp8, DF.Bfp8_b) and mode in ("pack", "all"):
            yield _a(g, op, "stoch_rnd_mode"), f"{op.out_df.name} output allows stoch_rnd_mode none or fpu only"


@rule
def l1_acc(ctx: Ctx):
    """l1_acc (WH matmul/depthwise) needs intermed_df Float32, Int32 or Float16_b (§1.3)."""
    for g, op in ctx.ops():
        if op.attr("l1_acc") and op.intermed_df not in (DF.Float32, DF.Int32, DF.Float16_b):
            yield _o(g, op, "intermed_df"), f"l1_acc needs intermed_df Float32, Int32 or Float16_b, not {op.intermed_df.name}"


@rule
def int_formats(ctx: Ctx):
    """Ops with integer inputs need HiFi4, Int32 acc_df, integer intermediates and (unless dequantizing)
    integer outputs; Int32 acc_df otherwise only on quantization and fused ops (§1.3)."""
    for g, op in ctx.ops():
        if op.type == "topk":
            continue
        int_input = any(df in INT_INPUT_FORMATS for df in op.in_df)
        if int_input:
            dequant = op.attr("dequant") or op.type == "dequantization" or op.type == "fused_op"
            if not dequant and op.out_df not in INT_INPUT_FORMATS:
                yield _o(g, op, "out_df"), f"an integer op must output Int8/UInt8/Int32, not {op.out_df.name}"
            if op.intermed_df not in INT_FORMATS:
                yield _o(g, op, "intermed_df"), f"an integer op needs integer intermed_df, not {op.intermed_df.name}"
            if op.math_fidelity != MathFidelity.HiFi4:
                yield _o(g, op, "math_fidelity"), "an integer op needs math_fidelity HiFi4"
            if op.acc_df != DF.Int32:
                yield _o(g, op, "acc_df"), "an integer op needs acc_df Int32"
            if op.attr("requant") and op.attr("dequant"):
                yield _a(g, op, "requant"), "requant and dequant cannot both be set"
        else:
            if op.acc_df == DF.Int32 and op.type not in ("quantization", "fused_op"):
                yield _o(g, op, "acc_df"), "acc_df Int32 needs integer inputs (or a quantization/fused op)"
            for key in ("requant", "dequant"):
                if op.attr(key):
                    yield _a(g, op, key), f"{key} needs integer inputs"


@rule
def quant_ops(ctx: Ctx):
    """quantization: Float32 in, Int8 out; (de/re)quantization: Int32/Int8 data + Float32 scalars; all Int32 acc."""
    for g, op in ctx.ops():
        if op.type not in ("quantization", "dequantization", "requantization") or len(op.in_df) < 2:
            continue
        if op.acc_df != DF.Int32:
            yield _o(g, op, "acc_df"), f"{op.type} needs acc_df Int32"
        if op.type == "quantization":
            if op.in_df[0] != DF.Float32 or op.in_df[1] != DF.Float32:
                yield _o(g, op, "in_df"), "quantization inputs must be Float32"
            if op.out_df != DF.Int8:
                yield _o(g, op, "out_df"), "quantization outputs Int8"
        else:
            if op.in_df[0] not in (DF.Int32, DF.Int8) or op.in_df[1] != DF.Float32:
                yield _o(g, op, "in_df"), f"{op.type} takes Int32/Int8 data and Float32 scalars"
            want = DF.Float32 if op.type == "dequantization" else DF.Int8
            if op.out_df != want:
                yield _o(g, op, "out_df"), f"{op.type} outputs {want.name}"


@rule
def format_conversions(ctx: Ctx):
    """Reduce over z and splice do no format conversion (in_df == intermed_df == out_df; equal splice inputs)."""
    for g, op in ctx.ops():
        if op.type == "reduce" and op.attr("dim") == "z" and op.in_df:
            if not op.in_df[0] == op.intermed_df == op.out_df:
                yield _o(g, op, "intermed_df"), "reduce over z needs in_df == intermed_df == out_df"
        if op.type == "splice" and len(set(op.in_df)) > 1:
            yield _o(g, op, "in_df"), "splice inputs must all have the same format"


@rule
def op_attributes(ctx: Ctx):
    """Every attribute is known, well-typed and valid on its op type (§3.2)."""
    for g, op in ctx.ops():
        for key, value in op.attributes.items():
            problem = check_attribute(key, value, op.type)
            if problem:
                yield _a(g, op, key), problem
    for fid, fused in ctx.netlist.fused_ops.items():
        for si, sched in enumerate(fused.schedules):
            for sub in sched:
                for key, value in sub.attributes.items():
                    path = f"fused_ops.{fid}.schedules[{si}].{sub.name}.attributes.{key}"
                    problem = None if key in FUSED_SUB_OP_ATTRIBUTES else "attribute not allowed in a fused op"
                    problem = problem or check_attribute(key, value, None)
                    if problem:
                        yield path, problem


@rule
def op_required_attributes(ctx: Ctx):
    """Attributes an op type needs or constrains: matmul m_k/u_kt, reduce dim/type/z, splice
    granularity/inputN, fused_op_id, embedding num_indices, topk k, num_nz_strips per core."""
    for g, op in ctx.ops():
        attrs = op.attributes
        need: List[str] = []
        if op.type in MATMUL_OPS and not op.attr("identity"):
            need += ["m_k", "u_kt"]
        if op.type == "reduce":
            need += ["dim", "type"] + (["z"] if op.attr("dim") == "z" else [])
        if op.type == "splice":
            need += ["granularity"] + [f"input{i}" for i in range(len(op.inputs))]
        need += {"fused_op": ["fused_op_id"], "embedding": ["num_indices"], "topk": ["k"]}.get(op.type, [])
        for key in need:
            if key not in attrs:
                yield _o(g, op, "attributes"), f"a {op.type} op needs attribute {key!r}"
        if op.type == "reduce" and "z" in attrs and op.attr("dim") != "z":
            yield _a(g, op, "z"), "z is only valid for reduce with dim z"
        if op.type in MATMUL_OPS:
            if "z" in attrs and not op.attr("accumulate"):
                yield _a(g, op, "z"), "z is only valid for a matmul with accumulate"
            if op.attr("accumulate") and op.attr("identity"):
                yield _a(g, op, "accumulate"), "accumulate and identity cannot both be set"
        if op.type == "splice":
            for key in attrs:
                if key.startswith("input") and key[5:].isdigit() and int(key[5:]) >= len(op.inputs):
                    yield _a(g, op, key), f"splice has {len(op.inputs)} input(s); there is no {key}"
        if op.type == "depthwise" and op.attr("min_buffer_input") == 1:
            yield _a(g, op, "min_buffer_input"), "depthwise allows min_buffer_input 0 only"
        strips = op.attr("num_nz_strips")
        if strips is not None and len(strips) != op.grid_size[0] * op.grid_size[1]:
            yield _a(g, op, "num_nz_strips"), f"needs one value per core ({op.grid_size[0] * op.grid_size[1]})"
        if op.attr("relu_en") and op.attr("relu_mode") not in (None, "min", "max"):
            yield _a(g, op, "relu_mode"), "relu_mode must be min or max"


@rule
def kernel_broadcast(ctx: Ctx):
    """kernel_broadcast / single_tile name an existing input that has a broadcast TM."""
    for g, op in ctx.ops():
        indices: List[Tuple[str, int]] = []
        for key in ("kernel_broadcast", "kernel_broadcast_per_t"):
            for name, tiles in (op.attr(key) or {}).items():
                if tiles:
                    indices.append((key, int(str(name).split("_")[1])))
        for index in op.attr("single_tile") or ():
            indices.append(("single_tile", index))
        for key, index in indices:
            if index >= len(op.inputs):
                yield _a(g, op, key), f"names input {index}, but the op has {len(op.inputs)} input(s)"
            elif not any(isinstance(tm, Broadcast) for tm in op.tms_of(index)):
                yield _a(g, op, key), f"input {index} has no broadcast TM to kernel-broadcast"


@rule
def op_tile_dim(ctx: Ctx):
    """An op's tile_dim is legal for its out_df and arch; tiny tiles carry no Int8/Int32 data."""
    for g, op in ctx.ops():
        problem = _tile_dim_problem(ctx, op.tile_dim, op.out_df)
        if problem:
            yield _o(g, op, "tile_dim"), problem
        tiny = op.effective_tile_dim != (32, 32) or any(
            ctx.input_tile_dim(op, i) != (32, 32) for i in range(len(op.inputs)) if i < len(op.in_df))
        if tiny and ({op.out_df, *op.in_df} & {DF.Int8, DF.Int32}):
            yield _o(g, op, "tile_dim"), "tiny tiles do not support Int8/Int32 data"


@rule
def binary_tile_dims(ctx: Ctx):
    """All inputs of a binary op have the same tile_dim (§2.3)."""
    for g, op in ctx.ops():
        if op.type in BINARY_OPS and len(op.inputs) >= 2:
            dims = {ctx.input_tile_dim(op, i) for i in range(len(op.inputs))}
            if len(dims) > 1:
                yield _o(g, op, "inputs"), f"binary op inputs have different tile dims {sorted(dims)}"


@rule
def embedding_op(ctx: Ctx):
    """Embedding: num_indices a multiple of 32, ublock_rt == 1, mblock_m == num_indices / 32."""
    for g, op in ctx.ops():
        if op.type != "embedding" or not isinstance(op.attr("num_indices"), int):
            continue
        n = op.attr("num_indices")
        if n % 32:
            yield _a(g, op, "num_indices"), f"num_indices {n} must be a multiple of 32"
        if op.ublock[0] != 1:
            yield _o(g, op, "ublock"), "an embedding op needs ublock_rt == 1"
        if n // 32 != op.mblock[0]:
            yield _o(g, op, "mblock"), f"an embedding op needs mblock_m == num_indices / 32 = {n // 32}"


@rule
def depthwise_op(ctx: Ctx):
    """Depthwise: u_kt == 1 and m_k >= 1."""
    for g, op in ctx.ops():
        if op.type == "depthwise" and op.u_kt != 1:
            yield _a(g, op, "u_kt"), "a depthwise op needs u_kt == 1"


@rule
def sparse_matmul(ctx: Ctx):
    """A sparse (identity) matmul takes at least 3 inputs, the third holding Raw encodings."""
    for g, op in ctx.ops():
        if op.type in MATMUL_OPS and op.attr("identity") and len(op.in_df) >= 3 and op.in_df[2] not in RAW_FORMATS:
            yield f"{_o(g, op, 'in_df')}[2]", "sparse matmul encodings must be RawUInt8/16/32"


@rule
def tm_allowed(ctx: Ctx):
    """transpose only on matmul input 1, unary input 0, binary input 0 (not GS; not Int32); tile_broadcast
    only in fused ops; no TMs on a tilizer (§2.3, §3.3)."""
    for g, op in ctx.ops():
        for index, tms in op.input_tms.items():
            if op.type == "tilizer" and tms:
                yield _tms_path(g, op, index), "a tilizer takes no TMs"
                continue
            for k, tm in enumerate(tms):
                path = f"{_tms_path(g, op, index)}[{k}]"
                if isinstance(tm, TileBroadcast):
                    yield path, "tile_broadcast is only allowed inside fused ops"
                if not isinstance(tm, Transpose):
                    continue
                int32 = index < len(op.in_df) and op.in_df[index] == DF.Int32
                if op.type in MATMUL_OPS:
                    if index != 1:
                        yield path, "transpose is only supported on matmul input 1"
                elif op.type in COPY_OPS or op.type in SFPU_OPS:
                    if int32:
                        yield path, "transpose of an Int32 input is not supported"
                elif op.type in BINARY_OPS and index == 0:
                    if ctx.is_gs:
                        yield path, "transpose on binary input 0 is not supported on Grayskull"
                    elif int32:
                        yield path, "transpose of an Int32 input is not supported"
                else:
                    yield path, "transpose is only allowed on matmul input 1, unary input 0 or binary input 0"


@rule
def op_input_shapes(ctx: Ctx):
    """Each input's (t, rt, ct) after unpad, TMs and pad equals what the op expects: eltwise = the output,
    matmul in0 (t, rt, K) / in1 (t, K, ct) with K = m_k·u_kt / bias = output, reduce along K or z (§2.3).
    TM divisibility (slice/stack factors, broadcast z of t == 1) is checked on the way."""
    for g, op in ctx.ops():
        for index, name in enumerate(op.inputs):
            if name not in ctx.netlist.queues and name not in g.ops:
                continue
            try:
                shape = input_shape_after_tms(ctx.netlist, op, index)
            except TMError as exc:
                key = f"input_{index}_unpad" if "unpad" in str(exc) else f"input_{index}_tms"
                yield _o(g, op, key), str(exc)
                continue
            expected = expected_input_shape(op, index)
            if expected is None or shape == expected:
                continue
            via = " after TMs" if op.tms_of(index) or index in op.input_pad or index in op.input_unpad else ""
            extra = ""
            if op.type in MATMUL_OPS and index in (0, 1):
                k_got = shape.ct if index == 0 else shape.rt
                k_want = expected.ct if index == 0 else expected.rt
                if k_got != k_want:
                    extra = f"; K = m_k·u_kt = {op.m_k}·{op.u_kt} = {op.m_k * op.u_kt} but input gives {k_got}"
            yield _tms_path(g, op, index) if via else f"{_o(g, op, 'inputs')}[{index}]", (
                f"input {index} ({name!r}) has shape (t, rt, ct) = {tuple(shape)}{via}, "
                f"but {op.type} {op.name!r} expects {tuple(expected)}{extra}")


@rule
def reduce_output(ctx: Ctx):
    """A reduce over r outputs one tile row; over c one tile column (§2.3)."""
    for g, op in ctx.ops():
        if op.type != "reduce":
            continue
        dim, shape = op.attr("dim"), op.shape
        if dim == "r" and shape.rt != 1:
            yield _o(g, op, "mblock"), f"reduce over r outputs rt == 1, got rt = {shape.rt}"
        if dim == "c" and shape.ct != 1:
            yield _o(g, op, "mblock"), f"reduce over c outputs ct == 1, got ct = {shape.ct}"


def _stack_block(op: NetlistOp, index: int, horizontal: bool) -> Optional[int]:
    """Consumer-side block length (tiles) along the stacked dimension of an input, if it is pinned."""
    if op.type in MATMUL_OPS and not op.attr("identity"):
        if index == 0:
            return op.u_kt if horizontal else op.ublock[0]
        if index == 1:
            return op.ublock[1] if horizontal else op.u_kt
        if index == 2 and op.attr("bias"):
            return op.ublock[1] if horizontal else op.ublock[0]
        return None
    if op.type in COPY_OPS or op.type in SFPU_OPS or op.type in BINARY_OPS:
        return op.ublock[1] if horizontal else op.ublock[0]
    return None


@rule
def stack_factors(ctx: Ctx):
    """hstack/vstack: each stacked slice must cover whole consumer blocks along that dimension, or a
    consumer block whole slices (one divides the other; §2.3 "in one direction or the other")."""
    for g, op in ctx.ops():
        for index, tms in op.input_tms.items():
            if index >= len(op.inputs) or not any(isinstance(tm, (HStack, VStack)) for tm in tms):
                continue
            try:
                shape = ctx.netlist.shape_of(op.inputs[index])
                if index in op.input_unpad:
                    shape = tms_shape(shape, (), op.input_unpad[index])
            except (KeyError, TMError):
                continue
            for k, tm in enumerate(tms):
                if isinstance(tm, (HStack, VStack)):
                    horizontal = isinstance(tm, HStack)
                    block = _stack_block(op, index, horizontal)
                    width = shape.ct if horizontal else shape.rt
                    if block and width and width % block and block % width:
                        yield f"{_tms_path(g, op, index)}[{k}]", (
                            f"{tm.name} {tm.factor} stacks slices of {width} tile(s), which neither divide nor are "
                            f"divided by the consumer block of {block} tile(s)")
                if isinstance(tm, Pad):
                    continue
                try:
                    shape = tm.apply(shape)
                except TMError:
                    break


@rule
def buf_size_mb_stack(ctx: Ctx):
    """When an op's output is stacked across t by a consumer, its buf_size_mb divides or is a multiple of
    its t (§2.3)."""
    for g, op in ctx.ops():
        for index, tms in op.input_tms.items():
            if index >= len(op.inputs) or not any(isinstance(tm, (HStack, VStack)) for tm in tms):
                continue
            producer = g.ops.get(op.inputs[index])
            if producer is None or producer.buf_size_mb <= 0:
                continue
            b, t = producer.buf_size_mb, producer.t
            if t % b and b % t:
                yield _o(g, producer, "buf_size_mb"), (f"buf_size_mb {b} must divide or be a multiple of t = {t}, "
                                                       f"since {op.name!r} stacks its output")


@rule
def forked_dram_inputs(ctx: Ctx):
    """forked_dram_inputs map an input queue of the op to an op of the same graph."""
    for g, op in ctx.ops():
        for i, (queue, other) in enumerate(op.forked_dram_inputs):
            path = f"{_o(g, op, 'forked_dram_inputs')}[{i}]"
            if queue not in ctx.netlist.queues:
                yield path, f"{queue!r} is not a queue"
            elif queue not in op.inputs:
                yield path, f"{queue!r} is not an input of {op.name!r}"
            if other not in g.ops:
                yield path, f"{other!r} is not an op of graph {g.name}"


@rule
def fused_op_reference(ctx: Ctx):
    """A fused_op names a defined fused op whose input count matches (§1.4); its output sub-op has the
    op's mblock/ublock and is not a matmul with m_k > 1."""
    for g, op in ctx.ops():
        if op.type not in FUSED_OPS or "fused_op_id" not in op.attributes:
            continue
        fused = ctx.netlist.fused_ops.get(op.attr("fused_op_id"))
        if fused is None:
            yield _a(g, op, "fused_op_id"), f"fused op {op.attr('fused_op_id')!r} is not defined in fused_ops"
            continue
        if fused.inputs != len(op.inputs):
            yield _o(g, op, "inputs"), f"fused op {fused.id} takes {fused.inputs} input(s), got {len(op.inputs)}"
        for si, sched in enumerate(fused.schedules):
            for sub in sched:
                if sub.output != "output":
                    continue
                path = f"fused_ops.{fused.id}.schedules[{si}].{sub.name}"
                if (sub.mblock, sub.ublock) != (op.mblock, op.ublock):
                    yield f"{path}.mblock", (f"writes the output of {op.name!r}, so needs mblock {list(op.mblock)} "
                                             f"and ublock {list(op.ublock)}")
                if sub.type in MATMUL_OPS and int(sub.attributes.get("m_k", 1)) > 1:
                    yield f"{path}.attributes.m_k", "a matmul with m_k > 1 cannot write a fused op's output"


def _fused_names(fused) -> str:
    names = [f"input{i}" for i in range(fused.inputs)] + [f"intermed{i}" for i in range(fused.intermediates)]
    return ", ".join(names)


def _fused_buffer(name: str, prefix: str, limit: int) -> bool:
    return name.startswith(prefix) and name[len(prefix):].isdigit() and int(name[len(prefix):]) < limit


@rule
def fused_op_schedule(ctx: Ctx):
    """Scheduled ops read inputK/intermedK/dest and write intermedK/dest/output; a dest write is read by the
    next op; no transpose or pad inside fused ops; names are unique (§1.4)."""
    for fid, fused in ctx.netlist.fused_ops.items():
        seen: Set[str] = set()
        for si, sched in enumerate(fused.schedules):
            previous = ""
            for sub in sched:
                path = f"fused_ops.{fid}.schedules[{si}].{sub.name}"
                if sub.name in seen:
                    yield path, "scheduled op names must be unique within a fused op"
                seen.add(sub.name)
                if sub.type not in OP_TYPES or sub.type in FUSED_OPS:
                    yield f"{path}.type", f"{sub.type!r} cannot be scheduled in a fused op"
                for i, name in enumerate(sub.inputs):
                    if not (name == "dest" or _fused_buffer(name, "input", fused.inputs)
                            or _fused_buffer(name, "intermed", fused.intermediates)):
                        yield f"{path}.inputs[{i}]", (f"{name!r} is not one of {_fused_names(fused)} or dest")
                if not (sub.output in ("dest", "output") or _fused_buffer(sub.output, "intermed", fused.intermediates)):
                    yield f"{path}.output", f"{sub.output!r} must be intermedK, dest or output"
                for key in ("pop", "pop_last"):
                    for name in getattr(sub, key):
                        ok = _fused_buffer(name, "intermed", fused.intermediates) or (
                            key == "pop" and _fused_buffer(name, "input", fused.inputs))
                        if not ok:
                            yield f"{path}.{key}", f"{name!r} is not a buffer this fused op can pop"
                for index, tms in sub.input_tms.items():
                    for k, tm in enumerate(tms):
                        if isinstance(tm, (Transpose, Pad)):
                            yield f"{path}.input_{index}_tms[{k}]", f"{tm.name} is not allowed inside fused ops"
                uses_dest = "dest" in sub.inputs
                if previous == "dest" and not uses_dest:
                    yield f"{path}.inputs", "the previous op wrote dest, so this op must read dest"
                if uses_dest and previous != "dest":
                    yield f"{path}.inputs", "reads dest, but the previous scheduled op did not write dest"
                previous = sub.output


@rule
def l1_fit(ctx: Ctx):
    """With a device, every op's per-core buffers fit the L1 op-buffer budget (§5.3): output
    buf_size_mb·mblock, intermediates, inputs (2 ublocks / matmul column-row strips / resident prologue)."""
    if ctx.device is None:
        return
    budget = ctx.device.l1_op_buffer_budget_bytes
    for g in ctx.netlist.graphs.values():
        prologue = prologue_inputs(ctx.netlist, g.name)
        for op in g.ops.values():
            if op.type in NON_TENSIX_OPS:
                continue
            try:
                usage = op_l1_usage(ctx.netlist, op, prologue.get(op.name, ()))
            except (KeyError, ValueError):
                continue
            if usage.total > budget:
                parts = ", ".join(f"{k} {v}" for k, v in usage.buffers.items())
                yield _o(g, op), (f"needs {usage.total} bytes of L1 per core ({parts}), more than the "
                                  f"{budget}-byte op-buffer budget of {ctx.device.name}")
