"""Data formats and math fidelity of every lowered op and queue (TT-Buda's data-format passes).

Order of application (later wins):

1. Defaults. Floating-point tensors use ``default_df_override`` if set, else ``fp32_fallback``
   (Float32 becomes Float16_b unless configured otherwise); bfloat16/float16 inputs keep Float16_b /
   Float16; integer inputs are Int32 (Int8 for int8), boolean inputs a float format (0/1). ``acc_df`` is ``default_accumulate_df``, else
   Float32 when the default format is Float32 on a chip that can accumulate in it, else Float16_b;
   fidelity is ``default_math_fidelity`` (HiFi3).
2. ``amp_level``, TT-Buda's automatic mixed precision (its ``run_automatic_mixed_precision``): 0 none;
   1 "mixed B formats": softmax and layernorm ops Float16_b (out, intermediate, accumulate); matmuls out and
   intermediate Bfp8_b, accumulate Float16_b, HiFi2, their weight and bias parameters (operands 1, 2) Bfp8_b;
   2 "mixed A formats": matmuls out Bfp8, intermediate and accumulate Float16, every operand Bfp8 (producing
   ops included), except tile-broadcast matmuls, and matmuls of softmax/layernorm, which stay Float16 (as do
   multiplies of a softmax and buffers); gelu intermediate Bfp8.
   With ``default_df_override`` set, any level > 0 picks B for a b-format default and A for an a-format one,
   as TT-Buda did. Other levels are logged and skipped (TT-Buda's warning). TT-Buda's rules for fused ops
   (Float16_b / Float16) do not apply here: fusion runs after data formats. Data-movement matmuls (pickers)
   keep their exact formats. (TT-Buda's documentation describes level 1 as "optimizer ops Float32/HiFi4";
   its code did the above; pybuda compiles no optimizer ops.)
3. ``amp_properties`` (``configure_mixed_precision`` / ``enable_amp_light``) in order: a rule matches on
   ``op_type`` (the netlist type, ``sparse_matmul`` for the index-driven pickers as in TT-Buda's graph, or
   the IR op it came from; :func:`_rule_op_type`), ``epoch_type`` and ``name_regex``
   (matching the *whole* op name, or the name of the model op it came from, as TT-Buda's
   ``std::regex_match``) and sets output /
   intermediate / accumulate df, fidelity and ``input_df {index: (df, include_activations)}`` (the df of
   the parameter/constant feeding that input, or of the producing op when ``include_activations``).
3b. Ops tagged ``exact_df`` (index math, integer data) take that format, HiFi4 and, off Grayskull, Float32
   accumulation; ops computing a comparison's difference (``SIGN_EXACT``) keep Float16_b or Float32 output
   and accumulation, which flush no small difference to zero (Float16 and block formats do); ops whose NaNs
   and infinities a test or comparison reads (``NONFINITE_SAFE``, :mod:`pybuda.passes.graph.nonfinite`) keep
   Float16_b or Float32, which hold them (Float32 in place of Float16, whose precision Float16_b lacks, except
   on Grayskull).
4. Legalisation (netlist spec §1.3, §4.5): on Grayskull Float32/Int32 accumulation becomes Float16_b;
   accumulating ops (matmuls) never spill to Bfp4/Bfp2 (Bfp8 of the same exponent family instead) and
   keep ``intermed_df`` in ``out_df``'s exponent family; integer data needs HiFi4 and Int32 accumulation;
   ops writing to the host (untilize) output Float16, Float16_b or Float32; a z-reduce does no
   conversion; data-movement matmuls (pickers, tile broadcasts) get at least the fidelity that keeps
   them exact unless a rule set it; compiler index queues stay RawUInt32. With ``lofi_rounding`` (the
   default) every op but a matmul asked to run at LoFi runs at HiFi2, which costs it nothing
   (:func:`_free_fidelity`).
4b. Exact maxima: every r/c reduce max returns one of its operand's elements bit for bit (argmax, argmin and
   ``x == x.max(d)`` compare with it). The ops tagged ``HOLDS_OPERAND`` (the padding mask before the reduce,
   the negations of a min) get output and Dest formats that hold their operand's values (a plain format: a
   block format would take PAD_LOWEST's exponent), and the reduce an output format that holds its operand's.
   On Grayskull, whose Dest holds no Float32, Float32 values those ops read are stored as Float16_b where they
   are made (inputs, constants, ops; not parameters or integer inputs). A z-reduce keeps its input's format
   and gathers maxima from different blocks, so block-format data the z-reduce of a reduce_max reads is stored
   in a plain format.
5. ``in_df`` of every op = its producer's ``out_df`` / queue ``df``; output queues take their producer's.
"""

