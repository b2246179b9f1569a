"""Signing in to send to Teams (bot/teams_login.py): the real botframework-connector and msal against a
fake Microsoft login over HTTPS on loopback (tests/fakes/microsoft_login.py) and the fake Bot Connector.
The path under test is the one every Teams turn takes before its first message: a proactive
`continue_conversation` (here through `run_lost`, which tells a thread that its answer stopped)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from pydantic import SecretStr

from bot import teams_login
from bot.teams_auth import build_bot
from bot.teams_jobs import STOPPED, run_lost
from core.runner import TurnJob
from tests.bot.teams_harness import CHAT, THREAD, activity
from tests.fakes.black_hole import BlackHole
from tests.fakes.bot_connector import FakeConnector
from tests.fakes.microsoft_login import TENANT, FakeLogin

APP_ID = "11111111-2222-3333-4444-555555555555"
SECRET = "app-password-secret"


@pytest.fixture
def connector():
    fake = FakeConnector().start()
    yield fake
    fake.stop()


@pytest.fixture
def login(tmp_path, monkeypatch):
    fake = FakeLogin(tmp_path, client_id=APP_ID, client_secret=SECRET).start()
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(fake.ca_file))  # msal's `requests` trusts the fake
    yield fake
    fake.stop()


def bot_signing_in_at(settings, login_url: str, secret: str = SECRET):
    configured = settings.model_copy(
        update={
            "microsoft_app_id": APP_ID,
            "microsoft_app_password": SecretStr(secret),
            "microsoft_app_type": "MultiTenant",
        }
    )
    return build_bot(configured, login_url=login_url)


def stopped(connector: FakeConnector, conversation: str) -> TurnJob:
    return TurnJob(
        "teams.turn", {"activity": activity(connector.url, "how many flights?", conversation=conversation)}
    )


async def test_turns_share_one_sign_in_and_send_with_its_token(settings, connector, login):
    """The SDK made new credentials, and so a new msal app with an empty cache, for every connector
    client: each turn fetched the login's configuration and a token again, on the event loop."""
    bot = bot_signing_in_at(settings, login.login_url)
    for conversation in (THREAD, CHAT, THREAD):
        await run_lost(bot, None, stopped(connector, conversation))
    assert [body.get("text") for body in connector.sent()] == [STOPPED] * 3
    assert len(login.token_requests()) == 1
    assert [path for method, path, _ in login.requests if method == "GET"] == [
        f"/{TENANT}/v2.0/.well-known/openid-configuration"
    ]
    assert {call.headers.get("Authorization") for call in connector.calls} == {"Bearer fake-access-token-1"}


async def test_a_silent_login_endpoint_costs_its_deadline_not_the_event_loop(
    settings, connector, monkeypatch, caplog
):
    """A login endpoint that takes the connection and never answers (an egress firewall): msal waited
    without a timeout, synchronously on the event loop, so every route of the process stood still.
    Now the send gives up after LOGIN_TIMEOUT_S with one log line, and the loop keeps running."""
    monkeypatch.setattr(teams_login, "LOGIN_TIMEOUT_S", 1.0)
    hole = BlackHole().start()
    # Before the fix the wait had no end: close the hole after 8 s so such code fails here, not hangs.
    guard = threading.Timer(8.0, hole.stop)
    guard.start()
    bot = bot_signing_in_at(settings, f"https://{hole.url.removeprefix('http://')}/{TENANT}")
    gaps: list[float] = []

    async def tick() -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.02)
            gaps.append(time.monotonic() - before)

    ticker = asyncio.create_task(tick())
    started = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="datathread.teams"):
            await run_lost(bot, None, stopped(connector, THREAD))
    finally:
        elapsed = time.monotonic() - started
        ticker.cancel()
        guard.cancel()
        hole.stop()
    assert elapsed < 4.0, elapsed  # the 1 s deadline, with room for a loaded machine
    assert max(gaps) < 0.5, max(gaps)  # the loop never stood still behind the sign-in
    assert connector.sent() == []
    said = [r.getMessage() for r in caplog.records if "nothing could be sent" in r.getMessage()]
    assert len(said) == 1 and "Microsoft sign-in did not answer within 1 s" in said[0], said


async def test_a_refused_sign_in_is_one_line_naming_the_error_and_never_the_secret(
    settings, connector, login, caplog
):
    bot = bot_signing_in_at(settings, login.login_url, secret="a-wrong-secret")
    with caplog.at_level(logging.DEBUG):
        await run_lost(bot, None, stopped(connector, THREAD))
    assert connector.sent() == []
    said = [r.getMessage() for r in caplog.records if "nothing could be sent" in r.getMessage()]
    assert said == [
        f"teams: nothing could be sent to conversation {THREAD}: "
        "Microsoft sign-in refused the app's credentials (invalid_client)"
    ]
    assert "a-wrong-secret" not in caplog.text and SECRET not in caplog.text
    assert login.token_requests()[0]["client_secret"] == "a-wrong-secret"  # it did try, with that secret
