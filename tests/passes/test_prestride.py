"""Convolution prestriding (enable_conv_prestride): the host's space-to-depth turns a strided conv on a
graph input into a stride-1 conv with a smaller kernel, with the same results."""

import pytest
import torch

from pass_helpers import check_lowering, make_ctx
from pybuda.config import CompilerConfig
from pybuda.ir.graph import Graph
from pybuda.passes.graph.prestride import prestride_convs
from pybuda.verify import run_graph_on_cpu


def _conv_graph(c=3, h=32, w=32, cout=8, k=7, stride=2, padding=3, bias=True, extra_user=False):
    torch.manual_seed(0)
    g = Graph("g")
    g.add_input("x", (1, c, h, w))
    g.add_parameter("w", torch.randn(cout, c, k, k))
    operands = ["x", "w"]
    if bias:
        g.add_parameter("b", torch.randn(cout))
        operands.append("b")
    g.add_op("conv", "conv2d", operands, {"stride": stride, "padding": padding})
    g.add_output("out", "conv")
    if extra_user:
        g.add_op("other", "relu", ["x"])
        g.add_output("out2", "other")
    return g


def _conv(graph):
    return next(n for n in graph.ops if n.op_type == "conv2d")


@pytest.mark.parametrize("c,h,w,k,stride,padding", [
    (3, 32, 32, 7, 2, 3),            # ResNet's stem, small
    (3, 33, 30, 7, 2, 3),            # odd height: the space-to-depth input gets an extra zero row
    (1, 24, 24, 5, 3, 2),            # stride 3
    (4, 20, 28, 3, 2, (1, 1, 0, 2)),  # asymmetric (left, right, top, bottom) padding
    (3, 16, 16, 4, 2, 0),            # kernel a multiple of the stride, no padding
])
def test_prestride_gives_the_same_values(c, h, w, k, stride, padding):
    g = _conv_graph(c, h, w, k=k, stride=stride, padding=padding)
    p = prestride_convs(g, make_ctx())
    conv = _conv(p)
    assert conv.attrs["stride"] == (1, 1) and conv.attrs["padding"] == (0, 0, 0, 0)
    assert p[conv.operands[1]].shape[1] == c * stride * stride
    assert p[conv.operands[1]].shape[2] == -(-k // stride)
    x = torch.randn(1, c, h, w)
    want, got = run_graph_on_cpu(g, [x])[0], run_graph_on_cpu(p, [x])[0]
    assert want.shape == got.shape
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_prestride_lowers_to_a_smaller_picker_and_hoists_the_reorder_to_the_host():
    g = _conv_graph()
    x = torch.randn(1, 3, 32, 32)
    plain = check_lowering(g.copy(), [x], make_ctx(CompilerConfig(enable_conv_prestride=False)))
    strided = check_lowering(g.copy(), [x])

    def picker_taps(bg):
        # Kernel positions may be stacked along rows inside a t slice (ConvPoolLowering._tap_pick): count
        # the picked rows in units of the conv's 16x16 output pixels.
        out_rt = 16 * 16 // 32
        return max(op.shape.z * op.shape.rt // out_rt for op in bg.ops.values()
                   if op.type == "matmul" and op.attrs.get("identity"))

    assert picker_taps(strided) == 16 < picker_taps(plain) == 49  # kernel taps: 4x4 instead of 7x7
    host_tms = strided.queues["x"].tags["host_tms"]
    assert [t for t, _ in host_tms][0] == "pad" and "reshape" in {t for t, _ in host_tms}


@pytest.mark.parametrize("kwargs", [
    {"stride": 1, "padding": 1, "k": 3},  # nothing to gain without a stride
    {"extra_user": True},                  # the input feeds another op: the host cannot reorder it for one
    {"c": 32},                             # 32·4 channels = 4 tile columns x 16 taps: more work than 49 x 1
])
def test_prestride_skips_convs_it_cannot_help(kwargs):
    g = _conv_graph(**kwargs)
    assert prestride_convs(g, make_ctx()) is g


def test_prestride_follows_the_config_flag():
    g = _conv_graph()
    assert prestride_convs(g, make_ctx(CompilerConfig(enable_conv_prestride=False))) is g
    assert prestride_convs(g, make_ctx()) is not g


def test_prestride_reaches_an_input_through_host_tms():
    # A TensorFlow model's NHWC input reaches its stem through a transpose to NCHW: the host applies the
    # transpose and the space-to-depth together.
    torch.manual_seed(0)
    g = Graph("g")
    g.add_input("x", (1, 32, 30, 3))
    g.add_op("nchw_a", "transpose", ["x"], {"dim0": 1, "dim1": 3})
    g.add_op("nchw", "transpose", ["nchw_a"], {"dim0": 2, "dim1": 3})
    g.add_parameter("w", torch.randn(8, 3, 7, 7))
    g.add_op("conv", "conv2d", ["nchw", "w"], {"stride": 2, "padding": 3})
    g.add_output("out", "conv")
    p = prestride_convs(g, make_ctx())
    assert _conv(p).attrs["stride"] == (1, 1)
    x = torch.randn(1, 32, 30, 3)
    torch.testing.assert_close(run_graph_on_cpu(p, [x])[0], run_graph_on_cpu(g, [x])[0], atol=1e-4, rtol=1e-4)
    bg = check_lowering(g.copy(), [x])
    host_tms = [t for t, _ in bg.queues["x"].tags["host_tms"]]
    assert host_tms[:2] == ["transpose", "transpose"] and "pad" in host_tms
