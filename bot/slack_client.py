"""The Slack Web API client: built from settings, one per process, closed at shutdown; and answers
through a command's response_url on its connections."""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

import aiohttp
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from core.config import Settings
from core.wording import os_reason

log = logging.getLogger("datathread.slack")

# A response_url's whole POST; Slack answers one in well under a second. The webhook client's own
# timeout covers only a session it makes itself: on the shared one, aiohttp's 5-minute default held
# the job that long against a response_url that took the connection and never answered.
RESPONSE_URL_TIMEOUT_S = 10.0


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


async def answer_via_response_url(client: AsyncWebClient, url: str, *, what: str, **body) -> bool:
    """POST `body` to a slash command's response_url; True when Slack took it
    (https://docs.slack.dev/interactivity/handling-user-interaction#message_responses). Otherwise the
    person heard nothing, which only this log line can tell whoever runs datathread: `what` was lost,
    and why (the HTTP status, the network failure, the timeout). The URL stays out of the log: for
    half an hour it lets anyone post to that person."""
    hook = AsyncWebhookClient(url, session=client.session)
    host = urlsplit(url).hostname or "?"
    try:
        async with asyncio.timeout(RESPONSE_URL_TIMEOUT_S):
            resp = await hook.send(**body)
    except TimeoutError:
        why = f"{host} did not answer within {RESPONSE_URL_TIMEOUT_S:g} s"
    except (aiohttp.ClientError, OSError) as exc:
        why = f"{host} could not be reached ({os_reason(exc) or type(exc).__name__})"
    else:
        if 200 <= resp.status_code < 300:
            return True
        said = ((resp.body or "").strip().splitlines() or [""])[0][:100]
        why = f"{host} answered HTTP {resp.status_code} {said}".rstrip()
    log.warning("%s did not reach the person through the command's response_url: %s", what, why)
    return False
