# Nexus Event Gateway. `make demo` runs the main job; `make test` runs lint, types and every test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# The local broker's port; tests and the consumer find it through NEXUS_KAFKA_BOOTSTRAP.
export NEXUS_KAFKA_PORT ?= 9092
export NEXUS_KAFKA_BOOTSTRAP ?= 127.0.0.1:$(NEXUS_KAFKA_PORT)

.PHONY: help install demo test lint typecheck unit integration kafka-up kafka-down chaos bench schemas clean agent-e2e agent-test fuzz

help:
	@echo "make demo    - start the embedded stack, run misbehaving agents through it, check the invariants"
	@echo "make test    - lint, types and all tests (starts the local Kafka broker)"
	@echo "make chaos   - the chaos scenarios at CI size"
	@echo "make bench   - the benchmark suite (writes benchmarks/results/)"
	@echo "make fuzz    - a longer fuzz of the HTTP API (FUZZ_EXAMPLES=200)"
	@echo "make kafka-up / kafka-down - a local single-node Kafka broker from Maven Central"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/nexus demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

schemas: $(STAMP)
	$(BIN)/python -m nexus.core.schemas_export schemas/events

unit: $(STAMP)
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

test: $(STAMP) lint typecheck kafka-up
	$(BIN)/pytest $(PYTEST_ARGS)

# The fuzz run of `make test`, longer: schemathesis on every route and arbitrary JSON beside valid traffic.
FUZZ_EXAMPLES ?= 200
fuzz: $(STAMP)
	NEXUS_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest tests/integration/test_fuzz.py -p no:cacheprovider --timeout 1800

kafka-up:
	bash scripts/kafka.sh up

kafka-down:
	bash scripts/kafka.sh down

CHAOS_PLANS ?= 40
CHAOS_SEED ?= ci
chaos: $(STAMP) kafka-up
	$(BIN)/nexus chaos --plans $(CHAOS_PLANS) --seed $(CHAOS_SEED)

bench: $(STAMP)
	$(BIN)/nexus bench

# A bigger agent run end to end: agent -> gateway -> dispatcher -> faulty sink -> checker.
ORDERS ?= 200
SEED ?= agent-e2e
INV_RATE ?= 0.2
PAY_RATE ?= 0.25
HOSTILE_RATE ?= 0.3
DELAY_MS ?= 0
agent-e2e: $(STAMP)
	$(BIN)/nexus demo --orders $(ORDERS) --seed $(SEED) --inventory-failure-rate $(INV_RATE) \
		--payment-rejection-rate $(PAY_RATE) --hostile-rate $(HOSTILE_RATE) --step-delay-ms $(DELAY_MS) \
		--concurrency 32 --settle-timeout 120

agent-test: $(STAMP)
	$(BIN)/pytest tests/unit/test_agent_graph.py tests/unit/test_hostile.py

clean:
	rm -rf .nexus .cache/kafka/node-* .pytest_cache .mypy_cache .ruff_cache
