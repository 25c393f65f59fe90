"""``pybuda benchmark``: flags (tenstorrent/benchmarking spellings), the perf-only path, a CPU run, a run on
the simulated chip, and the saved JSON result."""

import json

import pytest

from pybuda.cli import benchmark
from pybuda.cli import main as cli
from pybuda.errors import ConfigError
from pybuda.dtypes import DataFormat as DF, MathFidelity as MF

REQUIRED = {"model", "config", "device_config", "microbatch", "data_format", "math_fidelity", "compile_seconds",
            "epochs", "modeled_samples_per_sec", "host_samples_per_sec"}


@pytest.mark.parametrize("text,df", [("Fp16", DF.Float16), ("Fp16_b", DF.Float16_b), ("Bfp8", DF.Bfp8),
                                     ("Bfp8_b", DF.Bfp8_b), ("bfp8_b", DF.Bfp8_b), ("Float16_b", DF.Float16_b),
                                     ("Fp32", DF.Float32), ("Bfp4_b", DF.Bfp4_b)])
def test_data_format_spellings(text, df):
    assert benchmark.parse_data_format(text) == df


def test_bad_format_and_fidelity():
    with pytest.raises(ConfigError, match="Bfp8_b"):
        benchmark.parse_data_format("fp7")
    assert benchmark.parse_math_fidelity("hifi3") == MF.HiFi3
    with pytest.raises(ConfigError, match="LoFi"):
        benchmark.parse_math_fidelity("HiFi9")


def test_cli_reports_a_bad_flag_value(capsys):
    assert cli.main(["benchmark", "-m", "bert", "-c", "tiny", "-df", "fp7", "--perf-only"]) == 2
    assert "unknown data format" in capsys.readouterr().err


def test_perf_only_bert_tiny_saves_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PYBUDA_BUILD_DIR", str(tmp_path / "build"))
    rc = cli.main(["benchmark", "-m", "bert", "-c", "tiny", "-mb", "4", "-df", "Bfp8_b", "-mf", "LoFi",
                   "--device-config", "wh_n150", "--perf-only", "--save_output", "--output-dir", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "modeled card throughput (wh_n150)" in out and "skipped (--perf-only)" in out
    data = json.loads((tmp_path / "benchmark_bert_tiny_wh_n150_mb4.json").read_text())
    assert REQUIRED <= set(data)
    assert data["data_format"] == "Bfp8_b" and data["math_fidelity"] == "LoFi" and data["microbatch"] == 4
    assert data["modeled_samples_per_sec"] > 0 and data["epochs"] >= 1 and data["host_samples_per_sec"] is None
    for kind in ("csv", "json", "html"):
        assert (tmp_path / "build" / f"perf_report.{kind}").exists()


def test_cpu_run_measures_host_throughput(tmp_path, capsys):
    rc = cli.main(["benchmark", "-d", "cpu", "-m", "bert", "-c", "tiny", "-mb", "2", "--loop_count", "2",
                   "--save_output", "--output-dir", str(tmp_path)])
    assert rc == 0
    data = json.loads((tmp_path / "benchmark_bert_tiny_cpu_mb2.json").read_text())
    assert data["host_samples_per_sec"] > 0 and data["modeled_samples_per_sec"] is None
    assert "PyTorch on this host" in capsys.readouterr().out


def test_simulated_chip_run_measures_host_and_models_card(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PYBUDA_BUILD_DIR", str(tmp_path / "build"))
    rc = cli.main(["benchmark", "-m", "bert", "-c", "tiny", "-mb", "2", "--loop_count", "1", "-df", "Fp16_b",
                   "--device-config", "wh_n150", "--seq-len", "64", "--save_output", "--output-dir", str(tmp_path)])
    assert rc == 0
    data = json.loads((tmp_path / "benchmark_bert_tiny_wh_n150_mb2.json").read_text())
    assert data["host_samples_per_sec"] > 0 and data["modeled_samples_per_sec"] > 0
    assert "simulated chip on this host" in capsys.readouterr().out


@pytest.mark.parametrize("argv,variant,size", [
    (["-m", "vovnet_v2", "-c", "39"], "39", 224),        # a variant named by a number stays a variant
    (["-m", "mobilenet_v2", "-c", "224"], "base", 224),  # a resolution config is an image size
    (["-m", "unet"], "base", 256),                       # benchmarking ran U-Net at 256x256
    (["-m", "hrnet", "-c", "v2_w64"], "v2_w64", 224),
])
def test_plan_reads_benchmarking_configs(argv, variant, size):
    import argparse

    parser = argparse.ArgumentParser()
    benchmark.add_arguments(parser)
    args = parser.parse_args(argv)
    plan = benchmark._plan(args)
    assert (plan.config, plan.size_kw["image_size"]) == (variant, size)
    assert args.balancer_policy == "NLP"  # our policy by default; Ribbon only when asked for
