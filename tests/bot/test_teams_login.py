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
from botbuilder.core import TurnContext
from botbuilder.schema import Activity
from pydantic import SecretStr

from bot import teams_login
from bot.teams_auth import build_bot
from bot.teams_connector import ConnectorFailed
from bot.teams_jobs import STOPPED, run_lost
from bot.teams_out import TeamsOut
from core.runner import TurnJob
from tests.bot.teams_harness import CHAT, THREAD, activity
from tests.fakes.black_hole import BlackHole
from tests.fakes.bot_connector import FakeConnector
from tests.fakes.microsoft_login import TENANT, FakeLogin

APP_ID = "11111111-2222-3333-4444-555555555555"
SECRET = "app-password-secret"


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


class ExpiringLogin(FakeLogin):
    """Its first token is good for one second as msal counts (msal treats a token as expired five
    minutes early); the next request for a token is taken and answered only once `answer` is set."""

    def __init__(self, directory, **kwargs):
        super().__init__(directory, **kwargs)
        self.answer = threading.Event()

    def _token(self, form):
        status, body = super()._token(form)
        if len(self.tokens) == 1:
            body["expires_in"] = body["ext_expires_in"] = 301
        elif len(self.tokens) == 2:
            self.answer.wait(8)
        return status, body


async def test_a_turn_that_outlives_its_token_signs_in_again_off_the_event_loop(
    settings, connector, tmp_path, monkeypatch
):
    """A turn outlived the token fetched as it began: msal fetched the next one inside the SDK's own
    call, synchronously on the event loop, so a silent login froze every turn of the process (twice
    10 s in one turn, in a trial) and the log blamed the Bot Connector. Now each send signs in first,
    off the loop and within LOGIN_TIMEOUT_S, says so when it cannot, and the next send recovers."""
    monkeypatch.setattr(teams_login, "LOGIN_TIMEOUT_S", 1.0)
    login = ExpiringLogin(tmp_path, client_id=APP_ID, client_secret=SECRET).start()
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(login.ca_file))
    bot = bot_signing_in_at(settings, login.login_url)
    question = Activity().deserialize(activity(connector.url, "q?", conversation=THREAD))
    reference = TurnContext.get_conversation_reference(question)
    gaps: list[float] = []
    failed: list[str] = []

    async def tick() -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.02)
            gaps.append(time.monotonic() - before)

    async def turn(context: TurnContext) -> None:
        out = TeamsOut(connector=context.turn_state[bot.connector_key()], reference=reference)
        try:
            await out.send("first")
            await asyncio.sleep(1.2)  # the turn goes on; its token is now inside msal's margin
            ticker = asyncio.create_task(tick())
            try:
                await out.send("second")
            except ConnectorFailed as exc:
                failed.append(exc.why)
            finally:
                ticker.cancel()
            # The login answers the next request. (It still holds the one given up on: answered now, its
            # token could reach msal's cache before the next sign-in looked, or after, a race.)
            await out.send("third")
        finally:
            await context.turn_state[bot.connector_key()].__aexit__(None, None, None)

    try:
        await bot.adapter.continue_conversation(reference, turn, bot_app_id=bot.app_id)
    finally:
        login.answer.set()
        login.stop()
    assert failed == ["Microsoft sign-in did not answer within 1 s"]
    assert max(gaps) < 0.5, max(gaps)  # the loop never stood still behind the sign-in
    assert [body.get("text") for body in connector.sent()] == ["first", "third"]
    assert [call.headers.get("Authorization") for call in connector.calls] == [
        "Bearer fake-access-token-1",
        "Bearer fake-access-token-3",
    ]


async def in_a_turn(bot, connector: FakeConnector, body) -> None:
    """Run `body(out)` inside a proactive turn, as every Teams turn sends: its TeamsOut on the SDK's
    connector client, made by the bot's credential factory (which signs in first)."""
    question = Activity().deserialize(activity(connector.url, "q?", conversation=THREAD))
    reference = TurnContext.get_conversation_reference(question)

    async def turn(context: TurnContext) -> None:
        client = context.turn_state[bot.connector_key()]
        try:
            await body(TeamsOut(connector=client, reference=reference))
        finally:
            await client.__aexit__(None, None, None)

    await bot.adapter.continue_conversation(reference, turn, bot_app_id=bot.app_id)


