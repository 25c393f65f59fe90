"""The chip's byte layout of tiles in every data format (spec §2.1, §4.2), bit-exact with the BBE host model.

``pack_tile``/``unpack_tile`` (one 32×32 tile) and ``pack_tensor``/``unpack_tensor`` (many): a 16-byte
header whose dword 0 is the size in 16-byte units, the BFP exponent section, the datums in face order
(row-major for Raw formats) packed LSB-first, zero padding to a 32-byte multiple. The codes themselves
(what each format stores for a value) are :func:`pybuda.golden.formats.encode_datums`; this module only
lays them out.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from pybuda.dtypes import DataFormat
from pybuda.errors import InputError
from pybuda.golden.formats import (
    TILE_HEADER_BYTES,
    FormatInfo,
    decode_datums,
    encode_datums,
    format_info,
    tile_size_bytes,
)
from pybuda.golden.tiles import BLOCKS_PER_TILE, TILE_DATUMS, TILE_DIM, from_face_order, to_face_order

__all__ = ["pack_tile", "unpack_tile", "pack_tensor", "unpack_tensor"]


def _datum_order(tiles: torch.Tensor, info: FormatInfo) -> torch.Tensor:
    """``[T, 32, 32]`` → ``[T, 1024]`` in stored order (face order; row-major for Raw formats)."""
    return tiles.reshape(-1, TILE_DATUMS).contiguous() if info.row_major else to_face_order(tiles)


def _from_datum_order(flat: torch.Tensor, info: FormatInfo) -> torch.Tensor:
    return flat.reshape(-1, TILE_DIM, TILE_DIM) if info.row_major else from_face_order(flat)


def _bitpack(codes: np.ndarray, nbits: int) -> np.ndarray:
    """``[T, k]`` codes (each < 2**nbits) → ``[T, k*nbits/8]`` bytes, packed LSB-first in LE dwords."""
    t = codes.shape[0]
    if nbits == 32:
        return codes.astype("<u4").view(np.uint8).reshape(t, -1)
    if nbits == 16:
        return codes.astype("<u2").view(np.uint8).reshape(t, -1)
    c = codes.astype(np.uint8)
    if nbits == 8:
        return c
    per = 8 // nbits
    c = c.reshape(t, -1, per)
    out = np.zeros(c.shape[:2], dtype=np.uint8)
    for j in range(per):  # loop over the 2 or 4 sub-byte positions, not over datums
        out |= (c[:, :, j] << (j * nbits)).astype(np.uint8)
    return out


def _bitunpack(data: np.ndarray, nbits: int) -> np.ndarray:
    """Inverse of ``_bitpack``: ``[T, nbytes]`` uint8 → ``[T, k]`` int64 codes."""
    t = data.shape[0]
    if nbits == 32:
        return np.ascontiguousarray(data).view("<u4").reshape(t, -1).astype(np.int64)
    if nbits == 16:
        return np.ascontiguousarray(data).view("<u2").reshape(t, -1).astype(np.int64)
    if nbits == 8:
        return data.astype(np.int64)
    per = 8 // nbits
    mask = (1 << nbits) - 1
    parts = [(data >> (j * nbits)) & mask for j in range(per)]
    return np.stack(parts, axis=-1).reshape(t, -1).astype(np.int64)


def _pack_tiles(tiles: torch.Tensor, df: DataFormat, truncate_bfp: bool) -> np.ndarray:
    info = format_info(df)
    tiles = torch.as_tensor(tiles).detach().to(torch.float32).contiguous()
    if tiles.dim() < 2 or tuple(tiles.shape[-2:]) != (TILE_DIM, TILE_DIM):
        raise InputError(f"packing expects [..., 32, 32] tiles, got shape {tuple(tiles.shape)}")
    tiles = tiles.reshape(-1, TILE_DIM, TILE_DIM)
    t = tiles.shape[0]
    size = tile_size_bytes(df)
    if t == 0:
        return np.zeros((0, size), dtype=np.uint8)
    shared, codes = encode_datums(_datum_order(tiles, info), info, truncate_bfp)
    out = np.zeros((t, size), dtype=np.uint8)
    out[:, 0:4] = np.frombuffer(np.uint32(size // 16).astype("<u4").tobytes(), dtype=np.uint8)
    pos = TILE_HEADER_BYTES
    if shared is not None:
        # One exponent byte per block, 4 per dword LSB-first == byte order in memory.
        out[:, pos:pos + BLOCKS_PER_TILE] = shared.numpy().astype(np.uint8)
        pos += BLOCKS_PER_TILE
    data = _bitpack(codes.numpy(), info.datum_bits)
    out[:, pos:pos + data.shape[1]] = data
    return out


def _unpack_tiles(raw: np.ndarray, df: DataFormat) -> torch.Tensor:
    info = format_info(df)
    size = tile_size_bytes(df)
    if raw.shape[0] == 0:
        return torch.zeros(0, TILE_DIM, TILE_DIM)
    header = np.ascontiguousarray(raw[:, 0:4]).view("<u4").reshape(-1)
    if not np.all(header == size // 16):
        bad = int(np.flatnonzero(header != size // 16)[0])
        raise InputError(f"tile {bad}: header says {int(header[bad]) * 16} bytes, "
                         f"but a {info.df.name} tile is {size} bytes")
    pos = TILE_HEADER_BYTES
    shared = None
    if info.is_bfp:
        shared = torch.from_numpy(raw[:, pos:pos + BLOCKS_PER_TILE].astype(np.int64))
        pos += BLOCKS_PER_TILE
    nbytes = TILE_DATUMS * info.datum_bits // 8
    codes = torch.from_numpy(_bitunpack(raw[:, pos:pos + nbytes], info.datum_bits))
    return _from_datum_order(decode_datums(shared, codes, info), info)


def pack_tile(tile: torch.Tensor, df: DataFormat, *, truncate_bfp: bool = False) -> bytes:
    """Pack one 32×32 tile into the exact device byte layout of format ``df`` (spec §2.1, §4.2).

    Layout: 16-byte header (dword 0 = tile size / 16, dwords 1-3 zero); for BFP formats 64 shared
    exponent bytes (block order = face 0 rows 0-15, face 1, face 2, face 3); the datums in face order
    (row-major for Raw formats) packed LSB-first in little-endian dwords (Bfp8: sign in bit 7, Bfp4: bit
    3, Bfp2: bit 1; Int8/Int32 sign-magnitude; Float16 = fp16a bits); zero padding to ``tile_size_bytes``.
    """
    tile = torch.as_tensor(tile)
    if tuple(tile.shape) != (TILE_DIM, TILE_DIM):
        raise InputError(f"pack_tile expects a 32x32 tile, got shape {tuple(tile.shape)}")
    return _pack_tiles(tile, df, truncate_bfp).tobytes()


def unpack_tile(data: bytes, df: DataFormat) -> torch.Tensor:
    """Decode one packed tile (``pack_tile``'s layout) into a float32 32×32 tensor."""
    size = tile_size_bytes(df)
    if len(data) != size:
        raise InputError(f"a packed {format_info(df).df.name} tile is {size} bytes, got {len(data)}")
    raw = np.frombuffer(bytes(data), dtype=np.uint8).reshape(1, size)
    return _unpack_tiles(raw, df)[0]


def pack_tensor(tiles: torch.Tensor, df: DataFormat, *, truncate_bfp: bool = False) -> bytes:
    """Pack a tilized tensor ``[..., 32, 32]`` (e.g. ``tiles.tilize`` output) tile after tile, in the
    order of its leading dimensions; ``len(result) == num_tiles * tile_size_bytes(df)``."""
    return _pack_tiles(torch.as_tensor(tiles), df, truncate_bfp).tobytes()


def unpack_tensor(data: bytes, df: DataFormat, shape: Optional[Sequence[int]] = None) -> torch.Tensor:
    """Inverse of ``pack_tensor``. ``shape`` is the tilized shape ``[..., 32, 32]`` to return (default
    ``[num_tiles, 32, 32]``)."""
    size = tile_size_bytes(df)
    if len(data) % size:
        raise InputError(f"{len(data)} bytes is not a whole number of {size}-byte "
                         f"{format_info(df).df.name} tiles")
    raw = np.frombuffer(bytes(data), dtype=np.uint8).reshape(-1, size)
    out = _unpack_tiles(raw, df)
    if shape is None:
        return out
    shape = tuple(int(d) for d in shape)
    if len(shape) < 2 or shape[-2:] != (TILE_DIM, TILE_DIM) or int(np.prod(shape)) != out.numel():
        raise InputError(f"cannot view {out.shape[0]} tiles as shape {shape}")
    return out.reshape(shape)