from __future__ import annotations

import logging
import re
from typing import Optional, Set

import torch

from pybuda.ir.graph import CARRIES_NONFINITE, HOLDS_MASK_FILL, HOLDS_OPERAND, NONFINITE_SAFE, SIGN_EXACT
from pybuda.ir.lowered import BudaGraph, BudaOp
from pybuda.netlist.device_ops import ops_where
from pybuda.passes.context import CompileContext
from pybuda.dtypes import DataFormat as DF
from pybuda.dtypes import MathFidelity as MF
from pybuda.errors import ConfigError

log = logging.getLogger(__name__)

ACC_FORMATS = (DF.Float16, DF.Float16_b, DF.Float32, DF.Int32)
LOW_BFP = {DF.Bfp4: DF.Bfp8, DF.Bfp2: DF.Bfp8, DF.Bfp4_b: DF.Bfp8_b, DF.Bfp2_b: DF.Bfp8_b}
UNTILIZE_OK = (DF.Float16, DF.Float16_b, DF.Float32)
#: Op types mixed precision (amp level >= 2) keeps in Float16_b: the ``amp_sensitive`` device-op flag.
SENSITIVE = ops_where("amp_sensitive")
_FIDELITY_RANK = {MF.LoFi: 0, MF.HiFi2: 1, MF.HiFi2_B: 1, MF.HiFi3: 2, MF.HiFi4: 3}
# Booleans are not here: on the device a mask is a float 0/1, exact in every float format.
_DTYPE_DF = {"bfloat16": DF.Float16_b, "float16": DF.Float16, "int8": DF.Int8, "uint8": DF.UInt8,
             "int32": DF.Int32, "int64": DF.Int32, "int16": DF.Int32}


