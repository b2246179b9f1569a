"""Fixtures shared by the surface tests: `teams`, the Teams app on a fake Bot Connector; `model` and
`slack_api`, a module's own scripted Messages API and fake Slack Web API (for modules that run their
own `datathread serve`); `api`, a test's own fake Slack Web API."""

from __future__ import annotations

import pytest

from tests.bot.teams_harness import serve_teams
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.bot_connector import FakeConnector
from tests.fakes.slack_api import FakeSlackAPI


@pytest.fixture
async def teams(settings):
    async with serve_teams(settings) as harness:
        yield harness


@pytest.fixture(scope="module")
def model():
    fake = FakeAnthropic().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def slack_api():
    fake = FakeSlackAPI().start()
    yield fake
    fake.stop()


@pytest.fixture
def api():
    fake = FakeSlackAPI().start()
    yield fake
    fake.stop()


@pytest.fixture
def connector():
    """The fake Bot Connector on loopback (OpenID metadata, signing keys, the conversations API)."""
    fake = FakeConnector().start()
    yield fake
    fake.stop()
