"""Every data format of the simulated chip, bit-exact, and the math-fidelity model of its multipliers.

Facts come from the netlist/backend spec (``reference/netlist_backend_spec.md`` §2.1, §4); where the spec
leaves a detail open, the choice is written next to the code.

Values
    ``quantize(x, df)`` returns float32 holding exactly the values format ``df`` stores for ``x``, as the
    BBE host model encodes them (truncating Float16_b, fp16 "A" without inf/denormals, BFP with one
    shared exponent per face row and round-half-up). It equals ``unpack(pack(x))`` bit for bit.

Codes
    ``encode_datums``/``decode_datums``: the codes each format stores (BFP shared exponents and datum
    codes); :mod:`pybuda.golden.packing` lays them out in the chip's bytes.

Math fidelity
    ``fidelity_matmul`` / ``fidelity_multiply`` emulate the multiplier phases (5 bits of SrcA × 7 bits
    of SrcB per pass) with at most two float32 GEMMs per matmul.

All arithmetic is vectorised torch on float32/int32 (never torch.bfloat16, which is slow on CPU).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from pybuda.golden import blas, native
from pybuda.golden.tiles import (
    BLOCK_DATUMS,
    BLOCKS_PER_TILE,
    TILE_DATUMS,
)
from pybuda.errors import InputError
from pybuda.dtypes import DataFormat, MathFidelity

__all__ = [
    "FormatInfo",
    "format_info",
    "tile_size_bytes",
    "is_bfp",
    "exponent_family",
    "max_value",
    "exact_integer_bound",
    "quantize",
    "quantize_tf32",
    "TILE_HEADER_BYTES",
    "encode_datums",
    "decode_datums",
    "fidelity_phases",
    "srca_parts",
    "srcb_parts",
    "fidelity_matmul",
    "fidelity_multiply",
    "accumulate",
    "round_mantissa",
    "LOFI_SRCA_FRACTION_BITS",
]

TILE_HEADER_BYTES = 16  # a packed tile's header (dword 0: the tile's size in 16-byte units)
_ALIGN_BYTES = 32
_TAIL_PAD_BYTES = 16
_INT32_MIN = -(1 << 31)  # 0x80000000 as a signed int32: the float sign bit
# floor(v + _HALF_DOWN) == floor(v + 1/2) exactly for every float32 v >= 0, where v + 1/2 itself is not
# always exact (v = 1/2 - 2^-25 would round up to 1.0): below 1/2 the sum stays below 1 - 2^-25, at a tie
# k + 1/2 it rounds to k + 1 (for k = 0 by ties-to-even), and otherwise it is at least one ulp of v away
# from an integer.
_HALF_DOWN = torch.tensor(0.5 - 2.0 ** -25)


# --------------------------------------------------------------------------------------------------
# Format table
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class FormatInfo:
    """Static facts about one data format.

    ``datum_bits``: bits per stored datum (sign included). ``exp_bits``/``man_bits``/``bias``: the float
    fields (for BFP: the shared exponent and the per-datum magnitude bits). ``family``: ``'a'`` (5-bit
    exponent), ``'b'`` (8-bit exponent) or ``''``. ``tile_bytes``: a packed 32×32 tile with header and
    padding.
    """

    df: DataFormat
    datum_bits: int
    exp_bits: int
    man_bits: int
    bias: int
    family: str
    is_bfp: bool
    is_integer: bool
    row_major: bool  # Raw* formats are one row-major "megarow", without faces

    @property
    def tile_bytes(self) -> int:
        return tile_size_bytes(self.df)


def _fi(df, bits, eb, mb, bias, fam, bfp=False, integer=False, raw=False) -> FormatInfo:
    return FormatInfo(df, bits, eb, mb, bias, fam, bfp, integer, raw)


_DF = DataFormat
_INFO: Dict[DataFormat, FormatInfo] = {i.df: i for i in [
    _fi(_DF.Float32, 32, 8, 23, 127, "b"),
    _fi(_DF.Float16, 16, 5, 10, 15, "a"),
    _fi(_DF.Float16_b, 16, 8, 7, 127, "b"),
    _fi(_DF.Lf8, 8, 5, 2, 15, "a"),
    # Fp8_e4m3 is only named in the spec ("1/4/3, bias 7, saturating, truncating"); we apply the same
    # rules as fp16a/Lf8: exponent field 0 is zero (no denormals), field 15 is finite, max 480.
    _fi(_DF.Fp8_e4m3, 8, 4, 3, 7, ""),
    _fi(_DF.Bfp8, 8, 5, 7, 15, "a", bfp=True),
    _fi(_DF.Bfp4, 4, 5, 3, 15, "a", bfp=True),
    _fi(_DF.Bfp2, 2, 5, 1, 15, "a", bfp=True),
    _fi(_DF.Bfp8_b, 8, 8, 7, 127, "b", bfp=True),
    _fi(_DF.Bfp4_b, 4, 8, 3, 127, "b", bfp=True),
    _fi(_DF.Bfp2_b, 2, 8, 1, 127, "b", bfp=True),
    _fi(_DF.Int8, 8, 0, 7, 0, "", integer=True),
    _fi(_DF.UInt8, 8, 0, 8, 0, "", integer=True),
    _fi(_DF.UInt16, 16, 0, 16, 0, "", integer=True),
    _fi(_DF.Int32, 32, 0, 31, 0, "", integer=True),
    _fi(_DF.RawUInt8, 8, 0, 8, 0, "", integer=True, raw=True),
    _fi(_DF.RawUInt16, 16, 0, 16, 0, "", integer=True, raw=True),
    _fi(_DF.RawUInt32, 32, 0, 32, 0, "", integer=True, raw=True),
]}


def format_info(df: DataFormat) -> FormatInfo:
    """The ``FormatInfo`` of ``df`` (raises ``InputError`` for Invalid or unknown formats)."""
    df = DataFormat.from_json(df)
    try:
        return _INFO[df]
    except KeyError:
        raise InputError(f"data format {df.name} has no storage layout") from None


def tile_size_bytes(df: DataFormat) -> int:
    """Bytes of one packed 32×32 tile: header + BFP exponents + data, rounded up to 32 bytes.

    Float32/Int32 4128, Float16/Float16_b/UInt16 2080, Bfp8 1120, Bfp4 608, Bfp2 352, 8-bit formats 1056.
    """
    info = format_info(df)
    size = TILE_HEADER_BYTES + (BLOCKS_PER_TILE if info.is_bfp else 0) + TILE_DATUMS * info.datum_bits // 8
    # The host model always appends 16 zero bytes (pack_data); for 32x32 tiles that lands exactly on
    # the 32-byte alignment that get_tile_size_in_bytes rounds up to.
    size += _TAIL_PAD_BYTES
    return -(-size // _ALIGN_BYTES) * _ALIGN_BYTES


def is_bfp(df: DataFormat) -> bool:
    """True for the block-floating-point formats (Bfp8/4/2 and their ``_b`` variants)."""
    return format_info(df).is_bfp


def exponent_family(df: DataFormat) -> str:
    """``'a'`` for 5-bit-exponent formats (Float16, Bfp*, Lf8), ``'b'`` for 8-bit (Float32, Float16_b,
    Bfp*_b), ``''`` for integer formats and Fp8_e4m3."""
    return format_info(df).family


def max_value(df: DataFormat) -> float:
    """Largest finite magnitude format ``df`` can hold (BFP: with the largest shared exponent)."""
    info = format_info(df)
    if info.is_integer:
        return float(_INT_RANGE[info.df][1])
    if info.is_bfp:
        emax = 31 if info.family == "a" else 254
        return float((2 ** info.man_bits - 1) * 2.0 ** (emax - info.bias - (info.man_bits - 1)))
    if info.df == DataFormat.Float32:
        return float(torch.finfo(torch.float32).max)
    if info.df == DataFormat.Float16_b:
        return float(torch.finfo(torch.bfloat16).max)
    return _SMALL[info.df].max_value


# --------------------------------------------------------------------------------------------------
# Bit helpers
# --------------------------------------------------------------------------------------------------

def exact_integer_bound(df: DataFormat) -> int:
    """Largest ``n`` such that every integer in ``[-n, n]`` is stored exactly in ``df`` (what integer-valued
    data on the device may reach in that format): a float format with ``m`` stored mantissa bits holds
    every integer up to ``2**(m + 1)`` (Float32 2**24, Float16 2048, Float16_b 256); a block format with
    ``m``-bit magnitudes relative to its block's shared exponent holds ``2**m - 1`` (Bfp8 127, Bfp4 7), and
    an integer format its own range (Int8 127)."""
    info = format_info(df)
    if info.is_integer:
        return 2 ** info.man_bits - 1
    if info.is_bfp:
        return 2 ** info.man_bits - 1
    return 2 ** (info.man_bits + 1)


def _i32(v: int) -> int:
    """A uint32 bit pattern as the equal-bits signed int32 Python value (for torch int32 masks)."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _dense_f32(x) -> bool:
    """A float32 tensor that is contiguous, or the transpose of its last two dims is."""
    return isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.dim() >= 2 and (
        x.is_contiguous() or x.transpose(-1, -2).is_contiguous())


