# datathread — the two quickstart commands are `make chat` and `make test`.
PY ?= python3
VENV := .venv
UV := $(VENV)/bin/uv

.PHONY: setup chat test lint bench clean redis-server venv-stale

# What an interpreter is, in three words: `ok` or `old` (datathread needs 3.11+), its version, and
# the file it really runs (symlinks and pyenv's shims followed); nothing when it does not run. The
# venv's python is asked once per make run (~10 ms: -S, no site); PY only when it is named or a venv
# is to be made (PY_IS is worked out on first use, then kept), since pyenv's shim alone costs ~80 ms
# — an unchanged `make setup` stays fast.
PROBE := -E -S -c 'import os, sys; print("ok" if sys.version_info >= (3, 11) else "old", "%d.%d.%d" % sys.version_info[:3], os.path.realpath(sys.executable))'
PY_IS = $(eval PY_IS := $(shell $(PY) $(PROBE) 2>/dev/null))$(PY_IS)
VENV_IS := $(if $(wildcard $(VENV)/pyvenv.cfg),$(shell $(VENV)/bin/python $(PROBE) 2>/dev/null))
comma := ,
PY_NAMED := $(filter command line environment environment override,$(origin PY))

# The venv is made again, saying why, when its python no longer runs (the interpreter was removed or
# upgraded away), is older than 3.11 (a venv left by an older setup, or an editor), or — where PY is
# named — is another interpreter than PY: an existing venv silently ignored PY, so `make chat
# PY=python3.11` after a failed `make setup PY=python3.10` failed with uv's "incompatible" error, and
# a 3.13 venv ran on under PY=python3.12. Without PY any working venv is kept, whichever PY made it.
VENV_STALE := $(if $(wildcard $(VENV)/pyvenv.cfg),$(strip \
	$(if $(VENV_IS),,$(VENV)'s python no longer runs (its interpreter was removed?)) \
	$(if $(and $(PY_NAMED),$(if $(PY_IS),,no)),PY=$(PY) does not run) \
	$(if $(filter old,$(word 1,$(VENV_IS))),$(VENV) is Python $(word 2,$(VENV_IS))$(comma) older than the 3.11 datathread needs) \
	$(if $(and $(PY_NAMED),$(PY_IS),$(filter ok,$(word 1,$(VENV_IS))),$(filter-out $(word 3,$(PY_IS)),$(word 3,$(VENV_IS)))),\
		$(VENV) is Python $(word 2,$(VENV_IS)) ($(word 3,$(VENV_IS)))$(comma) not PY=$(PY) ($(word 2,$(PY_IS))))))

# PY must run and be 3.11+ before anything is made: Python 3.10 got a venv and uv (20 s) and then
# uv's own error under echoed recipe lines, and left that venv behind. The way out names a newer
# python found on the PATH, where there is one.
NEWER_PY = $(firstword $(foreach v,3.14 3.13 3.12 3.11,$(shell python$(v) -E -S -c '' >/dev/null 2>&1 && echo python$(v))))
RUN_AGAIN = run make $(or $(MAKECMDGOALS),setup) PY=$(or $(NEWER_PY),python3.11)$(if $(NEWER_PY),, after installing it)
CHECK_PY = $(if $(PY_IS),$(if $(filter old,$(word 1,$(PY_IS))),\
	echo "error: datathread needs Python 3.11 or newer; PY=$(PY) is $(word 2,$(PY_IS)); $(RUN_AGAIN)." >&2; exit 2,:),\
	echo "error: PY=$(PY) is not a Python that runs here; $(RUN_AGAIN)." >&2; exit 2)

# uv keeps what it downloads in $XDG_CACHE_HOME/uv, else ~/.cache/uv. A container running as an
# arbitrary uid (HOME=/, read-only) failed there: "Failed to initialize cache at /.cache/uv …
# Permission denied". Where that folder, or the nearest one above it that exists, is not writable
# and UV_CACHE_DIR is not set, the cache goes inside the venv (`make clean` removes it with the venv).
ifeq ($(UV_CACHE_DIR),)
UV_HOME_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/uv
ifeq ($(shell d='$(UV_HOME_CACHE)'; until [ -e "$$d" ]; do d=$$(dirname "$$d"); done; [ -d "$$d" ] && [ -w "$$d" ] && [ -x "$$d" ] && echo yes),)
export UV_CACHE_DIR := $(abspath $(VENV))/.uv-cache
endif
endif

venv-stale:
	@$(CHECK_PY)
	@echo "$(VENV_STALE): making it again with PY=$(PY)." >&2
	rm -rf $(VENV)

# The venv gets no pip of its own (seeding it costs seconds of CPU and uv does the installing): the
# interpreter's pip installs uv into it, or, where there is none, the venv's own pip after all.
$(UV): $(if $(VENV_STALE),venv-stale)
	@$(CHECK_PY)
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

$(VENV)/.bytecode: uv.lock $(if $(VENV_STALE),venv-stale) | $(UV)
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
