"""Discrete Fourier transforms of static size run on the device as matmuls with constant cosine/sine matrices
(:mod:`pybuda.frontend.aten_complex`): a complex value is a pair of real tensors there. Complex values never
cross between the host and the device: an op that needs the complex tensor itself (a complex model output, a
complex op with no mapping) runs on the CPU together with the transforms that feed it. Complex arithmetic between
transforms is tested in test_complex_on_device."""

import pytest
import torch

import pybuda
from pybuda.frontend.torch import capture
from pybuda.verify import calculate_pcc


class Transforms(torch.nn.Module):
    def forward(self, x):  # x [b, 6, 8]
        mixed = torch.fft.fftn(x, dim=(1, 2)).real  # FNet's token mixing
        imag = torch.fft.fft(x, dim=-1).imag
        magnitude = torch.fft.rfft(x, dim=-1).abs()
        round_trip = torch.fft.irfft(torch.fft.rfft(x, dim=1), n=x.shape[1], dim=1)
        lengths = torch.fft.ifft(torch.fft.fft2(x, norm="ortho"), n=10, dim=-1, norm="forward").imag
        odd = torch.fft.irfft(torch.fft.rfft(x, n=7), n=7)
        pairs = torch.view_as_real(torch.fft.rfft(x * 2.0, dim=1)) + 1.0
        return mixed, imag, magnitude, round_trip, lengths, odd, pairs


class ComplexOnTheHost(torch.nn.Module):
    def forward(self, x):
        f = torch.fft.fft(x * 3.0, dim=-1)
        shifted = f * torch.exp(1j * torch.arange(8.0))  # reads f, which the host computes for the output
        return torch.fft.ifft(shifted).real * 2.0, f, torch.fft.fft(x, dim=1).real + torch.fft.fft(x).sqrt().real


@pytest.mark.parametrize("decompose", [False, True], ids=["fft_ops", "fft_primitives"])
def test_transforms_run_on_the_device(decompose, fe):
    x = torch.randn(2, 6, 8)
    module = Transforms().eval()
    result = capture(module, (x,), for_device=True, decompose=decompose)
    assert not result.report.has_fallback, str(result.report)
    assert "matmul" in {n.op_type for n in result.graph.ops}
    fe.matches(result.run(x), list(module(x)), atol=1e-5)


def test_complex_values_do_not_cross_to_the_host(fe):
    x = torch.randn(2, 6, 8)
    module = ComplexOnTheHost().eval()
    result = capture(module, (x,), for_device=True)
    report = str(result.report)
    assert "complex result is a model output" in report and "sqrt" in report, report
    assert result.report.device_ops > 0  # the real FFT along dim 1 stays on the device
    want = module(x)
    got = result.run(x)
    assert torch.allclose(got[0], want[0], atol=1e-5) and torch.allclose(got[2], want[2], atol=1e-5)
    assert got[1].dtype == torch.complex64 and torch.allclose(got[1], want[1], atol=1e-5)


def test_fnet_mixing_on_the_golden_device():
    torch.manual_seed(0)

    class Mixing(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(32, 32)

        def forward(self, x):
            return torch.nn.functional.layer_norm(x + torch.fft.fftn(self.proj(x), dim=(1, 2)).real, (32,))

    module = Mixing().eval()
    x = torch.randn(1, 16, 32)
    want = module(x)
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                     math_fidelity=pybuda.MathFidelity.HiFi4)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", module), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[(x,)]).get(timeout=300)[0].value()
    assert device.cpu_fallback_device_pre is None and device.cpu_fallback_device_post is None
    assert calculate_pcc(got, want) >= 0.999
    assert torch.allclose(got, want, atol=2e-2)
