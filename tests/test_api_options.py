"""Issue #17: every option of the API reference takes effect, raises ConfigError naming it, or (where TT-Buda
itself ignored it on the golden backend) is logged once. One test per option."""

import argparse
import logging
import os

import pytest

import pybuda
from pybuda import config as C
from pybuda import option_rules
from pybuda.cli import benchmark
from pybuda.config import CompilerConfig, OPTION_RULES, PerfTraceLevel
from pybuda.errors import ConfigError
from pybuda.verify import NO_EFFECT_FIELDS, VerifyConfig


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    C._clear_global_compiler_config()
    monkeypatch.setattr(option_rules, "_logged_once", set())
    for var in ("PYBUDA_AMP_LIGHT", "PYBUDA_N300_DATA_PARALLEL", "PYBUDA_EMULATE_SILICON_DEVICE",
                "GOLDEN_WORMHOLE_B0", "PYBUDA_GOLDEN_BLACKHOLE"):
        monkeypatch.delenv(var, raising=False)
    yield
    C._clear_global_compiler_config()


def _logs_once(caplog, option, **kw):
    with caplog.at_level(logging.WARNING, logger="pybuda.config"):
        pybuda.set_configuration_options(**kw)
        pybuda.set_configuration_options(**kw)
    hits = [r for r in caplog.records if f"'{option}'" in r.getMessage()]
    assert len(hits) == 1, [r.getMessage() for r in caplog.records]


def test_every_rule_has_an_action_and_a_reason():
    for name, rule in OPTION_RULES.items():
        assert rule.action in ("effect", "error", "log") and rule.when in ("set", "compile") and rule.why, name


def test_performance_trace_logged_once(caplog):
    _logs_once(caplog, "performance_trace", performance_trace=PerfTraceLevel.LIGHT)
    assert C._get_global_compiler_config().performance_trace == PerfTraceLevel.LIGHT


def test_backend_opt_level_range_and_logged(caplog):
    with pytest.raises(ConfigError, match="backend_opt_level"):
        pybuda.set_configuration_options(backend_opt_level=7)
    _logs_once(caplog, "backend_opt_level", backend_opt_level=2)


def test_backend_device_descriptor_path_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="backend_device_descriptor_path"):
        pybuda.set_configuration_options(backend_device_descriptor_path=str(tmp_path / "nope.yaml"))
    from pybuda.arch import get_device_descriptor
    from pybuda.backend_build.descriptors import device_desc_yaml
    from pybuda.compile import _descriptor

    path = tmp_path / "device_desc.yaml"
    path.write_text(device_desc_yaml(get_device_descriptor(device_config="gs_e150")))
    cfg = CompilerConfig(backend_device_descriptor_path=str(path))
    assert _descriptor(cfg).arch == pybuda.BackendDevice.Grayskull


