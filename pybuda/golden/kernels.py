"""What each netlist op computes, on device tensors (the TMs on its inputs: :mod:`pybuda.netlist.tms`).

A device tensor here is float32 ``[N, t, R, C]``: N inputs of one ``execute`` processed together (the
golden batches over ``input_count``, which is numerically identical to running them one by one),
``t`` slices, and R x C datums with R = 32·rt, C = 32·ct. Formats are applied by the caller
(:mod:`pybuda.golden.device`); the functions here take already-unpacked values and return the math
result before packing, except that multiplies go through the fidelity model when ``fidelity`` is given.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch

from pybuda.golden import blas, formats
from pybuda.errors import NetlistError
from pybuda.netlist import model as nl
# The TMs on op inputs are pybuda.netlist.tms (one implementation on [..., z, R, C], the golden's
# [N, t, R, C] included): the device applies them before an op runs.
from pybuda.netlist.device_ops import DEVICE_OPS, find_device_op
from pybuda.dtypes import DataFormat, MathFidelity

TILE = 32


# --------------------------------------------------------------------------------------------------
# Op math
# --------------------------------------------------------------------------------------------------

# Fidelity (spec §4.6). The executed phases of one fidelity factor into at most two products of masked
# operands (see ``formats.fidelity_matmul``); each operand contributes one or two masked "pieces":
#   LoFi {0}: Bhi·Ahi   HiFi2 {0,1}: Bhi·Aused   HiFi2_B {0,2}: Bused·Ahi
#   HiFi3 {0,1,2}: Bhi·Aused + Blo·Ahi   HiFi4: Bused·Aused
# Splitting per operand lets the golden compute (and cache) the pieces of a constant operand once.
_A_HI, _A_USED = 0xFFF80000, 0xFFFFC000
_B_HI, _B_USED = 0xFFFE0000, 0xFFFFE000
_PIECES = {  # phases -> (SrcA masks, SrcB masks); "lo" is used minus hi
    (0,): ((_A_HI,), (_B_HI,)),
    (0, 1): ((_A_USED,), (_B_HI,)),
    (0, 2): ((_A_HI,), (_B_USED,)),
    (0, 1, 2): ((_A_USED, _A_HI), (_B_HI, "lo")),
    (0, 1, 2, 3): ((_A_USED,), (_B_USED,)),
}


def _i32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


_MASK_CONSTS: Dict[int, torch.Tensor] = {}


def _bitmask(x: torch.Tensor, mask: int) -> torch.Tensor:
    """``x`` with its float32 bit patterns ANDed with ``mask``. A broadcast operand (stride 0, e.g. a
    ``broadcast: {z: ...}`` TM) is masked once and broadcast again, so that it stays a broadcast (the
    matmul then runs its shared left operand as one GEMM)."""
    if x.dtype != torch.float32:
        x = x.to(torch.float32)
    base = formats.broadcast_base(x)
    if base is not x:
        return _bitmask(base, mask).expand(x.shape)
    const = _MASK_CONSTS.get(mask)
    if const is None:  # a 0-dim int32 operand: no per-call conversion of a Python int
        const = _MASK_CONSTS[mask] = torch.tensor(_i32(mask), dtype=torch.int32)
    return torch.bitwise_and(x.view(torch.int32), const).view(torch.float32)


_KEPT_FRACTION_BITS = {_A_HI: 4, _A_USED: 9, _B_HI: 6, _B_USED: 10}


def fraction_bits(df) -> int:
    """Most mantissa bits after the leading one that a value stored in ``df`` can have (23 if unknown).
    A fidelity mask keeping at least that many bits leaves such values unchanged."""
    if df is None:
        return 23
    info = formats.format_info(df)
    if info.df == DataFormat.Float32:
        return 23
    if info.is_bfp or info.is_integer:  # magnitudes of man_bits bits: one leading bit, the rest fraction
        return min(23, info.man_bits - 1)
    return info.man_bits


def copied_fraction_bits(role: str, fidelity: MathFidelity) -> int:
    """Mantissa bits after the leading one that a multiply at ``fidelity`` keeps of its ``role`` operand
    ("a": SrcA, "b": SrcB) when the other operand is a power of two (a picker's ones): the product is that
    operand with its lower bits truncated. A value stored in a format of at most this many fraction bits
    (:func:`fraction_bits`) passes through such a product unchanged; a Float32 value (23) never does."""
    a_masks, b_masks = _PIECES.get(formats.fidelity_phases(fidelity), _PIECES[(0, 1, 2, 3)])
    if role == "a":  # the power of two sits whole in the first SrcB piece; a SrcB "lo" piece is then zero
        return _KEPT_FRACTION_BITS[a_masks[0]]
    # with a SrcB "lo" piece the two products add up to the SrcB bits both phase groups read
    return _KEPT_FRACTION_BITS[_B_USED if "lo" in b_masks else b_masks[0]]


def fidelity_pieces(x: torch.Tensor, role: str, fidelity: MathFidelity, df=None) -> Tuple[torch.Tensor, ...]:
    """The masked pieces of one multiplier operand: ``role`` "a" (SrcA, 5 bits per pass) or "b" (SrcB,
    7 bits per pass). Combine a SrcB and a SrcA operand's pieces with :func:`fidelity_combine`.
    ``df``: the operand's format when known; masks that cannot change its values are skipped (a SrcB
    "lo" piece that is then zero is dropped, saving a product)."""
    base = formats.broadcast_base(x)
    if base is not x:  # a broadcast operand: its pieces are broadcasts too (a shared left operand stays one GEMM)
        return tuple(piece.expand(x.shape) for piece in fidelity_pieces(base, role, fidelity, df))
    a_masks, b_masks = _PIECES.get(formats.fidelity_phases(fidelity), _PIECES[(0, 1, 2, 3)])
    bits = fraction_bits(df)

    def masked(m: int) -> torch.Tensor:
        return x if _KEPT_FRACTION_BITS[m] >= bits and x.dtype == torch.float32 else _bitmask(x, m)

    if role == "a":
        return tuple(masked(m) for m in a_masks)
    hi = masked(b_masks[0])
    if len(b_masks) == 1 or _KEPT_FRACTION_BITS[b_masks[0]] >= bits:
        return (hi,)
    return (hi, masked(_B_USED) - hi)  # exact: same sign and exponent


def fidelity_combine(op, b_pieces: Sequence[torch.Tensor], a_pieces: Sequence[torch.Tensor]) -> torch.Tensor:
    """Sum of ``op(srcb_piece, srca_piece)`` over the executed phase groups (float32 accumulation).
    A SrcB operand with a single piece (its "lo" part is zero) needs only the first product."""
    out = op(b_pieces[0], a_pieces[0])
    if len(b_pieces) > 1 and len(a_pieces) > 1:
        second = op(b_pieces[1], a_pieces[1])
        if out.shape == second.shape and formats.broadcast_base(out) is out and out.is_contiguous() \
                and all(out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
                        for x in (*b_pieces, *a_pieces)):
            return out.add_(second)  # a product of its own: summed where it is, no third output-sized tensor
        out = out + second
    return out


def _cached(cache: Optional[Dict], key, fn):
    """``fn()``, memoised in ``cache`` (the per-input dict the golden keeps for constant operands)."""
    if cache is None:
        return fn()
    if key not in cache:
        cache[key] = fn()
    return cache[key]


def _cached_with(cache: Optional[Dict], other: Any, key, fn):
    """``fn()`` for a value that also depends on ``other``, memoised in a constant's ``cache`` beside
    ``other`` itself: a hit needs that very object, so a value derived from a rewritten second constant
    (a new derived-values dict) or from another tensor (one at a freed tensor's address) is never served
    in its place."""
    if cache is None:
        return fn()
    hit = cache.get(key)
    if hit is None or hit[0] is not other:
        hit = cache[key] = (other, fn())
    return hit[1]


#: A constant operand's masked fidelity piece of at least this many datums is masked again at each use instead
#: of being kept beside the constant. Masking is a fast pass (BERT-Large's 302M weights: ~35 ms a run on a kept
#: heap, pybuda.golden.heap), while keeping the pieces doubled the weights' memory at HiFi3 (SrcA's "hi" piece of
#: every weight, 1.2 GB for BERT-Large) and their first touch cost ~1 s of page faults in the first run.
KEPT_PIECE_MAX_DATUMS = 1 << 20


def _pieces(x: torch.Tensor, role: str, fidelity: MathFidelity, cache: Optional[Dict],
            df=None) -> Tuple[Tuple[torch.Tensor, ...], Tuple[bool, ...]]:
    """:func:`fidelity_pieces` of ``x`` and whether each piece is kept. A constant's (one with a derived-values
    ``cache``) pieces are kept there, except masked copies of :data:`KEPT_PIECE_MAX_DATUMS` or more, which are
    masked again at each use; only a kept piece may key further derived values in the cache."""
    if cache is None:
        pieces = fidelity_pieces(x, role, fidelity, df)
        return pieces, (False,) * len(pieces)
    key = ("fidelity", role, fidelity, df)
    kept = cache.get(key)
    if kept is None:
        pieces = _unchanged_as_is(x, fidelity_pieces(x, role, fidelity, df))
        kept = cache[key] = tuple(p if p is x or formats.broadcast_base(p).numel() < KEPT_PIECE_MAX_DATUMS else None
                                  for p in pieces)
    elif any(p is None for p in kept):
        pieces = fidelity_pieces(x, role, fidelity, df)
    else:
        pieces = kept
    return tuple(p if k is None else k for k, p in zip(kept, pieces)), tuple(k is not None for k in kept)


def _unchanged_as_is(x: torch.Tensor, pieces: Tuple[torch.Tensor, ...]) -> Tuple[torch.Tensor, ...]:
    """``pieces`` of a constant operand, each piece that equals ``x`` replaced by ``x`` itself, so that the cache
    holds no copy of it: weights the host rounded for LoFi (``mantissa_bits``) lose nothing to its mask."""
    if x.dtype != torch.float32:
        return pieces
    return tuple(x if p is not x and p.shape == x.shape and _first_rows_equal(p, x) and torch.equal(p, x) else p
                 for p in pieces)


def _first_rows_equal(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether the first row of each matrix of ``x`` and ``y`` agree bit for bit: a cheap test that rejects
    most unequal pairs before a whole-tensor comparison (a weight's first run pays for every such check)."""
    return torch.equal(x[..., :1, :], y[..., :1, :])


