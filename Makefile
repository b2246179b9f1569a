# datathread — the two quickstart commands are `make chat` and `make test`.
PY ?= python3
VENV := .venv
UV := $(VENV)/bin/uv

.PHONY: setup chat test lint bench clean

$(UV):
	$(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check "uv==0.13.9"

# Install exactly what uv.lock pins (the project itself in editable mode, with the dev tools).
setup: $(UV)
	$(UV) sync --frozen --quiet --python $(VENV)/bin/python
	@test -x $(VENV)/bin/datathread

chat: setup
	$(VENV)/bin/datathread chat

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The whole suite: lint, then tests (which start their own throwaway redis-server) on two workers;
# a module whose tests share a module-scoped fixture stays on one worker (tests/conftest.py).
PYTEST_WORKERS ?= 2
PYTEST_ARGS ?=
test: setup lint
	@command -v redis-server >/dev/null || { echo "redis-server missing: installing it"; \
		(apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null; }
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadgroup --durations=10 $(PYTEST_ARGS) tests

bench: setup
	$(VENV)/bin/python -m bench

clean:
	rm -rf $(VENV) .datathread .datathread-test-cache
