# Nexus Event Gateway. `make demo` runs the main job; `make check` is the fast gate (lint, types, import contracts,
# the unit tests that start nothing); `make test` runs lint, types and every test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# The local broker's port; tests and the consumer find it through NEXUS_KAFKA_BOOTSTRAP.
export NEXUS_KAFKA_PORT ?= 9092
export NEXUS_KAFKA_BOOTSTRAP ?= 127.0.0.1:$(NEXUS_KAFKA_PORT)


.PHONY: demo-llm demo-mcp agent-studio studio-check llm-test mcp-old-clients
.PHONY: promtool console-test settings-doc
.PHONY: help install demo check test lint typecheck unit integration kafka-up kafka-down chaos soak bench schemas clean agent-e2e agent-test fuzz

help:
	@echo "make demo    - start the embedded stack, run misbehaving agents through it, check the invariants"
	@echo "make demo-llm - 20 plans of the LLM planner against the fake model, every behaviour; blocked actions"
	@echo "make demo-mcp - an MCP agent (official client + fake model) completes an order through /mcp; a large payment answered as a task"
	@echo "make agent-studio / studio-check - LangGraph Studio on the LLM planner graph (extra 'studio')"
	@echo "make mcp-old-clients - the venvs of the MCP SDK's 1.x clients (2025-11-25, 2025-06-18) the MCP tests start"
	@echo "make check   - lint, types, import contracts and the unit tests that start no process (under 2 minutes)"
	@echo "make test    - lint, types and all tests (starts the local Kafka broker)"
	@echo "make unit / integration - every test of tests/unit, of tests/integration (the latter starts the broker)"
	@echo "make chaos   - the chaos scenarios at CI size"
	@echo "make soak    - the whole stack under every chaos fault in turn for SOAK_MINUTES (30); drift checked"
	@echo "make bench   - the benchmark suite (writes benchmarks/results/)"
	@echo "make console-test - the web console in headless chromium, long run (make test has the short one)"
	@echo "make fuzz    - a longer fuzz of the HTTP API (FUZZ_EXAMPLES=200)"
	@echo "make settings-doc - regenerate docs/settings.md from src/nexus/settings.py"
	@echo "make kafka-up / kafka-down - a local single-node Kafka broker from Maven Central"
	@echo "make haproxy - Debian's HAProxy, for deploy/haproxy.cfg and the instance-kill chaos scenario"

