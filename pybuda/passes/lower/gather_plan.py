"""The gather planner: pure functions from shapes and element maps to tile TMs and picker plans, with no
lowering state. ``index_map`` gives the source of every output element of a chain of data-movement ops;
``plan_gather`` / ``plan_move`` choose how one input is moved (column or block picker parts, in some
orientation, or a z <-> c rotation first), ``gather_possible`` / ``move_possible`` only ask whether a plan
exists, ``splice_order`` recognises a join that one ``splice`` does, ``leading_repeat_tms`` repeats slices
over leading dims by TMs, and ``unsupported_movement`` is the capability check's question (see
:mod:`pybuda.passes.lower.capabilities`). :mod:`pybuda.passes.lower.movement` emits the ops these plans
describe."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from pybuda.netlist.host_io import canonical_zrc, tiles
from pybuda.netlist.tms import TM, Broadcast, VSlice, VStack
from pybuda.ops import registry
from pybuda.passes.lower.common import TILE, _hashable, _match_mapping, _unhashable


#: A splice joins at most this many inputs (netlist_backend_spec §3.1: ``splice`` takes 1..8).
MAX_SPLICE_INPUTS = 8


def splice_order(srcs, emap: np.ndarray) -> Optional[List[int]]:
    """The inputs (canonical (z, r, c) each) in the column order of a join :meth:`_splice_columns` can do,
    or None: every input has the output's z and rows and fills a column band of the output unchanged, the
    bands start at tile boundaries (only the last may end inside a tile) and together cover every column.
    ``emap``: the output's flat source indices over the inputs in order, shape (z, r, c)."""
    zo, ro, co = emap.shape
    if not 1 < len(srcs) <= MAX_SPLICE_INPUTS or any((z, r) != (zo, ro) for z, r, _ in srcs):
        return None
    if sum(c for _, _, c in srcs) != co:
        return None
    offsets = np.cumsum([0] + [z * r * c for z, r, c in srcs])
    first = emap[0, 0, :]
    starts = {}
    for k in range(len(srcs)):
        hit = np.nonzero(first == offsets[k])[0]
        if len(hit) != 1:
            return None
        starts[k] = int(hit[0])
    order = sorted(starts, key=starts.get)
    want = np.empty_like(emap)
    col = 0
    for k in order:
        z, r, c = srcs[k]
        if col % TILE or starts[k] != col:
            return None
        want[:, :, col:col + c] = offsets[k] + np.arange(z * r * c).reshape(z, r, c)
        col += c
    return order if np.array_equal(want, emap) else None


#: At most this many parts (pickers whose results are summed) per input of a gather.
MAX_PARTS = 32
#: A block column picker lays at most this many output-width tiles side by side.
MAX_BLOCK_TILES = 512
#: Sub-column tables larger than this (entries) are not built: such a gather would need too many parts anyway.
_MAX_TABLE = 1 << 25


def _no_plan() -> str:
    return (f"the device cannot express this data movement with at most {MAX_PARTS} picker parts in any "
            f"orientation (its output rows and columns each read too many source rows and columns)")


def index_map(in_shapes, ops) -> torch.Tensor:
    """Source of every output element of the op chain ``ops`` ((op_type, hashable attrs) pairs) as a flat
    index over the inputs (in order), -1 = zero. Raises ValueError for a move with no device form."""
    offsets = np.cumsum([0] + [math.prod(s) for s in in_shapes])
    idx = [torch.arange(int(offsets[i]) + 1, int(offsets[i + 1]) + 1, dtype=torch.int64).reshape(s)
           for i, s in enumerate(in_shapes)]
    for op_type, attrs in ops:
        attrs = _unhashable(attrs)
        if op_type in ("pad", "buda_pad") and attrs.get("value", 0.0) != 0.0:
            raise ValueError(f"{op_type} with a non-zero value has no device form yet")
        # replicate/reflect pads only repeat input elements: index_select on the index map is exact
        idx = [registry.evaluate(op_type, idx, attrs)]
    return idx[0].to(torch.int64) - 1


@dataclass(frozen=True)
class GatherPlan:
    """How one input of a gather is moved: ``kind`` "columns" (:func:`_column_parts`) or "blocks"
    (:func:`_block_parts`), on the source transposed (``src_t``) and/or producing the result transposed
    (``out_t``); ``cost``: estimated tile matmuls (the cheapest plan is chosen)."""

    kind: str
    src_t: bool
    out_t: bool
    cost: float
    parts: int


