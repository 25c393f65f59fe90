# `make run` and `make test` create .venv on first use. torch 2.13.0 (CPU build) is installed
# first so that nothing later pulls a CUDA build of torch.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test,models]"
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m pybuda.cli run

test: $(STAMP)
	$(PY) -m pytest -n 2 -q -p no:cacheprovider

bench: $(STAMP)
	$(PY) -m benchmarks.run_all

clean:
	rm -rf $(VENV) tt_build
