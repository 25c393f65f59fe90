"""Bit-exact data formats and math fidelity (netlist spec §2.1, §4).

Expected values are hand-computed from the spec, or come from the scalar references below, which
transcribe spec §4.3-4.4 datum by datum in plain Python (independent of the vectorised code).
"""

import shutil
import struct

import numpy as np
import pytest
import torch

from pybuda.golden import formats as F
from pybuda.golden import native, packing
from pybuda.golden.tiles import face_rows, from_face_order, pad_to_tiles, tilize, unpad, untilize
from pybuda.errors import InputError
from pybuda.dtypes import DataFormat as DF
from pybuda.dtypes import MathFidelity as MF

ALL_FORMATS = [DF.Float32, DF.Float16, DF.Float16_b, DF.Lf8, DF.Fp8_e4m3, DF.Bfp8, DF.Bfp4, DF.Bfp2,
               DF.Bfp8_b, DF.Bfp4_b, DF.Bfp2_b, DF.Int8, DF.UInt8, DF.UInt16, DF.Int32,
               DF.RawUInt8, DF.RawUInt16, DF.RawUInt32]
BFP = [DF.Bfp8, DF.Bfp4, DF.Bfp2, DF.Bfp8_b, DF.Bfp4_b, DF.Bfp2_b]
BFP_BITS = {DF.Bfp8: 7, DF.Bfp4: 3, DF.Bfp2: 1, DF.Bfp8_b: 7, DF.Bfp4_b: 3, DF.Bfp2_b: 1}


@pytest.fixture(autouse=True, params=["native", "torch"])
def bfp_path(request, monkeypatch):
    """Every test runs on both BFP rounding paths: the C kernel (pybuda.golden.native) and torch's."""
    if request.param == "torch":
        monkeypatch.setattr(native, "enabled", False)
    elif shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the native BFP kernel cannot be built here")
    else:
        monkeypatch.setattr(native, "enabled", True)
        assert native.available(), "a C compiler is here but the native BFP kernel did not build"
    return request.param


# ------------------------------------------------------------------------------------------------
# Scalar references
# ------------------------------------------------------------------------------------------------

