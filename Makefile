# Quick start: `make demo` runs the bundled suite with the oracle agent; `make test` runs every check.
# While editing: `make check` (lint, types and the fast tests; needs only the venv, installs nothing else).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check lint typecheck unit bench clean fmt browser agents ray-tools sandbox containers

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "worktrial needs Python 3.11 or newer")'
	@command -v git >/dev/null || (command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq git)
	@command -v npm >/dev/null || (command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq nodejs npm)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,ray]'
	@touch $@

# The demo needs worktrial alone (no test tools, no Ray) and bubblewrap, so the first run a newcomer sees is
# sandboxed; `make test` later adds the rest to the same venv.
DEMO_STAMP := $(VENV)/.installed-demo

$(DEMO_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "worktrial needs Python 3.11 or newer")'
	@command -v git >/dev/null || (command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq git)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

demo: $(DEMO_STAMP) sandbox
	$(BIN)/worktrial eval --suite suites/smoke-workspace-basics.json --agent oracle --trust
	@echo "worktrial: the run as a page: $$($(BIN)/worktrial view)"

lint: $(STAMP)
	$(BIN)/ruff check src tests $(wildcard benchmarks)
	$(BIN)/ruff format --check src tests $(wildcard benchmarks)
	PYTHONPATH=src $(BIN)/lint-imports  # this checkout's code, whatever checkout the venv's editable install names

fmt: $(STAMP)
	$(BIN)/ruff format src tests $(wildcard benchmarks)
	$(BIN)/ruff check --fix src tests $(wildcard benchmarks)

# mypy's cache lives in the venv: kept across `make clean` and `git clean`, shared by the checkouts (worktrees) that
# use the venv, so a type check after an edit re-checks what the edit touched, not the whole tree (~20 s, not minutes).
MYPY_CACHE ?= $(VENV)/.mypy_cache

typecheck: $(STAMP)
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)

# $(call ensure,WHAT,COMMANDS,DEBIAN PACKAGES,WHAT HAPPENS WITHOUT): one line either way, saying what is installed
# already or what is being installed now (apt-get only then: a second `make test` installs nothing). No commas in the
# arguments (make splits on them).
define ensure
	@missing=""; for c in $(2); do command -v $$c >/dev/null 2>&1 || missing="$$missing $$c"; done; \
	if [ -z "$$missing" ]; then echo "make: $(1): installed ($(2))"; \
	else echo "make: $(1): installing $(3) with apt-get (missing:$$missing)"; \
		{ command -v apt-get >/dev/null && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends $(3) >/dev/null; } || echo "make: warning: $(1) could not be installed; $(4)"; fi
endef

# The real agent CLIs the presets are tested against, pinned in tests/real_agents/versions.toml and cached outside
# the checkout (a no-op when already installed). `pytest -m agents` runs just their end-to-end tests.
agents: $(STAMP)
	@command -v npm >/dev/null || (command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq nodejs npm)
	$(BIN)/python -m tests.real_agents.install

# The view tests drive Debian's chromium (never a downloaded browser build); installed once, skipped when present.
browser:
	$(call ensure,browser,chromium,chromium,the browser tests will be skipped)

# Attempts run in a bubblewrap sandbox (Debian's package), each on a network of its own through slirp4netns; the
# sandbox tests use --sandbox on and need both.
sandbox:
	$(call ensure,sandbox,bwrap slirp4netns,bubblewrap slirp4netns,attempts will run unsandboxed or share the network)

# The Ray tests contain their cluster in network and PID namespaces: unshare/nsenter (util-linux) and ip (iproute2).
ray-tools:
	$(call ensure,ray-tools,ip nsenter,iproute2 util-linux,the Ray cluster tests will be skipped)

# Container tasks (docs/environments.md) run under Podman (runc: crun cannot run on cgroups v1 hybrid hosts) on a
# base image built offline from Debian's busybox-static (no registry is contacted), and the presets' tests on a
# Debian image mmdebstrap makes from the package mirror (about a minute to 8, cached in ~/.cache/worktrial-images).
containers:
	$(call ensure,containers,podman runc busybox docker-registry catatonit,podman runc busybox-static docker-registry catatonit,the container tests will be skipped)
	@! command -v podman >/dev/null || examples/harbor/build-base-image.sh podman \
		|| echo "make: warning: the example base image could not be built; the container tests will be skipped"
	$(call ensure,debian-image tools,mmdebstrap,mmdebstrap,the preset-in-a-container tests will be skipped)
	@! command -v podman >/dev/null || examples/harbor/build-debian-image.sh podman \
		|| echo "make: warning: the Debian image could not be built; the preset-in-a-container tests will be skipped"

unit: $(STAMP) browser agents ray-tools sandbox containers
	$(BIN)/pytest -q

# Everything, as CI runs it (.ci/run): installs the agent CLIs, the browser, bubblewrap, the Ray tools and Podman first.
test: lint typecheck unit

# The edit loop: lint, types and the tests that need none of those installs and take at most a few seconds each.
# What it leaves out (the markers in pyproject.toml) runs in `make test`.
FAST_TESTS := not slow and not agents and not ray and not browser and not container and not pty

# The fast tests on every core (pytest-xdist): they wait on processes more than they compute.
check: lint typecheck
	$(BIN)/pytest -q -n auto -m "$(FAST_TESTS)"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/setup_once.py
