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
- ``where(c, x, y)`` -> ``y + c * (x - y)`` (c holds 0/1).
- ``squeeze``/``unsqueeze``/``identity(unsqueeze=...)`` -> ``reshape``; ``stack`` -> reshapes + ``concatenate``.
- ``nop``, ``tilize``, ``identity``, casts to float (of floats, or of integer graph inputs, which are then
  pushed in a float format) and inference ``dropout`` vanish.

``embedding`` is a CPU-fallback op; reaching the device compile is an error that names the op.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from pybuda.ir.graph import CONSTANT, Graph, Node
from pybuda.ops.common import normalize_dim
from pybuda.passes.context import CompileContext
from pybuda.passes.graph.rewrite import Rewriter

#: Ops that must have been split off to the CPU by the frontend (TT-Buda's ``cpu_fallback_ops``).
CPU_ONLY_OPS = frozenset({"embedding"})


def decompose_high_level_ops(graph: Graph, ctx: CompileContext) -> Graph:
    """Return a new graph in which every high-level op is replaced by its decomposition."""
    fallback = set(CPU_ONLY_OPS) | {t for t in ctx.config.cpu_fallback_ops if t in CPU_ONLY_OPS}
    for node in graph.ops:
        if node.op_type in fallback:
            raise ctx.error(f"'{node.op_type}' runs on the CPU (cpu_fallback_ops) and cannot be compiled for "
                            f"the device; capture the model with the PyTorch frontend, which splits it off, or "
                            f"compute it outside the module", op=node.name)

    def rule(rw: Rewriter, node: Node, ops: Sequence[str]) -> Optional[str]:
        fn = _RULES.get(node.op_type)
        return fn(rw, node, ops, ctx) if fn is not None else None

    return Rewriter(graph).run(rule)


# --- helpers --------------------------------------------------------------------------------------------


def _scalar(rw: Rewriter, node: Node, tag: str, value: float) -> str:
    return rw.constant(f"{node.name}.{tag}", torch.tensor([float(value)], dtype=torch.float32))


def _scalar_constant_value(rw: Rewriter, name: str) -> Optional[float]:
    n = rw.node(name)
    if n.kind == CONSTANT:
        v = rw.new.tensors[name]
        if v.numel() == 1:
            return float(v.reshape(-1)[0])
    return None


def _along(rw: Rewriter, node: Node, name: str, rank: int, dim: int, tag: str) -> str:
    """Reshape a per-channel operand (any shape with ``size`` values) so it broadcasts along ``dim``."""
    size = math.prod(rw.shape(name))
    target = (size,) + (1,) * (rank - 1 - dim)
    if tuple(rw.shape(name)) == target:
        return name
    return rw.op(f"{node.name}.{tag}", "reshape", [name], {"shape": target})


# --- rules ----------------------------------------------------------------------------------------------


def _softmax(rw, node, ops, ctx, log=False):
    x = ops[0]
    dim = node.attrs["dim"]
    n = node.name
    if node.attrs.get("stable", True) and ctx.config.enable_stable_softmax:
        m = rw.op(f"{n}.max", "reduce_max", [x], {"dim": dim})
        x = rw.op(f"{n}.sub_max", "subtract", [x, m])
    e = rw.op(f"{n}.exp", "exp", [x])
    s = rw.op(f"{n}.sum", "reduce_sum", [e], {"dim": dim})
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
    mean = rw.op(f"{n}.mean", "reduce_avg", [x], {"dim": dim})
    xm = rw.op(f"{n}.sub_mean", "subtract", [x, mean])
    sq = rw.op(f"{n}.square", "square", [xm])
    var = rw.op(f"{n}.var", "reduce_avg", [sq], {"dim": dim})
    ve = rw.op(f"{n}.add_eps", "add", [var, _scalar(rw, node, "eps", node.attrs["epsilon"])])
    sd = rw.op(f"{n}.sqrt", "sqrt", [ve])
    inv = rw.op(f"{n}.recip", "reciprocal", [sd])
    y = rw.op(f"{n}.norm", "multiply", [xm, inv])
    y = rw.op(f"{n}.scale", "multiply", [y, _along(rw, node, w, rank, d, "weight")])
    return rw.op(f"{n}.out", "add", [y, _along(rw, node, b, rank, d, "bias")])


