"""Lookups by ids: ``embedding(table, ids)`` and ``adv_index(x, ids, dim)`` (``x[ids]``, ``index_select``, ONNX and
JAX gathers) as one-hot matmuls the device runs, for the decomposition pass (:mod:`pybuda.passes.graph.decompose`).

The one-hot of ``ids`` compares them with the row numbers (:func:`pybuda.passes.graph.exact_steps.equal_of`). Ids
are pushed by the host (which checks each push against the rows) or computed on the device and provably within
the table (``capabilities.ids_within_table``). Tables beyond :data:`EMBEDDING_MAX_VOCAB` rows, and ids that may count
from the end, compare two digits the host pushes instead (``lookup_digits``); the one-hot matmul copies rows whole
(``ONE_HOT_COPY``, at :data:`ONE_HOT_FIDELITY` or above).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from pybuda.ir.graph import CONSTANT, INPUT
from pybuda.ops.integer import narrow_value_range
from pybuda.ops.common import normalize_dim
from pybuda.passes.graph.exact_steps import SIGN, equal_of, heaviside, negated
from pybuda.passes.graph.rewrite import Rewriter
from pybuda.passes.lowered.exact_pickers import ONE_HOT_COPY


#: Rows of one chunk of the one-hot lookup. The chip reads every operand of an elementwise op through 19-bit
#: source registers (10 fraction bits: TF32 for Float32 data), where integers are exact only up to 2**11, so an
#: id beyond that compared whole would match a neighbour's row. Ids of larger tables (and ids that may be
#: negative) reach the device as two digits, id // chunk and id % chunk (``lookup_digits``, which the host
#: applies before the push), each of which the registers hold exactly.
EMBEDDING_CHUNK = 2 ** 11
#: Tables up to this many rows take the one-hot lookup whole (their ids compared whole are exact).
EMBEDDING_MAX_VOCAB = EMBEDDING_CHUNK
#: Largest table the device looks up. The digits stay exact up to ``EMBEDDING_CHUNK ** 2`` rows, but the one-hot
#: matmul reads the whole table for every sample: beyond a million rows the lookup belongs on the host.
EMBEDDING_MAX_ROWS = 2 ** 20
#: The fidelity a one-hot copy needs to pass Float16_b and Bfp8 data whole: all of SrcA (9 fraction bits) times
#: SrcB's high part, where the 0/1 sits.
ONE_HOT_FIDELITY = "HiFi2"


def lookup_split(rows: int, negative: bool) -> bool:
    """Whether a lookup in a table of ``rows`` rows compares its ids as two digits (``lookup_digits``)."""
    return rows > EMBEDDING_MAX_VOCAB or negative


def _ids_root(rw: Rewriter, ids: str):
    """(the node pushed ids come from, the reshape/transpose nodes between it and ``ids``, outermost first)."""
    node = rw.node(ids)
    chain = []
    while node.kind == "op" and node.op_type in ("reshape", "transpose") and len(node.operands) == 1:
        chain.append(node)
        node = rw.node(node.operands[0])
    return node, chain


def _lookup_onehot(rw, node, ids: str, rows: int, negative: bool) -> Optional[str]:
    """The 0/1 matrix ``[.., N, rows]`` of a lookup of ``ids`` ``[.., N]`` in ``rows`` rows, or None when the device
    cannot compute it.

    Integer ids must be pushed (a graph input, moved only by reshapes/transposes). They are pushed in Float32, and
    the host refuses a push outside ``[0, rows - 1]`` (``[-rows, rows - 1]`` when ``negative``): on the device an
    id outside selects no row. Small tables compare each id with ``range(rows)``. Larger ones (and negative ids)
    compare the digits of ``lookup_digits``, pushed as two slices ``[2, N, 1]``, with the table's digits
    ``[2, 1, rows]``: the larger of the two differences' magnitudes (a maximum over the slices, which the chip
    reduces with no multiplier) is 0 exactly where both digits match. No value on the way needs more than 11
    significant bits, and a rounding of any of them (Float16_b on Grayskull) keeps it non-zero."""
    src = rw.node(ids)
    split = lookup_split(rows, negative)
    if rows > EMBEDDING_MAX_ROWS:
        return None
    root, chain = _ids_root(rw, ids)
    if split and any(step.op_type != "reshape" for step in chain):
        return None  # a transpose reorders the ids: their digits are pushed in the input's order
    if root.kind != INPUT and not split and not src.dtype.is_floating_point:
        from pybuda.passes.lower.capabilities import ids_within_table

        if not ids_within_table(rw.new, ids, rows):
            return None  # ids computed by integer ops, of unknown range: lowering names the op as unsupported
        # Ids the device computes, provably within the table (RoBERTa's positions): no push to check.
    elif not src.dtype.is_floating_point or split:
        if root.kind != INPUT or (split and not root.shape):
            return None  # ids computed by ops: lowering names the op as unsupported
        # Integer ids are pushed in a float format, where they are exact (< 2**24 in Float32); the data-format
        # pass keeps integer-valued queues in Float32 whatever the default format is.
        root.tags["device_dtype"] = "float32"
        narrow_value_range(root.tags, -rows if negative else 0, rows - 1)  # another lookup's bound holds too
    target = tuple(rw.shape(ids)) + (1,)
    exact = {"exact_df": "Float32"}  # a block format would round neighbouring ids of a block together
    if not split:
        col = rw.op(f"{node.name}.ids", "reshape", [ids], {"shape": target})
        ids_range = rw.constant(f"{node.name}.range", torch.arange(rows, dtype=torch.float32), tags=exact)
        return equal_of(rw, node, col, ids_range, "onehot")
    at = 1 if len(root.shape) >= 2 else 0  # dim 0 of a batched input holds the microbatch's samples
    # Without wrapping the digits do not depend on the rows: lookups of the same ids in other tables share them.
    attrs = {"rows": rows if negative else EMBEDDING_MAX_ROWS, "chunk": EMBEDDING_CHUNK, "wrap": bool(negative),
             "dim": at}
    shared = rw.shared.setdefault("lookup_digits", {})  # lookups of the same ids share one push
    key = (root.name, tuple(sorted(attrs.items())))
    if key not in shared:
        shared[key] = rw.op(f"{root.name}.digits", "lookup_digits", [root.name], attrs)
    j = torch.arange(rows)
    table_digits = torch.stack([torch.div(j, EMBEDDING_CHUNK, rounding_mode="floor"), j % EMBEDDING_CHUNK])
    digits = rw.constant(f"{node.name}.row_digits", table_digits.float().reshape(2, 1, rows), tags=exact)
    diff = rw.op(f"{node.name}.digit_diff", "subtract", [shared[key], digits], tags=SIGN)  # [.., 2, N, rows]
    mag = rw.op(f"{node.name}.digit_abs", "abs", [diff], tags=SIGN)
    far = rw.op(f"{node.name}.digit_max", "reduce_max", [mag], {"dim": at}, tags=SIGN)
    far = rw.op(f"{node.name}.digit_far", "reshape", [far], {"shape": target[:-1] + (rows,)}, tags=SIGN)
    return heaviside(rw, node, negated(rw, node, far, "onehot"), 1.0, "onehot")


#: Tags of a lookup's one-hot matmul ``onehot @ data``: it copies rows of its input 1.
_ONE_HOT_MATMUL = {ONE_HOT_COPY: 1, "min_fidelity": ONE_HOT_FIDELITY}


def _refuse_unsupported(rw, node) -> None:
    """Raise UnsupportedOpError naming lookup ``node`` (of the graph being decomposed) and why the device cannot run
    it, as the capability check words it (:func:`pybuda.passes.lower.capabilities.lookup_reason`), when it cannot.

    Through a TTDevice that check sends such a lookup to the CPU before decomposition; a direct compile
    (``pybuda_compile``, no CPU fallback) reaches here with it, and lowering would only name a helper op it made
    (``lookup_digits`` of ids another op reads too has no device form)."""
    from pybuda.errors import UnsupportedOp, UnsupportedOpError
    from pybuda.passes.lower.capabilities import lookup_reason

    why = lookup_reason(rw.old, node)
    if why is not None:
        where = node.tags.get("layer") or node.name
        raise UnsupportedOpError([UnsupportedOp(f"{node.op_type} '{node.name}'", where,
                                                f"{why}; run it on the CPU (a TTDevice's CPU fallback does)")],
                                 stage="POST_INITIAL_GRAPH_PASS")


def decompose_embedding(rw, node, ops, ctx):
    _refuse_unsupported(rw, node)
    table, ids = ops
    onehot = _lookup_onehot(rw, node, ids, rw.shape(table)[0], bool(node.attrs.get("negative_ids")))
    if onehot is None:
        return None  # lowering names the op as unsupported (PyTorch models run it on the CPU)
    return rw.op(node.name, "matmul", [onehot, table], tags=_ONE_HOT_MATMUL)


def decompose_adv_index(rw, node, ops, ctx):
    """``adv_index(x, ids, dim)`` by ids pushed at run time (``x[ids]``, ``index_select``, an ONNX or JAX gather):
    the one-hot lookup of x's slices along dim, ``onehot @ x`` (dim moved to the rows) or ``x @ onehot^T`` (dim
    last). Constant ids are lowering's (pickers)."""
    x, ids = ops
    if rw.node(ids).kind == CONSTANT or _ids_root(rw, ids)[0].kind != INPUT:
        return None
    _refuse_unsupported(rw, node)
    if not rw.node(x).dtype.is_floating_point:
        return None
    shape = tuple(rw.shape(x))
    rank, dim = len(shape), normalize_dim(node.attrs["dim"], len(shape))
    flat = rw.op(f"{node.name}.flat_ids", "reshape", [ids], {"shape": (math.prod(rw.shape(ids)),)}) \
        if len(rw.shape(ids)) != 1 else ids
    onehot = _lookup_onehot(rw, node, flat, shape[dim], bool(node.attrs.get("negative_ids", True)))
    if onehot is None:
        return None
    if rank >= 2 and dim == rank - 1:  # x @ onehot^T: the transpose is a netlist TM
        onehot_t = rw.op(f"{node.name}.onehot_t", "transpose", [onehot], {"dim0": 0, "dim1": 1})
        return rw.op(node.name, "matmul", [x, onehot_t], tags={ONE_HOT_COPY: 0, "min_fidelity": ONE_HOT_FIDELITY})
    if rank == 1:
        col = rw.op(f"{node.name}.col", "reshape", [x], {"shape": (shape[0], 1)})
        out = rw.op(f"{node.name}.pick", "matmul", [onehot, col], tags=_ONE_HOT_MATMUL)
        return rw.op(node.name, "reshape", [out], {"shape": tuple(node.shape)})
    if dim == rank - 2:
        return rw.op(node.name, "matmul", [onehot, x], tags=_ONE_HOT_MATMUL)
    moved = rw.op(f"{node.name}.to_rows", "transpose", [x], {"dim0": dim, "dim1": rank - 2})
    out = rw.op(f"{node.name}.pick", "matmul", [onehot, moved], tags=_ONE_HOT_MATMUL)
    return rw.op(node.name, "transpose", [out], {"dim0": dim, "dim1": rank - 2})