def set_data_formats(bg: BudaGraph, ctx: CompileContext) -> BudaGraph:
    """Assign legal formats and fidelity to every op and queue (in place); returns ``bg``."""
    cfg = ctx.config
    default = DF.from_json(cfg.default_df_override) if cfg.default_df_override is not None else DF.from_json(cfg.fp32_fallback)
    if cfg.default_accumulate_df is not None:
        acc = DF.from_json(cfg.default_accumulate_df)
    else:
        # Float16_b is TT-Buda's default Dest format; a Float32 model keeps Float32 in Dest where the chip
        # can (Wormhole and later): truncating every op's result to bfloat16 would cost the precision the
        # user asked for (about 0.2 % per op, compounding through deep networks).
        acc = DF.Float32 if default == DF.Float32 and not ctx.is_grayskull else DF.Float16_b
    if acc not in ACC_FORMATS:
        raise ctx.error(f"default_accumulate_df must be one of {[d.name for d in ACC_FORMATS]}, got {acc.name}")
    if ctx.is_grayskull and acc in (DF.Float32, DF.Int32):
        log.warning("Grayskull cannot accumulate in %s; using Float16_b", acc.name)
        ctx.notes["acc_df_demoted"] = acc.name
        acc = DF.Float16_b
    fidelity = MF.from_json(cfg.default_math_fidelity)

    # 1. defaults
    for q in bg.queues.values():
        if q.tags.get("df") == "RawUInt32":
            q.df = DF.RawUInt32
        elif q.kind == "input" and q.tags.get("integer_values") and q.tags.get("dtype") not in _INT_DTYPES:
            # Integer data (embedding ids) pushed in a float format: Float32 keeps it exact up to 2**24,
            # where a block or 16-bit default would silently merge neighbouring ids.
            q.df = DF.Float32
        elif q.kind == "input" and q.tags.get("exact_df"):
            q.df = DF.from_json(q.tags["exact_df"])  # read by output copies only: what the host pushed comes back
        elif q.kind == "input":
            dtype = q.tags.get("dtype", "float32")
            q.df = _DTYPE_DF.get(dtype, default) if cfg.default_df_override is None or dtype in _INT_DTYPES else default
        elif q.kind in ("parameter", "constant") and q.tags.get("exact_df"):
            q.df = DF.from_json(q.tags["exact_df"])  # a compiler-made table that must stay exact
        elif q.kind in ("parameter", "constant"):
            dtype = q.tags.get("dtype", "float32")
            q.df = _integer_table_df(bg.tensors.get(q.name), dtype) if dtype in _INT_DTYPES else default
    for op in bg.ops.values():
        op.out_df = default
        op.intermed_df = default
        op.acc_df = acc
        op.math_fidelity = fidelity

    # 2. AMP level
    level = cfg.amp_level or 0
    if level:
        _apply_amp_level(bg, level, cfg.default_df_override)

    # 3. user rules
    explicit_fidelity: Set[str] = set()
    explicit_acc: Set[str] = set()
    explicit_out: Set[str] = set()
    for rule in cfg.amp_properties:
        regex = re.compile(rule.name_regex) if rule.name_regex else None
        matched: list = []
        for op in bg.ops.values():
            if not _matches(rule, op, regex):
                continue
            matched.append(op)
            if rule.output_df is not None:
                explicit_out.add(op.name)
                op.out_df = DF.from_json(rule.output_df)
                if rule.intermediate_df is None:
                    op.intermed_df = op.out_df
            if rule.intermediate_df is not None:
                op.intermed_df = DF.from_json(rule.intermediate_df)
            if rule.accumulate_df is not None:
                op.acc_df = DF.from_json(rule.accumulate_df)
                explicit_acc.add(op.name)
            if rule.math_fidelity is not None:
                op.math_fidelity = MF.from_json(rule.math_fidelity)
                explicit_fidelity.add(op.name)
            for index, spec in (rule.input_df or {}).items():
                df, include_activations = spec if isinstance(spec, (tuple, list)) else (spec, False)
                index = int(index)
                if index >= len(op.inputs):
                    continue
                src = op.inputs[index]
                q = bg.queues.get(src)
                if q is not None and q.kind in ("parameter", "constant") and q.tags.get("df") != "RawUInt32":
                    q.df = DF.from_json(df)
                elif include_activations and src in bg.ops:
                    bg.ops[src].out_df = DF.from_json(df)
                    bg.ops[src].intermed_df = DF.from_json(df)
        _check_input_df_indices(rule, matched)

    # 3b. ops whose values must stay exact (index math of argmax, integer data): their tagged format, unless a
    # user rule set the output format; on chips that can, they accumulate in Float32 too, and they multiply
    # at HiFi4 (pybuda.ops.integer.MULTIPLIER_EXACT_INT assumes full source-register precision; LoFi keeps 4
    # mantissa bits of an operand).
    for op in bg.ops.values():
        exact = op.tags.get("exact_df")
        if exact and op.name not in explicit_out:
            op.out_df = op.intermed_df = DF.from_json(exact)
            if not ctx.is_grayskull and op.name not in explicit_acc:
                op.acc_df = DF.Float32
            if op.name not in explicit_fidelity:
                op.math_fidelity = MF.HiFi4
        # 3c. the differences comparisons step on: a format that flushes no small difference to zero; the values
        # NaN/infinity tests and comparisons read (NONFINITE_SAFE) and the values carrying NaN/infinity on purpose
        # (CARRIES_NONFINITE): a format that holds NaN and infinity. All are Float16_b or Float32.
        if (op.tags.get(SIGN_EXACT) or op.tags.get(NONFINITE_SAFE) or op.tags.get(CARRIES_NONFINITE)) \
                and not op.out_df.is_integer:
            if op.out_df not in _NO_FLUSH and op.name not in explicit_out:
                op.out_df = op.intermed_df = _no_flush_like(op.out_df, ctx.is_grayskull)
            if op.acc_df not in _NO_FLUSH and op.name not in explicit_acc:
                op.acc_df = _no_flush_like(op.acc_df, ctx.is_grayskull)
        # 3d. values holding a mask's fill beside ordinary data (HOLDS_MASK_FILL): a format with an exponent per
        # datum, of the block format's family (the fill would flush the rest of its block to zero). A fill that is
        # an infinity also makes its values CARRIES_NONFINITE, held above as NaN/infinity (a softmax row masked
        # entirely is NaN), which a B block would turn into infinities and an A format saturate.
        elif op.tags.get(HOLDS_MASK_FILL) and op.out_df.is_bfp and op.name not in explicit_out:
            op.out_df = op.intermed_df = DF.Float16_b if op.out_df.exponent_family == "b" else DF.Float16

    # 4. legalise
    for op in bg.ops.values():
        _legalize(op, bg, ctx, op.name in explicit_fidelity, op.name in explicit_acc)
    if cfg.lofi_rounding:
        _free_fidelity(bg, explicit_fidelity)
    _store_maxima_sources(bg, ctx.is_grayskull)
    for op in bg.ops.values():  # z-reduce and buffering nops convert nothing: they keep their producer's format
        if (op.type == "reduce" and op.attrs.get("dim") == "z") or op.tags.get("buffering_nop"):
            src = _df_of(bg, op.inputs[0])
            op.out_df = op.intermed_df = src

    # A splice copies tiles and converts nothing: every input must arrive in one format (the first's).
    for op in bg.ops.values():
        if op.type == "splice":
            first = _df_of(bg, op.inputs[0])
            for name in op.inputs[1:]:
                if name in bg.ops:
                    bg.ops[name].out_df = bg.ops[name].intermed_df = first

    _exact_maxima(bg)

    # 5. in_df and output queues
    for op in bg.ops.values():
        op.in_df = [_df_of(bg, name) for name in op.inputs]
    for q in bg.queues.values():
        if q.producer is not None and q.producer in bg.ops:
            q.df = bg.ops[q.producer].out_df
    return bg


