#!/usr/bin/env bash
# `make bench`: every benchmark with its default (issue) settings, one after another.
# Each prints its own figures and the ratio against PyTorch measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
for bench in bench_formats bench_capture bench_compile bench_first_output bench_golden bench_perf; do
  if [ -f "benchmarks/$bench.py" ]; then
    echo "=== $bench ==="
    "$PY" "benchmarks/$bench.py"
  fi
done
