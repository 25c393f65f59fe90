"""Convolution prestriding: the host reorders a strided convolution's input so the chip runs a
stride-1 convolution with a smaller kernel (TT-Buda's ``enable_conv_prestride``, default on).

A stride-``s`` convolution that reads a graph input directly (the stem of a CNN: ResNet's 7x7/2 on
3 channels) lowers to an im2col picker with one t-slice per kernel tap, each slice a full tile column
for only a few real channels. Space-to-depth on the host turns ``[N, C, H, W]`` into
``[N, C·s², H/s, W/s]``; the convolution becomes kernel ``ceil(k/s)``, stride 1, no padding, with the
weights reordered the same way (consteval folds that). ResNet-50's stem goes from 49 taps to 16 over
the same single tile column of channels.

Exactness: with ``ky = s·qy + ry`` (``0 <= ry < s``), the original output is
``Σ W[o, c, ky, kx] · X[c, s·y + ky, s·x + kx] = Σ W'[o, (c, ry, rx), qy, qx] · X'[(c, ry, rx), y + qy, x + qx]``
where ``X'`` and ``W'`` are the space-to-depth of the zero-padded input and of the kernel zero-padded to
``s·ceil(k/s)`` taps. The padded input covers exactly the rows and columns the original convolution
reads, so the outputs are the same values (summed in another order).

The space-to-depth is written with registry TMs (pad, reshape, transpose) on the input, which
:mod:`pybuda.passes.graph.optimize_tms` then hoists to the host, as TT-Buda's runtime applied prestride in its
input tilizer.
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

from pybuda.ir.graph import INPUT, OP, Graph, Node
from pybuda.passes.context import CompileContext
from pybuda.passes.graph.consteval import compile_time_value
from pybuda.passes.graph.optimize_tms import HOISTABLE
from pybuda.passes.graph.rewrite import Rewriter, source_through

TILE = 32


def prestride_convs(graph: Graph, ctx: CompileContext) -> Graph:
    """Rewrite every convolution that profits from prestriding (see the module docstring); returns a
    new graph, or ``graph`` itself when there is none or ``enable_conv_prestride`` is off."""
    if not ctx.config.enable_conv_prestride:
        return graph
    users = graph.user_map()
    plans = {node.name: plan for node in graph.ops if (plan := _plan(graph, users, node)) is not None}
    if not plans:
        return graph

    def rule(rw: Rewriter, node: Node, operands: List[str]) -> Optional[str]:
        if node.name not in plans:
            return None
        s, k_new, (h_after, w_after) = plans[node.name]
        pads = node.attrs["padding"]  # (left, right, top, bottom)
        act = rw.op(f"{node.name}.prestride_pad", "pad", [operands[0]],
                    {"pad": (pads[0], w_after, pads[2], h_after)})
        act = _space_to_depth(rw, f"{node.name}.prestride", act, s)
        kh, kw = rw.shape(operands[1])[2:]
        weight = rw.op(f"{node.name}.prestride_weight_pad", "pad", [operands[1]],
                       {"pad": (0, s * k_new[1] - kw, 0, s * k_new[0] - kh)})
        weight = _space_to_depth(rw, f"{node.name}.prestride_weight", weight, s)
        attrs = dict(node.attrs, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1))
        tags = dict(node.tags, prestride=s)
        return rw.op(node.name, "conv2d", [act, weight] + operands[2:], attrs, tags)

    return Rewriter(graph).run(rule)


def _plan(graph: Graph, users, node: Node) -> Optional[Tuple[int, Tuple[int, int], Tuple[int, int]]]:
    """(stride, new kernel (kh, kw), bottom/right padding of the host-padded input) when ``node`` is a
    convolution worth prestriding, else None.

    Eligible: an NCHW ``conv2d`` with equal strides ``s >= 2``, no dilation or groups, whose activation
    is a graph input read by nothing else (directly or through TMs the host applies, such as the NHWC to
    NCHW transpose of a TensorFlow model) and whose weights are known at compile time; and the picker
    work (taps × channel tile columns) must shrink."""
    if node.kind != OP or node.op_type != "conv2d" or node.attrs.get("channel_last"):
        return None
    sy, sx = node.attrs["stride"]
    if sy != sx or sy < 2 or tuple(node.attrs["dilation"]) != (1, 1) or node.attrs["groups"] != 1:
        return None
    act, weight = graph[node.operands[0]], graph[node.operands[1]]
    # The host applies the TMs between a graph input and the conv (optimize_tms hoists them), space-to-depth too.
    source = source_through(graph, users, act.name, node.name, HOISTABLE)
    if source is None or source.kind != INPUT or len(act.shape) != 4:
        return None
    if not compile_time_value(graph, weight.name):
        return None
    s = sy
    _, c, h, w = act.shape
    kh, kw = weight.shape[2:]
    left, right, top, bottom = node.attrs["padding"]
    k_new = (math.ceil(kh / s), math.ceil(kw / s))
    after = []
    for size, k, k2, before, end in ((h, kh, k_new[0], top, bottom), (w, kw, k_new[1], left, right)):
        out = (size + before + end - k) // s + 1
        padded = s * (out + k2 - 1)  # rows the stride-1 convolution over the space-to-depth input reads
        if padded - size - before < 0:
            return None  # the original leaves unread input rows at the end; keep it as it is
        after.append(padded - size - before)
    work_before = kh * kw * math.ceil(c / TILE)
    work_after = k_new[0] * k_new[1] * math.ceil(c * s * s / TILE)
    if work_after >= work_before:
        return None
    return s, k_new, (after[0], after[1])


def _space_to_depth(rw: Rewriter, name: str, value: str, s: int) -> str:
    """``[N, C, H, W]`` → ``[N, C·s², H/s, W/s]`` with channel ``c·s² + rx·s + ry`` holding
    ``x[c, s·y + ry, s·x + rx]``, in rank-4 reshapes and transposes (every backend and the host TM
    path handle those)."""
    n, c, h, w = rw.shape(value)
    hs, ws = h // s, w // s
    steps: Sequence[Tuple[str, dict]] = (
        ("reshape", {"shape": (n, c * hs, s, w)}),          # (c·Hs + y, ry, w)
        ("transpose", {"dim0": 2, "dim1": 3}),              # (c·Hs + y, w, ry)
        ("reshape", {"shape": (n, c * hs, ws, s * s)}),     # (c·Hs + y, x, rx·s + ry)
        ("transpose", {"dim0": 2, "dim1": 3}),              # (c·Hs + y, rx·s + ry, x)
        ("reshape", {"shape": (n, c, hs, s * s * ws)}),     # (c, y, (rx·s + ry)·Ws + x)
        ("transpose", {"dim0": 2, "dim1": 3}),              # (c, (rx·s + ry)·Ws + x, y)
        ("reshape", {"shape": (n, c * s * s, ws, hs)}),     # (c·s² + rx·s + ry, x, y)
        ("transpose", {"dim0": 2, "dim1": 3}),              # (c·s² + rx·s + ry, y, x)
    )
    for i, (op_type, attrs) in enumerate(steps):
        value = rw.op(f"{name}_{i}", op_type, [value], attrs)
    return value
