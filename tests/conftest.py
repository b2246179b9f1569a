"""Shared fixtures: a scripted Messages API on loopback, settings in a temp home, a real Analyst.

No test can reach a real model: ANTHROPIC_BASE_URL always points at the fake, and the API key is a
dummy. Everything above the network boundary is real (SDK, DuckDB, sandbox processes, SQLite/Redis).
A core built inside a test borrows this process's started fork server when its settings ask for
exactly what that one gives (tests/shared_sandbox.py); mark a test `own_sandbox` to give it its own.
No test leaves environment variables behind for the next module.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.cli import terminal_signals
from tests.shared_sandbox import SandboxLender

# Never let a test talk to a real service by accident.
for _var in (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "REDIS_URL",
    "MICROSOFT_APP_ID",
    "MICROSOFT_APP_PASSWORD",
    "GOOGLE_APPLICATION_CREDENTIALS",
):
    os.environ.pop(_var, None)
os.environ["ANTHROPIC_BASE_URL"] = "http://127.0.0.1:9"  # a closed port unless a test sets its fake

DEMO_DB_CACHE = Path(__file__).resolve().parent.parent / ".datathread-test-cache"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "own_sandbox: build this test's core with its own fork server")


def demo_database() -> Path:
    """The demo warehouse of this checkout, built once even when several test processes start together."""
    from core.warehouse import build_demo_database

    target = DEMO_DB_CACHE / "nycflights13.duckdb"
    if target.exists():
        return target
    DEMO_DB_CACHE.mkdir(parents=True, exist_ok=True)
    with open(DEMO_DB_CACHE / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other processes wait, then find it built
        return build_demo_database(target)


# The slowest modules (subprocesses, worker processes, several fork servers, real timeouts), slowest
# first, by their tests' summed `--durations=0` (docs/BENCHMARKS.md; every module of 2 s or more,
# measured 2026-11-27 on a quiet 2-core machine). `make test` runs whole modules on
# each worker in collection order (`--dist loadfile --no-loadscope-reorder`): a slow module started
# last is the suite's tail, so these start first and the many short modules fill in behind them.
# Order only: a module missing here runs.
SLOW_FIRST = (
    "tests/bot/test_terminal_chat.py",
    "tests/bot/test_serve_process.py",
    "tests/bot/test_slack_socket_mode.py",
    "tests/bot/test_slack_socket_stop.py",
    "tests/core/test_store.py",
    "tests/core/hostile/test_hostile_quota.py",
    "tests/core/test_isolation.py",
    "tests/bot/test_teams.py",
    "tests/bot/test_turn_workers_redis.py",
    "tests/bot/test_turn_workers.py",
    "tests/bot/test_cli_disk.py",
    "tests/bot/test_replicas.py",
    "tests/bot/test_cli_settings.py",
    "tests/bot/test_slack_start.py",
    "tests/bot/test_redis_outage.py",
    "tests/core/hostile/test_hostile_python.py",
    "tests/core/test_workspace_overlay.py",
    "tests/bot/test_cli_schedule.py",
    "tests/bot/test_cli_eval_stop.py",
    "tests/bot/test_cli_checks_first.py",
    "tests/core/test_sandbox_listing.py",
    "tests/core/test_spare_failures.py",
    "tests/core/test_turns.py",
    "tests/bot/test_doctor.py",
    "tests/core/hostile/test_hostile_sql.py",
    "tests/bot/test_cli.py",
    "tests/bench/test_bench_turn.py",
    "tests/core/test_pid_namespace.py",
    "tests/core/hostile/test_hostile_steps.py",
    "tests/core/test_bigquery.py",
    "tests/bot/test_slack_streaming.py",
    "tests/core/test_runner_workers.py",
    "tests/bot/test_slack_app.py",
    "tests/bot/test_cli_turns.py",
    "tests/deploy/test_modal_app.py",
    "tests/bot/test_cli_sessions.py",
    "tests/core/test_eval_runner.py",
    "tests/bot/test_cli_eval.py",
    "tests/core/test_store_disk.py",
    "tests/core/test_steps_warm.py",
    "tests/core/test_schedules_tick.py",
    "tests/core/test_s3.py",
    "tests/core/test_prepared_runner.py",
    "tests/bot/test_schedule_slack.py",
    "tests/core/test_notebook.py",
    "tests/bot/test_slack_socket.py",
    "tests/core/test_fresh_root.py",
    "tests/bot/test_teams_auth.py",
    "tests/core/test_agent.py",
    "tests/bot/test_attached_csv.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow modules first (see SLOW_FIRST); the order inside a module stays as written."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(scope="module", autouse=True)
def _environment_restored():
    """Whatever a module puts in os.environ (even from a module-scoped fixture) is gone after it."""
    before = dict(os.environ)
    yield
    for key in set(os.environ) - set(before):
        del os.environ[key]
    os.environ.update(before)


@pytest.fixture(scope="session")
def sandbox_lender(tmp_path_factory):
    lender = SandboxLender(tmp_path_factory.getbasetemp(), demo_database())
    yield lender
    lender.close()


@pytest.fixture(autouse=True)
def _shared_sandbox(request, sandbox_lender):
    """Cores built during the test (Analyst.create, create_app, build_parts) borrow the shared fork
    server when their settings fit it; module-scoped fixtures, built before this, keep their own."""
    if request.node.get_closest_marker("own_sandbox"):
        yield
        return
    import core.sandbox_factory as factory

    own = factory.build_sandbox_and_warehouse

    async def build(settings, *, start: bool = True):
        if sandbox_lender.fits(settings):  # already started, whatever `start` asks
            return await sandbox_lender.build(settings)
        return await own(settings, start=start)

    factory.build_sandbox_and_warehouse = build
    try:
        yield
    finally:
        factory.build_sandbox_and_warehouse = own
        sandbox_lender.after_test()


@pytest.fixture
def fake_model():
    fake = FakeAnthropic().start()
    yield fake
    fake.stop()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A DATATHREAD_HOME with the demo warehouse already built (built once per checkout, then linked)."""
    cached = demo_database()
    target = tmp_path / "home" / "warehouse" / "nycflights13.duckdb"
    target.parent.mkdir(parents=True)
    os.link(cached, target) if cached.stat().st_dev == target.parent.stat().st_dev else target.write_bytes(
        cached.read_bytes()
    )
    return tmp_path / "home"


@pytest.fixture
def settings(home: Path, fake_model: FakeAnthropic):
    from core.config import load_settings

    return load_settings(
        _env_file=None,
        anthropic_api_key="sk-ant-test-key-000000",
        anthropic_base_url=fake_model.url,
        home=home,
        step_timeout=20,
        model_retries=2,
        model="claude-test",
        turn_workers=0,  # in-process turns; tests of the worker processes ask for them
    )


@pytest.fixture
async def analyst(settings):
    from core.analyst import Analyst

    a = await Analyst.create(settings)
    yield a
    await a.close()


class Recorder:
    """An EventSink that keeps every event, for assertions."""

    def __init__(self) -> None:
        self.events: list = []

    async def __call__(self, event) -> None:
        self.events.append(event)

    def of(self, kind: str) -> list:
        return [e for e in self.events if e.kind == kind]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def ctrl_c_as_a_terminal_has_it():
    """Ctrl-C and a closing window as an interactive terminal has them, for the whole test
    (tests/fakes/cli.py's `terminal_signals` says why). Earlier tests may leave another handler (a server's)."""
    with terminal_signals():
        yield
