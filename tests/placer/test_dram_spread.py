"""Large streamed DRAM queues get a grid of buffers spread over the channels (placer/dram.py)."""

from pybuda.placer.dram import SPREAD_MIN_ENTRY_BYTES, _spread_grid


def test_large_single_buffer_queue_is_split_along_its_tile_rows():
    # ResNet-50's 224 x 7 x 1-tile input: 7 row-tiles per slice, 8 GS channels -> 7 buffers
    assert _spread_grid(7, 1, (1, 1), 8, 3_261_440) == (7, 1)


def test_split_refines_the_readers_grid_and_respects_the_channel_count():
    grid = _spread_grid(12, 32, (2, 1), 6, SPREAD_MIN_ENTRY_BYTES)
    assert grid[0] % 2 == 0 and 12 % grid[0] == 0 and 32 % grid[1] == 0
    assert grid[0] * grid[1] == 6


def test_small_or_already_spread_queues_keep_their_grid():
    assert _spread_grid(7, 1, (1, 1), 8, SPREAD_MIN_ENTRY_BYTES - 1) == (1, 1)
    assert _spread_grid(16, 16, (4, 2), 8, 10 * SPREAD_MIN_ENTRY_BYTES) == (4, 2)
