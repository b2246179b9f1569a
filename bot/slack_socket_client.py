"""The Socket Mode connection of `datathread slack --socket`: slack_sdk's aiohttp client, with each
connection attempt on a fresh URL, its handshake bounded, and `apps.connections.open` bounded.

Why: slack_sdk's `SocketModeClient.connect` (3.47, and its main branch as of this writing: upstream's
fix for the same fault, python-slack-sdk #1379, was in the websocket-client implementation only) asks
`apps.connections.open` for a URL only when it has none, then retries that same URL after every
failure, for ever. Slack's URLs carry a short-lived ticket: one refused connect (at start, or on a
reconnect) left the bot printing "retrying" until it was restarted, `apps.connections.open` never
asked again — measured against the loopback fakes, still not connected 120 s after Slack was
healthy again. Its aiohttp session had aiohttp's 5-minute default: a host that took the connection
and never answered the handshake held each attempt 300 s behind "Slack: connecting…". And
`apps.connections.open` went through Bolt's own client (30 s against a silent Slack), whose failure on
a reconnect the terminal never heard of.

Here a URL is used for one attempt (the next one asks Slack for a new one), the handshake waits at most
HANDSHAKE_TIMEOUT_S, `apps.connections.open` goes through the product's bounded client
(`bot/slack_client.py`), and its failure is one log line the terminal reads as "retrying".
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack_client import SlackCallFailed, failure_words, slack_error

# Module constants, read when used (the ping interval when the client is built): tests shorten them.
HANDSHAKE_TIMEOUT_S = 10.0  # the WebSocket's connect and upgrade; Slack answers in well under a second
PING_INTERVAL_S = 10.0  # Bolt's default: pings, and the wait between two failed attempts
RATE_LIMIT_WAIT_MAX_S = 60.0  # apps.connections.open refused with `ratelimited`: its Retry-After, at most


class FreshUrlSession:
    """The client's aiohttp session, whose `ws_connect` spends the client's URL (the next attempt asks
    for a new one) and is bounded by HANDSHAKE_TIMEOUT_S. Everything else is the session's own."""

    def __init__(self, client: FreshUrlClient, session: aiohttp.ClientSession):
        self.client, self.session = client, session

    async def ws_connect(self, url: str, **kwargs) -> aiohttp.ClientWebSocketResponse:
        self.client.wss_uri = None  # one attempt per URL: its ticket is spent, or it did not work
        bound = HANDSHAKE_TIMEOUT_S
        try:
            async with asyncio.timeout(bound):
                return await self.session.ws_connect(url, **kwargs)
        except TimeoutError:  # said in the client's log line ("Failed to connect (error: …)")
            raise TimeoutError(f"no WebSocket handshake within {bound:g} s") from None

    def __getattr__(self, name: str):  # closed, close(): the session's
        return getattr(self.session, name)


class FreshUrlClient(SocketModeClient):
    """slack_sdk's aiohttp Socket Mode client on a `FreshUrlSession` (the one it makes at start, and
    any it makes again), asking `apps.connections.open` through `web_client`."""

    @property
    def aiohttp_client_session(self) -> FreshUrlSession:
        return self._fresh_urls

    @aiohttp_client_session.setter
    def aiohttp_client_session(self, session: aiohttp.ClientSession | FreshUrlSession) -> None:
        if isinstance(session, FreshUrlSession):
            session = session.session
        self._fresh_urls = FreshUrlSession(self, session)

    async def issue_new_wss_url(self) -> str:
        """A new URL from `apps.connections.open`. A failure is one log line ("Failed to retrieve WSS
        URL: …", which the terminal says as "retrying") and raised on, for the caller's next attempt:
        slack_sdk's own raised AttributeError on an outage's HTTP 500 page (not JSON)."""
        try:
            return (await self.web_client.apps_connections_open(app_token=self.app_token))["url"]
        except SlackApiError as exc:
            reason = slack_error(exc)
            if reason == "ratelimited":  # rare for this method: wait what Slack asks (bounded)
                said = exc.response.headers.get("Retry-After") or exc.response.headers.get("retry-after")
                await asyncio.sleep(min(_seconds(said, 30.0), RATE_LIMIT_WAIT_MAX_S))
        except SlackClientError as exc:  # no answer in time, or no connection
            reason = failure_words(exc)
        self.logger.warning("Failed to retrieve WSS URL: %s", reason)
        raise SlackCallFailed(f"apps.connections.open failed: {reason}")


def _seconds(value, default: float) -> float:
    try:
        return float(value[0] if isinstance(value, list) else value)
    except (TypeError, ValueError, IndexError):
        return default


class SocketHandler(AsyncSocketModeHandler):
    """Bolt's Socket Mode adapter on a `FreshUrlClient`. Bolt's `__init__` builds its own client (and
    that client's session and message task at once), so this one builds ours in its place."""

    def __init__(self, app: AsyncApp, app_token: str, *, logger: logging.Logger, web_client: AsyncWebClient):
        self.app, self.app_token = app, app_token
        self.client = FreshUrlClient(
            app_token=app_token, logger=logger, web_client=web_client, ping_interval=PING_INTERVAL_S
        )
        self.client.socket_mode_request_listeners.append(self.handle)  # type: ignore[arg-type]
