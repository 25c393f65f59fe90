"""What each netlist op and TM computes, on device tensors.

A device tensor here is float32 ``[N, t, R, C]``: N inputs of one ``execute`` processed together (the
golden batches over ``input_count``, which is numerically identical to running them one by one),
``t`` slices, and R x C datums with R = 32·rt, C = 32·ct. Formats are applied by the caller
(:mod:`pybuda.backend.golden`); the functions here take already-unpacked values and return the math
result before packing, except that multiplies go through the fidelity model when ``fidelity`` is given.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Sequence

import torch

from pybuda.backend import formats
from pybuda.errors import NetlistError
from pybuda.netlist import model as nl
from pybuda.tensor import MathFidelity

TILE = 32


# --------------------------------------------------------------------------------------------------
# TMs (spec §3.3), applied on [N, t, R, C]
# --------------------------------------------------------------------------------------------------

def apply_tm(x: torch.Tensor, tm: nl.TM) -> torch.Tensor:
    """Apply one netlist TM to a device tensor."""
    n, t, r, c = x.shape
    if isinstance(tm, nl.Broadcast):
        if tm.dim == "r":
            return x.repeat(1, 1, tm.factor, 1)
        if tm.dim == "c":
            return x.repeat(1, 1, 1, tm.factor)
        return x.expand(n, tm.factor, r, c)  # z: t == 1 checked by the validator
    if isinstance(tm, nl.HSlice):
        f = tm.factor
        return x.reshape(n, t, r, f, c // f).permute(0, 1, 3, 2, 4).reshape(n, t * f, r, c // f)
    if isinstance(tm, nl.VSlice):
        f = tm.factor
        return x.reshape(n, t * f, r // f, c)
    if isinstance(tm, nl.HStack):
        f = tm.factor
        return x.reshape(n, t // f, f, r, c).permute(0, 1, 3, 2, 4).reshape(n, t // f, r, f * c)
    if isinstance(tm, nl.VStack):
        f = tm.factor
        return x.reshape(n, t // f, f * r, c)
    if isinstance(tm, nl.Transpose):
        return x.transpose(-1, -2)
    if isinstance(tm, nl.TileBroadcast):
        return tile_broadcast(x, tm.dim)
    if isinstance(tm, nl.Pad):
        return torch.nn.functional.pad(x, (0, tm.ct * TILE, 0, tm.rt * TILE), value=float(tm.value))
    raise NetlistError("input_tms", f"golden backend does not implement TM {tm!r}")


def apply_input_transforms(x: torch.Tensor, tms: Sequence[nl.TM], unpad: Optional[nl.InputUnpad],
                           pad: Optional[nl.InputPad]) -> torch.Tensor:
    """Unpad, then the TMs in order (pad TMs last), then the input pad — the golden's order (§7.1)."""
    if unpad is not None:
        x = x[:, :, : x.shape[2] - unpad.rt * TILE, : x.shape[3] - unpad.ct * TILE]
    for tm in tms:
        if not isinstance(tm, nl.Pad):
            x = apply_tm(x, tm)
    for tm in tms:
        if isinstance(tm, nl.Pad):
            x = apply_tm(x, tm)
    if pad is not None:
        x = apply_tm(x, nl.Pad(rt=pad.rt, ct=pad.ct, value=pad.pad_value))
    return x