def test_backend_cluster_descriptor_path_read_and_checked(tmp_path):
    from pybuda.arch import get_device_descriptor
    from pybuda.backend_build.descriptors import cluster_desc_yaml

    with pytest.raises(ConfigError, match="backend_cluster_descriptor_path.*no such file"):
        CompilerConfig(backend_cluster_descriptor_path=str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("hello: 1\n")
    with pytest.raises(ConfigError, match="not a cluster descriptor"):
        CompilerConfig(backend_cluster_descriptor_path=str(bad))
    good = tmp_path / "cluster_desc.yaml"
    good.write_text(cluster_desc_yaml(get_device_descriptor(device_config="wh_n300")))
    assert CompilerConfig(backend_cluster_descriptor_path=str(good), num_chips=2).snapshot().num_chips == 2
    with pytest.raises(ConfigError, match="lists 2 chip"):
        CompilerConfig(backend_cluster_descriptor_path=str(good), num_chips=4).snapshot()


def test_store_backend_db_to_yaml_writes_the_runtime_params(tmp_path):
    import yaml

    with pytest.raises(ConfigError, match="backend_runtime_params_path"):
        CompilerConfig(store_backend_db_to_yaml=True).snapshot()
    path = tmp_path / "db" / "runtime_params.yaml"
    CompilerConfig(store_backend_db_to_yaml=True, backend_runtime_params_path=str(path),
                   device_config="wh_n150").snapshot()
    data = yaml.safe_load(path.read_text())
    assert data["device"] and data["compiler_config"]["device_config"] == "wh_n150"


def test_backend_runtime_params_path_without_store_logged_once(caplog, tmp_path):
    cfg = CompilerConfig(backend_runtime_params_path=str(tmp_path / "p.yaml"))
    with caplog.at_level(logging.WARNING, logger="pybuda.config"):
        cfg.snapshot()
        cfg.snapshot()
    assert sum("backend_runtime_params_path" in r.getMessage() for r in caplog.records) == 1


def test_backend_runtime_args_logged_once(caplog):
    _logs_once(caplog, "backend_runtime_args", backend_runtime_args="--some-arg")


def test_use_interactive_placer_false_turns_spatial_breaks_into_epoch_breaks():
    pybuda.config.override_op_placement("op1", spatial_epoch_break=True)
    pybuda.set_configuration_options(use_interactive_placer=False)
    ov = C._get_global_compiler_config().snapshot().placer_op_overrides["op1"]
    assert ov.temporal_epoch_break and not ov.spatial_epoch_break
    pybuda.set_configuration_options(use_interactive_placer=True)
    assert C._get_global_compiler_config().snapshot().placer_op_overrides["op1"].spatial_epoch_break


@pytest.mark.parametrize("option", ["manual_t_streaming", "enable_forked_dram_inputs"])
def test_unsupported_bool_options_raise_naming_them(option):
    with pytest.raises(ConfigError, match=option):
        pybuda.set_configuration_options(**{option: True})
    with pytest.raises(ConfigError, match=option):
        CompilerConfig(**{option: True})
    pybuda.set_configuration_options(**{option: False})  # the default is fine


def test_enable_device_tilize_logged_once(caplog):
    _logs_once(caplog, "enable_device_tilize", enable_device_tilize=True)


def test_place_on_one_row_logged_once(caplog):
    _logs_once(caplog, "place_on_one_row", place_on_one_row=True)


def test_env_n300_data_parallel_takes_effect(monkeypatch):
    from pybuda.option_rules import OPTION_RULES

    monkeypatch.setenv("PYBUDA_N300_DATA_PARALLEL", "1")
    CompilerConfig().snapshot()  # a compile accepts it; tests/runtime/test_data_parallel.py checks its effect
    assert OPTION_RULES["PYBUDA_N300_DATA_PARALLEL"].action == "effect"


def test_env_amp_light_enables_amp_light(monkeypatch):
    monkeypatch.setenv("PYBUDA_AMP_LIGHT", "2")
    cfg = CompilerConfig()
    assert len(cfg.amp_properties) == 1 and cfg.amp_properties[0].op_type == "matmul"
    assert cfg.amp_properties[0].input_df[1][0] == pybuda.DataFormat.Bfp4_b
    cfg.apply_env_config_overrides()
    assert len(cfg.amp_properties) == 1
    monkeypatch.setenv("PYBUDA_AMP_LIGHT", "9")
    with pytest.raises(ConfigError, match="PYBUDA_AMP_LIGHT"):
        CompilerConfig()


def test_device_config_tt_buda_names():
    for name in ("wh_n150", "wh_n300", "galaxy", "gs_e150", "WH_N150"):
        pybuda.set_configuration_options(device_config=name)
        assert C._get_global_compiler_config().device_config == name.lower()
    for name in ("gs_e300", "bh_test"):
        with pytest.raises(ConfigError, match=f"{name}.*accepted: .*wh_n150"):
            pybuda.set_configuration_options(device_config=name)
    with pytest.raises(ConfigError, match="unknown device_config"):
        CompilerConfig(device_config="wh_n999")


# --- pybuda benchmark flags -----------------------------------------------------------------------------------
def _parser():
    p = argparse.ArgumentParser(prog="pybuda benchmark")
    benchmark.add_arguments(p)
    return p


def test_benchmark_flags_all_parse():
    a = _parser().parse_args(["-m", "bert", "-c", "tiny", "--chips", "2", "-opt", "3", "-adf", "Fp32", "--trace",
                              "light", "-e", "PYBUDA_X=1", "-l", "--auto_transpose", "-di", "op1",
                              "-dit", "tag", "-dic", "2", "--model_output", "--num_tokens", "4", "-d", "cuda", "-t",
                              "--recompute", "--save_tti", "x.tti", "--save_output", "-mb", "2", "--loop_count", "1",
                              "-df", "Bfp8_b", "-mf", "LoFi", "--task", "na"])
    assert a.chips == 2 and a.backend_opt_level == 3 and a.acc_dataformat == "Fp32" and a.trace == "light"
    assert a.env == "PYBUDA_X=1" and a.list and a.auto_transpose and a.dump_intermediate == "op1"
    assert a.dump_intermediate_tag == "tag" and a.dump_intermediate_count == 2 and a.model_output
    assert a.num_tokens == 4 and a.device == "cuda" and a.training and a.recompute and a.save_tti == "x.tti"


def test_benchmark_di_is_dump_intermediate_not_device():
    a = _parser().parse_args(["-m", "bert", "-di", "x"])
    assert a.device == "tt" and a.dump_intermediate == "x"


def test_benchmark_unknown_and_abbreviated_flags_error():
    for argv in (["-m", "bert", "--bogus"], ["-m", "bert", "--loop", "2"], ["-m", "bert", "--dump_inter", "x"]):
        with pytest.raises(SystemExit):
            _parser().parse_args(argv)


def test_benchmark_training_models_a_step_on_the_card():
    record = benchmark.run(_parser().parse_args(["-m", "bert", "-c", "tiny", "-t", "-mb", "2", "--seq_len", "32"]))
    assert record["training"] and record["modeled_training_samples_per_sec"] > 0
    assert record["epochs"] >= 3  # forward, backward and optimizer never share an epoch


@pytest.mark.parametrize("argv,flag", [(["--recompute"], "--recompute"),
                                       (["--num_tokens", "3"], "--num_tokens"),
                                       (["-dit", "tag"], "--dump_intermediate_tag"),
                                       (["-di", "gelu", "--perf-only"], "--dump_intermediate"),
                                       (["--model_output", "--perf-only"], "--model_output")])
def test_benchmark_unsupported_flags_raise_naming_them(argv, flag):
    with pytest.raises(ConfigError, match=flag):
        benchmark.run(_parser().parse_args(["-m", "bert", "-c", "tiny"] + argv))


def test_benchmark_cuda_without_cuda_is_a_config_error(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="-d cuda"):
        benchmark.run(_parser().parse_args(["-m", "bert", "-c", "tiny", "-d", "cuda"]))


def test_benchmark_flags_reach_the_compiler_config():
    args = _parser().parse_args(["-m", "bert", "-c", "tiny", "--chips", "2", "-opt", "1", "-adf", "Fp32",
                                 "--trace", "verbose", "--auto_transpose", "--device-config", "wh_n300"])
    cfg = benchmark._compiler_config(benchmark._plan(args), args)
    assert cfg.num_chips == 2 and cfg.backend_opt_level == 1 and cfg.default_accumulate_df == pybuda.DataFormat.Float32
    assert cfg.performance_trace == PerfTraceLevel.VERBOSE and cfg.enable_auto_transposing_placement


def test_benchmark_env_flag_sets_variables(monkeypatch):
    monkeypatch.setenv("PYBUDA_BENCH_A", "0")
    monkeypatch.setenv("PYBUDA_BENCH_B", "0")
    assert benchmark.apply_env_flag("PYBUDA_BENCH_A=7 PYBUDA_BENCH_B") == {"PYBUDA_BENCH_A": "7", "PYBUDA_BENCH_B": "1"}
    assert os.environ["PYBUDA_BENCH_A"] == "7" and os.environ["PYBUDA_BENCH_B"] == "1"


def test_benchmark_list_and_missing_model(capsys):
    assert benchmark.main(_parser().parse_args(["-l"])) == 0
    assert "bert" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="-m/--model"):
        benchmark.run(_parser().parse_args([]))


