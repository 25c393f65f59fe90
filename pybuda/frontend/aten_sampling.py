"""``grid_sample`` at run-time coordinates (spatial transformers, optical-flow warps, deformable sampling) on the
device: bilinear sampling is a weighted sum of the input's pixels, so it is one batched matmul of the image with
a weight matrix computed from the grid.

For an output position sampling at the pixel coordinate ``(ix, iy)``, pixel ``(r, c)`` weighs
``relu(1 - |iy - r|) * relu(1 - |ix - c|)``: the tent functions are torch's bilinear weights for the (up to) four
neighbours and 0 for every other pixel, and a neighbour outside the image simply has no pixel, which is
``padding_mode='zeros'``. ``'border'`` clamps the coordinate into the image first, as torch does. The coordinates and weights are computed
in Float32 (``exact_df``) whatever the default format. The weights are
built ``[N, H * W, Ho * Wo]`` (columns per output position), so ``x [N, C, H * W] @ weights`` needs no transpose.
"""

from __future__ import annotations

from typing import Any

import torch

from pybuda.frontend.aten_builder import Builder, Unsupported, converts, out_dtype
from pybuda.ir.graph import OP

#: Largest weight matrix (samples x input pixels x output positions) a run-time grid_sample builds on the device.
MAX_SAMPLING_WEIGHTS = 1 << 22
#: torch's interpolation and padding codes.
_BILINEAR, _ZEROS, _BORDER = 0, 0, 1


def _tents(b: Builder, coordinate: str, size: int, dt: torch.dtype) -> str:
    """``relu(1 - |coordinate - k|)`` for every pixel index ``k`` of a dim of ``size``: ``[N, size, P]`` from the
    coordinates ``[N, 1, P]``."""
    pixels = b.const(torch.arange(size, dtype=dt).reshape(1, size, 1), "pixels")
    distance = b.op("abs", [b.op("subtract", [coordinate, pixels])])
    return b.op("relu", [b.binary("subtract", 1.0, distance, dt)])


@converts("grid_sampler", "grid_sampler_2d")
def _grid_sampler(b: Builder, n, p):
    mode, padding = int(p["interpolation_mode"]), int(p["padding_mode"])
    if mode != _BILINEAR:
        raise Unsupported("grid_sample other than bilinear at run-time coordinates")
    if padding not in (_ZEROS, _BORDER):
        raise Unsupported("grid_sample with reflection padding")
    return bilinear_sample(b, p["input"], p["grid"], padding == _BORDER, bool(p["align_corners"]), out_dtype(n))


def bilinear_sample(b: Builder, x: Any, grid: Any, border: bool, aligned: bool, dt: torch.dtype) -> str:
    """``x [N, C, H, W]`` sampled bilinearly at ``grid [N, Ho, Wo, 2]`` (x, y in [-1, 1]): ``[N, C, Ho, Wo]``.
    ``border``: coordinates clamped into the image (else zeros outside); ``aligned``: -1 and 1 are the corner
    pixels' centres (else their outer edges)."""
    if b.rank(x) != 4:
        raise Unsupported("grid_sample of a volume")
    (samples, channels, height, width), (_, out_h, out_w, _) = b.shape(x), b.shape(grid)
    positions, pixels = out_h * out_w, height * width
    if samples * positions * pixels > MAX_SAMPLING_WEIGHTS:
        raise Unsupported(f"grid_sample of {height}x{width} pixels at {out_h}x{out_w} positions (a weight matrix "
                          f"over {MAX_SAMPLING_WEIGHTS} elements)")
    g = b.tensor(grid, dt)
    before = len(b.graph.nodes)

    def coordinate(axis: int, size: int) -> str:
        # [-1, 1] to pixels: the corner pixels' centres (align_corners) or their outer edges.
        normalised = b.reshape(b.op("index", [g], dim=3, start=axis, stop=axis + 1, stride=1), (samples, 1, positions))
        scale = (size - 1) / 2 if aligned else size / 2
        at = b.binary("add", b.binary("multiply", normalised, scale, dt), (size - 1) / 2, dt)
        if border:
            at = b.op("clip", [at], min=0.0, max=float(size - 1))
        return at

    across = _tents(b, coordinate(0, width), width, dt)  # [N, W, P]
    down = _tents(b, coordinate(1, height), height, dt)  # [N, H, P]
    weights = b.reshape(b.op("multiply", [b.reshape(down, (samples, height, 1, positions)),
                                          b.reshape(across, (samples, 1, width, positions))]),
                        (samples, pixels, positions))
    # The coordinates and weights in Float32 whatever the default format: at bfloat16 a coordinate near pixel 10
    # is off by up to 1/32 of a pixel, and every weight by as much.
    for name in list(b.graph.nodes)[before:]:
        if b.graph[name].kind == OP:
            b.graph[name].tags.setdefault("exact_df", "Float32")
    data = b.reshape(b.tensor(x, dt), (samples, channels, pixels))
    return b.reshape(b.op("matmul", [data, weights]), (samples, channels, out_h, out_w))


__all__ = ["MAX_SAMPLING_WEIGHTS", "bilinear_sample"]