def f2u(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def u2f(u: int) -> float:
    return struct.unpack("<f", struct.pack("<I", u & 0xFFFFFFFF))[0]


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def ref_bfp_block(vals, df, truncate=False):
    """Spec §4.3/4.4 for one block of 16 float32 values → list of 16 decoded floats."""
    n = BFP_BITS[df]
    a_fmt = not df.name.endswith("_b")
    bias = 15 if a_fmt else 127
    us = [f2u(v) for v in vals]

    def exp_of(u):
        e = (u >> 23) & 0xFF
        return min(max(e - 127 + 15, 0), 31) if a_fmt else e

    shared = max(exp_of(u) for u in us)
    out = []
    for u in us:
        if u & 0x7FFFFFFF == 0:
            out.append(0.0)
            continue
        s, e, m = u >> 31, (u >> 23) & 0xFF, u & 0x7FFFFF
        if a_fmt:
            e -= 112
            if e > 31:
                e, m = 31, 0x7FFFFF
            elif e < 0:
                e, m = 0, 0
        m = ((1 << 23) | m) >> min(shared - e, 60)
        drop = 24 - n
        m = m >> drop if truncate else min((m + (1 << (drop - 1))) >> drop, (1 << n) - 1)
        v = m * 2.0 ** (shared - bias - (n - 1))
        out.append(-v if (s and m) else v)
    return out


def ref_small_float(v: float, eb: int, mb: int, bias: int) -> float:
    """fp16a / Lf8 / Fp8 host conversion (truncate, flush, saturate; top field finite) and decode."""
    u = f2u(v)
    s, e, m = u >> 31, (u >> 23) & 0xFF, u & 0x7FFFFF
    se = e - 127
    emax = (1 << eb) - 1 - bias
    if se <= -bias:
        return -0.0 if s else 0.0
    if se > emax:
        se, m = emax, 0x7FFFFF
    m >>= 23 - mb
    val = (1 + m / 2 ** mb) * 2.0 ** se
    return -val if s else val


def ref_quantize_tensor_via_tiles(x: torch.Tensor, df) -> torch.Tensor:
    """The definition: pad to tiles, tilize, quantise each face row with the scalar reference."""
    padded = pad_to_tiles(x)
    rows = face_rows(tilize(padded))
    flat = rows.reshape(-1, 16).tolist()
    q = torch.tensor([ref_bfp_block(b, df) for b in flat], dtype=torch.float32)
    tiles = from_face_order(q.reshape(*rows.shape[:-2], 1024))
    return unpad(untilize(tiles), x.shape)


def edge_values():
    """Awkward float32 values: zeros, denormals, tiny, ties, huge, inf."""
    v = [0.0, -0.0, 1e-45, -3e-39, 1.1754944e-38, 2.0 ** -119, 2.0 ** -126, 1e-30, 2.0 ** -15,
         3e-5, 2.0 ** -14, 0.0078125, 0.5 - 2.0 ** -25, 0.5, 1.0, 1.0078125, 1.5, 1.9999999,
         65504.0, 70000.0, 131008.0, 131072.0, 2.0 ** 17, 1e20, 3.4e38, float("inf"), float("-inf")]
    return v + [-x for x in v if x != 0.0]


def mixed_tensor(seed=0, rows=48, cols=80):
    """Random data whose 16-datum blocks span every regime (zero, tiny, normal, huge, inf, NaN)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    scale = 2.0 ** torch.randint(-140, 130, (rows, cols // 16), generator=g).float()
    x = (x.reshape(rows, -1, 16) * scale[..., None]).reshape(rows, cols)
    x[0, :16] = 0.0
    x[1, :16] = torch.randn(16, generator=g) * 1e-40   # denormals only
    x[2, 3] = float("inf")
    x[3, 5] = float("nan")
    x[4, :16] = torch.randn(16, generator=g) * 2.0 ** -12  # A format: max below 2^-7
    x[4, 7] = 1e-9
    ev = torch.tensor(edge_values())
    x.view(-1)[100:100 + ev.numel()] = ev
    return x


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal, NaN == NaN."""
    nan = torch.isnan(a) & torch.isnan(b)
    return bool(((bits(a) == bits(b)) | nan).all())


# ------------------------------------------------------------------------------------------------
# Format table and sizes
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("df, size", [
    (DF.Float32, 4128), (DF.Int32, 4128), (DF.RawUInt32, 4128), (DF.Float16, 2080), (DF.Float16_b, 2080),
    (DF.UInt16, 2080), (DF.Bfp8, 1120), (DF.Bfp8_b, 1120), (DF.Bfp4, 608), (DF.Bfp4_b, 608),
    (DF.Bfp2, 352), (DF.Bfp2_b, 352), (DF.Lf8, 1056), (DF.Fp8_e4m3, 1056), (DF.Int8, 1056),
    (DF.UInt8, 1056),
])
def test_tile_sizes(df, size):
    assert F.tile_size_bytes(df) == size
    assert len(packing.pack_tile(torch.zeros(32, 32), df)) == size


def test_families_and_flags():
    assert F.is_bfp(DF.Bfp4_b) and not F.is_bfp(DF.Float16)
    assert F.exponent_family(DF.Bfp8) == "a" and F.exponent_family(DF.Float16) == "a"
    assert F.exponent_family(DF.Bfp2_b) == "b" and F.exponent_family(DF.Float16_b) == "b"
    assert F.exponent_family(DF.Int8) == ""
    assert F.max_value(DF.Float16) == 131008.0 and F.max_value(DF.Lf8) == 114688.0
    assert F.max_value(DF.Bfp8) == 127 * 2.0 ** 10
    with pytest.raises(InputError):
        F.format_info(DF.Invalid)


# ------------------------------------------------------------------------------------------------
# Float formats
# ------------------------------------------------------------------------------------------------

def test_float16_b_truncates():
    x = torch.tensor([1.0078125 + 2 ** -10, 1.0078125 - 2 ** -20, -1.0078125 - 2 ** -9, 3.0, 1.0 + 2 ** -8])
    q = F.quantize(x, DF.Float16_b)
    assert q.tolist() == [1.0078125, 1.0, -1.0078125, 3.0, 1.0]  # never rounds up
    assert [u & 0xFFFFFFFF for u in bits(q).tolist()] == [f2u(v) & 0xFFFF0000 for v in x.tolist()]


def test_float16a_saturates_and_flushes():
    x = torch.tensor([131008.0, 131072.0, 1e6, float("inf"), float("-inf"), 70000.0, 65504.0,
                      2.0 ** -14, 2.0 ** -14 * 0.99, 2.0 ** -15, 1.0 / 3, -1e-6, float("nan")])
    q = F.quantize(x, DF.Float16)
    # Field 31 is finite: 2^16 * (1 + 1023/1024) = 131008 is the maximum, there is no inf.
    assert q.tolist()[:7] == [131008.0, 131008.0, 131008.0, 131008.0, -131008.0, 69952.0, 65504.0]
    assert q[7] == 2.0 ** -14 and q[8] == 0.0 and q[9] == 0.0
    assert q[10].item() == u2f(f2u(1 / 3) & 0xFFFFE000)  # mantissa truncated to 10 bits
    assert bits(q[11:12]).item() == -(1 << 31)  # -1e-6 flushes to -0.0 (host keeps the sign)
    assert q[12] == 131008.0  # NaN saturates like inf in the host conversion


@pytest.mark.parametrize("df, eb, mb, bias", [(DF.Float16, 5, 10, 15), (DF.Lf8, 5, 2, 15), (DF.Fp8_e4m3, 4, 3, 7)])
def test_small_floats_match_scalar_reference(df, eb, mb, bias):
    vals = edge_values() + torch.randn(500, generator=torch.Generator().manual_seed(1)).mul(50).tolist()
    x = torch.tensor(vals, dtype=torch.float32)
    q = F.quantize(x, df)
    exp = torch.tensor([ref_small_float(v, eb, mb, bias) for v in x.tolist()], dtype=torch.float32)
    assert same(q, exp)


def test_lf8_levels():
    x = torch.tensor([1.0, 1.3, 1.5, 1.99, 3.0, 2.0 ** 17, -7.0])
    assert F.quantize(x, DF.Lf8).tolist() == [1.0, 1.25, 1.5, 1.75, 3.0, 114688.0, -7.0]


def test_tf32_truncates():
    x = torch.tensor([1.0 + 2 ** -10 + 2 ** -11])
    assert F.quantize_tf32(x).item() == 1.0 + 2 ** -10


# ------------------------------------------------------------------------------------------------
# BFP
# ------------------------------------------------------------------------------------------------

def block_row(vals):
    """A 1x16 tensor = exactly one BFP block."""
    v = list(vals) + [0.0] * (16 - len(vals))
    return torch.tensor([v], dtype=torch.float32)


def test_bfp8_b_powers_of_two_block():
    # Shared exponent is that of 1.0 (127): lsb = 2^-6. 2^-7 is exactly half an lsb and rounds UP;
    # 2^-8 and smaller vanish.
    x = block_row([2.0 ** -k for k in range(16)])
    q = F.quantize(x, DF.Bfp8_b)[0].tolist()
    assert q == [2.0 ** -k for k in range(7)] + [2.0 ** -6] + [0.0] * 8


def test_bfp8_b_round_half_up_not_even():
    lsb = 2.0 ** -6  # block max in [1, 2)
    x = block_row([1.0 + lsb / 2, 1.0 + 3 * lsb / 2, 1.0 + lsb / 2 - 2 ** -20, -(1.0 + lsb / 2), 1.5])
    q = F.quantize(x, DF.Bfp8_b)[0].tolist()
    assert q[:5] == [1.0 + lsb, 1.0 + 2 * lsb, 1.0, -(1.0 + lsb), 1.5]


@pytest.mark.parametrize("df", BFP)
def test_bfp_ties_and_near_ties(df):
    # Values at k + 1/2 lsb (ties: up) and one float32 ulp either side, for every k and for values far
    # below the block max (down to v = 1/2 - 2^-25 lsb, which a float "+ 0.5" would round up).
    n = BFP_BITS[df]
    lsb = 2.0 ** -(n - 1)  # block max 1.x: shared exponent of 1.0
    vals = []
    for k in range(2 ** n):
        t = (k + 0.5) * lsb
        vals += [t, u2f(f2u(t) + 1), u2f(f2u(t) - 1)]
    for j in range(1, 30):
        t = 0.5 * lsb * 2.0 ** -j
        vals += [t, u2f(f2u(t) + 1), u2f(f2u(t) - 1)]
    vals += [u2f(f2u(0.5 * lsb) - 1)]  # = (1/2 - 2^-25) lsb
    blocks = [[1.0] + vals[i:i + 15] for i in range(0, len(vals), 15)]
    blocks[-1] += [0.0] * (16 - len(blocks[-1]))
    x = torch.tensor(blocks + [[-v for v in b] for b in blocks], dtype=torch.float32)
    exp = torch.tensor([ref_bfp_block(b, df) for b in x.tolist()], dtype=torch.float32)
    assert same(F.quantize(x, df), exp)


def test_bfp8_b_clamps_without_exponent_bump():
    x = block_row([1.9999999, -1.99, 0.5])
    q = F.quantize(x, DF.Bfp8_b)[0].tolist()
    assert q[:3] == [127 * 2.0 ** -6, -127 * 2.0 ** -6, 0.5]


def test_bfp_zero_magnitude_clears_sign():
    x = block_row([1.0, -2.0 ** -9, -0.0, -1e-30])
    q = F.quantize(x, DF.Bfp8_b)
    assert bits(q)[0, 1:4].tolist() == [0, 0, 0]  # +0.0, not -0.0
    data = packing.pack_tile(torch.nn.functional.pad(x, (0, 16, 0, 31)), DF.Bfp8_b)
    assert data[80 + 1] == 0x00 and data[80 + 2] == 0x00


def test_bfp4_and_bfp2_levels():
    x = block_row([1.0, 0.6, 0.625, -0.3, 0.12, 1.9])
    assert F.quantize(x, DF.Bfp4_b)[0, :6].tolist() == [1.0, 0.5, 0.75, -0.25, 0.0, 1.75]
    x = block_row([1.5, 0.5, 0.49, -0.75, -1.0])
    assert F.quantize(x, DF.Bfp2_b)[0, :5].tolist() == [1.0, 1.0, 0.0, -1.0, -1.0]


def test_bfp_a_format_rebias_and_clamp():
    # Exponent rebiased to 5 bits: a block maximum of 2^20 clamps to exponent 31 (2^16) and saturates.
    x = block_row([2.0 ** 20, 2.0 ** 16, 1.0])
    assert F.quantize(x, DF.Bfp8)[0, :3].tolist() == [127 * 2.0 ** 10, 64 * 2.0 ** 10, 0.0]
    assert F.quantize(x, DF.Bfp8_b)[0, :3].tolist() == [2.0 ** 20, 2.0 ** 16, 0.0]
    # Below 2^-15 an A exponent clamps to 0 and the datum counts as 2^-15 (host model).
    x = block_row([2.0 ** -20, -1e-7])
    assert F.quantize(x, DF.Bfp8)[0, :2].tolist() == [2.0 ** -15, -(2.0 ** -15)]
    x = block_row([2.0 ** -10, 2.0 ** -20])
    assert F.quantize(x, DF.Bfp8)[0, :2].tolist() == [2.0 ** -10, 2.0 ** -15]
    assert F.quantize(x, DF.Bfp8_b)[0, :2].tolist() == [2.0 ** -10, 0.0]


def test_bfp_blocks_are_face_rows():
    # 16-column segments are separate blocks; a big value only coarsens its own segment.
    x = torch.full((2, 48), 1.0 + 2 ** -10)
    x[0, 20] = 1000.0
    q = F.quantize(x, DF.Bfp8_b)
    assert (q[0, 16:32] == torch.where(torch.arange(16) == 4, 1000.0, 0.0)).all()  # 1.0 < lsb/2 = 4
    assert (q[0, :16] == 1.0).all() and (q[1] == 1.0).all() and (q[0, 32:] == 1.0).all()


@pytest.mark.parametrize("df", BFP)
def test_bfp_matches_scalar_reference_via_tiles(df):
    # Odd shape: the reference pads to tiles, tilizes and quantises face rows one at a time.
    x = mixed_tensor(seed=3, rows=33, cols=80)[:, :70]
    x = torch.nan_to_num(x, nan=1.0)  # NaN has no scalar reference (sign of the NaN)
    assert same(F.quantize(x, df), ref_quantize_tensor_via_tiles(x, df))


@pytest.mark.parametrize("df", BFP)
def test_bfp_truncate_mode(df):
    x = mixed_tensor(seed=4)[:8]
    x = torch.nan_to_num(x, nan=1.0)
    blocks = x.reshape(-1, 16).tolist()
    exp = torch.tensor([ref_bfp_block(b, df, truncate=True) for b in blocks]).reshape(x.shape)
    assert same(F.quantize(x, df, truncate_bfp=True), exp)


@pytest.mark.parametrize("df", BFP)
def test_bfp_fast_path_equals_exact_encoder(df):
    # The fast value path must agree with the integer host-model encoder on every block, including
    # the blocks it hands to the exact path, and across chunk boundaries.
    x = torch.cat([mixed_tensor(seed=s, rows=64, cols=256) for s in range(5)]) * 1.0
    info = F.format_info(df)
    old = F._CHUNK_BLOCKS
    F._CHUNK_BLOCKS = 100  # many chunks, with fallback blocks in several of them
    try:
        q = F.quantize(x, df)
    finally:
        F._CHUNK_BLOCKS = old
    exact = F._bfp_exact(x.reshape(-1, 16), info, False).reshape(x.shape)
    assert same(q, exact)


@pytest.mark.parametrize("df", BFP)
def test_bfp_every_block_exponent_equals_exact_encoder(df):
    # One block per shared exponent over the whole float32 range: the block maximum just below the next
    # power of two (it rounds up and must clamp), ties and near-ties of a few levels, values far below
    # the maximum, signs. The value arithmetic (magic-constant rounding with a sticky bit) and the blocks
    # it hands to the exact encoder must both match the integer host model bit for bit.
    n = BFP_BITS[df]
    rows = []
    for e in range(-149, 128):
        top = 2.0 ** e
        lsb = top * 2.0 ** -(n - 1)
        vals = [u2f(f2u(2 * top) - 1) if e < 127 else top, top, -top]
        for k in (0, 1, 2 ** n - 2, 2 ** n - 1):
            t = (k + 0.5) * lsb
            if t > 0 and t < 2 * top:
                vals += [t, -u2f(f2u(t) + 1), u2f(f2u(t) - 1)]
        vals += [top * 2.0 ** -30, -0.0]
        rows.append((vals + [0.0] * 16)[:16])
    x = torch.tensor(rows, dtype=torch.float32)
    exact = F._bfp_exact(x, F.format_info(df), False)
    assert same(F.quantize(x, df), exact)


def test_bfp_nan_and_inf():
    x = block_row([float("nan"), float("inf"), -1.0, 1.0])
    a = F.quantize(x, DF.Bfp8)[0, :4].tolist()
    assert a == [127 * 2.0 ** 10, 127 * 2.0 ** 10, 0.0, 0.0]  # A: saturate like the host
    b = F.quantize(x, DF.Bfp8_b)[0, :4]
    assert torch.isinf(b[:2]).all()  # B: E = 255 decodes past float32 range


def test_quantize_is_idempotent():
    # Normal-range data: below 2^-119 the host model's treatment of fp32 denormals (and, in A formats,
    # of values below 2^-15) does not round-trip.
    g = torch.Generator().manual_seed(5)
    x = torch.randn(64, 64, generator=g) * 2.0 ** torch.randint(-30, 30, (64, 4), generator=g).repeat_interleave(16, 1)
    for df in ALL_FORMATS:
        q = F.quantize(x, df)
        assert same(F.quantize(q, df), q), df


def test_quantize_any_shape_and_dtype():
    for shape in [(), (5,), (3, 17), (2, 3, 40, 33)]:
        x = torch.randn(shape)
        for df in ALL_FORMATS:
            q = F.quantize(x.double(), df)
            assert q.shape == x.shape and q.dtype == torch.float32
    # 0.3 alone: exponent -2, lsb 2^-8, 0.3 / 2^-8 = 76.8 rounds to 77.
    assert F.quantize(torch.tensor(0.3), DF.Bfp8_b).item() == 77 * 2.0 ** -8


# ------------------------------------------------------------------------------------------------
# Integers
# ------------------------------------------------------------------------------------------------

def test_int8_rounds_half_away_and_clamps():
    x = torch.tensor([0.5, -0.5, 1.5, 2.5, -2.5, 126.6, 200.0, -1e9, 0.49999997, float("nan"), -0.2,
                      float("inf"), 3.4999998, -4.5])
    q = F.quantize(x, DF.Int8)
    assert q.tolist() == [1.0, -1.0, 2.0, 3.0, -3.0, 127.0, 127.0, -127.0, 0.0, 0.0, 0.0, 127.0, 3.0, -5.0]
    assert bits(q)[10].item() == 0  # -0.2 rounds to +0


def test_unsigned_and_int32_ranges():
    x = torch.tensor([-3.0, 0.5, 254.5, 300.0, 70000.0, 3e9, -3e9])
    assert F.quantize(x, DF.UInt8).tolist() == [0, 1, 255, 255, 255, 255, 0]
    assert F.quantize(x, DF.UInt16).tolist() == [0, 1, 255, 300, 65535, 65535, 0]
    assert F.quantize(x, DF.Int32).tolist() == [-3, 1, 255, 300, 70000, 2 ** 31 - 128, -(2 ** 31 - 128)]


# ------------------------------------------------------------------------------------------------
# Packed bytes
# ------------------------------------------------------------------------------------------------

def dword(data: bytes, i: int) -> int:
    return struct.unpack_from("<I", data, 4 * i)[0]


def test_pack_bfp8_b_exact_bytes():
    t = torch.zeros(32, 32)
    t[0, 0], t[0, 17], t[16, 0], t[31, 31] = 1.0, -0.5, 0.75, -1.5
    data = packing.pack_tile(t, DF.Bfp8_b)
    assert len(data) == 1120
    assert dword(data, 0) == 70 and data[4:16] == bytes(12)  # size in 16-byte units, then zeros
    exps = data[16:80]
    # Blocks in face order: (0,0) → block 0; (0,17) → face 1 row 0 = 16; (16,0) → 32; (31,31) → 63.
    assert exps[0] == 127 and exps[16] == 126 and exps[32] == 126 and exps[63] == 127
    assert sum(exps) == 127 + 126 + 126 + 127
    body = data[80:80 + 1024]
    assert body[0] == 0x40            # 1.0 = 64 · 2^(127-127-6)
    assert body[256 + 1] == 0xC0      # -0.5: sign bit 7, magnitude 64
    assert body[512] == 0x60          # 0.75 = 96 · 2^(126-133)
    assert body[1023] == 0x80 | 96    # -1.5
    assert sum(1 for b in body if b) == 4
    assert data[1104:] == bytes(16)
    assert dword(data, 4) == 127  # exponent dword 0: blocks 0-3, block 0 in the low byte
    assert torch.equal(packing.unpack_tile(data, DF.Bfp8_b), t)


def test_pack_bfp4_b_and_bfp2_b_nibbles():
    t = torch.zeros(32, 32)
    t[0, 0], t[0, 1] = 1.0, -0.5
    data = packing.pack_tile(t, DF.Bfp4_b)
    assert dword(data, 0) == 608 // 16
    assert data[80] == 0xA4  # datum 0 (m=4) in the low nibble, datum 1 (sign|2 = 0xA) high
    t[0, 1], t[0, 2], t[0, 3] = -1.0, 0.2, -0.75
    data = packing.pack_tile(t, DF.Bfp2_b)
    assert dword(data, 0) == 352 // 16
    assert data[80] == 0b11_00_11_01  # 01, 11 (sign bit 1), 00, 11 from the LSB up
    assert packing.unpack_tile(data, DF.Bfp2_b)[0, :4].tolist() == [1.0, -1.0, 0.0, -1.0]


def test_pack_a_format_exponent_bytes():
    t = torch.zeros(32, 32)
    t[0, 0], t[1, 0] = 1.0, 2.0 ** 20
    data = packing.pack_tile(t, DF.Bfp8)
    assert data[16] == 15 and data[17] == 31
    assert data[80] == 0x40 and data[80 + 16] == 0x7F


def test_pack_scalar_formats_exact_bytes():
    t = torch.zeros(32, 32)
    t[0, 0], t[0, 1], t[1, 0] = 1.0, -2.0, -5.0
    d = packing.pack_tile(t, DF.Float32)
    assert dword(d, 0) == 258 and d[16:20] == struct.pack("<f", 1.0) and d[20:24] == struct.pack("<f", -2.0)
    assert d[16 + 4 * 16:16 + 4 * 17] == struct.pack("<f", -5.0)  # (1,0) is face order index 16
    d = packing.pack_tile(t, DF.Float16_b)
    assert dword(d, 0) == 130 and d[16:20] == bytes([0x80, 0x3F, 0x00, 0xC0])
    d = packing.pack_tile(t, DF.Float16)
    assert d[16:20] == bytes([0x00, 0x3C, 0x00, 0xC0])
    d = packing.pack_tile(t, DF.Int8)
    assert dword(d, 0) == 66 and d[16:18] == bytes([1, 0x82]) and d[16 + 16] == 0x85
    d = packing.pack_tile(t, DF.Int32)
    assert struct.unpack_from("<I", d, 16 + 4 * 16)[0] == 0x80000005
    t[0, 0], t[0, 1], t[0, 2] = 1.0, 1.5, -1.75
    d = packing.pack_tile(t, DF.Lf8)
    assert d[16:19] == bytes([0x3C, 0x3E, 0xBF])  # s|eeeee|mm: 1.5 has mantissa 0b10
    assert packing.pack_tile(t, DF.Fp8_e4m3)[16] == 0x38


def test_pack_raw_formats_are_row_major():
    t = torch.zeros(32, 32)
    t[1, 0] = 9.0
    assert packing.pack_tile(t, DF.RawUInt8)[16 + 32] == 9  # row-major index 32
    assert packing.pack_tile(t, DF.UInt8)[16 + 16] == 9     # face order index 16


@pytest.mark.parametrize("df", ALL_FORMATS)
def test_unpack_pack_equals_quantize(df):
    x = mixed_tensor(seed=7, rows=64, cols=96)
    if df in (DF.UInt8, DF.UInt16, DF.RawUInt8, DF.RawUInt16, DF.RawUInt32):
        x = x.abs()
    tiles = tilize(pad_to_tiles(x))
    data = packing.pack_tensor(tiles, df)
    assert len(data) == tiles.shape[2] * tiles.shape[3] * F.tile_size_bytes(df)
    back = unpad(untilize(packing.unpack_tensor(data, df, tiles.shape)), x.shape)
    assert same(back, F.quantize(x, df))


def test_empty_tensors():
    for df in ALL_FORMATS:
        assert F.quantize(torch.zeros(0, 5), df).shape == (0, 5)
        assert packing.pack_tensor(torch.zeros(0, 32, 32), df) == b""
        assert packing.unpack_tensor(b"", df).shape == (0, 32, 32)


def test_unpack_rejects_bad_bytes():
    data = bytearray(packing.pack_tile(torch.ones(32, 32), DF.Bfp8_b))
    with pytest.raises(InputError):
        packing.unpack_tile(bytes(data[:-1]), DF.Bfp8_b)
    data[0] = 71
    with pytest.raises(InputError, match="header"):
        packing.unpack_tile(bytes(data), DF.Bfp8_b)
    with pytest.raises(InputError):
        packing.unpack_tensor(bytes(100), DF.Float16)
    with pytest.raises(InputError):
        packing.pack_tile(torch.zeros(16, 32), DF.Float16)


# ------------------------------------------------------------------------------------------------
# Math fidelity
# ------------------------------------------------------------------------------------------------

def split(v: float, hi_mask: int, lo_clear: int):
    u = f2u(v)
    return u2f(u & hi_mask), v - u2f(u & lo_clear)


def ref_fidelity_matmul(in0, in1, fid):
    """Σ_k Σ_phases SrcB_part(in0[i,k]) · SrcA_part(in1[k,j]) in float64, datum by datum."""
    phases = F.fidelity_phases(fid)
    a = in0.tolist()
    b = in1.tolist()
    m, k, n = len(a), len(b), len(b[0])
    out = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            acc = 0.0
            for kk in range(k):
                bh, bl = split(a[i][kk], 0xFFFE0000, 0xFFFE1FFF)   # in0 → SrcB
                ah, al = split(b[kk][j], 0xFFF80000, 0xFFF83FFF)   # in1 → SrcA
                for p in phases:
                    acc += (ah if p in (0, 2) else al) * (bh if p in (0, 1) else bl)
            out[i, j] = acc
    return torch.tensor(out)


def test_fidelity_phases():
    assert F.fidelity_phases(MF.LoFi) == (0,)
    assert F.fidelity_phases(MF.HiFi2) == (0, 1)
    assert F.fidelity_phases(MF.HiFi2_B) == (0, 2)
    assert F.fidelity_phases(MF.HiFi3) == (0, 1, 2)
    assert F.fidelity_phases(MF.HiFi4) == (0, 1, 2, 3)


def test_operand_parts():
    x = torch.tensor([u2f(0x3FFFFFFF)])  # all mantissa bits set
    ah, al = F.srca_parts(x)
    assert bits(ah).item() == 0x3FF80000 and al.item() == u2f(0x3FFFC000) - u2f(0x3FF80000)
    bh, bl = F.srcb_parts(x)
    assert bits(bh).item() == 0x3FFE0000 and bl.item() == u2f(0x3FFFE000) - u2f(0x3FFE0000)


@pytest.mark.parametrize("fid", [MF.LoFi, MF.HiFi2, MF.HiFi2_B, MF.HiFi3, MF.HiFi4])
def test_fidelity_matmul_matches_phase_reference(fid):
    g = torch.Generator().manual_seed(11)
    in0, in1 = torch.randn(5, 7, generator=g), torch.randn(7, 4, generator=g)
    got = F.fidelity_matmul(in0, in1, fid).double()
    exp = ref_fidelity_matmul(in0, in1, fid)
    assert torch.allclose(got, exp, rtol=1e-6, atol=1e-6)  # float32 accumulation order only


@pytest.mark.parametrize("fid", [MF.LoFi, MF.HiFi2, MF.HiFi2_B, MF.HiFi3, MF.HiFi4])
def test_fidelity_multiply_per_element(fid):
    g = torch.Generator().manual_seed(12)
    a, b = torch.randn(64, generator=g), torch.randn(64, generator=g)
    got = F.fidelity_multiply(a, b, fid)
    # Eltwise: in0 → SrcA, in1 → SrcB (the reference's matmul has in0 → SrcB, so swap).
    exp = [ref_fidelity_matmul(torch.tensor([[y]]), torch.tensor([[x]]), fid).item()
           for x, y in zip(a.tolist(), b.tolist())]
    assert torch.allclose(got.double(), torch.tensor(exp, dtype=torch.float64), rtol=1e-7, atol=0)
    if fid != MF.HiFi3:  # a single exact product
        assert torch.equal(got, torch.tensor(exp, dtype=torch.float32))


def test_hifi4_on_bf16_values_is_exact_fp32_matmul():
    g = torch.Generator().manual_seed(13)
    in0 = F.quantize(torch.randn(32, 64, generator=g), DF.Float16_b)
    in1 = F.quantize(torch.randn(64, 48, generator=g), DF.Float16_b)
    assert torch.equal(F.fidelity_matmul(in0, in1, MF.HiFi4), in0 @ in1)
    assert not torch.equal(F.fidelity_matmul(in0, in1, MF.HiFi3), in0 @ in1)


def test_srca_fp16_lsb_is_never_used():
    lsb = torch.tensor([[1.0 + 2 ** -10]])  # FP16/TF32 value with its last mantissa bit set
    one = torch.tensor([[1.0]])
    assert F.fidelity_matmul(one, lsb, MF.HiFi4).item() == 1.0             # in1 → SrcA: bit dropped
    assert F.fidelity_matmul(lsb, one, MF.HiFi4).item() == 1.0 + 2 ** -10  # in0 → SrcB: kept
    assert F.fidelity_multiply(lsb, one, MF.HiFi4).item() == 1.0           # eltwise in0 → SrcA


def test_bfp_operands_need_few_phases():
    # ISA guidance: BFP4 is exact in phase 0, BFP8 in phases 0-1 (SrcA has 5 bits per pass).
    g = torch.Generator().manual_seed(14)
    b4 = [F.quantize(torch.randn(32, 32, generator=g), DF.Bfp4_b) for _ in range(2)]
    assert torch.equal(F.fidelity_matmul(b4[0], b4[1], MF.LoFi), b4[0] @ b4[1])
    b8 = [F.quantize(torch.randn(32, 32, generator=g), DF.Bfp8_b) for _ in range(2)]
    assert torch.equal(F.fidelity_matmul(b8[0], b8[1], MF.HiFi2), b8[0] @ b8[1])
    assert not torch.equal(F.fidelity_matmul(b8[0], b8[1], MF.LoFi), b8[0] @ b8[1])


def test_fidelity_error_ordering():
    g = torch.Generator().manual_seed(15)
    in0 = F.quantize(torch.randn(64, 128, generator=g), DF.Float16_b)
    in1 = F.quantize(torch.randn(128, 64, generator=g), DF.Float16_b)
    exact = in0.double() @ in1.double()
    err = {f: (F.fidelity_matmul(in0, in1, f).double() - exact).abs().mean().item()
           for f in (MF.LoFi, MF.HiFi2, MF.HiFi2_B, MF.HiFi3, MF.HiFi4)}
    assert err[MF.LoFi] > err[MF.HiFi2] > err[MF.HiFi3] > err[MF.HiFi4]
    assert err[MF.LoFi] > err[MF.HiFi2_B] > err[MF.HiFi3]
    assert err[MF.HiFi4] < 1e-5


# ------------------------------------------------------------------------------------------------
# Dest accumulation
# ------------------------------------------------------------------------------------------------

def test_accumulate():
    x = torch.tensor([1.0 + 2 ** -8 + 2 ** -9, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 2e5, 2.7])
    assert F.accumulate(x, DF.Float32) is not None and torch.equal(F.accumulate(x, DF.Float32), x)
    assert F.accumulate(x, DF.Float16_b).tolist()[:3] == [1.0, 1.0, 1.0 + 2 ** -7]
    # Nearest-even: above half rounds up, a tie goes to the even neighbour.
    assert F.accumulate(x, DF.Float16_b, rounding="nearest").tolist()[:3] == [1.0 + 2 ** -7, 1.0, 1.0 + 2 ** -6]
    assert F.accumulate(x, DF.Float16)[3] == 131008.0
    assert F.accumulate(x, DF.Int32)[4] == 3.0
    with pytest.raises(InputError):
        F.accumulate(x, DF.Bfp8_b)
    with pytest.raises(InputError):
        F.accumulate(x, DF.Float16, rounding="up")


def test_quantize_in_place_overwrites_only_what_it_may(bfp_path):
    x = torch.randn(64, 64)
    want = F.quantize(x, DF.Float16_b)
    owned = x.clone()
    got = F.quantize(owned, DF.Float16_b, in_place=True)
    assert got.data_ptr() == owned.data_ptr() and same(owned, want)  # the caller's copy, cleared where it is
    transposed = x.clone().t()  # a transposed weight: cleared where it is, in its own layout
    got = F.quantize(transposed, DF.Float16_b, in_place=True)
    assert got.data_ptr() == transposed.data_ptr() and same(transposed, want.t()) and got.stride() == (1, 64)
    strided = x.clone()[:, ::2]  # not dense: a new tensor, the input untouched
    before = strided.clone()
    assert same(F.quantize(strided, DF.Float16_b, in_place=True), want[:, ::2]) and same(strided, before)
    bfp = x.clone()
    got = F.quantize(bfp, DF.Bfp8_b, in_place=True)
    assert same(got, F.quantize(x, DF.Bfp8_b))
    if bfp_path == "native":  # the kernel rounds the caller's tensor where it is
        assert got.data_ptr() == bfp.data_ptr()
    else:
        assert same(bfp, x)
    odd = x[:, :40].contiguous()  # 40 columns: padded to whole blocks, so rounded in a new tensor either way
    want = F.quantize(odd.clone(), DF.Bfp8_b)
    assert same(F.quantize(odd, DF.Bfp8_b, in_place=True), want) and same(odd, x[:, :40])


@pytest.mark.parametrize("df", BFP)
def test_native_bfp_split_across_threads_equals_one_thread(df, bfp_path, monkeypatch):
    # Large tensors are split into per-thread block ranges; the seams must not move a single bit.
    if bfp_path != "native":
        pytest.skip("the split is the native kernel's")
    x = torch.cat([mixed_tensor(seed=s, rows=64, cols=256) for s in range(5)]) * 1.0
    one = F.quantize(x, df)
    monkeypatch.setattr(native, "PARALLEL_MIN_BLOCKS", 7)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    assert same(F.quantize(x, df), one)
    assert same(F.quantize(x, df, truncate_bfp=True), F._bfp_exact(x.reshape(-1, 16), F.format_info(df), True).reshape(x.shape))


def _bfp8_b_in_child(x):
    return F.quantize(x, DF.Bfp8_b).numpy()  # not a tensor: torch would send it through shared memory


def test_native_bfp_threads_work_in_a_forked_child(bfp_path, monkeypatch):
    # A forked child inherits the thread pool's object but not its threads; it must start its own.
    if bfp_path != "native":
        pytest.skip("the thread pool is the native kernel's")
    import multiprocessing

    monkeypatch.setattr(native, "PARALLEL_MIN_BLOCKS", 7)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    x = mixed_tensor(seed=3, rows=64, cols=256)
    want = F.quantize(x, DF.Bfp8_b)  # the parent's pool is running now
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert same(torch.from_numpy(pool.apply_async(_bfp8_b_in_child, (x,)).get(timeout=60)), want)
