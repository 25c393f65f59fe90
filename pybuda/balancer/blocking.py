"""Block arithmetic of op layouts: the divisors a grid or block may take, the ublocks of a per-core block,
and the padded options of an awkward dimension. Pure functions of tile counts, used by the legalizer
(:mod:`pybuda.balancer.legalizer`) and the DRAM placer."""

from __future__ import annotations

from functools import lru_cache
from typing import List, Sequence, Tuple


@lru_cache(maxsize=None)
def divisors(n: int) -> Tuple[int, ...]:
    """Positive divisors of ``n``, ascending."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return tuple(small + large[::-1])


@lru_cache(maxsize=None)
def ublock_candidates(rows: int, cols: int, dest_tiles: int, prefer_wide: bool = True) -> Tuple[Tuple[int, int], ...]:
    """Ublocks (rt, ct) of a per-core block of ``rows × cols`` tiles whose sides divide the block and
    whose area fits ``dest_tiles``, best first: larger area, then wider (a matmul's unpack cost falls
    with ublock_ct, spec §6.1 V2) or, with ``prefer_wide=False``, taller."""
    cands = [(ur, uc) for ur in divisors(rows) if ur <= dest_tiles
             for uc in divisors(cols) if ur * uc <= dest_tiles]
    cands.sort(key=lambda u: (-(u[0] * u[1]), -(u[1] if prefer_wide else u[0])))
    return tuple(cands)


def pick_ublock(rows: int, cols: int, dest_tiles: int, prefer_wide: bool = True) -> Tuple[int, int]:
    """The preferred ublock of a ``rows × cols`` per-core block (see :func:`ublock_candidates`)."""
    return ublock_candidates(rows, cols, dest_tiles, prefer_wide)[0]


#: Most K blocks a sparse matmul's padded-K layouts are tried with (see :func:`sparse_u_kts`).
SPARSE_MAX_K_BLOCKS = 16


def sparse_u_kts(k: int, u_kts: Sequence[int]) -> Tuple[int, ...]:
    """u_kt options of a sparse matmul, in order of preference (the legalizer takes the first that fits):
    the exact ones (``u_kts``, divisors of K) that split K into at most :data:`SPARSE_MAX_K_BLOCKS` blocks;
    then, for each block count up to that, the smallest u_kt covering K in so many blocks, which pads K
    (in1's rows) with zero tiles the index never names; then the other exact ones. So a K without a
    convenient divisor still streams in few strips: Inception-v4's 386-tile activation (2·193) went in
    193 strips of 2, and BBE's sparse formula charges decode per strip."""
    exact = sorted(set(u_kts), reverse=True)
    few = [u for u in exact if k // u <= SPARSE_MAX_K_BLOCKS]
    padded = sorted({-(-k // m) for m in range(1, min(k, SPARSE_MAX_K_BLOCKS) + 1)} - set(exact), reverse=True)
    return tuple(few + padded + [u for u in exact if u not in few])


def padded_sides(n: int, max_side: int, can_pad: bool) -> List[Tuple[int, int]]:
    """(grid side, padded size) options of a dimension of ``n`` tiles: the exact divisors, and with
    ``can_pad`` every side up to ``max_side`` with ``n`` rounded up to a multiple of it."""
    if not can_pad:
        return [(g, n) for g in divisors(n) if g <= max_side]
    return [(g, -(-n // g) * g) for g in range(1, min(n, max_side) + 1)]
