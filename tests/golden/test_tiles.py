"""Tile layout: padding, tilize/untilize, face order, BFP blocks (netlist spec §2.1-2.2)."""

import pytest
import torch

from pybuda.golden import tiles as T
from pybuda.errors import InputError


def test_tilize_puts_each_32x32_block_in_its_tile():
    t = torch.arange(2 * 3 * 64 * 96, dtype=torch.float32).reshape(2, 3, 64, 96)
    tl = T.tilize(t)
    assert tl.shape == (2, 3, 2, 3, 32, 32)
    assert tl.is_contiguous()
    for r in range(2):
        for c in range(3):
            assert torch.equal(tl[1, 2, r, c], t[1, 2, 32 * r:32 * r + 32, 32 * c:32 * c + 32])
    assert torch.equal(T.untilize(tl), t)


def test_tilize_any_leading_dims():
    t = torch.randn(64, 32)
    assert T.tilize(t).shape == (2, 1, 32, 32)
    assert torch.equal(T.untilize(T.tilize(t)), t)


def test_tilize_rejects_unpadded():
    with pytest.raises(InputError, match="multiples of 32"):
        T.tilize(torch.zeros(1, 1, 30, 32))
    with pytest.raises(InputError):
        T.untilize(torch.zeros(2, 32, 32))


@pytest.mark.parametrize("shape, padded", [
    ((), (1, 1, 32, 32)),
    ((5,), (1, 1, 32, 32)),
    ((33, 70), (1, 1, 64, 96)),
    ((3, 32, 32), (1, 3, 32, 32)),
    ((2, 3, 1, 40), (2, 3, 32, 64)),
    ((2, 2, 3, 4, 5), (4, 3, 32, 32)),
])
def test_pad_and_unpad(shape, padded):
    x = torch.randn(shape)
    p = T.pad_to_tiles(x, value=7.0)
    assert tuple(p.shape) == padded == T.padded_shape(shape)
    assert torch.equal(T.unpad(p, shape), x)
    # The padding holds the pad value, and only the padding.
    assert int((p == 7.0).sum()) == p.numel() - x.numel()


def test_pad_is_a_view_when_aligned():
    x = torch.randn(2, 64, 32)
    p = T.pad_to_tiles(x)
    assert p.data_ptr() == x.data_ptr() and p.shape == (1, 2, 64, 32)


def test_unpad_rejects_wrong_shape():
    with pytest.raises(InputError):
        T.unpad(torch.zeros(1, 1, 32, 32), (40, 3))
    with pytest.raises(InputError):
        T.unpad(torch.zeros(32, 32), (3, 3))


def test_face_order_matches_spec():
    tile = torch.arange(1024, dtype=torch.float32).reshape(32, 32)  # value = r * 32 + c
    fo = T.to_face_order(tile)
    expected = []
    for face in range(4):
        fr, fc = divmod(face, 2)
        for i in range(16):
            for j in range(16):
                expected.append((fr * 16 + i) * 32 + fc * 16 + j)
    assert fo.tolist() == expected
    assert torch.equal(T.from_face_order(fo), tile)
    for r, c in [(0, 0), (0, 17), (15, 15), (16, 0), (31, 31), (5, 20)]:
        assert fo[T.face_order_index(r, c)] == r * 32 + c


def test_faces_and_face_rows():
    tiles = torch.randn(3, 2, 32, 32)
    faces = T.tile_to_faces(tiles)
    assert faces.shape == (3, 2, 4, 16, 16)
    assert torch.equal(faces[..., 1, :, :], tiles[..., 0:16, 16:32])
    assert torch.equal(faces[..., 2, :, :], tiles[..., 16:32, 0:16])
    assert torch.equal(T.faces_to_tile(faces), tiles)
    rows = T.face_rows(tiles)
    assert rows.shape == (3, 2, 64, 16)
    # Block b = face b // 16, row b % 16 of that face; i.e. a 16-column segment of one tile row.
    for b in (0, 15, 16, 33, 63):
        face, i = divmod(b, 16)
        r, c0 = (face // 2) * 16 + i, (face % 2) * 16
        assert torch.equal(rows[..., b, :], tiles[..., r, c0:c0 + 16])
        assert T.block_index(r, c0 + 5) == b


def test_index_helpers_reject_out_of_tile():
    with pytest.raises(InputError):
        T.face_order_index(32, 0)
