"""How a framework tensor sits in a queue: the canonical 3-D form, tile padding, host TMs, microbatch.

**Canonical form.** A per-sample tensor of shape ``S`` is stored as one queue entry ``[z, r, c]`` with
``c = S[-1]``, ``r = S[-2]`` and ``z = prod(S[:-2])`` (rank 1: ``[1, 1, c]``, rank 0: ``[1, 1, 1]``). All
leading framework dims, however many, fold into ``z`` (the op's ``t``); ``w`` is the entry index, one
entry per sample of the microbatch. ``r`` and ``c`` are zero-padded up to multiples of 32.

**Queues.** ``BudaQueue.tags`` carries what the host needs:

- ``device_shape``: the per-sample shape ``S`` whose canonical form the queue holds;
- ``batched``: dim 0 of the framework tensor is the microbatch (one entry per sample);
- ``host_tms``: ``[(op_type, attrs), ...]`` registry TMs the host applies before pushing an input (on the
  whole framework tensor) or after reading an output;
- ``framework_shape``: the shape the user pushes / receives.

:func:`to_device_layout` and :func:`from_device_layout` implement exactly this, for the runtime.
"""

from __future__ import annotations

import math
from typing import Sequence, Tuple

import torch

from pybuda.ops import registry
from pybuda.ir.lowered import BudaQueue, TileShape

TILE = 32


def canonical_zrc(shape: Sequence[int]) -> Tuple[int, int, int]:
    """(z, r, c) of a per-sample framework shape (leading dims folded into z)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) == 0:
        return (1, 1, 1)
    if len(shape) == 1:
        return (1, 1, shape[0])
    return (math.prod(shape[:-2]), shape[-2], shape[-1])


def tiles(n: int) -> int:
    """Number of 32-wide tiles covering ``n`` datums."""
    return -(-n // TILE)


def tile_shape_of(shape: Sequence[int]) -> TileShape:
    """TileShape (w=1) of a per-sample framework shape."""
    z, r, c = canonical_zrc(shape)
    return TileShape(1, z, tiles(r), tiles(c))


def to_canonical(t: torch.Tensor, pad_value: float = 0.0) -> torch.Tensor:
    """A per-sample tensor as its padded canonical ``[z, R, C]`` form."""
    z, r, c = canonical_zrc(t.shape)
    t3 = t.reshape(z, r, c)
    out = torch.full((z, tiles(r) * TILE, tiles(c) * TILE), pad_value, dtype=t.dtype)
    out[:, :r, :c] = t3
    return out


def from_canonical(t: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Undo :func:`to_canonical`: crop the padding and restore ``shape``."""
    z, r, c = canonical_zrc(shape)
    return t.reshape(z, t.shape[-2], t.shape[-1])[:, :r, :c].reshape(tuple(shape))


def apply_host_tms(value: torch.Tensor, host_tms) -> torch.Tensor:
    """Apply ``[(op_type, attrs), ...]`` with the registry's torch references."""
    for op_type, attrs in host_tms or ():
        value = registry.evaluate(op_type, [value], attrs)
    return value


def to_device_layout(queue: BudaQueue, value: torch.Tensor) -> torch.Tensor:
    """The framework tensor pushed to ``queue`` as ``[entries, z, R, C]`` device data.

    Inputs: host TMs first, then one entry per sample when batched. Parameters and constants: one entry.
    """
    value = apply_host_tms(value, queue.tags.get("host_tms"))
    device_shape = tuple(queue.tags.get("device_shape", value.shape))
    if queue.tags.get("batched"):
        samples = [value[i:i + 1].reshape(device_shape) for i in range(value.shape[0])]
    else:
        samples = [value.reshape(device_shape)]
    return torch.stack([to_canonical(s) for s in samples])


def from_device_layout(queue: BudaQueue, data: torch.Tensor) -> torch.Tensor:
    """``[entries, z, R, C]`` read from an output ``queue`` back into the framework tensor."""
    device_shape = tuple(queue.tags.get("device_shape", queue.original_shape))
    samples = [from_canonical(data[i], device_shape) for i in range(data.shape[0])]
    value = torch.cat(samples, 0) if queue.tags.get("batched") else samples[0]
    for op_type, attrs in queue.tags.get("host_tms") or ():
        value = registry.evaluate(op_type, [value], attrs)
    return value
