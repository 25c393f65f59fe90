"""Boolean masks run on the device as float 0/1: comparisons, logical ops, where/masked_fill and SDPA masks,
with -inf fills, match torch and leave nothing on the host."""

import pytest
import torch
import torch.nn.functional as F

import pybuda
from pybuda.frontend.torch import capture
from pybuda.verify import calculate_pcc


class SdpaBoolMask(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])


class MaskedFillInf(torch.nn.Module):
    def forward(self, q, k, v, mask):
        scores = (q @ k.transpose(-1, -2)).masked_fill(~mask[:, None, None, :], float("-inf"))
        return scores.softmax(-1) @ v


class MaskLogic(torch.nn.Module):
    def forward(self, x, mask):
        keep = (x > 0.2) & mask[:, None, :] | (x < -1.0)
        return torch.where(~keep, x * 2.0, torch.zeros_like(x)), keep


def _inputs(seq=32, keep=15):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, seq, 32, generator=g) for _ in range(3))
    mask = torch.ones(1, seq, dtype=torch.bool)
    mask[:, keep:] = False
    return q, k, v, mask


@pytest.mark.parametrize("model", [SdpaBoolMask, MaskedFillInf], ids=["sdpa_bool_mask", "masked_fill_inf"])
@pytest.mark.parametrize("fast", [True, False], ids=["float32", "chip_numerics"])
def test_attention_masks_match_torch_on_the_device(model, fast):
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32, golden_ignore_df_precision=fast)
    m = model().eval()
    inputs = _inputs()
    expected = m(*inputs)
    tt = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", m), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[inputs]).get()[0].value()
    assert tt.cpu_fallback_device_pre is None and tt.cpu_fallback_device_post is None  # all on the device
    assert calculate_pcc(got, expected) >= 0.999
    assert torch.allclose(got, expected, atol=1e-5 if fast else 2e-2)


def test_logical_ops_and_boolean_outputs():
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32, golden_ignore_df_precision=True)
    m = MaskLogic().eval()
    x = torch.randn(1, 6, 40, generator=torch.Generator().manual_seed(1))
    mask = torch.rand(1, 40, generator=torch.Generator().manual_seed(2)) > 0.3
    want_y, want_keep = m(x, mask)
    tt = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", m), arch=pybuda.BackendDevice.Wormhole_B0)
    y, keep = (t.value() for t in pybuda.run_inference(inputs=[(x, mask)]).get())
    assert tt.cpu_fallback_device_pre is None and tt.cpu_fallback_device_post is None
    assert keep.dtype == torch.bool and torch.equal(keep, want_keep)  # the host turns 0/1 back into bools
    assert torch.allclose(y, want_y, atol=1e-6)


class SdpaFloatMaskInput(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class SdpaFloatMaskBuffer(torch.nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.register_buffer("mask", mask)

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)


def _float_mask(seq=8):
    """An additive mask with masked columns, one row entirely -inf (torch: 0) and one entirely finfo.min
    (torch: the plain average of the values, as Hugging Face's finite masks give)."""
    mask = torch.zeros(seq, seq)
    mask[:, 5:] = float("-inf")
    mask[3, :] = float("-inf")
    mask[6, :] = torch.finfo(torch.float32).min
    return mask


@pytest.mark.parametrize("as_input", [True, False], ids=["mask_input", "mask_buffer"])
def test_additive_float_masks_with_fully_masked_rows_match_torch(as_input):
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32)
    q, k, v = _inputs(seq=8)[:3]
    mask = _float_mask()
    m = (SdpaFloatMaskInput() if as_input else SdpaFloatMaskBuffer(mask)).eval()
    inputs = (q, k, v, mask[None, None]) if as_input else (q, k, v)
    expected = m(*inputs)
    assert torch.isfinite(expected).all() and torch.all(expected[:, :, 3] == 0)
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", m), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[inputs]).get()[0].value()
    assert torch.isfinite(got).all()
    assert calculate_pcc(got, expected) >= 0.999
    assert torch.allclose(got, expected, atol=2e-2)  # Float32 storage, HiFi products (as above)


