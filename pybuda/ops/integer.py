"""Integer-valued results: which values of a graph hold only integers, and how large they can get.

The chip computes in float formats, where an integer is exact while its magnitude fits the format's
significand (:func:`pybuda.golden.formats.exact_integer_bound`: 2**24 in Float32, 256 in Float16_b, 127 in
Bfp8). So integer data (argmax indices, counts of a mask, index math) can live on the device as long as
every value it passes through is an integer within that bound, and no step rounds it: a cast to an integer
dtype is then the identity on the value.

Each registry op says how its result follows from its operands in ``OpDef.int_range``: a rule
``(ranges, shapes, attrs) -> Optional[IntRange]`` that gets, per operand, the closed interval
``(low, high)`` its integer values lie in (None: the operand is not known to be integer-valued) and returns
the result's interval, or None when the result need not be an integer (``exp``, ``divide``, ``reduce_avg``).
Comparisons and logical ops give 0/1 whatever their operands; add, subtract, multiply, max/min, where,
reductions by sum or max, every data-movement op, argmax (an index) and casts preserve integers.
:func:`integer_range` decides it for a node of a graph from its producers.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from pybuda.dtypes import DataFormat
from pybuda.golden.formats import exact_integer_bound

IntRange = Tuple[float, float]
IntRangeFn = Callable[[List[Optional[IntRange]], List[Tuple[int, ...]], Dict], Optional[IntRange]]

#: Integers up to this magnitude are exact in Float32 (24-bit significand, 2**24): the largest range integer
#: data may have anywhere on the device, and the range the runtime enforces on integer inputs pushed to it.
FLOAT32_EXACT_INT = exact_integer_bound(DataFormat.Float32)

#: Integers up to this magnitude are exact in Float16_b (2**8), Grayskull's widest accumulator (Dest) format:
#: every op result passes through Dest, so on Grayskull integer results are exact only this far.
FLOAT16_B_EXACT_INT = exact_integer_bound(DataFormat.Float16_b)

_EXACT_LIMIT: "contextvars.ContextVar[int]" = contextvars.ContextVar("pybuda_exact_integer_limit",
                                                                    default=FLOAT32_EXACT_INT)


def is_integer_dtype(dtype: torch.dtype) -> bool:
    """Whether ``dtype`` holds integers (not a float, complex or boolean dtype)."""
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def exact_limit() -> int:
    """Largest integer magnitude the target chip keeps exact in an op's result (see :func:`target_arch`)."""
    return _EXACT_LIMIT.get()


@contextlib.contextmanager
def target_arch(arch: Any) -> Iterator[None]:
    """Within this block, capability checks hold integer results to what ``arch`` computes exactly: Float32
    (2**24) on chips that accumulate in Float32, Float16_b (2**8) on Grayskull, whose Dest cannot."""
    name = str(getattr(arch, "value", arch) or "").lower()
    token = _EXACT_LIMIT.set(FLOAT16_B_EXACT_INT if "grayskull" in name else FLOAT32_EXACT_INT)
    try:
        yield
    finally:
        _EXACT_LIMIT.reset(token)


#: Largest integer magnitude a multiplier operand keeps exactly at the default math fidelity (HiFi3/HiFi4):
#: the matrix and multiply units read operands through 19-bit source registers (SrcA keeps 9 fraction bits,
#: SrcB 10), so an integer operand is exact only below 2**10. Products of larger integers are not exact.
MULTIPLIER_EXACT_INT = 2 ** 10

ZERO_ONE: IntRange = (0.0, 1.0)


def hull(*ranges: Optional[IntRange]) -> Optional[IntRange]:
    """The smallest interval holding every range; None when any is None (not integer-valued)."""
    if not ranges or any(r is None for r in ranges):
        return None
    return (min(r[0] for r in ranges), max(r[1] for r in ranges))


def magnitude(r: IntRange) -> float:
    """Largest absolute value in ``r``."""
    return max(abs(r[0]), abs(r[1]))


