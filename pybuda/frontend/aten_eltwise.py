"""Converters for elementwise ATen ops: binary, unary, type conversions and copies.

Registered into :data:`pybuda.frontend.aten_builder.CONVERTERS` by the ``@converts`` decorator when
:mod:`pybuda.frontend.aten_map` imports this module.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Optional, Sequence, Tuple

import torch

from pybuda.frontend.aten_builder import (_as_bool, _reduce_max_or_min, negated, out_shape_of, Builder, Complex, Const, converts, Missing, out_dtype, out_shape, Unsupported, _is_number, _norm_dim, _promote)
from pybuda.frontend.fx_program import meta_val, op_name
from pybuda.ir.graph import INPUT, OP, PARAMETER, SIGN_EXACT, TESTS_NONFINITE
from pybuda.passes.graph.nonfinite import DATA_MOVES

# --- elementwise binary ---------------------------------------------------------------------------
@converts("add", "sub", "rsub")
def _add_sub(b: Builder, n, p):
    name = op_name(n.target)
    x, y = p["self"], p["other"]
    if name == "rsub":
        x, y = y, x
    alpha = p.get("alpha", 1)
    dt = out_dtype(n)
    if alpha is not None and alpha != 1:
        y = b.binary("multiply", y, alpha, dt) if b.is_tensor(y) else y * alpha
    if _is_number(x) and _is_number(y):
        raise Unsupported("scalar-only arithmetic")
    return b.binary("subtract" if name in ("sub", "rsub") else "add", x, y, dt)


@converts("mul")
def _mul(b: Builder, n, p):
    return b.binary("multiply", p["self"], p["other"], out_dtype(n))


@converts("div", "true_divide")
def _div(b: Builder, n, p):
    if p.get("rounding_mode") is not None:
        return integer_quotient(b, p["self"], p["other"], p["rounding_mode"], out_dtype(n))
    x, y = p["self"], p["other"]
    dt = out_dtype(n)
    if _is_number(y) and dt.is_floating_point and y != 0:
        # A constant divisor becomes a multiply by its reciprocal (cheaper on the device).
        return b.binary("multiply", x, 1.0 / float(y), dt)
    return b.binary("divide", x, y, dt)


@converts("floor_divide")
def _floor_divide(b: Builder, n, p):
    return integer_quotient(b, p["self"], p["other"], "floor", out_dtype(n))


#: Most quotient values an integer division may take: one comparison per value past the smallest.
MAX_QUOTIENT_VALUES = 2048
#: Most comparisons (elements times quotient values) an integer division may build.
MAX_QUOTIENT_COMPARISONS = 1 << 22


def integer_quotient(b: Builder, x: Any, d: Any, mode: str, dt: torch.dtype) -> str:
    """``x // d`` (``mode`` "floor", or "trunc": toward zero) of integers ``x`` by a constant ``d > 0``, where
    ``x``'s proven integer range (:mod:`pybuda.ops.integer`) bounds the quotient to a few values: the smallest
    plus the count of the multiples of ``d`` above it that ``x`` reaches, one comparison each, summed (exact:
    small integers, as in ``bucketize``). A top-k's flat index split into a row and a column (``idx // width``,
    ``idx % width``: CenterNet's peaks, a beam search's beam and token) is the common case. Division of float
    data with a rounding mode, by a tensor or by a non-positive number, and quotients of unproven range run on the
    CPU."""
    from pybuda.ops.integer import integer_range

    d = _positive_integer(d)
    if not isinstance(x, str) or d is None or b.dtype(x).is_floating_point or b.dtype(x) == torch.bool \
            or mode not in ("floor", "trunc"):
        raise Unsupported(f"division with rounding_mode={mode!r} other than of integers by a positive constant")
    r = integer_range(b.graph, x)
    if r is None:
        raise Unsupported(f"{mode} division of integers of unproven range")
    low, high = int(r[0]), int(r[1])
    if mode == "trunc" and low < 0 < high:
        raise Unsupported("division toward zero of integers of both signs")
    if mode == "trunc" and high <= 0:  # toward zero of non-positive values: minus the floor quotient of -x
        return b.negative(_floor_quotient(b, b.negative(x, dt), -high, -low, d, dt), dt)
    return _floor_quotient(b, x, low, high, d, dt)


def _positive_integer(d: Any) -> Optional[int]:
    """``d`` as a positive int when it is a positive integral number (or a one-element integral constant)."""
    if isinstance(d, Const) and d.value.numel() == 1:
        d = d.value.item()
    if isinstance(d, bool) or not isinstance(d, (int, float)) or d <= 0 or d != int(d):
        return None
    return int(d)


def _floor_quotient(b: Builder, x: str, low: int, high: int, d: int, dt: torch.dtype) -> str:
    """``floor(x / d)`` for integers ``x`` in ``[low, high]``: ``low // d`` plus how many of the multiples
    ``d·j`` (``low // d < j <= high // d``) are at or below ``x``."""
    first, last = low // d, high // d
    shape = b.shape(x)
    if last - first > MAX_QUOTIENT_VALUES or math.prod(shape) * (last - first) > MAX_QUOTIENT_COMPARISONS:
        raise Unsupported(f"integer division by {d} with {last - first + 1} possible quotients")
    base = b.binary("add", b.binary("multiply", x, 0, dt), first, dt)  # x's shape, the smallest quotient
    if last == first:
        return base
    col = b.reshape(b.tensor(x, torch.float32), tuple(shape) + (1,))
    steps = (torch.arange(first + 1, last + 1, dtype=torch.float32) * d).reshape((1,) * len(shape) + (-1,))
    reached = b.op("greater_equal", [col, b.const(steps, "quotient_steps")])  # 0/1 per multiple of d
    count = b.reshape(b.op("reduce_sum", [reached], dim=len(shape)), tuple(shape))
    return b.binary("add", base, b.cast(count, dt), dt)


@converts("maximum", "minimum", "fmax", "fmin")
def _maxmin(b: Builder, n, p):
    op = "maximum" if op_name(n.target) in ("maximum", "fmax") else "minimum"
    return b.binary(op, p["self"], p["other"], out_dtype(n))


@converts("max", "min")
def _max_min(b: Builder, n, p):
    name = op_name(n.target)
    overload = n.target._overloadname
    if overload == "other":
        return b.binary("maximum" if name == "max" else "minimum", p["self"], p["other"], out_dtype(n))
    x = p["self"]
    if overload == "dim":
        dims = [p["dim"]]
        keep = p["keepdim"]
        vals = _reduce_max_or_min(b, x, dims, keep, name == "min", out_shape_of(n, 0))
        return vals, _argmax_value(b, x, p["dim"], keep, name == "min", n)
    if overload == "default":
        return _reduce_max_or_min(b, x, None, False, name == "min", out_shape(n))
    raise Unsupported(f"{name}.{overload}")






def _argmax_value(b: Builder, x, dim, keepdim, is_min, n):
    if len(n.users) and not any(u.target is operator.getitem and u.args[1] == 1 for u in n.users):
        return Missing("argmax of max.dim is unused")
    v = b.tensor(x)
    if is_min:  # the max of -x; 0 - x is exact, a multiply would round x in the multiplier's registers
        v = negated(b, v)
    shape = out_shape_of(n, 1)
    r = b.op("argmax", [v], dim=_norm_dim(dim, b.rank(x)))
    return b.cast(b.reshape(r, shape), meta_val(n)[1].dtype)


@converts("pow")
def _pow(b: Builder, n, p):
    overload = n.target._overloadname
    dt = out_dtype(n)
    if overload == "Tensor_Scalar":
        x, e = b.tensor(p["self"], dt), p["exponent"]
        if e == 1:
            return x
        if e == 2:
            return b.op("square", [x])
        if e == 0.5:
            return b.op("sqrt", [x])
        if e == -1:
            return b.op("reciprocal", [x])
        if e == -0.5:
            return b.op("reciprocal", [b.op("sqrt", [x])])
        return b.op("pow", [x], exponent=float(e))
    if overload == "Scalar":
        return b.binary("power", p["self"], p["exponent"], dt)
    return b.binary("power", p["self"], p["exponent"], dt)


_COMPARE = {"eq": "equal", "ne": "not_equal", "gt": "greater", "lt": "less", "ge": "greater_equal",
            "le": "less_equal"}


@converts(*_COMPARE)
def _compare(b: Builder, n, p):
    x, y = p["self"], p["other"]
    dt = _promote(b, x, y)
    kind = _COMPARE[op_name(n.target)]
    if dt == torch.bool:
        # Masks compared with masks: the 0/1 values as floats (exact), so the device's comparison computes
        # float data, as every comparison there does; a comparison typed bool was sent to the host.
        dt = torch.float32
    if dt.is_floating_point:
        special = _nonfinite_compare(b, kind, x, y, dt)
        if special is not None:
            return b.cast(special, torch.bool)
    r = b.binary(kind, x, y, dt)
    return b.cast(r, torch.bool)


@converts("bucketize", "searchsorted")
def _bucketize(b: Builder, n, p):
    """``bucketize(x, boundaries)`` / ``searchsorted(sorted_sequence, x)`` with constant 1-d boundaries: the
    count of boundaries that ``x`` is not at or below (``right``: not below), a comparison against each
    boundary and a sum of the 0/1 results -- small integers, exact on the device. Counting the negated
    comparison puts NaN after every boundary, as torch does."""
    if op_name(n.target) == "bucketize":
        x, bounds = p["self"], p["boundaries"]
        right = bool(p.get("right", False))
    else:
        x, bounds = p["self"], p["sorted_sequence"]
        right = bool(p.get("right", False)) or p.get("side") == "right"
        if p.get("sorter") is not None:
            raise Unsupported("searchsorted with a sorter")
    if not isinstance(bounds, Const) or bounds.value.dim() != 1 or not bounds.value.is_floating_point():
        raise Unsupported(f"{op_name(n.target)} with boundaries that are not a constant 1-d float tensor")
    if not b.is_tensor(x) or not b.dtype(x).is_floating_point:
        raise Unsupported(f"{op_name(n.target)} of non-float values")
    k = bounds.value.numel()
    shape = b.shape(x)
    col = b.reshape(b.tensor(x, torch.float32), tuple(shape) + (1,))
    edges = b.const(bounds.value.to(torch.float32).reshape((1,) * len(shape) + (k,)), f"{n.name}.boundaries")
    below = b.op("less" if right else "less_equal", [col, edges])  # 0/1: x at or below the boundary
    count = b.binary("subtract", float(k), b.op("reduce_sum", [below], dim=len(shape)), torch.float32)
    return b.cast(b.reshape(count, out_shape(n)), out_dtype(n))


# --- NaN and infinity tests -------------------------------------------------------------------------
#
# The chip has no compare op: a comparison is a heaviside step of a difference (pybuda.passes.graph.decompose).
# Differences of infinities are NaN (inf - inf) and a NaN steps to 0 (heaviside(NaN, v) = 0: "NaN > 0" and
# "NaN == 0" are both false), so ``x == inf``, ``x == x`` at inf and ``x != x`` at NaN come out wrong through
# the difference. The tests below step on x itself, or on ``x - x`` (0 for every finite x, NaN for +-inf and
# NaN), never on a difference of two different values, so no rounding, overflow or flush can change them:
#
#   notnan(x)   = heaviside(|x|, 1)      1 for every number (0 included), 0 for NaN
#   isnan(x)    = 1 - notnan(x)
#   isfinite(x) = heaviside(x - x, 1)    x - x is exactly 0 for every finite x, whatever its magnitude
#   isinf(x)    = notnan(x) - isfinite(x)
#   isposinf(x) = isinf(x) * heaviside(x, 0),  isneginf(x) = isinf(x) - isposinf(x)
#
# Every value is 0 or 1, exact in any format and through the multiplier. What matters is that the NaNs and
# infinities reach the steps: |x| and x - x are tagged SIGN_EXACT (kept in Float16_b or Float32, which hold
# them; Float16 saturates both, a block format turns a NaN into an infinity and flushes its block), and so is
# the op producing x (or x is pushed in Float32 when it is a graph input; a bfloat16 input in Float16_b), and
# every op between it and where a NaN or infinity can be made (pybuda.passes.graph.nonfinite).


def _hold_nonfinite(b: Builder, x: str) -> None:
    """Ask the data-format pass to keep ``x``'s NaNs and infinities where ``x`` is made (see above)."""
    node = b.graph[x]
    while node.kind == OP and node.op_type in _MOVES and len(node.operands) == 1:
        node = b.graph[node.operands[0]]
    if node.kind == OP:
        node.tags[SIGN_EXACT] = True
    elif node.kind in (INPUT, PARAMETER) and node.dtype.is_floating_point:
        node.tags.setdefault("exact_df", "Float16_b" if node.dtype == torch.bfloat16 else "Float32")


#: Registry ops that move data without computing (their operand's format reaches the reader).
_MOVES = DATA_MOVES


def _sign_exact(b: Builder, name: str) -> str:
    """Tag a NaN/infinity test's ``|x|`` or ``x - x`` (see above)."""
    if b.graph[name].kind == OP:  # not folded into a constant
        b.graph[name].tags[SIGN_EXACT] = True
        b.graph[name].tags[TESTS_NONFINITE] = True
    return name


def _float_operand(b: Builder, x, dtype=None) -> Tuple[str, torch.dtype]:
    name = b.tensor(x)
    dt = b.dtype(name)
    if not dt.is_floating_point:
        raise Unsupported("NaN/infinity test of non-float data")  # callers answer integers themselves
    _hold_nonfinite(b, name)
    return name, dt


def notnan_of(b: Builder, x) -> str:
    """1.0 where ``x`` is a number (finite or infinite), 0.0 where it is NaN, in ``x``'s float dtype."""
    x, dt = _float_operand(b, x)
    return b.binary("heaviside", _sign_exact(b, b.op("abs", [x])), 1.0, dt)


def isnan_of(b: Builder, x) -> str:
    """1.0 where ``x`` is NaN, else 0.0 (``x``'s float dtype)."""
    dt = b.dtype(x)
    return b.binary("subtract", 1.0, notnan_of(b, x), dt)


def isfinite_of(b: Builder, x) -> str:
    """1.0 where ``x`` is finite, 0.0 at +-inf and NaN (``x``'s float dtype)."""
    x, dt = _float_operand(b, x)
    return b.binary("heaviside", _sign_exact(b, b.op("subtract", [x, x])), 1.0, dt)


def isinf_of(b: Builder, x, positive: bool = True, negative: bool = True) -> str:
    """1.0 where ``x`` is an infinity of a detected sign, else 0.0 (``x``'s float dtype)."""
    x, dt = _float_operand(b, x)
    inf = b.op("subtract", [notnan_of(b, x), isfinite_of(b, x)])
    if positive and negative:
        return inf
    pos = b.op("multiply", [inf, b.binary("heaviside", x, 0.0, dt)])
    if positive:
        return pos
    if negative:
        return b.op("subtract", [inf, pos])
    return b.binary("multiply", inf, 0.0, dt)  # no sign detected: 0 everywhere


def _infinity(b: Builder, v) -> float:
    """+-1.0 when ``v`` is a Python number or a constant whose every element is +-inf, else 0.0."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return math.copysign(1.0, v) if math.isinf(v) else 0.0
    if isinstance(v, Const) and v.value.dtype.is_floating_point and v.value.numel():
        if bool(torch.all(v.value == math.inf)):
            return 1.0
        if bool(torch.all(v.value == -math.inf)):
            return -1.0
    return 0.0


_SWAPPED = {"equal": "equal", "not_equal": "not_equal", "greater": "less", "less": "greater",
            "greater_equal": "less_equal", "less_equal": "greater_equal"}


def _nonfinite_compare(b: Builder, kind: str, x, y, dt) -> Optional[str]:
    """The comparisons whose heaviside-of-a-difference form is wrong at NaN or infinity, as exact tests (see
    above): ``x OP x`` and ``x OP +-inf``; None for every other comparison (the generic form is right there:
    ``x > inf`` and ``x < -inf`` are always false, which the difference gives too)."""
    if isinstance(x, str) and isinstance(y, str) and b.tensor(x) == b.tensor(y):
        if kind in ("equal", "greater_equal", "less_equal"):  # true for every number, false for NaN
            return notnan_of(b, b.tensor(x, dt))
        if kind == "not_equal":
            return isnan_of(b, b.tensor(x, dt))
        return None  # x > x, x < x: false everywhere; heaviside(x - x, 0) is 0 for 0 and NaN alike
    sign = _infinity(b, y)
    if not sign:
        sign = _infinity(b, x)
        if not sign:
            return None
        kind, x = _SWAPPED[kind], y
    if not b.is_tensor(x):
        return None
    v = b.tensor(x, dt)
    if (kind == "greater" and sign > 0) or (kind == "less" and sign < 0):
        return None
    hit = isinf_of(b, v, positive=sign > 0, negative=sign < 0)  # x == the infinity
    if kind == "equal":
        return hit
    if kind == "not_equal":
        return b.binary("subtract", 1.0, hit, dt)
    if kind in ("greater_equal", "less_equal"):
        # x >= inf and x <= -inf: x is that infinity; x <= inf and x >= -inf: x is a number
        return hit if (kind == "greater_equal") == (sign > 0) else notnan_of(b, v)
    # x < inf, x > -inf: a number other than that infinity
    return b.op("subtract", [notnan_of(b, v), hit])


def _nan_inf_test(b: Builder, n, p, on_integers: bool, test) -> Any:
    """``test(b, x)`` as a bool tensor; on integer data the constant ``on_integers`` (see :func:`_all_or_none`)."""
    x = p["self"]
    if not b.dtype(x).is_floating_point:
        return _all_or_none(n, on_integers)
    return b.cast(test(b, b.tensor(x)), torch.bool)


@converts("isnan")
def _isnan(b: Builder, n, p):
    return _nan_inf_test(b, n, p, False, isnan_of)


@converts("isinf", "isposinf", "isneginf")
def _isinf(b: Builder, n, p):
    name = op_name(n.target)
    return _nan_inf_test(b, n, p, False, lambda b, x: isinf_of(b, x, positive=name != "isneginf",
                                                               negative=name != "isposinf"))


@converts("isfinite")
def _isfinite(b: Builder, n, p):
    return _nan_inf_test(b, n, p, True, isfinite_of)


def _all_or_none(n, value: bool) -> Const:
    """The constant answer of a NaN/infinity test on integer data (every integer is a finite number)."""
    return Const(torch.full(out_shape(n), value, dtype=torch.bool), f"{n.name}.{'all' if value else 'none'}")


@converts("nan_to_num")
def _nan_to_num(b: Builder, n, p):
    x = b.tensor(p["self"])
    dt = b.dtype(x)
    if not dt.is_floating_point:
        return x
    big = float(torch.finfo(dt).max)
    nan = float(p.get("nan") or 0.0)
    posinf = float(p["posinf"]) if p.get("posinf") is not None else big
    neginf = float(p["neginf"]) if p.get("neginf") is not None else -big
    rank = b.rank(x)
    out = b.op("where", [b.cast(isnan_of(b, x), torch.bool), b.scalar(nan, dt, rank), x])
    out = b.op("where", [b.cast(isinf_of(b, x, negative=False), torch.bool), b.scalar(posinf, dt, rank), out])
    return b.op("where", [b.cast(isinf_of(b, x, positive=False), torch.bool), b.scalar(neginf, dt, rank), out])




@converts("logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "__and__",
          "__or__", "__xor__")
def _logical(b: Builder, n, p):
    name = op_name(n.target)
    x, y = p["self"], p["other"]
    if name.startswith("bitwise") or name.startswith("__"):
        if out_dtype(n) != torch.bool:
            raise Unsupported("bitwise ops on integers")
    if _is_number(y):
        y = b.scalar(bool(y), torch.bool, b.rank(x))
    a, c = _as_bool(b, x), _as_bool(b, y)
    kind = name.replace("logical_", "").replace("bitwise_", "").strip("_")
    if kind == "and":
        return b.op("logical_and", [a, c])
    if kind == "or":
        return b.op("logical_not", [b.op("logical_and", [b.op("logical_not", [a]), b.op("logical_not", [c])])])
    # xor: the masks differ, compared as float 0/1 (exact), as comparisons run on the device
    return b.cast(b.binary("not_equal", a, c, torch.float32), torch.bool)


@converts("logical_not", "bitwise_not")
def _logical_not(b: Builder, n, p):
    if op_name(n.target) == "bitwise_not" and out_dtype(n) != torch.bool:
        raise Unsupported("bitwise_not on integers")
    return b.op("logical_not", [_as_bool(b, p["self"])])


@converts("where")
def _where(b: Builder, n, p):
    if n.target._overloadname == "default":
        raise Unsupported("single-argument where (nonzero) has a data-dependent shape")
    dt = out_dtype(n)
    cond, x, y = p["condition"], p["self"], p["other"]
    rank = max(b.rank(v) for v in (cond, x, y) if b.is_tensor(v))
    xs = b.scalar(x, dt, rank) if _is_number(x) else b.tensor(x, dt)
    ys = b.scalar(y, dt, rank) if _is_number(y) else b.tensor(y, dt)
    return b.op("where", [b.tensor(cond), xs, ys])


@converts("masked_fill")
def _masked_fill(b: Builder, n, p):
    dt = out_dtype(n)
    x, mask, value = p["self"], p["mask"], p["value"]
    vs = b.scalar(value, dt, b.rank(x)) if _is_number(value) else b.tensor(value, dt)
    return b.op("where", [b.tensor(mask), vs, b.tensor(x, dt)])


# --- elementwise unary ----------------------------------------------------------------------------
_UNARY = {"abs": "abs", "exp": "exp", "log": "log", "reciprocal": "reciprocal", "sqrt": "sqrt",
          "sigmoid": "sigmoid", "sin": "sine", "cos": "cosine", "tanh": "tanh", "erf": "erf", "square": "square"}


@converts(*_UNARY)
def _unary(b: Builder, n, p):
    x = p["self"]
    if isinstance(x, Complex) and op_name(n.target) == "abs":  # |z| = sqrt(re^2 + im^2)
        if x.im is None:
            return b.op("abs", [x.re])
        return b.op("sqrt", [b.op("add", [b.op("multiply", [x.re, x.re]), b.op("multiply", [x.im, x.im])])])
    return b.op(_UNARY[op_name(n.target)], [b.tensor(p["self"], out_dtype(n))])


# Inverse trigonometric functions as polynomials (Abramowitz & Stegun 4.4.46 and 4.4.49, |error| <= 2e-8 in
# float64): the chip has no such SFPU functions, but sqrt, multiply and add evaluate them to its precision.
_ACOS = (1.5707963050, -0.2145988016, 0.0889789874, -0.0501743046, 0.0308918810, -0.0170881256, 0.0066700901,
         -0.0012624911)  # acos(x) = sqrt(1 - x) * sum(a_i x^i) on [0, 1]
_ATAN = (1.0, -0.3333314528, 0.1999355085, -0.1420889944, 0.1065626393, -0.0752896400, 0.0429096138,
         -0.0161657367, 0.0028662257)  # atan(x) = x * sum(a_i x^2i) on [-1, 1]


def _horner(b: Builder, x: str, coefficients: Sequence[float], dt: torch.dtype) -> str:
    acc = b.scalar(coefficients[-1], dt, b.rank(x))
    for c in reversed(coefficients[:-1]):
        acc = b.binary("add", b.op("multiply", [acc, x]), c, dt)
    return acc


def _where_negative(b: Builder, x: str, negative: str, other: str, dt: torch.dtype) -> str:
    return b.op("where", [b.cast(b.binary("less", x, 0.0, dt), torch.bool), negative, other])


def _acos(b: Builder, x: str, dt: torch.dtype) -> str:
    """acos on [-1, 1] (NaN outside, as torch): acos(-x) = pi - acos(x)."""
    a = b.op("abs", [x])
    r = b.op("multiply", [b.op("sqrt", [b.binary("subtract", 1.0, a, dt)]), _horner(b, a, _ACOS, dt)])
    return _where_negative(b, x, b.binary("subtract", math.pi, r, dt), r, dt)


@converts("acos", "asin", "atan")
def _inverse_trig(b: Builder, n, p):
    dt = out_dtype(n)
    return _inverse_trig_of(b, op_name(n.target), b.tensor(p["self"], dt), dt)


def _inverse_trig_of(b: Builder, name: str, x: str, dt: torch.dtype) -> str:
    """``name`` ('acos', 'asin' or 'atan') of ``x`` from ops the chip runs (the ONNX importer's too)."""
    if name == "acos":
        return _acos(b, x, dt)
    if name == "asin":  # asin(x) = pi / 2 - acos(x)
        return b.binary("subtract", math.pi / 2, _acos(b, x, dt), dt)
    # atan(x) for |x| > 1: sign(x) * pi / 2 - atan(1 / x). 1 / x is x / max(|x|, 1)^2, which stays finite
    # where |x| <= 1 (a where picking between 1 / x and x would see 1 / 0).
    a = b.op("abs", [x])
    big = b.cast(b.binary("greater", a, 1.0, dt), torch.bool)
    d = b.binary("maximum", a, 1.0, dt)
    inner = b.op("multiply", [x, b.op("reciprocal", [b.op("multiply", [d, d])])])
    core = b.op("multiply", [inner, _horner(b, b.op("multiply", [inner, inner]), _ATAN, dt)])
    half_pi = _where_negative(b, x, b.scalar(-math.pi / 2, dt, b.rank(x)), b.scalar(math.pi / 2, dt, b.rank(x)), dt)
    return b.op("where", [big, b.op("subtract", [half_pi, core]), core])


@converts("exp2", "log2", "log10", "erfc")
def _unary_scaled(b: Builder, n, p):
    """Unary ops one scale away from a device op: ``exp2(x) = exp(x ln 2)``, ``log2(x) = log(x) / ln 2``,
    ``log10(x) = log(x) / ln 10``, ``erfc(x) = 1 - erf(x)``."""
    name, dt = op_name(n.target), out_dtype(n)
    x = b.tensor(p["self"], dt)
    if name == "exp2":
        return b.op("exp", [b.binary("multiply", x, math.log(2.0), dt)])
    if name == "erfc":
        return b.binary("subtract", 1.0, b.op("erf", [x]), dt)
    return b.binary("multiply", b.op("log", [x]), 1.0 / math.log(2.0 if name == "log2" else 10.0), dt)


@converts("remainder", "fmod")
def _remainder(b: Builder, n, p):
    return integer_remainder(b, p["self"], p["other"], op_name(n.target) == "fmod")


def integer_remainder(b: Builder, x: Any, d: Any, fmod: bool) -> str:
    """An integer ``x % d`` (``fmod``: the sign of ``x``, else of ``d``) by a constant ``d > 0`` of proven integer
    range: ``x`` itself within ``[0, d)`` (``(-d, d)`` for fmod), ``x + d`` where negative within ``[-d, d)``
    (``take_along_dim`` wraps indices that argsort proved in range), else ``x - d·(x // d)``
    (:func:`integer_quotient`; fmod of values of one sign), clamped to where it lies. Remainders of float data run
    on the CPU. Shared by the torch and ONNX (``Mod``) frontends."""
    from pybuda.ops.integer import integer_range

    name = "fmod" if fmod else "remainder"
    d = _positive_integer(d)
    if not isinstance(x, str) or d is None or b.dtype(x).is_floating_point or b.dtype(x) == torch.bool:
        raise Unsupported(f"{name} other than of integers by a positive constant")
    r = integer_range(b.graph, x)
    if r is not None and r[0] >= (-d + 1 if fmod else 0) and r[1] < d:
        return b.tensor(x)
    dt = b.dtype(x)
    if r is not None and not fmod and r[0] >= -d and r[1] < d:
        return b.op("where", [b.cast(b.binary("less", x, 0, dt), torch.bool), b.binary("add", x, d, dt), x])
    if r is not None and (not fmod or r[0] >= 0 or r[1] <= 0):
        # x - d·q with q the quotient toward -inf (remainder) or toward zero (fmod), both exact integers; the
        # result is then clamped to where it lies, a no-op on the values that tells the range analysis so (a
        # column index used for a gather must be proven within its dim).
        q = integer_quotient(b, x, d, "trunc" if fmod else "floor", dt)
        rest = b.binary("subtract", x, b.binary("multiply", q, d, dt), dt)
        low, high = (0, d - 1) if not fmod or r[0] >= 0 else (1 - d, 0)
        return b.binary("minimum", b.binary("maximum", rest, low, dt), high, dt)
    raise Unsupported(f"{name} by {d} of integers of unproven range")


@converts("neg")
def _neg(b: Builder, n, p):
    return b.negative(p["self"], out_dtype(n))


@converts("rsqrt")
def _rsqrt(b: Builder, n, p):
    return b.op("reciprocal", [b.op("sqrt", [b.tensor(p["self"], out_dtype(n))])])


@converts("log1p")
def _log1p(b: Builder, n, p):
    return b.op("log", [b.binary("add", p["self"], 1.0, out_dtype(n))])


@converts("expm1")
def _expm1(b: Builder, n, p):
    dt = out_dtype(n)
    return b.binary("subtract", b.op("exp", [b.tensor(p["self"], dt)]), 1.0, dt)


@converts("relu")
def _relu(b: Builder, n, p):
    return b.op("relu", [p["self"]])


@converts("gelu")
def _gelu(b: Builder, n, p):
    return b.op("gelu", [b.tensor(p["self"], out_dtype(n))], approximate=p.get("approximate") or "none")


@converts("leaky_relu")
def _leaky_relu(b: Builder, n, p):
    return b.op("leaky_relu", [p["self"]], alpha=float(p["negative_slope"]))


@converts("rrelu_with_noise_functional", "rrelu_with_noise", "rrelu")
def _rrelu(b: Builder, n, p):
    """RReLU in eval mode: a leaky ReLU with the mean slope ``(lower + upper) / 2``. (Training draws random
    slopes: the host runs it.) ``rrelu_with_noise_functional`` also returns the noise, unused in eval."""
    if p.get("training", False):
        raise Unsupported("rrelu in training mode (random slopes)")
    slope = (float(p.get("lower", 1.0 / 8.0)) + float(p.get("upper", 1.0 / 3.0))) / 2.0
    out = b.op("leaky_relu", [p["self"]], alpha=slope)
    if op_name(n.target) == "rrelu_with_noise_functional":
        return out, Missing("rrelu noise")
    return out


@converts("hardtanh", "relu6")
def _hardtanh(b: Builder, n, p):
    if op_name(n.target) == "relu6":
        lo, hi = 0.0, 6.0
    else:
        lo, hi = float(p["min_val"]), float(p["max_val"])
    return b.op("clip", [p["self"]], min=lo, max=hi)


@converts("clamp", "clip", "clamp_min", "clamp_max")
def _clamp(b: Builder, n, p):
    name = op_name(n.target)
    x = p["self"]
    dt = out_dtype(n)
    lo = p.get("min") if name != "clamp_max" else None
    hi = p.get("max") if name != "clamp_min" else None
    if name == "clamp_max":
        hi = p["max"]
    if (lo is None or _is_number(lo)) and (hi is None or _is_number(hi)):
        lo_f = float(lo) if lo is not None else -math.inf
        hi_f = float(hi) if hi is not None else math.inf
        return b.op("clip", [b.tensor(x, dt)], min=lo_f, max=hi_f)
    v = b.tensor(x, dt)
    if lo is not None:
        v = b.binary("maximum", v, lo, dt)
    if hi is not None:
        v = b.binary("minimum", v, hi, dt)
    return v


@converts("silu")
def _silu(b: Builder, n, p):
    x = b.tensor(p["self"], out_dtype(n))
    return b.op("multiply", [x, b.op("sigmoid", [x])])


def _hardsigmoid_of(b: Builder, x: str, dt) -> str:
    return b.op("clip", [b.binary("add", b.binary("multiply", x, 1.0 / 6.0, dt), 0.5, dt)], min=0.0, max=1.0)


@converts("hardsigmoid")
def _hardsigmoid(b: Builder, n, p):
    dt = out_dtype(n)
    return _hardsigmoid_of(b, b.tensor(p["self"], dt), dt)


@converts("hardswish")
def _hardswish(b: Builder, n, p):
    dt = out_dtype(n)
    x = b.tensor(p["self"], dt)
    return b.op("multiply", [x, _hardsigmoid_of(b, x, dt)])


def _elu_of(b: Builder, x: str, alpha: float, scale: float, input_scale: float, dt) -> str:
    """``scale * (x if x > 0 else alpha * (exp(input_scale * x) - 1))``: ELU, SELU and CELU (aten's and ONNX's).

    The exponential is of ``min(x, 0)``: the branch ``where`` drops stays at most ``alpha * 0``. Of ``x`` itself, a
    positive element's exponential shared a block of a block format with the kept negative ones and flushed them
    to zero (SELU at Bfp8_b: error 0.3), or was inf, which a B-format block spreads to its neighbours."""
    xs = b.binary("minimum", x, 0.0, dt)
    xs = b.binary("multiply", xs, input_scale, dt) if input_scale != 1 else xs
    neg = b.binary("multiply", b.binary("subtract", b.op("exp", [xs]), 1.0, dt), alpha, dt)
    out = b.op("where", [b.binary("greater", x, 0.0, dt), x, neg])
    return b.binary("multiply", out, scale, dt) if scale != 1 else out


@converts("elu")
def _elu(b: Builder, n, p):
    dt = out_dtype(n)
    return _elu_of(b, b.tensor(p["self"], dt), float(p["alpha"]), float(p.get("scale", 1)),
                   float(p.get("input_scale", 1)), dt)


@converts("celu")
def _celu(b: Builder, n, p):
    """``celu(x, alpha)`` is ``elu`` with ``input_scale = 1 / alpha``, kept whole (torch's decomposition takes the
    exponential of every element, see :func:`_elu_of`)."""
    dt = out_dtype(n)
    alpha = float(p.get("alpha", 1.0))
    return _elu_of(b, b.tensor(p["self"], dt), alpha, 1.0, 1.0 / alpha, dt)


def _softplus_of(b: Builder, x: str, beta: float, threshold: float, dt) -> str:
    bx = b.binary("multiply", x, beta, dt) if beta != 1 else x
    soft = b.op("log", [b.binary("add", b.op("exp", [bx]), 1.0, dt)])
    if beta != 1:
        soft = b.binary("multiply", soft, 1.0 / beta, dt)
    # x * beta > threshold as x against threshold / beta: the input itself is compared, not a product the
    # chip computes from TF32 operands (1e-3 off, which moved elements near the threshold to the other
    # branch, a jump of log(1 + exp(-threshold)) / beta).
    above = b.binary("greater", x, threshold / beta, dt) if beta > 0 else b.binary("greater", bx, threshold, dt)
    return b.op("where", [above, x, soft])


@converts("softplus")
def _softplus(b: Builder, n, p):
    dt = out_dtype(n)
    return _softplus_of(b, b.tensor(p["self"], dt), float(p["beta"]), float(p["threshold"]), dt)


@converts("mish")
def _mish(b: Builder, n, p):
    dt = out_dtype(n)
    x = b.tensor(p["self"], dt)
    return b.op("multiply", [x, b.op("tanh", [_softplus_of(b, x, 1.0, 20.0, dt)])])


@converts("dropout", "feature_dropout", "alpha_dropout", "native_dropout")
def _dropout(b: Builder, n, p):
    x = p["input"]
    train = p.get("train")
    prob = float(p["p"])
    if not train or prob == 0.0:
        out = b.tensor(x)
    elif op_name(n.target) in ("dropout", "native_dropout"):
        out = b.op("dropout", [x], p=prob, training=True, seed=0)
    else:
        raise Unsupported(f"{op_name(n.target)} in training mode")
    if op_name(n.target) == "native_dropout":
        return out, Missing("dropout mask")
    return out


# --- type conversion and copies -------------------------------------------------------------------
@converts("clone", "contiguous", "alias", "detach", "lift_fresh_copy", "lift_fresh", "_to_copy", "to", "type_as")
def _copy_or_cast(b: Builder, n, p):
    x = p.get("self", p.get("input"))
    dt = out_dtype(n)
    if dt.is_complex or isinstance(x, Complex):  # a complex value is a pair of real tensors (aten_complex)
        if isinstance(x, Complex):
            return x if dt.is_complex else b.cast(x.re, dt)  # to a real dtype: the real part, as torch does
        return Complex(b.cast(x, torch.float32), None)
    if dt == torch.bool and b.is_tensor(x) and not isinstance(x, Const):
        src = b.dtype(x)
        if not (src.is_floating_point or src == torch.bool):
            # An integer mask (e.g. a tokenizer's attention_mask) turned into bools: float it first and
            # compare with 0, so the mask is a float 0/1 on the device instead of integer data.
            return _as_bool(b, b.cast(x, torch.float32))
    return b.cast(x, dt)


@converts("copy")
def _copy(b: Builder, n, p):
    src = b.tensor(p["src"], out_dtype(n))
    return b.broadcast_to(src, out_shape(n))
