# mixshard's front door. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DATA ?= data
WORKERS ?=

.DEFAULT_GOAL := help
.PHONY: help venv test test-cuda lint format demo bench clean

help:
	@echo "make demo    generate a procedural image folder, pack it, show the result"
	@echo "make test    create .venv if missing, install mixshard with dev extras, run pytest"
	@echo "make lint    ruff check + format check"
	@echo "make bench   run the benchmarks (scripts/bench_*.py)"

# The venv is (re)installed when pyproject.toml changes.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest

test-cuda: $(STAMP)
	$(PY) -m pytest -m cuda

lint: $(STAMP)
	$(PY) -m ruff check mixshard tests scripts
	$(PY) -m ruff format --check mixshard tests scripts

format: $(STAMP)
	$(PY) -m ruff format mixshard tests scripts
	$(PY) -m ruff check --fix mixshard tests scripts

demo: $(STAMP)
	$(PY) scripts/demo.py

bench: $(STAMP)
	$(PY) scripts/bench_pack.py

clean:
	rm -rf demo bench-out .pytest_cache .ruff_cache
