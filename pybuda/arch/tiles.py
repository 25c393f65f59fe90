"""Tile geometry and the packed size of one tile in each data format.

A packed tile (netlist_backend_spec §2.1) is a 16-byte header, then for block-float formats one shared
exponent byte per 16 datums (one row of a 16×16 face), then the datums, padded up to 32-byte alignment.
Tiny tiles (h×32 with h < 32, or 32×16) exist on Wormhole B0 and later only.
"""

from __future__ import annotations

from typing import Tuple

from pybuda.dtypes import DataFormat

TILE_HEADER_BYTES = 16
TILE_ALIGNMENT_BYTES = 32
DEFAULT_TILE_DIM: Tuple[int, int] = (32, 32)

#: Tile shapes (rows, cols) a netlist may name in ``tile_dim``; Grayskull accepts only 32×32.
TINY_TILE_DIMS: Tuple[Tuple[int, int], ...] = ((1, 32), (2, 32), (4, 32), (8, 32), (16, 32), (32, 16))
LEGAL_TILE_DIMS: Tuple[Tuple[int, int], ...] = TINY_TILE_DIMS + (DEFAULT_TILE_DIM,)

# Bits per datum in the data section; BFP mantissas are sign + magnitude bits, exponent stored apart.
_DATUM_BITS = {
    DataFormat.Float32: 32, DataFormat.Int32: 32, DataFormat.RawUInt32: 32,
    DataFormat.Float16: 16, DataFormat.Float16_b: 16, DataFormat.UInt16: 16, DataFormat.RawUInt16: 16,
    DataFormat.Bfp8: 8, DataFormat.Bfp8_b: 8,
    DataFormat.Bfp4: 4, DataFormat.Bfp4_b: 4,
    DataFormat.Bfp2: 2, DataFormat.Bfp2_b: 2,
    DataFormat.Lf8: 8, DataFormat.Fp8_e4m3: 8, DataFormat.Int8: 8, DataFormat.UInt8: 8, DataFormat.RawUInt8: 8,
}

# These combinations are rejected by the backend because the packed tile would not be 32-byte aligned.
_UNALIGNED_TINY = {
    (DataFormat.Bfp2, (1, 32)), (DataFormat.Bfp2_b, (1, 32)),
    (DataFormat.Bfp2, (2, 32)), (DataFormat.Bfp2_b, (2, 32)),
    (DataFormat.Bfp4, (1, 32)), (DataFormat.Bfp4_b, (1, 32)),
}


def is_legal_tile_dim(tile_dim: Tuple[int, int], df: DataFormat | None = None) -> bool:
    """True if ``tile_dim`` is a tile shape the backend knows and, if ``df`` is given, can pack in ``df``."""
    tile_dim = tuple(tile_dim)
    if tile_dim not in LEGAL_TILE_DIMS:
        return False
    return df is None or (df, tile_dim) not in _UNALIGNED_TINY


def tile_size_bytes(df: DataFormat, tile_dim: Tuple[int, int] = DEFAULT_TILE_DIM) -> int:
    """Bytes of one packed tile of format ``df`` and shape ``tile_dim``, header and padding included.

    32×32 tiles: Float32 4128, Float16/Float16_b 2080, Bfp8 1120, Bfp4 608, Bfp2 352, 8-bit formats 1056.
    Raises ValueError for an unknown format or an illegal tile shape/format combination.
    """
    df = DataFormat(df)
    if df not in _DATUM_BITS:
        raise ValueError(f"data format {df.name} has no tile size")
    tile_dim = tuple(tile_dim)
    if not is_legal_tile_dim(tile_dim, df):
        raise ValueError(f"tile_dim {list(tile_dim)} is not legal for {df.name}")
    datums = tile_dim[0] * tile_dim[1]
    size = TILE_HEADER_BYTES + datums * _DATUM_BITS[df] // 8
    if df.is_bfp:
        # One exponent byte per 16 datums, but the section is never smaller than 16 bytes.
        size += max(16, datums // 16)
    return -(-size // TILE_ALIGNMENT_BYTES) * TILE_ALIGNMENT_BYTES
