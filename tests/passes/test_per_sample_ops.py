"""Convolutions and pools with several images on dim 0 (the batch inside the graph, or images a model
stacks itself) are split into per-image ops, so the device runs them instead of failing to lower."""

import pytest
import torch
from torch import nn

import pybuda
from pybuda.arch.types import BackendType
from pybuda.config import CompilerConfig
from pybuda.ir.graph import Graph
from pybuda.passes.graph.per_sample_ops import split_per_sample_ops
from pybuda.runtime.backend_api import compile_modules
from pybuda.verify import calculate_pcc, run_graph_on_cpu

PCC_MIN = 0.99
#: Float16_b storage (the default fp32_fallback) through a conv and a pool.
ATOL = 0.05
RTOL = 0.02


def _graph(op_type, n, attrs, weight=None):
    g = Graph("g")
    g.add_input("x", (n, 3, 9, 10))
    operands = ["x"]
    if weight is not None:
        g.add_parameter("w", weight)
        operands.append("w")
    g.add_op("op", op_type, operands, attrs)
    g.add_op("act", "relu", ["op"])
    g.add_output("out", "act")
    return g


CASES = [("conv2d", {"stride": (2, 1), "padding": (1, 1, 0, 0)}, torch.randn(4, 3, 3, 3)),
         ("max_pool2d", {"kernel_size": (2, 2), "stride": (2, 2)}, None),
         ("avg_pool2d", {"kernel_size": (3, 3), "stride": (1, 2)}, None)]


@pytest.mark.parametrize("op_type,attrs,weight", CASES, ids=[c[0] for c in CASES])
def test_each_image_gets_its_own_op_and_the_values_stay_the_same(op_type, attrs, weight):
    torch.manual_seed(0)
    g = _graph(op_type, 3, attrs, weight)
    split = split_per_sample_ops(g, None)
    ops = {n.name: n for n in split.ops}
    assert [ops[f"op.sample{k}"].op_type for k in range(3)] == [op_type] * 3
    assert all(tuple(split[ops[f"op.sample{k}"].operands[0]].shape)[0] == 1 for k in range(3))
    assert ops["op"].op_type == "concatenate" and ops["op"].operands == [f"op.sample{k}" for k in range(3)]
    assert tuple(split["op"].shape) == tuple(g["op"].shape)
    x = torch.randn(3, 3, 9, 10)
    # The same arithmetic per image (torch may sum a batched conv in another order: float32 rounding only).
    assert torch.allclose(run_graph_on_cpu(split, [x])[0], run_graph_on_cpu(g, [x])[0], atol=1e-5, rtol=1e-5)


def test_one_image_and_other_ops_leave_the_graph_as_it_is():
    g = _graph("conv2d", 1, {}, torch.randn(4, 3, 3, 3))
    assert split_per_sample_ops(g, None) is g
    g = Graph("g")
    g.add_input("x", (4, 3, 8))
    g.add_op("op", "softmax", ["x"], {"dim": -1})
    g.add_output("out", "op")
    assert split_per_sample_ops(g, None) is g


class _ConvPoolBatchMean(nn.Module):
    """A CNN block whose output mixes the samples (the whole microbatch is compiled inside the graph)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        y = nn.functional.avg_pool2d(y, 2, stride=1)
        return y - y.mean(dim=0, keepdim=True)


class _FramesOnDim0(nn.Module):
    """One sample holding two frames on its channels, convolved as two images (dim 0 of 2 within a sample)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2)

    def forward(self, x):
        frames = x.reshape(2, 3, x.shape[-2], x.shape[-1])
        return self.conv(frames).reshape(1, -1)


@pytest.mark.parametrize("model,shape,microbatch", [(_ConvPoolBatchMean, (2, 3, 12, 12), 2),
                                                    (_FramesOnDim0, (1, 6, 10, 12), 1)])
def test_a_model_with_several_images_on_dim_0_runs_on_the_device_like_torch(model, shape, microbatch):
    torch.manual_seed(0)
    m = model().eval()
    x = torch.randn(*shape)
    cfg = CompilerConfig()
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("probe", m), arch=pybuda.BackendDevice.Wormhole_B0)
    try:
        artifact = compile_modules([pybuda.PyTorchModule("imgs", m)], [x], cfg, devtype=BackendType.Golden,
                                   device=device.get_device_config(cfg), microbatch=microbatch)
        got = artifact.run([x])[0]
    finally:
        pybuda.shutdown()
    want = m(x)
    assert tuple(got.shape) == tuple(want.shape)
    assert calculate_pcc(got, want) >= PCC_MIN
    assert torch.allclose(got, want, atol=ATOL, rtol=RTOL)