def _alike_columns(b: torch.Tensor, cache: Optional[Dict]) -> bool:
    """Whether the constant ``b`` (one with a derived-values ``cache``) has all its columns bit for bit
    alike, as the compiler's reduce constants do (a column of 1/N in every column of a tile). Its
    product then has alike columns too: the golden computes one and broadcasts it (the chip computes
    each column the same way), which the column broadcast after a reduction keeps as a view."""
    if cache is None:
        return False

    def alike() -> bool:
        bits = b.view(torch.int32)
        first_row = bits[..., :1, :]  # most constants differ there already: no pass over the whole matrix
        return bool((first_row == first_row[..., :1]).all()) and bool((bits == bits[..., :1]).all())
    return _cached_with(cache, b, ("alike_columns", id(b)), alike)


def gemm(a: torch.Tensor, b: torch.Tensor, cache: Optional[Dict] = None) -> torch.Tensor:
    """``a @ b`` on device tensors ``[N, t, R, K] @ [Nb, tb, K, C]``. A constant ``b`` (Nb = 1) is never
    copied per input: with tb = 1, or one matrix broadcast over t (a ``broadcast: {z: t}`` TM, stride 0),
    the whole batch is one GEMM of ``(N·t·R) x K``; when ``a`` is one slice broadcast over t and ``b``
    has t slices, the t GEMMs share their left operand and run as one against ``b``'s slices side by
    side; a ``b`` whose columns are all alike (:func:`_alike_columns`) is one column, broadcast. What is
    derived from ``b`` is kept in ``cache``, the constant's derived-values dict."""
    if b.shape[0] == 1:
        n, t, r, k = a.shape
        tb, c = b.shape[1], b.shape[-1]
        if c > 1 and _alike_columns(b, cache):  # a reduction's constant: one column, broadcast
            return gemm(a, b[..., :1]).expand(n, t, r, c)
        if tb == 1 or b.stride(1) == 0:  # one matrix (perhaps broadcast over t): one GEMM of all rows
            return blas.matmul(a.reshape(n * t * r, k), b[0, 0]).reshape(n, t, r, c)
        if t == tb and a.stride(1) == 0:
            wide = _cached_with(cache, b, ("side_by_side", id(b)), lambda: b[0].permute(1, 0, 2).reshape(k, t * c))
            out = blas.matmul(a[:, 0].reshape(n * r, k), wide)
            return out.reshape(n, r, t, c).permute(0, 2, 1, 3)
        if n > 1 and tb == t:
            out = torch.matmul(a.transpose(0, 1).reshape(t, n * r, k), b[0])
            return out.reshape(t, n, r, c).transpose(0, 1).contiguous()
    return blas.matmul(a, b)


