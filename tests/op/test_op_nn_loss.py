"""pybuda.op.nn layer modules and pybuda.op.loss modules against their torch.nn equivalents."""

from __future__ import annotations

import math

import pytest
import torch

import pybuda
from pybuda.errors import ModuleError
from pybuda.op import loss, nn
from pybuda.verify import calculate_pcc, run_graph_on_cpu

_GEN = torch.Generator().manual_seed(5)


def rn(*shape):
    return torch.randn(shape, generator=_GEN)


def _run(module, *inputs):
    graph, traced = module.trace(*inputs)
    out = run_graph_on_cpu(graph, list(inputs))[0]
    torch.testing.assert_close(traced[0].value(), out, atol=0, rtol=0)
    return out


def _close(out, expected, atol=1e-5):
    assert tuple(out.shape) == tuple(expected.shape), (list(out.shape), list(expected.shape))
    torch.testing.assert_close(out, expected, atol=atol, rtol=atol)  # named tolerance: atol = rtol = 1e-5
    if expected.numel() > 1:
        assert calculate_pcc(expected, out) >= 0.99


@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_torch_linear(bias):
    layer = nn.Linear("lin", 20, 7, bias=bias)
    ref = torch.nn.Linear(20, 7, bias=bias)
    with torch.no_grad():
        ref.weight.copy_(layer.weights.value().T)
        if bias:
            ref.bias.copy_(layer.bias.value())
    x = rn(3, 5, 20)
    with torch.no_grad():
        _close(_run(layer, x), ref(x))


def test_linear_default_init_is_torch_like():
    layer = nn.Linear("lin", 400, 300)
    bound = 1 / math.sqrt(400)
    w, b = layer.weights.value(), layer.bias.value()
    assert tuple(w.shape) == (400, 300) and tuple(b.shape) == (300,)
    assert w.abs().max() <= bound and b.abs().max() <= bound
    assert abs(w.std().item() - bound / math.sqrt(3)) < 0.05 * bound  # uniform(-b, b) has std b/sqrt(3)
    assert {p.get_name() for p in layer.get_parameters()} == {"lin.weights", "lin.bias"}


def test_linear_as_a_submodule_is_renamed_and_traces():
    class MLP(pybuda.PyBudaModule):
        def __init__(self, name):
            super().__init__(name)
            self.fc1 = nn.Linear("fc1", 8, 16)
            self.fc2 = nn.Linear("fc2", 16, 4)

        def forward(self, x):
            return self.fc2(pybuda.op.Relu("relu", self.fc1(x)))

    mlp = MLP("mlp")
    x = rn(2, 8)
    expected = torch.relu(x @ mlp.fc1.weights.value() + mlp.fc1.bias.value()) @ mlp.fc2.weights.value() \
        + mlp.fc2.bias.value()
    _close(_run(mlp, x), expected)
    assert "mlp.fc1.weights" in {p.get_name() for p in mlp.get_parameters()}


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=3, stride=1, padding=1),
    dict(kernel_size=(3, 2), stride=2, padding=(1, 0), dilation=1, groups=2),
    dict(kernel_size=3, stride=1, padding=2, dilation=2, bias=False),
])
def test_conv2d_module_matches_torch_conv2d(kwargs):
    layer = nn.Conv2dModule("conv", 4, 6, **kwargs)
    ref = torch.nn.Conv2d(4, 6, **kwargs)
    with torch.no_grad():
        ref.weight.copy_(layer.weights.value())
        if ref.bias is not None:
            ref.bias.copy_(layer.bias.value())
    x = rn(2, 4, 9, 11)
    with torch.no_grad():
        _close(_run(layer, x), ref(x))


def test_conv2d_module_default_padding_is_same():
    layer = nn.Conv2dModule("conv", 3, 5, (3, 3))
    assert tuple(_run(layer, rn(1, 3, 7, 10)).shape) == (1, 5, 7, 10)


