"""Every call to the Bot Connector (an activity's `serviceUrl`: where replies, edits, typing and
proactive messages go) bounded in time, and a failed one turned into one line for the log.

Why: botframework-connector's client is msrest over `requests`, run in the event loop's default thread
pool. msrest waits 100 s for an answer (`ClientConnection.timeout`), and the urllib3 retries it sets up
repeat a PUT (a progress-card edit) three more times after that, and sleep whatever `Retry-After` a 429
or 503 names, without a cap. Measured with a serviceUrl that took the connection and never answered:
a question's typing indicator held its turn 100 s and then killed it (one traceback, no conversation);
a silent final send held the session lock 100 s, so the thread's next question waited as long; a
silent progress edit took 400 s; and a thread stuck in such a call holds the process's exit, since
`asyncio.run` waits for the default thread pool.

So every connector client the adapter makes gets msrest's own knobs (`BoundedAuthentication`): a
connect and read timeout (`config.connection.timeout`, handed to `requests`) and no transport retries
(`config.retry_policy`). Callers pass a shorter timeout per call for progress, and decide themselves
what is worth a second try (`call`): a message refused with 412/429/502/503/504 — Teams' transient
codes, https://learn.microsoft.com/microsoftteams/platform/bots/how-to/rate-limit — once more, after
its `Retry-After` when that is short (5 s; the answer itself 30 s: without it the person has
nothing); never a call that timed out, or whose connection closed before a status came back (Teams
may have posted it).

A refusal must keep its status to be retried, and msrest loses it twice over: it parses an error's
body by its content type before the operation looks at the status, so a gateway's 503 page (text/html,
text/plain, or no type and not JSON) raised DeserializationError; and a body cut short (a partial
response) raised ChunkedEncodingError. Either way no status, no retry: the trial's single 503 cost the
answer. `keep_status`, a `requests` response hook, reads an error's body before msrest does and keeps
it only when it is the Bot Connector's JSON.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import requests
from botframework.connector.auth import BotFrameworkAuthentication, ClaimsIdentity, ConnectorFactory
from msrest.exceptions import ClientRequestError, HttpOperationError
from urllib3.exceptions import ProtocolError

from core.model_retry import retry_after_value_s
from core.wording import os_reason

T = TypeVar("T")

# Module constants, read at each call: tests shorten them (there is no setting: the Bot Connector
# answers in well under a second, and these only decide how soon a silent one is given up on).
CONNECT_TIMEOUT_S = 5.0  # to open the connection
PROGRESS_TIMEOUT_S = 5.0  # typing, streaming and progress-card edits: decoration, the turn goes on
SEND_TIMEOUT_S = 10.0  # a message someone should read: the answer, a chart, a card, a reply
RETRY_AFTER_MAX_S = 5.0  # a refused message waits at most this long for its one retry
# The answer itself waits longer: without it the person has nothing, and Teams' throttling asks for
# seconds to tens of seconds (https://learn.microsoft.com/microsoftteams/platform/bots/how-to/rate-limit).
ANSWER_RETRY_AFTER_MAX_S = 30.0
TRANSIENT = frozenset({412, 429, 502, 503, 504})  # Teams says: retry these
# The Bot Connector's codes for "this bot cannot post in this conversation at all".
GONE_CODES = frozenset(
    {"BotNotInConversationRoster", "ConversationNotFound", "ConversationBlockedByUser", "BotDisabledByAdmin"}
)


class ConnectorFailed(Exception):
    """A Bot Connector call that failed: `why` is one line for the log (no URL, no token). A refusal
    keeps its HTTP `response`, as msrest's errors do: bot/schedule_teams.py reads its status (403 or
    404: the bot was removed, so the schedule pauses)."""

    def __init__(
        self,
        why: str,
        response: object = None,
        retry_after_s: float | None = None,
        *,
        silent: bool = False,
        unsure: bool = False,
    ):
        super().__init__(why)
        self.why, self.response, self.retry_after_s = why, response, retry_after_s
        self.status: int | None = getattr(response, "status_code", None)
        self.silent = silent  # no answer within the timeout: another call would wait as long
        # Sent, and no status came back (no answer in time, the connection closed, the answer cut
        # short): Teams may have posted it.
        self.unsure = unsure

    @property
    def transient(self) -> bool:
        """Refused without being posted, in a way Teams says to retry."""
        return self.status in TRANSIENT

    @property
    def gone(self) -> bool:
        """Refused because the bot cannot post in this conversation at all: removed from it, blocked,
        the conversation deleted (403/404 with one of GONE_CODES). Not any 403/404: a refused stream
        update is 403 too (ContentStream…), and an edit of a message someone deleted is 403/404 (the
        turn was stopped and its answer dropped in a conversation that still works)."""
        return self.status in (403, 404) and self.code in GONE_CODES

    @property
    def code(self) -> str:
        """The Bot Connector's error code from the refusal's body, "" without one."""
        try:
            error = self.response.json().get("error") or {}  # type: ignore[attr-defined]
        except Exception:  # no body, not JSON, not an object: no code
            return ""
        return str(error.get("code") or "") if isinstance(error, dict) else ""


def timeout(read_s: float) -> tuple[float, float]:
    """`requests`' (connect, read) timeout for a call that may wait `read_s` for its answer."""
    return (min(CONNECT_TIMEOUT_S, read_s), read_s)


