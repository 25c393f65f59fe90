"""Calibration: modelled card throughput of whole compiled models against TT-Buda's published numbers
(perf_calibration.md §1: tenstorrent/benchmarking, TT-Buda v0.19.1, balancer policy Ribbon).

Each point compiles the published configuration through ``pybuda benchmark --perf-only`` (the same code
path users run) and asserts the model within ±25 % of the published throughput (goal ±15 %); the table
of modelled vs published is printed (``pytest -s``) and written to the build directory.
"""

import argparse
import json
import os

import pytest

from pybuda.cli import benchmark

#: (model, config, device_config, data format, fidelity, microbatch, published samples/s)
POINTS = [
    ("bert", "large", "gs_e150", "Bfp8_b", "LoFi", 64, 99.0),
    ("bert", "large", "wh_n150", "Bfp8_b", "LoFi", 64, 118.0),
    ("resnet", "resnet50", "gs_e150", "Fp16_b", "HiFi3", 64, 1410.0),
    ("resnet", "resnet50", "wh_n150", "Bfp8_b", "LoFi", 256, 2891.0),
]
TOLERANCE = 0.25
GOAL = 0.15

#: Points that miss for reasons outside the performance model, each with what has to change. They run
#: (and print their row); xfail keeps CI green until the compiler catches up, and XPASS shows when it has.
KNOWN_GAPS: dict = {}  # none at present: all four points are within the tolerance

def _param(point):
    gap = KNOWN_GAPS.get((point[0], point[2]))
    marks = [pytest.mark.xfail(reason=gap, strict=False)] if gap else []
    return pytest.param(*point, marks=marks, id=f"{point[0]}-{point[2]}")

_RESULTS = []


def _args(model, config, device_config, df, mf, mb, out_dir):
    parser = argparse.ArgumentParser()
    benchmark.add_arguments(parser)
    return parser.parse_args(["-m", model, "-c", config, "--device-config", device_config, "-df", df, "-mf", mf,
                              "-mb", str(mb), "--perf-only", "--output-dir", str(out_dir)])


@pytest.mark.slow
@pytest.mark.parametrize("model,config,device_config,df,mf,mb,published", [_param(p) for p in POINTS])
def test_modeled_throughput_matches_published(model, config, device_config, df, mf, mb, published, tmp_path,
                                              monkeypatch):
    monkeypatch.setenv("PYBUDA_BUILD_DIR", str(tmp_path))
    record = benchmark.run(_args(model, config, device_config, df, mf, mb, tmp_path))
    modeled = record["modeled_samples_per_sec"]
    error = modeled / published - 1.0
    _RESULTS.append((f"{model} {config}", device_config, f"{df}/{mf}", mb, modeled, published, error,
                     record["epochs"], _limit(record)))
    print(_table())
    (tmp_path / "calibration.json").write_text(json.dumps(record, indent=1, default=str))
    assert abs(error) <= TOLERANCE, (
        f"{model} {config} on {device_config}: modeled {modeled:.1f} samples/s vs published {published:.0f} "
        f"({error:+.1%}, tolerance ±{TOLERANCE:.0%}); see {record['perf_report']['html']}")


def _limit(record) -> str:
    """The device's bottleneck op, or the host work that bounds the run instead."""
    limit = record.get("limited_by", "device")
    return record["bottleneck_op"] if limit == "device" else f"{limit} (device: {record['bottleneck_op']})"


def _table() -> str:
    lines = [f"{'model':<16}{'card':<9}{'format':<14}{'mb':>4}{'modeled':>10}{'published':>10}{'error':>8}"
             f"{'epochs':>7}  limited by"]
    for name, card, fmt, mb, modeled, published, error, epochs, bneck in _RESULTS:
        flag = "" if abs(error) <= GOAL else (" (>15%)" if abs(error) <= TOLERANCE else " (>25%)")
        lines.append(f"{name:<16}{card:<9}{fmt:<14}{mb:>4}{modeled:>10.1f}{published:>10.0f}{error:>+8.1%}"
                     f"{epochs:>7}  {bneck}{flag}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - a quick way to print the table outside pytest
    import sys
    import tempfile

    for point in POINTS:
        model, config, device_config, df, mf, mb, published = point
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["PYBUDA_BUILD_DIR"] = tmp
            try:
                record = benchmark.run(_args(model, config, device_config, df, mf, mb, tmp))
            except Exception as e:  # report and go on: one broken compile should not hide the others
                print(f"{model} {device_config}: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            m = record["modeled_samples_per_sec"]
            _RESULTS.append((f"{model} {config}", device_config, f"{df}/{mf}", mb, m, published, m / published - 1,
                             record["epochs"], _limit(record)))
    print(_table())
