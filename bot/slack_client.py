"""The Slack Web API client: built from settings, one per process, closed at shutdown, every call
bounded in time; and answers through a command's response_url on its connections.

Why bounded here: slack_sdk's `timeout` (30 s) applies only to a session it makes itself, one per
call. The process's client shares one aiohttp session (`SharedClient`), and a bare session waits
aiohttp's default 5 minutes: measured with a Web API that took the connection and never answered,
`schedule run-now` sat silent 300 s and then printed a traceback; under `serve` and `slack --socket`
one such call held its turn (and the thread's session lock) as long. So every call goes through
`BoundedWebClient`, whose `timeout` bounds the whole call, retries and Retry-After waits included, on
any session; a timed-out call is never repeated (Slack may have posted it). A call that fails without
Slack's answer raises `SlackCallFailed` — a `SlackClientError`, so whatever already handles Slack's
refusals handles it too — whose message is one line for the log. As for Teams' Bot Connector
(`bot/teams_connector.py`): a message someone should read waits SEND_TIMEOUT_S; decoration (the time
zone lookup, "is thinking…", progress and its edits) waits PROGRESS_TIMEOUT_S through `quick(client)`.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import enum
import logging
import math
from urllib.parse import urlsplit

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.slack_pacing import WorkspacePacer
from core.config import Settings
from core.wording import os_reason

log = logging.getLogger("datathread.slack")
# The clients' own logger. slack_sdk logs its requests, and each retry at INFO, when that logger's own
# level lets DEBUG through (its NOTSET default does): under `serve` each failed call was two lines, the
# SDK's "A retry handler found…" and ours. Our line says what was lost and why.
SDK_LOG = logging.getLogger("datathread.slack.sdk")
SDK_LOG.setLevel(logging.INFO)

# Module constants, read when a client is built (`quick`: at each call): tests shorten them. There is
# no setting: Slack answers in well under a second; these only decide how soon a silent one is given up.
CONNECT_TIMEOUT_S = 5.0  # to open the connection
PROGRESS_TIMEOUT_S = 5.0  # decoration: time zone, status, progress and its edits; the turn goes on
SEND_TIMEOUT_S = 10.0  # a message someone should read: the answer, a header, a notice, a reply
RETRY_AFTER_MAX_S = 5.0  # a call refused with HTTP 429 waits at most this long for its next try
RATE_LIMIT_RETRIES = 8  # tries after a 429, each only if its wait fits in what is left of the call's bound
UPLOAD_MIN_BYTES_PER_S = 1_000_000  # a file's upload: its three calls' bounds plus a second per MB

# A response_url's whole POST; Slack answers one in well under a second. The webhook client's own
# timeout covers only a session it makes itself: on the shared one, aiohttp's 5-minute default held
# the job that long against a response_url that took the connection and never answered.
RESPONSE_URL_TIMEOUT_S = 10.0


class SlackCallFailed(SlackClientError):
    """A Web API call that got no answer from Slack: not in time, or no connection. Its message is
    one line for the log and for `schedule run-now` (no token, no URL path). `unsure`: the call was
    sent and not answered in time, so Slack may have taken it (a message may be showing)."""

    def __init__(self, message: str, *, unsure: bool = False):
        super().__init__(message)
        self.unsure = unsure


class Posted(enum.Enum):
    """What became of a POST to a response_url; true only when Slack took it."""

    TAKEN = "taken"
    REFUSED = "refused"  # an HTTP error, or no connection: the person did not see it
    UNSURE = "unsure"  # no answer in time: Slack may have shown it

    def __bool__(self) -> bool:
        return self is Posted.TAKEN


# Slack's error codes as a note in the thread says them (the log keeps the code).
SAID_TO_PEOPLE = {
    "not_in_channel": "I'm not a member of this channel",
    "channel_not_found": "I can't see this channel",
    "is_archived": "the channel is archived",
    "restricted_action": "posting in this channel is restricted",
    "restricted_action_read_only_channel": "this channel is read-only",
    "restricted_action_thread_only_channel": "this channel takes replies in threads only",
    "restricted_action_non_threadable_channel": "this channel takes no replies in threads",
    "ratelimited": "Slack asked me to slow down",
    "file_upload_size_exceeded": "it is too large for Slack",
}
# Refusals that say the bot cannot post where it was asked (chat.postMessage's errors,
# https://docs.slack.dev/reference/methods/chat.postMessage#errors), as opposed to refusing one message.
CANNOT_POST_HERE = frozenset(
    {
        "not_in_channel",
        "channel_not_found",
        "is_archived",
        "restricted_action",
        "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel",
        "restricted_action_non_threadable_channel",
        "cannot_reply_to_message",
        "team_access_not_granted",
        "ekm_access_denied",
    }
)


def slack_error(exc: SlackApiError) -> str:
    """Slack's error code (`not_in_channel`, `ratelimited`), or `HTTP 503` when the answer was not
    JSON: a load balancer's or proxy's page in a Slack incident. `exc.response.get` raised
    AttributeError on such an answer (its data is the text), which dropped a question before the model
    was asked, and said "Something went wrong on my side" under an answer cut mid-stream."""
    data = exc.response.data
    if isinstance(data, dict) and data.get("error"):
        return str(data["error"])
    return f"HTTP {exc.response.status_code}"


def cannot_post_here(exc: BaseException) -> bool:
    """Slack refused because of where the message was to go, not what it said."""
    return isinstance(exc, SlackApiError) and slack_error(exc) in CANNOT_POST_HERE


def failure_words(exc: BaseException, *, for_people: bool = False) -> str:
    """A Slack call's failure in one line, for the log (Slack's error code, `not_in_channel`, not the
    SDK's two-line message with the URL and the whole response) or, `for_people`, in words."""
    if isinstance(exc, SlackCallFailed):
        return str(exc)
    if isinstance(exc, SlackApiError):
        code = slack_error(exc)
        return SAID_TO_PEOPLE.get(code, code) if for_people else code
    if isinstance(exc, OSError):  # its reason, never its file name (a host path of the workspace)
        return os_reason(exc) or type(exc).__name__
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def call_failure(exc: BaseException, base_url: str, what: str, waited_s: float) -> SlackCallFailed:
    """What went wrong with a call (`what`: the Web API method, or the upload), in words an operator
    can act on."""
    host = urlsplit(base_url).hostname or "?"
    if isinstance(exc, TimeoutError):  # asyncio's bound, or aiohttp's own read or connect timeout
        return SlackCallFailed(
            f"Slack at {host} did not answer {what} within {waited_s:g} s", unsure=sent(exc)
        )
    return SlackCallFailed(f"could not reach Slack at {host}: {os_reason(exc) or type(exc).__name__}")


