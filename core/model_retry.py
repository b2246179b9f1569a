"""A retry that cannot finish in time is not waited for: the SDK sleeps out a `Retry-After` before it
retries a 429, 529 or 5xx, even when that sleep outlasts the call's deadline (DATATHREAD_MODEL_TIMEOUT).
A 429 asking for 45 s then held the turn 30 s and ended as "Claude did not start answering", with a
hint to check the key. This middleware (the SDK's own hook, run once per HTTP attempt inside its retry
loop) stops the call at once with `RetryLater`, which says when to try again.
"""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import math
import time
from collections.abc import Mapping
from typing import Any

import anthropic

# When the model call under way must have its reply (the event loop's clock), set by core/model.py
# around each call; None: no deadline.
DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("model_deadline", default=None)

RATE_LIMITED, OVERLOADED = 429, 529


class RetryLater(anthropic.AnthropicError):
    """The API refused the call for now (`status`) and asked to be tried again in `seconds`, longer
    than the call's deadline has left: no retry could answer in time."""

    def __init__(self, status: int, seconds: float):
        super().__init__(f"HTTP {status}, retry after {seconds:g} s")
        self.status, self.seconds = status, seconds


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds a response asks to wait before a retry (`retry-after-ms`, or `retry-after` as seconds or
    an HTTP date, as the SDK reads them), or None."""
    try:
        return float(headers.get("retry-after-ms", "")) / 1000
    except ValueError:
        pass
    return retry_after_value_s(headers.get("retry-after") or "")


def retry_after_value_s(value: str) -> float | None:
    """A `Retry-After` header's value in seconds from now: delay-seconds or an HTTP date (RFC 9110
    §10.2.3; a date already past is negative), None when it is neither. bot/teams_connector.py reads
    the Bot Connector's with it too."""
    try:
        return float(value)
    except ValueError:
        when = email.utils.parsedate_tz(value)
        return float(email.utils.mktime_tz(when) - time.time()) if when else None


def retryable(status: int) -> bool:
    """The statuses the SDK retries (408, 409, 429, 5xx)."""
    return status in (408, 409, RATE_LIMITED) or status >= 500


async def no_wait_past_deadline(request: Any, call_next: Any) -> Any:
    """Middleware: an attempt answered with a retryable status whose `Retry-After` is longer than the
    deadline has left raises `RetryLater` instead of letting the SDK sleep into the deadline."""
    response = await call_next(request)
    ends = DEADLINE.get()
    if ends is None or response.status_code < 400 or not retryable(response.status_code):
        return response
    wait = retry_after_s(response.headers)
    if wait is not None and wait > ends - asyncio.get_running_loop().time():
        await response.http_response.aclose()
        raise RetryLater(response.status_code, wait)
    return response


def wait_words(seconds: float) -> str:
    """'in 45 s', 'in 3 min': when to try again, rounded up."""
    if seconds < 100:
        return f"in {max(1, math.ceil(seconds))} s"
    return f"in {math.ceil(seconds / 60)} min"