_INT_DTYPES = {"int8", "uint8", "int32", "int64", "int16"}
#: Formats in which a nonzero difference of two values stays nonzero with its sign (SIGN_EXACT).
_NO_FLUSH = (DF.Float16_b, DF.Float32)


def _integer_table_df(value: Optional[torch.Tensor], dtype: str) -> DF:
    """The queue format of an integer constant or parameter: Float32 when every value is exact there (|v| <=
    2**24), as the compiler keeps all integer data (ops computing integers are ``exact_df`` Float32, integer
    inputs are pushed as Float32). An integer queue format would make every op reading it an integer op
    (:func:`_legalize`), Int32 output and all: the float ``x + one_hot(argmax(x)).float()`` (whose one-hot
    compares with a constant ``arange``) came back rounded to integers. Larger values keep their integer
    format (Int32 holds them; Float32 would round them)."""
    from pybuda.ops.integer import FLOAT32_EXACT_INT

    if value is not None and value.numel() and int(value.abs().max()) > FLOAT32_EXACT_INT:
        return _DTYPE_DF[dtype]
    return DF.Float32


def _no_flush_like(df: DF, grayskull: bool) -> DF:
    """The format of ``_NO_FLUSH`` (which hold NaN, infinity and every small difference) replacing ``df``: Float16_b,
    as precise as a block format; for Float16's 11 significant bits Float32, except on Grayskull, whose Dest
    holds no Float32 (there every op result passes Float16_b anyway)."""
    return DF.Float32 if df == DF.Float16 and not grayskull else DF.Float16_b


