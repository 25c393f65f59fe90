"""A transposed conv whose stride equals its kernel (U-Net's 2x2 / stride-2 upsampling) is one matmul and a
depth-to-space, not zero insertion and a convolution over an image kh*kw times larger."""

import pytest
import torch

import pybuda
from pass_helpers import check_lowering, ir_passes, make_ctx
from pybuda.ir.graph import Graph
from pybuda.verify import calculate_pcc


def _graph(shape, cout, kernel, stride, padding=0, bias=True, channel_last=False, output_padding=0):
    torch.manual_seed(0)
    kh, kw = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    cin = shape[-1] if channel_last else shape[1]
    g = Graph("g")
    g.add_input("x", shape)
    g.add_parameter("w", torch.randn(cin, cout, kh, kw) * 0.2, requires_grad=False)
    operands = ["x", "w"]
    if bias:
        g.add_parameter("b", torch.randn(cout), requires_grad=False)
        operands.append("b")
    g.add_op("up", "conv2d_transpose", operands, {"stride": stride, "padding": padding, "channel_last": channel_last,
                                                  "output_padding": output_padding})
    g.add_output("y", "up")
    return g


@pytest.mark.parametrize("shape, cout, kernel, bias, channel_last", [
    ((1, 64, 12, 10), 32, 2, True, False),
    ((2, 40, 7, 5), 24, 3, False, False),
    ((1, 8, 8, 48), 16, (2, 3), True, True),
])
def test_patchwise_transposed_conv_is_one_matmul_and_matches(shape, cout, kernel, bias, channel_last):
    g = _graph(shape, cout, kernel, kernel, bias=bias, channel_last=channel_last)
    ops = [n.op_type for n in ir_passes(g.copy(), make_ctx()).nodes.values() if n.kind == "op"]
    assert ops.count("matmul") == 1 and "conv2d" not in ops
    check_lowering(g, [torch.randn(shape)], atol=1e-3)


@pytest.mark.parametrize("stride, padding, output_padding", [(2, 1, 1), (3, 0, 1)])
def test_overlapping_or_padded_transposed_convs_keep_the_general_form(stride, padding, output_padding):
    g = _graph((1, 16, 6, 6), 8, 3, stride, padding, output_padding=output_padding)
    ops = [n.op_type for n in ir_passes(g.copy(), make_ctx()).nodes.values() if n.kind == "op"]
    assert "conv2d" in ops or ops.count("matmul") > 1
    check_lowering(g, [torch.randn(1, 16, 6, 6)], atol=1e-3)


def test_unet_upsampling_on_the_golden_device():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.ConvTranspose2d(64, 32, 2, stride=2), torch.nn.ReLU()).eval()
    x = torch.randn(2, 64, 9, 11)
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32)
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("up", model), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[(x,)]).get(timeout=300)[0].value()
    with torch.no_grad():
        want = model(x)
    assert got.shape == want.shape
    assert calculate_pcc(got, want) > 0.9999
    assert torch.allclose(got, want, atol=1e-2, rtol=1e-2)