def test_benchmark_model_output_on_cpu(tmp_path):
    args = _parser().parse_args(["-d", "cpu", "-m", "bert", "-c", "tiny", "-mb", "1", "--loop_count", "2",
                                 "--seq-len", "32", "--model_output", "--output-dir", str(tmp_path)])
    record = benchmark.run(args)
    text = open(record["model_output"]).read()
    assert "microbatch 0 output 0" in text and "microbatch 1 output 0" in text


# --- devices ------------------------------------------------------------------------------------------------
def test_detect_available_devices_lists_the_simulated_card(monkeypatch):
    assert pybuda.detect_available_devices() == [pybuda.BackendDevice.Grayskull]
    monkeypatch.setenv("GOLDEN_WORMHOLE_B0", "1")
    assert pybuda.detect_available_devices() == [pybuda.BackendDevice.Wormhole_B0]


def test_silicon_still_runs_on_golden(monkeypatch):
    from pybuda.runtime import ttdevice

    monkeypatch.setattr(ttdevice, "_silicon_notice_given", False)
    tt = pybuda.TTDevice("tt_sil", devtype=pybuda.BackendType.Silicon)
    try:
        assert tt.devtype == pybuda.BackendType.Golden and not ttdevice.silicon_present()
    finally:
        pybuda.pybuda_reset()


