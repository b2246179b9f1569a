"""The model behind one small interface: `stream(on_text, **params) -> Message`, on the anthropic SDK.

The tool loop streams every call (Messages API server-sent events through the SDK's `messages.stream`):
text deltas go to `on_text` as they arrive, tool-use blocks only inside the assembled `Message`, which
is exactly what a non-streaming `create` returns. A stream that breaks after it started (a dropped
connection, an `error` event, no `message_stop`) raises `StreamInterrupted`.

Anthropic, Bedrock and Vertex clients of the same SDK are chosen by settings; retries on 429/5xx/
overloaded are the SDK's own (`max_retries`), all inside one deadline (DATATHREAD_MODEL_TIMEOUT): an
endpoint that accepts connections and never answers fails the call in that time, not after
timeout × attempts. Tests point the real SDK at a scripted HTTP fake.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anthropic

from core.config import ConfigError, Settings, require_model
from core.events import ModelFault
from core.model_retry import (
    DEADLINE,
    RetryLater,
    no_wait_past_deadline,
    retry_after_s,
    retryable,
    wait_words,
)
from core.wording import os_reason

TextSink = Callable[[str], Awaitable[None]]


class StreamInterrupted(anthropic.AnthropicError):
    """The model's streamed reply broke off before it was complete; nothing of it is usable."""


# What a streamed reply comes as: server-sent events (the API, Vertex), AWS event streams (Bedrock).
STREAM_TYPES = ("text/event-stream", "application/vnd.amazon.eventstream")


class NotAReply(StreamInterrupted):
    """The endpoint answered 200, but not with a Claude stream (a proxy's or a web server's page): the
    address is wrong, not the connection, and every later call will get the same."""


class ReplyStalled(StreamInterrupted):
    """The reply started and then nothing came for `seconds` (a gateway's keep-alive pings only), or it
    went on past the most one reply may take: the turn ends instead of waiting for ever."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


# Once a reply streams, Claude's output comes token by token: a pause longer than the call's timeout
# (DATATHREAD_MODEL_TIMEOUT, "each pause between chunks") means the reply stopped. Progress is content:
# a block starting, a delta (text, thinking, a tool's input, a signature), a block ending, the message's
# end; a keep-alive `ping` (the SDK drops it), `message_start` or an event the API does not define is no
# progress, so a gateway pinging a dead reply is heard within the timeout, not the 273 s it took.
PROGRESS = frozenset(
    ("content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop")
)
# Two blocks are silent by design until they are done: a thought whose text is omitted (Sonnet 5's
# default: only its signature comes, at its end), and a tool's input, which the API sends one whole key
# at a time (a long `code` is one key). Inside them a pause may last as long as the reply's max_tokens
# take at the slowest rate a model streams; a whole reply may take that plus the timeout.
SILENT_BLOCKS = frozenset(("thinking", "tool_use"))
SLOWEST_TOKENS_PER_S = 15.0
QUIET_S = 30.0  # the pause bound when no call timeout is configured (the SDK's own deadline)


class ModelDeadline(anthropic.AnthropicError):
    """Claude did not start answering within the call's deadline (retries included)."""

    def __init__(self, seconds: float):
        super().__init__(f"no reply within {seconds:g} s")
        self.seconds = seconds


class ModelClient(Protocol):
    """The calls the tool loop makes."""

    async def create(self, **params: Any) -> Any:
        """One Messages API request; returns the SDK's `Message`."""

    async def stream(self, on_text: TextSink, **params: Any) -> Any:
        """One streamed Messages API request: text deltas to `on_text` in order; returns the `Message`."""

    async def close(self) -> None:
        """Release the HTTP client."""


class NoModel:
    """The ModelClient where none is configured and only answers that need no model are asked for
    (`datathread ask help` without a key, as `help` is answered in chat): a call would be a bug, and
    fails with the sentence saying what to set rather than inside the SDK."""

    def __init__(self, reason: str):
        self.reason = reason

    async def create(self, **params: Any) -> Any:
        raise ConfigError(self.reason)

    async def stream(self, on_text: TextSink, **params: Any) -> Any:
        raise ConfigError(self.reason)

    async def close(self) -> None:
        return None


