"""Bilinear ``grid_sample`` at run-time coordinates runs on the device (pybuda/frontend/aten_sampling.py): the
grid becomes a matrix of tent weights and the sampling one batched matmul, so a spatial transformer, an
optical-flow warp or a learned deformation no longer sends its sampling (and everything after it) to the CPU."""

import pytest
import torch
import torch.nn.functional as F

import pybuda
from pybuda.frontend.torch import capture
from pybuda.verify import calculate_pcc


class Sample(torch.nn.Module):
    def __init__(self, padding, aligned, mode="bilinear"):
        super().__init__()
        self.padding, self.aligned, self.mode = padding, aligned, mode

    def forward(self, x, grid):
        return F.grid_sample(x, grid, mode=self.mode, padding_mode=self.padding, align_corners=self.aligned)


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    # coordinates past the edges too: the zeros padding and the border clamp are exercised
    return torch.randn(2, 3, 5, 7, generator=g), torch.rand(2, 4, 6, 2, generator=g) * 2.6 - 1.3


@pytest.mark.parametrize("padding", ["zeros", "border"])
@pytest.mark.parametrize("aligned", [False, True], ids=["half_pixel", "align_corners"])
def test_bilinear_sampling_matches_torch(padding, aligned, fe):
    x, grid = _inputs()
    module = Sample(padding, aligned).eval()
    result = capture(module, (x, grid), for_device=True)
    assert not result.report.has_fallback, str(result.report)
    fe.matches(result.run(x, grid), [module(x, grid)], atol=1e-5)


@pytest.mark.parametrize("padding,mode,reason", [("zeros", "nearest", "other than bilinear"),
                                                 ("reflection", "bilinear", "reflection padding")])
def test_other_sampling_runs_on_the_cpu_with_a_reason(padding, mode, reason):
    x, grid = _inputs(1)
    module = Sample(padding, False, mode).eval()
    result = capture(module, (x, grid), for_device=True)
    assert reason in str(result.report)
    assert torch.allclose(result.run(x, grid)[0], module(x, grid))


class SpatialTransformer(torch.nn.Module):
    """A localisation net predicts an affine transform per image; the image is resampled through it."""

    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(),
                                            torch.nn.AdaptiveAvgPool2d(2), torch.nn.Flatten())
        self.theta = torch.nn.Linear(16, 6)
        with torch.no_grad():
            self.theta.weight.mul_(0.1)
            self.theta.bias.copy_(torch.tensor([0.9, 0.1, 0.05, -0.1, 1.1, 0.0]))
        self.head = torch.nn.Linear(16 * 16, 10)

    def forward(self, x):
        theta = self.theta(self.features(x)).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return self.head(F.grid_sample(x, grid, align_corners=False).flatten(1))


@pytest.mark.slow
def test_a_spatial_transformer_on_the_golden_device():
    torch.manual_seed(0)
    module = SpatialTransformer().eval()
    # A smooth image, as photographs are: sampling white noise turns the grid's bfloat16 rounding (a fifth of a
    # pixel after the localisation net) into errors as large as the pixels themselves.
    rows, cols = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    x = (torch.sin(rows * 0.4) * torch.cos(cols * 0.3) + 0.05 * torch.randn(16, 16)).reshape(1, 1, 16, 16)
    want = module(x)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("stn", module), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[(x,)]).get(timeout=300)[0].value()
    assert device.cpu_fallback_device_pre is None and device.cpu_fallback_device_post is None
    assert calculate_pcc(got, want) >= 0.99
