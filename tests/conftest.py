"""Shared fixtures: a scripted Messages API on loopback, settings in a temp home, a real Analyst.

No test can reach a real model: ANTHROPIC_BASE_URL always points at the fake, and the API key is a
dummy. Everything above the network boundary is real (SDK, DuckDB, sandbox processes, SQLite/Redis).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import FakeAnthropic

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


@pytest.fixture
def fake_model():
    fake = FakeAnthropic().start()
    yield fake
    fake.stop()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A DATATHREAD_HOME with the demo warehouse already built (built once per checkout, then copied)."""
    from core.warehouse import build_demo_database

    cached = build_demo_database(DEMO_DB_CACHE / "nycflights13.duckdb")
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