class AnthropicModel:
    """ModelClient over an `AsyncAnthropic`-shaped client (Anthropic, Bedrock or Vertex)."""

    def __init__(
        self,
        client: Any,
        *,
        deadline_s: float | None = None,
        quiet_s: float | None = None,
        max_reply_s: float | None = None,
    ):
        self.client = client
        self.deadline_s = deadline_s  # until the reply starts, retries included; None = the SDK's own
        # Once it streams (ReplyStalled): the longest pause between two events that are progress (the
        # call's timeout), and the longest one reply may take (None: from its max_tokens).
        self.quiet_s = quiet_s if quiet_s is not None else (deadline_s or QUIET_S)
        self.max_reply_s = max_reply_s

    async def _within_deadline(self, pending: Awaitable[Any]) -> Any:
        ends = None if self.deadline_s is None else asyncio.get_running_loop().time() + self.deadline_s
        told = DEADLINE.set(ends)  # a Retry-After past it ends the call at once (core/model_retry.py)
        try:
            async with asyncio.timeout_at(ends):
                return await pending
        except TimeoutError:
            raise ModelDeadline(self.deadline_s or 0) from None
        finally:
            DEADLINE.reset(told)

    async def create(self, **params: Any) -> Any:
        return await self._within_deadline(self.client.messages.create(**params))

    async def stream(self, on_text: TextSink, **params: Any) -> Any:
        # The SDK retries the request itself (429/5xx before the first byte); once events flow, a break
        # cannot be retried without repeating text people already saw, so it ends the call.
        message = None
        async with contextlib.AsyncExitStack() as opened:
            # The deadline covers the request and its retries up to the first byte; once events flow,
            # each read waits at most the SDK's per-attempt timeout.
            stream = await self._within_deadline(
                opened.enter_async_context(self.client.messages.stream(**params))
            )
            kind = stream.response.headers.get("content-type", "").strip().lower()
            if kind and not kind.startswith(STREAM_TYPES):  # none at all: the stream's parse decides
                raise NotAReply(f"the endpoint answered with {kind}, not a Claude stream")
            try:
                message = await self._read(stream, on_text, params)
                if message is None or message.stop_reason is None:
                    raise StreamInterrupted("the reply stream ended before the message was complete")
            except BaseException as exc:  # begun, then broken or stopped: its input was billed all the same
                exc.partial = _snapshot(stream)  # type: ignore[attr-defined]  # counted by core/agent.py
                raise
        return message

    async def _read(self, stream: Any, on_text: TextSink, params: dict) -> Any:
        """The stream's events until its end: text to `on_text`; the final message, if it came."""
        message = None
        events = aiter(stream)
        clock = asyncio.get_running_loop().time
        slowest_s = float(params.get("max_tokens") or 0) / SLOWEST_TOKENS_PER_S
        reply_s = self.max_reply_s if self.max_reply_s is not None else slowest_s + self.quiet_s
        heard = clock()
        ends = heard + reply_s
        silent_block = False  # inside a thought or a tool's input, which come whole when done
        while True:
            pause_s = max(self.quiet_s, slowest_s) if silent_block else self.quiet_s
            over = heard + pause_s >= ends  # what runs out first: this pause, or the whole reply
            try:
                async with asyncio.timeout(max(min(heard + pause_s, ends) - clock(), 0)):
                    event = await anext(events)
            except StopAsyncIteration:
                break
            except TimeoutError:
                limit = round(reply_s if over else pause_s, 1)
                why = f"went on past {limit:g} s" if over else f"stopped for {limit:g} s"
                raise ReplyStalled(why) from None
            except anthropic.APIStatusError:
                raise  # an `error` event (overloaded mid-stream): described like any status error
            except Exception as exc:  # reading the stream failed (only SDK code runs in this `try`)
                raise StreamInterrupted(f"the reply stream broke: {type(exc).__name__}") from exc
            if event.type in PROGRESS:
                heard = clock()
            if event.type == "content_block_start":
                silent_block = event.content_block.type in SILENT_BLOCKS
            elif event.type == "content_block_stop":
                silent_block = False
            elif event.type == "text":
                await on_text(event.text)
            elif event.type == "message_stop":
                message = event.message
        return message

    async def close(self) -> None:
        await self.client.close()


