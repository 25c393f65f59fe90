"""Softmax over rows masked with -inf on the golden device, compared with torch: NaN exactly where torch gives NaN (a
row masked entirely), exact zeros at the masked places of other rows, and the right probabilities elsewhere.

An infinite ``masked_fill``/``where`` fill used to become a finite stand-in on the device, so a row masked entirely
came back as 1/N with no error."""

import pytest
import torch
import torch.nn.functional as F

import pybuda
from tests.frontend.nan_inf_helpers import configure, run_on_device

FORMATS = {"float32": pybuda.DataFormat.Float32, "default": None, "bfp8_b": pybuda.DataFormat.Bfp8_b,
           "float16": pybuda.DataFormat.Float16}
#: Float32 storage with HiFi products, Float16_b at the default formats: probabilities to ~1e-2; Bfp8_b keeps the
#: mask's values in Float16_b (pybuda.passes.graph.mask_fills) and the rest in 7-bit blocks.
ATOL = {"float32": 2e-2, "default": 5e-2, "bfp8_b": 1e-1, "float16": 5e-2}


def _matches(got: torch.Tensor, want: torch.Tensor, atol: float, zeros_exact: bool = True) -> None:
    """NaN and infinities where torch has them, exact zeros at masked places, the rest within ``atol``.
    ``zeros_exact`` False (a block format): a probability below 2**-7 of its block's largest flushes to zero too, so
    only torch's zeros must be zeros."""
    assert got.shape == want.shape
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), f"NaN at {int(torch.isnan(got).sum())} places, torch {int(nan.sum())}"
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    if zeros_exact:
        assert torch.equal(got[~nan] == 0, want[~nan] == 0)  # masked places: exactly 0
    else:
        assert bool((got[~nan][want[~nan] == 0] == 0).all())
    assert torch.allclose(got[~nan], want[~nan], atol=atol, rtol=atol)


class MaskedFillSoftmax(torch.nn.Module):
    """masked_fill(-inf), scaled after the mask (-inf * 0.5 is -inf), then softmax and log_softmax."""

    def forward(self, x, m):
        s = x.masked_fill(m, float("-inf")) * 0.5
        return s.softmax(-1), torch.log_softmax(s, -1)