def _check_input_df_indices(rule, matched) -> None:
    # An input_df index that fits none of the ops a rule matched would otherwise be skipped silently (the
    # user asked for a format that is never applied). A rule may match ops of different arity (matmul with
    # and without bias), so an index is only wrong when no matched op has that operand.
    if not rule.input_df or not matched or not getattr(rule, "strict_input_df", True):
        return
    most = max(len(op.inputs) for op in matched)
    for index in rule.input_df:
        if int(index) >= most:
            names = [op.name for op in matched[:5]] + (["..."] if len(matched) > 5 else [])
            raise ConfigError(f"configure_mixed_precision: input_df index {index} is out of range for op(s) "
                              f"{names} (at most {most} operand(s), indices 0..{most - 1})")


def _df_of(bg: BudaGraph, name: str) -> DF:
    return bg.ops[name].out_df if name in bg.ops else bg.queues[name].df


def _rule_op_type(op: BudaOp) -> Optional[str]:
    """The op type a mixed-precision rule's ``op_type`` names this op by, as TT-Buda's rules saw its graph:
    the index-driven picker of a convolution, pool or resize is ``sparse_matmul`` (TT-Buda's op), and the
    compiler's other data-movement matmuls (tile broadcasts, column and one-hot pickers: TMs in TT-Buda)
    answer to no type; ``matmul`` is then a model's own matmul (a linear layer, a convolution's weights),
    which is what ``enable_amp_light`` and ``configure_mixed_precision(op_type="matmul")`` targeted."""
    picker = op.tags.get("picker")
    if op.type == "matmul" and picker:
        return "sparse_matmul" if picker == "sparse" else None
    return op.type


def _matches(rule, op: BudaOp, regex: Optional[re.Pattern]) -> bool:
    if rule.op_type is not None and rule.op_type not in (_rule_op_type(op), op.tags.get("ir_op_type")):
        return False
    if rule.epoch_type is not None and rule.epoch_type != op.epoch_type:
        return False
    if regex is not None and not regex.fullmatch(op.name) and not regex.fullmatch(str(op.tags.get("ir_node") or "")):
        return False
    if rule.is_gradient_op is not None and rule.is_gradient_op != op.gradient_op:
        return False
    return True


def _is_data_movement(op: BudaOp) -> bool:
    return bool(op.tags.get("picker"))


_AMP_LEVELS = {0: "none", 1: "mixed_b", 2: "mixed_a"}


def _apply_amp_level(bg: BudaGraph, level: int, default_override) -> None:
    """TT-Buda's AMP presets (module docstring, step 2)."""
    if level not in _AMP_LEVELS:
        if level not in _warned_levels:
            _warned_levels.add(level)
            log.warning("amp_level=%s is not one of TT-Buda's levels (0 none, 1 mixed B formats, 2 mixed A formats); "
                        "skipping AMP, as TT-Buda did", level)
        return
    setting = _AMP_LEVELS[level]
    if default_override is not None and level > 0:
        setting = "mixed_b" if _family_b(DF.from_json(default_override)) else "mixed_a"
    for op in bg.ops.values():
        if _is_data_movement(op) or op.tags.get("buffering_nop"):
            continue
        kind = op.tags.get("ir_op_type") or op.type
        name = op.name
        if setting == "mixed_b":
            if _is_type(op, "softmax", "layernorm") or _in_layer(op, "softmax", "layernorm"):
                op.out_df = op.intermed_df = op.acc_df = DF.Float16_b
            elif op.type == "matmul" and not op.tags.get("reduce") and kind == "matmul":
                op.out_df = op.intermed_df = DF.Bfp8_b
                op.acc_df = DF.Float16_b
                op.math_fidelity = MF.HiFi2
                _params_to(bg, op, (1, 2), DF.Bfp8_b)
        else:
            if op.type == "matmul" and kind == "matmul":
                sixteen = "brcst" in name or _in_layer(op, "softmax", "layernorm")
                df = DF.Float16 if sixteen else DF.Bfp8
                op.out_df = df
                op.intermed_df = op.acc_df = DF.Float16
                for index in (0, 1, 2):  # include_activations: producing ops too
                    if index < len(op.inputs):
                        src = op.inputs[index]
                        q = bg.queues.get(src)
                        if q is not None and q.kind in ("parameter", "constant") and q.tags.get("df") != "RawUInt32":
                            q.df = df
                        elif src in bg.ops and not _is_data_movement(bg.ops[src]):
                            bg.ops[src].out_df = df
            elif op.type == "multiply" and _in_layer(op, "softmax"):
                op.out_df = op.intermed_df = op.acc_df = DF.Float16
            elif op.type == "gelu":
                op.intermed_df = DF.Bfp8
            elif op.type == "buffer":
                op.out_df = op.intermed_df = op.acc_df = DF.Float16


