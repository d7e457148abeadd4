# minikafka — the two commands a newcomer needs: `make run` and `make test`.
# Everything runs from a local virtualenv (.venv) that `make install` creates.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= dev,spark,bench
# The versions CI tested, used as pip constraints (LOCK= resolves the ranges of pyproject.toml).
LOCK ?= requirements-ci.lock
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (0: one process). The suite waits on real processes
# and timeouts more than it computes, so 3 workers on 2 cores halve its wall time.
PYTEST_WORKERS ?= 3
N ?= 10
PROFILES ?=
HOG ?=
SEEDS ?= 20000
FIRST ?= 0
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)

.PHONY: install run test test-repeat test-unit test-integration chaos sim-raft sim lint fmt proto proto-check bench up down clean docs lock

install: $(STAMP)

$(STAMP): pyproject.toml Makefile $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(if $(LOCK),-c $(LOCK)) -e ".[$(EXTRAS)]"
	touch $(STAMP)

lock:  ## resolve pyproject.toml's ranges afresh and record the result in requirements-ci.lock
	rm -rf build/lock-venv && $(PYTHON) -m venv build/lock-venv
	build/lock-venv/bin/python -m pip install --quiet --upgrade pip
	build/lock-venv/bin/python -m pip install --quiet -e ".[dev,spark,bench]"
	sed -n '1,3p' requirements-ci.lock > build/requirements-ci.lock
	build/lock-venv/bin/python -m pip freeze --exclude-editable >> build/requirements-ci.lock
	mv build/requirements-ci.lock requirements-ci.lock && rm -rf build/lock-venv

docs: install  ## regenerate docs/configuration.md from the code's option and config definitions
	$(BIN)/python -m minikafka_cli.config_reference docs/configuration.md

run: install  ## start a local 3-broker cluster (controller + brokers as child processes)
	$(BIN)/minikafka dev

test: install  ## the whole CI-sized suite: unit, integration, chaos subset, spark, compose (PYTEST_WORKERS=3)
	$(BIN)/python -m pytest $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

test-repeat: install  ## `make test` N times (N=10), stopping at the first failure; HOG=1 adds a busy loop per core
	@hog_pids=""; \
	if [ "$(HOG)" = 1 ]; then \
	  for core in $$(seq 1 $$(nproc)); do \
	    (exec timeout 86400 $(BIN)/python -c 'while True: pass') & hog_pids="$$hog_pids $$!"; \
	  done; \
	  trap 'kill $$hog_pids 2>/dev/null' EXIT; \
	  echo "== test-repeat: CPU hog on $$(nproc) cores (pids$$hog_pids)"; \
	fi; \
	passed=0; \
	for run in $$(seq 1 $(N)); do \
	  echo "== test-repeat: run $$run of $(N)"; \
	  if $(MAKE) --no-print-directory test PYTEST_ARGS='$(PYTEST_ARGS)' PYTEST_WORKERS='$(PYTEST_WORKERS)'; then \
	    passed=$$((passed + 1)); \
	  else \
	    echo "test-repeat: run $$run failed; $$passed of $(N) runs passed"; exit 1; \
	  fi; \
	done; \
	echo "test-repeat: $$passed of $(N) runs passed"

test-unit: install
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

test-integration: install
	$(BIN)/python -m pytest tests/integration $(PYTEST_ARGS)

chaos: install  ## the long fault suite with more seeds
	MINIKAFKA_CHAOS_LONG=1 $(BIN)/python -m pytest tests/chaos $(PYTEST_ARGS)

sim-raft: install  ## long deterministic Raft simulation: SEEDS=N runs from seed FIRST (replay: MINIKAFKA_RAFT_SEED=n)
	MINIKAFKA_RAFT_SEEDS=$(SEEDS) MINIKAFKA_RAFT_FIRST_SEED=$(FIRST) $(BIN)/python -m pytest \
	  tests/sim/raft -q -k seeded_runs --timeout=0 $(PYTEST_ARGS)

sim: install  ## long replication simulation: SEEDS=N runs from seed FIRST (replay: MINIKAFKA_SIM_SEED=n)
	MINIKAFKA_SIM_SEEDS=$(SEEDS) MINIKAFKA_SIM_FIRST_SEED=$(FIRST) $(BIN)/python -m pytest \
	  tests/sim/replication -q -k seeded_runs --timeout=0 $(PYTEST_ARGS)

lint: install proto-check  ## ruff + mypy --strict
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy minikafka minikafka_cli broker controller client tests benchmarks

fmt: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

proto: install  ## regenerate minikafka/v1/*_pb2*.py(i) from proto/minikafka/v1/*.proto
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m grpc_tools.protoc -I proto \
	  --python_out=. --mypy_out=. --grpc_python_out=. --mypy_grpc_out=. proto/minikafka/v1/*.proto

proto-check: install  ## fail if the committed generated code is not what the .proto files give
	rm -rf build/proto-check && mkdir -p build/proto-check
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m grpc_tools.protoc -I proto \
	  --python_out=build/proto-check --mypy_out=build/proto-check \
	  --grpc_python_out=build/proto-check --mypy_grpc_out=build/proto-check proto/minikafka/v1/*.proto
	diff -r -x __init__.py -x __pycache__ build/proto-check/minikafka/v1 minikafka/v1 \
	  || (echo "generated code is stale: run 'make proto' and commit" && exit 1)

bench: install  ## storage, throughput, latency and failover benchmarks (with peers)
	$(BIN)/python -m benchmarks

up: install  ## docker-compose cluster (see README); PROFILES="--profile monitoring|spark", PROFILES=--tls
	MINIKAFKA_COMPOSE="$(COMPOSE)" deploy/up.sh $(PROFILES)

down:  ## stop the compose cluster and delete its data
	MINIKAFKA_COMPOSE="$(COMPOSE)" deploy/down.sh

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