def bound(client: object) -> object:
    """Set a new connector client's timeout and turn off its transport retries. Before its first call:
    msrest builds the `requests` session, with the retry policy, on the first request."""
    config = client.config  # type: ignore[attr-defined]
    config.connection.timeout = timeout(SEND_TIMEOUT_S)
    config.retry_policy.retries = 0  # msrest's setter: no connect or read retries
    retries = config.retry_policy.policy  # the urllib3 Retry that msrest hands to `requests`
    retries.read = False  # a timed-out read raises as itself (requests' ReadTimeout), not as exhausted
    retries.status_forcelist = None  # no repeat on a 5xx, and (total 0) no Retry-After sleep
    if keep_status not in config.hooks:  # msrest hands its hooks to `requests`
        config.hooks.append(keep_status)
    return client


def keep_status(response: requests.Response, *args: Any, **kwargs: Any) -> None:
    """`requests`' response hook, run when the status and headers are in and before the body is read:
    an error's body stays only when it is JSON (the Bot Connector's `{"error": {"code": …}}`); a page, a
    text or a body cut short becomes empty, which msrest reads as no detail. The status is what decides
    a retry, and msrest must not lose it to a body it cannot parse (see the module's docstring)."""
    if response.status_code < 400:
        return  # a success's body cut short raises as before: Teams has posted it, no retry
    received = response.raw
    body = b""
    try:
        body = received.read(decode_content=True) or b""
        json.loads(body or b"null")
    except Exception:  # cut short (urllib3's ProtocolError), or not JSON: no detail, the status stays
        body = b""
        received.close()
    finally:
        received.release_conn()  # back to the pool (a closed one is opened again on its next use)
    response.raw = io.BytesIO(body)  # what requests then reads as the body


class BoundedConnectors(ConnectorFactory):
    """The SDK's connector factory, each client it makes `bound`."""

    def __init__(self, inner: ConnectorFactory):
        self.inner = inner

    async def create(self, service_url: str, audience: str | None = None):
        return bound(await self.inner.create(service_url, audience))


class BoundedAuthentication(BotFrameworkAuthentication):
    """The SDK's authentication as the adapter uses it, except that connector clients are `bound`:
    proactive turns, `create_conversation` (scheduled runs) and replies alike."""

    def __init__(self, inner: BotFrameworkAuthentication):
        self.inner = inner

    async def authenticate_request(self, activity, auth_header: str):
        return await self.inner.authenticate_request(activity, auth_header)

    async def authenticate_streaming_request(self, auth_header: str, channel_id_header: str):
        return await self.inner.authenticate_streaming_request(auth_header, channel_id_header)

    def create_connector_factory(self, claims_identity: ClaimsIdentity) -> ConnectorFactory:
        return BoundedConnectors(self.inner.create_connector_factory(claims_identity))

    async def create_user_token_client(self, claims_identity: ClaimsIdentity):
        return await self.inner.create_user_token_client(claims_identity)