_warned_levels: Set[int] = set()


def _is_type(op: BudaOp, *types: str) -> bool:
    return op.type in types or op.tags.get("ir_op_type") in types or op.tags.get("original_op_type") in types


def _in_layer(op: BudaOp, *words: str) -> bool:
    """Whether the op comes from a softmax/layernorm (TT-Buda's ``.*softmax.*`` name rules)."""
    text = f"{op.name} {op.tags.get('ir_node') or ''} {op.tags.get('decomposed_from') or ''}".lower()
    return any(w in text for w in words)


def _params_to(bg: BudaGraph, op: BudaOp, indices, df: DF) -> None:
    for index in indices:
        if index < len(op.inputs):
            q = bg.queues.get(op.inputs[index])
            if q is not None and q.kind == "parameter":
                q.df = df


def _family_b(df: DF) -> bool:
    return df.exponent_family == "b" or df == DF.Float32


def _free_fidelity(bg: BudaGraph, explicit_fidelity: Set[str]) -> None:
    """Every op but a matmul runs at HiFi2 where LoFi was asked for (``lofi_rounding``), unless a rule set it.

    Only ELWMUL reads fidelity among them, and eltwise math is unpack/pack-bound (8 cycles of math per tile
    against ~50 to unpack bfp8; spec §6.2): the second phase costs no time, and with it a product of bf16 or
    bfp8 operands is exact, where LoFi truncates one operand to 4 mantissa bits (a 1.5 % bias on average:
    SiLU's x·sigmoid(x) would lose it in every layer). All of them, so that fusion groups stay uniform.
    """
    for op in bg.ops.values():
        if op.type != "matmul" and op.math_fidelity == MF.LoFi and op.name not in explicit_fidelity:
            op.math_fidelity = MF.HiFi2


# --- exact maxima ------------------------------------------------------------------------------------------
#
# A reduce max must return one of its operand's elements bit for bit: argmax and argmin,
# ``x == x.max(d, keepdim=True)``, reduce_max's and max-pool's backward compare the operand with its maximum for
# equality, and a maximum rounded on its way matches no element (argmax returned the index one past the end,
# with no error). On the way are the ops tagged ``HOLDS_OPERAND`` (the add that masks the tile padding, the
# negations of a min), whose results pass through Dest, and the reduce's own output: each gets formats that hold
# the values of the operand it copies. Grayskull's Dest holds at most Float16_b and Float16, so there Float32
# data such an op reads is stored as Float16_b where it is made: every reader, the comparison included, then
# reads the values the maximum is taken from.

_HELD_BY_FLOAT16_B = frozenset({DF.Float16_b, DF.Bfp8_b, DF.Bfp4_b, DF.Bfp2_b, DF.Bfp8, DF.Bfp4, DF.Bfp2,
                                DF.Lf8, DF.Fp8_e4m3})
_MAN_BITS = {DF.Bfp8: 7, DF.Bfp8_b: 7, DF.Bfp4: 3, DF.Bfp4_b: 3, DF.Bfp2: 1, DF.Bfp2_b: 1}


def _holds(dst: DF, src: DF, single: bool = False) -> bool:
    """Whether every value of format ``src`` is exactly a value of ``dst``. A block format holds nothing
    beside PAD_LOWEST (a mask's padding takes the shared exponent and flushes its neighbours), except with
    ``single``: a value alone in its block (a reduce's result, zeros around it), which a block format of the
    same exponent family and at least as many mantissa bits keeps."""
    if dst.is_bfp:
        return single and src.is_bfp and dst.exponent_family == src.exponent_family and _MAN_BITS[dst] >= _MAN_BITS[src]
    if dst == src or dst == DF.Float32:
        return True
    if dst == DF.Float16_b:
        return src in _HELD_BY_FLOAT16_B
    return dst == DF.Float16 and src == DF.Lf8