# Each target installs only what it needs: the gateway its base dependencies; the demo and the other lab
# targets the lab extra too; the tests the lab and dev extras, and the bench extra and wrk for the bench's
# smoke tests and types; the benchmarks the bench extra (DBOS, matplotlib...) and wrk. A stamp per extra,
# redone when a pyproject changes. Three distributions, all editable from this tree: the shared nexus-wire
# and the SDK nexus-client (packages/, their sources under src/) and the gateway; every pip line names the
# first two, so pip takes them from here and never looks for them on an index.
DISTS := packages/nexus-wire/pyproject.toml packages/nexus-client/pyproject.toml
WIRE := -e packages/nexus-wire
LOCAL := $(WIRE) -e 'packages/nexus-client[kafka]'
$(VENV)/.base: pyproject.toml $(DISTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(WIRE) -e .
	touch $@

$(VENV)/.lab: $(VENV)/.base
	$(BIN)/pip install --quiet $(LOCAL) -e '.[lab]'
	touch $@

$(STAMP): $(VENV)/.lab
	$(BIN)/pip install --quiet $(LOCAL) -e '.[lab,dev]'
	touch $@

$(VENV)/.bench: $(VENV)/.lab
	$(BIN)/pip install --quiet $(LOCAL) -e '.[lab,bench]'
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	touch $@

install: $(STAMP)

demo: $(VENV)/.lab
	$(BIN)/nexus demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/lint-imports

# mypy and the bench smoke tests read the lab's bench code, which imports the bench extra.
typecheck: $(STAMP) $(VENV)/.bench
	$(BIN)/mypy

schemas: $(VENV)/.base
	$(BIN)/python -m nexus.processes.schemas_export schemas/events

# docs/settings.md from src/nexus/settings.py (tests/unit/test_settings_doc.py compares the two).
settings-doc: $(VENV)/.base
	$(BIN)/python scripts/settings_doc.py docs/settings.md

# The fast gate: what needs no PostgreSQL, broker, browser or process of its own, and nothing slow (the
# markers are applied in tests/conftest.py and registered in pyproject.toml).
CHECK_MARKERS := not (postgres or kafka or browser or processes or slow)
check: lint typecheck
	$(BIN)/pytest tests/unit -m "$(CHECK_MARKERS)" $(PYTEST_ARGS)

unit: $(STAMP) promtool
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

integration: $(STAMP) $(VENV)/.bench kafka-up
	$(BIN)/pytest tests/integration $(PYTEST_ARGS)

# promtool (Debian's prometheus package) checks deploy/alerts.yml in tests/unit/test_alert_rules.py; the
# package's service is installed but never started here.
promtool:
	command -v promtool >/dev/null || (apt-get update -qq && apt-get install -y -qq prometheus)

# Two passes: every test but the chaos suite in TEST_WORKERS pytest workers at once (pytest-xdist, whole files
# per worker: most tests wait on PostgreSQL, the broker, sockets or the processes they start, and one worker
# leaves a core idle), then the chaos suite alone, whose faults are timed against processes that want the
# cores. Both passes run; the target fails if either did. PYTEST_ARGS are options for both (not paths).
TEST_WORKERS ?= 2
test: $(STAMP) $(VENV)/.bench $(VENV)/.browser mcp-old-clients lint typecheck kafka-up promtool chromium haproxy
	@status=0; \
	NEXUS_BROWSER_TESTS=short PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile \
		--ignore=tests/chaos $(PYTEST_ARGS) || status=$$?; \
	$(BIN)/pytest tests/chaos $(PYTEST_ARGS) || status=$$?; \
	exit $$status

# The console in Debian's headless chromium (Playwright pointed at /usr/bin/chromium; no browser
# download). `make console-test` is the long run (every browser test); `make test` runs the short one.
$(VENV)/.browser: $(VENV)/.base
	$(BIN)/pip install --quiet $(WIRE) -e '.[browser]'
	touch $@

console-test: $(STAMP) $(VENV)/.browser chromium
	NEXUS_BROWSER_TESTS=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(BIN)/pytest tests/browser $(PYTEST_ARGS)

# Debian's chromium for the browser tests, for `make test` (short run) and `make console-test`
# HAProxy (Debian's package) in front of gateway instances: deploy/haproxy.cfg, the `instance-kill` chaos
# scenario and its test; the package's service is installed but never started here (the lab runs its own).
.PHONY: haproxy
haproxy:
	command -v haproxy >/dev/null || (apt-get update -qq && apt-get install -y -qq haproxy)

.PHONY: chromium
chromium:
	test -x /usr/bin/chromium || (apt-get update -qq && apt-get install -y -qq chromium)

# The fuzz run of `make test`, longer: schemathesis on every operation with keys of every role (examples
# per operation and key; about 40 minutes at 200 on 2 cores) and arbitrary JSON beside valid traffic.
FUZZ_EXAMPLES ?= 200
fuzz: $(STAMP)
	NEXUS_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest tests/integration/test_fuzz.py -p no:cacheprovider --timeout 7200

kafka-up:
	bash scripts/kafka.sh up

kafka-down:
	bash scripts/kafka.sh down

CHAOS_PLANS ?= 40
CHAOS_SEED ?= ci
chaos: $(VENV)/.lab kafka-up haproxy
	$(BIN)/nexus chaos --plans $(CHAOS_PLANS) --seed $(CHAOS_SEED)

# The whole stack (HTTP and Kafka ingress, dispatchers, sagas) under every chaos fault in a repeating cycle,
# checked after each cycle, on a Kafka broker of its own (free ports, stopped at the end); RSS per minute, p99,
# CPU and table rows in benchmarks/results/soak/ (plots: matplotlib).
SOAK_MINUTES ?= 30
soak: $(VENV)/.bench
	$(BIN)/nexus soak --minutes $(SOAK_MINUTES)

bench: $(VENV)/.bench
	$(BIN)/nexus bench

# A bigger agent run end to end: agent -> gateway -> dispatcher -> faulty sink -> checker.
ORDERS ?= 200
SEED ?= agent-e2e
INV_RATE ?= 0.2
PAY_RATE ?= 0.25
HOSTILE_RATE ?= 0.3
DELAY_MS ?= 0
agent-e2e: $(VENV)/.lab
	$(BIN)/nexus demo --orders $(ORDERS) --seed $(SEED) --inventory-failure-rate $(INV_RATE) \
		--payment-rejection-rate $(PAY_RATE) --hostile-rate $(HOSTILE_RATE) --step-delay-ms $(DELAY_MS) \
		--concurrency 32 --settle-timeout 120

agent-test: $(STAMP)
	$(BIN)/pytest tests/unit/test_agent_graph.py tests/unit/test_hostile.py

# The LLM planner against `nexus fake-llm` (no internet, no model key; it creates its gateway key).
demo-llm: $(VENV)/.lab
	$(BIN)/python -m nexus_lab.llm.demo

# The gateway as an MCP server: an agent that knows only MCP runs an order (docs/mcp.md).
demo-mcp: $(VENV)/.lab
	$(BIN)/python -m nexus_lab.mcp_demo

# The MCP clients of the official SDK's old line, which require mcp<2 and so cannot share $(VENV) (mcp 2.x):
# the 1.x client of protocol 2025-11-25 with LangChain's MCP adapters, and 1.22's client of 2025-06-18. The MCP
# tests (tests/e2e/test_mcp*.py) run them as processes (tests/e2e/mcp_old/*.py); they import nothing of ours.
# About 70 s on top of `make install` with a warm pip cache.
MCP_OLD_VENV ?= .venv-mcp-old
MCP_2025_06_VENV ?= .venv-mcp-2025-06-18
MCP_OLD_REQS := tests/e2e/mcp_old
$(MCP_OLD_VENV)/.installed: $(MCP_OLD_REQS)/requirements-2025-11-25.txt
	test -x $(MCP_OLD_VENV)/bin/python || $(PYTHON) -m venv $(MCP_OLD_VENV)
	$(MCP_OLD_VENV)/bin/pip install --quiet --upgrade pip
	$(MCP_OLD_VENV)/bin/pip install --quiet -r $<
	touch $@

$(MCP_2025_06_VENV)/.installed: $(MCP_OLD_REQS)/requirements-2025-06-18.txt
	test -x $(MCP_2025_06_VENV)/bin/python || $(PYTHON) -m venv $(MCP_2025_06_VENV)
	$(MCP_2025_06_VENV)/bin/pip install --quiet --upgrade pip
	$(MCP_2025_06_VENV)/bin/pip install --quiet -r $<
	touch $@

mcp-old-clients: $(MCP_OLD_VENV)/.installed $(MCP_2025_06_VENV)/.installed

llm-test: $(STAMP)
	$(BIN)/pytest tests/unit/test_llm_planner.py tests/integration/test_llm_client.py tests/e2e/test_llm_planner_e2e.py

# LangGraph Studio (langgraph dev) on the planner graph of langgraph.json; offline: no analytics, no tracing.
# Not part of `make test`: the studio extra (langgraph-cli[inmem]) is heavy, and its pins (jsonschema-rs,
# OpenTelemetry) clash with the dev extra's schemathesis, so it gets a venv of its own. `.ci/run` runs
# studio-check after `make test`; it creates the keys it needs and keeps its logs when it fails.
STUDIO_PORT ?= 2024
STUDIO_VENV ?= .venv-studio
STUDIO_ENV := LANGGRAPH_CLI_NO_ANALYTICS=1 LANGSMITH_TRACING=false LANGCHAIN_TRACING_V2=false
$(STUDIO_VENV)/.installed: pyproject.toml $(DISTS)
	test -x $(STUDIO_VENV)/bin/python || $(PYTHON) -m venv $(STUDIO_VENV)
	$(STUDIO_VENV)/bin/pip install --quiet --upgrade pip
	$(STUDIO_VENV)/bin/pip install --quiet $(LOCAL) -e '.[lab,studio]'
	touch $@

agent-studio: $(STUDIO_VENV)/.installed
	$(STUDIO_ENV) $(STUDIO_VENV)/bin/langgraph dev --no-browser --port $(STUDIO_PORT)

studio-check: $(STUDIO_VENV)/.installed
	$(STUDIO_ENV) $(STUDIO_VENV)/bin/python -m nexus_lab.llm.studio_check

clean:
	rm -rf .nexus .cache/kafka/node-* .pytest_cache .mypy_cache .ruff_cache