def test_conv2d_module_init_matches_torch_bounds():
    layer = nn.Conv2dModule("conv", 8, 16, (3, 3), groups=2)
    fan_in = 8 // 2 * 9
    assert layer.weights.value().abs().max() <= 1 / math.sqrt(fan_in)
    assert tuple(layer.weights.shape.dims) == (16, 4, 3, 3)


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=3, stride=2, padding=1, output_padding=1),
    dict(kernel_size=(2, 3), stride=1, padding=0, groups=2),
])
def test_conv_transpose2d_module_matches_torch(kwargs):
    layer = nn.ConvTranspose2dModule("convt", 4, 6, **kwargs)
    ref = torch.nn.ConvTranspose2d(4, 6, **kwargs)
    with torch.no_grad():
        ref.weight.copy_(layer.weights.value())
        ref.bias.copy_(layer.bias.value())
    x = rn(2, 4, 5, 6)
    with torch.no_grad():
        _close(_run(layer, x), ref(x))


def test_pool_modules_match_torch():
    x1, x2 = rn(2, 3, 17), rn(2, 3, 9, 11)
    _close(_run(nn.MaxPool1dModule("p1", 3, stride=2, padding=1), x1), torch.nn.MaxPool1d(3, 2, 1)(x1))
    _close(_run(nn.MaxPool2dModule("p2", 3, stride=2, padding=1, ceil_mode=True), x2),
           torch.nn.MaxPool2d(3, 2, 1, ceil_mode=True)(x2))
    _close(_run(nn.AvgPool2dModule("p3", 2, stride=2, padding=0), x2), torch.nn.AvgPool2d(2, 2)(x2))
    _close(_run(nn.AvgPool2dModule("p4", 3, count_include_pad=False), x2),
           torch.nn.AvgPool2d(3, 1, 1, count_include_pad=False)(x2))


def test_bad_module_arguments_raise_module_error():
    with pytest.raises(ModuleError, match="groups"):
        nn.Conv2dModule("conv", 3, 4, 3, groups=2)
    with pytest.raises(ModuleError, match="in_features"):
        nn.Linear("lin", 0, 3)
    with pytest.raises(ModuleError, match="reduction"):
        loss.L1Loss("l1", reduction="mean")


# --- losses --------------------------------------------------------------------------------------------


def test_cross_entropy_matches_torch_with_one_hot_labels():
    logits = rn(6, 10)
    target = torch.randint(0, 10, (6,), generator=_GEN)
    labels = torch.nn.functional.one_hot(target, 10).float()
    out = _run(loss.CrossEntropyLoss("ce"), logits, labels)
    assert tuple(out.shape) == (1, 1)
    expected = torch.nn.CrossEntropyLoss()(logits, target)
    torch.testing.assert_close(out.reshape(()), expected, atol=1e-5, rtol=1e-5)


def test_cross_entropy_matches_torch_with_soft_labels():
    logits = rn(4, 7)
    labels = torch.softmax(rn(4, 7), -1)
    out = _run(loss.CrossEntropyLoss("ce"), logits, labels)
    torch.testing.assert_close(out.reshape(()), torch.nn.CrossEntropyLoss()(logits, labels), atol=1e-5, rtol=1e-5)


def test_cross_entropy_graph_is_built_from_tt_buda_ops():
    graph, _ = loss.CrossEntropyLoss("ce").trace(rn(2, 3), rn(2, 3))
    ops = [n.op_type for n in graph if n.kind == "op"]
    assert ops == ["exp", "reduce_sum", "log", "subtract", "constant", "multiply", "multiply", "reduce_sum",
                   "reduce_avg"]


@pytest.mark.parametrize("reduction,torch_reduction", [("avg", "mean"), ("sum", "sum"), ("none", "none")])
@pytest.mark.parametrize("cls,torch_cls", [(loss.L1Loss, torch.nn.L1Loss), (loss.MSELoss, torch.nn.MSELoss)])
def test_elementwise_losses_match_torch(cls, torch_cls, reduction, torch_reduction):
    pred, labels = rn(5, 9), rn(5, 9)
    out = _run(cls("loss", reduction=reduction), pred, labels)
    expected = torch_cls(reduction=torch_reduction)(pred, labels)
    if reduction != "none":
        assert tuple(out.shape) == (1, 1)
        out = out.reshape(())
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
