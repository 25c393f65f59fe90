"""``prod`` and ``cumprod`` run on the device (pybuda/frontend/aten_products.py): multiplies of slices in log2(n)
rounds (a doubling scan, a halving reduction), compared with torch on the golden chip at Float32 (Dest too)."""

import pytest
import torch

import pybuda
from pybuda.frontend.torch import capture

#: The chip's multiplier reads each operand through its 19-bit source registers (10 fraction bits, truncated), so
#: every factor of a product on the device may lose up to about 2**-10 of itself (2**-9 for the two operands).
FACTOR_RTOL = 2.0 ** -9


class Products(torch.nn.Module):
    def __init__(self, dim, keepdim):
        super().__init__()
        self.dim, self.keepdim = dim, keepdim

    def forward(self, x):
        return (torch.cumprod(x, self.dim), torch.prod(x, self.dim, keepdim=self.keepdim), x.prod(),
                torch.cumprod(x.double(), self.dim, dtype=torch.float32))


def _on_the_golden_chip(module, *inputs):
    assert not capture(module, inputs, for_device=True).report.has_fallback
    # Float32 in Dest too: the default keeps Float16_b there, which rounds every partial product.
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32, accumulate_df="Float32",
                                     default_math_fidelity=pybuda.MathFidelity.HiFi4)
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("products", module), arch=pybuda.BackendDevice.Wormhole_B0)
    return [t.value() for t in pybuda.run_inference(inputs=[inputs]).get(timeout=300)]


@pytest.mark.parametrize("shape,dim,keepdim", [((3, 7), 1, False), ((2, 5, 4), 1, True), ((4, 9), 0, False),
                                               ((2, 1, 6), 1, False), ((3, 33), -1, True)],
                         ids=["rows7", "middle5_keepdim", "dim0", "size1", "odd33"])
def test_products_match_torch_with_zeros_signs_and_infinities(shape, dim, keepdim):
    g = torch.Generator().manual_seed(sum(shape))
    x = 0.5 + torch.rand(*shape, generator=g)  # products of up to 33 factors stay well inside float32
    x = torch.where(torch.rand(*shape, generator=g) < 0.2, -x, x)
    flat = x.view(-1)
    flat[1] = 0.0
    if flat.numel() > 6:
        flat[5] = float("inf")
    module = Products(dim, keepdim).eval()
    got, want = _on_the_golden_chip(module, x), module(x)
    factors = x.numel() if len(shape) == 1 else x.shape[dim]
    for g_, w, n in zip(got, want, (factors, factors, x.numel(), factors)):
        assert g_.shape == w.shape
        assert torch.equal(torch.isnan(g_), torch.isnan(w)) and torch.equal(torch.isinf(g_), torch.isinf(w))
        finite = torch.isfinite(w)
        assert torch.allclose(g_[finite], w[finite].to(g_.dtype), rtol=n * FACTOR_RTOL, atol=0)


class StickBreaking(torch.nn.Module):
    """w_k = v_k * prod_{j<k} (1 - v_j): the weights of a stick-breaking process."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(12, 6)

    def forward(self, x):
        v = torch.sigmoid(self.proj(x))
        rest = torch.cumprod(1 - v, -1)
        return v * torch.cat([torch.ones_like(rest[..., :1]), rest[..., :-1]], -1)


def test_stick_breaking_weights_run_on_the_device():
    torch.manual_seed(0)
    module, x = StickBreaking().eval(), torch.randn(4, 12)
    got = _on_the_golden_chip(module, x)[0]
    assert torch.allclose(got, module(x), rtol=6 * FACTOR_RTOL, atol=1e-6)


class IntegerProduct(torch.nn.Module):
    def forward(self, x):
        return torch.cumprod(x, 1)


def test_integer_products_stay_on_the_host():
    result = capture(IntegerProduct(), (torch.randint(1, 4, (2, 5)),), for_device=True)
    assert result.report.has_fallback and "cumprod" in str(result.report)