class FinfoMinMasks(torch.nn.Module):
    """GPT-Neo's attention: a causal where() with finfo.min, then an additive finfo.min mask, so masked scores
    are -inf (finfo.min twice) before the softmax."""

    def __init__(self, seq=16):
        super().__init__()
        self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x):
        scores = x @ x.transpose(-1, -2)
        low = torch.finfo(scores.dtype).min
        scores = torch.where(self.causal, scores, torch.tensor(low, dtype=scores.dtype))
        scores = scores + torch.where(self.causal, 0.0, low)
        return torch.softmax(scores, dim=-1) @ x


def test_minus_infinity_scores_soften_to_zero_with_the_chips_fidelity():
    # The default formats and HiFi3: the softmax's (x - max) * mask multiply splits -inf into fidelity pieces,
    # whose arithmetic made NaN (inf - inf) everywhere; the product is -inf, as in torch.
    m = FinfoMinMasks().eval()
    x = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = m(x)
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", m), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[(x,)]).get()[0].value()
    assert not torch.isnan(got).any()
    assert calculate_pcc(got, expected) >= 0.99
    assert torch.allclose(got, expected, atol=5e-2, rtol=5e-2)


class FilledByConstant(torch.nn.Module):
    """``where(mask, scores, fill)`` with a full-size ``finfo.min`` constant, as JAX/Flax and Keras build padding
    masks, then softmax, over rows of 24 (not a whole tile)."""

    def __init__(self, seq=24):
        super().__init__()
        self.register_buffer("fill", torch.full((1, 4, seq, seq), torch.finfo(torch.float32).min))

    def forward(self, scores, keep):
        return torch.where(keep, scores, self.fill).softmax(-1)


@pytest.mark.parametrize("arch", [pybuda.BackendDevice.Grayskull, pybuda.BackendDevice.Wormhole_B0])
def test_rows_masked_by_a_lowest_float_constant_are_uniform_not_nan(arch):
    # The reduce max's tile-padding mask (-1e30) was above finfo.min, so a fully masked row took its max from the
    # padding: every exp was 0, the sum 0, and the row NaN (384 NaN with no error). Torch: 1/24 in each.
    seq = 24
    scores = torch.randn(1, 4, seq, seq, generator=torch.Generator().manual_seed(0))
    valid = torch.arange(seq) < 20
    keep = (valid[:, None] & valid[None, :]).expand(1, 4, seq, seq).clone()
    m = FilledByConstant(seq).eval()
    expected = m(scores, keep)
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", m), arch=arch)
    got = pybuda.run_inference(inputs=[(scores, keep)]).get()[0].value()
    assert torch.isfinite(got).all()
    assert torch.allclose(got[..., 20:, :], expected[..., 20:, :], atol=1e-3)  # the uniform rows
    assert calculate_pcc(got, expected) >= 0.99


class MovedIntegerMask(torch.nn.Module):
    """ESM / DeBERTa / LUKE: an int64 attention mask moved to [batch, seq, 1] (a picker matmul on the device)
    and multiplied into the embeddings; the moved ids come back exact."""

    def forward(self, ids, h):
        m = ids.unsqueeze(-1)
        return m.transpose(0, 1), h * m.to(h.dtype)


@pytest.mark.parametrize("exact", [True, False], ids=["exact_moves", "truncating_pickers"])
def test_moved_integer_data_runs_on_the_device_when_pickers_copy_exactly(exact):
    ids = torch.randint(-2 ** 20, 2 ** 20, (1, 40), generator=torch.Generator().manual_seed(0))
    h = torch.randn(1, 40, 8)
    module = MovedIntegerMask().eval()
    pybuda.set_configuration_options(exact_data_movement=exact)
    result = capture(module, (ids, h), for_device=True)
    assert result.report.has_fallback != exact, str(result.report)
    if not exact:
        return
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", module), arch=pybuda.BackendDevice.Wormhole_B0)
    got = [t.value() for t in pybuda.run_inference(inputs=[(ids, h)]).get(timeout=300)]
    assert device.cpu_fallback_device_pre is None and device.cpu_fallback_device_post is None
    want = module(ids, h)
    assert got[0].dtype == torch.int64 and torch.equal(got[0], want[0])  # every id exact, to 2**20
    assert calculate_pcc(got[1], want[1]) >= 0.99