def _same_view(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether ``x`` and ``y`` are the same values: one tensor, or views of the same memory alike in every way."""
    return x is y or (x.data_ptr() == y.data_ptr() and x.shape == y.shape and x.stride() == y.stride()
                      and x.dtype == y.dtype)


def _special_values_kept(x: torch.Tensor, piece: torch.Tensor, cache: Optional[Dict]) -> bool:
    """Whether the single fidelity ``piece`` of operand ``x`` is zero, infinite and NaN exactly where ``x`` is:
    then a product of such pieces makes a NaN only where the plain product does (:func:`_without_new_nans`).
    A piece that is ``x`` itself always does. A mask keeps sign and exponent, so only a subnormal (flushed to
    zero) or a NaN (whose kept mantissa bits may be zero: an infinity) changes class: a constant operand with
    neither keeps its classes under every mask, which is checked once (kept in its ``cache``); a run-time one
    is not checked (the caller scans the product)."""
    if _same_view(piece, x):
        return True
    if cache is None:
        return False

    def no_subnormal_or_nan() -> bool:
        base = formats.broadcast_base(x)
        return not bool(torch.isnan(base).any()) and \
            not bool(((base.abs() < torch.finfo(torch.float32).tiny) & (base != 0)).any())
    return _cached_with(cache, x, ("no_subnormal_or_nan",), no_subnormal_or_nan)


def _without_new_nans(out: torch.Tensor, plain: Callable[[], torch.Tensor],
                      operands: Sequence[Tuple[torch.Tensor, Tuple[torch.Tensor, ...], Optional[Dict]]]) -> torch.Tensor:
    """``out`` (a product of fidelity pieces) with NaNs the pieces made and ``plain()`` does not have replaced
    (:func:`formats.keep_infinities`). The scan of ``out`` is skipped when every operand ``(x, pieces, cache)``
    has one piece whose zeros, infinities and NaNs are those of ``x``: each term of the product is then NaN,
    infinite or zero exactly where the plain term is (a masked magnitude is no larger, so it overflows only
    where the plain one does), so the pieces make no NaN of their own. That is LoFi's usual case: a Bfp8_b
    activation needs no mask and a weight's mask is checked once."""
    if all(len(pieces) == 1 and _special_values_kept(x, pieces[0], cache) for x, pieces, cache in operands):
        return out
    return formats.keep_infinities(out, plain)


def _mul(a: torch.Tensor, b: torch.Tensor, fidelity: Optional[MathFidelity],
         caches: Sequence[Optional[Dict]] = (None, None), dfs: Sequence = (None, None)) -> torch.Tensor:
    """ELWMUL: in0 → SrcA, in1 → SrcB (see ``formats.fidelity_multiply``)."""
    if fidelity is None:
        return a * b
    (b_pieces, _), (a_pieces, _) = _pieces(b, "b", fidelity, caches[1], dfs[1]), _pieces(a, "a", fidelity, caches[0], dfs[0])
    out = fidelity_combine(torch.mul, b_pieces, a_pieces)
    return _without_new_nans(out, lambda: a * b, ((b, b_pieces, caches[1]), (a, a_pieces, caches[0])))


def _matmul(a: torch.Tensor, b: torch.Tensor, fidelity: Optional[MathFidelity],
            caches: Sequence[Optional[Dict]] = (None, None), dfs: Sequence = (None, None)) -> torch.Tensor:
    """Matrix unit: in0 → SrcB (7 bits), in1 → SrcA (5 bits) (see ``formats.fidelity_matmul``)."""
    if fidelity is None:
        return gemm(a, b, caches[1])
    (a_pieces, _), (b_pieces, b_kept) = _pieces(a, "b", fidelity, caches[0], dfs[0]), _pieces(b, "a", fidelity, caches[1], dfs[1])
    # in1's derived values (gemm's) are kept only for in1 itself and its kept pieces: a piece masked afresh at
    # each use would add an entry per use
    keyed = {id(b)} | {id(p) for p, kept in zip(b_pieces, b_kept) if kept}

    def mm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return gemm(x, y, caches[1] if id(y) in keyed else None)

    out = fidelity_combine(mm, a_pieces, b_pieces)
    return _without_new_nans(out, lambda: mm(a, b), ((a, a_pieces, caches[0]), (b, b_pieces, caches[1])))


#: Unary kernels (copy and SFPU op types) by name, from the device-op table (its ``golden`` field):
#: ``(x, attrs) -> y`` on unpacked float32 values.
UNARY: Dict[str, Callable[[torch.Tensor, Dict], torch.Tensor]] = {
    name: row.golden for name, row in DEVICE_OPS.items() if row.is_unary and callable(row.golden)}

def unary(op_type: str, x: torch.Tensor, attrs: Dict) -> torch.Tensor:
    """A unary op's kernel. A broadcast input (a reduction's column expanded across its tile, say) is
    computed once per distinct value and the result stays a broadcast view, unless the op is ``random``
    (dropout draws a number per datum)."""
    base = formats.broadcast_base(x)
    if base is not x and not DEVICE_OPS[op_type].random:
        return UNARY[op_type](base, attrs).expand(x.shape)
    return UNARY[op_type](x, attrs)


def binary(op_type: str, a: torch.Tensor, b: torch.Tensor, fidelity: Optional[MathFidelity],
           caches: Sequence[Optional[Dict]] = (None, None), dfs: Sequence = (None, None),
           attrs: Optional[Dict] = None) -> torch.Tensor:
    """A binary op's kernel from the device-op table; a multiply inside it goes through the fidelity
    model (ELWMUL: in0 -> SrcA, in1 -> SrcB); ELWADD and ELWSUB ignore fidelity."""
    row = find_device_op(op_type)
    if row is None or row.cls != "binary" or not callable(row.golden):
        raise NetlistError("type", f"golden backend does not implement binary op '{op_type}'")
    return row.golden(a, b, attrs or {}, lambda x, y: _mul(x, y, fidelity, caches, dfs))


def _decode_sparse(tiles_in: torch.Tensor, index: torch.Tensor, count: int):
    """(t, out_rt, in_rt) of each quadruple and the gathered sparse tiles ``[L, 32, 32]``."""
    quads = index[0].reshape(-1)[: 4 * count].round().to(torch.int64).reshape(-1, 4)
    qt, qr, qk, qs = quads.unbind(1)
    return qt, qr, qk, tiles_in[0, 0].reshape(-1, TILE, TILE)[qs]


class GatherRank(NamedTuple):
    """One rank of a picker's terms (:func:`_gather_rows`)."""

    rows: Optional[torch.Tensor]  # the output rows it adds to; None: every row, in order
    sources: torch.Tensor  # the activation row each reads
    values: torch.Tensor  # ``[rows, 1]``
    start: Optional[int]  # the sources are start, start + 1, ...: a slice of the activation, not a gather
    ones: bool  # every value is 1: the term is the activation row itself (1 * x is x)


def _rank(rows: Optional[torch.Tensor], sources: torch.Tensor, values: torch.Tensor, total: int) -> GatherRank:
    if rows is not None and rows.numel() == total and bool((rows == torch.arange(total)).all()):
        rows = None
    count = sources.numel()
    run = count > 0 and bool((sources == sources[0] + torch.arange(count)).all())
    return GatherRank(rows, sources, values, int(sources[0]) if run else None, bool((values == 1).all()))


def _gather_rows(qt: torch.Tensor, qr: torch.Tensor, qk: torch.Tensor, sparse_tiles: torch.Tensor, out_t: int,
                 out_rt: int, act_t: int, act_rows: int) -> Optional[List[GatherRank]]:
    """A sparse matmul whose tiles each give an output row at most one non-zero term, as gathers of activation
    rows times values, rows counted over all t slices. A convolution's im2col, a pooling window or a nearest
    resize picks one row per output row; a depthwise convolution's or a pool's sum adds one row per tap, each
    from its own tile. A tile product then is its one term, and the output row the sum of its terms in the
    order of the index (the tile products' ``index_add_``): rank r holds every row's (r+1)-th term, rank 0
    all rows (one without a term reads row 0 times 0). None when a tile gives a row several terms (their sum
    is the tile product's own) or holds inf or NaN."""
    if not bool(torch.isfinite(sparse_tiles).all()):
        return None
    tile, row, col = torch.nonzero(sparse_tiles, as_tuple=True)  # in index order: tile by tile
    total = out_t * out_rt * TILE
    out_rows = (qt[tile] * out_rt + qr[tile]) * TILE + row
    if torch.unique(tile * total + out_rows).numel() != tile.numel():
        return None
    sources = (qt[tile] if act_t > 1 else torch.zeros_like(tile)) * act_rows + qk[tile] * TILE + col
    values = sparse_tiles[tile, row, col]
    # rank of each term among its row's terms, in index order (a stable sort keeps it within a row)
    by_row = torch.sort(out_rows, stable=True).indices
    counts = torch.bincount(out_rows, minlength=total)
    firsts = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(tile)
    rank[by_row] = torch.arange(tile.numel()) - firsts[out_rows[by_row]]
    first = rank == 0
    all_sources = torch.zeros(total, dtype=torch.int64)
    all_values = torch.zeros(total, 1, dtype=torch.float32)
    all_sources[out_rows[first]] = sources[first]
    all_values[out_rows[first], 0] = values[first]
    ranks = [_rank(None, all_sources, all_values, total)]
    for r in range(1, int(rank.max()) + 1 if rank.numel() else 1):
        mine = rank == r
        ranks.append(_rank(out_rows[mine], sources[mine], values[mine][:, None], total))
    return ranks


def _sparse_gather(act: torch.Tensor, ranks: List[GatherRank], fidelity: Optional[MathFidelity],
                   value_pieces: Optional[List[Tuple[torch.Tensor, ...]]], act_df) -> torch.Tensor:
    """The sum of each output row's activation rows times their values (see :func:`_gather_rows`), ``[n, rows,
    C]``: the tile products' numbers for finite activations, one product per term instead of a 32x32 tile's (a
    zero times a finite number adds nothing; the fidelity pieces multiply as in the tile product)."""
    flat = act.reshape(act.shape[0], -1, act.shape[-1])
    act_pieces = None if fidelity is None else fidelity_pieces(flat, "a", fidelity, act_df)
    out = None
    for r, rank in enumerate(ranks):
        def picked(v: torch.Tensor, a: torch.Tensor, rank: GatherRank = rank) -> torch.Tensor:
            if rank.start is not None:  # a slice: a view when the values are ones
                taken = a.narrow(1, rank.start, rank.sources.numel())
                return taken if rank.ones else taken * v
            taken = a.index_select(1, rank.sources)
            return taken if rank.ones else taken.mul_(v)

        terms = picked(rank.values, flat) if fidelity is None else \
            fidelity_combine(picked, value_pieces[r], act_pieces)
        if out is None:  # a -0 becomes +0, as tile products summed into a zeroed output leave it
            out = terms.add_(0.0) if terms._base is None else terms + 0.0  # never into the activation
        elif rank.rows is None:
            out.add_(terms)
        else:
            out.index_add_(1, rank.rows, terms)
    return out


def _without_zero_pieces(pieces: Tuple[torch.Tensor, ...]) -> Tuple[torch.Tensor, ...]:
    """A constant SrcB operand's fidelity pieces without a "lo" piece that is all zero (a picker's ones and
    halves have no low bits), so that its products are not computed: they add zeros."""
    return pieces[:1] if len(pieces) > 1 and not bool(pieces[1].any()) else pieces


def sparse_matmul(inputs: Sequence[torch.Tensor], attrs: Dict, out_shape: nl.TileShape3,
                  fidelity: Optional[MathFidelity], caches: Sequence[Optional[Dict]] = (),
                  dfs: Sequence = (None, None, None)) -> torch.Tensor:
    """The ``identity: true`` matmul (TT-Buda's sparse matmul, as the compiler encodes it in
    ``pybuda.passes.lower.pickers``): input 0 holds S unique 32x32 sparse tiles stacked vertically, input 2
    the RawUInt32 index of ``indices_len`` quadruples (t, out_rt, in_rt, s); output row-tile ``out_rt`` of
    slice ``t`` is the sum of ``tile_s @ in1[t][in_rt]`` over its quadruples. Each quadruple is one
    tile product on the matrix unit (sparse tile -> SrcB, activation -> SrcA), all done in one batch.
    When inputs 0 and 2 are constants (they always are) the decoded quadruples and the sparse tiles'
    fidelity pieces are computed once and kept in their ``caches``."""
    tiles_in, act, index = inputs[0], inputs[1], inputs[2]
    n, t_in, k, cols = act.shape
    count = int(attrs.get("indices_len", 0))
    out = torch.zeros(n, out_shape.t * out_shape.rt, TILE, cols, dtype=torch.float32) if not count else None
    if count:
        # Derived values depend on inputs 0 and 2: kept with input 0's cache, each beside a reference to
        # input 2's cache, which must be the same dict (not one that merely reuses a freed one's id).
        both = len(caches) > 2 and caches[0] is not None and caches[2] is not None
        cache0 = caches[0] if both else None
        tag = caches[2] if both else None
        qt, qr, qk, sparse_tiles = _cached_with(cache0, tag, ("sparse", count),
                                                lambda: _decode_sparse(tiles_in, index, count))
        plan = _cached_with(cache0, tag, ("sparse_gather", count, out_shape.t, out_shape.rt, t_in, k),
                            lambda: _gather_rows(qt, qr, qk, sparse_tiles, out_shape.t, out_shape.rt, t_in, k))
        # 0 * inf is NaN in a tile product: an activation with a non-finite value takes the tile products (so does
        # one whose sum overflows: one summing pass, no mask tensor, decides)
        if plan is not None and bool(torch.isfinite(act.sum())):
            value_pieces = None if fidelity is None else _cached_with(
                cache0, tag, ("sparse_gather_fidelity", count, fidelity),
                lambda: [_without_zero_pieces(fidelity_pieces(rank.values, "b", fidelity, dfs[0])) for rank in plan])
            return _sparse_gather(act, plan, fidelity, value_pieces, dfs[1]).reshape(
                n, out_shape.t, out_shape.rt * TILE, cols)
        act_tiles = act.reshape(n, t_in, k // TILE, TILE, cols)[:, qt if t_in > 1 else torch.zeros_like(qt), qk]
        if fidelity is None:
            contrib = torch.matmul(sparse_tiles.unsqueeze(0), act_tiles)  # [n, L, 32, C]
        else:
            b_pieces = _cached_with(cache0, tag, ("sparse_fidelity", count, fidelity),
                                    lambda: fidelity_pieces(sparse_tiles.unsqueeze(0), "b", fidelity, dfs[0]))
            contrib = fidelity_combine(torch.matmul, b_pieces, fidelity_pieces(act_tiles, "a", fidelity, dfs[1]))
        rows = _cached_with(cache0, tag, ("sparse_rows", count, out_shape.rt), lambda: qt * out_shape.rt + qr)
        out = torch.zeros(n, out_shape.t * out_shape.rt, TILE, cols, dtype=torch.float32).index_add_(1, rows, contrib)
    return out.reshape(n, out_shape.t, out_shape.rt * TILE, cols)


def matmul(inputs: Sequence[torch.Tensor], attrs: Dict, fidelity: Optional[MathFidelity],
           out_shape: Optional[nl.TileShape3] = None, caches: Optional[Sequence[Optional[Dict]]] = None,
           dfs: Optional[Sequence] = None) -> torch.Tensor:
    """Tile-blocked matmul per t slice; ``accumulate`` + ``z`` sums groups of z slices; ``bias`` is
    broadcast within each tile from its row 0; ``sfpu_op: gelu`` applies gelu to the result.
    ``identity: true`` selects the sparse form (:func:`sparse_matmul`). ``caches``: per input, a dict
    for derived values of a constant operand (its fidelity pieces, a broadcast bias), or None."""
    caches = list(caches) if caches is not None else [None] * len(inputs)
    dfs = list(dfs) if dfs is not None else [None] * len(inputs)
    if attrs.get("identity"):
        return sparse_matmul(inputs, attrs, out_shape, fidelity, caches, dfs)
    out = _matmul(inputs[0], inputs[1], fidelity, caches[:2], dfs[:2])
    if attrs.get("accumulate"):
        z = int(attrs.get("z", out.shape[1]))
        n, t, r, c = out.shape
        out = out.reshape(n, t // z, z, r, c).sum(dim=2)
    if attrs.get("bias"):
        out = _add_bias(out, inputs[2], caches[2])
    if attrs.get("sfpu_op") == "gelu":
        out = unary("gelu", out, {})
    return out


def _add_bias(out: torch.Tensor, bias: torch.Tensor, cache: Optional[Dict]) -> torch.Tensor:
    """The bias added to a product. A product with alike columns (a broadcast view, see :func:`gemm`) plus
    a constant bias with alike columns (a layer norm's epsilon) keeps them alike: one column is added.
    Any other bias needs the product dense."""
    if formats.broadcast_base(out) is out:
        return _add_tile_rows(out, bias, cache)
    if out.stride(-1) == 0 and bias.shape[0] == 1 and _alike_columns(bias, cache):
        return _add_tile_rows(out[..., :1].contiguous(), bias[..., :1], None).expand(out.shape)
    return _add_tile_rows(out.contiguous(), bias, cache)


def _add_tile_rows(out: torch.Tensor, bias: torch.Tensor, cache: Optional[Dict]) -> torch.Tensor:
    """``out + tile_broadcast_r(bias)`` (row 0 of each bias tile added to every row of that tile),
    without materialising the broadcast: the sums are the same, and a constant bias stays a view.
    Overwrites ``out``, which must be a fresh result."""
    n, t, r, c = out.shape
    nb, tb = bias.shape[:2]
    rows = _cached(cache, "tile_rows", lambda: bias.reshape(nb, tb, r // TILE, TILE, c)[:, :, :, :1])
    # In place: ``out`` is the matmul's own result (a view of it, or reshape's copy), nobody else's tensor.
    tiled = out.reshape(n, t, r // TILE, TILE, c)
    return tiled.add_(rows).reshape(n, t, r, c)


def reduce(x: torch.Tensor, attrs: Dict) -> torch.Tensor:
    """reduce max over r (result in row 0 of each output tile), c (column 0) or z (t / z slices)."""
    if attrs.get("type", "max") != "max":
        raise NetlistError("attributes.type", f"reduce type must be max, got {attrs.get('type')!r}")
    dim = attrs.get("dim")
    n, t, r, c = x.shape
    if dim == "z":
        z = int(attrs.get("z", t))
        return x.reshape(n, t // z, z, r, c).amax(dim=2)
    out_r, out_c = (TILE, c) if dim == "r" else (r, TILE)
    out = torch.zeros(n, t, out_r, out_c, dtype=x.dtype)
    if dim == "r":
        out[:, :, 0, :] = x.amax(dim=2)
    elif dim == "c":
        out[:, :, :, 0] = x.amax(dim=3)
    else:
        raise NetlistError("attributes.dim", f"reduce dim must be r, c or z, got {dim!r}")
    return out


def splice(inputs: Sequence[torch.Tensor], attrs: Dict, out_shape: nl.TileShape3) -> torch.Tensor:
    """Splice along t (``granularity: t``): each input contributes ``length`` slices starting at ``index``.

    The compiler only emits t-granularity splices whose per-input (index, length, stride) pick whole
    t slices; ublock granularity depends on per-core blocking and is rejected here with a clear error.
    """
    if attrs.get("granularity", "t") != "t":
        raise NetlistError("attributes.granularity", "golden backend supports splice with granularity t only")
    parts = []
    for i, x in enumerate(inputs):
        index, length, stride = attrs.get(f"input{i}", [0, x.shape[1], x.shape[1]])
        picked = []
        pos = index
        while pos < x.shape[1] and len(picked) * length < x.shape[1]:
            picked.append(x[:, pos: pos + length])
            pos += stride
            if stride <= 0:
                break
        parts.extend(picked)
    out = torch.cat(parts, dim=1)
    if out.shape[1] != out_shape.t:
        raise NetlistError("attributes", f"splice produced t={out.shape[1]}, op declares t={out_shape.t}")
    return out


_relu_is_exact: Optional[bool] = None


def _relu_keeps_like_where() -> bool:
    """Whether ``torch.relu`` gives ``where(x >= 0, x, 0)`` bit for bit on values without NaN (-0 kept as -0,
    subnormals as they are), over a vector body and its tail: probed once, since it is the CPU kernel's choice."""
    global _relu_is_exact
    if _relu_is_exact is None:
        x = torch.tensor([-0.0, 0.0, -1.0, 2.0, float("-inf"), float("inf"), 1e-45, -1e-45] * 37)
        want, got = torch.where(x >= 0, x, 0.0), torch.relu(x)
        _relu_is_exact = bool(torch.equal(want, got)) and bool(torch.equal(want.signbit(), got.signbit()))
    return _relu_is_exact


def apply_relu(x: torch.Tensor, attrs: Dict) -> torch.Tensor:
    """Attribute relu (``relu_en``) after the op: mode 'min' keeps values >= the threshold, 'max' keeps
    values <= it, others become 0 (the same rule as the registry's relu op; NaN becomes 0). The usual case,
    'min' at 0, runs as ``torch.relu`` (one vector pass, where a mask and a select took ~20x longer) when it
    agrees bit for bit, which it does unless a NaN is there (relu keeps it): a summing pass tells."""
    if not attrs.get("relu_en"):
        return x
    threshold = float(attrs.get("relu_threshold", 0.0))
    mode = attrs.get("relu_mode", "min")
    if threshold == 0.0 and mode != "max" and _relu_keeps_like_where():
        out = torch.relu(x)
        if not bool(torch.isnan(out.sum())):  # no -inf remains, so only a NaN makes the sum NaN
            return out
    keep = x <= threshold if mode == "max" else x >= threshold
    return torch.where(keep, x, 0.0)