def _batchnorm(rw, node, ops, ctx):
    x, w, b, mean, var = ops
    n = node.name
    rank = len(rw.shape(x))
    ve = rw.op(f"{n}.var_eps", "add", [var, _scalar(rw, node, "eps", node.attrs["epsilon"])])
    inv = rw.op(f"{n}.inv_std", "reciprocal", [rw.op(f"{n}.std", "sqrt", [ve])])
    scale = rw.op(f"{n}.scale_c", "multiply", [w, inv])
    shift = rw.op(f"{n}.shift_c", "subtract", [b, rw.op(f"{n}.mean_scale", "multiply", [mean, scale])])
    y = rw.op(f"{n}.scale", "multiply", [x, _along(rw, node, scale, rank, 1, "scale_r")])
    return rw.op(f"{n}.out", "add", [y, _along(rw, node, shift, rank, 1, "shift_r")])


def _divide(rw, node, ops, ctx):
    return rw.op(f"{node.name}.out", "multiply", [ops[0], rw.op(f"{node.name}.recip", "reciprocal", [ops[1]])])


def _minimum(rw, node, ops, ctx):
    neg = _scalar(rw, node, "neg_one", -1.0)
    a = rw.op(f"{node.name}.neg_a", "multiply", [ops[0], neg])
    b = rw.op(f"{node.name}.neg_b", "multiply", [ops[1], neg])
    m = rw.op(f"{node.name}.max", "maximum", [a, b])
    return rw.op(f"{node.name}.out", "multiply", [m, neg])


def _power(rw, node, ops, ctx):
    exponent = _scalar_constant_value(rw, ops[1])
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
    return rw.op(f"{n}.exp", "exp", [rw.op(f"{n}.mul", "multiply", [lg, _scalar(rw, node, "exponent", p)])])


def _clip(rw, node, ops, ctx):
    lo, hi = node.attrs["min"], node.attrs["max"]
    n = node.name
    if lo == 0.0:
        y = rw.op(f"{n}.lo", "relu", [ops[0]])
    elif math.isinf(lo):
        y = ops[0]
    else:
        y = rw.op(f"{n}.lo", "maximum", [ops[0], _scalar(rw, node, "min", lo)])
    if math.isinf(hi):
        return y
    # min(y, hi) = y - relu(y - hi): exact whenever y <= hi (hi - relu(hi - y) would round small y to 0).
    hi_c = _scalar(rw, node, "max", hi)
    over = rw.op(f"{n}.over", "relu", [rw.op(f"{n}.sub_hi", "subtract", [y, hi_c])])
    return rw.op(f"{n}.out", "subtract", [y, over])


def _where(rw, node, ops, ctx):
    c, x, y = ops
    diff = rw.op(f"{node.name}.diff", "subtract", [x, y])
    return rw.op(f"{node.name}.out", "add", [y, rw.op(f"{node.name}.mask", "multiply", [c, diff])])


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


def _cast(rw, node, ops, ctx):
    src = rw.node(ops[0])
    if node.dtype.is_floating_point:
        # Device formats come from the data-format pass, not from casts. An integer graph input cast to
        # float (an attention mask) is pushed in a float format instead: small integers are exact in it.
        if not src.dtype.is_floating_point:
            root = src
            while root.kind == "op" and root.op_type in ("reshape", "transpose") and len(root.operands) == 1:
                root = rw.node(root.operands[0])
            if root.kind != "input":
                return None
            root.tags["device_dtype"] = str(node.dtype).replace("torch.", "")
        return ops[0]
    return None


def _stack(rw, node, ops, ctx):
    axis = normalize_dim(node.attrs["axis"], len(node.shape))
    parts = []
    for i, o in enumerate(ops):
        shape = list(rw.shape(o))
        shape.insert(axis, 1)
        parts.append(rw.op(f"{node.name}.unsqueeze{i}", "reshape", [o], {"shape": tuple(shape)}))
    return rw.op(node.name, "concatenate", parts, {"axis": axis})


_RULES = {
    "softmax": _softmax,
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
    "stack": _stack,
}
