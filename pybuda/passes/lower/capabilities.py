"""Which registry ops the device can run: the compiler's answer to the frontend's fallback question.

An op can run on the device when lowering handles its type directly (an elementwise op whose registry entry
names its netlist op in ``lower``, or one of the structural ops lowering implements) or a decomposition
rewrites it into such ops (``decompose.py``), and it computes on floating-point data:
the chip's formats are floats and block floats, so integer arithmetic (index math, masks built with
integer ops) belongs on the host. The one integer-to-float step the compiler absorbs is a cast of
integer data to float: its integer producer is either a graph input or an integer op, which runs on
the host, so on the device the cast reads an input, which is then pushed in a float format. The torch frontend
sends everything this module rejects to the CPU fallback devices, with the reason in its report. Data
movement (reshape, permute, slice, pad, concat ...) is checked with lowering's own planner
(:func:`pybuda.passes.lower.gather_plan.unsupported_movement`): a move no plan realises falls back too.

Booleans are the exception to "floats only": a mask is a float 0/1 on the device, exact in every format, so
comparisons, their casts to bool, logical and/not, ``where``/``masked_fill``, identities (``nop``: an ONNX Expand
or Identity that changes nothing) and data movement of masks run there (:data:`BOOL_OPS`); the host turns
boolean outputs back into ``torch.bool``.

An ``embedding`` (and an ``adv_index`` gather: ``x[ids]``, ``index_select``, ONNX/JAX gathers) reads integer ids
when they are pushed (a graph input, or one reshaped/transposed): the device looks them up as a one-hot matmul, and
the host checks every push against the table's rows. Tables beyond ``lookups.EMBEDDING_MAX_VOCAB`` rows, and ids
that may be negative, are looked up in chunks: the host pushes each id as two digits the source registers hold
exactly (``lookup_digits``), so nothing else may read those ids; tables beyond ``lookups.EMBEDDING_MAX_ROWS``
stay on the host.

Integer data runs there too when it is *integer-valued* within what the device keeps exact
(:mod:`pybuda.ops.integer`): each op's registry rule says whether its result is an integer given its
operands' ranges, and how large (argmax indices, counts of a mask, index arithmetic, moves of integers). Such
values are exact in Float32 up to 2**24 (the compiler keeps integer ops in Float32, ``exact_df``), and a cast
to an integer dtype of them is the identity. A cast of values not known to be integers truncates them: it runs
on the host, never as a wrong number. Integer results the device would round (a product of integers beyond
the multiplier's 2**10, a sum beyond 2**24) stay on the host too.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Optional

import torch

from pybuda.ir.graph import Graph, Node
from pybuda.ops import integer


def device_op_types() -> FrozenSet[str]:
    """Registry op types the compiler can lower (directly or through a decomposition)."""
    from pybuda.passes.graph import decompose
    from pybuda.passes.lower import common as lower_common

    direct = set(lower_common.LOWERINGS) | set(lower_common.GATHER_OPS)
    direct |= {"matmul", "reduce_sum", "reduce_avg", "reduce_max", "conv2d", "max_pool2d", "avg_pool2d", "constant"}
    return frozenset(direct | set(decompose._RULES))


#: Ops that produce or read booleans on the device. A boolean lives there as a float 0/1 (exact in every
#: format): masks from comparisons, their logical combinations, where/masked_fill, identities, and moving them
#: around.
BOOL_OPS: FrozenSet[str] = frozenset({"cast", "logical_and", "logical_not", "where", "nop"})


def unsupported_reason(graph: Graph, node: Node) -> Optional[str]:
    """None when ``node`` (an op of ``graph``) can run on the device, else why not."""
    from pybuda.ops import registry

    op_type = node.op_type
    if op_type not in device_op_types():
        return f"'{op_type}' has no device implementation"
    moves_data = registry.get(op_type).family == "tm"
    if op_type in ("reshape", "transpose") and _lookup_ids(graph, node):
        return None  # pushed ids on their way to a lookup: the lookup's own check decides (_lookup_reason)
    memo: Dict = {}  # integer ranges of the producers, shared by this check (pybuda.ops.integer.integer_range)
    if op_type == "argmax":  # indices are integers whatever the result's dtype
        why = _exact_reason(node, integer.integer_range(graph, node.name, memo) or (0, float("inf")))
        if why is not None:
            return why
    if op_type == "cast":
        src = graph[node.operands[0]]
        if node.dtype.is_floating_point or node.dtype == torch.bool:  # to bool: x != 0, a mask
            return _integer_operand_reason(graph, node, memo)
        r = integer.integer_range(graph, src.name, memo)
        if r is None:
            return (f"cast from {src.dtype} to {node.dtype} truncates values not known to be integers; the device "
                    f"computes in float formats")
        return _exact_reason(node, r)
    integer_data = not node.dtype.is_floating_point and node.dtype != torch.bool
    if integer_data or (node.dtype == torch.bool and not (op_type in BOOL_OPS or moves_data)):
        r = integer.integer_range(graph, node.name, memo) if integer_data else None
        if r is None:
            return (f"'{op_type}' computes {str(node.dtype).replace('torch.', '')} data the device would not keep "
                    f"exact; the device computes in float formats")
        why = _exact_reason(node, r)
        if why is not None:
            return why
    if op_type == "embedding" or (op_type == "adv_index" and _pushed(graph, graph[node.operands[1]])):
        return lookup_reason(graph, node)
    why = _integer_operand_reason(graph, node, memo)
    return why if why is not None else _movement_reason(graph, node)


def lookup_reason(graph: Graph, node: Node) -> Optional[str]:
    """Why the device cannot look up the ids of ``node`` (an ``embedding``, or an ``adv_index`` by ids pushed at run
    time), in the words of the fallback report; None when it can. The decomposition asks this too, so a direct
    compile (no CPU fallback) refuses such a lookup with the same reason (``lookups.decompose_embedding``)."""
    if node.op_type == "embedding":
        return _embedding_reason(graph, node)
    if node.op_type == "adv_index" and _pushed(graph, graph[node.operands[1]]):
        return _gather_reason(graph, node)
    return None


def _embedding_reason(graph: Graph, node: Node) -> Optional[str]:
    """Why the device cannot look ``node``'s ids up in its table (None when it can)."""
    table, ids = graph[node.operands[0]], graph[node.operands[1]]
    return _lookup_reason(graph, node, ids, table.shape[0], bool(node.attrs.get("negative_ids")))


