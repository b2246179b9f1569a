# datathread — the two quickstart commands are `make chat` and `make test`.
PY ?= python3
VENV := .venv
UV := $(VENV)/bin/uv

.PHONY: setup chat test lint bench clean redis-server

# The venv gets no pip of its own (seeding it costs seconds of CPU and uv does the installing): the
# interpreter's pip installs uv into it, or, where there is none, the venv's own pip after all.
$(UV):
	$(PY) -m venv --without-pip $(VENV)
	$(PY) -m pip --python $(VENV)/bin/python install --quiet --disable-pip-version-check "uv==0.13.9" 2>/dev/null \
		|| { $(VENV)/bin/python -m ensurepip --default-pip >/dev/null \
		&& $(VENV)/bin/python -m pip install --quiet --disable-pip-version-check "uv==0.13.9"; }

# Install exactly what uv.lock pins (the project itself in editable mode, with the dev tools), then
# cache the bytecode of what datathread imports. Where PYTHONDONTWRITEBYTECODE is set (as on CI
# machines and in every sandbox step) Python never caches what it compiles, so without this each
# process - every test worker, `datathread` subprocess and sandbox fork server - compiled pandas,
# matplotlib and the SDKs from source again: 9 s of CPU for `datathread ask` to say the key is
# missing, 4 s for a fork server. One process imports what the bot, the CLI and the fork server load,
# with bytecode writing on (~4,800 modules, 8 s; matplotlib's font cache stays in the venv), instead
# of compiling all of site-packages (~10,800 modules, 18 s on two cores, 40% of it never imported
# here); `make test` writes the rest (test-only libraries: moto, ipykernel, ...) as the suite first
# imports them. pytest's rewritten test modules are cached the same way (tests/assert_cache.py): 5 s
# of CPU per test process otherwise.
setup: $(UV) $(VENV)/.bytecode
	$(UV) sync --frozen --quiet --python $(VENV)/bin/python
	@test -x $(VENV)/bin/datathread
	@$(VENV)/bin/python -m compileall -q -j 0 bot core deploy tests bench >/dev/null
	@$(VENV)/bin/python -m tests.assert_cache

$(VENV)/.bytecode: uv.lock | $(UV)
	$(UV) sync --frozen --quiet --python $(VENV)/bin/python
	env -u PYTHONDONTWRITEBYTECODE MPLCONFIGDIR=$(VENV)/.matplotlib $(VENV)/bin/python -c "import bot.cli, bot.server, core.zygote; core.zygote.preload()"
	@touch $@

chat: setup
	$(VENV)/bin/datathread chat

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The whole suite: lint, then tests (which start their own throwaway redis-server) on two workers.
# Each test module runs whole on one worker: its module-scoped fixtures are built once, and its
# tests, which reuse thread keys, never run steps of one session id at once (two such steps share a
# sandbox uid and cgroup, and one step's end-of-step cleanup would kill the other's processes).
# Modules go out in collection order, which tests/conftest.py starts with the slowest ones; xdist's
# default reorder (most tests first) would start the slow few-test worker and CLI modules last.
# Three workers on two cores: the suite waits a good part of its time on real clocks (throttles,
# time limits, lock TTLs) and on subprocesses, and a third worker fills those waits. (With turn
# workers started as `python -m`, each paying ~3 s of imports, a third worker cost more CPU than it
# filled; forked from one template (core/worker_fork.py) they do not.) Same clone, quiet machine:
# -n 2 185 s, -n 3 145 s, -n 4 143 s.
# The suite caches the bytecode of what it imports beyond `make setup`'s set (see there): each
# test-only library is compiled once, not once per worker and subprocess.
PYTEST_WORKERS ?= 3
PYTEST_ARGS ?=
test: setup lint
	@command -v redis-server >/dev/null || $(MAKE) --no-print-directory redis-server
	env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=10 $(PYTEST_ARGS) tests

# Only root (or passwordless sudo) can install it; anyone else is told how, in one sentence.
redis-server:
	@if [ "$$(id -u)" = 0 ]; then as=; elif sudo -n true 2>/dev/null; then as=sudo; else \
		echo "error: the tests need redis-server, which is not installed; install it (sudo apt-get install redis-server, or brew install redis), then run make test again." >&2; exit 2; fi; \
	echo "redis-server missing: installing it"; \
	($$as apt-get update -qq && $$as apt-get install -y -qq redis-server) >/dev/null 2>&1 || { \
		echo "error: could not install redis-server with apt-get; install it, then run make test again." >&2; exit 2; }

bench: setup
	$(VENV)/bin/python -m bench

clean:
	rm -rf $(VENV) .datathread .datathread-test-cache