def failure(exc: BaseException, read_s: float, host: str = "") -> ConnectorFailed:
    """What went wrong with a call, in words an operator can act on (`host`: the serviceUrl's)."""
    if isinstance(exc, ConnectorFailed):  # said already: a sign-in before the call (bot/teams_login.py)
        return exc
    who = f"the Bot Connector at {host}" if host else "the Bot Connector"
    if isinstance(exc, HttpOperationError) and exc.response is not None:
        status = exc.response.status_code
        retry_after = _retry_after(exc.response.headers.get("Retry-After"))
        asked = f", asked to wait {retry_after:g} s" if retry_after is not None else ""
        return ConnectorFailed(f"{who} answered HTTP {status}{asked}", exc.response, retry_after)
    # msrest wraps what `requests` raised (ClientRequestError.inner_exception); its message says nothing
    inner = (getattr(exc, "inner_exception", None) if isinstance(exc, ClientRequestError) else None) or exc
    if isinstance(inner, requests.exceptions.ConnectTimeout):
        return ConnectorFailed(f"{who} could not be reached within {timeout(read_s)[0]:g} s", silent=True)
    if isinstance(inner, requests.exceptions.Timeout):
        return ConnectorFailed(f"{who} did not answer within {read_s:g} s", silent=True, unsure=True)
    if isinstance(inner, requests.exceptions.ChunkedEncodingError):  # a success's body, cut short
        return ConnectorFailed(f"{who} broke off its answer mid-way (a partial response)", unsure=True)
    if isinstance(inner, requests.exceptions.ConnectionError) and _dropped(inner):
        reason = os_reason(inner)  # reached, then the connection closed before a status came back
        return ConnectorFailed(
            f"{who} closed the connection without answering{f' ({reason})' if reason else ''}", unsure=True
        )
    if isinstance(inner, requests.exceptions.ConnectionError):
        return ConnectorFailed(f"{who} could not be reached ({os_reason(inner) or 'no connection'})")
    return ConnectorFailed(f"{who} call failed ({type(inner).__name__})")


def _dropped(exc: BaseException) -> bool:
    """A connection that was open and then closed or reset before the answer (urllib3's "Connection
    aborted."), rather than one that could not be opened."""
    seen, todo = set(), [exc]
    while todo:
        cause = todo.pop()
        if id(cause) in seen:
            continue
        seen.add(id(cause))
        if isinstance(cause, ProtocolError):
            return True
        todo += [c for c in (cause.__cause__, cause.__context__, *cause.args) if isinstance(c, BaseException)]
    return False


def _retry_after(value: str | None) -> float | None:
    """The wait a refusal's `Retry-After` asks for: seconds or an HTTP date (a date past is 0 s); a
    value that is neither is taken as "longer than we wait"."""
    if not value:
        return None
    seconds = retry_after_value_s(value)
    return float("inf") if seconds is None else max(0.0, seconds)


async def call(
    request: Callable[[tuple[float, float]], Awaitable[T]],
    *,
    read_s: float,
    retry: bool,
    host: str = "",
    answer: bool = False,
) -> T:
    """Run `request(timeout)`; raise `ConnectorFailed`. With `retry`, a transient refusal is tried once
    more, after its Retry-After (1 s without one) — unless that is longer than RETRY_AFTER_MAX_S, or
    for the `answer` itself ANSWER_RETRY_AFTER_MAX_S."""
    try:
        return await request(timeout(read_s))
    except Exception as exc:
        failed = failure(exc, read_s, host)
    wait = 1.0 if failed.retry_after_s is None else failed.retry_after_s
    patience = ANSWER_RETRY_AFTER_MAX_S if answer else RETRY_AFTER_MAX_S
    if not (retry and failed.transient and wait <= patience):
        raise failed
    await asyncio.sleep(wait)
    try:
        return await request(timeout(read_s))
    except Exception as exc:
        raise failure(exc, read_s, host) from None
