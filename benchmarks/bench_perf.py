"""Speed of the performance model and of ``pybuda benchmark --perf-only``, against PyTorch in the same run.

Reported:

* ``pybuda benchmark -m bert -c large -mb 64 -df Bfp8_b -mf LoFi --device-config wh_n150 --perf-only``:
  wall seconds split into model build, compile and perf model + reports (target: the whole command in
  <= 60 s on 2 cores);
* :func:`pybuda.perf.model.estimate` and the three report files on that netlist: seconds, and the ratio
  to one eager PyTorch forward of the same model at batch 1 measured here, now;
* with ``--calibrate``: the modeled vs published throughput table (perf_calibration.md §1);
* with ``--policies``: modelled card throughput of pybuda's default balancer policy against Ribbon (TT-Buda's
  placement), both compiled in the same run, for the issue #16 targets (BERT-Large seq 384 on n150/e150;
  ResNet-50, VoVNet-V2-39 and Inception-v4 on n150): each against TT-Buda's published figure, the default's
  epochs, its ratio to Ribbon and whether it meets the issue's goal (2x for BERT-Large, 1.3x for the CNNs).

    .venv/bin/python benchmarks/bench_perf.py [--repeat 3] [--calibrate] [--policies [--models resnet ...]]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _best(fn, repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--calibrate", action="store_true", help="also print the calibration table (slow)")
    ap.add_argument("--policies", action="store_true", help="only print default policy vs Ribbon (slow)")
    ap.add_argument("--models", nargs="*", default=None,
                    help="with --policies: only these model names (e.g. resnet vovnet_v2)")
    args = ap.parse_args()
    if args.policies:
        policies(args.models)
        return

    from pybuda.cli import benchmark
    from pybuda.perf.model import estimate_compiled
    from pybuda.perf.report import write_reports

    with tempfile.TemporaryDirectory() as tmp:
        # 1. the whole command, as a user runs it (a fresh process: imports included)
        cmd = [sys.executable, "-m", "pybuda.cli.main", "benchmark", "-m", "bert", "-c", "large", "-mb", "64", "-df",
               "Bfp8_b", "-mf", "LoFi", "--device-config", "wh_n150", "--perf-only"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYBUDA_BUILD_DIR=tmp))
        wall = time.perf_counter() - t0
        print(f"pybuda benchmark bert large mb64 Bfp8_b/LoFi wh_n150 --perf-only: {wall:.1f} s wall "
              f"(target <= 60 s), rc {proc.returncode}")
        for line in proc.stdout.splitlines()[1:3]:
            print("   ", line.strip())

        # 2. the perf model alone on that compile, against a PyTorch forward of the same model
        parser = argparse.ArgumentParser()
        benchmark.add_arguments(parser)
        ns = parser.parse_args(["-m", "bert", "-c", "large", "-mb", "64", "-df", "Bfp8_b", "-mf", "LoFi",
                                "--device-config", "wh_n150", "--perf-only"])
        plan = benchmark._plan(ns)
        spec = benchmark._model(plan, 1)
        cfg = benchmark._compiler_config(plan, ns)
        cfg.backend_output_dir = tmp
        results, compile_s = benchmark._compile_only(spec, cfg, 64)
        t_est = _best(lambda: estimate_compiled(results, microbatch=64), args.repeat)
        report = estimate_compiled(results, microbatch=64)
        t_rep = _best(lambda: write_reports(report, Path(tmp) / "reports"), args.repeat)
        with torch.no_grad():
            t_torch = _best(lambda: spec.module(*spec.example_inputs), args.repeat)
        print(f"compile (in process): {compile_s:.1f} s, {report.num_epochs} epochs, {len(report.ops)} ops")
        print(f"{'step':<34}{'seconds':>10}{'vs torch fwd':>14}")
        print(f"{'torch forward, batch 1':<34}{t_torch:>10.3f}{1.0:>14.2f}")
        print(f"{'perf.estimate':<34}{t_est:>10.3f}{t_est / t_torch:>14.2f}")
        print(f"{'write_reports (csv/json/html)':<34}{t_rep:>10.3f}{t_rep / t_torch:>14.2f}")

    if args.calibrate:
        # the calibration points and the table printer live with the calibration test
        subprocess.run([sys.executable, str(ROOT / "tests" / "perf" / "test_calibration.py")], cwd=ROOT / "tests" / "perf")


#: (model, config, card, format, fidelity, microbatch, published samples/s, goal as a multiple of it)
POLICY_POINTS = [
    ("bert", "large", "wh_n150", "Bfp8_b", "LoFi", 64, 118.0, 2.0),
    ("bert", "large", "gs_e150", "Bfp8_b", "LoFi", 64, 99.0, 2.0),
    ("resnet", "resnet50", "wh_n150", "Bfp8_b", "LoFi", 256, 2891.0, 1.3),
    ("vovnet_v2", "39", "wh_n150", "Bfp8_b", "LoFi", 128, 1603.0, 1.3),
    ("inception_v4", "base", "wh_n150", "Bfp8_b", "LoFi", 128, 1061.0, 1.3),
]


def policies(models=None) -> None:
    """Modelled throughput with the default policy and with Ribbon, both compiled in this run, each against
    TT-Buda's published figure, and whether the default meets the issue's goal (``models``: only the
    points of these model names)."""
    from pybuda.balancer import normalize_policy
    from pybuda.cli import benchmark

    default = normalize_policy(None)
    print(f"{'model':<20}{'card':<9}{'published':>10}{'Ribbon':>9}{'R/pub':>7}{default + ' (default)':>15}"
          f"{'ep':>4}{'def/pub':>9}{'def/R':>7}{'goal':>6}  met")
    for model, config, card, df, mf, mb, published, goal in POLICY_POINTS:
        if models and model not in models:
            continue
        rates, epochs = [], []
        for policy in ("Ribbon", default):
            with tempfile.TemporaryDirectory() as tmp:
                os.environ["PYBUDA_BUILD_DIR"] = tmp
                parser = argparse.ArgumentParser()
                benchmark.add_arguments(parser)
                ns = parser.parse_args(["-m", model, "-c", config, "--device-config", card, "-df", df, "-mf", mf,
                                        "-mb", str(mb), "--perf-only", "--output-dir", tmp,
                                        "--balancer-policy", policy])
                try:
                    record = benchmark.run(ns)
                    rates.append(record["modeled_samples_per_sec"])
                    epochs.append(int(record.get("epochs") or 0))
                except Exception as e:  # one failed compile should not hide the other rows
                    print(f"  {model} {card} {policy}: {type(e).__name__}: {e}")
                    rates.append(float("nan"))
                    epochs.append(0)
        ratio = rates[1] / published
        print(f"{model + ' ' + config:<20}{card:<9}{published:>10.0f}{rates[0]:>9.1f}{rates[0] / published:>6.2f}x"
              f"{rates[1]:>15.1f}{epochs[1]:>4}{ratio:>8.2f}x{rates[1] / rates[0]:>6.2f}x{goal:>5.1f}x  "
              f"{'yes' if ratio >= goal else 'no'}", flush=True)


if __name__ == "__main__":
    main()