def _gather_reason(graph: Graph, node: Node) -> Optional[str]:
    """Why the device cannot gather ``node``'s slices by its ids pushed at run time (None when it can)."""
    x, ids = graph[node.operands[0]], graph[node.operands[1]]
    if not x.dtype.is_floating_point:
        return f"'{node.op_type}' gathers {str(x.dtype).replace('torch.', '')} data by ids pushed at run time"
    size = x.shape[node.attrs["dim"] % len(x.shape)]
    return _lookup_reason(graph, node, ids, size, bool(node.attrs.get("negative_ids", True)), float_ids=False)


def _lookup_reason(graph: Graph, node: Node, ids: Node, rows: int, negative: bool,
                   float_ids: bool = True) -> Optional[str]:
    """Why the device cannot look ``ids`` up among ``rows`` rows (None when it can). The device lookup is a
    one-hot matmul (``lookups._lookup_onehot``): integer ids must be pushed (a graph input, moved only by
    reshapes/transposes), where the host checks each push against the rows. Ids of tables beyond
    ``lookups.EMBEDDING_MAX_VOCAB`` rows, and ids that may be negative, reach the device as two digits the
    host computes from the pushed ids (``lookup_digits``), so nothing else may read those ids."""
    from pybuda.passes.graph.lookups import EMBEDDING_CHUNK, EMBEDDING_MAX_ROWS, EMBEDDING_MAX_VOCAB, lookup_split

    what = f"'{node.op_type}' of {rows} rows"
    if rows > EMBEDDING_MAX_ROWS:
        return (f"{what}; the device's one-hot lookup (in chunks of {EMBEDDING_CHUNK} rows) reads the whole table "
                f"for every sample, so it takes at most {EMBEDDING_MAX_ROWS} rows: a larger table is looked up on "
                f"the host")
    if float_ids and ids.dtype.is_floating_point and not lookup_split(rows, negative):
        return None
    root = ids
    while root.kind == "op" and root.op_type in ("reshape", "transpose") and len(root.operands) == 1:
        root = graph[root.operands[0]]
    if root.kind != "input":
        if node.op_type == "embedding" and not lookup_split(rows, negative) and ids_within_table(graph, ids.name, rows):
            return None  # ids the device computes, provably within the table (lookups._lookup_onehot)
        return (f"'{node.op_type}' reads {str(ids.dtype).replace('torch.', '')} ids computed by ops, not pushed as an "
                f"input, that are not provably within the table's {rows} rows")
    split = lookup_split(rows, negative)
    if split and not root.shape:
        return f"{what} by a scalar id; the device takes ids of rank 1 or more"
    walk = ids
    while split and walk is not root:
        if walk.op_type != "reshape":
            return f"{what}: its ids are transposed after the push; the host pushes them as digits in the pushed order"
        walk = graph[walk.operands[0]]
    # How the ids are pushed (whole, or as lookup_digits) serves every lookup of them: they must agree, and with
    # digits nothing else may read the pushed ids.
    key = _lookup_key(graph, node)
    for u in _id_readers(graph, root):
        if u is node:
            continue
        if u.kind != "op" or u.op_type not in ("embedding", "adv_index"):
            if split:
                return (f"{what}{' by ids that may be negative' if negative else ''}: the host pushes ids "
                        f"'{root.name}' as digits the device compares exactly, but '{u.name}' "
                        f"({u.op_type or u.kind}) reads them too")
        elif _lookup_key(graph, u) != key:
            return (f"{what}: '{u.name}' looks the same ids '{root.name}' up too, and needs them pushed otherwise "
                    f"(whole for at most {EMBEDDING_MAX_VOCAB} rows and ids >= 0, else as digits, wrapped by the row "
                    f"count when negative); one push serves one way")
    return None


