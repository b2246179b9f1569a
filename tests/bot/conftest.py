"""Fixtures shared by the surface tests: `teams`, the Teams app on a fake Bot Connector."""

from __future__ import annotations

import pytest

from tests.bot.teams_harness import serve_teams


@pytest.fixture
async def teams(settings):
    async with serve_teams(settings) as harness:
        yield harness