def _variant(src, expected, src_t: bool, out_t: bool):
    """(source shape, map) of a gather done on the transposed source and/or producing the transposed result."""
    zi, ri, ci = src
    e = np.asarray(expected, dtype=np.int64)
    if src_t:
        valid = e >= 0
        f = np.where(valid, e, 0)
        z, rem = f // (ri * ci), f % (ri * ci)
        e = np.where(valid, (z * ci + rem % ci) * ri + rem // ci, -1)
        src = (zi, ci, ri)
    if out_t:
        e = np.ascontiguousarray(e.transpose(0, 2, 1))
    return src, e


def _column_parts(src, expected: np.ndarray, max_parts: Optional[int] = None):
    """Parts that each pick columns (one source column per output column) and then rows, or None.

    A *sub-column* is output column j restricted to the elements that read source column s; its row vector
    says which source row each output row takes (-1 = none). Sub-columns with the same row vector form one
    part (column picker j -> s, then one row picker); two sub-columns of one output column read disjoint rows,
    so they never share a vector and a part's column map is consistent. Parts write disjoint elements and
    zero elsewhere, so their sum is the gather. Returns ``([(group id, column map, row vector)], most
    source columns any output column reads)``."""
    max_parts = MAX_PARTS if max_parts is None else max_parts
    zi, ri, ci = src
    zo, ro, co = expected.shape
    read = _elements_read(expected)
    if read is None:
        return None
    rows_out, cols_out, f = read
    pair = cols_out.astype(np.int64) * ci + f % ci
    upair, sub = np.unique(pair, return_inverse=True)
    per_col = np.bincount(upair // ci, minlength=co)
    if per_col.max() > max_parts or (len(upair) + 1) * zo * ro > _MAX_TABLE:
        return None
    vec = np.full((len(upair) + 1, zo * ro), -1, dtype=np.int64)  # the last row: columns that read nothing
    vec[sub.reshape(-1), rows_out] = f // ci
    if (per_col > 0).all():
        vec = vec[:-1]
    vectors, group = _unique_rows(vec)
    group = group[: len(upair)]
    parts = []
    for g in range(len(vectors)):
        if not (vectors[g] >= 0).any():
            continue
        if len(parts) == max_parts:  # one more part than allowed: stop before building its column map (a map per
            return None              # part of a wide output, thousands of them, once took 24 GB)
        members = upair[group == g]
        col_map = np.full(co, -1, dtype=np.int64)
        col_map[members // ci] = members % ci
        parts.append((g, col_map, vectors[g]))
    return parts, int(per_col.max())


def _elements_read(expected: np.ndarray):
    """(output rows, output columns, flat source index) of every output element that reads a source
    element, over ``expected`` viewed as ``[z*r, c]``; None when no element reads anything."""
    zo, ro, co = expected.shape
    e = expected.reshape(zo * ro, co)
    rows_out, cols_out = np.nonzero(e >= 0)
    if rows_out.size == 0:
        return None
    return rows_out, cols_out, e[rows_out, cols_out]


def _block_parts(src, expected: np.ndarray, max_parts: Optional[int] = None):
    """Parts that each give every output row one source row, with a column map per row, or None.

    Output row R's elements are split by the source row they read; part k takes each row's k-th source row.
    Within a part the rows' column maps (output column -> source column, -1 = none) form ``B`` distinct
    *blocks*: a column picker lays the blocks side by side in whole tiles, ``hslice`` makes them slices, and
    a row picker takes row ``row_src[R]`` of block ``blk[R]`` (see ``_place_blocks``). This splits columns
    into rows (a reshape ``[.., H*D] -> [.., H, D]`` with D not a multiple of 32), which column parts can
    only do with one part per block. Returns ``[(row_src, blk, vectors)]``."""
    max_parts = MAX_PARTS if max_parts is None else max_parts
    zi, ri, ci = src
    zo, ro, co = expected.shape
    read = _elements_read(expected)
    if read is None:
        return None
    rows_out, cols_out, f = read
    nq = zi * ri
    key = rows_out.astype(np.int64) * nq + f // ci
    ukey, inv = np.unique(key, return_inverse=True)
    inv = np.asarray(inv).reshape(-1)
    urow = ukey // nq
    rank = np.arange(len(ukey)) - np.searchsorted(urow, urow)
    if rank.max() + 1 > max_parts:
        return None
    elem_rank = rank[inv]
    parts = []
    for k in range(int(rank.max()) + 1):
        sel = np.nonzero(rank == k)[0]
        rows = urow[sel]
        row_src = np.full(zo * ro, -1, dtype=np.int64)
        row_src[rows] = ukey[sel] % nq
        m = elem_rank == k
        vecs = np.full((zo * ro, co), -1, dtype=np.int64)
        vecs[rows_out[m], cols_out[m]] = f[m] % ci
        vectors, blk_of = _unique_rows(vecs[rows])
        if len(vectors) * tiles(co) > MAX_BLOCK_TILES:
            return None
        blk = np.full(zo * ro, -1, dtype=np.int64)
        blk[rows] = np.asarray(blk_of).reshape(-1)
        parts.append((row_src, blk, vectors))
    return parts


def _unique_rows(m: np.ndarray):
    """``np.unique(m, axis=0, return_inverse=True)`` (rows in lexicographic order), faster: rows are grouped
    by a hash, the grouping is verified exactly (the slow path runs only on a collision)."""
    weights = np.random.default_rng(12345).integers(1, 1 << 61, size=m.shape[1], dtype=np.int64)
    with np.errstate(over="ignore"):
        h = (m * weights).sum(axis=1)  # wraps around: only equality matters
    _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    inv = np.asarray(inv).reshape(-1)
    reps = m[first]
    if not np.array_equal(m, reps[inv]):
        vectors, inv = np.unique(m, axis=0, return_inverse=True)
        return vectors, np.asarray(inv).reshape(-1)
    order = np.lexsort(reps.T[::-1]) if reps.shape[1] else np.arange(len(reps))
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return reps[order], rank[inv]


def _row_pick_cost(zo, ro, co) -> float:
    # a sparse picker reads about one input tile per output tile (two where rows straddle tiles)
    return 2.0 * zo * tiles(ro) * tiles(co)


def _plan_cost(kind: str, src, dst, parts, src_t: bool, out_t: bool) -> float:
    """Estimated tile matmuls (and nops/adds) of a plan; enough to rank plans against each other."""
    zi, ri, ci = src
    zo, ro, co = dst
    cost = (len(parts) - 1) * zo * tiles(ro) * tiles(co)  # the adds
    for part in parts:
        if kind == "columns":
            _, col_map, _ = part
            if not (co == ci and np.array_equal(col_map, np.arange(ci))):
                cost += zi * tiles(ri) * tiles(ci) * tiles(co)
        else:
            cost += zi * tiles(ri) * tiles(ci) * len(part[2]) * tiles(co)
        cost += _row_pick_cost(zo, ro, co)
    if src_t:
        cost += zi * tiles(ri) * tiles(ci)  # a nop applies the transpose where a picker cannot read it
    if out_t:
        cost += zo * tiles(ro) * tiles(co)
    return float(cost)


#: (on the source transposed, producing the result transposed): the orientations a gather is planned in.
_VARIANTS = ((False, False), (False, True), (True, False), (True, True))


def plan_gather(src, expected) -> Optional[GatherPlan]:
    """The cheapest way :meth:`DataMovementLowering._gather_pickers` moves one input ``src`` (z, r, c) by
    ``expected`` (the source flat index of each output element, -1 = zero), or None when no plan stays
    within :data:`MAX_PARTS` parts. A gather that one column part does (a slice, a pad, a row gather) is
    done so; others try column and block parts on the source and/or result transposed (a transpose swaps
    the roles of rows and columns, e.g. for a permutation that moves the last dim); ties go to the first."""
    e = np.asarray(expected, dtype=np.int64)
    found = _column_parts(src, e)
    if found is not None and len(found[0]) == 1:
        return GatherPlan("columns", False, False, _plan_cost("columns", src, e.shape, found[0], False, False), 1)
    best: Optional[GatherPlan] = None
    for src_t, out_t in _VARIANTS:
        if best is not None and best.parts == 1 and not best.src_t and not best.out_t:
            break  # one part without transposes: a transposed plan saves little and costs nops
        s2, e2 = _variant(src, e, src_t, out_t)
        for kind in ("columns", "blocks"):
            if kind == "columns":
                found = _column_parts(s2, e2)
                parts = found[0] if found is not None else None
            else:
                parts = _block_parts(s2, e2)
            if parts is None:
                continue
            cost = _plan_cost(kind, s2, e2.shape, parts, src_t, out_t)
            if best is None or cost < best.cost:
                best = GatherPlan(kind, src_t, out_t, cost, len(parts))
    return best


def _single_source_columns(src, expected: torch.Tensor) -> bool:
    """Every output column reads one source column, in at most :data:`MAX_PARTS` parts (the plan pickers
    always had; it is preferred to a rotation)."""
    found = _column_parts(src, expected.numpy() if isinstance(expected, torch.Tensor) else expected)
    return found is not None and found[1] <= 1


def plan_move(src, expected: torch.Tensor):
    """How a single-input move the TMs cannot do is lowered: ``("pickers", None, None)`` when every output
    column reads one source column (column parts); else the cheaper of a z <-> c rotation of the source
    (``("rotate", (kind, group), map)``, the move that turns NCHW into NHWC and back, then TMs or column
    parts) and the best :func:`plan_gather` (``("pickers", ...)``); None when nothing does."""
    if _single_source_columns(src, expected):
        return ("pickers", None, None)
    best, best_cost = None, None
    general = plan_gather(src, expected)
    if general is not None:
        best, best_cost = ("pickers", None, None), general.cost
    zi = src[0]
    for group in [d for d in range(zi, 0, -1) if zi % d == 0]:
        for kind in ("fwd", "inv"):
            cost = _rotation_cost(src, kind, group)
            if best_cost is not None and cost >= best_cost:
                continue
            rshape, rmap = _rotated_map(src, expected, kind, group)
            if _match_mapping(rshape, rmap) is None:
                found = _column_parts(rshape, rmap.numpy())
                if found is None or found[1] > 1:
                    continue
                cost += _plan_cost("columns", rshape, tuple(rmap.shape), found[0], False, False)
            if best_cost is None or cost < best_cost:
                best, best_cost = ("rotate", (kind, group), rmap), cost
    return best


def gather_possible(src, expected) -> bool:
    """``plan_gather(src, expected) is not None``, without costing every plan: the capability check only
    asks whether some orientation has column or block parts, so it stops at the first that does. Block
    parts are tried first: they never build the table of sub-columns by output rows, which for a head
    split of a large activation is millions of entries."""
    e = np.asarray(expected, dtype=np.int64)
    for src_t, out_t in _VARIANTS:
        s2, e2 = _variant(src, e, src_t, out_t)
        if _block_parts(s2, e2) is not None or _column_parts(s2, e2) is not None:
            return True
    return False


def leading_repeat_tms(lead, target) -> List[TM]:
    """TMs that take the z slices of a canonical value with leading dims ``lead`` to leading dims ``target``, where
    ``lead`` (right-aligned to ``target``) is 1 in every dim it broadcasts over: for each run of such dims
    (f: their sizes' product), outermost first, the B slices inside it (B: the product of the source dims
    inside) are stacked into one block (``vstack: B``), the block is repeated f times (``broadcast: {r: f}``
    repeats whole tile rows modulo the block) and cut into slices again (``vslice: B*f``)."""
    source = [1] * (len(target) - len(lead)) + [int(d) for d in lead]
    target = [int(d) for d in target]
    if any(s not in (1, t) for s, t in zip(source, target)):
        raise ValueError(f"leading dims {list(lead)} do not broadcast to {target}")
    tms: List[TM] = []
    i = 0
    while i < len(target):
        if source[i] == target[i]:
            i += 1
            continue
        j = i
        while j < len(target) and source[j] != target[j]:
            j += 1
        inner, repeats = math.prod(source[j:]), math.prod(target[i:j])
        if inner > 1:
            tms.append(VStack(factor=inner))
        tms += [Broadcast(dim="r", factor=repeats), VSlice(factor=inner * repeats)]
        i = j
    return tms


def move_possible(src, expected: torch.Tensor) -> bool:
    """``plan_move(src, expected) is not None``, stopping at the first plan found: a gather of the source
    (which includes plan_move's single-source columns) or a rotation realised by TMs or single-source columns."""
    if gather_possible(src, expected.numpy()):
        return True
    zi = src[0]
    for group in [d for d in range(zi, 0, -1) if zi % d == 0]:
        for kind in ("fwd", "inv"):
            rshape, rmap = _rotated_map(src, expected, kind, group)
            if _match_mapping(rshape, rmap) is not None:
                return True
            found = _column_parts(rshape, rmap.numpy())
            if found is not None and found[1] <= 1:
                return True
    return False


def _rotation_cost(src, kind: str, group: int) -> float:
    """Tile matmuls of the dense column picker of a rotation (see ``_rotate``)."""
    zi, ri, ci = src
    b = zi // group
    if kind == "fwd":
        return float(b * tiles(ci) * group * tiles(ri) * ri * tiles(group))
    return float(b * tiles(ri) * group * tiles(ci) * ci * tiles(group))


_MOVE_CACHE: Dict[Any, Optional[str]] = {}


def _plain_tm_move(in_shapes, op_type: str, attrs: dict) -> bool:
    """True for the moves that are a netlist TM, or nothing, on the canonical (z, r, c) form whatever the
    shape: a transpose of the last two dims (the ``transpose`` TM) and a reshape that keeps the canonical
    form (it only regroups the leading dims). The full check builds an element map of the whole tensor to
    find the same answer, which for large activations and weights costs tens of milliseconds each."""
    if len(in_shapes) != 1:
        return False
    shape = tuple(int(d) for d in in_shapes[0])
    if op_type == "transpose" and len(shape) >= 2:
        if not all(-len(shape) <= attrs[d] < len(shape) for d in ("dim0", "dim1")):
            return False
        dims = {attrs["dim0"] % len(shape), attrs["dim1"] % len(shape)}
        return dims == {len(shape) - 2, len(shape) - 1}
    if op_type == "reshape":
        out = tuple(int(d) for d in attrs["shape"])
        return all(d > 0 for d in out) and math.prod(out) == math.prod(shape) \
            and canonical_zrc(out) == canonical_zrc(shape)
    return False


def unsupported_movement(in_shapes, op_type: str, attrs: dict) -> Optional[str]:
    """None when lowering can move the data of one data-movement op (inputs of ``in_shapes``), else why not.
    Agrees with lowering: a single input is moved by TMs or :func:`plan_move`, each input of a multi-input
    op by :func:`plan_gather` (a chain of such ops that no single move realises is lowered op by op)."""
    if _plain_tm_move(in_shapes, op_type, attrs):
        return None
    attrs = dict(attrs)
    if op_type in ("pad", "buda_pad"):
        attrs["value"] = 0.0  # a non-zero value is a zero pad plus a constant (decompose)
    key = (tuple(tuple(s) for s in in_shapes), op_type, _hashable(attrs), MAX_PARTS)
    if key in _MOVE_CACHE:
        return _MOVE_CACHE[key]
    reason = None
    try:
        emap = index_map(in_shapes, ((op_type, _hashable(attrs)),))
    except Exception as e:  # noqa: BLE001 -- any failure to evaluate the map is a move lowering cannot plan
        reason = f"{op_type} has no device data-movement form: {e}"
    else:
        out_shape = tuple(emap.shape)
        zo, ro, co = canonical_zrc(out_shape)
        emap = emap.reshape(zo, ro, co)
        offsets = np.cumsum([0] + [math.prod(s) for s in in_shapes])
        for k, s in enumerate(in_shapes):
            if reason is not None:
                break
            src = canonical_zrc(s)
            if len(in_shapes) == 1:  # the map is the input's own; TMs first: the usual answer, and cheapest
                ok = _match_mapping(src, emap) is not None or move_possible(src, emap)
            else:
                mine = (emap >= int(offsets[k])) & (emap < int(offsets[k + 1]))
                if not bool(mine.any()):
                    continue
                local = torch.where(mine, emap - int(offsets[k]), torch.full_like(emap, -1))
                ok = gather_possible(src, local.numpy())
            if not ok:
                reason = f"{op_type} from {list(s)} to {list(out_shape)}: {_no_plan()}"
    if len(_MOVE_CACHE) > 4096:
        _MOVE_CACHE.clear()
    _MOVE_CACHE[key] = reason
    return reason


def _rotated_map(src, expected: torch.Tensor, kind: str, group: int):
    """(rotated shape, ``expected`` re-expressed as indices into ``src`` rotated within groups of ``group``
    slices, see :meth:`DataMovementLowering._rotate`)."""
    zi, ri, ci = src
    base = torch.arange(zi * ri * ci).reshape(zi // group, group, ri, ci)
    rot = base.permute(0, 2, 3, 1) if kind == "fwd" else base.permute(0, 3, 1, 2)
    rot = rot.reshape((-1,) + tuple(rot.shape[2:]))
    position = torch.empty(zi * ri * ci, dtype=torch.int64)
    position[rot.reshape(-1)] = torch.arange(rot.numel())
    rmap = torch.where(expected >= 0, position[expected.clamp(min=0)], torch.full_like(expected, -1))
    return tuple(rot.shape), rmap
