"""Training graphs of convolutional models on the chip: forward convs whose weights the runtime updates
(``RUNTIME_UPDATED``: their im2col/depthwise layout is built on the device), and the backward graphs
autograd builds for a small CNN and a depthwise conv (in-graph NCHW <-> NHWC conversions, conv weights
computed in the graph), compiled as training compiles them and run on the golden device against the CPU
reference. Shapes are small and not multiples of 32."""

from __future__ import annotations

import copy

import pytest
import torch

import pybuda
from pybuda import CompilerConfig, DataFormat, MathFidelity
from pybuda.compile import compile_graph
from pybuda.ir.graph import RUNTIME_UPDATED, Graph
from pybuda.passes.graph.autograd import build_training_graphs
from pybuda.runtime.backend_api import create_executor
from pybuda.runtime.training import _add_sample_dim
from pybuda.verify import calculate_pcc, run_graph_on_cpu

PCC = 0.99  # Float32 everywhere, HiFi4: only accumulation order differs from the CPU reference
DEVICE = "wh_n150"


def config() -> CompilerConfig:
    return CompilerConfig(default_df_override=DataFormat.Float32, default_accumulate_df=DataFormat.Float32,
                          default_math_fidelity=MathFidelity.HiFi4, fp32_fallback=DataFormat.Float32)


def cnn() -> Graph:
    """conv 3x3 s1 p1 (+bias) -> relu -> max_pool 2 -> conv 3x3 s2 p1 (+bias) -> relu -> avg_pool -> linear."""
    g = Graph("cnn")
    gen = torch.Generator().manual_seed(0)

    def r(*shape, scale=0.3):
        return torch.randn(*shape, generator=gen) * scale

    g.add_input("x", (1, 3, 20, 20))
    g.add_parameter("w1", r(8, 3, 3, 3))
    g.add_parameter("b1", r(8, scale=0.1))
    g.add_parameter("w2", r(16, 8, 3, 3, scale=0.2))
    g.add_parameter("b2", r(16, scale=0.1))
    g.add_parameter("fw", r(16, 5))
    g.add_parameter("fb", r(5, scale=0.1))
    g.add_op("c1", "conv2d", ["x", "w1", "b1"], {"stride": 1, "padding": 1})
    g.add_op("r1", "relu", ["c1"])
    g.add_op("p1", "max_pool2d", ["r1"], {"kernel_size": 2, "stride": 2})
    g.add_op("c2", "conv2d", ["p1", "w2", "b2"], {"stride": 2, "padding": 1})
    g.add_op("r2", "relu", ["c2"])
    g.add_op("gap", "avg_pool2d", ["r2"], {"kernel_size": 5, "stride": 5})
    g.add_op("flat", "reshape", ["gap"], {"shape": (1, 16)})
    g.add_op("fc", "matmul", ["flat", "fw", "fb"])
    g.add_output("y", "fc")
    return g


def depthwise() -> Graph:
    g = Graph("dw")
    gen = torch.Generator().manual_seed(1)
    g.add_input("x", (1, 6, 11, 13))
    g.add_parameter("w", torch.randn(6, 1, 3, 3, generator=gen) * 0.3)
    g.add_parameter("b", torch.randn(6, generator=gen) * 0.1)
    g.add_op("c", "conv2d", ["x", "w", "b"], {"stride": 1, "padding": 1, "groups": 6})
    g.add_op("r", "relu", ["c"])
    g.add_output("y", "r")
    return g


def conv_transpose() -> Graph:
    g = Graph("convt")
    gen = torch.Generator().manual_seed(2)
    g.add_input("x", (1, 5, 7, 9))
    g.add_parameter("w", torch.randn(5, 4, 3, 3, generator=gen) * 0.3)
    g.add_op("e", "exp", ["x"])  # an NCHW value computed in the graph feeds the convolution
    g.add_op("ct", "conv2d_transpose", ["e", "w"], {"stride": 2, "padding": 1})
    g.add_output("y", "ct")
    return g


def run_on_golden(graph: Graph, epoch_type: str, microbatch: int):
    """Compile ``graph`` as the training runtime does (parameters RUNTIME_UPDATED) and compare each sample's
    golden outputs with the CPU reference."""
    graph = copy.deepcopy(graph)
    for node in graph.parameters:
        node.tags[RUNTIME_UPDATED] = True
    graph.microbatch = microbatch
    inputs = [torch.randn((microbatch,) + tuple(n.shape[1:]), generator=torch.Generator().manual_seed(5 + i))
              for i, n in enumerate(graph.inputs)]
    results = compile_graph(graph, DEVICE, config(), None, microbatch, epoch_type=epoch_type)
    executor = create_executor(pybuda.BackendType.Golden, results, graph=graph, microbatch=microbatch,
                               device=results.device)
    got = executor.run(inputs)
    for s in range(microbatch):
        want = run_graph_on_cpu(graph, [t[s:s + 1] for t in inputs])
        for out, g, w in zip(graph.outputs, got, want):
            sample = g.reshape((microbatch,) + tuple(w.shape[1:]))[s:s + 1] if w.shape[0] == 1 else g
            pcc = calculate_pcc(sample.reshape(w.shape), w)
            assert pcc >= PCC, f"{graph.name}: {out.name} sample {s}: pcc {pcc:.4f}"
    return results


@pytest.mark.parametrize("make", [cnn, depthwise, conv_transpose], ids=["cnn", "depthwise", "conv_transpose"])
def test_forward_with_runtime_updated_weights(make):
    run_on_golden(make(), "fwd", microbatch=2)


def backward_graph(graph: Graph) -> Graph:
    tg = build_training_graphs(graph)
    _add_sample_dim(tg.backward, list(tg.param_grads.values()))
    return tg.backward


@pytest.mark.parametrize("microbatch", [1, 2])
@pytest.mark.parametrize("make", [cnn, depthwise], ids=["cnn", "depthwise"])
def test_backward_graph_compiles_and_matches_cpu(make, microbatch):
    # At microbatch 2 each sample's weight gradient is reshaped to the weight's shape inside the per-sample
    # graph (no sample dim left): the whole backward still runs on the device, one sample at a time.
    results = run_on_golden(backward_graph(make()), "bwd", microbatch=microbatch)
    assert results.netlist is not None
    assert all(g.input_count == microbatch for g in results.netlist.graphs.values())

