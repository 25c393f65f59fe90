"""Tile layout of the simulated chip: 32×32 tiles made of four 16×16 faces.

A device tensor has shape ``[w, z, R, C]`` with ``R`` and ``C`` multiples of 32 (netlist spec §2.2). It is
stored as tiles of 32×32 datums; inside a tile the datums are kept in *face order* (spec §2.1):

- face f0 = rows 0-15, cols 0-15; f1 = rows 0-15, cols 16-31; f2 = rows 16-31, cols 0-15;
  f3 = rows 16-31, cols 16-31;
- each face row-major, so face order index = ``face * 256 + (r % 16) * 16 + (c % 16)``.

A *face row* (16 consecutive datums of one face) is one block of the block-floating-point formats: a tile
holds 64 blocks, and block ``b`` of a tile is face ``b // 16``, row ``b % 16`` of that face. Because a face
row is 16 consecutive columns of one tensor row starting at a multiple of 16, the BFP blocks of a
tile-padded tensor are exactly its row segments ``[r, 16k : 16k + 16]`` — ``formats.quantize`` relies on
that to skip the tilize step (``face_rows`` is the explicit layout the packer uses).

Every function here is a reshape/permute: no Python loops over tiles.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import torch

from pybuda.errors import InputError

TILE_DIM = 32
"""Rows (and columns) of a tile."""

FACE_DIM = 16
"""Rows (and columns) of a face."""

TILE_DATUMS = TILE_DIM * TILE_DIM
"""Datums in one tile (1024)."""

FACE_DATUMS = FACE_DIM * FACE_DIM
"""Datums in one face (256)."""

BLOCK_DATUMS = FACE_DIM
"""Datums in one BFP block = one face row (16)."""

BLOCKS_PER_TILE = TILE_DATUMS // BLOCK_DATUMS
"""BFP blocks (shared exponents) per tile (64)."""


def _ceil_to(n: int, m: int) -> int:
    return -(-n // m) * m


def to_4d(t: torch.Tensor) -> torch.Tensor:
    """View ``t`` as the 4-D ``[w, z, R, C]`` shape of a device tensor.

    Missing leading dimensions become 1 (a vector is one row, a scalar is 1×1); dimensions beyond four
    are folded into ``w``, since the backend only knows four.
    """
    shape = tuple(t.shape)
    if len(shape) > 4:
        return t.reshape((-1,) + shape[-3:])
    return t.reshape((1,) * (4 - len(shape)) + shape)


def padded_shape(shape: Sequence[int]) -> Tuple[int, int, int, int]:
    """The 4-D ``[w, z, R, C]`` shape that ``pad_to_tiles`` makes of a tensor of ``shape``."""
    shape = tuple(int(d) for d in shape)
    four = (1,) * (4 - len(shape)) + shape if len(shape) <= 4 else (
        int(torch.Size(shape[:-3]).numel()),) + shape[-3:]
    w, z, r, c = four
    return (w, z, _ceil_to(r, TILE_DIM), _ceil_to(c, TILE_DIM))


def pad_to_tiles(t: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """Make ``t`` 4-D (``to_4d``) and pad its last two dimensions up to multiples of 32 with ``value``.

    Returns a view of ``t`` when no padding is needed. ``unpad(result, t.shape)`` undoes it.
    """
    t4 = to_4d(t)
    r, c = t4.shape[-2:]
    pr, pc = _ceil_to(r, TILE_DIM) - r, _ceil_to(c, TILE_DIM) - c
    if pr == 0 and pc == 0:
        return t4
    return torch.nn.functional.pad(t4, (0, pc, 0, pr), value=value)


def unpad(t: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Undo ``pad_to_tiles``: cut the 4-D padded ``t`` back to ``shape`` (the original tensor's shape)."""
    shape = tuple(int(d) for d in shape)
    if t.dim() != 4:
        raise InputError(f"unpad expects a 4-D padded tensor, got shape {tuple(t.shape)}")
    want = padded_shape(shape)
    if tuple(t.shape[:2]) != want[:2] or t.shape[2] < _rows_of(shape) or t.shape[3] < _cols_of(shape):
        raise InputError(f"cannot unpad a tensor of shape {tuple(t.shape)} to {shape}")
    return t[:, :, : _rows_of(shape), : _cols_of(shape)].reshape(shape)


def _rows_of(shape: Tuple[int, ...]) -> int:
    return shape[-2] if len(shape) >= 2 else 1


def _cols_of(shape: Tuple[int, ...]) -> int:
    return shape[-1] if len(shape) >= 1 else 1


def _check_tile_multiple(t: torch.Tensor, what: str) -> None:
    if t.dim() < 2 or t.shape[-1] % TILE_DIM or t.shape[-2] % TILE_DIM:
        raise InputError(f"{what} needs the last two dimensions to be multiples of {TILE_DIM}, "
                         f"got shape {tuple(t.shape)}; pad with pad_to_tiles first")