def counting_sign_ins(monkeypatch) -> list[threading.Thread]:
    """The threads msal's blocking sign-in ran on, one per sign-in that left the event loop."""
    threads: list[threading.Thread] = []
    real = teams_login._token

    def counted(*args, **kwargs):
        threads.append(threading.current_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(teams_login, "_token", counted)
    return threads


async def test_sends_at_the_tokens_expiry_share_one_sign_in_off_the_default_pool(
    settings, connector, tmp_path, monkeypatch
):
    """Every send of every turn signed in on a thread of its own: at the token's expiry N turns sent N
    token requests at once, on the default thread pool, where a silent login kept each thread 10–20 s
    and the session store's calls queued behind them. Now one sign-in at a time per credentials, on a
    daemon thread of its own; whoever waited for it finds its token."""
    login = ExpiringLogin(tmp_path, client_id=APP_ID, client_secret=SECRET).start()
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(login.ca_file))
    bot = bot_signing_in_at(settings, login.login_url)
    threads = counting_sign_ins(monkeypatch)

    async def body(out: TeamsOut) -> None:
        await out.send("first")
        await asyncio.sleep(1.2)  # the token is now inside msal's margin
        asyncio.get_running_loop().call_later(0.3, login.answer.set)  # the login takes a moment
        await asyncio.gather(out.send("a"), out.send("b"), out.update("x", attachments=[]))

    try:
        await in_a_turn(bot, connector, body)
    finally:
        login.answer.set()
        login.stop()
    assert len(login.token_requests()) == 2  # the turn's first token, and one more for all three
    assert sorted(body.get("text") for body in connector.sent()) == ["a", "b", "first"]
    assert [call.headers.get("Authorization") for call in connector.calls][1:] == [
        "Bearer fake-access-token-2"
    ] * 3
    assert threads and all(t.daemon and t.name == "datathread-sign-in" for t in threads), threads


async def test_a_send_with_a_good_token_signs_in_on_no_thread(settings, connector, login, monkeypatch):
    """A good token in msal's cache cost every send and edit a thread hop (and a place in the default
    pool behind any slow one). Now it costs a look at the cache, on the loop."""
    bot = bot_signing_in_at(settings, login.login_url)
    threads = counting_sign_ins(monkeypatch)
    in_turn: list[int] = []

    async def body(out: TeamsOut) -> None:
        in_turn.append(len(threads))  # the turn's own sign-in, made before it began
        card = await out.send("progress", short=True)
        await out.update(card, attachments=[])
        await out.typing()
        await out.send("answer", answer=True)
        in_turn.append(len(threads))

    await in_a_turn(bot, connector, body)
    await in_a_turn(bot, connector, body)  # the next turn finds the process's credentials signed in
    assert in_turn == [1, 1, 1, 1]
    assert len(login.token_requests()) == 1
    texts = [body.get("text") for body in connector.sent() if body.get("type") == "message"]
    assert texts == ["progress", "answer"] * 2


def test_a_token_msal_would_renew_is_not_fresh(login):
    """msal renews a token past its `refresh_on` (a long-lived one, halfway) on the network, inside the
    SDK's call on the loop: such a token is signed in for off the loop, as an expiring one is."""
    from botframework.connector.auth import MicrosoftAppCredentials
    from msal import ConfidentialClientApplication

    credentials = MicrosoftAppCredentials(APP_ID, SECRET, channel_auth_tenant=TENANT)
    assert not teams_login.has_fresh_token(credentials)  # no msal app yet
    credentials.app = ConfidentialClientApplication(
        APP_ID,
        client_credential=SECRET,
        authority=login.login_url,
        validate_authority=False,
    )
    scope = credentials.oauth_scope + "/.default"
    now = time.time()
    credentials.app.token_cache.add(
        {
            "client_id": APP_ID,
            "scope": [scope],
            "token_endpoint": f"{login.login_url}/oauth2/v2.0/token",
            "response": {"access_token": "t", "token_type": "Bearer", "expires_in": 7200, "refresh_in": 3600},
        },
        now=now,
    )
    assert teams_login.has_fresh_token(credentials, now=now)
    assert not teams_login.has_fresh_token(credentials, now=now + 3601)  # msal would renew it
    assert not teams_login.has_fresh_token(credentials, now=now + 7200 - 5 * 60)  # msal's margin


def test_a_token_msal_still_hands_out_is_fresh(login):
    """Counted fresh only past 6 minutes, a token with 5–6 minutes left was "not fresh" for every send
    of that minute, each going to a thread where msal handed back the same token (it takes any with 5
    minutes left), which was still "not fresh". The bound is msal's own, plus seconds."""
    from botframework.connector.auth import MicrosoftAppCredentials
    from msal import ConfidentialClientApplication

    credentials = MicrosoftAppCredentials(APP_ID, SECRET, channel_auth_tenant=TENANT)
    credentials.app = ConfidentialClientApplication(
        APP_ID, client_credential=SECRET, authority=login.login_url, validate_authority=False
    )
    now = time.time()
    credentials.app.token_cache.add(
        {
            "client_id": APP_ID,
            "scope": [credentials.oauth_scope + "/.default"],
            "token_endpoint": f"{login.login_url}/oauth2/v2.0/token",
            "response": {"access_token": "t", "token_type": "Bearer", "expires_in": 600},
        },
        now=now,
    )
    assert teams_login.has_fresh_token(credentials, now=now + 600 - 330)  # msal hands it out
    assert not teams_login.has_fresh_token(credentials, now=now + 600 - 300)  # msal would renew it
