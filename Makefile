# `make run` and `make test` create .venv on first use. torch 2.13.0 (CPU build) is installed
# first so that nothing later pulls a CUDA build of torch.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test,models,onnx,jax,tf]"
	# Headless Chromium renders the HTML performance report in the tests (Debian package; needs root).
	command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || echo "chromium unavailable: the perf_report.html render test will skip"
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m pybuda.cli run

test: $(STAMP)
	$(PY) -m ruff check pybuda tests benchmarks tools
	$(PY) -m pytest -n 2 -q -p no:cacheprovider

lint: $(STAMP)
	$(PY) -m ruff check pybuda tests benchmarks tools

bench: $(STAMP)
	PY=$(PY) benchmarks/run_all.sh

clean:
	rm -rf $(VENV) tt_build