def _as_f32(x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(x)
    x = x.detach()
    if x.dtype != torch.float32:
        x = x.to(torch.float32)
    return x.contiguous()


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32)


def _mask(x: torch.Tensor, mask: int) -> torch.Tensor:
    return (x.view(torch.int32) & _i32(mask)).view(torch.float32)


def _from_bits(b: torch.Tensor) -> torch.Tensor:
    """float32 tensor with the given bit patterns (int32 or int64 holding uint32 values)."""
    if b.dtype != torch.int32:
        b = (b & 0xFFFFFFFF).to(torch.int64)
        b = torch.where(b >= (1 << 31), b - (1 << 32), b).to(torch.int32)
    return b.contiguous().view(torch.float32)


def quantize_tf32(x: torch.Tensor) -> torch.Tensor:
    """TF32 (1/8/10) as the host model makes it: the low 13 mantissa bits cleared (truncation).

    The unpacker's FP32 → SrcA/SrcB path; the golden treats WH Float32 inputs as TF32 when quantising.
    """
    return _mask(_as_f32(x), 0xFFFFE000)


# --------------------------------------------------------------------------------------------------
# Small floats: Float16 (fp16a), Lf8, Fp8_e4m3
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _SmallFloat:
    exp_bits: int
    man_bits: int
    bias: int

    @property
    def emax(self) -> int:  # unbiased exponent of the top field, which is a finite number
        return (1 << self.exp_bits) - 1 - self.bias

    @property
    def max_bits(self) -> int:  # fp32 pattern of the saturation value (top field, mantissa all ones)
        return ((self.emax + 127) << 23) | (((1 << self.man_bits) - 1) << (23 - self.man_bits))

    @property
    def min_bits(self) -> int:  # fp32 pattern of the smallest normal (field 1); below flushes to 0
        return (1 - self.bias + 127) << 23

    @property
    def keep_mask(self) -> int:
        return _i32(0xFFFFFFFF << (23 - self.man_bits))

    @property
    def max_value(self) -> float:
        return float(torch.tensor(self.max_bits, dtype=torch.int32).view(torch.float32).item())