# --- VerifyConfig -------------------------------------------------------------------------------------------
def test_verify_config_has_the_reference_fields():
    v = VerifyConfig()
    assert v.verify_pybuda_codegen_vs_framework is False and v.verify_tvm_compile is False
    assert v.devtype == pybuda.BackendType.Golden and v.arch == pybuda.BackendDevice.Grayskull
    assert v.devmode == pybuda.DeviceMode.CompileAndRun and v.run_net2pipe is False
    assert v.optimizer == {"type": "sgd", "params": {"learning_rate": 50.0}} and v.scheduler is None
    assert v.fp32_fallback == pybuda.DataFormat.Float16_b and v.epoch_breaks == [] and not v.skip_shutdown
    assert v.chip_ids is None and v.num_chips is None and v.waive_gradient_errors == set()
    assert set(NO_EFFECT_FIELDS) <= set(v.__dataclass_fields__)


def test_verify_config_arch_follows_env(monkeypatch):
    monkeypatch.setenv("GOLDEN_WORMHOLE_B0", "1")
    assert VerifyConfig().arch == pybuda.BackendDevice.Wormhole_B0


def test_verify_config_no_effect_field_logged_once(caplog, monkeypatch):
    from pybuda import verify

    monkeypatch.setattr(verify, "_verify_logged", set())
    with caplog.at_level(logging.WARNING, logger="pybuda.verify"):
        VerifyConfig(verify_pybuda_codegen_vs_framework=True)
        VerifyConfig(verify_pybuda_codegen_vs_framework=True)
    assert sum("verify_pybuda_codegen_vs_framework" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(ConfigError, match="devtype"):
        VerifyConfig(devtype="golden")


def test_benchmark_dump_intermediate_writes_the_saved_op_outputs(tmp_path):
    import numpy as np

    argv = ["-m", "bert", "-c", "tiny", "-mb", "2", "--loop_count", "2", "--seq_len", "32", "-di", "gelu,layer_norm_1",
            "-dic", "2", "-dit", "run1", "--output-dir", str(tmp_path)]
    record = benchmark.run(_parser().parse_args(argv))
    saved = np.load(record["intermediates"], allow_pickle=False)
    assert record["intermediates"].endswith("intermediates_run1.npz")
    assert sorted(saved.files) == ["0.gelu", "0.layer_norm_1", "1.gelu", "1.layer_norm_1"]
    assert saved["0.gelu"].shape == (2, 32, 512) and saved["0.layer_norm_1"].shape == (2, 32, 128)
    # a layer norm's output rows have mean 0 and variance 1 (BERT-tiny's random init keeps gamma=1, beta=0),
    # to the benchmark's Float16_b precision (8-bit mantissa: ~0.4 % per value)
    rows = saved["0.layer_norm_1"]
    fp16b_tol = 1e-2
    assert np.allclose(rows.mean(-1), 0.0, atol=fp16b_tol) and np.allclose(rows.var(-1), 1.0, atol=5 * fp16b_tol)


def test_benchmark_dump_intermediate_of_an_unknown_op_names_the_ops():
    argv = ["-m", "bert", "-c", "tiny", "-mb", "2", "--loop_count", "1", "--seq_len", "32", "-di", "no_such_op"]
    with pytest.raises(ConfigError, match="no_such_op.*layer_norm"):
        benchmark.run(_parser().parse_args(argv))