def _snapshot(stream: Any) -> Any:
    """The message so far of a stream that began (its usage: the input tokens billed), or None."""
    try:
        return stream.current_message_snapshot
    except Exception:  # no message_start yet: nothing was billed
        return None


def build_model(settings: Settings) -> AnthropicModel:
    """The client the settings select; raises ConfigError in one sentence when none is configured."""
    require_model(settings)
    return AnthropicModel(_sdk_client(settings), deadline_s=settings.model_timeout)


def _sdk_client(settings: Settings) -> Any:
    common = {
        "max_retries": settings.model_retries,
        "timeout": settings.model_timeout,
        "middleware": [no_wait_past_deadline],
    }
    if settings.model_provider == "bedrock":
        return anthropic.AsyncAnthropicBedrock(aws_region=settings.aws_region, **common)
    if settings.model_provider == "vertex":
        return anthropic.AsyncAnthropicVertex(
            project_id=settings.vertex_project, region=settings.vertex_region, **common
        )
    assert settings.anthropic_api_key is not None
    return anthropic.AsyncAnthropic(
        api_key=settings.anthropic_api_key.get_secret_value(),
        base_url=settings.anthropic_base_url,
        **common,
    )


# The API's error classes, most specific first (OverloadedError is an InternalServerError, and so on):
# the sentence people read, and the set-up fault it means (None: the next call may well succeed).
STATUS_ERRORS: tuple[tuple[type[anthropic.APIStatusError], str, ModelFault | None], ...] = (
    (
        anthropic.AuthenticationError,
        "The Claude API key was rejected. An admin needs to check ANTHROPIC_API_KEY.",
        ModelFault.KEY_REJECTED,
    ),
    (
        anthropic.PermissionDeniedError,
        "This Claude API key may not use the configured model. An admin needs to check DATATHREAD_MODEL "
        "and the key's permissions.",
        ModelFault.MODEL_DENIED,
    ),
    (
        anthropic.NotFoundError,
        "The configured Claude model was not found. An admin needs to check DATATHREAD_MODEL.",
        ModelFault.MODEL_NOT_FOUND,
    ),
    (anthropic.ContentTooLargeError, "This conversation is too long for Claude. Start a new thread.", None),
    (anthropic.RateLimitError, "Claude is rate-limited right now. Please try again in a minute.", None),
    (anthropic.OverloadedError, "Claude is overloaded right now. Please try again in a minute.", None),
    (  # 503: not a fault inside the API (500) but Claude, or a gateway before it, turning calls away
        anthropic.ServiceUnavailableError,
        "Claude is overloaded or unavailable right now. Please try again in a minute.",
        None,
    ),
    (anthropic.InternalServerError, "The Claude API had an internal error. Please try again shortly.", None),
)


def describe_model_error(exc: Exception, surface: str = "") -> str:
    """A short sentence for people about a model API failure (after the SDK's own retries). In the
    terminal whoever reads it runs the bot, and has sessions, not threads: "An admin needs to check
    ANTHROPIC_API_KEY" and "Start a new thread" were addressed to someone else, about something else."""
    said = _model_error_words(exc)
    if surface == "terminal":
        said = said.replace("An admin needs to check ", "Check ").replace(
            "Start a new thread.", "Start a new session: datathread chat, without --session."
        )
    return said


