"""acos / asin / atan run on the device as polynomials (sqrt, multiply, add, where): YOSO's LSH expectation
``1 - acos(q k^T) / pi`` used to send every attention layer to the host."""

import torch

import pybuda
from pybuda.verify import calculate_pcc

from nan_inf_helpers import configure, run_on_device


class InverseTrig(torch.nn.Module):
    def forward(self, x):
        return torch.acos(torch.tanh(x)), torch.asin(torch.tanh(x * 0.5)), torch.atan(x * 4.0)


def test_inverse_trig_on_the_golden_device():
    x = torch.linspace(-3.0, 3.0, 64 * 32).reshape(1, 64, 32)
    module = InverseTrig().eval()
    configure(pybuda.DataFormat.Float32)
    pybuda.set_configuration_options(math_fidelity=pybuda.MathFidelity.HiFi4)
    got = run_on_device(pybuda.PyTorchModule("trig", module), (x,), "wh")
    for g, w in zip(got, module(x)):
        assert calculate_pcc(g, w) >= 0.9999
        assert torch.allclose(g, w, atol=5e-3)
