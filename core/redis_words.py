"""How a Redis is named and how its failures are said: `host:port` (never the password in the URL),
and one sentence per kind of failure, for the session store, the job queue and `doctor` alike."""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

from redis.exceptions import AuthenticationError, BusyLoadingError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.wording import os_reason

PING_DEADLINE_S = 3.0  # for the start-up and health pings: long enough for a cold cross-region link


def redis_where(url: str) -> str:
    """`host:port` of a Redis URL (the socket's path for `unix://`), for messages: never its password."""
    parts = urlsplit(url)
    if parts.scheme == "unix":  # doctor said "localhost:6379" for a Unix socket
        return parts.path
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"


def redis_address(url: str) -> str:
    """`host:port/db` of a Redis URL (`/path?db=N` for a socket): where sessions live, for sentences that
    name it, never with its password. Two tenants of one Redis differ only by the number."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"{parts.path}?db={redis_database(url)}"
    return f"{redis_where(url)}/{redis_database(url)}"


def redis_database(url: str) -> int:
    """The database number a (checked) REDIS_URL selects: `?db=`, else the path's, else 0."""
    parts = urlsplit(url)
    if given := parse_qs(parts.query).get("db"):
        return int(given[0])
    path = unquote(parts.path).strip("/") if parts.scheme != "unix" else ""
    return int(path) if path else 0


def is_missing_database(exc: BaseException) -> bool:
    """Redis refused to SELECT the URL's database: past its `databases` setting, or past any int."""
    text = str(exc).lower()
    return isinstance(exc, ResponseError) and (
        "db index is out of range" in text or "value is out of range" in text
    )


def missing_database(url: str, databases: int | None) -> str:
    """The sentence for a database the Redis does not have (`databases`: how many it has, when known). It
    read "Redis at … is not reachable: DB index is out of range.": Redis answered; the number is wrong."""
    allows = f" (its `databases` setting allows 0–{databases - 1})" if databases else ""
    where = (
        "?db= in REDIS_URL"
        if parse_qs(urlsplit(url).query).get("db")
        else "the number at the end of REDIS_URL"
    )
    return f"Redis at {redis_where(url)} has no database {redis_database(url)}{allows}: change {where}."


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
    if exc is not None and is_missing_database(exc):
        return missing_database(url, None)
    silent = exc is None or isinstance(exc, (TimeoutError, RedisTimeoutError))
    reason = f"it did not answer within {PING_DEADLINE_S:g} s" if exc is None else redis_reason(exc)
    return f"Redis at {where} is not reachable: {reason}{tls_hint(url) if silent else ''}."


def unanswered(exc: BaseException) -> bool:
    """Whether a command that failed with `exc` may still be applied: it may have reached Redis and
    its answer never came (a read that timed out, a connection dropped mid-reply). Not when Redis was
    never reached (refused, the connect timed out) or answered with an error: then nothing changed."""
    if isinstance(exc, RedisTimeoutError):
        return "connecting" not in str(exc).lower()  # "Timeout connecting to server": never sent
    if isinstance(exc, AuthenticationError | BusyLoadingError):  # refused before any command ran
        return False
    if isinstance(exc, RedisConnectionError):  # redis-py's "Error 111 connecting to host:port. …"
        return not any(never in str(exc) for never in (" connecting to ", "No connection available"))
    return False


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
    if "Protocol Error" in str(exc):  # "Protocol Error: b'HTTP/1.1 200 OK'": another service is there
        return "what answers there does not speak Redis (a web server, perhaps): check the host and port"
    first = str(exc).split(". ")[0].split("\n")[0].strip().rstrip(".")
    return first or type(exc).__name__
