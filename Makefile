# minikafka — the two commands a newcomer needs: `make run` and `make test`.
# Everything runs from a local virtualenv (.venv) that `make install` creates.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= dev,spark,bench
PYTEST_ARGS ?=
PROFILES ?=
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)

.PHONY: install run test test-unit test-integration chaos lint fmt proto proto-check bench up down clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

run: install  ## start a local 3-broker cluster (controller + brokers as child processes)
	$(BIN)/minikafka dev

test: install  ## the whole CI-sized suite: unit, integration, chaos subset, spark, compose
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-unit: install
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

test-integration: install
	$(BIN)/python -m pytest tests/integration $(PYTEST_ARGS)

chaos: install  ## the long fault suite with more seeds
	MINIKAFKA_CHAOS_LONG=1 $(BIN)/python -m pytest tests/chaos $(PYTEST_ARGS)

lint: install proto-check  ## ruff + mypy --strict
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy minikafka broker controller client tests benchmarks

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

up: install  ## docker-compose cluster (see README); PROFILES="--profile monitoring" for extras
	MINIKAFKA_COMPOSE="$(COMPOSE)" deploy/up.sh $(PROFILES)

down:  ## stop the compose cluster and delete its data
	MINIKAFKA_COMPOSE="$(COMPOSE)" deploy/down.sh

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
