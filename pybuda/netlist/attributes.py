"""The op ``attributes`` schema (netlist_backend_spec §3.2): which keys exist, their value types, and
which op types may carry them. Used by the parser (unknown keys, wrong types) and by the validator
(attributes on the wrong op type, for netlists built in Python).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, FrozenSet, Optional

from pybuda.netlist.model import MATMUL_OPS, SFPU_OPS

#: A check returns None when the value is fine, else a message.
Check = Callable[[Any], Optional[str]]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def int_at_least(low: int) -> Check:
    """Check: an integer >= ``low``."""
    def check(v: Any) -> Optional[str]:
        if not _is_int(v):
            return f"expected an integer, got {v!r}"
        return None if v >= low else f"must be >= {low}, got {v}"
    return check


def number(low: Optional[float] = None, high: Optional[float] = None) -> Check:
    """Check: an int or float within [low, high] where given."""
    def check(v: Any) -> Optional[str]:
        if not _is_num(v):
            return f"expected a number, got {v!r}"
        if low is not None and v < low:
            return f"must be >= {low}, got {v}"
        if high is not None and v > high:
            return f"must be <= {high}, got {v}"
        return None
    return check


def boolean(v: Any) -> Optional[str]:
    """Check: true or false."""
    return None if isinstance(v, bool) else f"expected true or false, got {v!r}"


def one_of(*choices: Any) -> Check:
    """Check: one of ``choices``."""
    def check(v: Any) -> Optional[str]:
        if isinstance(v, bool) or v not in choices:
            return f"expected one of {list(choices)}, got {v!r}"
        return None
    return check


def int_list(low: int = 0, nonempty: bool = False) -> Check:
    """Check: a list of integers >= ``low`` (non-empty if asked)."""
    def check(v: Any) -> Optional[str]:
        if not isinstance(v, (list, tuple)) or not all(_is_int(x) and x >= low for x in v):
            return f"expected a list of integers >= {low}, got {v!r}"
        if nonempty and not v:
            return "must not be empty"
        return None
    return check


def kernel_broadcast_map(v: Any) -> Optional[str]:
    """Check: ``{input_N: tiles}`` with tiles >= 0."""
    if not isinstance(v, dict) or not v:
        return f"expected a non-empty map {{input_N: tiles}}, got {v!r}"
    for k, n in v.items():
        if not isinstance(k, str) or not re.fullmatch(r"input_\d+", k):
            return f"keys must be input_N, got {k!r}"
        if not _is_int(n) or n < 0:
            return f"{k}: expected an integer >= 0, got {n!r}"
    return None


def splice_input(v: Any) -> Optional[str]:
    """Check: splice ``[index, length, stride]``."""
    if (not isinstance(v, (list, tuple)) or len(v) != 3 or not all(_is_int(x) for x in v)):
        return f"expected [index, length, stride], got {v!r}"
    index, length, stride = v
    if index < 0 or length <= 0 or stride <= 0:
        return f"needs index >= 0, length > 0, stride > 0, got {list(v)}"
    return None


@dataclass(frozen=True)
class AttrSpec:
    """One attribute: its value check and the op types that may carry it (None = any op)."""

    check: Check
    op_types: Optional[FrozenSet[str]]


_MM = frozenset(MATMUL_OPS | {"fused_op"})
_SPARSE = _MM

ATTRIBUTES = {
    # matmul / depthwise / reduce blocking of the inner dimension
    "m_k": AttrSpec(int_at_least(1), frozenset({"matmul", "depthwise", "reduce", "fused_op"})),
    "u_kt": AttrSpec(int_at_least(1), frozenset({"matmul", "depthwise", "reduce", "fused_op"})),
    "bias": AttrSpec(boolean, frozenset({"matmul", "depthwise", "fused_op"})),
    "accumulate": AttrSpec(boolean, _MM),
    "z": AttrSpec(int_at_least(1), frozenset({"matmul", "reduce", "fused_op"})),
    "l1_acc": AttrSpec(boolean, frozenset({"matmul", "depthwise"})),
    "min_buffer_input": AttrSpec(one_of(0, 1), frozenset({"matmul", "depthwise", "fused_op"})),
    "requant": AttrSpec(boolean, frozenset({"matmul"})),
    "dequant": AttrSpec(boolean, frozenset({"matmul"})),
    # the golden supports gelu only as a fused matmul SFPU op
    "sfpu_op": AttrSpec(one_of("gelu"), frozenset({"matmul"})),
    "sfpu_execution_thread": AttrSpec(one_of("math", "pack"), frozenset(MATMUL_OPS | SFPU_OPS)),
    # sparse ("identity") matmul
    "identity": AttrSpec(boolean, _SPARSE),
    "num_index_tiles": AttrSpec(int_at_least(0), _SPARSE),
    "num_sparse_tiles": AttrSpec(int_at_least(0), _SPARSE),
    "num_columns": AttrSpec(int_at_least(0), _SPARSE),
    "sparse_tile_ptr_bits": AttrSpec(int_at_least(0), _SPARSE),
    "sparse_ublock_idx_bits": AttrSpec(int_at_least(0), _SPARSE),
    "indices_len": AttrSpec(int_at_least(0), _SPARSE),
    "fracture_factor": AttrSpec(int_at_least(1), _SPARSE),
    "starting_row": AttrSpec(int_at_least(0), _SPARSE),
    "act_t": AttrSpec(int_at_least(1), _SPARSE),
    "num_nz_strips": AttrSpec(int_list(0), _SPARSE),
    # SFPU
    "approximate_mode": AttrSpec(boolean, None),
    "vector": AttrSpec(one_of("r", "c", "rc"), None),
    "p": AttrSpec(number(0.0, 1.0), frozenset({"dropout", "fused_op"})),
    "seed": AttrSpec(int_at_least(0), frozenset({"dropout", "fused_op"})),
    "slope": AttrSpec(number(), frozenset({"lrelu", "fused_op"})),
    "exp": AttrSpec(int_at_least(0), frozenset({"power", "fused_op"})),
    # reduce (only max is a netlist reduce; sum/avg are lowered to matmuls)
    "dim": AttrSpec(one_of("r", "c", "z"), frozenset({"reduce", "fused_op"})),
    "type": AttrSpec(one_of("max"), frozenset({"reduce", "fused_op"})),
    # others
    "fused_op_id": AttrSpec(int_at_least(0), frozenset({"fused_op"})),
    "granularity": AttrSpec(one_of("ublock", "t"), frozenset({"splice"})),
    "num_indices": AttrSpec(int_at_least(0), frozenset({"embedding"})),
    "k": AttrSpec(int_at_least(1), frozenset({"topk"})),
    "sort": AttrSpec(one_of("max", "argmax"), frozenset({"topk"})),
    "kreduce": AttrSpec(boolean, frozenset({"topk"})),
    "ingress_channels": AttrSpec(int_list(0, nonempty=True), frozenset({"ethernet_datacopy"})),
    "egress_channels": AttrSpec(int_list(0, nonempty=True), frozenset({"ethernet_datacopy"})),
    "dest_device": AttrSpec(int_at_least(0), frozenset({"ethernet_datacopy"})),
    # any op
    "kernel_broadcast": AttrSpec(kernel_broadcast_map, None),
    "kernel_broadcast_per_t": AttrSpec(kernel_broadcast_map, None),
    "single_tile": AttrSpec(int_list(0), None),
    "relu_en": AttrSpec(boolean, None),
    "relu_threshold": AttrSpec(number(0.0), None),
    "relu_mode": AttrSpec(one_of("min", "max"), None),
    "stoch_rnd_mode": AttrSpec(one_of("none", "fpu", "pack", "all"), None),
    "srnd_fpu_en": AttrSpec(boolean, None),
    "zero_point": AttrSpec(number(), None),
}

#: Splice's per-input ``inputN: [index, length, stride]`` (N < 8).
SPLICE_INPUT_KEY = re.compile(r"input(\d+)")
SPLICE_INPUT = AttrSpec(splice_input, frozenset({"splice"}))

#: Attributes a scheduled op inside a fused op may carry (parse_scheduled_op_fields).
FUSED_SUB_OP_ATTRIBUTES = frozenset({"m_k", "u_kt", "vector", "type", "dim", "relu_en", "relu_threshold",
                                     "relu_mode", "p", "seed", "slope", "exp"})


def attribute_spec(key: str) -> Optional[AttrSpec]:
    """The spec of an attribute key (``inputN`` maps to splice's), or None if unknown."""
    if key in ATTRIBUTES:
        return ATTRIBUTES[key]
    m = SPLICE_INPUT_KEY.fullmatch(key)
    if m and int(m.group(1)) < 8:
        return SPLICE_INPUT
    return None


def check_attribute(key: str, value: Any, op_type: Optional[str] = None) -> Optional[str]:
    """None if ``key: value`` is a valid attribute (on ``op_type`` if given), else the reason."""
    spec = attribute_spec(key)
    if spec is None:
        return "unknown attribute"
    if op_type is not None and spec.op_types is not None and op_type not in spec.op_types:
        return f"attribute not valid on a {op_type} op (allowed on {sorted(spec.op_types)})"
    return spec.check(value)
