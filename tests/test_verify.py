"""PCC and tolerance rules (reference §6), including the NaN fix."""

import math

import pytest
import torch

from pybuda.verify import VerifyConfig, calculate_pcc, compare_tensor_to_golden


def test_pcc_edge_cases():
    a = torch.randn(100)
    assert calculate_pcc(a, a) == 1.0
    nan = torch.full((10,), math.nan)
    assert calculate_pcc(nan, nan) == 1.0
    assert calculate_pcc(nan, torch.randn(10)) == 0.0
    assert calculate_pcc(torch.zeros(10), torch.randn(10)) == 0.0
    assert calculate_pcc(a, -a) == pytest.approx(-1.0)


def test_scattered_nans_cannot_pass():
    golden = torch.randn(1000)
    calc = golden.clone()
    calc[::97] = math.nan  # TT-Buda masked these to 0 and the PCC stayed ~0.99
    assert calculate_pcc(golden, calc) == 0.0
    assert not compare_tensor_to_golden("t", golden, calc)


def test_allclose_or_pcc_passes():
    golden = torch.randn(64, 64)
    noisy = golden + 0.01 * torch.randn(64, 64)
    assert compare_tensor_to_golden("noisy", golden, noisy)
    scaled = golden * 3  # PCC 1 but far from allclose
    assert compare_tensor_to_golden("scaled", golden, scaled)
    assert not compare_tensor_to_golden("random", golden, torch.randn(64, 64))


def test_shape_mismatch_fails_and_leading_ones_are_squeezed():
    golden = torch.randn(4, 4)
    assert compare_tensor_to_golden("sq", golden, golden.unsqueeze(0).unsqueeze(0))
    assert not compare_tensor_to_golden("shape", golden, torch.randn(4, 5))


def test_named_tolerances_and_required_pcc():
    golden = torch.randn(256)
    calc = golden + 0.3 * torch.randn(256)
    assert not compare_tensor_to_golden("strict", golden, calc, pcc=0.999, relative_atol=0.0)
    assert compare_tensor_to_golden("loose", golden, calc, atol=2.0)
    cfg = VerifyConfig(pcc=0.5)
    assert compare_tensor_to_golden("cfg", golden, calc, verify_cfg=cfg)
    assert VerifyConfig().pcc == 0.99 and not VerifyConfig.disabled().enabled
