"""Helpers for the compiler-pass tests: a compile context, and running a graph's IR passes + lowering."""

from typing import Sequence

import torch

from pybuda.arch import get_device_descriptor
from pybuda.config import CompilerConfig
from pybuda.ir.graph import Graph
from pybuda.passes.lowered.buda_eval import evaluate_buda_graph
from pybuda.passes.graph.channel_last import convert_convs_to_channel_last
from pybuda.passes.graph.consteval import evaluate_constants
from pybuda.passes.context import CompileContext
from pybuda.passes.graph.decompose import decompose_high_level_ops
from pybuda.passes.graph.fold_pads import fold_pads
from pybuda.passes.lower.to_tiles import lower_to_buda
from pybuda.passes.graph.microbatch import strip_microbatch
from pybuda.passes.graph.optimize_tms import optimize_tms
from pybuda.passes.graph.prestride import prestride_convs
from pybuda.verify import calculate_pcc, run_graph_on_cpu

_DEVICES = {}


def device(name: str = "wh_n150"):
    """A cached device descriptor for a preset."""
    if name not in _DEVICES:
        _DEVICES[name] = get_device_descriptor(device_config=name)
    return _DEVICES[name]


def make_ctx(config: CompilerConfig = None, dev: str = "wh_n150", microbatch: int = 1) -> CompileContext:
    """A compile context for running passes directly."""
    return CompileContext(config or CompilerConfig(), device(dev), microbatch=microbatch, stage="TEST")


def ir_passes(graph: Graph, ctx: CompileContext) -> Graph:
    """The IR stages of the pipeline (decompose .. microbatch strip), in pipeline order."""
    for node in graph.inputs + graph.outputs:
        node.tags.setdefault("framework_shape", tuple(node.shape))
    for p in (decompose_high_level_ops, fold_pads, prestride_convs, convert_convs_to_channel_last, evaluate_constants, optimize_tms,
              strip_microbatch):
        graph = p(graph, ctx)
    return graph


def lower(graph: Graph, ctx: CompileContext = None):
    """IR passes + lowering; returns the BudaGraph."""
    ctx = ctx or make_ctx()
    return lower_to_buda(ir_passes(graph, ctx), ctx)


def check_lowering(graph: Graph, inputs: Sequence[torch.Tensor], ctx: CompileContext = None, atol: float = 1e-4,
                   bg_transform=None):
    """Lower ``graph``, evaluate the lowered graph in float32 and compare with the IR graph's CPU reference.

    The tolerance is absolute (float32 arithmetic in a different order); PCC must be > 0.9999.
    Returns the BudaGraph.
    """
    ctx = ctx or make_ctx()
    golden = run_graph_on_cpu(graph, list(inputs))
    bg = lower(graph.copy(), ctx)
    if bg_transform is not None:
        bg = bg_transform(bg, ctx)
    outs = evaluate_buda_graph(bg, {name: t for name, t in zip(bg.input_order, inputs)})
    for name, gold in zip(bg.output_order, golden):
        got = outs[name]
        assert tuple(got.shape) == tuple(gold.shape), (name, got.shape, gold.shape)
        diff = (got - gold).abs().max().item()
        assert diff <= atol * max(1.0, gold.abs().max().item()), f"{name}: max abs diff {diff}"
        if gold.numel() > 1 and gold.std() > 0:
            assert calculate_pcc(gold, got) > 0.9999
    return bg
