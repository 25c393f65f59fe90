"""Decomposition: rewrite high-level ops into the ops the chip runs (TT-Buda's ``decompose`` step).

Each rule replaces one op by a small subgraph of registry ops; parameters and constants that the rules
combine (batchnorm statistics, layernorm weights) become constant-only subgraphs that
:func:`pybuda.passes.graph.consteval.evaluate_constants` folds at compile time. The forms follow TT-Buda:

- ``softmax(x)`` -> ``e = exp(x - reduce_max(x))`` (the max-subtract only when ``enable_stable_softmax``
  and the op asks for it), ``e * reciprocal(reduce_sum(e))``; ``log_softmax`` -> ``xs - log(reduce_sum(exp(xs)))``.
- ``layernorm(x, w, b)`` -> ``xm = x - reduce_avg(x)``, ``xm * reciprocal(sqrt(reduce_avg(square(xm)) + eps)) * w + b``.
- ``batchnorm`` (inference) -> ``x * scale + shift`` with ``scale = w / sqrt(var + eps)``,
  ``shift = b - mean * scale`` (both folded by consteval).
- ``divide(a, b)`` -> ``a * reciprocal(b)``; ``minimum(a, b)`` -> ``-maximum(-a, -b)``;
  ``power(a, b)`` -> ``exp(b * log(a))`` (``pow`` with a constant exponent when b is a scalar constant);
  ``pow`` with exponent 1, 0.5, -1, -0.5 -> identity, sqrt, reciprocal, reciprocal(sqrt); a non-integer
  exponent -> ``exp(log(x) * p)``.
- ``clip(x, lo, hi)`` -> ``y = maximum(x, lo)`` (``relu`` when lo == 0), then ``y - relu(y - hi)``.
- ``where(c, x, y)`` -> ``heaviside(c - 1, x) + heaviside(0 - c, y)`` (c holds 0/1): a select, so a NaN or an
  infinity in the branch not picked (a ``-inf`` fill) never leaks into the result.
- ``squeeze``/``unsqueeze``/``identity(unsqueeze=...)`` -> ``reshape``; ``stack`` -> reshapes + ``concatenate``.
- ``nop``, ``tilize``, ``identity``, ``dram_queue``, casts to float (of floats, or of integer graph inputs,
  which are then pushed in a float format) and inference ``dropout`` vanish.
- comparisons -> ``heaviside`` of a difference (the chip has no compare op; TT-Buda used the same step):
  ``a > b`` = ``heaviside(a - b, 0)``, ``a >= b`` = ``heaviside(a - b, 1)``, ``<``/``<=`` swap the operands,
  ``a == b`` = ``heaviside(0 - |a - b|, 1)``, ``a != b`` = ``heaviside(|a - b|, 0)``; 0.0/1.0 in float. IEEE's
  NaN and infinity cases add terms only where an operand may hold them (:func:`may_be_nonfinite`): ``!=`` of
  a possible NaN is ``1 - (a == b)``, and where both operands may be infinite (``inf - inf`` is NaN)
  ``a == b`` = ``numbers(a, b)`` where not ``apart = heaviside(|a - b|, 0)`` (else 0), ``a >= b`` =
  ``numbers(a, b)`` where not ``a < b``, with ``numbers(a, b) = heaviside(|a| + |b|, 1)`` (0 where either is
  NaN), picked by ``heaviside(0 - mask, numbers)`` so that the result stays a 0/1 mask.
- ``argmax(x, dim)`` -> ``hit = (x == reduce_max(x))`` as above (a NaN maximum hits the NaNs), ``N - reduce_max(heaviside(hit - 1, N - i))``
  with a constant ``N - i`` along dim, so ties give the first index (torch's rule), or with ``last``
  ``reduce_max(heaviside(hit - 1, i + 1)) - 1``; dim None flattens first. No multiplier touches an index.
- integer data (:mod:`pybuda.ops.integer`): comparisons, logical ops, where, casts work on it as on floats
  (a cast to an integer dtype of integer-valued data vanishes); ``minimum`` of integers is
  ``a - relu(a - b)``; every op computing an integer keeps Float32 (``exact_df``), integer inputs are pushed
  as Float32 and checked against 2**24.
- ``cumsum(x, axis)`` -> ``x @ U`` along axis with the constant triangular ``U[i, j] = i <= j`` (``i < j``
  when exclusive); another axis is transposed to the last and back.
- ``resize2d``/``resize3d`` (nearest, linear, cubic) -> one matmul per resized spatial dim with a constant
  interpolation matrix; the modes are separable, and each matrix is the op's own reference applied to an
  identity, so align_corners and torch's rounding rules carry over exactly.
- ``conv2d_transpose`` with stride == kernel (no padding, one group) -> one matmul of the pixels with the weights
  as ``[Cin, kh*kw*Cout]`` and a depth-to-space (reshape, transpose, reshape); otherwise
  zero insertion (a constant 0/1 matmul per strided dim) and a stride-1 ``conv2d``
  with the flipped, regrouped weights (folded by consteval) and padding ``d*(k-1) - p`` (+ output_padding);
  a negative padding becomes an ``index`` crop of the result.
- ``max_pool1d``/``avg_pool1d`` -> the 2-D pool with a height-1 window on a reshaped input.
- ``embedding(table, ids)`` -> one-hot ``ids == range(V)`` (as ``equal`` above) ``@ table``; integer ids from a
  graph input are pushed in a float format (exact up to 2**24 in Float32). Tables beyond 2,048 rows (and ids that
  may count from the end) compare two digits the host pushes instead of the ids (``lookup_digits``: id // 2048,
  id % 2048 in two slices) with the table's, ``max(|hi - HI|, |lo - LO|)`` over the slices being 0 exactly at the
  row; the one-hot matmul keeps HiFi2 (a Float16_b/Bfp8 row is copied whole) and ``exact_pickers`` copies a
  Float32 table in pieces (``ONE_HOT_COPY``). ``adv_index`` by pushed ids (``x[ids]``) is the same lookup. Both
  rules live in :mod:`pybuda.passes.graph.lookups`; the exact 0/1 steps they share with the comparisons, in
  :mod:`pybuda.passes.graph.exact_steps`.
- ``sparse_matmul(a, b)`` -> ``matmul`` of the densified constant.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch

from pybuda.ir.graph import CONSTANT, HOLDS_OPERAND, INPUT, OUTPUT, SIGN_EXACT, Graph, Node
from pybuda.ops import registry
from pybuda.ops.common import normalize_dim
from pybuda.passes.context import CompileContext
from pybuda.passes.graph.exact_steps import SIGN, equal_of, heaviside, negated, neither_nan, scalar, scalar_constant_value
from pybuda.passes.graph.lookups import decompose_adv_index, decompose_embedding
from pybuda.passes.graph.nonfinite import may_be_nonfinite
from pybuda.passes.graph.rewrite import Rewriter

#: Ops that must have been split off to the CPU by the frontend (TT-Buda's ``cpu_fallback_ops``). Empty:
#: ``embedding`` is decomposed (the torch frontend still sends it to the CPU when configured to, because
#: its integer ids are not device data there).
CPU_ONLY_OPS: frozenset = frozenset()


def decompose_high_level_ops(graph: Graph, ctx: CompileContext) -> Graph:
    """Return a new graph in which every high-level op is replaced by its decomposition."""
    fallback = set(CPU_ONLY_OPS) | {t for t in ctx.config.cpu_fallback_ops if t in CPU_ONLY_OPS}
    for node in graph.ops:
        if node.op_type in fallback:
            raise ctx.error(f"'{node.op_type}' runs on the CPU (cpu_fallback_ops) and cannot be compiled for "
                            f"the device; capture the model with the PyTorch frontend, which splits it off, or "
                            f"compute it outside the module", op=node.name)

    exact = _integer_paths(graph)

    def rule(rw: Rewriter, node: Node, ops: Sequence[str]) -> Optional[str]:
        fn = _RULES.get(node.op_type)
        if fn is None:
            return None
        before = set(rw.new.nodes) if node.name in exact else None
        out = fn(rw, node, ops, ctx)
        if before is not None:  # the ops computing an integer result: exact whatever the default format
            for name in set(rw.new.nodes) - before:
                rw.new.nodes[name].tags.setdefault("exact_df", "Float32")
        return out

    rw = Rewriter(graph)
    new = rw.run(rule)
    for name in exact:
        kept = new.nodes.get(rw.map.get(name, ""))
        if kept is not None and kept.kind in ("op", CONSTANT):
            kept.tags.setdefault("exact_df", "Float32")
    for out in new.outputs:  # the output's copy to the host keeps the format too
        src = new[out.operands[0]]
        # An input passed straight through (what a CPU stage computed, such as a topk's indices) comes back as it
        # went in: the device computes nothing on it, so its output format must not round it.
        if src.tags.get("exact_df") or src.kind == INPUT:
            out.tags.setdefault("exact_df", "Float32")
        if src.kind == INPUT and all(new[user].kind == OUTPUT for user in new.users(src.name)):
            src.tags.setdefault("exact_df", "Float32")  # nothing on the device reads it: its queue keeps it too
    return _push_integer_inputs_exact(new, ctx)


def _is_integer(dtype: torch.dtype) -> bool:
    from pybuda.ops.integer import is_integer_dtype

    return is_integer_dtype(dtype)


def _integer_paths(graph: Graph) -> set:
    """Nodes whose values must stay exact integers on the device (:mod:`pybuda.ops.integer`): every op of an
    integer dtype and, upstream of it, every integer-valued producer beyond 0/1 (an argmax, then the reshape
    of its index before the cast to int64; a constant table of integers). The compiler keeps them in Float32
    (``exact_df``), where integers are exact up to 2**24: a Bfp8 default would merge neighbouring integers.
    Float math of float models is left to the default format."""
    from pybuda.ops.integer import integer_range, magnitude

    memo: dict = {}
    marked: set = set()
    for node in reversed(list(graph.ops)):  # consumers before producers
        if node.name not in marked:
            if not _is_integer(node.dtype):
                continue
            r = integer_range(graph, node.name, memo)
            if r is not None and magnitude(r) <= 1:
                continue  # 0/1 (a mask as int64) is exact in every format
        marked.add(node.name)
        for operand in node.operands:
            producer = graph[operand]
            if operand in marked or producer.kind not in ("op", CONSTANT):
                continue
            r = integer_range(graph, operand, memo)
            if r is not None and magnitude(r) > 1:
                marked.add(operand)
    return marked


def _push_integer_inputs_exact(graph: Graph, ctx: Any) -> Graph:
    """Integer graph inputs are pushed as Float32 (exact up to 2**24) and refused at push time beyond what the
    chip keeps exact: 2**24 where ops accumulate in Float32, 2**8 on Grayskull, whose Float16_b accumulator
    every op result passes through (embedding ids keep their table's range: they index, they are not summed).
    An input whose every device reader computes a float result from it (``ids.float() * 0.5``) is float data there,
    rounded as any float is: it keeps Float32's range (an integer op downstream checks its own range)."""
    from pybuda.ops.integer import FLOAT16_B_EXACT_INT, FLOAT32_EXACT_INT

    limit = FLOAT16_B_EXACT_INT if getattr(ctx, "is_grayskull", False) else FLOAT32_EXACT_INT
    for node in graph.inputs:
        if _is_integer(node.dtype):
            node.tags.setdefault("device_dtype", "float32")
            if not node.tags.get("exact_df"):  # one only outputs read comes back from the host (QueueIO.copy_of)
                wide = _read_as_float_only(graph, node.name)
                node.tags.setdefault("value_range", (-FLOAT32_EXACT_INT, FLOAT32_EXACT_INT) if wide else (-limit, limit))
    return graph


def _read_as_float_only(graph: Graph, name: str) -> bool:
    """Whether every op reading ``name`` computes a floating-point result from it (a cast to float, float math
    such as ``ids * 0.5``), so nothing on the device keeps its values as integers; graph outputs aside."""
    users = [graph[u] for u in graph.users(name)]
    return any(u.kind != OUTPUT for u in users) and all(u.kind == OUTPUT or u.dtype.is_floating_point for u in users)


# --- helpers --------------------------------------------------------------------------------------------


def _along(rw: Rewriter, node: Node, name: str, rank: int, dim: int, tag: str) -> str:
    """Reshape a per-channel operand (any shape with ``size`` values) so it broadcasts along ``dim``."""
    size = math.prod(rw.shape(name))
    target = (size,) + (1,) * (rank - 1 - dim)
    if tuple(rw.shape(name)) == target:
        return name
    return rw.op(f"{node.name}.{tag}", "reshape", [name], {"shape": target})


def _reduce(rw, name: str, op_type: str, x: str, dim: int) -> str:
    """``op_type`` (a keep-dim reduction) of ``x`` along ``dim``; ``x`` itself when that dim has size 1,
    where every reduction is the identity. On the chip a reduction is a multiply (by ones or 1/N) that
    rounds its operands, so a layer norm or softmax over one element would no longer see ``x - mean(x)``
    as exactly 0 (and a layer norm divides that rounding by ``sqrt(eps)``)."""
    if _size_one(rw.shape(x), dim):
        return x
    return rw.op(name, op_type, [x], {"dim": dim})


def _size_one(shape, dim: int) -> bool:
    """True when ``dim`` of ``shape`` holds one element (a reduction along it is the identity)."""
    return bool(shape) and shape[normalize_dim(dim, len(shape))] == 1


def _size_one_reduction(rw, node, ops, ctx):
    """A reduction over a dim of size 1 is its operand (see :func:`_reduce`)."""
    if not _size_one(rw.shape(ops[0]), node.attrs["dim"]):
        return None
    if node.attrs.get("stride", -1) != -1 or rw.node(ops[0]).dtype != node.dtype:
        return None  # a strided max keeps groups; a mean of integers changes the dtype
    return ops[0]


# --- rules ----------------------------------------------------------------------------------------------


def _softmax(rw, node, ops, ctx, log=False):
    x = ops[0]
    dim = node.attrs["dim"]
    n = node.name
    if node.attrs.get("stable", True) and ctx.config.enable_stable_softmax:
        m = _reduce(rw, f"{n}.max", "reduce_max", x, dim)
        x = rw.op(f"{n}.sub_max", "subtract", [x, m])
    e = rw.op(f"{n}.exp", "exp", [x])
    s = _reduce(rw, f"{n}.sum", "reduce_sum", e, dim)
    if log:
        return rw.op(f"{n}.out", "subtract", [x, rw.op(f"{n}.log", "log", [s])])
    r = rw.op(f"{n}.recip", "reciprocal", [s])
    return rw.op(f"{n}.out", "multiply", [e, r])


def _layernorm(rw, node, ops, ctx):
    x, w, b = ops
    n = node.name
    rank = len(rw.shape(x))
    dim = node.attrs["dim"]
    d = normalize_dim(dim, rank)
    mean = _reduce(rw, f"{n}.mean", "reduce_avg", x, dim)
    xm = rw.op(f"{n}.sub_mean", "subtract", [x, mean])
    sq = rw.op(f"{n}.square", "square", [xm])
    var = _reduce(rw, f"{n}.var", "reduce_avg", sq, dim)
    ve = rw.op(f"{n}.add_eps", "add", [var, scalar(rw, node, "eps", node.attrs["epsilon"])])
    sd = rw.op(f"{n}.sqrt", "sqrt", [ve])
    inv = rw.op(f"{n}.recip", "reciprocal", [sd])
    y = rw.op(f"{n}.norm", "multiply", [xm, inv])
    y = rw.op(f"{n}.scale", "multiply", [y, _along(rw, node, w, rank, d, "weight")])
    return rw.op(f"{n}.out", "add", [y, _along(rw, node, b, rank, d, "bias")])


def _batchnorm(rw, node, ops, ctx):
    x, w, b, mean, var = ops
    n = node.name
    rank = len(rw.shape(x))
    ve = rw.op(f"{n}.var_eps", "add", [var, scalar(rw, node, "eps", node.attrs["epsilon"])])
    inv = rw.op(f"{n}.inv_std", "reciprocal", [rw.op(f"{n}.std", "sqrt", [ve])])
    scale = rw.op(f"{n}.scale_c", "multiply", [w, inv])
    shift = rw.op(f"{n}.shift_c", "subtract", [b, rw.op(f"{n}.mean_scale", "multiply", [mean, scale])])
    y = rw.op(f"{n}.scale", "multiply", [x, _along(rw, node, scale, rank, 1, "scale_r")])
    return rw.op(f"{n}.out", "add", [y, _along(rw, node, shift, rank, 1, "shift_r")])


def _divide(rw, node, ops, ctx):
    return rw.op(f"{node.name}.out", "multiply", [ops[0], rw.op(f"{node.name}.recip", "reciprocal", [ops[1]])])


def _minimum(rw, node, ops, ctx):
    if _is_integer(node.dtype):
        # min(a, b) = a - relu(a - b): no multiplier, so exact for integers (the -max(-a, -b) form would
        # round integers beyond 2**10 in the multiplier's source registers).
        over = rw.op(f"{node.name}.over", "relu", [rw.op(f"{node.name}.diff", "subtract", [ops[0], ops[1]])])
        return rw.op(f"{node.name}.out", "subtract", [ops[0], over])
    neg = scalar(rw, node, "neg_one", -1.0)
    a = rw.op(f"{node.name}.neg_a", "multiply", [ops[0], neg])
    b = rw.op(f"{node.name}.neg_b", "multiply", [ops[1], neg])
    m = rw.op(f"{node.name}.max", "maximum", [a, b])
    return rw.op(f"{node.name}.out", "multiply", [m, neg])


def _power(rw, node, ops, ctx):
    exponent = scalar_constant_value(rw, ops[1])
    if exponent is not None and tuple(rw.shape(ops[0])) == tuple(node.shape):
        return _pow_value(rw, node, ops[0], exponent)
    lg = rw.op(f"{node.name}.log", "log", [ops[0]])
    return rw.op(f"{node.name}.exp", "exp", [rw.op(f"{node.name}.mul", "multiply", [lg, ops[1]])])


def _pow(rw, node, ops, ctx):
    return _pow_value(rw, node, ops[0], node.attrs["exponent"])


def _pow_value(rw, node, x: str, p: float) -> str:
    n = node.name
    if p == 1.0:
        return x
    if p == 0.5:
        return rw.op(f"{n}.sqrt", "sqrt", [x])
    if p == -1.0:
        return rw.op(f"{n}.recip", "reciprocal", [x])
    if p == -0.5:
        return rw.op(f"{n}.recip", "reciprocal", [rw.op(f"{n}.sqrt", "sqrt", [x])])
    if p == 2.0:
        return rw.op(f"{n}.square", "square", [x])
    if float(p).is_integer() and p >= 0:
        return rw.op(n, "pow", [x], {"exponent": float(p)})
    lg = rw.op(f"{n}.log", "log", [x])
    return rw.op(f"{n}.exp", "exp", [rw.op(f"{n}.mul", "multiply", [lg, scalar(rw, node, "exponent", p)])])


def _clip(rw, node, ops, ctx):
    lo, hi = node.attrs["min"], node.attrs["max"]
    n = node.name
    if lo == 0.0:
        y = rw.op(f"{n}.lo", "relu", [ops[0]])
    elif math.isinf(lo):
        y = ops[0]
    else:
        y = rw.op(f"{n}.lo", "maximum", [ops[0], scalar(rw, node, "min", lo)])
    if math.isinf(hi):
        return y
    # min(y, hi) = y - relu(y - hi): exact whenever y <= hi (hi - relu(hi - y) would round small y to 0).
    hi_c = scalar(rw, node, "max", hi)
    over = rw.op(f"{n}.over", "relu", [rw.op(f"{n}.sub_hi", "subtract", [y, hi_c])])
    return rw.op(f"{n}.out", "subtract", [y, over])


def _where(rw, node, ops, ctx):
    # A real select: heaviside(a, v) is 0 where a < 0 and v where a == 0, whatever v holds, so each branch
    # is zeroed by the condition before the sum and a NaN/inf in the branch not picked cannot leak (the
    # arithmetic c*x + (1-c)*y gives 0*inf = NaN). c - 1 is 0 where c holds (-1 elsewhere), 0 - c is 0 where
    # it does not; 0/1 and -1 are exact in every device format, and the unpicked term adds an exact 0.
    # An infinite fill stays infinite, as torch has it: a softmax over a row masked entirely (masked_fill(m, -inf))
    # is NaN there (-inf - -inf) and exactly 0 at the masked places of other rows. The constant makes every value
    # downstream a carrier (nonfinite.mark_nonfinite_carriers), so pickers copy the infinities and the lowering
    # zeroes such values' tile padding by a select (arithmetic._select_real), never by a multiply (inf * 0 = NaN).
    c, x, y = ops
    picked = rw.op(f"{node.name}.picked", "subtract", [c, scalar(rw, node, "one", 1.0)])
    unpicked = rw.op(f"{node.name}.unpicked", "subtract", [scalar(rw, node, "zero", 0.0), c])
    keep = rw.op(f"{node.name}.keep", "heaviside", [picked, x])
    fill = rw.op(f"{node.name}.fill", "heaviside", [unpicked, y])
    return rw.op(f"{node.name}.out", "add", [keep, fill])


def _to_reshape(rw, node, ops, ctx):
    if tuple(rw.shape(ops[0])) == tuple(node.shape):
        return ops[0]
    return rw.op(node.name, "reshape", [ops[0]], {"shape": tuple(node.shape)})


def _identity(rw, node, ops, ctx):
    return _to_reshape(rw, node, ops, ctx)


def _vanish(rw, node, ops, ctx):
    return ops[0]


def _dropout(rw, node, ops, ctx):
    if not node.attrs["training"] or node.attrs["p"] == 0.0:
        return ops[0]
    return None


def _as_mask(rw, node, x: str, tag: str) -> str:
    """``x`` as a device mask (float 0/1): a boolean already is one; a float becomes ``x != 0``."""
    if rw.node(x).dtype == torch.bool:
        return x
    return heaviside(rw, node, rw.op(f"{node.name}.{tag}_abs", "abs", [x]), 0.0, tag)


def _logical_and(rw, node, ops, ctx):
    return rw.op(f"{node.name}.and", "multiply", [_as_mask(rw, node, ops[0], "a"), _as_mask(rw, node, ops[1], "b")])


def _logical_not(rw, node, ops, ctx):
    return rw.op(f"{node.name}.not", "subtract", [scalar(rw, node, "one", 1.0), _as_mask(rw, node, ops[0], "nz")])


def _cast(rw, node, ops, ctx):
    from pybuda.ops.integer import integer_range

    src = rw.node(ops[0])
    if node.dtype == torch.bool and src.dtype != torch.bool:
        r = integer_range(rw.new, ops[0])
        if r is not None and r[0] >= 0 and r[1] <= 1:
            return ops[0]  # already 0/1 (a comparison's result): the mask itself
        return _as_mask(rw, node, ops[0], "nz")  # bool(x) is x != 0, a 0/1 float on the device
    if src.dtype == torch.bool or (node.dtype.is_floating_point and src.dtype.is_floating_point):
        return ops[0]  # a device boolean already is a 0/1 float; formats come from the data-format pass
    if node.dtype.is_floating_point:
        # Integer data on the device already is an exact float. An integer graph input cast to float (an
        # attention mask) is pushed in that float format.
        root = src
        while root.kind == "op" and root.op_type in ("reshape", "transpose") and len(root.operands) == 1:
            root = rw.node(root.operands[0])
        if root.kind == "input":
            root.tags["device_dtype"] = str(node.dtype).replace("torch.", "")
        return ops[0]
    # To an integer dtype: the identity on values that already are integers (the capability check sent
    # every other cast, a truncation, to the host); anything else has no device form.
    return ops[0] if integer_range(rw.new, ops[0]) is not None else None


def _stack(rw, node, ops, ctx):
    axis = normalize_dim(node.attrs["axis"], len(node.shape))
    parts = []
    for i, o in enumerate(ops):
        shape = list(rw.shape(o))
        shape.insert(axis, 1)
        parts.append(rw.op(f"{node.name}.unsqueeze{i}", "reshape", [o], {"shape": tuple(shape)}))
    return rw.op(node.name, "concatenate", parts, {"axis": axis})


# --- comparisons, argmax, cumsum -------------------------------------------------------------------------


def _compare(kind: str):
    """``a OP b`` as IEEE compares (torch, ONNX Runtime): false where an operand is NaN (true for !=), and an
    infinity compares equal to itself. ``heaviside(a - b, 0)`` is exactly ``a > b``: the difference keeps its
    sign (SIGN_EXACT formats), overflows to the right infinity, and is NaN (a step of 0) where an operand is
    NaN or both are the same infinity. ``heaviside(a - b, 1)`` (``>=``) misses only the equal infinities, so
    where both operands may be infinite ``a >= b`` is ``numbers(a, b)`` where not ``a < b`` (else 0). Integer
    operands work alike (their difference is exact up to 2**24) and take the plain forms."""
    def rule(rw, node, ops, ctx):
        a, b = ops
        if kind in ("equal", "not_equal"):
            return equal_of(rw, node, a, b, "cmp", negate=kind == "not_equal")
        if kind in ("less", "less_equal"):
            a, b = b, a
        if kind.endswith("equal") and may_be_nonfinite(rw.new, a) and may_be_nonfinite(rw.new, b):
            below = rw.op(f"{node.name}.diff", "subtract", [b, a], tags=SIGN)
            lt = heaviside(rw, node, below, 0.0, "below")
            # numbers(a, b) where not a < b, else 0
            numbers = neither_nan(rw, node, a, b, "cmp")
            return rw.op(f"{node.name}.step", "heaviside", [negated(rw, node, lt, "below"), numbers])
        diff = rw.op(f"{node.name}.diff", "subtract", [a, b], tags=SIGN)
        return heaviside(rw, node, diff, 1.0 if kind.endswith("equal") else 0.0, "step")
    return rule


def _along_last(rw, node, x: str, dim: int, matrix: torch.Tensor, tag: str) -> str:
    """``x`` with dim ``dim`` multiplied by the constant ``matrix`` [size, new_size] (a matmul on the last
    dim; another dim is transposed there and back)."""
    rank = len(rw.shape(x))
    m = rw.constant(f"{node.name}.{tag}_matrix", matrix.to(torch.float32).contiguous())
    if dim == rank - 1:
        return rw.op(f"{node.name}.{tag}", "matmul", [x, m])
    t = rw.op(f"{node.name}.{tag}_t", "transpose", [x], {"dim0": dim, "dim1": rank - 1})
    y = rw.op(f"{node.name}.{tag}", "matmul", [t, m])
    return rw.op(f"{node.name}.{tag}_tb", "transpose", [y], {"dim0": dim, "dim1": rank - 1})


def _argmax(rw, node, ops, ctx):
    before = set(rw.new.nodes)
    idx = _argmax_ops(rw, node, ops)
    # Index math must stay exact: in a block format the row maximum, rounded with its neighbours, may no
    # longer equal any element, and indices above 127 are not representable. The data-format pass keeps
    # ops tagged ``exact_df`` in that format whatever the default is.
    # Float32 also holds every sign, NaN and infinity, so the ops need no SIGN_EXACT, which would make the data-format
    # pass keep the whole network above the argmax in a NaN-holding format (pybuda.passes.graph.nonfinite): the
    # values ranked are the model's, in its formats.
    for name in set(rw.new.nodes) - before:
        rw.new.nodes[name].tags["exact_df"] = "Float32"
        rw.new.nodes[name].tags.pop(SIGN_EXACT, None)
    return idx


def _exact_negation(rw, node, x: str) -> str:
    """``x`` itself, or for ``x = y * -1`` (how frontends write argmin as the argmax of -y) the exact ``0 - y``:
    the multiplier reads y through 19-bit source registers, so nearby values would tie and pick a wrong index."""
    n = rw.node(x)
    if n.kind != "op" or n.op_type != "multiply":
        return x
    for k in (0, 1):
        y = n.operands[k]
        if scalar_constant_value(rw, n.operands[1 - k]) == -1.0 and tuple(rw.shape(y)) == tuple(n.shape):
            return rw.op(f"{node.name}.neg", "subtract", [scalar(rw, node, "zero", 0.0), y], tags={HOLDS_OPERAND: 1})
    return x


def _argmax_ops(rw, node, ops):
    # Scores are picked by heaviside, not multiplied: a multiplier would round indices beyond 2**10.
    x = _exact_negation(rw, node, ops[0])
    shape = tuple(rw.shape(x))
    if node.attrs["dim"] is None:
        x = rw.op(f"{node.name}.flat", "reshape", [x], {"shape": (1, math.prod(shape))})
        d = 1
    else:
        d = normalize_dim(node.attrs["dim"], len(shape))
    rank = len(rw.shape(x))
    size = rw.shape(x)[d]
    m = rw.op(f"{node.name}.max", "reduce_max", [x], {"dim": d})
    # A maximum of +inf is hit by the infinities, and where a NaN is the maximum (the reduce propagates it) the
    # NaNs are hit: torch's argmax picks the first NaN.
    special = may_be_nonfinite(rw.new, x)
    hit = equal_of(rw, node, x, m, "hit", nan_hits=special)
    # Score at the maxima (0 elsewhere): N - i, whose largest is the first maximum (torch's rule), or with
    # ``last`` i + 1, whose largest is the last one. heaviside(hit - 1, score) is the score where hit is 1.
    last = node.attrs.get("last", False)
    scores = torch.arange(1, size + 1) if last else torch.arange(size, 0, -1)
    scores = scores.to(torch.float32).reshape((size,) + (1,) * (rank - 1 - d))
    miss = rw.op(f"{node.name}.miss", "subtract", [hit, scalar(rw, node, "one", 1.0)])
    score = rw.op(f"{node.name}.score", "heaviside", [miss, rw.constant(f"{node.name}.scores", scores)])
    best = rw.op(f"{node.name}.best", "reduce_max", [score], {"dim": d})
    if special:
        # A row of -inf only: its maximum is the reduce's padding (float32's lowest), which no element equals.
        # torch picks the first element (``last``: the last), whose score is N: best + heaviside(0 - best, N).
        none = rw.op(f"{node.name}.no_hit", "heaviside", [negated(rw, node, best, "best"), scalar(rw, node, "all", size)])
        best = rw.op(f"{node.name}.best_or_all", "add", [best, none])
    if last:
        idx = rw.op(f"{node.name}.index", "subtract", [best, scalar(rw, node, "one_off", 1.0)])
    else:
        idx = rw.op(f"{node.name}.index", "subtract", [scalar(rw, node, "size", size), best])
    if tuple(rw.shape(idx)) != tuple(node.shape):
        idx = rw.op(f"{node.name}.out", "reshape", [idx], {"shape": tuple(node.shape)})
    return idx


def _cumsum(rw, node, ops, ctx):
    x = ops[0]
    rank = len(rw.shape(x))
    d = normalize_dim(node.attrs["axis"], rank)
    size = rw.shape(x)[d]
    tri = torch.ones(size, size).triu(1 if node.attrs["exclusive"] else 0)  # U[i, j]: x_i counts toward j
    return _along_last(rw, node, x, d, tri, "cumsum")


# --- resize, transposed conv, 1-D pools ---------------------------------------------------------------------


def _resize(nd: int):
    def rule(rw, node, ops, ctx):
        from pybuda.ops import registry

        x = ops[0]
        rank = len(rw.shape(x))
        first = rank - nd - (1 if node.attrs["channel_last"] else 0)
        evaluate = registry.get(node.op_type).eval
        for i in range(nd):
            dim = first + i
            size, new = rw.shape(x)[dim], node.attrs["sizes"][i]
            # The op's reference on an identity basis resizes only this dim (the others have size 1 and
            # stay 1), giving row k = the output for input e_k: the interpolation matrix [size, new].
            basis = torch.eye(size).reshape((size, 1) + tuple(size if j == i else 1 for j in range(nd)))
            sizes = tuple(new if j == i else 1 for j in range(nd))
            attrs = dict(node.attrs, sizes=sizes, channel_last=False)
            matrix = evaluate([basis], attrs).reshape(size, new)
            if size == new and torch.equal(matrix, torch.eye(size)):
                continue
            x = _along_last(rw, node, x, dim, matrix, f"resize{i}")
        return x
    return rule


def _channels_last(rw, n: str, x: str) -> str:
    """``[.., C, H, W]`` -> ``[.., H, W, C]`` (two transposes, named after the transposed conv ``n``)."""
    rank = len(rw.shape(x))
    x = rw.op(f"{n}.to_nhwc_a", "transpose", [x], {"dim0": rank - 3, "dim1": rank - 2})
    return rw.op(f"{n}.to_nhwc", "transpose", [x], {"dim0": rank - 2, "dim1": rank - 1})


def _channels_first(rw, n: str, y: str) -> str:
    """``[.., H, W, C]`` -> ``[.., C, H, W]``; the last op takes the transposed conv's own name ``n``."""
    rank = len(rw.shape(y))
    y = rw.op(f"{n}.to_nchw_a", "transpose", [y], {"dim0": rank - 2, "dim1": rank - 1})
    return rw.op(n, "transpose", [y], {"dim0": rank - 3, "dim1": rank - 2})


def _patchwise(a, kh: int, kw: int) -> bool:
    """Whether a transposed conv writes each input pixel's own kh x kw output patch, the patches tiling the
    output without overlap: stride == kernel, no padding, dilation or output padding, one group."""
    return (tuple(a["stride"]) == (kh, kw) and not any(a["padding"]) and tuple(a["dilation"]) == (1, 1)
            and not any(a["output_padding"]) and a["groups"] == 1)


def _conv2d_transpose_patches(rw, node, x, w, bias):
    """A patchwise transposed conv (U-Net's 2x2 / stride-2 upsampling) as one matmul and a depth-to-space.

    Pixel (i, j) contributes ``x[i, j] @ W[:, :, a, b]`` to output pixel (i*kh + a, j*kw + b) and nothing
    else, so ``pixels x [Cin] @ [Cin, kh*kw*Cout]`` computes every output value once, and a reshape and
    permute put the patches in place. The general form would insert zeros into an image kh*kw times larger
    and convolve it, kh*kw times the work, all but 1/(kh*kw) of it on zeros.
    """
    a = node.attrs
    n = node.name
    cin, cout, kh, kw = rw.shape(w)
    if not a["channel_last"]:
        x = _channels_last(rw, n, x)
    lead, (hh, ww, _) = tuple(rw.shape(x)[:-3]), tuple(rw.shape(x)[-3:])
    # Weights [Cin, Cout, kh, kw] -> [Cin, kh * kw * Cout], column (a * kw + b) * Cout + co (consteval folds it).
    wm = rw.op(f"{n}.w_patches", "transpose", [w], {"dim0": 1, "dim1": 3})  # [Cin, kw, kh, Cout]
    wm = rw.op(f"{n}.w_patches_hw", "transpose", [wm], {"dim0": 1, "dim1": 2})  # [Cin, kh, kw, Cout]
    wm = rw.op(f"{n}.w_matrix", "reshape", [wm], {"shape": (cin, kh * kw * cout)})
    y = rw.op(f"{n}.patches", "matmul", [x, wm])  # [lead, H, W, kh*kw*Cout]
    if bias is not None:
        tiled = rw.op(f"{n}.bias_patches", "repeat", [bias], {"factors": (kh * kw,)})
        y = rw.op(f"{n}.biased", "add", [y, tiled])
    y = rw.op(f"{n}.patch_dims", "reshape", [y], {"shape": lead + (hh, ww, kh, kw, cout)})
    at = len(lead)
    y = rw.op(f"{n}.patch_rows", "transpose", [y], {"dim0": at + 1, "dim1": at + 2})  # [H, kh, W, kw, Cout]
    out = lead + (hh * kh, ww * kw, cout)
    if a["channel_last"]:
        return rw.op(n, "reshape", [y], {"shape": out})
    return _channels_first(rw, n, rw.op(f"{n}.image", "reshape", [y], {"shape": out}))


def _conv2d_transpose(rw, node, ops, ctx):
    a = node.attrs
    x, w = ops[0], ops[1]
    bias = ops[2] if len(ops) == 3 else None
    rank = len(rw.shape(x))
    channel_last = a["channel_last"]
    h_dim, w_dim = (rank - 3, rank - 2) if channel_last else (rank - 2, rank - 1)
    cin, cog, kh, kw = rw.shape(w)
    if _patchwise(a, kh, kw):
        return _conv2d_transpose_patches(rw, node, x, w, bias)
    g = a["groups"]
    n = node.name
    sh, sw = a["stride"]
    if sh > 1 or sw > 1:
        # Zero insertion as one constant pixel picker on the channel-last pixels x channels form (the form
        # the conv's own im2col reads; an NCHW graph input reaches it by transposes the host applies):
        # input pixel (i, j) lands on (i * sh, j * sw) of a ((H - 1) * sh + 1, (W - 1) * sw + 1) image.
        if not channel_last:
            x = _channels_last(rw, n, x)
        lead, (hh, ww, c) = tuple(rw.shape(x)[:-3]), tuple(rw.shape(x)[-3:])
        hs, ws = (hh - 1) * sh + 1, (ww - 1) * sw + 1
        flat = rw.op(f"{n}.pixels", "reshape", [x], {"shape": lead + (hh * ww, c)})
        ii, jj = torch.meshgrid(torch.arange(hh), torch.arange(ww), indexing="ij")
        up = torch.zeros(hs * ws, hh * ww)
        up[(ii * sh * ws + jj * sw).reshape(-1), torch.arange(hh * ww)] = 1.0
        flat = rw.op(f"{n}.dilate", "matmul", [rw.constant(f"{n}.dilate_picker", up), flat])
        x = rw.op(f"{n}.dilated", "reshape", [flat], {"shape": lead + (hs, ws, c)})
        h_dim, w_dim = rank - 3, rank - 2
    # Weights [Cin, Cout/g, kh, kw] -> [Cout, Cin/g, kh, kw], spatially flipped (consteval folds all this).
    wt = rw.op(f"{n}.w_groups", "reshape", [w], {"shape": (g, cin // g, cog, kh, kw)})
    wt = rw.op(f"{n}.w_swap", "transpose", [wt], {"dim0": 1, "dim1": 2})
    wt = rw.op(f"{n}.w_conv", "reshape", [wt], {"shape": (g * cog, cin // g, kh, kw)})
    if kw > 1:
        wt = rw.op(f"{n}.w_flip_w", "matmul", [wt, rw.constant(f"{n}.flip_w", torch.eye(kw).flip(0))])
    if kh > 1:
        wt = rw.op(f"{n}.w_t", "transpose", [wt], {"dim0": 2, "dim1": 3})
        wt = rw.op(f"{n}.w_flip_h", "matmul", [wt, rw.constant(f"{n}.flip_h", torch.eye(kh).flip(0))])
        wt = rw.op(f"{n}.w_tb", "transpose", [wt], {"dim0": 2, "dim1": 3})
    dh, dw = a["dilation"]
    pl, pr, pt, pb = a["padding"]
    oph, opw = a["output_padding"]
    full = (dw * (kw - 1) - pl, dw * (kw - 1) - pr + opw, dh * (kh - 1) - pt, dh * (kh - 1) - pb + oph)
    pads = tuple(max(p, 0) for p in full)
    conv_cl = channel_last or sh > 1 or sw > 1
    y = rw.op(n if conv_cl == channel_last else f"{n}.conv", "conv2d", [x, wt] + ([bias] if bias is not None else []),
              {"stride": 1, "padding": pads, "dilation": (dh, dw), "groups": g, "channel_last": conv_cl})
    # A padding larger than the kernel's reach crops the result.
    for dim, before, after in ((w_dim, full[0], full[1]), (h_dim, full[2], full[3])):
        if before < 0 or after < 0:
            size = rw.shape(y)[dim]
            y = rw.op(f"{n}.crop{dim}", "index", [y],
                      {"dim": dim, "start": max(-before, 0), "stop": size - max(-after, 0)})
    if conv_cl != channel_last:  # back to NCHW
        y = _channels_first(rw, n, y)
    return y


def _pool1d(rw, node, ops, ctx):
    a = node.attrs
    x = ops[0]
    shape = tuple(rw.shape(x))
    cl = a["channel_last"]
    # A height-1 2-D pool: [.., C, L] -> [.., C, 1, L] (channel-last [.., L, C] -> [.., 1, L, C]).
    at = len(shape) - (2 if cl else 1)
    x4 = rw.op(f"{node.name}.as2d", "reshape", [x], {"shape": shape[:at] + (1,) + shape[at:]})
    attrs = {"kernel_size": (1,) + a["kernel_size"], "stride": (1,) + a["stride"],
             "padding": tuple(a["padding"]) + (0, 0), "ceil_mode": a["ceil_mode"], "channel_last": cl}
    if node.op_type == "max_pool1d":
        attrs["dilation"] = (1,) + a["dilation"]
        y = rw.op(f"{node.name}.pool", "max_pool2d", [x4], attrs)
    else:
        attrs.update(count_include_pad=a["count_include_pad"], divisor_override=a["divisor_override"])
        y = rw.op(f"{node.name}.pool", "avg_pool2d", [x4], attrs)
    return rw.op(node.name, "reshape", [y], {"shape": tuple(node.shape)})


def _integer_only(rw, node, ops, ctx):
    from pybuda.errors import UnsupportedOp, UnsupportedOpError

    raise UnsupportedOpError([UnsupportedOp(node.op_type, node.name,
                                            "integer requantization has no float-format device form here; "
                                            "TT-Buda ran it only on Wormhole B0's int8 path - run it on a "
                                            "CPUDevice")], stage="POST_INITIAL_GRAPH_PASS")


def _matmul_full_bias(rw, node, ops, ctx):
    """``matmul(a, b, bias)`` whose bias varies along the output's rows (``torch.addmm``/``baddbmm`` with a
    matrix, an attention mask as baddbmm's input) -> ``matmul(a, b) + bias``. The device's matmul bias is one
    row added to every row of the output (a linear layer's bias); a full-matrix bias given to it came back as
    its first row everywhere, with no error."""
    if len(ops) != 3:
        return None
    bias_shape = tuple(rw.shape(ops[2]))
    if len(bias_shape) < 2 or bias_shape[-2] == 1:
        return None
    product = rw.op(f"{node.name}.product", "matmul", [ops[0], ops[1]])
    return rw.op(node.name, "add", [product, ops[2]])


def _sparse_matmul(rw, node, ops, ctx):
    return rw.op(node.name, "matmul", list(ops))


def _pad(rw, node, ops, ctx):
    """A constant pad with a non-zero value -> ``pad(x, 0) + mask`` with the constant ``mask`` holding the
    value on the padded positions and 0 elsewhere (exact: the lowering pads with zeros only)."""
    value = float(node.attrs.get("value", 0.0) or 0.0)
    if node.attrs.get("mode", "constant") != "constant" or value == 0.0:
        return None
    attrs = dict(node.attrs)
    attrs["value"] = 0.0
    padded = rw.op(f"{node.name}.zero_pad", "pad", [ops[0]], attrs)
    in_shape = tuple(rw.shape(ops[0]))
    # The mask broadcasts over the leading dims the pad does not touch (the microbatch among them).
    keep = max(len(in_shape) - len(attrs["pad"]) // 2 - (1 if attrs.get("channel_last") else 0), 0)
    mask_in = torch.zeros((1,) * keep + in_shape[keep:])
    mask = registry.evaluate("pad", [mask_in], {**attrs, "value": 1.0}) * value
    return rw.op(f"{node.name}.fill", "add", [padded, rw.constant(f"{node.name}.fill_value", mask)])


def _erf(rw, node, ops, ctx):
    # The chip has no erf kernel: the registry's device form (a rational-exp fit, 1.2e-7 relative).
    from pybuda.ops.eltwise import erf_device_form

    count = iter(range(1 << 30))

    def op(op_type, operands):
        return rw.op(f"{node.name}.{op_type}{next(count)}", op_type, operands)

    def const(value):
        return scalar(rw, node, f"c{next(count)}", value)

    return erf_device_form(op, const, ops[0])


_RULES = {
    "erf": _erf,
    "pad": _pad,
    "matmul": _matmul_full_bias,
    "equal": _compare("equal"),
    "not_equal": _compare("not_equal"),
    "greater": _compare("greater"),
    "greater_equal": _compare("greater_equal"),
    "less": _compare("less"),
    "less_equal": _compare("less_equal"),
    "argmax": _argmax,
    "cumsum": _cumsum,
    "resize2d": _resize(2),
    "resize3d": _resize(3),
    "conv2d_transpose": _conv2d_transpose,
    "max_pool1d": _pool1d,
    "avg_pool1d": _pool1d,
    "embedding": decompose_embedding,
    "adv_index": decompose_adv_index,
    "dram_queue": _vanish,
    "sparse_matmul": _sparse_matmul,
    "buda_requantize": _integer_only,
    "softmax": _softmax,
    "reduce_sum": _size_one_reduction,
    "reduce_avg": _size_one_reduction,
    "reduce_max": _size_one_reduction,
    "log_softmax": lambda rw, node, ops, ctx: _softmax(rw, node, ops, ctx, log=True),
    "layernorm": _layernorm,
    "batchnorm": _batchnorm,
    "divide": _divide,
    "minimum": _minimum,
    "power": _power,
    "pow": _pow,
    "clip": _clip,
    "where": _where,
    "squeeze": _to_reshape,
    "unsqueeze": _to_reshape,
    "identity": _identity,
    "nop": _vanish,
    "tilize": _vanish,
    "dropout": _dropout,
    "cast": _cast,
    "logical_and": _logical_and,
    "logical_not": _logical_not,
    "stack": _stack,
}
