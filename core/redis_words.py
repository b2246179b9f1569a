"""How a Redis is named and how its failures are said: `host:port` (never the password in the URL),
and one sentence per kind of failure, for the session store, the job queue and `doctor` alike."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from redis.exceptions import AuthenticationError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.wording import os_reason

PING_DEADLINE_S = 3.0  # for the start-up and health pings: long enough for a cold cross-region link


def redis_where(url: str) -> str:
    """`host:port` of a Redis URL (the socket's path for `unix://`), for messages: never its password."""
    parts = urlsplit(url)
    if parts.scheme == "unix":  # doctor said "localhost:6379" for a Unix socket
        return parts.path
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"


def redis_failure(url: str, exc: BaseException | None) -> str:
    """The sentence for a Redis at `url` that failed with `exc` (None: the ping deadline passed). A
    password problem is said as one ("not reachable: HELLO must be called…" sent people to the network),
    never with the password; a `rediss://` that gets no answer is most often TLS against a plain server."""
    where, parts = redis_where(url), urlsplit(url)
    if isinstance(exc, AuthenticationError):
        if parts.password or parse_qs(parts.query).get("password"):
            return f"Redis at {where} refused the password in REDIS_URL."
        example = (
            f"unix://{where}?password=PASSWORD"
            if parts.scheme == "unix"
            else f"{parts.scheme}://:PASSWORD@{where}/0"
        )
        return f"Redis at {where} needs a password: put it in REDIS_URL ({example})."
    silent = exc is None or isinstance(exc, (TimeoutError, RedisTimeoutError))
    reason = f"it did not answer within {PING_DEADLINE_S:g} s" if exc is None else redis_reason(exc)
    return f"Redis at {where} is not reachable: {reason}{tls_hint(url) if silent else ''}."


def tls_hint(url: str) -> str:
    """For a `rediss://` Redis that never answered: TLS to a plain server waits out any deadline."""
    if urlsplit(url).scheme != "rediss":
        return ""
    return " (REDIS_URL says rediss://, TLS: if that server does not speak TLS, use redis://)"


def redis_reason(exc: BaseException) -> str:
    """A few words on why Redis failed, without redis-py's multi-sentence connection text."""
    if isinstance(exc, AuthenticationError):  # its text is the server's, about HELLO and AUTH
        return "it wants a password that REDIS_URL does not give, or refused the one it gives"
    if isinstance(exc, (TimeoutError, RedisTimeoutError)):
        return "it did not answer in time"
    if reason := os_reason(exc):
        return reason
    first = str(exc).split(". ")[0].split("\n")[0].strip().rstrip(".")
    return first or type(exc).__name__