# slack_sdk's one more try of a dropped connection (a stale keep-alive one) or a refused connect, but
# not of a read or connect that timed out (its default retries those too: ServerTimeoutError is a
# ServerConnectionError): Slack may have taken that call, and a message would be posted twice.
NOT_TIMEOUTS = [aiohttp.ServerDisconnectedError, aiohttp.ClientOSError]


# When the call running in this task must be done (the event loop's clock): `BoundedWebClient.api_call`
# sets it, `_RateLimitRetry` reads it. Context-local: each task (turn) sees its own call's.
_CALL_DEADLINE: contextvars.ContextVar[float] = contextvars.ContextVar(
    "slack_call_deadline", default=math.inf
)


class _RateLimitRetry(AsyncRateLimitErrorRetryHandler):
    """A 429 is tried again after its Retry-After when that is short and the wait (and the SDK's up to
    a second of jitter) still fits in the call's bound: a longer wait would only run into the bound,
    and the refusal (`ratelimited`) says more than a timeout would. Bounded by time, not by a count of
    two: in a busy workspace two tries a second apart were not enough for the answer's own calls."""

    async def _can_retry_async(self, *, state, request, response=None, error=None) -> bool:
        if response is None or response.status_code != 429:
            return False
        said = next((v for k, v in response.headers.items() if k.lower() == "retry-after"), ["1"])
        try:
            wait = float(said[0])
        except (TypeError, ValueError, IndexError):
            return False
        fits = asyncio.get_running_loop().time() + wait + 1.0 < _CALL_DEADLINE.get()
        return wait <= RETRY_AFTER_MAX_S and fits