def tile_broadcast(x: torch.Tensor, dim: str) -> torch.Tensor:
    """Broadcast row 0 ('r') or column 0 ('c') of every tile across the tile."""
    n, t, r, c = x.shape
    tiles = x.reshape(n, t, r // TILE, TILE, c // TILE, TILE)
    if dim == "r":
        tiles = tiles[:, :, :, 0:1, :, :].expand(n, t, r // TILE, TILE, c // TILE, TILE)
    else:
        tiles = tiles[:, :, :, :, :, 0:1].expand(n, t, r // TILE, TILE, c // TILE, TILE)
    return tiles.reshape(n, t, r, c)


# --------------------------------------------------------------------------------------------------
# Op math
# --------------------------------------------------------------------------------------------------

def _mul(a: torch.Tensor, b: torch.Tensor, fidelity: Optional[MathFidelity]) -> torch.Tensor:
    return a * b if fidelity is None else formats.fidelity_multiply(a, b, fidelity)


def _matmul(a: torch.Tensor, b: torch.Tensor, fidelity: Optional[MathFidelity]) -> torch.Tensor:
    return torch.matmul(a, b) if fidelity is None else formats.fidelity_matmul(a, b, fidelity)


def _gelu(x: torch.Tensor, approximate: bool = False) -> torch.Tensor:
    return torch.nn.functional.gelu(x, approximate="tanh" if approximate else "none")


def _gelu_derivative(x: torch.Tensor) -> torch.Tensor:
    cdf = 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
    pdf = torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return cdf + x * pdf


def _dropout(x: torch.Tensor, attrs: Dict) -> torch.Tensor:
    p = float(attrs.get("p", 0.0))
    if p <= 0.0:
        return x
    gen = torch.Generator().manual_seed(int(attrs.get("seed", 0)))
    keep = torch.rand(x.shape, generator=gen) >= p
    return torch.where(keep, x / (1.0 - p), torch.zeros_like(x))


UNARY: Dict[str, Callable[[torch.Tensor, Dict], torch.Tensor]] = {
    "nop": lambda x, a: x,
    "datacopy": lambda x, a: x,
    "ethernet_datacopy": lambda x, a: x,
    "exp": lambda x, a: torch.exp(x),
    "log": lambda x, a: torch.log(x),
    "sqrt": lambda x, a: torch.sqrt(x),
    "gelu": lambda x, a: _gelu(x, bool(a.get("approximate_mode", False))),
    "gelu_derivative": lambda x, a: _gelu_derivative(x),
    "reciprocal": lambda x, a: torch.reciprocal(x),
    "sigmoid": lambda x, a: torch.sigmoid(x),
    "dropout": _dropout,
    "tanh": lambda x, a: torch.tanh(x),
    "square": lambda x, a: x * x,
    "power": lambda x, a: torch.pow(x, int(a.get("exp", 1))),
    "sine": lambda x, a: torch.sin(x),
    "cosine": lambda x, a: torch.cos(x),
    "lrelu": lambda x, a: torch.where(x >= 0, x, x * float(a.get("slope", 0.01))),
    "abs": lambda x, a: torch.abs(x),
}


def binary(op_type: str, a: torch.Tensor, b: torch.Tensor, fidelity: Optional[MathFidelity]) -> torch.Tensor:
    """add / subtract / multiply / maximum (ELWADD and ELWSUB ignore fidelity)."""
    if op_type == "add":
        return a + b
    if op_type == "subtract":
        return a - b
    if op_type == "multiply":
        return _mul(a, b, fidelity)
    if op_type == "maximum":
        return torch.maximum(a, b)
    raise NetlistError("type", f"golden backend does not implement binary op '{op_type}'")


def sparse_matmul(inputs: Sequence[torch.Tensor], attrs: Dict, out_shape: nl.TileShape3,
                  fidelity: Optional[MathFidelity]) -> torch.Tensor:
    """The ``identity: true`` matmul (TT-Buda's sparse matmul, as the compiler encodes it in
    ``pybuda.passes.pickers``): input 0 holds S unique 32x32 sparse tiles stacked vertically, input 2
    the RawUInt32 index of ``indices_len`` quadruples (t, out_rt, in_rt, s); output row-tile ``out_rt`` of
    slice ``t`` is the sum of ``tile_s @ in1[t][in_rt]`` over its quadruples. Each quadruple is one
    tile product on the matrix unit (sparse tile -> SrcB, activation -> SrcA), all done in one batch."""
    tiles_in, act, index = inputs[0], inputs[1], inputs[2]
    n, t_in, k, cols = act.shape
    count = int(attrs.get("indices_len", 0))
    out = torch.zeros(n, out_shape.t * out_shape.rt, TILE, cols, dtype=torch.float32)
    if count:
        quads = index[0].reshape(-1)[: 4 * count].round().to(torch.int64).reshape(-1, 4)
        qt, qr, qk, qs = quads.unbind(1)
        sparse_tiles = tiles_in[0, 0].reshape(-1, TILE, TILE)[qs]  # [L, 32, 32]
        act_tiles = act.reshape(n, t_in, k // TILE, TILE, cols)[:, qt if t_in > 1 else torch.zeros_like(qt), qk]
        contrib = _matmul(sparse_tiles.unsqueeze(0), act_tiles, fidelity)  # [n, L, 32, C]
        out.index_add_(1, qt * out_shape.rt + qr, contrib)
    return out.reshape(n, out_shape.t, out_shape.rt * TILE, cols)


def matmul(inputs: Sequence[torch.Tensor], attrs: Dict, fidelity: Optional[MathFidelity],
           out_shape: Optional[nl.TileShape3] = None) -> torch.Tensor:
    """Tile-blocked matmul per t slice; ``accumulate`` + ``z`` sums groups of z slices; ``bias`` is
    broadcast within each tile from its row 0; ``sfpu_op: gelu`` applies gelu to the result.
    ``identity: true`` selects the sparse form (:func:`sparse_matmul`)."""
    if attrs.get("identity"):
        return sparse_matmul(inputs, attrs, out_shape, fidelity)
    out = _matmul(inputs[0], inputs[1], fidelity)
    if attrs.get("accumulate"):
        z = int(attrs.get("z", out.shape[1]))
        n, t, r, c = out.shape
        out = out.reshape(n, t // z, z, r, c).sum(dim=2)
    if attrs.get("bias"):
        out = out + tile_broadcast(inputs[2], "r")
    if attrs.get("sfpu_op") == "gelu":
        out = _gelu(out)
    return out


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


def apply_relu(x: torch.Tensor, attrs: Dict) -> torch.Tensor:
    """Attribute relu (``relu_en``) after the op: mode 'min' keeps values >= the threshold, 'max' keeps
    values <= it, others become 0 (the same rule as the registry's relu op)."""
    if not attrs.get("relu_en"):
        return x
    threshold = float(attrs.get("relu_threshold", 0.0))
    keep = x <= threshold if attrs.get("relu_mode", "min") == "max" else x >= threshold
    return torch.where(keep, x, torch.zeros_like(x))
