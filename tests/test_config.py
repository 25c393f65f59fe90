"""CompilerConfig and the override APIs."""

import pytest

import pybuda
from pybuda.config import CompileDepth, _get_global_compiler_config
from pybuda.errors import ConfigError


def test_set_configuration_options_maps_reference_keywords():
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Bfp8_b, accumulate_df="Float16_b",
                                     math_fidelity=pybuda.MathFidelity.LoFi, balancer_policy="Ribbon",
                                     harvested_rows=[2, 5], device_config="wh_n150", place_on_one_row=True)
    cfg = _get_global_compiler_config()
    assert cfg.default_df_override == pybuda.DataFormat.Bfp8_b
    assert cfg.default_accumulate_df == pybuda.DataFormat.Float16_b
    assert cfg.default_math_fidelity == pybuda.MathFidelity.LoFi
    assert cfg.balancer_policy == "Ribbon" and cfg.harvested_rows == [2, 5]
    # NoC rows 5 and 2 are Grayskull's logical harvest indices 0 and 6.
    assert cfg.resolved_harvesting_mask("grayskull") == (1 << 0) | (1 << 6)
    with pytest.raises(ConfigError, match="cannot be harvested"):
        pybuda.set_configuration_options(harvested_rows=[6])
        _get_global_compiler_config().resolved_harvesting_mask("grayskull")
    assert cfg.device_config == "wh_n150"


def test_unknown_options_are_rejected():
    # tt-buda#68: users passed documented-but-nonexistent options and got a confusing failure.
    with pytest.raises(ConfigError, match="compute_precision"):
        pybuda.set_configuration_options(compute_precision="fp16")
    with pytest.raises(ConfigError, match="balancer_policy"):
        pybuda.set_configuration_options(balancer_policy="Fastest")
    with pytest.raises(ConfigError, match="device_config"):
        pybuda.set_configuration_options(device_config="gs_e999")


def test_overrides_edit_the_global_config():
    pybuda.override_op_size("mm", (2, 4))
    pybuda.set_epoch_break("softmax_3")
    pybuda.set_chip_break(["a", "b"])
    pybuda.config.override_u_kt("mm", 4)
    pybuda.configure_mixed_precision(op_type="add", output_df=pybuda.DataFormat.Float16_b)
    cfg = _get_global_compiler_config()
    assert cfg.balancer_op_overrides["mm"].grid_shape == (2, 4) and cfg.balancer_op_overrides["mm"].u_kt == 4
    assert cfg.op_names_to_epoch_break == ["softmax_3"] and cfg.op_names_to_chip_break == ["a", "b"]
    assert cfg.amp_properties[0].matches("add_1", "add") and not cfg.amp_properties[0].matches("m", "multiply")
    with pytest.raises(ConfigError):
        pybuda.override_op_size("mm", (0, 4))
    with pytest.raises(ConfigError):
        pybuda.configure_mixed_precision(name_regex="(unclosed")


def test_compile_depth_from_env(monkeypatch):
    monkeypatch.setenv("PYBUDA_COMPILE_DEPTH", "balancer_pass")
    assert pybuda.CompilerConfig().compile_depth == CompileDepth.BALANCER_PASS
    monkeypatch.setenv("PYBUDA_COMPILE_DEPTH", "bogus")
    with pytest.raises(ConfigError):
        pybuda.CompilerConfig()


def test_snapshot_is_independent_and_serialisable():
    cfg = _get_global_compiler_config()
    snap = cfg.snapshot()
    cfg.op_names_to_epoch_break.append("x")
    assert snap.op_names_to_epoch_break == []
    d = snap.to_dict()
    assert d["default_math_fidelity"] == "HiFi3" and d["compile_depth"] == "FULL"


def test_harvested_rows_reach_the_compiled_device():
    from pybuda.passes.pipeline import resolve_device

    pybuda.set_configuration_options(device_config="gs_e150")
    assert resolve_device(None, _get_global_compiler_config()).grid_size == (10, 12)
    pybuda.set_configuration_options(harvested_rows=[2, 5])
    device = resolve_device(None, _get_global_compiler_config())
    assert device.grid_size == (8, 12) and set(device.harvested_noc_rows) == {2, 5}
