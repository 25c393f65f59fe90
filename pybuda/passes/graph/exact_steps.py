"""The exact 0/1 steps decomposition rules build comparisons, selections and lookups from.

On the chip a comparison is arithmetic: ``heaviside`` of a difference (the step picks 0, 1 or a given value at 0),
with ``0 - x`` instead of ``x * -1`` (the multiplier would flush subnormals) and IEEE terms for NaN and infinity
added only where an operand may hold them (:func:`pybuda.passes.graph.nonfinite.may_be_nonfinite`). The differences
a comparison steps on are tagged ``SIGN_EXACT`` so that the data-format pass keeps them in a format that flushes
nothing to zero. :mod:`pybuda.passes.graph.decompose` (comparisons, argmax, where) and
:mod:`pybuda.passes.graph.lookups` (one-hot lookups) use these.
"""

from __future__ import annotations

from typing import Optional

import torch

from pybuda.ir.graph import CONSTANT, SIGN_EXACT, Node
from pybuda.passes.graph.nonfinite import may_be_nonfinite
from pybuda.passes.graph.rewrite import Rewriter

#: The differences a comparison steps on keep their sign and whether they are zero (``SIGN_EXACT``).
SIGN = {SIGN_EXACT: True}


def scalar(rw: Rewriter, node: Node, tag: str, value: float) -> str:
    return rw.constant(f"{node.name}.{tag}", torch.tensor([float(value)], dtype=torch.float32))


def scalar_constant_value(rw: Rewriter, name: str) -> Optional[float]:
    n = rw.node(name)
    if n.kind == CONSTANT:
        v = rw.new.tensors[name]
        if v.numel() == 1:
            return float(v.reshape(-1)[0])
    return None


def heaviside(rw, node, x: str, at_zero: float, tag: str) -> str:
    return rw.op(f"{node.name}.{tag}", "heaviside", [x, scalar(rw, node, f"{tag}_at0", at_zero)])


def negated(rw, node, x: str, tag: str) -> str:
    """``0 - x``: exact for every value, subnormals included (``x * -1`` passes the multiplier, whose source
    registers flush them to zero)."""
    return rw.op(f"{node.name}.{tag}_neg", "subtract", [scalar(rw, node, f"{tag}_zero", 0.0), x], tags=SIGN)


def neither_nan(rw, node, a: str, b: str, tag: str) -> str:
    """1.0 where neither ``a`` nor ``b`` is NaN, else 0.0: ``|a| + |b|`` is NaN exactly then, and >= 0 (+inf at
    most) otherwise."""
    both = rw.op(f"{node.name}.{tag}_mags", "add", [rw.op(f"{node.name}.{tag}_abs_a", "abs", [a], tags=SIGN),
                                                   rw.op(f"{node.name}.{tag}_abs_b", "abs", [b], tags=SIGN)],
                 tags=SIGN)
    return heaviside(rw, node, both, 1.0, f"{tag}_numbers")


def equal_of(rw, node, a: str, b: str, tag: str = "eq", negate: bool = False, nan_hits: bool = False) -> str:
    """1.0 where a == b (0.0 where negate), else the other, as IEEE compares: NaN equals nothing, +-inf equals
    itself. Terms for NaN and infinity are added only where an operand may hold them (:func:`may_be_nonfinite`).

    ``d = a - b`` is 0 exactly where finite operands are equal (a subtraction of different floats is never 0)
    and NaN where an operand is NaN or both are the same infinity, so ``heaviside(-|d|, 1)`` is right unless
    both operands may be infinite; then ``neither_nan(a, b)`` where ``d`` is not a nonzero number separates the
    equal infinities (1) from a NaN (0). ``nan_hits``: NaN counts as equal (argmax's hit, where torch picks a NaN)."""
    diff = rw.op(f"{node.name}.{tag}_diff", "subtract", [a, b], tags=SIGN)
    mag = rw.op(f"{node.name}.{tag}_abs", "abs", [diff], tags=SIGN)
    fa, fb = may_be_nonfinite(rw.new, a), may_be_nonfinite(rw.new, b)
    if not (fa or fb) and not nan_hits:  # neither holds NaN: != is the step of |d|
        if negate:
            return heaviside(rw, node, mag, 0.0, tag)
        return heaviside(rw, node, negated(rw, node, mag, tag), 1.0, tag)
    if fa and fb:
        numbers = neither_nan(rw, node, a, b, tag)
        apart = heaviside(rw, node, mag, 0.0, f"{tag}_apart")  # 1 where d is a nonzero number
        if negate and not nan_hits:  # apart - numbers: -1 where equal, 0 where a NaN, 1 where apart
            ne = rw.op(f"{node.name}.{tag}_ne", "subtract", [apart, numbers])
            return heaviside(rw, node, ne, 1.0, f"{tag}_ne")
        # numbers where not apart, else 0 (heaviside's pick keeps the result a 0/1 mask for a bool cast)
        eq = rw.op(f"{node.name}.{tag}_eq", "heaviside", [negated(rw, node, apart, f"{tag}_apart"), numbers])
    else:
        eq = heaviside(rw, node, negated(rw, node, mag, tag), 1.0, tag)
    if nan_hits:  # + isnan(a) = 1 - heaviside(|a|, 1); where a is NaN, eq is 0
        num = heaviside(rw, node, rw.op(f"{node.name}.{tag}_abs_x", "abs", [a], tags=SIGN), 1.0, f"{tag}_num_x")
        nan = rw.op(f"{node.name}.{tag}_nan", "subtract", [scalar(rw, node, f"{tag}_one", 1.0), num])
        eq = rw.op(f"{node.name}.{tag}_or_nan", "add", [eq, nan])
    if negate:
        return rw.op(f"{node.name}.{tag}_ne", "subtract", [scalar(rw, node, f"{tag}_one_ne", 1.0), eq])
    return eq
