"""The Socket Mode connection when Slack's WebSocket host has trouble: the real slack_sdk client (as
`datathread slack --socket` builds it) against the fake Web API and the fake Socket Mode server on
loopback. Every failed attempt must ask `apps.connections.open` for a fresh URL (Slack's URLs carry a
short-lived ticket: slack_sdk retried the same one for ever), a handshake nobody answers must not hold
an attempt for aiohttp's 5 minutes, and the terminal must hear "retrying" while a reconnect fails."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from pydantic import SecretStr
from slack_bolt.async_app import AsyncApp

from bot import slack_client, slack_socket_client
from bot.slack_socket import ConnectionStates, socket_handler
from tests.fakes.black_hole import BlackHole
from tests.fakes.redis_server import free_port
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_socket_mode import FakeSocketMode

LINES = {"connected": "connected", "retrying": "retrying", "lost": "lost"}


class FirstUrls(FakeSlackAPI):
    """`apps.connections.open` hands out `first`'s URLs in turn, then `connections_url`."""

    def __init__(self, *first: str) -> None:
        super().__init__()
        self.first = list(first)

    def respond(self, method: str, args: dict) -> dict:
        if method == "apps.connections.open" and self.first:
            return {"ok": True, "url": self.first.pop(0)}
        return super().respond(method, args)


def refused_url() -> str:
    """A loopback port nobody listens on: connections to it are refused."""
    return f"ws://127.0.0.1:{free_port()}/link/"


@pytest.fixture(autouse=True)
def short_bounds(monkeypatch):
    monkeypatch.setattr(slack_socket_client, "HANDSHAKE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(slack_socket_client, "PING_INTERVAL_S", 0.2)
    monkeypatch.setattr(slack_client, "SEND_TIMEOUT_S", 0.5)


@pytest.fixture
def socket_mode():
    fake = FakeSocketMode().start()
    yield fake
    fake.stop()


async def connect(api: FakeSlackAPI, tmp_path, said: list[str]):
    """The handler `slack --socket` builds, its states said into `said`; connecting in a task."""
    from core.config import load_settings

    settings = load_settings(
        _env_file=None,
        home=tmp_path,
        slack_app_token=SecretStr("xapp-test-000000"),
        slack_api_url=api.url,
    )
    log = logging.getLogger(f"test.socket.{id(said)}")
    log.setLevel(logging.INFO)
    log.addHandler(ConnectionStates(said.append, LINES))
    app = AsyncApp(token="xoxb-test-000000", signing_secret="s")
    handler = socket_handler(app, settings, log)
    return handler, asyncio.create_task(handler.connect_async())


async def until(predicate, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
    return time.monotonic() - start


async def test_a_refused_url_at_start_is_followed_by_a_fresh_one(tmp_path, socket_mode):
    api = FirstUrls(refused_url()).start()
    socket_mode.attach(api)
    said: list[str] = []
    handler, connecting = await connect(api, tmp_path, said)
    try:
        await until(lambda: socket_mode.open_connections(), 3, "a connection on the fresh URL")
        await asyncio.wait_for(connecting, 2)
        assert len(api.of("apps.connections.open")) == 2
        assert said == ["retrying", "connected"]
    finally:
        await handler.close_async()
        api.stop()


async def test_a_handshake_nobody_answers_is_given_up_and_a_fresh_url_asked(tmp_path, socket_mode):
    hole = BlackHole().start()
    api = FirstUrls(hole.url.replace("http://", "ws://") + "/link/").start()
    socket_mode.attach(api)
    said: list[str] = []
    handler, connecting = await connect(api, tmp_path, said)
    try:
        waited = await until(lambda: socket_mode.open_connections(), 3, "a connection after the black hole")
        await asyncio.wait_for(connecting, 2)
        assert len(hole.accepted_at) == 1 and waited < 2  # the 0.5 s bound, a 0.2 s pause, a new URL
        assert said == ["retrying", "connected"]
    finally:
        await handler.close_async()
        api.stop()
        hole.stop()


async def test_a_reconnect_to_a_refused_url_gets_a_fresh_one(tmp_path, socket_mode):
    api = FakeSlackAPI().start()
    socket_mode.attach(api)
    said: list[str] = []
    handler, connecting = await connect(api, tmp_path, said)
    try:
        await asyncio.wait_for(connecting, 3)
        api.connections_url = refused_url()  # Slack's WebSocket host has trouble for a moment
        socket_mode.drop()
        await until(lambda: said[-1:] == ["retrying"], 3, "'retrying' said")
        asked = len(api.of("apps.connections.open"))
        socket_mode.attach(api)  # healthy again
        await until(lambda: said[-1:] == ["connected"], 3, "connected again")
        assert len(api.of("apps.connections.open")) > asked
        assert said == ["connected", "lost", "retrying", "connected"]
    finally:
        await handler.close_async()
        api.stop()


async def test_a_silent_slack_on_reconnect_is_bounded_and_said(tmp_path, socket_mode):
    """apps.connections.open taken and never answered: Bolt's client waited 30 s each time and the
    terminal said only "connection lost; reconnecting…"."""
    api = FakeSlackAPI().start()
    socket_mode.attach(api)
    said: list[str] = []
    handler, connecting = await connect(api, tmp_path, said)
    try:
        await asyncio.wait_for(connecting, 3)
        api.silent.add("apps.connections.open")
        opened = socket_mode.opened
        socket_mode.drop()
        await until(lambda: said[-1:] == ["retrying"], 3, "'retrying' said")
        api.silent.discard("apps.connections.open")
        await until(lambda: socket_mode.opened > opened, 3, "reconnected")
        await until(lambda: said[-1:] == ["connected"], 1, "connected said")
        assert said == ["connected", "lost", "retrying", "connected"]
    finally:
        await handler.close_async()
        api.stop()
