"""3-d convolutions and pools run on the device as 2-d ones (pybuda/frontend/aten_nn.py ``conv3d_as_2d``): each
depth slice of the kernel is a conv2d over the strided input frames it meets, folded into the batch, and the slices
add up; a 3-d pool is the 2-d pool of every frame, then the maximum (sum) over each window's frames. Video models
(VideoMAE's tubelet embedding, 3-d ResNets) no longer leave their first layer to the CPU."""

import pytest
import torch

import pybuda
from pybuda.frontend.torch import capture
from pybuda.verify import calculate_pcc

CONVS = {
    "cube": dict(kernel_size=3, padding=1),
    "strided_tubelets": dict(kernel_size=(2, 3, 3), stride=(2, 1, 2), padding=(0, 1, 1)),
    "same_dilated_grouped": dict(kernel_size=3, padding="same", dilation=(2, 1, 1), groups=2),
    "even_same": dict(kernel_size=2, padding="same"),
    "temporal_only": dict(kernel_size=(3, 1, 1), padding=(1, 0, 0), bias=False),
    "uneven": dict(kernel_size=(4, 2, 2), stride=(3, 2, 2), padding=(2, 0, 1)),
}

POOLS = {
    "max": torch.nn.MaxPool3d(3, stride=2, padding=1),
    "max_dilated": torch.nn.MaxPool3d((2, 3, 3), stride=(1, 2, 2), padding=(1, 1, 0), dilation=(2, 1, 1)),
    "avg": torch.nn.AvgPool3d(3, stride=2, padding=1),
    "avg_divisor": torch.nn.AvgPool3d((3, 2, 2), stride=(1, 2, 1), padding=(1, 0, 1), divisor_override=5),
}


def _on_device(module, x):
    result = capture(module.eval(), (x,), for_device=True)
    assert not result.report.has_fallback, str(result.report)
    return result


@pytest.mark.parametrize("name", list(CONVS))
def test_conv3d_matches_torch(name, fe):
    torch.manual_seed(0)
    module = torch.nn.Conv3d(4, 6, **CONVS[name])
    x = torch.randn(2, 4, 7, 9, 8)
    result = _on_device(module, x)
    assert "conv2d" in {n.op_type for n in result.graph.ops}
    fe.matches(result.run(x), [module(x)], atol=1e-5)


@pytest.mark.parametrize("name", list(POOLS))
def test_pool3d_matches_torch(name, fe):
    x = torch.randn(2, 3, 7, 9, 8)
    module = POOLS[name]
    fe.matches(_on_device(module, x).run(x), [module(x)], atol=1e-6)


def test_pools_the_device_cannot_express_run_on_the_cpu_with_a_reason():
    x = torch.randn(1, 2, 5, 6, 6)
    for module, reason in ((torch.nn.MaxPool3d(2, ceil_mode=True), "ceil_mode"),
                           (torch.nn.AvgPool3d(3, padding=1, count_include_pad=False), "not counted")):
        result = capture(module.eval(), (x,), for_device=True)
        assert reason in str(result.report)
        assert torch.allclose(result.run(x)[0], module(x))


class VideoStem(torch.nn.Module):
    """A tubelet embedding (VideoMAE) feeding a 3-d residual block and a pooled head."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Conv3d(3, 16, kernel_size=(2, 4, 4), stride=(2, 4, 4))
        self.conv = torch.nn.Conv3d(16, 16, 3, padding=1)
        self.norm = torch.nn.BatchNorm3d(16)
        self.pool = torch.nn.MaxPool3d((1, 2, 2))
        self.head = torch.nn.Linear(16, 5)

    def forward(self, video):
        x = self.embed(video)
        x = self.pool(torch.relu(x + self.norm(self.conv(x))))
        return self.head(x.mean(dim=(2, 3, 4)))


@pytest.mark.slow
def test_a_video_model_on_the_golden_device_at_default_formats():
    torch.manual_seed(0)
    module = VideoStem().eval()
    video = torch.randn(1, 3, 8, 32, 32)
    want = module(video)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("video", module), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[(video,)]).get(timeout=600)[0].value()
    assert device.cpu_fallback_device_pre is None and device.cpu_fallback_device_post is None
    assert calculate_pcc(got, want) >= 0.99
