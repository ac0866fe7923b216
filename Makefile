# `make run` and `make test` set everything up themselves (idempotent) and then do their job.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export HASE_DATA_DIR ?= $(CURDIR)/.hase_data

.PHONY: setup run test lint dev prometheus analyze-example clean faults

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch/torchvision first and exactly: this machine serves them from local disk.
	$(BIN)/python -m pip install -q -c constraints.txt torch==2.14.1 torchvision==0.29.1
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	touch $@

$(DAGSTER_HOME)/dagster.yaml: dagster-instance.yaml
	mkdir -p $(DAGSTER_HOME)
	cp dagster-instance.yaml $@

setup: $(VENV)/.installed $(DAGSTER_HOME)/dagster.yaml

# Materialize the whole asset graph on the default profile (cpu where no GPU truly runs).
run: setup
	$(BIN)/hase materialize

# Two workers, a test file each at a time (module fixtures are built once): 392 s against 634 s in one process on
# the 2-core VM (2026-11-29). Tests that load the machine keep wide margins for the other worker's load. One OpenMP /
# BLAS thread per worker: two workers training XGBoost on all cores at once spun the 2 cores for 10 minutes on one
# fixture that takes 49 s alone.
test: setup prometheus lint
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile

# ruff (lint and format) on everything, mypy on the domain core (configured in pyproject.toml).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Replay every case of issue 13 (bad input, faults, signals) against the real CLI: case -> exit code -> first
# line of stderr; a few minutes on 2 cores. The output is kept in results/faults/replay-output.txt.
faults: setup
	set -o pipefail; $(BIN)/python results/faults/replay.py | tee results/faults/replay-output.txt

# The Dagster UI (with its daemon, so sensors and schedules run) on 127.0.0.1:3000.
dev: setup
	hase_dagster/prometheus/dev-stack.sh

# The Debian package prometheus (the tests run a real Prometheus; needs root or sudo the first time).
prometheus:
	hase_dagster/prometheus/install-prometheus.sh

clean:
	rm -rf $(VENV) $(DAGSTER_HOME) $(HASE_DATA_DIR)