def _holder(src: DF) -> DF:
    """The narrowest plain (non-block) format, and Dest format, that holds every value of ``src``."""
    if src in (DF.Float32, DF.Float16):
        return src
    return DF.Float16_b if _holds(DF.Float16_b, src) else DF.Float32


def _held_operand(bg: BudaGraph, op: BudaOp) -> Optional[str]:
    """The name of the operand whose values ``op`` holds (``HOLDS_OPERAND``), or None."""
    index = op.tags.get(HOLDS_OPERAND)
    if index is None or not 0 <= int(index) < len(op.inputs):
        return None
    return op.inputs[int(index)]


def _store_maxima_sources(bg: BudaGraph, grayskull: bool) -> None:
    """Formats of the values maxima are taken from, where they are made (before the z-reduces and buffering
    nops take their sources' formats).

    A z-reduce outputs its input's format (a netlist rule), and its result gathers maxima from different
    blocks: a block format would round them anew, so block-format data the z-reduce of a ``reduce_max`` reads
    is stored in a plain format holding it (a max-pool's result is compared with nothing: it keeps its
    format). On Grayskull, Float32 values an op tagged ``HOLDS_OPERAND`` reads are stored as Float16_b, the
    widest format its Dest holds (the op would round them, and the maximum would equal no element the
    comparison reads); only low mantissa bits go, which the first binary op reading them drops anyway.
    Parameters keep Float32 (an optimizer's small updates live in those bits), and so do integer inputs pushed
    as Float32 (embedding ids beyond 256)."""
    for op in list(bg.ops.values()):
        if op.type == "reduce" and op.attrs.get("dim") == "z" and op.tags.get("ir_op_type") == "reduce_max":
            src = _df_of(bg, op.inputs[0])
            if src.is_bfp:
                _store_as(bg, op.inputs[0], _holder(src), parameters=True)
        name = _held_operand(bg, op)
        if grayskull and name is not None and _df_of(bg, name) == DF.Float32:
            _store_as(bg, name, DF.Float16_b)


def _store_as(bg: BudaGraph, name: str, df: DF, parameters: bool = False) -> None:
    kinds = ("input", "constant", "parameter") if parameters else ("input", "constant")
    if name in bg.queues:
        q = bg.queues[name]
        if q.producer is not None and q.producer in bg.ops:
            _store_as(bg, q.producer, df, parameters)
        elif q.kind in kinds and not q.tags.get("integer_values") and q.tags.get("df") != "RawUInt32":
            q.df = df
        return
    op = bg.ops[name]
    if op.out_df.is_integer:
        return
    if (op.type == "reduce" and op.attrs.get("dim") == "z") or op.tags.get("buffering_nop"):
        _store_as(bg, op.inputs[0], df, parameters)  # converts nothing: its source is stored so
    op.out_df = df
    if op.type != "matmul" or _family_b(op.intermed_df) != _family_b(df):  # a matmul spills in out's family
        op.intermed_df = df


