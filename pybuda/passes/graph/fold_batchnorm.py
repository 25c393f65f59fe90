"""Fold inference batch norms into the convolution in front of them (a standard inference rewrite; TT-Buda's
TVM path got it from ``SimplifyInference`` + ``FoldScaleAxis``).

``batchnorm(conv(x, w, b), gamma, beta, mean, var)`` in eval mode is ``conv(x, w * s, b * s) + t`` with
``s = gamma / sqrt(var + eps)`` and ``t = beta - mean * s`` per output channel. Unfolded, the batch norm
lowers to an elementwise multiply by ``s`` and an add; on the chip that multiply runs at the op's math
fidelity, which at LoFi truncates the activation to 1 + 4 mantissa bits (netlist spec §4.6): a systematic
~2 % gain loss per batch norm, on top of the convolution's own. Folded, the scale is applied once, at
compile time, in float32, and the chip runs one multiplier pass per layer instead of two.

The folded weights and bias are written as constant-only ops over the original parameters, so
:func:`pybuda.passes.graph.consteval.evaluate_constants` computes them at compile time and keeps the trace
to the original parameters (as for the batch norm's own scale and shift in ``decompose``).

A batch norm is folded only when it normalises the output channels of a non-transposed ``conv2d``/
``conv3d`` (channel-first, dim 1) whose only reader is the batch norm, and when every weight involved is a
compile-time value (parameter or constant) that no runtime update changes. Training compiles are left
untouched (there the batch norm's parameters get their own gradients), and so are compiles without
consteval, which would compute the folded weights on the chip on every run.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from pybuda.ir.graph import OP, Graph, Node
from pybuda.passes.context import CompileContext
from pybuda.passes.graph.consteval import compile_time_value
from pybuda.passes.graph.rewrite import Rewriter

#: Convolutions whose weight holds the output channels on dim 0.
FOLDABLE_CONVS = frozenset({"conv2d", "conv3d"})


def fold_batchnorms(graph: Graph, ctx: CompileContext) -> Graph:
    """Return a new graph in which every foldable inference ``batchnorm`` is merged into its convolution."""
    if ctx.config.enable_training or not ctx.config.enable_consteval:
        return graph  # without consteval the folded weights would be computed on the chip, every run
    users = graph.user_map()
    folds = {node.name: node.operands[0] for node in graph.ops
             if node.op_type == "batchnorm" and _foldable(graph, node, users)}
    if not folds:
        return graph
    convs = set(folds.values())

    def rule(rw: Rewriter, node: Node, ops: Sequence[str]) -> Optional[str]:
        if node.name in convs:
            # Emitted with its batch norm below. Only the norm reads the conv, and the norm's rule uses the
            # conv's own operands, so map the conv to its activation and emit nothing here.
            return ops[0]
        if node.name not in folds:
            return None
        conv = graph[folds[node.name]]
        conv_ops = [rw.map[o] for o in conv.operands]
        return _emit_folded(rw, conv, conv_ops, node, ops)

    folded = Rewriter(graph).run(rule)
    ctx.notes["folded_batchnorms"] = len(folds)
    return folded


def _foldable(graph: Graph, bn: Node, users) -> bool:
    conv = graph[bn.operands[0]]
    if conv.kind != OP or conv.op_type not in FOLDABLE_CONVS or conv.attrs.get("channel_last"):
        return False
    if users.get(conv.name) != [bn.name] or not all(_compile_time(graph, o) for o in conv.operands[1:]):
        return False
    channels = graph[conv.operands[1]].shape[0]
    # The norm must scale the conv's output channels (dim 1 of the channel-first activation).
    if len(conv.shape) < 2 or conv.shape[1] != channels:
        return False
    return all(_compile_time(graph, o) and _numel(graph[o].shape) == channels for o in bn.operands[1:])


def _compile_time(graph: Graph, name: str) -> bool:
    return graph[name].dtype.is_floating_point and compile_time_value(graph, name)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _emit_folded(rw: Rewriter, conv: Node, conv_ops: Sequence[str], bn: Node, bn_ops: Sequence[str]) -> str:
    _, gamma, beta, mean, var = bn_ops
    n = bn.name
    channels = rw.shape(conv_ops[1])[0]

    def vec(name: str, tag: str) -> str:
        return name if tuple(rw.shape(name)) == (channels,) else \
            rw.op(f"{n}.{tag}_v", "reshape", [name], {"shape": (channels,)})

    eps = rw.constant(f"{n}.eps", torch.tensor([float(bn.attrs["epsilon"])], dtype=torch.float32))
    inv = rw.op(f"{n}.inv_std", "reciprocal", [rw.op(f"{n}.std", "sqrt", [rw.op(f"{n}.var_eps", "add",
                                                                                 [vec(var, "var"), eps])])])
    scale = rw.op(f"{n}.scale_c", "multiply", [vec(gamma, "gamma"), inv])
    shift = rw.op(f"{n}.shift_c", "subtract", [vec(beta, "beta"),
                                               rw.op(f"{n}.mean_scale", "multiply", [vec(mean, "mean"), scale])])
    weight = conv_ops[1]
    per_out = rw.op(f"{n}.scale_w", "reshape", [scale], {"shape": (channels,) + (1,) * (len(rw.shape(weight)) - 1)})
    operands = [conv_ops[0], rw.op(f"{conv.name}.weight_folded", "multiply", [weight, per_out])]
    if len(conv_ops) > 2:
        operands.append(rw.op(f"{conv.name}.bias_folded", "multiply", [vec(conv_ops[2], "bias"), scale]))
    y = rw.op(f"{conv.name}.folded", conv.op_type, operands, conv.attrs, conv.tags)
    # The shift stays a per-channel add after the conv, where the norm's add was; the lowered epilogue fusion
    # makes it the conv matmul's bias, so it costs the same as writing it into a conv bias here (measured on
    # ResNet-50: the same 18 epochs and samples/s either way).
    rank = len(rw.shape(y))
    shift_r = rw.op(f"{n}.shift_r", "reshape", [shift], {"shape": (channels,) + (1,) * (rank - 2)})
    # The add takes the batch norm's name, so what read the norm reads it.
    return rw.op(bn.name, "add", [y, shift_r])