def _id_readers(graph: Graph, root: Node):
    """The nodes reading pushed ids ``root`` directly or through reshapes/transposes (not those moves)."""
    return _through_moves(graph, root.name)[0]


def _through_moves(graph: Graph, start: str):
    """``(readers, moves)``: the nodes reading ``start`` directly or through reshapes/transposes, and the names of
    those moves."""
    readers, seen, stack = [], set(), [start]
    while stack:
        for user in graph.users(stack.pop()):
            if user in seen:
                continue
            seen.add(user)
            u = graph[user]
            if u.kind == "op" and u.op_type in ("reshape", "transpose") and len(u.operands) == 1:
                stack.append(user)
            else:
                readers.append(u)
    return readers, {name for name in seen if name not in {u.name for u in readers}}


def _lookup_ids(graph: Graph, node: Node) -> bool:
    """Whether ``node``, a reshape or transpose of integers pushed as an input, only carries ids to lookups
    (embeddings, gathers by them): the lookup reads the pushed ids themselves (``lookups._lookup_onehot``)."""
    if node.dtype.is_floating_point or node.dtype == torch.bool or not _pushed(graph, node):
        return False
    readers, moves = _through_moves(graph, node.name)
    carried = moves | {node.name}
    return all(u.kind == "op" and u.op_type in ("embedding", "adv_index") and u.operands[-1] in carried
               and u.operands[0] not in carried for u in readers)