def _integral(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and float(value).is_integer()


def of_value(value: float) -> Optional[IntRange]:
    """The one-point range of a scalar, or None when it is not an integer."""
    return (float(value), float(value)) if _integral(value) else None


# --- rules (OpDef.int_range) -------------------------------------------------------------------------


def _ignores_operands(rule: IntRangeFn) -> IntRangeFn:
    # The analysis need not look at the producers of an op with such a rule (saves walking a float graph).
    rule.ignores_operands = True
    return rule


def always(r: IntRange) -> IntRangeFn:
    """A result that is an integer in ``r`` whatever the operands hold (comparisons: 0/1)."""
    return _ignores_operands(lambda ranges, shapes, attrs: r)


def comparison(kind: str) -> IntRangeFn:
    """A comparison's 0/1 result, decided where the operands' integer ranges cannot overlap the other way: 1 (0)
    when it holds (fails) for every pair of values. A ``where`` on a decided condition then holds one side only:
    JAX's wrap of negative indices (``where(i < 0, i + n, i)``) of an index proven non-negative is the index."""
    def rule(ranges, shapes, attrs) -> IntRange:
        a, b = ranges[0], ranges[1]
        if a is None or b is None:
            return ZERO_ONE
        always_true, always_false = {
            "less": (a[1] < b[0], a[0] >= b[1]),
            "less_equal": (a[1] <= b[0], a[0] > b[1]),
            "greater": (a[0] > b[1], a[1] <= b[0]),
            "greater_equal": (a[0] >= b[1], a[1] < b[0]),
            "equal": (a[0] == a[1] == b[0] == b[1], a[1] < b[0] or a[0] > b[1]),
            "not_equal": (a[1] < b[0] or a[0] > b[1], a[0] == a[1] == b[0] == b[1]),
        }[kind]
        return (1.0, 1.0) if always_true else (0.0, 0.0) if always_false else ZERO_ONE

    rule.decides_booleans = True
    return rule


def _truth(r: Optional[IntRange]) -> Optional[bool]:
    """True (False) where a range holds only non-zero values (only zero): a decided 0/1 condition; else None."""
    if r is None:
        return None
    if r == (0.0, 0.0):
        return False
    return True if r[0] > 0 or r[1] < 0 else None


def logical_and(ranges, shapes, attrs) -> IntRange:
    """``a and b``: 0 where either side is decided false, 1 where both are decided true (see :func:`comparison`)."""
    a, b = _truth(ranges[0]), _truth(ranges[1])
    return (0.0, 0.0) if a is False or b is False else (1.0, 1.0) if a and b else ZERO_ONE


def logical_not(ranges, shapes, attrs) -> IntRange:
    a = _truth(ranges[0])
    return ZERO_ONE if a is None else (0.0, 0.0) if a else (1.0, 1.0)


logical_and.decides_booleans = logical_not.decides_booleans = True


def moves(ranges, shapes, attrs) -> Optional[IntRange]:
    """Data movement and selection (reshape, concat, max, nop...): the result holds operand values only."""
    return hull(*ranges)


_EXACT_MOVES: "contextvars.ContextVar[Optional[bool]]" = contextvars.ContextVar("pybuda_exact_moves", default=None)


@contextlib.contextmanager
def exact_moves(enabled: Optional[bool]) -> Iterator[None]:
    """Within this block, capability checks assume the compile copies data movement exactly (``enabled``: the
    compile's ``exact_data_movement``) or not; None reads the global config."""
    token = _EXACT_MOVES.set(None if enabled is None else bool(enabled))
    try:
        yield
    finally:
        _EXACT_MOVES.reset(token)


def moves_limit() -> int:
    """Largest integer magnitude a data-movement op keeps exact: where a picker matmul realises the move, the
    multiplier's 2**10, unless the compile makes copying pickers exact (``exact_data_movement``,
    :mod:`pybuda.passes.lowered.exact_pickers`, on chips whose Dest holds Float32): then what the chip's ops
    keep exact (2**24)."""
    enabled = _EXACT_MOVES.get()
    if enabled is None:
        from pybuda.config import _get_global_compiler_config

        enabled = bool(getattr(_get_global_compiler_config(), "exact_data_movement", False))
    return max(MULTIPLIER_EXACT_INT, exact_limit()) if enabled else MULTIPLIER_EXACT_INT


def moves_data(ranges, shapes, attrs) -> Optional[IntRange]:
    """Data movement (reshape, transpose, concat, slices...): the result holds operand values only, but
    lowering may realise the move as a picker matmul, so the values must pass it unrounded
    (:func:`moves_limit`: an int64 attention mask moved to ``[batch, seq, 1]`` stays on the device)."""
    r = hull(*ranges)
    return r if r is not None and magnitude(r) <= moves_limit() else None


def moves_first(ranges, shapes, attrs) -> Optional[IntRange]:
    """Gathers whose operand 0 holds the values (the others are indices), realised as picker matmuls."""
    return ranges[0] if on_multiplier(ranges[0]) else None


def moves_or_fill(ranges, shapes, attrs) -> Optional[IntRange]:
    """Data movement that may add a fill value (pad with ``value``)."""
    return moves_data(list(ranges) + [of_value(attrs.get("value", 0.0) or 0.0)], shapes, attrs)


def add(ranges, shapes, attrs) -> Optional[IntRange]:
    a, b = ranges
    return None if a is None or b is None else (a[0] + b[0], a[1] + b[1])


def subtract(ranges, shapes, attrs) -> Optional[IntRange]:
    a, b = ranges
    return None if a is None or b is None else (a[0] - b[1], a[1] - b[0])


def _product(a: IntRange, b: IntRange) -> IntRange:
    corners = [x * y for x in a for y in b]
    return (min(corners), max(corners))


def on_multiplier(*ranges: Optional[IntRange]) -> bool:
    """True when every range is known and small enough to pass the multiplier unrounded."""
    return all(r is not None and magnitude(r) <= MULTIPLIER_EXACT_INT for r in ranges)


def multiply(ranges, shapes, attrs) -> Optional[IntRange]:
    a, b = ranges
    return _product(a, b) if on_multiplier(a, b) else None


def maximum(ranges, shapes, attrs) -> Optional[IntRange]:
    a, b = ranges
    return None if a is None or b is None else (max(a[0], b[0]), max(a[1], b[1]))


def minimum(ranges, shapes, attrs) -> Optional[IntRange]:
    a, b = ranges
    return None if a is None or b is None else (min(a[0], b[0]), min(a[1], b[1]))


def absolute(ranges, shapes, attrs) -> Optional[IntRange]:
    r = ranges[0]
    if r is None:
        return None
    low = 0.0 if r[0] <= 0 <= r[1] else min(abs(r[0]), abs(r[1]))
    return (low, magnitude(r))


def square(ranges, shapes, attrs) -> Optional[IntRange]:
    r = absolute(ranges, shapes, attrs)
    return (r[0] ** 2, r[1] ** 2) if on_multiplier(r) else None


def pow_exponent(ranges, shapes, attrs) -> Optional[IntRange]:
    """``x ** exponent`` with a constant exponent: an integer for a non-negative integer exponent."""
    r, e = ranges[0], attrs["exponent"]
    if not on_multiplier(r) or not _integral(e) or e < 0:
        return None
    e = int(e)
    if e == 0:
        return (1.0, 1.0)
    m = magnitude(r) ** e
    return (-m if r[0] < 0 and e % 2 else 0.0 if r[0] < 0 else r[0] ** e, m)


def heaviside(ranges, shapes, attrs) -> Optional[IntRange]:
    """heaviside(x, v) is 0, 1 or v: an integer when v is, whatever x holds."""
    return hull(ZERO_ONE, ranges[1])


def where(ranges, shapes, attrs) -> Optional[IntRange]:
    """where(c, x, y) holds values of x and y; the condition only selects (only x, or only y, where the condition
    is decided: see :func:`comparison`)."""
    if ranges[0] == (1.0, 1.0):
        return ranges[1]
    if ranges[0] == (0.0, 0.0):
        return ranges[2]
    return hull(ranges[1], ranges[2])


def clip(ranges, shapes, attrs) -> Optional[IntRange]:
    r, lo, hi = ranges[0], attrs["min"], attrs["max"]
    if r is None or not all(_integral(v) or math.isinf(v) for v in (lo, hi)):
        return None
    return (min(max(r[0], lo), hi), max(min(r[1], hi), lo))


def relu(ranges, shapes, attrs) -> Optional[IntRange]:
    """relu with a threshold keeps some values and zeroes the rest."""
    return hull(ranges[0], (0.0, 0.0))


def _reduced_size(shapes, attrs) -> int:
    shape = shapes[0]
    dim = attrs.get("dim")
    return math.prod(shape) if dim is None else shape[dim % len(shape)]


def reduce_sum(ranges, shapes, attrs) -> Optional[IntRange]:
    # lowered as a matmul with ones: the operand passes the multiplier
    r = ranges[0]
    n = _reduced_size(shapes, attrs)
    return (min(r[0] * n, r[0]), max(r[1] * n, r[1])) if on_multiplier(r) else None


def cumsum(ranges, shapes, attrs) -> Optional[IntRange]:
    r = ranges[0]  # a matmul with a 0/1 triangle
    n = shapes[0][attrs["axis"] % len(shapes[0])]
    return (min(r[0] * n, 0.0), max(r[1] * n, 0.0)) if on_multiplier(r) else None


@_ignores_operands
def index_of(ranges, shapes, attrs) -> Optional[IntRange]:
    """An index along the reduced dim (argmax): in [0, size - 1] whatever the operand holds. Without
    ``keep_dim`` the index is moved into its shape, possibly by a picker: then it must pass the multiplier."""
    r = (0.0, float(_reduced_size(shapes, attrs) - 1))
    return r if attrs.get("keep_dim", True) or on_multiplier(r) else None


def matmul(ranges, shapes, attrs) -> Optional[IntRange]:
    a, b = ranges[0], ranges[1]
    if not on_multiplier(a, b) or (len(ranges) > 2 and ranges[2] is None):
        return None
    k = shapes[0][-1]
    m = k * magnitude(a) * magnitude(b) + (magnitude(ranges[2]) if len(ranges) > 2 else 0.0)
    return (-m, m)


def constant(ranges, shapes, attrs) -> Optional[IntRange]:
    return of_value(attrs["constant"])


# --- the analysis --------------------------------------------------------------------------------------


def leaf_range(graph, node) -> Optional[IntRange]:
    """The range of an input, parameter or constant node. Integer graph inputs are refused at push time
    beyond Float32's exact range (:data:`FLOAT32_EXACT_INT`), or beyond their ``value_range`` tag; booleans
    hold 0/1; a constant holds its values. Float inputs and parameters (which the user may update) are not
    known to be integers."""
    from pybuda.ir.graph import CONSTANT, INPUT

    if node.dtype == torch.bool and not (node.kind == CONSTANT and node.name in graph.tensors):
        return ZERO_ONE
    if node.kind == CONSTANT and node.name in graph.tensors:  # a boolean one too: all False is (0, 0)
        t = graph.tensors[node.name]
        if not t.numel():
            return None
        f = t.to(torch.float64)
        if not bool(torch.isfinite(f).all()) or not bool((f == f.round()).all()):
            return None
        return (float(f.min()), float(f.max()))
    if node.kind == INPUT and is_integer_dtype(node.dtype):
        tagged = _host_bound(node.tags)
        return tagged if tagged is not None else (-float(FLOAT32_EXACT_INT), float(FLOAT32_EXACT_INT))
    return None


def integer_range(graph, name: str, memo: Optional[Dict[str, Optional[IntRange]]] = None) -> Optional[IntRange]:
    """The closed interval the values of node ``name`` lie in when they are all integers, else None.

    Decided from the producers by each op's ``int_range`` rule (ops without one are not integer-valued;
    a boolean result is 0/1). ``memo`` caches the answers of one graph across calls."""
    from pybuda.ops import registry

    memo = {} if memo is None else memo
    if name in memo:
        return memo[name]
    # Iterative post-order: graphs can be deep (a few thousand ops in a chain).
    stack = [name]
    while stack:
        current = stack[-1]
        if current in memo:
            stack.pop()
            continue
        node = graph[current]
        if node.kind != "op":
            memo[current] = leaf_range(graph, node)
            stack.pop()
            continue
        rule = _rule(node.op_type, registry)
        if rule is None or getattr(rule, "ignores_operands", False) or \
                (node.dtype == torch.bool and not getattr(rule, "decides_booleans", False)):
            stack.pop()
            memo[current] = _op_range(graph, node, [None] * len(node.operands), rule)
            continue
        pending = [o for o in node.operands if o not in memo]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        memo[current] = _host_checked(node, _op_range(graph, node, [memo[o] for o in node.operands], rule))
    return memo[name]


def _host_checked(node, found: Optional[IntRange]) -> Optional[IntRange]:
    """``found`` narrowed by the node's ``value_range`` tag: a part of a pushed input that the host checks at
    each push (``QueueIO.value_regions``; the frontend tags the slice that reads it)."""
    return intersection(found, _host_bound(node.tags))


def _host_bound(tags: Dict) -> Optional[IntRange]:
    """The interval holding every value the host lets into a pushed input (or part) with these ``tags``: its
    ``value_range`` widened to the single values of ``value_also``; None when it has no bound."""
    bound = tags.get("value_range")
    if bound is None:
        return None
    also = tags.get("value_also") or ()
    return (float(min((bound[0], *also))), float(max((bound[1], *also))))


def intersection(a: Optional[IntRange], b: Optional[IntRange]) -> Optional[IntRange]:
    """The values both ranges allow; either one alone when the other is None (no bound)."""
    if a is None or b is None:
        return b if a is None else a
    return (max(a[0], b[0]), min(a[1], b[1]))


def narrow_value_range(tags: Dict, low: float, high: float, also: Sequence[float] = ()) -> None:
    """Bound a pushed input (its node ``tags``) to ``[low, high]``, plus the single values ``also`` (a label's
    ``ignore_index``), within the bound it has: every reader's must hold (the host refuses a push outside
    ``tags["value_range"]`` that is not one of ``tags["value_also"]``)."""
    old_range, old_also = tags.get("value_range"), tags.get("value_also")

    def allowed(v: float, rng: Optional[IntRange], extra: Optional[Sequence[float]]) -> bool:
        return rng is None or rng[0] <= v <= rng[1] or v in (extra or ())

    kept = intersection(old_range, (low, high))
    extra = sorted({v for v in (*(old_also or ()), *also) if allowed(v, old_range, old_also)
                    and allowed(v, (low, high), also) and not kept[0] <= v <= kept[1]})
    tags["value_range"] = kept
    if extra:
        tags["value_also"] = tuple(extra)
    else:
        tags.pop("value_also", None)


def _rule(op_type: str, registry) -> Optional[IntRangeFn]:
    return registry.get(op_type).int_range if registry.has(op_type) else None


def _op_range(graph, node, ranges: Sequence[Optional[IntRange]], rule) -> Optional[IntRange]:
    if node.dtype == torch.bool and not getattr(rule, "decides_booleans", False):
        return ZERO_ONE  # a boolean result is a 0/1 mask whatever computed it
    if rule is None:
        return None
    return rule(list(ranges), [tuple(graph[o].shape) for o in node.operands], node.attrs)


def is_integer_valued(graph, name: str, memo: Optional[Dict[str, Optional[IntRange]]] = None) -> bool:
    """True when every value of node ``name`` is an integer (see :func:`integer_range`)."""
    return integer_range(graph, name, memo) is not None