def _model_error_words(exc: Exception) -> str:
    if isinstance(exc, NotAReply):
        return (
            "The Claude API's address answered with something that is not a Claude reply (a proxy or web "
            "page, perhaps). An admin needs to check where the model is reached (ANTHROPIC_BASE_URL)."
        )
    if isinstance(exc, ReplyStalled):
        return f"Claude's reply {exc.why} without finishing, so I stopped waiting. Please ask again."
    if isinstance(exc, StreamInterrupted):
        return "Claude's reply broke off mid-way (the connection dropped). Please ask again."
    if isinstance(exc, RetryLater):
        return _retry_later(exc.status, exc.seconds)
    if isinstance(exc, ModelDeadline):
        return f"Claude did not start answering within {exc.seconds:g} s. Please try again."
    if isinstance(exc, anthropic.APITimeoutError):
        return "Claude took too long to answer. Please try again."
    if isinstance(exc, anthropic.APIConnectionError):  # with the network's reason: a DNS failure, a refusal
        reason = os_reason(exc)
        return (
            f"I could not reach the Claude API{f' ({reason})' if reason else ''}. Please try again shortly."
        )
    if isinstance(exc, anthropic.APIStatusError) and _is_web_page(exc):  # not the API's own error (JSON)
        return (
            f"The Claude API's address answered HTTP {exc.status_code} with a web page, not a Claude reply: a "
            "proxy or gateway on the way, or Claude having trouble. Please try again shortly; if it lasts, "
            "`datathread doctor` checks ANTHROPIC_BASE_URL."
        )
    if isinstance(exc, anthropic.BadRequestError):
        return _bad_request(api_error_message(exc))
    if said := _when_to_retry(exc):  # its retries spent, the API still says when to try again
        return said
    for kind, sentence, _ in STATUS_ERRORS:  # by class, or by status (an error made without the SDK's map)
        if isinstance(exc, kind) or (_status(exc) or -1) == getattr(kind, "status_code", None):
            return sentence
    if isinstance(exc, anthropic.APIStatusError):
        return f"The Claude API failed (HTTP {exc.status_code}). Please try again shortly."
    return "Something went wrong while talking to Claude."


def _when_to_retry(exc: Exception) -> str:
    """The sentence for a retryable status error that says when to try again, or ''."""
    if not isinstance(exc, anthropic.APIStatusError) or not retryable(exc.status_code):
        return ""
    wait = retry_after_s(exc.response.headers) or 0
    return _retry_later(exc.status_code, wait) if wait > 0 else ""


def _retry_later(status: int, seconds: float) -> str:
    """The status's sentence, with when the API asked to be tried again."""
    said = next((s for k, s, _ in STATUS_ERRORS if getattr(k, "status_code", None) == status), None)
    if said is None:  # any other 5xx: the API's own error
        said = STATUS_ERRORS[-1][1] if status >= 500 else f"The Claude API failed (HTTP {status})."
    return f"{said.split(' Please try again')[0]} Please try again {wait_words(seconds)}."


def _is_web_page(exc: anthropic.APIStatusError) -> bool:
    response = getattr(exc, "response", None)
    kind = response.headers.get("content-type", "") if response is not None else ""
    return kind.strip().lower().startswith("text/html")


def model_fault(exc: Exception) -> ModelFault | None:
    """The set-up fault behind a model API failure (after the SDK's retries), or None when the next
    call may well succeed: a rate limit, an overload, a dropped stream, a request this one conversation
    made invalid. Typed, so callers that batch turns need not match `describe_model_error`'s text."""
    if isinstance(exc, ModelDeadline | anthropic.APITimeoutError):  # the timeout is a connection error
        return ModelFault.NO_REPLY
    if isinstance(exc, NotAReply):
        return ModelFault.NOT_CLAUDE
    if isinstance(exc, anthropic.APIConnectionError):
        return ModelFault.UNREACHABLE
    if isinstance(exc, anthropic.BadRequestError):
        return ModelFault.NO_CREDIT if _out_of_credit(api_error_message(exc)) else None
    return next((fault for kind, _, fault in STATUS_ERRORS if isinstance(exc, kind)), None)


def _status(exc: Exception) -> int | None:
    return getattr(exc, "status_code", None)


def _bad_request(detail: str) -> str:
    lowered = detail.lower()
    if "too long" in lowered or "context window" in lowered or "too many tokens" in lowered:
        return "This conversation is too long for Claude. Start a new thread."
    if _out_of_credit(detail):
        return "The Claude API account is out of credit. An admin needs to check its billing."
    return f"The Claude API rejected the request as invalid ({detail[:160] or 'no detail'})."


def _out_of_credit(detail: str) -> bool:
    lowered = detail.lower()
    return "credit balance" in lowered or "billing" in lowered


def api_error_message(exc: anthropic.APIStatusError) -> str:
    """The API's own error message (`{"error": {"message": …}}`), or ''."""
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else body
    return str(error.get("message") or "").strip()
