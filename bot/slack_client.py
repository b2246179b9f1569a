"""The Slack Web API client: built from settings, one per process, closed at shutdown."""

from __future__ import annotations

import aiohttp
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from core.config import Settings


def build_client(settings: Settings, session: aiohttp.ClientSession | None = None) -> AsyncWebClient:
    """The Web API client: the bot token, `DATATHREAD_SLACK_API_URL`, retries on HTTP 429."""
    token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None
    client = AsyncWebClient(token=token, base_url=settings.slack_api_url, session=session)
    client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=2))
    return client


class SharedClient:
    """This process's one client. One aiohttp session keeps connections alive across calls and turns;
    without it slack_sdk opens a new session (and TCP connection) for every single API call."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._client: AsyncWebClient | None = None

    def get(self) -> AsyncWebClient:
        client = self._client
        if client is None or client.session is None or client.session.closed:
            client = self._client = build_client(self.settings, aiohttp.ClientSession())
        return client

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and client.session is not None:
            await client.session.close()
