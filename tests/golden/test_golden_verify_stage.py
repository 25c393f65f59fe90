"""BACKEND_GOLDEN_VERIFY: the compiled netlist runs on the golden backend and is checked against the model."""

import pytest
import torch

import pybuda
import pybuda.op
from pybuda import PyBudaModule
from pybuda.config import CompilerConfig
from pybuda.errors import CompileError
from pybuda.compile import pybuda_compile
from pybuda.dtypes import DataFormat, MathFidelity
from pybuda.verify import VerifyConfig


class TwoMatmuls(PyBudaModule):
    def __init__(self, name):
        super().__init__(name)
        g = torch.Generator().manual_seed(0)
        self.w1 = pybuda.Parameter(torch.randn(1, 1, 64, 64, generator=g), requires_grad=False)
        self.w2 = pybuda.Parameter(torch.randn(1, 1, 64, 32, generator=g), requires_grad=False)

    def forward(self, act):
        return pybuda.op.Matmul(self, "mm2", pybuda.op.Matmul(self, "mm1", act, self.w1), self.w2)


def _compile(df, fidelity, verify_cfg):
    cfg = CompilerConfig(default_df_override=df, default_math_fidelity=fidelity, device_config="wh_n150")
    act = torch.randn(1, 1, 64, 64, generator=torch.Generator().manual_seed(1))
    return pybuda_compile(TwoMatmuls("two_mm"), "two_mm", act, compiler_cfg=cfg, verify_cfg=verify_cfg)


@pytest.fixture(autouse=True)
def _build_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("PYBUDA_BUILD_DIR", str(tmp_path))
    monkeypatch.delenv("PYBUDA_GOLDEN_FAST", raising=False)


@pytest.mark.parametrize("ignore_df", [True, False], ids=["float32", "chip-numerics"])
def test_golden_verify_passes_at_float16_b(ignore_df):
    vcfg = VerifyConfig(run_golden=True, golden_ignore_df_precision=ignore_df, pcc=0.99)
    results = _compile(DataFormat.Float16_b, MathFidelity.HiFi3, vcfg)
    outs = results.notes["backend_golden_outputs"]
    assert len(outs) == 1 and outs[0].shape == results.golden_outputs[0].shape
    exact = torch.equal(outs[0], results.golden_outputs[0])
    assert not exact if not ignore_df else torch.allclose(outs[0], results.golden_outputs[0], atol=1e-3)


def test_golden_verify_is_off_unless_asked():
    results = _compile(DataFormat.Float16_b, MathFidelity.HiFi3, VerifyConfig())
    assert "backend_golden_outputs" not in results.notes


def test_golden_verify_fails_with_a_clear_error_on_mismatch():
    # Bfp2_b keeps one magnitude bit per datum: an exact match (PCC 1.0, atol 0) is impossible.
    vcfg = VerifyConfig(run_golden=True, golden_ignore_df_precision=False, pcc=1.0, relative_atol=0.0)
    with pytest.raises(CompileError) as info:
        _compile(DataFormat.Bfp2_b, MathFidelity.LoFi, vcfg)
    err = info.value
    assert err.stage == "BACKEND_GOLDEN_VERIFY"
    msg = str(err)
    assert "output 0" in msg and "PCC 0." in msg and "required 1.0" in msg


def test_golden_ignore_df_precision_runs_float32_so_bfp2_passes():
    vcfg = VerifyConfig(run_golden=True, golden_ignore_df_precision=True, pcc=0.999)
    _compile(DataFormat.Bfp2_b, MathFidelity.LoFi, vcfg)


def test_env_vars_set_the_verify_defaults(monkeypatch):
    assert VerifyConfig().run_golden is False and VerifyConfig().golden_ignore_df_precision is True
    monkeypatch.setenv("PYBUDA_VERIFY_GOLDEN", "1")
    monkeypatch.setenv("TT_BACKEND_GOLDEN_QUANTIZE", "1")
    cfg = VerifyConfig()
    assert cfg.run_golden is True and cfg.golden_ignore_df_precision is False
    assert VerifyConfig.disabled().run_golden is False
