"""The SFPU's approximate exp and reciprocal (``approximate_mode: true``, TT-Buda's ``PYBUDA_EXP_APPROX``).

The golden computes what the SFPU program computes, step by step on float32 values and their bit patterns
(facts from the Wormhole LLK kernels; Grayskull's SFPU runs the same program on 19-bit registers, which
this does not model):

- **exp** (Schraudolph's method): ``y = x · 1.442695 + 192`` puts ``x / ln 2`` in the mantissa of a number
  in [128, 256) (2^-16 resolution); adding the integer pattern ``0xBD3F0000`` turns that into
  ``(127 + x / ln 2) · 2^16`` and a left shift by 7 moves its integer part into the exponent field: the
  result is ``2^floor(x/ln2) · (1 + frac(x/ln2))``, between 0 and 6.1 % above e^x. Inputs ≥ 89 give inf,
  inputs < −42 give 0. (Between 44.4 and 89 the chip's result is garbage; so is this one, identically.)
- **reciprocal**: Newton–Raphson on the mantissa ``m`` of |x| scaled into [0.5, 1), from the guess
  ``1.442695 · (2 − 1.442695 · m)``, with 2 refinements in approximate mode (3 otherwise); the exponent is
  then set from x's; a result whose exponent would be negative is 0.

Both cost fewer SFPU cycles (the ``approx_tile`` coefficients of :mod:`pybuda.netlist.device_ops`).
"""

from __future__ import annotations

import torch

_LN2_RECIP = torch.tensor(1.442695, dtype=torch.float32)
_EXP_BIAS_SHIFT = 192.0  # 1.5 * 2^7: keeps x / ln 2 + this in [128, 256) for |x| < 44.4
_ADJ_EXP = 0xBD3F0000 - (1 << 32)  # p_exp::ADJ_EXP as a float16_b pattern, read as a signed int32
_EXP_INF_FROM = 89.0
_EXP_ZERO_BELOW = -42.0


def _as_int32_bits(wide: torch.Tensor) -> torch.Tensor:
    """int64 values → float32 tensor with the low 32 bits of each as its pattern (wrapping like the SFPU)."""
    low = wide & 0xFFFFFFFF
    return torch.where(low >= (1 << 31), low - (1 << 32), low).to(torch.int32).view(torch.float32)


def approximate_exp(x: torch.Tensor) -> torch.Tensor:
    """The SFPU's approximate e^x of float32 ``x`` (see the module docstring)."""
    x = x.to(torch.float32)
    # One multiply-add, rounded once to float32 (the float64 product of two float32 values is exact).
    y = (x.to(torch.float64) * _LN2_RECIP.item() + _EXP_BIAS_SHIFT).to(torch.float32)
    out = _as_int32_bits((y.view(torch.int32).to(torch.int64) + _ADJ_EXP) << 7)
    out = torch.where(x < _EXP_ZERO_BELOW, torch.zeros_like(out), out)
    return torch.where(x >= _EXP_INF_FROM, torch.full_like(out, float("inf")), out)


def newton_reciprocal(x: torch.Tensor, iterations: int) -> torch.Tensor:
    """The SFPU's 1/x of float32 ``x`` with ``iterations`` Newton steps counting the initial guess (2 in
    approximate mode), every step in float32 (see the module docstring)."""
    x = x.to(torch.float32)
    bits = x.view(torch.int32).to(torch.int64)
    # -m with m = |x|'s mantissa in [0.5, 1): sign set, exponent field 126
    neg_m = _as_int32_bits((bits & 0x007FFFFF) | (126 << 23) | (1 << 31))
    two = torch.tensor(2.0, dtype=torch.float32)
    r = _LN2_RECIP * (neg_m * _LN2_RECIP + two)
    for _ in range(iterations - 1):
        r = r * (neg_m * r + two)
    r_bits = r.view(torch.int32).to(torch.int64)
    x_exp = ((bits >> 23) & 0xFF) - 127
    new_exp = ((r_bits >> 23) & 0xFF) - 127 - x_exp + 126
    scaled = _as_int32_bits((r_bits & ~(0xFF << 23)) | ((new_exp & 0xFF) << 23))
    out = torch.where(new_exp < 0, torch.zeros_like(scaled), scaled)
    return torch.where(x < 0, -out, out)


def approximate_reciprocal(x: torch.Tensor) -> torch.Tensor:
    """The SFPU's approximate 1/x: two Newton steps (see :func:`newton_reciprocal`)."""
    return newton_reciprocal(x, 2)
