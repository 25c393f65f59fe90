"""Packing op rectangles onto one chip's logical worker grid (shared by the placer and the balancer's
epoch estimates, so both agree on what fits in an epoch).

Placement is first-fit in row-major order: an op goes to the top-most, then left-most, free position
where its rectangle fits — left to right along a row, wrapping to the next rows, and back-filling holes
left by taller or wider ops. Each grid row is a bitmask, so a fit test is a few integer operations.
"""

from __future__ import annotations

from typing import List, Optional, Tuple


class GridPacker:
    """Occupancy of one epoch's ``rows × cols`` worker grid."""

    __slots__ = ("rows", "cols", "_masks", "_full", "free")

    def __init__(self, rows: int, cols: int):
        self.rows = rows
        self.cols = cols
        self._masks = [0] * rows
        self._full = (1 << cols) - 1
        self.free = rows * cols

    @property
    def used(self) -> int:
        """Occupied cores."""
        return self.rows * self.cols - self.free

    def fits_at(self, row: int, col: int, h: int, w: int) -> bool:
        """True if an ``h × w`` rectangle at (row, col) is inside the grid and free."""
        if row < 0 or col < 0 or row + h > self.rows or col + w > self.cols:
            return False
        span = ((1 << w) - 1) << col
        return not any(self._masks[r] & span for r in range(row, row + h))

    def find(self, h: int, w: int) -> Optional[Tuple[int, int]]:
        """The first (row-major) position where an ``h × w`` rectangle fits, or None."""
        if h > self.rows or w > self.cols or h * w > self.free:
            return None
        full = self._full
        masks = self._masks
        for row in range(self.rows - h + 1):
            combined = 0
            for r in range(row, row + h):
                combined |= masks[r]
            if combined == full:
                continue
            free = ~combined & full
            run = free
            for i in range(1, w):
                run &= free >> i
                if not run:
                    break
            if run:
                return row, (run & -run).bit_length() - 1
        return None

    def occupy(self, row: int, col: int, h: int, w: int) -> None:
        """Mark an ``h × w`` rectangle at (row, col) used (the caller checked it is free)."""
        span = ((1 << w) - 1) << col
        for r in range(row, row + h):
            self._masks[r] |= span
        self.free -= h * w

    def place(self, h: int, w: int, *, start: Optional[Tuple[int, int]] = None, transpose: Optional[bool] = False
              ) -> Optional[Tuple[int, int, bool]]:
        """Place an op whose grid is ``h × w``: returns (row, col, transposed) or None if it does not fit.

        ``transpose``: False = as is; True = rotated (occupies ``w × h``); None = whichever orientation
        fits earlier in row-major order (as is on a tie). ``start`` pins the top-left core."""
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
                 allow_transpose: bool = False) -> List[int]:
    """Epoch index of each op when ``shapes`` (grid (h, w) per op, in schedule order) are packed
    greedily, opening a new epoch when an op does not fit or ``breaks[i]`` is set."""
    epochs: List[int] = []
    packer = GridPacker(rows, cols)
    epoch = 0
    transpose = None if allow_transpose else False
    for i, (h, w) in enumerate(shapes):
        if breaks[i] and packer.used:
            epoch += 1
            packer = GridPacker(rows, cols)
        if packer.place(h, w, transpose=transpose) is None:
            epoch += 1
            packer = GridPacker(rows, cols)
            packer.place(h, w, transpose=transpose)
        epochs.append(epoch)
    return epochs