_SMALL = {
    DataFormat.Float16: _SmallFloat(5, 10, 15),
    DataFormat.Lf8: _SmallFloat(5, 2, 15),
    DataFormat.Fp8_e4m3: _SmallFloat(4, 3, 7),
}


def _quantize_small_float(x: torch.Tensor, sf: _SmallFloat) -> torch.Tensor:
    # Host model (conv_u32_to_u16 / conv_u32_to_lf8): truncate the mantissa, unbiased exponent <= -bias
    # flushes to a signed zero, above emax saturates to the top field with an all-ones mantissa.
    # Working on the magnitude's bit pattern as an integer makes inf and NaN saturate too (their
    # patterns are above max_bits), as in the host model.
    bits = _bits(x)
    m = bits & 0x7FFFFFFF
    m.clamp_(max=sf.max_bits)
    m &= sf.keep_mask
    m.masked_fill_(m < sf.min_bits, 0)
    m |= bits & _INT32_MIN
    return m.view(torch.float32)


def _encode_small_float(x: torch.Tensor, sf: _SmallFloat) -> torch.Tensor:
    q = _bits(_quantize_small_float(x, sf)).to(torch.int64) & 0xFFFFFFFF
    sign = q >> 31
    e32 = (q >> 23) & 0xFF
    field = torch.where(e32 == 0, torch.zeros_like(e32), e32 - 127 + sf.bias)
    man = (q >> (23 - sf.man_bits)) & ((1 << sf.man_bits) - 1)
    return (sign << (sf.exp_bits + sf.man_bits)) | (field << sf.man_bits) | man


def _decode_small_float(code: torch.Tensor, sf: _SmallFloat) -> torch.Tensor:
    # Field 0 decodes to a signed zero; every other field (the top one included) is a normal number.
    sign = (code >> (sf.exp_bits + sf.man_bits)) & 1
    field = (code >> sf.man_bits) & ((1 << sf.exp_bits) - 1)
    man = code & ((1 << sf.man_bits) - 1)
    e32 = torch.where(field == 0, torch.zeros_like(field), field - sf.bias + 127)
    man = torch.where(field == 0, torch.zeros_like(man), man)
    return _from_bits((sign << 31) | (e32 << 23) | (man << (23 - sf.man_bits)))


# --------------------------------------------------------------------------------------------------
# Integer formats
# --------------------------------------------------------------------------------------------------

# Ranges of the values each integer format can hold, as float32 numbers. Int32 is sign + 31-bit
# magnitude; its largest float32-representable magnitude is 2**31 - 128. RawUInt32 likewise.
_INT_RANGE = {
    DataFormat.Int8: (-127, 127),
    DataFormat.UInt8: (0, 255),
    DataFormat.UInt16: (0, 65535),
    DataFormat.Int32: (-(2 ** 31 - 128), 2 ** 31 - 128),
    DataFormat.RawUInt8: (0, 255),
    DataFormat.RawUInt16: (0, 65535),
    DataFormat.RawUInt32: (0, 2 ** 32 - 256),
}


def _round_half_away(x: torch.Tensor) -> torch.Tensor:
    # std::round semantics (the host's float_to_int8): ties away from zero. floor(|x| + c) with
    # c = 1/2 − 2^-25 is exact where |x| + 1/2 is not (see _HALF_DOWN); zero keeps x's sign.
    r = x.abs().add_(_HALF_DOWN).floor_()
    return r.copysign_(x)


def _quantize_int(x: torch.Tensor, df: DataFormat) -> torch.Tensor:
    # Host: Int8 rounds (ties away) and clamps to [-127, 127]. We apply the same rule to every integer
    # format (the host's Int32 path truncates positives, which looks accidental). NaN becomes 0; the
    # final + 0.0 turns -0.0 into +0.0, since sign-magnitude zero is stored with the sign cleared.
    lo, hi = _INT_RANGE[df]
    r = _round_half_away(torch.nan_to_num(x, nan=0.0))
    return r.clamp_(lo, hi).add_(0.0)


def _encode_int(x: torch.Tensor, df: DataFormat) -> torch.Tensor:
    v = _quantize_int(x, df).to(torch.int64)
    if df in (DataFormat.Int8, DataFormat.Int32):
        nbits = 8 if df == DataFormat.Int8 else 32
        return torch.where(v < 0, (-v) | (1 << (nbits - 1)), v)
    return v


def _decode_int(code: torch.Tensor, df: DataFormat) -> torch.Tensor:
    if df in (DataFormat.Int8, DataFormat.Int32):
        nbits = 8 if df == DataFormat.Int8 else 32
        mag = code & ((1 << (nbits - 1)) - 1)
        v = torch.where(((code >> (nbits - 1)) & 1) == 1, -mag, mag)
    else:
        v = code
    return v.to(torch.float32)


# --------------------------------------------------------------------------------------------------
# Block floating point
# --------------------------------------------------------------------------------------------------

