"""Explicit constant pads merge into the padding of the convolution or pool that reads them, only where
every value stays the same."""

import math

import pytest
import torch

from pass_helpers import check_lowering, make_ctx
from pybuda.ir.graph import Graph
from pybuda.passes.graph.fold_pads import fold_pads
from pybuda.verify import run_graph_on_cpu


def _padded_graph(op_type, attrs, pad=(1, 2, 0, 1), value=0.0, source=None, extra_user=False, c=4):
    """x [1, c, 12, 10] -> (source op) -> pad -> op_type; conv2d gets a weight and bias."""
    torch.manual_seed(0)
    g = Graph("g")
    g.add_input("x", (1, c, 12, 10))
    act = "x"
    if source is not None:
        g.add_op("src", source, ["x"])
        act = "src"
    g.add_op("pad", "pad", [act], {"pad": pad, "value": value})
    operands = ["pad"]
    if op_type == "conv2d":
        g.add_parameter("w", torch.randn(6, c, 3, 3))
        g.add_parameter("b", torch.randn(6))
        operands += ["w", "b"]
    g.add_op("win", op_type, operands, attrs)
    g.add_output("out", "win")
    if extra_user:
        g.add_op("other", "exp", ["pad"])
        g.add_output("out2", "other")
    return g


def _same_values(g, folded):
    x = torch.randn(1, 4, 12, 10)
    for want, got in zip(run_graph_on_cpu(g, [x]), run_graph_on_cpu(folded, [x])):
        assert want.shape == got.shape
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("op_type,attrs,pad,value,source", [
    ("conv2d", {"stride": 1, "padding": 1}, (1, 2, 0, 1), 0.0, None),     # added to the conv's own padding
    ("conv2d", {"stride": 2, "padding": 0}, (3, 3, 3, 3), 0.0, None),
    ("max_pool2d", {"kernel_size": 3, "stride": 2}, (1, 1, 1, 1), 0.0, "relu"),  # Keras ResNet's stem pool
    ("max_pool2d", {"kernel_size": 3, "stride": 2}, (1, 0, 1, 0), -math.inf, None),
    ("avg_pool2d", {"kernel_size": 2, "stride": 2, "count_include_pad": True}, (1, 1, 0, 2), 0.0, None),
])
def test_pad_folds_into_the_window_op(op_type, attrs, pad, value, source):
    g = _padded_graph(op_type, attrs, pad, value, source)
    ctx = make_ctx()
    folded = fold_pads(g, ctx)
    assert "pad" not in {n.op_type for n in folded.ops} and ctx.notes["folded_pads"] == 1
    _same_values(g, folded)


@pytest.mark.parametrize("op_type,attrs,value,source,extra_user", [
    ("conv2d", {"stride": 1}, 1.0, None, False),                          # a non-zero border is data
    ("max_pool2d", {"kernel_size": 3, "stride": 2}, 0.0, None, False),    # zeros could beat negatives
    ("max_pool2d", {"kernel_size": 3, "stride": 2, "ceil_mode": True}, 0.0, "relu", False),
    ("avg_pool2d", {"kernel_size": 2, "stride": 2, "count_include_pad": False}, 0.0, None, False),
    ("conv2d", {"stride": 1}, 0.0, None, True),                           # another op reads the pad
])
def test_pad_stays_where_folding_would_change_values(op_type, attrs, value, source, extra_user):
    g = _padded_graph(op_type, attrs, value=value, source=source, extra_user=extra_user)
    assert fold_pads(g, make_ctx()) is g


def test_folded_pad_lowers_to_the_same_values():
    g = _padded_graph("max_pool2d", {"kernel_size": 3, "stride": 2}, (1, 1, 1, 1), source="relu")
    bg = check_lowering(g, [torch.randn(1, 4, 12, 10)])
    assert not any("pad" in name for name in bg.ops)


def test_a_relu_that_lets_negatives_through_keeps_its_pad():
    # relu(x, threshold=-0.5) passes values down to -0.5: a zero border could win the max, so the pad stays
    # (the same non-negativity check as the pool's lowering, not "any relu").
    g = Graph("g")
    g.add_input("x", (1, 4, 12, 10))
    g.add_op("src", "relu", ["x"], {"threshold": -0.5})
    g.add_op("pad", "pad", ["src"], {"pad": (1, 1, 1, 1), "value": 0.0})
    g.add_op("win", "max_pool2d", ["pad"], {"kernel_size": 3, "stride": 2})
    g.add_output("out", "win")
    assert fold_pads(g, make_ctx()) is g
