"""Words for people: counts ("1 row", "16 rows" — one helper, so no surface says "1 rows"), when a
daily budget resets, and the operating system's reason inside a library's exception ("connection
refused", not its class name or its multi-sentence text)."""

from __future__ import annotations

import errno
import os
import re
import unicodedata
from collections.abc import Iterator


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` (with thousands separators) and `noun`, plural unless `n` is exactly 1."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def cut_at_word(text: str, limit: int) -> str:
    """`text`, or its first words and "…" within `limit` characters: cut at the last space when one is
    near the end, where it is when the text ends in a long unbroken run (a URL, a hash)."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit * 0.8:
        cut = cut[:space]
    return cut.rstrip(" ,;:-") + "…"


def in_code_span(text: str, limit: int = 120) -> str:
    """A person's file name, or a parser's line about it, made fit for a Markdown code span in a note:
    one line, no control or format character, no backtick, at most `limit` characters."""
    kept = "".join(c for c in " ".join(text.split()) if not unicodedata.category(c).startswith("C"))
    kept = kept.replace("`", "'")
    return kept[:limit] + ("…" if len(kept) > limit else "")


def seconds_to_midnight_utc(now: float) -> float:
    """Seconds until the next 00:00 UTC, when daily budgets reset."""
    return 86400 - (now % 86400)


def daily_reset(now: float) -> str:
    """When a daily budget resets, for people: "at 00:00 UTC (in 3 hours)"."""
    left = seconds_to_midnight_utc(now)
    hours = left / 3600
    in_words = f"in {round(hours)} hours" if hours >= 1.5 else f"in {max(1, round(left / 60))} minutes"
    return f"at 00:00 UTC ({in_words})"


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


# A frame of a Python traceback ('  File "step.py", line 2, in <module>'; a SyntaxError's has no "in").
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')


def step_error(text: str) -> str:
    """A Python step's error as people read it: the exception after the traceback's last frame
    (`ZeroDivisionError: division by zero`, and any line the sandbox added after it). The traceback
    is for the model, which gets all of it; squeezed onto a task card's one line, its frames filled
    the space and the exception fell off the end. Any other error (a SQL step's: its first line says
    what is wrong, the lines after it list candidates) comes back as it is."""
    lines = (text or "").splitlines()
    frames = [n for n, line in enumerate(lines) if _FRAME.match(line)]
    if not frames:
        return text
    after = lines[frames[-1] + 1 :]
    while after and (not after[0].strip() or after[0][0].isspace()):  # the frame's code and ^^^ marks
        after.pop(0)
    return "\n".join(after) or text


def error_line(text: str, limit: int = 200) -> str:
    """The one line that says what went wrong in a step's error: the exception of a Python traceback
    (`step_error`), else the first line (a SQL error's; DuckDB's candidate names follow it). The audit's
    summary kept the last line ("Did you mean "pg_sequences"?"); the notebook's note the first of the
    model's view ("error:")."""
    text = text.strip()
    if text.startswith("stdout:") and "\nerror:\n" in text:  # a record made before records kept the error
        text = text.rsplit("\nerror:\n", 1)[1]
    lines = [x.strip() for x in step_error(text).splitlines()]
    lines = [x for x in lines if x and x != "error:" and not x.startswith("Traceback")]
    return (lines[0] if lines else "")[:limit]
