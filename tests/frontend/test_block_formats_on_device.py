"""Values beside each other in a block format (Bfp8_b: 16 datums of a tile row share the largest one's exponent,
and a datum 2**7 times smaller flushes to zero), on the golden device, compared with torch.

* The ones a reciprocal's operand gets in its column padding (no pole there) shared a block with the row's last
  real values; a real value 2**7 times smaller than 1 flushed to zero beside them, and its reciprocal was inf.
* ELU/SELU/CELU took the exponential of every element, positive ones too (the branch its ``where`` drops), which
  flushed the kept negative elements of their blocks.
"""

import pytest
import torch
import torch.nn.functional as F

import pybuda
from tests.frontend.nan_inf_helpers import configure, run_on_device


class NormalizeWithZeroRows(torch.nn.Module):
    """``F.normalize`` of rows of which every other one is zero: ``0 / max(0, 1e-12)`` is 0 in torch."""

    def forward(self, x):
        return F.normalize(x * (torch.arange(5)[:, None] % 2), dim=-1)


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", [None, pybuda.DataFormat.Bfp8_b], ids=["default", "bfp8_b"])
def test_normalize_of_zero_rows_is_zero(arch, df):
    configure(df)
    x = torch.randn(5, 37, generator=torch.Generator().manual_seed(0))
    want = NormalizeWithZeroRows()(x)
    got = run_on_device(pybuda.PyTorchModule("normalize", NormalizeWithZeroRows().eval()), (x,), arch)[0]
    assert not bool(torch.isnan(got).any()), f"NaN at {int(torch.isnan(got).sum())} places"
    assert bool((got[0::2] == 0).all())
    assert torch.allclose(got, want, atol=5e-2)


class EluFamily(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.selu(x * 3), torch.nn.functional.elu(x * 3, 0.5), torch.nn.functional.celu(x * 3, 0.7)


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", [None, pybuda.DataFormat.Bfp8_b], ids=["default", "bfp8_b"])
def test_elu_and_selu_keep_their_negative_branch(arch, df):
    configure(df)
    x = torch.randn(5, 37, generator=torch.Generator().manual_seed(1))
    want = EluFamily()(x)
    got = run_on_device(pybuda.PyTorchModule("selu", EluFamily().eval()), (x,), arch)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, atol=0.1, rtol=0.05), float((g - w).abs().max())