def retry_after_s(exc: BaseException) -> float | None:
    """The seconds a `ratelimited` refusal (HTTP 429) says to wait (1 when it does not say), or None
    for any other failure."""
    if not isinstance(exc, SlackApiError) or slack_error(exc) not in ("ratelimited", "HTTP 429"):
        return None
    headers = exc.response.headers or {}
    said = next((v for k, v in headers.items() if k.lower() == "retry-after"), "1")
    try:
        return max(0.0, float(said[0] if isinstance(said, list) else said))
    except (TypeError, ValueError, IndexError):
        return 1.0


class BoundedWebClient(AsyncWebClient):
    """slack_sdk's client whose `timeout` bounds each whole call on any session (see the module's
    docstring); a failure without Slack's answer raises `SlackCallFailed`. Every Web API method goes
    through `api_call`; `files_upload_v2` makes three calls, the middle one the file's bytes.
    `pacer`: how this process's streams share each workspace's append limit (bot/slack_pacing.py)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pacer = WorkspacePacer()

    async def api_call(self, api_method: str, **kwargs) -> AsyncSlackResponse:
        bound = asyncio.timeout(self.timeout)
        deadline = _CALL_DEADLINE.set(asyncio.get_running_loop().time() + self.timeout)
        try:
            async with bound:
                return await super().api_call(api_method, **kwargs)
        except (aiohttp.ClientError, OSError) as exc:  # TimeoutError is an OSError
            waited = self.timeout if bound.expired() else aiohttp_bound(exc, self.session, self.timeout)
            raise call_failure(exc, self.base_url, api_method, waited) from None
        finally:
            _CALL_DEADLINE.reset(deadline)

    async def files_upload_v2(self, **kwargs) -> AsyncSlackResponse:
        """Bounded by its three calls and its size (at UPLOAD_MIN_BYTES_PER_S)."""
        data = kwargs.get("file") if isinstance(kwargs.get("file"), bytes) else kwargs.get("content") or ""
        seconds = 3 * self.timeout + len(data) / UPLOAD_MIN_BYTES_PER_S
        bound = asyncio.timeout(seconds)
        try:
            async with bound:
                return await super().files_upload_v2(**kwargs)
        except (aiohttp.ClientError, OSError) as exc:
            waited = seconds if bound.expired() else aiohttp_bound(exc, self.session, self.timeout)
            raise call_failure(exc, self.base_url, "a file's upload", round(waited, 1)) from None


def sent(timeout: TimeoutError) -> bool:
    """Whether a request that timed out was sent (Slack may have taken it): all but a connect that
    timed out."""
    return not isinstance(timeout, aiohttp.ConnectionTimeoutError)


def aiohttp_bound(exc: BaseException, session: aiohttp.ClientSession | None, total: float) -> float:
    """The bound of aiohttp's own that gave up inside a call's: the session's connect or read timeout
    (a session slack_sdk makes for one call has `total` in all). A file's upload said "did not answer
    within 30 s" (its whole bound) where the shared session's 10 s read timeout had fired."""
    t = session.timeout if session is not None else aiohttp.ClientTimeout(total=total)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return t.sock_connect or t.connect or t.total or total
    return t.sock_read or t.total or total


