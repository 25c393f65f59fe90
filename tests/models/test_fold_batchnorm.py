"""Folding inference batch norms into the convolution in front of them (pybuda.passes.graph.fold_batchnorm)."""

import pytest
import torch

import pybuda

from pybuda.arch import get_device_descriptor
from pybuda.config import CompilerConfig
from pybuda.ir.graph import PARAMETER, Graph
from pybuda.passes.context import CompileContext
from pybuda.passes.graph.consteval import evaluate_constants
from pybuda.passes.graph.fold_batchnorm import fold_batchnorms
from pybuda.verify import calculate_pcc, run_graph_on_cpu

ATOL = 1e-5  # float32 reassociation of (x*w)*s vs x*(w*s), relative to the output's largest value


def _ctx(training: bool = False, consteval: bool = True) -> CompileContext:
    return CompileContext(CompilerConfig(enable_training=training, enable_consteval=consteval),
                          get_device_descriptor(device_config="wh_n150"), microbatch=1, stage="TEST")


def _conv_bn(groups=1, bias=True, extra_reader=False, transpose=False, seed=0, shared_stats=False) -> Graph:
    g = torch.Generator().manual_seed(seed)
    cin, cout = 8, 8 if groups > 1 else 12
    graph = Graph("conv_bn")
    graph.add_input("x", (1, cin, 10, 10))
    wshape = (cin, cout // groups, 3, 3) if transpose else (cout, cin // groups, 3, 3)
    ops = ["x", graph.add_parameter("w", torch.randn(wshape, generator=g) * 0.3).name]
    if bias:
        ops.append(graph.add_parameter("b", torch.randn(cout, generator=g)).name)
    attrs = dict(stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=groups, channel_last=False)
    conv = graph.add_op("conv", "conv2d_transpose" if transpose else "conv2d", ops, attrs).name
    stats = [graph.add_parameter("gamma", torch.rand(cout, generator=g) + 0.5).name,
             graph.add_parameter("beta", torch.randn(cout, generator=g)).name,
             graph.add_parameter("mean", torch.randn(cout, generator=g), requires_grad=False).name,
             graph.add_parameter("var", torch.rand(cout, generator=g) + 0.1, requires_grad=False).name]
    if shared_stats:  # the mean read through an identity, as an ONNX export shares equal initializers
        stats[2] = graph.add_op("mean_shared", "nop", [stats[2]]).name
    bn = graph.add_op("bn", "batchnorm", [conv] + stats, {"epsilon": 1e-5}).name
    act = graph.add_op("act", "sigmoid", [bn]).name
    graph.add_output("out", act)
    if extra_reader:
        graph.add_output("raw", conv)
    return graph


def _same(a: Graph, b: Graph, x: torch.Tensor) -> None:
    for want, got in zip(run_graph_on_cpu(a, [x]), run_graph_on_cpu(b, [x])):
        assert want.shape == got.shape
        assert torch.allclose(got, want, rtol=0, atol=ATOL * max(1.0, want.abs().max().item()))
        assert calculate_pcc(want, got) > 0.9999


@pytest.mark.parametrize("groups,bias", [(1, True), (1, False), (8, False)])
def test_batchnorm_folds_into_conv_weights_and_bias(groups, bias):
    graph = _conv_bn(groups=groups, bias=bias)
    ctx = _ctx()
    folded = fold_batchnorms(graph, ctx)
    types = [n.op_type for n in folded.ops]
    assert "batchnorm" not in types and types.count("conv2d") == 1 and ctx.notes["folded_batchnorms"] == 1
    conv = next(n for n in folded.ops if n.op_type == "conv2d")
    assert len(conv.operands) == (3 if bias else 2)
    assert folded[folded.users(conv.name)[0]].op_type == "add"  # the shift: an add, no multiply
    _same(graph, folded, torch.randn(1, 8, 10, 10))
    # consteval turns the folded weight (and bias) into leaves traced back to the original parameters.
    const = evaluate_constants(folded, ctx)
    conv = next(n for n in const.ops if n.op_type == "conv2d")
    assert [const[o].kind for o in conv.operands[1:]] == [PARAMETER] * (2 if bias else 1)
    assert "w" in ctx.consteval_trace[conv.operands[1]]["sources"]
    assert [n.op_type for n in const.ops] == ["conv2d", "add", "sigmoid"]


def test_statistics_behind_ops_of_compile_time_values_fold_too():
    """An ONNX export shares equal initializers through Identity nodes: a statistic computed only from parameters
    and constants is still a compile-time value."""
    graph = _conv_bn(shared_stats=True)
    assert graph[graph["bn"].operands[3]].op_type == "nop"
    folded = fold_batchnorms(graph, _ctx())
    assert "batchnorm" not in [n.op_type for n in folded.ops]
    _same(graph, folded, torch.randn(1, 8, 10, 10))


@pytest.mark.parametrize("case", ["extra_reader", "transpose", "training", "no_consteval"])
def test_batchnorm_is_kept_where_folding_would_not_pay(case):
    graph = _conv_bn(extra_reader=case == "extra_reader", transpose=case == "transpose")
    folded = fold_batchnorms(graph, _ctx(training=case == "training", consteval=case != "no_consteval"))
    assert [n.op_type for n in folded.ops].count("batchnorm") == 1
    _same(graph, folded, torch.randn(1, 8, 10, 10))


def test_a_captured_torch_cnn_loses_every_batchnorm_and_keeps_its_outputs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.SiLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1, groups=16), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 8, 1), torch.nn.BatchNorm2d(8)).eval()
    for bn in model.modules():
        if isinstance(bn, torch.nn.BatchNorm2d):  # statistics as training leaves them, not the defaults
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            torch.nn.init.uniform_(bn.weight, 0.5, 1.5)
            torch.nn.init.uniform_(bn.bias, -0.5, 0.5)
    x = torch.randn(2, 3, 12, 12)
    graph = pybuda.PyTorchModule("conv_bn_cnn", model).to_graph(x).graph
    ctx = _ctx()
    folded = fold_batchnorms(graph, ctx)
    assert ctx.notes["folded_batchnorms"] == 3
    assert [n.op_type for n in evaluate_constants(folded, ctx).ops].count("batchnorm") == 0
    _same(graph, folded, x)
    with torch.no_grad():
        want = model(x)
    got = run_graph_on_cpu(folded, [x])[0]
    assert torch.allclose(got, want, rtol=0, atol=ATOL * max(1.0, want.abs().max().item()))
