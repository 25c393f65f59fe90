"""Packing op rectangles onto one chip's logical worker grid (shared by the placer and the balancer's
epoch estimates, so both agree on what fits in an epoch).

Placement is first-fit in row-major order: an op goes to the top-most, then left-most, free position
where its rectangle fits — left to right along a row, wrapping to the next rows, and back-filling holes
left by taller or wider ops.

The occupancy is one integer, bit ``row * cols + col`` per core, so row-major order is bit order: the
first fit of an ``h × w`` rectangle is the lowest set bit of "rectangle of free cores starting here",
which a handful of whole-grid shifts compute (:meth:`GridPacker.find`) instead of a scan over rows and
columns. The balancer packs tens of thousands of candidate epochs per compile, so this is hot.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Dict, List, Optional, Tuple

#: GridPacker's placement memo: (occupancy, h, w, start, transpose) -> (spot, occupancy after)
PlacementMemo = Dict[Tuple[Any, ...], Tuple[Optional[Tuple[int, int, bool]], int]]


@lru_cache(maxsize=None)
def _shape_masks(rows: int, cols: int, h: int, w: int) -> Tuple[int, int]:
    """(rectangle, starts) bit masks of an ``h × w`` rectangle on a ``rows × cols`` grid: the rectangle's
    cores when its top-left core is core 0, and the top-left cores where it lies inside the grid."""
    row_span = (1 << w) - 1
    rect = 0
    for r in range(h):
        rect |= row_span << (r * cols)
    row_starts = (1 << (cols - w + 1)) - 1
    starts = 0
    for r in range(rows - h + 1):
        starts |= row_starts << (r * cols)
    return rect, starts


class GridPacker:
    """Occupancy of one epoch's ``rows × cols`` worker grid.

    ``memo``: a dict shared by packers of the same grid size that remembers each placement by the
    occupancy it was asked on. The balancer packs the same op sequences into its candidate epochs again
    and again (every target starts from an empty grid, and a transformer's layers repeat), so nine in ten
    placements are answered from it.
    """

    __slots__ = ("rows", "cols", "occupied", "free", "memo")

    def __init__(self, rows: int, cols: int, memo: Optional[PlacementMemo] = None):
        self.rows = rows
        self.cols = cols
        #: bit ``row * cols + col`` is set when that core is taken
        self.occupied = 0
        self.free = rows * cols
        self.memo = memo

    @property
    def used(self) -> int:
        """Occupied cores."""
        return self.rows * self.cols - self.free

    def fits_at(self, row: int, col: int, h: int, w: int) -> bool:
        """True if an ``h × w`` rectangle at (row, col) is inside the grid and free."""
        if row < 0 or col < 0 or row + h > self.rows or col + w > self.cols:
            return False
        rect = _shape_masks(self.rows, self.cols, h, w)[0]
        return not (self.occupied >> (row * self.cols + col)) & rect

    def find(self, h: int, w: int) -> Optional[Tuple[int, int]]:
        """The first (row-major) position where an ``h × w`` rectangle fits, or None."""
        if h > self.rows or w > self.cols or h * w > self.free:
            return None
        cols = self.cols
        # blocked: bit b set when a core in the h rows from b's row down (same column) is taken.
        # Each step doubles the rows folded in (at most h), so this is O(log h) shifts.
        blocked = self.occupied
        span = 1
        while span < h:
            step = min(span, h - span)
            blocked |= blocked >> (step * cols)
            span += step
        # run: bit b set when the w columns from b on are free in all those rows (O(log w) shifts);
        # the infinite ones of ~blocked above the grid are cut off by the starts mask.
        run = ~blocked
        span = 1
        while span < w:
            step = min(span, w - span)
            run &= run >> step
            span += step
        run &= _shape_masks(self.rows, cols, h, w)[1]
        if not run:
            return None
        return divmod((run & -run).bit_length() - 1, cols)

    def occupy(self, row: int, col: int, h: int, w: int) -> None:
        """Mark an ``h × w`` rectangle at (row, col) used (the caller checked it is free)."""
        self.occupied |= _shape_masks(self.rows, self.cols, h, w)[0] << (row * self.cols + col)
        self.free -= h * w

    def place(self, h: int, w: int, *, start: Optional[Tuple[int, int]] = None, transpose: Optional[bool] = False
              ) -> Optional[Tuple[int, int, bool]]:
        """Place an op whose grid is ``h × w``: returns (row, col, transposed) or None if it does not fit.

        ``transpose``: False = as is; True = rotated (occupies ``w × h``); None = whichever orientation
        fits earlier in row-major order (as is on a tie). ``start`` pins the top-left core."""
        memo = self.memo
        if memo is None:
            return self._place(h, w, start, transpose)
        key = (self.occupied, h, w, start, transpose)
        hit = memo.get(key)
        if hit is None:
            spot = self._place(h, w, start, transpose)
            memo[key] = (spot, self.occupied)
            return spot
        spot, occupied = hit
        if spot is not None:
            self.occupied = occupied
            self.free -= h * w
        return spot

    def _place(self, h: int, w: int, start: Optional[Tuple[int, int]], transpose: Optional[bool]
               ) -> Optional[Tuple[int, int, bool]]:
        options = [False] if transpose is False else [True] if transpose is True else [False, True]
        best: Optional[Tuple[int, int, bool]] = None
        for tr in options:
            fh, fw = (w, h) if tr else (h, w)
            if start is not None:
                pos = start if self.fits_at(start[0], start[1], fh, fw) else None
            else:
                pos = self.find(fh, fw)
            if pos is not None and (best is None or pos < best[:2]):
                best = (pos[0], pos[1], tr)
        if best is not None:
            fh, fw = (w, h) if best[2] else (h, w)
            self.occupy(best[0], best[1], fh, fw)
        return best


def fits_empty(rows: int, cols: int, h: int, w: int, transpose: Optional[bool]) -> bool:
    """Whether an ``h × w`` op can be placed on an empty ``rows × cols`` grid at all."""
    straight = h <= rows and w <= cols
    turned = w <= rows and h <= cols
    if transpose is True:
        return turned
    if transpose is None:
        return straight or turned
    return straight


def count_epochs(shapes: List[Tuple[int, int]], breaks: List[bool], rows: int, cols: int,
                 allow_transpose: bool = False, memo: Optional[PlacementMemo] = None) -> List[int]:
    """Epoch index of each op when ``shapes`` (grid (h, w) per op, in schedule order) are packed
    greedily, opening a new epoch when an op does not fit or ``breaks[i]`` is set (``memo``: see
    :class:`GridPacker`)."""
    epochs: List[int] = []
    packer = GridPacker(rows, cols, memo)
    epoch = 0
    transpose = None if allow_transpose else False
    for i, (h, w) in enumerate(shapes):
        if breaks[i] and packer.used:
            epoch += 1
            packer = GridPacker(rows, cols, memo)
        if packer.place(h, w, transpose=transpose) is None:
            epoch += 1
            packer = GridPacker(rows, cols, memo)
            packer.place(h, w, transpose=transpose)
        epochs.append(epoch)
    return epochs