def tilize(t: torch.Tensor) -> torch.Tensor:
    """Split ``[..., R, C]`` (R, C multiples of 32) into tiles: ``[..., rt, ct, 32, 32]`` (contiguous).

    For a device tensor ``[w, z, R, C]`` the result is ``[w, z, rt, ct, 32, 32]``, tiles in row-major
    tile order; each tile is still row-major (use ``to_face_order`` for the stored datum order).
    """
    _check_tile_multiple(t, "tilize")
    *lead, r, c = t.shape
    rt, ct = r // TILE_DIM, c // TILE_DIM
    n = len(lead)
    tiles = t.reshape(*lead, rt, TILE_DIM, ct, TILE_DIM)
    perm = list(range(n)) + [n, n + 2, n + 1, n + 3]
    return tiles.permute(perm).contiguous()


def untilize(tiles: torch.Tensor) -> torch.Tensor:
    """Inverse of ``tilize``: ``[..., rt, ct, 32, 32]`` → ``[..., rt*32, ct*32]``."""
    if tiles.dim() < 4 or tuple(tiles.shape[-2:]) != (TILE_DIM, TILE_DIM):
        raise InputError(f"untilize expects [..., rt, ct, 32, 32], got shape {tuple(tiles.shape)}")
    *lead, rt, ct, _, _ = tiles.shape
    n = len(lead)
    perm = list(range(n)) + [n, n + 2, n + 1, n + 3]
    return tiles.permute(perm).reshape(*lead, rt * TILE_DIM, ct * TILE_DIM)


def _check_tile(tiles: torch.Tensor, what: str) -> None:
    if tiles.dim() < 2 or tuple(tiles.shape[-2:]) != (TILE_DIM, TILE_DIM):
        raise InputError(f"{what} expects [..., 32, 32] tiles, got shape {tuple(tiles.shape)}")


def tile_to_faces(tiles: torch.Tensor) -> torch.Tensor:
    """``[..., 32, 32]`` tiles → ``[..., 4, 16, 16]`` faces f0..f3 (each row-major)."""
    _check_tile(tiles, "tile_to_faces")
    lead = tiles.shape[:-2]
    n = len(lead)
    faces = tiles.reshape(*lead, 2, FACE_DIM, 2, FACE_DIM)
    perm = list(range(n)) + [n, n + 2, n + 1, n + 3]
    return faces.permute(perm).reshape(*lead, 4, FACE_DIM, FACE_DIM)


def faces_to_tile(faces: torch.Tensor) -> torch.Tensor:
    """``[..., 4, 16, 16]`` faces → ``[..., 32, 32]`` tiles (inverse of ``tile_to_faces``)."""
    if faces.dim() < 3 or tuple(faces.shape[-3:]) != (4, FACE_DIM, FACE_DIM):
        raise InputError(f"faces_to_tile expects [..., 4, 16, 16], got shape {tuple(faces.shape)}")
    lead = faces.shape[:-3]
    n = len(lead)
    quads = faces.reshape(*lead, 2, 2, FACE_DIM, FACE_DIM)
    perm = list(range(n)) + [n, n + 2, n + 1, n + 3]
    return quads.permute(perm).reshape(*lead, TILE_DIM, TILE_DIM)


def to_face_order(tiles: torch.Tensor) -> torch.Tensor:
    """``[..., 32, 32]`` tiles → ``[..., 1024]`` datums in stored (face) order, contiguous."""
    return tile_to_faces(tiles).reshape(*tiles.shape[:-2], TILE_DATUMS).contiguous()


def from_face_order(flat: torch.Tensor) -> torch.Tensor:
    """``[..., 1024]`` datums in face order → ``[..., 32, 32]`` row-major tiles."""
    if flat.dim() < 1 or flat.shape[-1] != TILE_DATUMS:
        raise InputError(f"from_face_order expects [..., 1024], got shape {tuple(flat.shape)}")
    return faces_to_tile(flat.reshape(*flat.shape[:-1], 4, FACE_DIM, FACE_DIM))


def face_rows(tiles: torch.Tensor) -> torch.Tensor:
    """``[..., 32, 32]`` tiles → ``[..., 64, 16]``: the 64 BFP blocks (face rows) of each tile, in order."""
    return to_face_order(tiles).reshape(*tiles.shape[:-2], BLOCKS_PER_TILE, BLOCK_DATUMS)


def face_order_index(r: int, c: int) -> int:
    """Position of datum (r, c) of a tile in face order."""
    if not (0 <= r < TILE_DIM and 0 <= c < TILE_DIM):
        raise InputError(f"datum ({r}, {c}) is outside a {TILE_DIM}x{TILE_DIM} tile")
    face = (r // FACE_DIM) * 2 + c // FACE_DIM
    return face * FACE_DATUMS + (r % FACE_DIM) * FACE_DIM + c % FACE_DIM


def block_index(r: int, c: int) -> int:
    """BFP block (face row, = exponent byte index in a packed tile) holding datum (r, c) of a tile."""
    return face_order_index(r, c) // BLOCK_DATUMS
