"""Shared pieces of lowering: the device-value types, the elementwise op maps (derived from the op
registry's ``lower`` slots and the device-op table) and small helpers (shape alignment, TM-sequence
matching, pooling windows). See :mod:`pybuda.passes.lower.to_tiles`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from pybuda.netlist.device_ops import device_op, ops_of_class
from pybuda.netlist.host_io import tiles
from pybuda.netlist.tms import TM, HSlice, HStack, TileShape3, Transpose, VSlice, VStack, apply_tms
from pybuda.ops import registry
from pybuda.ops.registry import DeviceLowering

TILE = 32
ZERO, REP, JUNK = "zero", "rep", "junk"
#: Tag of an output queue: True when its tile padding may hold values other than zeros (a host pop drops
#: them; a program reading the queue on the device must zero them, see ``ir.graph.JUNK_PADDED_INPUT``).
JUNK_PADDING = "junk_padding"

#: Registry ops that become one netlist op (their ``lower`` slot), by name.
LOWERINGS: Dict[str, DeviceLowering] = {op.name: op.lower for op in registry.all_ops() if op.lower is not None}
#: Registry op -> netlist op type, for the ops whose device op is binary / unary (copy or SFPU).
BINARY = {name: low.op for name, low in LOWERINGS.items() if device_op(low.op).cls == "binary"}
UNARY = {name: low.op for name, low in LOWERINGS.items() if device_op(low.op).is_unary}
#: Unary ops with f(0) == 0 keep zero padding zero.
ZERO_PRESERVING = {name for name, op in UNARY.items() if device_op(op).zero_preserving}
#: Unary ops that turn large finite junk padding into inf (``exp`` of ``0 - rowmax`` after a row of -1e4
#: logits): their input's junk padding is zeroed first (see ``_safe_pad`` of the lowering pass).
PAD_SENSITIVE = frozenset({"exp", "sqrt"}) & set(UNARY)
#: Unary ops with a pole at zero: zero tile padding would become inf, and inf meets a 0 of a mask or of a
#: picker matmul later (NaN in real values), so their operand's padding is set to ones first.
POLE_AT_ZERO = frozenset({"reciprocal", "log"}) & set(UNARY)
#: Unary ops whose every output is >= 0, and softmax, which decomposes into such ops: zero padding
#: cannot win a max over their values.
NON_NEGATIVE = frozenset({name for name, op in UNARY.items() if device_op(op).non_negative} | {"softmax"})
#: Ops that keep a value's sign: what reaches them non-negative leaves them non-negative.
SIGN_PRESERVING = frozenset({"reshape", "transpose", "max_pool2d", "select", "narrow", "squeeze", "unsqueeze"})
GATHER_OPS = {"reshape", "transpose", "hslice", "hstack", "vslice", "vstack", "index", "select", "narrow",
              "pad", "pad_tile", "concatenate", "broadcast", "repeat", "buda_pad", "buda_unpad",
              "interleave", "binary_stack", "pixel_shuffle"}
#: Netlist op types that may transpose input 0 (copy and SFPU ops; binary ones only off Grayskull).
TRANSPOSE_OK_INPUT0 = ops_of_class("copy", "sfpu")
BINARY_OPS = ops_of_class("binary")


@dataclass(frozen=True)
class DVal:
    """A device value: producer (op or queue), pending TMs for consumers, logical canonical shape."""

    src: str
    tms: Tuple[TM, ...]
    z: int
    r: int
    c: int
    pad_r: str = ZERO
    pad_c: str = ZERO
    layout: str = "canonical"  # or "flat": NHWC [1, H, W, C] stored as [1, H*W, C]
    spatial: Optional[Tuple[int, int]] = None  # (H, W) of a flat value
    is_queue_value: bool = False  # an untouched parameter/constant (value known at compile time)

    @property
    def tshape(self) -> Tuple[int, int, int]:
        """(z, rt, ct) in tiles."""
        return (self.z, tiles(self.r), tiles(self.c))


@dataclass(frozen=True)
class Lazy:
    """A chain of single-input data-movement ops not yet lowered: they are matched as one mapping."""

    base: DVal
    base_shape: Tuple[int, ...]
    ops: Tuple[Tuple[str, Any], ...]  # (op_type, attrs as a hashable tuple)
    shape: Tuple[int, ...]
    name: str


# --- helpers --------------------------------------------------------------------------------------------------


def _tile3(zrc):
    z, r, c = zrc
    return (z, tiles(r), tiles(c))


def _right_align(shape: Sequence[int], rank: int) -> Tuple[int, ...]:
    return (1,) * (rank - len(shape)) + tuple(shape)


def _combine_pad(op: str, pads: Sequence[str], size: int) -> str:
    """The padding of binary netlist op ``op``'s output from its inputs' paddings."""
    if size % TILE == 0:
        return ZERO
    if size == 1 and all(p == REP for p in pads):
        return REP
    row = device_op(op)
    if row.zero_absorbing and any(p == ZERO for p in pads):
        return ZERO
    if row.zero_preserving and all(p == ZERO for p in pads):
        return ZERO
    return JUNK


def _reduced_spatial(v: DVal, dim: str):
    return v.spatial if v.layout == "flat" else None


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


def _unhashable(value: Any) -> Any:
    """Attrs back from :func:`_hashable` (a sorted tuple of pairs) as a dict."""
    if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                                        for p in value):
        return {k: v for k, v in value}
    return value


def _divisors(n: int) -> List[int]:
    return [d for d in range(2, n + 1) if n % d == 0]


def _match_mapping(src: Tuple[int, int, int], expected: torch.Tensor) -> Optional[List[TM]]:
    """The shortest netlist TM sequence moving every element of a canonical ``src`` (z, r, c) to where
    ``expected`` (the source flat index of each output element, -1 = none) says, or None.

    Candidates are checked on padded index tensors, so a sequence that would move padding into the
    valid region (a slice of an unaligned dim) is rejected by the check itself."""
    zi, ri, ci = src
    zo, ro, co = expected.shape
    if (zi * ri * ci) != expected.numel() or (expected < 0).any():
        return None
    if (zi, ri, ci) == (zo, ro, co) and torch.equal(expected.reshape(-1), torch.arange(expected.numel())):
        return []
    padded = None  # built for the first candidate: often there is none
    for seq in _tm_candidates((zi, tiles(ri), tiles(ci)), (zo, tiles(ro), tiles(co))):
        if padded is None:
            padded = torch.full((zi, tiles(ri) * TILE, tiles(ci) * TILE), -1, dtype=torch.int64)
            padded[:, :ri, :ci] = torch.arange(zi * ri * ci).reshape(zi, ri, ci)
        if torch.equal(apply_tms(padded, seq)[:, :ro, :co], expected):
            return list(seq)
    return None


def _tm_candidates(start: Tuple[int, int, int], target: Tuple[int, int, int], max_len: int = 3):
    """TM sequences (shortest first) taking tile shape ``start`` to ``target``."""
    frontier = [((), start)]
    if start == target:
        yield ()
    if math.prod(start) != math.prod(target):
        return  # every TM here keeps the number of tiles: no sequence can get there
    for _ in range(max_len):
        nxt = []
        for seq, shape in frontier:
            z, rt, ct = shape
            moves: List[TM] = [Transpose()]
            moves += [HSlice(factor=f) for f in _divisors(ct)]
            moves += [VSlice(factor=f) for f in _divisors(rt)]
            moves += [HStack(factor=f) for f in _divisors(z)]
            moves += [VStack(factor=f) for f in _divisors(z)]
            for m in moves:
                s2 = m.apply(TileShape3(*shape))  # tms_shape of the one TM, without reading a TM list
                seq2 = seq + (m,)
                if s2 == target:
                    yield seq2
                if s2[0] * s2[1] * s2[2] == z * rt * ct:
                    nxt.append((seq2, s2))
        frontier = nxt[:400]


def non_negative(graph, name: str) -> bool:
    """True when value ``name`` of the IR graph is >= 0 everywhere by construction (the output of a relu
    that clamps at a threshold >= 0 or of a :data:`NON_NEGATIVE` op, seen through :data:`SIGN_PRESERVING`
    ops), so zero padding cannot win a max over it."""
    node = graph[name]
    while node.kind == "op" and node.op_type in SIGN_PRESERVING:
        node = graph[node.operands[0]]
    if node.kind != "op":
        return False
    if node.op_type == "relu":  # mode 'min' with a threshold >= 0 keeps x >= threshold, else 0
        return node.attrs.get("mode", "min") == "min" and node.attrs.get("threshold", 0.0) >= 0
    return node.op_type in NON_NEGATIVE


def _window(h, w, ho, wo, kh, kw, stride, dil, pads):
    """Every (kernel position, output pixel) pair with its input pixel; ``valid`` = inside the image."""
    pos, oh, ow = np.meshgrid(np.arange(kh * kw), np.arange(ho), np.arange(wo), indexing="ij")
    pos, oh, ow = pos.reshape(-1), oh.reshape(-1), ow.reshape(-1)
    ki, kj = pos // kw, pos % kw
    ih = oh * stride[0] + ki * dil[0] - pads[0]
    iw = ow * stride[1] + kj * dil[1] - pads[1]
    valid = (ih >= 0) & (ih < h) & (iw >= 0) & (iw < w)
    return pos, oh, ow, ih, iw, valid
