"""Ops that mix the samples of a microbatch (issue #12 item 4): found statically in a graph traced for the
whole push, and run with the microbatch inside the graph instead of failing or giving a wrong number."""

import pytest
import torch
from torch import nn

import pybuda
from pybuda.arch.types import BackendType
from pybuda.config import CompilerConfig
from pybuda.ir.graph import Graph
from pybuda.passes.graph.microbatch import batch_mixing_ops
from pybuda.runtime.backend_api import compile_modules
from pybuda.verify import calculate_pcc

PCC_MIN = 0.99
#: Float16_b storage (the default fp32_fallback): about 8 bits of mantissa, a few ops deep.
ATOL = 0.03
RTOL = 0.02


def _graph(op_type, shape, attrs=None, extra=None):
    g = Graph("g")
    g.add_input("x", shape)
    operands = ["x"]
    if extra is not None:
        g.add_parameter("w", extra)
        operands.append("w")
    g.add_op("op", op_type, operands, attrs or {})
    g.add_output("out", "op")
    return g


@pytest.mark.parametrize("op_type,attrs", [("softmax", {"dim": 0}), ("softmax", {"dim": -3}),
                                           ("transpose", {"dim0": 0, "dim1": 1}), ("cumsum", {"axis": 0}),
                                           ("reduce_sum", {"dim": 0}), ("reshape", {"shape": (2, 2, 8)})])
def test_ops_reading_across_the_batch_are_found_even_when_shapes_do_not_change(op_type, attrs):
    # [2, 2, 8] at microbatch 2: a transpose of dims 0/1 or a softmax over dim 0 keeps the shape.
    g = _graph(op_type, (2, 4, 4) if op_type == "reshape" else (2, 2, 8), attrs)
    if op_type == "reshape":  # [2, 4, 4] -> [2, 2, 8] keeps each sample's 16 values in its own row
        assert batch_mixing_ops(g, 2) == []
    else:
        assert [op for op, _, _ in batch_mixing_ops(g, 2)] == ["op"]


def test_per_sample_ops_and_one_sample_traces_are_not_flagged():
    assert batch_mixing_ops(_graph("softmax", (2, 3, 8), {"dim": -1}), 2) == []
    assert batch_mixing_ops(_graph("matmul", (2, 3, 8), extra=torch.randn(8, 5)), 2) == []
    assert batch_mixing_ops(_graph("softmax", (1, 3, 8), {"dim": 0}), 2) == []  # traced for one sample
    assert batch_mixing_ops(_graph("softmax", (2, 3, 8), {"dim": 0}), 1) == []


def test_a_batched_contraction_operand_mixes():
    g = Graph("g")
    g.add_input("x", (2, 8))
    g.add_parameter("w", torch.randn(8, 2))
    g.add_op("mm", "matmul", ["w", "x"])  # [8, 2] @ [2, 8]: the batch is the contraction dim
    g.add_output("out", "mm")
    assert [op for op, _, _ in batch_mixing_ops(g, 2)] == ["mm"]


class _BatchMean(nn.Module):
    def forward(self, x):
        return x - x.mean(dim=0, keepdim=True)


class _BatchFold(nn.Module):
    def forward(self, x):
        return x.reshape(1, -1, x.shape[-1]) * 2.0


class _BatchSoftmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=0) + x


class _PerSample(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(40, 24)

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=-1).reshape(x.shape[0], -1)


@pytest.mark.parametrize("model,mixes", [(_BatchMean, True), (_BatchFold, True), (_BatchSoftmax, True),
                                         (_PerSample, False)])
def test_a_model_that_mixes_samples_runs_with_the_microbatch_inside_the_graph(model, mixes):
    torch.manual_seed(0)
    m = model().eval()
    x = torch.randn(2, 5, 40)
    cfg = CompilerConfig()
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("probe", m), arch=pybuda.BackendDevice.Wormhole_B0)
    try:
        artifact = compile_modules([pybuda.PyTorchModule("mix", m)], [x], cfg, devtype=BackendType.Golden,
                                   device=device.get_device_config(cfg), microbatch=2)
        got = artifact.run([x])[0]
    finally:
        pybuda.shutdown()
    want = m(x)
    assert bool(artifact.batch_in_graph) == mixes
    assert artifact.microbatch == (1 if mixes else 2)  # one execution of the graph per push when it mixes
    assert tuple(artifact.output_specs[0].shape) == tuple(want.shape) == tuple(got.shape)
    assert calculate_pcc(got, want) >= PCC_MIN
    assert torch.allclose(got, want, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("model", [_BatchMean, _BatchFold])
def test_run_inference_answers_a_batch_mixing_model_like_torch(model):
    # Through the public API (stages capture the whole push): such a model used to be a CompileError.
    m = model().eval()
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("mix", m), arch=pybuda.BackendDevice.Wormhole_B0)
    x = torch.randn(2, 5, 40)
    tt0.push_to_inputs(x)
    try:
        out = pybuda.run_inference(_sequential=True).get(timeout=60)[0].value()
    finally:
        pybuda.shutdown()
    want = m(x)
    assert out.shape == want.shape
    assert calculate_pcc(out, want) >= PCC_MIN