def _bfp_encode_blocks(blocks: torch.Tensor, info: FormatInfo,
                       truncate: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """Exact host-model encoding of ``[nb, 16]`` float32 blocks → (shared exponents ``[nb]``, codes
    ``[nb, 16]``), both int32. Spec §4.3 (get_common_exp / conv_u32_to_bfp)."""
    n = info.man_bits
    bits = blocks.contiguous().view(torch.int32)
    e = (bits >> 23) & 0xFF
    mant = bits & 0x7FFFFF
    if info.family == "a":
        # Rebias to 5 bits and saturate: above 31 → exponent 31 with an all-ones mantissa; below 0 →
        # exponent 0 with a zero mantissa, i.e. the datum counts as 2**-15 (the hidden 1 is still
        # added). Zeros take part in the block maximum as exponent 0, as in the host model.
        e = e - 112
        mant.masked_fill_(e < 0, 0)
        mant.masked_fill_(e > 31, 0x7FFFFF)
        e.clamp_(0, 31)
    shared = e.amax(dim=-1)
    # Shifts of 25 or more leave nothing of a 24-bit mantissa; clamping keeps them defined.
    m = (mant | (1 << 23)) >> (shared.unsqueeze(-1) - e).clamp_(max=31)
    drop = 24 - n
    if truncate:
        m >>= drop
    else:
        m = ((m + (1 << (drop - 1))) >> drop).clamp_(max=(1 << n) - 1)
    m.masked_fill_((bits & 0x7FFFFFFF) == 0, 0)  # ±0 encodes as 0
    sign = ((bits < 0) & (m != 0)).to(torch.int32)  # a zero magnitude clears the sign
    return shared, (sign << n) | m


def _bfp_decode_blocks(shared: torch.Tensor, codes: torch.Tensor, info: FormatInfo) -> torch.Tensor:
    """value = (-1)^s · m · 2^(E − bias − (n − 1)) (spec §4.4); float32 ``[nb, 16]``.

    m · 2^k is exact in float32 for every shared exponent (down to 2^-133, a denormal with room for 7
    bits); E = 255 in B formats overflows to inf, as the host's bit assembly would.
    """
    n = info.man_bits
    m = (codes & ((1 << n) - 1)).to(torch.float32)
    scale = torch.pow(2.0, (shared - info.bias - (n - 1)).to(torch.float64)).to(torch.float32)
    v = m * scale.unsqueeze(-1)
    return torch.where(((codes >> n) & 1) == 1, -v, v)


def _bfp_exact(blocks: torch.Tensor, info: FormatInfo, truncate: bool) -> torch.Tensor:
    shared, codes = _bfp_encode_blocks(blocks, info, truncate)
    return _bfp_decode_blocks(shared, codes, info)


# Blocks per chunk of the fast path (1M datums): large enough that the per-op overhead of torch
# (dispatch, waking the OpenMP threads) is small, small enough that a chunk's temporaries stay in L3.
_CHUNK_BLOCKS = 1 << 16


def _i32_const(v: int) -> torch.Tensor:
    # 0-dim int32 operands: an int32 op with one is about twice as fast as with a Python int (no
    # wrapped-number conversion).
    return torch.tensor(_i32(v), dtype=torch.int32)


_EXP_FIELD = _i32_const(0x7F800000)
_INV_FROM_LSB = _i32_const(254 << 23)  # bits(2^-k) = (254 << 23) - bits(2^k)
_NONZERO_TO_MIN = _i32_const(0x7FFFFFFF)  # m + this (wrapping): 0 -> INT32_MAX, m >= 1 -> m - 1 - 2^31
_F_ZERO = torch.tensor(0.0)
_MAGNITUDE = _i32_const(0x7FFFFFFF)  # bits & this = bits of |x|
_STICKY = _i32_const(1)
_MAGIC_FROM_LSB = _i32_const((23 << 23) + (1 << 22))  # bits(1.5 * 2^23 * lsb) - bits(lsb), lsb a power of 2
_LSB_SHIFT = {n: _i32_const((n - 1) << 23) for n in (1, 3, 7)}  # BFP magnitude bits -> exponent offset


def _bfp_fast_chunk(xc: torch.Tensor, oc: torch.Tensor, info: FormatInfo, truncate: bool) -> None:
    """Quantise ``[b, 16]`` blocks ``xc`` into ``oc`` by value arithmetic, then redo exactly (integer
    host model) the few blocks where the value arithmetic is not exact.

    For a block with shared exponent E, the host result is ±q · lsb with lsb = 2^(E − bias − (n − 1))
    and q = min(floor(|x|/lsb + 1/2), 2^n − 1) (shifting, adding half an lsb and shifting again equals
    one rounding of the exact quotient): |x| rounded to a multiple of lsb, ties away from zero, clamped.

    Round to nearest (:func:`_bfp_round_nearest`): with K = 1.5 · 2^23 · lsb, whose float32 ulp is lsb,
    (y + K) − K rounds y to a multiple of lsb for |y| < 2^22 · lsb (one float rounding, then an exact
    subtraction), ties to even. The ties are moved away from zero first by setting the lowest bit of
    |x|'s pattern (a "sticky" bit): every midpoint (k + 1/2) · lsb is an even multiple of |x|'s ulp (it
    is a multiple of 2^(23 − n) of them), so x | 1 is never a midpoint, lies on the same side of every
    midpoint as x unless x is one, and is above the midpoint when x is one. Clamping to ±(2^n − 1) · lsb
    (a multiple of lsb) before that gives the host's clamp and bounds |y|. A zero result is +0.0 (K − K), as the host
    stores a zero magnitude. Truncation (``truncate``) scales by 1/lsb and floors instead
    (:func:`_bfp_truncate_values`).

    Not exact, hence redone: B blocks with E < 8 (values < 2^-119, where the host's handling of fp32
    denormals and the lsb underflow matter) or E > 231 (values ≥ 2^105, where K would overflow, and
    inf/NaN); A blocks whose max is below 2^-7 (where the host's "tiny values count as 2^-15" rule can
    change a result) or NaN. All-zero blocks are fine.

    Speed: the per-block work is a handful of ops on int32 bit patterns with 0-dim int32 operands, the
    "is any block inexact" test is one or two scalar reductions; the elementwise work is one bit mask,
    a max per block, minimum, maximum, one bit set, add and subtract, all in ``oc`` (the former value
    path — abs, scale, add 1/2, floor, clamp, scale, copysign, +0.0 — took about a third longer).
    """
    n = info.man_bits
    ob = oc.view(torch.int32)
    torch.bitwise_and(xc.view(torch.int32), _MAGNITUDE, out=ob)
    bmax = ob.amax(dim=1)  # bit pattern of the block's largest magnitude
    # In both families the shared exponent is the top magnitude's biased fp32 exponent, clamped (B: to
    # the fast range [8, 231]; A: the 5-bit field, top - 112 in [0, 31]), and lsb_exp + 127 = that
    # biased exponent - (n - 1): A rebiases by 112 and has bias 15, B has bias 127.
    if info.family == "b":
        lo, hi = 8 << 23, 231 << 23
        ok_lo, ok_hi = 8 << 23, (232 << 23) - 1  # nonzero block maxima the value arithmetic gets right
    else:
        lo, hi = 112 << 23, 143 << 23
        ok_lo, ok_hi = 120 << 23, 0x7F800000
    lsb_bits = torch.bitwise_and(bmax, _EXP_FIELD).clamp_(lo, hi).sub_(_LSB_SHIFT[n])
    if truncate:
        _bfp_truncate_values(xc, oc, lsb_bits, n)
    else:
        _bfp_round_nearest(xc, oc, lsb_bits, n)
    # All blocks fine when no nonzero maximum is below ok_lo and none is above ok_hi. When the
    # smallest maximum is below ok_lo (zero blocks, say), the smallest nonzero one is read off
    # bmax + 0x7FFFFFFF (wrapping), which sends 0 to the top of the range and keeps the others' order.
    mn, mx = torch.aminmax(bmax)
    if int(mx) > ok_hi or (int(mn) < ok_lo
                           and int(torch.add(bmax, _NONZERO_TO_MIN).min()) < ok_lo - 1 + _INT32_MIN):
        ok = (bmax == 0) | ((bmax >= ok_lo) & (bmax <= ok_hi))
        idx = (~ok).nonzero().squeeze(1)
        oc[idx] = _bfp_exact(xc[idx], info, truncate)


def _bfp_round_nearest(xc: torch.Tensor, oc: torch.Tensor, lsb_bits: torch.Tensor, n: int) -> None:
    """``oc`` := x clamped to ±(2^n − 1) · lsb of its block, then rounded to a multiple of lsb, ties
    away from zero (see :func:`_bfp_fast_chunk`). The sticky bit is set after the clamp, so that inf
    (whose pattern | 1 is a NaN) saturates like any other large value."""
    lsb = lsb_bits.view(torch.float32).unsqueeze(1)
    top = torch.mul(lsb, float((1 << n) - 1))
    magic = torch.add(lsb_bits, _MAGIC_FROM_LSB).view(torch.float32).unsqueeze(1)  # 1.5 * 2^23 * lsb
    torch.minimum(xc, top, out=oc)
    torch.maximum(oc, top.neg_(), out=oc)
    oc.view(torch.int32).bitwise_or_(_STICKY)
    oc.add_(magic).sub_(magic)


def _bfp_truncate_values(xc: torch.Tensor, oc: torch.Tensor, lsb_bits: torch.Tensor, n: int) -> None:
    """``oc`` := x truncated to multiples of its block's lsb (in magnitude), clamped to (2^n − 1) · lsb:
    |x| · 2^-lsb_exp is exact (a power of two), floor, clamp, scale back, sign, and -0.0 -> +0.0."""
    inv = torch.sub(_INV_FROM_LSB, lsb_bits).view(torch.float32).unsqueeze(1)
    lsb = lsb_bits.view(torch.float32).unsqueeze(1)
    torch.abs(xc, out=oc)
    oc.mul_(inv)
    oc.floor_()
    oc.clamp_max_((1 << n) - 1)
    oc.mul_(lsb)
    oc.copysign_(xc)
    oc.add_(_F_ZERO)  # a zero magnitude is stored with its sign cleared


def _quantize_bfp(x: torch.Tensor, info: FormatInfo, truncate: bool, in_place: bool = False) -> torch.Tensor:
    # A BFP block is one face row: 16 consecutive columns of one row, starting at a multiple of 16
    # (tiles.py). Padding to tiles adds zero rows (irrelevant: blocks never span rows) and zero
    # columns (zeros never raise a block maximum), so the blocks of the tilized tensor are exactly the
    # 16-column row segments of x with its last dimension zero-padded to a multiple of 16.
    shape = x.shape
    cols = shape[-1] if x.dim() >= 1 else 1
    x2 = x.reshape(-1, cols)
    pad = (-cols) % BLOCK_DATUMS
    if pad:
        x2 = torch.nn.functional.pad(x2, (0, pad))
    blocks = x2.reshape(-1, BLOCK_DATUMS)
    if native.available():  # one pass in C, which may write over its input (the padded copy is ours)
        out = blocks if in_place or pad else torch.empty_like(blocks)
        native.bfp_round(blocks, out, info.man_bits, info.family == "a", truncate)
    else:
        out = torch.empty_like(blocks)
        for s in range(0, blocks.shape[0], _CHUNK_BLOCKS):
            _bfp_fast_chunk(blocks[s:s + _CHUNK_BLOCKS], out[s:s + _CHUNK_BLOCKS], info, truncate)
    out = out.reshape(x2.shape)
    if pad:
        out = out[:, :cols]
    return out.reshape(shape)


# --------------------------------------------------------------------------------------------------
# quantize
# --------------------------------------------------------------------------------------------------

def _native_ready(x) -> bool:
    """``x`` can go to the native BFP kernel as it is: dense float32 whose rows are whole blocks."""
    return (isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.dim() >= 1 and not x.shape[-1] % BLOCK_DATUMS
            and not x.requires_grad and x.is_contiguous() and native.available())


def broadcast_base(x: Any) -> Any:
    """The narrower tensor a broadcast view repeats: every dimension longer than 1 with stride 0 (all its
    entries alike) cut to length 1; ``x`` itself when it repeats nothing (or is not a tensor). An
    elementwise function of ``x`` is that function of the base, expanded back (``f(base).expand(x.shape)``),
    which computes each distinct value once and keeps the result a broadcast view."""
    if not isinstance(x, torch.Tensor):
        return x
    base = x
    for d, (st, sz) in enumerate(zip(x.stride(), x.shape)):
        if st == 0 and sz > 1:
            base = base.narrow(d, 0, 1)
    return base


def _quantize_repeated(x: torch.Tensor, base: torch.Tensor, info: FormatInfo, truncate: bool) -> torch.Tensor:
    """A broadcast view rounds as its base (:func:`broadcast_base`) and stays a broadcast view (a reduction's
    column expanded across a tile, say, is never materialised). Every format rounds datums alone except
    BFP, whose blocks are 16 datums of one row: along a repeated last dimension a block holds 16 equal
    values, so one such block is rounded per row."""
    if info.is_bfp and x.shape[-1] > 1 and x.stride(-1) == 0:
        block = base.expand(*base.shape[:-1], BLOCK_DATUMS).contiguous()
        rounded = quantize(block, info.df, truncate_bfp=truncate)[..., :1]
    else:
        rounded = quantize(base, info.df, truncate_bfp=truncate)
    return rounded.expand(x.shape)


def quantize(x: torch.Tensor, df: DataFormat, *, truncate_bfp: bool = False, in_place: bool = False) -> torch.Tensor:
    """Round ``x`` to the values data format ``df`` stores, as the BBE host model encodes them.

    Takes a tensor of any shape and dtype, returns float32 of the same shape (for Float32 this may be
    ``x`` itself). Per format:

    - Float32: unchanged. Float16_b: low 16 bits cleared (truncation, not round-to-nearest).
    - Float16 (fp16a, 1/5/10 bias 15) and Lf8 (1/5/2): mantissa truncated; |x| < 2^-14 flushes to a
      signed zero; larger than the top exponent (field 31 is a finite number) saturates to the largest
      value (131008, Lf8 114688) — inf and NaN too. Fp8_e4m3 (1/4/3 bias 7) by the same rules (max 480).
    - Bfp8/4/2 (A: 5-bit shared exponent) and Bfp8_b/4_b/2_b (B: 8-bit): one shared exponent per face
      row (16 consecutive datums of a 32×32 tile in face order), magnitudes of 7/3/1 bits relative to
      the block maximum, round half up in magnitude (``truncate_bfp=True``: truncate, as with
      ``TT_BACKEND_DISABLE_BFP_RTE=1``), clamp to the largest magnitude, zero magnitude → +0. Host
      quirks kept: in A formats a nonzero |x| < 2^-15 counts as 2^-15 and |x| ≥ 2^17 saturates; in B
      formats NaN/inf blocks decode to ±inf.
    - Int8 [-127, 127], UInt8 [0, 255], UInt16 [0, 65535], Int32 (sign-magnitude), Raw*: rounded half
      away from zero and clamped; NaN → 0.

    BFP blocking is defined on the tile layout; ``x`` is treated as zero-padded to whole tiles, so any
    shape works (a 1-D tensor is one row). A broadcast view (a stride-0 dimension) is rounded once per
    distinct value and returned as a broadcast view of the same shape.

    ``in_place``: ``x`` may be overwritten (the caller owns it); Float16_b then clears the bits in ``x``
    itself when it is dense float32 (contiguous, or a transpose of a contiguous tensor), instead of
    allocating a copy, and the BFP formats round a contiguous float32 ``x`` in place when the native
    kernel (:mod:`pybuda.golden.native`) is available. Other formats return a new tensor.
    """
    info = format_info(df)
    if info.is_bfp and _native_ready(x):  # the golden's every-op case, with as little Python as possible
        out = x if in_place else torch.empty_like(x)
        native.bfp_round(x, out, info.man_bits, info.family == "a", truncate_bfp)
        return out
    base = broadcast_base(x)
    if base is not x:
        return _quantize_repeated(x, base, info, truncate_bfp)
    if in_place and info.df in (DataFormat.Float32, DataFormat.Float16_b) and _dense_f32(x):
        x = x.detach()  # kept in its layout: a transposed weight is not copied into another one
        if info.df == DataFormat.Float16_b:
            x.view(torch.int32).bitwise_and_(_i32(0xFFFF0000))
        return x
    x = _as_f32(x)
    if info.df == DataFormat.Float32 or x.numel() == 0:
        return x
    if info.df == DataFormat.Float16_b:
        return _mask(x, 0xFFFF0000)
    if info.df in _SMALL:
        return _quantize_small_float(x, _SMALL[info.df])
    if info.is_bfp:
        return _quantize_bfp(x, info, truncate_bfp, in_place)
    return _quantize_int(x, info.df)


# --------------------------------------------------------------------------------------------------
# Datum codes (the packed form of each format's values)
# --------------------------------------------------------------------------------------------------

def encode_datums(flat: torch.Tensor, info: FormatInfo, truncate: bool
                   ) -> Tuple[Optional[torch.Tensor], torch.Tensor]:
    """The codes format ``info`` stores for ``flat`` (``[T, 1024]`` float32, datums in stored order): (shared
    exponents ``[T, 64]`` for BFP formats, else None; datum codes ``[T, 1024]`` int64). ``truncate``: BFP
    mantissas are truncated instead of rounded. :mod:`pybuda.golden.packing` lays them out in bytes."""
    df = info.df
    if info.is_bfp:
        shared, codes = _bfp_encode_blocks(flat.reshape(-1, BLOCK_DATUMS), info, truncate)
        return shared.reshape(-1, BLOCKS_PER_TILE), codes.reshape(flat.shape)
    if df == DataFormat.Float32:
        return None, _bits(flat).to(torch.int64) & 0xFFFFFFFF
    if df == DataFormat.Float16_b:
        return None, (_bits(flat).to(torch.int64) >> 16) & 0xFFFF
    if df in _SMALL:
        return None, _encode_small_float(flat, _SMALL[df])
    return None, _encode_int(flat, df)


def decode_datums(shared: Optional[torch.Tensor], codes: torch.Tensor, info: FormatInfo) -> torch.Tensor:
    """Inverse of :func:`encode_datums`: the float32 values of the codes."""
    df = info.df
    if info.is_bfp:
        vals = _bfp_decode_blocks(shared.reshape(-1), codes.reshape(-1, BLOCK_DATUMS), info)
        return vals.reshape(codes.shape)
    if df == DataFormat.Float32:
        return _from_bits(codes)
    if df == DataFormat.Float16_b:
        return _from_bits(codes << 16)
    if df in _SMALL:
        return _decode_small_float(codes, _SMALL[df])
    return _decode_int(codes, df)



# --------------------------------------------------------------------------------------------------
# Math fidelity
# --------------------------------------------------------------------------------------------------
#
# Per pass the multiplier takes 5 bits of SrcA (implicit 1 + 4 mantissa bits) and 7 bits of SrcB
# (implicit 1 + 6). Phase p uses the SrcA high part for p in {0, 2} and the low part for {1, 3}, the
# SrcB high part for {0, 1} and the low part for {2, 3} (spec §4.6):
#   SrcA hi = x & 0xfff80000 (top 4 mantissa bits), lo = mantissa bits 5-9 (the next 5);
#   SrcB hi = x & 0xfffe0000 (top 6),               lo = mantissa bits 7-10 (the next 4).
# SrcA's 10th mantissa bit (the LSB of FP16/TF32) is in no phase, so all phases together use
# SrcA & 0xffffc000 and SrcB & 0xffffe000 (TF32). The phases of one fidelity factor into at most two
# products of masked operands (the pieces' products are exact in float32: ≤ 11 × 11 significant bits):
#   LoFi  {0}        = Bhi·Ahi
#   HiFi2 {0,1}      = Bhi·(Ahi + Alo) = Bhi·Aused
#   HiFi2_B {0,2}    = (Bhi + Blo)·Ahi = Bused·Ahi
#   HiFi3 {0,1,2}    = Bhi·Aused + Blo·Ahi
#   HiFi4 {0,1,2,3}  = Bused·Aused

_A_HI, _A_USED = 0xFFF80000, 0xFFFFC000
_B_HI, _B_USED = 0xFFFE0000, 0xFFFFE000


def fidelity_phases(fidelity: MathFidelity) -> Tuple[int, ...]:
    """Phases executed for ``fidelity``: LoFi (0,), HiFi2 (0, 1), HiFi2_B (0, 2), HiFi3 (0, 1, 2),
    HiFi4 (0, 1, 2, 3). From the descriptor: ``desc & 7`` phases stepping by ``((desc >> 3) & 1) + 1``."""
    fid = MathFidelity.from_json(fidelity)
    if fid == MathFidelity.Invalid:
        raise InputError("math fidelity Invalid has no phases")
    count = int(fid) & 7
    step = ((int(fid) >> 3) & 1) + 1
    return tuple(range(0, count * step, step)) if count else (0,)


def srca_parts(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo) pieces of a SrcA operand: hi = ``x & 0xfff80000``, lo = ``x − (x & 0xfff83fff)``."""
    x = _as_f32(x)
    return _mask(x, _A_HI), x - _mask(x, 0xFFF83FFF)


def srcb_parts(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo) pieces of a SrcB operand: hi = ``x & 0xfffe0000``, lo = ``x − (x & 0xfffe1fff)``."""
    x = _as_f32(x)
    return _mask(x, _B_HI), x - _mask(x, 0xFFFE1FFF)


def keep_infinities(out: torch.Tensor, plain: Callable[[], torch.Tensor]) -> torch.Tensor:
    """``out``, a product computed from fidelity pieces, with the NaNs the pieces made and the plain product
    ``plain()`` does not have replaced by the plain result.

    The pieces split an operand's mantissa by arithmetic, which infinities do not survive: an infinity's
    "lo" piece is inf − inf = NaN, and a zero piece times an infinite one is NaN, where the bits the phases
    multiply are the infinity's (none below its exponent) and a zero. Such a product is ±inf (softmax's
    ``(x − max) · mask`` with −inf scores), so the plain float32 product is exact there. NaN inputs, and
    0 · inf in the math itself, stay NaN. Costs one summing pass over ``out`` when it holds no NaN (a NaN
    anywhere makes the sum NaN; so do infinities of both signs, which then take the exact path)."""
    if not bool(torch.isnan(out.sum())):
        return out
    nan = torch.isnan(out)
    exact = plain()
    return torch.where(nan & ~torch.isnan(exact), exact, out)


def _fidelity_apply(srcb: torch.Tensor, srca: torch.Tensor, fidelity: MathFidelity, op) -> torch.Tensor:
    srcb, srca = _as_f32(srcb), _as_f32(srca)
    return keep_infinities(_fidelity_pieces_apply(srcb, srca, fidelity, op), lambda: op(srcb, srca))


def _fidelity_pieces_apply(srcb: torch.Tensor, srca: torch.Tensor, fidelity: MathFidelity, op) -> torch.Tensor:
    """The product from the executed phases' masked pieces of float32 ``srcb`` and ``srca``."""
    phases = set(fidelity_phases(fidelity))
    a_hi = _mask(srca, _A_HI)
    b_hi = _mask(srcb, _B_HI)
    if phases == {0}:
        return op(b_hi, a_hi)
    if phases == {0, 1}:
        return op(b_hi, _mask(srca, _A_USED))
    if phases == {0, 2}:
        return op(_mask(srcb, _B_USED), a_hi)
    if phases == {0, 1, 2}:
        b_lo = _mask(srcb, _B_USED) - b_hi  # exact: same sign and exponent
        return op(b_hi, _mask(srca, _A_USED)) + op(b_lo, a_hi)
    return op(_mask(srcb, _B_USED), _mask(srca, _A_USED))


def fidelity_matmul(in0: torch.Tensor, in1: torch.Tensor, fidelity: MathFidelity) -> torch.Tensor:
    """``in0 @ in1`` (torch.matmul semantics) as the matrix unit computes it at ``fidelity``.

    Operand roles from the LLK: in0 → SrcB (7 bits per pass), in1 → SrcA (5 bits per pass). Products
    use only the mantissa bits the executed phases cover; accumulation is float32 (Dest at FP32 —
    apply ``accumulate`` for a narrower Dest). At most two float32 GEMMs.
    """
    return _fidelity_apply(in0, in1, fidelity, blas.matmul)


def fidelity_multiply(in0: torch.Tensor, in1: torch.Tensor, fidelity: MathFidelity) -> torch.Tensor:
    """Elementwise ``in0 * in1`` (broadcasting) as ELWMUL computes it at ``fidelity``.

    Operand roles: eltwise binaries unpack in0 (operand A) to SrcA and in1 (operand B) to SrcB — SrcB
    is the register that broadcasts, and ELWSUB computes SrcA − SrcB = in0 − in1 — so, unlike matmul,
    in0 gets the 5-bit SrcA split and in1 the 7-bit SrcB split. ELWADD/ELWSUB ignore fidelity.
    """
    return _fidelity_apply(in1, in0, fidelity, torch.mul)


# --------------------------------------------------------------------------------------------------
# Dest accumulation
# --------------------------------------------------------------------------------------------------

def _round_nearest_even(x: torch.Tensor, man_bits: int) -> torch.Tensor:
    # Round the fp32 mantissa to man_bits bits, ties to even, by integer addition on the bit pattern
    # (a carry into the exponent is the correct result). inf/NaN are left for the caller's clamp.
    drop = 23 - man_bits
    b = _bits(x)
    lsb = (b >> drop) & 1
    r = (b + ((1 << (drop - 1)) - 1) + lsb) & _i32(0xFFFFFFFF << drop)
    finite = (b & 0x7F800000) != 0x7F800000
    return torch.where(finite, r, b).view(torch.float32)


#: Mantissa bits after the leading one that a LoFi multiply reads of its SrcA operand (phase 0, spec §4.6).
LOFI_SRCA_FRACTION_BITS = 4


def round_mantissa(x: torch.Tensor, fraction_bits: int) -> torch.Tensor:
    """``x`` (as float32) with each mantissa rounded to ``fraction_bits`` bits after the leading one,
    to nearest, ties to even; inf and NaN unchanged. A value rounded so is read exactly by a multiplier
    that keeps that many bits (LoFi keeps :data:`LOFI_SRCA_FRACTION_BITS` of SrcA and truncates the rest)."""
    if not 0 <= int(fraction_bits) <= 23:
        raise InputError(f"fraction_bits must be in [0, 23], got {fraction_bits}")
    x = _as_f32(x)
    return x if fraction_bits == 23 else _round_nearest_even(x, int(fraction_bits))


def accumulate(x: torch.Tensor, acc_df: DataFormat, *, rounding: str = "truncate") -> torch.Tensor:
    """Round a partial sum to what the Dest register holds when accumulating in ``acc_df``.

    Float32: unchanged. Float16_b / Float16: ``rounding="truncate"`` (default) uses the host model's
    conversion (same as ``quantize``); ``"nearest"`` rounds to nearest even first, then applies the same
    flush/saturation. Int32: round half away from zero and clamp (sign-magnitude range).
    """
    df = DataFormat.from_json(acc_df)
    if rounding not in ("truncate", "nearest"):
        raise InputError(f"rounding must be 'truncate' or 'nearest', got {rounding!r}")
    base = broadcast_base(x)
    if base is not x:  # elementwise: once per distinct value, still a broadcast view
        return accumulate(base, df, rounding=rounding).expand(x.shape)
    x = _as_f32(x)
    if df == DataFormat.Float32:
        return x
    if df == DataFormat.Int32:
        return _quantize_int(x, df)
    if df == DataFormat.Float16_b:
        return _mask(_round_nearest_even(x, 7) if rounding == "nearest" else x, 0xFFFF0000)
    if df == DataFormat.Float16:
        sf = _SMALL[df]
        return _quantize_small_float(_round_nearest_even(x, 10) if rounding == "nearest" else x, sf)
    raise InputError(f"Dest cannot accumulate in {df.name}; use Float32, Float16, Float16_b or Int32")
