"""Netlist TMs applied to padded device tensors: the exact semantics the lowering relies on.

A device tensor here is a torch tensor ``[z, R, C]`` (or ``[w, z, R, C]``) with ``R`` and ``C``
multiples of 32, i.e. one queue entry untilized. The functions follow netlist_backend_spec §3.3:
broadcasts repeat whole tiles, slices/stacks move whole column/row blocks between z and r/c, transpose
is a full 2-D transpose of every z slice. The golden backend must implement the same semantics.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

from pybuda.netlist.model import (TM, Broadcast, HSlice, HStack, Pad, TileBroadcast, Transpose, VSlice,
                                  VStack)

TILE = 32


def normalize_tm(tm: Any) -> TM:
    """A TM object from a netlist TM instance or its YAML form (``"transpose"``, ``{"vstack": 2}``,
    ``{"broadcast": {"r": 4}}``, ``{"pad": [rt, ct, value]}`` ...)."""
    if isinstance(tm, TM):
        return tm
    if tm == "transpose":
        return Transpose()
    if isinstance(tm, dict) and len(tm) == 1:
        (key, value), = tm.items()
        if key == "broadcast":
            (dim, factor), = value.items()
            return Broadcast(dim=dim, factor=int(factor))
        cls = {"hslice": HSlice, "hstack": HStack, "vslice": VSlice, "vstack": VStack}.get(key)
        if cls is not None:
            return cls(factor=int(value))
        if key == "tile_broadcast":
            return TileBroadcast(dim=value)
        if key == "pad":
            return Pad(rt=int(value[0]), ct=int(value[1]), value=float(value[2]) if len(value) > 2 else 0.0)
    raise ValueError(f"unknown TM {tm!r}")


def to_obj(tm: Any) -> Any:
    """The YAML form of a TM (what BudaOp.input_tms holds)."""
    return normalize_tm(tm).to_obj()


def apply_tm(t: torch.Tensor, tm: Any) -> torch.Tensor:
    """Apply one netlist TM (object or YAML form) to a ``[..., z, R, C]`` tensor."""
    tm = normalize_tm(tm)
    *lead, z, r, c = t.shape
    lead = tuple(lead)
    if isinstance(tm, Broadcast):
        f = tm.factor
        if tm.dim == "r":
            return t.repeat(*((1,) * len(lead)), 1, f, 1)
        if tm.dim == "c":
            return t.repeat(*((1,) * len(lead)), 1, 1, f)
        if z != 1:
            raise ValueError(f"broadcast z needs t == 1, got {z}")
        return t.repeat(*((1,) * len(lead)), f, 1, 1)
    if isinstance(tm, HSlice):
        f = tm.factor
        return t.reshape(lead + (z, r, f, c // f)).transpose(-3, -2).reshape(lead + (z * f, r, c // f))
    if isinstance(tm, HStack):
        f = tm.factor
        return t.reshape(lead + (z // f, f, r, c)).transpose(-3, -2).reshape(lead + (z // f, r, f * c))
    if isinstance(tm, VSlice):
        f = tm.factor
        return t.reshape(lead + (z * f, r // f, c))
    if isinstance(tm, VStack):
        f = tm.factor
        return t.reshape(lead + (z // f, r * f, c))
    if isinstance(tm, Transpose):
        return t.transpose(-1, -2)
    if isinstance(tm, TileBroadcast):
        tiles = t.reshape(lead + (z, r // TILE, TILE, c // TILE, TILE))
        if tm.dim == "r":
            tiles = tiles[..., :, 0:1, :, :].expand(tiles.shape)
        else:
            tiles = tiles[..., :, :, :, 0:1].expand(tiles.shape)
        return tiles.reshape(t.shape)
    if isinstance(tm, Pad):
        out = torch.full(lead + (z, r + tm.rt * TILE, c + tm.ct * TILE), float(tm.value), dtype=t.dtype)
        out[..., :r, :c] = t
        return out
    raise ValueError(f"unknown TM {tm!r}")


def apply_tms(t: torch.Tensor, tms: Iterable[TM]) -> torch.Tensor:
    """Apply TMs left to right (pads last, as the golden does)."""
    tms = [normalize_tm(tm) for tm in tms]
    for tm in tms:
        if not isinstance(tm, Pad):
            t = apply_tm(t, tm)
    for tm in tms:
        if isinstance(tm, Pad):
            t = apply_tm(t, tm)
    return t


def tm_shape(shape, tm: TM):
    """(z, rt, ct) in tiles after one TM."""
    tm = normalize_tm(tm)
    z, rt, ct = shape
    if isinstance(tm, Broadcast):
        return {"r": (z, rt * tm.factor, ct), "c": (z, rt, ct * tm.factor), "z": (tm.factor, rt, ct)}[tm.dim]
    if isinstance(tm, HSlice):
        return (z * tm.factor, rt, ct // tm.factor)
    if isinstance(tm, HStack):
        return (z // tm.factor, rt, ct * tm.factor)
    if isinstance(tm, VSlice):
        return (z * tm.factor, rt // tm.factor, ct)
    if isinstance(tm, VStack):
        return (z // tm.factor, rt * tm.factor, ct)
    if isinstance(tm, Transpose):
        return (z, ct, rt)
    if isinstance(tm, Pad):
        return (z, rt + tm.rt, ct + tm.ct)
    return (z, rt, ct)


def tms_shape(shape, tms: Iterable[TM]):
    """(z, rt, ct) in tiles after a TM list."""
    for tm in tms:
        shape = tm_shape(shape, tm)
    return shape
