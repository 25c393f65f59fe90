"""Weights computed at run time: BiT's weight-standardised convolution normalises its weight with a training-mode
batch norm (``F.batch_norm(w.reshape(1, O, -1), None, None, training=True)``). Batch statistics of parameters mix
no samples, so they map to reductions on the device; a 1x1 convolution whose weight is such a value used to fail
with an internal shape error (its weight move assumed the [Cout, Cin, kk] layout of the 3x3 path)."""

import pytest
import torch
import torch.nn.functional as F

import pybuda
from pybuda.frontend.torch import capture
from pybuda.verify import calculate_pcc


class WeightStandardisedConv(torch.nn.Conv2d):
    def forward(self, x):
        w = F.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None, training=True,
                         momentum=0.0, eps=1e-6).reshape_as(self.weight)
        return F.conv2d(x, w, None, self.stride, self.padding)


class NormalisedParameter(torch.nn.Module):
    """A training-mode batch norm over a parameter with a batch of 3 and an affine weight and bias."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.w = torch.nn.Parameter(torch.randn(3, 8, 5, 4, generator=g))
        self.gamma = torch.nn.Parameter(torch.randn(8, generator=g))
        self.beta = torch.nn.Parameter(torch.randn(8, generator=g))

    def forward(self, x):
        return x * F.batch_norm(self.w, None, None, self.gamma, self.beta, training=True, eps=1e-5).sum(0)


def _assert_matches_torch_on_device(model, x):
    """``model`` on a Wormhole TTDevice at Float32, wholly on the device, against torch."""
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                      math_fidelity=pybuda.MathFidelity.HiFi4)
    tt = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", model), arch=pybuda.BackendDevice.Wormhole_B0)
    try:
        got = pybuda.run_inference(inputs=[(x,)]).get(timeout=600)[0].value()
        assert tt.cpu_fallback_device_pre is None and tt.cpu_fallback_device_post is None
    finally:
        pybuda.shutdown()
    with torch.no_grad():
        want = model(x)
    assert calculate_pcc(got, want) >= 0.999
    assert torch.allclose(got, want, rtol=1e-2, atol=1e-2 * want.abs().max().item())


@pytest.mark.parametrize("cin, cout, k", [(32, 32, 1), (64, 32, 1), (32, 128, 1), (32, 32, 3)])
def test_a_weight_standardised_conv_runs_on_the_device(cin, cout, k):
    torch.manual_seed(0)
    model = WeightStandardisedConv(cin, cout, k, padding=k // 2, bias=False).eval()
    _assert_matches_torch_on_device(model, torch.randn(1, cin, 8, 8))


def test_batch_statistics_of_parameters_match_torch():
    x = torch.randn(1, 8, 5, 4, generator=torch.Generator().manual_seed(3))
    _assert_matches_torch_on_device(NormalisedParameter().eval(), x)


def test_batch_statistics_of_activations_still_run_on_the_host():
    class BatchStatistics(torch.nn.Module):
        def forward(self, x):
            return F.batch_norm(x, None, None, training=True)

    report = capture(BatchStatistics(), (torch.randn(2, 8, 4),), for_device=True).report
    assert "batch norm over the batch's own statistics" in str(report)
