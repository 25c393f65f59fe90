"""``golden_tf32_operands``: the golden device reads Float32 operands as the chip's 19-bit source registers hold
them (TF32: the low 13 mantissa bits dropped), Dest and Float32 outputs keeping all 24 bits; off by default."""

import pytest
import torch

import pybuda
from pybuda.golden.executor import golden_numerics
from pybuda.golden.formats import quantize_tf32
from tests.frontend.nan_inf_helpers import run_on_device


class AddAndExp(torch.nn.Module):
    def forward(self, x, y):
        return x + y, torch.relu(x)


def _inputs():
    gen = torch.Generator().manual_seed(0)
    # Mantissas with bits below TF32's 10 fraction bits, which truncation drops.
    return 1.0 + torch.rand(2, 64, generator=gen), torch.rand(2, 64, generator=gen) * 1e-3


@pytest.mark.parametrize("tf32", [False, True], ids=["whole", "tf32"])
def test_float32_operands_are_read_as_tf32_only_when_asked(tf32):
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32, golden_tf32_operands=tf32)
    x, y = _inputs()
    total, relu = run_on_device(pybuda.PyTorchModule("m", AddAndExp()), (x, y), "wh")
    if tf32:
        # Each operand truncated, the sum exact in Dest (Float32) and in the Float32 output queue.
        assert torch.equal(total, quantize_tf32(x) + quantize_tf32(y))
        assert torch.equal(relu, quantize_tf32(x))
        assert not torch.equal(total, x + y)
    else:
        assert torch.equal(total, x + y) and torch.equal(relu, x)


def test_the_switch_comes_from_the_environment_and_from_an_image_config(monkeypatch):
    monkeypatch.setenv("PYBUDA_GOLDEN_TF32_OPERANDS", "1")
    assert pybuda.CompilerConfig().golden_tf32_operands is True
    monkeypatch.delenv("PYBUDA_GOLDEN_TF32_OPERANDS")
    assert pybuda.CompilerConfig().golden_tf32_operands is False
    assert golden_numerics({"golden_tf32_operands": True}) == {"fast": False, "tf32_operands": True}
    assert golden_numerics(pybuda.CompilerConfig(golden_ignore_df_precision=True)) == \
        {"fast": True, "tf32_operands": False}
