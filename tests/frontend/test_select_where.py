"""``where`` is a real select on the device: a NaN or ±inf in the branch it does not pick never reaches the
result (the arithmetic c*x + (1-c)*y would give 0*inf = NaN), at Float32 and in chip numerics."""

import pytest
import torch

import pybuda
from pybuda.verify import calculate_pcc


class Where(torch.nn.Module):
    def forward(self, c, x, y):
        return torch.where(c, x * 2.0, y + 1.0)


class SoftmaxThenWhere(torch.nn.Module):
    """A fully masked row (an additive -inf input) makes softmax NaN (0/0) in the branch that where then drops, as ONNX attention does."""

    def forward(self, scores, mask, bias):
        probs = (scores + bias).softmax(-1)
        return torch.where(mask.any(-1, keepdim=True), probs, torch.zeros_like(probs))


def _poisoned(seed=0):
    g = torch.Generator().manual_seed(seed)
    c = torch.rand(1, 64, 64, generator=g) > 0.5
    x, y = torch.randn(1, 64, 64, generator=g), torch.randn(1, 64, 64, generator=g)
    x[~c] = torch.tensor([float("nan"), float("inf"), -float("inf")]).repeat(int((~c).sum()) // 3 + 1)[: int((~c).sum())]
    y[c] = torch.tensor([float("inf"), float("nan"), -float("inf")]).repeat(int(c.sum()) // 3 + 1)[: int(c.sum())]
    return c, x, y


def _run(model, inputs):
    tt = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", model), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[inputs]).get()[0].value()
    assert tt.cpu_fallback_device_pre is None and tt.cpu_fallback_device_post is None  # all on the device
    return got


@pytest.mark.parametrize("df, fast, atol", [(pybuda.DataFormat.Float32, True, 1e-6),
                                            (pybuda.DataFormat.Float32, False, 1e-5),
                                            (pybuda.DataFormat.Float16_b, False, 5e-2)],
                         ids=["float32", "float32_chip", "float16_b_chip"])
def test_where_ignores_nan_and_inf_in_the_branch_not_picked(df, fast, atol):
    pybuda.set_configuration_options(default_df_override=df, golden_ignore_df_precision=fast)
    inputs = _poisoned()
    expected = Where()(*inputs)
    assert torch.isfinite(expected).all()
    got = _run(Where().eval(), inputs)
    assert torch.isfinite(got).all()
    assert calculate_pcc(got, expected) >= 0.99
    assert torch.allclose(got, expected, atol=atol, rtol=1e-2)


def test_where_drops_a_nan_made_on_the_device():
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32)
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(1, 4, 8, 32, generator=g)
    mask = torch.rand(1, 4, 8, 32, generator=g) > 0.4
    mask[:, :, 2] = False  # a fully masked row: softmax gives NaN there
    bias = torch.zeros_like(scores).masked_fill(~mask, float("-inf"))  # an input: -inf reaches the device
    expected = SoftmaxThenWhere()(scores, mask, bias)
    assert torch.isfinite(expected).all()
    got = _run(SoftmaxThenWhere().eval(), (scores, mask, bias))
    assert torch.isfinite(got).all() and torch.all(got[:, :, 2] == 0)
    assert calculate_pcc(got, expected) >= 0.99
    assert torch.allclose(got, expected, atol=1e-3)
