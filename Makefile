# Everything the project needs is installed by these targets: a fresh machine needs only
# `make test` (or `make demo`). Nothing installed by hand is assumed.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
PYTEST_ARGS ?=

.PHONY: all install test lint typecheck importlint pytest demo clean java-check node

all: test

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Azurite (the local Blob Storage) comes from npm into ./node_modules, pinned by package.json.
$(NODE_STAMP): package.json
	@command -v npm >/dev/null || { echo "npm is required for Azurite: install Node.js 18+ (e.g. apt-get install nodejs npm)"; exit 1; }
	npm install --no-audit --no-fund --loglevel=error
	@touch $(NODE_STAMP)

install: $(STAMP) $(NODE_STAMP)

node: $(NODE_STAMP)

lint: $(STAMP)
	$(BIN)/ruff check operator tests
	$(BIN)/ruff format --check operator tests

typecheck: $(STAMP)
	$(BIN)/mypy

importlint: $(STAMP)
	$(BIN)/lint-imports

# pytest exits 5 when it collected nothing: that is a failure here, as any other non-zero code.
pytest: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test: install lint typecheck importlint pytest

demo: install
	$(BIN)/ehb demo

clean:
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .ruff_cache .hypothesis
