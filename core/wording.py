"""Words for people: counts ("1 row", "16 rows" — one helper, so no surface says "1 rows") and the
operating system's reason inside a library's exception ("connection refused", not its class name or
its multi-sentence text)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` (with thousands separators) and `noun`, plural unless `n` is exactly 1."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what it was raised from or during, and so on down the chain."""
    cause: BaseException | None = exc
    while cause is not None:
        yield cause
        cause = cause.__cause__ or cause.__context__


def os_words(exc: BaseException) -> str | None:
    """This exception's own operating-system reason in lower case ("connection refused"), or None."""
    if not isinstance(exc, OSError):
        return None
    known = isinstance(exc.errno, int) and exc.errno in errno.errorcode
    if not (known or exc.strerror):
        return None
    return (os.strerror(exc.errno) if known else str(exc.strerror)).lower()


def os_reason(exc: BaseException) -> str | None:
    """The first operating-system reason in `exc`'s chain ("name or service not known"), or None.
    Libraries wrap it: redis-py, aiohttp (the Slack and Teams SDKs), requests under google-auth."""
    return next((words for cause in causes(exc) if (words := os_words(cause))), None)


def embedded(sentence: str) -> str:
    """A sentence set inside another, in parentheses or after a colon, without its own full stop: "(Redis
    at … is not reachable: connection refused.), so this answer…" read as two sentences glued. An
    ellipsis or a question mark stays."""
    text = sentence.strip()
    return text[:-1] if text.endswith(".") and not text.endswith("..") else text