class SdpaBoolMask(torch.nn.Module):
    def forward(self, q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


class CausalSoftmax(torch.nn.Module):
    """A causal mask built in the model (triu of -inf, a constant) added to the scores."""

    def __init__(self, seq):
        super().__init__()
        self.register_buffer("causal", torch.full((seq, seq), float("-inf")).triu(1))

    def forward(self, q, k):
        return (q @ k.transpose(-1, -2) + self.causal).softmax(-1), F.scaled_dot_product_attention(q, k, k,
                                                                                                   is_causal=True)


class PaddedMha(torch.nn.Module):
    def __init__(self, need_weights: bool):
        super().__init__()
        torch.manual_seed(0)
        self.mha = torch.nn.MultiheadAttention(32, 2, batch_first=True)
        self.need_weights = need_weights

    def forward(self, x, key_padding_mask):
        out, weights = self.mha(x, x, x, key_padding_mask=key_padding_mask, need_weights=self.need_weights)
        return (out, weights) if self.need_weights else out


class Softmax(torch.nn.Module):
    def forward(self, x):
        return x.softmax(-1)


def _data(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", list(FORMATS))
def test_masked_fill_then_softmax_is_nan_on_rows_masked_entirely(arch, df):
    configure(FORMATS[df])
    g = _data()
    x = torch.randn(2, 8, 32, generator=g)
    m = torch.rand(2, 8, 32, generator=g) > 0.6
    m[0, 3], m[1, 5] = True, True
    want = MaskedFillSoftmax()(x, m)
    got = run_on_device(pybuda.PyTorchModule("masked_fill", MaskedFillSoftmax().eval()), (x, m), arch)
    assert int(torch.isnan(want[0]).sum()) == 64  # two rows of 32
    for gv, wv in zip(got, want):
        _matches(gv, wv, ATOL[df], df != "bfp8_b")  # log_softmax: -inf at the masked places of the other rows


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", list(FORMATS))
def test_sdpa_with_a_boolean_mask_masking_a_row_entirely(arch, df):
    configure(FORMATS[df])
    g = _data(1)
    q, k, v = (torch.randn(1, 2, 8, 32, generator=g) for _ in range(3))
    m = torch.ones(1, 1, 8, 8, dtype=torch.bool).tril()
    m[0, 0, 2] = False  # torch's SDPA gives 0 on a row masked entirely (its safe softmax)
    want = SdpaBoolMask()(q, k, v, m)
    got = run_on_device(pybuda.PyTorchModule("sdpa", SdpaBoolMask().eval()), (q, k, v, m), arch)[0]
    assert bool((want[0, :, 2] == 0).all())
    _matches(got, want, ATOL[df], df != "bfp8_b")


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", list(FORMATS))
def test_causal_masks(arch, df):
    configure(FORMATS[df])
    g = _data(1)
    q, k = (torch.randn(1, 2, 8, 32, generator=g) for _ in range(2))
    want = CausalSoftmax(8)(q, k)
    got = run_on_device(pybuda.PyTorchModule("causal", CausalSoftmax(8).eval()), (q, k), arch)
    for gv, wv in zip(got, want):
        _matches(gv, wv, ATOL[df], df != "bfp8_b")


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", list(FORMATS))
@pytest.mark.parametrize("need_weights", [True, False], ids=["weights", "no_weights"])
def test_multihead_attention_with_a_sample_padded_entirely(arch, df, need_weights):
    configure(FORMATS[df])
    g = _data(2)
    x = torch.randn(2, 8, 32, generator=g)
    kpm = torch.zeros(2, 8, dtype=torch.bool)
    kpm[0, 6:] = True  # partly padded: exact zeros in the weights, the rest right
    kpm[1] = True  # padded entirely
    module = PaddedMha(need_weights).eval()
    # Grad mode keeps torch off its inference fast path (a fused kernel: NaN for the padded sample even without
    # weights), so torch runs the program the capture exports: with need_weights=False that is SDPA, whose safe
    # softmax gives 0 there.
    want = module(x, kpm)
    want = [t.detach() for t in (want if need_weights else (want,))]
    got = run_on_device(pybuda.PyTorchModule("mha", module), (x, kpm), arch)
    assert bool(torch.isnan(want[0][1]).all()) == need_weights
    for gv, wv in zip(got, want):
        _matches(gv, wv, ATOL[df], df != "bfp8_b")


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", list(FORMATS))
def test_minus_infinity_pushed_into_softmax(arch, df):
    configure(FORMATS[df])
    x = torch.randn(2, 8, 32, generator=_data(3))
    x[0, 2] = float("-inf")
    x[1, 4, :5] = float("-inf")
    got = run_on_device(pybuda.PyTorchModule("softmax", Softmax().eval()), (x,), arch)[0]
    _matches(got, Softmax()(x), ATOL[df])


class FiniteCausalScores(torch.nn.Module):
    """``baddbmm`` of a finite causal mask (-1e4 above the diagonal) and the scores, then softmax."""

    def forward(self, q, k):
        return torch.baddbmm(torch.ones(5, 5).triu(1) * -1e4, q, k.transpose(1, 2)).softmax(-1)


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", list(FORMATS))
def test_masked_scores_of_a_width_off_the_tile(arch, df):
    """Scores 5 wide: the softmax's ``exp`` first zeroes their tile padding with a multiply, which copies the mask's
    fill. The copy took the ``exp``'s Bfp8_b and flushed the scores beside the fill (rows with a masked place came
    back uniform: error 0.43 at Bfp8_b)."""
    configure(FORMATS[df])
    g = _data(4)
    q, k = (torch.randn(2, 5, 4, generator=g) for _ in range(2))
    want = FiniteCausalScores()(q, k)
    got = run_on_device(pybuda.PyTorchModule("finite_causal", FiniteCausalScores().eval()), (q, k), arch)[0]
    _matches(got, want, ATOL[df], df != "bfp8_b")