def quick(client: AsyncWebClient) -> AsyncWebClient:
    """The same client (token, session) for decoration: its calls wait at most PROGRESS_TIMEOUT_S."""
    bounded = copy.copy(client)
    bounded.timeout = min(client.timeout, PROGRESS_TIMEOUT_S)
    return bounded


def unretried(client: AsyncWebClient) -> AsyncWebClient:
    """The same client whose 429s come back at once, for a caller that waits them out its own way
    (a stream's text, kept and sent whole once the workspace's hold ends: bot/slack_pacing.py)."""
    plain = copy.copy(client)
    plain.retry_handlers = [h for h in client.retry_handlers if not isinstance(h, _RateLimitRetry)]
    return plain


def pacer_of(client: AsyncWebClient) -> WorkspacePacer:
    """The process's pacer, on its client; a client of another kind (a test's) gets one of its own."""
    pacer = getattr(client, "pacer", None)
    return pacer if isinstance(pacer, WorkspacePacer) else WorkspacePacer()


def build_client(settings: Settings, session: aiohttp.ClientSession | None = None) -> AsyncWebClient:
    """The Web API client: the bot token, `DATATHREAD_SLACK_API_URL`, every call bounded by
    SEND_TIMEOUT_S, one retry of a dropped connection, retries on HTTP 429 with a short Retry-After
    while they fit in that bound."""
    token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None
    return BoundedWebClient(
        token=token,
        base_url=settings.slack_api_url,
        session=session,
        logger=SDK_LOG,
        timeout=SEND_TIMEOUT_S,  # type: ignore[arg-type]  # slack_sdk says int; a float works
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(error_types=NOT_TIMEOUTS),
            _RateLimitRetry(max_retry_count=RATE_LIMIT_RETRIES),
        ],
    )


def bounded_session() -> aiohttp.ClientSession:
    """The shared session: its connect and read timeouts bound what `BoundedWebClient` does not
    wrap (a response_url's POST has its own bound too); no total, so a large upload is not cut."""
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=SEND_TIMEOUT_S)
    )


class SharedClient:
    """This process's one client. One aiohttp session keeps connections alive across calls and turns;
    without it slack_sdk opens a new session (and TCP connection) for every single API call."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._client: AsyncWebClient | None = None

    def get(self) -> AsyncWebClient:
        client = self._client
        if client is None or client.session is None or client.session.closed:
            client = self._client = build_client(self.settings, bounded_session())
        return client

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and client.session is not None:
            await client.session.close()


async def answer_via_response_url(client: AsyncWebClient, url: str, *, what: str, **body) -> Posted:
    """POST `body` to a slash command's response_url; true (`Posted.TAKEN`) when Slack took it
    (https://docs.slack.dev/interactivity/handling-user-interaction#message_responses). Otherwise the
    person heard nothing, which only this log line can tell whoever runs datathread: `what` was lost,
    and why (the HTTP status, the network failure, the timeout). The URL stays out of the log: for
    half an hour it lets anyone post to that person."""
    hook = AsyncWebhookClient(url, session=client.session)
    host = urlsplit(url).hostname or "?"
    try:
        async with asyncio.timeout(RESPONSE_URL_TIMEOUT_S):
            resp = await hook.send(**body)
    except TimeoutError as exc:
        why = f"{host} did not answer within {RESPONSE_URL_TIMEOUT_S:g} s"
        posted = Posted.UNSURE if sent(exc) else Posted.REFUSED
    except (aiohttp.ClientError, OSError) as exc:
        why, posted = f"{host} could not be reached ({os_reason(exc) or type(exc).__name__})", Posted.REFUSED
    else:
        if 200 <= resp.status_code < 300:
            return Posted.TAKEN
        said = ((resp.body or "").strip().splitlines() or [""])[0][:100]
        why, posted = f"{host} answered HTTP {resp.status_code} {said}".rstrip(), Posted.REFUSED
    log.warning("%s did not reach the person through the command's response_url: %s", what, why)
    return posted