def _exact_maxima(bg: BudaGraph) -> None:
    """Formats of the ops tagged ``HOLDS_OPERAND`` and of every r/c reduce max that keep the values of the
    operand they copy (in schedule order: a negation before the mask reading it, the mask before its reduce)."""
    for op in bg.ops.values():
        name = _held_operand(bg, op)
        if name is not None:
            src = _df_of(bg, name)
            if src.is_integer or op.out_df.is_integer or op.acc_df.is_integer:
                continue  # integer ops accumulate in Int32 (legalised)
            hold = _holder(src)
            if not _holds(op.out_df, src):
                op.out_df = op.intermed_df = hold
            if not _holds(op.acc_df, src) and hold in ACC_FORMATS:
                op.acc_df = hold  # Grayskull's Float32 operands are Float16_b by now
            for other in op.inputs:  # the mask's PAD_LOWEST: an A format would saturate it near -2**17
                q = bg.queues.get(other)
                if (other != name and q is not None and q.kind == "constant" and q.df.exponent_family == "a"
                        and hold != DF.Float16):
                    q.df = DF.Float16_b
        elif op.type == "reduce" and op.attrs.get("type", "max") == "max" and op.attrs.get("dim") != "z":
            producer = bg.ops.get(op.inputs[0])
            copied = _held_operand(bg, producer) if producer is not None else None
            src = _df_of(bg, copied if copied is not None else op.inputs[0])
            # Over columns each maximum sits alone in its block (column 0); over rows they share one (row 0).
            single = op.attrs.get("dim") == "c"
            if not (src.is_integer or op.out_df.is_integer) and not _holds(op.out_df, src, single=single):
                op.out_df = op.intermed_df = _holder(src)


def _legalize(op: BudaOp, bg: BudaGraph, ctx: CompileContext, explicit_fidelity: bool, explicit_acc: bool) -> None:
    in_dfs = [_df_of(bg, n) for n in op.inputs]
    data_in = [df for df, n in zip(in_dfs, op.inputs) if not (n in bg.queues and bg.queues[n].tags.get("df") == "RawUInt32")]
    integer = op.out_df.is_integer or any(df.is_integer for df in data_in)
    if integer:
        if ctx.is_grayskull:
            # Name the integer operand or output: the op's own out_df may still be a float default here.
            what = [f"input '{n}' is {df.name}" for df, n in zip(in_dfs, op.inputs) if df.is_integer and
                    not (n in bg.queues and bg.queues[n].tags.get("df") == "RawUInt32")]
            if op.out_df.is_integer:
                what.append(f"its output is {op.out_df.name}")
            raise ctx.error(f"{' and '.join(what)}: Grayskull has no integer data formats; cast integer tensors "
                            f"to float in the model, or compile for Wormhole B0", op=op.name)
        op.math_fidelity = MF.HiFi4
        op.acc_df = DF.Int32
        if not op.out_df.is_integer:
            op.out_df = DF.Int32
        if not op.intermed_df.is_integer:
            op.intermed_df = DF.Int32
    if op.acc_df not in ACC_FORMATS:
        raise ctx.error(f"acc_df {op.acc_df.name} is not an accumulation format", op=op.name)
    if ctx.is_grayskull and op.acc_df in (DF.Float32, DF.Int32):
        if explicit_acc:
            log.warning("op '%s': Grayskull cannot accumulate in %s; using Float16_b", op.name, op.acc_df.name)
        op.acc_df = DF.Float16_b
    if op.type == "matmul":
        # Accumulating ops spill partial sums to intermed: no Bfp4/Bfp2, same exponent width as out_df.
        if op.intermed_df in LOW_BFP:
            op.intermed_df = LOW_BFP[op.intermed_df]
        if op.intermed_df != op.out_df and not op.out_df.is_integer:
            if _family_b(op.out_df) != _family_b(op.intermed_df):
                op.intermed_df = op.out_df if op.out_df not in LOW_BFP else LOW_BFP[op.out_df]
        if op.acc_df in (DF.Float32, DF.Int32) and not op.out_df.is_integer:
            op.intermed_df = op.acc_df  # an m_k > 1 / l1_acc matmul spills in acc_df
    untilize_ok = UNTILIZE_OK if ctx.is_grayskull else UNTILIZE_OK + (DF.Int8, DF.Int32)
    if op.untilize_output and op.out_df not in untilize_ok:
        op.out_df = DF.Float16_b if _family_b(op.out_df) else DF.Float16
        if op.type != "matmul" or op.intermed_df in LOW_BFP:
            op.intermed_df = op.out_df
    minimum = op.tags.get("min_fidelity")
    if minimum and not explicit_fidelity and not integer:
        want = MF.from_json(minimum)
        if _FIDELITY_RANK.get(op.math_fidelity, 3) < _FIDELITY_RANK[want]:
            op.math_fidelity = want
