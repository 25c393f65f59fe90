"""PyTorch idioms found wrong or crashing by tools/torch_idiom_sweep.py, run on the golden device and
compared with torch: each case runs on the device (or with a CPU stage) and matches, or fails with a
PybudaError -- never a wrong number."""

import torch

import pybuda
from pybuda.verify import calculate_pcc

#: Float32 storage with the chip's HiFi4 products (TF32-like operands): ~1e-3 relative a few ops deep.
ATOL, PCC = 2e-2, 0.999


def _run(module, *inputs, arch=pybuda.BackendDevice.Wormhole_B0):
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                     default_math_fidelity=pybuda.MathFidelity.HiFi4)
    tt = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", module.eval()), arch=arch)
    out = [t.value() for t in pybuda.run_inference(inputs=[inputs]).get()]
    return out, tt


def _close(got, want, atol=ATOL):
    assert got.shape == want.shape
    assert torch.equal(torch.isinf(got), torch.isinf(want)) and not torch.isnan(got).any()
    fin = torch.isfinite(want)
    assert torch.allclose(got[fin], want[fin], atol=atol, rtol=atol)


class FullBiasMatmuls(torch.nn.Module):
    """A matrix as addmm's and baddbmm's input (an attention mask with -inf, as nn.MultiheadAttention
    computes its weights): every row of the output gets its own row of the bias."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.zeros(5, 5).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1),
                                                                     float("-inf")))
        self.register_buffer("c", torch.arange(15.0).reshape(5, 3) / 4)

    def forward(self, q, k, a, w):
        scores = torch.baddbmm(self.mask, q, k.transpose(-1, -2))
        return scores, scores.softmax(-1), torch.addmm(self.c, a[0], w[0], beta=0.5)


def test_matmul_bias_varying_along_rows_is_added_to_each_row():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    a, w = torch.randn(2, 5, 7, generator=g), torch.randn(2, 7, 3, generator=g)
    m = FullBiasMatmuls()
    want = m(q, k, a, w)
    got, tt = _run(m, q, k, a, w)
    for gv, wv in zip(got, want):
        _close(gv, wv)