def _pushed(graph: Graph, ids: Node) -> bool:
    """Whether ``ids`` is a graph input, perhaps reshaped/transposed (what a gather by run-time ids reads)."""
    while ids.kind == "op" and ids.op_type in ("reshape", "transpose") and len(ids.operands) == 1:
        ids = graph[ids.operands[0]]
    return ids.kind == "input"


def _lookup_key(graph: Graph, node: Node):
    """How a lookup's ids are pushed: (as digits, the row count when the digits depend on it (negative ids wrap by
    it), else None). Lookups of the same ids must agree on it."""
    from pybuda.passes.graph.lookups import lookup_split

    if node.op_type == "embedding":
        rows, negative = graph[node.operands[0]].shape[0], bool(node.attrs.get("negative_ids"))
    else:
        x = graph[node.operands[0]]
        rows, negative = x.shape[node.attrs["dim"] % len(x.shape)], bool(node.attrs.get("negative_ids", True))
    split = lookup_split(rows, negative)
    return split, (rows if split and negative else None)


def ids_within_table(graph: Graph, ids: str, rows: int) -> bool:
    """Whether the integer ids ``ids`` (computed by ops) are provably in ``[0, rows)``
    (:func:`pybuda.ops.integer.integer_range`): RoBERTa's padding-aware positions ``cumsum(ids != pad) * mask
    + pad`` lie in ``[pad, pad + seq]``. Such ids need no check at push time: every lookup selects a row."""
    r = integer.integer_range(graph, ids)
    return r is not None and r[0] >= 0 and r[1] <= rows - 1


def _exact_reason(node: Node, r) -> Optional[str]:
    """Why integer results in range ``r`` are not exact on the device (None when they are)."""
    limit = integer.exact_limit()
    if integer.magnitude(r) <= limit:
        return None
    return (f"'{node.op_type}' computes integers up to {integer.magnitude(r):.0f} in magnitude; the device keeps "
            f"integers exact up to {limit} ({'Float32' if limit == integer.FLOAT32_EXACT_INT else 'Float16_b, Grayskull'}"
            f"'s accumulator)")


def _integer_operand_reason(graph: Graph, node: Node, memo: Dict) -> Optional[str]:
    """Why ``node`` cannot read its integer operands on the device (None when it can): they must be
    integer-valued data within Float32's exact range (an op producing integers checked that through its rule);
    a float op may read them only as a cast to float (other float math on integer operands stays on the
    host, as before)."""
    from pybuda.ops import registry

    op_type = node.op_type
    moves_data = registry.get(op_type).family == "tm"
    integer_out = not node.dtype.is_floating_point and node.dtype != torch.bool
    for operand in node.operands:
        dtype = graph[operand].dtype
        # A cast to float or bool reads integers exact either way: computed on the device (which this module
        # allows only within 2**24) or on the host and pushed (refused beyond 2**24 at push time).
        if dtype.is_floating_point or op_type in ("constant", "cast"):
            continue
        # A boolean operand is a 0/1 float on the device: where's condition, logical ops, data movement.
        if dtype == torch.bool and (op_type in BOOL_OPS or moves_data or integer_out):
            continue
        if integer_out:
            r = integer.integer_range(graph, operand, memo)
            if r is not None and integer.magnitude(r) <= integer.exact_limit():
                continue
        return f"'{op_type}' reads {str(dtype).replace('torch.', '')} operand '{operand}'"
    return None


def _movement_reason(graph: Graph, node: Node) -> Optional[str]:
    """Why lowering cannot move the data of a data-movement op (None when it can): the same planner as
    lowering decides, so a move the device cannot express goes to the CPU instead of failing to lower."""
    from pybuda.passes.lower.common import GATHER_OPS
    from pybuda.passes.lower.gather_plan import unsupported_movement

    if node.op_type not in GATHER_OPS:
        return None
    return unsupported_movement([tuple(graph[o].shape) for o in node.operands], node.op_type, node.attrs)
