"""Complex arithmetic runs on the device as arithmetic on real pairs (:mod:`pybuda.frontend.aten_complex_ops`):
the rotary embeddings of Meta's Llama code (``view_as_complex`` times a ``polar`` constant), and multiplies,
divisions, sums, conjugates and exponentials of complex tensors, with reshapes and slices moving both parts."""

import math

import pytest
import torch
import torch.nn.functional as F

import pybuda
from pybuda.frontend.torch import capture
from pybuda.verify import calculate_pcc


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, dtype=torch.float32)
    return torch.polar(torch.ones(end, dim // 2), torch.outer(t, freqs))  # complex64


class LlamaAttention(torch.nn.Module):
    """Attention with rotary embeddings as Meta's reference Llama writes them (complex buffer, GQA)."""

    def __init__(self, dim=64, heads=4, kv_heads=2, max_seq=32):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = torch.nn.Linear(dim, dim, bias=False)
        self.wk = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = torch.nn.Linear(dim, dim, bias=False)
        self.freqs_cis = precompute_freqs_cis(self.head_dim, max_seq)  # a plain attribute, as in the reference

    @staticmethod
    def rotate(x, freqs_cis):
        x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        freqs_cis = freqs_cis.view(1, x_.shape[1], 1, x_.shape[-1])
        return torch.view_as_real(x_ * freqs_cis).flatten(3).type_as(x)

    def forward(self, x, start_pos: int = 2):
        b, seq, _ = x.shape
        freqs_cis = self.freqs_cis[start_pos: start_pos + seq]
        q = self.wq(x).view(b, seq, self.heads, self.head_dim)
        k = self.wk(x).view(b, seq, self.kv_heads, self.head_dim)
        v = self.wv(x).view(b, seq, self.kv_heads, self.head_dim)
        q, k = self.rotate(q, freqs_cis), self.rotate(k, freqs_cis)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        scores = q.transpose(1, 2) @ k.transpose(1, 2).transpose(2, 3) / math.sqrt(self.head_dim)
        mask = torch.full((seq, seq), float("-inf")).triu(1)
        out = F.softmax(scores + mask, dim=-1) @ v.transpose(1, 2)
        return self.wo(out.transpose(1, 2).reshape(b, seq, -1))


class Arithmetic(torch.nn.Module):
    def forward(self, x, y):  # [2, 6, 8] each
        z = torch.complex(x, y)
        w = torch.polar(x.abs() + 0.5, y)
        prod = (z * w).real + (z * w).imag
        quot = torch.view_as_real(z / w).sum(-1)
        mixed = (z + 2 * w - (1 + 2j)).imag * (z.conj() * z).real
        moved = torch.cat([z.transpose(1, 2), w.transpose(1, 2)], dim=-1)[:, 1:5].reshape(2, -1).real
        halves = [h.imag for h in z.chunk(2, dim=1)]
        rotated = (torch.exp(1j * x) * z).sum(dim=1).real - (z / 3.0).mean(dim=2).imag.sum(1, keepdim=True)
        return prod, quot, mixed, moved, halves[0] - halves[1], rotated, (z * w).abs(), torch.exp(z).imag


def _no_fallback(module, inputs):
    result = capture(module, inputs, for_device=True)
    assert not result.report.has_fallback, str(result.report)
    return result


def test_llama_rotary_embeddings_run_on_the_device(fe):
    torch.manual_seed(0)
    module = LlamaAttention().eval()
    x = torch.randn(2, 8, 64)
    result = _no_fallback(module, (x,))
    fe.matches(result.run(x), [module(x)], atol=1e-4)


def test_complex_arithmetic_runs_on_the_device(fe):
    torch.manual_seed(1)
    module = Arithmetic().eval()
    x, y = torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    result = _no_fallback(module, (x, y))
    want = module(x, y)
    fe.matches(result.run(x, y), list(want), atol=1e-4)


def test_an_unmapped_complex_op_runs_on_the_cpu_with_its_neighbours():
    class Sqrt(torch.nn.Module):
        def forward(self, x):
            z = torch.view_as_complex(x.reshape(2, 4, 2)) * (1 - 1j)
            return torch.view_as_real(z.sqrt() * 2).flatten(1) + 1.0

    x = torch.randn(2, 8)
    result = capture(Sqrt().eval(), (x,), for_device=True)
    assert "sqrt" in str(result.report), str(result.report)
    assert torch.allclose(result.run(x)[0], Sqrt()(x), atol=1e-5)


@pytest.mark.slow
def test_llama_rotary_attention_on_the_golden_device_at_default_formats():
    torch.manual_seed(0)
    module = LlamaAttention().eval()
    x = torch.randn(1, 16, 64)
    want = module(x)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("llama_attn", module),
                             arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[(x,)]).get(timeout=300)[0].value()
    assert device.cpu_fallback_device_pre is None and device.cpu_fallback_device_post is None
    assert calculate_pcc(got, want) >= 0.99


class MatrixProducts(torch.nn.Module):
    """Products of complex matrices: ``@`` of two complex tensors, an einsum (a complex ``bmm``) and a complex tensor
    times a real one made complex."""

    def forward(self, x, y):  # [2, 4, 6] each
        z, w = torch.complex(x, y), torch.polar(y.abs() + 0.5, x)
        zw = z @ w.transpose(1, 2)
        vandermonde = torch.einsum("bn,bnl->bl", z[:, :, 0], torch.exp(z[:, :, :, None] * torch.arange(3) * 0.1)[:, :, 0])
        real_right = z @ x.transpose(1, 2)[:, :, :3].to(torch.complex64)
        return torch.view_as_real(zw), vandermonde.real, real_right.imag


def test_complex_matrix_products_run_on_the_device(fe):
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(2, 4, 6, generator=g), torch.randn(2, 4, 6, generator=g)
    module = MatrixProducts().eval()
    result = _no_fallback(module, (x, y))
    fe.matches(result.run(x, y), list(module(x, y)), atol=1e-4)


class S4DKernel(torch.nn.Module):
    """S4D (a diagonal state space): its convolution kernel from complex exponentials of the state matrix's
    eigenvalues (a complex Vandermonde product), applied to the input by FFT."""

    def __init__(self, h=4, n=8, length=16):
        super().__init__()
        torch.manual_seed(5)
        self.log_dt = torch.nn.Parameter(torch.rand(h) * -3.0)
        self.a_re = torch.nn.Parameter(torch.full((h, n // 2), -0.5))
        self.a_im = torch.nn.Parameter(math.pi * torch.arange(n // 2).float().repeat(h, 1))
        self.c = torch.nn.Parameter(torch.randn(h, n // 2, 2) * 0.5)
        self.length = length

    def forward(self, u):  # [b, h, length]
        a = torch.complex(-self.a_re.exp(), self.a_im)
        dta = a * self.log_dt.exp().unsqueeze(-1)
        c = torch.view_as_complex(self.c) * (torch.exp(dta) - 1.0) / a
        k = 2 * torch.einsum("hn,hnl->hl", c, torch.exp(dta.unsqueeze(-1) * torch.arange(self.length))).real
        n = 2 * self.length
        return torch.fft.irfft(torch.fft.rfft(u, n=n) * torch.fft.rfft(k, n=n), n=n)[..., :self.length]


def test_an_s4d_kernel_runs_on_the_device(fe):
    u = torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(6))
    module = S4DKernel().eval()
    result = _no_fallback(module, (u,))
    fe.matches(result.run(u), [module(u)], atol=1e-4)


class ComplexBetweenCpuStages(torch.nn.Module):
    """A complex value computed on the CPU before the device and read on the CPU after it (complex square roots,
    which the device does not compute): the device passes it on untouched."""

    def forward(self, x, y):  # [2, 8] each
        a = torch.view_as_complex(x.reshape(2, 4, 2)).sqrt()
        d = y * 3.0 + 1.0
        return torch.view_as_real(a.sqrt() * d[:, :4]).flatten(1)


def test_a_complex_value_passes_between_cpu_stages_through_the_device():
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(2, 8, generator=g), torch.randn(2, 8, generator=g)
    module = ComplexBetweenCpuStages().eval()
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32, golden_ignore_df_precision=True)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("between", module), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[(x, y)]).get(timeout=300)[0].value()
    assert device.cpu_fallback_device_pre is not None and device.cpu_fallback_device_post is not None
    assert torch.allclose(got, module(x, y), atol=1e-5)
